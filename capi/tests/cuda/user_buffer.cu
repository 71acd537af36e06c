// Symmetric registration of user buffers (rshmemx_buffer_register_symmetric, NVSHMEM's
// nvshmemx_buffer_register_symmetric) on the GPU. Every PE makes a cuMemCreate buffer (POSIX fd
// handle type) and registers it; then (1) a kernel puts this PE's pattern through the returned
// address into the right neighbour's buffer (device rshmem_putmem, a flag, barrier_all_on_stream)
// and every PE checks, through its own mapping, that the left neighbour's pattern arrived; (2)
// host rshmem_putmem and rshmem_ptr work on the range; (3) a second buffer registers below the
// first, the heap still grows (256 MiB), both unregister and the space is reused; (4) refusals,
// NULL on every PE with a message naming the call: cudaMalloc memory, no POSIX fd handle type,
// sizes that differ between PEs, flags 1; unregistering twice is an error. Prints
// "user_buffer: PE <me> passed", else exits 1. Run with 2+ PEs and RSHMEM_DEVICE_CHECKS=1 (the
// device checks must accept the registered range): rshmemrun -n 2 ./user_buffer
// Driver calls go through cudaGetDriverEntryPointByVersion: it links without libcuda.
// A whole program for nvcc; the NVRTC sweep of the repository's .cu files leaves it out:
// rshmem: nvrtc-skip
#include <cuda.h>
#include <rshmem.h>

#include <cstdio>
#include <cstring>
#include <vector>

static int me, n;

#define CHECK(cond)                                                                             \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "user_buffer: PE %d: line %d: %s failed\n", me, __LINE__, #cond);   \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)
#define CUDA_CHECK(call) CHECK((call) == cudaSuccess)
#define CU_CHECK(call) CHECK((call) == CUDA_SUCCESS)

// The driver API through the runtime (no -lcuda).
static CUresult (*p_cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                 unsigned long long);
static CUresult (*p_cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                         unsigned long long);
static CUresult (*p_cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                              unsigned long long);
static CUresult (*p_cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
static CUresult (*p_cuMemUnmap)(CUdeviceptr, size_t);
static CUresult (*p_cuMemAddressFree)(CUdeviceptr, size_t);
static CUresult (*p_cuMemRelease)(CUmemGenericAllocationHandle);
static CUresult (*p_cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *,
                                                   CUmemAllocationGranularity_flags);

template <typename F>
static int entry(const char *name, F *f) {
    cudaDriverEntryPointQueryResult q;
    void *p = nullptr;
    if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !p) {
        fprintf(stderr, "user_buffer: PE %d: no driver entry point %s\n", me, name);
        return 1;
    }
    *f = reinterpret_cast<F>(p);
    return 0;
}

struct VmmBuf {
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr p = 0;
    size_t size = 0;
};

// A buffer as NVSHMEM's examples/user-buffer.cu makes it: cuMemCreate, reserve, map, access.
static int make_vmm(VmmBuf *b, size_t size, int dev, bool posix_fd) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes =
        posix_fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    CU_CHECK(p_cuMemCreate(&b->h, size, &prop, 0));
    CU_CHECK(p_cuMemAddressReserve(&b->p, size, 0, 0, 0));
    CU_CHECK(p_cuMemMap(b->p, size, 0, b->h, 0));
    CUmemAccessDesc a = {};
    a.location = prop.location;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_CHECK(p_cuMemSetAccess(b->p, size, &a, 1));
    b->size = size;
    return 0;
}

static int free_vmm(VmmBuf *b) {
    CU_CHECK(p_cuMemUnmap(b->p, b->size));
    CU_CHECK(p_cuMemAddressFree(b->p, b->size));
    CU_CHECK(p_cuMemRelease(b->h));
    return 0;
}

static __host__ __device__ unsigned pattern(int pe, size_t i) {
    return 0x9e3779b9u * (unsigned)(pe + 1) + (unsigned)i;
}

// Thread 0 of block 0 puts `words` of this PE's pattern (from `src`, registered memory) into the
// right neighbour's `dst` (registered memory), then sets its flag.
__global__ void put_right(unsigned *dst, const unsigned *src, size_t words, int *flag) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        int right = (rshmem_my_pe() + 1) % rshmem_n_pes();
        rshmem_putmem(dst, src, words * sizeof(unsigned), right);
        rshmem_fence();
        rshmem_int_p(flag, 1, right);
        rshmem_quiet();
    }
}

__global__ void fill(unsigned *p, size_t words, int pe) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
        p[i] = pattern(pe, i);
}

