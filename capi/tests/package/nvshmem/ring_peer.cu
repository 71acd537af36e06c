// Part of the NVSHMEM-package test project: a second translation unit that includes the
// headers (the device library's state must still exist once in the program).
#include <nvshmem.h>

__device__ int ring_next(int pe, int npes) { return (pe + 1) % npes; }
