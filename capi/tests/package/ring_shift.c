/* Ring shift against rshmem.h (C, host API): every PE puts its number into a symmetric int on the
 * next PE; after a barrier each prints what arrived. Runs on either backend (on the GPU backend the
 * int is GPU memory, written and read with the host p/g calls). Built by scripts/check-install
 * through pkg-config and CMake from an installed prefix. Also compiled as C++ (ring_shift_cxx.cpp). */
#include <rshmem.h>
#include <stdio.h>

int main(void) {
    if (rshmem_init() != RSHMEM_SUCCESS) return 1;
    int me = rshmem_my_pe();
    int n = rshmem_n_pes();
    int *message = (int *)rshmem_calloc(1, sizeof(int));
    if (message == NULL) return 1;
    rshmem_int_p(message, me, (me + 1) % n);
    rshmem_barrier_all();
    int got = rshmem_int_g(message, me);
    printf("%d: received message %d\n", me, got);
    rshmem_free(message);
    if (rshmem_finalize() != RSHMEM_SUCCESS) return 1;
    if (got != (me + n - 1) % n) {
        fprintf(stderr, "ring_shift: PE %d expected %d, got %d\n", me, (me + n - 1) % n, got);
        return 1;
    }
    return 0;
}
