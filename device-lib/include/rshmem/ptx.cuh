// rshmem device library: memory-model primitives (inline PTX).
//
// Everything the other headers need from the PTX memory model, in one place:
//   * strong loads and stores at system scope (relaxed, acquire, release),
//   * fences (acq_rel and sc at system scope),
//   * system-scope atomics (atom.*, red.*),
//   * %globaltimer and %laneid.
// All accesses use generic addresses, so they work on global memory (local or a peer GPU's
// memory mapped over NVLink) and on shared memory alike. Every asm statement is `volatile` with
// a "memory" clobber, so the compiler neither drops nor moves memory accesses across it (except
// st_relaxed_sys_nc, which has no clobber).
//
// Scopes: `.sys` is required for anything another GPU (or the CPU) observes; `.gpu` would only
// order accesses among the threads of this GPU.
#pragma once

#include "rshmem/types.cuh"

namespace rshmem_detail {

// Reinterprets the bits of `f` as a `To` of the same size.
template <typename To, typename From>
static __device__ __forceinline__ To bit_cast(From f) {
    static_assert(sizeof(To) == sizeof(From), "bit_cast: sizes differ");
    union {
        From from;
        To to;
    } u;
    u.from = f;
    return u.to;
}

// The unsigned integer type of N bytes.
template <int N>
struct uint_of;
template <>
struct uint_of<1> {
    typedef uint8_t type;
};
template <>
struct uint_of<2> {
    typedef uint16_t type;
};
template <>
struct uint_of<4> {
    typedef uint32_t type;
};
template <>
struct uint_of<8> {
    typedef uint64_t type;
};

// Whether T is a signed type (for messages).
template <typename T>
static __device__ __forceinline__ bool is_signed_type() {
    return T(-1) < T(0);
}

// ---------------------------------------------------------------------------------------------
// Strong loads and stores at system scope. T is any 1-, 2-, 4- or 8-byte type; the address
// must be aligned to sizeof(T). Relaxed accesses are "morally strong": never torn, never cached
// in L1, never merged or dropped by the compiler (the memory-model meaning of `volatile`).

#define RSHMEM_PTX_LOAD(NAME, SEM)                                                               \
    template <typename T>                                                                        \
    static __device__ __forceinline__ T NAME(const T* p) {                                       \
        static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,     \
                      #NAME ": unsupported size");                                               \
        if constexpr (sizeof(T) == 1) {                                                          \
            uint32_t r;                                                                          \
            asm volatile("ld." SEM ".sys.u8 %0, [%1];" : "=r"(r) : "l"(p) : "memory");           \
            return bit_cast<T>((uint8_t)r);                                                      \
        } else if constexpr (sizeof(T) == 2) {                                                   \
            uint16_t r;                                                                          \
            asm volatile("ld." SEM ".sys.u16 %0, [%1];" : "=h"(r) : "l"(p) : "memory");          \
            return bit_cast<T>(r);                                                               \
        } else if constexpr (sizeof(T) == 4) {                                                   \
            uint32_t r;                                                                          \
            asm volatile("ld." SEM ".sys.u32 %0, [%1];" : "=r"(r) : "l"(p) : "memory");          \
            return bit_cast<T>(r);                                                               \
        } else {                                                                                 \
            uint64_t r;                                                                          \
            asm volatile("ld." SEM ".sys.u64 %0, [%1];" : "=l"(r) : "l"(p) : "memory");          \
            return bit_cast<T>(r);                                                               \
        }                                                                                        \
    }

#define RSHMEM_PTX_STORE(NAME, SEM)                                                              \
    template <typename T>                                                                        \
    static __device__ __forceinline__ void NAME(T* p, T v) {                                     \
        static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,     \
                      #NAME ": unsupported size");                                               \
        if constexpr (sizeof(T) == 1) {                                                          \
            uint32_t r = bit_cast<uint8_t>(v);                                                   \
            asm volatile("st." SEM ".sys.u8 [%0], %1;" ::"l"(p), "r"(r) : "memory");             \
        } else if constexpr (sizeof(T) == 2) {                                                   \
            uint16_t r = bit_cast<uint16_t>(v);                                                  \
            asm volatile("st." SEM ".sys.u16 [%0], %1;" ::"l"(p), "h"(r) : "memory");            \
        } else if constexpr (sizeof(T) == 4) {                                                   \
            uint32_t r = bit_cast<uint32_t>(v);                                                  \
            asm volatile("st." SEM ".sys.u32 [%0], %1;" ::"l"(p), "r"(r) : "memory");            \
        } else {                                                                                 \
            uint64_t r = bit_cast<uint64_t>(v);                                                  \
            asm volatile("st." SEM ".sys.u64 [%0], %1;" ::"l"(p), "l"(r) : "memory");            \
        }                                                                                        \
    }

// ld.relaxed.sys: a coherent read of the current value (no ordering of later accesses).
RSHMEM_PTX_LOAD(ld_relaxed_sys, "relaxed")
// ld.acquire.sys: as relaxed, and no later access of this thread moves before it; pairs with a
// release (st.release / red.release / fence + strong store) of another thread or GPU.
RSHMEM_PTX_LOAD(ld_acquire_sys, "acquire")
// st.relaxed.sys: a single-copy-atomic store that becomes visible to all observers.
RSHMEM_PTX_STORE(st_relaxed_sys, "relaxed")
// st.release.sys: as relaxed, after every earlier access of this thread (and everything that
// happens before it, e.g. other threads' stores ordered by __syncthreads) is visible.
RSHMEM_PTX_STORE(st_release_sys, "release")

// st.relaxed.sys without a "memory" clobber (for rshmem_TYPE_p, which orders nothing): still
// `volatile`, so it is neither dropped nor moved across other volatile asm (fences, acquires,
// releases), but the compiler may schedule the caller's ordinary loads and stores around it,
// e.g. issue the next element's load before this store.
template <typename T>
static __device__ __forceinline__ void st_relaxed_sys_nc(T* p, T v) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                  "st_relaxed_sys_nc: unsupported size");
    if constexpr (sizeof(T) == 1) {
        uint32_t r = bit_cast<uint8_t>(v);
        asm volatile("st.relaxed.sys.u8 [%0], %1;" ::"l"(p), "r"(r));
    } else if constexpr (sizeof(T) == 2) {
        uint16_t r = bit_cast<uint16_t>(v);
        asm volatile("st.relaxed.sys.u16 [%0], %1;" ::"l"(p), "h"(r));
    } else if constexpr (sizeof(T) == 4) {
        uint32_t r = bit_cast<uint32_t>(v);
        asm volatile("st.relaxed.sys.u32 [%0], %1;" ::"l"(p), "r"(r));
    } else {
        uint64_t r = bit_cast<uint64_t>(v);
        asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(r));
    }
}

