// rshmem device library: PE queries, address translation, argument checks, wait timeouts and
// the thread / warp / block scopes the cooperative calls are written against.
//
// Translation (see state.cuh): local PE j's slice of the GPU heap is
// [heap_base + j*slice, heap_base + (j+1)*slice) at the same virtual address in every process of
// the host, so this PE's symmetric address p names PE pe's copy at
//     p + (local(pe) - my_local) * slice,   local(pe) = ((int32_t*)pe_local_table)[pe]
// (or pe - (my_pe - my_local) when the state says the host's PEs are contiguous).
// local(pe) == -1 means PE pe is on another host and cannot be reached by load/store; calls to
// it go through the proxy (proxy.cuh), or trap with a message when there is none.
//
// Checks: with RSHMEM_STATE_FLAG_DEBUG set in rshmem_state.flags, every call checks its PE
// argument (0 <= pe < n_pes) and that each symmetric range lies in this PE's user heap
// [my slice + heap_user_start, my slice + heap_mapped) or in the registered user buffers at the
// top of the slice [my slice + heap_reg_start, next slice); on failure it prints
//     rshmem: <call> on PE <me>: <cause>
// and executes __trap(), which aborts the kernel (the host sees an error on its next
// synchronization). In cooperative (warp/block) calls every thread checks, one thread prints.
#pragma once

#include "rshmem/state.cuh"
#include "rshmem/twin.cuh"
#include "rshmem/ptx.cuh"
#include "rshmem/type_lists.h"

#if !defined(__CUDACC_RTC__)
#include <stdio.h>  // device printf under nvcc (NVRTC declares it itself)
#endif

// The constants the host C API shares (comparisons RSHMEM_CMP_*, signal operations
// RSHMEM_SIGNAL_*, team handles RSHMEM_TEAM_*, RSHMEM_SIZE_MAX) and the element types, as
// X(name, type) lists for code that wants to expand something per type (RSHMEM_FOR_RMA_TYPES,
// _AMO_TYPES, _AMO_FLOAT_TYPES, _AMO_BITWISE_TYPES, _WAIT_TYPES, and the reduction lists
// coll.cuh uses) are defined once, in rshmem/type_lists.h, which rshmem.h includes too.

// This PE's number. Thread scope, local, no memory access beyond the constant bank. Host twin.
RSHMEM_TWIN int rshmem_my_pe(void) {
    return RSHMEM_TWIN_CALL(rshmemi_host_rshmem_my_pe(), rshmem_state.my_pe);
}

// Number of PEs in the job. Thread scope, local. Host twin.
RSHMEM_TWIN int rshmem_n_pes(void) {
    return RSHMEM_TWIN_CALL(rshmemi_host_rshmem_n_pes(), rshmem_state.n_pes);
}

