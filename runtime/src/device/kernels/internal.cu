// rshmem's internal kernels: host-issued atomics on the GPU heap and stream-ordered
// synchronization. Compiled by NVRTC at first use (the CUBIN is cached on disk).
#include "rshmem/rshmem.cuh"

// One atomic `op` (an RSHMEM_PROXY_AMO_* code) on the word at `p`, system scope; returns the old
// value (0 for an unknown op).
template <typename T> static __device__ T internal_amo(T *p, uint32_t op, T v, T c) {
    switch (op) {
    case RSHMEM_PROXY_AMO_FETCH: return atomicOr_system(p, (T)0);
    case RSHMEM_PROXY_AMO_SET: return atomicExch_system(p, v);
    case RSHMEM_PROXY_AMO_SWAP: return atomicExch_system(p, v);
    case RSHMEM_PROXY_AMO_CSWAP: return atomicCAS_system(p, c, v);
    case RSHMEM_PROXY_AMO_ADD: return atomicAdd_system(p, v);
    case RSHMEM_PROXY_AMO_AND: return atomicAnd_system(p, v);
    case RSHMEM_PROXY_AMO_OR: return atomicOr_system(p, v);
    case RSHMEM_PROXY_AMO_XOR: return atomicXor_system(p, v);
    }
    return 0;
}

// One atomic on a 4- or 8-byte word of the GPU heap, system scope; the old value goes to
// `result` (pinned host memory).
extern "C" __global__ void rshmem_internal_amo(uint32_t op, uint32_t size, uint64_t addr, uint64_t value,
                                               uint64_t cond, uint64_t *result) {
    uint64_t old;
    if (size == 4) {
        old = internal_amo((unsigned int *)addr, op, (unsigned int)value, (unsigned int)cond);
    } else {
        old = internal_amo((unsigned long long *)addr, op, (unsigned long long)value, (unsigned long long)cond);
    }
    __threadfence_system();
    *(volatile uint64_t *)result = old;
}

// barrier_all_on_stream / sync_all_on_stream: one block; the device barrier of the library.
extern "C" __global__ void rshmem_internal_barrier_all(int quiet) {
    if (quiet) {
        rshmem_barrier_all_block();
    } else {
        rshmem_sync_all_block();
    }
}

// put_signal_on_stream / signal_op_on_stream: a signal update after the stream's earlier work.
extern "C" __global__ void rshmem_internal_signal(uint64_t sig_addr, uint64_t value, int op, int pe) {
    __threadfence_system();
    rshmem_signal_op((uint64_t *)sig_addr, value, op, pe);
}

// signal_wait_until_on_stream: the stream waits until the local signal satisfies cmp value.
extern "C" __global__ void rshmem_internal_signal_wait(uint64_t sig_addr, int cmp, uint64_t value) {
    rshmem_signal_wait_until((uint64_t *)sig_addr, cmp, value);
}

// *_on_stream to a PE reached through the proxy: the device call makes the proxy request.
// put_on_stream (get == 0): dest on pe <- my src; get_on_stream (get != 0): my dest <- src on pe.
extern "C" __global__ void rshmem_internal_proxy_copy(uint64_t dest, uint64_t src, uint64_t nbytes, int pe,
                                                      int get) {
    if (get) {
        rshmem_getmem((void *)dest, (const void *)src, (size_t)nbytes, pe);
    } else {
        rshmem_putmem((void *)dest, (const void *)src, (size_t)nbytes, pe);
    }
}

// p_on_stream through the proxy: `size` bytes (1, 2, 4 or 8) of `value`.
extern "C" __global__ void rshmem_internal_proxy_p(uint64_t dest, uint64_t value, uint32_t size, int pe) {
    rshmem_putmem((void *)dest, &value, size, pe);
}

// quiet_on_stream with a proxy: completes every request issued before it.
extern "C" __global__ void rshmem_internal_quiet(void) {
    rshmem_quiet();
}
