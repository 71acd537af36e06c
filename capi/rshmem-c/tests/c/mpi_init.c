/* rshmem_init_attr with RSHMEM_INIT_WITH_MPI_COMM after MPI_Init: the PEs are the ranks of
   MPI_COMM_WORLD, and MPI keeps working next to rshmem. */
#include <mpi.h>
#include "check.h"

int main(int argc, char **argv) {
    CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS);
    int rank = -1, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_pe = rank;
    MPI_Comm comm = MPI_COMM_WORLD;
    rshmem_init_attr_t attr = RSHMEM_INIT_ATTR_INITIALIZER;
    attr.mpi_comm = &comm;
    CHECK(rshmem_init_attr(RSHMEM_INIT_WITH_MPI_COMM, &attr) == RSHMEM_SUCCESS);
    CHECK(rshmem_my_pe() == rank && rshmem_n_pes() == size);
    long *x = rshmem_calloc(1, sizeof(long));
    CHECK(x != NULL);
    rshmem_long_atomic_add(x, rank + 1, size - 1);
    rshmem_barrier_all();
    long total = rshmem_long_g(x, size - 1);
    long mpi_total = 0, mine = rank + 1;
    MPI_Allreduce(&mine, &mpi_total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(total == mpi_total);
    rshmem_barrier_all();
    rshmem_free(x);
    CHECK(rshmem_finalize() == RSHMEM_SUCCESS);
    DONE("mpi_init");
    MPI_Finalize();
    return 0;
}
