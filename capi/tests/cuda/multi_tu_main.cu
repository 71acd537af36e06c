// Translation unit 1 of the multi-TU test (see multi_tu.h): three nvcc TUs without -rdc, each
// with its own device state, must all see this PE's state at init and again after the heap grew.
// Prints "multi_tu: PE <me>: ..." lines and "multi_tu: PE <me> passed"; exits 1 on any mismatch.
// Run with 2+ PEs and RSHMEM_DEVICE_CHECKS=1 (scripts/cuda-examples does).
#include "multi_tu.h"

#include <cstdio>
#include <vector>

// This TU's own view of the state.
__global__ void multi_tu_whoami(int *seen) {
    seen[0] = rshmem_my_pe();
    seen[1] = rshmem_n_pes();
}

#define CUDA_CHECK(call)                                                                        \
    do {                                                                                        \
        cudaError_t err_ = (call);                                                              \
        if (err_ != cudaSuccess) {                                                              \
            fprintf(stderr, "multi_tu: %s failed: %s\n", #call, cudaGetErrorString(err_));      \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

static int me, n;

// One round: put `nbytes` of this PE's pattern from a symmetric source into `dest` on the right
// neighbour (TU 2), wait for the left neighbour's (TU 3), check every TU's view of the state.
static int round_trip(const char *what, unsigned char *src, unsigned char *dest, size_t nbytes,
                      uint64_t *sig, unsigned round, int *dev, cudaStream_t stream) {
    std::vector<unsigned char> host(nbytes);
    for (size_t i = 0; i < nbytes; i++) host[i] = multi_tu_pattern(me, round, i);
    CUDA_CHECK(cudaMemcpy(src, host.data(), nbytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dev, 0xff, 8 * sizeof(int)));
    rshmem_barrier_all();  // every PE's source is ready and every dest is free
    multi_tu_whoami<<<1, 1, 0, stream>>>(dev);
    multi_tu_launch_put(dest, src, nbytes, sig, (me + 1) % n, dev + 2, stream);
    multi_tu_launch_wait(dest, nbytes, sig, round, (me + n - 1) % n, round, dev + 4, stream);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    int got[8];
    CUDA_CHECK(cudaMemcpy(got, dev, sizeof got, cudaMemcpyDeviceToHost));
    printf("multi_tu: PE %d: %s: TU main sees PE %d of %d, TU put %d of %d, TU wait %d of %d; "
           "%d of %zu bytes wrong\n",
           me, what, got[0], got[1], got[2], got[3], got[5], got[6], got[4], nbytes);
    int ok = got[0] == me && got[1] == n && got[2] == me && got[3] == n && got[5] == me &&
             got[6] == n && got[4] == 0;
    if (!ok) fprintf(stderr, "multi_tu: PE %d: %s: FAILED\n", me, what);
    return ok ? 0 : 1;
}

int main() {
    if (rshmem_init() != RSHMEM_SUCCESS) return 1;
    me = rshmem_my_pe();
    n = rshmem_n_pes();
    if (n < 2) {
        fprintf(stderr, "multi_tu: needs 2 or more PEs (rshmemrun -n 2)\n");
        return 1;
    }
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    int *dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, 8 * sizeof(int)));

    const size_t small = 64 << 10;
    auto *src = static_cast<unsigned char *>(rshmem_malloc(small));
    auto *dest = static_cast<unsigned char *>(rshmem_malloc(small));
    auto *sig = static_cast<uint64_t *>(rshmem_calloc(1, sizeof(uint64_t)));
    if (!src || !dest || !sig) return 1;
    int failed = round_trip("after init", src, dest, small, sig, 1, dev, stream);

    // Grow the heap past its first chunk (RSHMEM_HEAP_INITIAL, 64 MiB by default) and put into
    // the far end of the new block: with device checks on, a TU whose state still has the old
    // heap size traps on the put; every TU must also still see the right PE.
    const size_t big = 512ull << 20;
    auto *grown = static_cast<unsigned char *>(rshmem_malloc(big));
    if (!grown) return 1;
    failed |= round_trip("after heap growth", src, grown + big - small, small, sig, 2, dev, stream);

    rshmem_barrier_all();
    rshmem_free(grown);
    rshmem_free(sig);
    rshmem_free(dest);
    rshmem_free(src);
    CUDA_CHECK(cudaFree(dev));
    CUDA_CHECK(cudaStreamDestroy(stream));
    if (rshmem_finalize() != RSHMEM_SUCCESS) return 1;
    if (!failed) printf("multi_tu: PE %d passed\n", me);
    return failed;
}
