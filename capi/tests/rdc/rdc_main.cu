// Translation unit 1 of the separable-compilation test (see rdc.h). Run with 2+ PEs; prints
// "rdc: PE <me> passed" or names what failed and exits 1.
#include "rdc.h"

#include <cstdio>

__global__ void rdc_wait_check(const int *buf, int n, uint64_t *sig, uint64_t expect, int from,
                               int round, int *out) {
    if (threadIdx.x == 0) {
        nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, expect);
        out[0] = nvshmem_my_pe();
        out[1] = nvshmem_n_pes();
    }
    __syncthreads();
    int bad = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) bad += buf[i] != rdc_pattern(from, round, i);
    if (bad) atomicAdd(out + 2, bad);
}

#define CK(call)                                                                                \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "rdc: %s failed: %s\n", #call, cudaGetErrorString(e_));             \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

int main() {
    nvshmem_init();
    const int me = nvshmem_my_pe(), npes = nvshmem_n_pes();
    if (npes < 2) {
        fprintf(stderr, "rdc: needs 2 or more PEs\n");
        return 1;
    }
    // The 1024-thread put kernel of TU 2 must fit a block of 1024 threads.
    int grid = 0;
    if (nvshmemx_collective_launch_query_gridsize(rdc_put_kernel(), 1024, nullptr, 0, &grid) != 0 ||
        grid < 1) {
        fprintf(stderr, "rdc: PE %d: collective_launch_query_gridsize gives %d blocks of 1024\n",
                me, grid);
        return 1;
    }
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    const int n = 1 << 16;
    int *src = (int *)nvshmem_malloc(n * sizeof(int));
    int *dest = (int *)nvshmem_malloc(n * sizeof(int));
    uint64_t *sig = (uint64_t *)nvshmem_calloc(1, sizeof(uint64_t));
    int *seen = nullptr;
    CK(cudaMalloc(&seen, 8 * sizeof(int)));
    int host[1 << 10];
    int failed = 0;
    for (int round = 1; round <= 3; round++) {
        for (int off = 0; off < n; off += 1 << 10) {
            for (int i = 0; i < 1 << 10; i++) host[i] = rdc_pattern(me, round, off + i);
            CK(cudaMemcpy(src + off, host, sizeof host, cudaMemcpyHostToDevice));
        }
        CK(cudaMemset(seen, 0, 8 * sizeof(int)));
        nvshmem_barrier_all();
        rdc_launch_put(dest, src, n, sig, seen, s);
        rdc_wait_check<<<1, 256, 0, s>>>(dest, n, sig, round, (me + npes - 1) % npes, round, seen + 4);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        int got[8];
        CK(cudaMemcpy(got, seen, sizeof got, cudaMemcpyDeviceToHost));
        const bool ok = got[0] == me && got[1] == npes && got[4] == me && got[5] == npes && got[6] == 0;
        if (!ok) {
            fprintf(stderr,
                    "rdc: PE %d round %d: TU put sees PE %d of %d, TU main sees PE %d of %d, %d "
                    "of %d elements wrong\n",
                    me, round, got[0], got[1], got[4], got[5], got[6], n);
            failed = 1;
        }
        nvshmem_barrier_all();
    }
    nvshmem_free(src);
    nvshmem_free(dest);
    nvshmem_free(sig);
    nvshmem_finalize();
    if (!failed) printf("rdc: PE %d passed (grid of 1024-thread blocks: %d)\n", me, grid);
    return failed;
}
