/* shmem_global_exit(status) on one PE ends every PE with that status while the others wait in a
 * barrier. argv[1]: the caller (default the last PE); argv[2]: the status (default 3). */
#include <stdlib.h>
#include <shmem.h>
#include "check.h"

int main(int argc, char **argv) {
    shmem_init();
    int caller = argc > 1 ? atoi(argv[1]) : shmem_n_pes() - 1;
    int status = argc > 2 ? atoi(argv[2]) : 3;
    shmem_barrier_all();
    if (shmem_my_pe() == caller) {
        fprintf(stderr, "PE %d calls global_exit\n", shmem_my_pe());
        shmem_global_exit(status);
    }
    shmem_barrier_all();
    printf("NOT REACHED PE %d\n", shmem_my_pe());
    shmem_finalize();
    return 0;
}
