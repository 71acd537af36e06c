// rshmem device library: signals. A signal is a symmetric, 8-byte aligned uint64_t.
//
//   * rshmem_putmem_signal / rshmem_TYPE_put_signal (+ _nbi, _warp, _block): one-sided. Copies
//     the data to PE pe, then updates the signal on PE pe with RSHMEM_SIGNAL_SET (store) or
//     RSHMEM_SIGNAL_ADD (atomic add). Release: the update becomes visible only after all of the
//     data (st.release.sys / red.release.sys.add), so a PE that observes the signal with an
//     acquire (rshmem_signal_wait_until, rshmem_TYPE_wait_until, rshmem_signal_fetch) also sees
//     the data. In warp / block scope the threads copy together, meet at a warp / block barrier
//     (which orders every thread's stores before the update) and thread 0 of the group updates
//     the signal. _nbi forms are the same on the load/store transport.
//   * rshmem_signal_op: one-sided, atomic, relaxed: it does not order earlier puts (put
//     rshmem_fence before it for that).
//   * rshmem_signal_fetch: local, atomic read with acquire.
//   * rshmem_signal_wait_until: local, blocks until the local signal satisfies the comparison and
//     returns its value; acquire. Bounded by rshmem_state.timeout_ns (then prints and traps).
//
// Signal updates are atomic with respect to each other and to rshmem's uint64 atomics.
#pragma once

#include "rshmem/rma.cuh"
#include "rshmem/sync.cuh"

namespace rshmem_detail {

static __device__ __forceinline__ void check_signal(const char* call, const uint64_t* sig, int pe,
                                                    bool say) {
    check_pe(call, pe, say);
    check_sym(call, "signal", sig, sizeof(uint64_t), say);
    check_align(call, "signal", sig, sizeof(uint64_t), say);
}

// Applies op to the (translated) signal word with release semantics.
static __device__ __forceinline__ void signal_release(const char* call, uint64_t* sig,
                                                      uint64_t value, int op, bool say) {
    if (op == RSHMEM_SIGNAL_SET) {
        st_release_sys(sig, value);
    } else if (op == RSHMEM_SIGNAL_ADD) {
        red_add_release(sig, value);
    } else {
        fail_sig_op(call, op, say);
    }
}

// The signal checks (debug flag), cold.
static __device__ __noinline__ void check_signal_slow(const char* call, const uint64_t* sig,
                                                      int pe) {
    check_signal(call, sig, pe, true);
}

// signal_op's cold path: the checks, an invalid operation, uninitialized state, PE table, proxy.
static __device__ __noinline__ void signal_op_slow(const char* call, uint64_t* sig,
                                                   uint64_t signal, int sig_op, int pe) {
    if (debug()) check_signal(call, sig, pe, true);
    if (sig_op != RSHMEM_SIGNAL_SET && sig_op != RSHMEM_SIGNAL_ADD) fail_sig_op(call, sig_op, true);
    check_init(call, true);
    const int local = local_index(pe);
    if (local < 0) {
        proxy_signal(call, sig, signal, sig_op, pe);
        return;
    }
    uint64_t* s = at_local(sig, local);
    if (sig_op == RSHMEM_SIGNAL_SET) st_relaxed_sys(s, signal);
    else red_add(s, signal);
}

// The checks of putmem_signal (debug flag), cold.
static __device__ __noinline__ void check_put_signal(const char* call, const void* dest,
                                                     size_t nbytes, const uint64_t* sig, int pe,
                                                     bool say) {
    check_pe(call, pe, say);
    check_sym(call, "destination", dest, nbytes, say);
    check_signal(call, sig, pe, say);
}

// Inlined into the kernel (RSHMEM_ENGINE, see rma.cuh's putmem).
template <class S>
RSHMEM_ENGINE void putmem_signal(const char* call, void* dest, const void* src,
                                                     size_t nbytes, uint64_t* sig,
                                                     uint64_t signal, int sig_op, int pe) {
    S::sync();
    const bool say = S::rank() == 0;
    if (__builtin_expect(debug(), 0)) cold(&check_put_signal)(call, dest, nbytes, sig, pe, say);
    if (sig_op != RSHMEM_SIGNAL_SET && sig_op != RSHMEM_SIGNAL_ADD) fail_sig_op(call, sig_op, say);
    check_init(call, say);
    const int local = local_index(pe);
    if (__builtin_expect(local < 0, 0)) {
        // Through the proxy: one thread pushes data then signal; the group waits for it so
        // the source may be reused by any thread after the call.
        if (S::rank() == 0) {
            proxy_signal_args a = {dest, src, nbytes, sig, signal, sig_op, pe};
            cold(&proxy_putmem_signal_args)(call, &a);
        }
        S::sync();
        return;
    }
    char* d = at_local_wide((char*)dest, local);
    if (nbytes != 0) copy_bytes(d, (const char*)src, nbytes, true, S::rank(), S::size());
    // Orders every thread's stores before thread 0's release (release is cumulative).
    S::sync();
    if (S::rank() == 0) {
        signal_release(call, at_local_wide(sig, local), signal, sig_op, say);
    }
}

template <class S, typename T>
static __device__ __forceinline__ void put_signal(const char* call, T* dest, const T* src,
                                                  size_t nelems, uint64_t* sig, uint64_t signal,
                                                  int sig_op, int pe) {
    size_t nbytes = nelems * sizeof(T);
    if (debug()) nbytes = check_bytes(call, nelems, sizeof(T), S::rank() == 0);
    putmem_signal<S>(call, dest, src, nbytes, sig, signal, sig_op, pe);
}

}  // namespace rshmem_detail

