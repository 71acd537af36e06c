/* Misuse: a void call before rshmem_init ends the program with a message naming it. */
#include "check.h"

int main(void) {
    rshmem_barrier_all();
    printf("NOT REACHED\n");
    return 0;
}
