// rshmem device library: expert-parallel MoE dispatch and combine (normal mode).
//
//     #include "rshmem/rshmem.cuh"
//     #include "rshmem/ep.cuh"
//
// Header-only CUDA C++ like the rest of the library (NVRTC or nvcc, no -rdc), built on its
// primitives: peer pointers (rshmem_ptr) for NVLink loads/stores, rshmem_signal_wait_until for
// the waits (bounded by the device timeout), system-scope fences and release stores for the
// signals. The host side (runtime/src/ep/) owns the buffers, fills rshmem_ep_params and launches
// the kernels below on the caller's stream; docs/moe.md describes the algorithm and the layout.
//
// Every PE has T tokens [T, H] (T <= max_tokens, may differ between PEs), top-k expert indices
// [T, k] (int64, -1 = no expert) and weights [T, k] (float). E experts, L = E / n_pes per PE:
// expert e lives on PE e / L as local expert e % L.
//
// fp8 e4m3 tokens (RSHMEM_EP_FP8_E4M3) carry one float scale per 128 elements of a row
// ([T, H / 128], x_scales): the dispatch copies each row's bytes and its scales unchanged (the
// scales to stage_scales, expert_scales and ll_scales, rows in the same order as the data), and
// the combine of such a handle runs on bf16 rows (comb_row_bytes = 2 H: y, out and the combine
// buffers), with the bf16 combine kernels.
//
// Each call is two kernels on one stream (blockDim RSHMEM_EP_THREADS, any grid): a send kernel
// and a receive kernel. Every block of the send kernel first waits until every receiver has
// acknowledged this PE's previous exchange of the kind (phase_begin: it finished reading what
// this PE wrote there); the call's epoch is the stored one + 1 (a word in device memory, so a
// captured graph replays correctly), stored by the receive kernel's last block (phase_end);
// the send kernels' counters are zeroed by the last block that reads them. On sm_90 and later
// the runtime may launch a receive kernel as a programmatic dependent of its send kernel: every
// send block runs griddepcontrol.launch_dependents once its stores are issued (phase_sent), and
// every receive block runs griddepcontrol.wait before it exits (phase_end); a program that
// launches the kernels in order without that attribute gets the same results (both
// instructions then do nothing).
// Dispatch:
//   1. rshmem_ep_dispatch_send: one warp per token (token_rounds: with fewer tokens than warps,
//      several warps move one token's row). Finds the token's destination PEs, takes a
//      slot in each destination's staging block for this source (an atomic counter per
//      destination) and a rank in each of its experts (an atomic counter per expert), and
//      stores the row once per destination PE (not once per expert) plus a small metadata row
//      (token index; per slot: local expert, rank, weight) straight into the receiver's memory
//      over NVLink. The last block to finish (a fence + counter, so every block's stores are
//      ordered before it) stores this PE's per-destination counts (tokens, rows per local
//      expert) into each receiver and then releases the receiver's per-source signal with the
//      epoch.
//   2. rshmem_ep_dispatch_recv: every block waits for the signal of every source (acquire),
//      computes the expert layout from the counts (expert l's rows are contiguous, sources in
//      PE order inside it) and, one warp per staged row (for_rows: several per row when rows
//      are fewer than warps), copies each staged row into the rows of the local experts it
//      selected; writes expert_offsets [L+1], expert_src [rows][2] (source PE, source token) and
//      the metadata combine needs. The last block acknowledges every source.
// Combine: rshmem_ep_combine_send: one warp per staged row (for_rows) sums the outputs of its
// local experts weighted (fp32, slot order) and stores the partial sum once into the source
// PE's receive block; the last block signals the sources. rshmem_ep_combine_recv: the source
// waits for every expert PE, adds (one warp per token, for_rows) the partial sums of each token
// in PE order (fp32) and writes out[t] in the original token order; the last block
// acknowledges. The sums load up to 4 terms' chunks before adding them (sum_chunk).
//
// No kernel waits for another block of its own grid, so any grid size is correct; the waits in
// the send kernels (acknowledgements) and the receive kernels (data) wait for other PEs'
// kernels that have nothing left to wait for, so the exchange progresses whenever each PE's
// kernels get an SM (with several PEs on one GPU pass num_sms so the PEs' grids fit side by
// side).
#pragma once

#include "rshmem/rshmem.cuh"

#define RSHMEM_EP_MAX_PES 32
#define RSHMEM_EP_MAX_EXPERTS 1024
#define RSHMEM_EP_MAX_TOPK 32
#define RSHMEM_EP_THREADS 512

// Element types (the combine kernels' template argument; RSHMEMX_EP_* of rshmem.h).
#define RSHMEM_EP_F32 0
#define RSHMEM_EP_BF16 1
// fp8 e4m3 tokens: the dispatch moves 1-byte elements plus one float scale per
// RSHMEM_EP_FP8_BLOCK elements of a row (scale_words per row); the combine runs in bf16
// (comb_row_bytes = 2 * hidden).
#define RSHMEM_EP_FP8_E4M3 2
#define RSHMEM_EP_FP8_BLOCK 128
// In a low-latency count (ll_cnt): the source sent its rows once per destination PE.
#define RSHMEM_EP_LL_PER_PE_BIT (1 << 30)
// In ll_slot_ok: the slot whose row carried the token's data to its PE (per-PE sends); the
// low-latency combine of such a dispatch returns one row per (token, PE), in that slot.
#define RSHMEM_EP_LL_LEAD_BIT (1 << 30)

// Error codes in err[0] (first error wins; the host reads and clears them).
#define RSHMEM_EP_ERR_EXPERT 1  // err[1] = token, err[2] = slot, err[3] = the index (low 32 bits)
#define RSHMEM_EP_ERR_ROWS 2    // err[1] = rows needed by one expert layout, err[2] = capacity

// Everything a kernel needs, passed by value. Every field is 8 bytes (no padding); mirrored by
// runtime/src/ep/mod.rs (EpParams), which asserts the size. A program that fills it itself sets
// the fields after ll_slot_ok too (zero: no scales, combine rows of row_bytes); the per-PE
// low-latency kernels (rshmem_ep_ll_send_per_pe, ll_wait after it, and
// rshmem_ep_ll_combine_send_per_pe_*) need ll_wgt, ll_pair, ll_items and ll_nitems.
struct rshmem_ep_params {
    int64_t n_pes;
    int64_t my_pe;
    int64_t num_experts;    // E
    int64_t local_experts;  // L = E / n_pes
    int64_t topk;           // k
    int64_t row_bytes;      // H * element size, a multiple of 16 (the dispatched rows)
    int64_t hidden;         // H
    int64_t num_tokens;     // T of this call (this PE)
    int64_t max_tokens;     // staging rows per source
    int64_t max_rows;       // capacity of expert_x in rows
    int64_t meta_words;     // int32 words per metadata row (1 + 3k rounded up to 4)
    // symmetric (same offsets on every PE)
    uint64_t stage_x;     // [n][max_tokens][row_bytes]: rows from each source
    uint64_t stage_meta;  // [n][max_tokens][meta_words] int32
    uint64_t recv_cnt;    // [n][1 + L] int32: per source, tokens then rows per local expert
    uint64_t sig;         // uint64 [8][n]: dispatch signal, dispatch ack, combine signal, ack;
                          // the same four of the low-latency mode
    uint64_t comb_x;      // [n][max_tokens][comb_row_bytes]: partial sums from each expert PE
    // local
    uint64_t epoch;       // uint64 [4]: dispatch, combine, low-latency dispatch, combine
    uint64_t done;        // uint32 [8]: last-block counters (send, recv, csend, crecv; the
                          // same four of the low-latency mode)
    uint64_t err;         // int32 [4]
    uint64_t send_ntok;   // int32 [n]: tokens this PE sends to each PE
    uint64_t ecnt;        // int32 [E]: rows this PE sends to each expert
    uint64_t recv_ntok;   // int32 [n]: tokens staged from each source (for combine)
    uint64_t tok_mask;    // uint32 [max_tokens]: destination PEs of each token
    uint64_t comb_meta;   // [n][max_tokens][meta_words] int32: token; per slot: l, row, weight
    uint64_t expert_x;    // [max_rows][row_bytes]: dispatch output, experts contiguous
    uint64_t expert_offsets;  // int64 [L + 1]
    uint64_t expert_src;  // int32 [max_rows][2]: source PE, source token
    // the caller's
    uint64_t x;           // [T][row_bytes]
    uint64_t topk_idx;    // int64 [T][k]
    uint64_t topk_w;      // float [T][k]
    uint64_t y;           // [max_rows][comb_row_bytes]: expert outputs (combine)
    uint64_t out;         // [T][comb_row_bytes]: combine output
    // low-latency mode (0 unless the handle was made for it)
    uint64_t ll_x;        // symmetric [L][n][max_tokens][row_bytes]: rows per (expert, source)
    uint64_t ll_meta;     // symmetric int32 [L][n][max_tokens][4]: source token, slot, the
                          // row holding its data (-1: this one), and 0, or for the row that
                          // carries the data of a per-PE send the mask of the token's slots here
    uint64_t ll_cnt;      // symmetric int32 [L][n]: rows per (expert, source)
    uint64_t ll_comb;     // symmetric [max_tokens][k][comb_row_bytes]: outputs per (token, slot)
    uint64_t ll_count;    // local int32 [L][n]: the counts of the last dispatch (output)
    uint64_t ll_src;      // local int32 [L][n][max_tokens][2]: (token, slot) of each row (output)
    uint64_t ll_slot_ok;  // local int32 [max_tokens][k]: 0 where the slot's row was not sent,
                          // else 1 + its PE | RSHMEM_EP_LL_LEAD_BIT on a per-PE send's lead
    // combine rows and per-block scales (fp8 handles; 0 otherwise)
    int64_t comb_row_bytes;   // bytes of a row of y, out, comb_x, ll_comb; 0: row_bytes
    int64_t scale_words;      // float scales per dispatched row (H / 128 for fp8), or 0
    uint64_t x_scales;        // the caller's float [T][scale_words]
    uint64_t stage_scales;    // symmetric float [n][max_tokens][scale_words]: scales from each source
    uint64_t expert_scales;   // local float [max_rows][scale_words]: the scales of expert_x's rows
    uint64_t ll_scales;       // symmetric float [L][n][max_tokens][scale_words]: of ll_x's rows
    // the low-latency combine of a per-PE dispatch (0 otherwise)
    uint64_t ll_wgt;     // symmetric uint64 [n][max_tokens][k]: the weight of each source's
                         // (token, slot) with an expert here, (tag << 32) | f32 bits, the tag
                         // 1 + the combine's epoch mod 2^32 - 1
    uint64_t ll_pair;    // local int32 [n][max_tokens][k]: the row (index into ll_x) of each
                         // source's (token, slot)
    uint64_t ll_items;   // local int4 [n * max_tokens]: {source, token, lead row, slots' mask}
                         // of each token's row that carried the data (ll_nitems of them)
    uint64_t ll_nitems;  // local int32: entries of ll_items
};
static_assert(sizeof(rshmem_ep_params) == 49 * 8, "rshmem_ep_params size");