// TW: TWIN for the thread-scope forms, which have a host twin (twin.cuh), DEV for the others.
#define RSHMEM_DEFINE_MEM_SIGNAL_SCOPE(SUFFIX, SCOPE, TW)                                        \
    /* Puts nbytes to PE pe, then updates sig_addr on PE pe (release). One-sided. */             \
    RSHMEM_QUAL_##TW void rshmem_putmem_signal##SUFFIX(void* dest, const void* src,              \
                                                       size_t nbytes, uint64_t* sig_addr,        \
                                                       uint64_t signal, int sig_op, int pe) {    \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_putmem_signal##SUFFIX(dest, src, nbytes, sig_addr,  \
                                                                   signal, sig_op, pe),          \
                         rshmem_detail::putmem_signal<rshmem_detail::SCOPE>(                     \
                             "rshmem_putmem_signal" #SUFFIX, dest, src, nbytes, sig_addr,        \
                             signal, sig_op, pe));                                               \
    }                                                                                            \
    /* Non-blocking putmem_signal: the source is reusable after rshmem_quiet. */                 \
    RSHMEM_QUAL_##TW void rshmem_putmem_signal_nbi##SUFFIX(void* dest, const void* src,          \
                                                           size_t nbytes, uint64_t* sig_addr,    \
                                                           uint64_t signal, int sig_op, int pe) { \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_putmem_signal_nbi##SUFFIX(                          \
                             dest, src, nbytes, sig_addr, signal, sig_op, pe),                   \
                         rshmem_detail::putmem_signal<rshmem_detail::SCOPE>(                     \
                             "rshmem_putmem_signal_nbi" #SUFFIX, dest, src, nbytes, sig_addr,    \
                             signal, sig_op, pe));                                               \
    }

RSHMEM_DEFINE_MEM_SIGNAL_SCOPE(, thread_scope, TWIN)
RSHMEM_DEFINE_MEM_SIGNAL_SCOPE(_warp, warp_scope, DEV)
RSHMEM_DEFINE_MEM_SIGNAL_SCOPE(_block, block_scope, DEV)

#define RSHMEM_DEFINE_PUT_SIGNAL_SCOPE(NAME, T, SUFFIX, SCOPE, TW)                               \
    /* Puts nelems elements to PE pe, then updates sig_addr on PE pe (release). One-sided. */    \
    RSHMEM_QUAL_##TW void rshmem_##NAME##_put_signal##SUFFIX(T* dest, const T* src,              \
                                                             size_t nelems, uint64_t* sig_addr,  \
                                                             uint64_t signal, int sig_op,        \
                                                             int pe) {                           \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_##NAME##_put_signal##SUFFIX(                        \
                             dest, src, nelems, sig_addr, signal, sig_op, pe),                   \
                         rshmem_detail::put_signal<rshmem_detail::SCOPE, T>(                     \
                             "rshmem_" #NAME "_put_signal" #SUFFIX, dest, src, nelems, sig_addr, \
                             signal, sig_op, pe));                                               \
    }                                                                                            \
    /* Non-blocking put_signal: the source is reusable after rshmem_quiet. */                    \
    RSHMEM_QUAL_##TW void rshmem_##NAME##_put_signal_nbi##SUFFIX(                                \
        T* dest, const T* src, size_t nelems, uint64_t* sig_addr, uint64_t signal, int sig_op,   \
        int pe) {                                                                                \
        RSHMEM_BODY_##TW(rshmemi_host_rshmem_##NAME##_put_signal_nbi##SUFFIX(                    \
                             dest, src, nelems, sig_addr, signal, sig_op, pe),                   \
                         rshmem_detail::put_signal<rshmem_detail::SCOPE, T>(                     \
                             "rshmem_" #NAME "_put_signal_nbi" #SUFFIX, dest, src, nelems,       \
                             sig_addr, signal, sig_op, pe));                                     \
    }

