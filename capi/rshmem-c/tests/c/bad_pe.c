/* Misuse: a put to a PE out of range ends the job with a message naming the call. */
#include "check.h"

int main(void) {
    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    check_pe = rshmem_my_pe();
    int *x = rshmem_malloc(sizeof(int));
    rshmem_barrier_all();
    if (rshmem_my_pe() == 0) rshmem_int_p(x, 1, rshmem_n_pes());
    rshmem_barrier_all();
    printf("NOT REACHED PE %d\n", rshmem_my_pe());
    rshmem_finalize();
    return 0;
}
