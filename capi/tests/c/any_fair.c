/* The *_any calls must not starve satisfied elements: with every element satisfied and no
 * status mask, n successive calls on one array return n different indices. Checked for
 * test_any, wait_until_any and their vector forms on a heap int array (the runtime's waits), a
 * static int array (the data segment) and a heap short array (polled by the C layer). */
#include <shmem.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

#define N 5
static int sflags[N];

/* Calls `expr` (which yields an index) N times and checks that every index came back. */
#define ALL_SEEN(expr)                                  \
    do {                                                \
        int seen[N];                                    \
        memset(seen, 0, sizeof seen);                   \
        for (int k = 0; k < N; k++) {                   \
            size_t i = (expr);                          \
            CHECK(i < N);                               \
            seen[i] = 1;                                \
        }                                               \
        for (int k = 0; k < N; k++) CHECK(seen[k] == 1); \
    } while (0)

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    int *hflags = shmem_calloc(N, sizeof(int));
    short *shflags = shmem_calloc(N, sizeof(short));
    /* Every PE sets every element of its right neighbour's arrays to 1. */
    int right = (me + 1) % npes;
    for (int i = 0; i < N; i++) {
        shmem_int_atomic_set(&hflags[i], 1, right);
        shmem_int_atomic_set(&sflags[i], 1, right);
        shmem_short_p(&shflags[i], 1, right);
    }
    shmem_barrier_all();
    int ones[N] = {1, 1, 1, 1, 1};
    short sones[N] = {1, 1, 1, 1, 1};

    ALL_SEEN(shmem_int_test_any(hflags, N, NULL, SHMEM_CMP_EQ, 1));
    ALL_SEEN(shmem_int_wait_until_any(hflags, N, NULL, SHMEM_CMP_EQ, 1));
    ALL_SEEN(shmem_int_test_any_vector(hflags, N, NULL, SHMEM_CMP_EQ, ones));
    ALL_SEEN(shmem_int_wait_until_any_vector(hflags, N, NULL, SHMEM_CMP_EQ, ones));

    ALL_SEEN(shmem_int_test_any(sflags, N, NULL, SHMEM_CMP_EQ, 1));
    ALL_SEEN(shmem_int_wait_until_any(sflags, N, NULL, SHMEM_CMP_EQ, 1));
    ALL_SEEN(shmem_int_wait_until_any_vector(sflags, N, NULL, SHMEM_CMP_EQ, ones));

    ALL_SEEN(shmem_short_test_any(shflags, N, NULL, SHMEM_CMP_EQ, 1));
    ALL_SEEN(shmem_short_wait_until_any(shflags, N, NULL, SHMEM_CMP_EQ, 1));
    ALL_SEEN(shmem_short_test_any_vector(shflags, N, NULL, SHMEM_CMP_EQ, sones));

    /* With a status mask the excluded elements are never returned. */
    int status[N] = {1, 0, 1, 0, 1};
    for (int k = 0; k < 4; k++) {
        size_t i = shmem_int_test_any(hflags, N, status, SHMEM_CMP_EQ, 1);
        CHECK(i == 1 || i == 3);
    }

    shmem_barrier_all();
    shmem_free(shflags);
    shmem_free(hflags);
    DONE("any_fair");
    shmem_finalize();
    return 0;
}