namespace rshmem_detail {

// ---------------------------------------------------------------------------------------------
// Scopes. A cooperative call is made by every thread of the group with the same arguments;
// rank() numbers the threads 0..size()-1 and sync() is a barrier of the group that also orders
// memory among its threads (bar.sync / bar.warp.sync).

static __device__ __forceinline__ uint32_t block_thread_id() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

static __device__ __forceinline__ uint32_t block_threads() {
    return blockDim.x * blockDim.y * blockDim.z;
}

struct thread_scope {
    static __device__ __forceinline__ uint32_t rank() { return 0; }
    static __device__ __forceinline__ uint32_t size() { return 1; }
    static __device__ __forceinline__ void sync() {}
};

// A warp: the threads with linear block thread ids 32k..32k+31 (fewer in a partial last warp).
struct warp_scope {
    static __device__ __forceinline__ uint32_t rank() { return laneid(); }
    static __device__ __forceinline__ uint32_t size() {
        uint32_t left = block_threads() - (block_thread_id() & ~31u);
        return left < 32u ? left : 32u;
    }
    static __device__ __forceinline__ void sync() {
        uint32_t n = size();
        __syncwarp(n == 32u ? 0xffffffffu : ((1u << n) - 1u));
    }
};

struct block_scope {
    static __device__ __forceinline__ uint32_t rank() { return block_thread_id(); }
    static __device__ __forceinline__ uint32_t size() { return block_threads(); }
    static __device__ __forceinline__ void sync() { __syncthreads(); }
};

// ---------------------------------------------------------------------------------------------
// State queries.

static __device__ __forceinline__ bool debug() {
    return (rshmem_state.flags & RSHMEM_STATE_FLAG_DEBUG) != 0;
}

// Start of this PE's slice.
static __device__ __forceinline__ uint64_t my_slice() {
    return rshmem_state.heap_base + (uint64_t)(int64_t)rshmem_state.my_local * rshmem_state.slice;
}

// Start of local PE j's slice.
static __device__ __forceinline__ uint64_t slice_of(int j) {
    return rshmem_state.heap_base + (uint64_t)(int64_t)j * rshmem_state.slice;
}

// How far local PE `local`'s copy of a symmetric address lies from this PE's copy:
// (local - my_local) slices, added to the address by every translation. Two forms of the same
// value:
//  * slice_delta, for the one-element calls (p, g, atomics, signals), which sit in the caller's
//    loops: a slice is a whole number of GiB (the heap's base alignment; the runtime refuses a
//    state where it is not, or where n_local slices exceed 2^31 GiB), so the product is taken
//    in 32 bits on GiB units and shifted. With the 64-bit product ptxas rebuilt the offset with
//    a 64-bit multiply-add for every element of the caller's loop: NVSHMEM's shmem_g_latency
//    `pull` loop took 0.157 us per iteration at 2 KiB, 0.135 with this form, on one H200
//    (0.113 with the peer pointer taken once before the loop).
//  * slice_delta_wide, the 64-bit product, for the bulk engines, collectives and rshmem_ptr,
//    which translate once per call: there the short form cost 1-2 registers in the put and get
//    kernels and 6 in a reduction built with -rdc (device-lib/tests/regbudget).
#define RSHMEM_SLICE_UNIT_LOG2 30
static __device__ __forceinline__ int64_t slice_delta(int local) {
    const int32_t units = (int32_t)(rshmem_state.slice >> RSHMEM_SLICE_UNIT_LOG2);
    return (int64_t)((local - rshmem_state.my_local) * units) << RSHMEM_SLICE_UNIT_LOG2;
}
static __device__ __forceinline__ int64_t slice_delta_wide(int local) {
    return (int64_t)(local - rshmem_state.my_local) * (int64_t)rshmem_state.slice;
}

// Local PE `local`'s copy of this PE's symmetric address p: at_local for one-element calls,
// at_local_wide for the bulk ones (see slice_delta).
template <typename T>
static __device__ __forceinline__ T* at_local(T* p, int local) {
    return (T*)((char*)p + slice_delta(local));
}
template <typename T>
static __device__ __forceinline__ T* at_local_wide(T* p, int local) {
    return (T*)((char*)p + slice_delta_wide(local));
}

// The PE number of local index j (scans the table; for messages only).
static __device__ int pe_of_local(int j) {
    const int32_t* table = (const int32_t*)rshmem_state.pe_local_table;
    for (int pe = 0; pe < rshmem_state.n_pes; ++pe) {
        if (table[pe] == j) return pe;
    }
    return -1;
}

static __device__ __forceinline__ const char* cmp_name(int cmp) {
    switch (cmp) {
        case RSHMEM_CMP_EQ: return "==";
        case RSHMEM_CMP_NE: return "!=";
        case RSHMEM_CMP_GT: return ">";
        case RSHMEM_CMP_GE: return ">=";
        case RSHMEM_CMP_LT: return "<";
        case RSHMEM_CMP_LE: return "<=";
        default: return "(invalid comparison)";
    }
}

// ---------------------------------------------------------------------------------------------
// Checks. `say` selects the thread that prints (all threads trap).

static __device__ __noinline__ RSHMEM_NORETURN void fail_pe(const char* call, int pe, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: PE %d is out of range (the job has PEs 0..%d)\n", call,
               rshmem_state.my_pe, pe, rshmem_state.n_pes - 1);
    }
    __trap();
}

