// Launches every kernel of device-lib/tests/regbudget.cu with blocks of 1024 threads on a GPU
// (scripts/devlib-gpu-check runs it on 2 PEs): for each kernel, rshmemx_collective_launch_query_
// gridsize with 1024 threads must give a non-zero grid (the kernel fits such a block), and one
// block of 1024 threads running one iteration of its loop (iter = 1) must finish without an
// error. Every PE launches the same kernels in the same order, so the collectives, barriers and
// ping-pongs meet their peers; the buffers are cleared and the PEs synchronized between kernels.
// Prints "PASS <kernel>: grid <n> x 1024" or "FAIL <kernel>: <why>" per kernel (PE 0 only) and
// exits 1 when any failed. Needs exactly 2 PEs.
//
// Arguments: the names of kernels known to need more than 64 registers in this file
// (device-lib/tests/regbudget_1tu.txt, marked known-over; scripts/devlib-gpu-check passes
// them). Such a kernel that gives no grid of 1024-thread blocks is launched as one block of 512
// threads instead and reported as "KNOWN <kernel>: ..." (not a failure); one that does fit 1024
// threads is a PASS like any other. Every other kernel must fit 1024 threads.
#define RB_ALL 1
#include "regbudget.cu"

#include <cstdio>
#include <cstring>

namespace {

int me = 0;
int failed = 0;
int known_argc = 0;
char** known_argv = nullptr;

bool known_over(const char* name) {
    for (int i = 0; i < known_argc; i++) {
        if (strcmp(known_argv[i], name) == 0) return true;
    }
    return false;
}

// Symmetric buffers (cleared before every kernel) and a local grid counter.
const size_t kBytes = 8 << 20;
char* sym = nullptr;
uint64_t* sig = nullptr;
unsigned* counter = nullptr;
double* out = nullptr;

void reset() {
    cudaMemset(sym, 0, kBytes);
    cudaMemset(sig, 0, 64 * sizeof(uint64_t));
    cudaMemset(counter, 0, 2 * sizeof(unsigned));
    cudaDeviceSynchronize();
    nvshmem_barrier_all();
}

// Queries the grid of `fn` for 1024 threads, then launches it as one block of 1024 threads with
// `args` and waits (a known-over kernel without such a grid: 512 threads).
void check(const char* name, const void* fn, void** args) {
    reset();
    int grid = 0, threads = 1024;
    int rc = nvshmemx_collective_launch_query_gridsize(fn, 1024, args, 0, &grid);
    const bool known = (rc != 0 || grid <= 0) && known_over(name);
    if (known) {
        threads = 512;
        rc = nvshmemx_collective_launch_query_gridsize(fn, threads, args, 0, &grid);
    }
    cudaError_t e = cudaSuccess;
    if (rc == 0 && grid > 0) {
        e = cudaLaunchKernel(fn, dim3(1), dim3(threads), args, 0, 0);
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
    }
    nvshmem_barrier_all();
    if (me != 0) return;
    if (known && rc == 0 && grid > 0 && e == cudaSuccess) {
        printf("KNOWN %s: over 64 registers (regbudget_1tu.txt): no grid of 1024 threads; grid %d x "
               "512, launched\n", name, grid);
    } else if (rc != 0 || grid <= 0) {
        printf("FAIL %s: collective_launch_query_gridsize gives %d blocks of %d threads\n", name,
               grid, threads);
        failed++;
    } else if (e != cudaSuccess) {
        printf("FAIL %s: launch of 1 x %d threads: %s\n", name, threads, cudaGetErrorString(e));
        failed++;
    } else {
        printf("PASS %s: grid %d x %d, launched\n", name, grid, threads);
    }
    fflush(stdout);
}

}  // namespace

