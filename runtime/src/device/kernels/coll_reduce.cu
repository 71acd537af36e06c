// rshmem's internal reduction kernels (reduce_on_stream, reduce_scatter_on_stream) for one
// element type: the runtime compiles this file once per type with -DRSHMEM_RT=<type>. See coll.cu.
#include "rshmem/rshmem.cuh"
#include "rshmem/coll.cuh"

#ifndef RSHMEM_RT
#define RSHMEM_RT float
#endif

using namespace rshmem_detail;
typedef RSHMEM_RT rt;

// op: RSHMEM_OP_*; scatter: 0 reduce (every member gets all nelems), 1 reduce-scatter (team PE
// i gets block i of nelems).
extern "C" __global__ void __launch_bounds__(512) rshmem_internal_reduce(int team, uint64_t dest, uint64_t src,
                                                  uint64_t nelems, int op, int scatter) {
    grid_coll c(scatter ? "reduce_scatter_on_stream" : "reduce_on_stream", team);
    if (gridDim.x == 1 && reduce_fits_oneshot<rt>(c.d.size, nelems)) {
        reduce_oneshot<block_scope, rt>(c.call, team, c.d, (rt*)dest, (const rt*)src, nelems, op,
                                        scatter != 0);
        if (block_thread_id() == 0) {
            *(volatile uint64_t*)my_team_word(team, RSHMEM_TEAM_SYNC_KSEQ) = c.seq;
        }
        return;
    }
    c.start();
    reduce_body<rt>(c.call, c.d, (rt*)dest, (const rt*)src, nelems, op, scatter != 0,
                    grid_group());
    c.finish();
}
