// Register budget of the device library: one kernel per call and scope, written like the kernels
// of NVSHMEM's perftests (a loop of calls around the benchmark's own arithmetic, 1024 threads per
// block, no __launch_bounds__), with NVSHMEM's names so that the same file also builds against
// NVSHMEM's own headers for comparison. device-lib/tests/regbudget compiles it with
// `ptxas -v` and fails when a kernel uses more registers than its budget in
// device-lib/tests/regbudget.txt; scripts/devlib-gpu-check launches every kernel with 1024
// threads on a GPU (after rshmemx_collective_launch_query_gridsize says how many blocks fit).
//
// Not a benchmark: the kernels are launched with arguments that make every call a no-op or a
// short loop (iter = 0 for the waits, nelems small), see scripts/devlib-gpu-check.
#include <nvshmem.h>
#include <nvshmemx.h>

#define RB_KERNEL extern "C" __global__ void

// ---------------------------------------------------------------------------------------------
// RMA, shaped like shmem_put_bw / shmem_get_bw (bw_thread, bw_warp, bw_block): each block (warp,
// thread) moves its share of len doubles, then a grid-wide counter and a quiet.

#define RB_BW(NAME, CALL_T, CALL_W, CALL_B)                                                        \
    RB_KERNEL rb_##NAME##_thread(double* data, volatile unsigned* counter, size_t len, int pe,     \
                                 int iter) {                                                       \
        const int peer = !pe;                                                                      \
        const size_t per_block = len / gridDim.x;                                                  \
        const size_t per_thread = per_block / blockDim.x;                                          \
        double* p = data + blockIdx.x * per_block + threadIdx.x * per_thread;                      \
        for (int i = 0; i < iter; i++) {                                                           \
            CALL_T(p, p, per_thread, peer);                                                        \
            __syncthreads();                                                                       \
            if (threadIdx.x == 0) {                                                                \
                __threadfence();                                                                   \
                unsigned c = atomicInc((unsigned*)counter, 0xffffffffu);                           \
                if (c == gridDim.x * (i + 1) - 1) counter[1] += 1;                                 \
                while (counter[1] != (unsigned)i + 1) {                                            \
                }                                                                                  \
            }                                                                                      \
            __syncthreads();                                                                       \
        }                                                                                          \
        if (threadIdx.x == 0) nvshmem_quiet();                                                     \
    }                                                                                              \
    RB_KERNEL rb_##NAME##_warp(double* data, volatile unsigned* counter, size_t len, int pe,       \
                               int iter) {                                                         \
        const int peer = !pe;                                                                      \
        const int warps = blockDim.x / 32;                                                         \
        const size_t per_block = len / gridDim.x;                                                  \
        const size_t per_warp = per_block / warps;                                                 \
        double* p = data + blockIdx.x * per_block + (threadIdx.x / 32) * per_warp;                 \
        for (int i = 0; i < iter; i++) {                                                           \
            CALL_W(p, p, per_warp, peer);                                                          \
            __syncthreads();                                                                       \
            if (threadIdx.x == 0) {                                                                \
                __threadfence();                                                                   \
                unsigned c = atomicInc((unsigned*)counter, 0xffffffffu);                           \
                if (c == gridDim.x * (i + 1) - 1) counter[1] += 1;                                 \
                while (counter[1] != (unsigned)i + 1) {                                            \
                }                                                                                  \
            }                                                                                      \
            __syncthreads();                                                                       \
        }                                                                                          \
        if (threadIdx.x == 0) nvshmem_quiet();                                                     \
    }                                                                                              \
    RB_KERNEL rb_##NAME##_block(double* data, volatile unsigned* counter, size_t len, int pe,      \
                                int iter) {                                                        \
        const int peer = !pe;                                                                      \
        const size_t per_block = len / gridDim.x;                                                  \
        double* p = data + blockIdx.x * per_block;                                                 \
        for (int i = 0; i < iter; i++) {                                                           \
            CALL_B(p, p, per_block, peer);                                                         \
            __syncthreads();                                                                       \
            if (threadIdx.x == 0) {                                                                \
                __threadfence();                                                                   \
                unsigned c = atomicInc((unsigned*)counter, 0xffffffffu);                           \
                if (c == gridDim.x * (i + 1) - 1) counter[1] += 1;                                 \
                while (counter[1] != (unsigned)i + 1) {                                            \
                }                                                                                  \
            }                                                                                      \
            __syncthreads();                                                                       \
        }                                                                                          \
        if (threadIdx.x == 0) nvshmem_quiet();                                                     \
    }

