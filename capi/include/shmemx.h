/*
 * shmemx.h — rshmem extensions to OpenSHMEM. Nothing beyond shmem.h yet; included for programs
 * that expect the header to exist.
 */
#ifndef RSHMEM_SHMEMX_H
#define RSHMEM_SHMEMX_H
#include <shmem.h>
#endif
