// The multi-translation-unit test (multi_tu_main.cu, multi_tu_put.cu, multi_tu_wait.cu): three
// nvcc translation units, no -rdc, each with its own copy of rshmem's device state. Each TU's
// kernels report what their copy says (my_pe, n_pes), so a TU that did not get the state at init,
// or got a stale one after the heap grew, fails the test (with RSHMEM_DEVICE_CHECKS=1 a stale
// heap size traps in the put).
#pragma once
#include <rshmem.h>

#include <cstddef>
#include <cstdint>

// Byte i of the data PE `pe` sends in round `round`: distinct per PE, index and round.
__host__ __device__ inline unsigned char multi_tu_pattern(int pe, unsigned round, size_t i) {
    uint64_t x = (uint64_t)(pe + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xBF58476D1CE4E5B9ull ^
                 round;
    return (unsigned char)(x ^ (x >> 29) ^ (x >> 47));
}

// multi_tu_put.cu: one thread puts nbytes from src to dest on pe with rshmem_putmem_signal
// (signal += 1), then rshmem_quiet; seen[0..1] = this TU's rshmem_my_pe(), rshmem_n_pes().
void multi_tu_launch_put(void *dest, const void *src, size_t nbytes, uint64_t *sig, int pe,
                         int *seen, cudaStream_t stream);

// multi_tu_wait.cu: waits until this PE's *sig >= expect (rshmem_signal_wait_until), then
// counts the bytes of buf[0..nbytes) that differ from multi_tu_pattern(from_pe, round, i) into
// result[0]; result[1..2] = this TU's rshmem_my_pe(), rshmem_n_pes().
void multi_tu_launch_wait(const unsigned char *buf, size_t nbytes, uint64_t *sig, uint64_t expect,
                          int from_pe, unsigned round, int *result, cudaStream_t stream);
