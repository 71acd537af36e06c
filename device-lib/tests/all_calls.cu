// Calls every function of the rshmem device library, in every scope and for every type, so that
// compiling this file (runtime/tests/device_compile.rs does, with NVRTC) instantiates every
// template and macro. The kernels are not meant to be run as they are.
#include "rshmem/rshmem.cuh"
#include "rshmem/coll.cuh"

#define N 37  // an odd element count, so the copies have vector bodies and byte tails

// ---------------------------------------------------------------------------------------------
// RMA: p, g, put, get (+ _nbi), put_signal (+ _nbi) in thread, warp and block scope.

#define RMA_SCOPE(NAME, T, SUFFIX)                                                               \
    {                                                                                            \
        T* d = (T*)sym;                                                                          \
        T* s = (T*)local;                                                                        \
        rshmem_##NAME##_put##SUFFIX(d, s, N, pe);                                                \
        rshmem_##NAME##_put_nbi##SUFFIX(d + 1, s, N - 1, pe);                                    \
        rshmem_##NAME##_get##SUFFIX(s, d, N, pe);                                                \
        rshmem_##NAME##_get_nbi##SUFFIX(s + 1, d, N - 1, pe);                                    \
        rshmem_##NAME##_put_signal##SUFFIX(d, s, N, sig, 1, RSHMEM_SIGNAL_ADD, pe);              \
        rshmem_##NAME##_put_signal_nbi##SUFFIX(d, s, N, sig, 2, RSHMEM_SIGNAL_SET, pe);          \
    }

#define RMA_THREAD(NAME, T)                                                                      \
    {                                                                                            \
        T* d = (T*)sym;                                                                          \
        rshmem_##NAME##_p(d, rshmem_##NAME##_g(d + 1, pe), pe);                                  \
    }                                                                                            \
    RMA_SCOPE(NAME, T, )
#define RMA_WARP(NAME, T) RMA_SCOPE(NAME, T, _warp)
#define RMA_BLOCK(NAME, T) RMA_SCOPE(NAME, T, _block)

extern "C" __global__ void rma_thread(void* sym, void* local, uint64_t* sig, int pe) {
    RSHMEM_FOR_RMA_TYPES(RMA_THREAD)
}

extern "C" __global__ void rma_warp(void* sym, void* local, uint64_t* sig, int pe) {
    RSHMEM_FOR_RMA_TYPES(RMA_WARP)
}

extern "C" __global__ void rma_block(void* sym, void* local, uint64_t* sig, int pe) {
    RSHMEM_FOR_RMA_TYPES(RMA_BLOCK)
}

// Untyped calls, every scope, with unaligned pointers and sizes.
#define MEM_SCOPE(SUFFIX)                                                                        \
    rshmem_putmem##SUFFIX(sym + 3, local + 1, nbytes, pe);                                       \
    rshmem_putmem_nbi##SUFFIX(sym, local, nbytes, pe);                                           \
    rshmem_getmem##SUFFIX(local + 5, sym + 2, nbytes, pe);                                       \
    rshmem_getmem_nbi##SUFFIX(local, sym, nbytes, pe);                                           \
    rshmem_putmem_signal##SUFFIX(sym, local, nbytes, sig, 1, RSHMEM_SIGNAL_ADD, pe);             \
    rshmem_putmem_signal_nbi##SUFFIX(sym + 7, local + 9, nbytes, sig, 3, RSHMEM_SIGNAL_SET, pe);

extern "C" __global__ void mem_thread(char* sym, char* local, uint64_t* sig, size_t nbytes,
                                      int pe) {
    MEM_SCOPE()
}

extern "C" __global__ void mem_warp(char* sym, char* local, uint64_t* sig, size_t nbytes, int pe) {
    MEM_SCOPE(_warp)
}

extern "C" __global__ void mem_block(char* sym, char* local, uint64_t* sig, size_t nbytes,
                                     int pe) {
    MEM_SCOPE(_block)
}

// Shared memory as the local side of a block put / get.
extern "C" __global__ void mem_block_shared(char* sym, size_t nbytes, int pe) {
    __shared__ char staging[4096];
    size_t n = nbytes < sizeof(staging) ? nbytes : sizeof(staging);
    rshmem_getmem_block(staging, sym, n, pe);
    rshmem_putmem_block(sym, staging + 1, n - 1, pe);
}

// ---------------------------------------------------------------------------------------------
// Atomics.

