// rshmem device library: remote memory access (p, g, put, get, putmem, getmem and _nbi forms)
// in thread, warp and block scope.
//
// All calls are one-sided: only the calling PE takes part. PEs of this host are reached by
// loads and stores over NVLink (see util.cuh for the translation).
//
// Completion and ordering (load/store transport):
//   * put / putmem return once the source may be reused (every source byte has been read);
//     the stores to the destination are issued but their visibility to other PEs is only
//     guaranteed after rshmem_quiet (or a barrier), or to a PE that synchronizes with a later
//     release of this PE (put_signal, rshmem_fence + rshmem_TYPE_p / atomics, barrier).
//   * get / getmem return with the data in the destination.
//   * _nbi forms behave the same on this transport (they may not on later ones: complete them
//     with rshmem_quiet before reusing the source or reading the destination).
//   * p is a single strong (relaxed, system-scope) store: never torn, never merged; it orders
//     nothing. g is a single ordinary load, as in NVSHMEM: never torn, but it may be served
//     from this SM's L1 cache and scheduled together with other loads. It sees every value
//     stored before the last synchronization of the calling thread with the writer (barrier,
//     a wait that observed the writer's release, kernel boundary); a repeated g of the same
//     element without such synchronization may return the value it returned before, so never
//     poll with g: use rshmem_TYPE_wait_until / rshmem_signal_wait_until.
//   * No ordering between separate puts to the same PE without rshmem_fence.
//
// Scopes: the plain names are thread scope. _warp / _block: every thread of the warp / block
// calls with the same arguments and the threads share the copy; the call begins and ends with a
// warp / block barrier (__syncwarp / __syncthreads), so the source may be written by any thread
// of the group before the call and reused by any thread after it.
#pragma once

#include "rshmem/util.cuh"
#include "rshmem/proxy.cuh"

namespace rshmem_detail {

// ---------------------------------------------------------------------------------------------
// The copy engine. The side that crosses NVLink (destination of a put, source of a get) is
// accessed with 16-byte aligned vectors; the other side with the widest accesses the relative
// alignment of the two pointers allows (16, 8, 4, 2 or 1 bytes). Bytes before the first aligned
// 16-byte boundary (head) and after the last (tail) are copied one byte per thread. Every thread
// keeps RSHMEM_COPY_UNROLL 16-byte loads in flight before it stores them.

union vec16 {
    uint4 v;
    uint64_t d[2];
    uint32_t w[4];
    uint16_t h[8];
    uint8_t b[16];
};

// Loads 16 bytes at p, which is aligned to G bytes. REMOTE: p is another GPU's memory (always
// 16-byte aligned here): loaded with ld.global.cg, which does not allocate in L1, so every get
// fetches the data over NVLink instead of returning a copy an earlier get left in L1.
template <int G, bool REMOTE>
static __device__ __forceinline__ vec16 load16(const char* p) {
    vec16 r;
    if constexpr (REMOTE) {
        static_assert(G == 16, "remote loads are 16-byte aligned");
        r.v = __ldcg((const uint4*)p);
    } else if constexpr (G == 16) {
        r.v = *(const uint4*)p;
    } else if constexpr (G == 8) {
#pragma unroll
        for (int i = 0; i < 2; ++i) r.d[i] = ((const uint64_t*)p)[i];
    } else if constexpr (G == 4) {
#pragma unroll
        for (int i = 0; i < 4; ++i) r.w[i] = ((const uint32_t*)p)[i];
    } else if constexpr (G == 2) {
#pragma unroll
        for (int i = 0; i < 8; ++i) r.h[i] = ((const uint16_t*)p)[i];
    } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) r.b[i] = ((const uint8_t*)p)[i];
    }
    return r;
}

