/* shmem_int_ibput with a target stride smaller than the block size must abort naming the
 * call (the blocks would overlap). */
#include <shmem.h>
#include "check.h"

int main(void) {
    shmem_init();
    int *d = shmem_malloc(64 * sizeof(int));
    int s[64] = {0};
    shmem_int_ibput(d, s, 2, 4, 3, 4, (shmem_my_pe() + 1) % shmem_n_pes());
    printf("NOT REACHED\n");
    shmem_finalize();
    return 0;
}
