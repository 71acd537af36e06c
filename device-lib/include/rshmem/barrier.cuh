// rshmem device library: barriers over all PEs (rshmem_barrier_all, rshmem_sync_all and their
// _warp / _block forms).
//
// Collective: every PE calls the same sequence of barriers, and on each PE exactly one thread
// (plain names), one warp (_warp: all its threads, same arguments) or one block (_block: all its
// threads) makes each call. The device barrier's epoch lives in GPU memory and counts device
// barriers only.
//
// Memory ordering: a barrier releases and acquires at system scope. Everything the calling
// thread / warp / block did before it (puts, AMOs, signal updates, plain stores to symmetric
// memory) is visible to every PE after it returns, and the caller sees everything every other PE
// did before its barrier: rshmem_barrier_all completes earlier puts like rshmem_quiet. On the
// load/store transport rshmem_sync_all gives the same guarantees (OpenSHMEM's sync_all only
// promises ordering of stores; here puts are stores). Work of other threads of the block is
// covered only when they synchronize with the caller (e.g. __syncthreads) before and after.
//
// Algorithm (flat, one round): each PE keeps an epoch in its own internal BARRIER_EPOCH word.
// Barrier number e: the caller stores e into slot my_local of every other local PE's
// BARRIER_FLAGS array (fence.acq_rel.sys first, then st.relaxed.sys: a release), then waits
// until every slot j of its own array holds at least e (ld.acquire.sys; see barrier_wait).
// Epochs only grow, so flags are never reset. In _warp / _block form the threads handle
// different peers in parallel. Cost: one system-scope fence (about 0.6 us on H200) plus one
// NVLink one-way trip. (A single arrival counter per PE, added to with red.add, measured
// slower: 2.1 us at 2 PEs.)
//
// Bounded by rshmem_state.timeout_ns: a barrier that waits longer prints which PE it waits for
// and traps. When some PE is on another host (or RSHMEM_DISABLE_P2P=1), the barrier goes
// through the proxy instead: one thread fences, pushes a BARRIER request and waits; the host
// completes every earlier request of this PE (remote completion), then runs a dissemination
// barrier over all PEs with host flags of its own, then completes the request.
#pragma once

#include "rshmem/util.cuh"
#include "rshmem/proxy.cuh"

