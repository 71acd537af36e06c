/* Misuse: a put to a stack address (not symmetric) aborts the job with a message naming the call. */
#include <shmem.h>
#include "check.h"

int main(void) {
    shmem_init();
    long local[4] = {0};
    long src[4] = {1, 2, 3, 4};
    shmem_barrier_all();
    if (shmem_my_pe() == shmem_n_pes() - 1) shmem_long_put(local, src, 4, 0);
    shmem_barrier_all();
    printf("NOT REACHED PE %d\n", shmem_my_pe());
    shmem_finalize();
    return 0;
}
