// Self-test and micro-benchmarks of the rshmem device library on one host with several GPUs,
// without the rshmem runtime: one process drives every GPU, each GPU plays one PE. The GPU heap is
// built as the runtime builds it (CUDA VMM: one reserved range, PE j's slice mapped from GPU j's
// memory at base + j*slice and made accessible to every GPU), and every GPU's copy of
// rshmem_state is filled by hand.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -lineinfo -I device-lib/include \
//        device-lib/tests/gpu_selftest.cu -lcuda -o gpu_selftest
//   ./gpu_selftest            correctness tests, then benchmarks (exit status 1 on any failure)
//   ./gpu_selftest check      correctness tests only
//   ./gpu_selftest copies     the copy engine's tests only (put/get in every scope, size and
//                             alignment); runs on one GPU too, where the one PE copies to
//                             and from its own heap through the same code
//   ./gpu_selftest bench      benchmarks only
//   ./gpu_selftest trap-timeout | trap-pe | trap-range | trap-remote
//                             each makes one kernel trap on purpose; the expected message is
//                             printed by the GPU and the program exits non-zero
//
// Not compiled by NVRTC (it has host code): the line below opts it out of the repository scan.
// rshmem: nvrtc-skip
// The library first: it must not depend on headers included before it.
#include "rshmem/rshmem.cuh"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));  \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)
#define CU(x)                                                                                    \
    do {                                                                                         \
        CUresult r_ = (x);                                                                       \
        if (r_ != CUDA_SUCCESS) {                                                                \
            const char* s_ = "?";                                                                \
            cuGetErrorString(r_, &s_);                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_);                      \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)

static int g_ngpu = 0;     // GPUs mapped
static int g_npes = 0;     // PEs in the current configuration (GPUs 0..g_npes-1)
static uint64_t g_base = 0, g_slice = 0;
static cudaStream_t g_stream[8];
static int g_failures = 0;
static const uint64_t USER_START = 2ull << 20;

static void fail(const char* what) {
    printf("FAIL %s\n", what);
    g_failures++;
}

// Symmetric address of offset `off` as PE pe sees it (its own slice).
static void* sym(int pe, uint64_t off) { return (void*)(g_base + (uint64_t)pe * g_slice + off); }

static void sync_all() {
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaStreamSynchronize(g_stream[d]));
    }
}

// Waits for all work on every GPU (memsets on the legacy stream included: the test streams do
// not synchronize with it).
static void quiesce() {
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceSynchronize());
    }
}

static void map_heap(uint64_t slice) {
    CU(cuInit(0));
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    if (n > 8) n = 8;
    g_ngpu = n;
    for (int d = 0; d < n; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaFree(0));
        CK(cudaStreamCreateWithFlags(&g_stream[d], cudaStreamNonBlocking));
        for (int e = 0; e < n; ++e) {
            int ok = 1;
            if (e != d) CK(cudaDeviceCanAccessPeer(&ok, d, e));
            if (!ok) {
                printf("GPU %d cannot access GPU %d: no peer path, stopping\n", d, e);
                exit(2);
            }
        }
    }
    CK(cudaSetDevice(0));
    g_slice = slice;
    CU(cuMemAddressReserve((CUdeviceptr*)&g_base, n * slice, slice, 0, 0));
    for (int d = 0; d < n; ++d) {
        CUmemAllocationProp prop = {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = d;
        CUmemGenericAllocationHandle h;
        CU(cuMemCreate(&h, slice, &prop, 0));
        CU(cuMemMap((CUdeviceptr)(g_base + d * slice), slice, 0, h, 0));
    }
    std::vector<CUmemAccessDesc> acc(n);
    for (int e = 0; e < n; ++e) {
        acc[e].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc[e].location.id = e;
        acc[e].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    for (int d = 0; d < n; ++d) CU(cuMemSetAccess((CUdeviceptr)(g_base + d * slice), slice, acc.data(), n));
    printf("heap: %d GPUs, base 0x%llx, slice %llu MiB\n", n, (unsigned long long)g_base,
           (unsigned long long)(slice >> 20));
}

// Installs the state of an npes-PE job on GPUs 0..npes-1 (and resets the internal area).
static void configure(int npes, bool debug, uint64_t timeout_ns, bool contiguous = true) {
    g_npes = npes;
    std::vector<int32_t> table(npes);
    for (int i = 0; i < npes; ++i) table[i] = i;
    for (int d = 0; d < npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMemset(sym(d, 0), 0, USER_START));
        CK(cudaMemcpy(sym(d, RSHMEM_INTERNAL_PE_TABLE), table.data(), 4 * npes, cudaMemcpyHostToDevice));
        rshmem_device_state st = {};
        st.version = RSHMEM_DEVICE_STATE_VERSION;
        st.size = sizeof(st);
        st.my_pe = d;
        st.n_pes = npes;
        st.my_local = d;
        st.n_local = npes;
        st.heap_base = g_base;
        st.slice = g_slice;
        st.heap_user_start = USER_START;
        st.heap_mapped = g_slice;
        st.pe_local_table = (uint64_t)sym(d, RSHMEM_INTERNAL_PE_TABLE);
        st.timeout_ns = timeout_ns;
        st.flags = (debug ? RSHMEM_STATE_FLAG_DEBUG : 0) | (contiguous ? RSHMEM_STATE_FLAG_CONTIGUOUS : 0);
        CK(cudaMemcpyToSymbol(rshmem_state, &st, sizeof(st)));
        CK(cudaDeviceSynchronize());
    }
}

// ---------------------------------------------------------------------------------------------
// Kernels.

__device__ __host__ inline uint8_t pattern(uint32_t seed, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32 | seed);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)x;
}

__global__ void k_fill(uint8_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = pattern(seed, i);
}

