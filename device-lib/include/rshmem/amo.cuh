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
// PEs that are not reachable by load/store (proxy.cuh): the atomic is a proxy request executed
// at the target by the host (with a system-scope atomic of the target GPU, so it stays atomic
// with respect to device atomics there); fetching forms wait for the old value.
//
// Checks (debug flag): pe in range, the object in this PE's symmetric heap, naturally aligned.
#pragma once

#include "rshmem/util.cuh"
#include "rshmem/proxy.cuh"

namespace rshmem_detail {

// The atomic OP on the (translated, load/store reachable) word p.
template <int OP, bool FETCH, typename T>
static __device__ __forceinline__ T amo_at(T* p, T value, T cond) {
    if constexpr (OP == RSHMEM_PROXY_AMO_FETCH) {
        return ld_relaxed_sys((const T*)p);
    } else if constexpr (OP == RSHMEM_PROXY_AMO_SET || OP == RSHMEM_PROXY_AMO_SWAP) {
        return atom_exch(p, value);
    } else if constexpr (OP == RSHMEM_PROXY_AMO_CSWAP) {
        return atom_cas(p, cond, value);
    } else if constexpr (OP == RSHMEM_PROXY_AMO_ADD) {
        if constexpr (FETCH) return atom_add(p, value);
        red_add(p, value);
        return T();
    } else if constexpr (OP == RSHMEM_PROXY_AMO_AND) {
        if constexpr (FETCH) return atom_and(p, value);
        red_and(p, value);
        return T();
    } else if constexpr (OP == RSHMEM_PROXY_AMO_OR) {
        if constexpr (FETCH) return atom_or(p, value);
        red_or(p, value);
        return T();
    } else {
        static_assert(OP == RSHMEM_PROXY_AMO_XOR, "unknown atomic");
        if constexpr (FETCH) return atom_xor(p, value);
        red_xor(p, value);
        return T();
    }
}

// The atomic `op` (fetching; a non-fetching one discards the result) on a translated word of `size` (4 or 8) bytes, on bits.
template <typename U>
static __device__ __forceinline__ U amo_bits(int op, U* p, U value, U cond) {
    switch (op) {
        case RSHMEM_PROXY_AMO_FETCH: return ld_relaxed_sys((const U*)p);
        case RSHMEM_PROXY_AMO_SET:
        case RSHMEM_PROXY_AMO_SWAP: return atom_exch(p, value);
        case RSHMEM_PROXY_AMO_CSWAP: return atom_cas(p, cond, value);
        case RSHMEM_PROXY_AMO_ADD: return atom_add(p, value);
        case RSHMEM_PROXY_AMO_AND: return atom_and(p, value);
        case RSHMEM_PROXY_AMO_OR: return atom_or(p, value);
        default: return atom_xor(p, value);
    }
}

// The atomics' cold path (checks, uninitialized state, PE table, proxy), on the bits of 4- and
// 8-byte words: one function serves every operation, type and size (fewer functions whose
// address a module takes keep ptxas fast).
static __device__ __noinline__ uint64_t amo_slow(const char* call, int op, bool fetch, void* dest,
                                                 uint32_t size, uint64_t value, uint64_t cond,
                                                 int pe) {
    if (debug()) check_elem(call, "destination", dest, size, pe);
    check_init(call, true);
    const int local = local_index(pe);
    if (local < 0) return proxy_amo(call, (uint32_t)op, dest, size, value, cond, pe, fetch);
    void* p = at_local(dest, local);
    if (size == 4) {
        return amo_bits<uint32_t>(op, (uint32_t*)p, (uint32_t)value, (uint32_t)cond);
    }
    return amo_bits<uint64_t>(op, (uint64_t*)p, value, cond);
}

// One atomic: OP is an RSHMEM_PROXY_AMO_* code; FETCH: the caller wants the old value. The
// fast path is the one instruction; everything else is amo_slow.
template <int OP, bool FETCH, typename T>
static __device__ __forceinline__ T amo(const char* call, T* dest, T value, T cond, int pe) {
    int local;
    if (__builtin_expect(fast_pe(pe, local), 1)) {
        return amo_at<OP, FETCH, T>(at_local(dest, local), value, cond);
    }
    typedef typename uint_of<sizeof(T)>::type U;
    return bit_cast<T>((U)cold(&amo_slow)(call, OP, FETCH, dest, sizeof(T),
                                          (uint64_t)bit_cast<U>(value),
                                          (uint64_t)bit_cast<U>(cond), pe));
}

}  // namespace rshmem_detail

