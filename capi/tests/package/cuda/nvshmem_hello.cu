// An NVSHMEM program, unchanged, built against rshmem's compatibility headers through the CMake
// target rshmem::nvshmem_compat: every PE's kernel puts its number to the next PE.
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdio>

__global__ void shift(int *destination) {
    int mype = nvshmem_my_pe();
    int npes = nvshmem_n_pes();
    nvshmem_int_p(destination, mype, (mype + 1) % npes);
}

int main() {
    nvshmem_init();
    int mype = nvshmem_my_pe();
    int *destination = (int *)nvshmem_malloc(sizeof(int));
    shift<<<1, 1>>>(destination);
    nvshmemx_barrier_all_on_stream(0);
    int msg = -1;
    cudaMemcpy(&msg, destination, sizeof(int), cudaMemcpyDeviceToHost);
    printf("%d: received message %d\n", mype, msg);
    nvshmem_free(destination);
    nvshmem_finalize();
    return 0;
}