#define CHECK(K, ...)                                                                            \
    do {                                                                                         \
        void* a_[] = {__VA_ARGS__};                                                              \
        check(#K, (const void*)K, a_);                                                           \
    } while (0)

int main(int argc, char** argv) {
    known_argc = argc - 1;
    known_argv = argv + 1;
    nvshmem_init();
    me = nvshmem_my_pe();
    if (nvshmem_n_pes() != 2) {
        if (me == 0) fprintf(stderr, "regbudget_launch: run with 2 PEs\n");
        return 1;
    }
    sym = (char*)nvshmem_malloc(kBytes);
    sig = (uint64_t*)nvshmem_malloc(64 * sizeof(uint64_t));
    cudaMalloc(&counter, 2 * sizeof(unsigned));
    cudaMalloc(&out, 1024 * sizeof(double));
    int pe = me, iter = 1;
    size_t len = 1024 * 64;          // doubles: 64 per thread in the thread-scope kernels
    size_t nbytes = 4096;
    int ilen = 1024 * 4;
    int n_ivars = 8;
    int nelems = 16;
    nvshmem_team_t team = NVSHMEM_TEAM_WORLD;
    double* data = (double*)sym;
    int* idata = (int*)sym;
    int* flag = (int*)sig;
    int* idest = (int*)(sym + (4 << 20));
    float* fdata = (float*)sym;
    float* fdest = (float*)(sym + (4 << 20));
    uint64_t* udata = (uint64_t*)sym;
    int* iout = (int*)out;

#define BW(K) CHECK(K, &data, &counter, &len, &pe, &iter)
    BW(rb_put_nbi_thread); BW(rb_put_nbi_warp); BW(rb_put_nbi_block);
    BW(rb_put_thread); BW(rb_put_warp); BW(rb_put_block);
    BW(rb_get_nbi_thread); BW(rb_get_nbi_warp); BW(rb_get_nbi_block);
    BW(rb_get_thread); BW(rb_get_warp); BW(rb_get_block);
#define PS(K) CHECK(K, &sym, &sig, &nbytes, &pe, &iter)
    PS(rb_put_signal_thread); PS(rb_put_signal_warp); PS(rb_put_signal_block);
    CHECK(rb_p_latency, &idata, &ilen, &pe, &iter);
    CHECK(rb_p_bw, &data, &ilen, &pe, &iter);
    CHECK(rb_g_latency, &idata, &ilen, &pe, &iter);
    CHECK(rb_g_bw, &data, &out, &ilen, &pe, &iter);
#define AMO(K) CHECK(K, &udata, &out, &pe, &iter)
    AMO(rb_amo_fetch_add); AMO(rb_amo_add); AMO(rb_amo_fetch_inc); AMO(rb_amo_inc);
    AMO(rb_amo_compare_swap); AMO(rb_amo_swap); AMO(rb_amo_set); AMO(rb_amo_fetch);
    AMO(rb_amo_fetch_and); AMO(rb_amo_or); AMO(rb_amo_fetch_xor);
    CHECK(rb_signal_op, &sig, &pe, &iter);
    CHECK(rb_p_ping_pong, &flag, &pe, &iter);
    CHECK(rb_put_ping_pong, &idata, &flag, &ilen, &pe, &iter);
    CHECK(rb_test, &sig, &n_ivars, &iout, &iter);
    CHECK(rb_wait_until_all, &sig, &n_ivars, &iter);
    CHECK(rb_fence_quiet, &idata, &pe, &iter);
#define SYNC(K) CHECK(K, &iter, &team)
    SYNC(rb_barrier_all_thread); SYNC(rb_barrier_all_warp); SYNC(rb_barrier_all_block);
    SYNC(rb_sync_all_thread); SYNC(rb_sync_all_warp); SYNC(rb_sync_all_block);
    SYNC(rb_team_sync_thread); SYNC(rb_team_sync_warp); SYNC(rb_team_sync_block);
    SYNC(rb_barrier_thread); SYNC(rb_barrier_warp); SYNC(rb_barrier_block);
#define COLL(K) CHECK(K, &team, &idest, &idata, &nelems, &iter)
    COLL(rb_alltoall_thread); COLL(rb_alltoall_warp); COLL(rb_alltoall_block);
    COLL(rb_broadcast_thread); COLL(rb_broadcast_warp); COLL(rb_broadcast_block);
    COLL(rb_fcollect_thread); COLL(rb_fcollect_warp); COLL(rb_fcollect_block);
    COLL(rb_sum_reduce_thread); COLL(rb_sum_reduce_warp); COLL(rb_sum_reduce_block);
    COLL(rb_reducescatter_thread); COLL(rb_reducescatter_warp); COLL(rb_reducescatter_block);
#define FCOLL(K) CHECK(K, &team, &fdest, &fdata, &nelems, &iter)
    FCOLL(rb_max_reduce_thread); FCOLL(rb_max_reduce_warp); FCOLL(rb_max_reduce_block);

    nvshmem_free(sym);
    nvshmem_free(sig);
    nvshmem_finalize();
    if (me == 0) printf("regbudget_launch: %d failed\n", failed);
    return failed != 0;
}