#if defined(RB_ALL) || defined(RB_GROUP_put)
RB_BW(put_nbi, nvshmem_double_put_nbi, nvshmemx_double_put_nbi_warp,
      nvshmemx_double_put_nbi_block)
RB_BW(put, nvshmem_double_put, nvshmemx_double_put_warp, nvshmemx_double_put_block)
#endif

#if defined(RB_ALL) || defined(RB_GROUP_get)
RB_BW(get_nbi, nvshmem_double_get_nbi, nvshmemx_double_get_nbi_warp,
      nvshmemx_double_get_nbi_block)
RB_BW(get, nvshmem_double_get, nvshmemx_double_get_warp, nvshmemx_double_get_block)
#endif


// putmem_signal, shaped like shmem_put_signal_ping_pong's kernels: put with signal, wait for the
// peer's.
#if defined(RB_ALL) || defined(RB_GROUP_put_signal)
#define RB_PUT_SIGNAL(SUFFIX, SCOPE_OK)                                                            \
    RB_KERNEL rb_put_signal##SUFFIX(char* data, uint64_t* sig, size_t nbytes, int pe,              \
                                    int iter) {                                                    \
        const int peer = !pe;                                                                      \
        if (!(SCOPE_OK)) return;                                                                   \
        for (int i = 0; i < iter; i++) {                                                           \
            nvshmemx_putmem_signal_nbi##SUFFIX(data, data, nbytes, sig, (uint64_t)i + 1,           \
                                               NVSHMEM_SIGNAL_SET, peer);                          \
            if (threadIdx.x == 0) nvshmem_signal_wait_until(sig, NVSHMEM_CMP_EQ, i + 1);           \
            __syncthreads();                                                                       \
        }                                                                                          \
    }
#define nvshmemx_putmem_signal_nbi_thread nvshmem_putmem_signal_nbi
RB_PUT_SIGNAL(_thread, blockIdx.x == 0 && threadIdx.x == 0)
RB_PUT_SIGNAL(_warp, blockIdx.x == 0 && threadIdx.x < 32)
RB_PUT_SIGNAL(_block, blockIdx.x == 0)
#undef nvshmemx_putmem_signal_nbi_thread
#endif


// ---------------------------------------------------------------------------------------------
// p and g, shaped like shmem_p_latency (p_latency) and shmem_g_latency (pull), and like
// shmem_p_bw / shmem_g_bw.

#if defined(RB_ALL) || defined(RB_GROUP_p)
RB_KERNEL rb_p_latency(int* data, int len, int pe, int iter) {
    const int peer = !pe;
    for (int i = 0; i < iter; i++) {
        for (int j = threadIdx.x; j < len; j += blockDim.x) nvshmem_int_p(data + j, data[j], peer);
        __syncthreads();
        if (threadIdx.x == 0) nvshmem_quiet();
        __syncthreads();
    }
}

RB_KERNEL rb_p_bw(double* data, int len, int pe, int iter) {
    const int peer = !pe;
    const int stride = gridDim.x * blockDim.x;
    for (int i = 0; i < iter; i++) {
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < len; j += stride) {
            nvshmem_double_p(data + j, (double)j, peer);
        }
    }
    if (threadIdx.x == 0) nvshmem_quiet();
}
#endif

#if defined(RB_ALL) || defined(RB_GROUP_g)
RB_KERNEL rb_g_latency(int* data, int len, int pe, int iter) {
    const int peer = !pe;
    for (int i = 0; i < iter; i++) {
        if (!pe) {
            for (int j = threadIdx.x; j < len; j += blockDim.x) data[j] = nvshmem_int_g(data + j, peer);
            __syncthreads();
        }
    }
}

