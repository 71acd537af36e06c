/* A profiling tool for the profiling test (profiling.c): defines three shmem_ routines, counts
 * their calls and forwards each to its pshmem_ name. Built as a shared library that is linked
 * before libshmem or preloaded (LD_PRELOAD). */
#include <pshmem.h>
#include <string.h>

static long putmem_calls, putmem_bytes, int_put_calls, barrier_all_calls;

void shmem_putmem(void *dest, const void *source, size_t nelems, int pe) {
    putmem_calls++;
    putmem_bytes += (long) nelems;
    pshmem_putmem(dest, source, nelems, pe);
}

void shmem_int_put(int *dest, const int *source, size_t nelems, int pe) {
    int_put_calls++;
    pshmem_int_put(dest, source, nelems, pe);
}

void shmem_barrier_all(void) {
    barrier_all_calls++;
    pshmem_barrier_all();
}

/* What the tool saw; -1 for a routine it does not watch. */
long profiling_tool_count(const char *what) {
    if (strcmp(what, "shmem_putmem") == 0) return putmem_calls;
    if (strcmp(what, "shmem_putmem bytes") == 0) return putmem_bytes;
    if (strcmp(what, "shmem_int_put") == 0) return int_put_calls;
    if (strcmp(what, "shmem_barrier_all") == 0) return barrier_all_calls;
    return -1;
}
