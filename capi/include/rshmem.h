/*
 * rshmem.h — the host C API of rshmem (librshmem.so / librshmem.a), for C and CUDA C++.
 *
 * A program that includes this header and links with -lrshmem uses rshmem's GPU backend when
 * the PE has a CUDA GPU (symmetric memory in GPU memory, device library for kernels) and its
 * CPU backend otherwise (symmetric memory in host memory; every *_on_stream call then fails
 * with RSHMEM_ERROR_UNSUPPORTED). Reference: docs/c-cuda-api.md.
 *
 * Words used below:
 *   collective   every PE (of the team) makes the call, in the same order as its other
 *                collective calls;
 *   one-sided    only the calling PE takes part;
 *   symmetric    an address returned by rshmem_malloc/calloc/align on this PE; it names the
 *                same object on every PE;
 *   stream-ordered  the call is enqueued on a cudaStream_t and takes effect after the work
 *                queued before it; it returns at once (argument errors are reported before
 *                anything is enqueued).
 *
 * Errors. Calls that return int return RSHMEM_SUCCESS (0) or one of the rshmem_error_t codes.
 * Every failure prints `rshmem: PE <pe>: <call>: <cause>` on stderr. Calls that cannot return a
 * code (void calls, calls returning a value such as rshmem_int_g) print the same message and
 * end the job (the process exits with status 1; rshmemrun or mpirun then stops the other PEs).
 * The allocation calls return NULL after printing. Nothing fails silently. A call made before
 * rshmem_init (or after rshmem_finalize) fails in its own way above (a code, NULL, or the end of
 * the job), naming itself, except rshmem_get_uniqueid, rshmem_set_attr_uniqueid_args,
 * rshmem_init_status, rshmem_info_get_version, rshmem_info_get_name, rshmemi_report and the
 * init calls, which are allowed before init.
 *
 * Host+device twins. The calls that the device library (the rshmem/ headers of
 * device-lib/include) also has are declared through RSHMEM_HOST_TWIN with the device library's
 * name and C signature. Compiled by a C or C++ compiler they are ordinary functions of
 * librshmem. Compiled by nvcc, this header defines RSHMEM_HOST_API and includes the device
 * library at its end: for the calls the device library makes host+device (docs/device.md,
 * "Host twins") the same name then works in host code (it calls librshmem) and in kernels (the
 * device code); the others stay device-only in nvcc translation units.
 */
#ifndef RSHMEM_H
#define RSHMEM_H

#include <stddef.h>
#include <stdint.h>

#if (defined(__CUDACC__) && !defined(__CUDACC_RTC__)) || defined(RSHMEM_WITH_CUDA_RUNTIME)
#include <cuda_runtime.h>
#include <stdio.h>
#define RSHMEMI_HAVE_CUDA_RUNTIME 1
#else
/* The CUDA runtime's stream type (the driver's CUstream), declared without the CUDA headers. */
typedef struct CUstream_st *cudaStream_t;
#endif

#if defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define RSHMEMI_NVCC 1
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Return codes                                                                               */
/* ------------------------------------------------------------------------------------------ */

typedef enum rshmem_error {
    RSHMEM_SUCCESS = 0,
    /* A bad argument: PE out of range, address outside the symmetric heap, NULL buffer,
       unknown constant, destroyed team, ... */
    RSHMEM_ERROR_INVALID_VALUE = 1,
    /* Called before rshmem_init or after rshmem_finalize. */
    RSHMEM_ERROR_NOT_INITIALIZED = 2,
    /* Not available here: a stream call on the CPU backend, a PE that is not reachable
       the way the call needs, MPI not found in the process, ... */
    RSHMEM_ERROR_UNSUPPORTED = 3,
    RSHMEM_ERROR_OUT_OF_MEMORY = 4,
    /* A CUDA driver call failed (the message names it and its status). */
    RSHMEM_ERROR_CUDA = 5,
    /* A blocking wait passed RSHMEM_TIMEOUT (the message names the PE waited on). */
    RSHMEM_ERROR_TIMEOUT = 6,
    /* A PE of the job is gone. */
    RSHMEM_ERROR_PE_LOST = 7,
    /* The PEs could not meet at init (rendezvous, unique id, launcher variables). */
    RSHMEM_ERROR_BOOTSTRAP = 8,
    /* An operating-system call failed. */
    RSHMEM_ERROR_SYSTEM = 9,
    /* Collective calls differ between PEs (RSHMEM_DEBUG_SYMMETRY=1), init called while
       rshmem runs, or another state that forbids the call. */
    RSHMEM_ERROR_STATE = 10,
    /* A bug inside rshmem. */
    RSHMEM_ERROR_INTERNAL = 11
} rshmem_error_t;

/* ------------------------------------------------------------------------------------------ */
/* Constants and type tables, shared with the device library                                   */
/* ------------------------------------------------------------------------------------------ */

typedef int32_t rshmem_team_t;

/* RSHMEM_TEAM_INVALID, _WORLD, _SHARED, _NODE; RSHMEM_CMP_EQ, _NE, _GT, _GE, _LT, _LE;
   RSHMEM_SIGNAL_SET, _ADD; RSHMEM_SIZE_MAX; and one X(TYPENAME, C type) list per group of
   typed calls (RSHMEM_FOR_*_TYPES). Defined once, in the device library's rshmem/type_lists.h
   (compile with -I<device-lib/include>, or the installed include folder, which holds
   rshmem/). */
#include "rshmem/type_lists.h"

/* ------------------------------------------------------------------------------------------ */
/* Host+device twins                                                                          */
/* ------------------------------------------------------------------------------------------ */

#ifndef RSHMEM_HOST_TWIN
#if defined(RSHMEMI_NVCC)
/* Under nvcc the device library defines NAME (host and device); its host branch calls
   rshmemi_host_NAME, which is librshmem's exported NAME. */
#define RSHMEM_HOST_TWIN(ret, name, params) \
    extern "C" ret rshmemi_host_##name params __asm__(#name);
#else
#define RSHMEM_HOST_TWIN(ret, name, params) ret name params;
#endif
#endif


/* ========================================================================================== */
/* Lifecycle                                                                                  */
/* ========================================================================================== */

/* A job's unique id: rank 0's rendezvous address and the job secret, as NUL-terminated text
   (`host:port#<32 hex digits>`). Made by rshmem_get_uniqueid on one rank and passed to the
   others by the program (a file, MPI, its framework's store): copy all of its bytes. */
