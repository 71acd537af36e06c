/* Misuse: a deprecated active-set reduction with a negative nreduce aborts the job with a message
 * naming the call (the typed reductions; BAD_NREDUCE_LD: the C-combined long double ones). */
#include <shmem.h>
#include "check.h"

static long psync[SHMEM_REDUCE_SYNC_SIZE];

int main(void) {
    shmem_init();
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) psync[i] = SHMEM_SYNC_VALUE;
#ifdef BAD_NREDUCE_LD
    long double *ls = shmem_malloc(sizeof(long double)), *ld = shmem_malloc(sizeof(long double));
    shmem_barrier_all();
    shmem_longdouble_sum_to_all(ld, ls, -1, 0, 0, shmem_n_pes(), NULL, psync);
#else
    int *s = shmem_malloc(sizeof(int)), *d = shmem_malloc(sizeof(int));
    static int pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
    shmem_barrier_all();
    shmem_int_sum_to_all(d, s, -1, 0, 0, shmem_n_pes(), pwrk, psync);
#endif
    printf("NOT REACHED PE %d\n", shmem_my_pe());
    shmem_finalize();
    return 0;
}
