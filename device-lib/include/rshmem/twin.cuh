// Host and device twins. A program compiled by nvcc that includes the C host API (rshmem.h,
// which defines RSHMEM_HOST_API before it includes this library) may call the calls that exist
// on both sides -- rshmem_my_pe, rshmem_n_pes, rshmem_ptr, the thread-scope RMA calls (p, g,
// put, get, putmem, getmem, their _nbi forms), the atomics, put_signal / putmem_signal,
// signal_op, signal_fetch, rshmem_fence, rshmem_quiet, rshmem_barrier_all, rshmem_sync_all,
// rshmem_barrier, rshmem_team_sync, rshmem_team_my_pe, rshmem_team_n_pes and
// rshmem_team_translate_pe -- from host code and from kernels by the same name, as with NVSHMEM.
// Such a call is then a `__host__ __device__` function: in kernels it is this library's device
// code, in host code it calls the host library's entry of the same name (declared by rshmem.h as
// rshmemi_host_NAME with the assembler name NAME).
//
// Without RSHMEM_HOST_API (NVRTC, or nvcc translation units that only include the device
// library) every call is device-only, as before.
//
//   RSHMEM_TWIN                 the qualifiers of a twin call
//   RSHMEM_TWIN_HOST_PASS       1 while nvcc compiles the host side of a twin, else 0
//   RSHMEM_TWIN_CALL(h, d...)   expands to the host expression h in the host pass, else to the
//                               device expression d (which may contain commas)
#pragma once

#if defined(RSHMEM_HOST_API) && defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define RSHMEM_TWIN static __host__ __device__ __forceinline__
#if defined(__CUDA_ARCH__)
#define RSHMEM_TWIN_HOST_PASS 0
#else
#define RSHMEM_TWIN_HOST_PASS 1
#endif
#else
#define RSHMEM_TWIN static __device__ __forceinline__
#define RSHMEM_TWIN_HOST_PASS 0
#endif

#if RSHMEM_TWIN_HOST_PASS
#define RSHMEM_TWIN_CALL(host_expr, ...) host_expr
#else
#define RSHMEM_TWIN_CALL(host_expr, ...) __VA_ARGS__
#endif

// For the typed families (macros that define one call per type and scope): TW is TWIN for the
// thread-scope forms that have a host twin and DEV for the warp and block forms.
#define RSHMEM_QUAL_TWIN RSHMEM_TWIN
#define RSHMEM_QUAL_DEV static __device__ __forceinline__
#define RSHMEM_BODY_TWIN(host_expr, ...) RSHMEM_TWIN_CALL(host_expr, __VA_ARGS__)
#define RSHMEM_BODY_DEV(host_expr, ...) __VA_ARGS__
