// rshmemx_collective_launch and rshmemx_collective_launch_query_gridsize (inline in rshmem.h):
// a grid that fits is launched cooperatively and runs; one block more than fits fails with
// RSHMEM_ERROR_INVALID_VALUE and a message naming the call. Built with nvcc (no -rdc); uses no
// device-library call, so it also checks that rshmem.h compiles under nvcc. On a GPU machine:
//     rshmemrun -n 2 target/debug/rshmem-c-tests/collective_launch
#include <rshmem.h>
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>

__global__ void fill(int *out) {
    cooperative_groups::this_grid().sync();
    out[blockIdx.x] = (int)blockIdx.x + 1;
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
    CHECK(last == grid);
    CHECK(rshmemx_collective_launch((const void *)fill, dim3(grid + 1), dim3(128), args, 0, 0) ==
          RSHMEM_ERROR_INVALID_VALUE);
    CHECK(cudaFree(out) == cudaSuccess);
    CHECK(rshmem_finalize() == RSHMEM_SUCCESS);
    const char *rank = getenv("RSHMEM_RANK");  // rshmem_my_pe needs the device library's host twins
    printf("OK collective_launch PE %s\n", rank ? rank : "0");
    return 0;
}