#undef RSHMEM_PTX_LOAD
#undef RSHMEM_PTX_STORE

// Two adjacent 8-byte words (p 16-byte aligned) in one ld.acquire.sys.v2.u64: one acquire for
// both, so a thread polling several flags waits for one memory latency per pair, not per flag.
static __device__ __forceinline__ void ld_acquire_sys_v2(const uint64_t* p, uint64_t& a,
                                                         uint64_t& b) {
    asm volatile("ld.acquire.sys.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Fences.

// fence.acq_rel.sys: a light-weight fence; with a later strong store it forms a release, with
// an earlier strong load an acquire.
static __device__ __forceinline__ void fence_acq_rel_sys() {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

// fence.acq_rel.gpu: as fence_acq_rel_sys, among the threads of this GPU.
static __device__ __forceinline__ void fence_acq_rel_gpu() {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// fence.sc.sys (what __threadfence_system() emits): all earlier accesses of this thread are
// performed system-wide before any later one, stores before later loads included.
static __device__ __forceinline__ void fence_sc_sys() {
    asm volatile("fence.sc.sys;" ::: "memory");
}

// ---------------------------------------------------------------------------------------------
// System-scope atomics, relaxed (OpenSHMEM AMOs order nothing by themselves). T is a 4- or
// 8-byte type; the address must be aligned to sizeof(T).

#define RSHMEM_PTX_ATOM2(NAME, OP, T32, T64)                                                    \
    template <typename T>                                                                        \
    static __device__ __forceinline__ T NAME(T* p, T v) {                                        \
        static_assert(sizeof(T) == 4 || sizeof(T) == 8, #NAME ": unsupported size");             \
        if constexpr (sizeof(T) == 4) {                                                          \
            uint32_t r;                                                                          \
            asm volatile("atom.relaxed.sys." OP "." T32 " %0, [%1], %2;"                         \
                         : "=r"(r)                                                               \
                         : "l"(p), "r"(bit_cast<uint32_t>(v))                                    \
                         : "memory");                                                            \
            return bit_cast<T>(r);                                                               \
        } else {                                                                                 \
            uint64_t r;                                                                          \
            asm volatile("atom.relaxed.sys." OP "." T64 " %0, [%1], %2;"                         \
                         : "=l"(r)                                                               \
                         : "l"(p), "l"(bit_cast<uint64_t>(v))                                    \
                         : "memory");                                                            \
            return bit_cast<T>(r);                                                               \
        }                                                                                        \
    }

#define RSHMEM_PTX_RED(NAME, SEM, OP, T32, T64)                                                 \
    template <typename T>                                                                        \
    static __device__ __forceinline__ void NAME(T* p, T v) {                                     \
        static_assert(sizeof(T) == 4 || sizeof(T) == 8, #NAME ": unsupported size");             \
        if constexpr (sizeof(T) == 4) {                                                          \
            asm volatile("red." SEM ".sys." OP "." T32 " [%0], %1;" ::"l"(p),                    \
                         "r"(bit_cast<uint32_t>(v))                                              \
                         : "memory");                                                            \
        } else {                                                                                 \
            asm volatile("red." SEM ".sys." OP "." T64 " [%0], %1;" ::"l"(p),                    \
                         "l"(bit_cast<uint64_t>(v))                                              \
                         : "memory");                                                            \
        }                                                                                        \
    }

// Fetching atomics: return the old value.
RSHMEM_PTX_ATOM2(atom_exch, "exch", "b32", "b64")
RSHMEM_PTX_ATOM2(atom_add, "add", "u32", "u64")
RSHMEM_PTX_ATOM2(atom_and, "and", "b32", "b64")
RSHMEM_PTX_ATOM2(atom_or, "or", "b32", "b64")
RSHMEM_PTX_ATOM2(atom_xor, "xor", "b32", "b64")
// Non-fetching reductions: no value comes back, so the thread does not wait for a round trip.
RSHMEM_PTX_RED(red_add, "relaxed", "add", "u32", "u64")
RSHMEM_PTX_RED(red_and, "relaxed", "and", "b32", "b64")
RSHMEM_PTX_RED(red_or, "relaxed", "or", "b32", "b64")
RSHMEM_PTX_RED(red_xor, "relaxed", "xor", "b32", "b64")
// Release reduction: the add becomes visible only after everything before it (signals).
RSHMEM_PTX_RED(red_add_release, "release", "add", "u32", "u64")

#undef RSHMEM_PTX_ATOM2
#undef RSHMEM_PTX_RED

// Compare-and-swap: stores v if *p == cond; returns the old value.
template <typename T>
static __device__ __forceinline__ T atom_cas(T* p, T cond, T v) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atom_cas: unsupported size");
    if constexpr (sizeof(T) == 4) {
        uint32_t r;
        asm volatile("atom.relaxed.sys.cas.b32 %0, [%1], %2, %3;"
                     : "=r"(r)
                     : "l"(p), "r"(bit_cast<uint32_t>(cond)), "r"(bit_cast<uint32_t>(v))
                     : "memory");
        return bit_cast<T>(r);
    } else {
        uint64_t r;
        asm volatile("atom.relaxed.sys.cas.b64 %0, [%1], %2, %3;"
                     : "=l"(r)
                     : "l"(p), "l"(bit_cast<uint64_t>(cond)), "l"(bit_cast<uint64_t>(v))
                     : "memory");
        return bit_cast<T>(r);
    }
}

// ---------------------------------------------------------------------------------------------
// Special registers.

// Nanoseconds of the GPU's global timer (the clock waits measure their timeouts with).
static __device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Index of this thread in its warp.
static __device__ __forceinline__ uint32_t laneid() {
    uint32_t l;
    asm("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}

}  // namespace rshmem_detail
