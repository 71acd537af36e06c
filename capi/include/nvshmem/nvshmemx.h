// NVSHMEM source compatibility for rshmem: NVSHMEM's extension header. rshmem's nvshmem.h maps
// the nvshmemx_ names as well, so this header only includes it. Reference:
// docs/nvshmem-porting.md.
#ifndef RSHMEM_NVSHMEMX_H
#define RSHMEM_NVSHMEMX_H
#include "nvshmem.h"
#endif  // RSHMEM_NVSHMEMX_H