__global__ void k_memset(uint8_t* p, size_t n, uint8_t v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

// scope 0: thread 0 of the block; 1: every warp of the block takes a share (partial warps too);
// 2: the block. put != 0: putmem else getmem.
__global__ void k_copy(int scope, int put, char* dst, const char* src, size_t n, int pe) {
    if (scope == 0) {
        if (threadIdx.x == 0) {
            if (put) rshmem_putmem(dst, src, n, pe);
            else rshmem_getmem(dst, src, n, pe);
        }
    } else if (scope == 1) {
        int nw = (blockDim.x + 31) / 32, w = threadIdx.x / 32;
        size_t share = (n + nw - 1) / nw;
        size_t lo = share * w < n ? share * w : n;
        size_t hi = lo + share < n ? lo + share : n;
        if (put) rshmem_putmem_warp(dst + lo, src + lo, hi - lo, pe);
        else rshmem_getmem_warp(dst + lo, src + lo, hi - lo, pe);
    } else {
        if (put) rshmem_putmem_nbi_block(dst, src, n, pe);
        else rshmem_getmem_block(dst, src, n, pe);
    }
}

__global__ void k_pg(void* symbuf, int pe, int* errors) {
    // One element of several sizes: p to pe, then g back, compare.
    char* b = (char*)symbuf;
    rshmem_char_p(b + 0, (char)0x5a, pe);
    rshmem_short_p((short*)(b + 2), (short)-1234, pe);
    rshmem_int_p((int*)(b + 4), 0x12345678, pe);
    rshmem_long_p((long*)(b + 8), -0x123456789abcll, pe);
    rshmem_float_p((float*)(b + 16), 1.5f, pe);
    rshmem_double_p((double*)(b + 24), -2.25, pe);
    rshmem_quiet();
    if (rshmem_char_g(b + 0, pe) != (char)0x5a) atomicAdd(errors, 1);
    if (rshmem_short_g((short*)(b + 2), pe) != (short)-1234) atomicAdd(errors, 1);
    if (rshmem_int_g((int*)(b + 4), pe) != 0x12345678) atomicAdd(errors, 1);
    if (rshmem_long_g((long*)(b + 8), pe) != -0x123456789abcll) atomicAdd(errors, 1);
    if (rshmem_float_g((float*)(b + 16), pe) != 1.5f) atomicAdd(errors, 1);
    if (rshmem_double_g((double*)(b + 24), pe) != -2.25) atomicAdd(errors, 1);
    if (rshmem_ptr(b, pe) == 0) atomicAdd(errors, 100);
}

struct AmoWords {
    uint64_t add64, inc64, cas64, bits64, xor64, swap64;
    uint32_t add32, inc32;
    int32_t sadd;
    float f;
    double dd;
};

// Every thread of every PE hammers PE 0's words.
__global__ void k_amo(AmoWords* w, int iters, int* errors) {
    int me = rshmem_my_pe();
    for (int i = 0; i < iters; ++i) {
        rshmem_uint64_atomic_fetch_add(&w->add64, 2, 0);
        rshmem_uint64_atomic_inc(&w->inc64, 0);
        rshmem_uint32_atomic_add(&w->add32, 3, 0);
        rshmem_uint32_atomic_fetch_inc(&w->inc32, 0);
        rshmem_int_atomic_add(&w->sadd, -1, 0);
    }
    // CAS increment loop, a few threads only.
    if (threadIdx.x < 4) {
        for (int i = 0; i < iters; ++i) {
            uint64_t old = rshmem_uint64_atomic_fetch(&w->cas64, 0);
            for (;;) {
                uint64_t seen = rshmem_uint64_atomic_compare_swap(&w->cas64, old, old + 1, 0);
                if (seen == old) break;
                old = seen;
            }
        }
    }
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        rshmem_uint64_atomic_or(&w->bits64, 1ull << me, 0);
        rshmem_uint64_atomic_fetch_xor(&w->xor64, 1ull << (me + 8), 0);
        (void)rshmem_uint64_atomic_swap(&w->swap64, 7, 0);
        rshmem_float_atomic_set(&w->f, 2.5f, 0);
        double old = rshmem_double_atomic_swap(&w->dd, 4.0, 0);
        if (old != 0.0 && old != 4.0) atomicAdd(errors, 1);
    }
}

// put_signal stress: blocks [0, B) send chunk b of `bytes` to `peer` with putmem_signal_block
// (ADD 1 to the peer's sig), then wait for the peer's acknowledgement; blocks [B, 2B) wait until
// this PE's sig reached round*B, check their chunk and acknowledge (ADD 1 to the sender's ack).
__global__ void k_signal_stress(uint8_t* data, const uint8_t* src, size_t bytes, uint64_t* sig, uint64_t* ack,
                                int rounds, int peer, int from, unsigned long long* errors) {
    int B = gridDim.x / 2;
    bool sender = (int)blockIdx.x < B;
    int b = sender ? blockIdx.x : blockIdx.x - B;
    size_t chunk = bytes / B;
    size_t lo = (size_t)b * chunk;
    __shared__ int bad;
    for (int r = 1; r <= rounds; ++r) {
        if (sender) {
            // src holds pattern(seed = round) written by k_fill for round r at offset r*bytes... we
            // use one source per round parity to avoid rewriting it while the peer reads.
            const uint8_t* s = src + (size_t)(r & 1) * bytes;
            rshmem_putmem_signal_block(data + lo, s + lo, chunk, sig, 1, RSHMEM_SIGNAL_ADD, peer);
            if (threadIdx.x == 0) rshmem_uint64_wait_until(ack, RSHMEM_CMP_GE, (uint64_t)r * B);
            __syncthreads();
        } else {
            if (threadIdx.x == 0) {
                bad = 0;
                rshmem_signal_wait_until(sig, RSHMEM_CMP_GE, (uint64_t)r * B);
            }
            __syncthreads();
            uint32_t seed = (uint32_t)(from * 1000 + (r & 1));
            int local_bad = 0;
            for (size_t i = lo + threadIdx.x; i < lo + chunk; i += blockDim.x)
                if (data[i] != pattern(seed, i)) local_bad++;
            if (local_bad) atomicAdd(&bad, local_bad);
            __syncthreads();
            if (threadIdx.x == 0) {
                if (bad) atomicAdd(errors, (unsigned long long)bad);
                rshmem_signal_op(ack, 1, RSHMEM_SIGNAL_ADD, from);
            }
            __syncthreads();
        }
    }
}

