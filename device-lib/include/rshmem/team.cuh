// rshmem device library: teams on the device (handles, queries, team sync and barrier).
//
// A team is named on the device by its handle, an int (`rshmem_team_t`): RSHMEM_TEAM_WORLD,
// RSHMEM_TEAM_SHARED and RSHMEM_TEAM_NODE are predefined; a team made on the host has the handle
// `Team::device_handle()` returns (pass it to the kernel as an argument). Every team the host can
// make is an arithmetic progression of world PEs (splits of splits stay one), so the device
// keeps, per handle, a 16-byte descriptor: the first world PE, the stride, the size, and this
// PE's number in the team. The host writes it into this PE's GPU internal area when the team is
// made (collectively, before any member can use it) and clears it when the team is destroyed.
//
// Synchronization state: every handle has a sync block in every member's GPU internal area
// (RSHMEM_TEAM_SYNC_STRIDE bytes): flags written by the other members (one per team PE), this
// PE's epoch, and words the collectives use (collective sequence numbers, progress flags). The
// block is zeroed when the team is made. A team sync works like rshmem_barrier_all (see
// barrier.cuh) over the team's members: every member stores the new epoch into its slot of
// every other member's flags (release, system scope) and waits until all its own slots hold it
// (acquire, system scope). Cost: one system-scope fence and one NVLink trip.
//
// Device team calls need every member on this host (load/store reachable); otherwise, or with a
// handle that names no team on this PE, they trap with a message naming the call.
#pragma once

#include "rshmem/util.cuh"

typedef int32_t rshmem_team_t;

// The predefined handles RSHMEM_TEAM_INVALID, _WORLD, _SHARED, _NODE are in rshmem/type_lists.h
// (shared with rshmem.h).

// One team descriptor (mirrored by the host's team code).
typedef struct rshmem_team_desc {
    int32_t start;     // world PE of team PE 0
    int32_t stride;    // world PE distance between consecutive team PEs (>= 1)
    int32_t size;      // team PEs; 0: no team under this handle
    int32_t my_index;  // this PE's number in the team, -1 when not a member
} rshmem_team_desc;

// u64 words of a team sync block.
#define RSHMEM_TEAM_SYNC_FLAGS 0       // [RSHMEM_MAX_LOCAL_PES]: slot j written by team PE j
#define RSHMEM_TEAM_SYNC_EPOCH 512     // this PE's team sync epoch
#define RSHMEM_TEAM_SYNC_ARRIVE 513    // blocks of a grid collective that finished (collectives)
#define RSHMEM_TEAM_SYNC_KSEQ 514      // grid collectives completed on this team (collectives)
#define RSHMEM_TEAM_SYNC_GO 515        // reserved (no collective uses it now)
#define RSHMEM_TEAM_SYNC_PROGRESS 520  // reserved (128 words; no collective uses them now)
#define RSHMEM_TEAM_SYNC_MAX_PROGRESS 128
#define RSHMEM_TEAM_SYNC_COUNTS 648    // collect: element count of team PE j in word 648 + j
#define RSHMEM_TEAM_SYNC_MAX_COUNTS 128 // (so device collect takes teams of at most 128 PEs)
#define RSHMEM_TEAM_SYNC_SCRATCH 776   // two buffers of small one-shot reductions (written by peers)
#define RSHMEM_TEAM_SYNC_SCRATCH_BYTES 992

static_assert(RSHMEM_TEAM_SYNC_PROGRESS + RSHMEM_TEAM_SYNC_MAX_PROGRESS <=
                  RSHMEM_TEAM_SYNC_COUNTS &&
              RSHMEM_TEAM_SYNC_COUNTS + RSHMEM_TEAM_SYNC_MAX_COUNTS <=
                  RSHMEM_TEAM_SYNC_SCRATCH &&
              RSHMEM_TEAM_SYNC_SCRATCH * 8 + 2 * RSHMEM_TEAM_SYNC_SCRATCH_BYTES <=
                  RSHMEM_TEAM_SYNC_STRIDE,
              "team sync block layout");
static_assert(RSHMEM_TEAM_SYNC_EPOCH >= RSHMEM_MAX_LOCAL_PES, "team sync flags");

namespace rshmem_detail {

static __device__ __noinline__ RSHMEM_NORETURN void fail_team(const char* call, rshmem_team_t team, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: team handle %d names no team on this PE (not made, "
               "destroyed, or not a team handle)\n",
               call, rshmem_state.my_pe, (int)team);
    }
    __trap();
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_not_member(const char* call, rshmem_team_t team,
                                                    bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: this PE is not a member of team %d\n", call,
               rshmem_state.my_pe, (int)team);
    }
    __trap();
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_team_pe(const char* call, int pe, int n, bool say) {
    if (say) {
        printf("rshmem: %s on PE %d: team PE %d is out of range (the team has PEs 0..%d)\n", call,
               rshmem_state.my_pe, pe, n - 1);
    }
    __trap();
}

