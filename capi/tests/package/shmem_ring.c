/* Ring shift against shmem.h (the OpenSHMEM C ABI, libshmem): the same output as ring_shift.c.
 * Built by scripts/check-install through pkg-config (shmem-rshmem) and CMake (rshmem::shmem). */
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    int me = shmem_my_pe();
    int n = shmem_n_pes();
    int *message = (int *)shmem_calloc(1, sizeof(int));
    if (message == NULL) return 1;
    shmem_int_p(message, me, (me + 1) % n);
    shmem_barrier_all();
    int got = *message;
    printf("%d: received message %d\n", me, got);
    shmem_free(message);
    shmem_finalize();
    if (got != (me + n - 1) % n) {
        fprintf(stderr, "shmem_ring: PE %d expected %d, got %d\n", me, (me + n - 1) % n, got);
        return 1;
    }
    return 0;
}
