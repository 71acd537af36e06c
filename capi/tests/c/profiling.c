/* Profiling interface: run with profiling_tool.c's library found before libshmem (linked before
 * it, or LD_PRELOAD). The tool's shmem_putmem, shmem_int_put (also reached through the C11
 * generic shmem_put) and shmem_barrier_all must see every call of this program, and the data
 * must still arrive (the tool forwards to pshmem_). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pshmem.h>
#include "check.h"

#define N 16
static int sdata[N];

int main(void) {
    long (*count)(const char *) = (long (*)(const char *)) dlsym(RTLD_DEFAULT, "profiling_tool_count");
    if (!count) {
        fprintf(stderr, "profiling: the profiling tool is not loaded\n");
        return 1;
    }
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
    long *heap = shmem_calloc(N, sizeof(long));
    long lsrc[N];
    int isrc[N];
    for (int i = 0; i < N; i++) {
        lsrc[i] = me * 100L + i;
        isrc[i] = -(me * 100 + i);
    }
    shmem_barrier_all();                                   /* barrier 1 */
    for (int i = 0; i < N; i++) shmem_putmem(&heap[i], &lsrc[i], sizeof(long), right);
    shmem_int_put(sdata, isrc, N / 2, right);
    shmem_put(sdata + N / 2, isrc + N / 2, N / 2, right); /* generic: shmem_int_put */
    shmem_barrier_all();                                   /* barrier 2 */
    for (int i = 0; i < N; i++) {
        CHECK(heap[i] == left * 100L + i);
        CHECK(sdata[i] == -(left * 100 + i));
    }
    /* Calls the tool does not watch, and pshmem_ calls, are not counted. */
    shmem_long_put(heap, lsrc, 1, right);
    pshmem_putmem(&heap[1], &lsrc[1], sizeof(long), right);
    shmem_quiet();
    CHECK(count("shmem_putmem") == N);
    CHECK(count("shmem_putmem bytes") == N * (long) sizeof(long));
    CHECK(count("shmem_int_put") == 2);
    CHECK(count("shmem_barrier_all") == 2);
    shmem_barrier_all();
    CHECK(count("shmem_barrier_all") == 3);
    shmem_free(heap);
    DONE("profiling");
    shmem_finalize();
    return 0;
}
