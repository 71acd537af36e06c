/* A hybrid MPI + OpenSHMEM program started by mpirun: MPI_Init, then shmem_init. PE numbers
 * are the MPI ranks of MPI_COMM_WORLD, and both libraries work side by side. */
#include <mpi.h>
#include <shmem.h>
#include "check.h"

static int from_left = -1;

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    shmem_init();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(shmem_my_pe() == rank);
    CHECK(shmem_n_pes() == size);

    /* SHMEM: put my rank to the right neighbour's static variable. */
    shmem_int_p(&from_left, rank, (rank + 1) % size);
    shmem_barrier_all();
    CHECK(from_left == (rank + size - 1) % size);

    /* MPI: the sum of the values SHMEM delivered is the sum of the ranks. */
    int sum = 0;
    MPI_Allreduce(&from_left, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == size * (size - 1) / 2);

    DONE("hybrid_mpi");
    shmem_finalize();
    MPI_Finalize();
    return 0;
}