// Stores 16 bytes at p, which is aligned to G bytes. REMOTE: p is another GPU's memory (always
// 16-byte aligned here), stored with a plain (weak) 16-byte store: on 2 x H200 NVSHMEM's
// shmem_put_bw ran 1-2 % faster at 64 B-128 KiB with it than with st.global.wb (a strong store
// at SM scope in SASS) and no slower elsewhere; it also takes two fewer registers.
template <int G, bool REMOTE>
static __device__ __forceinline__ void store16(char* p, const vec16& r) {
    if constexpr (REMOTE) {
        static_assert(G == 16, "remote stores are 16-byte aligned");
        *(uint4*)p = r.v;
    } else if constexpr (G == 16) {
        *(uint4*)p = r.v;
    } else if constexpr (G == 8) {
#pragma unroll
        for (int i = 0; i < 2; ++i) ((uint64_t*)p)[i] = r.d[i];
    } else if constexpr (G == 4) {
#pragma unroll
        for (int i = 0; i < 4; ++i) ((uint32_t*)p)[i] = r.w[i];
    } else if constexpr (G == 2) {
#pragma unroll
        for (int i = 0; i < 8; ++i) ((uint16_t*)p)[i] = r.h[i];
    } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) ((uint8_t*)p)[i] = r.b[i];
    }
}

// Chunks in flight per thread (each thread issues this many 16-byte loads before it stores
// them) when both sides allow 4-byte or wider accesses; 4 by default (16 registers of data). 2-
// and 1-byte pieces need 8 and 16 registers per chunk, so those paths keep at most 2 and 1
// chunks in flight: every path holds at most 16 registers of data, and the whole engine fits
// the register budget of a 1024-thread kernel with room for the caller's own (see
// device-lib/tests/regbudget). A module may define RSHMEM_COPY_UNROLL (1..8) before including
// rshmem.cuh.
#ifndef RSHMEM_COPY_UNROLL
#define RSHMEM_COPY_UNROLL 4
#endif
static_assert(RSHMEM_COPY_UNROLL >= 1 && RSHMEM_COPY_UNROLL <= 8, "RSHMEM_COPY_UNROLL: 1..8");

template <int G>
struct copy_unroll {
    static constexpr int value =
        G >= 4 ? RSHMEM_COPY_UNROLL : (G == 2 ? (RSHMEM_COPY_UNROLL < 2 ? RSHMEM_COPY_UNROLL : 2) : 1);
};

// Copies nvec 16-byte chunks; dst is aligned to GD bytes, src to GS bytes; REMOTE_SRC: src is
// the remote side (a get), else dst is (a put). Thread `rank` of `size` takes chunks rank,
// rank + size, ... so a warp touches 512 contiguous bytes per access; in each round of U chunks
// a thread issues all its loads before its first store. A round starting at chunk i takes
// i, i + size, ..., i + (U-1)*size, so every thread whose last chunk of the round exists runs
// it (an earlier bound, i + U*size <= nvec, left all but thread 0 to the one-chunk loop when
// nvec was a multiple of U*size: 0.86 of NVSHMEM's get bandwidth at 256 KiB, 1.56 after).
template <int GD, int GS, bool REMOTE_SRC>
static __device__ __forceinline__ void copy_chunks(char* dst, const char* src, size_t nvec,
                                                   uint32_t rank, uint32_t size) {
    constexpr int U = copy_unroll<(GD < GS ? GD : GS)>::value;
    const size_t step = (size_t)size * 16;  // bytes between this thread's chunks in a round
    size_t i = rank;                          // this thread's next chunk
    if (nvec > (size_t)size * (U - 1)) {
        const size_t end = nvec - (size_t)size * (U - 1);  // a round may start at chunk < end
        for (; i < end; i += (size_t)size * U) {
            vec16 v[U];
            const char* s = src + i * 16;
#pragma unroll
            for (int k = 0; k < U; ++k, s += step) v[k] = load16<GS, REMOTE_SRC>(s);
            char* d = dst + i * 16;
#pragma unroll
            for (int k = 0; k < U; ++k, d += step) store16<GD, !REMOTE_SRC>(d, v[k]);
        }
    }
    // The rest (fewer than U chunks of this thread), one chunk at a time; a get whose two sides
    // are both 16-byte aligned first takes two at once where it can. One at a time (load,
    // store, next load) made a thread-scope get of 32 B wait for two NVLink round trips where
    // 64 B waited for one (NVSHMEM's shmem_get_latency, thread table: 0.66 of NVSHMEM at 32 B,
    // 2 x H200). Two, not U - 1: U - 1 raised a thread-scope get from 46 to 56 registers; and
    // only the aligned form: with the narrower local accesses too, a block-scope get kernel
    // needed 66 registers in a file that holds every call (device-lib/tests/regbudget).
    if constexpr (REMOTE_SRC && GD == 16 && U > 2) {
        if (i + size < nvec) {
            const vec16 a = load16<GS, true>(src + i * 16);
            const vec16 b = load16<GS, true>(src + i * 16 + step);
            store16<GD, false>(dst + i * 16, a);
            store16<GD, false>(dst + i * 16 + step, b);
            i += (size_t)size * 2;
        }
    }
    for (; i < nvec; i += size) {
        store16<GD, !REMOTE_SRC>(dst + i * 16, load16<GS, REMOTE_SRC>(src + i * 16));
    }
}

