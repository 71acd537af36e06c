/* Team collectives on heap and static buffers, over SHMEM_TEAM_WORLD and a strided team,
 * every reduction operator, the C11 generics, and the deprecated active-set forms. Values
 * encode (PE, index) so a wrong source PE, offset or operator shows. */
#include <complex.h>
#include <shmem.h>
#include <string.h>
#include "check.h"

#define N 5
#define MAXP 8

static long s_src[MAXP * N], s_dst[MAXP * N * 2];
static int s_isrc[N], s_idst[N];
static long psync[SHMEM_REDUCE_SYNC_SIZE];
static long pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];

static long val(int pe, int i) { return 1000L * (pe + 1) + i; }

/* All collectives of long over team t (members in world order given by w[]). */
static void run(shmem_team_t t, const int *w, long *src, long *dst) {
    int me = shmem_team_my_pe(t), n = shmem_team_n_pes(t);
    int wme = w[me];

    /* broadcast from the last team PE; the root's dest is written too (1.5). */
    for (int i = 0; i < N; i++) src[i] = val(wme, i), dst[i] = -1;
    CHECK(shmem_long_broadcast(t, dst, src, N, n - 1) == 0);
    for (int i = 0; i < N; i++) CHECK(dst[i] == val(w[n - 1], i));
    for (int i = 0; i < N; i++) dst[i] = -1;
    CHECK(shmem_broadcast(t, dst, src, N, 0) == 0); /* C11 generic */
    for (int i = 0; i < N; i++) CHECK(dst[i] == val(w[0], i));
    /* in place */
    CHECK(shmem_long_broadcast(t, src, src, N, 0) == 0);
    for (int i = 0; i < N; i++) CHECK(src[i] == val(w[0], i));

    /* fcollect */
    for (int i = 0; i < N; i++) src[i] = val(wme, i);
    for (int i = 0; i < n * N; i++) dst[i] = -1;
    CHECK(shmem_long_fcollect(t, dst, src, N) == 0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < N; i++) CHECK(dst[j * N + i] == val(w[j], i));
    CHECK(shmem_fcollectmem(t, dst, src, 2 * sizeof(long)) == 0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < 2; i++) CHECK(dst[j * 2 + i] == val(w[j], i));

    /* collect: team PE j contributes j + 1 elements */
    for (int i = 0; i < n * N; i++) dst[i] = -1;
    CHECK(shmem_collect(t, dst, src, (size_t) me + 1) == 0);
    int at = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i <= j; i++) CHECK(dst[at++] == val(w[j], i));
    CHECK(dst[at] == -1);

    /* alltoall: block j of PE i's source lands in block i of PE j's dest */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < 2; i++) src[j * 2 + i] = val(wme, 10 * j + i);
    for (int i = 0; i < 2 * n; i++) dst[i] = -1;
    CHECK(shmem_long_alltoall(t, dst, src, 2) == 0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < 2; i++) CHECK(dst[j * 2 + i] == val(w[j], 10 * me + i));
    CHECK(shmem_alltoallmem(t, dst, src, 2 * sizeof(long)) == 0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < 2; i++) CHECK(dst[j * 2 + i] == val(w[j], 10 * me + i));

    /* alltoalls: source stride 1, dest stride 2 (the gaps keep -7) */
    for (int i = 0; i < 2 * n; i++) dst[i] = -7;
    for (int j = 0; j < n; j++) src[j] = val(wme, j);
    CHECK(shmem_long_alltoalls(t, dst, src, 2, 1, 1) == 0);
    for (int j = 0; j < n; j++) {
        CHECK(dst[2 * j] == val(w[j], me));
        if (2 * j + 1 < 2 * n - 1) CHECK(dst[2 * j + 1] == -7);
    }
    CHECK(shmem_alltoalls(t, dst, src, 1, 1, 1) == 0);
    for (int j = 0; j < n; j++) CHECK(dst[j] == val(w[j], me));

    /* reductions */
    long sum = 0, prod = 1, mx = -1, mn = 1L << 40, band = -1, bor = 0, bxor = 0;
    for (int j = 0; j < n; j++) {
        long v = val(w[j], 1);
        sum += v, prod *= v, mx = v > mx ? v : mx, mn = v < mn ? v : mn;
        band &= v, bor |= v, bxor ^= v;
    }
    for (int i = 0; i < N; i++) src[i] = val(wme, i);
    CHECK(shmem_long_sum_reduce(t, dst, src, N) == 0);
    CHECK(dst[1] == sum);
    for (int i = 0; i < N; i++) {
        long s = 0;
        for (int j = 0; j < n; j++) s += val(w[j], i);
        CHECK(dst[i] == s);
    }
    CHECK(shmem_long_prod_reduce(t, dst, src, N) == 0 && dst[1] == prod);
    CHECK(shmem_long_max_reduce(t, dst, src, N) == 0 && dst[1] == mx);
    CHECK(shmem_long_min_reduce(t, dst, src, N) == 0 && dst[1] == mn);
    CHECK(shmem_and_reduce(t, dst, src, N) == 0 && dst[1] == band);
    CHECK(shmem_or_reduce(t, dst, src, N) == 0 && dst[1] == bor);
    CHECK(shmem_xor_reduce(t, dst, src, N) == 0 && dst[1] == bxor);
    CHECK(shmem_sum_reduce(t, src, src, N) == 0 && src[1] == sum); /* in place, generic */
    CHECK(shmem_team_sync(t) == 0);
}

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    CHECK(n <= MAXP);
    long *hsrc = shmem_malloc(sizeof(long) * MAXP * N);
    long *hdst = shmem_malloc(sizeof(long) * MAXP * N * 2);
    int world[MAXP];
    for (int i = 0; i < MAXP; i++) world[i] = i;

    run(SHMEM_TEAM_WORLD, world, hsrc, hdst);  /* runtime path */
    run(SHMEM_TEAM_WORLD, world, s_src, s_dst); /* C-layer path (static buffers) */
    run(SHMEM_TEAM_WORLD, world, hsrc, s_dst);  /* mixed */

    /* The team of PEs n-1, n-3, ... (reverse order). */
    shmem_team_t t;
    int w[MAXP] = {0}, k = 0;
    for (int p = n - 1; p >= 0; p -= 2) w[k++] = p;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, n - 1, -2, k, NULL, 0, &t) == 0);
    if (t != SHMEM_TEAM_INVALID) {
        run(t, w, hsrc, hdst);
        run(t, w, s_src, s_dst);
        shmem_team_destroy(t);
    }

    /* Other types: int, double, unsigned, and the C-side long double and complex. */
    int *isrc = shmem_malloc(sizeof(int) * N), *idst = shmem_malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) isrc[i] = s_isrc[i] = (me + 1) * (i + 1);
    CHECK(shmem_int_max_reduce(SHMEM_TEAM_WORLD, idst, isrc, N) == 0);
    CHECK(shmem_int_min_reduce(SHMEM_TEAM_WORLD, s_idst, s_isrc, N) == 0);
    for (int i = 0; i < N; i++) CHECK(idst[i] == n * (i + 1) && s_idst[i] == i + 1);
    double *dsrc = shmem_malloc(sizeof(double) * 2), *ddst = shmem_malloc(sizeof(double) * 2);
    dsrc[0] = 0.5 * (me + 1), dsrc[1] = -(double) me;
    CHECK(shmem_double_sum_reduce(SHMEM_TEAM_WORLD, ddst, dsrc, 2) == 0);
    CHECK(ddst[0] == 0.25 * n * (n + 1) && ddst[1] == -0.5 * n * (n - 1));
    CHECK(shmem_min_reduce(SHMEM_TEAM_WORLD, ddst, dsrc, 2) == 0);
    CHECK(ddst[0] == 0.5 && ddst[1] == -(double) (n - 1));
    unsigned *usrc = shmem_malloc(sizeof(unsigned)), *udst = shmem_malloc(sizeof(unsigned));
    *usrc = 1u << me;
    CHECK(shmem_uint_or_reduce(SHMEM_TEAM_WORLD, udst, usrc, 1) == 0 && *udst == (1u << n) - 1);
    long double *lsrc = shmem_malloc(sizeof(long double) * 2);
    long double *ldst = shmem_malloc(sizeof(long double) * 2);
    lsrc[0] = me + 0.25L, lsrc[1] = 2;
    CHECK(shmem_longdouble_max_reduce(SHMEM_TEAM_WORLD, ldst, lsrc, 2) == 0);
    CHECK(ldst[0] == n - 1 + 0.25L && ldst[1] == 2);
    CHECK(shmem_longdouble_prod_reduce(SHMEM_TEAM_WORLD, ldst, lsrc, 2) == 0);
    CHECK(ldst[1] == (long double) (1L << n));
    double _Complex *csrc = shmem_malloc(sizeof(double _Complex));
    double _Complex *cdst = shmem_malloc(sizeof(double _Complex));
    *csrc = me + 1.0 * I * (me + 1);
    CHECK(shmem_complexd_sum_reduce(SHMEM_TEAM_WORLD, cdst, csrc, 1) == 0);
    CHECK(creal(*cdst) == n * (n - 1) / 2.0 && cimag(*cdst) == n * (n + 1) / 2.0);
    CHECK(shmem_long_sum_reduce(SHMEM_TEAM_INVALID, hdst, hsrc, 1) != 0);

    /* Deprecated active sets: odd PEs (start 1, log stride 1) and every PE. */
    int size = n / 2;
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) psync[i] = SHMEM_SYNC_VALUE;
    /* pWrk holds garbage: a routine that mixed up pWrk and pSync would fail. */
    for (int i = 0; i < SHMEM_REDUCE_MIN_WRKDATA_SIZE; i++) pwrk[i] = 0x5a5a5a5a;
    shmem_barrier_all();
    if (me % 2) {
        int ai = me / 2; /* index in the active set */
        for (int rep = 0; rep < 3; rep++) {
            for (int i = 0; i < N; i++) hsrc[i] = val(me, i), s_dst[i] = -1;
            shmem_barrier(1, 1, size, psync);
            shmem_broadcast64(s_dst, hsrc, N, size - 1, 1, 1, size, psync);
            for (int i = 0; i < N; i++) CHECK(s_dst[i] == (ai == size - 1 ? -1 : val(2 * size - 1, i)));
            shmem_barrier(1, 1, size, psync);
            shmem_fcollect64(s_dst, hsrc, N, 1, 1, size, psync);
            for (int j = 0; j < size; j++)
                for (int i = 0; i < N; i++) CHECK(s_dst[j * N + i] == val(2 * j + 1, i));
            shmem_barrier(1, 1, size, psync);
            shmem_collect64(hdst, hsrc, (size_t) ai + 1, 1, 1, size, psync);
            int at = 0;
            for (int j = 0; j < size; j++)
                for (int i = 0; i <= j; i++) CHECK(hdst[at++] == val(2 * j + 1, i));
            shmem_barrier(1, 1, size, psync);
            shmem_long_sum_to_all(hdst, hsrc, N, 1, 1, size, pwrk, psync);
            for (int i = 0; i < N; i++) {
                long s = 0;
                for (int j = 0; j < size; j++) s += val(2 * j + 1, i);
                CHECK(hdst[i] == s);
            }
            shmem_barrier(1, 1, size, psync);
            for (int j = 0; j < size; j++) s_src[j] = val(me, j);
            shmem_alltoall64(s_dst, s_src, 1, 1, 1, size, psync);
            for (int j = 0; j < size; j++) CHECK(s_dst[j] == val(2 * j + 1, ai));
            shmem_sync(1, 1, size, psync);
        }
    }
    shmem_barrier_all();
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) CHECK(psync[i] == SHMEM_SYNC_VALUE);
    int32_t i32s = me + 1, i32d = 0;
    static int32_t si32s, si32d;
    si32s = i32s;
    shmem_barrier_all();
    shmem_int_max_to_all(&si32d, &si32s, 1, 0, 0, n, (int *) pwrk, psync);
    CHECK(si32d == n);
    (void) i32d;
    shmem_barrier(0, 0, n, psync);
    shmem_int_prod_to_all(s_idst, s_isrc, 1, 0, 0, n, (int *) pwrk, psync);
    long f = 1;
    for (int p = 1; p <= n; p++) f *= p;
    CHECK(s_idst[0] == f);
    shmem_barrier_all();
    DONE("coll");
    shmem_finalize();
    return 0;
}
