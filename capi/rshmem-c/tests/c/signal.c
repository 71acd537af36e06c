/* put_signal / signal_op / signal_wait_until / signal_fetch and the wait/test family: each PE
   sends a block to its right neighbour with a signal and waits for its left neighbour's. */
#include "check.h"

int main(void) {
    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    int me = rshmem_my_pe(), n = rshmem_n_pes();
    check_pe = me;
    int right = (me + 1) % n, left = (me + n - 1) % n;
    int *buf = rshmem_calloc(64, sizeof(int));
    uint64_t *sig = rshmem_calloc(2, sizeof(uint64_t));
    int *flags = rshmem_calloc(8, sizeof(int));
    CHECK(buf && sig && flags);

    int src[64];
    for (int i = 0; i < 64; i++) src[i] = me * 64 + i;
    rshmem_int_put_signal(buf, src, 64, &sig[0], 7, RSHMEM_SIGNAL_SET, right);
    CHECK(rshmem_signal_wait_until(&sig[0], RSHMEM_CMP_EQ, 7) == 7);
    int got[64];
    rshmem_int_get(got, buf, 64, me);
    for (int i = 0; i < 64; i++) CHECK(got[i] == left * 64 + i);

    /* Signal adds from every PE. */
    rshmem_signal_op(&sig[1], 1, RSHMEM_SIGNAL_ADD, 0);
    if (me == 0) {
        CHECK(rshmem_signal_wait_until(&sig[1], RSHMEM_CMP_GE, (uint64_t)n) == (uint64_t)n);
        CHECK(rshmem_signal_fetch(&sig[1]) == (uint64_t)n);
    }
    rshmem_barrier_all();

    /* putmem_signal_nbi + quiet. */
    rshmem_putmem_signal_nbi(&buf[0], &me, sizeof me, &sig[0], 1, RSHMEM_SIGNAL_ADD, right);
    rshmem_quiet();
    CHECK(rshmem_signal_wait_until(&sig[0], RSHMEM_CMP_EQ, 8) == 8);
    CHECK(rshmem_int_g(&buf[0], me) == left);

    /* wait_until / test on ints: PE p sets flags[p] on PE 0. */
    rshmem_int_p(&flags[me], 1, 0);
    rshmem_quiet();
    if (me == 0) {
        rshmem_int_wait_until_all(flags, (size_t)n, NULL, RSHMEM_CMP_EQ, 1);
        CHECK(rshmem_int_test_all(flags, (size_t)n, NULL, RSHMEM_CMP_EQ, 1) == 1);
        CHECK(rshmem_int_test(&flags[n - 1], RSHMEM_CMP_EQ, 1) == 1);
        CHECK(rshmem_int_test(&flags[n], RSHMEM_CMP_EQ, 1) == 0);
        size_t idx[8];
        CHECK(rshmem_int_wait_until_some(flags, (size_t)n, idx, NULL, RSHMEM_CMP_EQ, 1) ==
              (size_t)n);
        CHECK(rshmem_int_test_any(flags, (size_t)n + 1, NULL, RSHMEM_CMP_EQ, 0) == (size_t)n);
        int status[8] = {0};
        for (int i = 0; i < n; i++) status[i] = 1;
        CHECK(rshmem_int_test_any(flags, (size_t)n, status, RSHMEM_CMP_EQ, 1) == RSHMEM_SIZE_MAX);
        int vals[8];
        for (int i = 0; i < n; i++) vals[i] = 1;
        rshmem_int_wait_until_all_vector(flags, (size_t)n, NULL, RSHMEM_CMP_EQ, vals);
        rshmem_int_wait_until(&flags[0], RSHMEM_CMP_NE, 0);
    }
    rshmem_barrier_all();
    rshmem_free(flags);
    rshmem_free(sig);
    rshmem_free(buf);
    return finish("signal");
}
