/* Shared helpers of the C tests: CHECK prints the failing expression with the PE and exits 1. */
#ifndef CHECK_H
#define CHECK_H
#include <stdio.h>
#include <stdlib.h>
#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "FAIL PE %d %s:%d: %s\n", shmem_my_pe(), __FILE__, __LINE__, \
                    #cond);                                                             \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)
#define DONE(name)                                      \
    do {                                                \
        printf("OK %s PE %d\n", name, shmem_my_pe());  \
        fflush(stdout);                                 \
    } while (0)
#endif
