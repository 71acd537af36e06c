/* The GPU backend from C with the CUDA runtime (RSHMEM_WITH_CUDA_RUNTIME, linked with cudart):
   device choice from the current context, the stream-ordered RMA, signal and collective calls
   on a program's stream, with symmetric and cudaMalloc'd local buffers. Needs a GPU per PE (or
   several PEs on one GPU under MPS); the C test harness builds it, a GPU machine runs it:
       rshmemrun -n 2 target/debug/rshmem-c-tests/stream_gpu */
#include <string.h>
#include "check.h"

#define CU(x) CHECK((x) == cudaSuccess)
#define OK(x) CHECK((x) == RSHMEM_SUCCESS)
#define N 1024

int main(void) {
    /* Make a context current before init: rshmem must take its device. */
    const char *lr = getenv("RSHMEM_LOCAL_RANK");
    int count = 0;
    CU(cudaGetDeviceCount(&count));
    CHECK(count > 0);
    int want = (lr ? atoi(lr) : 0) % count;
    CU(cudaSetDevice(want));
    CU(cudaFree(0));
    OK(rshmem_init());
    int me = rshmem_my_pe(), n = rshmem_n_pes();
    check_pe = me;
    int dev = -1;
    CU(cudaGetDevice(&dev));
    CHECK(dev == want);
    int right = (me + 1) % n, left = (me + n - 1) % n;

    cudaStream_t s;
    CU(cudaStreamCreate(&s));
    int *sym = rshmem_calloc(N, sizeof(int));
    int *sym2 = rshmem_calloc(N * n, sizeof(int));
    int *red = rshmem_calloc(N * n, sizeof(int));
    uint64_t *sig = rshmem_calloc(1, sizeof(uint64_t));
    CHECK(sym && sym2 && red && sig);
    int host[N], back[N * 4];
    for (int i = 0; i < N; i++) host[i] = me * N + i;
    int *dsrc = NULL, *ddst = NULL;
    CU(cudaMalloc((void **)&dsrc, N * sizeof(int)));
    CU(cudaMalloc((void **)&ddst, N * sizeof(int)));
    CU(cudaMemcpy(dsrc, host, sizeof host, cudaMemcpyHostToDevice));

    /* Put from cudaMalloc'd memory, then from symmetric memory. */
    OK(rshmemx_int_put_on_stream(sym, dsrc, N, right, s));
    OK(rshmemx_barrier_all_on_stream(s));
    CU(cudaStreamSynchronize(s));
    rshmem_int_get(back, sym, N, me);
    for (int i = 0; i < N; i++) CHECK(back[i] == left * N + i);
    OK(rshmemx_putmem_on_stream(sym2, sym, N * sizeof(int), right, s));
    OK(rshmemx_barrier_all_on_stream(s));
    /* Get into cudaMalloc'd memory. */
    OK(rshmemx_int_get_on_stream(ddst, sym2, N, me, s));
    CU(cudaStreamSynchronize(s));
    CU(cudaMemcpy(back, ddst, N * sizeof(int), cudaMemcpyDeviceToHost));
    int ll = (left + n - 1) % n;
    for (int i = 0; i < N; i++) CHECK(back[i] == ll * N + i);

    /* p / g on stream. */
    OK(rshmemx_int_p_on_stream(&sym[0], -me, right, s));
    OK(rshmemx_barrier_all_on_stream(s));
    int v = 0;
    OK(rshmemx_int_g_on_stream(&v, &sym[0], me, s));
    CHECK(v == -left);

    /* put_signal on stream + the stream waiting for the signal. */
    OK(rshmemx_int_put_signal_on_stream(sym, dsrc, 8, sig, 1, RSHMEM_SIGNAL_ADD, right, s));
    OK(rshmemx_signal_wait_until_on_stream(sig, RSHMEM_CMP_GE, 1, s));
    OK(rshmemx_signal_op_on_stream(sig, 10, RSHMEM_SIGNAL_ADD, right, s));
    OK(rshmemx_signal_wait_until_on_stream(sig, RSHMEM_CMP_GE, 11, s));
    OK(rshmemx_quiet_on_stream(s));
    OK(rshmemx_sync_all_on_stream(s));
    CU(cudaStreamSynchronize(s));
    CHECK(rshmem_signal_fetch(sig) == 11);

    /* Collectives on stream. */
    rshmem_int_put(sym, host, N, me);
    rshmem_barrier_all();
    OK(rshmemx_int_sum_reduce_on_stream(RSHMEM_TEAM_WORLD, red, sym, N, s));
    CU(cudaStreamSynchronize(s));
    rshmem_int_get(back, red, N, me);
    for (int i = 0; i < N; i++) CHECK(back[i] == N * n * (n - 1) / 2 + n * i);
    OK(rshmemx_int_fcollect_on_stream(RSHMEM_TEAM_WORLD, sym2, sym, 4, s));
    CU(cudaStreamSynchronize(s));
    rshmem_int_get(back, sym2, 4 * (size_t)n, me);
    for (int p = 0; p < n; p++)
        for (int i = 0; i < 4; i++) CHECK(back[p * 4 + i] == p * N + i);
    OK(rshmemx_int_broadcast_on_stream(RSHMEM_TEAM_WORLD, red, sym, 16, n - 1, s));
    CU(cudaStreamSynchronize(s));
    rshmem_int_get(back, red, 16, me);
    for (int i = 0; i < 16; i++) CHECK(back[i] == (n - 1) * N + i);
    OK(rshmemx_int_alltoall_on_stream(RSHMEM_TEAM_WORLD, red, sym, 2, s));
    CU(cudaStreamSynchronize(s));
    rshmem_int_get(back, red, 2 * (size_t)n, me);
    for (int p = 0; p < n; p++) CHECK(back[2 * p] == p * N + 2 * me);
    OK(rshmemx_int_max_reducescatter_on_stream(RSHMEM_TEAM_WORLD, red, sym, N / n, s));
    CU(cudaStreamSynchronize(s));
    rshmem_int_get(back, red, 1, me);
    CHECK(back[0] == (n - 1) * N + me * (N / n));
    rshmem_team_t x = RSHMEM_TEAM_INVALID, y = RSHMEM_TEAM_INVALID;
    OK(rshmem_team_split_2d(RSHMEM_TEAM_WORLD, 2, NULL, 0, &x, NULL, 0, &y));
    OK(rshmemx_barrier_on_stream(x, s));
    OK(rshmemx_team_sync_on_stream(y, s));
    CU(cudaStreamSynchronize(s));

    /* Host RMA with GPU memory as the local buffer (symmetric, cudaMalloc'd). */
    rshmem_barrier_all();
    rshmem_int_put(sym2, sym, 8, right);           /* symmetric GPU source */
    rshmem_int_put(&sym2[8], dsrc, 8, right);      /* cudaMalloc'd source */
    rshmem_int_put_signal(&sym2[16], dsrc, 4, sig, 100, RSHMEM_SIGNAL_SET, right);
    CHECK(rshmem_signal_wait_until(sig, RSHMEM_CMP_EQ, 100) == 100);
    rshmem_barrier_all();
    rshmem_int_get(ddst, sym2, 20, me);            /* cudaMalloc'd destination */
    CU(cudaMemcpy(back, ddst, 20 * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 8; i++) CHECK(back[i] == left * N + i && back[8 + i] == left * N + i);
    for (int i = 0; i < 4; i++) CHECK(back[16 + i] == left * N + i);
    rshmem_int_get(sym2, sym, 4, right);           /* symmetric GPU destination */
    rshmem_int_get(back, sym2, 4, me);
    for (int i = 0; i < 4; i++) CHECK(back[i] == right * N + i);

    /* The _nbi forms with GPU local buffers: queued, complete at the next quiet (here the
       barrier, which implies it, and rshmem_quiet). */
    rshmem_barrier_all();
    for (int k = 0; k < 8; k++) rshmem_int_put_nbi(&sym2[32 + k], &dsrc[k], 1, right);
    rshmem_int_put_nbi(&sym2[40], sym, 8, right);  /* symmetric GPU source */
    rshmem_barrier_all();
    rshmem_int_get_nbi(ddst, &sym2[32], 16, me);   /* cudaMalloc'd destination */
    rshmem_quiet();
    CU(cudaMemcpy(back, ddst, 16 * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 8; i++) CHECK(back[i] == left * N + i && back[8 + i] == left * N + i);

    /* Errors: a bad PE on a stream call is returned, nothing enqueued. */
    CHECK(rshmemx_int_put_on_stream(sym, dsrc, 1, n, s) == RSHMEM_ERROR_INVALID_VALUE);

    rshmem_barrier_all();
    rshmem_team_destroy(y);
    rshmem_team_destroy(x);
    CU(cudaFree(ddst));
    CU(cudaFree(dsrc));
    rshmem_free(sig);
    rshmem_free(red);
    rshmem_free(sym2);
    rshmem_free(sym);
    CU(cudaStreamDestroy(s));
    DONE("stream_gpu");
    OK(rshmem_finalize());
    return 0;
}
