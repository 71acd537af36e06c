// rshmem device library: collectives over a team (alltoall, broadcast, fcollect, reduce,
// reducescatter) in thread, warp and block scope, and the grid-wide forms that the runtime's
// `*_on_stream` collectives launch.
//
// Semantics (OpenSHMEM 1.5 / NVSHMEM team collectives): every member of the team makes the same
// call with the same arguments (root, nelems) in the same order as its other collectives on the
// team; buffers are symmetric; team PE numbers are team-relative. Like OpenSHMEM, the `dest` of
// every member must be ready to be written when any member calls (rshmem writes into the peers'
// `dest` directly). When the call returns, this PE's `dest` holds the result and its `source`
// may be reused. Reductions may run in place (dest == source); the others need dest and source
// not to overlap. Reduction results are combined in team PE order, so every member gets
// bit-identical values (floats included) and they equal a host reduction in team order.
//
// Algorithms (load/store over NVLink; the group's threads split the bytes):
//   alltoall   push: block j of my source goes straight into team PE j's dest; team sync.
//   fcollect   push: my source goes into every member's dest at my offset; team sync.
//   broadcast  small (group forms, and `algo` 0 of the grid form): the root pushes into every
//              member's dest; team sync. Large (grid form, `algo` 1): scatter + allgather,
//              fused per piece: after a start sync the non-roots split the data into one chunk
//              each; in every block of a non-root half the threads pull pieces of its chunk
//              from the root into its own dest while the other half push the previous piece
//              from there into the other non-roots' dest; team sync. The root sends every
//              byte once, and the links of all members work in parallel with no waiting
//              between the two phases.
//   reduce     two-shot: start sync; team PE i reduces chunk i of the elements, reading it from
//              every member (16-byte loads) and writing the result into every member's dest;
//              team sync. In place is safe: only PE i reads or writes chunk i.
//   reducescatter  start sync; PE i reduces block i from every member into its own dest; sync.
//   alltoalls  push element by element with the strides; team sync.
//   collect    every member stores its count into every member's sync block; team sync; each
//              PE adds up the counts before its own (its offset) and pushes its source there
//              into every member's dest; team sync (teams of at most 128 PEs).
// Every wait is bounded by the device timeout (rshmem_state.timeout_ns) and traps with a
// message naming the call.
#pragma once

#include "rshmem/rma.cuh"
#include "rshmem/team.cuh"

// Reduction operators (values match the host's internal op codes).
#define RSHMEM_OP_SUM 0
#define RSHMEM_OP_PROD 1
#define RSHMEM_OP_MIN 2
#define RSHMEM_OP_MAX 3
#define RSHMEM_OP_AND 4
#define RSHMEM_OP_OR 5
#define RSHMEM_OP_XOR 6
// maxloc on double2 {value, location} (device only; no host op code).
#define RSHMEM_OP_MAXLOC 7

// Reduction types: RSHMEM_FOR_REDUCE_INT_TYPES (every operator) and
// RSHMEM_FOR_REDUCE_FLOAT_TYPES (sum, prod, min, max), from rshmem/type_lists.h (via util.cuh).

namespace rshmem_detail {

// The threads that share a collective's data movement: thread `rank` of `size`.
struct coll_group {
    uint32_t rank;
    uint32_t size;
};

template <class S>
static __device__ __forceinline__ coll_group group_of() {
    return coll_group{S::rank(), S::size()};
}

static __device__ __forceinline__ coll_group grid_group() {
    return coll_group{blockIdx.x * block_threads() + block_thread_id(),
                      gridDim.x * block_threads()};
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_root(const char* call, int root, int n, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: root %d is out of range (the team has PEs 0..%d)\n", call,
               rshmem_state.my_pe, root, n - 1);
    }
    __trap();
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_overlap(const char* call, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: dest and source overlap\n", call, rshmem_state.my_pe);
    }
    __trap();
}

static __device__ __forceinline__ void check_disjoint(const char* call, const void* d, size_t dn,
                                                      const void* s, size_t sn, bool say) {
    uint64_t a = (uint64_t)d, b = (uint64_t)s;
    if (dn != 0 && sn != 0 && a < b + sn && b < a + dn) fail_overlap(call, say);
}

// ---------------------------------------------------------------------------------------------
// Data movement (no synchronization): what each collective's group does between its syncs.

// alltoall and fcollect: block j of my source -> team PE j's dest at my offset. Block j starts
// at src + j * src_stride: nbytes for alltoall (one block per member), 0 for fcollect (the same
// block for everybody). Peers in rotated order so the members do not all write to the same PE
// at once.
static __device__ __forceinline__ void gather_push(const char* call, const rshmem_team_desc& d,
                                                   char* dest, const char* src, size_t nbytes,
                                                   size_t src_stride, coll_group g) {
    const int n = d.size, me = d.my_index;
    team_check_reachable(call, d, g.rank == 0);
    for (int k = 0; k < n; ++k) {
        int j = me + k < n ? me + k : me + k - n;
        char* to = team_peer_nc(d, dest + (size_t)me * nbytes, j);
        copy_bytes(to, src + (size_t)j * src_stride, nbytes, true, g.rank, g.size);
    }
}

// broadcast, root side of the push algorithm: source -> every member's dest (mine too unless
// dest == source).
static __device__ __forceinline__ void bcast_push(const char* call, const rshmem_team_desc& d,
                                                  char* dest, const char* src, size_t nbytes,
                                                  coll_group g) {
    const int n = d.size, me = d.my_index;
    team_check_reachable(call, d, g.rank == 0);
    for (int k = 0; k < n; ++k) {
        int j = me + k < n ? me + k : me + k - n;
        if (j == me && dest == src) continue;
        char* to = team_peer_nc(d, dest, j);
        copy_bytes(to, src, nbytes, true, g.rank, g.size);
    }
}

template <typename T>
struct float_type {
    static constexpr bool value = false;
};
template <>
struct float_type<float> {
    static constexpr bool value = true;
};
template <>
struct float_type<double> {
    static constexpr bool value = true;
};