typedef struct rshmem_uniqueid {
    int version;
    char internal[124];
} rshmem_uniqueid_t;
#define RSHMEM_UNIQUEID_VERSION 1
#define RSHMEM_UNIQUEID_INITIALIZER {RSHMEM_UNIQUEID_VERSION, {0}}

/* Settings of rshmem_init_attr. Start from RSHMEM_INIT_ATTR_INITIALIZER. */
typedef struct rshmem_init_attr {
    int version;
    /* RSHMEM_INIT_WITH_MPI_COMM: points at the program's MPI_Comm (e.g. &MPI_COMM_WORLD's
       copy in a variable); its ranks become the PEs. */
    void *mpi_comm;
    /* RSHMEM_INIT_WITH_UNIQUEID: this rank, the number of ranks, and the job's id (set them
       with rshmem_set_attr_uniqueid_args). */
    int rank;
    int nranks;
    rshmem_uniqueid_t uid;
} rshmem_init_attr_t;
#define RSHMEM_INIT_ATTR_VERSION 1
#define RSHMEM_INIT_ATTR_INITIALIZER \
    {RSHMEM_INIT_ATTR_VERSION, NULL, -1, 0, RSHMEM_UNIQUEID_INITIALIZER}

/* Flags of rshmem_init_attr (one of them, or 0 for rshmem_init's behaviour). */
#define RSHMEM_INIT_WITH_MPI_COMM (1u << 1)
#define RSHMEM_INIT_WITH_UNIQUEID (1u << 3)

/* Collective (every PE of the job). Starts rshmem with the launcher's variables (rshmemrun,
   mpirun, srun, torchrun-style RANK/WORLD_SIZE, ...). The GPU is the device of the CUDA
   context current on the calling thread when there is one (cudaSetDevice followed by any CUDA
   runtime call), else chosen by the PE's rank on its host, or RSHMEM_DEVICE; on return the
   device's primary context (the one the CUDA runtime uses) is current on the calling thread.
   Without a GPU (or with RSHMEM_BACKEND=cpu) the CPU backend is used. Returns RSHMEM_SUCCESS
   or an error code (RSHMEM_ERROR_STATE when rshmem is already running). */
int rshmem_init(void);

/* Collective. rshmem_init with the job given by `attr`:
     flags 0                           as rshmem_init;
     RSHMEM_INIT_WITH_UNIQUEID         rank attr->rank of attr->nranks, meeting at attr->uid
                                       (no launcher variables are read);
     RSHMEM_INIT_WITH_MPI_COMM         the ranks of the MPI communicator *attr->mpi_comm (rank 0
                                       makes a unique id and broadcasts it with MPI_Bcast). The
                                       program must have initialized MPI; librshmem finds
                                       MPI_Comm_rank, MPI_Comm_size and MPI_Bcast in the process
                                       at run time (Open MPI and MPICH-compatible ABIs) and does
                                       not link with MPI. */
int rshmem_init_attr(unsigned int flags, rshmem_init_attr_t *attr);

/* Local, allowed before init. Makes a fresh unique id whose rendezvous address is this host
   (RSHMEM_TCP_ADDR if set, else the host name's address, else 127.0.0.1) and a free port.
   Call it on the rank that will be rank 0. */
int rshmem_get_uniqueid(rshmem_uniqueid_t *uid);

/* Local, allowed before init. Fills attr's unique-id fields. */
int rshmem_set_attr_uniqueid_args(int rank, int nranks, const rshmem_uniqueid_t *uid,
                                  rshmem_init_attr_t *attr);

/* Collective. Completes every outstanding operation, meets every PE, releases the symmetric
   heap. Symmetric addresses and team handles are invalid afterwards. */
int rshmem_finalize(void);

/* Ends the job with `status`: every PE of this host exits with it at once (a signal), then the
   caller; PEs of other hosts see this PE gone at their next wait on it (or the launcher stops
   them). May be called by one PE alone, at any time after init. */
#if defined(__cplusplus)
[[noreturn]]
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Noreturn
#endif
void rshmem_global_exit(int status);

/* Local, allowed before init: RSHMEM_STATUS_NOT_INITIALIZED or RSHMEM_STATUS_IS_INITIALIZED. */
#define RSHMEM_STATUS_NOT_INITIALIZED 0
#define RSHMEM_STATUS_IS_INITIALIZED 2
int rshmem_init_status(void);

/* Local, allowed before init: the library's version and name ("rshmem <version>", at most
   RSHMEM_MAX_NAME_LEN bytes with the NUL). */
#define RSHMEM_MAX_NAME_LEN 256
void rshmem_info_get_version(int *major, int *minor);
void rshmem_info_get_name(char *name);

/* Prints `rshmem: PE <pe>: <call>: <msg>` on stderr (for this header's inline functions). */
void rshmemi_report(const char *call, const char *msg);

/* ========================================================================================== */
/* Queries                                                                                    */
/* ========================================================================================== */

/* Local. This PE's number, 0..rshmem_n_pes()-1. */
RSHMEM_HOST_TWIN(int, rshmem_my_pe, (void))
/* Local. Number of PEs in the job. */
RSHMEM_HOST_TWIN(int, rshmem_n_pes, (void))
/* Local. The address of PE pe's copy of the symmetric object at ptr that this process can
   load from and store to (a device address on the GPU backend), or NULL when there is none
   (pe on another host, out of range, ptr not symmetric). */
RSHMEM_HOST_TWIN(void *, rshmem_ptr, (const void *ptr, int pe))

/* ========================================================================================== */
/* Symmetric memory (collective: every PE, same sizes, same order)                           */
/* ========================================================================================== */

/* size bytes of symmetric memory (GPU memory on the GPU backend), or NULL after printing the
   cause (out of memory, different sizes on different PEs with RSHMEM_DEBUG_SYMMETRY=1). Ends
   with a barrier: every PE's copy exists when it returns. size 0 returns NULL. */
void *rshmem_malloc(size_t size);
/* rshmem_malloc of count*size bytes, zeroed. */
void *rshmem_calloc(size_t count, size_t size);
/* rshmem_malloc aligned to `alignment` (a power of two). */
void *rshmem_align(size_t alignment, size_t size);
/* Frees a block of rshmem_malloc/calloc/align (NULL: nothing). Collective. */
void rshmem_free(void *ptr);