// Copies n bytes from src to dst cooperatively (thread rank of size). The remote side (dst if
// remote_dst, else src) gets the aligned 16-byte accesses. Inlined into putmem / getmem /
// putmem_signal, which are inlined into their callers (RSHMEM_ENGINE, util.cuh).
static __device__ __forceinline__ void copy_bytes(char* dst, const char* src, size_t n,
                                                  bool remote_dst, uint32_t rank, uint32_t size) {
    uint64_t a = remote_dst ? (uint64_t)dst : (uint64_t)src;
    size_t head = (size_t)((16u - (uint32_t)(a & 15u)) & 15u);
    if (head > n) head = n;
    for (size_t i = rank; i < head; i += size) dst[i] = src[i];
    dst += head;
    src += head;
    n -= head;
    size_t nvec = n >> 4;
    if (nvec != 0) {
        // One side is now 16-byte aligned; the other's low 4 bits give the common alignment.
        uint32_t rel = (uint32_t)(((uint64_t)dst ^ (uint64_t)src) & 15u);
        if (remote_dst) {
            if (rel == 0) copy_chunks<16, 16, false>(dst, src, nvec, rank, size);
            else if ((rel & 7u) == 0) copy_chunks<16, 8, false>(dst, src, nvec, rank, size);
            else if ((rel & 3u) == 0) copy_chunks<16, 4, false>(dst, src, nvec, rank, size);
            else if ((rel & 1u) == 0) copy_chunks<16, 2, false>(dst, src, nvec, rank, size);
            else copy_chunks<16, 1, false>(dst, src, nvec, rank, size);
        } else {
            if (rel == 0) copy_chunks<16, 16, true>(dst, src, nvec, rank, size);
            else if ((rel & 7u) == 0) copy_chunks<8, 16, true>(dst, src, nvec, rank, size);
            else if ((rel & 3u) == 0) copy_chunks<4, 16, true>(dst, src, nvec, rank, size);
            else if ((rel & 1u) == 0) copy_chunks<2, 16, true>(dst, src, nvec, rank, size);
            else copy_chunks<1, 16, true>(dst, src, nvec, rank, size);
        }
    }
    size_t done = nvec << 4;
    for (size_t i = done + rank; i < n; i += size) dst[i] = src[i];
}

// The checks of a bulk call (debug flag), cold.
static __device__ __noinline__ void check_bulk(const char* call, const char* what, const void* p,
                                               size_t nbytes, int pe, bool say) {
    check_pe(call, pe, say);
    check_sym(call, what, p, nbytes, say);
}

// ---------------------------------------------------------------------------------------------
// Calls. The bulk engines putmem<S> / getmem<S> are inlined into the kernel (RSHMEM_ENGINE:
// a call through a pointer would charge every pointer call of the file with their registers,
// and a direct call of a non-inlined copy stacks its registers on the caller's; util.cuh).

