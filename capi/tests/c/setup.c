/* Library setup and query: init_thread, PE numbers, accessibility, shmem_ptr, info. */
#include <shmem.h>
#include <string.h>
#include "check.h"

static int sdata = -1;

int main(void) {
    int provided = -1;
    CHECK(shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) == 0);
    CHECK(provided == SHMEM_THREAD_MULTIPLE);
    int q = -1;
    shmem_query_thread(&q);
    CHECK(q == SHMEM_THREAD_MULTIPLE);
    int me = shmem_my_pe(), n = shmem_n_pes();
    CHECK(n >= 2 && me >= 0 && me < n);
    CHECK(_my_pe() == me && _num_pes() == n);
    CHECK(shmem_pe_accessible(n - 1) == 1);
    CHECK(shmem_pe_accessible(n) == 0 && shmem_pe_accessible(-1) == 0);
    int *h = shmem_malloc(16 * sizeof(int));
    int local = 0;
    CHECK(shmem_addr_accessible(h, (me + 1) % n) == 1);
    CHECK(shmem_addr_accessible(&sdata, (me + 1) % n) == 1);
    CHECK(shmem_addr_accessible(&local, (me + 1) % n) == 0);
    CHECK(shmem_addr_accessible(h, n) == 0);
    sdata = 1000 + me;
    shmem_barrier_all();
    for (int pe = 0; pe < n; pe++) {
        int *p = shmem_ptr(&sdata, pe);
        CHECK(p != NULL);
        CHECK(*p == 1000 + pe);
    }
    CHECK(shmem_ptr(&local, me) == NULL);
    int *self = shmem_ptr(h, me);
    CHECK(self == NULL || self == h);
    int major = 0, minor = 0;
    shmem_info_get_version(&major, &minor);
    CHECK(major == SHMEM_MAJOR_VERSION && minor == SHMEM_MINOR_VERSION && major == 1 && minor == 6);
    char name[SHMEM_MAX_NAME_LEN];
    shmem_info_get_name(name);
    CHECK(strcmp(name, SHMEM_VENDOR_STRING) == 0);
    shmem_barrier_all();
    shmem_free(h);
    DONE("setup");
    shmem_finalize();
    return 0;
}
