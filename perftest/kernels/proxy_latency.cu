// proxy_latency's device side: one thread times `iters` operations to `peer` through the proxy
// (the peer is not reachable by load/store) with %globaltimer, after one untimed round.
//   mode 0: ring round trip only (a NOP request, executed by the host proxy at once)
//   mode 1: rshmem_uint64_p (8 B, inline) + rshmem_quiet
//   mode 2: rshmem_putmem of nbytes from global memory + rshmem_quiet
//   mode 3: rshmem_uint64_atomic_fetch_add (round trip)
//   mode 4: rshmem_uint64_g (round trip)
//   mode 5: rshmem_quiet alone (nothing outstanding)
//   mode 6: rshmem_putmem_signal of nbytes (signal word at buf + 4096) + rshmem_quiet
#include "rshmem/rshmem.cuh"

extern "C" __global__ void proxy_latency(int mode, uint64_t *buf, const uint8_t *src, size_t nbytes, int peer,
                                         int iters, unsigned long long *out_ns) {
    unsigned long long sink = 0;
    for (int round = 0; round < 2; ++round) {
        unsigned long long t0 = rshmem_detail::globaltimer();
        for (int i = 0; i < iters; ++i) {
            switch (mode) {
            case 0: rshmem_detail::proxy_nop(); break;
            case 1:
                rshmem_uint64_p(buf, (uint64_t)i, peer);
                rshmem_quiet();
                break;
            case 2:
                rshmem_putmem(buf, src, nbytes, peer);
                rshmem_quiet();
                break;
            case 3: sink += rshmem_uint64_atomic_fetch_add(buf, 1, peer); break;
            case 4: sink += rshmem_uint64_g(buf, peer); break;
            case 6:
                rshmem_putmem_signal(buf, src, nbytes, buf + 4096, (uint64_t)i + 1, RSHMEM_SIGNAL_SET, peer);
                rshmem_quiet();
                break;
            default: rshmem_quiet(); break;
            }
        }
        unsigned long long t1 = rshmem_detail::globaltimer();
        if (round == 1) out_ns[0] = t1 - t0;
    }
    out_ns[1] = sink;
}
