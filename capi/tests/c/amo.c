/* Atomics on heap and static objects from every PE: counters, fetch_add uniqueness, compare_swap,
 * swap, bitwise, float fetch/set/swap, _nbi fetching forms, deprecated names and generics. */
#include <shmem.h>
#include "check.h"

static long scount;
static unsigned int sbits;
static int owner = -1;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    long *hcount = shmem_calloc(1, sizeof(long));
    int *seen = shmem_calloc(64, sizeof(int));
    uint64_t *hbits = shmem_calloc(1, 8);
    double *hd = shmem_calloc(1, sizeof(double));
    int *hi = shmem_calloc(1, sizeof(int));
    shmem_barrier_all();
    for (int k = 0; k < 10; k++) {
        long old = shmem_long_atomic_fetch_add(hcount, me + 1, 0);
        CHECK(old >= 0);
        shmem_atomic_inc(&scount, 0);                         /* generic, static */
        int t = shmem_int_atomic_fetch_inc(hi, n - 1);
        CHECK(t >= 0 && t < 10 * n);
        shmem_int_p(&seen[t % 64], 1, n - 1);
    }
    shmem_uint_atomic_or(&sbits, 1u << me, 0);
    shmem_uint64_atomic_fetch_xor(hbits, 1ULL << (32 + me), 0);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(*hcount == 10L * n * (n + 1) / 2);
        CHECK(scount == 10L * n);
        CHECK(sbits == (1u << n) - 1);
        CHECK(*hbits == (((1ULL << n) - 1) << 32));
    }
    if (me == n - 1) {
        CHECK(*hi == 10 * n);
        for (int i = 0; i < 10 * n && i < 64; i++) CHECK(seen[i] == 1);
    }
    shmem_barrier_all();
    /* exactly one PE wins the compare-and-swap on the static owner of PE 0 */
    int prev = shmem_int_atomic_compare_swap(&owner, -1, me, 0);
    int won = prev == -1;
    int *wins = shmem_calloc(1, sizeof(int));
    shmem_barrier_all();
    if (won) shmem_int_atomic_add(wins, 1, 0);
    shmem_barrier_all();
    if (me == 0) CHECK(*wins == 1 && owner >= 0 && owner < n);
    /* swap and fetch/set on doubles */
    shmem_barrier_all();
    if (me == 1) shmem_double_atomic_set(hd, 2.5, 0);
    shmem_barrier_all();
    CHECK(shmem_double_atomic_fetch(hd, 0) == 2.5);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(shmem_atomic_swap(hd, -1.25, 1) == 0.0);       /* generic */
        CHECK(shmem_double_g(hd, 1) == -1.25);
    }
    /* non-blocking fetching forms */
    long f = -7;
    shmem_long_atomic_fetch_add_nbi(&f, hcount, 0, 0);
    unsigned int fb = 0;
    shmem_uint_atomic_fetch_and_nbi(&fb, &sbits, ~0u, 0);
    shmem_quiet();
    CHECK(f == 10L * n * (n + 1) / 2);
    CHECK(fb == (1u << n) - 1);
    /* deprecated names */
    shmem_barrier_all();
    long d = shmem_long_finc(&scount, 0);
    CHECK(d >= 10L * n);
    shmem_barrier_all();
    if (me == 0) {
        CHECK(scount == 11L * n);
        CHECK(shmem_long_fadd(&scount, 1, 0) == 11L * n);
        CHECK(shmem_long_cswap(&scount, 11L * n + 1, 5, 0) == 11L * n + 1 && scount == 5);
        CHECK(shmem_long_swap(&scount, 9, 0) == 5);
        CHECK(shmem_fetch(&scount, 0) == 9);                 /* deprecated generic */
    }
    shmem_barrier_all();
    shmem_free(wins);
    shmem_free(hi);
    shmem_free(hd);
    shmem_free(hbits);
    shmem_free(seen);
    shmem_free(hcount);
    DONE("amo");
    shmem_finalize();
    return 0;
}
