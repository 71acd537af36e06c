// ring_shift's device side: one thread puts this PE's number into `message` on the next PE.
#include "rshmem/rshmem.cuh"

extern "C" __global__ void ring_shift(int *message) {
    int me = rshmem_my_pe();
    int n = rshmem_n_pes();
    rshmem_int_p(message, me, (me + 1) % n);
}
