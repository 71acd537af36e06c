// Ring shift in CUDA C++, written only against rshmem.h and compiled by nvcc without -rdc: every
// PE's kernel puts the PE's number into a symmetric int on the next PE (a device `p`), then a
// barrier_all_on_stream, and each PE prints what arrived — the same lines as the Rust
// examples/ring_shift.rs on GPUs:
//
//   nvcc -O2 -arch=sm_90 -std=c++17 examples/cuda/ring_shift.cu -o ring_shift \
//        $(pkg-config --cflags --libs rshmem)
//   rshmemrun -n 4 ./ring_shift        # 0: received message 3, 1: received message 0, ...
//
// With GPUs it needs one GPU per PE (or several PEs per GPU under CUDA MPS). Without a CUDA
// device it takes its host path: rshmem runs on the CPU backend and the same int_p (a host twin
// of the device call) runs in host code, with the same output; CI runs that path under
// `mpirun -np 4` with nothing set. scripts/cuda-examples builds and runs it.
//
// A whole program (host code included) for nvcc, not an NVRTC module: CI compiles it with nvcc
// (scripts/check-install, scripts/cuda-examples), so the NVRTC sweep of the repository's .cu
// files leaves it out:
// rshmem: nvrtc-skip
#include <rshmem.h>

#include <cstdio>

__global__ void ring_shift(int *message) {
    int me = rshmem_my_pe();
    int n = rshmem_n_pes();
    rshmem_int_p(message, me, (me + 1) % n);
}

// Prints the failed CUDA runtime call and exits (the other PEs are stopped by the launcher).
#define CUDA_CHECK(call)                                                                        \
    do {                                                                                        \
        cudaError_t err_ = (call);                                                              \
        if (err_ != cudaSuccess) {                                                              \
            fprintf(stderr, "ring_shift: %s failed: %s\n", #call, cudaGetErrorString(err_));    \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

// The host path (no CUDA device: rshmem's CPU backend): the same put from host code.
static int host_path(int *message, int me, int n, int *got) {
    rshmem_int_p(message, me, (me + 1) % n);
    rshmem_barrier_all();
    *got = rshmem_int_g(message, me);
    return 0;
}

int main() {
    int devices = 0;
    bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
    if (rshmem_init() != RSHMEM_SUCCESS) return 1;  // rshmem printed why
    int me = rshmem_my_pe();
    int n = rshmem_n_pes();
    int *message = static_cast<int *>(rshmem_calloc(1, sizeof(int)));
    if (message == nullptr) return 1;
    if (!gpu) {
        int got = -1;
        host_path(message, me, n, &got);
        printf("%d: received message %d\n", me, got);
        rshmem_free(message);
        if (rshmem_finalize() != RSHMEM_SUCCESS) return 1;
        return got == (me + n - 1) % n ? 0 : 1;
    }

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    ring_shift<<<1, 1, 0, stream>>>(message);
    CUDA_CHECK(cudaGetLastError());
    if (rshmemx_barrier_all_on_stream(stream) != RSHMEM_SUCCESS) return 1;
    CUDA_CHECK(cudaStreamSynchronize(stream));

    int got = -1;
    CUDA_CHECK(cudaMemcpy(&got, message, sizeof got, cudaMemcpyDeviceToHost));
    printf("%d: received message %d\n", me, got);

    CUDA_CHECK(cudaStreamDestroy(stream));
    rshmem_free(message);
    if (rshmem_finalize() != RSHMEM_SUCCESS) return 1;
    int expected = (me + n - 1) % n;
    if (got != expected) {
        fprintf(stderr, "ring_shift: PE %d expected %d, got %d\n", me, expected, got);
        return 1;
    }
    return 0;
}
