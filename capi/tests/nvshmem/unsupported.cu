// Unsupported NVSHMEM calls are compile-time errors naming the call (capi/tests/nvshmem/run
// compiles this file once per CASE and expects the error; with
// -DRSHMEM_NVSHMEM_UNSUPPORTED_ABORTS every case compiles).
#include <cuda.h>
#include <nvshmem.h>
#include <nvshmemx.h>

__global__ void kernel(half *d, const half *s) {
#if CASE == 3
    // A device call: NVLink multicast addresses.
    void *mc = nvshmemx_mc_ptr(NVSHMEM_TEAM_WORLD, s);
    (void)mc;
#endif
    (void)d;
    (void)s;
}

int main(void) {
    nvshmem_init();
    void *p = nvshmem_malloc(64);
#if CASE == 1
    int major = 0, minor = 0, patch = 0;
    nvshmemx_vendor_get_version_info(&major, &minor, &patch);
#elif CASE == 2
    CUlibrary l = 0;
    int rc = nvshmemx_culibrary_init(l);
    (void)rc;
#elif CASE == 4
    nvshmemx_double2_maxloc_reduce_on_stream(NVSHMEM_TEAM_WORLD, (double2 *)p, (const double2 *)p, 1, 0);
#endif
    kernel<<<1, 1>>>((half *)p, (const half *)p);
    nvshmem_free(p);
    nvshmem_finalize();
    return 0;
}
