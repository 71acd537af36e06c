/* The smaller OpenSHMEM 1.6 routines and the formerly inline ones, all real symbols now:
 * shmem_query_initialized, shmem_pe_quiet, shmem_ctx_pe_quiet, shmem_ctx_session_start/stop,
 * shmem_pcontrol, shmem_[ctx_]longdouble_p/g, the long double and complex reductions
 * (_reduce and _to_all), and the deprecated shmem_wait_until on a long. Each is also taken
 * by address, so the program links against the library's symbol, never an inline copy. */
#include <complex.h>
#include <shmem.h>
#include "check.h"

static long double gld[4];
static long psync[SHMEM_REDUCE_SYNC_SIZE];
static long flag;

int main(void) {
    int init = -1;
    shmem_query_initialized(&init);
    CHECK(init == 0);
    shmem_init();
    shmem_query_initialized(&init);
    CHECK(init != 0);
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) psync[i] = SHMEM_SYNC_VALUE;

    void (*pcontrol)(const int, ...) = shmem_pcontrol;
    pcontrol(1, "region");
    shmem_pcontrol(0);

    /* long double p/g, plain and on a context, through pointers to the routines. */
    void (*ldp)(long double *, long double, int) = shmem_longdouble_p;
    long double (*ldg)(const long double *, int) = shmem_longdouble_g;
    ldp(&gld[1], 0.1L * me + 1e-30L, right);
    shmem_ctx_longdouble_p(SHMEM_CTX_DEFAULT, &gld[2], -3.0L * me, right);
    shmem_barrier_all();
    CHECK(gld[1] == 0.1L * left + 1e-30L);
    CHECK(gld[2] == -3.0L * left);
    CHECK(ldg(&gld[1], right) == 0.1L * me + 1e-30L);
    CHECK(shmem_ctx_longdouble_g(SHMEM_CTX_DEFAULT, &gld[2], left) == -3.0L * ((left + n - 1) % n));
    /* A team context numbers PEs in its team. */
    shmem_ctx_t tctx;
    shmem_team_t all;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, n, NULL, 0, &all) == 0);
    CHECK(shmem_team_create_ctx(all, 0, &tctx) == 0);
    shmem_barrier_all();
    CHECK(shmem_ctx_longdouble_g(tctx, &gld[1], me) == 0.1L * left + 1e-30L);

    /* pe_quiet: puts to a few PEs, completed by pe_quiet, visible after a barrier. */
    static long box[64];
    long v = 100 + me;
    shmem_long_put_nbi(&box[me], &v, 1, right);
    shmem_long_put_nbi(&box[me], &v, 1, left);
    int targets[2] = {right, left};
    shmem_pe_quiet(targets, 2);
    shmem_pe_quiet(NULL, 0);
    shmem_ctx_pe_quiet(tctx, targets, 2);
    shmem_ctx_pe_quiet(SHMEM_CTX_INVALID, targets, 2);
    shmem_barrier_all();
    CHECK(box[left] == 100 + left && box[right] == 100 + right);

    /* Sessions are hints: start (with and without a config), nested start, stop twice. */
    shmem_ctx_session_config_t cfg = {.total_ops = 1000};
    shmem_ctx_session_start(tctx, SHMEM_CTX_SESSION_BATCH, &cfg, SHMEM_CTX_SESSION_TOTAL_OPS);
    shmem_ctx_session_start(tctx, 0, NULL, 0);
    for (int i = 0; i < 8; i++) shmem_ctx_long_atomic_add(tctx, &flag, 1, right);
    shmem_ctx_session_stop(tctx);
    shmem_ctx_session_stop(tctx);
    shmem_ctx_session_start(SHMEM_CTX_INVALID, SHMEM_CTX_SESSION_BATCH, NULL, 0);
    shmem_ctx_session_stop(SHMEM_CTX_INVALID);
    shmem_ctx_session_start(SHMEM_CTX_DEFAULT, SHMEM_CTX_SESSION_BATCH, &cfg, 0);
    shmem_ctx_session_stop(SHMEM_CTX_DEFAULT);
    shmem_ctx_quiet(tctx);
    shmem_barrier_all();
    CHECK(flag == 8);
    /* Every PE has read its flag before PE 0 writes it again below. */
    shmem_barrier_all();

    /* The deprecated untyped wait_until on a long (C11 gives the generic macro, the
     * parenthesized name the function). */
    if (me == 0) shmem_long_p(&flag, 99, right);
    if (left == 0) (shmem_wait_until)(&flag, SHMEM_CMP_EQ, 99);
    shmem_barrier_all();

    /* long double and complex reductions (team and active set). */
    long double *ls = shmem_malloc(2 * sizeof(long double)), *ld = shmem_malloc(2 * sizeof(long double));
    float _Complex *fs = shmem_malloc(2 * sizeof(float _Complex)), *fd = shmem_malloc(2 * sizeof(float _Complex));
    ls[0] = me + 0.5L;
    ls[1] = -(long double) me;
    fs[0] = (float) me + 1.0f * I;
    fs[1] = 1.0f + (float) me * I;
    int (*ldmax)(shmem_team_t, long double *, const long double *, size_t) = shmem_longdouble_max_reduce;
    CHECK(ldmax(SHMEM_TEAM_WORLD, ld, ls, 2) == 0);
    CHECK(ld[0] == n - 0.5L && ld[1] == 0.0L);
    CHECK(shmem_longdouble_min_reduce(SHMEM_TEAM_WORLD, ld, ls, 2) == 0);
    CHECK(ld[0] == 0.5L && ld[1] == -(long double) (n - 1));
    CHECK(shmem_longdouble_sum_reduce(SHMEM_TEAM_WORLD, ld, ls, 1) == 0);
    CHECK(ld[0] == (long double) n * n / 2);
    CHECK(shmem_complexf_sum_reduce(SHMEM_TEAM_WORLD, fd, fs, 2) == 0);
    CHECK(crealf(fd[0]) == (float) (n * (n - 1) / 2) && cimagf(fd[0]) == (float) n);
    CHECK(shmem_complexf_prod_reduce(SHMEM_TEAM_WORLD, fd, fs, 1) == 0);
    {
        float _Complex want = 1.0f;
        for (int q = 0; q < n; q++) want *= (float) q + 1.0f * I;
        CHECK(fd[0] == want);
    }
    shmem_longdouble_prod_to_all(ld, ls, 1, 0, 0, n, NULL, psync);
    {
        long double want = 1.0L;
        for (int q = 0; q < n; q++) want *= q + 0.5L;
        CHECK(ld[0] == want);
    }
    shmem_barrier_all();
    shmem_complexf_sum_to_all(fd, fs, 2, 0, 0, n, NULL, psync);
    CHECK(crealf(fd[1]) == (float) n && cimagf(fd[1]) == (float) (n * (n - 1) / 2));

    shmem_barrier_all();
    shmem_free(fd);
    shmem_free(fs);
    shmem_free(ld);
    shmem_free(ls);
    shmem_ctx_destroy(tctx);
    shmem_team_destroy(all);
    DONE("v16");
    shmem_finalize();
    shmem_query_initialized(&init);
    CHECK(init == 0);
    return 0;
}