/* ========================================================================================== */
/* User buffers (NVSHMEM's nvshmemx_buffer_register and _register_symmetric)                 */
/* ========================================================================================== */

/* Local. Registers [addr, addr+length) as a local source or destination of RMA. rshmem's
   transports need no registration of local buffers, so this checks the range (not NULL, not
   empty, not symmetric memory, no overlap with a registered buffer) and records it. Returns 0,
   or RSHMEM_ERROR_INVALID_VALUE after printing the cause. */
int rshmemx_buffer_register(void *addr, size_t length);
/* Local. Ends the registration that starts at addr (RSHMEM_ERROR_INVALID_VALUE: none does). */
int rshmemx_buffer_unregister(void *addr);
/* Local. Ends every registration of this PE. */
void rshmemx_buffer_unregister_all(void);

/* Collective (every PE, the same size; NVSHMEM's nvshmemx_buffer_register_symmetric). Makes
   buf, this PE's buffer of CUDA VMM memory, symmetric: returns an address at which every PE's
   calls (host, stream and device) reach the matching buffer of the target PE, like memory of
   rshmem_malloc. buf must be the address a cuMemCreate allocation of this PE's GPU is mapped
   at (cuMemMap), created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes;
   size a multiple of its allocation granularity; flags 0. The returned address and buf show
   the same memory. It is placed near the top of the PE's slice of the symmetric address range
   and the heap stops growing below it. Needs the GPU backend and every PE on one host.
   Returns NULL on every PE, after printing the cause, when any PE's buffer or size is refused
   (NULL, 0, cudaMalloc or host memory, no POSIX fd handle type, another GPU, sizes that differ
   between PEs), on the CPU backend, or when the PEs span hosts. */
void *rshmemx_buffer_register_symmetric(void *buf, size_t size, int flags);
/* Collective. Ends a registration: mmap_ptr is what rshmemx_buffer_register_symmetric
   returned, size the size it was given. Completes this PE's operations, waits for its GPU
   (cuCtxSynchronize) and for every PE, then unmaps; buf stays mapped and the program's to
   free. Returns 0, or an RSHMEM_ERROR_* code after printing the cause. */
int rshmemx_buffer_unregister_symmetric(void *mmap_ptr, size_t size);

/* ========================================================================================== */
/* CUDA modules the program loads itself (NVSHMEM's nvshmemx_cumodule_init)                  */
/* ========================================================================================== */

struct CUmod_st; /* CUmodule is `struct CUmod_st *` (cuda.h) */

/* Local. module: a CUmodule this PE loaded (cuModuleLoad*, in the context rshmem uses) from an
   image that includes the device library. Installs this PE's device state in the module's
   rshmem_state and keeps it current (heap growth) until rshmemx_cumodule_finalize or
   rshmem_finalize. Needs rshmem initialized on a PE with a GPU. Returns 0, or an
   RSHMEM_ERROR_* code after printing the cause (NULL module, no rshmem_state in it, a state of
   another size, not initialized). */
int rshmemx_cumodule_init(struct CUmod_st *module);
/* Local. Writes a zero state into the module (its kernels then trap with a message instead of
   using a stale heap) and stops updating it. Call it before unloading the module. Returns 0, or
   RSHMEM_ERROR_INVALID_VALUE for a module not given to rshmemx_cumodule_init. */
int rshmemx_cumodule_finalize(struct CUmod_st *module);

/* ========================================================================================== */
/* One-sided RMA from the host                                                               */
/* ========================================================================================== */
/* dest (puts) / src (gets) are symmetric; the local buffer is host memory (use the
   rshmemx_*_on_stream calls for device buffers). A put returns when its source may be
   reused; its data is delivered after rshmem_quiet (or a barrier); rshmem_fence orders puts
   to one PE. A get returns with the data. The _nbi forms may leave delivery of put data to
   rshmem_quiet. */

RSHMEM_HOST_TWIN(void, rshmem_putmem, (void *dest, const void *src, size_t nbytes, int pe))
RSHMEM_HOST_TWIN(void, rshmem_putmem_nbi, (void *dest, const void *src, size_t nbytes, int pe))
RSHMEM_HOST_TWIN(void, rshmem_getmem, (void *dest, const void *src, size_t nbytes, int pe))
RSHMEM_HOST_TWIN(void, rshmem_getmem_nbi, (void *dest, const void *src, size_t nbytes, int pe))

/* rshmem_TYPE_p (store one element), rshmem_TYPE_g (load one element), rshmem_TYPE_put,
   rshmem_TYPE_get and their _nbi forms, for every RMA type. */
#define RSHMEMI_DECL_RMA(NAME, T)                                                              \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_p, (T * dest, T value, int pe))                     \
    RSHMEM_HOST_TWIN(T, rshmem_##NAME##_g, (const T *src, int pe))                             \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_put, (T * dest, const T *src, size_t nelems, int pe)) \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_put_nbi,                                            \
                     (T * dest, const T *src, size_t nelems, int pe))                          \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_get, (T * dest, const T *src, size_t nelems, int pe)) \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_get_nbi,                                            \
                     (T * dest, const T *src, size_t nelems, int pe))
RSHMEM_FOR_RMA_TYPES(RSHMEMI_DECL_RMA)
#undef RSHMEMI_DECL_RMA

/* ========================================================================================== */
/* Signals                                                                                    */
/* ========================================================================================== */
/* A signal is a symmetric uint64_t. put_signal puts the data, then updates sig_addr on pe
   with sig_op (RSHMEM_SIGNAL_SET or RSHMEM_SIGNAL_ADD): a PE that sees the signal sees the
   data. One-sided. */

RSHMEM_HOST_TWIN(void, rshmem_putmem_signal,
                 (void *dest, const void *src, size_t nbytes, uint64_t *sig_addr,
                  uint64_t signal, int sig_op, int pe))
RSHMEM_HOST_TWIN(void, rshmem_putmem_signal_nbi,
                 (void *dest, const void *src, size_t nbytes, uint64_t *sig_addr,
                  uint64_t signal, int sig_op, int pe))
#define RSHMEMI_DECL_PUT_SIGNAL(NAME, T)                                                       \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_put_signal,                                         \
                     (T * dest, const T *src, size_t nelems, uint64_t *sig_addr,               \
                      uint64_t signal, int sig_op, int pe))                                    \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_put_signal_nbi,                                     \
                     (T * dest, const T *src, size_t nelems, uint64_t *sig_addr,               \
                      uint64_t signal, int sig_op, int pe))