namespace rshmem_ep {

struct alignas(16) vec16 {
    uint32_t a, b, c, d;
};

// 16-byte load that does not allocate in L1 (data written by other GPUs).
static __device__ __forceinline__ vec16 ld16_cg(const void* p) {
    vec16 v;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.a), "=r"(v.b), "=r"(v.c), "=r"(v.d)
                 : "l"(p));
    return v;
}
// 4-byte load that does not allocate in L1 (scales written by other GPUs).
static __device__ __forceinline__ float ld_cg_f32(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}
static __device__ __forceinline__ vec16 ld16(const void* p) {
    return *(const vec16*)p;
}
static __device__ __forceinline__ void st16(void* p, vec16 v) {
    *(vec16*)p = v;
}
// The load kind as a template argument: CG = true bypasses L1 (ld16_cg, ld_cg_f32: data written
// by other GPUs), false is the plain load.
template <bool CG>
static __device__ __forceinline__ vec16 ld16_as(const void* p) {
    if constexpr (CG) {
        return ld16_cg(p);
    } else {
        return ld16(p);
    }
}
template <bool CG>
static __device__ __forceinline__ float ld_f32_as(const float* p) {
    if constexpr (CG) {
        return ld_cg_f32(p);
    } else {
        return *p;
    }
}

// Rows move one warp a row, in chunks of U * 32 vectors of 16 bytes so that U loads per lane
// are in flight (U = 4 for moving rows; the sums below take U = 2): in the chunk at vector v0,
// lane `lane` holds vectors v0 + 32 u + lane (u < U), those below vecs (the row's vectors);
// b[u] of a vector past the row is left unset.
template <bool CG, int U>
static __device__ __forceinline__ void ld_chunk(vec16 (&b)[U], const uint8_t* row, int64_t v0,
                                                int64_t vecs, int lane) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        int64_t v = v0 + u * 32 + lane;
        if (v < vecs) b[u] = ld16_as<CG>(row + v * 16);
    }
}
template <int U>
static __device__ __forceinline__ void st_chunk(uint8_t* row, const vec16 (&b)[U], int64_t v0,
                                                int64_t vecs, int lane) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        int64_t v = v0 + u * 32 + lane;
        if (v < vecs) st16(row + v * 16, b[u]);
    }
}

// One chunk (ld_chunk's, at vector v0) of a row (vecs vectors at src, loads of kind CG) read
// once and stored once to each destination: dst_row(i) is the destination row of set bit i of
// `mask`, called by the whole warp (it may shuffle) once per bit, in bit order.
template <bool CG, class DstRow>
static __device__ __forceinline__ void fanout_chunk(const uint8_t* src, int64_t v0, int64_t vecs,
                                                    uint32_t mask, DstRow dst_row) {
    const int lane = threadIdx.x & 31;
    vec16 b[4];
    ld_chunk<CG>(b, src, v0, vecs, lane);
    for (uint32_t m = mask; m; m &= m - 1) st_chunk(dst_row(__ffs(m) - 1), b, v0, vecs, lane);
}
// The chunks of a row at vectors first, first + step, ... below vecs (a warp's share, see
// for_rows), each through fanout_chunk.
template <bool CG, class DstRow>
static __device__ __forceinline__ void fanout_row(const uint8_t* src, int64_t first, int64_t step,
                                                  int64_t vecs, uint32_t mask, DstRow dst_row) {
    for (int64_t v0 = first; v0 < vecs; v0 += step) fanout_chunk<CG>(src, v0, vecs, mask, dst_row);
}
// The same for a row's sw float scales (fp8), 32 at a time: lane `lane` moves scale w0 + lane.
template <bool CG, class DstRow>
static __device__ __forceinline__ void fanout_scales(const float* src, int64_t sw,
                                                     uint32_t mask, DstRow dst_row) {
    const int lane = threadIdx.x & 31;
    for (int64_t w0 = 0; w0 < sw; w0 += 32) {
        const int64_t wi = w0 + lane;
        const float sv = wi < sw ? ld_f32_as<CG>(src + wi) : 0.f;
        for (uint32_t m = mask; m; m &= m - 1) {
            float* row = dst_row(__ffs(m) - 1);
            if (wi < sw) row[wi] = sv;
        }
    }
}