// alltoalls: element k of my block j (stride sst) -> element me*nelems + k (stride dst) of team PE
// j's dest, for elements of `esize` bytes (1, 2, 4, 8 or 16, the addresses aligned to it).
template <typename E>
static __device__ __forceinline__ void alltoalls_push_t(const rshmem_team_desc& d, char* dest,
                                                        const char* src, size_t dst, size_t sst,
                                                        size_t nelems, coll_group g) {
    const int n = d.size, me = d.my_index;
    const size_t total = (size_t)n * nelems;
    for (size_t i = g.rank; i < total; i += g.size) {
        const int j = (int)(i / nelems);
        const size_t k = i % nelems;
        const E v = ((const E*)src)[((size_t)j * nelems + k) * sst];
        E* to = (E*)team_peer_nc(d, dest, j) + ((size_t)me * nelems + k) * dst;
        *to = v;
    }
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_esize(const char* call, size_t esize, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: element size %llu is not 1, 2, 4, 8 or 16\n", call,
               rshmem_state.my_pe, (unsigned long long)esize);
    }
    __trap();
}

static __device__ __forceinline__ void alltoalls_push(const char* call, const rshmem_team_desc& d,
                                                      char* dest, const char* src, size_t dst,
                                                      size_t sst, size_t nelems, size_t esize,
                                                      coll_group g) {
    team_check_reachable(call, d, g.rank == 0);
    switch (esize) {
        case 1: alltoalls_push_t<uint8_t>(d, dest, src, dst, sst, nelems, g); break;
        case 2: alltoalls_push_t<uint16_t>(d, dest, src, dst, sst, nelems, g); break;
        case 4: alltoalls_push_t<uint32_t>(d, dest, src, dst, sst, nelems, g); break;
        case 8: alltoalls_push_t<uint64_t>(d, dest, src, dst, sst, nelems, g); break;
        case 16: alltoalls_push_t<uint4>(d, dest, src, dst, sst, nelems, g); break;
        default: fail_esize(call, esize, g.rank == 0);
    }
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_collect(const char* call, int n, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: device collect takes teams of at most %d PEs, this one has "
               "%d\n",
               call, rshmem_state.my_pe, RSHMEM_TEAM_SYNC_MAX_COUNTS, n);
    }
    __trap();
}

// collect, first step: my element count into slot `me` of every member's COUNTS words.
static __device__ __forceinline__ void collect_counts_out(const char* call, rshmem_team_t team,
                                                          const rshmem_team_desc& d,
                                                          uint64_t nelems, coll_group g) {
    if (d.size > RSHMEM_TEAM_SYNC_MAX_COUNTS) fail_collect(call, d.size, g.rank == 0);
    team_check_reachable(call, d, g.rank == 0);
    uint64_t* mine = my_team_word(team, RSHMEM_TEAM_SYNC_COUNTS + d.my_index);
    for (int j = (int)g.rank; j < d.size; j += (int)g.size) {
        st_relaxed_sys(team_peer_nc(d, mine, j), nelems);
    }
}

// collect, after a team sync: my offset (elements before mine) and the total, from the counts.
static __device__ __forceinline__ void collect_offsets(rshmem_team_t team,
                                                       const rshmem_team_desc& d, size_t& off,
                                                       size_t& total) {
    off = 0;
    total = 0;
    for (int j = 0; j < d.size; ++j) {
        size_t c = (size_t)ld_relaxed_sys(my_team_word(team, RSHMEM_TEAM_SYNC_COUNTS + j));
        if (j < d.my_index) off += c;
        total += c;
    }
}

// 16-bit floats (half, bfloat16) as the reductions see them: plain 16-bit words (so the
// engine's volatile loads, stores and vector unions work on them as on integers), combined in
// float and rounded to nearest-even back to 16 bits after every step. float has more than twice
// their significand bits plus two (24 >= 2 * 11 + 2 and 2 * 8 + 2), so each step equals the
// 16-bit operation correctly rounded (the double rounding is harmless).
struct f16 {
    uint16_t bits;
};
struct bf16 {
    uint16_t bits;
};
template <>
struct float_type<f16> {
    static constexpr bool value = true;
};
template <>
struct float_type<bf16> {
    static constexpr bool value = true;
};