// Barrier check: every round each caller writes the round into slot my_pe of every PE's `slots`
// with plain stores through rshmem_ptr, barriers, checks that every slot of its own array holds
// the round, barriers again.
__global__ void k_barrier_check(int scope, int* slots, int rounds, int* errors) {
    int me = rshmem_my_pe(), n = rshmem_n_pes();
    bool leader = threadIdx.x == 0;
    for (int r = 1; r <= rounds; ++r) {
        if (leader) {
            for (int j = 0; j < n; ++j) ((int*)rshmem_ptr(slots, j))[me] = r;
        }
        if (scope == 0) {
            if (leader) rshmem_barrier_all();
        } else if (scope == 1) {
            if (threadIdx.x < 32) rshmem_barrier_all_warp();
        } else {
            rshmem_barrier_all_block();
        }
        __syncthreads();
        if (threadIdx.x < n && slots[threadIdx.x] != r) atomicAdd(errors, 1);
        __syncthreads();
        if (scope == 0) {
            if (leader) rshmem_sync_all();
        } else if (scope == 1) {
            if (threadIdx.x < 32) rshmem_sync_all_warp();
        } else {
            rshmem_sync_all_block();
        }
        __syncthreads();
    }
}

// wait/test family: PE `from` stores 1..n into ivars[i] of this PE (one at a time); this PE waits.
__global__ void k_waits_sender(uint64_t* ivars, int n, int peer) {
    for (int i = n - 1; i >= 0; --i) {
        rshmem_uint64_p(&ivars[i], (uint64_t)i + 1, peer);
        __nanosleep(2000);
    }
}

__global__ void k_waits_receiver(uint64_t* ivars, int n, int* errors) {
    size_t idx = rshmem_uint64_wait_until_any(ivars, n, 0, RSHMEM_CMP_NE, 0);
    if (idx >= (size_t)n || ivars[idx] != idx + 1) atomicAdd(errors, 1);
    size_t indices[16];
    size_t c = rshmem_uint64_wait_until_some(ivars, n, indices, 0, RSHMEM_CMP_GE, 1);
    if (c == 0 || c > (size_t)n) atomicAdd(errors, 1);
    rshmem_uint64_wait_until_all(ivars, n, 0, RSHMEM_CMP_GT, 0);
    if (!rshmem_uint64_test_all(ivars, n, 0, RSHMEM_CMP_GE, 1)) atomicAdd(errors, 1);
    if (rshmem_uint64_test_some(ivars, n, indices, 0, RSHMEM_CMP_EQ, 3) != 1 || indices[0] != 2)
        atomicAdd(errors, 1);
    int status[16] = {0};
    status[0] = 1;
    if (rshmem_uint64_test_any(ivars, n, status, RSHMEM_CMP_EQ, 1) != RSHMEM_SIZE_MAX) atomicAdd(errors, 1);
    uint64_t want[16];
    for (int i = 0; i < n; ++i) want[i] = i + 1;
    rshmem_uint64_wait_until_all_vector(ivars, n, 0, RSHMEM_CMP_EQ, want);
    if (!rshmem_uint64_test(&ivars[n - 1], RSHMEM_CMP_EQ, (uint64_t)n)) atomicAdd(errors, 1);
}

// ---- benchmarks

__global__ void b_put(uint8_t* dest, const uint8_t* src, size_t nbytes, int peer, int iters, int get) {
    size_t chunk = (nbytes + gridDim.x - 1) / gridDim.x;
    chunk = (chunk + 15) & ~(size_t)15;
    size_t start = (size_t)blockIdx.x * chunk;
    size_t len = start < nbytes ? (nbytes - start < chunk ? nbytes - start : chunk) : 0;
    for (int i = 0; i < iters; ++i) {
        if (get) rshmem_getmem_block(dest + start, src + start, len, peer);
        else rshmem_putmem_nbi_block(dest + start, src + start, len, peer);
    }
    if (threadIdx.x == 0) rshmem_quiet();
}

// As b_put, but the buffer is cut into 64 KiB pieces dealt round-robin to the blocks.
__global__ void b_put_rr(uint8_t* dest, const uint8_t* src, size_t nbytes, int peer, int iters, int get) {
    const size_t piece = 64 << 10;
    size_t npieces = (nbytes + piece - 1) / piece;
    for (int i = 0; i < iters; ++i) {
        for (size_t p = blockIdx.x; p < npieces; p += gridDim.x) {
            size_t start = p * piece, len = nbytes - start < piece ? nbytes - start : piece;
            if (get) rshmem_getmem_nbi_block(dest + start, src + start, len, peer);
            else rshmem_putmem_nbi_block(dest + start, src + start, len, peer);
        }
    }
    if (threadIdx.x == 0) rshmem_quiet();
}

__global__ void b_pingpong(uint64_t* flag, int peer, int iters, int initiator, unsigned long long* out) {
    uint64_t t0 = rshmem_detail::globaltimer();
    for (int i = 1; i <= iters; ++i) {
        if (initiator) {
            rshmem_uint64_p(flag, (uint64_t)i, peer);
            rshmem_uint64_wait_until(flag, RSHMEM_CMP_EQ, (uint64_t)i);
        } else {
            rshmem_uint64_wait_until(flag, RSHMEM_CMP_EQ, (uint64_t)i);
            rshmem_uint64_p(flag, (uint64_t)i, peer);
        }
    }
    out[0] = rshmem_detail::globaltimer() - t0;
}

__global__ void b_amo(uint64_t* counter, int peer, int iters, unsigned long long* out) {
    uint64_t acc = 0;
    uint64_t t0 = rshmem_detail::globaltimer();
    for (int i = 0; i < iters; ++i) acc += rshmem_uint64_atomic_fetch_add(counter, 1, peer);
    out[0] = rshmem_detail::globaltimer() - t0;
    out[1] = acc;
}