// Warp-per-item loops: this warp's first item and the stride (the warps of the grid).
static __device__ __forceinline__ int64_t grid_warp() {
    return (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
}
static __device__ __forceinline__ int64_t grid_warps() {
    return (int64_t)gridDim.x * (blockDim.x >> 5);
}

// Rows are split into chunks of CHUNK_VECS vectors (ld_chunk's with U = 4; the sums of rows
// take chunks of SUM_VECS). When there are fewer rows than warps, the chunks of a row are
// shared out among several warps (a decoding batch of 128 tokens, one warp a token, would keep 8
// of 132 SMs busy); otherwise a warp takes whole rows, so that what is done once per row
// (metadata, counters) is done once.
constexpr int64_t CHUNK_VECS = 4 * 32;
static __device__ __forceinline__ int64_t row_chunks(int64_t vecs, int64_t cv = CHUNK_VECS) {
    return vecs > 0 ? (vecs + cv - 1) / cv : 1;
}
// Warps per row: `warps` shared out among `rows` rows of nch chunks, between 1 and nch.
static __device__ __forceinline__ int64_t warps_per_row(int64_t rows, int64_t warps, int64_t nch) {
    int64_t g = rows > 0 ? warps / rows : 1;
    return g < 1 ? 1 : (g > nch ? nch : g);
}

// Every row of `items` rows of vecs vectors over the warps of the grid, in chunks of CV vectors:
// f(item, first, step), in which the warp moves the chunks at vectors first, first + step, ...
// below vecs (first == 0: the warp of the row's first chunk, which does the row's once-only work).
template <int64_t CV = CHUNK_VECS, class F>
static __device__ __forceinline__ void for_rows(int64_t items, int64_t vecs, F f) {
    const int64_t warps = grid_warps(), g = warps_per_row(items, warps, row_chunks(vecs, CV));
    for (int64_t c = grid_warp(); c < items * g; c += warps) {
        const int64_t it = c / g;
        f(it, (c - it * g) * CV, g * CV);
    }
}

// The send kernels' token loop, for work done once per token before its row moves (counters,
// metadata): this block's tokens in rounds (the tokens spread over every block first), a group
// of G warps per token of the round; the group's first warp runs book(t, i) for the round's
// token i (leaving the destinations in shared memory under i), then the group's warps move the
// row: copy(t, i, first, step) as in for_rows. With G = 1 (as many tokens as warps) a warp books
// and moves its own token, with no block barrier.
template <class Book, class Copy>
static __device__ __forceinline__ void token_rounds(int64_t T, int64_t vecs, Book book, Copy copy) {
    const int nw = (int)(blockDim.x >> 5), wid = (int)(threadIdx.x >> 5);
    int64_t want = (T + gridDim.x - 1) / gridDim.x;  // tokens per block
    want = want < 1 ? 1 : want;
    const int g = (int)warps_per_row(want, nw, row_chunks(vecs));
    const int64_t per = nw / g < want ? nw / g : want;  // tokens per round
    const int i = wid / g, part = wid - i * g;
    for (int64_t t0 = blockIdx.x * per; t0 < T; t0 += (int64_t)gridDim.x * per) {
        const bool mine = i < per && t0 + i < T;
        if (mine && part == 0) book(t0 + i, i);
        if (g > 1) __syncthreads(); else __syncwarp();
        if (mine) copy(t0 + i, i, part * CHUNK_VECS, g * CHUNK_VECS);
        if (g > 1) __syncthreads(); else __syncwarp();
    }
}

// Low-latency counts: s_pre[1 .. E] holds the E block counts on entry (every thread's stores
// done: call after __syncthreads); on return (after __syncthreads) s_pre[i] is the sum of the
// counts before block i (s_pre[0] = 0, s_pre[E] the total). Warp 0 scans, 32 at a time.
static __device__ __forceinline__ void scan_counts(int32_t* s_pre, int E) {
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int carry = 0;
        for (int b = 0; b < E; b += 32) {
            int v = b + lane < E ? s_pre[b + lane + 1] : 0;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                int u = __shfl_up_sync(0xffffffffu, v, o);
                if (lane >= o) v += u;
            }
            if (b + lane < E) s_pre[b + lane + 1] = carry + v;
            carry += __shfl_sync(0xffffffffu, v, 31);
        }
        if (lane == 0) s_pre[0] = 0;
    }
    __syncthreads();
}
// The block of row r of the scanned counts: s_pre[b] <= r < s_pre[b + 1].
static __device__ __forceinline__ int block_of(const int32_t* s_pre, int E, int64_t r) {
    int lo = 0, hi = E;
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (s_pre[mid] <= r) lo = mid; else hi = mid;
    }
    return lo;
}

// The source of staged row u, given the prefix over sources of their staged tokens:
// s_ntok[s] <= u < s_ntok[s + 1].
static __device__ __forceinline__ int source_of(const int32_t* s_ntok, int n, int64_t u) {
    int s = 0;
    while (s + 1 < n && s_ntok[s + 1] <= u) ++s;
    return s;
}

static __device__ __forceinline__ float bf16_to_f32(uint32_t h) {
    return __uint_as_float(h << 16);
}
// Round to nearest even (NaN stays NaN); the host reference does the same.
static __device__ __forceinline__ uint32_t f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// Bytes of a combine row (y, out, comb_x, ll_comb): bf16 rows for fp8 handles.
static __device__ __forceinline__ int64_t comb_row_bytes(const rshmem_ep_params& p) {
    return p.comb_row_bytes > 0 ? p.comb_row_bytes : p.row_bytes;
}

static __device__ __forceinline__ uint64_t* sig_ptr(const rshmem_ep_params& p, int kind, int pe) {
    return (uint64_t*)p.sig + kind * p.n_pes + pe;
}

static __device__ __forceinline__ void record_error(const rshmem_ep_params& p, int code, int a,
                                                    int b, int c) {
    int32_t* err = (int32_t*)p.err;
    if (atomicCAS(err, 0, code) == 0) {
        err[1] = a;
        err[2] = b;
        err[3] = c;
    }
}

// The last-block pattern: every block fences its stores and counts itself out; returns true in
// every thread of the block that counted last, after an acquire fence, so that block observes
// (and its later release stores publish) every block's earlier stores. Resets the counter.
static __device__ __forceinline__ bool last_block(uint32_t* counter) {
    __shared__ int s_last;
    __syncthreads();
    if (threadIdx.x == 0) {
        rshmem_detail::fence_acq_rel_sys();
        uint32_t prev = atomicAdd(counter, 1u);
        s_last = (prev == gridDim.x - 1);
        if (s_last) {
            rshmem_detail::fence_acq_rel_sys();
            *counter = 0;
        }
    }
    __syncthreads();
    return s_last != 0;
}

// Release store of `v` into PE `pe`'s copy of the symmetric word `w` (a peer pointer).
static __device__ __forceinline__ void signal_pe(uint64_t* w, uint64_t v, int pe) {
    uint64_t* r = (uint64_t*)rshmem_ptr(w, pe);
    rshmem_detail::st_release_sys(r, v);
}

// The block's threads in turn wait until signal `kind` from every PE reaches e (acquire).
static __device__ __forceinline__ void wait_all(const rshmem_ep_params& p, int kind, uint64_t e) {
    for (int d = threadIdx.x; d < (int)p.n_pes; d += blockDim.x) {
        rshmem_signal_wait_until(sig_ptr(p, kind, d), RSHMEM_CMP_GE, e);
    }
}
// Phases: 0 dispatch, 1 combine, 2 low-latency dispatch, 3 low-latency combine; two kernels
// each, a send kernel then a receive kernel. The phase's epoch is the stored one + 1 (a word in
// device memory, so a replayed CUDA graph advances it too); the receive kernel's last block
// stores it (phase_end), after every block of both kernels has read it.
static __device__ __forceinline__ uint64_t phase_epoch(const rshmem_ep_params& p, int which) {
    return ((const uint64_t*)p.epoch)[which] + 1;
}
// Every block of a send kernel, before it writes into any peer: waits until every PE has
// acknowledged this PE's previous exchange of the kind (it finished reading what this PE wrote
// into its memory). The counters the send kernels use start at zero (allocated zeroed; each
// send kernel's last block zeroes them after reading them), so no kernel runs before.
static __device__ __forceinline__ uint64_t phase_begin(const rshmem_ep_params& p, int which) {
    const uint64_t e = phase_epoch(p, which);
    wait_all(p, 2 * which + 1, e - 1);
    __syncthreads();
    return e;
}

// The end of every block of a send kernel, after its stores: the receive kernel, launched as a
// programmatic dependent of this one (sm_90 and later), may start once every block got here
// (it waits for the data through the signals, and for this kernel's end before its own:
// phase_end). Returns last_block(counter).
static __device__ __forceinline__ bool phase_sent(uint32_t* counter) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    return last_block(counter);
}

