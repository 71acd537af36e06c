// Part of the NVSHMEM-package test project: built by the C++ compiler, not nvcc; nvshmem.h
// includes cuda.h and cuda_runtime.h, whose folder nvshmem::nvshmem_host provides.
#include <nvshmem.h>
#include <stdio.h>

int host_check(int me, int npes, int got) {
    printf("%d: received message %d\n", me, got);
    return got == (me + npes - 1) % npes ? 0 : 1;
}