#define RSHMEM_DEFINE_PUT_SIGNAL(NAME, T)                                                        \
    RSHMEM_DEFINE_PUT_SIGNAL_SCOPE(NAME, T, , thread_scope, TWIN)                                \
    RSHMEM_DEFINE_PUT_SIGNAL_SCOPE(NAME, T, _warp, warp_scope, DEV)                              \
    RSHMEM_DEFINE_PUT_SIGNAL_SCOPE(NAME, T, _block, block_scope, DEV)

RSHMEM_FOR_RMA_TYPES(RSHMEM_DEFINE_PUT_SIGNAL)

#undef RSHMEM_DEFINE_MEM_SIGNAL_SCOPE
#undef RSHMEM_DEFINE_PUT_SIGNAL_SCOPE
#undef RSHMEM_DEFINE_PUT_SIGNAL

// Atomically updates sig_addr on PE pe with sig_op (RSHMEM_SIGNAL_SET or RSHMEM_SIGNAL_ADD) and
// signal. Thread scope, one-sided, relaxed (no ordering of earlier puts without rshmem_fence).
RSHMEM_TWIN void rshmem_signal_op(uint64_t* sig_addr, uint64_t signal, int sig_op, int pe) {
#if RSHMEM_TWIN_HOST_PASS
    rshmemi_host_rshmem_signal_op(sig_addr, signal, sig_op, pe);
#else
    int local;
    if (__builtin_expect(rshmem_detail::fast_pe(pe, local), 1)) {
        uint64_t* s = rshmem_detail::at_local(sig_addr, local);
        if (sig_op == RSHMEM_SIGNAL_SET) {
            rshmem_detail::st_relaxed_sys(s, signal);
            return;
        }
        if (sig_op == RSHMEM_SIGNAL_ADD) {
            rshmem_detail::red_add(s, signal);
            return;
        }
    }
    rshmem_detail::cold(&rshmem_detail::signal_op_slow)("rshmem_signal_op", sig_addr, signal, sig_op, pe);
#endif
}

// Atomically reads this PE's signal at sig_addr. Thread scope, local, acquire.
RSHMEM_TWIN uint64_t rshmem_signal_fetch(const uint64_t* sig_addr) {
#if RSHMEM_TWIN_HOST_PASS
    return rshmemi_host_rshmem_signal_fetch(sig_addr);
#else
    if (__builtin_expect(rshmem_detail::debug(), 0)) {
        rshmem_detail::cold(&rshmem_detail::check_signal_slow)("rshmem_signal_fetch", sig_addr,
                                                              rshmem_state.my_pe);
    }
    return rshmem_detail::ld_acquire_sys(sig_addr);
#endif
}

// Waits until this PE's signal at sig_addr satisfies `signal cmp cmp_value` (RSHMEM_CMP_*) and
// returns the signal's value. Thread scope, local, blocking, acquire. Bounded by the device
// timeout: then prints what it waited for and traps.
static __device__ __forceinline__ uint64_t rshmem_signal_wait_until(const uint64_t* sig_addr,
                                                                    int cmp, uint64_t cmp_value) {
    const char* call = "rshmem_signal_wait_until";
    if (__builtin_expect(rshmem_detail::debug(), 0)) {
        rshmem_detail::cold(&rshmem_detail::check_signal_slow)(call, sig_addr, rshmem_state.my_pe);
    }
    return rshmem_detail::wait_until(call, sig_addr, cmp, cmp_value);
}
