/* rshmem_init, queries, symmetric memory, ptr, host RMA (typed, mem, _nbi), quiet/fence and the
   world barriers. Every PE writes into its right neighbour and checks what its left neighbour
   wrote. */
#include <string.h>
#include "check.h"

int main(void) {
    int major = -1, minor = -1;
    char name[RSHMEM_MAX_NAME_LEN];
    rshmem_info_get_version(&major, &minor);
    rshmem_info_get_name(name);
    CHECK(major >= 0 && minor >= 0 && strncmp(name, "rshmem ", 7) == 0);
    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    int me = rshmem_my_pe(), n = rshmem_n_pes();
    check_pe = me;
    CHECK(n >= 2 && me >= 0 && me < n);
    int right = (me + 1) % n, left = (me + n - 1) % n;

    /* Memory. */
    long *a = rshmem_malloc(16 * sizeof(long));
    double *z = rshmem_calloc(8, sizeof(double));
    char *al = rshmem_align(4096, 100);
    CHECK(a != NULL && z != NULL && al != NULL);
    CHECK(((uintptr_t)al % 4096) == 0);
    CHECK(rshmem_malloc(0) == NULL);
    for (int i = 0; i < 8; i++) CHECK(rshmem_double_g(&z[i], me) == 0.0);
    /* ptr: this PE's own copy is the address itself; out of range is NULL. */
    CHECK(rshmem_ptr(a, me) == a);
    CHECK(rshmem_ptr(a, n) == NULL);
    CHECK(rshmem_ptr(&me, me) == NULL); /* not symmetric */

    /* Typed put/get. */
    long src[16];
    for (int i = 0; i < 16; i++) src[i] = 1000 * me + i;
    rshmem_long_put(a, src, 16, right);
    rshmem_barrier_all();
    long got[16];
    rshmem_long_get(got, a, 16, me);
    for (int i = 0; i < 16; i++) CHECK(got[i] == 1000 * left + i);
    memset(got, 0, sizeof got);
    rshmem_long_get(got, a, 16, right); /* right's copy holds my values */
    for (int i = 0; i < 16; i++) CHECK(got[i] == 1000 * me + i);
    rshmem_barrier_all();

    /* p / g, and _nbi completed by quiet. */
    rshmem_double_p(&z[3], 0.5 + me, right);
    rshmem_quiet();
    rshmem_barrier_all();
    CHECK(rshmem_double_g(&z[3], me) == 0.5 + left);
    rshmem_long_put_nbi(&a[4], &src[0], 2, right);
    rshmem_fence();
    rshmem_long_p(&a[6], -7, right);
    rshmem_quiet();
    rshmem_sync_all();
    CHECK(rshmem_long_g(&a[4], me) == 1000 * left && rshmem_long_g(&a[5], me) == 1000 * left + 1);
    CHECK(rshmem_long_g(&a[6], me) == -7);
    long two[2] = {0, 0};
    rshmem_long_get_nbi(two, &a[4], 2, right);
    rshmem_quiet();
    CHECK(two[0] == 1000 * me && two[1] == 1000 * me + 1);
    rshmem_barrier_all();

    /* Bytes. */
    char msg[32];
    snprintf(msg, sizeof msg, "hello from %d", me);
    rshmem_putmem(al, msg, strlen(msg) + 1, right);
    rshmem_barrier_all();
    char back[32] = {0};
    rshmem_getmem(back, al, sizeof back, me);
    char want[32];
    snprintf(want, sizeof want, "hello from %d", left);
    CHECK(strcmp(back, want) == 0);
    rshmem_putmem_nbi(al + 64, "x", 1, right);
    rshmem_quiet();
    rshmem_barrier_all();
    char x = 0;
    rshmem_getmem_nbi(&x, al + 64, 1, me);
    rshmem_quiet();
    CHECK(x == 'x');
    rshmem_barrier_all();

    rshmem_free(al);
    rshmem_free(z);
    rshmem_free(a);
    rshmem_free(NULL);
    return finish("basics");
}
