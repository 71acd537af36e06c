// moe_exchange: expert-parallel MoE dispatch + combine written with NVSHMEM's public API only,
// the reference point for rshmem's own exchange (runtime/src/ep, device-lib/include/rshmem/ep.cuh,
// docs/moe.md) and its benchmark perftest/src/bin/moe_bench.rs.
// A whole program with host code and NVSHMEM's headers, built by nvcc (scripts/moe-nvshmem
// build; CI does), so the NVRTC sweep of the repository's .cu files leaves it out:
// rshmem: nvrtc-skip
//
// The same source builds twice, unchanged (scripts/moe-nvshmem build does both):
//
//   against NVSHMEM (3.4.5):
//     nvcc -arch=sm_90 -O3 -std=c++17 -rdc=true -I<nvshmem>/include moe_exchange.cu
//          -o moe_exchange -L<nvshmem>/lib -lnvshmem_device -l:libnvshmem_host.so.3
//          -Xlinker -rpath=<nvshmem>/lib
//     run: mpirun -np N -x NVSHMEM_BOOTSTRAP=MPI -x NVSHMEM_DISABLE_NVLS=1 ./moe_exchange
//   against rshmem, through its NVSHMEM compatibility headers:
//     nvcc -arch=sm_90 -O3 -std=c++17 -I capi/include/nvshmem -I capi/include
//          -I device-lib/include moe_exchange.cu -o moe_exchange -L<dir> -lrshmem
//     run: rshmemrun -n N ./moe_exchange
//
// The program reports "lib":"rshmem" when rshmem's compatibility header is the nvshmem.h it
// was built with (that header defines RSHMEM_NVSHMEM_H), else "lib":"nvshmem".
//
// The problem (normal mode of docs/moe.md, the shapes of moe_bench): n PEs, one GPU each, on
// one host; E experts (default 256), L = E/n per PE, expert e on PE e/L as local expert e%L.
// Every PE has T tokens of H (default 7168) bf16 elements, top-k (default 8) expert indices
// [T,k] (int, -1 = none) and f32 weights [T,k]. Routing: moe_bench's (k distinct experts per
// token drawn with the same splitmix64 hash and seeds, weights in (0,1), the same token values),
// so both programs move the same rows.
//
// What one exchange does (4 kernels on the caller's stream, no host synchronization inside):
//
//   dispatch_send   every block takes a contiguous range of tokens, in rounds. Per round: one
//                   thread per (token, slot) takes a rank in that expert (atomic counter per
//                   expert) and, for the first slot of each destination PE, a slot in that
//                   destination's block for this source (atomic counter per destination);
//                   then the block's warps move the (token, destination) rows, split into up
//                   to 7 chunks of >= 2 KiB when a round has fewer rows than warps, with
//                   nvshmemx_putmem_nbi_warp into the destination's region for this source
//                   (recv_x[me][slot]); the warp of chunk 0 also writes the row's metadata
//                   (token, the token's local experts there in slot order, their ranks and
//                   weights) with nvshmem_int_p. A row goes ONCE per destination PE, however
//                   many of the token's experts live there. Each block ends with
//                   nvshmem_quiet and a per-kernel block counter; the last block sends each
//                   destination the rows per local expert (nvshmem_int_p), then, per
//                   destination, nvshmem_fence + nvshmemx_signal_op(SET) of
//                   (epoch << 32 | rows sent there) into that destination's signal for this
//                   source.
//   dispatch_recv   every block waits (nvshmem_signal_wait_until, >= epoch << 32) for every
//                   source, computes the layout from the counts (expert l at the sum of the
//                   rows of experts < l, source s after sources < s inside it; order within a
//                   (source, expert) block is the order of the sender's atomics), and the
//                   grid's warps copy every staged row into the rows of the local experts it
//                   names (read once, stored k' times; HBM), writing expert_off [L+1],
//                   expert_src (source PE, token) per row and the combine's per-staged-row
//                   metadata. Output: per-local-expert contiguous rows in expert_x, as
//                   rshmem's expert_x / expert_offsets / expert_src.
//   (stand-in expert, untimed) y = x * (1 + 0.001 * e) for global expert e, in place in expert_x.
//   combine_send    one warp per staged row (or per chunk of one): the weighted fp32 sum
//                   (fmaf in the token's slot order) of the row's local experts' outputs,
//                   rounded to bf16, stored ONCE into the source PE's region for this PE at the
//                   token's index (recv_comb[me][t]): by default with plain stores through
//                   nvshmem_ptr (the peer's memory mapped over NVLink), with --combine put
//                   staged in local symmetric memory and sent with nvshmemx_putmem_nbi_warp.
//                   Last block: nvshmem_fence + nvshmemx_signal_op(SET, epoch) to every PE.
//   combine_recv    every block waits for every PE's combine signal (>= epoch); one warp per
//                   token (or chunk): the sum in fp32 of the partial rows of the token's expert
//                   PEs in PE order, rounded to bf16, into out[T,H]; a token with no expert
//                   gets zeros.
//
// Iterations are separated by epochs instead of resets: the host passes each call an epoch
// (1, 2, ... the same sequence on every PE) and the signals are SET to it, receivers wait for
// >= it. No acknowledgement is needed as long as dispatch and combine alternate (the MoE
// layer's order, and this program's): a source's next dispatch starts only after its combine
// saw every PE's combine signal, which every PE sends after it finished reading the staged
// rows; an expert PE's next combine starts only after its next dispatch_recv saw every
// source's next dispatch, which that source sends after its combine_recv read its partial
// rows. The send kernels' counters are zeroed by the last block that reads them.
//
// Buffers (M = the largest --tokens, R = 2H bytes per row): symmetric: recv_x n*M*R,
// recv_comb n*M*R, metadata n*M*(2+3k) ints, counts n*L ints, 2n signals, and with
// --combine put a staging area n*M*R; local: expert_x n*M*min(k,L)*R (the worst case), the
// combine metadata and the counters. With NVSHMEM, NVSHMEM_SYMMETRIC_SIZE must hold the
// symmetric part (scripts/moe-nvshmem sets it).
//
// Timing, as moe_bench: per iteration every PE synchronizes its stream and meets the others in
// nvshmem_barrier_all, then times one dispatch (then, after the untimed stand-in expert and
// another barrier, one combine) from the call to the end of cudaStreamSynchronize on the host
// clock (dispatch_us, combine_us); then the same pair once more between CUDA events, each after
// nvshmemx_barrier_all_on_stream (dispatch_event_us, combine_event_us). A PE's value is the
// median of --iters after --warmup iterations; the row reports the slowest PE's median.
// nvlink_mb: rows this PE sends to OTHER PEs (once per remote destination PE per token) x R,
// mean over PEs (combine_nvlink_mb: the same rows back); dispatch_gbps / combine_gbps =
// that / the host-clock time (moe_bench's dispatch_nvlink_gbps / combine_nvlink_gbps); metadata
// is not counted. sent_mb counts the PE's own rows too.
//
// Check, once per size before the warm-ups: one dispatch, the stand-in expert, one combine;
// every local expert's row count against the host's count of the routing of all PEs, no
// device-detected error, and out against the host reference
// out[t] = sum_j w[t,j] * scale(e_j) * x[t] (bf16 inputs, f32/f64 sum) within
// 1e-2 * max(1, |ref|) for every token when T <= 1024, else for 512 tokens spread over T
// (first and last included). A mismatch prints FAIL lines and the program exits 1.
//
// What it does not do: several nodes (the kernels assume every PE is reachable; the put paths
// would work over a proxy transport but nothing here is tuned for it), fp8 or fp32 tokens, the
// low-latency mode, T differing between PEs, a bound on received rows below the worst case,
// expert compute, overlap with compute, CUDA graphs.
//
// Options: --tokens 128,512,4096,8192  --hidden 7168  --topk 8  --experts 256  --iters 20
//          --warmup 5  --sms N (blocks per kernel, 0 = every SM)  --dispatch put|store
//          (default put: nvshmemx_putmem_nbi_warp; store: 16-byte stores through nvshmem_ptr)
//          --combine store|put (default store)  --json

