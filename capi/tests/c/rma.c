/* RMA: typed, sized and mem put/get/p/g/iput/iget and _nbi on heap and static objects, the C11
 * generic forms and contexts. Every value encodes the source PE and index. */
#include <shmem.h>
#include <string.h>
#include "check.h"

#define N 16
static long sl[N];
static short ss[N];
static double sd[N];

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
    int *hi = shmem_calloc(N, sizeof(int));
    unsigned char *hc = shmem_calloc(N, 1);
    long double *hld = shmem_calloc(N, sizeof(long double));
    uint64_t *h64 = shmem_calloc(N, 8);
    int32_t *h32 = shmem_calloc(2 * N, 4);
    int src[N];
    long lsrc[N];
    short ssrc[N];
    double dsrc[N];
    for (int i = 0; i < N; i++) {
        src[i] = me * 1000 + i;
        lsrc[i] = -(me * 1000L + i);
        ssrc[i] = (short) (me * 100 + i);
        dsrc[i] = me + i / 4.0;
    }
    shmem_int_put(hi, src, N, right);
    shmem_long_put(sl, lsrc, N, right);
    shmem_put(ss, ssrc, N, right);                        /* generic, short */
    shmem_ctx_double_put(SHMEM_CTX_DEFAULT, sd, dsrc, N, right);
    shmem_uchar_p(&hc[3], (unsigned char) (200 + me), right);
    shmem_longdouble_p(&hld[2], 1.5L + me, right);
    shmem_p(&h64[5], 0xABCD000000000000ULL + (uint64_t) me, right); /* generic, uint64_t = ulong */
    shmem_barrier_all();
    for (int i = 0; i < N; i++) {
        CHECK(hi[i] == left * 1000 + i);
        CHECK(sl[i] == -(left * 1000L + i));
        CHECK(ss[i] == (short) (left * 100 + i));
        CHECK(sd[i] == left + i / 4.0);
    }
    CHECK(hc[3] == 200 + left && hc[2] == 0 && hc[4] == 0);
    CHECK(hld[2] == 1.5L + left);
    CHECK(h64[5] == 0xABCD000000000000ULL + (uint64_t) left && h64[4] == 0);
    /* gets from the right neighbour: it holds what I put there */
    int gi[N];
    long gl[N];
    shmem_int_get(gi, hi, N, right);
    shmem_get(gl, sl, N, right);
    for (int i = 0; i < N; i++) CHECK(gi[i] == src[i] && gl[i] == lsrc[i]);
    CHECK(shmem_int_g(&hi[7], right) == me * 1000 + 7);
    CHECK(shmem_g(&ss[2], right) == (short) (me * 100 + 2));
    CHECK(shmem_longdouble_g(&hld[2], right) == 1.5L + me);
    CHECK(shmem_ctx_long_g(SHMEM_CTX_DEFAULT, &sl[1], right) == lsrc[1]);
    shmem_barrier_all();
    /* strided: every other element of h32 gets src[0], src[2], ... */
    shmem_int32_iput(h32, src, 2, 2, N / 2, right);
    shmem_barrier_all();
    for (int i = 0; i < N / 2; i++) CHECK(h32[2 * i] == left * 1000 + 2 * i && h32[2 * i + 1] == 0);
    int back[N];
    memset(back, 0, sizeof back);
    shmem_iget32(back, h32, 1, 2, N / 2, left);
    for (int i = 0; i < N / 2; i++) CHECK(back[i] == ((left + n - 1) % n) * 1000 + 2 * i);
    long sback[N];
    shmem_long_iget(sback, sl, 1, 3, 4, right);
    for (int i = 0; i < 4; i++) CHECK(sback[i] == lsrc[3 * i]);
    shmem_barrier_all();
    /* sized and mem forms, nbi */
    uint64_t v64[4] = {1ULL << 40 | (uint64_t) me, 2, 3, 4};
    shmem_put64_nbi(h64, v64, 4, right);
    shmem_putmem_nbi(&hc[8], "rshmem", 6, right);
    shmem_quiet();
    shmem_barrier_all();
    CHECK(h64[0] == (1ULL << 40 | (uint64_t) left) && h64[3] == 4);
    CHECK(memcmp(&hc[8], "rshmem", 6) == 0);
    uint64_t g64[4];
    shmem_get64_nbi(g64, h64, 4, left);
    char gm[6];
    shmem_getmem(gm, &hc[8], 6, left);
    shmem_quiet();
    CHECK(g64[0] == (1ULL << 40 | (uint64_t) ((left + n - 1) % n)) && memcmp(gm, "rshmem", 6) == 0);
    /* a created context shares the default one */
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0);
    CHECK(ctx != SHMEM_CTX_INVALID);
    shmem_barrier_all();
    shmem_ctx_int_p(ctx, &hi[0], -me, right);
    shmem_put(ctx, &sl[0], &lsrc[5], 1, right);           /* generic with a context */
    shmem_ctx_quiet(ctx);
    shmem_ctx_destroy(ctx);
    shmem_barrier_all();
    CHECK(hi[0] == -left && sl[0] == -(left * 1000L + 5));
    shmem_free(h32);
    shmem_free(h64);
    shmem_free(hld);
    shmem_free(hc);
    shmem_free(hi);
    DONE("rma");
    shmem_finalize();
    return 0;
}
