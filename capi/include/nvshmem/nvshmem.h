// NVSHMEM source compatibility for rshmem: a program written for NVIDIA's NVSHMEM builds
// unchanged against rshmem with this folder first on the include path:
//
//     nvcc -arch=sm_90 -I<rshmem>/capi/include/nvshmem -I<rshmem>/capi/include
//          -I<rshmem>/device-lib/include prog.cu -L<dir of librshmem.so> -lrshmem
//
// (one command line; no -rdc). Host C/C++ files that include it need CUDA's include folder
// (nvcc adds it; with gcc/g++ pass -I<cuda>/include). It maps NVSHMEM's names, types, constants
// and macros onto rshmem's C API (rshmem.h) and device library (rshmem/*.cuh): every NVSHMEM
// call rshmem has is a macro naming the rshmem call, so it works wherever the rshmem call works
// (host, device, or both).
// What rshmem does not support is a compile-time error naming the call:
//
//     error: static assertion failed with "rshmem: nvshmemx_culibrary_init is not supported
//     (use nvshmemx_cumodule_init with a module loaded by cuModuleLoad* ...)"
//
// never a silent no-op. A program that only contains such calls on paths it does not take may
// be built with -DRSHMEM_NVSHMEM_UNSUPPORTED_ABORTS: each such call then compiles, and when it is
// reached prints "rshmem: <call> is not supported (...)" and ends the process with exit status 1
// (in a kernel: prints and traps).
//
// This folder is separate from capi/include so that nobody gets these names by accident.
// Reference, including what differs from NVSHMEM: docs/nvshmem-porting.md.
#ifndef RSHMEM_NVSHMEM_H
#define RSHMEM_NVSHMEM_H

// NVSHMEM's headers bring in the CUDA runtime and driver headers and <assert.h> (programs use
// them having included only nvshmem.h); rshmem.h includes the runtime's when asked.
#ifndef RSHMEM_WITH_CUDA_RUNTIME
#define RSHMEM_WITH_CUDA_RUNTIME 1
#endif
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>
#include <cuda_runtime.h>
// The 16-bit float types before rshmem.h, so that the device library defines their reductions.
#if defined(__cplusplus)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define RSHMEM_COMPAT_HAVE_FP16 1
#else
#define RSHMEM_COMPAT_HAVE_FP16 0
#endif
#include "rshmem.h"

// nvcc translation units (not NVRTC) see the device library through rshmem.h.
#if defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define RSHMEM_COMPAT_NVCC 1
#define RSHMEM_COMPAT_HD __host__ __device__
#else
#define RSHMEM_COMPAT_NVCC 0
#define RSHMEM_COMPAT_HD
#endif

// ---------------------------------------------------------------------------------------------
// Types and constants.

typedef rshmem_team_t nvshmem_team_t;
typedef rshmem_team_config_t nvshmem_team_config_t;
#define NVSHMEM_TEAM_NUM_CONTEXTS RSHMEM_TEAM_NUM_CONTEXTS
#define NVSHMEM_TEAM_INVALID RSHMEM_TEAM_INVALID
#define NVSHMEM_TEAM_WORLD RSHMEM_TEAM_WORLD
#define NVSHMEM_TEAM_SHARED RSHMEM_TEAM_SHARED
#define NVSHMEMX_TEAM_NODE RSHMEM_TEAM_NODE

#define NVSHMEM_CMP_EQ RSHMEM_CMP_EQ
#define NVSHMEM_CMP_NE RSHMEM_CMP_NE
#define NVSHMEM_CMP_GT RSHMEM_CMP_GT
#define NVSHMEM_CMP_GE RSHMEM_CMP_GE
#define NVSHMEM_CMP_LT RSHMEM_CMP_LT
#define NVSHMEM_CMP_LE RSHMEM_CMP_LE

#define NVSHMEM_SIGNAL_SET RSHMEM_SIGNAL_SET
#define NVSHMEM_SIGNAL_ADD RSHMEM_SIGNAL_ADD

