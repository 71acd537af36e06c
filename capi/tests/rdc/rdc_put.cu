// Translation unit 2 of the separable-compilation test (see rdc.h).
#include "rdc.h"

__global__ void rdc_put(int *dest, const int *src, int n, uint64_t *sig, int *seen) {
    if (threadIdx.x == 0) {
        seen[0] = nvshmem_my_pe();
        seen[1] = nvshmem_n_pes();
    }
    const int peer = (nvshmem_my_pe() + 1) % nvshmem_n_pes();
    nvshmemx_int_put_signal_nbi_block(dest, src, n, sig, 1, NVSHMEM_SIGNAL_ADD, peer);
    if (threadIdx.x == 0) nvshmem_quiet();
}

void rdc_launch_put(int *dest, const int *src, int n, uint64_t *sig, int *seen, cudaStream_t s) {
    rdc_put<<<1, 1024, 0, s>>>(dest, src, n, sig, seen);
}

const void *rdc_put_kernel() { return (const void *)rdc_put; }
