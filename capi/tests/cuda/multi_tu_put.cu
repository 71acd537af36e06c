// Translation unit 2 of the multi-TU test (see multi_tu.h): the put side.
#include "multi_tu.h"

__global__ void multi_tu_put(void *dest, const void *src, size_t nbytes, uint64_t *sig, int pe,
                             int *seen) {
    seen[0] = rshmem_my_pe();
    seen[1] = rshmem_n_pes();
    rshmem_putmem_signal(dest, src, nbytes, sig, 1, RSHMEM_SIGNAL_ADD, pe);
    rshmem_quiet();
}

void multi_tu_launch_put(void *dest, const void *src, size_t nbytes, uint64_t *sig, int pe,
                         int *seen, cudaStream_t stream) {
    multi_tu_put<<<1, 1, 0, stream>>>(dest, src, nbytes, sig, pe, seen);
}