#define RSHMEM_AMO_(OP, FETCH, T, NAME, dest, value, cond, pe)                                  \
    rshmem_detail::amo<OP, FETCH, T>(NAME, dest, value, cond, pe)

// Every atomic below is a host twin (twin.cuh): with rshmem.h under nvcc, host code calls the
// host library's atomic of the same name. H(args) is that host call.
#define RSHMEM_AMO_H(FN, ...) rshmemi_host_rshmem_##FN(__VA_ARGS__)

// fetch, set, swap: every AMO type, floating point included.
#define RSHMEM_DEFINE_AMO_EXT(NAME, T)                                                           \
    /* Atomically reads source on PE pe. */                                                      \
    RSHMEM_TWIN T rshmem_##NAME##_atomic_fetch(const T* source, int pe) {                        \
        return RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic_fetch, source, pe),                   \
                                RSHMEM_AMO_(RSHMEM_PROXY_AMO_FETCH, true, T,                     \
                                            "rshmem_" #NAME "_atomic_fetch", (T*)source, (T)0,   \
                                            (T)0, pe));                                          \
    }                                                                                            \
    /* Atomically writes value into dest on PE pe. */                                            \
    RSHMEM_TWIN void rshmem_##NAME##_atomic_set(T* dest, T value, int pe) {                      \
        RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic_set, dest, value, pe),                       \
                         (void)RSHMEM_AMO_(RSHMEM_PROXY_AMO_SET, false, T,                       \
                                           "rshmem_" #NAME "_atomic_set", dest, value, (T)0,     \
                                           pe));                                                 \
    }                                                                                            \
    /* Atomically writes value into dest on PE pe; returns the old value. */                     \
    RSHMEM_TWIN T rshmem_##NAME##_atomic_swap(T* dest, T value, int pe) {                        \
        return RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic_swap, dest, value, pe),               \
                                RSHMEM_AMO_(RSHMEM_PROXY_AMO_SWAP, true, T,                      \
                                            "rshmem_" #NAME "_atomic_swap", dest, value, (T)0,   \
                                            pe));                                                \
    }

