// GPU test of the code the NVSHMEM compatibility headers add on top of plain name mapping
// (capi/tests/nvshmem/run builds it; it runs under rshmemrun on 2 or more PEs, on one GPU under
// MPS too). Every PE prints one line per check and exits 1 if any failed:
//   1. cudaSetDevice(nvshmem_team_my_pe(NVSHMEMX_TEAM_NODE)) succeeds (several PEs per GPU);
//   2. a thread-scope team collective called from host code (the host library's collective);
//   3. the same collective called in a kernel;
//   4. half: nvshmem_half_p in a kernel, nvshmem_half_g from the host;
//   5. half: nvshmemx_half_put_block in a kernel;
//   6. half: nvshmemx_half_put_on_stream and nvshmem_half_broadcast from the host;
//   7. nvshmemx_putmem_nbi_on_stream (mapped to the stream-ordered put) + quiet/barrier on stream;
//   8. half and bfloat16 reductions in a kernel (block scope; sums of small integers and halves,
//      which 16 bits hold exactly, so the expected values are exact);
//   9. half and bfloat16 reductions from the host: nvshmemx_half_sum_reduce_on_stream,
//      nvshmemx_bfloat16_min_reducescatter_on_stream and the blocking nvshmem_half_max_reduce
//      (exact values again);
//  10. nvshmemx_double2_maxloc_reduce_block in a kernel: PE p offers {value, location p}; the
//      largest value wins, of equal values the smallest location.
#include <stdio.h>
#include <stdint.h>
#include <nvshmem.h>
#include <nvshmemx.h>

static int failures = 0;
static int mype = -1;

static void check(int ok, const char *what) {
    printf("PE %d: %s: %s\n", mype, what, ok ? "ok" : "FAILED");
    if (!ok) failures++;
}

