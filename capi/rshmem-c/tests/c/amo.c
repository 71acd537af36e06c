/* Host atomics: every PE adds into PE 0's counter, fetch/set/swap/compare_swap, bitwise, floats. */
#include "check.h"

int main(void) {
    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    int me = rshmem_my_pe(), n = rshmem_n_pes();
    check_pe = me;
    long long *c = rshmem_calloc(4, sizeof(long long));
    unsigned int *bits = rshmem_calloc(1, sizeof(unsigned int));
    float *f = rshmem_calloc(1, sizeof(float));
    CHECK(c && bits && f);

    long long old = rshmem_longlong_atomic_fetch_add(&c[0], me + 1, 0);
    CHECK(old >= 0);
    rshmem_longlong_atomic_add(&c[1], 2, 0);
    rshmem_longlong_atomic_inc(&c[2], 0);
    (void)rshmem_longlong_atomic_fetch_inc(&c[2], 0);
    rshmem_uint_atomic_or(bits, 1u << me, 0);
    rshmem_barrier_all();
    long long sum = (long long)n * (n + 1) / 2;
    CHECK(rshmem_longlong_atomic_fetch(&c[0], 0) == sum);
    CHECK(rshmem_longlong_atomic_fetch(&c[1], 0) == 2LL * n);
    CHECK(rshmem_longlong_atomic_fetch(&c[2], 0) == 2LL * n);
    CHECK(rshmem_uint_atomic_fetch(bits, 0) == (1u << n) - 1);
    rshmem_barrier_all();

    /* compare_swap: exactly one PE wins. */
    long long won = rshmem_longlong_atomic_compare_swap(&c[3], 0, me + 100, 0);
    rshmem_barrier_all();
    long long winner = rshmem_longlong_atomic_fetch(&c[3], 0);
    CHECK(winner >= 100 && winner < 100 + n);
    CHECK((won == 0) == (winner == me + 100));
    rshmem_barrier_all();

    if (me == 0) {
        rshmem_longlong_atomic_set(&c[0], 5, n - 1);
        CHECK(rshmem_longlong_atomic_swap(&c[0], 6, n - 1) == 5);
        CHECK(rshmem_uint_atomic_fetch_and(bits, 1u, 0) == (1u << n) - 1);
        rshmem_uint_atomic_xor(bits, 3u, 0);
        CHECK(rshmem_uint_atomic_fetch_xor(bits, 0u, 0) == 2u);
        rshmem_float_atomic_set(f, 2.5f, 1);
        CHECK(rshmem_float_atomic_swap(f, 1.5f, 1) == 2.5f);
        CHECK(rshmem_float_atomic_fetch(f, 1) == 1.5f);
    }
    rshmem_barrier_all();
    if (me == n - 1) CHECK(rshmem_longlong_atomic_fetch(&c[0], me) == 6);
    rshmem_barrier_all();
    rshmem_free(f);
    rshmem_free(bits);
    rshmem_free(c);
    return finish("amo");
}