static __device__ __forceinline__ float widen(f16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}
static __device__ __forceinline__ float widen(bf16 x) {
    return __uint_as_float((uint32_t)x.bits << 16);
}
static __device__ __forceinline__ void narrow(float f, f16& r) {
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
}
static __device__ __forceinline__ void narrow(float f, bf16& r) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = (uint16_t)((u >> 16) | 0x40u);  // NaN stays a (quiet) NaN
    } else {
        r.bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

// maxloc pairs: double2 {x: value, y: location} (NVSHMEM's double2 maxloc).
template <typename T>
struct loc_type {
    static constexpr bool value = false;
};
template <>
struct loc_type<double2> {
    static constexpr bool value = true;
};

template <typename T>
struct is_f16 {
    static constexpr bool value = false;
};
template <>
struct is_f16<f16> {
    static constexpr bool value = true;
};
template <>
struct is_f16<bf16> {
    static constexpr bool value = true;
};

// Loads and stores that bypass the caches for data peers write (volatile; the 16-bit float
// words are structs, which C++ cannot copy from a volatile object).
template <typename T>
static __device__ __forceinline__ T vload(const T* p) {
    if constexpr (is_f16<T>::value) {
        T r;
        r.bits = *(const volatile uint16_t*)p;
        return r;
    } else if constexpr (loc_type<T>::value) {
        T r;
        r.x = ((const volatile double*)p)[0];
        r.y = ((const volatile double*)p)[1];
        return r;
    } else {
        return *(const volatile T*)p;
    }
}
template <typename T>
static __device__ __forceinline__ void vstore(T* p, T v) {
    if constexpr (is_f16<T>::value) {
        *(volatile uint16_t*)p = v.bits;
    } else if constexpr (loc_type<T>::value) {
        ((volatile double*)p)[0] = v.x;
        ((volatile double*)p)[1] = v.y;
    } else {
        *(volatile T*)p = v;
    }
}

// Reduction operators. maxloc: the pair with the larger value; of equal values the one with
// the smaller location (so the result does not depend on the order of the members).
template <typename T, int OP>
static __device__ __forceinline__ T combine(T a, T b) {
    if constexpr (loc_type<T>::value) {
        return b.x > a.x || (b.x == a.x && b.y < a.y) ? b : a;
    } else if constexpr (is_f16<T>::value) {
        T r;
        narrow(combine<float, OP>(widen(a), widen(b)), r);
        return r;
    } else if constexpr (OP == RSHMEM_OP_SUM) return (T)(a + b);
    else if constexpr (OP == RSHMEM_OP_PROD) return (T)(a * b);
    else if constexpr (OP == RSHMEM_OP_MIN) return b < a ? b : a;
    else if constexpr (OP == RSHMEM_OP_MAX) return b > a ? b : a;
    else if constexpr (OP == RSHMEM_OP_AND) return (T)(a & b);
    else if constexpr (OP == RSHMEM_OP_OR) return (T)(a | b);
    else return (T)(a ^ b);
}

template <typename T>
union rvec {
    uint4 v;
    T e[16 / sizeof(T)];
};

// Reduces elements [lo, hi) of `src` over every member (team order) and writes the result to
// `dest` of every member (all_dest) or to mine only. 16-byte vectors when src and dest are
// 16-byte aligned, else element by element.
template <typename T, int OP>
static __device__ __forceinline__ void reduce_range(const char* call, const rshmem_team_desc& d,
                                                    T* dest, const T* src, size_t lo, size_t hi,
                                                    bool all_dest, coll_group g) {
    const int n = d.size;
    team_check_reachable(call, d, g.rank == 0);
    constexpr size_t V = 16 / sizeof(T);
    size_t i = lo;
    if (V > 1 && (((uint64_t)(src + lo) | (uint64_t)(dest + lo)) & 15u) == 0) {
        const size_t nvec = (hi - lo) / V;
        // The members' vectors are loaded FAN at a time before they are combined (in team
        // order), so a thread has several remote loads in flight at once.
        constexpr int FAN = 4;
        for (size_t v = g.rank; v < nvec; v += g.size) {
            const size_t e = lo + v * V;
            rvec<T> acc, x[FAN];
            for (int j0 = 0; j0 < n; j0 += FAN) {
#pragma unroll
                for (int j = 0; j < FAN; ++j) {
                    if (j0 + j < n) x[j].v = __ldcg((const uint4*)team_peer_nc(d, src + e, j0 + j));
                }
                if (j0 == 0) acc = x[0];
#pragma unroll
                for (int j = 0; j < FAN; ++j) {
                    if (j0 + j > 0 && j0 + j < n) {
#pragma unroll
                        for (size_t k = 0; k < V; ++k) acc.e[k] = combine<T, OP>(acc.e[k], x[j].e[k]);
                    }
                }
            }
            if (all_dest) {
                for (int j = 0; j < n; ++j) {
                    __stwb((uint4*)team_peer_nc(d, dest + e, j), acc.v);
                }
            } else {
                *(uint4*)(dest + e) = acc.v;
            }
        }
        i = lo + nvec * V;
    }
    for (size_t e = i + g.rank; e < hi; e += g.size) {
        T acc = vload(team_peer_nc(d, src + e, 0));
        for (int j = 1; j < n; ++j) {
            acc = combine<T, OP>(acc, vload(team_peer_nc(d, src + e, j)));
        }
        if (all_dest) {
            for (int j = 0; j < n; ++j) *team_peer_nc(d, dest + e, j) = acc;
        } else {
            dest[e] = acc;
        }
    }
}

// Chunk of team PE i when `total` elements are split into n chunks, in 16-byte multiples when
// vectors are used (V elements each).
static __device__ __forceinline__ void chunk_of(size_t total, int n, int i, size_t V, size_t& lo,
                                                size_t& hi) {
    size_t units = (total + V - 1) / V;
    size_t per = (units + n - 1) / n;
    lo = (size_t)i * per * V;
    hi = lo + per * V;
    if (lo > total) lo = total;
    if (hi > total) hi = total;
}

// What team PE `me` reduces: reduce (two-shot) takes chunk `me` of the elements from every
// member's source and writes it to every member's dest; reducescatter takes block `me` of every
// member's source into its own dest. Returns the element range and shifts `src` so that
// element e of the range is src[e] on every member.
template <typename T>
static __device__ __forceinline__ void reduce_plan(const rshmem_team_desc& d, const T*& src,
                                                   size_t nelems, bool scatter, size_t& lo,
                                                   size_t& hi) {
    if (scatter) {
        src += (size_t)d.my_index * nelems;
        lo = 0;
        hi = nelems;
    } else {
        chunk_of(nelems, d.size, d.my_index, 16 / sizeof(T), lo, hi);
    }
}

// ---------------------------------------------------------------------------------------------
// The group forms: one group (thread, warp or block) per PE does everything. Every typed call of
// a scope shares one body (bytes for alltoall / fcollect / broadcast, one per canonical element
// type for the reductions). The data collectives are RSHMEM_COLL_ENGINE (a direct call of one
// non-inlined instance without -rdc, inlined with -rdc), the reductions RSHMEM_ENGINE (inlined);
// util.cuh says why.

// alltoall (src_stride = nbytes) and fcollect (src_stride = 0); see gather_push.
template <class S>
RSHMEM_COLL_ENGINE void gather_group(const char* call, rshmem_team_t team,
                                                 void* dest, const void* src, size_t nbytes,
                                                 size_t src_stride) {
    const coll_group g = group_of<S>();
    const rshmem_team_desc d = team_member(call, team, g.rank == 0);
    if (debug()) {
        size_t total = check_bytes(call, nbytes, (size_t)d.size, g.rank == 0);
        size_t src_bytes = src_stride != 0 ? total : nbytes;
        check_sym(call, "dest", dest, total, g.rank == 0);
        check_sym(call, "source", src, src_bytes, g.rank == 0);
        check_disjoint(call, dest, total, src, src_bytes, g.rank == 0);
    }
    gather_push(call, d, (char*)dest, (const char*)src, nbytes, src_stride, g);
    team_sync_coll<S>(call, team);
}

template <class S>
RSHMEM_COLL_ENGINE void bcast_group(const char* call, rshmem_team_t team, void* dest,
                                                const void* src, size_t nbytes, int root) {
    const coll_group g = group_of<S>();
    const rshmem_team_desc d = team_member(call, team, g.rank == 0);
    if (root < 0 || root >= d.size) fail_root(call, root, d.size, g.rank == 0);
    if (debug()) {
        check_sym(call, "dest", dest, nbytes, g.rank == 0);
        check_sym(call, "source", src, nbytes, g.rank == 0);
        if (dest != src) check_disjoint(call, dest, nbytes, src, nbytes, g.rank == 0);
    }
    if (d.my_index == root) bcast_push(call, d, (char*)dest, (const char*)src, nbytes, g);
    team_sync_coll<S>(call, team);
}

template <class S>
RSHMEM_COLL_ENGINE void alltoalls_group(const char* call, rshmem_team_t team,
                                                    void* dest, const void* src, size_t dst,
                                                    size_t sst, size_t nelems, size_t esize) {
    const coll_group g = group_of<S>();
    const rshmem_team_desc d = team_member(call, team, g.rank == 0);
    if (debug() && nelems != 0) {
        size_t last = (size_t)d.size * nelems - 1;
        check_sym(call, "dest", dest, (last * dst + 1) * esize, g.rank == 0);
        check_sym(call, "source", src, (last * sst + 1) * esize, g.rank == 0);
    }
    alltoalls_push(call, d, (char*)dest, (const char*)src, dst, sst, nelems, esize, g);
    team_sync_coll<S>(call, team);
}

template <class S>
RSHMEM_COLL_ENGINE void collect_group(const char* call, rshmem_team_t team,
                                                  void* dest, const void* src, size_t nbytes_el,
                                                  size_t nelems) {
    const coll_group g = group_of<S>();
    const rshmem_team_desc d = team_member(call, team, g.rank == 0);
    if (debug()) check_sym(call, "source", src, nelems * nbytes_el, g.rank == 0);
    collect_counts_out(call, team, d, nelems, g);
    team_sync_coll<S>(call, team);
    size_t off, total;
    collect_offsets(team, d, off, total);
    if (debug()) check_sym(call, "dest", dest, total * nbytes_el, g.rank == 0);
    const size_t nb = nelems * nbytes_el;
    for (int k = 0; k < d.size; ++k) {
        const int j = d.my_index + k < d.size ? d.my_index + k : d.my_index + k - d.size;
        copy_bytes(team_peer_nc(d, (char*)dest + off * nbytes_el, j), (const char*)src, nb, true,
                   g.rank, g.size);
    }
    team_sync_coll<S>(call, team);
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_op(const char* call, int op, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: %d is not a reduction operator for this type\n", call,
               rshmem_state.my_pe, op);
    }
    __trap();
}