__global__ void b_barrier(int scope, int iters, unsigned long long* out) {
    // Two warm-up barriers align the PEs; then time iters barriers.
    for (int k = 0; k < 2; ++k) {
        if (scope == 0) { if (threadIdx.x == 0) rshmem_barrier_all(); }
        else if (scope == 1) { if (threadIdx.x < 32) rshmem_barrier_all_warp(); }
        else rshmem_barrier_all_block();
    }
    __syncthreads();
    uint64_t t0 = rshmem_detail::globaltimer();
    for (int i = 0; i < iters; ++i) {
        if (scope == 0) { if (threadIdx.x == 0) rshmem_barrier_all(); }
        else if (scope == 1) { if (threadIdx.x < 32) rshmem_barrier_all_warp(); }
        else rshmem_barrier_all_block();
    }
    if (threadIdx.x == 0) out[0] = rshmem_detail::globaltimer() - t0;
}


__device__ __forceinline__ uint64_t ld_relaxed_gpu_epoch() {
    uint64_t r;
    asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(r) : "l"(rshmem_detail::barrier_epoch_word()) : "memory");
    return r;
}

// ---- micro-benchmarks of flag protocols (for tuning; not part of the check)

__device__ __forceinline__ void st_volatile(uint64_t* p, uint64_t v) { *(volatile uint64_t*)p = v; }
__device__ __forceinline__ uint64_t ld_volatile(const uint64_t* p) { return *(const volatile uint64_t*)p; }

// Ping-pong with flag protocol `v` (see micro_pingpong).
__global__ void m_pingpong(int v, uint64_t* flag, int peer, int iters, int initiator, unsigned long long* out) {
    using namespace rshmem_detail;
    uint64_t* remote = translate("m", flag, peer, true);
    uint64_t t0 = globaltimer();
    for (int i = 1; i <= iters; ++i) {
        for (int half = 0; half < 2; ++half) {
            bool send = (half == 0) == (initiator != 0);
            if (send) {
                switch (v) {
                    case 0: rshmem_uint64_p(flag, (uint64_t)i, peer); break;
                    case 1: st_volatile(remote, i); break;
                    case 2: st_volatile(remote, i); fence_sc_sys(); break;
                    case 3: st_relaxed_sys(remote, (uint64_t)i); fence_acq_rel_sys(); break;
                    case 4: st_relaxed_sys(remote, (uint64_t)i); break;
                    case 5: st_release_sys(remote, (uint64_t)i); break;
                    case 6: st_relaxed_sys(remote, (uint64_t)i); break;
                    case 7: st_relaxed_sys(remote, (uint64_t)i); fence_sc_sys(); break;
                    case 8: st_relaxed_sys(remote, (uint64_t)i); break;
                    case 9: rshmem_uint64_p(flag, (uint64_t)i, peer); break;
                    case 10: st_relaxed_sys(remote, (uint64_t)i); break;
                }
            } else {
                switch (v) {
                    case 0: rshmem_uint64_wait_until(flag, RSHMEM_CMP_EQ, (uint64_t)i); break;
                    case 1: case 2: while (ld_volatile(flag) != (uint64_t)i) {} break;
                    case 3: case 5: while (ld_acquire_sys(flag) != (uint64_t)i) {} break;
                    case 4: case 7: while (ld_relaxed_sys(flag) != (uint64_t)i) {} break;
                    case 6: while (ld_relaxed_sys(flag) != (uint64_t)i) {} fence_acq_rel_sys(); break;
                    case 8: case 9: while (ld_acquire_sys(flag) != (uint64_t)i) {} break;
                    case 10: rshmem_uint64_wait_until(flag, RSHMEM_CMP_EQ, (uint64_t)i); break;
                }
            }
        }
    }
    out[0] = globaltimer() - t0;
}

// Barrier variants, one thread per PE: 0 library; 1 epoch from the loop (no epoch load);
// 2 as 1 without the fence; 3 as 1 with fence.sc; 4 epoch load .gpu scope; 5 as 1, relaxed spin
// then one fence.acq_rel; 6 only the epoch load + fence (no messages).
__global__ void m_barrier(int v, int iters, unsigned long long* out) {
    using namespace rshmem_detail;
    const int n = rshmem_state.n_local, me = rshmem_state.my_local;
    rshmem_barrier_all();
    uint64_t e0 = ld_relaxed_sys(barrier_epoch_word());
    uint64_t t0 = globaltimer();
    for (int i = 1; i <= iters; ++i) {
        if (v == 0) { rshmem_barrier_all(); continue; }
        uint64_t e = e0 + i;
        if (v == 4) e = ld_relaxed_gpu_epoch() + 1;
        if (v == 6) { e = ld_relaxed_sys(barrier_epoch_word()) + 1; fence_acq_rel_sys(); st_relaxed_sys(barrier_epoch_word(), e); continue; }
        if (v == 3) fence_sc_sys();
        else if (v != 2) fence_acq_rel_sys();
        for (int j = 0; j < n; ++j) if (j != me) st_relaxed_sys(barrier_flag(j, me), e);
        for (int j = 0; j < n; ++j) {
            if (j == me) continue;
            if (v == 5) { while (ld_relaxed_sys(barrier_flag(me, j)) < e) {} }
            else { while (ld_acquire_sys(barrier_flag(me, j)) < e) {} }
        }
        if (v == 5) fence_acq_rel_sys();
        st_relaxed_sys(barrier_epoch_word(), e);
    }
    out[0] = globaltimer() - t0;
}


