/* A failed split leaves RSHMEM_TEAM_INVALID in every output it was given: before init, with
 * the other 2-D output NULL, and once the team slots run out (splits never destroyed);
 * destroying them makes splits work again. */
#include "check.h"

#define MAX 4096

static rshmem_team_t made[MAX];

int main(void) {
    rshmem_team_t t = 7;
    CHECK(rshmem_team_split_strided(RSHMEM_TEAM_WORLD, 0, 1, 1, NULL, 0, &t) ==
          RSHMEM_ERROR_NOT_INITIALIZED);
    CHECK(t == RSHMEM_TEAM_INVALID);
    rshmem_team_t x = 7, y = 7;
    CHECK(rshmem_team_split_2d(RSHMEM_TEAM_WORLD, 1, NULL, 0, &x, NULL, 0, &y) ==
          RSHMEM_ERROR_NOT_INITIALIZED);
    CHECK(x == RSHMEM_TEAM_INVALID && y == RSHMEM_TEAM_INVALID);

    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    check_pe = rshmem_my_pe();
    int n = rshmem_n_pes();
    x = 7;
    CHECK(rshmem_team_split_2d(RSHMEM_TEAM_WORLD, 1, NULL, 0, &x, NULL, 0, NULL) ==
          RSHMEM_ERROR_INVALID_VALUE);
    CHECK(x == RSHMEM_TEAM_INVALID);
    int k = 0;
    for (; k < MAX; k++) {
        t = 7;
        int rc = rshmem_team_split_strided(RSHMEM_TEAM_WORLD, 0, 1, n, NULL, 0, &t);
        if (rc != RSHMEM_SUCCESS) {
            CHECK(t == RSHMEM_TEAM_INVALID);
            break;
        }
        CHECK(t != RSHMEM_TEAM_INVALID);
        made[k] = t;
    }
    CHECK(k > 0 && k < MAX);
    x = 7, y = 7;
    CHECK(rshmem_team_split_2d(RSHMEM_TEAM_WORLD, 1, NULL, 0, &x, NULL, 0, &y) != RSHMEM_SUCCESS);
    CHECK(x == RSHMEM_TEAM_INVALID && y == RSHMEM_TEAM_INVALID);
    for (int i = 0; i < k; i++) rshmem_team_destroy(made[i]);
    t = 7;
    CHECK(rshmem_team_split_strided(RSHMEM_TEAM_WORLD, 0, 1, n, NULL, 0, &t) == RSHMEM_SUCCESS);
    CHECK(t != RSHMEM_TEAM_INVALID);
    rshmem_team_destroy(t);
    return finish("team_full");
}
