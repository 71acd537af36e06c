/* Memory management: malloc, calloc, align, realloc, free, malloc_with_hints, deprecated forms. */
#include <shmem.h>
#include <stdint.h>
#include "check.h"

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
    CHECK(shmem_malloc(0) == NULL);
    long *c = shmem_calloc(100, sizeof(long));
    for (int i = 0; i < 100; i++) CHECK(c[i] == 0);
    double *a = shmem_align(4096, 10 * sizeof(double));
    CHECK(((uintptr_t) a) % 4096 == 0);
    int *m = shmem_malloc(8 * sizeof(int));
    for (int i = 0; i < 8; i++) m[i] = me * 100 + i;
    shmem_barrier_all();
    m = shmem_realloc(m, 1000 * sizeof(int));
    for (int i = 0; i < 8; i++) CHECK(m[i] == me * 100 + i);
    shmem_int_p(&m[999], me + 7, right);
    shmem_barrier_all();
    CHECK(m[999] == left + 7);
    long *hint = shmem_malloc_with_hints(64, SHMEM_MALLOC_ATOMICS_REMOTE);
    hint[0] = 0;
    shmem_barrier_all();
    shmem_long_atomic_add(hint, 3, 0);
    shmem_barrier_all();
    if (me == 0) CHECK(hint[0] == 3L * n);
    void *old = shmalloc(32);
    CHECK(old != NULL);
    shfree(old);
    shmem_free(hint);
    shmem_free(m);
    shmem_free(a);
    shmem_free(c);
    shmem_free(NULL);
    DONE("memory");
    shmem_finalize();
    return 0;
}