// Calls f.template run<OP>() for the run-time operator `op` (the bitwise ones only for integer
// types), so the operator is a compile-time constant inside; traps on any other value.
template <typename T, class F>
static __device__ __forceinline__ void with_op(const char* call, int op, bool say, const F& f) {
    if constexpr (loc_type<T>::value) {
        // maxloc pairs have maxloc only.
        if (op == RSHMEM_OP_MAXLOC) {
            f.template run<RSHMEM_OP_MAXLOC>();
            return;
        }
    } else {
        switch (op) {
            case RSHMEM_OP_SUM: f.template run<RSHMEM_OP_SUM>(); return;
            case RSHMEM_OP_PROD: f.template run<RSHMEM_OP_PROD>(); return;
            case RSHMEM_OP_MIN: f.template run<RSHMEM_OP_MIN>(); return;
            case RSHMEM_OP_MAX: f.template run<RSHMEM_OP_MAX>(); return;
            default: break;
        }
        if constexpr (!float_type<T>::value) {
            switch (op) {
                case RSHMEM_OP_AND: f.template run<RSHMEM_OP_AND>(); return;
                case RSHMEM_OP_OR: f.template run<RSHMEM_OP_OR>(); return;
                case RSHMEM_OP_XOR: f.template run<RSHMEM_OP_XOR>(); return;
                default: break;
            }
        }
    }
    fail_op(call, op, say);
}

template <typename T>
struct reduce_range_fn {
    const char* call;
    const rshmem_team_desc& d;
    T* dest;
    const T* src;
    size_t lo, hi;
    bool all_dest;
    coll_group g;
    template <int OP>
    __device__ __forceinline__ void run() const {
        reduce_range<T, OP>(call, d, dest, src, lo, hi, all_dest, g);
    }
};

// dest[k] = slots[k] OP slots[nelems + k] OP ... (n slots, team order), k split over the group.
template <typename T>
struct combine_slots_fn {
    T* dest;
    const T* slots;
    size_t nelems;
    int n;
    coll_group g;
    template <int OP>
    __device__ __forceinline__ void run() const {
        for (size_t k = g.rank; k < nelems; k += g.size) {
            T acc = slots[k];
            for (int j = 1; j < n; ++j) acc = combine<T, OP>(acc, slots[(size_t)j * nelems + k]);
            dest[k] = acc;
        }
    }
};

// The data movement of reduce (scatter == false) or reducescatter with a run-time operator.
template <typename T>
static __device__ __forceinline__ void reduce_body(const char* call, const rshmem_team_desc& d,
                                                   T* dest, const T* src, size_t nelems, int op,
                                                   bool scatter, coll_group g) {
    size_t lo, hi;
    reduce_plan<T>(d, src, nelems, scatter, lo, hi);
    with_op<T>(call, op, g.rank == 0,
               reduce_range_fn<T>{call, d, dest, src, lo, hi, !scatter, g});
}

