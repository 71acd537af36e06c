/* Misuse: a typed transfer whose count × element size wraps or exceeds the address space is
 * refused naming the call ("transfer extent … overflows"), as the _nbi forms always did. The
 * blocking forms used to return normally after moving 8 bytes ((1 << 61) + 1 longs) or none
 * (SIZE_MAX / 4 + 1 ints). argv[1] picks the call; PE 0 makes it towards the next PE (itself
 * when alone). */
#include <shmem.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

long la[4];
int ia[4];
uint64_t sig;

int main(int argc, char **argv) {
    shmem_init();
    CHECK(argc == 2);
    const char *c = argv[1];
    long ls[4] = {1, 2, 3, 4};
    int is[4] = {1, 2, 3, 4};
    size_t wrap8 = ((size_t)1 << 61) + 1; /* × 8 wraps to 8 */
    size_t wrap4 = SIZE_MAX / 4 + 1;      /* × 4 wraps to 0 */
    size_t huge8 = (size_t)1 << 60;       /* × 8 = 2^63: no wrap, past isize::MAX */
    int to = 1 % shmem_n_pes();
    shmem_barrier_all();
    if (shmem_my_pe() == 0) {
        if (!strcmp(c, "long_put")) shmem_long_put(la, ls, wrap8, to);
        else if (!strcmp(c, "long_put_huge")) shmem_long_put(la, ls, huge8, to);
        else if (!strcmp(c, "int_put")) shmem_int_put(ia, is, wrap4, to);
        else if (!strcmp(c, "long_get")) shmem_long_get(ls, la, wrap8, to);
        else if (!strcmp(c, "long_put_signal"))
            shmem_long_put_signal(la, ls, wrap8, &sig, 1, SHMEM_SIGNAL_SET, to);
        else if (!strcmp(c, "ctx_long_put")) shmem_ctx_long_put(SHMEM_CTX_DEFAULT, la, ls, wrap8, to);
        else if (!strcmp(c, "put64")) shmem_put64(la, ls, wrap8, to);
        else if (!strcmp(c, "long_put_nbi")) shmem_long_put_nbi(la, ls, wrap8, to);
        else CHECK(!"unknown call");
        shmem_quiet();
        printf("NOT REACHED PE 0 (%ld %ld)\n", la[0], (long)ia[0]);
    }
    shmem_barrier_all();
    shmem_finalize();
    return 0;
}
