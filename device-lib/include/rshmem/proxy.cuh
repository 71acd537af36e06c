// rshmem device library: the proxy. Device calls whose target PE cannot be reached by
// load/store (a PE on another host, or every other PE under RSHMEM_DISABLE_P2P=1) become
// requests in a ring of fixed-size slots in host memory mapped into the GPU; a host thread of
// this PE (runtime/src/proxy/) executes them in ticket order through the remote transport that
// serves the target PE (runtime/src/proxy/service.rs routes each request: today TCP or UCX; a
// request to a PE reached only through verbs fails with an error naming the PE). The host
// half of this file is runtime/src/proxy/fifo.rs; the layout is asserted on both sides.
//
// Protocol: a thread takes ticket t with an atomic add on the ring head (a word of this PE's
// GPU slice), waits until slot t mod slots is free (t < consumed + slots; a device-memory copy
// of `consumed` avoids the PCIe read while the ring is far from full), writes the request and
// publishes it with a release store of seq = t + 1 at system scope. The host advances
// `completed` past t once the request has been executed. Fetching requests (atomics with a
// result, small gets) get their result in the slot (`done` = t + 1) and the thread
// acknowledges it (`ack` = t + 1) before the slot can be reused.
//
// Completion: a put through the proxy returns once the host has read its source (or at once
// when the data travels inline, up to RSHMEM_PROXY_INLINE bytes or from a non-global buffer);
// rshmem_quiet and barriers push a request and wait until the host has completed it, which
// includes remote completion of every earlier request. Requests of one PE are executed in
// order, and each is applied after the ones before it to the same target (TCP delivers in
// order per target; the proxy fences a UCX peer's request after the earlier ones), so
// rshmem_fence needs nothing more, and put_signal's data is applied before its signal.
//
// Failures: every wait here is bounded by rshmem_state.timeout_ns and watches the host's error
// word (a lost peer, a rejected request, a CUDA error on the host): either prints what it waited
// for and traps.
#pragma once

#include "rshmem/util.cuh"

// Offsets in this PE's GPU slice (runtime-internal area) of the ring head and the device copy of
// `consumed` (one cache line each).
#define RSHMEM_INTERNAL_PROXY_HEAD 0x2000ull
#define RSHMEM_INTERNAL_PROXY_FREE 0x2040ull

#define RSHMEM_PROXY_OP_PUT 1
#define RSHMEM_PROXY_OP_GET 2
#define RSHMEM_PROXY_OP_AMO 3
#define RSHMEM_PROXY_OP_SIGNAL 4
#define RSHMEM_PROXY_OP_QUIET 5
#define RSHMEM_PROXY_OP_BARRIER 6
#define RSHMEM_PROXY_OP_NOP 7

#define RSHMEM_PROXY_FLAG_INLINE 1
#define RSHMEM_PROXY_FLAG_FETCH 2
#define RSHMEM_PROXY_INLINE 32

// Control block words (byte offsets; one cache line per counter).
#define RSHMEM_PROXY_CONSUMED 0
#define RSHMEM_PROXY_COMPLETED 64
#define RSHMEM_PROXY_ERROR 128
#define RSHMEM_PROXY_ERROR_PE 136
#define RSHMEM_PROXY_ERROR_TICKET 144

// Codes of the error word (the host's ProxyFailure; 0 while no request failed).
#define RSHMEM_PROXY_FAIL_PEER_LOST 1
#define RSHMEM_PROXY_FAIL_TIMEOUT 2
#define RSHMEM_PROXY_FAIL_BAD_REQUEST 3
#define RSHMEM_PROXY_FAIL_CUDA 4

// AMO codes (the host's AmoOp).
#define RSHMEM_PROXY_AMO_FETCH 0
#define RSHMEM_PROXY_AMO_SET 1
#define RSHMEM_PROXY_AMO_SWAP 2
#define RSHMEM_PROXY_AMO_CSWAP 3
#define RSHMEM_PROXY_AMO_ADD 4
#define RSHMEM_PROXY_AMO_AND 5
#define RSHMEM_PROXY_AMO_OR 6
#define RSHMEM_PROXY_AMO_XOR 7