static uint16_t bits(half h) {
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

__global__ void reduce_kernel(int *dest, const int *src) {
    nvshmem_int_sum_reduce(NVSHMEM_TEAM_WORLD, dest, src, 1);
}

__global__ void half_p_kernel(half *dest, half v, int peer) { nvshmem_half_p(dest, v, peer); }

__global__ void half_block_kernel(half *dest, const half *src, size_t n, int peer) {
    nvshmemx_half_put_block(dest, src, n, peer);
}

__global__ void half_reduce_kernel(half *hd, const half *hs, __nv_bfloat16 *bd,
                                   const __nv_bfloat16 *bs, size_t n) {
    nvshmemx_half_sum_reduce_block(NVSHMEM_TEAM_WORLD, hd, hs, n);
    nvshmemx_bfloat16_max_reduce_block(NVSHMEM_TEAM_WORLD, bd, bs, n);
}

__global__ void maxloc_kernel(double2 *dest, const double2 *src) {
    nvshmemx_double2_maxloc_reduce_block(NVSHMEM_TEAM_WORLD, dest, src, 1);
}

int main(void) {
    if (nvshmem_init() != NVSHMEMX_SUCCESS) return 1;
    mype = nvshmem_my_pe();
    const int npes = nvshmem_n_pes();
    const int right = (mype + 1) % npes, left = (mype + npes - 1) % npes;
    check(cudaSetDevice(nvshmem_team_my_pe(NVSHMEMX_TEAM_NODE)) == cudaSuccess,
          "cudaSetDevice(node rank)");

    int *isrc = (int *)nvshmem_malloc(sizeof(int));
    int *idst = (int *)nvshmem_malloc(sizeof(int));
    const int want = npes * (npes + 1) / 2;
    int v = mype + 1, got = 0;
    cudaMemcpy(isrc, &v, sizeof(int), cudaMemcpyHostToDevice);
    nvshmem_barrier_all();
    check(nvshmem_int_sum_reduce(NVSHMEM_TEAM_WORLD, idst, isrc, 1) == 0, "host reduce returns 0");
    cudaMemcpy(&got, idst, sizeof(int), cudaMemcpyDeviceToHost);
    check(got == want, "host nvshmem_int_sum_reduce");

    cudaMemset(idst, 0, sizeof(int));
    nvshmem_barrier_all();
    void *args[] = {&idst, &isrc};
    check(nvshmemx_collective_launch((const void *)reduce_kernel, 1, 1, args, 0, 0) == 0,
          "collective launch");
    cudaDeviceSynchronize();
    got = 0;
    cudaMemcpy(&got, idst, sizeof(int), cudaMemcpyDeviceToHost);
    check(got == want, "device nvshmem_int_sum_reduce");

    const size_t n = 1000;
    half *hsrc = (half *)nvshmem_malloc(n * sizeof(half));
    half *hdst = (half *)nvshmem_malloc(n * sizeof(half));
    half mine = __float2half((float)mype + 0.5f);
    cudaMemset(hdst, 0, n * sizeof(half));
    nvshmem_barrier_all();
    half_p_kernel<<<1, 1>>>(hdst, mine, right);
    cudaDeviceSynchronize();
    nvshmem_barrier_all();
    half from_left = nvshmem_half_g(hdst, mype);
    check(bits(from_left) == bits(__float2half((float)left + 0.5f)), "half p (device) / g (host)");

    half *h = (half *)malloc(n * sizeof(half));
    for (size_t i = 0; i < n; i++) h[i] = __float2half((float)(mype * 1000 + (int)i % 1000) / 8.0f);
    cudaMemcpy(hsrc, h, n * sizeof(half), cudaMemcpyHostToDevice);
    cudaMemset(hdst, 0, n * sizeof(half));
    nvshmem_barrier_all();
    half_block_kernel<<<1, 256>>>(hdst, hsrc, n, right);
    cudaDeviceSynchronize();
    nvshmem_barrier_all();
    cudaMemcpy(h, hdst, n * sizeof(half), cudaMemcpyDeviceToHost);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        ok &= bits(h[i]) == bits(__float2half((float)(left * 1000 + (int)i % 1000) / 8.0f));
    }
    check(ok, "half put_block (device)");

    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaMemset(hdst, 0, n * sizeof(half));
    nvshmemx_barrier_all_on_stream(s);
    nvshmemx_half_put_on_stream(hdst, hsrc, n, right, s);
    nvshmemx_barrier_all_on_stream(s);
    cudaStreamSynchronize(s);
    cudaMemcpy(h, hdst, n * sizeof(half), cudaMemcpyDeviceToHost);
    ok = 1;
    for (size_t i = 0; i < n; i++) {
        ok &= bits(h[i]) == bits(__float2half((float)(left * 1000 + (int)i % 1000) / 8.0f));
    }
    check(ok, "half put_on_stream");

    check(nvshmem_half_broadcast(NVSHMEM_TEAM_WORLD, hdst, hsrc, n, 0) == 0, "host half broadcast");
    cudaMemcpy(h, hdst, n * sizeof(half), cudaMemcpyDeviceToHost);
    ok = 1;
    for (size_t i = 0; i < n; i++) {
        ok &= bits(h[i]) == bits(__float2half((float)(0 * 1000 + (int)i % 1000) / 8.0f));
    }
    check(ok, "host half broadcast data");

    cudaMemset(idst, 0, sizeof(int));
    nvshmemx_barrier_all_on_stream(s);
    v = 100 + mype;
    cudaMemcpy(isrc, &v, sizeof(int), cudaMemcpyHostToDevice);
    nvshmemx_putmem_nbi_on_stream(idst, isrc, sizeof(int), right, s);
    nvshmemx_quiet_on_stream(s);
    nvshmemx_barrier_all_on_stream(s);
    cudaStreamSynchronize(s);
    got = 0;
    cudaMemcpy(&got, idst, sizeof(int), cudaMemcpyDeviceToHost);
    check(got == 100 + left, "putmem_nbi_on_stream");

    // 8. 16-bit float reductions: element i of PE p is (p + 1) + (i % 7) / 2 (half: sum over the
    // PEs; bfloat16: max, PE npes - 1's value).
    {
        const size_t m = 3000;  // several chunks per PE, vector and scalar paths
        half *hs = (half *)nvshmem_malloc(m * sizeof(half)), *hd = (half *)nvshmem_malloc(m * sizeof(half));
        __nv_bfloat16 *bs = (__nv_bfloat16 *)nvshmem_malloc(m * sizeof(__nv_bfloat16));
        __nv_bfloat16 *bd = (__nv_bfloat16 *)nvshmem_malloc(m * sizeof(__nv_bfloat16));
        half *hh = (half *)malloc(m * sizeof(half));
        __nv_bfloat16 *bh = (__nv_bfloat16 *)malloc(m * sizeof(__nv_bfloat16));
        for (size_t i = 0; i < m; i++) {
            hh[i] = __float2half((float)(mype + 1) + (float)(i % 7) / 2.0f);
            bh[i] = __float2bfloat16((float)(mype + 1) + (float)(i % 7) / 2.0f);
        }
        cudaMemcpy(hs, hh, m * sizeof(half), cudaMemcpyHostToDevice);
        cudaMemcpy(bs, bh, m * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
        nvshmem_barrier_all();
        void *rargs[] = {&hd, &hs, &bd, &bs, (void *)&m};
        check(nvshmemx_collective_launch((const void *)half_reduce_kernel, 1, 256, rargs, 0, 0) == 0,
              "16-bit reduce launch");
        check(cudaDeviceSynchronize() == cudaSuccess, "16-bit reduce kernel");
        cudaMemcpy(hh, hd, m * sizeof(half), cudaMemcpyDeviceToHost);
        cudaMemcpy(bh, bd, m * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
        int hok = 1, bok = 1;
        for (size_t i = 0; i < m; i++) {
            float hsum = (float)(npes * (npes + 1) / 2) + (float)npes * (float)(i % 7) / 2.0f;
            hok &= __half2float(hh[i]) == hsum;
            bok &= __bfloat162float(bh[i]) == (float)npes + (float)(i % 7) / 2.0f;
        }
        check(hok, "half sum reduce (block)");
        check(bok, "bfloat16 max reduce (block)");
        free(hh);
        free(bh);
        nvshmem_free(hs);
        nvshmem_free(hd);
        nvshmem_free(bs);
        nvshmem_free(bd);
    }

    // 9. From the host: element i of PE p is (p + 1) + (i % 7) / 2 as in 8.
    {
        const size_t m = 1000;
        half *hs = (half *)nvshmem_malloc(npes * m * sizeof(half));
        half *hd = (half *)nvshmem_malloc(npes * m * sizeof(half));
        __nv_bfloat16 *bs = (__nv_bfloat16 *)nvshmem_malloc(npes * m * sizeof(__nv_bfloat16));
        __nv_bfloat16 *bd = (__nv_bfloat16 *)nvshmem_malloc(m * sizeof(__nv_bfloat16));
        half *hh = (half *)malloc(npes * m * sizeof(half));
        __nv_bfloat16 *bh = (__nv_bfloat16 *)malloc(npes * m * sizeof(__nv_bfloat16));
        for (size_t i = 0; i < npes * m; i++) {
            hh[i] = __float2half((float)(mype + 1) + (float)(i % 7) / 2.0f);
            bh[i] = __float2bfloat16((float)(mype + 1) + (float)(i % 7) / 2.0f);
        }
        cudaMemcpy(hs, hh, npes * m * sizeof(half), cudaMemcpyHostToDevice);
        cudaMemcpy(bs, bh, npes * m * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
        nvshmem_barrier_all();
        check(nvshmemx_half_sum_reduce_on_stream(NVSHMEM_TEAM_WORLD, hd, hs, m, s) == 0,
              "half sum reduce on stream: enqueued");
        check(cudaStreamSynchronize(s) == cudaSuccess, "half sum reduce on stream: done");
        cudaMemcpy(hh, hd, m * sizeof(half), cudaMemcpyDeviceToHost);
        int ok = 1;
        for (size_t i = 0; i < m; i++) {
            ok &= __half2float(hh[i]) ==
                  (float)(npes * (npes + 1) / 2) + (float)npes * (float)(i % 7) / 2.0f;
        }
        check(ok, "half sum reduce on stream: values");
        check(nvshmemx_bfloat16_min_reducescatter_on_stream(NVSHMEM_TEAM_WORLD, bd, bs, m, s) == 0,
              "bfloat16 min reducescatter on stream: enqueued");
        check(cudaStreamSynchronize(s) == cudaSuccess, "bfloat16 min reducescatter on stream: done");
        cudaMemcpy(bh, bd, m * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
        ok = 1;
        for (size_t i = 0; i < m; i++) {
            ok &= __bfloat162float(bh[i]) == 1.0f + (float)((mype * m + i) % 7) / 2.0f;
        }
        check(ok, "bfloat16 min reducescatter on stream: values (block of this PE)");
        check(nvshmem_half_max_reduce(NVSHMEM_TEAM_WORLD, hd, hs, m) == 0, "host half max reduce");
        cudaMemcpy(hh, hd, m * sizeof(half), cudaMemcpyDeviceToHost);
        ok = 1;
        for (size_t i = 0; i < m; i++) {
            ok &= __half2float(hh[i]) == (float)npes + (float)(i % 7) / 2.0f;
        }
        check(ok, "host half max reduce: values");
        free(hh);
        free(bh);
        nvshmem_free(hs);
        nvshmem_free(hd);
        nvshmem_free(bs);
        nvshmem_free(bd);
    }

    // 10. maxloc: PE p offers {value (p + 1) / 2 (integer division), location p}: the largest
    // value is (npes / 2), offered by PE npes - 1 and, for odd npes, also by PE npes - 2 (the
    // smaller location wins).
    {
        double2 *ms = (double2 *)nvshmem_malloc(sizeof(double2));
        double2 *md = (double2 *)nvshmem_malloc(sizeof(double2));
        double2 mine2 = make_double2((double)((mype + 1) / 2), (double)mype);
        cudaMemcpy(ms, &mine2, sizeof(double2), cudaMemcpyHostToDevice);
        nvshmem_barrier_all();
        void *margs[] = {&md, &ms};
        check(nvshmemx_collective_launch((const void *)maxloc_kernel, 1, 64, margs, 0, 0) == 0,
              "maxloc launch");
        check(cudaDeviceSynchronize() == cudaSuccess, "maxloc kernel");
        double2 got2;
        cudaMemcpy(&got2, md, sizeof(double2), cudaMemcpyDeviceToHost);
        const int winner = (npes % 2 == 1 && npes > 1) ? npes - 2 : npes - 1;
        check(got2.x == (double)(npes / 2) && got2.y == (double)winner, "double2 maxloc reduce (block)");
        nvshmem_free(ms);
        nvshmem_free(md);
    }

    cudaStreamDestroy(s);
    free(h);
    nvshmem_free(hsrc);
    nvshmem_free(hdst);
    nvshmem_free(isrc);
    nvshmem_free(idst);
    nvshmem_finalize();
    if (failures == 0) printf("PE %d: all checks passed\n", mype);
    return failures == 0 ? 0 : 1;
}
