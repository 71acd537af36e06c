/* A split that cannot make its team returns non-zero with SHMEM_TEAM_INVALID (OpenSHMEM 1.5,
 * shmem_team_split_strided / _2d) instead of ending the job: splits of the world are made,
 * never destroyed, until the team slots run out; destroying them makes splits work again. */
#include <shmem.h>
#include "check.h"

#define MAX 4096

static shmem_team_t made[MAX];

int main(void) {
    shmem_init();
    int n = shmem_n_pes();
    int k = 0;
    for (; k < MAX; k++) {
        shmem_team_t t = SHMEM_TEAM_WORLD;
        int rc = shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, n, NULL, 0, &t);
        if (rc != 0) {
            CHECK(t == SHMEM_TEAM_INVALID);
            break;
        }
        CHECK(t != SHMEM_TEAM_INVALID);
        made[k] = t;
    }
    CHECK(k > 0 && k < MAX); /* the slots ran out, on every PE alike */
    shmem_team_t x = SHMEM_TEAM_WORLD, y = SHMEM_TEAM_WORLD;
    CHECK(shmem_team_split_2d(SHMEM_TEAM_WORLD, 1, NULL, 0, &x, NULL, 0, &y) != 0);
    CHECK(x == SHMEM_TEAM_INVALID && y == SHMEM_TEAM_INVALID);
    for (int i = 0; i < k; i++) shmem_team_destroy(made[i]);
    shmem_team_t t = SHMEM_TEAM_INVALID;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, n, NULL, 0, &t) == 0);
    CHECK(t != SHMEM_TEAM_INVALID);
    shmem_team_destroy(t);
    DONE("team_full");
    shmem_finalize();
    return 0;
}
