/* Misuse: a typed transfer whose count × element size wraps or exceeds the address space ends
 * the job naming the call ("transfer extent … overflows"), as the _nbi forms always did; the
 * blocking forms used to return normally after moving 8 bytes or none. argv[1] picks the call;
 * PE 0 makes it towards PE 1. */
#include <stdint.h>
#include <string.h>
#include "check.h"

int main(int argc, char **argv) {
    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    check_pe = rshmem_my_pe();
    CHECK(argc == 2);
    const char *c = argv[1];
    long *la = rshmem_malloc(4 * sizeof(long));
    int *ia = rshmem_malloc(4 * sizeof(int));
    CHECK(la && ia);
    long ls[4] = {1, 2, 3, 4};
    int is[4] = {1, 2, 3, 4};
    size_t wrap8 = ((size_t)1 << 61) + 1; /* × 8 wraps to 8 */
    size_t wrap4 = SIZE_MAX / 4 + 1;      /* × 4 wraps to 0 */
    rshmem_barrier_all();
    if (rshmem_my_pe() == 0) {
        if (!strcmp(c, "long_put")) rshmem_long_put(la, ls, wrap8, 1);
        else if (!strcmp(c, "long_get")) rshmem_long_get(ls, la, wrap8, 1);
        else if (!strcmp(c, "int_put")) rshmem_int_put(ia, is, wrap4, 1);
        else if (!strcmp(c, "long_put_nbi")) rshmem_long_put_nbi(la, ls, wrap8, 1);
        else CHECK(!"unknown call");
        rshmem_quiet();
        printf("NOT REACHED PE 0 (%ld)\n", ls[0]);
    }
    rshmem_barrier_all();
    rshmem_finalize();
    return 0;
}