typedef rshmem_init_attr_t nvshmemx_init_attr_t;
typedef rshmem_uniqueid_t nvshmemx_uniqueid_t;
#define NVSHMEMX_INIT_ATTR_INITIALIZER RSHMEM_INIT_ATTR_INITIALIZER
#define NVSHMEMX_UNIQUEID_INITIALIZER RSHMEM_UNIQUEID_INITIALIZER
#define NVSHMEMX_INIT_WITH_UNIQUEID RSHMEM_INIT_WITH_UNIQUEID
#define NVSHMEMX_INIT_WITH_MPI_COMM RSHMEM_INIT_WITH_MPI_COMM
// NVSHMEMX_INIT_WITH_SHMEM (start-up under an OpenSHMEM library) is not defined: rshmem starts
// under rshmemrun, mpirun/srun (PMI), an MPI communicator or a unique id.

// Return codes: NVSHMEMX_SUCCESS is 0 as in NVSHMEM; every failure is non-zero, and rshmem prints
// "rshmem: <call>: <cause>" on stderr. NVSHMEM's other codes are all rshmem's internal error.
#define NVSHMEMX_SUCCESS RSHMEM_SUCCESS
#define NVSHMEMX_ERROR_INTERNAL RSHMEM_ERROR_INTERNAL

// Sets the communicator of NVSHMEMX_INIT_WITH_MPI_COMM (mpi_comm points at an MPI_Comm).
static inline int nvshmemx_set_attr_mpi_comm_args(void *mpi_comm, nvshmemx_init_attr_t *attr) {
    if (attr == NULL) {
        rshmemi_report("nvshmemx_set_attr_mpi_comm_args", "attr is NULL");
        return RSHMEM_ERROR_INVALID_VALUE;
    }
    attr->mpi_comm = mpi_comm;
    return RSHMEM_SUCCESS;
}

// The error print NVSHMEM's headers export (NVSHMEM's perftests use it).
#define NVSHMEMI_ERROR_PRINT(...)                                                                \
    do {                                                                                         \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                          \
        fprintf(stderr, __VA_ARGS__);                                                            \
        fputc('\n', stderr);                                                                     \
    } while (0)

#define NVSHMEM_VENDOR_STRING "rshmem"
#define NVSHMEM_MAX_NAME_LEN RSHMEM_MAX_NAME_LEN
#define NVSHMEM_STATUS_NOT_INITIALIZED RSHMEM_STATUS_NOT_INITIALIZED
#define NVSHMEM_STATUS_IS_INITIALIZED RSHMEM_STATUS_IS_INITIALIZED

// ---------------------------------------------------------------------------------------------
// GPU selection. NVSHMEM programs select their GPU after init with
// cudaSetDevice(nvshmem_team_my_pe(NVSHMEMX_TEAM_NODE)), which assumes one GPU per PE of the
// host. rshmem also runs several PEs per GPU (under CUDA MPS), where that index can be past the
// last GPU: in programs built with these headers cudaSetDevice(d) with d >= the number of GPUs
// selects GPU d modulo that number (the GPU rshmem gives that PE), instead of failing. Every
// other call is CUDA's.
#if defined(__cplusplus)
static inline cudaError_t rshmem_compat_set_device(int device) {
    int count = 0;
    if (device > 0 && cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && device >= count) {
        device %= count;
    }
    return cudaSetDevice(device);
}
#define cudaSetDevice rshmem_compat_set_device
#endif

// ---------------------------------------------------------------------------------------------
// Support for the generated map (rshmem_nvshmem_map.h).

// Picks the host or the device expression of a call that exists on both sides.
#if defined(__CUDA_ARCH__)
#define RSHMEM_COMPAT_PICK(HOST, DEV) DEV
#else
#define RSHMEM_COMPAT_PICK(HOST, DEV) HOST
#endif

// Host side of a blocking team collective: rc is the stream-ordered call's result on the default
// stream; a successful call is completed before returning (NVSHMEM's host collectives return
// with the collective done).
static inline int rshmem_compat_sync(const char *call, int rc) {
    if (rc != RSHMEM_SUCCESS) return rc;
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)0);
    if (e != cudaSuccess) {
        fprintf(stderr, "rshmem: %s: synchronizing the default stream failed: %s\n", call,
                cudaGetErrorString(e));
        return RSHMEM_ERROR_INTERNAL;
    }
    return RSHMEM_SUCCESS;
}