// The block's threads in turn release e into this PE's signal `kind` on every PE.
static __device__ __forceinline__ void signal_all(const rshmem_ep_params& p, int kind, uint64_t e) {
    for (int d = threadIdx.x; d < (int)p.n_pes; d += blockDim.x) {
        signal_pe(sig_ptr(p, kind, (int)p.my_pe), e, d);
    }
}
// The end of every block of a receive kernel: its last block (counted on `counter`) lets every
// PE write the next exchange of this kind (the acknowledgement, signal 2 which + 1) and stores
// this phase's epoch. Every block then waits for the send kernel before it (launched ahead of
// it as a programmatic dependent), so that the work after this kernel on the stream starts
// after both.
static __device__ __forceinline__ void phase_end(const rshmem_ep_params& p, int which, uint64_t e,
                                                 uint32_t* counter) {
    if (last_block(counter)) {
        signal_all(p, 2 * which + 1, e);
        if (threadIdx.x == 0) ((uint64_t*)p.epoch)[which] = e;
    }
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace rshmem_ep

// Dispatch, sender side. Any grid; blockDim a multiple of 32.
static __device__ void rshmem_ep_dispatch_send_dev(const rshmem_ep_params& p) {
    __shared__ uint8_t* s_stage_x[RSHMEM_EP_MAX_PES];
    __shared__ int32_t* s_stage_meta[RSHMEM_EP_MAX_PES];
    __shared__ float* s_stage_scales[RSHMEM_EP_MAX_PES];
    // Per warp of a round (token_rounds): the token's slot in each destination and its PE mask.
    __shared__ int32_t s_pos[RSHMEM_EP_THREADS / 32][RSHMEM_EP_MAX_PES];
    __shared__ uint32_t s_mask[RSHMEM_EP_THREADS / 32];
    const int n = (int)p.n_pes, me = (int)p.my_pe, k = (int)p.topk;
    const int L = (int)p.local_experts, E = (int)p.num_experts;
    const int64_t row_bytes = p.row_bytes, mw = p.meta_words, sw = p.scale_words;
    for (int d = threadIdx.x; d < n; d += blockDim.x) {
        // This source's block in PE d's staging buffers.
        s_stage_x[d] = (uint8_t*)rshmem_ptr((void*)p.stage_x, d) +
                       (uint64_t)me * p.max_tokens * row_bytes;
        s_stage_meta[d] = (int32_t*)rshmem_ptr((void*)p.stage_meta, d) +
                          (uint64_t)me * p.max_tokens * mw;
        s_stage_scales[d] = sw > 0 ? (float*)rshmem_ptr((void*)p.stage_scales, d) +
                                         (uint64_t)me * p.max_tokens * sw
                                   : (float*)0;
    }
    const uint64_t e_now = rshmem_ep::phase_begin(p, 0);
    const int lane = threadIdx.x & 31;
    const int64_t vecs = row_bytes >> 4;
    int32_t* send_ntok = (int32_t*)p.send_ntok;
    int32_t* ecnt = (int32_t*)p.ecnt;
    rshmem_ep::token_rounds(
        p.num_tokens, vecs,
        [&](int64_t t, int w) {
            // Lane j < k: slot j.
            int dst = -1, l = -1, rank = 0;
            float wt = 0.f;
            if (lane < k) {
                int64_t e = ((const int64_t*)p.topk_idx)[t * k + lane];
                wt = ((const float*)p.topk_w)[t * k + lane];
                if (e >= 0 && e < E) {
                    dst = (int)(e / L);
                    l = (int)(e % L);
                    rank = atomicAdd(&ecnt[e], 1);
                } else if (e != -1) {
                    rshmem_ep::record_error(p, RSHMEM_EP_ERR_EXPERT, (int)t, lane, (int)e);
                }
            }
            uint32_t mask = dst >= 0 ? (1u << dst) : 0u;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mask |= __shfl_xor_sync(0xffffffffu, mask, o);
            // Lane d: this token's slot in PE d's staging block.
            int pos = 0;
            if (lane < n && ((mask >> lane) & 1u)) pos = atomicAdd(&send_ntok[lane], 1);
            if (lane < n) s_pos[w][lane] = pos;
            if (lane == 0) {
                ((uint32_t*)p.tok_mask)[t] = mask;
                s_mask[w] = mask;
            }
            // Metadata rows (word 0: token; per slot: local expert here or -1, rank, weight).
            for (uint32_t m = mask; m; m &= m - 1) {
                int d = __ffs(m) - 1;
                int pd = __shfl_sync(0xffffffffu, pos, d);
                int32_t* meta = s_stage_meta[d] + (int64_t)pd * mw;
                if (lane == 0) meta[0] = (int32_t)t;
                if (lane < k) {
                    meta[1 + 3 * lane] = dst == d ? l : -1;
                    meta[2 + 3 * lane] = rank;
                    meta[3 + 3 * lane] = __float_as_int(wt);
                }
            }
        },
        [&](int64_t t, int w, int64_t first, int64_t step) {
            // The row, read once, stored once per destination PE; its scales (fp8) the same way
            // by the warp of the first chunk.
            const uint32_t mask = s_mask[w];
            const uint8_t* src = (const uint8_t*)p.x + t * row_bytes;
            rshmem_ep::fanout_row<false>(src, first, step, vecs, mask, [&](int d) {
                return s_stage_x[d] + (int64_t)s_pos[w][d] * row_bytes;
            });
            if (first == 0) {
                rshmem_ep::fanout_scales<false>((const float*)p.x_scales + t * sw, sw, mask,
                                                [&](int d) {
                                                    return s_stage_scales[d] + (int64_t)s_pos[w][d] * sw;
                                                });
            }
        });
    if (rshmem_ep::phase_sent((uint32_t*)p.done + 0)) {
        // Counts into every receiver (this source's row of its recv_cnt), then the signals; the
        // counters are zeroed for the next dispatch once read.
        for (int i = threadIdx.x; i < n * (1 + L); i += blockDim.x) {
            int d = i / (1 + L), c = i % (1 + L);
            int32_t* ctr = c == 0 ? &send_ntok[d] : &ecnt[d * L + c - 1];
            int32_t v = rshmem_detail::ld_relaxed_sys(ctr);
            *ctr = 0;
            int32_t* rc = (int32_t*)rshmem_ptr((void*)p.recv_cnt, d);
            rc[me * (1 + L) + c] = v;
        }
        __syncthreads();
        rshmem_ep::signal_all(p, 0, e_now);
    }
}

// Dispatch, receiver side. Any grid; blockDim a multiple of 32.
static __device__ void rshmem_ep_dispatch_recv_dev(const rshmem_ep_params& p) {
    __shared__ int32_t s_soff[RSHMEM_EP_MAX_EXPERTS];  // [s][l]: rows of sources before s
    __shared__ int32_t s_off[RSHMEM_EP_MAX_EXPERTS + 1];
    __shared__ int32_t s_ntok[RSHMEM_EP_MAX_PES + 1];  // prefix over sources of staged tokens
    const int n = (int)p.n_pes, k = (int)p.topk, L = (int)p.local_experts;
    const int64_t row_bytes = p.row_bytes, mw = p.meta_words, sw = p.scale_words;
    const uint64_t e_now = rshmem_ep::phase_epoch(p, 0);
    rshmem_ep::wait_all(p, 0, e_now);
    __syncthreads();
    const int32_t* rc = (const int32_t*)p.recv_cnt;
    for (int l = threadIdx.x; l < L; l += blockDim.x) {
        int run = 0;
        for (int s = 0; s < n; ++s) {
            s_soff[s * L + l] = run;
            run += rshmem_detail::ld_relaxed_sys(&rc[s * (1 + L) + 1 + l]);
        }
        s_off[l + 1] = run;  // totals for now
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        s_off[0] = 0;
        for (int l = 0; l < L; ++l) {
            run += s_off[l + 1];
            s_off[l + 1] = run;
        }
        int tok = 0;
        for (int s = 0; s < n; ++s) {
            s_ntok[s] = tok;
            tok += rshmem_detail::ld_relaxed_sys(&rc[s * (1 + L)]);
        }
        s_ntok[n] = tok;
        if (blockIdx.x == 0 && run > p.max_rows) {
            rshmem_ep::record_error(p, RSHMEM_EP_ERR_ROWS, run, (int)p.max_rows, 0);
        }
    }
    __syncthreads();
    if (blockIdx.x == 0) {
        int64_t* offs = (int64_t*)p.expert_offsets;
        for (int l = threadIdx.x; l <= L; l += blockDim.x) {
            int64_t o = s_off[l];
            offs[l] = o < p.max_rows ? o : p.max_rows;
        }
        for (int s = threadIdx.x; s < n; s += blockDim.x) {
            ((int32_t*)p.recv_ntok)[s] = s_ntok[s + 1] - s_ntok[s];
        }
    }
    const int lane = threadIdx.x & 31;
    const int64_t vecs = row_bytes >> 4;
    // Staged rows over the grid (for_rows); the warp of a row's first chunk also writes the row's
    // combine metadata, sources and scales.
    rshmem_ep::for_rows(s_ntok[n], vecs, [&](int64_t u, int64_t first, int64_t step) {
        const int s = rshmem_ep::source_of(s_ntok, n, u);
        const int64_t j = u - s_ntok[s];
        const int64_t staged = (int64_t)s * p.max_tokens + j;
        const int32_t* meta = (const int32_t*)p.stage_meta + staged * mw;
        int32_t* cmeta = (int32_t*)p.comb_meta + staged * mw;
        int row = -1;
        if (lane < k) {
            int l = rshmem_detail::ld_relaxed_sys(&meta[1 + 3 * lane]);
            int rank = rshmem_detail::ld_relaxed_sys(&meta[2 + 3 * lane]);
            if (l >= 0) {
                int64_t r = (int64_t)s_off[l] + s_soff[s * L + l] + rank;
                row = r < p.max_rows ? (int)r : -1;
            }
            if (first == 0) {
                int t = rshmem_detail::ld_relaxed_sys(&meta[0]);
                cmeta[1 + 3 * lane] = l;
                cmeta[2 + 3 * lane] = row;
                cmeta[3 + 3 * lane] = rshmem_detail::ld_relaxed_sys(&meta[3 + 3 * lane]);
                if (lane == 0) cmeta[0] = t;
                if (row >= 0) {
                    int32_t* es = (int32_t*)p.expert_src + (int64_t)row * 2;
                    es[0] = s;
                    es[1] = t;
                }
            }
        }
        // The staged row (written by the source's GPU: loads bypass L1) into the rows of the
        // local experts it selected; its scales (fp8) into the same rows of expert_scales.
        const uint32_t rows_mask = __ballot_sync(0xffffffffu, row >= 0);
        const uint8_t* src = (const uint8_t*)p.stage_x + staged * row_bytes;
        rshmem_ep::fanout_row<true>(src, first, step, vecs, rows_mask, [&](int i) {
            int r = __shfl_sync(0xffffffffu, row, i);
            return (uint8_t*)p.expert_x + (int64_t)r * row_bytes;
        });
        if (first == 0) {
            rshmem_ep::fanout_scales<true>((const float*)p.stage_scales + staged * sw, sw,
                                           rows_mask, [&](int i) {
                                               int r = __shfl_sync(0xffffffffu, row, i);
                                               return (float*)p.expert_scales + (int64_t)r * sw;
                                           });
        }
    });
    // Every block finished reading the staging buffers: each source may reuse them.
    rshmem_ep::phase_end(p, 0, e_now, (uint32_t*)p.done + 1);
}

namespace rshmem_ep {

// Element traits: 16 bytes as N floats and back.
template <int DT>
struct elem;
template <>
struct elem<RSHMEM_EP_F32> {
    static constexpr int N = 4;
    static __device__ __forceinline__ void load(const vec16& v, float* f) {
        f[0] = __uint_as_float(v.a);
        f[1] = __uint_as_float(v.b);
        f[2] = __uint_as_float(v.c);
        f[3] = __uint_as_float(v.d);
    }
    static __device__ __forceinline__ vec16 store(const float* f) {
        vec16 v;
        v.a = __float_as_uint(f[0]);
        v.b = __float_as_uint(f[1]);
        v.c = __float_as_uint(f[2]);
        v.d = __float_as_uint(f[3]);
        return v;
    }
};
template <>
struct elem<RSHMEM_EP_BF16> {
    static constexpr int N = 8;
    static __device__ __forceinline__ void load(const vec16& v, float* f) {
        uint32_t w[4] = {v.a, v.b, v.c, v.d};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            f[2 * i] = bf16_to_f32(w[i] & 0xffffu);
            f[2 * i + 1] = bf16_to_f32(w[i] >> 16);
        }
    }
    static __device__ __forceinline__ vec16 store(const float* f) {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = f32_to_bf16(f[2 * i]) | (f32_to_bf16(f[2 * i + 1]) << 16);
        vec16 v;
        v.a = w[0];
        v.b = w[1];
        v.c = w[2];
        v.d = w[3];
        return v;
    }
};

// Sums of rows in fp32 (the combine kernels), in chunks of SUM_VECS vectors (ld_chunk's with
// U = SUM_U), loading SUM_G terms' chunks before adding them, so that SUM_U * SUM_G loads per
// lane are in flight: a token's 8 slots take 2 load round trips, not 8.
constexpr int SUM_U = 2, SUM_G = 4;
constexpr int64_t SUM_VECS = SUM_U * 32;
// A term of a sum: a row and its weight.
struct term {
    const uint8_t* row;
    float w;
};
// The chunk at vector v0 of the sum over the set bits i of `mask`, in bit order, of
// term(i).w * term(i).row when W (acc = fmaf(w, row, acc)) or of term(i).row (acc + row), from
// zero in fp32 (loads of kind CG), rounded once to the element type and stored at dst; zeros
// for an empty mask. Called by the whole warp.
template <class EL, bool CG, bool W, class Term>
static __device__ __forceinline__ void sum_chunk(uint8_t* dst, uint32_t mask, Term term_of,
                                                 int64_t v0, int64_t vecs, int lane) {
    float acc[SUM_U][EL::N];
#pragma unroll
    for (int u = 0; u < SUM_U; ++u)
#pragma unroll
        for (int i = 0; i < EL::N; ++i) acc[u][i] = 0.f;
    for (uint32_t m = mask; m;) {
        vec16 b[SUM_G][SUM_U];
        float w[SUM_G];
        bool has[SUM_G];
#pragma unroll
        for (int g = 0; g < SUM_G; ++g) {
            has[g] = m != 0;
            w[g] = 0.f;
            if (has[g]) {
                const term t = term_of(__ffs(m) - 1);
                m &= m - 1;
                w[g] = t.w;
                ld_chunk<CG>(b[g], t.row, v0, vecs, lane);
            }
        }
#pragma unroll
        for (int g = 0; g < SUM_G; ++g) {
            if (!has[g]) continue;
#pragma unroll
            for (int u = 0; u < SUM_U; ++u) {
                float f[EL::N];
                EL::load(b[g][u], f);
#pragma unroll
                for (int i = 0; i < EL::N; ++i) {
                    acc[u][i] = W ? fmaf(w[g], f[i], acc[u][i]) : acc[u][i] + f[i];
                }
            }
        }
    }
#pragma unroll
    for (int u = 0; u < SUM_U; ++u) {
        int64_t v = v0 + u * 32 + lane;
        if (v < vecs) st16(dst + v * 16, EL::store(acc[u]));
    }
}

// Combine, expert side: for every staged row, sum w * y[row] over its local experts in slot
// order (fp32, fused multiply-add), round to the element type, store into the source's block.
template <int DT>
static __device__ __forceinline__ void combine_send(const rshmem_ep_params& p) {
    typedef elem<DT> EL;
    __shared__ uint8_t* s_comb[RSHMEM_EP_MAX_PES];
    __shared__ int32_t s_ntok[RSHMEM_EP_MAX_PES + 1];
    __shared__ int32_t s_row[RSHMEM_EP_THREADS / 32][RSHMEM_EP_MAX_TOPK];
    __shared__ float s_w[RSHMEM_EP_THREADS / 32][RSHMEM_EP_MAX_TOPK];
    const int n = (int)p.n_pes, me = (int)p.my_pe, k = (int)p.topk;
    const int64_t row_bytes = comb_row_bytes(p), mw = p.meta_words;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        s_comb[s] = (uint8_t*)rshmem_ptr((void*)p.comb_x, s) + (uint64_t)me * p.max_tokens * row_bytes;
    }
    if (threadIdx.x == 0) {
        int tok = 0;
        for (int s = 0; s < n; ++s) {
            s_ntok[s] = tok;
            tok += ((const int32_t*)p.recv_ntok)[s];
        }
        s_ntok[n] = tok;
    }
    const uint64_t e_now = phase_begin(p, 1);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int64_t vecs = row_bytes >> 4;
    // Staged rows over the grid (for_rows, in the sums' chunks).
    for_rows<SUM_VECS>(s_ntok[n], vecs, [&](int64_t u, int64_t first, int64_t step) {
        const int s = source_of(s_ntok, n, u);
        const int64_t j = u - s_ntok[s];
        const int32_t* cmeta = (const int32_t*)p.comb_meta + ((int64_t)s * p.max_tokens + j) * mw;
        int t = cmeta[0];
        int row = -1;
        if (lane < k) {
            row = cmeta[2 + 3 * lane];
            s_row[wid][lane] = row;
            s_w[wid][lane] = __int_as_float(cmeta[3 + 3 * lane]);
        }
        // The slots with a row here, in slot order.
        const uint32_t m = __ballot_sync(0xffffffffu, row >= 0);
        __syncwarp();
        uint8_t* dst = s_comb[s] + (int64_t)t * row_bytes;
        for (int64_t v0 = first; v0 < vecs; v0 += step) {
            sum_chunk<EL, false, true>(dst, m, [&](int i) {
                return term{(const uint8_t*)p.y + (int64_t)s_row[wid][i] * row_bytes, s_w[wid][i]};
            }, v0, vecs, lane);
        }
        __syncwarp();
    });
    if (phase_sent((uint32_t*)p.done + 2)) signal_all(p, 2, e_now);
}