// compare_swap, fetch_inc, inc, fetch_add, add: the integer AMO types.
#define RSHMEM_DEFINE_AMO_STD(NAME, T)                                                           \
    RSHMEM_DEFINE_AMO_EXT(NAME, T)                                                               \
    /* Atomically: if dest on PE pe equals cond, writes value. Returns the old value. */         \
    RSHMEM_TWIN T rshmem_##NAME##_atomic_compare_swap(T* dest, T cond, T value, int pe) {        \
        return RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic_compare_swap, dest, cond, value, pe), \
                                RSHMEM_AMO_(RSHMEM_PROXY_AMO_CSWAP, true, T,                     \
                                            "rshmem_" #NAME "_atomic_compare_swap", dest, value, \
                                            cond, pe));                                          \
    }                                                                                            \
    /* Atomically adds 1 to dest on PE pe; returns the old value. */                             \
    RSHMEM_TWIN T rshmem_##NAME##_atomic_fetch_inc(T* dest, int pe) {                            \
        return RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic_fetch_inc, dest, pe),                 \
                                RSHMEM_AMO_(RSHMEM_PROXY_AMO_ADD, true, T,                       \
                                            "rshmem_" #NAME "_atomic_fetch_inc", dest, (T)1,     \
                                            (T)0, pe));                                          \
    }                                                                                            \
    /* Atomically adds 1 to dest on PE pe. */                                                    \
    RSHMEM_TWIN void rshmem_##NAME##_atomic_inc(T* dest, int pe) {                               \
        RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic_inc, dest, pe),                              \
                         (void)RSHMEM_AMO_(RSHMEM_PROXY_AMO_ADD, false, T,                       \
                                           "rshmem_" #NAME "_atomic_inc", dest, (T)1, (T)0,      \
                                           pe));                                                 \
    }                                                                                            \
    /* Atomically adds value to dest on PE pe; returns the old value. */                         \
    RSHMEM_TWIN T rshmem_##NAME##_atomic_fetch_add(T* dest, T value, int pe) {                   \
        return RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic_fetch_add, dest, value, pe),          \
                                RSHMEM_AMO_(RSHMEM_PROXY_AMO_ADD, true, T,                       \
                                            "rshmem_" #NAME "_atomic_fetch_add", dest, value,    \
                                            (T)0, pe));                                          \
    }                                                                                            \
    /* Atomically adds value to dest on PE pe. */                                                \
    RSHMEM_TWIN void rshmem_##NAME##_atomic_add(T* dest, T value, int pe) {                      \
        RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic_add, dest, value, pe),                       \
                         (void)RSHMEM_AMO_(RSHMEM_PROXY_AMO_ADD, false, T,                       \
                                           "rshmem_" #NAME "_atomic_add", dest, value, (T)0,     \
                                           pe));                                                 \
    }

// fetch_and/or/xor, and/or/xor: the bitwise AMO types. OP is _and, _or or _xor (spelled with
// the underscore because `and`, `or` and `xor` are C++ operator tokens); CODE its proxy code.
#define RSHMEM_DEFINE_AMO_BIT_OP(NAME, T, OP, CODE)                                              \
    /* Atomically dest = dest OP value on PE pe; returns the old value. */                       \
    RSHMEM_TWIN T rshmem_##NAME##_atomic_fetch##OP(T* dest, T value, int pe) {                   \
        return RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic_fetch##OP, dest, value, pe),          \
                                RSHMEM_AMO_(CODE, true, T, "rshmem_" #NAME "_atomic_fetch" #OP,  \
                                            dest, value, (T)0, pe));                             \
    }                                                                                            \
    /* Atomically dest = dest OP value on PE pe. */                                              \
    RSHMEM_TWIN void rshmem_##NAME##_atomic##OP(T* dest, T value, int pe) {                      \
        RSHMEM_TWIN_CALL(RSHMEM_AMO_H(NAME##_atomic##OP, dest, value, pe),                       \
                         (void)RSHMEM_AMO_(CODE, false, T, "rshmem_" #NAME "_atomic" #OP, dest,  \
                                           value, (T)0, pe));                                    \
    }

#define RSHMEM_DEFINE_AMO_BITWISE(NAME, T)                                                       \
    RSHMEM_DEFINE_AMO_BIT_OP(NAME, T, _and, RSHMEM_PROXY_AMO_AND)                                \
    RSHMEM_DEFINE_AMO_BIT_OP(NAME, T, _or, RSHMEM_PROXY_AMO_OR)                                  \
    RSHMEM_DEFINE_AMO_BIT_OP(NAME, T, _xor, RSHMEM_PROXY_AMO_XOR)

RSHMEM_FOR_AMO_TYPES(RSHMEM_DEFINE_AMO_STD)
RSHMEM_FOR_AMO_FLOAT_TYPES(RSHMEM_DEFINE_AMO_EXT)
RSHMEM_FOR_AMO_BITWISE_TYPES(RSHMEM_DEFINE_AMO_BITWISE)

#undef RSHMEM_AMO_
#undef RSHMEM_AMO_H
#undef RSHMEM_DEFINE_AMO_EXT
#undef RSHMEM_DEFINE_AMO_STD
#undef RSHMEM_DEFINE_AMO_BIT_OP
#undef RSHMEM_DEFINE_AMO_BITWISE