RSHMEM_FOR_RMA_TYPES(RSHMEMI_DECL_PUT_SIGNAL)
#undef RSHMEMI_DECL_PUT_SIGNAL

/* One-sided. Atomically updates the signal sig_addr on pe (relaxed: no ordering of earlier
   puts without rshmem_fence). */
RSHMEM_HOST_TWIN(void, rshmem_signal_op,
                 (uint64_t * sig_addr, uint64_t signal, int sig_op, int pe))
/* Local. Atomically reads this PE's signal (acquire). */
RSHMEM_HOST_TWIN(uint64_t, rshmem_signal_fetch, (const uint64_t *sig_addr))
/* Local, blocking. Waits until this PE's signal satisfies `signal cmp cmp_value`
   (RSHMEM_CMP_*), returns its value (acquire); bounded by RSHMEM_TIMEOUT. */
RSHMEM_HOST_TWIN(uint64_t, rshmem_signal_wait_until,
                 (const uint64_t *sig_addr, int cmp, uint64_t cmp_value))

/* ========================================================================================== */
/* Atomics (one-sided; dest symmetric and naturally aligned)                                  */
/* ========================================================================================== */

#define RSHMEMI_DECL_AMO_EXT(NAME, T)                                                          \
    RSHMEM_HOST_TWIN(T, rshmem_##NAME##_atomic_fetch, (const T *source, int pe))               \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_atomic_set, (T * dest, T value, int pe))            \
    RSHMEM_HOST_TWIN(T, rshmem_##NAME##_atomic_swap, (T * dest, T value, int pe))
#define RSHMEMI_DECL_AMO_STD(NAME, T)                                                          \
    RSHMEMI_DECL_AMO_EXT(NAME, T)                                                              \
    RSHMEM_HOST_TWIN(T, rshmem_##NAME##_atomic_compare_swap,                                   \
                     (T * dest, T cond, T value, int pe))                                      \
    RSHMEM_HOST_TWIN(T, rshmem_##NAME##_atomic_fetch_inc, (T * dest, int pe))                  \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_atomic_inc, (T * dest, int pe))                     \
    RSHMEM_HOST_TWIN(T, rshmem_##NAME##_atomic_fetch_add, (T * dest, T value, int pe))         \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_atomic_add, (T * dest, T value, int pe))
#define RSHMEMI_DECL_AMO_BITWISE(NAME, T)                                                      \
    RSHMEM_HOST_TWIN(T, rshmem_##NAME##_atomic_fetch_and, (T * dest, T value, int pe))         \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_atomic_and, (T * dest, T value, int pe))            \
    RSHMEM_HOST_TWIN(T, rshmem_##NAME##_atomic_fetch_or, (T * dest, T value, int pe))          \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_atomic_or, (T * dest, T value, int pe))             \
    RSHMEM_HOST_TWIN(T, rshmem_##NAME##_atomic_fetch_xor, (T * dest, T value, int pe))         \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_atomic_xor, (T * dest, T value, int pe))
RSHMEM_FOR_AMO_TYPES(RSHMEMI_DECL_AMO_STD)
RSHMEM_FOR_AMO_FLOAT_TYPES(RSHMEMI_DECL_AMO_EXT)
RSHMEM_FOR_AMO_BITWISE_TYPES(RSHMEMI_DECL_AMO_BITWISE)
#undef RSHMEMI_DECL_AMO_EXT
#undef RSHMEMI_DECL_AMO_STD
#undef RSHMEMI_DECL_AMO_BITWISE

/* ========================================================================================== */
/* Point-to-point synchronization (local: this PE's symmetric variables; acquire)             */
/* ========================================================================================== */
/* status may be NULL; elements with status[i] != 0 are skipped. Waits are bounded by
   RSHMEM_TIMEOUT. _any returns an index (RSHMEM_SIZE_MAX when none is selected), _some the
   number of indices written to `indices`. */

#define RSHMEMI_DECL_WAIT(NAME, T)                                                             \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_wait_until, (const T *ivar, int cmp, T cmp_value))   \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_wait_until_all,                                     \
                     (const T *ivars, size_t nelems, const int *status, int cmp, T cmp_value)) \
    RSHMEM_HOST_TWIN(size_t, rshmem_##NAME##_wait_until_any,                                   \
                     (const T *ivars, size_t nelems, const int *status, int cmp, T cmp_value)) \
    RSHMEM_HOST_TWIN(size_t, rshmem_##NAME##_wait_until_some,                                  \
                     (const T *ivars, size_t nelems, size_t *indices, const int *status,       \
                      int cmp, T cmp_value))                                                   \
    RSHMEM_HOST_TWIN(void, rshmem_##NAME##_wait_until_all_vector,                              \
                     (const T *ivars, size_t nelems, const int *status, int cmp,               \
                      const T *cmp_values))                                                    \
    RSHMEM_HOST_TWIN(size_t, rshmem_##NAME##_wait_until_any_vector,                            \
                     (const T *ivars, size_t nelems, const int *status, int cmp,               \
                      const T *cmp_values))                                                    \
    RSHMEM_HOST_TWIN(size_t, rshmem_##NAME##_wait_until_some_vector,                           \
                     (const T *ivars, size_t nelems, size_t *indices, const int *status,       \
                      int cmp, const T *cmp_values))                                           \
    RSHMEM_HOST_TWIN(int, rshmem_##NAME##_test, (const T *ivar, int cmp, T cmp_value))         \
    RSHMEM_HOST_TWIN(int, rshmem_##NAME##_test_all,                                            \
                     (const T *ivars, size_t nelems, const int *status, int cmp, T cmp_value)) \
    RSHMEM_HOST_TWIN(size_t, rshmem_##NAME##_test_any,                                         \
                     (const T *ivars, size_t nelems, const int *status, int cmp, T cmp_value)) \
    RSHMEM_HOST_TWIN(size_t, rshmem_##NAME##_test_some,                                        \
                     (const T *ivars, size_t nelems, size_t *indices, const int *status,       \
                      int cmp, T cmp_value))                                                   \
    RSHMEM_HOST_TWIN(int, rshmem_##NAME##_test_all_vector,                                     \
                     (const T *ivars, size_t nelems, const int *status, int cmp,               \
                      const T *cmp_values))                                                    \
    RSHMEM_HOST_TWIN(size_t, rshmem_##NAME##_test_any_vector,                                  \
                     (const T *ivars, size_t nelems, const int *status, int cmp,               \
                      const T *cmp_values))                                                    \
    RSHMEM_HOST_TWIN(size_t, rshmem_##NAME##_test_some_vector,                                 \
                     (const T *ivars, size_t nelems, size_t *indices, const int *status,       \
                      int cmp, const T *cmp_values))
RSHMEM_FOR_AMO_TYPES(RSHMEMI_DECL_WAIT)
#undef RSHMEMI_DECL_WAIT

/* ========================================================================================== */
/* Ordering, completion, barriers                                                             */
/* ========================================================================================== */

/* One-sided. Orders this PE's earlier puts, atomics and signals to each PE before its later
   ones. */
RSHMEM_HOST_TWIN(void, rshmem_fence, (void))
/* One-sided. Completes this PE's earlier host-issued puts, gets, atomics and signals: they are
   visible to every PE when it returns. (Work on the program's streams is not included: see
   rshmemx_quiet_on_stream.) */
RSHMEM_HOST_TWIN(void, rshmem_quiet, (void))
/* Collective. Completes this PE's puts (like rshmem_quiet) and waits for every PE. */
RSHMEM_HOST_TWIN(void, rshmem_barrier_all, (void))
/* Collective. Waits for every PE; orders earlier stores and puts before later ones on every PE
   but does not complete host-issued puts to other hosts. */
RSHMEM_HOST_TWIN(void, rshmem_sync_all, (void))
/* Collective over the team: rshmem_barrier_all / rshmem_sync_all restricted to `team`. */
RSHMEM_HOST_TWIN(void, rshmem_barrier, (rshmem_team_t team))
RSHMEM_HOST_TWIN(void, rshmem_team_sync, (rshmem_team_t team))

/* ========================================================================================== */
/* Teams                                                                                      */
/* ========================================================================================== */
/* A team handle is the same number on the host and in kernels (pass it to a kernel as an
   argument). RSHMEM_TEAM_WORLD, _SHARED (PEs sharing memory: this host) and _NODE (this host)
   are predefined. */

/* Local. This PE's number in team, or -1 when it is not a member / the handle names no team. */
RSHMEM_HOST_TWIN(int, rshmem_team_my_pe, (rshmem_team_t team))
/* Local. Number of PEs in team, or -1 when the handle names no team. */
RSHMEM_HOST_TWIN(int, rshmem_team_n_pes, (rshmem_team_t team))
/* Local. The number in dest of team PE pe of src, or -1. */
RSHMEM_HOST_TWIN(int, rshmem_team_translate_pe, (rshmem_team_t src, int pe, rshmem_team_t dest))

/* Settings of a new team (OpenSHMEM's shmem_team_config_t). */
typedef struct rshmem_team_config {
    int num_contexts;
} rshmem_team_config_t;
#define RSHMEM_TEAM_NUM_CONTEXTS (1l << 0)

/* Collective over parent. Makes the team of parent PEs start, start+stride, ... (size of
   them); *new_team is its handle on its members and RSHMEM_TEAM_INVALID on the other parent
   PEs. config may be NULL (config_mask says which fields to read). */
int rshmem_team_split_strided(rshmem_team_t parent, int start, int stride, int size,
                              const rshmem_team_config_t *config, long config_mask,
                              rshmem_team_t *new_team);
/* Collective over parent. Rows of xrange parent PEs (*xaxis_team: this PE's row) and the
   columns (*yaxis_team). Configs may be NULL. */
int rshmem_team_split_2d(rshmem_team_t parent, int xrange,
                         const rshmem_team_config_t *xaxis_config, long xaxis_mask,
                         rshmem_team_t *xaxis_team, const rshmem_team_config_t *yaxis_config,
                         long yaxis_mask, rshmem_team_t *yaxis_team);
/* Local. The team's settings. */
int rshmem_team_get_config(rshmem_team_t team, long config_mask, rshmem_team_config_t *config);
/* Collective over team. Destroys a team made by a split (the predefined teams cannot be
   destroyed); its handle may be reused by a later split. */
void rshmem_team_destroy(rshmem_team_t team);

/* ========================================================================================== */
/* Collectives from the host (collective over the team; blocking)                             */
/* ========================================================================================== */
/* Every member makes the same call; dest and source are symmetric. Returns 0 (errors end the
   job, as on the device). Reductions are combined in team PE order (identical results on
   every member) and may run in place; the others need dest and source not to overlap. */

RSHMEM_HOST_TWIN(int, rshmem_alltoallmem,
                 (rshmem_team_t team, void *dest, const void *source, size_t nbytes))
RSHMEM_HOST_TWIN(int, rshmem_fcollectmem,
                 (rshmem_team_t team, void *dest, const void *source, size_t nbytes))
RSHMEM_HOST_TWIN(int, rshmem_broadcastmem,
                 (rshmem_team_t team, void *dest, const void *source, size_t nbytes, int root))
#define RSHMEMI_DECL_COLL(NAME, T)                                                             \
    RSHMEM_HOST_TWIN(int, rshmem_##NAME##_alltoall,                                            \
                     (rshmem_team_t team, T * dest, const T *source, size_t nelems))           \
    RSHMEM_HOST_TWIN(int, rshmem_##NAME##_fcollect,                                            \
                     (rshmem_team_t team, T * dest, const T *source, size_t nelems))           \
    RSHMEM_HOST_TWIN(int, rshmem_##NAME##_broadcast,                                           \
                     (rshmem_team_t team, T * dest, const T *source, size_t nelems, int root))
RSHMEM_FOR_RMA_TYPES(RSHMEMI_DECL_COLL)
#undef RSHMEMI_DECL_COLL
#define RSHMEMI_DECL_REDUCE_OP(NAME, T, OP)                                                    \
    RSHMEM_HOST_TWIN(int, rshmem_##NAME##_##OP##_reduce,                                       \
                     (rshmem_team_t team, T * dest, const T *source, size_t nreduce))          \
    RSHMEM_HOST_TWIN(int, rshmem_##NAME##_##OP##_reducescatter,                                \
                     (rshmem_team_t team, T * dest, const T *source, size_t nreduce))
#define RSHMEMI_DECL_REDUCE_ARITH(NAME, T)                                                     \
    RSHMEMI_DECL_REDUCE_OP(NAME, T, sum)                                                       \
    RSHMEMI_DECL_REDUCE_OP(NAME, T, prod)                                                      \
    RSHMEMI_DECL_REDUCE_OP(NAME, T, min)                                                       \
    RSHMEMI_DECL_REDUCE_OP(NAME, T, max)
#define RSHMEMI_DECL_REDUCE_BITWISE(NAME, T)                                                   \
    RSHMEMI_DECL_REDUCE_OP(NAME, T, and)                                                       \
    RSHMEMI_DECL_REDUCE_OP(NAME, T, or)                                                        \
    RSHMEMI_DECL_REDUCE_OP(NAME, T, xor)
RSHMEM_FOR_REDUCE_INT_TYPES(RSHMEMI_DECL_REDUCE_ARITH)
RSHMEM_FOR_REDUCE_INT_TYPES(RSHMEMI_DECL_REDUCE_BITWISE)
RSHMEM_FOR_REDUCE_FLOAT_TYPES(RSHMEMI_DECL_REDUCE_ARITH)
/* 16-bit floats: rshmem_half_OP_reduce (IEEE binary16) and rshmem_bfloat16_OP_reduce (+
   reducescatter) for OP sum, prod, min, max. Elements are passed as their 16-bit patterns
   (uint16_t), the layout of CUDA's __half and __nv_bfloat16: cast such pointers. Each combining
   step is computed in float and rounded to nearest-even to 16 bits, as in the device library
   and on the stream (identical results everywhere). */
#define RSHMEMI_FOR_REDUCE_HALF_TYPES(X) X(half, uint16_t) X(bfloat16, uint16_t)
RSHMEMI_FOR_REDUCE_HALF_TYPES(RSHMEMI_DECL_REDUCE_ARITH)

/* ========================================================================================== */
/* Stream-ordered calls (GPU backend; RSHMEM_ERROR_UNSUPPORTED on the CPU backend)            */
/* ========================================================================================== */
/* `stream` is a stream of this PE's device (its primary context, which the CUDA runtime
   uses), or 0 for the default stream. Each call checks its arguments, enqueues its work and
   returns RSHMEM_SUCCESS or an error code; the work takes effect in stream order. */

/* One-sided. Copies with the copy engine: dest symmetric; the local buffer (src of a put,
   dest of a get) is symmetric or any device memory of this PE's device. */
int rshmemx_putmem_on_stream(void *dest, const void *src, size_t nbytes, int pe,
                             cudaStream_t stream);
int rshmemx_getmem_on_stream(void *dest, const void *src, size_t nbytes, int pe,
                             cudaStream_t stream);
/* One-sided. putmem on stream, then the signal update on pe (data first). */
int rshmemx_putmem_signal_on_stream(void *dest, const void *src, size_t nbytes,
                                    uint64_t *sig_addr, uint64_t signal, int sig_op, int pe,
                                    cudaStream_t stream);
#define RSHMEMI_DECL_RMA_STREAM(NAME, T)                                                       \
    int rshmemx_##NAME##_put_on_stream(T *dest, const T *src, size_t nelems, int pe,           \
                                       cudaStream_t stream);                                   \
    int rshmemx_##NAME##_get_on_stream(T *dest, const T *src, size_t nelems, int pe,           \
                                       cudaStream_t stream);                                   \
    /* The value is captured now. */                                                          \
    int rshmemx_##NAME##_p_on_stream(T *dest, T value, int pe, cudaStream_t stream);           \
    /* Synchronizes the stream, then reads the element into *value. */                       \
    int rshmemx_##NAME##_g_on_stream(T *value, const T *src, int pe, cudaStream_t stream);     \
    int rshmemx_##NAME##_put_signal_on_stream(T *dest, const T *src, size_t nelems,            \
                                              uint64_t *sig_addr, uint64_t signal, int sig_op, \
                                              int pe, cudaStream_t stream);
RSHMEM_FOR_RMA_TYPES(RSHMEMI_DECL_RMA_STREAM)
#undef RSHMEMI_DECL_RMA_STREAM

/* One-sided. Updates the signal on pe after the stream's earlier work. */
int rshmemx_signal_op_on_stream(uint64_t *sig_addr, uint64_t signal, int sig_op, int pe,
                                cudaStream_t stream);
/* Local. The stream waits until this PE's signal satisfies `signal cmp cmp_value` (acquire),
   bounded by the device timeout. */
int rshmemx_signal_wait_until_on_stream(uint64_t *sig_addr, int cmp, uint64_t cmp_value,
                                        cudaStream_t stream);
/* One-sided. Work queued on stream after it starts once this PE's host-issued puts and
   atomics have completed. */
int rshmemx_quiet_on_stream(cudaStream_t stream);
/* Collective. Every PE's work queued before it (and its host-issued puts) is complete and
   visible before any PE's work after it starts. */
int rshmemx_barrier_all_on_stream(cudaStream_t stream);
/* Collective. rshmemx_barrier_all_on_stream without completing host-issued puts. */
int rshmemx_sync_all_on_stream(cudaStream_t stream);
/* Collective over team: the same restricted to team. */
int rshmemx_barrier_on_stream(rshmem_team_t team, cudaStream_t stream);
int rshmemx_team_sync_on_stream(rshmem_team_t team, cudaStream_t stream);

/* Collective over team, stream-ordered (the device library's grid collectives; every member
   on this host). Semantics as the host collectives above. */
int rshmemx_alltoallmem_on_stream(rshmem_team_t team, void *dest, const void *source,
                                  size_t nbytes, cudaStream_t stream);
int rshmemx_fcollectmem_on_stream(rshmem_team_t team, void *dest, const void *source,
                                  size_t nbytes, cudaStream_t stream);
int rshmemx_broadcastmem_on_stream(rshmem_team_t team, void *dest, const void *source,
                                   size_t nbytes, int root, cudaStream_t stream);
#define RSHMEMI_DECL_COLL_STREAM(NAME, T)                                                      \
    int rshmemx_##NAME##_alltoall_on_stream(rshmem_team_t team, T *dest, const T *source,      \
                                            size_t nelems, cudaStream_t stream);               \
    int rshmemx_##NAME##_fcollect_on_stream(rshmem_team_t team, T *dest, const T *source,      \
                                            size_t nelems, cudaStream_t stream);               \
    int rshmemx_##NAME##_broadcast_on_stream(rshmem_team_t team, T *dest, const T *source,     \
                                             size_t nelems, int root, cudaStream_t stream);    \
    /* Each member's nelems may differ; dest holds their sum (teams of at most 128 PEs). */   \
    int rshmemx_##NAME##_collect_on_stream(rshmem_team_t team, T *dest, const T *source,       \
                                           size_t nelems, cudaStream_t stream);                \
    /* Strided alltoall (strides in elements, at least 1). */                                \
    int rshmemx_##NAME##_alltoalls_on_stream(rshmem_team_t team, T *dest, const T *source,     \
                                             ptrdiff_t dst, ptrdiff_t sst, size_t nelems,      \
                                             cudaStream_t stream);