template <class S>
RSHMEM_ENGINE void putmem(const char* call, void* dest, const void* src,
                                              size_t nbytes, int pe) {
    S::sync();
    const bool say = S::rank() == 0;
    if (__builtin_expect(debug(), 0)) cold(&check_bulk)(call, "destination", dest, nbytes, pe, say);
    if (nbytes != 0) {
        check_init(call, say);
        const int local = local_index(pe);
        if (__builtin_expect(local < 0, 0)) {
            if (S::rank() == 0) cold(&proxy_putmem)(call, dest, src, nbytes, pe, true);
        } else {
            copy_bytes(at_local_wide((char*)dest, local), (const char*)src, nbytes, true, S::rank(),
                       S::size());
        }
    }
    S::sync();
}

template <class S>
RSHMEM_ENGINE void getmem(const char* call, void* dest, const void* src,
                                              size_t nbytes, int pe) {
    S::sync();
    const bool say = S::rank() == 0;
    if (__builtin_expect(debug(), 0)) cold(&check_bulk)(call, "source", src, nbytes, pe, say);
    if (nbytes != 0) {
        check_init(call, say);
        const int local = local_index(pe);
        if (__builtin_expect(local < 0, 0)) {
            if (S::rank() == 0) cold(&proxy_getmem)(call, dest, src, nbytes, pe);
        } else {
            copy_bytes((char*)dest, at_local_wide((const char*)src, local), nbytes, false, S::rank(),
                       S::size());
        }
    }
    S::sync();
}

template <class S, typename T>
static __device__ __forceinline__ void put(const char* call, T* dest, const T* src, size_t nelems,
                                           int pe) {
    size_t nbytes = nelems * sizeof(T);
    if (debug()) nbytes = check_bytes(call, nelems, sizeof(T), S::rank() == 0);
    putmem<S>(call, dest, src, nbytes, pe);
}

template <class S, typename T>
static __device__ __forceinline__ void get(const char* call, T* dest, const T* src, size_t nelems,
                                           int pe) {
    size_t nbytes = nelems * sizeof(T);
    if (debug()) nbytes = check_bytes(call, nelems, sizeof(T), S::rank() == 0);
    getmem<S>(call, dest, src, nbytes, pe);
}

// p's cold path: checks, the uninitialized-state trap, the PE table, the proxy. `bits` holds the
// element in its low `size` bytes.
static __device__ __noinline__ void p_slow(const char* call, void* dest, uint64_t bits,
                                           uint32_t size, int pe) {
    if (debug()) check_elem(call, "destination", dest, size, pe);
    check_init(call, true);
    const int local = local_index(pe);
    if (local < 0) {
        proxy_p(call, dest, bits, size, pe);
        return;
    }
    void* d = at_local(dest, local);
    switch (size) {
        case 1: st_relaxed_sys_nc((uint8_t*)d, (uint8_t)bits); break;
        case 2: st_relaxed_sys_nc((uint16_t*)d, (uint16_t)bits); break;
        case 4: st_relaxed_sys_nc((uint32_t*)d, (uint32_t)bits); break;
        default: st_relaxed_sys_nc((uint64_t*)d, bits); break;
    }
}

// g's cold path (see p_slow); returns the element in the low `size` bytes.
static __device__ __noinline__ uint64_t g_slow(const char* call, const void* src, uint32_t size,
                                               int pe) {
    if (debug()) check_elem(call, "source", src, size, pe);
    check_init(call, true);
    const int local = local_index(pe);
    if (local < 0) {
        uint64_t v = 0;
        cold(&proxy_getmem)(call, &v, src, size, pe);
        return v;
    }
    const void* s = at_local(src, local);
    switch (size) {
        case 1: return *(const uint8_t*)s;
        case 2: return *(const uint16_t*)s;
        case 4: return *(const uint32_t*)s;
        default: return *(const uint64_t*)s;
    }
}