RB_KERNEL rb_g_bw(double* data, double* out, int len, int pe, int iter) {
    const int peer = !pe;
    const int stride = gridDim.x * blockDim.x;
    double sum = 0;
    for (int i = 0; i < iter; i++) {
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < len; j += stride) {
            sum += nvshmem_double_g(data + j, peer);
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
#endif

// ---------------------------------------------------------------------------------------------
// Atomics, shaped like shmem_atomic_bw / shmem_atomic_latency: every thread of the grid applies
// the operation to its own element of the peer.

#if defined(RB_ALL) || defined(RB_GROUP_amo)
#define RB_AMO(NAME, EXPR)                                                                         \
    RB_KERNEL rb_amo_##NAME(uint64_t* data, uint64_t* out, int pe, int iter) {                     \
        const int peer = !pe;                                                                      \
        const int idx = blockIdx.x * blockDim.x + threadIdx.x;                                     \
        uint64_t* d = data + idx;                                                                  \
        uint64_t acc = 0;                                                                          \
        for (int i = 0; i < iter; i++) {                                                           \
            EXPR;                                                                                  \
        }                                                                                          \
        out[idx] = acc;                                                                            \
    }

RB_AMO(fetch_add, acc += nvshmem_uint64_atomic_fetch_add(d, 1, peer))
RB_AMO(add, nvshmem_uint64_atomic_add(d, 1, peer))
RB_AMO(fetch_inc, acc += nvshmem_uint64_atomic_fetch_inc(d, peer))
RB_AMO(inc, nvshmem_uint64_atomic_inc(d, peer))
RB_AMO(compare_swap, acc += nvshmem_uint64_atomic_compare_swap(d, acc, acc + 1, peer))
RB_AMO(swap, acc += nvshmem_uint64_atomic_swap(d, acc, peer))
RB_AMO(set, nvshmem_uint64_atomic_set(d, acc + i, peer))
RB_AMO(fetch, acc += nvshmem_uint64_atomic_fetch(d, peer))
RB_AMO(fetch_and, acc += nvshmem_uint64_atomic_fetch_and(d, acc, peer))
RB_AMO(or, nvshmem_uint64_atomic_or(d, acc | 1, peer))
RB_AMO(fetch_xor, acc += nvshmem_uint64_atomic_fetch_xor(d, acc, peer))
#endif


// ---------------------------------------------------------------------------------------------
// Signals and point-to-point synchronization, shaped like shmem_signal_ping_pong_latency and
// shmem_put_ping_pong_latency: thread 0 of block 0 plays ping-pong.

#if defined(RB_ALL) || defined(RB_GROUP_sync)
RB_KERNEL rb_signal_op(uint64_t* sig, int pe, int iter) {
    const int peer = !pe;
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (int i = 0; i < iter; i++) {
        if (pe == 0) {
            nvshmemx_signal_op(sig, i + 1, NVSHMEM_SIGNAL_SET, peer);
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_EQ, i + 1);
        } else {
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_EQ, i + 1);
            nvshmemx_signal_op(sig, i + 1, NVSHMEM_SIGNAL_SET, peer);
        }
    }
}

RB_KERNEL rb_p_ping_pong(int* flag, int pe, int iter) {
    const int peer = !pe;
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (int i = 0; i < iter; i++) {
        if (pe == 0) {
            nvshmem_int_p(flag, i + 1, peer);
            nvshmem_int_wait_until(flag, NVSHMEM_CMP_EQ, i + 1);
        } else {
            nvshmem_int_wait_until(flag, NVSHMEM_CMP_EQ, i + 1);
            nvshmem_int_p(flag, i + 1, peer);
        }
    }
}

RB_KERNEL rb_put_ping_pong(int* data, int* flag, int len, int pe, int iter) {
    const int peer = !pe;
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (int i = 0; i < iter; i++) {
        if (pe == 0) {
            nvshmem_int_put_nbi(data, data, len, peer);
            nvshmem_fence();
            nvshmem_int_p(flag, i + 1, peer);
            nvshmem_int_wait_until(flag, NVSHMEM_CMP_EQ, i + 1);
        } else {
            nvshmem_int_wait_until(flag, NVSHMEM_CMP_EQ, i + 1);
            nvshmem_int_put_nbi(data, data, len, peer);
            nvshmem_fence();
            nvshmem_int_p(flag, i + 1, peer);
        }
    }
    nvshmem_quiet();
}