// Bandwidth of a plain 16-byte copy loop with different cache operators on the remote side.
template <int V>
__global__ void m_copy(uint4* dst, const uint4* src, size_t n16, int iters) {
    for (int it = 0; it < iters; ++it) {
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += 4 * (size_t)gridDim.x * blockDim.x) {
            uint4 r[4];
            size_t st = (size_t)gridDim.x * blockDim.x;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (i + k * st < n16) {
                    const uint4* p = src + i + k * st;
                    if (V == 10) r[k] = *p;
                    else if (V == 11) r[k] = __ldcg(p);
                    else if (V == 12) r[k] = __ldcs(p);
                    else if (V == 13) asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r[k].x), "=r"(r[k].y), "=r"(r[k].z), "=r"(r[k].w) : "l"(p));
                    else if (V == 14) r[k] = __ldlu(p);
                    else if (V == 15) asm volatile("ld.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r[k].x), "=r"(r[k].y), "=r"(r[k].z), "=r"(r[k].w) : "l"(p));
                    else r[k] = *p;
                }
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (i + k * st < n16) {
                    uint4* q = dst + i + k * st;
                    if (V == 1) __stcs(q, r[k]);
                    else if (V == 2) __stwt(q, r[k]);
                    else if (V == 3) __stcg(q, r[k]);
                    else if (V == 4) asm volatile("st.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(q), "r"(r[k].x), "r"(r[k].y), "r"(r[k].z), "r"(r[k].w) : "memory");
                    else *q = r[k];
                }
            }
        }
    }
}

// ---- trap demonstrations

__global__ void t_timeout(uint64_t* flag) { rshmem_uint64_wait_until(flag, RSHMEM_CMP_EQ, 42); }
__global__ void t_badpe(int* p) { rshmem_int_p(p, 1, 99); }
__global__ void t_range(int* p) { rshmem_int_put(p, p, 4, 1); }
__global__ void t_remote(int* p) { rshmem_int_p(p, 1, 1); }

// ---------------------------------------------------------------------------------------------
// Host side.

static void test_copies() {
    const size_t sizes[] = {0, 1, 7, 15, 16, 17, 31, 32, 33, 48, 100, 255, 1000, 1536, 4097, 65536 + 3, (1 << 20) + 5};
    const int offs[][2] = {{0, 0}, {1, 0}, {0, 1}, {3, 5}, {8, 0}, {0, 8}, {4, 12}, {15, 1}, {2, 6}, {12, 4}};
    const int G = 64;  // guard bytes each side
    const size_t maxn = (1 << 20) + 5 + 2 * G + 64;
    std::vector<uint8_t*> local(g_npes);
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMalloc(&local[d], maxn));
    }
    std::vector<uint8_t> host(maxn);
    int cases = 0, bad = 0;
    uint32_t seed = 1;
    for (int put = 1; put >= 0; --put)
        for (int scope = 0; scope < 3; ++scope)
            for (size_t n : sizes)
                for (auto& o : offs) {
                    int threads = scope == 0 ? 32 : (scope == 1 ? 80 : 200);  // partial warps on purpose
                    seed++;
                    // Source: filled with pattern(seed + pe); destination: guard value 0xEE.
                    for (int d = 0; d < g_npes; ++d) {
                        CK(cudaSetDevice(d));
                        uint8_t* symb = (uint8_t*)sym(d, USER_START);
                        uint8_t* srcb = put ? local[d] : symb;
                        uint8_t* dstb = put ? symb : local[d];
                        k_fill<<<64, 256, 0, g_stream[d]>>>(srcb + o[1], n, seed + d);
                        k_memset<<<64, 256, 0, g_stream[d]>>>(dstb, n + o[0] + 2 * G, 0xEE);
                    }
                    sync_all();
                    for (int d = 0; d < g_npes; ++d) {
                        CK(cudaSetDevice(d));
                        int peer = (d + 1) % g_npes;
                        uint8_t* symb = (uint8_t*)sym(d, USER_START);
                        if (put)
                            k_copy<<<1, threads, 0, g_stream[d]>>>(scope, 1, (char*)symb + G + o[0],
                                                                   (char*)local[d] + o[1], n, peer);
                        else
                            k_copy<<<1, threads, 0, g_stream[d]>>>(scope, 0, (char*)local[d] + G + o[0],
                                                                   (char*)symb + o[1], n, peer);
                    }
                    sync_all();
                    for (int d = 0; d < g_npes; ++d) {
                        // put: PE d's symmetric buffer holds what PE d-1 sent; get: PE d's local
                        // buffer holds PE d+1's source.
                        int from = put ? (d + g_npes - 1) % g_npes : (d + 1) % g_npes;
                        CK(cudaSetDevice(d));
                        uint8_t* dstb = put ? (uint8_t*)sym(d, USER_START) : local[d];
                        CK(cudaMemcpy(host.data(), dstb, n + o[0] + 2 * G, cudaMemcpyDeviceToHost));
                        int errs = 0;
                        for (size_t i = 0; i < n + o[0] + 2 * G; ++i) {
                            bool inside = i >= (size_t)(G + o[0]) && i < G + o[0] + n;
                            uint8_t want = inside ? pattern(seed + from, i - G - o[0]) : 0xEE;
                            if (host[i] != want) errs++;
                        }
                        cases++;
                        if (errs) {
                            bad++;
                            if (bad <= 10)
                                printf("  copy mismatch: %s scope %d n %zu dst+%d src+%d PE %d: %d bytes wrong\n",
                                       put ? "put" : "get", scope, n, o[0], o[1], d, errs);
                        }
                    }
                }
    printf("%s copies: %d cases, %d wrong\n", bad ? "FAIL" : "ok  ", cases, bad);
    if (bad) g_failures++;
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaFree(local[d]));
    }
}

static int* dev_counter(int d) {
    int* p;
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&p, 64));
    CK(cudaMemset(p, 0, 64));
    return p;
}

static int read_counter(int d, int* p) {
    int v = 0;
    CK(cudaSetDevice(d));
    CK(cudaMemcpy(&v, p, 4, cudaMemcpyDeviceToHost));
    CK(cudaFree(p));
    return v;
}

