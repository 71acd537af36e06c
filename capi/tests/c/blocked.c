/* OpenSHMEM 1.6 blocked strided RMA: shmem_TYPENAME_ibput/ibget, shmem_ibputSIZE/ibgetSIZE,
 * their shmem_ctx_ forms and the C11 generic shmem_ibput/shmem_ibget, on heap and global
 * buffers. Each PE moves blocks to and from its right neighbour and checks every element,
 * the gaps between blocks included (they must keep their old values). */
#include <shmem.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

#define NB 4    /* blocks */
#define BS 3    /* elements per block */
#define DST 5   /* target stride (elements) */
#define SST 4   /* source stride */
#define LEN 32

static long gl[LEN];             /* a global (data segment) target */
static long double gld[LEN];

/* The value element i of PE pe's source holds. */
#define VAL(pe, i) ((pe) * 1000 + (i) + 1)

/* Checks that dest holds the blocks of src (from PE `from`) at stride `dst`, and `fill`
 * everywhere else. */
#define CHECK_BLOCKS(dest, from, dst, sst, bs, nb, fill)                           \
    do {                                                                           \
        for (int i_ = 0; i_ < LEN; i_++) {                                         \
            int b_ = i_ / (dst), k_ = i_ % (dst);                                  \
            if (b_ < (nb) && k_ < (bs))                                            \
                CHECK((dest)[i_] == (__typeof__((dest)[0])) VAL(from, b_ * (sst) + k_)); \
            else                                                                   \
                CHECK((dest)[i_] == (__typeof__((dest)[0])) (fill));               \
        }                                                                          \
    } while (0)

#define RESET(buf, fill)                                                           \
    do {                                                                           \
        for (int i_ = 0; i_ < LEN; i_++) (buf)[i_] = (fill);                       \
    } while (0)

#define SOURCE(buf, pe)                                                            \
    do {                                                                           \
        for (int i_ = 0; i_ < LEN; i_++) (buf)[i_] = VAL(pe, i_);                  \
    } while (0)

/* One put case (uses `me` and `left` of main): resets `dest` to `fill` and `src` to this PE's
 * values, runs the put `...` (to the right neighbour) between two barriers and checks that
 * `dest` holds the left neighbour's blocks (strides dst, sst; nb blocks of bs) and `fill`. */
#define PUT_CASE(dest, src, fill, dst, sst, bs, nb, ...)                          \
    do {                                                                           \
        RESET(dest, fill);                                                         \
        SOURCE(src, me);                                                           \
        shmem_barrier_all();                                                       \
        __VA_ARGS__;                                                               \
        shmem_barrier_all();                                                       \
        CHECK_BLOCKS(dest, left, dst, sst, bs, nb, fill);                          \
    } while (0)

/* One get case (uses `me` of main): resets the local `dest` to `fill` and the symmetric `src`
 * to this PE's values, runs the get `...` (from PE `from`) after a barrier and checks that
 * `dest` holds `from`'s blocks (strides dst, sst; nb blocks of bs) and `fill`. */