RSHMEM_FOR_RMA_TYPES(RSHMEMI_DECL_COLL_STREAM)
#undef RSHMEMI_DECL_COLL_STREAM
#define RSHMEMI_DECL_REDUCE_STREAM_OP(NAME, T, OP)                                             \
    int rshmemx_##NAME##_##OP##_reduce_on_stream(rshmem_team_t team, T *dest, const T *source, \
                                                 size_t nreduce, cudaStream_t stream);         \
    int rshmemx_##NAME##_##OP##_reducescatter_on_stream(rshmem_team_t team, T *dest,           \
                                                        const T *source, size_t nreduce,       \
                                                        cudaStream_t stream);
#define RSHMEMI_DECL_REDUCE_STREAM_ARITH(NAME, T)                                              \
    RSHMEMI_DECL_REDUCE_STREAM_OP(NAME, T, sum)                                                \
    RSHMEMI_DECL_REDUCE_STREAM_OP(NAME, T, prod)                                               \
    RSHMEMI_DECL_REDUCE_STREAM_OP(NAME, T, min)                                                \
    RSHMEMI_DECL_REDUCE_STREAM_OP(NAME, T, max)
#define RSHMEMI_DECL_REDUCE_STREAM_BITWISE(NAME, T)                                            \
    RSHMEMI_DECL_REDUCE_STREAM_OP(NAME, T, and)                                                \
    RSHMEMI_DECL_REDUCE_STREAM_OP(NAME, T, or)                                                 \
    RSHMEMI_DECL_REDUCE_STREAM_OP(NAME, T, xor)
