/* rshmem_global_exit: the last PE ends the job with status 3 while the others are blocked in a
   barrier; no PE goes on. */
#define _DEFAULT_SOURCE /* usleep */
#include <unistd.h>
#include "check.h"

int main(void) {
    CHECK(rshmem_init_status() == RSHMEM_STATUS_NOT_INITIALIZED);
    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    CHECK(rshmem_init_status() == RSHMEM_STATUS_IS_INITIALIZED);
    int me = rshmem_my_pe(), n = rshmem_n_pes();
    check_pe = me;
    rshmem_barrier_all();
    if (me == n - 1) {
        usleep(200000);
        rshmem_global_exit(3);
    }
    rshmem_barrier_all();
    printf("NOT REACHED PE %d\n", me);
    return 0;
}
