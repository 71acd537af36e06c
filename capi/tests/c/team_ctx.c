/* Contexts on a team: PE numbers of RMA and atomics through a team's context are numbers in
 * that team; shmem_ctx_get_team, shmem_team_create_ctx on invalid teams, shmem_team_ptr, and
 * shmem_ctx_fence/quiet/destroy on SHMEM_CTX_INVALID (no operation). */
#include <shmem.h>
#include "check.h"

static int sval = -1;
static int scount;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    int *hval = shmem_malloc(sizeof(int));
    *hval = -1;

    /* The world in reverse order: team PE t is world PE npes-1-t. */
    shmem_team_t rev;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, npes - 1, -1, npes, NULL, 0, &rev) == 0);
    CHECK(shmem_team_my_pe(rev) == npes - 1 - me);

    shmem_ctx_t ctx;
    CHECK(shmem_team_create_ctx(rev, 0, &ctx) == 0);
    CHECK(ctx != SHMEM_CTX_INVALID && ctx != SHMEM_CTX_DEFAULT);
    shmem_team_t t;
    CHECK(shmem_ctx_get_team(ctx, &t) == 0 && t == rev);
    CHECK(shmem_ctx_get_team(SHMEM_CTX_DEFAULT, &t) == 0 && t == SHMEM_TEAM_WORLD);
    shmem_ctx_t wctx;
    CHECK(shmem_ctx_create(0, &wctx) == 0);
    CHECK(shmem_ctx_get_team(wctx, &t) == 0 && t == SHMEM_TEAM_WORLD);
    CHECK(shmem_ctx_get_team(SHMEM_CTX_INVALID, &t) != 0 && t == SHMEM_TEAM_INVALID);
    shmem_ctx_t bad = SHMEM_CTX_DEFAULT;
    CHECK(shmem_team_create_ctx(SHMEM_TEAM_INVALID, 0, &bad) != 0 && bad == SHMEM_CTX_INVALID);

    /* Team PE 0 of `rev` is world PE npes-1: put my world number there, to a static and a
     * heap variable, and count arrivals with an atomic through the context. */
    shmem_barrier_all();
    if (me == 0) {
        shmem_ctx_int_p(ctx, &sval, me, 0);
        shmem_ctx_int_put(ctx, hval, &me, 1, 0);
    }
    shmem_ctx_int_atomic_add(ctx, &scount, 1, 0);
    shmem_ctx_quiet(ctx);
    shmem_barrier_all();
    if (me == npes - 1) {
        CHECK(sval == 0);
        CHECK(*hval == 0);
        CHECK(scount == npes);
    } else {
        CHECK(sval == -1 && *hval == -1 && scount == 0);
    }
    /* A get through the context reads team PE t = world PE npes-1-t; the world context reads
     * world PEs. */
    int right = (shmem_team_my_pe(rev) + 1) % npes;
    CHECK(shmem_ctx_int_g(ctx, &scount, right) == (npes - 1 - right == npes - 1 ? npes : 0));
    CHECK(shmem_ctx_int_g(wctx, &scount, npes - 1) == npes);

    /* shmem_team_ptr takes team PE numbers. */
    for (int p = 0; p < npes; p++) {
        CHECK(shmem_team_ptr(rev, &sval, p) == shmem_ptr(&sval, npes - 1 - p));
        CHECK(shmem_team_ptr(rev, hval, p) == shmem_ptr(hval, npes - 1 - p));
        CHECK(shmem_team_ptr(rev, hval, p) != NULL);
    }
    CHECK(shmem_team_ptr(rev, hval, npes) == NULL);
    CHECK(shmem_team_ptr(SHMEM_TEAM_INVALID, hval, 0) == NULL);

    /* OpenSHMEM 1.5: these are no operations on SHMEM_CTX_INVALID. */
    shmem_ctx_fence(SHMEM_CTX_INVALID);
    shmem_ctx_quiet(SHMEM_CTX_INVALID);
    shmem_ctx_destroy(SHMEM_CTX_INVALID);

    shmem_ctx_destroy(ctx);
    shmem_ctx_destroy(wctx);
    CHECK(shmem_ctx_get_team(ctx, &t) != 0 && t == SHMEM_TEAM_INVALID);
    shmem_barrier_all();
    shmem_team_destroy(rev);
    shmem_free(hval);
    DONE("team_ctx");
    shmem_finalize();
    return 0;
}