// The descriptor of `team`, or a zero-size one when the handle names no team.
static __device__ __forceinline__ rshmem_team_desc team_lookup(rshmem_team_t team) {
    rshmem_team_desc d = {0, 1, 0, -1};
    if ((unsigned)team < (unsigned)rshmem_state.team_count && rshmem_state.team_table != 0) {
        int4 v = *((const int4*)rshmem_state.team_table + team);
        d.start = v.x;
        d.stride = v.y;
        d.size = v.z;
        d.my_index = v.w;
    }
    return d;
}

// The descriptor of a team this PE is a member of (traps otherwise).
static __device__ __forceinline__ rshmem_team_desc team_member(const char* call,
                                                               rshmem_team_t team, bool say) {
    check_init(call, say);
    rshmem_team_desc d = team_lookup(team);
    if (d.size <= 0) fail_team(call, team, say);
    if (d.my_index < 0) fail_not_member(call, team, say);
    return d;
}

static __device__ __forceinline__ int team_world_pe(const rshmem_team_desc& d, int i) {
    return d.start + i * d.stride;
}

// Local index of team PE i (traps when it is on another host).
static __device__ __forceinline__ int team_local(const char* call, const rshmem_team_desc& d,
                                                 int i, bool say) {
    int pe = team_world_pe(d, i);
    int local = local_of(pe);
    if (local < 0) fail_unreachable(call, pe, say);
    return local;
}

// Word w of local PE `local`'s sync block of `team`.
static __device__ __forceinline__ uint64_t* team_word(int local, rshmem_team_t team, int w) {
    return (uint64_t*)(slice_of(local) + RSHMEM_INTERNAL_TEAM_SYNC +
                       (uint64_t)team * RSHMEM_TEAM_SYNC_STRIDE) +
           w;
}

static __device__ __forceinline__ uint64_t* my_team_word(rshmem_team_t team, int w) {
    return team_word(rshmem_state.my_local, team, w);
}

// Team PE i's copy of this PE's symmetric address p (p itself for i == d.my_index).
template <typename T>
static __device__ __forceinline__ T* team_peer(const char* call, const rshmem_team_desc& d, T* p,
                                               int i, bool say) {
    if (i == d.my_index) return p;
    int local = team_local(call, d, i, say);
    return at_local_wide(p, local);
}

// Traps unless every member of the team is load/store reachable (then team_peer_nc is safe).
static __device__ __forceinline__ void team_check_reachable(const char* call,
                                                            const rshmem_team_desc& d, bool say) {
    for (int j = 0; j < d.size; ++j) team_local(call, d, j, say);
}

// team_peer without the reachability check (after team_check_reachable).
template <typename T>
static __device__ __forceinline__ T* team_peer_nc(const rshmem_team_desc& d, T* p, int i) {
    int local = local_of(team_world_pe(d, i));
    return at_local_wide(p, local);
}

static __device__ __noinline__ RSHMEM_NORETURN void fail_team_wait(const char* call, rshmem_team_t team,
                                                   const rshmem_team_desc& d, uint64_t epoch,
                                                   unsigned long long waited) {
    for (int j = 0; j < d.size; ++j) {
        if (j == d.my_index) continue;
        const uint64_t* flag = my_team_word(team, RSHMEM_TEAM_SYNC_FLAGS + j);
        uint64_t v = ld_relaxed_sys(flag);
        if (v < epoch) {
            printf("rshmem: %s on PE %d: timed out after %llu ns waiting for team PE %d (PE %d) "
                   "of team %d to reach team sync %llu; its flag holds %llu (every member must "
                   "make the same sequence of team collectives)\n",
                   call, rshmem_state.my_pe, waited, j, team_world_pe(d, j), (int)team,
                   (unsigned long long)epoch, (unsigned long long)v);
            break;
        }
    }
    __trap();
}

// Team sync by the group S (every thread of it calls, same arguments). Releases everything the
// group did before (see barrier.cuh) and acquires what every member did before its sync.
// Inlined (RSHMEM_ENGINE; see barrier.cuh); the collectives call it through team_sync_coll.
template <class S>
RSHMEM_ENGINE void team_sync(const char* call, rshmem_team_t team) {
    S::sync();
    const uint32_t rank = S::rank();
    const uint32_t size = S::size();
    const rshmem_team_desc d = team_member(call, team, rank == 0);
    const int n = d.size;
    const int me = d.my_index;
    if (n > RSHMEM_MAX_LOCAL_PES) fail_team_pe(call, n - 1, RSHMEM_MAX_LOCAL_PES, rank == 0);
    uint64_t* ew = my_team_word(team, RSHMEM_TEAM_SYNC_EPOCH);
    uint64_t epoch = 0;
    if ((int)rank < n) {
        epoch = *(volatile uint64_t*)ew + 1;
        fence_acq_rel_sys();
        for (int j = (int)rank; j < n; j += (int)size) {
            if (j != me) {
                st_relaxed_sys(team_word(team_local(call, d, j, true), team,
                                         RSHMEM_TEAM_SYNC_FLAGS + me),
                               epoch);
            }
        }
        wait_timer timer;
        for (int j = (int)rank; j < n; j += (int)size) {
            if (j == me) continue;
            const uint64_t* flag = my_team_word(team, RSHMEM_TEAM_SYNC_FLAGS + j);
            while (ld_acquire_sys(flag) < epoch) {
                if (timer.expired()) fail_team_wait(call, team, d, epoch, timer.waited());
            }
        }
    }
    S::sync();
    if (rank == 0) *(volatile uint64_t*)ew = epoch;
}