static __device__ __forceinline__ void check_pe(const char* call, int pe, bool say) {
    if (pe < 0 || pe >= rshmem_state.n_pes) fail_pe(call, pe, say);
}

// Out of line (costs the fast path nothing): a range outside the heap may still lie in the
// user buffers registered at the top of the slice, [heap_reg_start, slice); then it passes.
static __device__ __noinline__ void fail_range(const char* call, const char* what, const void* p,
                                               size_t nbytes, bool say) {
    uint64_t reg = rshmem_state.heap_reg_start, a = (uint64_t)p - my_slice();
    if (reg != 0 && a >= reg && a < rshmem_state.slice && nbytes <= rshmem_state.slice - a) return;
    if (say) {
        uint64_t lo = my_slice() + rshmem_state.heap_user_start;
        uint64_t hi = my_slice() + rshmem_state.heap_mapped;
        printf("rshmem: %s on PE %d: %s [%p, +%llu bytes) is not inside this PE's symmetric heap "
               "[0x%llx, 0x%llx) (only addresses from rshmem's allocation calls are symmetric)\n",
               call, rshmem_state.my_pe, what, p, (unsigned long long)nbytes,
               (unsigned long long)lo, (unsigned long long)hi);
    }
    __trap();
}

// Checks that [p, p + nbytes) lies in this PE's user heap. An empty range is always accepted.
static __device__ __forceinline__ void check_sym(const char* call, const char* what, const void* p,
                                                 size_t nbytes, bool say) {
    if (nbytes == 0) return;
    uint64_t a = (uint64_t)p;
    uint64_t base = my_slice();
    uint64_t lo = base + rshmem_state.heap_user_start;
    uint64_t hi = base + rshmem_state.heap_mapped;
    if (a < lo || a >= hi || nbytes > hi - a) fail_range(call, what, p, nbytes, say);
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_align(const char* call, const char* what, const void* p,
                                               size_t align, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: %s %p is not %llu-byte aligned\n", call, rshmem_state.my_pe,
               what, p, (unsigned long long)align);
    }
    __trap();
}

static __device__ __forceinline__ void check_align(const char* call, const char* what,
                                                   const void* p, size_t align, bool say) {
    if (((uint64_t)p & (align - 1)) != 0) fail_align(call, what, p, align, say);
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_bytes(const char* call, size_t nelems,
                                                                size_t size, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: %llu elements of %llu bytes overflow the address space\n",
               call, rshmem_state.my_pe, (unsigned long long)nelems, (unsigned long long)size);
    }
    __trap();
}

// Checks that nelems * size does not overflow; returns the byte count.
static __device__ __forceinline__ size_t check_bytes(const char* call, size_t nelems, size_t size,
                                                     bool say) {
    if (size > 1 && nelems > RSHMEM_SIZE_MAX / size) fail_bytes(call, nelems, size, say);
    return nelems * size;
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_cmp(const char* call, int cmp, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: %d is not a comparison (use RSHMEM_CMP_EQ/NE/GT/GE/LT/LE)\n",
               call, rshmem_state.my_pe, cmp);
    }
    __trap();
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_sig_op(const char* call, int op, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: %d is not a signal operation (use RSHMEM_SIGNAL_SET or "
               "RSHMEM_SIGNAL_ADD)\n",
               call, rshmem_state.my_pe, op);
    }
    __trap();
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_unreachable(const char* call, int pe, bool say) {
    // Without the debug checks a PE out of range also lands here: name that cause instead.
    if (pe < 0 || pe >= rshmem_state.n_pes) fail_pe(call, pe, say);
    if (say) {
        printf("rshmem: %s on PE %d: PE %d is on another host and cannot be reached by "
               "load/store from the GPU, and no proxy serves this module (its device state "
               "has proxy_slots = 0)\n",
               call, rshmem_state.my_pe, pe);
    }
    __trap();
}