#define AMO_EXT(NAME, T)                                                                         \
    {                                                                                            \
        T* d = (T*)sym;                                                                          \
        T v = rshmem_##NAME##_atomic_fetch(d, pe);                                               \
        rshmem_##NAME##_atomic_set(d, v, pe);                                                    \
        v = rshmem_##NAME##_atomic_swap(d, v, pe);                                               \
        ((T*)out)[0] = v;                                                                        \
    }

#define AMO_STD(NAME, T)                                                                         \
    AMO_EXT(NAME, T)                                                                             \
    {                                                                                            \
        T* d = (T*)sym;                                                                          \
        T v = rshmem_##NAME##_atomic_compare_swap(d, (T)0, (T)1, pe);                            \
        v += rshmem_##NAME##_atomic_fetch_inc(d, pe);                                            \
        rshmem_##NAME##_atomic_inc(d, pe);                                                       \
        v += rshmem_##NAME##_atomic_fetch_add(d, (T)5, pe);                                      \
        rshmem_##NAME##_atomic_add(d, v, pe);                                                    \
        ((T*)out)[1] = v;                                                                        \
    }

#define AMO_BITWISE(NAME, T)                                                                     \
    {                                                                                            \
        T* d = (T*)sym;                                                                          \
        T v = rshmem_##NAME##_atomic_fetch_and(d, (T)6, pe);                                     \
        v ^= rshmem_##NAME##_atomic_fetch_or(d, (T)8, pe);                                       \
        v ^= rshmem_##NAME##_atomic_fetch_xor(d, (T)3, pe);                                      \
        rshmem_##NAME##_atomic_and(d, v, pe);                                                    \
        rshmem_##NAME##_atomic_or(d, v, pe);                                                     \
        rshmem_##NAME##_atomic_xor(d, v, pe);                                                    \
        ((T*)out)[2] = v;                                                                        \
    }

extern "C" __global__ void amo(void* sym, void* out, int pe) {
    RSHMEM_FOR_AMO_TYPES(AMO_STD)
    RSHMEM_FOR_AMO_FLOAT_TYPES(AMO_EXT)
    RSHMEM_FOR_AMO_BITWISE_TYPES(AMO_BITWISE)
}

// ---------------------------------------------------------------------------------------------
// Point-to-point synchronization.

#define WAIT(NAME, T)                                                                            \
    {                                                                                            \
        T* ivars = (T*)sym;                                                                      \
        const T* values = (const T*)cmp_values;                                                  \
        size_t r = 0;                                                                            \
        rshmem_##NAME##_wait_until(ivars, RSHMEM_CMP_GE, (T)1);                                  \
        rshmem_##NAME##_wait_until_all(ivars, n, status, RSHMEM_CMP_NE, (T)0);                   \
        r += rshmem_##NAME##_wait_until_any(ivars, n, status, RSHMEM_CMP_EQ, (T)2);              \
        r += rshmem_##NAME##_wait_until_some(ivars, n, indices, status, RSHMEM_CMP_GT, (T)3);    \
        rshmem_##NAME##_wait_until_all_vector(ivars, n, status, RSHMEM_CMP_LE, values);          \
        r += rshmem_##NAME##_wait_until_any_vector(ivars, n, status, RSHMEM_CMP_LT, values);     \
        r += rshmem_##NAME##_wait_until_some_vector(ivars, n, indices, 0, RSHMEM_CMP_EQ, values); \
        r += rshmem_##NAME##_test(ivars, RSHMEM_CMP_EQ, (T)4);                                   \
        r += rshmem_##NAME##_test_all(ivars, n, status, RSHMEM_CMP_NE, (T)5);                    \
        r += rshmem_##NAME##_test_any(ivars, n, 0, RSHMEM_CMP_GT, (T)6);                         \
        r += rshmem_##NAME##_test_some(ivars, n, indices, status, RSHMEM_CMP_GE, (T)7);          \
        r += rshmem_##NAME##_test_all_vector(ivars, n, status, RSHMEM_CMP_LT, values);           \
        r += rshmem_##NAME##_test_any_vector(ivars, n, status, RSHMEM_CMP_LE, values);           \
        r += rshmem_##NAME##_test_some_vector(ivars, n, indices, status, RSHMEM_CMP_EQ, values); \
        *result += r;                                                                            \
    }

extern "C" __global__ void wait(void* sym, const void* cmp_values, const int* status,
                                size_t* indices, size_t n, size_t* result) {
    RSHMEM_FOR_WAIT_TYPES(WAIT)
}