typedef struct __align__(64) rshmem_proxy_req {
    uint64_t seq;       // ticket + 1 once published (device, release)
    uint64_t opword;    // op | amo << 8 | size << 16 | flags << 24 | (uint32_t)pe << 32
    uint64_t remote;    // this PE's symmetric address of the target object
    uint64_t local;     // local device address (put source, get destination); 0 when inline
    uint64_t nbytes;
    uint64_t value;     // atomic operand, signal value
    uint64_t cond;      // compare operand
    uint64_t spare;
    uint64_t done;      // ticket + 1 once a fetching request finished (host, release)
    uint64_t result;    // old value of a fetching atomic
    uint64_t ack;       // ticket + 1 once the device read the result
    uint64_t pad;
    uint64_t data[RSHMEM_PROXY_INLINE / 8];  // inline payload or result
} rshmem_proxy_req;

static_assert(sizeof(rshmem_proxy_req) == 128, "rshmem_proxy_req size");
static_assert(offsetof(rshmem_proxy_req, opword) == 8, "opword offset");
static_assert(offsetof(rshmem_proxy_req, remote) == 16, "remote offset");
static_assert(offsetof(rshmem_proxy_req, nbytes) == 32, "nbytes offset");
static_assert(offsetof(rshmem_proxy_req, done) == 64, "done offset");
static_assert(offsetof(rshmem_proxy_req, result) == 72, "result offset");
static_assert(offsetof(rshmem_proxy_req, ack) == 80, "ack offset");
static_assert(offsetof(rshmem_proxy_req, data) == 96, "data offset");