RSHMEM_FOR_REDUCE_INT_TYPES(RSHMEMI_DECL_REDUCE_STREAM_ARITH)
RSHMEM_FOR_REDUCE_INT_TYPES(RSHMEMI_DECL_REDUCE_STREAM_BITWISE)
RSHMEM_FOR_REDUCE_FLOAT_TYPES(RSHMEMI_DECL_REDUCE_STREAM_ARITH)
/* 16-bit floats (half, bfloat16) as uint16_t patterns, rounded per step as the blocking forms. */
RSHMEMI_FOR_REDUCE_HALF_TYPES(RSHMEMI_DECL_REDUCE_STREAM_ARITH)
#undef RSHMEMI_FOR_REDUCE_HALF_TYPES
#undef RSHMEMI_DECL_REDUCE_STREAM_OP
#undef RSHMEMI_DECL_REDUCE_STREAM_ARITH
#undef RSHMEMI_DECL_REDUCE_STREAM_BITWISE
#undef RSHMEMI_DECL_REDUCE_OP
#undef RSHMEMI_DECL_REDUCE_ARITH
#undef RSHMEMI_DECL_REDUCE_BITWISE

/* ------------------------------------------------------------------------------------------ */
/* Expert-parallel MoE dispatch and combine (GPU backend, every PE on this host; docs/moe.md). */
/* Tokens: [T, hidden] of dtype; topk_idx: [T, topk] int64 (-1 = none); weights: [T, topk].   */
/* fp8 (RSHMEMX_EP_FP8_E4M3): tokens as e4m3 bytes with one float scale per 128 elements      */
/* ([T, hidden / 128], hidden a multiple of 128), dispatched by the *_fp8_* calls, rows and    */
/* scales delivered unchanged; the combine of such a handle takes and writes bf16 rows.       */
#define RSHMEMX_EP_F32 0
#define RSHMEMX_EP_BF16 1
#define RSHMEMX_EP_FP8_E4M3 2
typedef struct rshmemx_ep rshmemx_ep_t; /* opaque handle */
typedef struct {
    size_t num_experts;   /* E, a multiple of the PEs, at most 1024 */
    size_t hidden;        /* H; H x element size a multiple of 16 bytes (fp8: of 128 elements) */
    size_t topk;          /* k, 1..32 */
    size_t max_tokens;    /* most tokens per dispatch on a PE */
    int dtype;            /* RSHMEMX_EP_F32, RSHMEMX_EP_BF16 or RSHMEMX_EP_FP8_E4M3 */
    int num_sms;          /* blocks per kernel; 0: the GPU's SMs (shared among its PEs) */
    size_t max_recv_rows; /* rows of the dispatch output; 0: the worst case */
    int low_latency;      /* nonzero: also the low-latency mode (max_tokens <= 256) */
} rshmemx_ep_config_t;
/* Collective: allocates the buffers, compiles the kernels; *ep is NULL on error. */
int rshmemx_ep_create(const rshmemx_ep_config_t *config, rshmemx_ep_t **ep);
/* Collective: waits for the context's work, frees the handle. */
int rshmemx_ep_destroy(rshmemx_ep_t *ep);
/* Collective, stream-ordered: sends every token once per PE holding one of its experts; the
   output (rshmemx_ep_output) holds each local expert's rows contiguously. */