namespace rshmem_detail {

static __device__ __forceinline__ uint64_t* barrier_epoch_word() {
    return (uint64_t*)(my_slice() + RSHMEM_INTERNAL_BARRIER_EPOCH);
}

// Slot `slot` of local PE j's barrier flags.
static __device__ __forceinline__ uint64_t* barrier_flag(int j, int slot) {
    return (uint64_t*)(slice_of(j) + RSHMEM_INTERNAL_BARRIER_FLAGS) + slot;
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_barrier_pes(const char* call, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: the job has %d PEs but only %d on this host; device "
               "barriers across hosts are not supported yet (at most %d PEs per host)\n",
               call, rshmem_state.my_pe, rshmem_state.n_pes, rshmem_state.n_local,
               RSHMEM_MAX_LOCAL_PES);
    }
    __trap();
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_barrier_wait(const char* call, int j, uint64_t epoch,
                                                      const uint64_t* flag, uint64_t seen,
                                                      unsigned long long waited) {
    printf("rshmem: %s on PE %d: timed out after %llu ns waiting for PE %d (local PE %d) to "
           "reach device barrier %llu; its flag at %p holds %llu (every PE must make the same "
           "sequence of barrier calls)\n",
           call, rshmem_state.my_pe, waited, pe_of_local(j), j, (unsigned long long)epoch, flag,
           (unsigned long long)seen);
    __trap();
}

// The epoch word is read with a plain (weak, L1-cacheable) load: only this PE's barrier callers
// write it, and successive barrier calls of a PE are ordered by synchronization (program order,
// a block barrier, a kernel boundary, or whatever the program uses to hand the barrier from one
// thread to the next, which invalidates stale L1 lines), so the load sees the last epoch. After
// the update the line is prefetched into L1 again, so the next barrier does not wait for L2.
static __device__ __forceinline__ uint64_t barrier_epoch_read() {
    return *(const uint64_t*)barrier_epoch_word();
}

static __device__ __forceinline__ void barrier_epoch_write(uint64_t epoch) {
    uint64_t* w = barrier_epoch_word();
    *w = epoch;
    asm volatile("prefetch.global.L1 [%0];" ::"l"(w) : "memory");
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_barrier_slots(const char* call, int first, int stride,
                                                       uint64_t epoch,
                                                       unsigned long long waited) {
    const int n = rshmem_state.n_local, me = rshmem_state.my_local;
    for (int j = first; j < n; j += stride) {
        if (j == me) continue;
        const uint64_t* flag = barrier_flag(me, j);
        uint64_t v = ld_relaxed_sys(flag);
        if (v < epoch) fail_barrier_wait(call, j, epoch, flag, v, waited);
    }
    __trap();
}

// Waits until slots j = first, first + stride, ... (< n, != me) of this PE's barrier flags hold
// at least epoch, with acquire loads. A thread that owns one slot polls it; the single thread of
// a thread-scope barrier (stride 1) polls the slots in 16-byte pairs (ld.acquire.sys.v2.u64), so
// a poll of n slots costs n/2 memory latencies (acquire loads do not overlap).
static __device__ __forceinline__ void barrier_wait(const char* call, int first, int stride, int n,
                                                    int me, uint64_t epoch) {
    wait_timer timer;
    if (stride == 1 && n > 2) {
        const uint64_t* flags = barrier_flag(me, 0);  // 16-byte aligned
        for (;;) {
            bool ready = true;
            for (int j = first & ~1; j < n; j += 2) {
                uint64_t a, b;
                ld_acquire_sys_v2(flags + j, a, b);
                ready &= (j < first || j == me || a >= epoch);
                ready &= (j + 1 >= n || j + 1 == me || b >= epoch);
            }
            if (ready) return;
            if (timer.expired()) fail_barrier_slots(call, first, 1, epoch, timer.waited());
        }
    }
    for (int j = first; j < n; j += stride) {
        if (j == me) continue;
        const uint64_t* flag = barrier_flag(me, j);
        for (;;) {
            if (ld_acquire_sys(flag) >= epoch) break;
            if (timer.expired()) fail_barrier_slots(call, first, stride, epoch, timer.waited());
        }
    }
}

// Inlined into the kernel (RSHMEM_ENGINE, util.cuh): its registers are allocated with the
// kernel's (28-42 registers for the barrier kernels of device-lib/tests/regbudget.cu).
template <class S>
RSHMEM_ENGINE void barrier_body(const char* call) {
    // Orders every thread's earlier accesses before the release below (release is cumulative).
    S::sync();
    const uint32_t rank = S::rank();
    const uint32_t size = S::size();
    check_init(call, rank == 0);
    const int n = rshmem_state.n_local;
    const int me = rshmem_state.my_local;
    if (__builtin_expect(n != rshmem_state.n_pes, 0)) {
        if (!has_proxy()) fail_barrier_pes(call, rank == 0);
        if (rank == 0) {
            fence_sc_sys();
            cold(&proxy_sync_op)(call, RSHMEM_PROXY_OP_BARRIER);
        }
        S::sync();
        return;
    }
    if (n > RSHMEM_MAX_LOCAL_PES) fail_barrier_pes(call, rank == 0);
    uint64_t epoch = 0;
    if ((int)rank < n) {
        // Only this group writes the epoch word, after the closing sync below.
        epoch = barrier_epoch_read() + 1;
        fence_acq_rel_sys();
        for (int j = (int)rank; j < n; j += (int)size) {
            if (j != me) st_relaxed_sys(barrier_flag(j, me), epoch);
        }
        barrier_wait(call, (int)rank, (int)size, n, me, epoch);
    }
    // Every thread of the group is ordered after every acquire above.
    S::sync();
    if (rank == 0) barrier_epoch_write(epoch);
}

template <class S>
static __device__ __forceinline__ void barrier(const char* call) {
    barrier_body<S>(call);
}

}  // namespace rshmem_detail

// Barrier over all PEs: returns once every PE has called it; completes and orders all earlier
// accesses of the caller (see the top of this file). Collective, called by exactly one thread
// per PE.
RSHMEM_TWIN void rshmem_barrier_all(void) {
    RSHMEM_TWIN_CALL(rshmemi_host_rshmem_barrier_all(),
                     rshmem_detail::barrier<rshmem_detail::thread_scope>("rshmem_barrier_all"));
}

// rshmem_barrier_all called by all threads of exactly one warp per PE.
static __device__ __forceinline__ void rshmem_barrier_all_warp(void) {
    rshmem_detail::barrier<rshmem_detail::warp_scope>("rshmem_barrier_all_warp");
}

// rshmem_barrier_all called by all threads of exactly one block per PE.
static __device__ __forceinline__ void rshmem_barrier_all_block(void) {
    rshmem_detail::barrier<rshmem_detail::block_scope>("rshmem_barrier_all_block");
}

// Synchronizes all PEs: returns once every PE has called it; orders earlier stores (on this
// transport: the same guarantees as rshmem_barrier_all). Collective, one thread per PE.
RSHMEM_TWIN void rshmem_sync_all(void) {
    RSHMEM_TWIN_CALL(rshmemi_host_rshmem_sync_all(),
                     rshmem_detail::barrier<rshmem_detail::thread_scope>("rshmem_sync_all"));
}

// rshmem_sync_all called by all threads of exactly one warp per PE.
static __device__ __forceinline__ void rshmem_sync_all_warp(void) {
    rshmem_detail::barrier<rshmem_detail::warp_scope>("rshmem_sync_all_warp");
}

// rshmem_sync_all called by all threads of exactly one block per PE.
static __device__ __forceinline__ void rshmem_sync_all_block(void) {
    rshmem_detail::barrier<rshmem_detail::block_scope>("rshmem_sync_all_block");
}