namespace rshmem_detail {

// True when the runtime started a proxy (some PE is not reachable by load/store).
static __device__ __forceinline__ bool has_proxy() {
    return rshmem_state.proxy_slots != 0;
}

// Local index of PE pe, or -1 when pe is not reachable by load/store (pe must be in range).
static __device__ __forceinline__ int local_index(int pe) {
    if (__builtin_expect((rshmem_state.flags & RSHMEM_STATE_FLAG_CONTIGUOUS) != 0, 1)) {
        int local = pe - (rshmem_state.my_pe - rshmem_state.my_local);
        return (unsigned)local < (unsigned)rshmem_state.n_local ? local : -1;
    }
    if (pe == rshmem_state.my_pe) return rshmem_state.my_local;
    return __ldg((const int32_t*)rshmem_state.pe_local_table + pe);
}

static __device__ __forceinline__ uint64_t* proxy_word(uint32_t off) {
    return (uint64_t*)(rshmem_state.proxy_ctrl + off);
}

static __device__ __forceinline__ rshmem_proxy_req* proxy_slot(uint64_t t) {
    return (rshmem_proxy_req*)rshmem_state.proxy_fifo + (t & (rshmem_state.proxy_slots - 1));
}

static __device__ __noinline__ RSHMEM_NORETURN void proxy_fail(const char* call, const char* what, uint64_t t,
                                               unsigned long long waited) {
    // Acquire: the host stores the failed request's PE and ticket before the error word.
    uint64_t err = ld_acquire_sys(proxy_word(RSHMEM_PROXY_ERROR));
    if (err != 0) {
        const char* why = err == RSHMEM_PROXY_FAIL_PEER_LOST ? "a PE it sent to is gone"
                          : err == RSHMEM_PROXY_FAIL_TIMEOUT ? "a wait of the host proxy timed out"
                          : err == RSHMEM_PROXY_FAIL_BAD_REQUEST
                              ? "a request was malformed or rejected by its target"
                              : "a CUDA call of the host proxy failed";
        printf("rshmem: %s on PE %d: the host proxy failed request #%llu (to PE %lld): %s (the "
               "host printed the details)\n",
               call, rshmem_state.my_pe,
               (unsigned long long)ld_relaxed_sys(proxy_word(RSHMEM_PROXY_ERROR_TICKET)),
               (long long)ld_relaxed_sys(proxy_word(RSHMEM_PROXY_ERROR_PE)), why);
    } else {
        printf("rshmem: %s on PE %d: timed out after %llu ns waiting for %s (request #%llu; the "
               "host proxy has completed %llu requests and freed %llu slots)\n",
               call, rshmem_state.my_pe, waited, what, (unsigned long long)t,
               (unsigned long long)ld_relaxed_sys(proxy_word(RSHMEM_PROXY_COMPLETED)),
               (unsigned long long)ld_relaxed_sys(proxy_word(RSHMEM_PROXY_CONSUMED)));
    }
    __trap();
}

// Takes a ticket and waits for its slot to be free. The host read the slot's previous request
// before it stored `consumed` (release): the slow path acquires `consumed` itself, then
// publishes it in the hint with a release (fence + atomicMax); the fast path, which read the
// hint with a plain load, makes that an acquire with a fence, so its writes to the slot come
// after the host's reads in either case (loom-tests/src/ring_model.rs checks this protocol).
static __device__ __noinline__ rshmem_proxy_req* proxy_reserve(const char* call, uint64_t* ticket) {
    const uint64_t base = my_slice();
    unsigned long long* head = (unsigned long long*)(base + RSHMEM_INTERNAL_PROXY_HEAD);
    unsigned long long* hint = (unsigned long long*)(base + RSHMEM_INTERNAL_PROXY_FREE);
    const uint64_t slots = rshmem_state.proxy_slots;
    // The hint is read before the ticket is taken so that the two memory round trips overlap;
    // it only grows, so an older value is merely more cautious.
    const uint64_t free_below = *(volatile unsigned long long*)hint + slots;
    const uint64_t t = atomicAdd(head, 1ull);
    if (t >= free_below) {
        wait_timer timer;
        uint32_t polls = 0;
        for (;;) {
            uint64_t c = ld_acquire_sys(proxy_word(RSHMEM_PROXY_CONSUMED));
            if (t < c + slots) {
                fence_acq_rel_gpu();
                atomicMax(hint, (unsigned long long)c);
                break;
            }
            if ((++polls & 15u) == 0 && ld_relaxed_sys(proxy_word(RSHMEM_PROXY_ERROR)) != 0) {
                proxy_fail(call, "", t, 0);
            }
            if (timer.expired()) {
                proxy_fail(call, "a free slot in the proxy ring (it is full)", t, timer.waited());
            }
        }
    } else {
        fence_acq_rel_gpu();
    }
    *ticket = t;
    return proxy_slot(t);
}

// A request being built (in the caller's local memory: the noinline functions below take a
// pointer, which keeps their register use, and so that of every kernel calling them, low).
struct proxy_args {
    uint64_t opword;
    uint64_t remote, local, nbytes, value, cond;
    const void* inl;    // n_inline bytes of inline payload
    uint32_t n_inline;
};

static __device__ __forceinline__ uint64_t proxy_opword(uint32_t op, uint32_t amo, uint32_t size,
                                                        uint32_t flags, int pe) {
    return (uint64_t)(op | (amo << 8) | (size << 16) | (flags << 24)) |
           ((uint64_t)(uint32_t)pe << 32);
}

// Pushes one request; returns its ticket.
static __device__ __noinline__ uint64_t proxy_push_args(const char* call, const proxy_args* a) {
    uint64_t t;
    rshmem_proxy_req* r = cold(&proxy_reserve)(call, &t);
    r->opword = a->opword;
    r->remote = a->remote;
    r->local = a->local;
    r->nbytes = a->nbytes;
    r->value = a->value;
    r->cond = a->cond;
    if (a->n_inline != 0) {
        uint64_t w[RSHMEM_PROXY_INLINE / 8] = {0, 0, 0, 0};
        for (uint32_t i = 0; i < a->n_inline; ++i) {
            ((uint8_t*)w)[i] = ((const uint8_t*)a->inl)[i];
        }
        for (uint32_t i = 0; i < (a->n_inline + 7) / 8; ++i) r->data[i] = w[i];
    }
    st_release_sys(&r->seq, t + 1);
    return t;
}

static __device__ __forceinline__ uint64_t proxy_push(const char* call, uint32_t op, uint32_t amo,
                                                      uint32_t size, uint32_t flags, int pe,
                                                      uint64_t remote, uint64_t local,
                                                      uint64_t nbytes, uint64_t value,
                                                      uint64_t cond, const void* inl,
                                                      uint32_t n_inline) {
    proxy_args a;
    a.opword = proxy_opword(op, amo, size, flags, pe);
    a.remote = remote;
    a.local = local;
    a.nbytes = nbytes;
    a.value = value;
    a.cond = cond;
    a.inl = inl;
    a.n_inline = n_inline;
    return cold(&proxy_push_args)(call, &a);
}

// Waits until the host has executed every request up to ticket t.
static __device__ __noinline__ void proxy_wait(const char* call, uint64_t t) {
    const uint64_t* completed = proxy_word(RSHMEM_PROXY_COMPLETED);
    wait_timer timer;
    uint32_t polls = 0;
    while (ld_acquire_sys(completed) <= t) {
        if ((++polls & 15u) == 0 && ld_relaxed_sys(proxy_word(RSHMEM_PROXY_ERROR)) != 0) {
            proxy_fail(call, "", t, 0);
        }
        if (timer.expired()) proxy_fail(call, "the host proxy to complete it", t, timer.waited());
    }
}

// Waits for a fetching request's result; copies n inline bytes to out (if any); acknowledges.
static __device__ __noinline__ uint64_t proxy_fetch(const char* call, uint64_t t, void* out,
                                                    uint32_t n) {
    rshmem_proxy_req* r = proxy_slot(t);
    wait_timer timer;
    uint32_t polls = 0;
    while (ld_acquire_sys(&r->done) != t + 1) {
        if ((++polls & 15u) == 0 && ld_relaxed_sys(proxy_word(RSHMEM_PROXY_ERROR)) != 0) {
            proxy_fail(call, "", t, 0);
        }
        if (timer.expired()) proxy_fail(call, "the host proxy's reply", t, timer.waited());
    }
    uint64_t v = ld_relaxed_sys(&r->result);
    if (n != 0) {
        uint64_t w[RSHMEM_PROXY_INLINE / 8];
        for (uint32_t i = 0; i < (n + 7) / 8; ++i) w[i] = ld_relaxed_sys(&r->data[i]);
        for (uint32_t i = 0; i < n; ++i) ((uint8_t*)out)[i] = ((const uint8_t*)w)[i];
    }
    // Release: the reads of the result above come before the host may reuse the slot.
    st_release_sys(&r->ack, t + 1);
    return v;
}

static __device__ __noinline__ RSHMEM_NORETURN void proxy_missing(const char* call, int pe, bool say) {
    fail_unreachable(call, pe, say);
}

// Put through the proxy. Returns once `src` may be reused (wait: the host read it; inline data
// was copied into the slot). Returns the last ticket.
static __device__ __noinline__ uint64_t proxy_putmem(const char* call, void* dest, const void* src,
                                                     size_t nbytes, int pe, bool wait) {
    if (!has_proxy()) proxy_missing(call, pe, true);
    uint64_t t = 0;
    if (nbytes > RSHMEM_PROXY_INLINE && __isGlobal(src)) {
        t = proxy_push(call, RSHMEM_PROXY_OP_PUT, 0, 0, 0, pe, (uint64_t)dest, (uint64_t)src,
                       nbytes, 0, 0, nullptr, 0);
        if (wait) cold(&proxy_wait)(call, t);
        return t;
    }
    for (size_t done = 0; done < nbytes; done += RSHMEM_PROXY_INLINE) {
        size_t k = nbytes - done < RSHMEM_PROXY_INLINE ? nbytes - done : RSHMEM_PROXY_INLINE;
        t = proxy_push(call, RSHMEM_PROXY_OP_PUT, 0, 0, RSHMEM_PROXY_FLAG_INLINE, pe,
                       (uint64_t)dest + done, 0, k, 0, 0, (const char*)src + done, (uint32_t)k);
    }
    return t;
}

// p through the proxy: `size` bytes of `bits`, inline, not waited for.
static __device__ __noinline__ void proxy_p(const char* call, void* dest, uint64_t bits,
                                            uint32_t size, int pe) {
    if (!has_proxy()) proxy_missing(call, pe, true);
    proxy_push(call, RSHMEM_PROXY_OP_PUT, 0, 0, RSHMEM_PROXY_FLAG_INLINE, pe, (uint64_t)dest, 0,
               size, 0, 0, &bits, size);
}

// Get through the proxy; returns with the data in dest.
static __device__ __noinline__ void proxy_getmem(const char* call, void* dest, const void* src,
                                                 size_t nbytes, int pe) {
    if (!has_proxy()) proxy_missing(call, pe, true);
    if (nbytes > RSHMEM_PROXY_INLINE && __isGlobal(dest)) {
        uint64_t t = proxy_push(call, RSHMEM_PROXY_OP_GET, 0, 0, 0, pe, (uint64_t)src,
                                (uint64_t)dest, nbytes, 0, 0, nullptr, 0);
        cold(&proxy_wait)(call, t);
        return;
    }
    for (size_t done = 0; done < nbytes; done += RSHMEM_PROXY_INLINE) {
        size_t k = nbytes - done < RSHMEM_PROXY_INLINE ? nbytes - done : RSHMEM_PROXY_INLINE;
        uint64_t t = proxy_push(call, RSHMEM_PROXY_OP_GET, 0, 0,
                                RSHMEM_PROXY_FLAG_INLINE | RSHMEM_PROXY_FLAG_FETCH, pe,
                                (uint64_t)src + done, 0, k, 0, 0, nullptr, 0);
        cold(&proxy_fetch)(call, t, (char*)dest + done, (uint32_t)k);
    }
}

// g through the proxy.
template <typename T>
static __device__ __forceinline__ T proxy_g(const char* call, const T* src, int pe) {
    T v;
    proxy_getmem(call, &v, src, sizeof(T), pe);
    return v;
}

// An atomic through the proxy (op: RSHMEM_PROXY_AMO_*); fetch: wait for and return the old value.
static __device__ __noinline__ uint64_t proxy_amo(const char* call, uint32_t op, void* dest,
                                                  uint32_t size, uint64_t value, uint64_t cond,
                                                  int pe, bool fetch) {
    if (!has_proxy()) proxy_missing(call, pe, true);
    uint64_t t = proxy_push(call, RSHMEM_PROXY_OP_AMO, op, size,
                            fetch ? RSHMEM_PROXY_FLAG_FETCH : 0, pe, (uint64_t)dest, 0, size,
                            value, cond, nullptr, 0);
    return fetch ? cold(&proxy_fetch)(call, t, nullptr, 0) : 0;
}

// A signal update (RSHMEM_SIGNAL_SET / _ADD) through the proxy; returns its ticket.
static __device__ __noinline__ uint64_t proxy_signal(const char* call, uint64_t* sig,
                                                     uint64_t value, int sig_op, int pe) {
    if (!has_proxy()) proxy_missing(call, pe, true);
    return proxy_push(call, RSHMEM_PROXY_OP_SIGNAL, (uint32_t)sig_op, 8, 0, pe, (uint64_t)sig, 0,
                      8, value, 0, nullptr, 0);
}

struct proxy_signal_args {
    void* dest;
    const void* src;
    size_t nbytes;
    uint64_t* sig;
    uint64_t value;
    int sig_op, pe;
};

static __device__ __noinline__ void proxy_putmem_signal_args(const char* call,
                                                             const proxy_signal_args* a) {
    cold(&proxy_putmem)(call, a->dest, a->src, a->nbytes, a->pe, false);
    uint64_t t = cold(&proxy_signal)(call, a->sig, a->value, a->sig_op, a->pe);
    cold(&proxy_wait)(call, t);
}

// put_signal through the proxy: the data, then the signal (applied in that order at the
// target); returns once the source may be reused.
static __device__ __forceinline__ void proxy_putmem_signal(const char* call, void* dest,
                                                           const void* src, size_t nbytes,
                                                           uint64_t* sig, uint64_t value,
                                                           int sig_op, int pe) {
    proxy_signal_args a = {dest, src, nbytes, sig, value, sig_op, pe};
    proxy_putmem_signal_args(call, &a);
}

// Pushes `op` (QUIET, BARRIER, NOP) and waits until the host has completed it.
static __device__ __noinline__ void proxy_sync_op(const char* call, uint32_t op) {
    uint64_t t = proxy_push(call, op, 0, 0, 0, rshmem_state.my_pe, 0, 0, 0, 0, 0, nullptr, 0);
    cold(&proxy_wait)(call, t);
}

// rshmem_quiet's proxy part: every request pushed before it is complete at its target.
static __device__ __noinline__ void proxy_quiet(const char* call) {
    cold(&proxy_sync_op)(call, RSHMEM_PROXY_OP_QUIET);
}

// One ring round trip with nothing to do (benchmarks).
static __device__ __forceinline__ void proxy_nop(void) {
    if (has_proxy()) proxy_sync_op("rshmem proxy nop", RSHMEM_PROXY_OP_NOP);
}

}  // namespace rshmem_detail
