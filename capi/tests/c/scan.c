/* OpenSHMEM 1.6 scans: shmem_TYPENAME_sum_inscan / _exscan over SHMEM_TEAM_WORLD and a split
 * team, in place and not, for integer, floating, long double and complex types, and the C11
 * generics shmem_sum_inscan / shmem_sum_exscan. PE p contributes p + 1 + j to element j, so
 * the inclusive prefix sum over PEs 0..p is (p + 1)(p + 2)/2 + (p + 1) j. */
#include <complex.h>
#include <shmem.h>
#include "check.h"

#define N 5
static long gsrc[N], gdst[N];

/* Sum of (q + 1 + j) for q in 0..k-1. */
static long pre(int k, int j) { return (long) k * (k + 1) / 2 + (long) k * j; }

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int *isrc = shmem_malloc(N * sizeof(int)), *idst = shmem_malloc(N * sizeof(int));
    double *dsrc = shmem_malloc(N * sizeof(double)), *ddst = shmem_malloc(N * sizeof(double));
    long double *lsrc = shmem_malloc(N * sizeof(long double));
    long double *ldst = shmem_malloc(N * sizeof(long double));
    double _Complex *csrc = shmem_malloc(N * sizeof(double _Complex));
    double _Complex *cdst = shmem_malloc(N * sizeof(double _Complex));
    unsigned char *usrc = shmem_malloc(N), *udst = shmem_malloc(N);

    for (int j = 0; j < N; j++) {
        isrc[j] = me + 1 + j;
        gsrc[j] = me + 1 + j;
        dsrc[j] = me + 1 + j;
        lsrc[j] = me + 1 + j;
        csrc[j] = (me + 1 + j) + (double) (me + 1) * I;
        usrc[j] = (unsigned char) (100 + me);
        idst[j] = -1;
    }

    CHECK(shmem_int_sum_inscan(SHMEM_TEAM_WORLD, idst, isrc, N) == 0);
    for (int j = 0; j < N; j++) CHECK(idst[j] == pre(me + 1, j));
    CHECK(shmem_int_sum_exscan(SHMEM_TEAM_WORLD, idst, isrc, N) == 0);
    for (int j = 0; j < N; j++) CHECK(idst[j] == pre(me, j));

    /* Globals, and in place. */
    CHECK(shmem_long_sum_exscan(SHMEM_TEAM_WORLD, gdst, gsrc, N) == 0);
    for (int j = 0; j < N; j++) CHECK(gdst[j] == pre(me, j));
    CHECK(shmem_long_sum_inscan(SHMEM_TEAM_WORLD, gsrc, gsrc, N) == 0);
    for (int j = 0; j < N; j++) CHECK(gsrc[j] == pre(me + 1, j));

    CHECK(shmem_double_sum_inscan(SHMEM_TEAM_WORLD, ddst, dsrc, N) == 0);
    for (int j = 0; j < N; j++) CHECK(ddst[j] == (double) pre(me + 1, j));
    CHECK(shmem_longdouble_sum_exscan(SHMEM_TEAM_WORLD, ldst, lsrc, N) == 0);
    for (int j = 0; j < N; j++) CHECK(ldst[j] == (long double) pre(me, j));
    CHECK(shmem_longdouble_sum_inscan(SHMEM_TEAM_WORLD, ldst, lsrc, N) == 0);
    for (int j = 0; j < N; j++) CHECK(ldst[j] == (long double) pre(me + 1, j));
    CHECK(shmem_complexd_sum_inscan(SHMEM_TEAM_WORLD, cdst, csrc, N) == 0);
    for (int j = 0; j < N; j++)
        CHECK(creal(cdst[j]) == (double) pre(me + 1, j) && cimag(cdst[j]) == (double) pre(me + 1, 0));
    CHECK(shmem_complexd_sum_exscan(SHMEM_TEAM_WORLD, cdst, csrc, N) == 0);
    for (int j = 0; j < N; j++)
        CHECK(creal(cdst[j]) == (double) pre(me, j) && cimag(cdst[j]) == (double) pre(me, 0));
    /* Unsigned char wraps modulo 256. */
    CHECK(shmem_uchar_sum_inscan(SHMEM_TEAM_WORLD, udst, usrc, N) == 0);
    {
        unsigned s = 0;
        for (int q = 0; q <= me; q++) s += 100 + q;
        for (int j = 0; j < N; j++) CHECK(udst[j] == (unsigned char) s);
    }

    /* A split team: the odd PEs (1, 3, ...), numbered 0, 1, ... in the team. */
    shmem_team_t odd = SHMEM_TEAM_INVALID;
    shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, n / 2, NULL, 0, &odd);
    if (odd != SHMEM_TEAM_INVALID) {
        int t = shmem_team_my_pe(odd);
        CHECK(shmem_int_sum_inscan(odd, idst, isrc, N) == 0);
        /* Team PE q is world PE 2q + 1 and contributes 2q + 2 + j. */
        for (int j = 0; j < N; j++) {
            long want = 0;
            for (int q = 0; q <= t; q++) want += 2 * q + 2 + j;
            CHECK(idst[j] == want);
        }
        shmem_team_destroy(odd);
    }
    /* An invalid team: non-zero, nothing written. */
    idst[0] = -5;
    CHECK(shmem_int_sum_inscan(SHMEM_TEAM_INVALID, idst, isrc, N) != 0);
    CHECK(idst[0] == -5);
    /* nelems 0 does nothing. */
    CHECK(shmem_int_sum_exscan(SHMEM_TEAM_WORLD, idst, isrc, 0) == 0);
    CHECK(idst[0] == -5);

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
    CHECK(shmem_sum_inscan(SHMEM_TEAM_WORLD, idst, isrc, N) == 0);
    for (int j = 0; j < N; j++) CHECK(idst[j] == pre(me + 1, j));
    CHECK(shmem_sum_exscan(SHMEM_TEAM_WORLD, ddst, dsrc, N) == 0);
    for (int j = 0; j < N; j++) CHECK(ddst[j] == (double) pre(me, j));
#endif

    shmem_barrier_all();
    shmem_free(udst);
    shmem_free(usrc);
    shmem_free(cdst);
    shmem_free(csrc);
    shmem_free(ldst);
    shmem_free(lsrc);
    shmem_free(ddst);
    shmem_free(dsrc);
    shmem_free(idst);
    shmem_free(isrc);
    DONE("scan");
    shmem_finalize();
    return 0;
}