// A kernel launched before the runtime delivered the device state (before init, after
// finalize, or in a unit the runtime never reached) sees version 0: calls that would touch
// memory stop here instead of writing through a zero heap base.
static __device__ __noinline__ RSHMEM_NORETURN void fail_uninit(const char* call, bool say) {
    if (say) {
        printf("rshmem: %s: called in a kernel before rshmem was initialized (or after finalize): "
               "this module has no device state (launch kernels between init and finalize)\n",
               call);
    }
    __trap();
}

static __device__ __forceinline__ void check_init(const char* call, bool say) {
    if (__builtin_expect(rshmem_state.version == 0, 0)) fail_uninit(call, say);
}

// ---------------------------------------------------------------------------------------------
// Fast paths. Every call is split in two: an inlined fast path that holds only the operation
// itself, and one cold function (__noinline__) that does everything else -- the debug checks,
// the uninitialized-state trap, the PE table of non-contiguous hosts, the proxy, the messages.
// A kernel then spends registers on the operation alone; the cold function's own registers
// count too (a kernel needs the most any function it calls uses), so the cold functions are
// kept small as well (device-lib/tests/regbudget checks every call against its budget).
//
// Cold calls go through cold(&fn)(args...): a call through a function pointer the compiler
// cannot see through. ptxas then compiles it with the ABI's callee-saved registers, so the
// caller's live values and the callee's registers share the register file (the kernel needs the
// larger of the two) instead of being stacked (their sum), which is what a direct call of a
// function it can see costs. The extra cost (the pointer in a register, an indirect branch) is
// paid on the cold path only.
//
// ptxas charges every indirect call with the register need of the LARGEST function whose
// address the module takes (without -rdc: any function of the translation unit; with -rdc,
// nvlink: any function of the program with the same prototype, each compiled on its own with
// as many registers as it likes). So only small cold functions (checks, traps, proxy requests,
// the timed poll loops) may go through cold(): a heavy one would raise every kernel of the
// file, whatever that kernel calls. The heavy bodies -- the copy engines (putmem, getmem,
// putmem_signal), the barrier and team sync bodies and the reductions -- are RSHMEM_ENGINE:
// inlined into the caller, where ptxas allocates them together with the kernel (a kernel pays
// only for the bodies it calls). The data-movement collectives (gather/bcast/collect/alltoalls)
// are RSHMEM_COLL_ENGINE: a direct call of a non-inlined function without -rdc (smaller
// modules, fewer registers there), inlined under -rdc, where a non-inlined function is
// compiled on its own with no register limit. device-lib/tests/regbudget checks both builds.
//
// RSHMEM_OUTLINE_ENGINES (defined before the include): the engines become direct calls of
// non-inlined functions instead. A file with hundreds of call sites (every call of the library
// for every type, as device-lib/tests/all_calls.cu) then compiles in a fraction of the time and
// to a fraction of the code, but each engine is compiled on its own with no register limit, so
// a kernel that calls one needs as many registers as that engine (84 to 102 for a copy engine
// on sm_90), and a kernel of 1024 threads may not launch.
#if defined(RSHMEM_OUTLINE_ENGINES)
#define RSHMEM_ENGINE static __device__ __noinline__
#else
#define RSHMEM_ENGINE static __device__ __forceinline__
#endif
#if defined(__CUDACC_RDC__)
#define RSHMEM_COLL_ENGINE static __device__ __forceinline__
#else
#define RSHMEM_COLL_ENGINE static __device__ __noinline__
#endif
template <typename F>
static __device__ __forceinline__ F cold(F f) {
    asm("" : "+l"(f));
    return f;
}

// The fast path applies when the state is delivered, checks are off, this host's PEs are
// contiguous (RSHMEM_STATE_FLAG_CONTIGUOUS) and pe is one of them: then `local` is pe's local
// index. A state of version 0 (before init, after finalize) has flags 0, so it always takes the
// cold path, which traps.
static __device__ __forceinline__ bool fast_pe(int pe, int& local) {
    local = pe - (rshmem_state.my_pe - rshmem_state.my_local);
    return ((rshmem_state.flags & (RSHMEM_STATE_FLAG_DEBUG | RSHMEM_STATE_FLAG_CONTIGUOUS)) ==
            RSHMEM_STATE_FLAG_CONTIGUOUS) &
           ((unsigned)local < (unsigned)rshmem_state.n_local);
}