static void test_pg() {
    std::vector<int*> err(g_npes);
    for (int d = 0; d < g_npes; ++d) err[d] = dev_counter(d);
    quiesce();
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        // Each PE writes into its own region (offset by PE) of the next PE's buffer.
        k_pg<<<1, 1, 0, g_stream[d]>>>(sym(d, USER_START + 4096 * d), (d + 1) % g_npes, err[d]);
    }
    sync_all();
    int e = 0;
    for (int d = 0; d < g_npes; ++d) e += read_counter(d, err[d]);
    printf("%s p/g of 1, 2, 4, 8-byte types: %d errors\n", e ? "FAIL" : "ok  ", e);
    if (e) g_failures++;
}

static void test_amo() {
    const int blocks = 8, threads = 256, iters = 50;
    AmoWords* w = (AmoWords*)sym(0, USER_START + (1 << 20));
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMemset(sym(d, USER_START + (1 << 20)), 0, sizeof(AmoWords)));
    }
    std::vector<int*> err(g_npes);
    for (int d = 0; d < g_npes; ++d) err[d] = dev_counter(d);
    quiesce();
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        k_amo<<<blocks, threads, 0, g_stream[d]>>>((AmoWords*)sym(d, USER_START + (1 << 20)), iters, err[d]);
    }
    sync_all();
    int e = 0;
    for (int d = 0; d < g_npes; ++d) e += read_counter(d, err[d]);
    AmoWords h;
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(&h, w, sizeof(h), cudaMemcpyDeviceToHost));
    uint64_t total = (uint64_t)g_npes * blocks * threads * iters;
    uint64_t allbits = (1ull << g_npes) - 1;
    bool ok = e == 0 && h.add64 == 2 * total && h.inc64 == total && h.add32 == 3 * total && h.inc32 == total &&
              h.sadd == -(int32_t)total && h.cas64 == (uint64_t)g_npes * blocks * 4 * iters && h.bits64 == allbits &&
              h.xor64 == (allbits << 8) && h.swap64 == 7 && h.f == 2.5f && h.dd == 4.0;
    printf("%s atomics from %d PEs x %d threads: add64 %llu/%llu inc64 %llu add32 %u inc32 %u sadd %d cas %llu bits %llx xor %llx\n",
           ok ? "ok  " : "FAIL", g_npes, blocks * threads, (unsigned long long)h.add64,
           (unsigned long long)(2 * total), (unsigned long long)h.inc64, h.add32, h.inc32, h.sadd,
           (unsigned long long)h.cas64, (unsigned long long)h.bits64, (unsigned long long)h.xor64);
    if (!ok) g_failures++;
}

static void test_signal_stress() {
    const int B = 32, threads = 512, rounds = 40;
    const size_t bytes = 16u << 20;
    // Layout per PE: data at +0 (bytes), src at +bytes (2*bytes), sig and ack after.
    uint64_t off = USER_START + (4u << 20);
    std::vector<unsigned long long*> err(g_npes);
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        uint8_t* base = (uint8_t*)sym(d, off);
        CK(cudaMemset(base, 0, bytes));
        k_fill<<<256, 256>>>(base + bytes, bytes, d * 1000 + 0);
        k_fill<<<256, 256>>>(base + 2 * bytes, bytes, d * 1000 + 1);
        CK(cudaMemset(base + 3 * bytes, 0, 256));
        CK(cudaMalloc(&err[d], 8));
        CK(cudaMemset(err[d], 0, 8));
        CK(cudaDeviceSynchronize());
    }
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        uint8_t* base = (uint8_t*)sym(d, off);
        int peer = (d + 1) % g_npes, from = (d + g_npes - 1) % g_npes;
        k_signal_stress<<<2 * B, threads, 0, g_stream[d]>>>(base, base + bytes, bytes, (uint64_t*)(base + 3 * bytes),
                                                            (uint64_t*)(base + 3 * bytes + 128), rounds, peer, from,
                                                            err[d]);
    }
    sync_all();
    unsigned long long e = 0;
    for (int d = 0; d < g_npes; ++d) {
        unsigned long long v;
        CK(cudaSetDevice(d));
        CK(cudaMemcpy(&v, err[d], 8, cudaMemcpyDeviceToHost));
        CK(cudaFree(err[d]));
        e += v;
    }
    printf("%s put_signal_block + signal_wait_until: %d rounds x %zu MiB ring, %llu wrong bytes\n",
           e ? "FAIL" : "ok  ", rounds, bytes >> 20, e);
    if (e) g_failures++;
}

static void test_barriers() {
    for (int scope = 0; scope < 3; ++scope) {
        std::vector<int*> err(g_npes);
        for (int d = 0; d < g_npes; ++d) {
            err[d] = dev_counter(d);
            CK(cudaMemset(sym(d, USER_START), 0, 4096));
        }
        quiesce();
        for (int d = 0; d < g_npes; ++d) {
            CK(cudaSetDevice(d));
            k_barrier_check<<<1, scope == 0 ? 64 : (scope == 1 ? 64 : 256), 0, g_stream[d]>>>(
                scope, (int*)sym(d, USER_START), 2000, err[d]);
        }
        sync_all();
        int e = 0;
        for (int d = 0; d < g_npes; ++d) e += read_counter(d, err[d]);
        printf("%s barrier_all/sync_all scope %s, %d PEs, 2000 rounds: %d errors\n", e ? "FAIL" : "ok  ",
               scope == 0 ? "thread" : (scope == 1 ? "warp" : "block"), g_npes, e);
        if (e) g_failures++;
    }
}

static void test_waits() {
    const int n = 8;
    std::vector<int*> err(g_npes);
    for (int d = 0; d < g_npes; ++d) {
        err[d] = dev_counter(d);
        CK(cudaMemset(sym(d, USER_START), 0, 4096));
    }
    quiesce();
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        if (d == 0) k_waits_receiver<<<1, 1, 0, g_stream[d]>>>((uint64_t*)sym(d, USER_START), n, err[d]);
        if (d == 1) k_waits_sender<<<1, 1, 0, g_stream[d]>>>((uint64_t*)sym(d, USER_START), n, 0);
    }
    sync_all();
    int e = 0;
    for (int d = 0; d < g_npes; ++d) e += read_counter(d, err[d]);
    printf("%s wait_until_any/some/all(+vector), test*: %d errors\n", e ? "FAIL" : "ok  ", e);
    if (e) g_failures++;
}

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

