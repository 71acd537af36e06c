/* A PE number outside the team of a team's context is an error naming the call, even when it
 * is a valid world PE. */
#include <shmem.h>
#include "check.h"

static int x;

int main(void) {
    shmem_init();
    shmem_team_t one;
    shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, 1, NULL, 0, &one);
    if (shmem_my_pe() == 0) {
        shmem_ctx_t ctx;
        CHECK(shmem_team_create_ctx(one, 0, &ctx) == 0);
        shmem_ctx_int_p(ctx, &x, 1, 1); /* team PE 1 does not exist */
        printf("NOT REACHED\n");
    }
    shmem_barrier_all();
    return 0;
}
