/* Teams: predefined teams, queries, strided and 2-D splits, translate, config, sync, destroy,
 * invalid handles and triplets, shmem_ctx_get_team. */
#include <shmem.h>
#include "check.h"

static long counter;

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();

    CHECK(shmem_team_my_pe(SHMEM_TEAM_WORLD) == me);
    CHECK(shmem_team_n_pes(SHMEM_TEAM_WORLD) == n);
    CHECK(shmem_team_n_pes(SHMEM_TEAM_SHARED) == n);
    CHECK(shmem_team_n_pes(SHMEM_TEAM_NODE) == n);
    CHECK(shmem_team_my_pe(SHMEM_TEAM_INVALID) == -1);
    CHECK(shmem_team_n_pes(SHMEM_TEAM_INVALID) == -1);
    CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, n - 1, SHMEM_TEAM_SHARED) == n - 1);
    CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, n, SHMEM_TEAM_WORLD) == -1);
    CHECK(shmem_team_translate_pe(SHMEM_TEAM_INVALID, 0, SHMEM_TEAM_WORLD) == -1);

    shmem_team_t t;
    CHECK(shmem_ctx_get_team(SHMEM_CTX_DEFAULT, &t) == 0 && t == SHMEM_TEAM_WORLD);
    CHECK(shmem_ctx_get_team(SHMEM_CTX_INVALID, &t) != 0 && t == SHMEM_TEAM_INVALID);

    /* Odd PEs, in reverse order: start n-1 (or n-2), stride -2. */
    int last_odd = (n - 1) % 2 ? n - 1 : n - 2;
    int n_odd = n / 2;
    shmem_team_config_t cfg = {.num_contexts = 3};
    shmem_team_t odd;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, last_odd, -2, n_odd, &cfg,
                                   SHMEM_TEAM_NUM_CONTEXTS, &odd) == 0);
    if (me % 2) {
        CHECK(odd != SHMEM_TEAM_INVALID);
        CHECK(shmem_team_n_pes(odd) == n_odd);
        CHECK(shmem_team_my_pe(odd) == (last_odd - me) / 2);
        CHECK(shmem_team_translate_pe(odd, 0, SHMEM_TEAM_WORLD) == last_odd);
        CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, 0, odd) == -1);
        CHECK(shmem_team_translate_pe(SHMEM_TEAM_WORLD, 1, odd) == n_odd - 1);
        shmem_team_config_t got = {0};
        CHECK(shmem_team_get_config(odd, SHMEM_TEAM_NUM_CONTEXTS, &got) == 0);
        CHECK(got.num_contexts == 3);
        /* Team sync orders the atomics: everybody added before anybody reads. */
        shmem_long_atomic_add(&counter, me + 1, 1);
        CHECK(shmem_team_sync(odd) == 0);
        CHECK(shmem_sync(odd) == 0);
    } else {
        CHECK(odd == SHMEM_TEAM_INVALID);
    }
    shmem_barrier_all();
    if (me == 1) {
        long want = 0;
        for (int p = 1; p < n; p += 2) want += p + 1;
        CHECK(counter == want);
    }

    /* Invalid triplets: every PE gets non-zero and SHMEM_TEAM_INVALID. */
    shmem_team_t bad = SHMEM_TEAM_WORLD;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, 0, NULL, 0, &bad) != 0);
    CHECK(bad == SHMEM_TEAM_INVALID);
    bad = SHMEM_TEAM_WORLD;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 1, n, NULL, 0, &bad) != 0);
    CHECK(bad == SHMEM_TEAM_INVALID);
    CHECK(shmem_team_split_strided(SHMEM_TEAM_INVALID, 0, 1, 1, NULL, 0, &bad) != 0);

    /* 2-D split with rows of 2: PE p is (p % 2) in its row, (p / 2) in its column. */
    shmem_team_t row, col;
    CHECK(shmem_team_split_2d(SHMEM_TEAM_WORLD, 2, NULL, 0, &row, NULL, 0, &col) == 0);
    CHECK(shmem_team_my_pe(row) == me % 2);
    CHECK(shmem_team_n_pes(row) == 2);
    CHECK(shmem_team_my_pe(col) == me / 2);
    CHECK(shmem_team_n_pes(col) == (n - me % 2 + 1) / 2);
    CHECK(shmem_team_translate_pe(row, 0, SHMEM_TEAM_WORLD) == me - me % 2);
    CHECK(shmem_team_translate_pe(col, 0, SHMEM_TEAM_WORLD) == me % 2);
    CHECK(shmem_team_sync(row) == 0 && shmem_team_sync(col) == 0);

    /* A split of a split: the first PE of each row. */
    shmem_team_t firsts;
    CHECK(shmem_team_split_strided(col, 0, 1, 1, NULL, 0, &firsts) == 0);
    CHECK((firsts != SHMEM_TEAM_INVALID) == (me / 2 == 0));
    if (firsts != SHMEM_TEAM_INVALID) {
        CHECK(shmem_team_n_pes(firsts) == 1);
        CHECK(shmem_team_translate_pe(firsts, 0, SHMEM_TEAM_WORLD) == me);
        shmem_team_destroy(firsts);
        CHECK(shmem_team_n_pes(firsts) == -1);
    }
    shmem_team_destroy(row);
    shmem_team_destroy(col);
    if (odd != SHMEM_TEAM_INVALID) shmem_team_destroy(odd);
    CHECK(shmem_team_my_pe(row) == -1);
    CHECK(shmem_team_sync(row) != 0);
    shmem_team_destroy(SHMEM_TEAM_INVALID);

    /* Many splits and destroys reuse team slots. */
    for (int i = 0; i < 200; i++) {
        shmem_team_t s;
        CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, n, NULL, 0, &s) == 0);
        CHECK(shmem_team_my_pe(s) == me);
        shmem_team_destroy(s);
    }
    shmem_barrier_all();
    DONE("team");
    shmem_finalize();
    return 0;
}
