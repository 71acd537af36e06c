// rshmem's internal kernels: host-issued atomics on the GPU heap and stream-ordered
// synchronization. Compiled by NVRTC at first use (the CUBIN is cached on disk).
#include "rshmem/rshmem.cuh"

// One atomic on a 4- or 8-byte word of the GPU heap, system scope; the old value goes to
// `result` (pinned host memory).
extern "C" __global__ void rshmem_internal_amo(uint32_t op, uint32_t size, uint64_t addr, uint64_t value,
                                               uint64_t cond, uint64_t *result) {
    uint64_t old = 0;
    if (size == 4) {
        unsigned int *p = (unsigned int *)addr;
        unsigned int v = (unsigned int)value, c = (unsigned int)cond;
        switch (op) {
        case 0: old = atomicOr_system(p, 0u); break;
        case 1: old = atomicExch_system(p, v); break;
        case 2: old = atomicExch_system(p, v); break;
        case 3: old = atomicCAS_system(p, c, v); break;
        case 4: old = atomicAdd_system(p, v); break;
        case 5: old = atomicAnd_system(p, v); break;
        case 6: old = atomicOr_system(p, v); break;
        case 7: old = atomicXor_system(p, v); break;
        }
    } else {
        unsigned long long *p = (unsigned long long *)addr;
        unsigned long long v = value, c = cond;
        switch (op) {
        case 0: old = atomicOr_system(p, 0ull); break;
        case 1: old = atomicExch_system(p, v); break;
        case 2: old = atomicExch_system(p, v); break;
        case 3: old = atomicCAS_system(p, c, v); break;
        case 4: old = atomicAdd_system(p, v); break;
        case 5: old = atomicAnd_system(p, v); break;
        case 6: old = atomicOr_system(p, v); break;
        case 7: old = atomicXor_system(p, v); break;
        }
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