static void bench_bw(int get, size_t bytes, int ctas, int threads, int iters, bool rr = false) {
    CK(cudaSetDevice(0));
    uint8_t* symb = (uint8_t*)sym(0, USER_START);
    uint8_t* local;
    CK(cudaMalloc(&local, bytes));
    CK(cudaMemset(local, 1, bytes));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    uint8_t* dst = get ? local : symb;
    const uint8_t* src = get ? symb : local;
    auto kern = rr ? b_put_rr : b_put;
    kern<<<ctas, threads>>>(dst, src, bytes, 1, 2, get);  // warm-up
    CK(cudaEventRecord(a));
    kern<<<ctas, threads>>>(dst, src, bytes, 1, iters, get);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaGetLastError());
    double s = elapsed_ms(a, b) / 1e3;
    printf("bench %s bw %8zu KiB, %3d CTAs x %4d threads, unroll %d%s: %.1f GB/s\n", get ? "get" : "put",
           bytes >> 10, ctas, threads, RSHMEM_COPY_UNROLL, rr ? ", 64 KiB pieces round-robin" : "",
           (double)bytes * iters / s / 1e9);
    CK(cudaFree(local));
}

static void bench_latency() {
    unsigned long long* out[2];
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMalloc(&out[d], 16));
        CK(cudaMemset(sym(d, USER_START), 0, 4096));
        CK(cudaDeviceSynchronize());
    }
    const int iters = 20000;
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        b_pingpong<<<1, 1, 0, g_stream[d]>>>((uint64_t*)sym(d, USER_START), 1 - d, iters, d == 0, out[d]);
    }
    sync_all();
    unsigned long long ns = 0;
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(&ns, out[0], 8, cudaMemcpyDeviceToHost));
    printf("bench p ping-pong one way: %.3f us\n", ns / 1e3 / (2.0 * iters));
    CK(cudaSetDevice(0));
    b_amo<<<1, 1, 0, g_stream[0]>>>((uint64_t*)sym(0, USER_START + 256), 1, iters, out[0]);
    sync_all();
    CK(cudaMemcpy(&ns, out[0], 8, cudaMemcpyDeviceToHost));
    printf("bench atomic fetch_add round trip: %.3f us\n", ns / 1e3 / iters);
    for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaFree(out[d]));
    }
}

static void bench_barrier() {
    const int iters = 20000;
    std::vector<unsigned long long*> out(g_npes);
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMalloc(&out[d], 8));
    }
    for (int scope = 0; scope < 3; ++scope) {
        for (int d = 0; d < g_npes; ++d) {
            CK(cudaSetDevice(d));
            b_barrier<<<1, scope == 2 ? 256 : 32, 0, g_stream[d]>>>(scope, iters, out[d]);
        }
        sync_all();
        unsigned long long ns = 0;
        CK(cudaSetDevice(0));
        CK(cudaMemcpy(&ns, out[0], 8, cudaMemcpyDeviceToHost));
        printf("bench barrier_all%s %d PEs: %.3f us\n", scope == 0 ? "      " : (scope == 1 ? "_warp " : "_block"),
               g_npes, ns / 1e3 / iters);
    }
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaFree(out[d]));
    }
}


static void micro() {
    const int iters = 20000;
    unsigned long long* out[8];
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaMalloc(&out[d], 16));
    }
    const char* names[] = {"library p + wait_until", "st.volatile / ld.volatile", "st.volatile + fence.sc / ld.volatile",
                           "st.relaxed + fence.acq_rel / ld.acquire", "st.relaxed / ld.relaxed", "st.release / ld.acquire",
                           "st.relaxed / ld.relaxed + fence.acq_rel", "st.relaxed + fence.sc / ld.relaxed",
                           "st.relaxed / ld.acquire", "library p / ld.acquire", "st.relaxed / library wait_until"};
    for (int v = 0; v < 11; ++v) {
        for (int d = 0; d < 2; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaMemset(sym(d, USER_START), 0, 4096));
        }
        quiesce();
        for (int d = 0; d < 2; ++d) {
            CK(cudaSetDevice(d));
            m_pingpong<<<1, 1, 0, g_stream[d]>>>(v, (uint64_t*)sym(d, USER_START), 1 - d, iters, d == 0, out[d]);
        }
        sync_all();
        unsigned long long ns = 0;
        CK(cudaSetDevice(0));
        CK(cudaMemcpy(&ns, out[0], 8, cudaMemcpyDeviceToHost));
        printf("micro ping-pong %-40s %.3f us one way\n", names[v], ns / 1e3 / (2.0 * iters));
    }
    const char* bnames[] = {"library", "no epoch load", "no epoch load, no fence", "no epoch load, fence.sc",
                            "epoch ld.relaxed.gpu", "no epoch load, relaxed spin + fence", "epoch load + fence only"};
    for (int v = 0; v < 7; ++v) {
        for (int d = 0; d < g_npes; ++d) {
            CK(cudaSetDevice(d));
            m_barrier<<<1, 1, 0, g_stream[d]>>>(v, iters, out[d]);
        }
        sync_all();
        unsigned long long ns = 0;
        CK(cudaSetDevice(0));
        CK(cudaMemcpy(&ns, out[0], 8, cudaMemcpyDeviceToHost));
        printf("micro barrier %d PEs %-40s %.3f us\n", g_npes, bnames[v], ns / 1e3 / iters);
    }
    for (int d = 0; d < g_npes; ++d) {
        CK(cudaSetDevice(d));
        CK(cudaFree(out[d]));
    }
}


