/* Errors that return a code: each is printed on stderr naming the call, and the program goes on.
   Run on the CPU backend (RSHMEM_BACKEND=cpu), where stream calls are unsupported. */
#include "check.h"

int main(void) {
    /* Before init. */
    CHECK(rshmem_finalize() == RSHMEM_ERROR_NOT_INITIALIZED);
    CHECK(rshmem_malloc(64) == NULL);
    CHECK(rshmemx_barrier_on_stream(RSHMEM_TEAM_WORLD, 0) == RSHMEM_ERROR_NOT_INITIALIZED);
    CHECK(rshmem_get_uniqueid(NULL) == RSHMEM_ERROR_INVALID_VALUE);
    rshmem_init_attr_t attr = RSHMEM_INIT_ATTR_INITIALIZER;
    CHECK(rshmem_init_attr(RSHMEM_INIT_WITH_UNIQUEID, &attr) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmem_init_attr(0x100, &attr) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmem_init_attr(RSHMEM_INIT_WITH_MPI_COMM, &attr) == RSHMEM_ERROR_INVALID_VALUE);
    long not_a_comm = 0;
    attr.mpi_comm = &not_a_comm; /* this program has no MPI */
    CHECK(rshmem_init_attr(RSHMEM_INIT_WITH_MPI_COMM, &attr) == RSHMEM_ERROR_UNSUPPORTED);
    CHECK(rshmem_init_status() == RSHMEM_STATUS_NOT_INITIALIZED);
    CHECK(rshmemx_cumodule_init(NULL) == RSHMEM_ERROR_NOT_INITIALIZED);
    CHECK(rshmemx_buffer_register_symmetric(NULL, 0, 0) == NULL);

    CHECK(rshmem_init() == RSHMEM_SUCCESS);
    check_pe = rshmem_my_pe();
    CHECK(rshmem_init() == RSHMEM_ERROR_STATE); /* twice */
    int me = rshmem_my_pe(), n = rshmem_n_pes();
    int *x = rshmem_calloc(4, sizeof(int));
    CHECK(x != NULL);

    /* Stream calls on the CPU backend. */
    CHECK(rshmemx_putmem_on_stream(x, x, 4, 0, 0) == RSHMEM_ERROR_UNSUPPORTED);
    CHECK(rshmemx_int_sum_reduce_on_stream(RSHMEM_TEAM_WORLD, x, x, 1, 0) ==
          RSHMEM_ERROR_UNSUPPORTED);
    CHECK(rshmemx_barrier_all_on_stream(0) == RSHMEM_ERROR_UNSUPPORTED);

    /* Expert-parallel handles: bad configurations, then the CPU backend. */
    rshmemx_ep_config_t ec = {64, 128, 8, 16, RSHMEMX_EP_BF16, 0, 0, 0};
    rshmemx_ep_t *ep = (rshmemx_ep_t *)&ec;
    CHECK(rshmemx_ep_create(NULL, &ep) == RSHMEM_ERROR_INVALID_VALUE && ep == NULL);
    ec.dtype = 7;
    CHECK(rshmemx_ep_create(&ec, &ep) == RSHMEM_ERROR_INVALID_VALUE && ep == NULL);
    ec.dtype = RSHMEMX_EP_BF16;
    CHECK(rshmemx_ep_create(&ec, &ep) == RSHMEM_ERROR_UNSUPPORTED && ep == NULL);
    CHECK(rshmemx_ep_dispatch_on_stream(NULL, NULL, NULL, NULL, 0, 0) == RSHMEM_ERROR_UNSUPPORTED);
    CHECK(rshmemx_ep_output(NULL, NULL, NULL, NULL, NULL) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmemx_ep_ll_dispatch_on_stream(NULL, NULL, NULL, 0, 0) == RSHMEM_ERROR_UNSUPPORTED);
    CHECK(rshmemx_ep_ll_output(NULL, NULL, NULL, NULL) == RSHMEM_ERROR_INVALID_VALUE);
    /* fp8: hidden must be a multiple of 128 (checked before the backend), then the backend. */
    ec.dtype = RSHMEMX_EP_FP8_E4M3;
    ec.hidden = 64;
    CHECK(rshmemx_ep_create(&ec, &ep) == RSHMEM_ERROR_INVALID_VALUE && ep == NULL);
    ec.hidden = 256;
    CHECK(rshmemx_ep_create(&ec, &ep) == RSHMEM_ERROR_UNSUPPORTED && ep == NULL);
    CHECK(rshmemx_ep_dispatch_fp8_on_stream(NULL, NULL, NULL, NULL, NULL, 0, 0) ==
          RSHMEM_ERROR_UNSUPPORTED);
    CHECK(rshmemx_ep_ll_dispatch_fp8_on_stream(NULL, NULL, NULL, NULL, 0, 0) ==
          RSHMEM_ERROR_UNSUPPORTED);
    CHECK(rshmemx_ep_output_scales(NULL, NULL, NULL) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmemx_ep_ll_output_scales(NULL, NULL) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmemx_ep_ll_per_pe(NULL, NULL) == RSHMEM_ERROR_INVALID_VALUE);

    /* Bad arguments of status-returning calls. */
    rshmem_team_t t = 5;
    CHECK(rshmem_team_split_strided(RSHMEM_TEAM_WORLD, 0, 1, n + 1, NULL, 0, &t) ==
          RSHMEM_ERROR_INVALID_VALUE);
    CHECK(t == RSHMEM_TEAM_INVALID);
    CHECK(rshmem_team_split_strided(42, 0, 1, 1, NULL, 0, &t) == RSHMEM_ERROR_INVALID_VALUE);
    rshmem_team_config_t cfg;
    CHECK(rshmem_team_get_config(RSHMEM_TEAM_WORLD, 0x80, &cfg) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmem_team_get_config(RSHMEM_TEAM_WORLD, 0, NULL) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmem_align(3, 64) == NULL); /* not a power of two: NULL on every PE */

    /* Local buffer registration: checked and matched. */
    static char buf[64], buf2[16];
    CHECK(rshmemx_buffer_register(buf, sizeof buf) == RSHMEM_SUCCESS);
    CHECK(rshmemx_buffer_register(buf + 8, 8) == RSHMEM_ERROR_INVALID_VALUE); /* overlaps */
    CHECK(rshmemx_buffer_register(NULL, 8) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmemx_buffer_register(buf2, 0) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmemx_buffer_register(x, sizeof(int)) == RSHMEM_ERROR_INVALID_VALUE); /* symmetric */
    CHECK(rshmemx_buffer_unregister(buf + 1) == RSHMEM_ERROR_INVALID_VALUE);
    CHECK(rshmemx_buffer_unregister(buf) == RSHMEM_SUCCESS);
    CHECK(rshmemx_buffer_unregister(buf) == RSHMEM_ERROR_INVALID_VALUE); /* once */
    CHECK(rshmemx_buffer_register(buf2, sizeof buf2) == RSHMEM_SUCCESS);
    rshmemx_buffer_unregister_all();
    CHECK(rshmemx_buffer_unregister(buf2) == RSHMEM_ERROR_INVALID_VALUE);
    /* CUDA modules need the GPU backend. */
    CHECK(rshmemx_cumodule_init(NULL) == RSHMEM_ERROR_STATE);
    CHECK(rshmemx_cumodule_finalize(NULL) == RSHMEM_ERROR_STATE);
    /* Symmetric registration of user buffers needs the GPU backend (CUDA VMM memory). */
    CHECK(rshmemx_buffer_register_symmetric(buf, sizeof buf, 0) == NULL);
    CHECK(rshmemx_buffer_register_symmetric(buf, sizeof buf, 1) == NULL); /* flags */
    CHECK(rshmemx_buffer_unregister_symmetric(buf, sizeof buf) == RSHMEM_ERROR_UNSUPPORTED);
    (void)me;
    rshmem_barrier_all();
    rshmem_free(x);
    DONE("errors");
    CHECK(rshmem_finalize() == RSHMEM_SUCCESS);
    CHECK(rshmem_finalize() == RSHMEM_ERROR_NOT_INITIALIZED);
    return 0;
}
