/* Signals: put_signal (typed, sized, mem; blocking and nbi; set and add) to heap and static
 * signal words, signal_fetch, signal_wait_until, signal_add. */
#include <shmem.h>
#include "check.h"

#define N 32
static uint64_t ssig;
static int sbuf[N];

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
    long *hbuf = shmem_calloc(N, sizeof(long));
    uint64_t *hsig = shmem_calloc(2, sizeof(uint64_t));
    long src[N];
    int isrc[N];
    for (int i = 0; i < N; i++) {
        src[i] = me * 1000L + i;
        isrc[i] = -(me * 1000 + i);
    }
    shmem_barrier_all();
    shmem_long_put_signal(hbuf, src, N, &hsig[0], 1 + me, SHMEM_SIGNAL_SET, right);
    CHECK(shmem_signal_wait_until(&hsig[0], SHMEM_CMP_EQ, 1 + left) == (uint64_t) (1 + left));
    for (int i = 0; i < N; i++) CHECK(hbuf[i] == left * 1000L + i);
    /* static data and static signal, nbi */
    shmem_put32_signal_nbi(sbuf, isrc, N, &ssig, 10, SHMEM_SIGNAL_ADD, right);
    shmem_quiet();
    shmem_signal_wait_until(&ssig, SHMEM_CMP_GE, 10);
    for (int i = 0; i < N; i++) CHECK(sbuf[i] == -(left * 1000 + i));
    CHECK(shmem_signal_fetch(&ssig) == 10);
    shmem_barrier_all();
    /* every PE adds to PE 0's signal; mem form with generic put_signal on the side */
    shmem_putmem_signal(&hbuf[me], &src[me], sizeof(long), &hsig[1], 1, SHMEM_SIGNAL_ADD, 0);
    if (me == 0) {
        shmem_signal_wait_until(&hsig[1], SHMEM_CMP_EQ, (uint64_t) n);
        for (int pe = 0; pe < n; pe++) CHECK(hbuf[pe] == pe * 1000L + pe);
    }
    shmem_barrier_all();
    shmem_signal_add(&ssig, 5, right);
    shmem_barrier_all();
    CHECK(shmem_signal_fetch(&ssig) == 15);
    shmem_signal_set(&ssig, 0, me);
    shmem_put_signal(hbuf, src, 2, &hsig[0], 99, SHMEM_SIGNAL_SET, right); /* generic */
    shmem_signal_wait_until(&hsig[0], SHMEM_CMP_EQ, 99);
    CHECK(hbuf[1] == left * 1000L + 1 && shmem_signal_fetch(&ssig) == 0);
    shmem_barrier_all();
    shmem_free(hsig);
    shmem_free(hbuf);
    DONE("signal");
    shmem_finalize();
    return 0;
}
