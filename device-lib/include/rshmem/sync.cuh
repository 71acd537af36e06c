// rshmem device library: memory ordering (rshmem_fence, rshmem_quiet) and point-to-point
// synchronization (rshmem_TYPE_wait_until*, rshmem_TYPE_test*).
//
// Waits and tests are local (they read this PE's symmetric objects, which other PEs update) and
// thread scope. Every read is a strong system-scope acquire load (ld.acquire.sys): once a wait
// returns or a test returns true, this thread sees everything the updating PE made visible
// before its update with release semantics (put_signal, or rshmem_fence / rshmem_quiet followed
// by a p or an atomic).
//
// Waits never spin forever: with rshmem_state.timeout_ns non-zero, a wait that has not been
// satisfied after that many nanoseconds of %globaltimer prints the waiting PE, the call, the
// address, the condition and the last value seen, and traps.
//
// Comparisons: RSHMEM_CMP_EQ, _NE, _GT, _GE, _LT, _LE; any other value traps in every build.
// Element selection: `status` may be NULL; otherwise elements with status[i] != 0 are skipped.
#pragma once

#include "rshmem/util.cuh"
#include "rshmem/proxy.cuh"

// Orders this thread's earlier puts, AMOs and signal updates before its later ones: a PE that
// observes a later one also observes the earlier ones. Thread scope, one-sided; a system-scope
// acq_rel fence (fence.acq_rel.sys): followed by a p, an atomic or a signal update it forms a
// release. To cover other threads' puts, synchronize with them first (e.g. __syncthreads).
// Requests through the proxy are executed and delivered in order, so they need nothing more.
RSHMEM_TWIN void rshmem_fence(void) {
    RSHMEM_TWIN_CALL(rshmemi_host_rshmem_fence(), rshmem_detail::fence_acq_rel_sys());
}

// Completes this thread's earlier puts, gets (_nbi included), AMOs and signal updates: when it
// returns they are visible to every PE, and the sources of non-blocking puts may be reused.
// Thread scope, one-sided; a sequentially consistent system-scope fence (fence.sc.sys, as
// __threadfence_system()). To cover other threads' calls, synchronize with them first (a
// _block call ends with __syncthreads, so one thread's rshmem_quiet after it covers the block).
// With a proxy (some PE not reachable by load/store) it also pushes a quiet request and waits
// until the host has completed every request pushed before it, remotely.
RSHMEM_TWIN void rshmem_quiet(void) {
#if RSHMEM_TWIN_HOST_PASS
    rshmemi_host_rshmem_quiet();
#else
    rshmem_detail::fence_sc_sys();
    if (rshmem_detail::has_proxy()) rshmem_detail::cold(&rshmem_detail::proxy_quiet)("rshmem_quiet");
#endif
}