int main() {
    if (rshmem_init() != RSHMEM_SUCCESS) return 1;
    me = rshmem_my_pe();
    n = rshmem_n_pes();
    CHECK(n >= 2);
    int dev = -1;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (entry("cuMemCreate", &p_cuMemCreate) || entry("cuMemAddressReserve", &p_cuMemAddressReserve) ||
        entry("cuMemMap", &p_cuMemMap) || entry("cuMemSetAccess", &p_cuMemSetAccess) ||
        entry("cuMemUnmap", &p_cuMemUnmap) || entry("cuMemAddressFree", &p_cuMemAddressFree) ||
        entry("cuMemRelease", &p_cuMemRelease) ||
        entry("cuMemGetAllocationGranularity", &p_cuMemGetAllocationGranularity))
        return 1;
    CUmemAllocationProp gp = {};
    gp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    gp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    gp.location.id = dev;
    gp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CU_CHECK(p_cuMemGetAllocationGranularity(&gran, &gp, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    // 1. Register a buffer of 2 granules; the first half is the source, the second the
    //    destination, the last int of the first granule a flag.
    const size_t size = 2 * gran, half = gran / 2;
    VmmBuf a;
    if (make_vmm(&a, size, dev, true)) return 1;
    char *sym = static_cast<char *>(rshmemx_buffer_register_symmetric((void *)a.p, size, 0));
    CHECK(sym != nullptr);
    CHECK(sym != (char *)a.p);
    CUDA_CHECK(cudaMemset(sym, 0, size));  // through the symmetric address
    const size_t words = half / sizeof(unsigned);
    auto *src = reinterpret_cast<unsigned *>(sym);
    auto *dst = reinterpret_cast<unsigned *>(sym + gran);
    int *flag = reinterpret_cast<int *>(sym + gran - sizeof(int));
    fill<<<64, 256, 0, stream>>>(src, words, me);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    rshmemx_barrier_all_on_stream(stream);
    put_right<<<1, 32, 0, stream>>>(dst, src, words, flag);
    rshmemx_barrier_all_on_stream(stream);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<unsigned> got(words);
    // Through the program's own mapping of the same memory.
    CUDA_CHECK(cudaMemcpy(got.data(), (char *)a.p + gran, half, cudaMemcpyDeviceToHost));
    int left = (me + n - 1) % n, bad = 0, f = 0;
    for (size_t i = 0; i < words; i++) bad += got[i] != pattern(left, i);
    CUDA_CHECK(cudaMemcpy(&f, (char *)a.p + gran - sizeof(int), sizeof f, cudaMemcpyDeviceToHost));
    printf("user_buffer: PE %d: device put from PE %d: %d of %zu words wrong, flag %d\n", me,
           left, bad, words, f);
    CHECK(bad == 0 && f == 1);

    // 2. Host calls on the registered range.
    unsigned v = 0xabcd0000u + me, w = 0;
    rshmem_barrier_all();
    rshmem_putmem(sym + size - 64, &v, sizeof v, (me + 1) % n);
    rshmem_barrier_all();
    CUDA_CHECK(cudaMemcpy(&w, (char *)a.p + size - 64, sizeof w, cudaMemcpyDeviceToHost));
    CHECK(w == 0xabcd0000u + left);
    CHECK(rshmem_ptr(sym, me) == sym);
    CHECK(rshmem_ptr(sym, (me + 1) % n) != nullptr);

    // 3. A second buffer below the first; the heap still grows; both unregister.
    VmmBuf b;
    if (make_vmm(&b, gran, dev, true)) return 1;
    char *sym2 = static_cast<char *>(rshmemx_buffer_register_symmetric((void *)b.p, gran, 0));
    CHECK(sym2 != nullptr && sym2 + gran <= sym);
    void *big = rshmem_malloc(256u << 20);
    CHECK(big != nullptr);
    CHECK((char *)big + (256u << 20) <= sym2);
    rshmem_free(big);
    CHECK(rshmemx_buffer_unregister_symmetric(sym2, gran) == RSHMEM_SUCCESS);
    CHECK(rshmemx_buffer_unregister_symmetric(sym, size) == RSHMEM_SUCCESS);
    CHECK(rshmemx_buffer_unregister_symmetric(sym, size) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmem_ptr(sym, me) == nullptr);
    // The address space is reused: the same buffer registers at the same place again.
    char *again = static_cast<char *>(rshmemx_buffer_register_symmetric((void *)a.p, size, 0));
    CHECK(again == sym);
    CHECK(rshmemx_buffer_unregister_symmetric(again, size) == RSHMEM_SUCCESS);

    // 4. Refusals (every PE gets NULL; the messages name the call and the cause).
    void *dm = nullptr;
    CUDA_CHECK(cudaMalloc(&dm, size));
    CHECK(rshmemx_buffer_register_symmetric(dm, size, 0) == nullptr);  // not VMM memory
    CUDA_CHECK(cudaFree(dm));
    VmmBuf c;
    if (make_vmm(&c, gran, dev, false)) return 1;
    CHECK(rshmemx_buffer_register_symmetric((void *)c.p, gran, 0) == nullptr);  // no POSIX fd
    CHECK(rshmemx_buffer_register_symmetric((void *)a.p, me == 0 ? size : gran, 0) == nullptr);
    CHECK(rshmemx_buffer_register_symmetric((void *)a.p, size, 1) == nullptr);  // flags
    // Still usable afterwards.
    char *last = static_cast<char *>(rshmemx_buffer_register_symmetric((void *)a.p, size, 0));
    CHECK(last == sym);
    CHECK(rshmemx_buffer_unregister_symmetric(last, size) == RSHMEM_SUCCESS);

    rshmem_barrier_all();
    rshmem_finalize();
    if (free_vmm(&a) || free_vmm(&b) || free_vmm(&c)) return 1;
    printf("user_buffer: PE %d passed\n", me);
    return 0;
}