// Small reductions in one step: every member pushes its source (reduce) or block j of it (to
// team PE j, reducescatter) into slot `me` of the peers' scratch buffer, one team sync, then each
// PE combines the n slots locally in team order. The buffer alternates with the parity of the
// team's sync epoch: a member can only reach the next use of the same buffer after this PE's
// next sync, which it makes after it has read its scratch.
template <typename T>
static __device__ __forceinline__ bool reduce_fits_oneshot(int n, size_t nelems) {
    return (size_t)n * nelems * sizeof(T) <= RSHMEM_TEAM_SYNC_SCRATCH_BYTES;
}

template <class S, typename T>
static __device__ __forceinline__ void reduce_oneshot(const char* call, rshmem_team_t team,
                                                      const rshmem_team_desc& d, T* dest,
                                                      const T* src, size_t nelems, int op,
                                                      bool scatter) {
    const coll_group g = group_of<S>();
    const int n = d.size, me = d.my_index;
    team_check_reachable(call, d, g.rank == 0);
    const uint64_t parity = *(volatile uint64_t*)my_team_word(team, RSHMEM_TEAM_SYNC_EPOCH) & 1;
    const size_t nb = nelems * sizeof(T);
    const size_t off = RSHMEM_TEAM_SYNC_SCRATCH * 8 + parity * RSHMEM_TEAM_SYNC_SCRATCH_BYTES;
    // Scratch of the members: byte `off` of their sync block (16-byte aligned).
    char* mine = (char*)my_team_word(team, 0) + off;
    // The pushes in 16-byte vectors when the source and the slots (nb apart) allow it: a
    // fraction of the remote stores, and weak ones (the team sync's release orders them), which
    // a single thread issues without waiting on each in turn.
    if (nb % 16 == 0 && ((uint64_t)src & 15u) == 0) {
        const uint32_t nv = (uint32_t)(nb / 16);
        const char* from = (const char*)src;
        for (int j = 0; j < n; ++j, from += scatter ? nb : 0) {
            // Team PE j's scratch slot `me`.
            uint4* to = (uint4*)(team_peer_nc(d, mine, j) + (size_t)me * nb);
            for (uint32_t k = g.rank; k < nv; k += g.size) __stwb(to + k, ((const uint4*)from)[k]);
        }
    } else {
        for (size_t i = g.rank; i < (size_t)n * nelems; i += g.size) {
            const int j = (int)(i / nelems);
            const size_t k = i % nelems;
            T v = scatter ? src[(size_t)j * nelems + k] : src[k];
            // Team PE j's scratch slot `me`.
            T* to = (T*)(team_peer_nc(d, mine, j) + (size_t)me * nb) + k;
            vstore(to, v);
        }
    }
    team_sync_coll<S>(call, team);
    const T* slots = (const T*)mine;
    with_op<T>(call, op, g.rank == 0, combine_slots_fn<T>{dest, slots, nelems, n, g});
    S::sync();
}

template <class S, typename T>
RSHMEM_ENGINE void reduce_group(const char* call, rshmem_team_t team, T* dest,
                                                 const T* src, size_t nelems, int op,
                                                 bool scatter) {
    const coll_group g = group_of<S>();
    const rshmem_team_desc d = team_member(call, team, g.rank == 0);
    if (debug()) {
        size_t nb = check_bytes(call, nelems, sizeof(T), g.rank == 0);
        size_t sn = scatter ? check_bytes(call, nb, (size_t)d.size, g.rank == 0) : nb;
        check_sym(call, "dest", dest, nb, g.rank == 0);
        check_sym(call, "source", src, sn, g.rank == 0);
        if (scatter || (const T*)dest != src) check_disjoint(call, dest, nb, src, sn, g.rank == 0);
    }
    if (reduce_fits_oneshot<T>(d.size, nelems)) {
        reduce_oneshot<S, T>(call, team, d, dest, src, nelems, op, scatter);
        return;
    }
    team_sync_coll<S>(call, team);  // every member's source is ready
    reduce_body<T>(call, d, dest, src, nelems, op, scatter, g);
    team_sync_coll<S>(call, team);
}