// ---------------------------------------------------------------------------------------------
// Signals, ordering, queries, barriers.

extern "C" __global__ void signals(uint64_t* sig, uint64_t* out, int pe) {
    rshmem_signal_op(sig, 1, RSHMEM_SIGNAL_ADD, pe);
    rshmem_signal_op(sig, 7, RSHMEM_SIGNAL_SET, pe);
    out[0] = rshmem_signal_fetch(sig);
    out[1] = rshmem_signal_wait_until(sig, RSHMEM_CMP_GE, 7);
}

extern "C" __global__ void misc(void* sym, void** out, int* ints) {
    int me = rshmem_my_pe();
    int n = rshmem_n_pes();
    out[0] = rshmem_ptr(sym, (me + 1) % n);
    rshmem_fence();
    rshmem_quiet();
    ints[0] = me;
    ints[1] = n;
}

extern "C" __global__ void barriers_thread() {
    if (threadIdx.x == 0) {
        rshmem_barrier_all();
        rshmem_sync_all();
    }
}

extern "C" __global__ void barriers_warp() {
    if (threadIdx.x < 32) {
        rshmem_barrier_all_warp();
        rshmem_sync_all_warp();
    }
}

extern "C" __global__ void barriers_block() {
    rshmem_barrier_all_block();
    rshmem_sync_all_block();
}

// ---------------------------------------------------------------------------------------------
// Teams and collectives, every scope and type.

extern "C" __global__ void teams(rshmem_team_t team, int* ints) {
    ints[0] = rshmem_team_my_pe(team);
    ints[1] = rshmem_team_n_pes(team);
    ints[2] = rshmem_team_translate_pe(team, 0, RSHMEM_TEAM_WORLD);
    if (threadIdx.x == 0) {
        rshmem_team_sync(team);
        rshmem_barrier(team);
    }
    if (threadIdx.x < 32) {
        rshmem_team_sync_warp(team);
        rshmem_barrier_warp(team);
    }
    rshmem_team_sync_block(team);
    rshmem_barrier_block(team);
}

#define COLL_SCOPE(NAME, T, SUFFIX)                                                              \
    {                                                                                            \
        T* d = (T*)dest;                                                                         \
        const T* s = (const T*)src;                                                              \
        rshmem_##NAME##_alltoall##SUFFIX(team, d, s, N);                                         \
        rshmem_##NAME##_fcollect##SUFFIX(team, d, s, N);                                         \
        rshmem_##NAME##_broadcast##SUFFIX(team, d, s, N, 0);                                     \
        rshmem_##NAME##_collect##SUFFIX(team, d, s, N);                                          \
        rshmem_##NAME##_alltoalls##SUFFIX(team, d, s, 2, 3, N);                                  \
    }
#define COLL_ALL(NAME, T) COLL_SCOPE(NAME, T, ) COLL_SCOPE(NAME, T, _warp) COLL_SCOPE(NAME, T, _block)

extern "C" __global__ void colls(rshmem_team_t team, void* dest, const void* src, size_t nbytes) {
    RSHMEM_FOR_RMA_TYPES(COLL_ALL)
    rshmem_alltoallmem(team, dest, src, nbytes);
    rshmem_fcollectmem_warp(team, dest, src, nbytes);
    rshmem_broadcastmem_block(team, dest, src, nbytes, 1);
    rshmem_collectmem(team, dest, src, nbytes);
}

// Every typed reduction wrapper is defined (and so type-checked, with its group function
// instantiated) by the header itself; code is generated here for one operator per canonical
// type and scope, so that this test stays fast. Operators share one instance per type.
#define RED_CALLS(NAME, T, OP, SUFFIX)                                                           \
    rshmem_##NAME##_##OP##_reduce##SUFFIX(team, (T*)dest, (const T*)src, N);                     \
    rshmem_##NAME##_##OP##_reducescatter##SUFFIX(team, (T*)dest, (const T*)src, N);

extern "C" __global__ void reductions(rshmem_team_t team, void* dest, const void* src) {
    RED_CALLS(int8, int8_t, xor, )
    RED_CALLS(uint16, uint16_t, and, _warp)
    RED_CALLS(int, int, sum, _block)
    RED_CALLS(ulonglong, unsigned long long, max, _block)
    RED_CALLS(float, float, sum, _warp)
    RED_CALLS(double, double, min, )
    RED_CALLS(double2, double2, maxloc, )
    RED_CALLS(double2, double2, maxloc, _warp)
    RED_CALLS(double2, double2, maxloc, _block)
}