// Combine, source side: out[t] = sum over the token's expert PEs in PE order of their partial
// sums (fp32), rounded to the element type; zeros for a token with no expert.
template <int DT>
static __device__ __forceinline__ void combine_recv(const rshmem_ep_params& p) {
    typedef elem<DT> EL;
    const int64_t row_bytes = comb_row_bytes(p);
    const uint64_t e_now = phase_epoch(p, 1);
    wait_all(p, 2, e_now);
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int64_t vecs = row_bytes >> 4;
    const uint64_t block = (uint64_t)p.max_tokens * row_bytes;
    // Tokens over the grid (for_rows, in the sums' chunks).
    for_rows<SUM_VECS>(p.num_tokens, vecs, [&](int64_t t, int64_t first, int64_t step) {
        const uint32_t mask = ((const uint32_t*)p.tok_mask)[t];
        const uint8_t* src = (const uint8_t*)p.comb_x + (uint64_t)t * row_bytes;
        for (int64_t v0 = first; v0 < vecs; v0 += step) {
            sum_chunk<EL, true, false>((uint8_t*)p.out + t * row_bytes, mask, [&](int d) {
                return term{src + d * block, 0.f};
            }, v0, vecs, lane);
        }
    });
    // Done reading every expert PE's block: they may write the next combine.
    phase_end(p, 1, e_now, (uint32_t*)p.done + 3);
}

}  // namespace rshmem_ep

