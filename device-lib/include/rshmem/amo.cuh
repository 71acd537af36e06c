// rshmem device library: atomic memory operations (AMOs) on symmetric objects of any PE.
//
// Thread scope, one-sided. Each call is one system-scope atomic (atom.relaxed.sys /
// red.relaxed.sys, executed at the target GPU's L2 over NVLink), atomic with respect to every
// other rshmem atomic, signal update and strong access of the same object from any GPU. Memory
// ordering: relaxed, like OpenSHMEM's AMOs: an AMO orders nothing else. Order it after earlier
// puts with rshmem_fence (same PE) or rshmem_quiet (all PEs); the fetching forms return the value
// but do not make later loads see other PEs' data (use a wait or rshmem_fence for that).
//
// The non-fetching forms (set, inc, add, and, or, xor) do not wait for a reply.
//
// Checks (debug flag): pe in range, the object in this PE's symmetric heap, naturally aligned.
#pragma once

#include "rshmem/util.cuh"

namespace rshmem_detail {

template <typename T>
static __device__ __forceinline__ T* amo_target(const char* call, T* dest, int pe) {
    if (debug()) {
        check_pe(call, pe, true);
        check_sym(call, "destination", dest, sizeof(T), true);
        check_align(call, "destination", dest, sizeof(T), true);
    }
    return translate(call, dest, pe, true);
}

}  // namespace rshmem_detail

// fetch, set, swap: every AMO type, floating point included.
#define RSHMEM_DEFINE_AMO_EXT(NAME, T)                                                           \
    /* Atomically reads source on PE pe. */                                                      \
    static __device__ __forceinline__ T rshmem_##NAME##_atomic_fetch(const T* source, int pe) {  \
        return rshmem_detail::ld_relaxed_sys(rshmem_detail::amo_target(                          \
            "rshmem_" #NAME "_atomic_fetch", source, pe));                                       \
    }                                                                                            \
    /* Atomically writes value into dest on PE pe. */                                            \
    static __device__ __forceinline__ void rshmem_##NAME##_atomic_set(T* dest, T value,          \
                                                                      int pe) {                  \
        (void)rshmem_detail::atom_exch(                                                          \
            rshmem_detail::amo_target("rshmem_" #NAME "_atomic_set", dest, pe), value);          \
    }                                                                                            \
    /* Atomically writes value into dest on PE pe; returns the old value. */                     \
    static __device__ __forceinline__ T rshmem_##NAME##_atomic_swap(T* dest, T value, int pe) {  \
        return rshmem_detail::atom_exch(                                                         \
            rshmem_detail::amo_target("rshmem_" #NAME "_atomic_swap", dest, pe), value);         \
    }

// compare_swap, fetch_inc, inc, fetch_add, add: the integer AMO types.
#define RSHMEM_DEFINE_AMO_STD(NAME, T)                                                           \
    RSHMEM_DEFINE_AMO_EXT(NAME, T)                                                               \
    /* Atomically: if dest on PE pe equals cond, writes value. Returns the old value. */         \
    static __device__ __forceinline__ T rshmem_##NAME##_atomic_compare_swap(T* dest, T cond,     \
                                                                            T value, int pe) {   \
        return rshmem_detail::atom_cas(                                                          \
            rshmem_detail::amo_target("rshmem_" #NAME "_atomic_compare_swap", dest, pe), cond,   \
            value);                                                                              \
    }                                                                                            \
    /* Atomically adds 1 to dest on PE pe; returns the old value. */                             \
    static __device__ __forceinline__ T rshmem_##NAME##_atomic_fetch_inc(T* dest, int pe) {      \
        return rshmem_detail::atom_add(                                                          \
            rshmem_detail::amo_target("rshmem_" #NAME "_atomic_fetch_inc", dest, pe), (T)1);     \
    }                                                                                            \
    /* Atomically adds 1 to dest on PE pe. */                                                    \
    static __device__ __forceinline__ void rshmem_##NAME##_atomic_inc(T* dest, int pe) {         \
        rshmem_detail::red_add(rshmem_detail::amo_target("rshmem_" #NAME "_atomic_inc", dest,    \
                                                         pe),                                    \
                               (T)1);                                                            \
    }                                                                                            \
    /* Atomically adds value to dest on PE pe; returns the old value. */                         \
    static __device__ __forceinline__ T rshmem_##NAME##_atomic_fetch_add(T* dest, T value,       \
                                                                         int pe) {               \
        return rshmem_detail::atom_add(                                                          \
            rshmem_detail::amo_target("rshmem_" #NAME "_atomic_fetch_add", dest, pe), value);    \
    }                                                                                            \
    /* Atomically adds value to dest on PE pe. */                                                \
    static __device__ __forceinline__ void rshmem_##NAME##_atomic_add(T* dest, T value, int pe) { \
        rshmem_detail::red_add(rshmem_detail::amo_target("rshmem_" #NAME "_atomic_add", dest,    \
                                                         pe),                                    \
                               value);                                                           \
    }

// fetch_and/or/xor, and/or/xor: the bitwise AMO types. OP is _and, _or or _xor (spelled with
// the underscore because `and`, `or` and `xor` are C++ operator tokens).
#define RSHMEM_DEFINE_AMO_BIT_OP(NAME, T, OP)                                                    \
    /* Atomically dest = dest OP value on PE pe; returns the old value. */                       \
    static __device__ __forceinline__ T rshmem_##NAME##_atomic_fetch##OP(T* dest, T value,       \
                                                                         int pe) {               \
        return rshmem_detail::atom##OP(                                                          \
            rshmem_detail::amo_target("rshmem_" #NAME "_atomic_fetch" #OP, dest, pe), value);    \
    }                                                                                            \
    /* Atomically dest = dest OP value on PE pe. */                                              \
    static __device__ __forceinline__ void rshmem_##NAME##_atomic##OP(T* dest, T value, int pe) { \
        rshmem_detail::red##OP(rshmem_detail::amo_target("rshmem_" #NAME "_atomic" #OP, dest,    \
                                                         pe),                                    \
                               value);                                                           \
    }

#define RSHMEM_DEFINE_AMO_BITWISE(NAME, T)                                                       \
    RSHMEM_DEFINE_AMO_BIT_OP(NAME, T, _and)                                                      \
    RSHMEM_DEFINE_AMO_BIT_OP(NAME, T, _or)                                                       \
    RSHMEM_DEFINE_AMO_BIT_OP(NAME, T, _xor)

RSHMEM_FOR_AMO_TYPES(RSHMEM_DEFINE_AMO_STD)
RSHMEM_FOR_AMO_FLOAT_TYPES(RSHMEM_DEFINE_AMO_EXT)
RSHMEM_FOR_AMO_BITWISE_TYPES(RSHMEM_DEFINE_AMO_BITWISE)

#undef RSHMEM_DEFINE_AMO_EXT
#undef RSHMEM_DEFINE_AMO_STD
#undef RSHMEM_DEFINE_AMO_BIT_OP
#undef RSHMEM_DEFINE_AMO_BITWISE
