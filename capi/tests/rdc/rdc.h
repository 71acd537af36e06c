// The separable-compilation test (rdc_main.cu, rdc_put.cu): an NVSHMEM program of two nvcc
// translation units built with -rdc=true and a device link against librshmem_device.a. Both TUs
// use the one device state of the program (state.cuh): each reports my_pe / n_pes as its kernels
// see them, and TU 2 puts into the right neighbour with a signal that TU 1's kernel waits for.
#pragma once
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdint>

// The value element i of PE pe's data has in round r.
__host__ __device__ inline int rdc_pattern(int pe, int r, int i) { return (pe + 1) * 1000003 + r * 7919 + i; }

// rdc_put.cu: block-scope put of n ints from src to dest on PE (me + 1) % n_pes, signal += 1;
// seen[0..1] = my_pe, n_pes as this TU sees them.
void rdc_launch_put(int *dest, const int *src, int n, uint64_t *sig, int *seen, cudaStream_t s);
// rdc_put.cu: the put kernel (for rshmemx / nvshmemx_collective_launch_query_gridsize).
const void *rdc_put_kernel();