// p: one strong relaxed store at system scope (never torn, never merged; no "memory" clobber,
// so the compiler may move the caller's other memory accesses across it, which p's semantics
// allow: it orders nothing).
template <typename T>
static __device__ __forceinline__ void p(const char* call, T* dest, T value, int pe) {
    typedef typename uint_of<sizeof(T)>::type U;
    int local;
    if (__builtin_expect(fast_pe(pe, local), 1)) {
        st_relaxed_sys_nc((U*)at_local(dest, local), bit_cast<U>(value));
        return;
    }
    cold(&p_slow)(call, dest, (uint64_t)bit_cast<U>(value), sizeof(T), pe);
}

// g: one ordinary (weak) load of the peer's memory, as NVSHMEM's g: the compiler may schedule it
// with other loads and the SM may serve it from its L1 cache. It returns a value the element had
// no earlier than the last synchronization of this thread with the writer (a barrier, a
// wait_until / signal_wait_until that observed the writer's release, a kernel boundary);
// repeated g's of the same element without such synchronization may return the same old value
// (poll with rshmem_TYPE_wait_until, which loads with acquire at system scope).
template <typename T>
static __device__ __forceinline__ T g(const char* call, const T* src, int pe) {
    typedef typename uint_of<sizeof(T)>::type U;
    int local;
    if (__builtin_expect(fast_pe(pe, local), 1)) return *at_local(src, local);
    return bit_cast<T>((U)cold(&g_slow)(call, src, sizeof(T), pe));
}

}  // namespace rshmem_detail

// ---------------------------------------------------------------------------------------------
// Untyped: putmem / getmem (bytes).

