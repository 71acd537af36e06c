/* shmem_global_exit(3) on the last PE ends every PE with status 3 while the others wait in a
 * barrier. */
#include <shmem.h>
#include "check.h"

int main(void) {
    shmem_init();
    shmem_barrier_all();
    if (shmem_my_pe() == shmem_n_pes() - 1) {
        fprintf(stderr, "PE %d calls global_exit\n", shmem_my_pe());
        shmem_global_exit(3);
    }
    shmem_barrier_all();
    printf("NOT REACHED PE %d\n", shmem_my_pe());
    shmem_finalize();
    return 0;
}
