/* A put into a peer's .dynamic (RELRO) is refused naming the call, and nothing is written. */
#include <shmem.h>
#include "check.h"

extern char _DYNAMIC[];

int main(void) {
    shmem_init();
    long junk[2] = {-1, -1};
    if (shmem_my_pe() == 0) {
        shmem_putmem(_DYNAMIC, junk, sizeof junk, 1);
        printf("NOT REACHED\n");
    }
    shmem_barrier_all();
    return 0;
}
