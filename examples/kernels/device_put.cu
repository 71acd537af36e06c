// device_put's device side: one block puts `nbytes` from this PE's `src` into `dest` on `peer`
// and then sets `sig` there to `round` (put_signal: the data is visible before the signal).
#include "rshmem/rshmem.cuh"

extern "C" __global__ void device_put(uint8_t *dest, const uint8_t *src, size_t nbytes, uint64_t *sig,
                                      uint64_t round, int peer) {
    rshmem_putmem_signal_block(dest, src, nbytes, sig, round, RSHMEM_SIGNAL_SET, peer);
}