// Hides a constant from the optimizer, so a call site does not get its own specialized copy of
// the group function: one body per scope and type serves every operator. (Written when the
// group function was not inlined; now that it is, the operator's constant could be let through.)
static __device__ __forceinline__ int opaque(int v) {
    int r;
    asm("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
    return r;
}

// The canonical type a reduction of T runs on: the fixed-width integer of its size and
// signedness, or the float type itself.
template <typename T>
struct canon {
    typedef T type;
};
#define RSHMEM_CANON(T, C)                                                                       \
    template <>                                                                                  \
    struct canon<T> {                                                                            \
        typedef C type;                                                                          \
    };
RSHMEM_CANON(char, int8_t)
RSHMEM_CANON(signed char, int8_t)
RSHMEM_CANON(short, int16_t)
RSHMEM_CANON(int, int32_t)
RSHMEM_CANON(long, int64_t)
RSHMEM_CANON(long long, int64_t)
RSHMEM_CANON(unsigned char, uint8_t)
RSHMEM_CANON(unsigned short, uint16_t)
RSHMEM_CANON(unsigned int, uint32_t)
RSHMEM_CANON(unsigned long, uint64_t)
RSHMEM_CANON(unsigned long long, uint64_t)
#if defined(__CUDA_FP16_TYPES_EXIST__)
RSHMEM_CANON(__half, f16)
#endif
#if defined(__CUDA_BF16_TYPES_EXIST__)
RSHMEM_CANON(__nv_bfloat16, bf16)
#endif
#undef RSHMEM_CANON

// ---------------------------------------------------------------------------------------------
// The grid forms: every block of one kernel launch takes part (launched by the runtime's
// *_on_stream collectives). They never make a block wait for another block that may not be
// running (docs/collectives.md, "Progress without co-residency"): a launch of several blocks
// waits for nobody at its start — when the collective needs a start sync (its blocks read the
// members' sources), the runtime enqueues a one-block sync kernel before it on the stream — and
// only the last block to finish, when every other block of its grid has exited, makes the
// closing team sync (waiting for the last blocks of the members, which in turn wait for nobody
// but their own, already finished, grids). Each block reports completion on the ARRIVE word;
// the last one resets it and advances KSEQ (the per-team launch sequence number `seq`).

struct grid_coll {
    const char* call;
    rshmem_team_t team;
    rshmem_team_desc d;
    uint64_t seq;

    __device__ __forceinline__ grid_coll(const char* c, rshmem_team_t t) : call(c), team(t) {
        d = team_member(call, team, block_thread_id() == 0 && blockIdx.x == 0);
        seq = *(volatile uint64_t*)my_team_word(team, RSHMEM_TEAM_SYNC_KSEQ) + 1;
    }

    // Start sync (every member has called: its source is ready). A single-block launch makes
    // it itself; a launch of several blocks must not wait here (a block of it may hold an SM
    // that the block it would wait for needs), so the runtime has made it with a one-block
    // sync kernel (rshmem_internal_team_sync) before this launch on the same stream.
    __device__ __forceinline__ void start() {
        if (gridDim.x == 1) team_sync<block_scope>(call, team);
    }

    // Closing sync after every block's part (releases all blocks' stores).
    __device__ __forceinline__ void finish() {
        uint64_t* kseq = my_team_word(team, RSHMEM_TEAM_SYNC_KSEQ);
        if (gridDim.x == 1) {
            team_sync<block_scope>(call, team);
            if (block_thread_id() == 0) *(volatile uint64_t*)kseq = seq;
            return;
        }
        __shared__ int last;
        __syncthreads();
        if (block_thread_id() == 0) {
            fence_acq_rel_sys();
            unsigned long long old =
                atomicAdd((unsigned long long*)my_team_word(team, RSHMEM_TEAM_SYNC_ARRIVE), 1ull);
            last = old == (unsigned long long)(gridDim.x - 1);
            if (last) fence_acq_rel_sys();
        }
        __syncthreads();
        if (!last) return;
        team_sync<block_scope>(call, team);
        if (block_thread_id() == 0) {
            *(volatile uint64_t*)my_team_word(team, RSHMEM_TEAM_SYNC_ARRIVE) = 0;
            *(volatile uint64_t*)kseq = seq;
        }
    }
};

// The grid form of the push collectives: the blocks split over the members, so every link is
// busy at once: `local_blocks` blocks copy this PE's own part (a local copy is fast), the others
// split round robin over the n - 1 peers; with too few blocks, all blocks serve the members one
// after another. `target(j, to, from)` gives (dest on member j, source), false to skip j.
template <class F>
static __device__ __forceinline__ void push_split(const char* call, const rshmem_team_desc& d,
                                                  size_t nbytes, uint32_t local_blocks, F target) {
    const int n = d.size, me = d.my_index;
    const uint32_t tid = block_thread_id(), nt = block_threads();
    team_check_reachable(call, d, tid == 0 && blockIdx.x == 0);
    const uint32_t G = gridDim.x;
    if (local_blocks == 0) local_blocks = 1;
    if (n == 1 || G < (uint32_t)n || G <= local_blocks + (uint32_t)(n - 2)) {
        const coll_group g = grid_group();
        for (int k = 0; k < n; ++k) {
            const int j = me + k < n ? me + k : me + k - n;
            char* to;
            const char* from;
            if (target(j, to, from)) copy_bytes(to, from, nbytes, true, g.rank, g.size);
        }
        return;
    }
    // Blocks [0, local_blocks) copy my own block; the others split over the n - 1 peers.
    uint32_t k, r, cnt;
    if (blockIdx.x < local_blocks) {
        k = 0;
        r = blockIdx.x;
        cnt = local_blocks;
    } else {
        const uint32_t b = blockIdx.x - local_blocks, rem = G - local_blocks, m = (uint32_t)n - 1;
        k = 1 + b % m;
        r = b / m;
        cnt = (rem - (k - 1) + m - 1) / m;
    }
    const int j = me + (int)k < n ? me + (int)k : me + (int)k - n;
    char* to;
    const char* from;
    if (target(j, to, from)) copy_bytes(to, from, nbytes, true, r * nt + tid, cnt * nt);
}

// Large broadcast (see the top of the file): scatter + allgather, fused per piece. The
// non-roots split the data into m = n - 1 chunks, one each; every block of a non-root takes an
// equal share of its chunk and walks it `piece_bytes` at a time as a two-stage pipeline: in step
// s the block's first half of threads pulls piece s from the root into this PE's dest while the
// second half pushes piece s - 1 from there into the other non-roots' dest. The root sends
// every byte once, every non-root receives every byte once, the pulls and pushes of all members
// overlap, and nobody waits for anybody until the closing team sync (which publishes the
// pushes).
static __device__ __forceinline__ void bcast_pipelined(grid_coll& c, char* dest, const char* src,
                                                       size_t nbytes, int root,
                                                       size_t piece_bytes) {
    const rshmem_team_desc& d = c.d;
    const int n = d.size, me = d.my_index;
    const uint32_t tid = block_thread_id(), nt = block_threads();
    if (me == root) {
        if (dest != src) {
            coll_group g = grid_group();
            copy_bytes(dest, src, nbytes, false, g.rank, g.size);
        }
        return;
    }
    team_check_reachable(c.call, d, tid == 0 && blockIdx.x == 0);
    const int m = n - 1;
    const int q = me < root ? me : me - 1;
    const size_t chunk = ((nbytes + m - 1) / m + 15) & ~(size_t)15;
    if (piece_bytes < 1024) piece_bytes = 1024;
    const size_t cbase = (size_t)q * chunk;
    size_t cend = cbase + chunk;
    if (cend > nbytes) cend = nbytes;
    if (cbase >= cend) return;
    const size_t share = ((cend - cbase + gridDim.x - 1) / gridDim.x + 15) & ~(size_t)15;
    size_t lo = cbase + (size_t)blockIdx.x * share, hi = lo + share;
    if (hi > cend) hi = cend;
    if (lo >= hi) return;
    const char* root_src = team_peer_nc(d, src, root);
    // Threads [0, half) pull, [half, nt) push; a block too small to split does both in turn.
    const uint32_t half = nt >= 64 ? nt / 2 : nt;
    const bool split = half != nt;
    const bool pulls = !split || tid < half, pushes = !split || tid >= half;
    const uint32_t rank = split && tid >= half ? tid - half : tid;
    const uint32_t size = split ? (tid < half ? half : nt - half) : nt;
    const size_t steps = (hi - lo + piece_bytes - 1) / piece_bytes;
    for (size_t s = 0; s <= steps; ++s) {
        if (pushes && s > 0) {
            const size_t off = lo + (s - 1) * piece_bytes;
            const size_t len = hi - off < piece_bytes ? hi - off : piece_bytes;
            for (int k = 1; k < m; ++k) {
                const int cq = q + k < m ? q + k : q + k - m;
                const int peer = cq < root ? cq : cq + 1;
                copy_bytes(team_peer_nc(d, dest, peer) + off, dest + off, len, true, rank, size);
            }
        }
        if (pulls && s < steps) {
            const size_t off = lo + s * piece_bytes;
            const size_t len = hi - off < piece_bytes ? hi - off : piece_bytes;
            copy_bytes(dest + off, root_src + off, len, false, rank, size);
        }
        __syncthreads();
    }
}

}  // namespace rshmem_detail