#endif

// Tests and multi-element waits (shaped like NVSHMEM's test in shmem_*_ping_pong_latency).
#if defined(RB_ALL) || defined(RB_GROUP_test)
RB_KERNEL rb_test(uint64_t* ivars, int n, int* out, int iter) {
    int seen = 0;
    for (int i = 0; i < iter; i++) {
        seen += nvshmem_uint64_test(ivars + (threadIdx.x % n), NVSHMEM_CMP_GE, (uint64_t)i);
        seen += (int)nvshmem_uint64_test_any(ivars, n, NULL, NVSHMEM_CMP_GE, (uint64_t)i);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = seen;
}

RB_KERNEL rb_wait_until_all(uint64_t* ivars, int n, int iter) {
    if (threadIdx.x != 0) return;
    for (int i = 0; i < iter; i++) {
        nvshmem_uint64_wait_until_all(ivars, n, NULL, NVSHMEM_CMP_GE, (uint64_t)i);
    }
}

RB_KERNEL rb_fence_quiet(int* data, int pe, int iter) {
    const int peer = !pe;
    for (int i = 0; i < iter; i++) {
        nvshmem_int_p(data + threadIdx.x, i, peer);
        nvshmem_fence();
        nvshmem_int_p(data + blockDim.x + threadIdx.x, i, peer);
        nvshmem_quiet();
    }
}
#endif


// ---------------------------------------------------------------------------------------------
// Barriers and syncs, shaped like barrier_latency and sync_latency (block 0; THREADS of it call).

#if defined(RB_ALL) || defined(RB_GROUP_barrier)
#define RB_SYNC(NAME, CALL, THREADS)                                                               \
    RB_KERNEL rb_##NAME(int iter, nvshmem_team_t team) {                                           \
        (void)team;                                                                                \
        if (blockIdx.x == 0 && threadIdx.x < (THREADS)) {                                          \
            for (int i = 0; i < iter; i++) CALL;                                                   \
        }                                                                                          \
    }

RB_SYNC(barrier_all_thread, nvshmem_barrier_all(), 1)
RB_SYNC(barrier_all_warp, nvshmemx_barrier_all_warp(), 32)
RB_SYNC(barrier_all_block, nvshmemx_barrier_all_block(), 0x7fffffff)
RB_SYNC(sync_all_thread, nvshmem_sync_all(), 1)
RB_SYNC(sync_all_warp, nvshmemx_sync_all_warp(), 32)
RB_SYNC(sync_all_block, nvshmemx_sync_all_block(), 0x7fffffff)
RB_SYNC(team_sync_thread, nvshmem_team_sync(team), 1)
RB_SYNC(team_sync_warp, nvshmemx_team_sync_warp(team), 32)
RB_SYNC(team_sync_block, nvshmemx_team_sync_block(team), 0x7fffffff)
RB_SYNC(barrier_thread, nvshmem_barrier(team), 1)
RB_SYNC(barrier_warp, nvshmemx_barrier_warp(team), 32)
RB_SYNC(barrier_block, nvshmemx_barrier_block(team), 0x7fffffff)
#endif


// ---------------------------------------------------------------------------------------------
// Collectives, shaped like alltoall_latency, bcast_latency, fcollect_latency, reduction_latency
// and reducescatter_latency (block 0; THREADS of it call).

#define nvshmemx_int_alltoall_thread nvshmem_int_alltoall
#define nvshmemx_int_broadcast_thread nvshmem_int_broadcast
#define nvshmemx_int_fcollect_thread nvshmem_int_fcollect
#define nvshmemx_int_sum_reduce_thread nvshmem_int_sum_reduce
#define nvshmemx_float_max_reduce_thread nvshmem_float_max_reduce
#define nvshmemx_int_sum_reducescatter_thread nvshmem_int_sum_reducescatter

#define RB_ALLTOALL(SCOPE, THREADS)                                                                \
RB_KERNEL rb_alltoall_##SCOPE(nvshmem_team_t team, int* dest, const int* src, int nelems,          \
                              int iter) {                                                          \
    if (blockIdx.x == 0 && threadIdx.x < (THREADS)) {                                              \
        for (int i = 0; i < iter; i++) nvshmemx_int_alltoall_##SCOPE(team, dest, src, nelems);     \
    }                                                                                              \
}