// ---------------------------------------------------------------------------------------------
// Low-latency mode (T <= max_tokens <= 256): every (token, expert) pair has a fixed row in the
// expert's PE, [local expert][source][rank], with no count exchange before the data; the counts
// travel with the completion signal. The receiver's output is that region itself (masked
// layout: rows 0..count[l][s] of each (l, s) block are valid).
//   ll_send: one warp per token (token_rounds, as dispatch_send): a rank per (token, expert)
//            from a counter per expert; the row read once and stored into the row of every
//            (token, expert) pair (rshmem_ep_ll_send), or once per destination PE into the row
//            of the token's first expert there (rshmem_ep_ll_send_per_pe); the metadata
//            (token, slot, the row holding the data or -1, and on that row of a per-PE send
//            the mask of the token's slots there) beside every pair's row; ll_slot_ok records
//            each slot's PE and (per PE) the lead slot; the last block stores the counts and
//            signals every PE.
//   ll_wait: every block waits for every source; over the grid (for_rows) every row's
//            (token, slot) is copied into this PE's own array (the output) and the rows of a
//            token's other experts here are copied from its first one (local memory); for a
//            per-PE source each (source, token, slot)'s row goes into ll_pair and each lead
//            into ll_items; the counts are copied too; the last block acknowledges.
//   ll_combine_send (after rshmem_ep_ll_send): one warp per row (for_rows) over every (expert,
//            source) block's rows: each row of y (same layout as the dispatch region) goes back
//            to its source's slot (token, slot); the last block signals.
//   ll_combine_send_per_pe_{f32,bf16} (after rshmem_ep_ll_send_per_pe): the weights to the
//            experts' PEs (tagged words), then one warp per lead (for_rows over ll_items): the
//            token's rows here summed with their weights in slot order, rounded once, stored
//            once into the source's slot (token, lead slot); the last block signals. Every
//            PE's grid must be resident at once (its blocks wait for other PEs' blocks).
//   ll_combine_recv: one warp per token (for_rows): out[t] = sum over sent slots of
//            w[t][j] * row(t, j), or over the lead slots of the partial rows (weight 1) after a
//            per-PE send, in slot order (fp32 fused multiply-adds), rounded once.

// PER_PE: the row goes once per destination PE (rshmem_ep_ll_send_per_pe); otherwise once per
// (token, expert) pair (rshmem_ep_ll_send), and no row needs a receiver-side copy.
template <bool PER_PE>
static __device__ void rshmem_ep_ll_send_dev(const rshmem_ep_params& p) {
    // Per warp of a round (token_rounds): the destination row and scales of each slot that
    // carries the row (the token's first on its PE), the mask of those slots.
    __shared__ uint8_t* s_dst[RSHMEM_EP_THREADS / 32][RSHMEM_EP_MAX_TOPK];
    __shared__ float* s_sdst[RSHMEM_EP_THREADS / 32][RSHMEM_EP_MAX_TOPK];
    __shared__ uint32_t s_sent[RSHMEM_EP_THREADS / 32];
    const int n = (int)p.n_pes, me = (int)p.my_pe, k = (int)p.topk;
    const int L = (int)p.local_experts, E = (int)p.num_experts;
    const int64_t row_bytes = p.row_bytes, M = p.max_tokens, sw = p.scale_words;
    const uint64_t e_now = rshmem_ep::phase_begin(p, 2);
    // The receiver's list of per-PE leads (ll_wait appends to it) starts empty: the previous
    // dispatch's ll_wait and combine are done (stream order), and this dispatch's ll_wait
    // appends after this kernel's last block (its signal).
    if (PER_PE && blockIdx.x == 0 && threadIdx.x == 0) *(int32_t*)p.ll_nitems = 0;
    const int lane = threadIdx.x & 31;
    const int64_t vecs = row_bytes >> 4;
    int32_t* ecnt = (int32_t*)p.ecnt;
    rshmem_ep::token_rounds(
        p.num_tokens, vecs,
        [&](int64_t t, int w) {
            int ok = 0, d = -1;
            int64_t slot = 0;
            if (lane < k) {
                int64_t e = ((const int64_t*)p.topk_idx)[t * k + lane];
                if (e >= 0 && e < E) {
                    d = (int)(e / L);
                    const int l = (int)(e % L);
                    const int rank = atomicAdd(&ecnt[e], 1);
                    if (rank < M) {
                        slot = ((int64_t)l * n + me) * M + rank;
                        ok = 1;
                    } else {
                        rshmem_ep::record_error(p, RSHMEM_EP_ERR_ROWS, rank + 1, (int)M, 1);
                    }
                } else if (e != -1) {
                    rshmem_ep::record_error(p, RSHMEM_EP_ERR_EXPERT, (int)t, lane, (int)e);
                }
            }
            // PER_PE: the token's first sent slot on each destination PE gets the row; the
            // others there name that slot's row (the receiver copies it). Otherwise every sent
            // slot gets the row.
            const uint32_t same =
                PER_PE ? __match_any_sync(0xffffffffu, ok ? d : -1 - lane) : 1u << lane;
            const int lead = __ffs(same) - 1;
            const int64_t lead_slot = __shfl_sync(0xffffffffu, slot, lead);
            // 0: not sent; 1 + the destination PE, with the LEAD bit on the slot whose row
            // carries the data on a per-PE send (the combine returns one row per PE there).
            if (lane < k) {
                ((int32_t*)p.ll_slot_ok)[t * k + lane] =
                    ok ? (1 + d) | (PER_PE && lead == lane ? RSHMEM_EP_LL_LEAD_BIT : 0) : 0;
            }
            if (ok) {
                int32_t* meta = (int32_t*)rshmem_ptr((void*)p.ll_meta, d) + slot * 4;
                // Word 3 of a per-PE lead: the token's slots on that PE (never 0).
                *(int4*)meta = make_int4((int)t, lane, lead == lane ? -1 : (int)lead_slot,
                                         PER_PE && lead == lane ? (int)same : 0);
                if (lead == lane) {
                    s_dst[w][lane] = (uint8_t*)rshmem_ptr((void*)p.ll_x, d) + slot * row_bytes;
                    if (sw > 0) s_sdst[w][lane] = (float*)rshmem_ptr((void*)p.ll_scales, d) + slot * sw;
                }
            }
            const uint32_t firsts = __ballot_sync(0xffffffffu, ok && lead == lane);
            if (lane == 0) s_sent[w] = firsts;
        },
        [&](int64_t t, int w, int64_t first, int64_t step) {
            // The row, read once, stored once per destination PE (the row of its first slot
            // there); its scales (fp8) beside each copy, by the warp of the first chunk.
            const uint32_t sent = s_sent[w];
            const uint8_t* src = (const uint8_t*)p.x + t * row_bytes;
            rshmem_ep::fanout_row<false>(src, first, step, vecs, sent,
                                         [&](int i) { return s_dst[w][i]; });
            if (first == 0) {
                rshmem_ep::fanout_scales<false>((const float*)p.x_scales + t * sw, sw, sent,
                                                [&](int i) { return s_sdst[w][i]; });
            }
        });
    if (rshmem_ep::phase_sent((uint32_t*)p.done + 4)) {
        for (int i = threadIdx.x; i < E; i += blockDim.x) {
            int d = i / L, l = i % L;
            int32_t c = rshmem_detail::ld_relaxed_sys(&ecnt[i]);
            ecnt[i] = 0;  // for the next dispatch
            int32_t* rc = (int32_t*)rshmem_ptr((void*)p.ll_cnt, d);
            // Bit 30: this source sent rows once per PE (the receiver has rows to copy).
            rc[l * n + me] = (c < M ? c : (int32_t)M) | (PER_PE ? RSHMEM_EP_LL_PER_PE_BIT : 0);
        }
        __syncthreads();
        rshmem_ep::signal_all(p, 4, e_now);
    }
}

