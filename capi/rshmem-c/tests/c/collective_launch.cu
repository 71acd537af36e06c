// rshmemx_collective_launch and rshmemx_collective_launch_query_gridsize (inline in rshmem.h):
// a grid that fits is launched cooperatively and runs; one block more than fits fails with
// RSHMEM_ERROR_INVALID_VALUE and a message naming the call. Built with nvcc (no -rdc); the
// kernel reads rshmem_my_pe() through the device library (the state reached this translation
// unit) and the host calls the same name through librshmem (a host twin). On a GPU machine:
//     rshmemrun -n 2 target/debug/rshmem-c-tests/collective_launch
#include <rshmem.h>
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>

__global__ void fill(int *out) {
    cooperative_groups::this_grid().sync();
    out[blockIdx.x] = (int)blockIdx.x + 1 + 1000 * rshmem_my_pe();
}

#define CHECK(c)                                                                    \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);            \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

int main() {
    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    int grid = 0;
    CHECK(rshmemx_collective_launch_query_gridsize((const void *)fill, dim3(128), nullptr, 0,
                                                   &grid) == RSHMEM_SUCCESS);
    CHECK(grid > 0);
    int *out = nullptr;
    CHECK(cudaMalloc((void **)&out, (grid + 1) * sizeof(int)) == cudaSuccess);
    void *args[] = {&out};
    CHECK(rshmemx_collective_launch((const void *)fill, dim3(grid), dim3(128), args, 0, 0) ==
          RSHMEM_SUCCESS);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    int last = 0;
    CHECK(cudaMemcpy(&last, out + grid - 1, sizeof last, cudaMemcpyDeviceToHost) == cudaSuccess);
    const int me = rshmem_my_pe();
    CHECK(last == grid + 1000 * me);
    CHECK(rshmemx_collective_launch((const void *)fill, dim3(grid + 1), dim3(128), args, 0, 0) ==
          RSHMEM_ERROR_INVALID_VALUE);
    CHECK(cudaFree(out) == cudaSuccess);
    CHECK(rshmem_finalize() == RSHMEM_SUCCESS);
    printf("OK collective_launch PE %d\n", me);
    return 0;
}