// The host library's entry NAME: under nvcc rshmem.h declares it as rshmemi_host_NAME (NAME
// itself is the device library's), elsewhere as NAME.
#if RSHMEM_COMPAT_NVCC
#define RSHMEM_COMPAT_HOST_ENTRY(NAME) rshmemi_host_##NAME
#else
#define RSHMEM_COMPAT_HOST_ENTRY(NAME) NAME
#endif

#if RSHMEM_COMPAT_NVCC
// A thread-scope team collective: the device call in kernels, the host library's on the host.
#define RSHMEM_COMPAT_COLL(NAME, PARAMS, DEV, HOST)                                              \
    static __host__ __device__ __forceinline__ int NAME PARAMS {                                 \
        return RSHMEM_COMPAT_PICK(HOST, DEV);                                                    \
    }
#define RSHMEM_COMPAT_TWIN16(RET, NAME, PARAMS, BODY)                                            \
    static __host__ __device__ __forceinline__ RET NAME PARAMS { return BODY; }
#define RSHMEM_COMPAT_DEV16(RET, NAME, PARAMS, BODY)                                             \
    static __device__ __forceinline__ RET NAME PARAMS { return BODY; }
#else
#define RSHMEM_COMPAT_COLL(NAME, PARAMS, DEV, HOST)                                              \
    static inline int NAME PARAMS { return HOST; }
#define RSHMEM_COMPAT_TWIN16(RET, NAME, PARAMS, BODY)                                            \
    static inline RET NAME PARAMS { return BODY; }
#define RSHMEM_COMPAT_DEV16(RET, NAME, PARAMS, BODY)
#endif
#define RSHMEM_COMPAT_HOST16(RET, NAME, PARAMS, BODY) static inline RET NAME PARAMS { return BODY; }

#if RSHMEM_COMPAT_HAVE_FP16
// 16-bit floats travel as their bit patterns.
template <typename T>
static RSHMEM_COMPAT_HD inline uint16_t rshmem_compat_bits(T v) {
    static_assert(sizeof(T) == 2, "16-bit type");
    uint16_t u;
    memcpy(&u, &v, 2);
    return u;
}
template <typename T>
static RSHMEM_COMPAT_HD inline T rshmem_compat_from_bits(uint16_t u) {
    static_assert(sizeof(T) == 2, "16-bit type");
    T v;
    memcpy(&v, &u, 2);
    return v;
}
#endif

// Unsupported calls. C++: a function template whose body fails a static_assert naming the call
// when a call to it is compiled (declaring it costs nothing). With
// RSHMEM_NVSHMEM_UNSUPPORTED_ABORTS it compiles and fails when reached. C: the call expands to an
// undeclared identifier that names it.
#if defined(__cplusplus)
namespace rshmem_compat {
template <typename... A>
struct never {
    static constexpr bool value = false;
};
// The result of an unsupported call: converts to whatever the program expects.
struct any {
    template <typename T>
    RSHMEM_COMPAT_HD operator T() const {
        return T();
    }
};
static RSHMEM_COMPAT_HD inline void unsupported(const char *call, const char *why) {
#if defined(__CUDA_ARCH__)
    printf("rshmem: %s is not supported (%s)\n", call, why);
    __trap();
#else
    fprintf(stderr, "rshmem: %s is not supported (%s)\n", call, why);
    exit(1);
#endif
}
}  // namespace rshmem_compat
#if defined(RSHMEM_NVSHMEM_UNSUPPORTED_ABORTS)
#define RSHMEM_COMPAT_UNSUPPORTED(NAME, WHY)                                                     \
    template <typename... A>                                                                     \
    static RSHMEM_COMPAT_HD inline rshmem_compat::any NAME(A...) {                               \
        rshmem_compat::unsupported(#NAME, WHY);                                                  \
        return rshmem_compat::any();                                                             \
    }
#else
#define RSHMEM_COMPAT_UNSUPPORTED(NAME, WHY)                                                     \
    template <typename... A>                                                                     \
    static RSHMEM_COMPAT_HD inline rshmem_compat::any NAME(A...) {                               \
        static_assert(rshmem_compat::never<A...>::value,                                         \
                      "rshmem: " #NAME " is not supported (" WHY ")");                          \
        return rshmem_compat::any();                                                             \
    }
#endif
#endif

#include "rshmem_nvshmem_map.h"

#endif  // RSHMEM_NVSHMEM_H