#define RB_BROADCAST(SCOPE, THREADS)                                                               \
RB_KERNEL rb_broadcast_##SCOPE(nvshmem_team_t team, int* dest, const int* src, int nelems,         \
                               int iter) {                                                         \
    if (blockIdx.x == 0 && threadIdx.x < (THREADS)) {                                              \
        for (int i = 0; i < iter; i++) {                                                           \
            nvshmemx_int_broadcast_##SCOPE(team, dest, src, nelems, 0);                            \
        }                                                                                          \
    }                                                                                              \
}

#define RB_FCOLLECT(SCOPE, THREADS)                                                                \
RB_KERNEL rb_fcollect_##SCOPE(nvshmem_team_t team, int* dest, const int* src, int nelems,          \
                              int iter) {                                                          \
    if (blockIdx.x == 0 && threadIdx.x < (THREADS)) {                                              \
        for (int i = 0; i < iter; i++) nvshmemx_int_fcollect_##SCOPE(team, dest, src, nelems);     \
    }                                                                                              \
}

#define RB_SUM_REDUCE(SCOPE, THREADS)                                                              \
RB_KERNEL rb_sum_reduce_##SCOPE(nvshmem_team_t team, int* dest, const int* src, int nelems,        \
                                int iter) {                                                        \
    if (blockIdx.x == 0 && threadIdx.x < (THREADS)) {                                              \
        for (int i = 0; i < iter; i++) {                                                           \
            nvshmemx_int_sum_reduce_##SCOPE(team, dest, src, nelems);                              \
        }                                                                                          \
    }                                                                                              \
}

#define RB_MAX_REDUCE(SCOPE, THREADS)                                                              \
RB_KERNEL rb_max_reduce_##SCOPE(nvshmem_team_t team, float* dest, const float* src,                \
                                int nelems, int iter) {                                            \
    if (blockIdx.x == 0 && threadIdx.x < (THREADS)) {                                              \
        for (int i = 0; i < iter; i++) {                                                           \
            nvshmemx_float_max_reduce_##SCOPE(team, dest, src, nelems);                            \
        }                                                                                          \
    }                                                                                              \
}

#define RB_REDUCESCATTER(SCOPE, THREADS)                                                           \
RB_KERNEL rb_reducescatter_##SCOPE(nvshmem_team_t team, int* dest, const int* src,                 \
                                   int nelems, int iter) {                                         \
    if (blockIdx.x == 0 && threadIdx.x < (THREADS)) {                                              \
        for (int i = 0; i < iter; i++) {                                                           \
            nvshmemx_int_sum_reducescatter_##SCOPE(team, dest, src, nelems);                       \
        }                                                                                          \
    }                                                                                              \
}

#if defined(RB_ALL) || defined(RB_GROUP_alltoall)
RB_ALLTOALL(thread, 1)
RB_ALLTOALL(warp, 32)
RB_ALLTOALL(block, 0x7fffffff)
#endif

#if defined(RB_ALL) || defined(RB_GROUP_broadcast)
RB_BROADCAST(thread, 1)
RB_BROADCAST(warp, 32)
RB_BROADCAST(block, 0x7fffffff)
#endif

#if defined(RB_ALL) || defined(RB_GROUP_fcollect)
RB_FCOLLECT(thread, 1)
RB_FCOLLECT(warp, 32)
RB_FCOLLECT(block, 0x7fffffff)
#endif

#if defined(RB_ALL) || defined(RB_GROUP_reduce)
RB_SUM_REDUCE(thread, 1)
RB_SUM_REDUCE(warp, 32)
RB_SUM_REDUCE(block, 0x7fffffff)
RB_MAX_REDUCE(thread, 1)
RB_MAX_REDUCE(warp, 32)
RB_MAX_REDUCE(block, 0x7fffffff)
#endif

#if defined(RB_ALL) || defined(RB_GROUP_reducescatter)
RB_REDUCESCATTER(thread, 1)
RB_REDUCESCATTER(warp, 32)
RB_REDUCESCATTER(block, 0x7fffffff)
#endif