namespace rshmem_detail {

template <typename T>
static __device__ __forceinline__ bool holds(T v, int cmp, T x) {
    switch (cmp) {
        case RSHMEM_CMP_EQ: return v == x;
        case RSHMEM_CMP_NE: return v != x;
        case RSHMEM_CMP_GT: return v > x;
        case RSHMEM_CMP_GE: return v >= x;
        case RSHMEM_CMP_LT: return v < x;
        case RSHMEM_CMP_LE: return v <= x;
        default: return false;
    }
}

static __device__ __forceinline__ void check_cmp(const char* call, int cmp) {
    if (cmp < RSHMEM_CMP_EQ || cmp > RSHMEM_CMP_LE) fail_cmp(call, cmp, true);
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_wait(const char* call, const void* addr, size_t index,
                                              size_t nelems, int cmp, uint64_t value,
                                              uint64_t seen, bool is_signed,
                                              unsigned long long waited) {
    const char* fmt =
        is_signed
            ? "rshmem: %s on PE %d: timed out after %llu ns waiting for element %llu of %llu at "
              "%p (this PE's memory) to become %s %lld; its value is %lld\n"
            : "rshmem: %s on PE %d: timed out after %llu ns waiting for element %llu of %llu at "
              "%p (this PE's memory) to become %s %llu; its value is %llu\n";
    printf(fmt, call, rshmem_state.my_pe, waited, (unsigned long long)index,
           (unsigned long long)nelems, addr, cmp_name(cmp), (unsigned long long)value,
           (unsigned long long)seen);
    __trap();
}

template <typename T>
static __device__ __forceinline__ uint64_t as_u64(T v) {
    if (is_signed_type<T>()) return (uint64_t)(int64_t)v;
    return (uint64_t)v;
}

// Loads the `size`-byte integer at p with acquire, widened to 64 bits (sign-extended when
// is_signed).
static __device__ __forceinline__ uint64_t ld_acquire_bits(const void* p, uint32_t size,
                                                           bool is_signed) {
    switch (size) {
        case 1: {
            uint8_t v = ld_acquire_sys((const uint8_t*)p);
            return is_signed ? (uint64_t)(int64_t)(int8_t)v : v;
        }
        case 2: {
            uint16_t v = ld_acquire_sys((const uint16_t*)p);
            return is_signed ? (uint64_t)(int64_t)(int16_t)v : v;
        }
        case 4: {
            uint32_t v = ld_acquire_sys((const uint32_t*)p);
            return is_signed ? (uint64_t)(int64_t)(int32_t)v : v;
        }
        default: return ld_acquire_sys((const uint64_t*)p);
    }
}

// The timed poll loop of a wait (cold: a kernel's fast path holds one poll, see wait_until), on
// integers widened to 64 bits, so one function serves every element type (fewer functions
// whose address a module takes keep ptxas fast). An invalid comparison traps here.
static __device__ __noinline__ uint64_t wait_until_slow(const char* call, const void* ivar,
                                                        uint32_t size, bool is_signed, int cmp,
                                                        uint64_t value) {
    if (cmp < RSHMEM_CMP_EQ || cmp > RSHMEM_CMP_LE) fail_cmp(call, cmp, true);
    wait_timer timer;
    for (;;) {
        uint64_t v = ld_acquire_bits(ivar, size, is_signed);
        if (is_signed ? holds((int64_t)v, cmp, (int64_t)value) : holds(v, cmp, value)) return v;
        if (timer.expired()) {
            fail_wait(call, ivar, 0, 1, cmp, value, v, is_signed, timer.waited());
        }
    }
}

template <typename T>
static __device__ __forceinline__ T wait_until(const char* call, const T* ivar, int cmp, T value) {
    T v = ld_acquire_sys(ivar);
    if (__builtin_expect(holds(v, cmp, value), 1)) return v;
    typedef typename uint_of<sizeof(T)>::type U;
    return bit_cast<T>((U)cold(&wait_until_slow)(call, ivar, sizeof(T), is_signed_type<T>(), cmp,
                                                 as_u64(value)));
}

static __device__ __noinline__ void check_ivars_slow(const char* call, const void* ivars, size_t n,
                                                     size_t size) {
    check_sym(call, "ivars", ivars, check_bytes(call, n, size, true), true);
    check_align(call, "ivars", ivars, size, true);
}

template <typename T>
static __device__ __forceinline__ void check_ivars(const char* call, const T* ivars, size_t n,
                                                   int cmp) {
    check_cmp(call, cmp);
    if (__builtin_expect(debug(), 0)) cold(&check_ivars_slow)(call, ivars, n, sizeof(T));
}

static __device__ __forceinline__ bool skipped(const int* status, size_t i) {
    return status != 0 && status[i] != 0;
}

// The multi-element waits and tests are not inlined (they are loops over arrays; a call costs
// nanoseconds). values == NULL: compare every element with value; else element i with values[i].
template <typename T>
static __device__ __noinline__ void wait_all(const char* call, const T* ivars, size_t n,
                                                const int* status, int cmp, const T* values,
                                                T value) {
    check_ivars(call, ivars, n, cmp);
    wait_timer timer;
    for (size_t i = 0; i < n; ++i) {
        if (skipped(status, i)) continue;
        T x = values ? values[i] : value;
        for (;;) {
            T v = ld_acquire_sys(ivars + i);
            if (holds(v, cmp, x)) break;
            if (timer.expired()) {
                fail_wait(call, ivars, i, n, cmp, as_u64(x), as_u64(v), is_signed_type<T>(),
                          timer.waited());
            }
        }
    }
}

template <typename T>
static __device__ __noinline__ size_t test_any(const T* ivars, size_t n, const int* status,
                                                  int cmp, const T* values, T value,
                                                  bool* eligible) {
    bool any = false;
    for (size_t i = 0; i < n; ++i) {
        if (skipped(status, i)) continue;
        any = true;
        if (holds(ld_acquire_sys(ivars + i), cmp, values ? values[i] : value)) {
            *eligible = true;
            return i;
        }
    }
    *eligible = any;
    return RSHMEM_SIZE_MAX;
}

template <typename T>
static __device__ __noinline__ size_t test_some(const T* ivars, size_t n, size_t* indices,
                                                   const int* status, int cmp, const T* values,
                                                   T value, bool* eligible) {
    bool any = false;
    size_t count = 0;
    for (size_t i = 0; i < n; ++i) {
        if (skipped(status, i)) continue;
        any = true;
        if (holds(ld_acquire_sys(ivars + i), cmp, values ? values[i] : value)) indices[count++] = i;
    }
    *eligible = any;
    return count;
}

template <typename T>
static __device__ __noinline__ int test_all(const T* ivars, size_t n, const int* status,
                                               int cmp, const T* values, T value) {
    for (size_t i = 0; i < n; ++i) {
        if (skipped(status, i)) continue;
        if (!holds(ld_acquire_sys(ivars + i), cmp, values ? values[i] : value)) return 0;
    }
    return 1;
}

// The first eligible element, for timeout messages.
template <typename T>
static __device__ __noinline__ RSHMEM_NORETURN void fail_wait_any(const char* call, const T* ivars, size_t n,
                                                  const int* status, int cmp, const T* values,
                                                  T value, unsigned long long waited) {
    size_t i = 0;
    while (i < n && skipped(status, i)) ++i;
    if (i == n) i = 0;
    T x = values ? values[i] : value;
    fail_wait(call, ivars, i, n, cmp, as_u64(x), as_u64(ld_relaxed_sys(ivars + i)),
              is_signed_type<T>(), waited);
}

template <typename T>
static __device__ __noinline__ size_t wait_any(const char* call, const T* ivars, size_t n,
                                                  const int* status, int cmp, const T* values,
                                                  T value) {
    check_ivars(call, ivars, n, cmp);
    wait_timer timer;
    for (;;) {
        bool eligible = false;
        size_t i = test_any(ivars, n, status, cmp, values, value, &eligible);
        if (i != RSHMEM_SIZE_MAX || !eligible) return i;
        if (timer.expired()) {
            fail_wait_any(call, ivars, n, status, cmp, values, value, timer.waited());
        }
    }
}

template <typename T>
static __device__ __noinline__ size_t wait_some(const char* call, const T* ivars, size_t n,
                                                   size_t* indices, const int* status, int cmp,
                                                   const T* values, T value) {
    check_ivars(call, ivars, n, cmp);
    wait_timer timer;
    for (;;) {
        bool eligible = false;
        size_t count = test_some(ivars, n, indices, status, cmp, values, value, &eligible);
        if (count != 0 || !eligible) return count;
        if (timer.expired()) {
            fail_wait_any(call, ivars, n, status, cmp, values, value, timer.waited());
        }
    }
}

}  // namespace rshmem_detail

#define RSHMEM_DEFINE_WAIT(NAME, T)                                                                \
    /* Waits until *ivar cmp cmp_value. Local, blocking, acquire, bounded by the timeout. */       \
    static __device__ __forceinline__ void rshmem_##NAME##_wait_until(const T* ivar, int cmp,      \
                                                                      T cmp_value) {               \
        const char* call = "rshmem_" #NAME "_wait_until";                                          \
        rshmem_detail::check_ivars(call, ivar, 1, cmp);                                            \
        (void)rshmem_detail::wait_until(call, ivar, cmp, cmp_value);                               \
    }                                                                                              \
    /* Waits until every selected ivars[i] cmp cmp_value. Local, blocking, acquire. */             \
    static __device__ __forceinline__ void rshmem_##NAME##_wait_until_all(                         \
        const T* ivars, size_t nelems, const int* status, int cmp, T cmp_value) {                  \
        rshmem_detail::wait_all("rshmem_" #NAME "_wait_until_all", ivars, nelems, status, cmp,     \
                                (const T*)0, cmp_value);                                           \
    }                                                                                              \
    /* Waits until some selected ivars[i] cmp cmp_value; returns its index (RSHMEM_SIZE_MAX if     \
       no element is selected). Local, blocking, acquire. */                                       \
    static __device__ __forceinline__ size_t rshmem_##NAME##_wait_until_any(                       \
        const T* ivars, size_t nelems, const int* status, int cmp, T cmp_value) {                  \
        return rshmem_detail::wait_any("rshmem_" #NAME "_wait_until_any", ivars, nelems, status,   \
                                       cmp, (const T*)0, cmp_value);                               \
    }                                                                                              \
    /* Waits until at least one selected element satisfies the comparison; stores the indices      \
       of all that do in indices and returns their count (0 if none is selected). */               \
    static __device__ __forceinline__ size_t rshmem_##NAME##_wait_until_some(                      \
        const T* ivars, size_t nelems, size_t* indices, const int* status, int cmp,                \
        T cmp_value) {                                                                             \
        return rshmem_detail::wait_some("rshmem_" #NAME "_wait_until_some", ivars, nelems,         \
                                        indices, status, cmp, (const T*)0, cmp_value);             \
    }                                                                                              \
    /* wait_until_all with one comparison value per element. */                                    \
    static __device__ __forceinline__ void rshmem_##NAME##_wait_until_all_vector(                  \
        const T* ivars, size_t nelems, const int* status, int cmp, const T* cmp_values) {          \
        rshmem_detail::wait_all("rshmem_" #NAME "_wait_until_all_vector", ivars, nelems, status,   \
                                cmp, cmp_values, (T)0);                                            \
    }                                                                                              \
    /* wait_until_any with one comparison value per element. */                                    \
    static __device__ __forceinline__ size_t rshmem_##NAME##_wait_until_any_vector(                \
        const T* ivars, size_t nelems, const int* status, int cmp, const T* cmp_values) {          \
        return rshmem_detail::wait_any("rshmem_" #NAME "_wait_until_any_vector", ivars, nelems,    \
                                       status, cmp, cmp_values, (T)0);                             \
    }                                                                                              \
    /* wait_until_some with one comparison value per element. */                                   \
    static __device__ __forceinline__ size_t rshmem_##NAME##_wait_until_some_vector(               \
        const T* ivars, size_t nelems, size_t* indices, const int* status, int cmp,                \
        const T* cmp_values) {                                                                     \
        return rshmem_detail::wait_some("rshmem_" #NAME "_wait_until_some_vector", ivars,          \
                                        nelems, indices, status, cmp, cmp_values, (T)0);           \
    }                                                                                              \
    /* 1 if *ivar cmp cmp_value, else 0. Local, non-blocking, acquire. */                          \
    static __device__ __forceinline__ int rshmem_##NAME##_test(const T* ivar, int cmp,             \
                                                               T cmp_value) {                      \
        rshmem_detail::check_ivars("rshmem_" #NAME "_test", ivar, 1, cmp);                         \
        return rshmem_detail::holds(rshmem_detail::ld_acquire_sys(ivar), cmp, cmp_value) ? 1       \
                                                                                         : 0;      \
    }                                                                                              \
    /* 1 if every selected element satisfies the comparison, else 0. Local, acquire. */            \
    static __device__ __forceinline__ int rshmem_##NAME##_test_all(                                \
        const T* ivars, size_t nelems, const int* status, int cmp, T cmp_value) {                  \
        rshmem_detail::check_ivars("rshmem_" #NAME "_test_all", ivars, nelems, cmp);               \
        return rshmem_detail::test_all(ivars, nelems, status, cmp, (const T*)0, cmp_value);        \
    }                                                                                              \
    /* Index of a selected element that satisfies the comparison, or RSHMEM_SIZE_MAX. */           \
    static __device__ __forceinline__ size_t rshmem_##NAME##_test_any(                             \
        const T* ivars, size_t nelems, const int* status, int cmp, T cmp_value) {                  \
        rshmem_detail::check_ivars("rshmem_" #NAME "_test_any", ivars, nelems, cmp);               \
        bool eligible;                                                                             \
        return rshmem_detail::test_any(ivars, nelems, status, cmp, (const T*)0, cmp_value,         \
                                       &eligible);                                                 \
    }                                                                                              \
    /* Stores the indices of the selected elements that satisfy the comparison; returns their      \
       count. Local, non-blocking, acquire. */                                                     \
    static __device__ __forceinline__ size_t rshmem_##NAME##_test_some(                            \
        const T* ivars, size_t nelems, size_t* indices, const int* status, int cmp,                \
        T cmp_value) {                                                                             \
        rshmem_detail::check_ivars("rshmem_" #NAME "_test_some", ivars, nelems, cmp);              \
        bool eligible;                                                                             \
        return rshmem_detail::test_some(ivars, nelems, indices, status, cmp, (const T*)0,          \
                                        cmp_value, &eligible);                                     \
    }                                                                                              \
    /* test_all with one comparison value per element. */                                          \
    static __device__ __forceinline__ int rshmem_##NAME##_test_all_vector(                         \
        const T* ivars, size_t nelems, const int* status, int cmp, const T* cmp_values) {          \
        rshmem_detail::check_ivars("rshmem_" #NAME "_test_all_vector", ivars, nelems, cmp);        \
        return rshmem_detail::test_all(ivars, nelems, status, cmp, cmp_values, (T)0);              \
    }                                                                                              \
    /* test_any with one comparison value per element. */                                          \
    static __device__ __forceinline__ size_t rshmem_##NAME##_test_any_vector(                      \
        const T* ivars, size_t nelems, const int* status, int cmp, const T* cmp_values) {          \
        rshmem_detail::check_ivars("rshmem_" #NAME "_test_any_vector", ivars, nelems, cmp);        \
        bool eligible;                                                                             \
        return rshmem_detail::test_any(ivars, nelems, status, cmp, cmp_values, (T)0, &eligible);   \
    }                                                                                              \
    /* test_some with one comparison value per element. */                                         \
    static __device__ __forceinline__ size_t rshmem_##NAME##_test_some_vector(                     \
        const T* ivars, size_t nelems, size_t* indices, const int* status, int cmp,                \
        const T* cmp_values) {                                                                     \
        rshmem_detail::check_ivars("rshmem_" #NAME "_test_some_vector", ivars, nelems, cmp);       \
        bool eligible;                                                                             \
        return rshmem_detail::test_some(ivars, nelems, indices, status, cmp, cmp_values, (T)0,     \
                                        &eligible);                                                \
    }

RSHMEM_FOR_WAIT_TYPES(RSHMEM_DEFINE_WAIT)

#undef RSHMEM_DEFINE_WAIT