int rshmemx_ep_dispatch_on_stream(rshmemx_ep_t *ep, const void *x, const int64_t *topk_idx,
                                  const float *topk_weights, size_t num_tokens,
                                  cudaStream_t stream);
/* The same for fp8 handles: x [T, hidden] e4m3 bytes, x_scales [T, hidden / 128] floats; the
   received rows' scales: rshmemx_ep_output_scales (same row order). The other dispatch calls
   refuse an fp8 handle (naming x_scales), and these refuse the other dtypes. */
int rshmemx_ep_dispatch_fp8_on_stream(rshmemx_ep_t *ep, const void *x, const float *x_scales,
                                      const int64_t *topk_idx, const float *topk_weights,
                                      size_t num_tokens, cudaStream_t stream);
/* Collective, stream-ordered: out[t] = sum_j w[t][j] * y(row of t at expert idx[t][j]) for the
   last dispatch's tokens; y in the dispatch output's layout (NULL: the output itself; not for
   fp8 handles, whose y and out are bf16 [rows, hidden]). */
int rshmemx_ep_combine_on_stream(rshmemx_ep_t *ep, const void *y, void *out,
                                 cudaStream_t stream);
/* Local: synchronizes stream; reports an expert index out of range or too many rows. */
int rshmemx_ep_check(rshmemx_ep_t *ep, cudaStream_t stream);
/* Local: device addresses of the dispatch output (rows, L + 1 int64 offsets, (source PE,
   source token) int32 pairs) and its capacity in rows; any out-pointer may be NULL. */
