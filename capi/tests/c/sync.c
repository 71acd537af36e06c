/* Point-to-point synchronization on heap and static variables: wait_until, the all/any/some and
 * vector forms, test forms, the deprecated wait, and short variables. Each PE is woken by its
 * left neighbour with values that name it. */
#include <shmem.h>
#include "check.h"

#define N 8
static long sflags[N];
static short sshort;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
    int *hflags = shmem_calloc(N, sizeof(int));
    short *hshort = shmem_calloc(1, sizeof(short));
    shmem_barrier_all();
    CHECK(shmem_int_test(&hflags[0], SHMEM_CMP_EQ, 0) == 1);
    CHECK(shmem_test(&sflags[0], SHMEM_CMP_NE, 0) == 0);
    shmem_int_p(&hflags[3], 100 + me, right);
    shmem_int_wait_until(&hflags[3], SHMEM_CMP_EQ, 100 + left);
    shmem_long_p(&sflags[2], 200 + me, right);
    shmem_wait_until(&sflags[2], SHMEM_CMP_GE, 200);      /* generic */
    CHECK(sflags[2] == 200 + left);
    size_t idx = shmem_int_wait_until_any(hflags, N, NULL, SHMEM_CMP_GT, 0);
    CHECK(idx == 3);
    int status[N] = {0};
    status[3] = 1;
    CHECK(shmem_int_test_any(hflags, N, status, SHMEM_CMP_GT, 0) == SIZE_MAX);
    shmem_barrier_all();
    for (int i = 0; i < N; i++) shmem_long_p(&sflags[i], 1000 + i, right);
    shmem_long_wait_until_all(sflags, N, NULL, SHMEM_CMP_GE, 1000);
    long vals[N];
    for (int i = 0; i < N; i++) vals[i] = 1000 + i;
    shmem_long_wait_until_all_vector(sflags, N, NULL, SHMEM_CMP_EQ, vals);
    CHECK(shmem_long_test_all(sflags, N, NULL, SHMEM_CMP_GE, 1000) == 1);
    CHECK(shmem_long_test_all(sflags, N, NULL, SHMEM_CMP_GE, 1001) == 0);
    size_t ind[N];
    size_t cnt = shmem_long_wait_until_some(sflags, N, ind, NULL, SHMEM_CMP_GE, 1005);
    CHECK(cnt == 3 && ind[0] == 5 && ind[1] == 6 && ind[2] == 7);
    cnt = shmem_long_test_some_vector(sflags, N, ind, NULL, SHMEM_CMP_EQ, vals);
    CHECK(cnt == N);
    shmem_barrier_all();
    for (int i = 0; i < N; i++) shmem_int_p(&hflags[i], i % 2 ? left : -1, right);
    shmem_quiet();
    shmem_barrier_all();
    cnt = shmem_int_test_some(hflags, N, ind, NULL, SHMEM_CMP_GE, 0);
    CHECK(cnt == N / 2 && ind[0] == 1);
    CHECK(shmem_int_wait_until_any_vector(hflags, N, NULL, SHMEM_CMP_EQ, (int[N]){5, 5, 5, 5, 5, 5, -1, 5}) == 6);
    /* short variables (no runtime wait for 16-bit types): heap and static */
    shmem_barrier_all();
    shmem_short_p(hshort, (short) (-300 - me), right);
    shmem_short_wait_until(hshort, SHMEM_CMP_EQ, (short) (-300 - left));
    shmem_short_p(&sshort, (short) (7 + me), right);
    shmem_short_wait(&sshort, 0);                         /* deprecated: wait while == 0 */
    CHECK(sshort == 7 + left);
    shmem_barrier_all();
    shmem_free(hshort);
    shmem_free(hflags);
    DONE("sync");
    shmem_finalize();
    return 0;
}
