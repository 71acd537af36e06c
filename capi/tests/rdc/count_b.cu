// Translation unit 2 of the registration count (see count_a.cu).
#include "rshmem/rshmem.cuh"

__global__ void count_b(int *out) {
    out[0] = rshmem_n_pes();
    rshmem_int_p(out, 1, 0);
}

void count_launch_b(int *out) { count_b<<<1, 1>>>(out); }
