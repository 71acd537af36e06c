#define _DEFAULT_SOURCE /* usleep */
/* rshmem_init_attr with RSHMEM_INIT_WITH_UNIQUEID. The program knows its rank and the number of
   ranks by itself (here from the launcher's RSHMEM_RANK/RSHMEM_SIZE, as a framework would from
   its own); rank 0 makes the id and hands it to the others through the file named by argv[1]
   (written to a temporary name and renamed, so that a reader never sees half of it). */
#include <string.h>
#include <unistd.h>
#include "check.h"

int main(int argc, char **argv) {
    CHECK(argc == 2);
    const char *r = getenv("RSHMEM_RANK"), *s = getenv("RSHMEM_SIZE");
    CHECK(r != NULL && s != NULL);
    int rank = atoi(r), nranks = atoi(s);
    check_pe = rank;
    rshmem_uniqueid_t id = RSHMEM_UNIQUEID_INITIALIZER;
    if (rank == 0) {
        CHECK(rshmem_get_uniqueid(&id) == RSHMEM_SUCCESS);
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
        FILE *f = fopen(tmp, "wb");
        CHECK(f != NULL);
        CHECK(fwrite(&id, sizeof id, 1, f) == 1);
        CHECK(fclose(f) == 0);
        CHECK(rename(tmp, argv[1]) == 0);
    } else {
        FILE *f = NULL;
        for (int i = 0; i < 6000 && f == NULL; i++) {
            f = fopen(argv[1], "rb");
            if (f == NULL) usleep(10000);
        }
        CHECK(f != NULL);
        CHECK(fread(&id, sizeof id, 1, f) == 1);
        fclose(f);
    }
    rshmem_init_attr_t attr = RSHMEM_INIT_ATTR_INITIALIZER;
    CHECK(rshmem_set_attr_uniqueid_args(rank, nranks, &id, &attr) == RSHMEM_SUCCESS);
    CHECK(rshmem_init_attr(RSHMEM_INIT_WITH_UNIQUEID, &attr) == RSHMEM_SUCCESS);
    CHECK(rshmem_my_pe() == rank && rshmem_n_pes() == nranks);
    int *x = rshmem_calloc(1, sizeof(int));
    CHECK(x != NULL);
    rshmem_int_atomic_add(x, rank + 1, 0);
    rshmem_barrier_all();
    CHECK(rshmem_int_g(x, 0) == nranks * (nranks + 1) / 2);
    rshmem_barrier_all();
    rshmem_free(x);
    return finish("uid");
}