// Any grid (blockDim a multiple of 32): every block waits and scans the counts; each row's
// (token, slot) is copied into this PE's own array, one thread a row over the grid (with, for a
// per-PE source, the row's index in ll_pair and each lead in ll_items); when a source sent once
// per PE (RSHMEM_EP_LL_PER_PE_BIT in its counts), the rows whose data lies in the token's first
// row here are copied from it, shared out over the grid (for_rows); the last block
// acknowledges.
static __device__ void rshmem_ep_ll_wait_dev(const rshmem_ep_params& p) {
    __shared__ int32_t s_pre[RSHMEM_EP_MAX_EXPERTS + 1];  // prefix of the counts over the blocks
    __shared__ int s_copies;
    const int n = (int)p.n_pes, L = (int)p.local_experts, E = L * n, k = (int)p.topk;
    const int64_t M = p.max_tokens, row_bytes = p.row_bytes, sw = p.scale_words;
    const uint64_t e_now = rshmem_ep::phase_epoch(p, 2);
    if (threadIdx.x == 0) s_copies = 0;
    rshmem_ep::wait_all(p, 4, e_now);
    __syncthreads();
    const int32_t* cnt = (const int32_t*)p.ll_cnt;
    int32_t* count = (int32_t*)p.ll_count;
    for (int i = threadIdx.x; i < E; i += blockDim.x) {
        const int32_t raw = rshmem_detail::ld_relaxed_sys(&cnt[i]);
        const int32_t c = raw & ~RSHMEM_EP_LL_PER_PE_BIT;
        if (raw & RSHMEM_EP_LL_PER_PE_BIT) s_copies = 1;
        if (blockIdx.x == 0) count[i] = c;
        s_pre[i + 1] = c;
    }
    __syncthreads();
    rshmem_ep::scan_counts(s_pre, E);
    // Metadata rows: (token, slot, the row holding the data or -1, 0), written by the sources.
    const int32_t* meta = (const int32_t*)p.ll_meta;
    const int64_t rows = s_pre[E], threads = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += threads) {
        const int lo = rshmem_ep::block_of(s_pre, E, r);
        const int64_t at = (int64_t)lo * M + (r - s_pre[lo]);
        const rshmem_ep::vec16 m = rshmem_ep::ld16_cg(meta + at * 4);
        ((int2*)p.ll_src)[at] = make_int2((int)m.a, (int)m.b);
        // A row of a per-PE send (a follower, or a lead with its slots' mask): the combine
        // finds each (source, token, slot)'s row in ll_pair and the leads in ll_items.
        if ((int32_t)m.c >= 0 || m.d != 0u) {
            const int64_t s = (at / M) % n;
            ((int32_t*)p.ll_pair)[(s * M + (int)m.a) * k + (int)m.b] = (int32_t)at;
            if (m.d != 0u) {
                const int i = atomicAdd((int32_t*)p.ll_nitems, 1);
                ((int4*)p.ll_items)[i] = make_int4((int)s, (int)m.a, (int)at, (int)m.d);
            }
        }
    }
    if (s_copies) {
        const int64_t vecs = row_bytes >> 4;
        rshmem_ep::for_rows(rows, vecs, [&](int64_t r, int64_t first, int64_t step) {
            const int lo = rshmem_ep::block_of(s_pre, E, r);
            const int64_t at = (int64_t)lo * M + (r - s_pre[lo]);
            const int64_t from = rshmem_detail::ld_relaxed_sys(meta + at * 4 + 2);
            if (from < 0) return;
            const uint8_t* src = (const uint8_t*)p.ll_x + from * row_bytes;
            uint8_t* dst = (uint8_t*)p.ll_x + at * row_bytes;
            rshmem_ep::fanout_row<true>(src, first, step, vecs, 1u, [&](int) { return dst; });
            if (first == 0) {
                float* sdst = (float*)p.ll_scales + at * sw;
                rshmem_ep::fanout_scales<true>((const float*)p.ll_scales + from * sw, sw, 1u,
                                               [&](int) { return sdst; });
            }
        });
    }
    rshmem_ep::phase_end(p, 2, e_now, (uint32_t*)p.done + 5);
}

static __device__ void rshmem_ep_ll_combine_send_dev(const rshmem_ep_params& p) {
    __shared__ int32_t s_pre[RSHMEM_EP_MAX_EXPERTS + 1];  // prefix of the counts over the blocks
    __shared__ uint8_t* s_comb[RSHMEM_EP_MAX_PES];
    const int n = (int)p.n_pes, k = (int)p.topk, L = (int)p.local_experts, E = L * n;
    const int64_t row_bytes = rshmem_ep::comb_row_bytes(p), M = p.max_tokens;
    for (int i = threadIdx.x; i < E; i += blockDim.x) s_pre[i + 1] = ((const int32_t*)p.ll_count)[i];
    for (int s = threadIdx.x; s < n; s += blockDim.x) s_comb[s] = (uint8_t*)rshmem_ptr((void*)p.ll_comb, s);
    const uint64_t e_now = rshmem_ep::phase_begin(p, 3);
    rshmem_ep::scan_counts(s_pre, E);
    // All the blocks' rows over the grid (for_rows): row i of block (l, s) goes back to its
    // source's slot (token, slot).
    const int64_t vecs = row_bytes >> 4;
    rshmem_ep::for_rows(s_pre[E], vecs, [&](int64_t r, int64_t first, int64_t step) {
        const int64_t pair = rshmem_ep::block_of(s_pre, E, r);
        const int64_t at = pair * M + (r - s_pre[pair]);
        const int32_t* ts = (const int32_t*)p.ll_src + at * 2;
        const int t = ts[0], j = ts[1];
        uint8_t* dst = s_comb[pair % n] + ((int64_t)t * k + j) * row_bytes;
        const uint8_t* src = (const uint8_t*)p.y + at * row_bytes;
        rshmem_ep::fanout_row<false>(src, first, step, vecs, 1u, [&](int) { return dst; });
    });
    if (rshmem_ep::phase_sent((uint32_t*)p.done + 6)) rshmem_ep::signal_all(p, 6, e_now);
}