// What the public team sync calls use: team_sync inlined (RSHMEM_ENGINE, util.cuh), allocated
// together with the calling kernel.
template <class S>
static __device__ __forceinline__ void team_sync_call(const char* call, rshmem_team_t team) {
    team_sync<S>(call, team);
}

// What the collectives use: team_sync in a function of its own, called directly (never through
// a pointer, so it raises no other kernel). Few values are live across it, so it adds little to
// the collective, and the collective's copy loop and the sync's poll loop do not share one
// allocation.
template <class S>
static __device__ __noinline__ void team_sync_coll(const char* call, rshmem_team_t team) {
    team_sync<S>(call, team);
}

}  // namespace rshmem_detail

// This PE's number in `team`, or -1 when it is not a member or the handle names no team.
// Thread scope, local.
RSHMEM_TWIN int rshmem_team_my_pe(rshmem_team_t team) {
#if RSHMEM_TWIN_HOST_PASS
    return rshmemi_host_rshmem_team_my_pe(team);
#else
    rshmem_team_desc d = rshmem_detail::team_lookup(team);
    return d.size > 0 ? d.my_index : -1;
#endif
}

// Number of PEs in `team`, or -1 when the handle names no team. Thread scope, local.
RSHMEM_TWIN int rshmem_team_n_pes(rshmem_team_t team) {
#if RSHMEM_TWIN_HOST_PASS
    return rshmemi_host_rshmem_team_n_pes(team);
#else
    rshmem_team_desc d = rshmem_detail::team_lookup(team);
    return d.size > 0 ? d.size : -1;
#endif
}

// The number in `dest` of team PE `pe` of `src`, or -1 (out of range, not in dest, no team).
// Thread scope, local.
RSHMEM_TWIN int rshmem_team_translate_pe(rshmem_team_t src, int pe, rshmem_team_t dest) {
#if RSHMEM_TWIN_HOST_PASS
    return rshmemi_host_rshmem_team_translate_pe(src, pe, dest);
#else
    rshmem_team_desc s = rshmem_detail::team_lookup(src);
    rshmem_team_desc d = rshmem_detail::team_lookup(dest);
    if (s.size <= 0 || d.size <= 0 || pe < 0 || pe >= s.size) return -1;
    int w = rshmem_detail::team_world_pe(s, pe) - d.start;
    if (w < 0 || w % d.stride != 0 || w / d.stride >= d.size) return -1;
    return w / d.stride;
#endif
}

// Team sync: returns once every member of `team` has called it; orders the caller's earlier
// stores and puts before everything the members do after it (on the load/store transport the
// same guarantees as rshmem_barrier). Collective over the team, one thread per PE.
RSHMEM_TWIN void rshmem_team_sync(rshmem_team_t team) {
    RSHMEM_TWIN_CALL(rshmemi_host_rshmem_team_sync(team),
                     rshmem_detail::team_sync_call<rshmem_detail::thread_scope>("rshmem_team_sync", team));
}
static __device__ __forceinline__ void rshmem_team_sync_warp(rshmem_team_t team) {
    rshmem_detail::team_sync_call<rshmem_detail::warp_scope>("rshmem_team_sync_warp", team);
}
static __device__ __forceinline__ void rshmem_team_sync_block(rshmem_team_t team) {
    rshmem_detail::team_sync_call<rshmem_detail::block_scope>("rshmem_team_sync_block", team);
}

// Team barrier: completes the caller's earlier puts and AMOs (like rshmem_quiet) and syncs the
// team. Collective over the team, one thread (plain), one warp (_warp) or one block (_block) per
// PE.
RSHMEM_TWIN void rshmem_barrier(rshmem_team_t team) {
    RSHMEM_TWIN_CALL(rshmemi_host_rshmem_barrier(team),
                     rshmem_detail::team_sync_call<rshmem_detail::thread_scope>("rshmem_barrier", team));
}
static __device__ __forceinline__ void rshmem_barrier_warp(rshmem_team_t team) {
    rshmem_detail::team_sync_call<rshmem_detail::warp_scope>("rshmem_barrier_warp", team);
}
static __device__ __forceinline__ void rshmem_barrier_block(rshmem_team_t team) {
    rshmem_detail::team_sync_call<rshmem_detail::block_scope>("rshmem_barrier_block", team);
}
