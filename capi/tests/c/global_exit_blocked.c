/* shmem_global_exit(0) on PE 0 while PEs 2 and up block the real-time signals in every thread
 * (blocked before shmem_init, so the library's threads inherit the mask), as programs that use
 * sigwait or signalfd do. PE 1 takes the exit request at once and leaves; the PEs that block it
 * see PE 0 or PE 1 gone in their barrier, and must still end with status 0 (the exit request
 * they hold pending), not fail the job because a peer left. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <pthread.h>
#include <shmem.h>
#include "check.h"

int main(void) {
    sigset_t rt;
    sigemptyset(&rt);
    for (int s = SIGRTMIN; s <= SIGRTMAX; s++)
        sigaddset(&rt, s);
    CHECK(pthread_sigmask(SIG_BLOCK, &rt, NULL) == 0);
    shmem_init();
    if (shmem_my_pe() < 2)
        CHECK(pthread_sigmask(SIG_UNBLOCK, &rt, NULL) == 0);
    shmem_barrier_all();
    if (shmem_my_pe() == 0)
        shmem_global_exit(0);
    shmem_barrier_all();
    printf("NOT REACHED PE %d\n", shmem_my_pe());
    shmem_finalize();
    return 0;
}