// TW: TWIN for the thread-scope forms, which have a host twin (twin.cuh), DEV for the others.
#define RSHMEM_DEFINE_MEM_SCOPE(SUFFIX, SCOPE, TW)                                               \
    /* Copies nbytes from local src to dest on PE pe. One-sided; see the top of rma.cuh. */      \
    RSHMEM_QUAL_##TW void rshmem_putmem##SUFFIX(void* dest, const void* src, size_t nbytes,      \
                                                int pe) {                                        \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_putmem##SUFFIX(dest, src, nbytes, pe),              \
                         rshmem_detail::putmem<rshmem_detail::SCOPE>(                            \
                             "rshmem_putmem" #SUFFIX, dest, src, nbytes, pe));                   \
    }                                                                                            \
    /* Non-blocking putmem: complete with rshmem_quiet. */                                       \
    RSHMEM_QUAL_##TW void rshmem_putmem_nbi##SUFFIX(void* dest, const void* src, size_t nbytes,  \
                                                    int pe) {                                    \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_putmem_nbi##SUFFIX(dest, src, nbytes, pe),          \
                         rshmem_detail::putmem<rshmem_detail::SCOPE>(                            \
                             "rshmem_putmem_nbi" #SUFFIX, dest, src, nbytes, pe));               \
    }                                                                                            \
    /* Copies nbytes from src on PE pe to local dest; returns with the data in dest. */          \
    RSHMEM_QUAL_##TW void rshmem_getmem##SUFFIX(void* dest, const void* src, size_t nbytes,      \
                                                int pe) {                                        \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_getmem##SUFFIX(dest, src, nbytes, pe),              \
                         rshmem_detail::getmem<rshmem_detail::SCOPE>(                            \
                             "rshmem_getmem" #SUFFIX, dest, src, nbytes, pe));                   \
    }                                                                                            \
    /* Non-blocking getmem: dest is valid after rshmem_quiet. */                                 \
    RSHMEM_QUAL_##TW void rshmem_getmem_nbi##SUFFIX(void* dest, const void* src, size_t nbytes,  \
                                                    int pe) {                                    \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_getmem_nbi##SUFFIX(dest, src, nbytes, pe),          \
                         rshmem_detail::getmem<rshmem_detail::SCOPE>(                            \
                             "rshmem_getmem_nbi" #SUFFIX, dest, src, nbytes, pe));               \
    }

RSHMEM_DEFINE_MEM_SCOPE(, thread_scope, TWIN)
RSHMEM_DEFINE_MEM_SCOPE(_warp, warp_scope, DEV)
RSHMEM_DEFINE_MEM_SCOPE(_block, block_scope, DEV)

// ---------------------------------------------------------------------------------------------
// Typed: rshmem_TYPE_p / _g (thread scope) and rshmem_TYPE_put / _get (+ _nbi) in each scope.

#define RSHMEM_DEFINE_RMA_SCOPE(NAME, T, SUFFIX, SCOPE, TW)                                      \
    /* Copies nelems elements from local src to dest on PE pe. One-sided. */                    \
    RSHMEM_QUAL_##TW void rshmem_##NAME##_put##SUFFIX(T* dest, const T* src, size_t nelems,      \
                                                      int pe) {                                  \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_##NAME##_put##SUFFIX(dest, src, nelems, pe),        \
                         rshmem_detail::put<rshmem_detail::SCOPE, T>(                            \
                             "rshmem_" #NAME "_put" #SUFFIX, dest, src, nelems, pe));            \
    }                                                                                            \
    /* Non-blocking put: complete with rshmem_quiet. */                                          \
    RSHMEM_QUAL_##TW void rshmem_##NAME##_put_nbi##SUFFIX(T* dest, const T* src, size_t nelems,  \
                                                          int pe) {                              \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_##NAME##_put_nbi##SUFFIX(dest, src, nelems, pe),    \
                         rshmem_detail::put<rshmem_detail::SCOPE, T>(                            \
                             "rshmem_" #NAME "_put_nbi" #SUFFIX, dest, src, nelems, pe));        \
    }                                                                                            \
    /* Copies nelems elements from src on PE pe to local dest; returns with the data. */         \
    RSHMEM_QUAL_##TW void rshmem_##NAME##_get##SUFFIX(T* dest, const T* src, size_t nelems,      \
                                                      int pe) {                                  \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_##NAME##_get##SUFFIX(dest, src, nelems, pe),        \
                         rshmem_detail::get<rshmem_detail::SCOPE, T>(                            \
                             "rshmem_" #NAME "_get" #SUFFIX, dest, src, nelems, pe));            \
    }                                                                                            \
    /* Non-blocking get: dest is valid after rshmem_quiet. */                                    \
    RSHMEM_QUAL_##TW void rshmem_##NAME##_get_nbi##SUFFIX(T* dest, const T* src, size_t nelems,  \
                                                          int pe) {                              \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_##NAME##_get_nbi##SUFFIX(dest, src, nelems, pe),    \
                         rshmem_detail::get<rshmem_detail::SCOPE, T>(                            \
                             "rshmem_" #NAME "_get_nbi" #SUFFIX, dest, src, nelems, pe));        \
    }

#define RSHMEM_DEFINE_RMA(NAME, T)                                                               \
    /* Stores one element into dest on PE pe (strong relaxed store at system scope). */          \
    RSHMEM_TWIN void rshmem_##NAME##_p(T* dest, T value, int pe) {                               \
        RSHMEM_TWIN_CALL(rshmemi_host_rshmem_##NAME##_p(dest, value, pe),                        \
                         rshmem_detail::p<T>("rshmem_" #NAME "_p", dest, value, pe));            \
    }                                                                                            \
    /* Loads one element from src on PE pe (ordinary load; see the top of rma.cuh). */          \
    RSHMEM_TWIN T rshmem_##NAME##_g(const T* src, int pe) {                                      \
        return RSHMEM_TWIN_CALL(rshmemi_host_rshmem_##NAME##_g(src, pe),                         \
                                rshmem_detail::g<T>("rshmem_" #NAME "_g", src, pe));             \
    }                                                                                            \
    RSHMEM_DEFINE_RMA_SCOPE(NAME, T, , thread_scope, TWIN)                                       \
    RSHMEM_DEFINE_RMA_SCOPE(NAME, T, _warp, warp_scope, DEV)                                     \
    RSHMEM_DEFINE_RMA_SCOPE(NAME, T, _block, block_scope, DEV)

RSHMEM_FOR_RMA_TYPES(RSHMEM_DEFINE_RMA)

#undef RSHMEM_DEFINE_MEM_SCOPE
#undef RSHMEM_DEFINE_RMA_SCOPE
#undef RSHMEM_DEFINE_RMA
