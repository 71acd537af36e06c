/* A put running past the end of a global variable is refused naming the call (it used to
 * overwrite the next variable); puts that fit are fine. */
#include <shmem.h>
#include "check.h"

int a[4];
int b[4];

int main(void) {
    shmem_init();
    int src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    if (shmem_my_pe() == 0) {
        shmem_int_put(a, src, 4, 1);      /* fits */
        shmem_int_put(&a[2], src, 2, 1);  /* fits */
        shmem_int_put(a, src, 8, 1);      /* runs into b */
        printf("NOT REACHED\n");
    }
    shmem_barrier_all();
    return 0;
}