// The checks of a thread-scope call on one element of `size` bytes at symmetric address p of PE
// pe (debug flag only): pe in range, p in this PE's heap, p aligned. Cold.
static __device__ __noinline__ void check_elem(const char* call, const char* what, const void* p,
                                               size_t size, int pe) {
    check_pe(call, pe, true);
    check_sym(call, what, p, size, true);
    check_align(call, what, p, size, true);
}

// ---------------------------------------------------------------------------------------------
// Translation.

// Local index of PE pe (-1: another host). pe must be in range. With
// RSHMEM_STATE_FLAG_CONTIGUOUS it is arithmetic on the constant state; else one table load.
static __device__ __forceinline__ int local_of(int pe) {
    if (rshmem_state.flags & RSHMEM_STATE_FLAG_CONTIGUOUS) {
        int local = pe - (rshmem_state.my_pe - rshmem_state.my_local);
        return (unsigned)local < (unsigned)rshmem_state.n_local ? local : -1;
    }
    return __ldg((const int32_t*)rshmem_state.pe_local_table + pe);
}

// PE pe's copy of this PE's symmetric address p; traps if pe is not load/store reachable.
// With RSHMEM_STATE_FLAG_CONTIGUOUS this is a few integer operations on the constant state
// (no branch but the unlikely trap), else one load of the PE table (skipped for pe == me).
template <typename T>
static __device__ __forceinline__ T* translate(const char* call, T* p, int pe, bool say) {
    check_init(call, say);
    int local;
    if (__builtin_expect((rshmem_state.flags & RSHMEM_STATE_FLAG_CONTIGUOUS) != 0, 1)) {
        local = pe - (rshmem_state.my_pe - rshmem_state.my_local);
        if (__builtin_expect((unsigned)local >= (unsigned)rshmem_state.n_local, 0)) {
            fail_unreachable(call, pe, say);
        }
    } else {
        if (pe == rshmem_state.my_pe) return p;
        local = __ldg((const int32_t*)rshmem_state.pe_local_table + pe);
        if (local < 0) fail_unreachable(call, pe, say);
    }
    return at_local_wide(p, local);
}

// ---------------------------------------------------------------------------------------------
// Wait timeouts. A wait loop calls expired() once per poll; it reads %globaltimer every 64th
// poll and reports true once rshmem_state.timeout_ns (when non-zero) has passed since the first.

struct wait_timer {
    uint64_t start;
    uint32_t polls;

    __device__ __forceinline__ wait_timer() : start(0), polls(0) {}

    __device__ __forceinline__ bool expired() {
        uint64_t limit = rshmem_state.timeout_ns;
        if (limit == 0) return false;
        if ((polls++ & 63u) != 0) return false;
        uint64_t now = globaltimer();
        if (polls == 1) {
            start = now;
            return false;
        }
        return now - start >= limit;
    }

    __device__ __forceinline__ unsigned long long waited() const {
        return (unsigned long long)(globaltimer() - start);
    }
};

}  // namespace rshmem_detail

// Address of PE pe's copy of the symmetric object at `ptr` that this thread can load from and
// store to directly, or NULL when there is none (pe on another host, pe out of range, or ptr not
// in this PE's symmetric heap). Thread scope, local, no memory ordering. For pe == my PE it is
// ptr itself.
RSHMEM_TWIN void* rshmem_ptr(const void* ptr, int pe) {
#if RSHMEM_TWIN_HOST_PASS
    return rshmemi_host_rshmem_ptr(ptr, pe);
#else
    if (pe < 0 || pe >= rshmem_state.n_pes) return (void*)0;
    uint64_t a = (uint64_t)ptr;
    uint64_t base = rshmem_detail::my_slice();
    if (a < base || a - base >= rshmem_state.slice) return (void*)0;
    if (pe == rshmem_state.my_pe) return (void*)ptr;
    int local = rshmem_detail::local_of(pe);
    if (local < 0) return (void*)0;
    return (void*)rshmem_detail::at_local_wide(ptr, local);
#endif
}
