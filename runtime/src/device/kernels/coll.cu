// rshmem's internal collective kernels: the `*_on_stream` team collectives. Each launch is the
// grid form of a device-library collective (device-lib/include/rshmem/coll.cuh): all blocks
// move data without waiting for anybody, the last block to finish makes the closing team sync.
// Where a collective needs a start sync, a single-block launch makes it itself and a launch of
// several blocks is preceded on the stream by rshmem_internal_team_sync (or, for collect,
// rshmem_internal_collect_start), so no block ever waits for a block that may not be running. Compiled by NVRTC at first use (cached on disk). The reductions are in
// coll_reduce.cu, compiled once per element type.
#include "rshmem/rshmem.cuh"
#include "rshmem/coll.cuh"

using namespace rshmem_detail;

// team_sync_on_stream / barrier_on_stream.
extern "C" __global__ void __launch_bounds__(1024) rshmem_internal_team_sync(int team) {
    team_sync<block_scope>("team_sync_on_stream", team);
}

// alltoall (src_stride = nbytes) and fcollect (src_stride = 0): push_split over gather_push's
// blocks.
static __device__ __forceinline__ void gather_grid(const char* call, int team, uint64_t dest,
                                                   uint64_t src, uint64_t nbytes,
                                                   int local_blocks, size_t src_stride) {
    grid_coll c(call, team);
    const int me = c.d.my_index;
    const rshmem_team_desc d = c.d;
    push_split(c.call, d, nbytes, (uint32_t)local_blocks, [&](int j, char*& to, const char*& from) {
        to = team_peer_nc(d, (char*)dest + (size_t)me * nbytes, j);
        from = (const char*)src + (size_t)j * src_stride;
        return true;
    });
    c.finish();
}

extern "C" __global__ void __launch_bounds__(1024) rshmem_internal_alltoall(int team, uint64_t dest, uint64_t src,
                                                    uint64_t nbytes, int local_blocks) {
    gather_grid("alltoall_on_stream", team, dest, src, nbytes, local_blocks, nbytes);
}

extern "C" __global__ void __launch_bounds__(1024) rshmem_internal_fcollect(int team, uint64_t dest, uint64_t src,
                                                    uint64_t nbytes, int local_blocks) {
    gather_grid("fcollect_on_stream", team, dest, src, nbytes, local_blocks, 0);
}

// algo 0: the root pushes (its own copy with local_blocks blocks); > 0: pipelined scatter +
// allgather (large messages) in steps of `algo` KiB.
extern "C" __global__ void __launch_bounds__(1024) rshmem_internal_broadcast(int team, uint64_t dest, uint64_t src,
                                                     uint64_t nbytes, int root, int algo,
                                                     int local_blocks) {
    grid_coll c("broadcast_on_stream", team);
    const rshmem_team_desc d = c.d;
    if (root < 0 || root >= d.size) fail_root(c.call, root, d.size, block_thread_id() == 0);
    if (algo == 0) {
        if (d.my_index == root) {
            push_split(c.call, d, nbytes, (uint32_t)local_blocks, [&](int j, char*& to, const char*& from) {
                to = team_peer_nc(d, (char*)dest, j);
                from = (const char*)src;
                return !(j == d.my_index && dest == src);
            });
        }
    } else {
        c.start();
        bcast_pipelined(c, (char*)dest, (const char*)src, nbytes, root, (size_t)algo << 10);
    }
    c.finish();
}

extern "C" __global__ void __launch_bounds__(1024) rshmem_internal_alltoalls(int team, uint64_t dest, uint64_t src,
                                                     uint64_t nelems, int esize, int unused,
                                                     uint64_t dst, uint64_t sst) {
    grid_coll c("alltoalls_on_stream", team);
    alltoalls_push(c.call, c.d, (char*)dest, (const char*)src, dst, sst, nelems, (size_t)esize,
                   grid_group());
    c.finish();
}

// collect of several blocks, first launch (one block): this PE's count into every member's sync
// block, then the team sync that makes every member's count visible.
extern "C" __global__ void __launch_bounds__(1024) rshmem_internal_collect_start(int team,
                                                                                 uint64_t nelems) {
    const char* call = "collect_on_stream";
    const rshmem_team_desc d = team_member(call, team, block_thread_id() == 0);
    collect_counts_out(call, team, d, nelems, group_of<block_scope>());
    team_sync<block_scope>(call, team);
}

// collect: with one block, it publishes this PE's count and makes the team sync itself (with
// several, rshmem_internal_collect_start did both before); then every block reads the counts
// and pushes its share.
extern "C" __global__ void __launch_bounds__(1024) rshmem_internal_collect(int team, uint64_t dest, uint64_t src,
                                                   uint64_t nelems, int esize) {
    grid_coll c("collect_on_stream", team);
    if (gridDim.x == 1) {
        collect_counts_out(c.call, c.team, c.d, nelems, group_of<block_scope>());
    }
    c.start();
    size_t off, total;
    collect_offsets(c.team, c.d, off, total);
    const rshmem_team_desc d = c.d;
    const size_t nb = nelems * (size_t)esize;
    push_split(c.call, d, nb, (uint32_t)((gridDim.x + d.size - 1) / d.size),
               [&](int j, char*& to, const char*& from) {
                   to = team_peer_nc(d, (char*)dest + off * (size_t)esize, j);
                   from = (const char*)src;
                   return true;
               });
    c.finish();
}
