/* Teams: predefined handles, split_strided (even PEs), split_2d, translate, team barriers,
   get_config, destroy; host collectives on the world and on a split team. */
#include "check.h"

#include <string.h>

/* The half pattern of an integer 1..2048. */
static uint16_t half_bits(int v) {
    int e = 0;
    while ((v >> (e + 1)) != 0) e++;
    return (uint16_t)(((e + 15) << 10) | ((v << (10 - e)) & 0x3ff));
}

/* The bfloat16 pattern of an integer 1..256 (the upper half of the float). */
static uint16_t bf16_bits(int v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

int main(void) {
    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    int me = rshmem_my_pe(), n = rshmem_n_pes();
    check_pe = me;
    CHECK(rshmem_team_my_pe(RSHMEM_TEAM_WORLD) == me);
    CHECK(rshmem_team_n_pes(RSHMEM_TEAM_WORLD) == n);
    CHECK(rshmem_team_n_pes(RSHMEM_TEAM_NODE) == n); /* one host */
    CHECK(rshmem_team_my_pe(RSHMEM_TEAM_SHARED) == me);
    CHECK(rshmem_team_n_pes(RSHMEM_TEAM_INVALID) == -1);
    CHECK(rshmem_team_n_pes(77) == -1);

    rshmem_team_t even = RSHMEM_TEAM_INVALID;
    rshmem_team_config_t cfg = {3};
    CHECK(rshmem_team_split_strided(RSHMEM_TEAM_WORLD, 0, 2, (n + 1) / 2, &cfg,
                                    RSHMEM_TEAM_NUM_CONTEXTS, &even) == RSHMEM_SUCCESS);
    if (me % 2 == 0) {
        CHECK(even != RSHMEM_TEAM_INVALID);
        CHECK(rshmem_team_my_pe(even) == me / 2);
        CHECK(rshmem_team_n_pes(even) == (n + 1) / 2);
        CHECK(rshmem_team_translate_pe(even, 1, RSHMEM_TEAM_WORLD) == (n > 2 ? 2 : -1));
        CHECK(rshmem_team_translate_pe(RSHMEM_TEAM_WORLD, me, even) == me / 2);
        rshmem_team_config_t out = {0};
        CHECK(rshmem_team_get_config(even, RSHMEM_TEAM_NUM_CONTEXTS, &out) == RSHMEM_SUCCESS);
        CHECK(out.num_contexts == 3);
        rshmem_barrier(even);
        rshmem_team_sync(even);
    } else {
        CHECK(even == RSHMEM_TEAM_INVALID);
    }

    rshmem_team_t x = RSHMEM_TEAM_INVALID, y = RSHMEM_TEAM_INVALID;
    CHECK(rshmem_team_split_2d(RSHMEM_TEAM_WORLD, 2, NULL, 0, &x, NULL, 0, &y) ==
          RSHMEM_SUCCESS);
    CHECK(rshmem_team_my_pe(x) == me % 2 && rshmem_team_my_pe(y) == me / 2);
    CHECK(rshmem_team_n_pes(y) == (me % 2 == 0 ? (n + 1) / 2 : n / 2));

    /* Host collectives. */
    int *src = rshmem_malloc(8 * sizeof(int));
    int *dst = rshmem_malloc(8 * n * sizeof(int));
    CHECK(src && dst);
    int mine[8];
    for (int i = 0; i < 8; i++) mine[i] = me + 1;
    rshmem_int_put(src, mine, 8, me);
    rshmem_barrier_all();
    CHECK(rshmem_int_sum_reduce(RSHMEM_TEAM_WORLD, dst, src, 8) == 0);
    int out[64];
    rshmem_int_get(out, dst, 8, me);
    for (int i = 0; i < 8; i++) CHECK(out[i] == n * (n + 1) / 2);
    CHECK(rshmem_int_max_reduce(RSHMEM_TEAM_WORLD, dst, src, 8) == 0);
    rshmem_int_get(out, dst, 1, me);
    CHECK(out[0] == n);
    CHECK(rshmem_int_fcollect(RSHMEM_TEAM_WORLD, dst, src, 1) == 0);
    rshmem_int_get(out, dst, (size_t)n, me);
    for (int i = 0; i < n; i++) CHECK(out[i] == i + 1);
    CHECK(rshmem_int_broadcast(RSHMEM_TEAM_WORLD, dst, src, 8, n - 1) == 0);
    rshmem_int_get(out, dst, 8, me);
    for (int i = 0; i < 8; i++) CHECK(out[i] == n);
    if (me % 2 == 0) {
        CHECK(rshmem_int_sum_reduce(even, dst, src, 2) == 0);
        rshmem_int_get(out, dst, 2, me);
        int s = 0;
        for (int p = 0; p < n; p += 2) s += p + 1;
        CHECK(out[0] == s && out[1] == s);
        rshmem_team_destroy(even);
        CHECK(rshmem_team_n_pes(even) == -1);
    }
    /* 16-bit floats, passed as their bit patterns: half sum and bfloat16 max and reducescatter
       of small integers (exact in 16 bits). */
    uint16_t *s16 = rshmem_malloc(4 * (size_t)n * sizeof(uint16_t));
    uint16_t *d16 = rshmem_malloc(4 * (size_t)n * sizeof(uint16_t));
    CHECK(s16 && d16);
    uint16_t h[64], b[64], got16[64];
    for (int i = 0; i < 4 * n; i++) {
        h[i] = half_bits(me + 1 + i % 3);
        b[i] = bf16_bits(me + 1 + i % 3);
    }
    rshmem_uint16_put(s16, h, 4, me);
    rshmem_barrier_all();
    CHECK(rshmem_half_sum_reduce(RSHMEM_TEAM_WORLD, d16, s16, 4) == 0);
    rshmem_uint16_get(got16, d16, 4, me);
    for (int i = 0; i < 4; i++) CHECK(got16[i] == half_bits(n * (n + 1) / 2 + n * (i % 3)));
    rshmem_uint16_put(s16, b, 4 * (size_t)n, me);
    rshmem_barrier_all();
    CHECK(rshmem_bfloat16_max_reduce(RSHMEM_TEAM_WORLD, d16, s16, 4) == 0);
    rshmem_uint16_get(got16, d16, 4, me);
    for (int i = 0; i < 4; i++) CHECK(got16[i] == bf16_bits(n + i % 3));
    CHECK(rshmem_bfloat16_min_reducescatter(RSHMEM_TEAM_WORLD, d16, s16, 4) == 0);
    rshmem_uint16_get(got16, d16, 4, me);
    for (int i = 0; i < 4; i++) CHECK(got16[i] == bf16_bits(1 + (me * 4 + i) % 3));
    rshmem_barrier_all();
    rshmem_free(d16);
    rshmem_free(s16);

    rshmem_team_destroy(y);
    rshmem_team_destroy(x);
    rshmem_barrier_all();
    rshmem_free(dst);
    rshmem_free(src);
    return finish("team");
}
