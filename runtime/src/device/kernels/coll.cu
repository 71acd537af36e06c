// rshmem's internal collective kernels: the `*_on_stream` team collectives. Each launch is the
// grid form of a device-library collective (device-lib/include/rshmem/coll.cuh): all blocks
// move data, block 0 makes the start sync where one is needed, the last block to finish makes
// the closing team sync. Compiled by NVRTC at first use (cached on disk). The reductions are in
// coll_reduce.cu, compiled once per element type.
#include "rshmem/rshmem.cuh"
#include "rshmem/coll.cuh"

using namespace rshmem_detail;

// team_sync_on_stream / barrier_on_stream.
extern "C" __global__ void rshmem_internal_team_sync(int team) {
    team_sync<block_scope>("team_sync_on_stream", team);
}

extern "C" __global__ void rshmem_internal_alltoall(int team, uint64_t dest, uint64_t src,
                                                    uint64_t nbytes) {
    grid_coll c("alltoall_on_stream", team);
    alltoall_push(c.call, c.d, (char*)dest, (const char*)src, nbytes, grid_group());
    c.finish();
}

extern "C" __global__ void rshmem_internal_fcollect(int team, uint64_t dest, uint64_t src,
                                                    uint64_t nbytes) {
    grid_coll c("fcollect_on_stream", team);
    fcollect_push(c.call, c.d, (char*)dest, (const char*)src, nbytes, grid_group());
    c.finish();
}

// algo 0: the root pushes; 1: pipelined two-phase pull (large messages).
extern "C" __global__ void rshmem_internal_broadcast(int team, uint64_t dest, uint64_t src,
                                                     uint64_t nbytes, int root, int algo) {
    grid_coll c("broadcast_on_stream", team);
    if (algo == 0) {
        if (c.d.my_index == root) {
            bcast_push(c.call, c.d, (char*)dest, (const char*)src, nbytes, grid_group());
        }
    } else {
        c.start();
        bcast_pipelined(c, (char*)dest, (const char*)src, nbytes, root);
    }
    c.finish();
}
