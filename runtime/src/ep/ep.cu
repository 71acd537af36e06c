// The runtime's expert-parallel module: the dispatch/combine kernels of rshmem/ep.cuh
// (launched by runtime/src/ep/mod.rs).
#define RSHMEM_EP_KERNELS
#include "rshmem/rshmem.cuh"
#include "rshmem/ep.cuh"