template <int V>
static void micro_copy_one(const char* name, size_t bytes, int ctas, int threads) {
    CK(cudaSetDevice(0));
    uint8_t* local;
    CK(cudaMalloc(&local, bytes));
    // PE 1's copy of the symmetric buffer, addressed directly.
    uint4* peer = (uint4*)sym(1, USER_START);
    bool get = V >= 10;
    uint4* dst = get ? (uint4*)local : peer;
    const uint4* src = get ? peer : (const uint4*)local;
    int iters = bytes >= (64u << 20) ? 10 : 200;
    m_copy<V><<<ctas, threads>>>(dst, src, bytes / 16, 2);
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a));
    m_copy<V><<<ctas, threads>>>(dst, src, bytes / 16, iters);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaGetLastError());
    double s = elapsed_ms(a, b) / 1e3;
    printf("micro %s %-28s %6zu KiB %3d x %4d: %.1f GB/s\n", get ? "get" : "put", name, bytes >> 10, ctas, threads,
           (double)bytes * iters / s / 1e9);
    CK(cudaFree(local));
}

static void micro_copy() {
    for (size_t bytes : {(size_t)128 << 20, (size_t)2 << 20}) {
        micro_copy_one<0>("st (default)", bytes, 132, 512);
        micro_copy_one<3>("st.global.cg", bytes, 132, 512);
        micro_copy_one<0>("st (default) 264 CTAs", bytes, 264, 512);
        micro_copy_one<4>("st (generic address)", bytes, 132, 512);
        micro_copy_one<15>("ld (generic address)", bytes, 132, 512);
        micro_copy_one<10>("ld (default)", bytes, 132, 512);
        micro_copy_one<11>("ld.global.cg", bytes, 132, 512);
        micro_copy_one<13>("ld.global.L1::no_allocate", bytes, 132, 512);
    }
}

static int trap(const std::string& what) {
    if (what == "trap-remote") {
        // PE 1 is "on another host": table entry -1.
        configure(2, false, 0, false);
        int32_t minus1 = -1;
        CK(cudaSetDevice(0));
        CK(cudaMemcpy(sym(0, RSHMEM_INTERNAL_PE_TABLE + 4), &minus1, 4, cudaMemcpyHostToDevice));
        t_remote<<<1, 1>>>((int*)sym(0, USER_START));
    } else if (what == "trap-timeout") {
        configure(g_npes, false, 200 * 1000 * 1000ull);
        CK(cudaSetDevice(0));
        t_timeout<<<1, 1>>>((uint64_t*)sym(0, USER_START));
    } else if (what == "trap-pe") {
        configure(g_npes, true, 0);
        CK(cudaSetDevice(0));
        t_badpe<<<1, 1>>>((int*)sym(0, USER_START));
    } else {
        configure(g_npes, true, 0);
        CK(cudaSetDevice(0));
        t_range<<<1, 1>>>((int*)sym(0, 64));  // inside the internal area: not user heap
    }
    cudaError_t e = cudaDeviceSynchronize();
    printf("%s: kernel ended with: %s\n", what.c_str(), cudaGetErrorString(e));
    return e == cudaSuccess ? 1 : 3;
}

int main(int argc, char** argv) {
    std::string mode = argc > 1 ? argv[1] : "all";
    map_heap(1ull << 30);
    if (mode == "copies") {
        for (int dbg = 0; dbg < 2; ++dbg) {
            configure(g_ngpu, dbg == 1, 20ull * 1000 * 1000 * 1000, dbg == 0);
            printf("-- %d PE%s, debug checks %s\n", g_npes, g_npes > 1 ? "s" : "", dbg ? "on" : "off");
            test_copies();
        }
        return g_failures ? 1 : 0;
    }
    if (g_ngpu < 2) {
        printf("needs at least 2 GPUs, found %d (one GPU: ./gpu_selftest copies)\n", g_ngpu);
        return 2;
    }
    g_npes = g_ngpu;
    if (mode.rfind("trap", 0) == 0) return trap(mode);
    if (mode == "micro") {
        configure(2, false, 0);
        micro_copy();
        micro();
        if (g_ngpu >= 4) {
            configure(4, false, 0);
            micro();
        }
        return 0;
    }
    if (mode == "all" || mode == "check") {
        for (int dbg = 0; dbg < 2; ++dbg) {
            // Without checks: translation by arithmetic (CONTIGUOUS); with checks: by the table.
            configure(g_ngpu, dbg == 1, 20ull * 1000 * 1000 * 1000, dbg == 0);
            printf("-- %d PEs, debug checks %s, PE table %s\n", g_npes, dbg ? "on" : "off", dbg ? "read" : "skipped");
            test_pg();
            test_copies();
            test_amo();
            test_waits();
            test_signal_stress();
            test_barriers();
        }
        if (g_ngpu > 2) {
            configure(2, false, 20ull * 1000 * 1000 * 1000);
            printf("-- 2 PEs\n");
            test_signal_stress();
            test_barriers();
        }
    }
    if (mode == "all" || mode == "bench") {
        configure(2, false, 0);
        printf("-- benchmarks, 2 PEs\n");
        for (int get = 0; get < 2; ++get) {
            for (int t : {1024, 512, 256}) bench_bw(get, 128u << 20, 132, t, 20);
            for (int t : {1024, 512, 256}) bench_bw(get, 2u << 20, 132, t, 200);
            bench_bw(get, 2u << 20, 32, 1024, 200);
            bench_bw(get, 128u << 20, 132, 512, 20, true);
            bench_bw(get, 2u << 20, 132, 512, 200, true);
        }
        bench_latency();
        bench_barrier();
        if (g_ngpu >= 4) {
            configure(4, false, 0);
            printf("-- benchmarks, 4 PEs\n");
            bench_barrier();
        }
        if (g_ngpu > 4) {
            configure(g_ngpu, false, 0);
            printf("-- benchmarks, %d PEs\n", g_ngpu);
            bench_barrier();
        }
    }
    printf("gpu_selftest: %d failure(s)\n", g_failures);
    return g_failures ? 1 : 0;
}
