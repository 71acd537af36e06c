/* Misuse: a put to a PE out of range aborts the job with a message naming the call. */
#include <shmem.h>
#include "check.h"

int main(void) {
    shmem_init();
    int *x = shmem_malloc(sizeof(int));
    shmem_barrier_all();
    if (shmem_my_pe() == 0) shmem_int_p(x, 1, shmem_n_pes());
    shmem_barrier_all();
    printf("NOT REACHED PE %d\n", shmem_my_pe());
    shmem_finalize();
    return 0;
}