#include <nvshmem.h>
#include <nvshmemx.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#ifdef RSHMEM_NVSHMEM_H
#define MOE_LIB "rshmem"
#else
#define MOE_LIB "nvshmem"
#endif

#define CUDA_CHECK(call)                                                                      \
    do {                                                                                      \
        cudaError_t err_ = (call);                                                            \
        if (err_ != cudaSuccess) {                                                            \
            fprintf(stderr, "moe_exchange: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,        \
                    cudaGetErrorString(err_));                                                \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

namespace {

constexpr int kThreads = 512;             // threads per block of every kernel
constexpr int kWarps = kThreads / 32;     // warps per block
constexpr int kMaxPes = 32;               // destination masks are 32-bit
constexpr int kMaxK = 32;                 // a warp's lanes hold a token's slots
constexpr int kMaxExperts = 1024;         // shared-memory tables of the receive kernel
constexpr int kMinChunk = 2048;           // bytes: smallest piece of a row given to one warp
constexpr unsigned kFull = 0xffffffffu;

// Everything the kernels need, passed by value.
struct Params {
    int me, n, E, L, k, T, M;
    int row_bytes;   // 2H
    int metaw;       // ints per staged-row metadata record (2 + 3k, rounded up to 4)
    int cmw;         // ints per combine metadata record (3 + 2k, rounded up to 4)
    long long max_rows;
    int max_chunks;  // pieces a row may be split into
    int store_dispatch, store_combine;
    unsigned long long epoch;
    // Inputs and output of this PE.
    const uint16_t* x;   // [T][H] bf16
    const int* idx;      // [T][k]
    const float* w;      // [T][k]
    uint16_t* out;       // [T][H] bf16
    // Symmetric.
    uint8_t* recv_x;      // [n src][M][row_bytes]   staged rows, by source
    int* recv_meta;       // [n src][M][metaw]       their metadata
    int* recv_cnt;        // [n src][L]              rows per local expert, by source
    uint64_t* sig_disp;   // [n src]                 epoch << 32 | rows
    uint64_t* sig_comb;   // [n expert PE]           epoch
    uint8_t* recv_comb;   // [n expert PE][M][row_bytes]  partial sums, row = token
    uint8_t* cstage;      // [n*M][row_bytes]        --combine put: the sums before the put
    // Local.
    int* dest_cnt;    // [n]  rows sent to each destination (dispatch_send)
    int* exp_cnt;     // [E]  rows per expert (dispatch_send)
    int* done;        // [2]  finished blocks of dispatch_send, combine_send
    int* stage_rows;  // [n]  rows staged from each source (dispatch_recv -> combine_send)
    int* cmeta;       // [n*M][cmw]  per staged row: source, token, count, rows[k], weights[k]
    uint8_t* expert_x;  // [max_rows][row_bytes]
    int* expert_off;    // [L+1]
    int* expert_src;    // [max_rows][2]  (source PE, source token)
    int* err;           // first device-detected error code (0 = none)
};

__device__ __forceinline__ float bf16_to_f32(uint32_t b) { return __uint_as_float(b << 16); }

// Round to nearest even (NaN kept quiet).
__device__ __forceinline__ uint32_t f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ void fma8(float* acc, float w, const uint4& v) {
    const uint32_t q[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        acc[2 * i] = fmaf(w, bf16_to_f32(q[i] & 0xffffu), acc[2 * i]);
        acc[2 * i + 1] = fmaf(w, bf16_to_f32(q[i] >> 16), acc[2 * i + 1]);
    }
}

__device__ __forceinline__ uint4 pack8(const float* a) {
    uint4 r;
    r.x = f32_to_bf16(a[0]) | (f32_to_bf16(a[1]) << 16);
    r.y = f32_to_bf16(a[2]) | (f32_to_bf16(a[3]) << 16);
    r.z = f32_to_bf16(a[4]) | (f32_to_bf16(a[5]) << 16);
    r.w = f32_to_bf16(a[6]) | (f32_to_bf16(a[7]) << 16);
    return r;
}

// Loads that bypass L1: data other PEs wrote (after the signal wait).
template <bool CG>
__device__ __forceinline__ uint4 load16(const uint8_t* p) {
    if (CG) return __ldcg(reinterpret_cast<const uint4*>(p));
    return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ void set_err(int* err, int code) { atomicCAS(err, 0, code); }

// After the block's puts: completes them (nvshmem_quiet), counts the block done on `counter`
// and returns (to every thread) whether it was the grid's last block; the last one then sees
// every other block's work. Resets nothing: the caller's last block does.
__device__ __forceinline__ bool puts_done_last_block(int* counter) {
    __shared__ int s_last;
    __syncthreads();
    if (threadIdx.x == 0) {
        nvshmem_quiet();
        __threadfence();
        s_last = atomicAdd(counter, 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (s_last) __threadfence();
    return s_last;
}


// One warp copies len bytes (a multiple of 16) from src to ndst destinations: lane j < ndst
// holds destination j's address. Four 16-byte loads per lane in flight; each loaded vector is
// stored to every destination.
template <bool CG>
__device__ __forceinline__ void warp_copy(uint8_t* my_dst, int ndst, const uint8_t* src,
                                          int len, int lane) {
    const int nvec = len >> 4;
    for (int v0 = 0; v0 < nvec; v0 += 4 * 32) {
        uint4 a[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int v = v0 + u * 32 + lane;
            if (v < nvec) a[u] = load16<CG>(src + (size_t)v * 16);
        }
        for (int j = 0; j < ndst; ++j) {
            uint8_t* d = reinterpret_cast<uint8_t*>(
                __shfl_sync(kFull, reinterpret_cast<unsigned long long>(my_dst), j));
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int v = v0 + u * 32 + lane;
                if (v < nvec) *reinterpret_cast<uint4*>(d + (size_t)v * 16) = a[u];
            }
        }
    }
}

// One warp writes dst[0..len) = bf16(sum_j w_j * src_j[off..off+len)) in fp32 fused
// multiply-adds, j = 0..nterm-1 in order; lane j holds src_j (row start) and w_j. Two vectors
// per lane and up to 4 terms' loads in flight before they are added.
template <bool CG>
__device__ __forceinline__ void warp_sum(uint8_t* dst, const uint8_t* my_src, float my_w,
                                         int nterm, int off, int len, int lane) {
    constexpr int U = 2;
    const int nvec = len >> 4;
    for (int v0 = 0; v0 < nvec; v0 += U * 32) {
        float acc[U][8];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[u][i] = 0.f;
        for (int j0 = 0; j0 < nterm; j0 += 4) {
            uint4 a[4][U];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const uint8_t* s = reinterpret_cast<const uint8_t*>(
                    __shfl_sync(kFull, reinterpret_cast<unsigned long long>(my_src), (j0 + jj) & 31));
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int v = v0 + u * 32 + lane;
                    a[jj][u] = (j0 + jj < nterm && v < nvec)
                                   ? load16<CG>(s + off + (size_t)v * 16)
                                   : make_uint4(0, 0, 0, 0);
                }
            }
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const float wj = __shfl_sync(kFull, my_w, (j0 + jj) & 31);
                if (j0 + jj < nterm) {
#pragma unroll
                    for (int u = 0; u < U; ++u) fma8(acc[u], wj, a[jj][u]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int v = v0 + u * 32 + lane;
            if (v < nvec) *reinterpret_cast<uint4*>(dst + (size_t)v * 16) = pack8(acc[u]);
        }
    }
}

// Pieces per row so that `items` rows keep `warps` warps busy (1 .. max_chunks), and the
// piece size in bytes (a multiple of 16).
__device__ __forceinline__ void chunking(long long items, long long warps, int row_bytes,
                                         int max_chunks, int& chunks, int& cb) {
    long long c = items > 0 ? (warps + items - 1) / items : 1;
    chunks = (int)max(1LL, min((long long)max_chunks, c));
    cb = ((row_bytes + chunks - 1) / chunks + 15) & ~15;
}

// ------------------------------------------------------------------------------------------
// Dispatch.

__global__ void __launch_bounds__(kThreads, 1) dispatch_send(Params p) {
    __shared__ int s_dest[kThreads];    // per (token of the round, slot): destination PE or -1
    __shared__ int s_rank[kThreads];    // its rank in its expert
    __shared__ int s_pair_tl[kThreads]; // (token of the round, destination, slot there)
    __shared__ int s_pair_d[kThreads];
    __shared__ int s_pair_slot[kThreads];
    __shared__ int s_npairs;
    __shared__ uint8_t* s_peer_x[kMaxPes];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int k = p.k;
    const size_t rb = (size_t)p.row_bytes;
    if (p.store_dispatch && tid < p.n) s_peer_x[tid] = (uint8_t*)nvshmem_ptr(p.recv_x, tid);
    const int per_round = kThreads / k;
    const int t_begin = (int)((long long)p.T * blockIdx.x / gridDim.x);
    const int t_end = (int)((long long)p.T * (blockIdx.x + 1) / gridDim.x);
    for (int t0 = t_begin; t0 < t_end; t0 += per_round) {
        const int nt = min(per_round, t_end - t0);
        if (tid == 0) s_npairs = 0;
        int d = -1;
        if (tid < nt * k) {
            const int e = p.idx[(size_t)t0 * k + tid];
            int rank = -1;
            if (e >= 0 && e < p.E) {
                d = e / p.L;
                rank = atomicAdd(&p.exp_cnt[e], 1);
            } else if (e != -1) {
                set_err(p.err, 1);
            }
            s_dest[tid] = d;
            s_rank[tid] = rank;
        }
        __syncthreads();
        if (d >= 0) {
            // The token's first slot with this destination claims the destination slot.
            const int tl = tid / k, j = tid - tl * k;
            bool first = true;
            for (int jj = 0; jj < j; ++jj) first = first && s_dest[tl * k + jj] != d;
            if (first) {
                const int slot = atomicAdd(&p.dest_cnt[d], 1);
                const int q = atomicAdd(&s_npairs, 1);
                s_pair_tl[q] = tl;
                s_pair_d[q] = d;
                s_pair_slot[q] = slot;
            }
        }
        __syncthreads();
        const int np = s_npairs;
        int chunks, cb;
        chunking(np, kWarps, p.row_bytes, p.max_chunks, chunks, cb);
        for (int it = warp; it < np * chunks; it += kWarps) {
            const int q = it / chunks, c = it - q * chunks;
            const int tl = s_pair_tl[q], dd = s_pair_d[q], slot = s_pair_slot[q];
            const int t = t0 + tl;
            const size_t dst_off = ((size_t)p.me * p.M + slot) * rb;
            const int off = c * cb;
            if (off < p.row_bytes) {
                const int len = min(cb, p.row_bytes - off);
                const uint8_t* src = reinterpret_cast<const uint8_t*>(p.x) + (size_t)t * rb + off;
                if (p.store_dispatch) {
                    warp_copy<false>(s_peer_x[dd] + dst_off + off, 1, src, len, lane);
                } else {
                    nvshmemx_putmem_nbi_warp(p.recv_x + dst_off + off, src, (size_t)len, dd);
                }
            }
            if (c == 0) {
                // Metadata: token, number of its experts at dd, then per such slot (slot
                // order): local expert, rank, weight bits.
                const int base = tl * k;
                const bool mine = lane < k && s_dest[base + lane] == dd;
                const unsigned sel = __ballot_sync(kFull, mine);
                int* m = p.recv_meta + ((size_t)p.me * p.M + slot) * p.metaw;
                if (lane == 0) {
                    nvshmem_int_p(m, t, dd);
                    nvshmem_int_p(m + 1, __popc(sel), dd);
                }
                if (mine) {
                    const int pos = __popc(sel & ((1u << lane) - 1u));
                    const int e = p.idx[(size_t)t * k + lane];
                    nvshmem_int_p(m + 2 + 3 * pos, e - dd * p.L, dd);
                    nvshmem_int_p(m + 3 + 3 * pos, s_rank[base + lane], dd);
                    nvshmem_int_p(m + 4 + 3 * pos, __float_as_int(p.w[(size_t)t * k + lane]), dd);
                }
            }
        }
        __syncthreads();
    }
    // Every block's puts complete before the block counts itself done.
    if (!puts_done_last_block(&p.done[0])) return;
    // The last block: rows per (destination, local expert), then per destination the signal
    // carrying the epoch and the number of rows. Counters back to zero for the next call.
    for (int e = tid; e < p.E; e += kThreads) {
        const int c = atomicExch(&p.exp_cnt[e], 0);
        const int dd = e / p.L;
        nvshmem_int_p(p.recv_cnt + p.me * p.L + (e - dd * p.L), c, dd);
    }
    __syncthreads();
    if (tid < p.n) {
        const int c = atomicExch(&p.dest_cnt[tid], 0);
        nvshmem_fence();
        nvshmemx_signal_op(p.sig_disp + p.me, (p.epoch << 32) | (unsigned)c, NVSHMEM_SIGNAL_SET, tid);
    }
    if (tid == 0) p.done[0] = 0;
}

// Every block: wait for every source, layout from the counts, then the grid copies the staged
// rows into per-expert order.
__global__ void __launch_bounds__(kThreads, 1) dispatch_recv(Params p) {
    __shared__ int s_cnt[kMaxPes];
    __shared__ int s_sbase[kMaxPes + 1];
    __shared__ int s_base[kMaxExperts];  // [source][local expert]: first row of that block
    __shared__ int s_wtot[kWarps];
    __shared__ int s_carry;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n = p.n, L = p.L, k = p.k;
    const size_t rb = (size_t)p.row_bytes;
    if (tid < n) {
        const uint64_t v = nvshmem_signal_wait_until(p.sig_disp + tid, NVSHMEM_CMP_GE, p.epoch << 32);
        s_cnt[tid] = (int)(v & 0xffffffffu);
    }
    if (tid == 0) s_carry = 0;
    __syncthreads();
    if (tid == 0) {
        int a = 0;
        for (int s = 0; s < n; ++s) {
            s_sbase[s] = a;
            a += s_cnt[s];
        }
        s_sbase[n] = a;
    }
    // Exclusive scan of the rows per local expert, kThreads experts at a time.
    for (int l0 = 0; l0 < L; l0 += kThreads) {
        const int l = l0 + tid;
        int tot = 0;
        if (l < L)
            for (int s = 0; s < n; ++s) tot += __ldcg(p.recv_cnt + s * L + l);
        int v = tot;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(kFull, v, o);
            if (lane >= o) v += y;
        }
        if (lane == 31) s_wtot[warp] = v;
        __syncthreads();
        if (warp == 0) {
            int x = lane < kWarps ? s_wtot[lane] : 0;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(kFull, x, o);
                if (lane >= o) x += y;
            }
            if (lane < kWarps) s_wtot[lane] = x;
        }
        __syncthreads();
        const int excl = s_carry + (warp > 0 ? s_wtot[warp - 1] : 0) + v - tot;
        if (l < L) {
            int b = excl;
            for (int s = 0; s < n; ++s) {
                s_base[s * L + l] = b;
                b += __ldcg(p.recv_cnt + s * L + l);
            }
            if (blockIdx.x == 0) p.expert_off[l] = excl;
        }
        __syncthreads();
        if (tid == kThreads - 1) s_carry = excl + tot;
        __syncthreads();
    }
    if (blockIdx.x == 0) {
        if (tid == 0) p.expert_off[L] = s_carry;
        if (tid < n) p.stage_rows[tid] = s_cnt[tid];
    }
    const long long rows = s_sbase[n];
    const long long nwarps = (long long)gridDim.x * kWarps;
    int chunks, cb;
    chunking(rows, nwarps, p.row_bytes, p.max_chunks, chunks, cb);
    for (long long it = (long long)blockIdx.x * kWarps + warp; it < rows * chunks; it += nwarps) {
        const int g = (int)(it / chunks), c = (int)(it - (long long)g * chunks);
        int s = 0;
        while (s + 1 < n && s_sbase[s + 1] <= g) ++s;
        const int i = g - s_sbase[s];
        const int* m = p.recv_meta + ((size_t)s * p.M + i) * p.metaw;
        const int t = __ldcg(m), nsel = min(__ldcg(m + 1), k);
        long long row = -1;
        int wbits = 0;
        if (lane < nsel) {
            const int l = __ldcg(m + 2 + 3 * lane), r = __ldcg(m + 3 + 3 * lane);
            wbits = __ldcg(m + 4 + 3 * lane);
            if (l >= 0 && l < L && r >= 0) row = (long long)s_base[s * L + l] + r;
            if (row >= p.max_rows) row = -1;
            if (row < 0) set_err(p.err, 2);
        }
        // Rows with a bad record are left out (reported through err).
        const unsigned ok = __ballot_sync(kFull, lane < nsel && row >= 0);
        const int nok = __popc(ok);
        // Lane j takes the j-th valid destination (all of them unless a record was bad).
        int from = lane;
        if (ok != (nsel >= 32 ? kFull : (1u << nsel) - 1u)) {
            for (int b = 0, c = 0; b < 32; ++b)
                if ((ok >> b) & 1u) {
                    if (c == lane) {
                        from = b;
                        break;
                    }
                    ++c;
                }
        }
        const long long crow = __shfl_sync(kFull, row, from);
        const int cw = __shfl_sync(kFull, wbits, from);
        const int off = c * cb;
        if (off < p.row_bytes) {
            const int len = min(cb, p.row_bytes - off);
            uint8_t* dst = lane < nok ? p.expert_x + (size_t)crow * rb + off : nullptr;
            warp_copy<true>(dst, nok, p.recv_x + ((size_t)s * p.M + i) * rb + off, len, lane);
        }
        if (c == 0) {
            int* cm = p.cmeta + (size_t)g * p.cmw;
            if (lane == 0) {
                cm[0] = s;
                cm[1] = t;
                cm[2] = nok;
            }
            if (lane < nok) {
                cm[3 + lane] = (int)crow;
                cm[3 + k + lane] = cw;
                p.expert_src[2 * crow] = s;
                p.expert_src[2 * crow + 1] = t;
            }
        }
    }
}

// The stand-in expert, in place: every row of local expert l scaled by 1 + 0.001 * (global
// expert index), rounded to bf16. Untimed.
__global__ void __launch_bounds__(kThreads, 1) expert_scale(Params p) {
    const int rows = p.expert_off[p.L];
    const int nvec = p.row_bytes >> 4;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        int lo = 0, hi = p.L;  // the l with expert_off[l] <= r < expert_off[l+1]
        while (hi - lo > 1) {
            const int mid = (lo + hi) >> 1;
            if (p.expert_off[mid] <= r) lo = mid; else hi = mid;
        }
        const float sc = 1.0f + 0.001f * (float)(p.me * p.L + lo);
        uint4* row = reinterpret_cast<uint4*>(p.expert_x + (size_t)r * p.row_bytes);
        for (int v = threadIdx.x; v < nvec; v += kThreads) {
            float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            fma8(a, sc, row[v]);
            row[v] = pack8(a);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Combine.

__global__ void __launch_bounds__(kThreads, 1) combine_send(Params p) {
    __shared__ uint8_t* s_peer[kMaxPes];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n = p.n, k = p.k;
    const size_t rb = (size_t)p.row_bytes;
    if (p.store_combine && tid < n) s_peer[tid] = (uint8_t*)nvshmem_ptr(p.recv_comb, tid);
    long long rows = 0;
    for (int s = 0; s < n; ++s) rows += p.stage_rows[s];
    __syncthreads();
    const long long nwarps = (long long)gridDim.x * kWarps;
    int chunks, cb;
    chunking(rows, nwarps, p.row_bytes, p.max_chunks, chunks, cb);
    for (long long it = (long long)blockIdx.x * kWarps + warp; it < rows * chunks; it += nwarps) {
        const long long g = it / chunks;
        const int c = (int)(it - g * chunks);
        const int* cm = p.cmeta + (size_t)g * p.cmw;
        const int s = cm[0], t = cm[1], nsel = cm[2];
        const uint8_t* src = nullptr;
        float wt = 0.f;
        if (lane < nsel) {
            src = p.expert_x + (size_t)cm[3 + lane] * rb;
            wt = __int_as_float(cm[3 + k + lane]);
        }
        const int off = c * cb;
        if (off >= p.row_bytes) continue;
        const int len = min(cb, p.row_bytes - off);
        const size_t dst_off = ((size_t)p.me * p.M + t) * rb + off;
        if (p.store_combine) {
            warp_sum<false>(s_peer[s] + dst_off, src, wt, nsel, off, len, lane);
        } else {
            uint8_t* stage = p.cstage + (size_t)g * rb + off;
            warp_sum<false>(stage, src, wt, nsel, off, len, lane);
            __syncwarp();
            nvshmemx_putmem_nbi_warp(p.recv_comb + dst_off, stage, (size_t)len, s);
        }
    }
    if (!puts_done_last_block(&p.done[1])) return;
    if (tid < n) {
        nvshmem_fence();
        nvshmemx_signal_op(p.sig_comb + p.me, p.epoch, NVSHMEM_SIGNAL_SET, tid);
    }
    if (tid == 0) p.done[1] = 0;
}

__global__ void __launch_bounds__(kThreads, 1) combine_recv(Params p) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n = p.n, k = p.k;
    const size_t rb = (size_t)p.row_bytes;
    if (tid < n) nvshmem_signal_wait_until(p.sig_comb + tid, NVSHMEM_CMP_GE, p.epoch);
    __syncthreads();
    const long long nwarps = (long long)gridDim.x * kWarps;
    int chunks, cb;
    chunking(p.T, nwarps, p.row_bytes, p.max_chunks, chunks, cb);
    for (long long it = (long long)blockIdx.x * kWarps + warp; it < (long long)p.T * chunks;
         it += nwarps) {
        const int t = (int)(it / chunks), c = (int)(it - (long long)t * chunks);
        const int off = c * cb;
        if (off >= p.row_bytes) continue;
        const int len = min(cb, p.row_bytes - off);
        unsigned bit = 0;
        if (lane < k) {
            const int e = p.idx[(size_t)t * k + lane];
            if (e >= 0 && e < p.E) bit = 1u << (e / p.L);
        }
        const unsigned mask = __reduce_or_sync(kFull, bit);
        // Lane j: the j-th expert PE of the token, ascending.
        const uint8_t* src = nullptr;
        int j = 0;
        for (unsigned mm = mask; mm; mm &= mm - 1, ++j) {
            const int d = __ffs(mm) - 1;
            if (lane == j) src = p.recv_comb + ((size_t)d * p.M + t) * rb;
        }
        warp_sum<true>(reinterpret_cast<uint8_t*>(p.out) + (size_t)t * rb + off, src, 1.0f,
                       __popc(mask), off, len, lane);
    }
}

// All-gather of nv doubles per PE (every PE gets every PE's values at [pe * nv]).
__global__ void allgather_doubles(double* sym, const double* vals, int nv, int me, int n) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        for (int pe = 0; pe < n; ++pe) nvshmem_putmem(sym + (size_t)me * nv, vals, nv * sizeof(double), pe);
        nvshmem_quiet();
    }
}

// ------------------------------------------------------------------------------------------
// Host side.

uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// moe_bench's routing of PE pe: k distinct experts per token, weights in (0, 1).
void routing(int pe, int T, int k, int E, std::vector<int>& idx, std::vector<float>& w) {
    idx.assign((size_t)T * k, -1);
    w.assign((size_t)T * k, 0.f);
    for (int t = 0; t < T; ++t) {
        int got = 0;
        uint64_t j = 0;
        while (got < k) {
            const int c = (int)(mix(((uint64_t)pe << 40) ^ ((uint64_t)t << 8) ^ j) % (uint64_t)E);
            ++j;
            bool dup = false;
            for (int q = 0; q < got; ++q) dup = dup || idx[(size_t)t * k + q] == c;
            if (!dup) idx[(size_t)t * k + got++] = c;
        }
        for (int q = 0; q < k; ++q) {
            const uint64_t c = (uint64_t)idx[(size_t)t * k + q];
            const uint64_t r = mix(c ^ ((uint64_t)t << 20) ^ ((uint64_t)pe << 50) ^ 0x77);
            w[(size_t)t * k + q] = ((float)(r % 1000) + 0.5f) / 1000.0f;
        }
    }
}

float x_val(int pe, int t, int h) {
    return ((float)(mix(((uint64_t)pe << 48) ^ ((uint64_t)t << 20) ^ (uint64_t)h) % 2001) - 1000.0f) /
           256.0f;
}

uint16_t host_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float host_f32(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void usage(FILE* f) {
    fprintf(f,
            "usage: moe_exchange [--tokens 128,512,4096,8192] [--hidden 7168] [--topk 8]\n"
            "                    [--experts 256] [--iters 20] [--warmup 5] [--sms 0]\n"
            "                    [--dispatch put|store] [--combine store|put] [--json]\n"
            "Expert-parallel MoE dispatch + combine on NVSHMEM's public API (" MOE_LIB
            " build); run one PE per GPU.\n");
}

struct Options {
    std::vector<int> tokens{128, 512, 4096, 8192};
    int hidden = 7168, topk = 8, experts = 256, iters = 20, warmup = 5, sms = 0;
    bool store_dispatch = false, store_combine = true, json = false;
};

bool parse_int(const char* s, long lo, long hi, int& out) {
    char* end = nullptr;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) return false;
    out = (int)v;
    return true;
}

// Returns an error message, or "" when the options are good.
std::string parse(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--json") {
            o.json = true;
            continue;
        }
        if (a == "-h" || a == "--help") {
            usage(stdout);
            exit(0);
        }
        static const char* const known[] = {"--tokens", "--hidden", "--topk", "--experts", "--iters",
                                            "--warmup", "--sms", "--dispatch", "--combine"};
        if (std::none_of(std::begin(known), std::end(known), [&](const char* q) { return a == q; }))
            return "unknown option " + a + " (see --help)";
        if (i + 1 >= argc) return a + " needs a value";
        const char* v = argv[++i];
        int* target = nullptr;
        long lo = 1, hi = 1L << 30;
        if (a == "--tokens") {
            o.tokens.clear();
            std::string s = v;
            size_t pos = 0;
            while (true) {
                const size_t comma = s.find(',', pos);
                const std::string part = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
                int t;
                if (!parse_int(part.c_str(), 1, 1 << 24, t))
                    return "--tokens " + s + ": expected a comma-separated list of token counts >= 1";
                o.tokens.push_back(t);
                if (comma == std::string::npos) break;
                pos = comma + 1;
            }
            continue;
        } else if (a == "--hidden") {
            target = &o.hidden;
            hi = 1 << 20;
        } else if (a == "--topk") {
            target = &o.topk;
            hi = kMaxK;
        } else if (a == "--experts") {
            target = &o.experts;
            hi = kMaxExperts;
        } else if (a == "--iters") {
            target = &o.iters;
        } else if (a == "--warmup") {
            target = &o.warmup;
            lo = 0;
        } else if (a == "--sms") {
            target = &o.sms;
            lo = 0;
            hi = 1 << 16;
        } else if (a == "--dispatch" || a == "--combine") {
            const std::string m = v;
            if (m != "put" && m != "store") return a + " " + m + ": expected put or store";
            (a == "--dispatch" ? o.store_dispatch : o.store_combine) = m == "store";
            continue;
        } else {
            return "unknown option " + a + " (see --help)";
        }
        if (!parse_int(v, lo, hi, *target))
            return a + " " + v + ": expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
    }
    if (o.hidden % 8 != 0) return "--hidden " + std::to_string(o.hidden) + ": rows must be a multiple of 16 bytes (H a multiple of 8)";
    if (o.topk > o.experts) return "--topk " + std::to_string(o.topk) + ": more than --experts (experts are distinct per token)";
    return "";
}

// Symmetric allocation that ends the program with a hint when the heap is too small.
void* sym_alloc(size_t bytes, const char* what) {
    void* p = nvshmem_malloc(bytes);
    if (!p) {
        fprintf(stderr,
                "moe_exchange: PE %d: nvshmem_malloc(%zu) for %s failed (NVSHMEM: raise "
                "NVSHMEM_SYMMETRIC_SIZE)\n",
                nvshmem_my_pe(), bytes, what);
        exit(1);
    }
    return p;
}

void json_num(std::string& s, const char* key, double v) {
    char b[96];
    if (std::isfinite(v)) snprintf(b, sizeof b, ",\"%s\":%.3f", key, v);
    else snprintf(b, sizeof b, ",\"%s\":null", key);
    s += b;
}

void json_int(std::string& s, const char* key, long long v) {
    char b[96];
    snprintf(b, sizeof b, ",\"%s\":%lld", key, v);
    s += b;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    const std::string bad = parse(argc, argv, o);
    if (!bad.empty()) {
        fprintf(stderr, "moe_exchange: %s\n", bad.c_str());
        usage(stderr);
        return 2;
    }

    nvshmem_init();
    const int me = nvshmem_my_pe(), n = nvshmem_n_pes();
    CUDA_CHECK(cudaSetDevice(nvshmem_team_my_pe(NVSHMEMX_TEAM_NODE)));
    if (n > kMaxPes || o.experts % n != 0) {
        if (me == 0)
            fprintf(stderr, "moe_exchange: %d PEs: needs at most %d PEs and --experts (%d) a multiple of them\n",
                    n, kMaxPes, o.experts);
        nvshmem_finalize();
        return 2;
    }
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int sm_count = 0, dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev));
    const int blocks = o.sms > 0 ? o.sms : sm_count;

    const int H = o.hidden, k = o.topk, E = o.experts, L = E / n;
    const int M = *std::max_element(o.tokens.begin(), o.tokens.end());
    const size_t rb = (size_t)H * 2;

    Params p{};
    p.me = me;
    p.n = n;
    p.E = E;
    p.L = L;
    p.k = k;
    p.M = M;
    p.row_bytes = (int)rb;
    p.metaw = (2 + 3 * k + 3) & ~3;
    p.cmw = (3 + 2 * k + 3) & ~3;
    p.max_rows = (long long)n * M * std::min(k, L);
    p.max_chunks = std::max(1, (int)rb / kMinChunk);
    p.store_dispatch = o.store_dispatch;
    p.store_combine = o.store_combine;

    // Symmetric buffers (every PE the same sizes, in the same order).
    p.recv_x = (uint8_t*)sym_alloc((size_t)n * M * rb, "recv_x");
    p.recv_comb = (uint8_t*)sym_alloc((size_t)n * M * rb, "recv_comb");
    p.recv_meta = (int*)sym_alloc((size_t)n * M * p.metaw * sizeof(int), "recv_meta");
    p.recv_cnt = (int*)sym_alloc((size_t)n * L * sizeof(int), "recv_cnt");
    uint64_t* sigs = (uint64_t*)sym_alloc(2 * (size_t)n * sizeof(uint64_t), "signals");
    p.sig_disp = sigs;
    p.sig_comb = sigs + n;
    p.cstage = o.store_combine ? nullptr : (uint8_t*)sym_alloc((size_t)n * M * rb, "cstage");
    const int kVals = 8;  // values per PE gathered per size
    double* gat = (double*)sym_alloc((size_t)n * kVals * sizeof(double), "gather");
    CUDA_CHECK(cudaMemset(sigs, 0, 2 * (size_t)n * sizeof(uint64_t)));
    CUDA_CHECK(cudaMemset(p.recv_cnt, 0, (size_t)n * L * sizeof(int)));

    // Peers must be reachable by load/store for the store paths.
    if (o.store_dispatch || o.store_combine) {
        int unreachable = -1;
        for (int pe = 0; pe < n; ++pe)
            if (!nvshmem_ptr(p.recv_x, pe)) unreachable = pe;
        if (unreachable >= 0) {
            fprintf(stderr,
                    "moe_exchange: PE %d: PE %d is not reachable by load/store (nvshmem_ptr is NULL): "
                    "use --dispatch put --combine put\n",
                    me, unreachable);
            exit(1);
        }
    }

    // Local buffers.
    CUDA_CHECK(cudaMalloc(&p.dest_cnt, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&p.exp_cnt, E * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&p.done, 2 * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&p.stage_rows, n * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&p.cmeta, (size_t)n * M * p.cmw * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&p.expert_x, (size_t)p.max_rows * rb));
    CUDA_CHECK(cudaMalloc(&p.expert_off, (L + 1) * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&p.expert_src, (size_t)p.max_rows * 2 * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&p.err, sizeof(int)));
    CUDA_CHECK(cudaMemset(p.dest_cnt, 0, n * sizeof(int)));
    CUDA_CHECK(cudaMemset(p.exp_cnt, 0, E * sizeof(int)));
    CUDA_CHECK(cudaMemset(p.done, 0, 2 * sizeof(int)));
    CUDA_CHECK(cudaMemset(p.stage_rows, 0, n * sizeof(int)));
    CUDA_CHECK(cudaMemset(p.expert_off, 0, (L + 1) * sizeof(int)));
    CUDA_CHECK(cudaMemset(p.err, 0, sizeof(int)));
    double* d_vals;
    CUDA_CHECK(cudaMalloc(&d_vals, kVals * sizeof(double)));
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();

    unsigned long long disp_epoch = 0, comb_epoch = 0;
    auto dispatch = [&]() {
        p.epoch = ++disp_epoch;
        dispatch_send<<<blocks, kThreads, 0, stream>>>(p);
        dispatch_recv<<<blocks, kThreads, 0, stream>>>(p);
        CUDA_CHECK(cudaGetLastError());
    };
    auto expert = [&]() {
        expert_scale<<<blocks, kThreads, 0, stream>>>(p);
        CUDA_CHECK(cudaGetLastError());
    };
    auto combine = [&]() {
        p.epoch = ++comb_epoch;
        combine_send<<<blocks, kThreads, 0, stream>>>(p);
        combine_recv<<<blocks, kThreads, 0, stream>>>(p);
        CUDA_CHECK(cudaGetLastError());
    };
    // Every PE's vals[kVals], on every PE.
    auto gather = [&](const double* vals) {
        std::vector<double> all((size_t)n * kVals);
        CUDA_CHECK(cudaMemcpyAsync(d_vals, vals, kVals * sizeof(double), cudaMemcpyHostToDevice, stream));
        allgather_doubles<<<1, 32, 0, stream>>>(gat, d_vals, kVals, me, n);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaStreamSynchronize(stream));
        nvshmem_barrier_all();
        CUDA_CHECK(cudaMemcpy(all.data(), gat, all.size() * sizeof(double), cudaMemcpyDeviceToHost));
        nvshmem_barrier_all();
        return all;
    };
    using clk = std::chrono::steady_clock;
    auto us_since = [](clk::time_point t0) {
        return std::chrono::duration<double, std::micro>(clk::now() - t0).count();
    };

    if (me == 0) {
        if (o.json) {
            // Rows only.
        } else {
            printf("# moe_exchange (%s): %d PEs, E %d, k %d, H %d bf16 (rows %zu B), %d blocks x %d threads, "
                   "dispatch %s, combine %s; us: slowest PE's median of %d after %d warm-ups "
                   "(host clock incl. launch + sync; ev = CUDA events around the kernels)\n",
                   MOE_LIB, n, E, k, H, rb, blocks, kThreads, o.store_dispatch ? "store" : "put",
                   o.store_combine ? "store" : "put", o.iters, o.warmup);
            printf("%6s %11s %10s %9s %9s %9s %10s %10s %12s %6s\n", "T", "dispatch_us", "combine_us",
                   "disp_ev", "comb_ev", "nvlinkMB", "disp_GB/s", "comb_GB/s", "tokens/s", "check");
        }
        fflush(stdout);
    }

    int exit_code = 0;
    cudaEvent_t ev[4];
    for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
    for (const int T : o.tokens) {
        p.T = T;
        // This PE's tokens and routing; every PE's routing for the expected row counts.
        std::vector<int> idx;
        std::vector<float> w;
        routing(me, T, k, E, idx, w);
        std::vector<uint16_t> xh((size_t)T * H);
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < H; ++h) xh[(size_t)t * H + h] = host_bf16(x_val(me, t, h));
        std::vector<long long> want_rows(L, 0);
        for (int s = 0; s < n; ++s) {
            std::vector<int> is;
            std::vector<float> ws;
            if (s == me) is = idx; else routing(s, T, k, E, is, ws);
            for (int v : is)
                if (v >= 0 && v / L == me) ++want_rows[v % L];
        }
        // Rows leaving this PE: once per destination PE per token; remote ones for NVLink.
        long long rows_all = 0, rows_remote = 0;
        for (int t = 0; t < T; ++t) {
            unsigned mask = 0;
            for (int j = 0; j < k; ++j) {
                const int e = idx[(size_t)t * k + j];
                if (e >= 0) mask |= 1u << (e / L);
            }
            rows_all += __builtin_popcount(mask);
            rows_remote += __builtin_popcount(mask & ~(1u << me));
        }
        uint16_t *d_x, *d_out;
        int* d_idx;
        float* d_w;
        CUDA_CHECK(cudaMalloc(&d_x, xh.size() * 2));
        CUDA_CHECK(cudaMalloc(&d_out, xh.size() * 2));
        CUDA_CHECK(cudaMalloc(&d_idx, idx.size() * sizeof(int)));
        CUDA_CHECK(cudaMalloc(&d_w, w.size() * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(d_x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_idx, idx.data(), idx.size() * sizeof(int), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_w, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(d_out, 0xff, xh.size() * 2));  // NaN rows until written
        p.x = d_x;
        p.idx = d_idx;
        p.w = d_w;
        p.out = d_out;
        CUDA_CHECK(cudaDeviceSynchronize());
        nvshmem_barrier_all();

        // ---- Check: one exchange with the stand-in expert against the host reference.
        long long bad = 0;
        dispatch();
        expert();
        combine();
        CUDA_CHECK(cudaStreamSynchronize(stream));
        {
            int err = 0;
            CUDA_CHECK(cudaMemcpy(&err, p.err, sizeof(int), cudaMemcpyDeviceToHost));
            if (err) {
                fprintf(stderr, "moe_exchange: FAIL: PE %d T %d: device-detected error %d (%s)\n", me, T, err,
                        err == 1 ? "expert index out of range" : "bad row metadata");
                ++bad;
                CUDA_CHECK(cudaMemset(p.err, 0, sizeof(int)));
            }
            std::vector<int> off(L + 1);
            CUDA_CHECK(cudaMemcpy(off.data(), p.expert_off, (L + 1) * sizeof(int), cudaMemcpyDeviceToHost));
            for (int l = 0; l < L; ++l)
                if (off[l + 1] - off[l] != want_rows[l]) {
                    if (bad < 5)
                        fprintf(stderr, "moe_exchange: FAIL: PE %d T %d: local expert %d got %d rows, expected %lld\n",
                                me, T, l, off[l + 1] - off[l], want_rows[l]);
                    ++bad;
                }
            std::vector<int> check_t;
            if (T <= 1024) {
                for (int t = 0; t < T; ++t) check_t.push_back(t);
            } else {
                for (int i = 0; i < 512; ++i) check_t.push_back((int)((long long)i * (T - 1) / 511));
            }
            std::vector<uint16_t> row(H);
            for (const int t : check_t) {
                CUDA_CHECK(cudaMemcpy(row.data(), d_out + (size_t)t * H, rb, cudaMemcpyDeviceToHost));
                double coef = 0;
                for (int j = 0; j < k; ++j) {
                    const int e = idx[(size_t)t * k + j];
                    if (e >= 0) coef += (double)w[(size_t)t * k + j] * (double)(1.0f + 0.001f * (float)e);
                }
                for (int h = 0; h < H; ++h) {
                    const double ref = coef * (double)host_f32(xh[(size_t)t * H + h]);
                    const double got = (double)host_f32(row[h]);
                    if (!(std::fabs(got - ref) <= 1e-2 * std::max(1.0, std::fabs(ref)))) {
                        if (bad < 5)
                            fprintf(stderr, "moe_exchange: FAIL: PE %d T %d: out[%d][%d] = %g, expected %g\n", me, T,
                                    t, h, got, ref);
                        ++bad;
                    }
                }
            }
        }

        // Every PE learns whether any PE failed, so that all stop together.
        {
            const double cv[kVals] = {(double)bad, 0, 0, 0, 0, 0, 0, 0};
            const std::vector<double> all = gather(cv);
            double nbad = 0;
            for (int pe = 0; pe < n; ++pe) nbad += all[(size_t)pe * kVals];
            if (nbad > 0) {
                if (me == 0) {
                    if (o.json)
                        printf("{\"bench\":\"moe_nvshmem\",\"lib\":\"" MOE_LIB "\",\"pes\":%d,\"tokens\":%d,"
                               "\"hidden\":%d,\"topk\":%d,\"experts\":%d,\"check\":\"FAIL\"}\n",
                               n, T, H, k, E);
                    else
                        printf("%6d %11s %10s %9s %9s %9s %10s %10s %12s %6s\n", T, "-", "-", "-", "-", "-", "-",
                               "-", "-", "FAIL");
                    fprintf(stderr, "moe_exchange: FAIL: the check at T %d found %.0f mismatches over all PEs\n",
                            T, nbad);
                    fflush(stdout);
                }
                exit_code = 1;
                CUDA_CHECK(cudaFree(d_x));
                CUDA_CHECK(cudaFree(d_out));
                CUDA_CHECK(cudaFree(d_idx));
                CUDA_CHECK(cudaFree(d_w));
                break;
            }
        }

        // ---- Timing, as moe_bench.
        std::vector<double> d_host, c_host, d_ev, c_ev;
        for (int it = 0; it < o.warmup + o.iters; ++it) {
            CUDA_CHECK(cudaStreamSynchronize(stream));
            nvshmem_barrier_all();
            auto t0 = clk::now();
            dispatch();
            CUDA_CHECK(cudaStreamSynchronize(stream));
            const double td = us_since(t0);
            expert();
            CUDA_CHECK(cudaStreamSynchronize(stream));
            nvshmem_barrier_all();
            auto t1 = clk::now();
            combine();
            CUDA_CHECK(cudaStreamSynchronize(stream));
            const double tc = us_since(t1);
            // The same pair between CUDA events.
            nvshmemx_barrier_all_on_stream(stream);
            CUDA_CHECK(cudaEventRecord(ev[0], stream));
            dispatch();
            CUDA_CHECK(cudaEventRecord(ev[1], stream));
            expert();
            nvshmemx_barrier_all_on_stream(stream);
            CUDA_CHECK(cudaEventRecord(ev[2], stream));
            combine();
            CUDA_CHECK(cudaEventRecord(ev[3], stream));
            CUDA_CHECK(cudaEventSynchronize(ev[3]));
            if (it >= o.warmup) {
                float a = 0, b = 0;
                CUDA_CHECK(cudaEventElapsedTime(&a, ev[0], ev[1]));
                CUDA_CHECK(cudaEventElapsedTime(&b, ev[2], ev[3]));
                d_host.push_back(td);
                c_host.push_back(tc);
                d_ev.push_back(a * 1e3);
                c_ev.push_back(b * 1e3);
            }
        }
        {
            int err = 0;
            CUDA_CHECK(cudaMemcpy(&err, p.err, sizeof(int), cudaMemcpyDeviceToHost));
            if (err) {
                fprintf(stderr, "moe_exchange: FAIL: PE %d T %d: device-detected error %d during timing\n", me, T, err);
                ++bad;
            }
        }
        const double vals[kVals] = {median(d_host), median(c_host), median(d_ev), median(c_ev),
                                    (double)rows_all, (double)rows_remote, (double)bad, 0.0};
        const std::vector<double> all = gather(vals);
        double dus = 0, cus = 0, dev = 0, cev = 0, sent = 0, remote = 0, nbad = 0;
        for (int pe = 0; pe < n; ++pe) {
            const double* v = &all[(size_t)pe * kVals];
            dus = std::max(dus, v[0]);
            cus = std::max(cus, v[1]);
            dev = std::max(dev, v[2]);
            cev = std::max(cev, v[3]);
            sent += v[4] / n;
            remote += v[5] / n;
            nbad += v[6];
        }
        const bool failed = nbad > 0;
        if (me == 0) {
            const double sent_mb = sent * rb / 1e6, mb = remote * rb / 1e6;
            if (o.json) {
                std::string s = "{\"bench\":\"moe_nvshmem\",\"lib\":\"" MOE_LIB "\"";
#ifndef RSHMEM_NVSHMEM_H
                char vb[64];
                snprintf(vb, sizeof vb, ",\"lib_version\":\"%d.%d.%d\"", NVSHMEM_VENDOR_MAJOR_VERSION,
                         NVSHMEM_VENDOR_MINOR_VERSION, NVSHMEM_VENDOR_PATCH_VERSION);
                s += vb;
#endif
                s += ",\"mode\":\"normal\",\"dtype\":\"bf16\"";
                json_int(s, "pes", n);
                json_int(s, "tokens", T);
                json_int(s, "hidden", H);
                json_int(s, "topk", k);
                json_int(s, "experts", E);
                json_int(s, "sms", blocks);
                json_int(s, "iters", o.iters);
                json_int(s, "warmup", o.warmup);
                s += std::string(",\"dispatch_path\":\"") + (o.store_dispatch ? "store" : "put") + "\"";
                s += std::string(",\"combine_path\":\"") + (o.store_combine ? "store" : "put") + "\"";
                if (failed) {
                    s += ",\"check\":\"FAIL\"}";
                } else {
                    json_num(s, "dispatch_us", dus);
                    json_num(s, "combine_us", cus);
                    json_num(s, "total_us", dus + cus);
                    json_num(s, "dispatch_event_us", dev);
                    json_num(s, "combine_event_us", cev);
                    json_int(s, "dispatch_row_bytes", (long long)rb);
                    json_int(s, "combine_row_bytes", (long long)rb);
                    json_num(s, "sent_mb", sent_mb);
                    json_num(s, "nvlink_mb", mb);
                    json_num(s, "combine_nvlink_mb", mb);
                    json_num(s, "dispatch_gbps", mb * 1e6 / (dus * 1e-6) / 1e9);
                    json_num(s, "combine_gbps", mb * 1e6 / (cus * 1e-6) / 1e9);
                    json_num(s, "tokens_per_s", T / ((dus + cus) * 1e-6));
                    s += ",\"check\":\"pass\"}";
                }
                printf("%s\n", s.c_str());
            } else if (failed) {
                printf("%6d %11s %10s %9s %9s %9s %10s %10s %12s %6s\n", T, "-", "-", "-", "-", "-", "-", "-", "-",
                       "FAIL");
            } else {
                printf("%6d %11.1f %10.1f %9.1f %9.1f %9.1f %10.1f %10.1f %12.0f %6s\n", T, dus, cus, dev, cev, mb,
                       mb * 1e3 / dus, mb * 1e3 / cus, T / ((dus + cus) * 1e-6), "pass");
            }
            fflush(stdout);
        }
        CUDA_CHECK(cudaFree(d_x));
        CUDA_CHECK(cudaFree(d_out));
        CUDA_CHECK(cudaFree(d_idx));
        CUDA_CHECK(cudaFree(d_w));
        if (failed) {
            if (me == 0) fprintf(stderr, "moe_exchange: FAIL at T %d (%.0f mismatches over all PEs)\n", T, nbad);
            exit_code = 1;
            break;
        }
    }

    for (auto& e : ev) CUDA_CHECK(cudaEventDestroy(e));
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    nvshmem_free(gat);
    if (p.cstage) nvshmem_free(p.cstage);
    nvshmem_free(sigs);
    nvshmem_free(p.recv_cnt);
    nvshmem_free(p.recv_meta);
    nvshmem_free(p.recv_comb);
    nvshmem_free(p.recv_x);
    cudaFree(d_vals);
    cudaFree(p.dest_cnt);
    cudaFree(p.exp_cnt);
    cudaFree(p.done);
    cudaFree(p.stage_rows);
    cudaFree(p.cmeta);
    cudaFree(p.expert_x);
    cudaFree(p.expert_off);
    cudaFree(p.expert_src);
    cudaFree(p.err);
    CUDA_CHECK(cudaStreamDestroy(stream));
    nvshmem_finalize();
    return exit_code;
}
