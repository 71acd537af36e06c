/* Distributed locks: every PE does a non-atomic read-modify-write of a counter on PE 0 under a
 * static lock; test_lock reports a held lock. */
#include <shmem.h>
#include "check.h"

static long lock;
static long counter;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    for (int k = 0; k < 50; k++) {
        shmem_set_lock(&lock);
        long v = shmem_long_g(&counter, 0);
        shmem_long_p(&counter, v + me + 1, 0);
        shmem_clear_lock(&lock);
    }
    shmem_barrier_all();
    if (me == 0) CHECK(counter == 50L * n * (n + 1) / 2);
    shmem_barrier_all();
    if (me == 1) CHECK(shmem_test_lock(&lock) == 0);
    shmem_barrier_all();
    if (me == 0) CHECK(shmem_test_lock(&lock) == 1);
    shmem_barrier_all();
    if (me == 1) shmem_clear_lock(&lock);
    shmem_barrier_all();
    DONE("lock");
    shmem_finalize();
    return 0;
}
