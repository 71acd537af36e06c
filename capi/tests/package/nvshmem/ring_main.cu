// Part of the NVSHMEM-package test project (CMakeLists.txt here): the kernel calls ring_next,
// defined in ring_peer.cu, so the program only links with separable compilation.
#include <nvshmem.h>
#include <nvshmemx.h>

__device__ int ring_next(int pe, int npes);
int host_check(int me, int npes, int got);

__global__ void ring(int *dst) {
    int me = nvshmem_my_pe();
    nvshmem_int_p(dst, me, ring_next(me, nvshmem_n_pes()));
}

int main() {
    nvshmem_init();
    int me = nvshmem_my_pe();
    int npes = nvshmem_n_pes();
    int *dst = (int *)nvshmem_malloc(sizeof(int));
    ring<<<1, 1>>>(dst);
    nvshmemx_barrier_all_on_stream(0);
    int got = -1;
    cudaMemcpy(&got, dst, sizeof(got), cudaMemcpyDeviceToHost);
    int rc = host_check(me, npes, got);
    nvshmem_free(dst);
    nvshmem_finalize();
    return rc;
}
