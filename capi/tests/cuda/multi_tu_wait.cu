// Translation unit 3 of the multi-TU test (see multi_tu.h): the wait-and-check side.
#include "multi_tu.h"

__global__ void multi_tu_wait(const unsigned char *buf, size_t nbytes, uint64_t *sig,
                              uint64_t expect, int from_pe, unsigned round, int *result) {
    if (threadIdx.x == 0) {
        rshmem_signal_wait_until(sig, RSHMEM_CMP_GE, expect);
        result[0] = 0;
        result[1] = rshmem_my_pe();
        result[2] = rshmem_n_pes();
    }
    __syncthreads();
    int bad = 0;
    for (size_t i = threadIdx.x; i < nbytes; i += blockDim.x) {
        if (buf[i] != multi_tu_pattern(from_pe, round, i)) bad++;
    }
    if (bad) atomicAdd(&result[0], bad);
}

void multi_tu_launch_wait(const unsigned char *buf, size_t nbytes, uint64_t *sig, uint64_t expect,
                          int from_pe, unsigned round, int *result, cudaStream_t stream) {
    multi_tu_wait<<<1, 256, 0, stream>>>(buf, nbytes, sig, expect, from_pe, round, result);
}
