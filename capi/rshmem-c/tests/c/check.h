/* Shared helpers of the rshmem.h tests. They touch symmetric memory only through rshmem calls,
   so they run on the GPU backend (symmetric memory in GPU memory) as well as on the CPU one.
   CHECK prints the failing expression with the PE and exits 1; DONE prints "OK <name> PE <pe>";
   finish ends a test that passed: DONE, then rshmem_finalize, which must succeed; main returns
   what it returns (0). */
#ifndef RSHMEM_TEST_CHECK_H
#define RSHMEM_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <rshmem.h>

static int check_pe __attribute__((unused)) = -1;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "FAIL PE %d %s:%d: %s\n", check_pe, __FILE__, __LINE__, #cond); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define DONE(name)                                   \
    do {                                             \
        printf("OK %s PE %d\n", name, check_pe);     \
        fflush(stdout);                              \
    } while (0)

static inline int finish(const char *name) {
    DONE(name);
    CHECK(rshmem_finalize() == RSHMEM_SUCCESS);
    return 0;
}
#endif