int rshmemx_ep_output(rshmemx_ep_t *ep, void **expert_x, const int64_t **expert_offsets,
                      const int32_t **expert_src, size_t *max_rows);
/* Local: the dispatch output's scales, [max_rows][*scales_per_row] floats (fp8 handles: hidden
   / 128 per row; NULL and 0 otherwise); any out-pointer may be NULL. */
int rshmemx_ep_output_scales(rshmemx_ep_t *ep, const float **expert_scales,
                             size_t *scales_per_row);
/* The low-latency mode (config->low_latency): every (token, expert) pair has a row in fixed
   per-expert regions [L][n][max_tokens] rows, no count exchange; combine takes the weights.
   RSHMEM_EP_LL_PER_PE (auto, 0, 1) sets whether a token crosses to a PE once (the receiver
   copies it to its other experts there, and the combine returns one partial sum per PE) or
   once per expert (docs/moe.md); rshmemx_ep_ll_per_pe says which the handle took. */
int rshmemx_ep_ll_dispatch_on_stream(rshmemx_ep_t *ep, const void *x, const int64_t *topk_idx,
                                     size_t num_tokens, cudaStream_t stream);
int rshmemx_ep_ll_dispatch_fp8_on_stream(rshmemx_ep_t *ep, const void *x, const float *x_scales,
                                         const int64_t *topk_idx, size_t num_tokens,
                                         cudaStream_t stream);
int rshmemx_ep_ll_combine_on_stream(rshmemx_ep_t *ep, const void *y, const float *topk_weights,
                                    void *out, cudaStream_t stream);
/* Local: rows [L][n][max_tokens], counts [L][n] int32, (token, slot) int32 pairs per row. */
int rshmemx_ep_ll_output(rshmemx_ep_t *ep, void **recv_x, const int32_t **count,
                         const int32_t **src);
/* Local (fp8 handles with low_latency): the rows' scales, [L][n][max_tokens][hidden / 128]
   floats; an error on other handles. */
int rshmemx_ep_ll_output_scales(rshmemx_ep_t *ep, const float **recv_scales);
/* Local: *per_pe = 1 when the handle's low-latency exchange goes once per (token, PE) (the
   combine returns one partial sum per PE, rounded there), 0 when once per (token, expert) pair
   or without low_latency; the same on every PE (docs/moe.md). */
int rshmemx_ep_ll_per_pe(rshmemx_ep_t *ep, int *per_pe);

#ifdef __cplusplus
}
#endif

/* ========================================================================================== */
/* Collective launch (needs the program's CUDA runtime: nvcc, or RSHMEM_WITH_CUDA_RUNTIME)    */
/* ========================================================================================== */
#if defined(RSHMEMI_HAVE_CUDA_RUNTIME)

/* Local. The largest grid of `func` with `block` threads per block and `smem` bytes of dynamic
   shared memory whose blocks can all be resident on this PE's GPU at once (what a kernel that
   waits on other blocks or on peers needs), into *gridsize. `args` is unused (kept for the
   NVSHMEM signature). Returns RSHMEM_SUCCESS or RSHMEM_ERROR_CUDA (printed). */
static inline int rshmemx_collective_launch_query_gridsize(const void *func, dim3 block,
                                                           void **args, size_t smem,
                                                           int *gridsize) {
    (void)args;
    const char *call = "rshmemx_collective_launch_query_gridsize";
    if (gridsize == NULL) {
        rshmemi_report(call, "gridsize is NULL");
        return RSHMEM_ERROR_INVALID_VALUE;
    }
    int dev = 0, sms = 0, per_sm = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, func, (int)(block.x * block.y * block.z), smem);
    }
    if (e != cudaSuccess) {
        rshmemi_report(call, cudaGetErrorString(e));
        return RSHMEM_ERROR_CUDA;
    }
    *gridsize = per_sm * sms;
    return RSHMEM_SUCCESS;
}

/* Local, stream-ordered. Launches `func` as a cooperative kernel (every block resident at
   once, so blocks and PEs may wait on each other) on stream. Fails with
   RSHMEM_ERROR_INVALID_VALUE, printing the largest grid that fits, when the grid cannot be
   co-resident; with RSHMEM_ERROR_CUDA when the launch fails. */
static inline int rshmemx_collective_launch(const void *func, dim3 grid, dim3 block, void **args,
                                            size_t smem, cudaStream_t stream) {
    const char *call = "rshmemx_collective_launch";
    int fit = 0;
    int r = rshmemx_collective_launch_query_gridsize(func, block, args, smem, &fit);
    if (r != RSHMEM_SUCCESS) return r;
    unsigned long long want = (unsigned long long)grid.x * grid.y * grid.z;
    if (want > (unsigned long long)fit) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "a grid of %llu blocks of %u threads (%zu bytes of shared memory) cannot be "
                 "resident at once on this GPU: at most %d blocks fit "
                 "(rshmemx_collective_launch_query_gridsize)",
                 want, block.x * block.y * block.z, smem, fit);
        rshmemi_report(call, msg);
        return RSHMEM_ERROR_INVALID_VALUE;
    }
    cudaError_t e = cudaLaunchCooperativeKernel(func, grid, block, args, smem, stream);
    if (e != cudaSuccess) {
        rshmemi_report(call, cudaGetErrorString(e));
        return RSHMEM_ERROR_CUDA;
    }
    return RSHMEM_SUCCESS;
}
#endif /* RSHMEMI_HAVE_CUDA_RUNTIME */

/* Under nvcc: the device library, with each twin above also callable from host code. */
#if defined(RSHMEMI_NVCC)
#ifndef RSHMEM_HOST_API
#define RSHMEM_HOST_API 1
#endif
#include "rshmem/rshmem.cuh"
#include "rshmem/coll.cuh"
#endif

#endif /* RSHMEM_H */