#define GET_CASE(dest, src, fill, from, dst, sst, bs, nb, ...)                    \
    do {                                                                           \
        RESET(dest, fill);                                                         \
        SOURCE(src, me);                                                           \
        shmem_barrier_all();                                                       \
        __VA_ARGS__;                                                               \
        CHECK_BLOCKS(dest, from, dst, sst, bs, nb, fill);                          \
    } while (0)

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    int right = (me + 1) % n, left = (me + n - 1) % n;

    int *hi = shmem_malloc(LEN * sizeof(int));
    int *si = shmem_malloc(LEN * sizeof(int));
    double *hd = shmem_malloc(LEN * sizeof(double));
    uint16_t *h16 = shmem_malloc(LEN * sizeof(uint16_t));
    uint64_t *h64 = shmem_malloc(LEN * sizeof(uint64_t));
    char *h128 = shmem_malloc(LEN * 16);
    int li[LEN];
    long ll[LEN];
    double ld[LEN];
    long double lld[LEN];

    /* ibput of int: my local source to the right neighbour's heap. */
    PUT_CASE(hi, li, -1, DST, SST, BS, NB,
             shmem_int_ibput(hi, li, DST, SST, BS, NB, right));

    /* ibget of int from the right neighbour's symmetric source into a local array. */
    GET_CASE(li, si, -7, right, DST, SST, BS, NB,
             shmem_int_ibget(li, si, DST, SST, BS, NB, right));

    /* Contiguous blocks (strides equal to bsize) and bsize 1 (like iput). */
    PUT_CASE(hi, li, -1, BS, BS, BS, NB,
             shmem_int_ibput(hi, li, BS, BS, BS, NB, right));
    RESET(hi, -1);
    shmem_barrier_all();
    shmem_int_ibput(hi, li, 2, 3, 1, 8, right);
    shmem_barrier_all();
    CHECK_BLOCKS(hi, left, 2, 3, 1, 8, -1);

    /* Zero blocks or a zero block size move nothing. */
    RESET(hi, -1);
    shmem_barrier_all();
    shmem_int_ibput(hi, li, DST, SST, 0, NB, right);
    shmem_int_ibput(hi, li, DST, SST, BS, 0, right);
    shmem_barrier_all();
    for (int i = 0; i < LEN; i++) CHECK(hi[i] == -1);

    /* ctx form on the default context, into a global, then read back with the ctx ibget. */
    PUT_CASE(gl, ll, -1, DST, SST, BS, NB,
             shmem_ctx_long_ibput(SHMEM_CTX_DEFAULT, gl, ll, DST, SST, BS, NB, right));
    RESET(ll, -3);
    shmem_barrier_all();
    shmem_ctx_long_ibget(SHMEM_CTX_DEFAULT, ll, gl, DST, DST, BS, NB, right);
    /* The right neighbour's gl holds my blocks (I am its left), gathered at stride DST. */
    for (int b = 0; b < NB; b++)
        for (int k = 0; k < BS; k++) CHECK(ll[b * DST + k] == (long) VAL(me, b * SST + k));
    shmem_barrier_all();

    /* double and long double. */
    PUT_CASE(hd, ld, -1.0, DST, SST, BS, NB,
             shmem_double_ibput(hd, ld, DST, SST, BS, NB, right));
    PUT_CASE(gld, lld, -1.0L, DST, SST, BS, NB,
             shmem_longdouble_ibput(gld, lld, DST, SST, BS, NB, right));
    RESET(lld, -2.0L);
    shmem_longdouble_ibget(lld, gld, DST, DST, BS, NB, me);
    for (int b = 0; b < NB; b++)
        for (int k = 0; k < BS; k++) CHECK(lld[b * DST + k] == VAL(left, b * SST + k));

    /* Sized forms: 16, 64 and 128 bits (the last as pairs of uint64_t). */
    uint16_t l16[LEN];
    uint64_t l64[LEN], l128[2 * LEN];
    PUT_CASE(h16, l16, 0xffff, DST, SST, BS, NB,
             shmem_ibput16(h16, l16, DST, SST, BS, NB, right));
    GET_CASE(l64, h64, 9, right, DST, SST, BS, NB,
             shmem_ctx_ibget64(SHMEM_CTX_DEFAULT, l64, h64, DST, SST, BS, NB, right));
    for (int i = 0; i < 2 * LEN; i++) l128[i] = (uint64_t) VAL(me, i);
    memset(h128, 0, LEN * 16);
    shmem_barrier_all();
    /* 128-bit elements: 2 blocks of 2, strides 3 and 2 elements (of 16 bytes). */
    shmem_ibput128(h128, l128, 3, 2, 2, 2, right);
    shmem_barrier_all();
    {
        const uint64_t *w = (const uint64_t *) h128;
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 2; k++)
                for (int h = 0; h < 2; h++)
                    CHECK(w[2 * (b * 3 + k) + h] == (uint64_t) VAL(left, 2 * (b * 2 + k) + h));
        CHECK(w[2 * 2] == 0 && w[2 * 2 + 1] == 0); /* the gap after block 0 */
    }
    uint8_t l8[LEN];
    char *h8 = (char *) h16;
    memset(h8, 0x55, LEN);
    SOURCE(l8, 0);
    shmem_barrier_all();
    shmem_ctx_ibput8(SHMEM_CTX_DEFAULT, h8, l8, 4, 2, 2, 3, right);
    shmem_barrier_all();
    for (int i = 0; i < 12; i++) CHECK((uint8_t) h8[i] == ((i % 4) < 2 ? (uint8_t) VAL(0, (i / 4) * 2 + i % 4) : 0x55));
    uint32_t l32[LEN];
    RESET(l32, 1);
    shmem_barrier_all();
    SOURCE(hi, me);
    shmem_barrier_all();
    shmem_ibget32(l32, hi, DST, SST, BS, NB, left);
    CHECK_BLOCKS(l32, left, DST, SST, BS, NB, 1u);
    shmem_barrier_all(); /* my right neighbour has read my hi */

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
    /* C11 generics, with and without a context. */
    PUT_CASE(hi, li, -1, DST, SST, BS, NB,
             shmem_ibput(hi, li, DST, SST, BS, NB, right));
    GET_CASE(ld, hd, 5.0, right, DST, SST, BS, NB,
             shmem_ibget(SHMEM_CTX_DEFAULT, ld, hd, DST, SST, BS, NB, right));
#endif

    shmem_barrier_all();
    shmem_free(h128);
    shmem_free(h64);
    shmem_free(h16);
    shmem_free(hd);
    shmem_free(si);
    shmem_free(hi);
    DONE("blocked");
    shmem_finalize();
    return 0;
}
