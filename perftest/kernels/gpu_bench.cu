// Device-side loops of the GPU benchmarks. Each kernel is timed by the host with CUDA events
// around the launch, so launch overhead is excluded by running many iterations per launch.
#include "rshmem/rshmem.cuh"

// Bandwidth: the buffer is dealt to the blocks in pieces of at most 64 KiB, round robin, and each
// block copies its pieces to (or from) `peer` with the block-scope put (get), `iters` times; then
// a quiet. (Round-robin pieces keep all NVLink lanes busy at the same addresses' neighbourhood;
// one contiguous 1 MiB+ range per block measured ~6% slower at 128 MiB.)
static __device__ __forceinline__ size_t piece_of(size_t nbytes) {
    size_t per_block = (nbytes + gridDim.x - 1) / gridDim.x;
    per_block = (per_block + 15) & ~(size_t)15;
    return per_block < (64u << 10) ? per_block : (64u << 10);
}

extern "C" __global__ void __launch_bounds__(1024) put_bw(uint8_t *dest, const uint8_t *src, size_t nbytes, int peer, int iters) {
    size_t piece = piece_of(nbytes);
    for (int i = 0; i < iters; ++i) {
        for (size_t start = (size_t)blockIdx.x * piece; start < nbytes; start += (size_t)gridDim.x * piece) {
            size_t len = nbytes - start < piece ? nbytes - start : piece;
            rshmem_putmem_nbi_block(dest + start, src + start, len, peer);
        }
    }
    rshmem_quiet();
}

extern "C" __global__ void __launch_bounds__(1024) get_bw(uint8_t *dest, const uint8_t *src, size_t nbytes, int peer, int iters) {
    size_t piece = piece_of(nbytes);
    for (int i = 0; i < iters; ++i) {
        for (size_t start = (size_t)blockIdx.x * piece; start < nbytes; start += (size_t)gridDim.x * piece) {
            size_t len = nbytes - start < piece ? nbytes - start : piece;
            rshmem_getmem_block(dest + start, src + start, len, peer);
        }
    }
}

// Ping-pong with p: PE 0 writes i+1 into the peer's flag and waits for the peer to write it back
// into its own; the peer mirrors. One thread per PE. `out[0]` gets the elapsed ns on PE 0.
extern "C" __global__ void p_pingpong(uint64_t *flag, int peer, int iters, int initiator, uint64_t *out) {
    uint64_t t0 = 0, t1 = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int i = 0; i < iters; ++i) {
        uint64_t v = (uint64_t)i + 1;
        if (initiator) {
            rshmem_uint64_p(flag, v, peer);
            rshmem_uint64_wait_until(flag, RSHMEM_CMP_EQ, v);
        } else {
            rshmem_uint64_wait_until(flag, RSHMEM_CMP_EQ, v);
            rshmem_uint64_p(flag, v, peer);
        }
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    out[0] = t1 - t0;
}

// Atomic round trips: fetch_add on the peer's counter, each waiting for its result.
extern "C" __global__ void amo_latency(uint64_t *counter, int peer, int iters, uint64_t *out) {
    uint64_t t0 = 0, t1 = 0, acc = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int i = 0; i < iters; ++i) {
        acc += rshmem_uint64_atomic_fetch_add(counter, 1, peer);
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    out[0] = t1 - t0;
    out[1] = acc;
}

// Device barrier: one thread (scope 0), one warp (1) or one block (2) per PE runs `iters`
// barriers back to back.
extern "C" __global__ void barrier_loop(int iters, int scope, uint64_t *out) {
    uint64_t t0 = 0, t1 = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int i = 0; i < iters; ++i) {
        if (scope == 0) {
            rshmem_barrier_all();
        } else if (scope == 1) {
            rshmem_barrier_all_warp();
        } else {
            rshmem_barrier_all_block();
        }
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    if (threadIdx.x == 0) out[0] = t1 - t0;
}