// ---------------------------------------------------------------------------------------------
// Public device API (NVSHMEM-style names). Returns 0; misuse traps with a message.

#define RSHMEM_COLL_SCOPES(X)                                                                    \
    X(, rshmem_detail::thread_scope)                                                             \
    X(_warp, rshmem_detail::warp_scope)                                                          \
    X(_block, rshmem_detail::block_scope)

#define RSHMEM_COLL_MEM(SUFFIX, SCOPE)                                                           \
    static __device__ __forceinline__ int rshmem_alltoallmem##SUFFIX(                            \
        rshmem_team_t team, void* dest, const void* source, size_t nbytes) {                     \
        rshmem_detail::gather_group<SCOPE>("rshmem_alltoallmem" #SUFFIX, team, dest, source,     \
                                           nbytes, nbytes);                                      \
        return 0;                                                                                \
    }                                                                                            \
    static __device__ __forceinline__ int rshmem_fcollectmem##SUFFIX(                            \
        rshmem_team_t team, void* dest, const void* source, size_t nbytes) {                     \
        rshmem_detail::gather_group<SCOPE>("rshmem_fcollectmem" #SUFFIX, team, dest, source,     \
                                           nbytes, 0);                                           \
        return 0;                                                                                \
    }                                                                                            \
    static __device__ __forceinline__ int rshmem_broadcastmem##SUFFIX(                           \
        rshmem_team_t team, void* dest, const void* source, size_t nbytes, int root) {           \
        rshmem_detail::bcast_group<SCOPE>("rshmem_broadcastmem" #SUFFIX, team, dest, source,     \
                                          nbytes, root);                                         \
        return 0;                                                                                \
    }
RSHMEM_COLL_SCOPES(RSHMEM_COLL_MEM)

// rshmem_collectmem (+ _warp, _block): every member's nbytes (may differ) back to back in team
// order into every member's dest.
#define RSHMEM_COLLECT_MEM(SUFFIX, SCOPE)                                                        \
    static __device__ __forceinline__ int rshmem_collectmem##SUFFIX(                             \
        rshmem_team_t team, void* dest, const void* source, size_t nbytes) {                     \
        rshmem_detail::collect_group<SCOPE>("rshmem_collectmem" #SUFFIX, team, dest, source, 1,  \
                                            nbytes);                                             \
        return 0;                                                                                \
    }
RSHMEM_COLL_SCOPES(RSHMEM_COLLECT_MEM)
#undef RSHMEM_COLLECT_MEM
#undef RSHMEM_COLL_MEM

// rshmem_TYPE_alltoall / fcollect / broadcast (+ _warp, _block): nelems elements per PE.
#define RSHMEM_COLL_TYPED_SCOPE(NAME, T, SUFFIX, SCOPE)                                          \
    static __device__ __forceinline__ int rshmem_##NAME##_alltoall##SUFFIX(                      \
        rshmem_team_t team, T* dest, const T* source, size_t nelems) {                           \
        const size_t nbytes = rshmem_detail::check_bytes("rshmem_" #NAME "_alltoall" #SUFFIX,   \
                                                         nelems, sizeof(T), true);               \
        rshmem_detail::gather_group<SCOPE>("rshmem_" #NAME "_alltoall" #SUFFIX, team, dest,      \
                                           source, nbytes, nbytes);                              \
        return 0;                                                                                \
    }                                                                                            \
    static __device__ __forceinline__ int rshmem_##NAME##_fcollect##SUFFIX(                      \
        rshmem_team_t team, T* dest, const T* source, size_t nelems) {                           \
        rshmem_detail::gather_group<SCOPE>(                                                      \
            "rshmem_" #NAME "_fcollect" #SUFFIX, team, dest, source,                             \
            rshmem_detail::check_bytes("rshmem_" #NAME "_fcollect" #SUFFIX, nelems, sizeof(T),   \
                                       true),                                                    \
            0);                                                                                  \
        return 0;                                                                                \
    }                                                                                            \
    static __device__ __forceinline__ int rshmem_##NAME##_collect##SUFFIX(                       \
        rshmem_team_t team, T* dest, const T* source, size_t nelems) {                           \
        rshmem_detail::collect_group<SCOPE>("rshmem_" #NAME "_collect" #SUFFIX, team, dest,      \
                                            source, sizeof(T), nelems);                          \
        return 0;                                                                                \
    }                                                                                            \
    static __device__ __forceinline__ int rshmem_##NAME##_alltoalls##SUFFIX(                     \
        rshmem_team_t team, T* dest, const T* source, ptrdiff_t dst, ptrdiff_t sst,              \
        size_t nelems) {                                                                         \
        rshmem_detail::alltoalls_group<SCOPE>("rshmem_" #NAME "_alltoalls" #SUFFIX, team, dest,  \
                                              source, (size_t)dst, (size_t)sst, nelems,          \
                                              sizeof(T));                                        \
        return 0;                                                                                \
    }                                                                                            \
    static __device__ __forceinline__ int rshmem_##NAME##_broadcast##SUFFIX(                     \
        rshmem_team_t team, T* dest, const T* source, size_t nelems, int root) {                 \
        rshmem_detail::bcast_group<SCOPE>(                                                       \
            "rshmem_" #NAME "_broadcast" #SUFFIX, team, dest, source,                            \
            rshmem_detail::check_bytes("rshmem_" #NAME "_broadcast" #SUFFIX, nelems, sizeof(T),  \
                                       true),                                                    \
            root);                                                                               \
        return 0;                                                                                \
    }
