// moe_dispatch_c: the CUDA C++ twin of examples/moe_dispatch.rs, written only against rshmem.h
// (the rshmemx_ep_* calls of docs/moe.md) and compiled by nvcc without -rdc. A whole program
// for nvcc, so the NVRTC sweep of the repository's .cu files leaves it out:
// rshmem: nvrtc-skip
//
// One MoE layer step per round: every PE routes its tokens (uneven: a hot expert takes slot 0 of
// 3 tokens in 4, every fourth expert gets nothing, repeated experts, -1 slots, tokens with no
// expert, T differing per PE), dispatches, checks the dispatch output against a host reference
// (each local expert's rows, their sources, every row's bytes and fp8 scales bit for bit: the data
// path is a copy), runs a stand-in expert as a CUDA kernel (dequantize, times a per-expert
// scale, bf16), combines and checks every output element against the host reference (bf16
// within 2^-6 of the terms' magnitude, normally bit-identical; fp8 also against the exact sum of
// the unquantized tokens within the fp8 error).
//
// Cases: bf16 and fp8 e4m3 handles (RSHMEMX_EP_FP8_E4M3: tokens quantized per 128 elements with
// cuda_fp8.h, scale = block amax / 448, dispatched by rshmemx_ep_dispatch_fp8_on_stream, the
// received scales read through rshmemx_ep_output_scales), normal and low-latency mode
// (rshmemx_ep_ll_dispatch_fp8_on_stream, rshmemx_ep_ll_output_scales), k = 8 and 1, T = 0 on
// odd PEs, and the benchmark's shape (E 256, H 7168, k 8); then the C calls' refusals for the
// wrong dtype (each returns RSHMEM_ERROR_INVALID_VALUE and enqueues nothing): dispatch without
// scales on an fp8 handle, scales on a bf16 handle, the fp8 combine in place (y NULL), low-latency
// scales of a handle without them.
//
//   flags=$(pkg-config --cflags --libs rshmem)
//   nvcc -O2 -arch=sm_90 -std=c++17 examples/cuda/moe_dispatch.cu -o moe_dispatch_c $flags
//   rshmemrun -n 4 ./moe_dispatch_c      # every PE ends with "moe_dispatch_c: PE <me> passed"
//
// Needs the GPU backend with every PE on one host (one GPU per PE, or several PEs per GPU under
// CUDA MPS). scripts/cuda-examples builds it, scripts/moe-gpu-check runs it on 2 and 4 PEs.
#include <cuda_fp8.h>
#include <rshmem.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

static int me, npes;
static long failures;  // this PE's failed checks

// A failed check: counted, the first 20 printed.
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (++failures <= 20) {                                                                \
                printf("PE %d: FAIL: ", me);                                                       \
                printf(__VA_ARGS__);                                                               \
                printf("\n");                                                                      \
            }                                                                                      \
        }                                                                                          \
    } while (0)
