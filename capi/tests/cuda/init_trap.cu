// A kernel that calls the device library before rshmem_init must not write anywhere: it prints a
// message naming the call and traps, so the launch fails. Run as one process, without init:
// prints "init_trap: passed: ..." and exits 0 when the kernel trapped, exits 1 when it completed.
#include <rshmem.h>

#include <cstdio>

__global__ void put_before_init(int *dest) { rshmem_int_p(dest, 42, 0); }

int main() {
    int *dest = nullptr;
    if (cudaMalloc(&dest, sizeof(int)) != cudaSuccess) {
        fprintf(stderr, "init_trap: no usable CUDA device\n");
        return 1;
    }
    cudaMemset(dest, 0, sizeof(int));
    put_before_init<<<1, 1>>>(dest);
    cudaError_t launched = cudaGetLastError();
    cudaError_t done = cudaDeviceSynchronize();
    fflush(stdout);
    if (launched == cudaSuccess && done == cudaSuccess) {
        int v = -1;
        cudaMemcpy(&v, dest, sizeof v, cudaMemcpyDeviceToHost);
        fprintf(stderr, "init_trap: FAILED: a kernel calling rshmem_int_p before rshmem_init ran "
                        "to completion (dest = %d)\n", v);
        return 1;
    }
    cudaError_t err = launched != cudaSuccess ? launched : done;
    printf("init_trap: passed: the kernel trapped (%s: %s)\n", cudaGetErrorName(err),
           cudaGetErrorString(err));
    return 0;
}