#define RSHMEM_COLL_TYPED(NAME, T)                                                               \
    RSHMEM_COLL_TYPED_SCOPE(NAME, T, , rshmem_detail::thread_scope)                              \
    RSHMEM_COLL_TYPED_SCOPE(NAME, T, _warp, rshmem_detail::warp_scope)                           \
    RSHMEM_COLL_TYPED_SCOPE(NAME, T, _block, rshmem_detail::block_scope)
RSHMEM_FOR_RMA_TYPES(RSHMEM_COLL_TYPED)
#undef RSHMEM_COLL_TYPED
#undef RSHMEM_COLL_TYPED_SCOPE

// rshmem_TYPE_OP_reduce / rshmem_TYPE_OP_reducescatter (+ _warp, _block).
#define RSHMEM_REDUCE_ONE(NAME, T, OPNAME, OP, SUFFIX, SCOPE)                                    \
    static __device__ __forceinline__ int rshmem_##NAME##_##OPNAME##_reduce##SUFFIX(             \
        rshmem_team_t team, T* dest, const T* source, size_t nreduce) {                          \
        typedef typename rshmem_detail::canon<T>::type C;                                        \
        rshmem_detail::reduce_group<SCOPE, C>("rshmem_" #NAME "_" #OPNAME "_reduce" #SUFFIX,     \
                                              team, (C*)dest, (const C*)source, nreduce,         \
                                              rshmem_detail::opaque(OP), false);                                            \
        return 0;                                                                                \
    }                                                                                            \
    static __device__ __forceinline__ int rshmem_##NAME##_##OPNAME##_reducescatter##SUFFIX(      \
        rshmem_team_t team, T* dest, const T* source, size_t nreduce) {                          \
        typedef typename rshmem_detail::canon<T>::type C;                                        \
        rshmem_detail::reduce_group<SCOPE, C>(                                                   \
            "rshmem_" #NAME "_" #OPNAME "_reducescatter" #SUFFIX, team, (C*)dest,                \
            (const C*)source, nreduce, rshmem_detail::opaque(OP), true);                                                \
        return 0;                                                                                \
    }
#define RSHMEM_REDUCE_SCOPES(NAME, T, OPNAME, OP)                                                \
    RSHMEM_REDUCE_ONE(NAME, T, OPNAME, OP, , rshmem_detail::thread_scope)                        \
    RSHMEM_REDUCE_ONE(NAME, T, OPNAME, OP, _warp, rshmem_detail::warp_scope)                     \
    RSHMEM_REDUCE_ONE(NAME, T, OPNAME, OP, _block, rshmem_detail::block_scope)
#define RSHMEM_REDUCE_ARITH(NAME, T)                                                             \
    RSHMEM_REDUCE_SCOPES(NAME, T, sum, RSHMEM_OP_SUM)                                            \
    RSHMEM_REDUCE_SCOPES(NAME, T, prod, RSHMEM_OP_PROD)                                          \
    RSHMEM_REDUCE_SCOPES(NAME, T, min, RSHMEM_OP_MIN)                                            \
    RSHMEM_REDUCE_SCOPES(NAME, T, max, RSHMEM_OP_MAX)
#define RSHMEM_REDUCE_BITWISE(NAME, T)                                                           \
    RSHMEM_REDUCE_SCOPES(NAME, T, and, RSHMEM_OP_AND)                                            \
    RSHMEM_REDUCE_SCOPES(NAME, T, or, RSHMEM_OP_OR)                                              \
    RSHMEM_REDUCE_SCOPES(NAME, T, xor, RSHMEM_OP_XOR)
RSHMEM_FOR_REDUCE_INT_TYPES(RSHMEM_REDUCE_ARITH)
RSHMEM_FOR_REDUCE_INT_TYPES(RSHMEM_REDUCE_BITWISE)
RSHMEM_FOR_REDUCE_FLOAT_TYPES(RSHMEM_REDUCE_ARITH)
// 16-bit floats: rshmem_half_OP_reduce / rshmem_bfloat16_OP_reduce (+ reducescatter, _warp,
// _block) for OP sum, prod, min, max, when the module has CUDA's 16-bit float types (it included
// <cuda_fp16.h> / <cuda_bf16.h> before this header). Each step is the 16-bit operation
// correctly rounded (computed in float; see f16 above).
#if defined(__CUDA_FP16_TYPES_EXIST__)
RSHMEM_REDUCE_ARITH(half, __half)
#endif
#if defined(__CUDA_BF16_TYPES_EXIST__)
RSHMEM_REDUCE_ARITH(bfloat16, __nv_bfloat16)
#endif
// maxloc: rshmem_double2_maxloc_reduce (+ reducescatter, _warp, _block) on double2 pairs
// {x: value, y: location}: element-wise, the pair with the largest value, of equal values the
// one with the smallest location (NVSHMEM has nvshmemx_double2_maxloc_reduce_block with
// nreduce 1; here any nreduce and every scope).
RSHMEM_REDUCE_SCOPES(double2, double2, maxloc, RSHMEM_OP_MAXLOC)
#undef RSHMEM_REDUCE_ARITH
#undef RSHMEM_REDUCE_BITWISE
#undef RSHMEM_REDUCE_SCOPES
#undef RSHMEM_REDUCE_ONE