namespace rshmem_ep {

static __device__ __noinline__ void fail_ll_weight(int me, int s, int t, int j, uint32_t tag,
                                                   uint32_t seen, unsigned long long waited) {
    printf("rshmem: ep_ll_combine on PE %d: timed out after %llu ns waiting for PE %d's weight "
           "of token %d slot %d (combine %u; the word holds combine %u)\n",
           me, waited, s, t, j, tag, seen);
    __trap();
}
// The weight source s stored for its (token t, slot j) in this combine (tag: from the combine's
// epoch), waiting for it (bounded by the device timeout). One 8-byte word carries the tag and
// the weight, so no fence orders them.
static __device__ __forceinline__ float ll_weight(const rshmem_ep_params& p, int s, int64_t t,
                                                  int j, uint32_t tag) {
    const uint64_t* w = (const uint64_t*)p.ll_wgt + ((int64_t)s * p.max_tokens + t) * p.topk + j;
    rshmem_detail::wait_timer timer;
    for (;;) {
        const uint64_t v = rshmem_detail::ld_relaxed_sys(w);
        if ((uint32_t)(v >> 32) == tag) return __uint_as_float((uint32_t)v);
        if (timer.expired()) {
            rshmem_detail::cold(&fail_ll_weight)((int)p.my_pe, s, (int)t, j, tag,
                                                 (uint32_t)(v >> 32), timer.waited());
        }
    }
}

// Low-latency combine of a per-PE dispatch, expert side: (a) this PE's weights go to the PEs of
// its tokens' experts (one tagged 8-byte word per sent slot, its own read in place); (b) one
// warp per lead row (for_rows over ll_items): the sum over the token's slots here, in slot
// order, of w[j] * y[row of slot j] (fp32 fused multiply-adds from 0), rounded once to the
// element type, stored once into the source's ll_comb at [token][lead slot]. A block waits for
// the weights of other PEs only (stored by their kernels' blocks before any of them waits), so
// every PE's grid must be resident at once (its blocks fit on the SMs given to the PE).
template <int DT>
static __device__ __forceinline__ void ll_combine_send_per_pe(const rshmem_ep_params& p) {
    typedef elem<DT> EL;
    __shared__ uint8_t* s_comb[RSHMEM_EP_MAX_PES];
    __shared__ uint64_t* s_wgt[RSHMEM_EP_MAX_PES];  // this PE's block of each PE's ll_wgt
    __shared__ int32_t s_row[RSHMEM_EP_THREADS / 32][RSHMEM_EP_MAX_TOPK];
    __shared__ float s_w[RSHMEM_EP_THREADS / 32][RSHMEM_EP_MAX_TOPK];
    const int n = (int)p.n_pes, me = (int)p.my_pe, k = (int)p.topk;
    const int64_t row_bytes = comb_row_bytes(p), M = p.max_tokens;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        s_comb[s] = (uint8_t*)rshmem_ptr((void*)p.ll_comb, s);
        s_wgt[s] = (uint64_t*)rshmem_ptr((void*)p.ll_wgt, s) + (int64_t)me * M * k;
    }
    const uint64_t e_now = phase_begin(p, 3);
    // Never 0 (the words start zeroed) and different in consecutive combines.
    const uint32_t tag = 1u + (uint32_t)(e_now % 0xffffffffull);
    // (a) Slot i = t k + j of this PE's tokens, one thread a slot over the grid.
    const int64_t slots = p.num_tokens * k, threads = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < slots; i += threads) {
        const int32_t ok = ((const int32_t*)p.ll_slot_ok)[i];
        const int d = (ok & ~RSHMEM_EP_LL_LEAD_BIT) - 1;
        if (ok == 0 || d == me) continue;
        const uint32_t w = __float_as_uint(((const float*)p.topk_w)[i]);
        rshmem_detail::st_relaxed_sys(s_wgt[d] + i, ((uint64_t)tag << 32) | w);
    }
    // (b) The leads over the grid (for_rows, in the sums' chunks).
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int64_t vecs = row_bytes >> 4;
    const int items = *(const int32_t*)p.ll_nitems;
    for_rows<SUM_VECS>(items, vecs, [&](int64_t it, int64_t first, int64_t step) {
        const int4 item = ((const int4*)p.ll_items)[it];
        const int s = item.x;
        const int64_t t = item.y;
        const uint32_t mask = (uint32_t)item.w;
        if ((mask >> lane) & 1u) {
            s_row[wid][lane] = ((const int32_t*)p.ll_pair)[((int64_t)s * M + t) * k + lane];
            s_w[wid][lane] = s == me ? ((const float*)p.topk_w)[t * k + lane]
                                     : ll_weight(p, s, t, lane, tag);
        }
        __syncwarp();
        uint8_t* dst = s_comb[s] + (t * k + (__ffs(mask) - 1)) * row_bytes;
        for (int64_t v0 = first; v0 < vecs; v0 += step) {
            sum_chunk<EL, false, true>(dst, mask, [&](int j) {
                return term{(const uint8_t*)p.y + (int64_t)s_row[wid][j] * row_bytes, s_w[wid][j]};
            }, v0, vecs, lane);
        }
        __syncwarp();
    });
    if (phase_sent((uint32_t*)p.done + 6)) signal_all(p, 6, e_now);
}

// Low-latency combine, source side: out[t] = the sum over the token's sent slots of
// w[t][j] * row(t, j) (per-pair dispatch), or over its lead slots of the PEs' partial sums
// (RSHMEM_EP_LL_LEAD_BIT: per-PE dispatch, weight 1), in slot order (fp32 fused multiply-adds
// from 0), rounded once; zeros for a token with no slot sent.
template <int DT>
static __device__ __forceinline__ void ll_combine_recv(const rshmem_ep_params& p) {
    typedef elem<DT> EL;
    const int k = (int)p.topk;
    const int64_t row_bytes = comb_row_bytes(p);
    const uint64_t e_now = phase_epoch(p, 3);
    wait_all(p, 6, e_now);
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int64_t vecs = row_bytes >> 4;
    // Tokens over the grid (for_rows, in the sums' chunks).
    for_rows<SUM_VECS>(p.num_tokens, vecs, [&](int64_t t, int64_t first, int64_t step) {
        int ok = 0;
        if (lane < k) ok = ((const int32_t*)p.ll_slot_ok)[t * k + lane];
        const uint32_t sent = __ballot_sync(0xffffffffu, ok != 0);
        const uint32_t leads = __ballot_sync(0xffffffffu, (ok & RSHMEM_EP_LL_LEAD_BIT) != 0);
        const float* w = (const float*)p.topk_w + t * k;
        const uint8_t* base = (const uint8_t*)p.ll_comb + t * k * row_bytes;
        for (int64_t v0 = first; v0 < vecs; v0 += step) {
            sum_chunk<EL, true, true>((uint8_t*)p.out + t * row_bytes, leads ? leads : sent, [&](int j) {
                return term{base + j * row_bytes, leads ? 1.f : w[j]};
            }, v0, vecs, lane);
        }
    });
    phase_end(p, 3, e_now, (uint32_t*)p.done + 7);
}

}  // namespace rshmem_ep

// The kernels, defined in the unit that defines RSHMEM_EP_KERNELS before the include (the
// runtime's runtime/src/ep/ep.cu; an nvcc program that launches them itself does the same in one
// .cu file), so that several units can include this header without duplicate kernels.
#ifdef RSHMEM_EP_KERNELS
#define RSHMEM_EP_KERNEL extern "C" __global__ void __launch_bounds__(RSHMEM_EP_THREADS)
RSHMEM_EP_KERNEL rshmem_ep_dispatch_send(rshmem_ep_params p) { rshmem_ep_dispatch_send_dev(p); }
RSHMEM_EP_KERNEL rshmem_ep_dispatch_recv(rshmem_ep_params p) { rshmem_ep_dispatch_recv_dev(p); }
RSHMEM_EP_KERNEL rshmem_ep_combine_send_f32(rshmem_ep_params p) {
    rshmem_ep::combine_send<RSHMEM_EP_F32>(p);
}
RSHMEM_EP_KERNEL rshmem_ep_combine_send_bf16(rshmem_ep_params p) {
    rshmem_ep::combine_send<RSHMEM_EP_BF16>(p);
}
RSHMEM_EP_KERNEL rshmem_ep_combine_recv_f32(rshmem_ep_params p) {
    rshmem_ep::combine_recv<RSHMEM_EP_F32>(p);
}
RSHMEM_EP_KERNEL rshmem_ep_combine_recv_bf16(rshmem_ep_params p) {
    rshmem_ep::combine_recv<RSHMEM_EP_BF16>(p);
}
RSHMEM_EP_KERNEL rshmem_ep_ll_send(rshmem_ep_params p) { rshmem_ep_ll_send_dev<false>(p); }
RSHMEM_EP_KERNEL rshmem_ep_ll_send_per_pe(rshmem_ep_params p) { rshmem_ep_ll_send_dev<true>(p); }
RSHMEM_EP_KERNEL rshmem_ep_ll_wait(rshmem_ep_params p) { rshmem_ep_ll_wait_dev(p); }
RSHMEM_EP_KERNEL rshmem_ep_ll_combine_send(rshmem_ep_params p) {
    rshmem_ep_ll_combine_send_dev(p);
}
RSHMEM_EP_KERNEL rshmem_ep_ll_combine_send_per_pe_f32(rshmem_ep_params p) {
    rshmem_ep::ll_combine_send_per_pe<RSHMEM_EP_F32>(p);
}
RSHMEM_EP_KERNEL rshmem_ep_ll_combine_send_per_pe_bf16(rshmem_ep_params p) {
    rshmem_ep::ll_combine_send_per_pe<RSHMEM_EP_BF16>(p);
}
RSHMEM_EP_KERNEL rshmem_ep_ll_combine_recv_f32(rshmem_ep_params p) {
    rshmem_ep::ll_combine_recv<RSHMEM_EP_F32>(p);
}
RSHMEM_EP_KERNEL rshmem_ep_ll_combine_recv_bf16(rshmem_ep_params p) {
    rshmem_ep::ll_combine_recv<RSHMEM_EP_BF16>(p);
}
#undef RSHMEM_EP_KERNEL
#endif