// A failed setup call ends the PE (the launcher stops the others).
#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "moe_dispatch_c: PE %d: %s failed: %s\n", me, #call,                   \
                    cudaGetErrorString(e_));                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define RS_OK(call)                                                                                \
    do {                                                                                           \
        int r_ = (call);                                                                           \
        if (r_ != RSHMEM_SUCCESS) {                                                                \
            fprintf(stderr, "moe_dispatch_c: PE %d: %s returned %d\n", me, #call, r_);             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

// ---------------------------------------------------------------------------------------------
// Number formats, the same on the host and in the kernels.

__host__ __device__ inline uint32_t f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

__host__ __device__ inline float bf16_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(static_cast<uint32_t>(h) << 16);
#else
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

// Round to nearest even; NaN gives a quiet NaN.
__host__ __device__ inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// e4m3 ("fn": no infinities, 0x7f/0xff NaN): 1 sign, 4 exponent (bias 7), 3 mantissa bits.
__host__ __device__ inline float fp8_to_f32(uint8_t b) {
    int e = (b >> 3) & 15, m = b & 7;
    float s = (b & 0x80) ? -1.0f : 1.0f;
    if (e == 15 && m == 7) return NAN;
    return e == 0 ? s * static_cast<float>(m) * 0x1p-9f
                  : s * static_cast<float>(8 + m) * ldexpf(1.0f, e - 10);
}

// The stand-in expert: a per-expert scale.
__host__ __device__ inline float expert_scale(int e) {
    const float s[5] = {0.5f, 1.0f, 1.5f, 2.0f, -1.0f};
    return s[e % 5];
}

static const int BLOCK = 128;  // elements per fp8 scale (RSHMEM_EP_FP8_BLOCK)

// The stand-in expert on the GPU: row r of the dispatch output (bf16, or fp8 bytes with `sw`
// scales per row) decoded, times the scale of its expert, into bf16 row r of y. The normal
// mode's rows: expert l at offsets[l] .. offsets[l + 1] (offsets non-NULL); the low-latency
// mode's: block b = l * n + source, rows b * m .. b * m + counts[b].
__global__ void stand_in_expert(const void *x, const float *scales, int sw, int fp8, int H,
                                const int64_t *offsets, const int32_t *counts, int L, int n, int m,
                                int first_expert, uint16_t *y, long long nrows) {
    for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {
        int l = 0;
        if (offsets != nullptr) {
            if (r >= offsets[L]) break;
            while (r >= offsets[l + 1]) ++l;
        } else {
            long long b = r / m, i = r % m;
            if (i >= counts[b]) continue;
            l = static_cast<int>(b / n);
        }
        float s = expert_scale(first_expert + l);
        for (int h = threadIdx.x; h < H; h += blockDim.x) {
            long long at = r * H + h;
            float v =
                fp8 ? fp8_to_f32(static_cast<const uint8_t *>(x)[at]) * scales[r * sw + h / BLOCK]
                    : bf16_to_f32(static_cast<const uint16_t *>(x)[at]);
            y[at] = f32_to_bf16(v * s);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cases, routing and tokens (the Rust example's, ported).

struct Case {
    const char *name;
    int dtype;  // RSHMEMX_EP_BF16 or RSHMEMX_EP_FP8_E4M3
    int E, H, k, max_tokens, base;
    bool zero_odd, ll;
    bool fp8() const { return dtype == RSHMEMX_EP_FP8_E4M3; }
    int sw() const { return fp8() ? H / BLOCK : 0; }
    size_t elem() const { return fp8() ? 1 : 2; }
    int tokens(int pe) const {
        if ((zero_odd && pe % 2 == 1) || base == 0) return 0;
        return std::min(base + 13 * pe, max_tokens);
    }
};

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static uint64_t h4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
}
// Element h of token t of PE pe in round seed: m/8 with |m| <= 127.
static float x_val(uint64_t seed, int pe, int t, int h) {
    return (static_cast<float>(h4(seed, pe, t, static_cast<uint64_t>(h) | 1ull << 40) % 255) -
            127.0f) /
           8.0f;
}

struct Routing {
    int T = 0;
    std::vector<int64_t> idx;
    std::vector<float> w;
};
struct Slot {
    int j, e;
    float w;
};
static std::vector<Slot> slots(const Routing &r, int t, int k, int E) {
    std::vector<Slot> s;
    for (int j = 0; j < k; ++j) {
        int64_t e = r.idx[static_cast<size_t>(t) * k + j];
        if (e >= 0 && e < E)
            s.push_back({j, static_cast<int>(e), r.w[static_cast<size_t>(t) * k + j]});
    }
    return s;
}

static Routing route(const Case &c, uint64_t seed, int pe) {
    Routing r;
    r.T = c.tokens(pe);
    int hot = (c.E / 2 + 1) % c.E;
    std::vector<int> allowed;
    for (int e = 0; e < c.E; ++e)
        if (e % 4 != 3 || c.E < 4) allowed.push_back(e);
    const float weights[5] = {0.25f, 0.5f, 0.75f, 1.0f, 1.5f};
    for (int t = 0; t < r.T; ++t) {
        std::vector<int64_t> chosen;
        for (int j = 0; j < c.k; ++j) {
            uint64_t h = h4(seed ^ 0x5157, pe, t, j);
            int64_t e;
            if (j == 0 && h % 4 != 0) {
                e = hot;
            } else {
                size_t pick = (h >> 8) % allowed.size();
                while (std::find(chosen.begin(), chosen.end(), allowed[pick]) != chosen.end())
                    pick = (pick + 1) % allowed.size();
                e = allowed[pick];
            }
            chosen.push_back(e);
        }
        if (c.k >= 2 && t % 13 == 4) chosen[1] = chosen[0];
        if (c.k >= 2 && t % 11 == 5) chosen[c.k - 1] = -1;
        if (t % 37 == 7) std::fill(chosen.begin(), chosen.end(), -1);
        for (int j = 0; j < c.k; ++j) {
            r.idx.push_back(chosen[j]);
            r.w.push_back(weights[h4(seed ^ 0x3779, pe, t, j) % 5]);
        }
    }
    return r;
}

// A PE's tokens as the handle takes them: bf16 bits, or e4m3 bytes (cuda_fp8.h's conversion,
// saturating) with one scale per 128 elements (block amax / 448).
struct Tokens {
    std::vector<uint8_t> x;
    std::vector<float> scales;
};
static Tokens encode(const Case &c, uint64_t seed, int pe, int T) {
    Tokens tk;
    tk.x.resize(static_cast<size_t>(T) * c.H * c.elem());
    for (int t = 0; t < T; ++t) {
        for (int b = 0; b < c.H; b += (c.fp8() ? BLOCK : c.H)) {
            int n = c.fp8() ? BLOCK : c.H;
            float s = 1.0f;
            if (c.fp8()) {
                float amax = 0;
                for (int h = b; h < b + n; ++h)
                    amax = std::max(amax, std::fabs(x_val(seed, pe, t, h)));
                s = std::max(amax, 1e-4f) / 448.0f;
                tk.scales.push_back(s);
            }
            for (int h = b; h < b + n; ++h) {
                size_t at = static_cast<size_t>(t) * c.H + h;
                float v = x_val(seed, pe, t, h);
                if (c.fp8()) {
                    tk.x[at] = __nv_cvt_float_to_fp8(v / s, __NV_SATFINITE, __NV_E4M3);
                } else {
                    uint16_t u = f32_to_bf16(v);
                    memcpy(&tk.x[2 * at], &u, 2);
                }
            }
        }
    }
    return tk;
}

// Value h of an encoded row (bf16, or fp8 times its block's scale), as the kernel computes it.
static float decode(const Case &c, const uint8_t *row, const float *scales, int h) {
    if (c.fp8()) return fp8_to_f32(row[h]) * scales[h / BLOCK];
    uint16_t u;
    memcpy(&u, row + 2 * static_cast<size_t>(h), 2);
    return bf16_to_f32(u);
}

// The stand-in expert e on token t of this PE, in bf16 precision (host side of stand_in_expert).
static std::vector<float> expert_out(const Case &c, const Tokens &tk, int t, int e) {
    std::vector<float> y(c.H);
    const uint8_t *row = tk.x.data() + static_cast<size_t>(t) * c.H * c.elem();
    const float *sc = c.fp8() ? tk.scales.data() + static_cast<size_t>(t) * c.sw() : nullptr;
    for (int h = 0; h < c.H; ++h)
        y[h] = bf16_to_f32(f32_to_bf16(decode(c, row, sc, h) * expert_scale(e)));
    return y;
}

static float bf16r(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// The combine reference (docs/moe.md): normal mode, per expert PE in PE order the fused
// multiply-adds of its slots from 0, rounded to bf16, summed in fp32, rounded; low-latency
// mode once per (token, expert) pair, every slot's fused multiply-add in slot order from 0,
// rounded once; low-latency mode once per PE (per_pe, rshmemx_ep_ll_per_pe), per expert PE in
// the order of its first slot the fused multiply-adds of its slots from 0, rounded to bf16,
// summed in fp32, rounded.
static std::vector<float> combine_ref(const Case &c, const Routing &mine, const Tokens &tk,
                                      bool per_pe) {
    int L = c.E / npes;
    std::vector<float> out(static_cast<size_t>(mine.T) * c.H, 0.0f);
    for (int t = 0; t < mine.T; ++t) {
        std::vector<Slot> s = slots(mine, t, c.k, c.E);
        std::vector<std::vector<float>> ys;
        for (const Slot &sl : s) ys.push_back(expert_out(c, tk, t, sl.e));
        // The expert PEs in the order of their first slot.
        std::vector<int> first;
        for (const Slot &sl : s)
            if (std::find(first.begin(), first.end(), sl.e / L) == first.end())
                first.push_back(sl.e / L);
        float *o = &out[static_cast<size_t>(t) * c.H];
        for (int h = 0; h < c.H; ++h) {
            if (c.ll && per_pe) {
                float sum = 0;
                for (int d : first) {
                    float acc = 0;
                    for (size_t i = 0; i < s.size(); ++i)
                        if (s[i].e / L == d) acc = std::fma(s[i].w, ys[i][h], acc);
                    sum += bf16r(acc);
                }
                o[h] = bf16r(sum);
                continue;
            }
            if (c.ll) {
                float acc = 0;
                for (size_t i = 0; i < s.size(); ++i) acc = std::fma(s[i].w, ys[i][h], acc);
                o[h] = bf16r(acc);
                continue;
            }
            float sum = 0;
            for (int d = 0; d < npes; ++d) {
                bool any = false;
                float acc = 0;
                for (size_t i = 0; i < s.size(); ++i) {
                    if (s[i].e / L != d) continue;
                    any = true;
                    acc = std::fma(s[i].w, ys[i][h], acc);
                }
                if (any) sum += bf16r(acc);
            }
            o[h] = bf16r(sum);
        }
    }
    return out;
}

// The combine output against the reference, every element: bit-identical or within 2^-6 of
// sum_j |w_j y_j|; fp8 also against the exact sum of the unquantized tokens within
// sum_j |w_j scale_j| (|x|/16 + s/1024) (e4m3 keeps 3 mantissa bits; s/1024 is half the
// subnormal step of a block of scale s) plus that bf16 tolerance. Returns the elements that were
// not bit-identical.
static long check_out(const Case &c, uint64_t seed, const Routing &mine, const Tokens &tk,
                      const std::vector<uint16_t> &got, const std::vector<float> &want,
                      double *worst_q) {
    long inexact = 0;
    *worst_q = 0;
    for (int t = 0; t < mine.T; ++t) {
        std::vector<Slot> s = slots(mine, t, c.k, c.E);
        std::vector<std::vector<float>> ys;
        float a = 0;
        for (const Slot &sl : s) {
            ys.push_back(expert_out(c, tk, t, sl.e));
            a += std::fabs(sl.w * expert_scale(sl.e));
        }
        for (int h = 0; h < c.H; ++h) {
            size_t at = static_cast<size_t>(t) * c.H + h;
            float g = bf16_to_f32(got[at]), r = want[at], mag = 0;
            for (size_t i = 0; i < s.size(); ++i) mag += std::fabs(s[i].w * ys[i][h]);
            if (f32_bits(g) != f32_bits(r)) {
                ++inexact;
                EXPECT(std::fabs(g - r) <= mag / 64,
                       "%s: out[%d][%d] = %g, reference %g (tolerance %g)", c.name, t, h, g, r,
                       mag / 64);
            }
            if (!c.fp8()) continue;
            double x = x_val(seed, me, t, h), exact = 0;
            for (const Slot &sl : s) exact += static_cast<double>(sl.w) * expert_scale(sl.e) * x;
            double tol = a * (std::fabs(x) / 16 +
                              tk.scales[static_cast<size_t>(t) * c.sw() + h / BLOCK] / 1024) +
                         mag / 64;
            double err = std::fabs(g - exact);
            *worst_q = std::max(*worst_q, err);
            EXPECT(err <= tol,
                   "%s: out[%d][%d] = %g, unquantized %g: error %g beyond the fp8 tolerance %g",
                   c.name, t, h, g, exact, err, tol);
        }
    }
    return inexact;
}

// Device memory that frees itself.
struct Dev {
    void *p = nullptr;
    explicit Dev(size_t bytes) { CUDA_OK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
    ~Dev() { cudaFree(p); }
    Dev(Dev &&o) noexcept : p(o.p) { o.p = nullptr; }
    Dev(const Dev &) = delete;
    Dev &operator=(const Dev &) = delete;
    template <typename T>
    T *as() const {
        return static_cast<T *>(p);
    }
};
template <typename T>
static Dev upload(const std::vector<T> &v) {
    Dev d(v.size() * sizeof(T));
    if (!v.empty())
        CUDA_OK(cudaMemcpy(d.p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
static std::vector<T> download(const void *p, size_t n) {
    std::vector<T> v(n);
    if (n > 0) CUDA_OK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

// Elements (and scales) of a received row that differ from token t of its source.
static long row_bad(const Case &c, const Tokens &src, int t, const uint8_t *row, const float *sc) {
    size_t rb = c.H * c.elem();
    long bad = 0;
    for (size_t i = 0; i < rb; ++i) bad += row[i] != src.x[t * rb + i];
    for (int b = 0; b < c.sw(); ++b)
        bad += f32_bits(sc[b]) != f32_bits(src.scales[static_cast<size_t>(t) * c.sw() + b]);
    return bad;
}

// ---------------------------------------------------------------------------------------------
// One round: route, dispatch, check the dispatch output, stand-in expert, combine, check.

static void round_(const Case &c, rshmemx_ep_t *ep, uint64_t seed, cudaStream_t st) {
    const int L = c.E / npes, H = c.H, k = c.k, m = c.max_tokens, sw = c.sw();
    const size_t rb = H * c.elem();
    std::vector<Routing> R;
    std::vector<Tokens> tok;
    for (int pe = 0; pe < npes; ++pe) {
        R.push_back(route(c, seed, pe));
        tok.push_back(encode(c, seed, pe, R[pe].T));
    }
    const Routing &mine = R[me];
    const int T = mine.T;
    Dev x = upload(tok[me].x), xs = upload(tok[me].scales), idx = upload(mine.idx),
        w = upload(mine.w);
    // cudaMemcpy from pageable memory may return before its DMA ends, and st does not wait for
    // the legacy default stream: wait for the copies before anything reads them on st.
    CUDA_OK(cudaDeviceSynchronize());
    long before = failures;

    // The wrong-dtype dispatch first: refused, nothing enqueued (every PE makes the same calls).
    if (c.fp8()) {
        EXPECT((c.ll ? rshmemx_ep_ll_dispatch_on_stream(ep, x.p, idx.as<int64_t>(), T, st)
                     : rshmemx_ep_dispatch_on_stream(ep, x.p, idx.as<int64_t>(), w.as<float>(), T,
                                                     st)) == RSHMEM_ERROR_INVALID_VALUE,
               "%s: a dispatch without scales on an fp8 handle was not refused", c.name);
    } else {
        EXPECT((c.ll ? rshmemx_ep_ll_dispatch_fp8_on_stream(ep, x.p, xs.as<float>(),
                                                            idx.as<int64_t>(), T, st)
                     : rshmemx_ep_dispatch_fp8_on_stream(ep, x.p, xs.as<float>(), idx.as<int64_t>(),
                                                         w.as<float>(), T, st)) ==
                   RSHMEM_ERROR_INVALID_VALUE,
               "%s: an fp8 dispatch on a bf16 handle was not refused", c.name);
    }
    if (c.fp8() && c.ll)
        RS_OK(rshmemx_ep_ll_dispatch_fp8_on_stream(ep, x.p, xs.as<float>(), idx.as<int64_t>(), T,
                                                   st));
    else if (c.fp8())
        RS_OK(rshmemx_ep_dispatch_fp8_on_stream(ep, x.p, xs.as<float>(), idx.as<int64_t>(),
                                                w.as<float>(), T, st));
    else if (c.ll)
        RS_OK(rshmemx_ep_ll_dispatch_on_stream(ep, x.p, idx.as<int64_t>(), T, st));
    else
        RS_OK(rshmemx_ep_dispatch_on_stream(ep, x.p, idx.as<int64_t>(), w.as<float>(), T, st));
    int rc = rshmemx_ep_check(ep, st);
    EXPECT(rc == RSHMEM_SUCCESS, "%s: rshmemx_ep_check after the dispatch returned %d", c.name, rc);

    // What this PE receives, in the reference's order: (local expert, source, token, slot).
    struct Recv {
        int l, s, t, j;
    };
    std::vector<Recv> recv;
    for (int s = 0; s < npes; ++s)
        for (int t = 0; t < R[s].T; ++t)
            for (const Slot &sl : slots(R[s], t, k, c.E))
                if (sl.e / L == me) recv.push_back({sl.e % L, s, t, sl.j});

    long long nrows;  // rows of y, in the layout of the dispatch output
    const void *ex;
    const float *esc = nullptr;
    const int64_t *eoff = nullptr;
    const int32_t *ecnt = nullptr;
    long rows_total = 0;
    if (!c.ll) {
        void *xo;
        const int32_t *esrc;
        size_t max_rows = 0, spr = 99;
        RS_OK(rshmemx_ep_output(ep, &xo, &eoff, &esrc, &max_rows));
        RS_OK(rshmemx_ep_output_scales(ep, &esc, &spr));
        EXPECT(static_cast<int>(spr) == sw && (esc != nullptr) == c.fp8(),
               "%s: rshmemx_ep_output_scales gave %p and %zu scales per row, expected %d", c.name,
               static_cast<const void *>(esc), spr, sw);
        ex = xo;
        nrows = static_cast<long long>(max_rows);
        std::vector<int64_t> offs = download<int64_t>(eoff, L + 1);
        size_t rows =
            static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(offs[L], max_rows)));
        EXPECT(offs[L] >= 0 && static_cast<size_t>(offs[L]) <= max_rows,
               "%s: %lld rows, capacity %zu", c.name, static_cast<long long>(offs[L]), max_rows);
        rows_total = static_cast<long>(rows);
        std::vector<int32_t> src = download<int32_t>(esrc, 2 * rows);
        std::vector<uint8_t> xb = download<uint8_t>(xo, rows * rb);
        std::vector<float> sb = download<float>(esc, c.fp8() ? rows * sw : 0);
        size_t at = 0;
        for (int l = 0; l < L; ++l) {
            std::vector<std::pair<int, int>> exp;
            for (const Recv &r : recv)
                if (r.l == l) exp.push_back({r.s, r.t});
            int64_t lo = offs[l], hi = offs[l + 1];
            EXPECT(lo == static_cast<int64_t>(at) && hi - lo == static_cast<int64_t>(exp.size()),
                   "%s: local expert %d: rows %lld..%lld, expected %zu..%zu", c.name, l,
                   static_cast<long long>(lo), static_cast<long long>(hi), at, at + exp.size());
            at += exp.size();
            if (hi < lo || hi > static_cast<int64_t>(rows) ||
                hi - lo != static_cast<int64_t>(exp.size()))
                continue;
            std::vector<std::pair<int, int>> got;
            for (int64_t r = lo; r < hi; ++r) got.push_back({src[2 * r], src[2 * r + 1]});
            for (size_t i = 1; i < got.size(); ++i)
                EXPECT(got[i - 1].first <= got[i].first,
                       "%s: local expert %d: sources not in PE order", c.name, l);
            for (size_t i = 0; i < got.size(); ++i) {
                int s = got[i].first, t = got[i].second;
                if (s < 0 || s >= npes || t < 0 || t >= R[s].T) {
                    EXPECT(false, "%s: row %lld names PE %d token %d", c.name,
                           static_cast<long long>(lo + i), s, t);
                    continue;
                }
                size_t r = lo + i;
                long bad = row_bad(c, tok[s], t, &xb[r * rb], c.fp8() ? &sb[r * sw] : nullptr);
                EXPECT(bad == 0,
                       "%s: row %zu (PE %d token %d): %ld bytes or scales differ from the source's",
                       c.name, r, s, t, bad);
            }
            std::sort(got.begin(), got.end());
            std::sort(exp.begin(), exp.end());
            EXPECT(got == exp,
                   "%s: local expert %d: received %zu rows, not the expected %zu (source, token) "
                   "pairs",
                   c.name, l, got.size(), exp.size());
        }
        // Scales of a handle without the low-latency mode: refused.
        const float *none = nullptr;
        EXPECT(rshmemx_ep_ll_output_scales(ep, &none) == RSHMEM_ERROR_INVALID_VALUE,
               "%s: rshmemx_ep_ll_output_scales on a handle without low_latency was not refused",
               c.name);
    } else {
        void *rx;
        const int32_t *lsrc;
        RS_OK(rshmemx_ep_ll_output(ep, &rx, &ecnt, &lsrc));
        if (c.fp8()) {
            RS_OK(rshmemx_ep_ll_output_scales(ep, &esc));
        } else {
            EXPECT(rshmemx_ep_ll_output_scales(ep, &esc) == RSHMEM_ERROR_INVALID_VALUE,
                   "%s: rshmemx_ep_ll_output_scales on a bf16 handle was not refused", c.name);
            esc = nullptr;
        }
        ex = rx;
        nrows = static_cast<long long>(L) * npes * m;
        std::vector<int32_t> counts = download<int32_t>(ecnt, static_cast<size_t>(L) * npes);
        std::vector<int32_t> src = download<int32_t>(lsrc, static_cast<size_t>(nrows) * 2);
        for (int b = 0; b < L * npes; ++b) {
            int l = b / npes, s = b % npes;
            std::vector<std::pair<int, int>> exp;
            for (const Recv &r : recv)
                if (r.l == l && r.s == s) exp.push_back({r.t, r.j});
            int cnt = counts[b];
            EXPECT(cnt == static_cast<int>(exp.size()),
                   "%s: block (expert %d, PE %d): %d rows, expected %zu", c.name, l, s, cnt,
                   exp.size());
            if (cnt != static_cast<int>(exp.size()) || cnt > m) continue;
            rows_total += cnt;
            size_t first = static_cast<size_t>(b) * m;
            std::vector<uint8_t> xb =
                download<uint8_t>(static_cast<uint8_t *>(rx) + first * rb, cnt * rb);
            std::vector<float> sb =
                download<float>(esc ? esc + first * sw : nullptr, c.fp8() ? cnt * sw : 0);
            std::vector<std::pair<int, int>> got;
            for (int i = 0; i < cnt; ++i) {
                int t = src[2 * (first + i)], j = src[2 * (first + i) + 1];
                got.push_back({t, j});
                if (t < 0 || t >= R[s].T) {
                    EXPECT(false, "%s: block (%d, %d) row %d names token %d", c.name, l, s, i, t);
                    continue;
                }
                long bad = row_bad(c, tok[s], t, &xb[i * rb],
                                   c.fp8() ? &sb[static_cast<size_t>(i) * sw] : nullptr);
                EXPECT(bad == 0, "%s: block (%d, %d) row %d (token %d): %ld bytes or scales differ",
                       c.name, l, s, i, t, bad);
            }
            std::sort(got.begin(), got.end());
            std::sort(exp.begin(), exp.end());
            EXPECT(got == exp, "%s: block (%d, %d): wrong (token, slot) set", c.name, l, s);
        }
    }

    // The stand-in expert on the GPU, into bf16 y in the dispatch output's layout.
    Dev y(static_cast<size_t>(nrows) * H * 2);
    CUDA_OK(cudaMemsetAsync(y.p, 0, static_cast<size_t>(nrows) * H * 2, st));
    if (nrows > 0) {
        stand_in_expert<<<static_cast<unsigned>(std::min<long long>(nrows, 1024)), 256, 0, st>>>(
            ex, esc, sw, c.fp8() ? 1 : 0, H, eoff, ecnt, L, npes, m, me * L, y.as<uint16_t>(),
            nrows);
        CUDA_OK(cudaGetLastError());
    }
    Dev out(static_cast<size_t>(T) * H * 2);
    CUDA_OK(cudaMemsetAsync(out.p, 0xff, static_cast<size_t>(T) * H * 2, st));  // NaN
    // The fp8 dispatch output holds fp8 rows: the combine in place (y NULL) is refused.
    if (c.fp8()) {
        EXPECT((c.ll ? rshmemx_ep_ll_combine_on_stream(ep, nullptr, w.as<float>(), out.p, st)
                     : rshmemx_ep_combine_on_stream(ep, nullptr, out.p, st)) ==
                   RSHMEM_ERROR_INVALID_VALUE,
               "%s: the fp8 combine in place (y NULL) was not refused", c.name);
    }
    if (c.ll)
        RS_OK(rshmemx_ep_ll_combine_on_stream(ep, y.p, w.as<float>(), out.p, st));
    else
        RS_OK(rshmemx_ep_combine_on_stream(ep, y.p, out.p, st));
    CUDA_OK(cudaStreamSynchronize(st));
    std::vector<uint16_t> got = download<uint16_t>(out.p, static_cast<size_t>(T) * H);
    // The low-latency exchange once per (token, PE) or per (token, expert) pair, as the handle
    // took it (the same on every PE).
    int per_pe = 0;
    if (c.ll) RS_OK(rshmemx_ep_ll_per_pe(ep, &per_pe));
    std::vector<float> want = combine_ref(c, mine, tok[me], per_pe != 0);
    double worst_q = 0;
    long inexact = check_out(c, seed, mine, tok[me], got, want, &worst_q);
    printf(
        "PE %d: %s%s seed %llu: T %d, received %ld rows (%d scales each), combine: %ld of %ld "
        "elements not bit-identical to the reference",
        me, c.name, !c.ll ? "" : per_pe ? " (low latency, once per PE)" : " (low latency)",
        static_cast<unsigned long long>(seed), T,
        rows_total, sw, inexact, static_cast<long>(T) * H);
    if (c.fp8()) printf(", worst error against the unquantized sum %g", worst_q);
    printf(", %ld failures\n", failures - before);
}

int main() {
    int devices = 0;
    bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
    if (rshmem_init() != RSHMEM_SUCCESS) return 1;  // rshmem printed why
    me = rshmem_my_pe();
    npes = rshmem_n_pes();
    if (!gpu) {
        printf(
            "moe_dispatch_c: PE %d: no CUDA device: nothing dispatched (needs the GPU backend)\n",
            me);
        rshmem_finalize();
        return 1;
    }
    cudaStream_t st;
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int bf = RSHMEMX_EP_BF16, f8 = RSHMEMX_EP_FP8_E4M3;
    // name, dtype, E, H, k, max_tokens, base, zero_odd, low latency
    const Case cases[] = {
        {"c-bf16-k8", bf, 32, 512, 8, 256, 150, false, false},
        {"c-fp8-k8", f8, 32, 512, 8, 256, 150, false, false},
        {"c-fp8-k1-H128-T0-odd", f8, 32, 128, 1, 128, 100, true, false},
        {"c-fp8-E256-H7168-k8", f8, 256, 7168, 8, 192, 128, false, false},
        {"c-ll-bf16-k8", bf, 32, 256, 8, 192, 120, false, true},
        {"c-ll-fp8-k8", f8, 32, 256, 8, 192, 120, false, true},
        {"c-ll-fp8-k1-H128-T0-odd", f8, 32, 128, 1, 96, 50, true, true},
        {"c-ll-fp8-E256-H7168-k8", f8, 256, 7168, 8, 160, 110, false, true},
    };
    for (const Case &c : cases) {
        if (c.E % npes != 0) {
            printf("PE %d: case %s: skipped (E %d is not a multiple of %d PEs)\n", me, c.name, c.E,
                   npes);
            continue;
        }
        rshmemx_ep_config_t cfg = {static_cast<size_t>(c.E),
                                   static_cast<size_t>(c.H),
                                   static_cast<size_t>(c.k),
                                   static_cast<size_t>(c.max_tokens),
                                   c.dtype,
                                   0,
                                   0,
                                   c.ll ? 1 : 0};
        rshmemx_ep_t *ep = nullptr;
        RS_OK(rshmemx_ep_create(&cfg, &ep));
        long before = failures;
        for (uint64_t seed : {1ull, 2ull}) round_(c, ep, seed, st);
        RS_OK(rshmemx_ep_destroy(ep));
        printf("PE %d: case %s: %s\n", me, c.name, failures == before ? "ok" : "FAILED");
    }
    CUDA_OK(cudaStreamDestroy(st));
    rshmem_barrier_all();
    if (failures == 0)
        printf("moe_dispatch_c: PE %d passed\n", me);
    else
        printf("moe_dispatch_c: PE %d FAILED (%ld failed checks)\n", me, failures);
    fflush(stdout);
    if (rshmem_finalize() != RSHMEM_SUCCESS) return 1;
    return failures == 0 ? 0 : 1;
}
