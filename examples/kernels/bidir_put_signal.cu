// bidir_put_signal's device side: every block puts its chunk of the buffer to `peer` and adds 1
// to the peer's signal; the peer has all the data once its signal reaches gridDim.x × round.
#include "rshmem/rshmem.cuh"

extern "C" __global__ void bidir_put(uint8_t *dest, const uint8_t *src, size_t nbytes, uint64_t *sig, int peer) {
    size_t chunk = (nbytes + gridDim.x - 1) / gridDim.x;
    chunk = (chunk + 15) & ~(size_t)15;
    size_t start = (size_t)blockIdx.x * chunk;
    size_t len = start < nbytes ? (nbytes - start < chunk ? nbytes - start : chunk) : 0;
    rshmem_putmem_signal_block(dest + start, src + start, len, sig, 1, RSHMEM_SIGNAL_ADD, peer);
}
