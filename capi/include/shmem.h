/*
 * shmem.h — OpenSHMEM 1.6 C API of rshmem (libshmem). Generated from shmem_head.h.in by
 * capi/gen.py; edit those, not this file.
 *
 * What is implemented and what is not: docs/capi.md.
 */
#ifndef RSHMEM_SHMEM_H
#define RSHMEM_SHMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 6
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define SHMEM_MAX_NAME_LEN 256
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define SHMEM_VENDOR_STRING "rshmem"
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING

#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

#define SHMEM_CMP_EQ 0
#define SHMEM_CMP_NE 1
#define SHMEM_CMP_GT 2
#define SHMEM_CMP_GE 3
#define SHMEM_CMP_LT 4
#define SHMEM_CMP_LE 5
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_GE SHMEM_CMP_GE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_LE SHMEM_CMP_LE

#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

#define SHMEM_MALLOC_ATOMICS_REMOTE 1L
#define SHMEM_MALLOC_SIGNAL_REMOTE 2L

/* pSync/pWrk sizes of the deprecated active-set routines. pSync must be symmetric, hold
 * SHMEM_*_SYNC_SIZE longs set to SHMEM_SYNC_VALUE; pWrk is not used. */
#define SHMEM_SYNC_VALUE 0L
#define SHMEM_SYNC_SIZE 64
#define SHMEM_BARRIER_SYNC_SIZE 64
#define SHMEM_BCAST_SYNC_SIZE 64
#define SHMEM_REDUCE_SYNC_SIZE 64
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 64
#define SHMEM_COLLECT_SYNC_SIZE 64
#define SHMEM_ALLTOALL_SYNC_SIZE 64
#define SHMEM_ALLTOALLS_SYNC_SIZE 64
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE

/* Contexts: every context shares the default context (see docs/capi.md). */
typedef void *shmem_ctx_t;
#define SHMEM_CTX_PRIVATE 1L
#define SHMEM_CTX_SERIALIZED 2L
#define SHMEM_CTX_NOSTORE 4L
#define SHMEM_CTX_INVALID ((shmem_ctx_t) 0)
#define SHMEM_CTX_DEFAULT ((shmem_ctx_t) 1)

/* Teams: SHMEM_TEAM_INVALID is NULL; split teams are opaque handles. */
typedef struct shmemi_team *shmem_team_t;
#define SHMEM_TEAM_INVALID ((shmem_team_t) 0)
#define SHMEM_TEAM_WORLD ((shmem_team_t) 1)
#define SHMEM_TEAM_SHARED ((shmem_team_t) 2)
#define SHMEM_TEAM_NODE ((shmem_team_t) 3)
#define SHMEMX_TEAM_NODE SHMEM_TEAM_NODE
typedef struct {
    int num_contexts;
} shmem_team_config_t;
#define SHMEM_TEAM_NUM_CONTEXTS 1L

/* Communication sessions (1.6): hints only; rshmem accepts and ignores them. */
typedef struct {
    size_t total_ops;
} shmem_ctx_session_config_t;
#define SHMEM_CTX_SESSION_BATCH 1L
#define SHMEM_CTX_SESSION_TOTAL_OPS 1L

/* Setup, exit, query */
void shmem_init(void);
int shmem_init_thread(int requested, int *provided);
void shmem_query_thread(int *provided);
void shmem_finalize(void);
void shmem_global_exit(int status);
int shmem_my_pe(void);
int shmem_n_pes(void);
int shmem_pe_accessible(int pe);
int shmem_addr_accessible(const void *addr, int pe);
void *shmem_ptr(const void *dest, int pe);
void *shmem_team_ptr(shmem_team_t team, const void *dest, int pe);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);
void shmem_query_initialized(int *initialized);
void shmem_pcontrol(const int level, ...);
void start_pes(int npes);
int _my_pe(void);
int _num_pes(void);

/* Memory management */
void *shmem_malloc(size_t size);
void *shmem_malloc_with_hints(size_t size, long hints);
void *shmem_calloc(size_t count, size_t size);
void *shmem_align(size_t alignment, size_t size);
void *shmem_realloc(void *ptr, size_t size);
void shmem_free(void *ptr);
void *shmalloc(size_t size);
void shfree(void *ptr);
void *shrealloc(void *ptr, size_t size);
void *shmemalign(size_t alignment, size_t size);

/* Ordering, barriers */
void shmem_fence(void);
void shmem_quiet(void);
void shmem_barrier_all(void);
void shmem_sync_all(void);
void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_sync(int PE_start, int logPE_stride, int PE_size, long *pSync);

/* Teams */
int shmem_team_my_pe(shmem_team_t team);
int shmem_team_n_pes(shmem_team_t team);
int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t *config);
int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team);
int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size,
                             const shmem_team_config_t *config, long config_mask,
                             shmem_team_t *new_team);
int shmem_team_split_2d(shmem_team_t parent_team, int xrange,
                        const shmem_team_config_t *xaxis_config, long xaxis_mask,
                        shmem_team_t *xaxis_team, const shmem_team_config_t *yaxis_config,
                        long yaxis_mask, shmem_team_t *yaxis_team);
void shmem_team_destroy(shmem_team_t team);
int shmem_team_sync(shmem_team_t team);
int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t *team);

/* Point-to-point synchronization on a long: the deprecated untyped C forms (C11 programs get
 * the type-generic macros of the same names, defined below) */
void shmem_wait_until(long *ivar, int cmp, long cmp_value);
void shmem_wait(long *ivar, long cmp_value);

/* Distributed locks (a lock is a symmetric long, initially 0) */
void shmem_set_lock(long *lock);
void shmem_clear_lock(long *lock);
int shmem_test_lock(long *lock);

/* Contexts */
int shmem_ctx_create(long options, shmem_ctx_t *ctx);
int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t *ctx);
void shmem_ctx_destroy(shmem_ctx_t ctx);
void shmem_ctx_fence(shmem_ctx_t ctx);
void shmem_ctx_quiet(shmem_ctx_t ctx);
void shmem_pe_quiet(const int *target_pes, size_t npes);
void shmem_ctx_pe_quiet(shmem_ctx_t ctx, const int *target_pes, size_t npes);
void shmem_ctx_session_start(shmem_ctx_t ctx, long options, const shmem_ctx_session_config_t *config,
                             long config_mask);
void shmem_ctx_session_stop(shmem_ctx_t ctx);

/* Signals */
uint64_t shmem_signal_fetch(const uint64_t *sig_addr);
uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);
void shmem_signal_set(uint64_t *sig_addr, uint64_t signal, int pe);
void shmem_signal_add(uint64_t *sig_addr, uint64_t signal, int pe);
void shmem_ctx_signal_set(shmem_ctx_t ctx, uint64_t *sig_addr, uint64_t signal, int pe);
void shmem_ctx_signal_add(shmem_ctx_t ctx, uint64_t *sig_addr, uint64_t signal, int pe);

/* Typed RMA, sized RMA, put-with-signal, atomics, point-to-point synchronization,
 * collectives, scans. The complex types are C99's float _Complex and double _Complex (C++
 * compilers that accept _Complex, such as g++ and clang++, see the same declarations). */
void shmem_float_put(float *dest, const float *source, size_t nelems, int pe);
void shmem_ctx_float_put(shmem_ctx_t ctx, float *dest, const float *source, size_t nelems, int pe);
void shmem_float_get(float *dest, const float *source, size_t nelems, int pe);
void shmem_ctx_float_get(shmem_ctx_t ctx, float *dest, const float *source, size_t nelems, int pe);
void shmem_float_put_nbi(float *dest, const float *source, size_t nelems, int pe);
void shmem_ctx_float_put_nbi(shmem_ctx_t ctx, float *dest, const float *source, size_t nelems, int pe);
void shmem_float_get_nbi(float *dest, const float *source, size_t nelems, int pe);
void shmem_ctx_float_get_nbi(shmem_ctx_t ctx, float *dest, const float *source, size_t nelems, int pe);
void shmem_float_iput(float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_float_iput(shmem_ctx_t ctx, float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_float_iget(float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_float_iget(shmem_ctx_t ctx, float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_float_ibput(float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_float_ibput(shmem_ctx_t ctx, float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_float_ibget(float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_float_ibget(shmem_ctx_t ctx, float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_float_p(float *dest, float value, int pe);
void shmem_ctx_float_p(shmem_ctx_t ctx, float *dest, float value, int pe);
float shmem_float_g(const float *source, int pe);
float shmem_ctx_float_g(shmem_ctx_t ctx, const float *source, int pe);
void shmem_float_put_signal(float *dest, const float *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_float_put_signal(shmem_ctx_t ctx, float *dest, const float *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_float_put_signal_nbi(float *dest, const float *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_float_put_signal_nbi(shmem_ctx_t ctx, float *dest, const float *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_double_put(double *dest, const double *source, size_t nelems, int pe);
void shmem_ctx_double_put(shmem_ctx_t ctx, double *dest, const double *source, size_t nelems, int pe);
void shmem_double_get(double *dest, const double *source, size_t nelems, int pe);
void shmem_ctx_double_get(shmem_ctx_t ctx, double *dest, const double *source, size_t nelems, int pe);
void shmem_double_put_nbi(double *dest, const double *source, size_t nelems, int pe);
void shmem_ctx_double_put_nbi(shmem_ctx_t ctx, double *dest, const double *source, size_t nelems, int pe);
void shmem_double_get_nbi(double *dest, const double *source, size_t nelems, int pe);
void shmem_ctx_double_get_nbi(shmem_ctx_t ctx, double *dest, const double *source, size_t nelems, int pe);
void shmem_double_iput(double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_double_iput(shmem_ctx_t ctx, double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_double_iget(double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_double_iget(shmem_ctx_t ctx, double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_double_ibput(double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_double_ibput(shmem_ctx_t ctx, double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_double_ibget(double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_double_ibget(shmem_ctx_t ctx, double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_double_p(double *dest, double value, int pe);
void shmem_ctx_double_p(shmem_ctx_t ctx, double *dest, double value, int pe);
double shmem_double_g(const double *source, int pe);
double shmem_ctx_double_g(shmem_ctx_t ctx, const double *source, int pe);
void shmem_double_put_signal(double *dest, const double *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_double_put_signal(shmem_ctx_t ctx, double *dest, const double *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_double_put_signal_nbi(double *dest, const double *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_double_put_signal_nbi(shmem_ctx_t ctx, double *dest, const double *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_longdouble_put(long double *dest, const long double *source, size_t nelems, int pe);
void shmem_ctx_longdouble_put(shmem_ctx_t ctx, long double *dest, const long double *source, size_t nelems, int pe);
void shmem_longdouble_get(long double *dest, const long double *source, size_t nelems, int pe);
void shmem_ctx_longdouble_get(shmem_ctx_t ctx, long double *dest, const long double *source, size_t nelems, int pe);
void shmem_longdouble_put_nbi(long double *dest, const long double *source, size_t nelems, int pe);
void shmem_ctx_longdouble_put_nbi(shmem_ctx_t ctx, long double *dest, const long double *source, size_t nelems, int pe);
void shmem_longdouble_get_nbi(long double *dest, const long double *source, size_t nelems, int pe);
void shmem_ctx_longdouble_get_nbi(shmem_ctx_t ctx, long double *dest, const long double *source, size_t nelems, int pe);
void shmem_longdouble_iput(long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_longdouble_iput(shmem_ctx_t ctx, long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_longdouble_iget(long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_longdouble_iget(shmem_ctx_t ctx, long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_longdouble_ibput(long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_longdouble_ibput(shmem_ctx_t ctx, long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_longdouble_ibget(long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_longdouble_ibget(shmem_ctx_t ctx, long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_longdouble_p(long double *dest, long double value, int pe);
void shmem_ctx_longdouble_p(shmem_ctx_t ctx, long double *dest, long double value, int pe);
long double shmem_longdouble_g(const long double *source, int pe);
long double shmem_ctx_longdouble_g(shmem_ctx_t ctx, const long double *source, int pe);
void shmem_longdouble_put_signal(long double *dest, const long double *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_longdouble_put_signal(shmem_ctx_t ctx, long double *dest, const long double *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_longdouble_put_signal_nbi(long double *dest, const long double *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_longdouble_put_signal_nbi(shmem_ctx_t ctx, long double *dest, const long double *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_char_put(char *dest, const char *source, size_t nelems, int pe);
void shmem_ctx_char_put(shmem_ctx_t ctx, char *dest, const char *source, size_t nelems, int pe);
void shmem_char_get(char *dest, const char *source, size_t nelems, int pe);
void shmem_ctx_char_get(shmem_ctx_t ctx, char *dest, const char *source, size_t nelems, int pe);
void shmem_char_put_nbi(char *dest, const char *source, size_t nelems, int pe);
void shmem_ctx_char_put_nbi(shmem_ctx_t ctx, char *dest, const char *source, size_t nelems, int pe);
void shmem_char_get_nbi(char *dest, const char *source, size_t nelems, int pe);
void shmem_ctx_char_get_nbi(shmem_ctx_t ctx, char *dest, const char *source, size_t nelems, int pe);
void shmem_char_iput(char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_char_iput(shmem_ctx_t ctx, char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_char_iget(char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_char_iget(shmem_ctx_t ctx, char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_char_ibput(char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_char_ibput(shmem_ctx_t ctx, char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_char_ibget(char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_char_ibget(shmem_ctx_t ctx, char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_char_p(char *dest, char value, int pe);
void shmem_ctx_char_p(shmem_ctx_t ctx, char *dest, char value, int pe);
char shmem_char_g(const char *source, int pe);
char shmem_ctx_char_g(shmem_ctx_t ctx, const char *source, int pe);
void shmem_char_put_signal(char *dest, const char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_char_put_signal(shmem_ctx_t ctx, char *dest, const char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_char_put_signal_nbi(char *dest, const char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_char_put_signal_nbi(shmem_ctx_t ctx, char *dest, const char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_schar_put(signed char *dest, const signed char *source, size_t nelems, int pe);
void shmem_ctx_schar_put(shmem_ctx_t ctx, signed char *dest, const signed char *source, size_t nelems, int pe);
void shmem_schar_get(signed char *dest, const signed char *source, size_t nelems, int pe);
void shmem_ctx_schar_get(shmem_ctx_t ctx, signed char *dest, const signed char *source, size_t nelems, int pe);
void shmem_schar_put_nbi(signed char *dest, const signed char *source, size_t nelems, int pe);
void shmem_ctx_schar_put_nbi(shmem_ctx_t ctx, signed char *dest, const signed char *source, size_t nelems, int pe);
void shmem_schar_get_nbi(signed char *dest, const signed char *source, size_t nelems, int pe);
void shmem_ctx_schar_get_nbi(shmem_ctx_t ctx, signed char *dest, const signed char *source, size_t nelems, int pe);
void shmem_schar_iput(signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_schar_iput(shmem_ctx_t ctx, signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_schar_iget(signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_schar_iget(shmem_ctx_t ctx, signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_schar_ibput(signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_schar_ibput(shmem_ctx_t ctx, signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_schar_ibget(signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_schar_ibget(shmem_ctx_t ctx, signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_schar_p(signed char *dest, signed char value, int pe);
void shmem_ctx_schar_p(shmem_ctx_t ctx, signed char *dest, signed char value, int pe);
signed char shmem_schar_g(const signed char *source, int pe);
signed char shmem_ctx_schar_g(shmem_ctx_t ctx, const signed char *source, int pe);
void shmem_schar_put_signal(signed char *dest, const signed char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_schar_put_signal(shmem_ctx_t ctx, signed char *dest, const signed char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_schar_put_signal_nbi(signed char *dest, const signed char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_schar_put_signal_nbi(shmem_ctx_t ctx, signed char *dest, const signed char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_short_put(short *dest, const short *source, size_t nelems, int pe);
void shmem_ctx_short_put(shmem_ctx_t ctx, short *dest, const short *source, size_t nelems, int pe);
void shmem_short_get(short *dest, const short *source, size_t nelems, int pe);
void shmem_ctx_short_get(shmem_ctx_t ctx, short *dest, const short *source, size_t nelems, int pe);
void shmem_short_put_nbi(short *dest, const short *source, size_t nelems, int pe);
void shmem_ctx_short_put_nbi(shmem_ctx_t ctx, short *dest, const short *source, size_t nelems, int pe);
void shmem_short_get_nbi(short *dest, const short *source, size_t nelems, int pe);
void shmem_ctx_short_get_nbi(shmem_ctx_t ctx, short *dest, const short *source, size_t nelems, int pe);
void shmem_short_iput(short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_short_iput(shmem_ctx_t ctx, short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_short_iget(short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_short_iget(shmem_ctx_t ctx, short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_short_ibput(short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_short_ibput(shmem_ctx_t ctx, short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_short_ibget(short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_short_ibget(shmem_ctx_t ctx, short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_short_p(short *dest, short value, int pe);
void shmem_ctx_short_p(shmem_ctx_t ctx, short *dest, short value, int pe);
short shmem_short_g(const short *source, int pe);
short shmem_ctx_short_g(shmem_ctx_t ctx, const short *source, int pe);
void shmem_short_put_signal(short *dest, const short *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_short_put_signal(shmem_ctx_t ctx, short *dest, const short *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_short_put_signal_nbi(short *dest, const short *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_short_put_signal_nbi(shmem_ctx_t ctx, short *dest, const short *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int_put(int *dest, const int *source, size_t nelems, int pe);
void shmem_ctx_int_put(shmem_ctx_t ctx, int *dest, const int *source, size_t nelems, int pe);
void shmem_int_get(int *dest, const int *source, size_t nelems, int pe);
void shmem_ctx_int_get(shmem_ctx_t ctx, int *dest, const int *source, size_t nelems, int pe);
void shmem_int_put_nbi(int *dest, const int *source, size_t nelems, int pe);
void shmem_ctx_int_put_nbi(shmem_ctx_t ctx, int *dest, const int *source, size_t nelems, int pe);
void shmem_int_get_nbi(int *dest, const int *source, size_t nelems, int pe);
void shmem_ctx_int_get_nbi(shmem_ctx_t ctx, int *dest, const int *source, size_t nelems, int pe);
void shmem_int_iput(int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int_iput(shmem_ctx_t ctx, int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int_iget(int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int_iget(shmem_ctx_t ctx, int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int_ibput(int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int_ibput(shmem_ctx_t ctx, int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int_ibget(int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int_ibget(shmem_ctx_t ctx, int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int_p(int *dest, int value, int pe);
void shmem_ctx_int_p(shmem_ctx_t ctx, int *dest, int value, int pe);
int shmem_int_g(const int *source, int pe);
int shmem_ctx_int_g(shmem_ctx_t ctx, const int *source, int pe);
void shmem_int_put_signal(int *dest, const int *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int_put_signal(shmem_ctx_t ctx, int *dest, const int *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int_put_signal_nbi(int *dest, const int *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int_put_signal_nbi(shmem_ctx_t ctx, int *dest, const int *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_long_put(long *dest, const long *source, size_t nelems, int pe);
void shmem_ctx_long_put(shmem_ctx_t ctx, long *dest, const long *source, size_t nelems, int pe);
void shmem_long_get(long *dest, const long *source, size_t nelems, int pe);
void shmem_ctx_long_get(shmem_ctx_t ctx, long *dest, const long *source, size_t nelems, int pe);
void shmem_long_put_nbi(long *dest, const long *source, size_t nelems, int pe);
void shmem_ctx_long_put_nbi(shmem_ctx_t ctx, long *dest, const long *source, size_t nelems, int pe);
void shmem_long_get_nbi(long *dest, const long *source, size_t nelems, int pe);
void shmem_ctx_long_get_nbi(shmem_ctx_t ctx, long *dest, const long *source, size_t nelems, int pe);
void shmem_long_iput(long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_long_iput(shmem_ctx_t ctx, long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_long_iget(long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_long_iget(shmem_ctx_t ctx, long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_long_ibput(long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_long_ibput(shmem_ctx_t ctx, long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_long_ibget(long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_long_ibget(shmem_ctx_t ctx, long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_long_p(long *dest, long value, int pe);
void shmem_ctx_long_p(shmem_ctx_t ctx, long *dest, long value, int pe);
long shmem_long_g(const long *source, int pe);
long shmem_ctx_long_g(shmem_ctx_t ctx, const long *source, int pe);
void shmem_long_put_signal(long *dest, const long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_long_put_signal(shmem_ctx_t ctx, long *dest, const long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_long_put_signal_nbi(long *dest, const long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_long_put_signal_nbi(shmem_ctx_t ctx, long *dest, const long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_longlong_put(long long *dest, const long long *source, size_t nelems, int pe);
void shmem_ctx_longlong_put(shmem_ctx_t ctx, long long *dest, const long long *source, size_t nelems, int pe);
void shmem_longlong_get(long long *dest, const long long *source, size_t nelems, int pe);
void shmem_ctx_longlong_get(shmem_ctx_t ctx, long long *dest, const long long *source, size_t nelems, int pe);
void shmem_longlong_put_nbi(long long *dest, const long long *source, size_t nelems, int pe);
void shmem_ctx_longlong_put_nbi(shmem_ctx_t ctx, long long *dest, const long long *source, size_t nelems, int pe);
void shmem_longlong_get_nbi(long long *dest, const long long *source, size_t nelems, int pe);
void shmem_ctx_longlong_get_nbi(shmem_ctx_t ctx, long long *dest, const long long *source, size_t nelems, int pe);
void shmem_longlong_iput(long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_longlong_iput(shmem_ctx_t ctx, long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_longlong_iget(long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_longlong_iget(shmem_ctx_t ctx, long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_longlong_ibput(long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_longlong_ibput(shmem_ctx_t ctx, long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_longlong_ibget(long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_longlong_ibget(shmem_ctx_t ctx, long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_longlong_p(long long *dest, long long value, int pe);
void shmem_ctx_longlong_p(shmem_ctx_t ctx, long long *dest, long long value, int pe);
long long shmem_longlong_g(const long long *source, int pe);
long long shmem_ctx_longlong_g(shmem_ctx_t ctx, const long long *source, int pe);
void shmem_longlong_put_signal(long long *dest, const long long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_longlong_put_signal(shmem_ctx_t ctx, long long *dest, const long long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_longlong_put_signal_nbi(long long *dest, const long long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_longlong_put_signal_nbi(shmem_ctx_t ctx, long long *dest, const long long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uchar_put(unsigned char *dest, const unsigned char *source, size_t nelems, int pe);
void shmem_ctx_uchar_put(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, size_t nelems, int pe);
void shmem_uchar_get(unsigned char *dest, const unsigned char *source, size_t nelems, int pe);
void shmem_ctx_uchar_get(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, size_t nelems, int pe);
void shmem_uchar_put_nbi(unsigned char *dest, const unsigned char *source, size_t nelems, int pe);
void shmem_ctx_uchar_put_nbi(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, size_t nelems, int pe);
void shmem_uchar_get_nbi(unsigned char *dest, const unsigned char *source, size_t nelems, int pe);
void shmem_ctx_uchar_get_nbi(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, size_t nelems, int pe);
void shmem_uchar_iput(unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uchar_iput(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uchar_iget(unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uchar_iget(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uchar_ibput(unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uchar_ibput(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uchar_ibget(unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uchar_ibget(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uchar_p(unsigned char *dest, unsigned char value, int pe);
void shmem_ctx_uchar_p(shmem_ctx_t ctx, unsigned char *dest, unsigned char value, int pe);
unsigned char shmem_uchar_g(const unsigned char *source, int pe);
unsigned char shmem_ctx_uchar_g(shmem_ctx_t ctx, const unsigned char *source, int pe);
void shmem_uchar_put_signal(unsigned char *dest, const unsigned char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uchar_put_signal(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uchar_put_signal_nbi(unsigned char *dest, const unsigned char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uchar_put_signal_nbi(shmem_ctx_t ctx, unsigned char *dest, const unsigned char *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ushort_put(unsigned short *dest, const unsigned short *source, size_t nelems, int pe);
void shmem_ctx_ushort_put(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, size_t nelems, int pe);
void shmem_ushort_get(unsigned short *dest, const unsigned short *source, size_t nelems, int pe);
void shmem_ctx_ushort_get(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, size_t nelems, int pe);
void shmem_ushort_put_nbi(unsigned short *dest, const unsigned short *source, size_t nelems, int pe);
void shmem_ctx_ushort_put_nbi(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, size_t nelems, int pe);
void shmem_ushort_get_nbi(unsigned short *dest, const unsigned short *source, size_t nelems, int pe);
void shmem_ctx_ushort_get_nbi(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, size_t nelems, int pe);
void shmem_ushort_iput(unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_ushort_iput(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ushort_iget(unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_ushort_iget(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ushort_ibput(unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ushort_ibput(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ushort_ibget(unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ushort_ibget(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ushort_p(unsigned short *dest, unsigned short value, int pe);
void shmem_ctx_ushort_p(shmem_ctx_t ctx, unsigned short *dest, unsigned short value, int pe);
unsigned short shmem_ushort_g(const unsigned short *source, int pe);
unsigned short shmem_ctx_ushort_g(shmem_ctx_t ctx, const unsigned short *source, int pe);
void shmem_ushort_put_signal(unsigned short *dest, const unsigned short *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_ushort_put_signal(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ushort_put_signal_nbi(unsigned short *dest, const unsigned short *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_ushort_put_signal_nbi(shmem_ctx_t ctx, unsigned short *dest, const unsigned short *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint_put(unsigned int *dest, const unsigned int *source, size_t nelems, int pe);
void shmem_ctx_uint_put(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, size_t nelems, int pe);
void shmem_uint_get(unsigned int *dest, const unsigned int *source, size_t nelems, int pe);
void shmem_ctx_uint_get(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, size_t nelems, int pe);
void shmem_uint_put_nbi(unsigned int *dest, const unsigned int *source, size_t nelems, int pe);
void shmem_ctx_uint_put_nbi(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, size_t nelems, int pe);
void shmem_uint_get_nbi(unsigned int *dest, const unsigned int *source, size_t nelems, int pe);
void shmem_ctx_uint_get_nbi(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, size_t nelems, int pe);
void shmem_uint_iput(unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint_iput(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint_iget(unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint_iget(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint_ibput(unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint_ibput(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint_ibget(unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint_ibget(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint_p(unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_p(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
unsigned int shmem_uint_g(const unsigned int *source, int pe);
unsigned int shmem_ctx_uint_g(shmem_ctx_t ctx, const unsigned int *source, int pe);
void shmem_uint_put_signal(unsigned int *dest, const unsigned int *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint_put_signal(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint_put_signal_nbi(unsigned int *dest, const unsigned int *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint_put_signal_nbi(shmem_ctx_t ctx, unsigned int *dest, const unsigned int *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ulong_put(unsigned long *dest, const unsigned long *source, size_t nelems, int pe);
void shmem_ctx_ulong_put(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, size_t nelems, int pe);
void shmem_ulong_get(unsigned long *dest, const unsigned long *source, size_t nelems, int pe);
void shmem_ctx_ulong_get(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, size_t nelems, int pe);
void shmem_ulong_put_nbi(unsigned long *dest, const unsigned long *source, size_t nelems, int pe);
void shmem_ctx_ulong_put_nbi(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, size_t nelems, int pe);
void shmem_ulong_get_nbi(unsigned long *dest, const unsigned long *source, size_t nelems, int pe);
void shmem_ctx_ulong_get_nbi(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, size_t nelems, int pe);
void shmem_ulong_iput(unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_ulong_iput(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ulong_iget(unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_ulong_iget(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ulong_ibput(unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ulong_ibput(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ulong_ibget(unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ulong_ibget(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ulong_p(unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_p(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
unsigned long shmem_ulong_g(const unsigned long *source, int pe);
unsigned long shmem_ctx_ulong_g(shmem_ctx_t ctx, const unsigned long *source, int pe);
void shmem_ulong_put_signal(unsigned long *dest, const unsigned long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_ulong_put_signal(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ulong_put_signal_nbi(unsigned long *dest, const unsigned long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_ulong_put_signal_nbi(shmem_ctx_t ctx, unsigned long *dest, const unsigned long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ulonglong_put(unsigned long long *dest, const unsigned long long *source, size_t nelems, int pe);
void shmem_ctx_ulonglong_put(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, size_t nelems, int pe);
void shmem_ulonglong_get(unsigned long long *dest, const unsigned long long *source, size_t nelems, int pe);
void shmem_ctx_ulonglong_get(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, size_t nelems, int pe);
void shmem_ulonglong_put_nbi(unsigned long long *dest, const unsigned long long *source, size_t nelems, int pe);
void shmem_ctx_ulonglong_put_nbi(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, size_t nelems, int pe);
void shmem_ulonglong_get_nbi(unsigned long long *dest, const unsigned long long *source, size_t nelems, int pe);
void shmem_ctx_ulonglong_get_nbi(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, size_t nelems, int pe);
void shmem_ulonglong_iput(unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_ulonglong_iput(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ulonglong_iget(unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_ulonglong_iget(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ulonglong_ibput(unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ulonglong_ibput(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ulonglong_ibget(unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ulonglong_ibget(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ulonglong_p(unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_p(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
unsigned long long shmem_ulonglong_g(const unsigned long long *source, int pe);
unsigned long long shmem_ctx_ulonglong_g(shmem_ctx_t ctx, const unsigned long long *source, int pe);
void shmem_ulonglong_put_signal(unsigned long long *dest, const unsigned long long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_ulonglong_put_signal(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ulonglong_put_signal_nbi(unsigned long long *dest, const unsigned long long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_ulonglong_put_signal_nbi(shmem_ctx_t ctx, unsigned long long *dest, const unsigned long long *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int8_put(int8_t *dest, const int8_t *source, size_t nelems, int pe);
void shmem_ctx_int8_put(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, size_t nelems, int pe);
void shmem_int8_get(int8_t *dest, const int8_t *source, size_t nelems, int pe);
void shmem_ctx_int8_get(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, size_t nelems, int pe);
void shmem_int8_put_nbi(int8_t *dest, const int8_t *source, size_t nelems, int pe);
void shmem_ctx_int8_put_nbi(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, size_t nelems, int pe);
void shmem_int8_get_nbi(int8_t *dest, const int8_t *source, size_t nelems, int pe);
void shmem_ctx_int8_get_nbi(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, size_t nelems, int pe);
void shmem_int8_iput(int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int8_iput(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int8_iget(int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int8_iget(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int8_ibput(int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int8_ibput(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int8_ibget(int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int8_ibget(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int8_p(int8_t *dest, int8_t value, int pe);
void shmem_ctx_int8_p(shmem_ctx_t ctx, int8_t *dest, int8_t value, int pe);
int8_t shmem_int8_g(const int8_t *source, int pe);
int8_t shmem_ctx_int8_g(shmem_ctx_t ctx, const int8_t *source, int pe);
void shmem_int8_put_signal(int8_t *dest, const int8_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int8_put_signal(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int8_put_signal_nbi(int8_t *dest, const int8_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int8_put_signal_nbi(shmem_ctx_t ctx, int8_t *dest, const int8_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int16_put(int16_t *dest, const int16_t *source, size_t nelems, int pe);
void shmem_ctx_int16_put(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, size_t nelems, int pe);
void shmem_int16_get(int16_t *dest, const int16_t *source, size_t nelems, int pe);
void shmem_ctx_int16_get(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, size_t nelems, int pe);
void shmem_int16_put_nbi(int16_t *dest, const int16_t *source, size_t nelems, int pe);
void shmem_ctx_int16_put_nbi(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, size_t nelems, int pe);
void shmem_int16_get_nbi(int16_t *dest, const int16_t *source, size_t nelems, int pe);
void shmem_ctx_int16_get_nbi(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, size_t nelems, int pe);
void shmem_int16_iput(int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int16_iput(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int16_iget(int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int16_iget(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int16_ibput(int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int16_ibput(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int16_ibget(int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int16_ibget(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int16_p(int16_t *dest, int16_t value, int pe);
void shmem_ctx_int16_p(shmem_ctx_t ctx, int16_t *dest, int16_t value, int pe);
int16_t shmem_int16_g(const int16_t *source, int pe);
int16_t shmem_ctx_int16_g(shmem_ctx_t ctx, const int16_t *source, int pe);
void shmem_int16_put_signal(int16_t *dest, const int16_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int16_put_signal(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int16_put_signal_nbi(int16_t *dest, const int16_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int16_put_signal_nbi(shmem_ctx_t ctx, int16_t *dest, const int16_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int32_put(int32_t *dest, const int32_t *source, size_t nelems, int pe);
void shmem_ctx_int32_put(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, size_t nelems, int pe);
void shmem_int32_get(int32_t *dest, const int32_t *source, size_t nelems, int pe);
void shmem_ctx_int32_get(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, size_t nelems, int pe);
void shmem_int32_put_nbi(int32_t *dest, const int32_t *source, size_t nelems, int pe);
void shmem_ctx_int32_put_nbi(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, size_t nelems, int pe);
void shmem_int32_get_nbi(int32_t *dest, const int32_t *source, size_t nelems, int pe);
void shmem_ctx_int32_get_nbi(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, size_t nelems, int pe);
void shmem_int32_iput(int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int32_iput(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int32_iget(int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int32_iget(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int32_ibput(int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int32_ibput(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int32_ibget(int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int32_ibget(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int32_p(int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_p(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
int32_t shmem_int32_g(const int32_t *source, int pe);
int32_t shmem_ctx_int32_g(shmem_ctx_t ctx, const int32_t *source, int pe);
void shmem_int32_put_signal(int32_t *dest, const int32_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int32_put_signal(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int32_put_signal_nbi(int32_t *dest, const int32_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int32_put_signal_nbi(shmem_ctx_t ctx, int32_t *dest, const int32_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int64_put(int64_t *dest, const int64_t *source, size_t nelems, int pe);
void shmem_ctx_int64_put(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, size_t nelems, int pe);
void shmem_int64_get(int64_t *dest, const int64_t *source, size_t nelems, int pe);
void shmem_ctx_int64_get(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, size_t nelems, int pe);
void shmem_int64_put_nbi(int64_t *dest, const int64_t *source, size_t nelems, int pe);
void shmem_ctx_int64_put_nbi(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, size_t nelems, int pe);
void shmem_int64_get_nbi(int64_t *dest, const int64_t *source, size_t nelems, int pe);
void shmem_ctx_int64_get_nbi(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, size_t nelems, int pe);
void shmem_int64_iput(int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int64_iput(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int64_iget(int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_int64_iget(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_int64_ibput(int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int64_ibput(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int64_ibget(int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_int64_ibget(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_int64_p(int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_p(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
int64_t shmem_int64_g(const int64_t *source, int pe);
int64_t shmem_ctx_int64_g(shmem_ctx_t ctx, const int64_t *source, int pe);
void shmem_int64_put_signal(int64_t *dest, const int64_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int64_put_signal(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_int64_put_signal_nbi(int64_t *dest, const int64_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_int64_put_signal_nbi(shmem_ctx_t ctx, int64_t *dest, const int64_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint8_put(uint8_t *dest, const uint8_t *source, size_t nelems, int pe);
void shmem_ctx_uint8_put(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, size_t nelems, int pe);
void shmem_uint8_get(uint8_t *dest, const uint8_t *source, size_t nelems, int pe);
void shmem_ctx_uint8_get(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, size_t nelems, int pe);
void shmem_uint8_put_nbi(uint8_t *dest, const uint8_t *source, size_t nelems, int pe);
void shmem_ctx_uint8_put_nbi(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, size_t nelems, int pe);
void shmem_uint8_get_nbi(uint8_t *dest, const uint8_t *source, size_t nelems, int pe);
void shmem_ctx_uint8_get_nbi(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, size_t nelems, int pe);
void shmem_uint8_iput(uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint8_iput(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint8_iget(uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint8_iget(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint8_ibput(uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint8_ibput(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint8_ibget(uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint8_ibget(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint8_p(uint8_t *dest, uint8_t value, int pe);
void shmem_ctx_uint8_p(shmem_ctx_t ctx, uint8_t *dest, uint8_t value, int pe);
uint8_t shmem_uint8_g(const uint8_t *source, int pe);
uint8_t shmem_ctx_uint8_g(shmem_ctx_t ctx, const uint8_t *source, int pe);
void shmem_uint8_put_signal(uint8_t *dest, const uint8_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint8_put_signal(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint8_put_signal_nbi(uint8_t *dest, const uint8_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint8_put_signal_nbi(shmem_ctx_t ctx, uint8_t *dest, const uint8_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint16_put(uint16_t *dest, const uint16_t *source, size_t nelems, int pe);
void shmem_ctx_uint16_put(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, size_t nelems, int pe);
void shmem_uint16_get(uint16_t *dest, const uint16_t *source, size_t nelems, int pe);
void shmem_ctx_uint16_get(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, size_t nelems, int pe);
void shmem_uint16_put_nbi(uint16_t *dest, const uint16_t *source, size_t nelems, int pe);
void shmem_ctx_uint16_put_nbi(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, size_t nelems, int pe);
void shmem_uint16_get_nbi(uint16_t *dest, const uint16_t *source, size_t nelems, int pe);
void shmem_ctx_uint16_get_nbi(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, size_t nelems, int pe);
void shmem_uint16_iput(uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint16_iput(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint16_iget(uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint16_iget(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint16_ibput(uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint16_ibput(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint16_ibget(uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint16_ibget(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint16_p(uint16_t *dest, uint16_t value, int pe);
void shmem_ctx_uint16_p(shmem_ctx_t ctx, uint16_t *dest, uint16_t value, int pe);
uint16_t shmem_uint16_g(const uint16_t *source, int pe);
uint16_t shmem_ctx_uint16_g(shmem_ctx_t ctx, const uint16_t *source, int pe);
void shmem_uint16_put_signal(uint16_t *dest, const uint16_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint16_put_signal(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint16_put_signal_nbi(uint16_t *dest, const uint16_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint16_put_signal_nbi(shmem_ctx_t ctx, uint16_t *dest, const uint16_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint32_put(uint32_t *dest, const uint32_t *source, size_t nelems, int pe);
void shmem_ctx_uint32_put(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, size_t nelems, int pe);
void shmem_uint32_get(uint32_t *dest, const uint32_t *source, size_t nelems, int pe);
void shmem_ctx_uint32_get(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, size_t nelems, int pe);
void shmem_uint32_put_nbi(uint32_t *dest, const uint32_t *source, size_t nelems, int pe);
void shmem_ctx_uint32_put_nbi(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, size_t nelems, int pe);
void shmem_uint32_get_nbi(uint32_t *dest, const uint32_t *source, size_t nelems, int pe);
void shmem_ctx_uint32_get_nbi(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, size_t nelems, int pe);
void shmem_uint32_iput(uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint32_iput(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint32_iget(uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint32_iget(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint32_ibput(uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint32_ibput(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint32_ibget(uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint32_ibget(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint32_p(uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_p(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
uint32_t shmem_uint32_g(const uint32_t *source, int pe);
uint32_t shmem_ctx_uint32_g(shmem_ctx_t ctx, const uint32_t *source, int pe);
void shmem_uint32_put_signal(uint32_t *dest, const uint32_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint32_put_signal(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint32_put_signal_nbi(uint32_t *dest, const uint32_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint32_put_signal_nbi(shmem_ctx_t ctx, uint32_t *dest, const uint32_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint64_put(uint64_t *dest, const uint64_t *source, size_t nelems, int pe);
void shmem_ctx_uint64_put(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, size_t nelems, int pe);
void shmem_uint64_get(uint64_t *dest, const uint64_t *source, size_t nelems, int pe);
void shmem_ctx_uint64_get(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, size_t nelems, int pe);
void shmem_uint64_put_nbi(uint64_t *dest, const uint64_t *source, size_t nelems, int pe);
void shmem_ctx_uint64_put_nbi(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, size_t nelems, int pe);
void shmem_uint64_get_nbi(uint64_t *dest, const uint64_t *source, size_t nelems, int pe);
void shmem_ctx_uint64_get_nbi(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, size_t nelems, int pe);
void shmem_uint64_iput(uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint64_iput(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint64_iget(uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_uint64_iget(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_uint64_ibput(uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint64_ibput(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint64_ibget(uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_uint64_ibget(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_uint64_p(uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_p(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
uint64_t shmem_uint64_g(const uint64_t *source, int pe);
uint64_t shmem_ctx_uint64_g(shmem_ctx_t ctx, const uint64_t *source, int pe);
void shmem_uint64_put_signal(uint64_t *dest, const uint64_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint64_put_signal(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_uint64_put_signal_nbi(uint64_t *dest, const uint64_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_uint64_put_signal_nbi(shmem_ctx_t ctx, uint64_t *dest, const uint64_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_size_put(size_t *dest, const size_t *source, size_t nelems, int pe);
void shmem_ctx_size_put(shmem_ctx_t ctx, size_t *dest, const size_t *source, size_t nelems, int pe);
void shmem_size_get(size_t *dest, const size_t *source, size_t nelems, int pe);
void shmem_ctx_size_get(shmem_ctx_t ctx, size_t *dest, const size_t *source, size_t nelems, int pe);
void shmem_size_put_nbi(size_t *dest, const size_t *source, size_t nelems, int pe);
void shmem_ctx_size_put_nbi(shmem_ctx_t ctx, size_t *dest, const size_t *source, size_t nelems, int pe);
void shmem_size_get_nbi(size_t *dest, const size_t *source, size_t nelems, int pe);
void shmem_ctx_size_get_nbi(shmem_ctx_t ctx, size_t *dest, const size_t *source, size_t nelems, int pe);
void shmem_size_iput(size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_size_iput(shmem_ctx_t ctx, size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_size_iget(size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_size_iget(shmem_ctx_t ctx, size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_size_ibput(size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_size_ibput(shmem_ctx_t ctx, size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_size_ibget(size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_size_ibget(shmem_ctx_t ctx, size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_size_p(size_t *dest, size_t value, int pe);
void shmem_ctx_size_p(shmem_ctx_t ctx, size_t *dest, size_t value, int pe);
size_t shmem_size_g(const size_t *source, int pe);
size_t shmem_ctx_size_g(shmem_ctx_t ctx, const size_t *source, int pe);
void shmem_size_put_signal(size_t *dest, const size_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_size_put_signal(shmem_ctx_t ctx, size_t *dest, const size_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_size_put_signal_nbi(size_t *dest, const size_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_size_put_signal_nbi(shmem_ctx_t ctx, size_t *dest, const size_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ptrdiff_put(ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int pe);
void shmem_ctx_ptrdiff_put(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int pe);
void shmem_ptrdiff_get(ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int pe);
void shmem_ctx_ptrdiff_get(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int pe);
void shmem_ptrdiff_put_nbi(ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int pe);
void shmem_ctx_ptrdiff_put_nbi(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int pe);
void shmem_ptrdiff_get_nbi(ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int pe);
void shmem_ctx_ptrdiff_get_nbi(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int pe);
void shmem_ptrdiff_iput(ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_ptrdiff_iput(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ptrdiff_iget(ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_ptrdiff_iget(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ptrdiff_ibput(ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ptrdiff_ibput(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ptrdiff_ibget(ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ptrdiff_ibget(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ptrdiff_p(ptrdiff_t *dest, ptrdiff_t value, int pe);
void shmem_ctx_ptrdiff_p(shmem_ctx_t ctx, ptrdiff_t *dest, ptrdiff_t value, int pe);
ptrdiff_t shmem_ptrdiff_g(const ptrdiff_t *source, int pe);
ptrdiff_t shmem_ctx_ptrdiff_g(shmem_ctx_t ctx, const ptrdiff_t *source, int pe);
void shmem_ptrdiff_put_signal(ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_ptrdiff_put_signal(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ptrdiff_put_signal_nbi(ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_ptrdiff_put_signal_nbi(shmem_ctx_t ctx, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put8(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put8(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get8(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get8(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_put8_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put8_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get8_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get8_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_iput8(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iput8(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_iget8(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iget8(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ibput8(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibput8(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ibget8(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibget8(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_put8_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put8_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put8_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put8_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put16(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put16(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get16(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get16(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_put16_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put16_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get16_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get16_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_iput16(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iput16(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_iget16(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iget16(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ibput16(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibput16(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ibget16(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibget16(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_put16_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put16_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put16_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put16_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put32(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put32(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get32(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get32(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_put32_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put32_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get32_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get32_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_iput32(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iput32(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_iget32(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iget32(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ibput32(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibput32(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ibget32(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibget32(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_put32_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put32_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put32_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put32_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put64(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put64(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get64(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get64(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_put64_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put64_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get64_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get64_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_iput64(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iput64(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_iget64(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iget64(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ibput64(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibput64(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ibget64(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibget64(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_put64_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put64_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put64_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put64_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put128(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put128(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get128(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get128(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_put128_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_put128_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_get128_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_get128_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_iput128(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iput128(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_iget128(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ctx_iget128(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
void shmem_ibput128(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibput128(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ibget128(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_ctx_ibget128(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks, int pe);
void shmem_put128_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put128_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_put128_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_put128_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_putmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_putmem(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_getmem(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_putmem_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_getmem_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_putmem_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_putmem_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
void shmem_ctx_putmem_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
int shmem_int_atomic_fetch(int *dest, int pe);
int shmem_ctx_int_atomic_fetch(shmem_ctx_t ctx, int *dest, int pe);
void shmem_int_atomic_set(int *dest, int value, int pe);
void shmem_ctx_int_atomic_set(shmem_ctx_t ctx, int *dest, int value, int pe);
int shmem_int_atomic_swap(int *dest, int value, int pe);
int shmem_ctx_int_atomic_swap(shmem_ctx_t ctx, int *dest, int value, int pe);
void shmem_int_atomic_fetch_nbi(int *fetch, int *dest, int pe);
void shmem_ctx_int_atomic_fetch_nbi(shmem_ctx_t ctx, int *fetch, int *dest, int pe);
void shmem_int_atomic_swap_nbi(int *fetch, int *dest, int value, int pe);
void shmem_ctx_int_atomic_swap_nbi(shmem_ctx_t ctx, int *fetch, int *dest, int value, int pe);
long shmem_long_atomic_fetch(long *dest, int pe);
long shmem_ctx_long_atomic_fetch(shmem_ctx_t ctx, long *dest, int pe);
void shmem_long_atomic_set(long *dest, long value, int pe);
void shmem_ctx_long_atomic_set(shmem_ctx_t ctx, long *dest, long value, int pe);
long shmem_long_atomic_swap(long *dest, long value, int pe);
long shmem_ctx_long_atomic_swap(shmem_ctx_t ctx, long *dest, long value, int pe);
void shmem_long_atomic_fetch_nbi(long *fetch, long *dest, int pe);
void shmem_ctx_long_atomic_fetch_nbi(shmem_ctx_t ctx, long *fetch, long *dest, int pe);
void shmem_long_atomic_swap_nbi(long *fetch, long *dest, long value, int pe);
void shmem_ctx_long_atomic_swap_nbi(shmem_ctx_t ctx, long *fetch, long *dest, long value, int pe);
long long shmem_longlong_atomic_fetch(long long *dest, int pe);
long long shmem_ctx_longlong_atomic_fetch(shmem_ctx_t ctx, long long *dest, int pe);
void shmem_longlong_atomic_set(long long *dest, long long value, int pe);
void shmem_ctx_longlong_atomic_set(shmem_ctx_t ctx, long long *dest, long long value, int pe);
long long shmem_longlong_atomic_swap(long long *dest, long long value, int pe);
long long shmem_ctx_longlong_atomic_swap(shmem_ctx_t ctx, long long *dest, long long value, int pe);
void shmem_longlong_atomic_fetch_nbi(long long *fetch, long long *dest, int pe);
void shmem_ctx_longlong_atomic_fetch_nbi(shmem_ctx_t ctx, long long *fetch, long long *dest, int pe);
void shmem_longlong_atomic_swap_nbi(long long *fetch, long long *dest, long long value, int pe);
void shmem_ctx_longlong_atomic_swap_nbi(shmem_ctx_t ctx, long long *fetch, long long *dest, long long value, int pe);
unsigned int shmem_uint_atomic_fetch(unsigned int *dest, int pe);
unsigned int shmem_ctx_uint_atomic_fetch(shmem_ctx_t ctx, unsigned int *dest, int pe);
void shmem_uint_atomic_set(unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_set(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
unsigned int shmem_uint_atomic_swap(unsigned int *dest, unsigned int value, int pe);
unsigned int shmem_ctx_uint_atomic_swap(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
void shmem_uint_atomic_fetch_nbi(unsigned int *fetch, unsigned int *dest, int pe);
void shmem_ctx_uint_atomic_fetch_nbi(shmem_ctx_t ctx, unsigned int *fetch, unsigned int *dest, int pe);
void shmem_uint_atomic_swap_nbi(unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_swap_nbi(shmem_ctx_t ctx, unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
unsigned long shmem_ulong_atomic_fetch(unsigned long *dest, int pe);
unsigned long shmem_ctx_ulong_atomic_fetch(shmem_ctx_t ctx, unsigned long *dest, int pe);
void shmem_ulong_atomic_set(unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_set(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
unsigned long shmem_ulong_atomic_swap(unsigned long *dest, unsigned long value, int pe);
unsigned long shmem_ctx_ulong_atomic_swap(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
void shmem_ulong_atomic_fetch_nbi(unsigned long *fetch, unsigned long *dest, int pe);
void shmem_ctx_ulong_atomic_fetch_nbi(shmem_ctx_t ctx, unsigned long *fetch, unsigned long *dest, int pe);
void shmem_ulong_atomic_swap_nbi(unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_swap_nbi(shmem_ctx_t ctx, unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
unsigned long long shmem_ulonglong_atomic_fetch(unsigned long long *dest, int pe);
unsigned long long shmem_ctx_ulonglong_atomic_fetch(shmem_ctx_t ctx, unsigned long long *dest, int pe);
void shmem_ulonglong_atomic_set(unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_set(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
unsigned long long shmem_ulonglong_atomic_swap(unsigned long long *dest, unsigned long long value, int pe);
unsigned long long shmem_ctx_ulonglong_atomic_swap(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ulonglong_atomic_fetch_nbi(unsigned long long *fetch, unsigned long long *dest, int pe);
void shmem_ctx_ulonglong_atomic_fetch_nbi(shmem_ctx_t ctx, unsigned long long *fetch, unsigned long long *dest, int pe);
void shmem_ulonglong_atomic_swap_nbi(unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_swap_nbi(shmem_ctx_t ctx, unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
int32_t shmem_int32_atomic_fetch(int32_t *dest, int pe);
int32_t shmem_ctx_int32_atomic_fetch(shmem_ctx_t ctx, int32_t *dest, int pe);
void shmem_int32_atomic_set(int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_set(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
int32_t shmem_int32_atomic_swap(int32_t *dest, int32_t value, int pe);
int32_t shmem_ctx_int32_atomic_swap(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
void shmem_int32_atomic_fetch_nbi(int32_t *fetch, int32_t *dest, int pe);
void shmem_ctx_int32_atomic_fetch_nbi(shmem_ctx_t ctx, int32_t *fetch, int32_t *dest, int pe);
void shmem_int32_atomic_swap_nbi(int32_t *fetch, int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_swap_nbi(shmem_ctx_t ctx, int32_t *fetch, int32_t *dest, int32_t value, int pe);
int64_t shmem_int64_atomic_fetch(int64_t *dest, int pe);
int64_t shmem_ctx_int64_atomic_fetch(shmem_ctx_t ctx, int64_t *dest, int pe);
void shmem_int64_atomic_set(int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_set(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
int64_t shmem_int64_atomic_swap(int64_t *dest, int64_t value, int pe);
int64_t shmem_ctx_int64_atomic_swap(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
void shmem_int64_atomic_fetch_nbi(int64_t *fetch, int64_t *dest, int pe);
void shmem_ctx_int64_atomic_fetch_nbi(shmem_ctx_t ctx, int64_t *fetch, int64_t *dest, int pe);
void shmem_int64_atomic_swap_nbi(int64_t *fetch, int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_swap_nbi(shmem_ctx_t ctx, int64_t *fetch, int64_t *dest, int64_t value, int pe);
uint32_t shmem_uint32_atomic_fetch(uint32_t *dest, int pe);
uint32_t shmem_ctx_uint32_atomic_fetch(shmem_ctx_t ctx, uint32_t *dest, int pe);
void shmem_uint32_atomic_set(uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_set(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
uint32_t shmem_uint32_atomic_swap(uint32_t *dest, uint32_t value, int pe);
uint32_t shmem_ctx_uint32_atomic_swap(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
void shmem_uint32_atomic_fetch_nbi(uint32_t *fetch, uint32_t *dest, int pe);
void shmem_ctx_uint32_atomic_fetch_nbi(shmem_ctx_t ctx, uint32_t *fetch, uint32_t *dest, int pe);
void shmem_uint32_atomic_swap_nbi(uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_swap_nbi(shmem_ctx_t ctx, uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
uint64_t shmem_uint64_atomic_fetch(uint64_t *dest, int pe);
uint64_t shmem_ctx_uint64_atomic_fetch(shmem_ctx_t ctx, uint64_t *dest, int pe);
void shmem_uint64_atomic_set(uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_set(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
uint64_t shmem_uint64_atomic_swap(uint64_t *dest, uint64_t value, int pe);
uint64_t shmem_ctx_uint64_atomic_swap(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
void shmem_uint64_atomic_fetch_nbi(uint64_t *fetch, uint64_t *dest, int pe);
void shmem_ctx_uint64_atomic_fetch_nbi(shmem_ctx_t ctx, uint64_t *fetch, uint64_t *dest, int pe);
void shmem_uint64_atomic_swap_nbi(uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_swap_nbi(shmem_ctx_t ctx, uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
size_t shmem_size_atomic_fetch(size_t *dest, int pe);
size_t shmem_ctx_size_atomic_fetch(shmem_ctx_t ctx, size_t *dest, int pe);
void shmem_size_atomic_set(size_t *dest, size_t value, int pe);
void shmem_ctx_size_atomic_set(shmem_ctx_t ctx, size_t *dest, size_t value, int pe);
size_t shmem_size_atomic_swap(size_t *dest, size_t value, int pe);
size_t shmem_ctx_size_atomic_swap(shmem_ctx_t ctx, size_t *dest, size_t value, int pe);
void shmem_size_atomic_fetch_nbi(size_t *fetch, size_t *dest, int pe);
void shmem_ctx_size_atomic_fetch_nbi(shmem_ctx_t ctx, size_t *fetch, size_t *dest, int pe);
void shmem_size_atomic_swap_nbi(size_t *fetch, size_t *dest, size_t value, int pe);
void shmem_ctx_size_atomic_swap_nbi(shmem_ctx_t ctx, size_t *fetch, size_t *dest, size_t value, int pe);
ptrdiff_t shmem_ptrdiff_atomic_fetch(ptrdiff_t *dest, int pe);
ptrdiff_t shmem_ctx_ptrdiff_atomic_fetch(shmem_ctx_t ctx, ptrdiff_t *dest, int pe);
void shmem_ptrdiff_atomic_set(ptrdiff_t *dest, ptrdiff_t value, int pe);
void shmem_ctx_ptrdiff_atomic_set(shmem_ctx_t ctx, ptrdiff_t *dest, ptrdiff_t value, int pe);
ptrdiff_t shmem_ptrdiff_atomic_swap(ptrdiff_t *dest, ptrdiff_t value, int pe);
ptrdiff_t shmem_ctx_ptrdiff_atomic_swap(shmem_ctx_t ctx, ptrdiff_t *dest, ptrdiff_t value, int pe);
void shmem_ptrdiff_atomic_fetch_nbi(ptrdiff_t *fetch, ptrdiff_t *dest, int pe);
void shmem_ctx_ptrdiff_atomic_fetch_nbi(shmem_ctx_t ctx, ptrdiff_t *fetch, ptrdiff_t *dest, int pe);
void shmem_ptrdiff_atomic_swap_nbi(ptrdiff_t *fetch, ptrdiff_t *dest, ptrdiff_t value, int pe);
void shmem_ctx_ptrdiff_atomic_swap_nbi(shmem_ctx_t ctx, ptrdiff_t *fetch, ptrdiff_t *dest, ptrdiff_t value, int pe);
float shmem_float_atomic_fetch(float *dest, int pe);
float shmem_ctx_float_atomic_fetch(shmem_ctx_t ctx, float *dest, int pe);
void shmem_float_atomic_set(float *dest, float value, int pe);
void shmem_ctx_float_atomic_set(shmem_ctx_t ctx, float *dest, float value, int pe);
float shmem_float_atomic_swap(float *dest, float value, int pe);
float shmem_ctx_float_atomic_swap(shmem_ctx_t ctx, float *dest, float value, int pe);
void shmem_float_atomic_fetch_nbi(float *fetch, float *dest, int pe);
void shmem_ctx_float_atomic_fetch_nbi(shmem_ctx_t ctx, float *fetch, float *dest, int pe);
void shmem_float_atomic_swap_nbi(float *fetch, float *dest, float value, int pe);
void shmem_ctx_float_atomic_swap_nbi(shmem_ctx_t ctx, float *fetch, float *dest, float value, int pe);
double shmem_double_atomic_fetch(double *dest, int pe);
double shmem_ctx_double_atomic_fetch(shmem_ctx_t ctx, double *dest, int pe);
void shmem_double_atomic_set(double *dest, double value, int pe);
void shmem_ctx_double_atomic_set(shmem_ctx_t ctx, double *dest, double value, int pe);
double shmem_double_atomic_swap(double *dest, double value, int pe);
double shmem_ctx_double_atomic_swap(shmem_ctx_t ctx, double *dest, double value, int pe);
void shmem_double_atomic_fetch_nbi(double *fetch, double *dest, int pe);
void shmem_ctx_double_atomic_fetch_nbi(shmem_ctx_t ctx, double *fetch, double *dest, int pe);
void shmem_double_atomic_swap_nbi(double *fetch, double *dest, double value, int pe);
void shmem_ctx_double_atomic_swap_nbi(shmem_ctx_t ctx, double *fetch, double *dest, double value, int pe);
int shmem_int_atomic_compare_swap(int *dest, int cond, int value, int pe);
int shmem_ctx_int_atomic_compare_swap(shmem_ctx_t ctx, int *dest, int cond, int value, int pe);
void shmem_int_atomic_compare_swap_nbi(int *fetch, int *dest, int cond, int value, int pe);
void shmem_ctx_int_atomic_compare_swap_nbi(shmem_ctx_t ctx, int *fetch, int *dest, int cond, int value, int pe);
int shmem_int_atomic_fetch_inc(int *dest, int pe);
int shmem_ctx_int_atomic_fetch_inc(shmem_ctx_t ctx, int *dest, int pe);
void shmem_int_atomic_fetch_inc_nbi(int *fetch, int *dest, int pe);
void shmem_ctx_int_atomic_fetch_inc_nbi(shmem_ctx_t ctx, int *fetch, int *dest, int pe);
void shmem_int_atomic_inc(int *dest, int pe);
void shmem_ctx_int_atomic_inc(shmem_ctx_t ctx, int *dest, int pe);
int shmem_int_atomic_fetch_add(int *dest, int value, int pe);
int shmem_ctx_int_atomic_fetch_add(shmem_ctx_t ctx, int *dest, int value, int pe);
void shmem_int_atomic_fetch_add_nbi(int *fetch, int *dest, int value, int pe);
void shmem_ctx_int_atomic_fetch_add_nbi(shmem_ctx_t ctx, int *fetch, int *dest, int value, int pe);
void shmem_int_atomic_add(int *dest, int value, int pe);
void shmem_ctx_int_atomic_add(shmem_ctx_t ctx, int *dest, int value, int pe);
long shmem_long_atomic_compare_swap(long *dest, long cond, long value, int pe);
long shmem_ctx_long_atomic_compare_swap(shmem_ctx_t ctx, long *dest, long cond, long value, int pe);
void shmem_long_atomic_compare_swap_nbi(long *fetch, long *dest, long cond, long value, int pe);
void shmem_ctx_long_atomic_compare_swap_nbi(shmem_ctx_t ctx, long *fetch, long *dest, long cond, long value, int pe);
long shmem_long_atomic_fetch_inc(long *dest, int pe);
long shmem_ctx_long_atomic_fetch_inc(shmem_ctx_t ctx, long *dest, int pe);
void shmem_long_atomic_fetch_inc_nbi(long *fetch, long *dest, int pe);
void shmem_ctx_long_atomic_fetch_inc_nbi(shmem_ctx_t ctx, long *fetch, long *dest, int pe);
void shmem_long_atomic_inc(long *dest, int pe);
void shmem_ctx_long_atomic_inc(shmem_ctx_t ctx, long *dest, int pe);
long shmem_long_atomic_fetch_add(long *dest, long value, int pe);
long shmem_ctx_long_atomic_fetch_add(shmem_ctx_t ctx, long *dest, long value, int pe);
void shmem_long_atomic_fetch_add_nbi(long *fetch, long *dest, long value, int pe);
void shmem_ctx_long_atomic_fetch_add_nbi(shmem_ctx_t ctx, long *fetch, long *dest, long value, int pe);
void shmem_long_atomic_add(long *dest, long value, int pe);
void shmem_ctx_long_atomic_add(shmem_ctx_t ctx, long *dest, long value, int pe);
long long shmem_longlong_atomic_compare_swap(long long *dest, long long cond, long long value, int pe);
long long shmem_ctx_longlong_atomic_compare_swap(shmem_ctx_t ctx, long long *dest, long long cond, long long value, int pe);
void shmem_longlong_atomic_compare_swap_nbi(long long *fetch, long long *dest, long long cond, long long value, int pe);
void shmem_ctx_longlong_atomic_compare_swap_nbi(shmem_ctx_t ctx, long long *fetch, long long *dest, long long cond, long long value, int pe);
long long shmem_longlong_atomic_fetch_inc(long long *dest, int pe);
long long shmem_ctx_longlong_atomic_fetch_inc(shmem_ctx_t ctx, long long *dest, int pe);
void shmem_longlong_atomic_fetch_inc_nbi(long long *fetch, long long *dest, int pe);
void shmem_ctx_longlong_atomic_fetch_inc_nbi(shmem_ctx_t ctx, long long *fetch, long long *dest, int pe);
void shmem_longlong_atomic_inc(long long *dest, int pe);
void shmem_ctx_longlong_atomic_inc(shmem_ctx_t ctx, long long *dest, int pe);
long long shmem_longlong_atomic_fetch_add(long long *dest, long long value, int pe);
long long shmem_ctx_longlong_atomic_fetch_add(shmem_ctx_t ctx, long long *dest, long long value, int pe);
void shmem_longlong_atomic_fetch_add_nbi(long long *fetch, long long *dest, long long value, int pe);
void shmem_ctx_longlong_atomic_fetch_add_nbi(shmem_ctx_t ctx, long long *fetch, long long *dest, long long value, int pe);
void shmem_longlong_atomic_add(long long *dest, long long value, int pe);
void shmem_ctx_longlong_atomic_add(shmem_ctx_t ctx, long long *dest, long long value, int pe);
unsigned int shmem_uint_atomic_compare_swap(unsigned int *dest, unsigned int cond, unsigned int value, int pe);
unsigned int shmem_ctx_uint_atomic_compare_swap(shmem_ctx_t ctx, unsigned int *dest, unsigned int cond, unsigned int value, int pe);
void shmem_uint_atomic_compare_swap_nbi(unsigned int *fetch, unsigned int *dest, unsigned int cond, unsigned int value, int pe);
void shmem_ctx_uint_atomic_compare_swap_nbi(shmem_ctx_t ctx, unsigned int *fetch, unsigned int *dest, unsigned int cond, unsigned int value, int pe);
unsigned int shmem_uint_atomic_fetch_inc(unsigned int *dest, int pe);
unsigned int shmem_ctx_uint_atomic_fetch_inc(shmem_ctx_t ctx, unsigned int *dest, int pe);
void shmem_uint_atomic_fetch_inc_nbi(unsigned int *fetch, unsigned int *dest, int pe);
void shmem_ctx_uint_atomic_fetch_inc_nbi(shmem_ctx_t ctx, unsigned int *fetch, unsigned int *dest, int pe);
void shmem_uint_atomic_inc(unsigned int *dest, int pe);
void shmem_ctx_uint_atomic_inc(shmem_ctx_t ctx, unsigned int *dest, int pe);
unsigned int shmem_uint_atomic_fetch_add(unsigned int *dest, unsigned int value, int pe);
unsigned int shmem_ctx_uint_atomic_fetch_add(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
void shmem_uint_atomic_fetch_add_nbi(unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_fetch_add_nbi(shmem_ctx_t ctx, unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
void shmem_uint_atomic_add(unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_add(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
unsigned long shmem_ulong_atomic_compare_swap(unsigned long *dest, unsigned long cond, unsigned long value, int pe);
unsigned long shmem_ctx_ulong_atomic_compare_swap(shmem_ctx_t ctx, unsigned long *dest, unsigned long cond, unsigned long value, int pe);
void shmem_ulong_atomic_compare_swap_nbi(unsigned long *fetch, unsigned long *dest, unsigned long cond, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_compare_swap_nbi(shmem_ctx_t ctx, unsigned long *fetch, unsigned long *dest, unsigned long cond, unsigned long value, int pe);
unsigned long shmem_ulong_atomic_fetch_inc(unsigned long *dest, int pe);
unsigned long shmem_ctx_ulong_atomic_fetch_inc(shmem_ctx_t ctx, unsigned long *dest, int pe);
void shmem_ulong_atomic_fetch_inc_nbi(unsigned long *fetch, unsigned long *dest, int pe);
void shmem_ctx_ulong_atomic_fetch_inc_nbi(shmem_ctx_t ctx, unsigned long *fetch, unsigned long *dest, int pe);
void shmem_ulong_atomic_inc(unsigned long *dest, int pe);
void shmem_ctx_ulong_atomic_inc(shmem_ctx_t ctx, unsigned long *dest, int pe);
unsigned long shmem_ulong_atomic_fetch_add(unsigned long *dest, unsigned long value, int pe);
unsigned long shmem_ctx_ulong_atomic_fetch_add(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
void shmem_ulong_atomic_fetch_add_nbi(unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_fetch_add_nbi(shmem_ctx_t ctx, unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
void shmem_ulong_atomic_add(unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_add(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
unsigned long long shmem_ulonglong_atomic_compare_swap(unsigned long long *dest, unsigned long long cond, unsigned long long value, int pe);
unsigned long long shmem_ctx_ulonglong_atomic_compare_swap(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long cond, unsigned long long value, int pe);
void shmem_ulonglong_atomic_compare_swap_nbi(unsigned long long *fetch, unsigned long long *dest, unsigned long long cond, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_compare_swap_nbi(shmem_ctx_t ctx, unsigned long long *fetch, unsigned long long *dest, unsigned long long cond, unsigned long long value, int pe);
unsigned long long shmem_ulonglong_atomic_fetch_inc(unsigned long long *dest, int pe);
unsigned long long shmem_ctx_ulonglong_atomic_fetch_inc(shmem_ctx_t ctx, unsigned long long *dest, int pe);
void shmem_ulonglong_atomic_fetch_inc_nbi(unsigned long long *fetch, unsigned long long *dest, int pe);
void shmem_ctx_ulonglong_atomic_fetch_inc_nbi(shmem_ctx_t ctx, unsigned long long *fetch, unsigned long long *dest, int pe);
void shmem_ulonglong_atomic_inc(unsigned long long *dest, int pe);
void shmem_ctx_ulonglong_atomic_inc(shmem_ctx_t ctx, unsigned long long *dest, int pe);
unsigned long long shmem_ulonglong_atomic_fetch_add(unsigned long long *dest, unsigned long long value, int pe);
unsigned long long shmem_ctx_ulonglong_atomic_fetch_add(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ulonglong_atomic_fetch_add_nbi(unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_fetch_add_nbi(shmem_ctx_t ctx, unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ulonglong_atomic_add(unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_add(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
int32_t shmem_int32_atomic_compare_swap(int32_t *dest, int32_t cond, int32_t value, int pe);
int32_t shmem_ctx_int32_atomic_compare_swap(shmem_ctx_t ctx, int32_t *dest, int32_t cond, int32_t value, int pe);
void shmem_int32_atomic_compare_swap_nbi(int32_t *fetch, int32_t *dest, int32_t cond, int32_t value, int pe);
void shmem_ctx_int32_atomic_compare_swap_nbi(shmem_ctx_t ctx, int32_t *fetch, int32_t *dest, int32_t cond, int32_t value, int pe);
int32_t shmem_int32_atomic_fetch_inc(int32_t *dest, int pe);
int32_t shmem_ctx_int32_atomic_fetch_inc(shmem_ctx_t ctx, int32_t *dest, int pe);
void shmem_int32_atomic_fetch_inc_nbi(int32_t *fetch, int32_t *dest, int pe);
void shmem_ctx_int32_atomic_fetch_inc_nbi(shmem_ctx_t ctx, int32_t *fetch, int32_t *dest, int pe);
void shmem_int32_atomic_inc(int32_t *dest, int pe);
void shmem_ctx_int32_atomic_inc(shmem_ctx_t ctx, int32_t *dest, int pe);
int32_t shmem_int32_atomic_fetch_add(int32_t *dest, int32_t value, int pe);
int32_t shmem_ctx_int32_atomic_fetch_add(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
void shmem_int32_atomic_fetch_add_nbi(int32_t *fetch, int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_fetch_add_nbi(shmem_ctx_t ctx, int32_t *fetch, int32_t *dest, int32_t value, int pe);
void shmem_int32_atomic_add(int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_add(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
int64_t shmem_int64_atomic_compare_swap(int64_t *dest, int64_t cond, int64_t value, int pe);
int64_t shmem_ctx_int64_atomic_compare_swap(shmem_ctx_t ctx, int64_t *dest, int64_t cond, int64_t value, int pe);
void shmem_int64_atomic_compare_swap_nbi(int64_t *fetch, int64_t *dest, int64_t cond, int64_t value, int pe);
void shmem_ctx_int64_atomic_compare_swap_nbi(shmem_ctx_t ctx, int64_t *fetch, int64_t *dest, int64_t cond, int64_t value, int pe);
int64_t shmem_int64_atomic_fetch_inc(int64_t *dest, int pe);
int64_t shmem_ctx_int64_atomic_fetch_inc(shmem_ctx_t ctx, int64_t *dest, int pe);
void shmem_int64_atomic_fetch_inc_nbi(int64_t *fetch, int64_t *dest, int pe);
void shmem_ctx_int64_atomic_fetch_inc_nbi(shmem_ctx_t ctx, int64_t *fetch, int64_t *dest, int pe);
void shmem_int64_atomic_inc(int64_t *dest, int pe);
void shmem_ctx_int64_atomic_inc(shmem_ctx_t ctx, int64_t *dest, int pe);
int64_t shmem_int64_atomic_fetch_add(int64_t *dest, int64_t value, int pe);
int64_t shmem_ctx_int64_atomic_fetch_add(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
void shmem_int64_atomic_fetch_add_nbi(int64_t *fetch, int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_fetch_add_nbi(shmem_ctx_t ctx, int64_t *fetch, int64_t *dest, int64_t value, int pe);
void shmem_int64_atomic_add(int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_add(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
uint32_t shmem_uint32_atomic_compare_swap(uint32_t *dest, uint32_t cond, uint32_t value, int pe);
uint32_t shmem_ctx_uint32_atomic_compare_swap(shmem_ctx_t ctx, uint32_t *dest, uint32_t cond, uint32_t value, int pe);
void shmem_uint32_atomic_compare_swap_nbi(uint32_t *fetch, uint32_t *dest, uint32_t cond, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_compare_swap_nbi(shmem_ctx_t ctx, uint32_t *fetch, uint32_t *dest, uint32_t cond, uint32_t value, int pe);
uint32_t shmem_uint32_atomic_fetch_inc(uint32_t *dest, int pe);
uint32_t shmem_ctx_uint32_atomic_fetch_inc(shmem_ctx_t ctx, uint32_t *dest, int pe);
void shmem_uint32_atomic_fetch_inc_nbi(uint32_t *fetch, uint32_t *dest, int pe);
void shmem_ctx_uint32_atomic_fetch_inc_nbi(shmem_ctx_t ctx, uint32_t *fetch, uint32_t *dest, int pe);
void shmem_uint32_atomic_inc(uint32_t *dest, int pe);
void shmem_ctx_uint32_atomic_inc(shmem_ctx_t ctx, uint32_t *dest, int pe);
uint32_t shmem_uint32_atomic_fetch_add(uint32_t *dest, uint32_t value, int pe);
uint32_t shmem_ctx_uint32_atomic_fetch_add(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
void shmem_uint32_atomic_fetch_add_nbi(uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_fetch_add_nbi(shmem_ctx_t ctx, uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
void shmem_uint32_atomic_add(uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_add(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
uint64_t shmem_uint64_atomic_compare_swap(uint64_t *dest, uint64_t cond, uint64_t value, int pe);
uint64_t shmem_ctx_uint64_atomic_compare_swap(shmem_ctx_t ctx, uint64_t *dest, uint64_t cond, uint64_t value, int pe);
void shmem_uint64_atomic_compare_swap_nbi(uint64_t *fetch, uint64_t *dest, uint64_t cond, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_compare_swap_nbi(shmem_ctx_t ctx, uint64_t *fetch, uint64_t *dest, uint64_t cond, uint64_t value, int pe);
uint64_t shmem_uint64_atomic_fetch_inc(uint64_t *dest, int pe);
uint64_t shmem_ctx_uint64_atomic_fetch_inc(shmem_ctx_t ctx, uint64_t *dest, int pe);
void shmem_uint64_atomic_fetch_inc_nbi(uint64_t *fetch, uint64_t *dest, int pe);
void shmem_ctx_uint64_atomic_fetch_inc_nbi(shmem_ctx_t ctx, uint64_t *fetch, uint64_t *dest, int pe);
void shmem_uint64_atomic_inc(uint64_t *dest, int pe);
void shmem_ctx_uint64_atomic_inc(shmem_ctx_t ctx, uint64_t *dest, int pe);
uint64_t shmem_uint64_atomic_fetch_add(uint64_t *dest, uint64_t value, int pe);
uint64_t shmem_ctx_uint64_atomic_fetch_add(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
void shmem_uint64_atomic_fetch_add_nbi(uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_fetch_add_nbi(shmem_ctx_t ctx, uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
void shmem_uint64_atomic_add(uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_add(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
size_t shmem_size_atomic_compare_swap(size_t *dest, size_t cond, size_t value, int pe);
size_t shmem_ctx_size_atomic_compare_swap(shmem_ctx_t ctx, size_t *dest, size_t cond, size_t value, int pe);
void shmem_size_atomic_compare_swap_nbi(size_t *fetch, size_t *dest, size_t cond, size_t value, int pe);
void shmem_ctx_size_atomic_compare_swap_nbi(shmem_ctx_t ctx, size_t *fetch, size_t *dest, size_t cond, size_t value, int pe);
size_t shmem_size_atomic_fetch_inc(size_t *dest, int pe);
size_t shmem_ctx_size_atomic_fetch_inc(shmem_ctx_t ctx, size_t *dest, int pe);
void shmem_size_atomic_fetch_inc_nbi(size_t *fetch, size_t *dest, int pe);
void shmem_ctx_size_atomic_fetch_inc_nbi(shmem_ctx_t ctx, size_t *fetch, size_t *dest, int pe);
void shmem_size_atomic_inc(size_t *dest, int pe);
void shmem_ctx_size_atomic_inc(shmem_ctx_t ctx, size_t *dest, int pe);
size_t shmem_size_atomic_fetch_add(size_t *dest, size_t value, int pe);
size_t shmem_ctx_size_atomic_fetch_add(shmem_ctx_t ctx, size_t *dest, size_t value, int pe);
void shmem_size_atomic_fetch_add_nbi(size_t *fetch, size_t *dest, size_t value, int pe);
void shmem_ctx_size_atomic_fetch_add_nbi(shmem_ctx_t ctx, size_t *fetch, size_t *dest, size_t value, int pe);
void shmem_size_atomic_add(size_t *dest, size_t value, int pe);
void shmem_ctx_size_atomic_add(shmem_ctx_t ctx, size_t *dest, size_t value, int pe);
ptrdiff_t shmem_ptrdiff_atomic_compare_swap(ptrdiff_t *dest, ptrdiff_t cond, ptrdiff_t value, int pe);
ptrdiff_t shmem_ctx_ptrdiff_atomic_compare_swap(shmem_ctx_t ctx, ptrdiff_t *dest, ptrdiff_t cond, ptrdiff_t value, int pe);
void shmem_ptrdiff_atomic_compare_swap_nbi(ptrdiff_t *fetch, ptrdiff_t *dest, ptrdiff_t cond, ptrdiff_t value, int pe);
void shmem_ctx_ptrdiff_atomic_compare_swap_nbi(shmem_ctx_t ctx, ptrdiff_t *fetch, ptrdiff_t *dest, ptrdiff_t cond, ptrdiff_t value, int pe);
ptrdiff_t shmem_ptrdiff_atomic_fetch_inc(ptrdiff_t *dest, int pe);
ptrdiff_t shmem_ctx_ptrdiff_atomic_fetch_inc(shmem_ctx_t ctx, ptrdiff_t *dest, int pe);
void shmem_ptrdiff_atomic_fetch_inc_nbi(ptrdiff_t *fetch, ptrdiff_t *dest, int pe);
void shmem_ctx_ptrdiff_atomic_fetch_inc_nbi(shmem_ctx_t ctx, ptrdiff_t *fetch, ptrdiff_t *dest, int pe);
void shmem_ptrdiff_atomic_inc(ptrdiff_t *dest, int pe);
void shmem_ctx_ptrdiff_atomic_inc(shmem_ctx_t ctx, ptrdiff_t *dest, int pe);
ptrdiff_t shmem_ptrdiff_atomic_fetch_add(ptrdiff_t *dest, ptrdiff_t value, int pe);
ptrdiff_t shmem_ctx_ptrdiff_atomic_fetch_add(shmem_ctx_t ctx, ptrdiff_t *dest, ptrdiff_t value, int pe);
void shmem_ptrdiff_atomic_fetch_add_nbi(ptrdiff_t *fetch, ptrdiff_t *dest, ptrdiff_t value, int pe);
void shmem_ctx_ptrdiff_atomic_fetch_add_nbi(shmem_ctx_t ctx, ptrdiff_t *fetch, ptrdiff_t *dest, ptrdiff_t value, int pe);
void shmem_ptrdiff_atomic_add(ptrdiff_t *dest, ptrdiff_t value, int pe);
void shmem_ctx_ptrdiff_atomic_add(shmem_ctx_t ctx, ptrdiff_t *dest, ptrdiff_t value, int pe);
unsigned int shmem_uint_atomic_fetch_and(unsigned int *dest, unsigned int value, int pe);
unsigned int shmem_ctx_uint_atomic_fetch_and(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
void shmem_uint_atomic_fetch_and_nbi(unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_fetch_and_nbi(shmem_ctx_t ctx, unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
void shmem_uint_atomic_and(unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_and(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
unsigned int shmem_uint_atomic_fetch_or(unsigned int *dest, unsigned int value, int pe);
unsigned int shmem_ctx_uint_atomic_fetch_or(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
void shmem_uint_atomic_fetch_or_nbi(unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_fetch_or_nbi(shmem_ctx_t ctx, unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
void shmem_uint_atomic_or(unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_or(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
unsigned int shmem_uint_atomic_fetch_xor(unsigned int *dest, unsigned int value, int pe);
unsigned int shmem_ctx_uint_atomic_fetch_xor(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
void shmem_uint_atomic_fetch_xor_nbi(unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_fetch_xor_nbi(shmem_ctx_t ctx, unsigned int *fetch, unsigned int *dest, unsigned int value, int pe);
void shmem_uint_atomic_xor(unsigned int *dest, unsigned int value, int pe);
void shmem_ctx_uint_atomic_xor(shmem_ctx_t ctx, unsigned int *dest, unsigned int value, int pe);
unsigned long shmem_ulong_atomic_fetch_and(unsigned long *dest, unsigned long value, int pe);
unsigned long shmem_ctx_ulong_atomic_fetch_and(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
void shmem_ulong_atomic_fetch_and_nbi(unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_fetch_and_nbi(shmem_ctx_t ctx, unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
void shmem_ulong_atomic_and(unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_and(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
unsigned long shmem_ulong_atomic_fetch_or(unsigned long *dest, unsigned long value, int pe);
unsigned long shmem_ctx_ulong_atomic_fetch_or(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
void shmem_ulong_atomic_fetch_or_nbi(unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_fetch_or_nbi(shmem_ctx_t ctx, unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
void shmem_ulong_atomic_or(unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_or(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
unsigned long shmem_ulong_atomic_fetch_xor(unsigned long *dest, unsigned long value, int pe);
unsigned long shmem_ctx_ulong_atomic_fetch_xor(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
void shmem_ulong_atomic_fetch_xor_nbi(unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_fetch_xor_nbi(shmem_ctx_t ctx, unsigned long *fetch, unsigned long *dest, unsigned long value, int pe);
void shmem_ulong_atomic_xor(unsigned long *dest, unsigned long value, int pe);
void shmem_ctx_ulong_atomic_xor(shmem_ctx_t ctx, unsigned long *dest, unsigned long value, int pe);
unsigned long long shmem_ulonglong_atomic_fetch_and(unsigned long long *dest, unsigned long long value, int pe);
unsigned long long shmem_ctx_ulonglong_atomic_fetch_and(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ulonglong_atomic_fetch_and_nbi(unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_fetch_and_nbi(shmem_ctx_t ctx, unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ulonglong_atomic_and(unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_and(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
unsigned long long shmem_ulonglong_atomic_fetch_or(unsigned long long *dest, unsigned long long value, int pe);
unsigned long long shmem_ctx_ulonglong_atomic_fetch_or(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ulonglong_atomic_fetch_or_nbi(unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_fetch_or_nbi(shmem_ctx_t ctx, unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ulonglong_atomic_or(unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_or(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
unsigned long long shmem_ulonglong_atomic_fetch_xor(unsigned long long *dest, unsigned long long value, int pe);
unsigned long long shmem_ctx_ulonglong_atomic_fetch_xor(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ulonglong_atomic_fetch_xor_nbi(unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_fetch_xor_nbi(shmem_ctx_t ctx, unsigned long long *fetch, unsigned long long *dest, unsigned long long value, int pe);
void shmem_ulonglong_atomic_xor(unsigned long long *dest, unsigned long long value, int pe);
void shmem_ctx_ulonglong_atomic_xor(shmem_ctx_t ctx, unsigned long long *dest, unsigned long long value, int pe);
int32_t shmem_int32_atomic_fetch_and(int32_t *dest, int32_t value, int pe);
int32_t shmem_ctx_int32_atomic_fetch_and(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
void shmem_int32_atomic_fetch_and_nbi(int32_t *fetch, int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_fetch_and_nbi(shmem_ctx_t ctx, int32_t *fetch, int32_t *dest, int32_t value, int pe);
void shmem_int32_atomic_and(int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_and(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
int32_t shmem_int32_atomic_fetch_or(int32_t *dest, int32_t value, int pe);
int32_t shmem_ctx_int32_atomic_fetch_or(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
void shmem_int32_atomic_fetch_or_nbi(int32_t *fetch, int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_fetch_or_nbi(shmem_ctx_t ctx, int32_t *fetch, int32_t *dest, int32_t value, int pe);
void shmem_int32_atomic_or(int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_or(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
int32_t shmem_int32_atomic_fetch_xor(int32_t *dest, int32_t value, int pe);
int32_t shmem_ctx_int32_atomic_fetch_xor(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
void shmem_int32_atomic_fetch_xor_nbi(int32_t *fetch, int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_fetch_xor_nbi(shmem_ctx_t ctx, int32_t *fetch, int32_t *dest, int32_t value, int pe);
void shmem_int32_atomic_xor(int32_t *dest, int32_t value, int pe);
void shmem_ctx_int32_atomic_xor(shmem_ctx_t ctx, int32_t *dest, int32_t value, int pe);
int64_t shmem_int64_atomic_fetch_and(int64_t *dest, int64_t value, int pe);
int64_t shmem_ctx_int64_atomic_fetch_and(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
void shmem_int64_atomic_fetch_and_nbi(int64_t *fetch, int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_fetch_and_nbi(shmem_ctx_t ctx, int64_t *fetch, int64_t *dest, int64_t value, int pe);
void shmem_int64_atomic_and(int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_and(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
int64_t shmem_int64_atomic_fetch_or(int64_t *dest, int64_t value, int pe);
int64_t shmem_ctx_int64_atomic_fetch_or(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
void shmem_int64_atomic_fetch_or_nbi(int64_t *fetch, int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_fetch_or_nbi(shmem_ctx_t ctx, int64_t *fetch, int64_t *dest, int64_t value, int pe);
void shmem_int64_atomic_or(int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_or(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
int64_t shmem_int64_atomic_fetch_xor(int64_t *dest, int64_t value, int pe);
int64_t shmem_ctx_int64_atomic_fetch_xor(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
void shmem_int64_atomic_fetch_xor_nbi(int64_t *fetch, int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_fetch_xor_nbi(shmem_ctx_t ctx, int64_t *fetch, int64_t *dest, int64_t value, int pe);
void shmem_int64_atomic_xor(int64_t *dest, int64_t value, int pe);
void shmem_ctx_int64_atomic_xor(shmem_ctx_t ctx, int64_t *dest, int64_t value, int pe);
uint32_t shmem_uint32_atomic_fetch_and(uint32_t *dest, uint32_t value, int pe);
uint32_t shmem_ctx_uint32_atomic_fetch_and(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
void shmem_uint32_atomic_fetch_and_nbi(uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_fetch_and_nbi(shmem_ctx_t ctx, uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
void shmem_uint32_atomic_and(uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_and(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
uint32_t shmem_uint32_atomic_fetch_or(uint32_t *dest, uint32_t value, int pe);
uint32_t shmem_ctx_uint32_atomic_fetch_or(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
void shmem_uint32_atomic_fetch_or_nbi(uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_fetch_or_nbi(shmem_ctx_t ctx, uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
void shmem_uint32_atomic_or(uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_or(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
uint32_t shmem_uint32_atomic_fetch_xor(uint32_t *dest, uint32_t value, int pe);
uint32_t shmem_ctx_uint32_atomic_fetch_xor(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
void shmem_uint32_atomic_fetch_xor_nbi(uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_fetch_xor_nbi(shmem_ctx_t ctx, uint32_t *fetch, uint32_t *dest, uint32_t value, int pe);
void shmem_uint32_atomic_xor(uint32_t *dest, uint32_t value, int pe);
void shmem_ctx_uint32_atomic_xor(shmem_ctx_t ctx, uint32_t *dest, uint32_t value, int pe);
uint64_t shmem_uint64_atomic_fetch_and(uint64_t *dest, uint64_t value, int pe);
uint64_t shmem_ctx_uint64_atomic_fetch_and(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
void shmem_uint64_atomic_fetch_and_nbi(uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_fetch_and_nbi(shmem_ctx_t ctx, uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
void shmem_uint64_atomic_and(uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_and(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
uint64_t shmem_uint64_atomic_fetch_or(uint64_t *dest, uint64_t value, int pe);
uint64_t shmem_ctx_uint64_atomic_fetch_or(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
void shmem_uint64_atomic_fetch_or_nbi(uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_fetch_or_nbi(shmem_ctx_t ctx, uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
void shmem_uint64_atomic_or(uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_or(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
uint64_t shmem_uint64_atomic_fetch_xor(uint64_t *dest, uint64_t value, int pe);
uint64_t shmem_ctx_uint64_atomic_fetch_xor(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
void shmem_uint64_atomic_fetch_xor_nbi(uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_fetch_xor_nbi(shmem_ctx_t ctx, uint64_t *fetch, uint64_t *dest, uint64_t value, int pe);
void shmem_uint64_atomic_xor(uint64_t *dest, uint64_t value, int pe);
void shmem_ctx_uint64_atomic_xor(shmem_ctx_t ctx, uint64_t *dest, uint64_t value, int pe);
int shmem_int_finc(int *dest, int pe);
void shmem_int_inc(int *dest, int pe);
int shmem_int_fadd(int *dest, int value, int pe);
void shmem_int_add(int *dest, int value, int pe);
int shmem_int_cswap(int *dest, int cond, int value, int pe);
long shmem_long_finc(long *dest, int pe);
void shmem_long_inc(long *dest, int pe);
long shmem_long_fadd(long *dest, long value, int pe);
void shmem_long_add(long *dest, long value, int pe);
long shmem_long_cswap(long *dest, long cond, long value, int pe);
long long shmem_longlong_finc(long long *dest, int pe);
void shmem_longlong_inc(long long *dest, int pe);
long long shmem_longlong_fadd(long long *dest, long long value, int pe);
void shmem_longlong_add(long long *dest, long long value, int pe);
long long shmem_longlong_cswap(long long *dest, long long cond, long long value, int pe);
int shmem_int_swap(int *dest, int value, int pe);
int shmem_int_fetch(int *dest, int pe);
void shmem_int_set(int *dest, int value, int pe);
long shmem_long_swap(long *dest, long value, int pe);
long shmem_long_fetch(long *dest, int pe);
void shmem_long_set(long *dest, long value, int pe);
long long shmem_longlong_swap(long long *dest, long long value, int pe);
long long shmem_longlong_fetch(long long *dest, int pe);
void shmem_longlong_set(long long *dest, long long value, int pe);
float shmem_float_swap(float *dest, float value, int pe);
float shmem_float_fetch(float *dest, int pe);
void shmem_float_set(float *dest, float value, int pe);
double shmem_double_swap(double *dest, double value, int pe);
double shmem_double_fetch(double *dest, int pe);
void shmem_double_set(double *dest, double value, int pe);
void shmem_short_wait_until(short *ivar, int cmp, short value);
void shmem_short_wait(short *ivar, short cmp_value);
int shmem_short_test(short *ivar, int cmp, short value);
void shmem_short_wait_until_all(short *ivars, size_t nelems, const int *status, int cmp, short cmp_value);
int shmem_short_test_all(short *ivars, size_t nelems, const int *status, int cmp, short cmp_value);
void shmem_short_wait_until_all_vector(short *ivars, size_t nelems, const int *status, int cmp, short *cmp_values);
int shmem_short_test_all_vector(short *ivars, size_t nelems, const int *status, int cmp, short *cmp_values);
size_t shmem_short_wait_until_any(short *ivars, size_t nelems, const int *status, int cmp, short cmp_value);
size_t shmem_short_test_any(short *ivars, size_t nelems, const int *status, int cmp, short cmp_value);
size_t shmem_short_wait_until_any_vector(short *ivars, size_t nelems, const int *status, int cmp, short *cmp_values);
size_t shmem_short_test_any_vector(short *ivars, size_t nelems, const int *status, int cmp, short *cmp_values);
size_t shmem_short_wait_until_some(short *ivars, size_t nelems, size_t *indices, const int *status, int cmp, short cmp_value);
size_t shmem_short_test_some(short *ivars, size_t nelems, size_t *indices, const int *status, int cmp, short cmp_value);
size_t shmem_short_wait_until_some_vector(short *ivars, size_t nelems, size_t *indices, const int *status, int cmp, short *cmp_values);
size_t shmem_short_test_some_vector(short *ivars, size_t nelems, size_t *indices, const int *status, int cmp, short *cmp_values);
void shmem_int_wait_until(int *ivar, int cmp, int value);
void shmem_int_wait(int *ivar, int cmp_value);
int shmem_int_test(int *ivar, int cmp, int value);
void shmem_int_wait_until_all(int *ivars, size_t nelems, const int *status, int cmp, int cmp_value);
int shmem_int_test_all(int *ivars, size_t nelems, const int *status, int cmp, int cmp_value);
void shmem_int_wait_until_all_vector(int *ivars, size_t nelems, const int *status, int cmp, int *cmp_values);
int shmem_int_test_all_vector(int *ivars, size_t nelems, const int *status, int cmp, int *cmp_values);
size_t shmem_int_wait_until_any(int *ivars, size_t nelems, const int *status, int cmp, int cmp_value);
size_t shmem_int_test_any(int *ivars, size_t nelems, const int *status, int cmp, int cmp_value);
size_t shmem_int_wait_until_any_vector(int *ivars, size_t nelems, const int *status, int cmp, int *cmp_values);
size_t shmem_int_test_any_vector(int *ivars, size_t nelems, const int *status, int cmp, int *cmp_values);
size_t shmem_int_wait_until_some(int *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int cmp_value);
size_t shmem_int_test_some(int *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int cmp_value);
size_t shmem_int_wait_until_some_vector(int *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int *cmp_values);
size_t shmem_int_test_some_vector(int *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int *cmp_values);
void shmem_long_wait_until(long *ivar, int cmp, long value);
void shmem_long_wait(long *ivar, long cmp_value);
int shmem_long_test(long *ivar, int cmp, long value);
void shmem_long_wait_until_all(long *ivars, size_t nelems, const int *status, int cmp, long cmp_value);
int shmem_long_test_all(long *ivars, size_t nelems, const int *status, int cmp, long cmp_value);
void shmem_long_wait_until_all_vector(long *ivars, size_t nelems, const int *status, int cmp, long *cmp_values);
int shmem_long_test_all_vector(long *ivars, size_t nelems, const int *status, int cmp, long *cmp_values);
size_t shmem_long_wait_until_any(long *ivars, size_t nelems, const int *status, int cmp, long cmp_value);
size_t shmem_long_test_any(long *ivars, size_t nelems, const int *status, int cmp, long cmp_value);
size_t shmem_long_wait_until_any_vector(long *ivars, size_t nelems, const int *status, int cmp, long *cmp_values);
size_t shmem_long_test_any_vector(long *ivars, size_t nelems, const int *status, int cmp, long *cmp_values);
size_t shmem_long_wait_until_some(long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, long cmp_value);
size_t shmem_long_test_some(long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, long cmp_value);
size_t shmem_long_wait_until_some_vector(long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, long *cmp_values);
size_t shmem_long_test_some_vector(long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, long *cmp_values);
void shmem_longlong_wait_until(long long *ivar, int cmp, long long value);
void shmem_longlong_wait(long long *ivar, long long cmp_value);
int shmem_longlong_test(long long *ivar, int cmp, long long value);
void shmem_longlong_wait_until_all(long long *ivars, size_t nelems, const int *status, int cmp, long long cmp_value);
int shmem_longlong_test_all(long long *ivars, size_t nelems, const int *status, int cmp, long long cmp_value);
void shmem_longlong_wait_until_all_vector(long long *ivars, size_t nelems, const int *status, int cmp, long long *cmp_values);
int shmem_longlong_test_all_vector(long long *ivars, size_t nelems, const int *status, int cmp, long long *cmp_values);
size_t shmem_longlong_wait_until_any(long long *ivars, size_t nelems, const int *status, int cmp, long long cmp_value);
size_t shmem_longlong_test_any(long long *ivars, size_t nelems, const int *status, int cmp, long long cmp_value);
size_t shmem_longlong_wait_until_any_vector(long long *ivars, size_t nelems, const int *status, int cmp, long long *cmp_values);
size_t shmem_longlong_test_any_vector(long long *ivars, size_t nelems, const int *status, int cmp, long long *cmp_values);
size_t shmem_longlong_wait_until_some(long long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, long long cmp_value);
size_t shmem_longlong_test_some(long long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, long long cmp_value);
size_t shmem_longlong_wait_until_some_vector(long long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, long long *cmp_values);
size_t shmem_longlong_test_some_vector(long long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, long long *cmp_values);
void shmem_ushort_wait_until(unsigned short *ivar, int cmp, unsigned short value);
void shmem_ushort_wait(unsigned short *ivar, unsigned short cmp_value);
int shmem_ushort_test(unsigned short *ivar, int cmp, unsigned short value);
void shmem_ushort_wait_until_all(unsigned short *ivars, size_t nelems, const int *status, int cmp, unsigned short cmp_value);
int shmem_ushort_test_all(unsigned short *ivars, size_t nelems, const int *status, int cmp, unsigned short cmp_value);
void shmem_ushort_wait_until_all_vector(unsigned short *ivars, size_t nelems, const int *status, int cmp, unsigned short *cmp_values);
int shmem_ushort_test_all_vector(unsigned short *ivars, size_t nelems, const int *status, int cmp, unsigned short *cmp_values);
size_t shmem_ushort_wait_until_any(unsigned short *ivars, size_t nelems, const int *status, int cmp, unsigned short cmp_value);
size_t shmem_ushort_test_any(unsigned short *ivars, size_t nelems, const int *status, int cmp, unsigned short cmp_value);
size_t shmem_ushort_wait_until_any_vector(unsigned short *ivars, size_t nelems, const int *status, int cmp, unsigned short *cmp_values);
size_t shmem_ushort_test_any_vector(unsigned short *ivars, size_t nelems, const int *status, int cmp, unsigned short *cmp_values);
size_t shmem_ushort_wait_until_some(unsigned short *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned short cmp_value);
size_t shmem_ushort_test_some(unsigned short *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned short cmp_value);
size_t shmem_ushort_wait_until_some_vector(unsigned short *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned short *cmp_values);
size_t shmem_ushort_test_some_vector(unsigned short *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned short *cmp_values);
void shmem_uint_wait_until(unsigned int *ivar, int cmp, unsigned int value);
void shmem_uint_wait(unsigned int *ivar, unsigned int cmp_value);
int shmem_uint_test(unsigned int *ivar, int cmp, unsigned int value);
void shmem_uint_wait_until_all(unsigned int *ivars, size_t nelems, const int *status, int cmp, unsigned int cmp_value);
int shmem_uint_test_all(unsigned int *ivars, size_t nelems, const int *status, int cmp, unsigned int cmp_value);
void shmem_uint_wait_until_all_vector(unsigned int *ivars, size_t nelems, const int *status, int cmp, unsigned int *cmp_values);
int shmem_uint_test_all_vector(unsigned int *ivars, size_t nelems, const int *status, int cmp, unsigned int *cmp_values);
size_t shmem_uint_wait_until_any(unsigned int *ivars, size_t nelems, const int *status, int cmp, unsigned int cmp_value);
size_t shmem_uint_test_any(unsigned int *ivars, size_t nelems, const int *status, int cmp, unsigned int cmp_value);
size_t shmem_uint_wait_until_any_vector(unsigned int *ivars, size_t nelems, const int *status, int cmp, unsigned int *cmp_values);
size_t shmem_uint_test_any_vector(unsigned int *ivars, size_t nelems, const int *status, int cmp, unsigned int *cmp_values);
size_t shmem_uint_wait_until_some(unsigned int *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned int cmp_value);
size_t shmem_uint_test_some(unsigned int *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned int cmp_value);
size_t shmem_uint_wait_until_some_vector(unsigned int *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned int *cmp_values);
size_t shmem_uint_test_some_vector(unsigned int *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned int *cmp_values);
void shmem_ulong_wait_until(unsigned long *ivar, int cmp, unsigned long value);
void shmem_ulong_wait(unsigned long *ivar, unsigned long cmp_value);
int shmem_ulong_test(unsigned long *ivar, int cmp, unsigned long value);
void shmem_ulong_wait_until_all(unsigned long *ivars, size_t nelems, const int *status, int cmp, unsigned long cmp_value);
int shmem_ulong_test_all(unsigned long *ivars, size_t nelems, const int *status, int cmp, unsigned long cmp_value);
void shmem_ulong_wait_until_all_vector(unsigned long *ivars, size_t nelems, const int *status, int cmp, unsigned long *cmp_values);
int shmem_ulong_test_all_vector(unsigned long *ivars, size_t nelems, const int *status, int cmp, unsigned long *cmp_values);
size_t shmem_ulong_wait_until_any(unsigned long *ivars, size_t nelems, const int *status, int cmp, unsigned long cmp_value);
size_t shmem_ulong_test_any(unsigned long *ivars, size_t nelems, const int *status, int cmp, unsigned long cmp_value);
size_t shmem_ulong_wait_until_any_vector(unsigned long *ivars, size_t nelems, const int *status, int cmp, unsigned long *cmp_values);
size_t shmem_ulong_test_any_vector(unsigned long *ivars, size_t nelems, const int *status, int cmp, unsigned long *cmp_values);
size_t shmem_ulong_wait_until_some(unsigned long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned long cmp_value);
size_t shmem_ulong_test_some(unsigned long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned long cmp_value);
size_t shmem_ulong_wait_until_some_vector(unsigned long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned long *cmp_values);
size_t shmem_ulong_test_some_vector(unsigned long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned long *cmp_values);
void shmem_ulonglong_wait_until(unsigned long long *ivar, int cmp, unsigned long long value);
void shmem_ulonglong_wait(unsigned long long *ivar, unsigned long long cmp_value);
int shmem_ulonglong_test(unsigned long long *ivar, int cmp, unsigned long long value);
void shmem_ulonglong_wait_until_all(unsigned long long *ivars, size_t nelems, const int *status, int cmp, unsigned long long cmp_value);
int shmem_ulonglong_test_all(unsigned long long *ivars, size_t nelems, const int *status, int cmp, unsigned long long cmp_value);
void shmem_ulonglong_wait_until_all_vector(unsigned long long *ivars, size_t nelems, const int *status, int cmp, unsigned long long *cmp_values);
int shmem_ulonglong_test_all_vector(unsigned long long *ivars, size_t nelems, const int *status, int cmp, unsigned long long *cmp_values);
size_t shmem_ulonglong_wait_until_any(unsigned long long *ivars, size_t nelems, const int *status, int cmp, unsigned long long cmp_value);
size_t shmem_ulonglong_test_any(unsigned long long *ivars, size_t nelems, const int *status, int cmp, unsigned long long cmp_value);
size_t shmem_ulonglong_wait_until_any_vector(unsigned long long *ivars, size_t nelems, const int *status, int cmp, unsigned long long *cmp_values);
size_t shmem_ulonglong_test_any_vector(unsigned long long *ivars, size_t nelems, const int *status, int cmp, unsigned long long *cmp_values);
size_t shmem_ulonglong_wait_until_some(unsigned long long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned long long cmp_value);
size_t shmem_ulonglong_test_some(unsigned long long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned long long cmp_value);
size_t shmem_ulonglong_wait_until_some_vector(unsigned long long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned long long *cmp_values);
size_t shmem_ulonglong_test_some_vector(unsigned long long *ivars, size_t nelems, size_t *indices, const int *status, int cmp, unsigned long long *cmp_values);
void shmem_int32_wait_until(int32_t *ivar, int cmp, int32_t value);
void shmem_int32_wait(int32_t *ivar, int32_t cmp_value);
int shmem_int32_test(int32_t *ivar, int cmp, int32_t value);
void shmem_int32_wait_until_all(int32_t *ivars, size_t nelems, const int *status, int cmp, int32_t cmp_value);
int shmem_int32_test_all(int32_t *ivars, size_t nelems, const int *status, int cmp, int32_t cmp_value);
void shmem_int32_wait_until_all_vector(int32_t *ivars, size_t nelems, const int *status, int cmp, int32_t *cmp_values);
int shmem_int32_test_all_vector(int32_t *ivars, size_t nelems, const int *status, int cmp, int32_t *cmp_values);
size_t shmem_int32_wait_until_any(int32_t *ivars, size_t nelems, const int *status, int cmp, int32_t cmp_value);
size_t shmem_int32_test_any(int32_t *ivars, size_t nelems, const int *status, int cmp, int32_t cmp_value);
size_t shmem_int32_wait_until_any_vector(int32_t *ivars, size_t nelems, const int *status, int cmp, int32_t *cmp_values);
size_t shmem_int32_test_any_vector(int32_t *ivars, size_t nelems, const int *status, int cmp, int32_t *cmp_values);
size_t shmem_int32_wait_until_some(int32_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int32_t cmp_value);
size_t shmem_int32_test_some(int32_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int32_t cmp_value);
size_t shmem_int32_wait_until_some_vector(int32_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int32_t *cmp_values);
size_t shmem_int32_test_some_vector(int32_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int32_t *cmp_values);
void shmem_int64_wait_until(int64_t *ivar, int cmp, int64_t value);
void shmem_int64_wait(int64_t *ivar, int64_t cmp_value);
int shmem_int64_test(int64_t *ivar, int cmp, int64_t value);
void shmem_int64_wait_until_all(int64_t *ivars, size_t nelems, const int *status, int cmp, int64_t cmp_value);
int shmem_int64_test_all(int64_t *ivars, size_t nelems, const int *status, int cmp, int64_t cmp_value);
void shmem_int64_wait_until_all_vector(int64_t *ivars, size_t nelems, const int *status, int cmp, int64_t *cmp_values);
int shmem_int64_test_all_vector(int64_t *ivars, size_t nelems, const int *status, int cmp, int64_t *cmp_values);
size_t shmem_int64_wait_until_any(int64_t *ivars, size_t nelems, const int *status, int cmp, int64_t cmp_value);
size_t shmem_int64_test_any(int64_t *ivars, size_t nelems, const int *status, int cmp, int64_t cmp_value);
size_t shmem_int64_wait_until_any_vector(int64_t *ivars, size_t nelems, const int *status, int cmp, int64_t *cmp_values);
size_t shmem_int64_test_any_vector(int64_t *ivars, size_t nelems, const int *status, int cmp, int64_t *cmp_values);
size_t shmem_int64_wait_until_some(int64_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int64_t cmp_value);
size_t shmem_int64_test_some(int64_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int64_t cmp_value);
size_t shmem_int64_wait_until_some_vector(int64_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int64_t *cmp_values);
size_t shmem_int64_test_some_vector(int64_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, int64_t *cmp_values);
void shmem_uint32_wait_until(uint32_t *ivar, int cmp, uint32_t value);
void shmem_uint32_wait(uint32_t *ivar, uint32_t cmp_value);
int shmem_uint32_test(uint32_t *ivar, int cmp, uint32_t value);
void shmem_uint32_wait_until_all(uint32_t *ivars, size_t nelems, const int *status, int cmp, uint32_t cmp_value);
int shmem_uint32_test_all(uint32_t *ivars, size_t nelems, const int *status, int cmp, uint32_t cmp_value);
void shmem_uint32_wait_until_all_vector(uint32_t *ivars, size_t nelems, const int *status, int cmp, uint32_t *cmp_values);
int shmem_uint32_test_all_vector(uint32_t *ivars, size_t nelems, const int *status, int cmp, uint32_t *cmp_values);
size_t shmem_uint32_wait_until_any(uint32_t *ivars, size_t nelems, const int *status, int cmp, uint32_t cmp_value);
size_t shmem_uint32_test_any(uint32_t *ivars, size_t nelems, const int *status, int cmp, uint32_t cmp_value);
size_t shmem_uint32_wait_until_any_vector(uint32_t *ivars, size_t nelems, const int *status, int cmp, uint32_t *cmp_values);
size_t shmem_uint32_test_any_vector(uint32_t *ivars, size_t nelems, const int *status, int cmp, uint32_t *cmp_values);
size_t shmem_uint32_wait_until_some(uint32_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, uint32_t cmp_value);
size_t shmem_uint32_test_some(uint32_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, uint32_t cmp_value);
size_t shmem_uint32_wait_until_some_vector(uint32_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, uint32_t *cmp_values);
size_t shmem_uint32_test_some_vector(uint32_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, uint32_t *cmp_values);
void shmem_uint64_wait_until(uint64_t *ivar, int cmp, uint64_t value);
void shmem_uint64_wait(uint64_t *ivar, uint64_t cmp_value);
int shmem_uint64_test(uint64_t *ivar, int cmp, uint64_t value);
void shmem_uint64_wait_until_all(uint64_t *ivars, size_t nelems, const int *status, int cmp, uint64_t cmp_value);
int shmem_uint64_test_all(uint64_t *ivars, size_t nelems, const int *status, int cmp, uint64_t cmp_value);
void shmem_uint64_wait_until_all_vector(uint64_t *ivars, size_t nelems, const int *status, int cmp, uint64_t *cmp_values);
int shmem_uint64_test_all_vector(uint64_t *ivars, size_t nelems, const int *status, int cmp, uint64_t *cmp_values);
size_t shmem_uint64_wait_until_any(uint64_t *ivars, size_t nelems, const int *status, int cmp, uint64_t cmp_value);
size_t shmem_uint64_test_any(uint64_t *ivars, size_t nelems, const int *status, int cmp, uint64_t cmp_value);
size_t shmem_uint64_wait_until_any_vector(uint64_t *ivars, size_t nelems, const int *status, int cmp, uint64_t *cmp_values);
size_t shmem_uint64_test_any_vector(uint64_t *ivars, size_t nelems, const int *status, int cmp, uint64_t *cmp_values);
size_t shmem_uint64_wait_until_some(uint64_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, uint64_t cmp_value);
size_t shmem_uint64_test_some(uint64_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, uint64_t cmp_value);
size_t shmem_uint64_wait_until_some_vector(uint64_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, uint64_t *cmp_values);
size_t shmem_uint64_test_some_vector(uint64_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, uint64_t *cmp_values);
void shmem_size_wait_until(size_t *ivar, int cmp, size_t value);
void shmem_size_wait(size_t *ivar, size_t cmp_value);
int shmem_size_test(size_t *ivar, int cmp, size_t value);
void shmem_size_wait_until_all(size_t *ivars, size_t nelems, const int *status, int cmp, size_t cmp_value);
int shmem_size_test_all(size_t *ivars, size_t nelems, const int *status, int cmp, size_t cmp_value);
void shmem_size_wait_until_all_vector(size_t *ivars, size_t nelems, const int *status, int cmp, size_t *cmp_values);
int shmem_size_test_all_vector(size_t *ivars, size_t nelems, const int *status, int cmp, size_t *cmp_values);
size_t shmem_size_wait_until_any(size_t *ivars, size_t nelems, const int *status, int cmp, size_t cmp_value);
size_t shmem_size_test_any(size_t *ivars, size_t nelems, const int *status, int cmp, size_t cmp_value);
size_t shmem_size_wait_until_any_vector(size_t *ivars, size_t nelems, const int *status, int cmp, size_t *cmp_values);
size_t shmem_size_test_any_vector(size_t *ivars, size_t nelems, const int *status, int cmp, size_t *cmp_values);
size_t shmem_size_wait_until_some(size_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, size_t cmp_value);
size_t shmem_size_test_some(size_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, size_t cmp_value);
size_t shmem_size_wait_until_some_vector(size_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, size_t *cmp_values);
size_t shmem_size_test_some_vector(size_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, size_t *cmp_values);
void shmem_ptrdiff_wait_until(ptrdiff_t *ivar, int cmp, ptrdiff_t value);
void shmem_ptrdiff_wait(ptrdiff_t *ivar, ptrdiff_t cmp_value);
int shmem_ptrdiff_test(ptrdiff_t *ivar, int cmp, ptrdiff_t value);
void shmem_ptrdiff_wait_until_all(ptrdiff_t *ivars, size_t nelems, const int *status, int cmp, ptrdiff_t cmp_value);
int shmem_ptrdiff_test_all(ptrdiff_t *ivars, size_t nelems, const int *status, int cmp, ptrdiff_t cmp_value);
void shmem_ptrdiff_wait_until_all_vector(ptrdiff_t *ivars, size_t nelems, const int *status, int cmp, ptrdiff_t *cmp_values);
int shmem_ptrdiff_test_all_vector(ptrdiff_t *ivars, size_t nelems, const int *status, int cmp, ptrdiff_t *cmp_values);
size_t shmem_ptrdiff_wait_until_any(ptrdiff_t *ivars, size_t nelems, const int *status, int cmp, ptrdiff_t cmp_value);
size_t shmem_ptrdiff_test_any(ptrdiff_t *ivars, size_t nelems, const int *status, int cmp, ptrdiff_t cmp_value);
size_t shmem_ptrdiff_wait_until_any_vector(ptrdiff_t *ivars, size_t nelems, const int *status, int cmp, ptrdiff_t *cmp_values);
size_t shmem_ptrdiff_test_any_vector(ptrdiff_t *ivars, size_t nelems, const int *status, int cmp, ptrdiff_t *cmp_values);
size_t shmem_ptrdiff_wait_until_some(ptrdiff_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, ptrdiff_t cmp_value);
size_t shmem_ptrdiff_test_some(ptrdiff_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, ptrdiff_t cmp_value);
size_t shmem_ptrdiff_wait_until_some_vector(ptrdiff_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, ptrdiff_t *cmp_values);
size_t shmem_ptrdiff_test_some_vector(ptrdiff_t *ivars, size_t nelems, size_t *indices, const int *status, int cmp, ptrdiff_t *cmp_values);
int shmem_float_broadcast(shmem_team_t team, float *dest, const float *source, size_t nelems, int PE_root);
int shmem_float_collect(shmem_team_t team, float *dest, const float *source, size_t nelems);
int shmem_float_fcollect(shmem_team_t team, float *dest, const float *source, size_t nelems);
int shmem_float_alltoall(shmem_team_t team, float *dest, const float *source, size_t nelems);
int shmem_float_alltoalls(shmem_team_t team, float *dest, const float *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_double_broadcast(shmem_team_t team, double *dest, const double *source, size_t nelems, int PE_root);
int shmem_double_collect(shmem_team_t team, double *dest, const double *source, size_t nelems);
int shmem_double_fcollect(shmem_team_t team, double *dest, const double *source, size_t nelems);
int shmem_double_alltoall(shmem_team_t team, double *dest, const double *source, size_t nelems);
int shmem_double_alltoalls(shmem_team_t team, double *dest, const double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_longdouble_broadcast(shmem_team_t team, long double *dest, const long double *source, size_t nelems, int PE_root);
int shmem_longdouble_collect(shmem_team_t team, long double *dest, const long double *source, size_t nelems);
int shmem_longdouble_fcollect(shmem_team_t team, long double *dest, const long double *source, size_t nelems);
int shmem_longdouble_alltoall(shmem_team_t team, long double *dest, const long double *source, size_t nelems);
int shmem_longdouble_alltoalls(shmem_team_t team, long double *dest, const long double *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_char_broadcast(shmem_team_t team, char *dest, const char *source, size_t nelems, int PE_root);
int shmem_char_collect(shmem_team_t team, char *dest, const char *source, size_t nelems);
int shmem_char_fcollect(shmem_team_t team, char *dest, const char *source, size_t nelems);
int shmem_char_alltoall(shmem_team_t team, char *dest, const char *source, size_t nelems);
int shmem_char_alltoalls(shmem_team_t team, char *dest, const char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_schar_broadcast(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems, int PE_root);
int shmem_schar_collect(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems);
int shmem_schar_fcollect(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems);
int shmem_schar_alltoall(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems);
int shmem_schar_alltoalls(shmem_team_t team, signed char *dest, const signed char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_short_broadcast(shmem_team_t team, short *dest, const short *source, size_t nelems, int PE_root);
int shmem_short_collect(shmem_team_t team, short *dest, const short *source, size_t nelems);
int shmem_short_fcollect(shmem_team_t team, short *dest, const short *source, size_t nelems);
int shmem_short_alltoall(shmem_team_t team, short *dest, const short *source, size_t nelems);
int shmem_short_alltoalls(shmem_team_t team, short *dest, const short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int_broadcast(shmem_team_t team, int *dest, const int *source, size_t nelems, int PE_root);
int shmem_int_collect(shmem_team_t team, int *dest, const int *source, size_t nelems);
int shmem_int_fcollect(shmem_team_t team, int *dest, const int *source, size_t nelems);
int shmem_int_alltoall(shmem_team_t team, int *dest, const int *source, size_t nelems);
int shmem_int_alltoalls(shmem_team_t team, int *dest, const int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_long_broadcast(shmem_team_t team, long *dest, const long *source, size_t nelems, int PE_root);
int shmem_long_collect(shmem_team_t team, long *dest, const long *source, size_t nelems);
int shmem_long_fcollect(shmem_team_t team, long *dest, const long *source, size_t nelems);
int shmem_long_alltoall(shmem_team_t team, long *dest, const long *source, size_t nelems);
int shmem_long_alltoalls(shmem_team_t team, long *dest, const long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_longlong_broadcast(shmem_team_t team, long long *dest, const long long *source, size_t nelems, int PE_root);
int shmem_longlong_collect(shmem_team_t team, long long *dest, const long long *source, size_t nelems);
int shmem_longlong_fcollect(shmem_team_t team, long long *dest, const long long *source, size_t nelems);
int shmem_longlong_alltoall(shmem_team_t team, long long *dest, const long long *source, size_t nelems);
int shmem_longlong_alltoalls(shmem_team_t team, long long *dest, const long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uchar_broadcast(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems, int PE_root);
int shmem_uchar_collect(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems);
int shmem_uchar_fcollect(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems);
int shmem_uchar_alltoall(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems);
int shmem_uchar_alltoalls(shmem_team_t team, unsigned char *dest, const unsigned char *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_ushort_broadcast(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems, int PE_root);
int shmem_ushort_collect(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems);
int shmem_ushort_fcollect(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems);
int shmem_ushort_alltoall(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems);
int shmem_ushort_alltoalls(shmem_team_t team, unsigned short *dest, const unsigned short *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint_broadcast(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems, int PE_root);
int shmem_uint_collect(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems);
int shmem_uint_fcollect(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems);
int shmem_uint_alltoall(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems);
int shmem_uint_alltoalls(shmem_team_t team, unsigned int *dest, const unsigned int *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_ulong_broadcast(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems, int PE_root);
int shmem_ulong_collect(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems);
int shmem_ulong_fcollect(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems);
int shmem_ulong_alltoall(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems);
int shmem_ulong_alltoalls(shmem_team_t team, unsigned long *dest, const unsigned long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_ulonglong_broadcast(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems, int PE_root);
int shmem_ulonglong_collect(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems);
int shmem_ulonglong_fcollect(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems);
int shmem_ulonglong_alltoall(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems);
int shmem_ulonglong_alltoalls(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int8_broadcast(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems, int PE_root);
int shmem_int8_collect(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems);
int shmem_int8_fcollect(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems);
int shmem_int8_alltoall(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems);
int shmem_int8_alltoalls(shmem_team_t team, int8_t *dest, const int8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int16_broadcast(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems, int PE_root);
int shmem_int16_collect(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems);
int shmem_int16_fcollect(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems);
int shmem_int16_alltoall(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems);
int shmem_int16_alltoalls(shmem_team_t team, int16_t *dest, const int16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int32_broadcast(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems, int PE_root);
int shmem_int32_collect(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems);
int shmem_int32_fcollect(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems);
int shmem_int32_alltoall(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems);
int shmem_int32_alltoalls(shmem_team_t team, int32_t *dest, const int32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_int64_broadcast(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems, int PE_root);
int shmem_int64_collect(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems);
int shmem_int64_fcollect(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems);
int shmem_int64_alltoall(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems);
int shmem_int64_alltoalls(shmem_team_t team, int64_t *dest, const int64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint8_broadcast(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems, int PE_root);
int shmem_uint8_collect(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems);
int shmem_uint8_fcollect(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems);
int shmem_uint8_alltoall(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems);
int shmem_uint8_alltoalls(shmem_team_t team, uint8_t *dest, const uint8_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint16_broadcast(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems, int PE_root);
int shmem_uint16_collect(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems);
int shmem_uint16_fcollect(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems);
int shmem_uint16_alltoall(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems);
int shmem_uint16_alltoalls(shmem_team_t team, uint16_t *dest, const uint16_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint32_broadcast(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems, int PE_root);
int shmem_uint32_collect(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems);
int shmem_uint32_fcollect(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems);
int shmem_uint32_alltoall(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems);
int shmem_uint32_alltoalls(shmem_team_t team, uint32_t *dest, const uint32_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uint64_broadcast(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems, int PE_root);
int shmem_uint64_collect(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems);
int shmem_uint64_fcollect(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems);
int shmem_uint64_alltoall(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems);
int shmem_uint64_alltoalls(shmem_team_t team, uint64_t *dest, const uint64_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_size_broadcast(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems, int PE_root);
int shmem_size_collect(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems);
int shmem_size_fcollect(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems);
int shmem_size_alltoall(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems);
int shmem_size_alltoalls(shmem_team_t team, size_t *dest, const size_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_ptrdiff_broadcast(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems, int PE_root);
int shmem_ptrdiff_collect(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems);
int shmem_ptrdiff_fcollect(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems);
int shmem_ptrdiff_alltoall(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems);
int shmem_ptrdiff_alltoalls(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems, int PE_root);
int shmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallsmem(shmem_team_t team, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
int shmem_uchar_and_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_and_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_and_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_and_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_and_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_and_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_and_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_and_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_and_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_and_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_and_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_and_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_and_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_and_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
void shmem_short_and_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_and_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_and_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_and_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
int shmem_uchar_or_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_or_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_or_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_or_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_or_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_or_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_or_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_or_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_or_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_or_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_or_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_or_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_or_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_or_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
void shmem_short_or_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_or_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_or_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_or_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
int shmem_uchar_xor_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_xor_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_xor_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_xor_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_xor_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_xor_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_xor_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_xor_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_xor_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_xor_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_xor_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_xor_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_xor_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_xor_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
void shmem_short_xor_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_xor_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_xor_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_xor_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
int shmem_char_max_reduce(shmem_team_t team, char *dest, const char *source, size_t nreduce);
int shmem_schar_max_reduce(shmem_team_t team, signed char *dest, const signed char *source, size_t nreduce);
int shmem_short_max_reduce(shmem_team_t team, short *dest, const short *source, size_t nreduce);
int shmem_int_max_reduce(shmem_team_t team, int *dest, const int *source, size_t nreduce);
int shmem_long_max_reduce(shmem_team_t team, long *dest, const long *source, size_t nreduce);
int shmem_longlong_max_reduce(shmem_team_t team, long long *dest, const long long *source, size_t nreduce);
int shmem_ptrdiff_max_reduce(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nreduce);
int shmem_uchar_max_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_max_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_max_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_max_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_max_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_max_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_max_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_max_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_max_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_max_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_max_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_max_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_max_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_max_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_float_max_reduce(shmem_team_t team, float *dest, const float *source, size_t nreduce);
int shmem_double_max_reduce(shmem_team_t team, double *dest, const double *source, size_t nreduce);
int shmem_longdouble_max_reduce(shmem_team_t team, long double *dest, const long double *source, size_t nreduce);
void shmem_short_max_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_max_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_max_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_max_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_float_max_to_all(float *dest, const float *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float *pWrk, long *pSync);
void shmem_double_max_to_all(double *dest, const double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double *pWrk, long *pSync);
void shmem_longdouble_max_to_all(long double *dest, const long double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long double *pWrk, long *pSync);
int shmem_char_min_reduce(shmem_team_t team, char *dest, const char *source, size_t nreduce);
int shmem_schar_min_reduce(shmem_team_t team, signed char *dest, const signed char *source, size_t nreduce);
int shmem_short_min_reduce(shmem_team_t team, short *dest, const short *source, size_t nreduce);
int shmem_int_min_reduce(shmem_team_t team, int *dest, const int *source, size_t nreduce);
int shmem_long_min_reduce(shmem_team_t team, long *dest, const long *source, size_t nreduce);
int shmem_longlong_min_reduce(shmem_team_t team, long long *dest, const long long *source, size_t nreduce);
int shmem_ptrdiff_min_reduce(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nreduce);
int shmem_uchar_min_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_min_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_min_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_min_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_min_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_min_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_min_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_min_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_min_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_min_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_min_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_min_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_min_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_min_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_float_min_reduce(shmem_team_t team, float *dest, const float *source, size_t nreduce);
int shmem_double_min_reduce(shmem_team_t team, double *dest, const double *source, size_t nreduce);
int shmem_longdouble_min_reduce(shmem_team_t team, long double *dest, const long double *source, size_t nreduce);
void shmem_short_min_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_min_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_min_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_min_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_float_min_to_all(float *dest, const float *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float *pWrk, long *pSync);
void shmem_double_min_to_all(double *dest, const double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double *pWrk, long *pSync);
void shmem_longdouble_min_to_all(long double *dest, const long double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long double *pWrk, long *pSync);
int shmem_char_sum_reduce(shmem_team_t team, char *dest, const char *source, size_t nreduce);
int shmem_schar_sum_reduce(shmem_team_t team, signed char *dest, const signed char *source, size_t nreduce);
int shmem_short_sum_reduce(shmem_team_t team, short *dest, const short *source, size_t nreduce);
int shmem_int_sum_reduce(shmem_team_t team, int *dest, const int *source, size_t nreduce);
int shmem_long_sum_reduce(shmem_team_t team, long *dest, const long *source, size_t nreduce);
int shmem_longlong_sum_reduce(shmem_team_t team, long long *dest, const long long *source, size_t nreduce);
int shmem_ptrdiff_sum_reduce(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nreduce);
int shmem_uchar_sum_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_sum_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_sum_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_sum_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_sum_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_sum_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_sum_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_sum_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_sum_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_sum_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_sum_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_sum_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_sum_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_sum_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_float_sum_reduce(shmem_team_t team, float *dest, const float *source, size_t nreduce);
int shmem_double_sum_reduce(shmem_team_t team, double *dest, const double *source, size_t nreduce);
int shmem_longdouble_sum_reduce(shmem_team_t team, long double *dest, const long double *source, size_t nreduce);
int shmem_complexd_sum_reduce(shmem_team_t team, double _Complex *dest, const double _Complex *source, size_t nreduce);
int shmem_complexf_sum_reduce(shmem_team_t team, float _Complex *dest, const float _Complex *source, size_t nreduce);
void shmem_short_sum_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_sum_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_sum_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_sum_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_float_sum_to_all(float *dest, const float *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float *pWrk, long *pSync);
void shmem_double_sum_to_all(double *dest, const double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double *pWrk, long *pSync);
void shmem_longdouble_sum_to_all(long double *dest, const long double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long double *pWrk, long *pSync);
void shmem_complexd_sum_to_all(double _Complex *dest, const double _Complex *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double _Complex *pWrk, long *pSync);
void shmem_complexf_sum_to_all(float _Complex *dest, const float _Complex *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float _Complex *pWrk, long *pSync);
int shmem_char_prod_reduce(shmem_team_t team, char *dest, const char *source, size_t nreduce);
int shmem_schar_prod_reduce(shmem_team_t team, signed char *dest, const signed char *source, size_t nreduce);
int shmem_short_prod_reduce(shmem_team_t team, short *dest, const short *source, size_t nreduce);
int shmem_int_prod_reduce(shmem_team_t team, int *dest, const int *source, size_t nreduce);
int shmem_long_prod_reduce(shmem_team_t team, long *dest, const long *source, size_t nreduce);
int shmem_longlong_prod_reduce(shmem_team_t team, long long *dest, const long long *source, size_t nreduce);
int shmem_ptrdiff_prod_reduce(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nreduce);
int shmem_uchar_prod_reduce(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nreduce);
int shmem_ushort_prod_reduce(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nreduce);
int shmem_uint_prod_reduce(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nreduce);
int shmem_ulong_prod_reduce(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nreduce);
int shmem_ulonglong_prod_reduce(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nreduce);
int shmem_int8_prod_reduce(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nreduce);
int shmem_int16_prod_reduce(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nreduce);
int shmem_int32_prod_reduce(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nreduce);
int shmem_int64_prod_reduce(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nreduce);
int shmem_uint8_prod_reduce(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nreduce);
int shmem_uint16_prod_reduce(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nreduce);
int shmem_uint32_prod_reduce(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nreduce);
int shmem_uint64_prod_reduce(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nreduce);
int shmem_size_prod_reduce(shmem_team_t team, size_t *dest, const size_t *source, size_t nreduce);
int shmem_float_prod_reduce(shmem_team_t team, float *dest, const float *source, size_t nreduce);
int shmem_double_prod_reduce(shmem_team_t team, double *dest, const double *source, size_t nreduce);
int shmem_longdouble_prod_reduce(shmem_team_t team, long double *dest, const long double *source, size_t nreduce);
int shmem_complexd_prod_reduce(shmem_team_t team, double _Complex *dest, const double _Complex *source, size_t nreduce);
int shmem_complexf_prod_reduce(shmem_team_t team, float _Complex *dest, const float _Complex *source, size_t nreduce);
void shmem_short_prod_to_all(short *dest, const short *source, int nreduce, int PE_start, int logPE_stride, int PE_size, short *pWrk, long *pSync);
void shmem_int_prod_to_all(int *dest, const int *source, int nreduce, int PE_start, int logPE_stride, int PE_size, int *pWrk, long *pSync);
void shmem_long_prod_to_all(long *dest, const long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long *pWrk, long *pSync);
void shmem_longlong_prod_to_all(long long *dest, const long long *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long long *pWrk, long *pSync);
void shmem_float_prod_to_all(float *dest, const float *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float *pWrk, long *pSync);
void shmem_double_prod_to_all(double *dest, const double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double *pWrk, long *pSync);
void shmem_longdouble_prod_to_all(long double *dest, const long double *source, int nreduce, int PE_start, int logPE_stride, int PE_size, long double *pWrk, long *pSync);
void shmem_complexd_prod_to_all(double _Complex *dest, const double _Complex *source, int nreduce, int PE_start, int logPE_stride, int PE_size, double _Complex *pWrk, long *pSync);
void shmem_complexf_prod_to_all(float _Complex *dest, const float _Complex *source, int nreduce, int PE_start, int logPE_stride, int PE_size, float _Complex *pWrk, long *pSync);
int shmem_char_sum_inscan(shmem_team_t team, char *dest, const char *source, size_t nelems);
int shmem_char_sum_exscan(shmem_team_t team, char *dest, const char *source, size_t nelems);
int shmem_schar_sum_inscan(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems);
int shmem_schar_sum_exscan(shmem_team_t team, signed char *dest, const signed char *source, size_t nelems);
int shmem_short_sum_inscan(shmem_team_t team, short *dest, const short *source, size_t nelems);
int shmem_short_sum_exscan(shmem_team_t team, short *dest, const short *source, size_t nelems);
int shmem_int_sum_inscan(shmem_team_t team, int *dest, const int *source, size_t nelems);
int shmem_int_sum_exscan(shmem_team_t team, int *dest, const int *source, size_t nelems);
int shmem_long_sum_inscan(shmem_team_t team, long *dest, const long *source, size_t nelems);
int shmem_long_sum_exscan(shmem_team_t team, long *dest, const long *source, size_t nelems);
int shmem_longlong_sum_inscan(shmem_team_t team, long long *dest, const long long *source, size_t nelems);
int shmem_longlong_sum_exscan(shmem_team_t team, long long *dest, const long long *source, size_t nelems);
int shmem_ptrdiff_sum_inscan(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems);
int shmem_ptrdiff_sum_exscan(shmem_team_t team, ptrdiff_t *dest, const ptrdiff_t *source, size_t nelems);
int shmem_uchar_sum_inscan(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems);
int shmem_uchar_sum_exscan(shmem_team_t team, unsigned char *dest, const unsigned char *source, size_t nelems);
int shmem_ushort_sum_inscan(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems);
int shmem_ushort_sum_exscan(shmem_team_t team, unsigned short *dest, const unsigned short *source, size_t nelems);
int shmem_uint_sum_inscan(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems);
int shmem_uint_sum_exscan(shmem_team_t team, unsigned int *dest, const unsigned int *source, size_t nelems);
int shmem_ulong_sum_inscan(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems);
int shmem_ulong_sum_exscan(shmem_team_t team, unsigned long *dest, const unsigned long *source, size_t nelems);
int shmem_ulonglong_sum_inscan(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems);
int shmem_ulonglong_sum_exscan(shmem_team_t team, unsigned long long *dest, const unsigned long long *source, size_t nelems);
int shmem_int8_sum_inscan(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems);
int shmem_int8_sum_exscan(shmem_team_t team, int8_t *dest, const int8_t *source, size_t nelems);
int shmem_int16_sum_inscan(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems);
int shmem_int16_sum_exscan(shmem_team_t team, int16_t *dest, const int16_t *source, size_t nelems);
int shmem_int32_sum_inscan(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems);
int shmem_int32_sum_exscan(shmem_team_t team, int32_t *dest, const int32_t *source, size_t nelems);
int shmem_int64_sum_inscan(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems);
int shmem_int64_sum_exscan(shmem_team_t team, int64_t *dest, const int64_t *source, size_t nelems);
int shmem_uint8_sum_inscan(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems);
int shmem_uint8_sum_exscan(shmem_team_t team, uint8_t *dest, const uint8_t *source, size_t nelems);
int shmem_uint16_sum_inscan(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems);
int shmem_uint16_sum_exscan(shmem_team_t team, uint16_t *dest, const uint16_t *source, size_t nelems);
int shmem_uint32_sum_inscan(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems);
int shmem_uint32_sum_exscan(shmem_team_t team, uint32_t *dest, const uint32_t *source, size_t nelems);
int shmem_uint64_sum_inscan(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems);
int shmem_uint64_sum_exscan(shmem_team_t team, uint64_t *dest, const uint64_t *source, size_t nelems);
int shmem_size_sum_inscan(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems);
int shmem_size_sum_exscan(shmem_team_t team, size_t *dest, const size_t *source, size_t nelems);
int shmem_float_sum_inscan(shmem_team_t team, float *dest, const float *source, size_t nelems);
int shmem_float_sum_exscan(shmem_team_t team, float *dest, const float *source, size_t nelems);
int shmem_double_sum_inscan(shmem_team_t team, double *dest, const double *source, size_t nelems);
int shmem_double_sum_exscan(shmem_team_t team, double *dest, const double *source, size_t nelems);
int shmem_longdouble_sum_inscan(shmem_team_t team, long double *dest, const long double *source, size_t nelems);
int shmem_longdouble_sum_exscan(shmem_team_t team, long double *dest, const long double *source, size_t nelems);
int shmem_complexd_sum_inscan(shmem_team_t team, double _Complex *dest, const double _Complex *source, size_t nelems);
int shmem_complexd_sum_exscan(shmem_team_t team, double _Complex *dest, const double _Complex *source, size_t nelems);
int shmem_complexf_sum_inscan(shmem_team_t team, float _Complex *dest, const float _Complex *source, size_t nelems);
int shmem_complexf_sum_exscan(shmem_team_t team, float _Complex *dest, const float _Complex *source, size_t nelems);
void shmem_broadcast32(void *dest, const void *source, size_t nelems, int PE_root, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_collect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_fcollect32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoall32(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoalls32(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_broadcast64(void *dest, const void *source, size_t nelems, int PE_root, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_collect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_fcollect64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoall64(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_alltoalls64(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int PE_start, int logPE_stride, int PE_size, long *pSync);

/* shmem_sync(team) (1.5) and the deprecated shmem_sync(PE_start, logPE_stride, PE_size, pSync)
 * by argument count. */
#define shmemi_sync_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_sync(...) shmemi_sync_sel(__VA_ARGS__, shmem_sync, 0, 0, shmem_team_sync, 0)(__VA_ARGS__)


#ifdef __cplusplus
}
#endif

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__cplusplus)
/* C11 type-generic interfaces. Forms with a leading context argument dispatch on the
 * argument count. */
#define shmemi_put_n(a1, a2, a3, a4) _Generic(*(a1), \
    float: shmem_float_put, \
    double: shmem_double_put, \
    long double: shmem_longdouble_put, \
    char: shmem_char_put, \
    signed char: shmem_schar_put, \
    short: shmem_short_put, \
    int: shmem_int_put, \
    long: shmem_long_put, \
    long long: shmem_longlong_put, \
    unsigned char: shmem_uchar_put, \
    unsigned short: shmem_ushort_put, \
    unsigned int: shmem_uint_put, \
    unsigned long: shmem_ulong_put, \
    unsigned long long: shmem_ulonglong_put)(a1, a2, a3, a4)
#define shmemi_put_c(c, a1, a2, a3, a4) _Generic(*(a1), \
    float: shmem_ctx_float_put, \
    double: shmem_ctx_double_put, \
    long double: shmem_ctx_longdouble_put, \
    char: shmem_ctx_char_put, \
    signed char: shmem_ctx_schar_put, \
    short: shmem_ctx_short_put, \
    int: shmem_ctx_int_put, \
    long: shmem_ctx_long_put, \
    long long: shmem_ctx_longlong_put, \
    unsigned char: shmem_ctx_uchar_put, \
    unsigned short: shmem_ctx_ushort_put, \
    unsigned int: shmem_ctx_uint_put, \
    unsigned long: shmem_ctx_ulong_put, \
    unsigned long long: shmem_ctx_ulonglong_put)(c, a1, a2, a3, a4)
#define shmemi_put_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_put(...) shmemi_put_sel(__VA_ARGS__, shmemi_put_c, shmemi_put_n, 0)(__VA_ARGS__)

#define shmemi_get_n(a1, a2, a3, a4) _Generic(*(a1), \
    float: shmem_float_get, \
    double: shmem_double_get, \
    long double: shmem_longdouble_get, \
    char: shmem_char_get, \
    signed char: shmem_schar_get, \
    short: shmem_short_get, \
    int: shmem_int_get, \
    long: shmem_long_get, \
    long long: shmem_longlong_get, \
    unsigned char: shmem_uchar_get, \
    unsigned short: shmem_ushort_get, \
    unsigned int: shmem_uint_get, \
    unsigned long: shmem_ulong_get, \
    unsigned long long: shmem_ulonglong_get)(a1, a2, a3, a4)
#define shmemi_get_c(c, a1, a2, a3, a4) _Generic(*(a1), \
    float: shmem_ctx_float_get, \
    double: shmem_ctx_double_get, \
    long double: shmem_ctx_longdouble_get, \
    char: shmem_ctx_char_get, \
    signed char: shmem_ctx_schar_get, \
    short: shmem_ctx_short_get, \
    int: shmem_ctx_int_get, \
    long: shmem_ctx_long_get, \
    long long: shmem_ctx_longlong_get, \
    unsigned char: shmem_ctx_uchar_get, \
    unsigned short: shmem_ctx_ushort_get, \
    unsigned int: shmem_ctx_uint_get, \
    unsigned long: shmem_ctx_ulong_get, \
    unsigned long long: shmem_ctx_ulonglong_get)(c, a1, a2, a3, a4)
#define shmemi_get_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_get(...) shmemi_get_sel(__VA_ARGS__, shmemi_get_c, shmemi_get_n, 0)(__VA_ARGS__)

#define shmemi_put_nbi_n(a1, a2, a3, a4) _Generic(*(a1), \
    float: shmem_float_put_nbi, \
    double: shmem_double_put_nbi, \
    long double: shmem_longdouble_put_nbi, \
    char: shmem_char_put_nbi, \
    signed char: shmem_schar_put_nbi, \
    short: shmem_short_put_nbi, \
    int: shmem_int_put_nbi, \
    long: shmem_long_put_nbi, \
    long long: shmem_longlong_put_nbi, \
    unsigned char: shmem_uchar_put_nbi, \
    unsigned short: shmem_ushort_put_nbi, \
    unsigned int: shmem_uint_put_nbi, \
    unsigned long: shmem_ulong_put_nbi, \
    unsigned long long: shmem_ulonglong_put_nbi)(a1, a2, a3, a4)
#define shmemi_put_nbi_c(c, a1, a2, a3, a4) _Generic(*(a1), \
    float: shmem_ctx_float_put_nbi, \
    double: shmem_ctx_double_put_nbi, \
    long double: shmem_ctx_longdouble_put_nbi, \
    char: shmem_ctx_char_put_nbi, \
    signed char: shmem_ctx_schar_put_nbi, \
    short: shmem_ctx_short_put_nbi, \
    int: shmem_ctx_int_put_nbi, \
    long: shmem_ctx_long_put_nbi, \
    long long: shmem_ctx_longlong_put_nbi, \
    unsigned char: shmem_ctx_uchar_put_nbi, \
    unsigned short: shmem_ctx_ushort_put_nbi, \
    unsigned int: shmem_ctx_uint_put_nbi, \
    unsigned long: shmem_ctx_ulong_put_nbi, \
    unsigned long long: shmem_ctx_ulonglong_put_nbi)(c, a1, a2, a3, a4)
#define shmemi_put_nbi_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_put_nbi(...) shmemi_put_nbi_sel(__VA_ARGS__, shmemi_put_nbi_c, shmemi_put_nbi_n, 0)(__VA_ARGS__)

#define shmemi_get_nbi_n(a1, a2, a3, a4) _Generic(*(a1), \
    float: shmem_float_get_nbi, \
    double: shmem_double_get_nbi, \
    long double: shmem_longdouble_get_nbi, \
    char: shmem_char_get_nbi, \
    signed char: shmem_schar_get_nbi, \
    short: shmem_short_get_nbi, \
    int: shmem_int_get_nbi, \
    long: shmem_long_get_nbi, \
    long long: shmem_longlong_get_nbi, \
    unsigned char: shmem_uchar_get_nbi, \
    unsigned short: shmem_ushort_get_nbi, \
    unsigned int: shmem_uint_get_nbi, \
    unsigned long: shmem_ulong_get_nbi, \
    unsigned long long: shmem_ulonglong_get_nbi)(a1, a2, a3, a4)
#define shmemi_get_nbi_c(c, a1, a2, a3, a4) _Generic(*(a1), \
    float: shmem_ctx_float_get_nbi, \
    double: shmem_ctx_double_get_nbi, \
    long double: shmem_ctx_longdouble_get_nbi, \
    char: shmem_ctx_char_get_nbi, \
    signed char: shmem_ctx_schar_get_nbi, \
    short: shmem_ctx_short_get_nbi, \
    int: shmem_ctx_int_get_nbi, \
    long: shmem_ctx_long_get_nbi, \
    long long: shmem_ctx_longlong_get_nbi, \
    unsigned char: shmem_ctx_uchar_get_nbi, \
    unsigned short: shmem_ctx_ushort_get_nbi, \
    unsigned int: shmem_ctx_uint_get_nbi, \
    unsigned long: shmem_ctx_ulong_get_nbi, \
    unsigned long long: shmem_ctx_ulonglong_get_nbi)(c, a1, a2, a3, a4)
#define shmemi_get_nbi_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_get_nbi(...) shmemi_get_nbi_sel(__VA_ARGS__, shmemi_get_nbi_c, shmemi_get_nbi_n, 0)(__VA_ARGS__)

#define shmemi_p_n(a1, a2, a3) _Generic(*(a1), \
    float: shmem_float_p, \
    double: shmem_double_p, \
    long double: shmem_longdouble_p, \
    char: shmem_char_p, \
    signed char: shmem_schar_p, \
    short: shmem_short_p, \
    int: shmem_int_p, \
    long: shmem_long_p, \
    long long: shmem_longlong_p, \
    unsigned char: shmem_uchar_p, \
    unsigned short: shmem_ushort_p, \
    unsigned int: shmem_uint_p, \
    unsigned long: shmem_ulong_p, \
    unsigned long long: shmem_ulonglong_p)(a1, a2, a3)
#define shmemi_p_c(c, a1, a2, a3) _Generic(*(a1), \
    float: shmem_ctx_float_p, \
    double: shmem_ctx_double_p, \
    long double: shmem_ctx_longdouble_p, \
    char: shmem_ctx_char_p, \
    signed char: shmem_ctx_schar_p, \
    short: shmem_ctx_short_p, \
    int: shmem_ctx_int_p, \
    long: shmem_ctx_long_p, \
    long long: shmem_ctx_longlong_p, \
    unsigned char: shmem_ctx_uchar_p, \
    unsigned short: shmem_ctx_ushort_p, \
    unsigned int: shmem_ctx_uint_p, \
    unsigned long: shmem_ctx_ulong_p, \
    unsigned long long: shmem_ctx_ulonglong_p)(c, a1, a2, a3)
#define shmemi_p_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_p(...) shmemi_p_sel(__VA_ARGS__, shmemi_p_c, shmemi_p_n, 0)(__VA_ARGS__)

#define shmemi_g_n(a1, a2) _Generic(*(a1), \
    float: shmem_float_g, \
    double: shmem_double_g, \
    long double: shmem_longdouble_g, \
    char: shmem_char_g, \
    signed char: shmem_schar_g, \
    short: shmem_short_g, \
    int: shmem_int_g, \
    long: shmem_long_g, \
    long long: shmem_longlong_g, \
    unsigned char: shmem_uchar_g, \
    unsigned short: shmem_ushort_g, \
    unsigned int: shmem_uint_g, \
    unsigned long: shmem_ulong_g, \
    unsigned long long: shmem_ulonglong_g)(a1, a2)
#define shmemi_g_c(c, a1, a2) _Generic(*(a1), \
    float: shmem_ctx_float_g, \
    double: shmem_ctx_double_g, \
    long double: shmem_ctx_longdouble_g, \
    char: shmem_ctx_char_g, \
    signed char: shmem_ctx_schar_g, \
    short: shmem_ctx_short_g, \
    int: shmem_ctx_int_g, \
    long: shmem_ctx_long_g, \
    long long: shmem_ctx_longlong_g, \
    unsigned char: shmem_ctx_uchar_g, \
    unsigned short: shmem_ctx_ushort_g, \
    unsigned int: shmem_ctx_uint_g, \
    unsigned long: shmem_ctx_ulong_g, \
    unsigned long long: shmem_ctx_ulonglong_g)(c, a1, a2)
#define shmemi_g_sel(_1, _2, _3, NAME, ...) NAME
#define shmem_g(...) shmemi_g_sel(__VA_ARGS__, shmemi_g_c, shmemi_g_n, 0)(__VA_ARGS__)

#define shmemi_iput_n(a1, a2, a3, a4, a5, a6) _Generic(*(a1), \
    float: shmem_float_iput, \
    double: shmem_double_iput, \
    long double: shmem_longdouble_iput, \
    char: shmem_char_iput, \
    signed char: shmem_schar_iput, \
    short: shmem_short_iput, \
    int: shmem_int_iput, \
    long: shmem_long_iput, \
    long long: shmem_longlong_iput, \
    unsigned char: shmem_uchar_iput, \
    unsigned short: shmem_ushort_iput, \
    unsigned int: shmem_uint_iput, \
    unsigned long: shmem_ulong_iput, \
    unsigned long long: shmem_ulonglong_iput)(a1, a2, a3, a4, a5, a6)
#define shmemi_iput_c(c, a1, a2, a3, a4, a5, a6) _Generic(*(a1), \
    float: shmem_ctx_float_iput, \
    double: shmem_ctx_double_iput, \
    long double: shmem_ctx_longdouble_iput, \
    char: shmem_ctx_char_iput, \
    signed char: shmem_ctx_schar_iput, \
    short: shmem_ctx_short_iput, \
    int: shmem_ctx_int_iput, \
    long: shmem_ctx_long_iput, \
    long long: shmem_ctx_longlong_iput, \
    unsigned char: shmem_ctx_uchar_iput, \
    unsigned short: shmem_ctx_ushort_iput, \
    unsigned int: shmem_ctx_uint_iput, \
    unsigned long: shmem_ctx_ulong_iput, \
    unsigned long long: shmem_ctx_ulonglong_iput)(c, a1, a2, a3, a4, a5, a6)
#define shmemi_iput_sel(_1, _2, _3, _4, _5, _6, _7, NAME, ...) NAME
#define shmem_iput(...) shmemi_iput_sel(__VA_ARGS__, shmemi_iput_c, shmemi_iput_n, 0)(__VA_ARGS__)

#define shmemi_iget_n(a1, a2, a3, a4, a5, a6) _Generic(*(a1), \
    float: shmem_float_iget, \
    double: shmem_double_iget, \
    long double: shmem_longdouble_iget, \
    char: shmem_char_iget, \
    signed char: shmem_schar_iget, \
    short: shmem_short_iget, \
    int: shmem_int_iget, \
    long: shmem_long_iget, \
    long long: shmem_longlong_iget, \
    unsigned char: shmem_uchar_iget, \
    unsigned short: shmem_ushort_iget, \
    unsigned int: shmem_uint_iget, \
    unsigned long: shmem_ulong_iget, \
    unsigned long long: shmem_ulonglong_iget)(a1, a2, a3, a4, a5, a6)
#define shmemi_iget_c(c, a1, a2, a3, a4, a5, a6) _Generic(*(a1), \
    float: shmem_ctx_float_iget, \
    double: shmem_ctx_double_iget, \
    long double: shmem_ctx_longdouble_iget, \
    char: shmem_ctx_char_iget, \
    signed char: shmem_ctx_schar_iget, \
    short: shmem_ctx_short_iget, \
    int: shmem_ctx_int_iget, \
    long: shmem_ctx_long_iget, \
    long long: shmem_ctx_longlong_iget, \
    unsigned char: shmem_ctx_uchar_iget, \
    unsigned short: shmem_ctx_ushort_iget, \
    unsigned int: shmem_ctx_uint_iget, \
    unsigned long: shmem_ctx_ulong_iget, \
    unsigned long long: shmem_ctx_ulonglong_iget)(c, a1, a2, a3, a4, a5, a6)
#define shmemi_iget_sel(_1, _2, _3, _4, _5, _6, _7, NAME, ...) NAME
#define shmem_iget(...) shmemi_iget_sel(__VA_ARGS__, shmemi_iget_c, shmemi_iget_n, 0)(__VA_ARGS__)

#define shmemi_ibput_n(a1, a2, a3, a4, a5, a6, a7) _Generic(*(a1), \
    float: shmem_float_ibput, \
    double: shmem_double_ibput, \
    long double: shmem_longdouble_ibput, \
    char: shmem_char_ibput, \
    signed char: shmem_schar_ibput, \
    short: shmem_short_ibput, \
    int: shmem_int_ibput, \
    long: shmem_long_ibput, \
    long long: shmem_longlong_ibput, \
    unsigned char: shmem_uchar_ibput, \
    unsigned short: shmem_ushort_ibput, \
    unsigned int: shmem_uint_ibput, \
    unsigned long: shmem_ulong_ibput, \
    unsigned long long: shmem_ulonglong_ibput)(a1, a2, a3, a4, a5, a6, a7)
#define shmemi_ibput_c(c, a1, a2, a3, a4, a5, a6, a7) _Generic(*(a1), \
    float: shmem_ctx_float_ibput, \
    double: shmem_ctx_double_ibput, \
    long double: shmem_ctx_longdouble_ibput, \
    char: shmem_ctx_char_ibput, \
    signed char: shmem_ctx_schar_ibput, \
    short: shmem_ctx_short_ibput, \
    int: shmem_ctx_int_ibput, \
    long: shmem_ctx_long_ibput, \
    long long: shmem_ctx_longlong_ibput, \
    unsigned char: shmem_ctx_uchar_ibput, \
    unsigned short: shmem_ctx_ushort_ibput, \
    unsigned int: shmem_ctx_uint_ibput, \
    unsigned long: shmem_ctx_ulong_ibput, \
    unsigned long long: shmem_ctx_ulonglong_ibput)(c, a1, a2, a3, a4, a5, a6, a7)
#define shmemi_ibput_sel(_1, _2, _3, _4, _5, _6, _7, _8, NAME, ...) NAME
#define shmem_ibput(...) shmemi_ibput_sel(__VA_ARGS__, shmemi_ibput_c, shmemi_ibput_n, 0)(__VA_ARGS__)

#define shmemi_ibget_n(a1, a2, a3, a4, a5, a6, a7) _Generic(*(a1), \
    float: shmem_float_ibget, \
    double: shmem_double_ibget, \
    long double: shmem_longdouble_ibget, \
    char: shmem_char_ibget, \
    signed char: shmem_schar_ibget, \
    short: shmem_short_ibget, \
    int: shmem_int_ibget, \
    long: shmem_long_ibget, \
    long long: shmem_longlong_ibget, \
    unsigned char: shmem_uchar_ibget, \
    unsigned short: shmem_ushort_ibget, \
    unsigned int: shmem_uint_ibget, \
    unsigned long: shmem_ulong_ibget, \
    unsigned long long: shmem_ulonglong_ibget)(a1, a2, a3, a4, a5, a6, a7)
#define shmemi_ibget_c(c, a1, a2, a3, a4, a5, a6, a7) _Generic(*(a1), \
    float: shmem_ctx_float_ibget, \
    double: shmem_ctx_double_ibget, \
    long double: shmem_ctx_longdouble_ibget, \
    char: shmem_ctx_char_ibget, \
    signed char: shmem_ctx_schar_ibget, \
    short: shmem_ctx_short_ibget, \
    int: shmem_ctx_int_ibget, \
    long: shmem_ctx_long_ibget, \
    long long: shmem_ctx_longlong_ibget, \
    unsigned char: shmem_ctx_uchar_ibget, \
    unsigned short: shmem_ctx_ushort_ibget, \
    unsigned int: shmem_ctx_uint_ibget, \
    unsigned long: shmem_ctx_ulong_ibget, \
    unsigned long long: shmem_ctx_ulonglong_ibget)(c, a1, a2, a3, a4, a5, a6, a7)
#define shmemi_ibget_sel(_1, _2, _3, _4, _5, _6, _7, _8, NAME, ...) NAME
#define shmem_ibget(...) shmemi_ibget_sel(__VA_ARGS__, shmemi_ibget_c, shmemi_ibget_n, 0)(__VA_ARGS__)

#define shmemi_put_signal_n(a1, a2, a3, a4, a5, a6, a7) _Generic(*(a1), \
    float: shmem_float_put_signal, \
    double: shmem_double_put_signal, \
    long double: shmem_longdouble_put_signal, \
    char: shmem_char_put_signal, \
    signed char: shmem_schar_put_signal, \
    short: shmem_short_put_signal, \
    int: shmem_int_put_signal, \
    long: shmem_long_put_signal, \
    long long: shmem_longlong_put_signal, \
    unsigned char: shmem_uchar_put_signal, \
    unsigned short: shmem_ushort_put_signal, \
    unsigned int: shmem_uint_put_signal, \
    unsigned long: shmem_ulong_put_signal, \
    unsigned long long: shmem_ulonglong_put_signal)(a1, a2, a3, a4, a5, a6, a7)
#define shmemi_put_signal_c(c, a1, a2, a3, a4, a5, a6, a7) _Generic(*(a1), \
    float: shmem_ctx_float_put_signal, \
    double: shmem_ctx_double_put_signal, \
    long double: shmem_ctx_longdouble_put_signal, \
    char: shmem_ctx_char_put_signal, \
    signed char: shmem_ctx_schar_put_signal, \
    short: shmem_ctx_short_put_signal, \
    int: shmem_ctx_int_put_signal, \
    long: shmem_ctx_long_put_signal, \
    long long: shmem_ctx_longlong_put_signal, \
    unsigned char: shmem_ctx_uchar_put_signal, \
    unsigned short: shmem_ctx_ushort_put_signal, \
    unsigned int: shmem_ctx_uint_put_signal, \
    unsigned long: shmem_ctx_ulong_put_signal, \
    unsigned long long: shmem_ctx_ulonglong_put_signal)(c, a1, a2, a3, a4, a5, a6, a7)
#define shmemi_put_signal_sel(_1, _2, _3, _4, _5, _6, _7, _8, NAME, ...) NAME
#define shmem_put_signal(...) shmemi_put_signal_sel(__VA_ARGS__, shmemi_put_signal_c, shmemi_put_signal_n, 0)(__VA_ARGS__)

#define shmemi_put_signal_nbi_n(a1, a2, a3, a4, a5, a6, a7) _Generic(*(a1), \
    float: shmem_float_put_signal_nbi, \
    double: shmem_double_put_signal_nbi, \
    long double: shmem_longdouble_put_signal_nbi, \
    char: shmem_char_put_signal_nbi, \
    signed char: shmem_schar_put_signal_nbi, \
    short: shmem_short_put_signal_nbi, \
    int: shmem_int_put_signal_nbi, \
    long: shmem_long_put_signal_nbi, \
    long long: shmem_longlong_put_signal_nbi, \
    unsigned char: shmem_uchar_put_signal_nbi, \
    unsigned short: shmem_ushort_put_signal_nbi, \
    unsigned int: shmem_uint_put_signal_nbi, \
    unsigned long: shmem_ulong_put_signal_nbi, \
    unsigned long long: shmem_ulonglong_put_signal_nbi)(a1, a2, a3, a4, a5, a6, a7)
#define shmemi_put_signal_nbi_c(c, a1, a2, a3, a4, a5, a6, a7) _Generic(*(a1), \
    float: shmem_ctx_float_put_signal_nbi, \
    double: shmem_ctx_double_put_signal_nbi, \
    long double: shmem_ctx_longdouble_put_signal_nbi, \
    char: shmem_ctx_char_put_signal_nbi, \
    signed char: shmem_ctx_schar_put_signal_nbi, \
    short: shmem_ctx_short_put_signal_nbi, \
    int: shmem_ctx_int_put_signal_nbi, \
    long: shmem_ctx_long_put_signal_nbi, \
    long long: shmem_ctx_longlong_put_signal_nbi, \
    unsigned char: shmem_ctx_uchar_put_signal_nbi, \
    unsigned short: shmem_ctx_ushort_put_signal_nbi, \
    unsigned int: shmem_ctx_uint_put_signal_nbi, \
    unsigned long: shmem_ctx_ulong_put_signal_nbi, \
    unsigned long long: shmem_ctx_ulonglong_put_signal_nbi)(c, a1, a2, a3, a4, a5, a6, a7)
#define shmemi_put_signal_nbi_sel(_1, _2, _3, _4, _5, _6, _7, _8, NAME, ...) NAME
#define shmem_put_signal_nbi(...) shmemi_put_signal_nbi_sel(__VA_ARGS__, shmemi_put_signal_nbi_c, shmemi_put_signal_nbi_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_n(a1, a2) _Generic(*(a1), \
    int: shmem_int_atomic_fetch, \
    long: shmem_long_atomic_fetch, \
    long long: shmem_longlong_atomic_fetch, \
    unsigned int: shmem_uint_atomic_fetch, \
    unsigned long: shmem_ulong_atomic_fetch, \
    unsigned long long: shmem_ulonglong_atomic_fetch, \
    float: shmem_float_atomic_fetch, \
    double: shmem_double_atomic_fetch)(a1, a2)
#define shmemi_atomic_fetch_c(c, a1, a2) _Generic(*(a1), \
    int: shmem_ctx_int_atomic_fetch, \
    long: shmem_ctx_long_atomic_fetch, \
    long long: shmem_ctx_longlong_atomic_fetch, \
    unsigned int: shmem_ctx_uint_atomic_fetch, \
    unsigned long: shmem_ctx_ulong_atomic_fetch, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch, \
    float: shmem_ctx_float_atomic_fetch, \
    double: shmem_ctx_double_atomic_fetch)(c, a1, a2)
#define shmemi_atomic_fetch_sel(_1, _2, _3, NAME, ...) NAME
#define shmem_atomic_fetch(...) shmemi_atomic_fetch_sel(__VA_ARGS__, shmemi_atomic_fetch_c, shmemi_atomic_fetch_n, 0)(__VA_ARGS__)

#define shmemi_atomic_set_n(a1, a2, a3) _Generic(*(a1), \
    int: shmem_int_atomic_set, \
    long: shmem_long_atomic_set, \
    long long: shmem_longlong_atomic_set, \
    unsigned int: shmem_uint_atomic_set, \
    unsigned long: shmem_ulong_atomic_set, \
    unsigned long long: shmem_ulonglong_atomic_set, \
    float: shmem_float_atomic_set, \
    double: shmem_double_atomic_set)(a1, a2, a3)
#define shmemi_atomic_set_c(c, a1, a2, a3) _Generic(*(a1), \
    int: shmem_ctx_int_atomic_set, \
    long: shmem_ctx_long_atomic_set, \
    long long: shmem_ctx_longlong_atomic_set, \
    unsigned int: shmem_ctx_uint_atomic_set, \
    unsigned long: shmem_ctx_ulong_atomic_set, \
    unsigned long long: shmem_ctx_ulonglong_atomic_set, \
    float: shmem_ctx_float_atomic_set, \
    double: shmem_ctx_double_atomic_set)(c, a1, a2, a3)
#define shmemi_atomic_set_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_set(...) shmemi_atomic_set_sel(__VA_ARGS__, shmemi_atomic_set_c, shmemi_atomic_set_n, 0)(__VA_ARGS__)

#define shmemi_atomic_swap_n(a1, a2, a3) _Generic(*(a1), \
    int: shmem_int_atomic_swap, \
    long: shmem_long_atomic_swap, \
    long long: shmem_longlong_atomic_swap, \
    unsigned int: shmem_uint_atomic_swap, \
    unsigned long: shmem_ulong_atomic_swap, \
    unsigned long long: shmem_ulonglong_atomic_swap, \
    float: shmem_float_atomic_swap, \
    double: shmem_double_atomic_swap)(a1, a2, a3)
#define shmemi_atomic_swap_c(c, a1, a2, a3) _Generic(*(a1), \
    int: shmem_ctx_int_atomic_swap, \
    long: shmem_ctx_long_atomic_swap, \
    long long: shmem_ctx_longlong_atomic_swap, \
    unsigned int: shmem_ctx_uint_atomic_swap, \
    unsigned long: shmem_ctx_ulong_atomic_swap, \
    unsigned long long: shmem_ctx_ulonglong_atomic_swap, \
    float: shmem_ctx_float_atomic_swap, \
    double: shmem_ctx_double_atomic_swap)(c, a1, a2, a3)
#define shmemi_atomic_swap_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_swap(...) shmemi_atomic_swap_sel(__VA_ARGS__, shmemi_atomic_swap_c, shmemi_atomic_swap_n, 0)(__VA_ARGS__)

#define shmemi_atomic_compare_swap_n(a1, a2, a3, a4) _Generic(*(a1), \
    int: shmem_int_atomic_compare_swap, \
    long: shmem_long_atomic_compare_swap, \
    long long: shmem_longlong_atomic_compare_swap, \
    unsigned int: shmem_uint_atomic_compare_swap, \
    unsigned long: shmem_ulong_atomic_compare_swap, \
    unsigned long long: shmem_ulonglong_atomic_compare_swap)(a1, a2, a3, a4)
#define shmemi_atomic_compare_swap_c(c, a1, a2, a3, a4) _Generic(*(a1), \
    int: shmem_ctx_int_atomic_compare_swap, \
    long: shmem_ctx_long_atomic_compare_swap, \
    long long: shmem_ctx_longlong_atomic_compare_swap, \
    unsigned int: shmem_ctx_uint_atomic_compare_swap, \
    unsigned long: shmem_ctx_ulong_atomic_compare_swap, \
    unsigned long long: shmem_ctx_ulonglong_atomic_compare_swap)(c, a1, a2, a3, a4)
#define shmemi_atomic_compare_swap_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_atomic_compare_swap(...) shmemi_atomic_compare_swap_sel(__VA_ARGS__, shmemi_atomic_compare_swap_c, shmemi_atomic_compare_swap_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_inc_n(a1, a2) _Generic(*(a1), \
    int: shmem_int_atomic_fetch_inc, \
    long: shmem_long_atomic_fetch_inc, \
    long long: shmem_longlong_atomic_fetch_inc, \
    unsigned int: shmem_uint_atomic_fetch_inc, \
    unsigned long: shmem_ulong_atomic_fetch_inc, \
    unsigned long long: shmem_ulonglong_atomic_fetch_inc)(a1, a2)
#define shmemi_atomic_fetch_inc_c(c, a1, a2) _Generic(*(a1), \
    int: shmem_ctx_int_atomic_fetch_inc, \
    long: shmem_ctx_long_atomic_fetch_inc, \
    long long: shmem_ctx_longlong_atomic_fetch_inc, \
    unsigned int: shmem_ctx_uint_atomic_fetch_inc, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_inc, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_inc)(c, a1, a2)
#define shmemi_atomic_fetch_inc_sel(_1, _2, _3, NAME, ...) NAME
#define shmem_atomic_fetch_inc(...) shmemi_atomic_fetch_inc_sel(__VA_ARGS__, shmemi_atomic_fetch_inc_c, shmemi_atomic_fetch_inc_n, 0)(__VA_ARGS__)

#define shmemi_atomic_inc_n(a1, a2) _Generic(*(a1), \
    int: shmem_int_atomic_inc, \
    long: shmem_long_atomic_inc, \
    long long: shmem_longlong_atomic_inc, \
    unsigned int: shmem_uint_atomic_inc, \
    unsigned long: shmem_ulong_atomic_inc, \
    unsigned long long: shmem_ulonglong_atomic_inc)(a1, a2)
#define shmemi_atomic_inc_c(c, a1, a2) _Generic(*(a1), \
    int: shmem_ctx_int_atomic_inc, \
    long: shmem_ctx_long_atomic_inc, \
    long long: shmem_ctx_longlong_atomic_inc, \
    unsigned int: shmem_ctx_uint_atomic_inc, \
    unsigned long: shmem_ctx_ulong_atomic_inc, \
    unsigned long long: shmem_ctx_ulonglong_atomic_inc)(c, a1, a2)
#define shmemi_atomic_inc_sel(_1, _2, _3, NAME, ...) NAME
#define shmem_atomic_inc(...) shmemi_atomic_inc_sel(__VA_ARGS__, shmemi_atomic_inc_c, shmemi_atomic_inc_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_add_n(a1, a2, a3) _Generic(*(a1), \
    int: shmem_int_atomic_fetch_add, \
    long: shmem_long_atomic_fetch_add, \
    long long: shmem_longlong_atomic_fetch_add, \
    unsigned int: shmem_uint_atomic_fetch_add, \
    unsigned long: shmem_ulong_atomic_fetch_add, \
    unsigned long long: shmem_ulonglong_atomic_fetch_add)(a1, a2, a3)
#define shmemi_atomic_fetch_add_c(c, a1, a2, a3) _Generic(*(a1), \
    int: shmem_ctx_int_atomic_fetch_add, \
    long: shmem_ctx_long_atomic_fetch_add, \
    long long: shmem_ctx_longlong_atomic_fetch_add, \
    unsigned int: shmem_ctx_uint_atomic_fetch_add, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_add, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_add)(c, a1, a2, a3)
#define shmemi_atomic_fetch_add_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_fetch_add(...) shmemi_atomic_fetch_add_sel(__VA_ARGS__, shmemi_atomic_fetch_add_c, shmemi_atomic_fetch_add_n, 0)(__VA_ARGS__)

#define shmemi_atomic_add_n(a1, a2, a3) _Generic(*(a1), \
    int: shmem_int_atomic_add, \
    long: shmem_long_atomic_add, \
    long long: shmem_longlong_atomic_add, \
    unsigned int: shmem_uint_atomic_add, \
    unsigned long: shmem_ulong_atomic_add, \
    unsigned long long: shmem_ulonglong_atomic_add)(a1, a2, a3)
#define shmemi_atomic_add_c(c, a1, a2, a3) _Generic(*(a1), \
    int: shmem_ctx_int_atomic_add, \
    long: shmem_ctx_long_atomic_add, \
    long long: shmem_ctx_longlong_atomic_add, \
    unsigned int: shmem_ctx_uint_atomic_add, \
    unsigned long: shmem_ctx_ulong_atomic_add, \
    unsigned long long: shmem_ctx_ulonglong_atomic_add)(c, a1, a2, a3)
#define shmemi_atomic_add_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_add(...) shmemi_atomic_add_sel(__VA_ARGS__, shmemi_atomic_add_c, shmemi_atomic_add_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_and_n(a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_uint_atomic_fetch_and, \
    unsigned long: shmem_ulong_atomic_fetch_and, \
    unsigned long long: shmem_ulonglong_atomic_fetch_and, \
    int: shmem_int32_atomic_fetch_and, \
    long: shmem_int64_atomic_fetch_and)(a1, a2, a3)
#define shmemi_atomic_fetch_and_c(c, a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_ctx_uint_atomic_fetch_and, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_and, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_and, \
    int: shmem_ctx_int32_atomic_fetch_and, \
    long: shmem_ctx_int64_atomic_fetch_and)(c, a1, a2, a3)
#define shmemi_atomic_fetch_and_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_fetch_and(...) shmemi_atomic_fetch_and_sel(__VA_ARGS__, shmemi_atomic_fetch_and_c, shmemi_atomic_fetch_and_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_or_n(a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_uint_atomic_fetch_or, \
    unsigned long: shmem_ulong_atomic_fetch_or, \
    unsigned long long: shmem_ulonglong_atomic_fetch_or, \
    int: shmem_int32_atomic_fetch_or, \
    long: shmem_int64_atomic_fetch_or)(a1, a2, a3)
#define shmemi_atomic_fetch_or_c(c, a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_ctx_uint_atomic_fetch_or, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_or, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_or, \
    int: shmem_ctx_int32_atomic_fetch_or, \
    long: shmem_ctx_int64_atomic_fetch_or)(c, a1, a2, a3)
#define shmemi_atomic_fetch_or_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_fetch_or(...) shmemi_atomic_fetch_or_sel(__VA_ARGS__, shmemi_atomic_fetch_or_c, shmemi_atomic_fetch_or_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_xor_n(a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_uint_atomic_fetch_xor, \
    unsigned long: shmem_ulong_atomic_fetch_xor, \
    unsigned long long: shmem_ulonglong_atomic_fetch_xor, \
    int: shmem_int32_atomic_fetch_xor, \
    long: shmem_int64_atomic_fetch_xor)(a1, a2, a3)
#define shmemi_atomic_fetch_xor_c(c, a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_ctx_uint_atomic_fetch_xor, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_xor, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_xor, \
    int: shmem_ctx_int32_atomic_fetch_xor, \
    long: shmem_ctx_int64_atomic_fetch_xor)(c, a1, a2, a3)
#define shmemi_atomic_fetch_xor_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_fetch_xor(...) shmemi_atomic_fetch_xor_sel(__VA_ARGS__, shmemi_atomic_fetch_xor_c, shmemi_atomic_fetch_xor_n, 0)(__VA_ARGS__)

#define shmemi_atomic_and_n(a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_uint_atomic_and, \
    unsigned long: shmem_ulong_atomic_and, \
    unsigned long long: shmem_ulonglong_atomic_and, \
    int: shmem_int32_atomic_and, \
    long: shmem_int64_atomic_and)(a1, a2, a3)
#define shmemi_atomic_and_c(c, a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_ctx_uint_atomic_and, \
    unsigned long: shmem_ctx_ulong_atomic_and, \
    unsigned long long: shmem_ctx_ulonglong_atomic_and, \
    int: shmem_ctx_int32_atomic_and, \
    long: shmem_ctx_int64_atomic_and)(c, a1, a2, a3)
#define shmemi_atomic_and_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_and(...) shmemi_atomic_and_sel(__VA_ARGS__, shmemi_atomic_and_c, shmemi_atomic_and_n, 0)(__VA_ARGS__)

#define shmemi_atomic_or_n(a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_uint_atomic_or, \
    unsigned long: shmem_ulong_atomic_or, \
    unsigned long long: shmem_ulonglong_atomic_or, \
    int: shmem_int32_atomic_or, \
    long: shmem_int64_atomic_or)(a1, a2, a3)
#define shmemi_atomic_or_c(c, a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_ctx_uint_atomic_or, \
    unsigned long: shmem_ctx_ulong_atomic_or, \
    unsigned long long: shmem_ctx_ulonglong_atomic_or, \
    int: shmem_ctx_int32_atomic_or, \
    long: shmem_ctx_int64_atomic_or)(c, a1, a2, a3)
#define shmemi_atomic_or_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_or(...) shmemi_atomic_or_sel(__VA_ARGS__, shmemi_atomic_or_c, shmemi_atomic_or_n, 0)(__VA_ARGS__)

#define shmemi_atomic_xor_n(a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_uint_atomic_xor, \
    unsigned long: shmem_ulong_atomic_xor, \
    unsigned long long: shmem_ulonglong_atomic_xor, \
    int: shmem_int32_atomic_xor, \
    long: shmem_int64_atomic_xor)(a1, a2, a3)
#define shmemi_atomic_xor_c(c, a1, a2, a3) _Generic(*(a1), \
    unsigned int: shmem_ctx_uint_atomic_xor, \
    unsigned long: shmem_ctx_ulong_atomic_xor, \
    unsigned long long: shmem_ctx_ulonglong_atomic_xor, \
    int: shmem_ctx_int32_atomic_xor, \
    long: shmem_ctx_int64_atomic_xor)(c, a1, a2, a3)
#define shmemi_atomic_xor_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_xor(...) shmemi_atomic_xor_sel(__VA_ARGS__, shmemi_atomic_xor_c, shmemi_atomic_xor_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_nbi_n(a1, a2, a3) _Generic(*(a2), \
    int: shmem_int_atomic_fetch_nbi, \
    long: shmem_long_atomic_fetch_nbi, \
    long long: shmem_longlong_atomic_fetch_nbi, \
    unsigned int: shmem_uint_atomic_fetch_nbi, \
    unsigned long: shmem_ulong_atomic_fetch_nbi, \
    unsigned long long: shmem_ulonglong_atomic_fetch_nbi, \
    float: shmem_float_atomic_fetch_nbi, \
    double: shmem_double_atomic_fetch_nbi)(a1, a2, a3)
#define shmemi_atomic_fetch_nbi_c(c, a1, a2, a3) _Generic(*(a2), \
    int: shmem_ctx_int_atomic_fetch_nbi, \
    long: shmem_ctx_long_atomic_fetch_nbi, \
    long long: shmem_ctx_longlong_atomic_fetch_nbi, \
    unsigned int: shmem_ctx_uint_atomic_fetch_nbi, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_nbi, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_nbi, \
    float: shmem_ctx_float_atomic_fetch_nbi, \
    double: shmem_ctx_double_atomic_fetch_nbi)(c, a1, a2, a3)
#define shmemi_atomic_fetch_nbi_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_fetch_nbi(...) shmemi_atomic_fetch_nbi_sel(__VA_ARGS__, shmemi_atomic_fetch_nbi_c, shmemi_atomic_fetch_nbi_n, 0)(__VA_ARGS__)

#define shmemi_atomic_swap_nbi_n(a1, a2, a3, a4) _Generic(*(a2), \
    int: shmem_int_atomic_swap_nbi, \
    long: shmem_long_atomic_swap_nbi, \
    long long: shmem_longlong_atomic_swap_nbi, \
    unsigned int: shmem_uint_atomic_swap_nbi, \
    unsigned long: shmem_ulong_atomic_swap_nbi, \
    unsigned long long: shmem_ulonglong_atomic_swap_nbi, \
    float: shmem_float_atomic_swap_nbi, \
    double: shmem_double_atomic_swap_nbi)(a1, a2, a3, a4)
#define shmemi_atomic_swap_nbi_c(c, a1, a2, a3, a4) _Generic(*(a2), \
    int: shmem_ctx_int_atomic_swap_nbi, \
    long: shmem_ctx_long_atomic_swap_nbi, \
    long long: shmem_ctx_longlong_atomic_swap_nbi, \
    unsigned int: shmem_ctx_uint_atomic_swap_nbi, \
    unsigned long: shmem_ctx_ulong_atomic_swap_nbi, \
    unsigned long long: shmem_ctx_ulonglong_atomic_swap_nbi, \
    float: shmem_ctx_float_atomic_swap_nbi, \
    double: shmem_ctx_double_atomic_swap_nbi)(c, a1, a2, a3, a4)
#define shmemi_atomic_swap_nbi_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_atomic_swap_nbi(...) shmemi_atomic_swap_nbi_sel(__VA_ARGS__, shmemi_atomic_swap_nbi_c, shmemi_atomic_swap_nbi_n, 0)(__VA_ARGS__)

#define shmemi_atomic_compare_swap_nbi_n(a1, a2, a3, a4, a5) _Generic(*(a2), \
    int: shmem_int_atomic_compare_swap_nbi, \
    long: shmem_long_atomic_compare_swap_nbi, \
    long long: shmem_longlong_atomic_compare_swap_nbi, \
    unsigned int: shmem_uint_atomic_compare_swap_nbi, \
    unsigned long: shmem_ulong_atomic_compare_swap_nbi, \
    unsigned long long: shmem_ulonglong_atomic_compare_swap_nbi)(a1, a2, a3, a4, a5)
#define shmemi_atomic_compare_swap_nbi_c(c, a1, a2, a3, a4, a5) _Generic(*(a2), \
    int: shmem_ctx_int_atomic_compare_swap_nbi, \
    long: shmem_ctx_long_atomic_compare_swap_nbi, \
    long long: shmem_ctx_longlong_atomic_compare_swap_nbi, \
    unsigned int: shmem_ctx_uint_atomic_compare_swap_nbi, \
    unsigned long: shmem_ctx_ulong_atomic_compare_swap_nbi, \
    unsigned long long: shmem_ctx_ulonglong_atomic_compare_swap_nbi)(c, a1, a2, a3, a4, a5)
#define shmemi_atomic_compare_swap_nbi_sel(_1, _2, _3, _4, _5, _6, NAME, ...) NAME
#define shmem_atomic_compare_swap_nbi(...) shmemi_atomic_compare_swap_nbi_sel(__VA_ARGS__, shmemi_atomic_compare_swap_nbi_c, shmemi_atomic_compare_swap_nbi_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_inc_nbi_n(a1, a2, a3) _Generic(*(a2), \
    int: shmem_int_atomic_fetch_inc_nbi, \
    long: shmem_long_atomic_fetch_inc_nbi, \
    long long: shmem_longlong_atomic_fetch_inc_nbi, \
    unsigned int: shmem_uint_atomic_fetch_inc_nbi, \
    unsigned long: shmem_ulong_atomic_fetch_inc_nbi, \
    unsigned long long: shmem_ulonglong_atomic_fetch_inc_nbi)(a1, a2, a3)
#define shmemi_atomic_fetch_inc_nbi_c(c, a1, a2, a3) _Generic(*(a2), \
    int: shmem_ctx_int_atomic_fetch_inc_nbi, \
    long: shmem_ctx_long_atomic_fetch_inc_nbi, \
    long long: shmem_ctx_longlong_atomic_fetch_inc_nbi, \
    unsigned int: shmem_ctx_uint_atomic_fetch_inc_nbi, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_inc_nbi, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_inc_nbi)(c, a1, a2, a3)
#define shmemi_atomic_fetch_inc_nbi_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_atomic_fetch_inc_nbi(...) shmemi_atomic_fetch_inc_nbi_sel(__VA_ARGS__, shmemi_atomic_fetch_inc_nbi_c, shmemi_atomic_fetch_inc_nbi_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_add_nbi_n(a1, a2, a3, a4) _Generic(*(a2), \
    int: shmem_int_atomic_fetch_add_nbi, \
    long: shmem_long_atomic_fetch_add_nbi, \
    long long: shmem_longlong_atomic_fetch_add_nbi, \
    unsigned int: shmem_uint_atomic_fetch_add_nbi, \
    unsigned long: shmem_ulong_atomic_fetch_add_nbi, \
    unsigned long long: shmem_ulonglong_atomic_fetch_add_nbi)(a1, a2, a3, a4)
#define shmemi_atomic_fetch_add_nbi_c(c, a1, a2, a3, a4) _Generic(*(a2), \
    int: shmem_ctx_int_atomic_fetch_add_nbi, \
    long: shmem_ctx_long_atomic_fetch_add_nbi, \
    long long: shmem_ctx_longlong_atomic_fetch_add_nbi, \
    unsigned int: shmem_ctx_uint_atomic_fetch_add_nbi, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_add_nbi, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_add_nbi)(c, a1, a2, a3, a4)
#define shmemi_atomic_fetch_add_nbi_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_atomic_fetch_add_nbi(...) shmemi_atomic_fetch_add_nbi_sel(__VA_ARGS__, shmemi_atomic_fetch_add_nbi_c, shmemi_atomic_fetch_add_nbi_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_and_nbi_n(a1, a2, a3, a4) _Generic(*(a2), \
    unsigned int: shmem_uint_atomic_fetch_and_nbi, \
    unsigned long: shmem_ulong_atomic_fetch_and_nbi, \
    unsigned long long: shmem_ulonglong_atomic_fetch_and_nbi, \
    int: shmem_int32_atomic_fetch_and_nbi, \
    long: shmem_int64_atomic_fetch_and_nbi)(a1, a2, a3, a4)
#define shmemi_atomic_fetch_and_nbi_c(c, a1, a2, a3, a4) _Generic(*(a2), \
    unsigned int: shmem_ctx_uint_atomic_fetch_and_nbi, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_and_nbi, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_and_nbi, \
    int: shmem_ctx_int32_atomic_fetch_and_nbi, \
    long: shmem_ctx_int64_atomic_fetch_and_nbi)(c, a1, a2, a3, a4)
#define shmemi_atomic_fetch_and_nbi_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_atomic_fetch_and_nbi(...) shmemi_atomic_fetch_and_nbi_sel(__VA_ARGS__, shmemi_atomic_fetch_and_nbi_c, shmemi_atomic_fetch_and_nbi_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_or_nbi_n(a1, a2, a3, a4) _Generic(*(a2), \
    unsigned int: shmem_uint_atomic_fetch_or_nbi, \
    unsigned long: shmem_ulong_atomic_fetch_or_nbi, \
    unsigned long long: shmem_ulonglong_atomic_fetch_or_nbi, \
    int: shmem_int32_atomic_fetch_or_nbi, \
    long: shmem_int64_atomic_fetch_or_nbi)(a1, a2, a3, a4)
#define shmemi_atomic_fetch_or_nbi_c(c, a1, a2, a3, a4) _Generic(*(a2), \
    unsigned int: shmem_ctx_uint_atomic_fetch_or_nbi, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_or_nbi, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_or_nbi, \
    int: shmem_ctx_int32_atomic_fetch_or_nbi, \
    long: shmem_ctx_int64_atomic_fetch_or_nbi)(c, a1, a2, a3, a4)
#define shmemi_atomic_fetch_or_nbi_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_atomic_fetch_or_nbi(...) shmemi_atomic_fetch_or_nbi_sel(__VA_ARGS__, shmemi_atomic_fetch_or_nbi_c, shmemi_atomic_fetch_or_nbi_n, 0)(__VA_ARGS__)

#define shmemi_atomic_fetch_xor_nbi_n(a1, a2, a3, a4) _Generic(*(a2), \
    unsigned int: shmem_uint_atomic_fetch_xor_nbi, \
    unsigned long: shmem_ulong_atomic_fetch_xor_nbi, \
    unsigned long long: shmem_ulonglong_atomic_fetch_xor_nbi, \
    int: shmem_int32_atomic_fetch_xor_nbi, \
    long: shmem_int64_atomic_fetch_xor_nbi)(a1, a2, a3, a4)
#define shmemi_atomic_fetch_xor_nbi_c(c, a1, a2, a3, a4) _Generic(*(a2), \
    unsigned int: shmem_ctx_uint_atomic_fetch_xor_nbi, \
    unsigned long: shmem_ctx_ulong_atomic_fetch_xor_nbi, \
    unsigned long long: shmem_ctx_ulonglong_atomic_fetch_xor_nbi, \
    int: shmem_ctx_int32_atomic_fetch_xor_nbi, \
    long: shmem_ctx_int64_atomic_fetch_xor_nbi)(c, a1, a2, a3, a4)
#define shmemi_atomic_fetch_xor_nbi_sel(_1, _2, _3, _4, _5, NAME, ...) NAME
#define shmem_atomic_fetch_xor_nbi(...) shmemi_atomic_fetch_xor_nbi_sel(__VA_ARGS__, shmemi_atomic_fetch_xor_nbi_c, shmemi_atomic_fetch_xor_nbi_n, 0)(__VA_ARGS__)

#define shmemi_wait_until_n(a1, a2, a3) _Generic(*(a1), \
    short: shmem_short_wait_until, \
    int: shmem_int_wait_until, \
    long: shmem_long_wait_until, \
    long long: shmem_longlong_wait_until, \
    unsigned short: shmem_ushort_wait_until, \
    unsigned int: shmem_uint_wait_until, \
    unsigned long: shmem_ulong_wait_until, \
    unsigned long long: shmem_ulonglong_wait_until)(a1, a2, a3)
#define shmem_wait_until(...) shmemi_wait_until_n(__VA_ARGS__)

#define shmemi_test_n(a1, a2, a3) _Generic(*(a1), \
    short: shmem_short_test, \
    int: shmem_int_test, \
    long: shmem_long_test, \
    long long: shmem_longlong_test, \
    unsigned short: shmem_ushort_test, \
    unsigned int: shmem_uint_test, \
    unsigned long: shmem_ulong_test, \
    unsigned long long: shmem_ulonglong_test)(a1, a2, a3)
#define shmem_test(...) shmemi_test_n(__VA_ARGS__)

#define shmemi_wait_until_all_n(a1, a2, a3, a4, a5) _Generic(*(a1), \
    short: shmem_short_wait_until_all, \
    int: shmem_int_wait_until_all, \
    long: shmem_long_wait_until_all, \
    long long: shmem_longlong_wait_until_all, \
    unsigned short: shmem_ushort_wait_until_all, \
    unsigned int: shmem_uint_wait_until_all, \
    unsigned long: shmem_ulong_wait_until_all, \
    unsigned long long: shmem_ulonglong_wait_until_all)(a1, a2, a3, a4, a5)
#define shmem_wait_until_all(...) shmemi_wait_until_all_n(__VA_ARGS__)

#define shmemi_wait_until_any_n(a1, a2, a3, a4, a5) _Generic(*(a1), \
    short: shmem_short_wait_until_any, \
    int: shmem_int_wait_until_any, \
    long: shmem_long_wait_until_any, \
    long long: shmem_longlong_wait_until_any, \
    unsigned short: shmem_ushort_wait_until_any, \
    unsigned int: shmem_uint_wait_until_any, \
    unsigned long: shmem_ulong_wait_until_any, \
    unsigned long long: shmem_ulonglong_wait_until_any)(a1, a2, a3, a4, a5)
#define shmem_wait_until_any(...) shmemi_wait_until_any_n(__VA_ARGS__)

#define shmemi_wait_until_some_n(a1, a2, a3, a4, a5, a6) _Generic(*(a1), \
    short: shmem_short_wait_until_some, \
    int: shmem_int_wait_until_some, \
    long: shmem_long_wait_until_some, \
    long long: shmem_longlong_wait_until_some, \
    unsigned short: shmem_ushort_wait_until_some, \
    unsigned int: shmem_uint_wait_until_some, \
    unsigned long: shmem_ulong_wait_until_some, \
    unsigned long long: shmem_ulonglong_wait_until_some)(a1, a2, a3, a4, a5, a6)
#define shmem_wait_until_some(...) shmemi_wait_until_some_n(__VA_ARGS__)

#define shmemi_test_all_n(a1, a2, a3, a4, a5) _Generic(*(a1), \
    short: shmem_short_test_all, \
    int: shmem_int_test_all, \
    long: shmem_long_test_all, \
    long long: shmem_longlong_test_all, \
    unsigned short: shmem_ushort_test_all, \
    unsigned int: shmem_uint_test_all, \
    unsigned long: shmem_ulong_test_all, \
    unsigned long long: shmem_ulonglong_test_all)(a1, a2, a3, a4, a5)
#define shmem_test_all(...) shmemi_test_all_n(__VA_ARGS__)

#define shmemi_test_any_n(a1, a2, a3, a4, a5) _Generic(*(a1), \
    short: shmem_short_test_any, \
    int: shmem_int_test_any, \
    long: shmem_long_test_any, \
    long long: shmem_longlong_test_any, \
    unsigned short: shmem_ushort_test_any, \
    unsigned int: shmem_uint_test_any, \
    unsigned long: shmem_ulong_test_any, \
    unsigned long long: shmem_ulonglong_test_any)(a1, a2, a3, a4, a5)
#define shmem_test_any(...) shmemi_test_any_n(__VA_ARGS__)

#define shmemi_test_some_n(a1, a2, a3, a4, a5, a6) _Generic(*(a1), \
    short: shmem_short_test_some, \
    int: shmem_int_test_some, \
    long: shmem_long_test_some, \
    long long: shmem_longlong_test_some, \
    unsigned short: shmem_ushort_test_some, \
    unsigned int: shmem_uint_test_some, \
    unsigned long: shmem_ulong_test_some, \
    unsigned long long: shmem_ulonglong_test_some)(a1, a2, a3, a4, a5, a6)
#define shmem_test_some(...) shmemi_test_some_n(__VA_ARGS__)

#define shmemi_wait_until_all_vector_n(a1, a2, a3, a4, a5) _Generic(*(a1), \
    short: shmem_short_wait_until_all_vector, \
    int: shmem_int_wait_until_all_vector, \
    long: shmem_long_wait_until_all_vector, \
    long long: shmem_longlong_wait_until_all_vector, \
    unsigned short: shmem_ushort_wait_until_all_vector, \
    unsigned int: shmem_uint_wait_until_all_vector, \
    unsigned long: shmem_ulong_wait_until_all_vector, \
    unsigned long long: shmem_ulonglong_wait_until_all_vector)(a1, a2, a3, a4, a5)
#define shmem_wait_until_all_vector(...) shmemi_wait_until_all_vector_n(__VA_ARGS__)

#define shmemi_wait_until_any_vector_n(a1, a2, a3, a4, a5) _Generic(*(a1), \
    short: shmem_short_wait_until_any_vector, \
    int: shmem_int_wait_until_any_vector, \
    long: shmem_long_wait_until_any_vector, \
    long long: shmem_longlong_wait_until_any_vector, \
    unsigned short: shmem_ushort_wait_until_any_vector, \
    unsigned int: shmem_uint_wait_until_any_vector, \
    unsigned long: shmem_ulong_wait_until_any_vector, \
    unsigned long long: shmem_ulonglong_wait_until_any_vector)(a1, a2, a3, a4, a5)
#define shmem_wait_until_any_vector(...) shmemi_wait_until_any_vector_n(__VA_ARGS__)

#define shmemi_wait_until_some_vector_n(a1, a2, a3, a4, a5, a6) _Generic(*(a1), \
    short: shmem_short_wait_until_some_vector, \
    int: shmem_int_wait_until_some_vector, \
    long: shmem_long_wait_until_some_vector, \
    long long: shmem_longlong_wait_until_some_vector, \
    unsigned short: shmem_ushort_wait_until_some_vector, \
    unsigned int: shmem_uint_wait_until_some_vector, \
    unsigned long: shmem_ulong_wait_until_some_vector, \
    unsigned long long: shmem_ulonglong_wait_until_some_vector)(a1, a2, a3, a4, a5, a6)
#define shmem_wait_until_some_vector(...) shmemi_wait_until_some_vector_n(__VA_ARGS__)

#define shmemi_test_all_vector_n(a1, a2, a3, a4, a5) _Generic(*(a1), \
    short: shmem_short_test_all_vector, \
    int: shmem_int_test_all_vector, \
    long: shmem_long_test_all_vector, \
    long long: shmem_longlong_test_all_vector, \
    unsigned short: shmem_ushort_test_all_vector, \
    unsigned int: shmem_uint_test_all_vector, \
    unsigned long: shmem_ulong_test_all_vector, \
    unsigned long long: shmem_ulonglong_test_all_vector)(a1, a2, a3, a4, a5)
#define shmem_test_all_vector(...) shmemi_test_all_vector_n(__VA_ARGS__)

#define shmemi_test_any_vector_n(a1, a2, a3, a4, a5) _Generic(*(a1), \
    short: shmem_short_test_any_vector, \
    int: shmem_int_test_any_vector, \
    long: shmem_long_test_any_vector, \
    long long: shmem_longlong_test_any_vector, \
    unsigned short: shmem_ushort_test_any_vector, \
    unsigned int: shmem_uint_test_any_vector, \
    unsigned long: shmem_ulong_test_any_vector, \
    unsigned long long: shmem_ulonglong_test_any_vector)(a1, a2, a3, a4, a5)
#define shmem_test_any_vector(...) shmemi_test_any_vector_n(__VA_ARGS__)

#define shmemi_test_some_vector_n(a1, a2, a3, a4, a5, a6) _Generic(*(a1), \
    short: shmem_short_test_some_vector, \
    int: shmem_int_test_some_vector, \
    long: shmem_long_test_some_vector, \
    long long: shmem_longlong_test_some_vector, \
    unsigned short: shmem_ushort_test_some_vector, \
    unsigned int: shmem_uint_test_some_vector, \
    unsigned long: shmem_ulong_test_some_vector, \
    unsigned long long: shmem_ulonglong_test_some_vector)(a1, a2, a3, a4, a5, a6)
#define shmem_test_some_vector(...) shmemi_test_some_vector_n(__VA_ARGS__)

#define shmemi_wait_n(a1, a2) _Generic(*(a1), \
    short: shmem_short_wait, \
    int: shmem_int_wait, \
    long: shmem_long_wait, \
    long long: shmem_longlong_wait, \
    unsigned short: shmem_ushort_wait, \
    unsigned int: shmem_uint_wait, \
    unsigned long: shmem_ulong_wait, \
    unsigned long long: shmem_ulonglong_wait)(a1, a2)
#define shmem_wait(...) shmemi_wait_n(__VA_ARGS__)

#define shmemi_finc_n(a1, a2) _Generic(*(a1), \
    int: shmem_int_finc, \
    long: shmem_long_finc, \
    long long: shmem_longlong_finc)(a1, a2)
#define shmem_finc(...) shmemi_finc_n(__VA_ARGS__)

#define shmemi_fadd_n(a1, a2, a3) _Generic(*(a1), \
    int: shmem_int_fadd, \
    long: shmem_long_fadd, \
    long long: shmem_longlong_fadd)(a1, a2, a3)
#define shmem_fadd(...) shmemi_fadd_n(__VA_ARGS__)

#define shmemi_cswap_n(a1, a2, a3, a4) _Generic(*(a1), \
    int: shmem_int_cswap, \
    long: shmem_long_cswap, \
    long long: shmem_longlong_cswap)(a1, a2, a3, a4)
#define shmem_cswap(...) shmemi_cswap_n(__VA_ARGS__)

#define shmemi_swap_n(a1, a2, a3) _Generic(*(a1), \
    int: shmem_int_swap, \
    long: shmem_long_swap, \
    long long: shmem_longlong_swap, \
    float: shmem_float_swap, \
    double: shmem_double_swap)(a1, a2, a3)
#define shmem_swap(...) shmemi_swap_n(__VA_ARGS__)

#define shmemi_inc_n(a1, a2) _Generic(*(a1), \
    int: shmem_int_inc, \
    long: shmem_long_inc, \
    long long: shmem_longlong_inc)(a1, a2)
#define shmem_inc(...) shmemi_inc_n(__VA_ARGS__)

#define shmemi_add_n(a1, a2, a3) _Generic(*(a1), \
    int: shmem_int_add, \
    long: shmem_long_add, \
    long long: shmem_longlong_add)(a1, a2, a3)
#define shmem_add(...) shmemi_add_n(__VA_ARGS__)

#define shmemi_fetch_n(a1, a2) _Generic(*(a1), \
    int: shmem_int_fetch, \
    long: shmem_long_fetch, \
    long long: shmem_longlong_fetch, \
    float: shmem_float_fetch, \
    double: shmem_double_fetch)(a1, a2)
#define shmem_fetch(...) shmemi_fetch_n(__VA_ARGS__)

#define shmemi_set_n(a1, a2, a3) _Generic(*(a1), \
    int: shmem_int_set, \
    long: shmem_long_set, \
    long long: shmem_longlong_set, \
    float: shmem_float_set, \
    double: shmem_double_set)(a1, a2, a3)
#define shmem_set(...) shmemi_set_n(__VA_ARGS__)

#define shmemi_broadcast_n(a1, a2, a3, a4, a5) _Generic(*(a2), \
    float: shmem_float_broadcast, \
    double: shmem_double_broadcast, \
    long double: shmem_longdouble_broadcast, \
    char: shmem_char_broadcast, \
    signed char: shmem_schar_broadcast, \
    short: shmem_short_broadcast, \
    int: shmem_int_broadcast, \
    long: shmem_long_broadcast, \
    long long: shmem_longlong_broadcast, \
    unsigned char: shmem_uchar_broadcast, \
    unsigned short: shmem_ushort_broadcast, \
    unsigned int: shmem_uint_broadcast, \
    unsigned long: shmem_ulong_broadcast, \
    unsigned long long: shmem_ulonglong_broadcast)(a1, a2, a3, a4, a5)
#define shmem_broadcast(...) shmemi_broadcast_n(__VA_ARGS__)

#define shmemi_collect_n(a1, a2, a3, a4) _Generic(*(a2), \
    float: shmem_float_collect, \
    double: shmem_double_collect, \
    long double: shmem_longdouble_collect, \
    char: shmem_char_collect, \
    signed char: shmem_schar_collect, \
    short: shmem_short_collect, \
    int: shmem_int_collect, \
    long: shmem_long_collect, \
    long long: shmem_longlong_collect, \
    unsigned char: shmem_uchar_collect, \
    unsigned short: shmem_ushort_collect, \
    unsigned int: shmem_uint_collect, \
    unsigned long: shmem_ulong_collect, \
    unsigned long long: shmem_ulonglong_collect)(a1, a2, a3, a4)
#define shmem_collect(...) shmemi_collect_n(__VA_ARGS__)

#define shmemi_fcollect_n(a1, a2, a3, a4) _Generic(*(a2), \
    float: shmem_float_fcollect, \
    double: shmem_double_fcollect, \
    long double: shmem_longdouble_fcollect, \
    char: shmem_char_fcollect, \
    signed char: shmem_schar_fcollect, \
    short: shmem_short_fcollect, \
    int: shmem_int_fcollect, \
    long: shmem_long_fcollect, \
    long long: shmem_longlong_fcollect, \
    unsigned char: shmem_uchar_fcollect, \
    unsigned short: shmem_ushort_fcollect, \
    unsigned int: shmem_uint_fcollect, \
    unsigned long: shmem_ulong_fcollect, \
    unsigned long long: shmem_ulonglong_fcollect)(a1, a2, a3, a4)
#define shmem_fcollect(...) shmemi_fcollect_n(__VA_ARGS__)

#define shmemi_alltoall_n(a1, a2, a3, a4) _Generic(*(a2), \
    float: shmem_float_alltoall, \
    double: shmem_double_alltoall, \
    long double: shmem_longdouble_alltoall, \
    char: shmem_char_alltoall, \
    signed char: shmem_schar_alltoall, \
    short: shmem_short_alltoall, \
    int: shmem_int_alltoall, \
    long: shmem_long_alltoall, \
    long long: shmem_longlong_alltoall, \
    unsigned char: shmem_uchar_alltoall, \
    unsigned short: shmem_ushort_alltoall, \
    unsigned int: shmem_uint_alltoall, \
    unsigned long: shmem_ulong_alltoall, \
    unsigned long long: shmem_ulonglong_alltoall)(a1, a2, a3, a4)
#define shmem_alltoall(...) shmemi_alltoall_n(__VA_ARGS__)

#define shmemi_alltoalls_n(a1, a2, a3, a4, a5, a6) _Generic(*(a2), \
    float: shmem_float_alltoalls, \
    double: shmem_double_alltoalls, \
    long double: shmem_longdouble_alltoalls, \
    char: shmem_char_alltoalls, \
    signed char: shmem_schar_alltoalls, \
    short: shmem_short_alltoalls, \
    int: shmem_int_alltoalls, \
    long: shmem_long_alltoalls, \
    long long: shmem_longlong_alltoalls, \
    unsigned char: shmem_uchar_alltoalls, \
    unsigned short: shmem_ushort_alltoalls, \
    unsigned int: shmem_uint_alltoalls, \
    unsigned long: shmem_ulong_alltoalls, \
    unsigned long long: shmem_ulonglong_alltoalls)(a1, a2, a3, a4, a5, a6)
#define shmem_alltoalls(...) shmemi_alltoalls_n(__VA_ARGS__)

#define shmemi_and_reduce_n(a1, a2, a3, a4) _Generic(*(a2), \
    unsigned char: shmem_uchar_and_reduce, \
    unsigned short: shmem_ushort_and_reduce, \
    unsigned int: shmem_uint_and_reduce, \
    unsigned long: shmem_ulong_and_reduce, \
    unsigned long long: shmem_ulonglong_and_reduce, \
    signed char: shmem_int8_and_reduce, \
    short: shmem_int16_and_reduce, \
    int: shmem_int32_and_reduce, \
    long: shmem_int64_and_reduce)(a1, a2, a3, a4)
#define shmem_and_reduce(...) shmemi_and_reduce_n(__VA_ARGS__)

#define shmemi_or_reduce_n(a1, a2, a3, a4) _Generic(*(a2), \
    unsigned char: shmem_uchar_or_reduce, \
    unsigned short: shmem_ushort_or_reduce, \
    unsigned int: shmem_uint_or_reduce, \
    unsigned long: shmem_ulong_or_reduce, \
    unsigned long long: shmem_ulonglong_or_reduce, \
    signed char: shmem_int8_or_reduce, \
    short: shmem_int16_or_reduce, \
    int: shmem_int32_or_reduce, \
    long: shmem_int64_or_reduce)(a1, a2, a3, a4)
#define shmem_or_reduce(...) shmemi_or_reduce_n(__VA_ARGS__)

#define shmemi_xor_reduce_n(a1, a2, a3, a4) _Generic(*(a2), \
    unsigned char: shmem_uchar_xor_reduce, \
    unsigned short: shmem_ushort_xor_reduce, \
    unsigned int: shmem_uint_xor_reduce, \
    unsigned long: shmem_ulong_xor_reduce, \
    unsigned long long: shmem_ulonglong_xor_reduce, \
    signed char: shmem_int8_xor_reduce, \
    short: shmem_int16_xor_reduce, \
    int: shmem_int32_xor_reduce, \
    long: shmem_int64_xor_reduce)(a1, a2, a3, a4)
#define shmem_xor_reduce(...) shmemi_xor_reduce_n(__VA_ARGS__)

#define shmemi_max_reduce_n(a1, a2, a3, a4) _Generic(*(a2), \
    char: shmem_char_max_reduce, \
    signed char: shmem_schar_max_reduce, \
    short: shmem_short_max_reduce, \
    int: shmem_int_max_reduce, \
    long: shmem_long_max_reduce, \
    long long: shmem_longlong_max_reduce, \
    unsigned char: shmem_uchar_max_reduce, \
    unsigned short: shmem_ushort_max_reduce, \
    unsigned int: shmem_uint_max_reduce, \
    unsigned long: shmem_ulong_max_reduce, \
    unsigned long long: shmem_ulonglong_max_reduce, \
    float: shmem_float_max_reduce, \
    double: shmem_double_max_reduce, \
    long double: shmem_longdouble_max_reduce)(a1, a2, a3, a4)
#define shmem_max_reduce(...) shmemi_max_reduce_n(__VA_ARGS__)

#define shmemi_min_reduce_n(a1, a2, a3, a4) _Generic(*(a2), \
    char: shmem_char_min_reduce, \
    signed char: shmem_schar_min_reduce, \
    short: shmem_short_min_reduce, \
    int: shmem_int_min_reduce, \
    long: shmem_long_min_reduce, \
    long long: shmem_longlong_min_reduce, \
    unsigned char: shmem_uchar_min_reduce, \
    unsigned short: shmem_ushort_min_reduce, \
    unsigned int: shmem_uint_min_reduce, \
    unsigned long: shmem_ulong_min_reduce, \
    unsigned long long: shmem_ulonglong_min_reduce, \
    float: shmem_float_min_reduce, \
    double: shmem_double_min_reduce, \
    long double: shmem_longdouble_min_reduce)(a1, a2, a3, a4)
#define shmem_min_reduce(...) shmemi_min_reduce_n(__VA_ARGS__)

#define shmemi_sum_reduce_n(a1, a2, a3, a4) _Generic(*(a2), \
    char: shmem_char_sum_reduce, \
    signed char: shmem_schar_sum_reduce, \
    short: shmem_short_sum_reduce, \
    int: shmem_int_sum_reduce, \
    long: shmem_long_sum_reduce, \
    long long: shmem_longlong_sum_reduce, \
    unsigned char: shmem_uchar_sum_reduce, \
    unsigned short: shmem_ushort_sum_reduce, \
    unsigned int: shmem_uint_sum_reduce, \
    unsigned long: shmem_ulong_sum_reduce, \
    unsigned long long: shmem_ulonglong_sum_reduce, \
    float: shmem_float_sum_reduce, \
    double: shmem_double_sum_reduce, \
    long double: shmem_longdouble_sum_reduce, \
    float _Complex: shmem_complexf_sum_reduce, \
    double _Complex: shmem_complexd_sum_reduce)(a1, a2, a3, a4)
#define shmem_sum_reduce(...) shmemi_sum_reduce_n(__VA_ARGS__)

#define shmemi_prod_reduce_n(a1, a2, a3, a4) _Generic(*(a2), \
    char: shmem_char_prod_reduce, \
    signed char: shmem_schar_prod_reduce, \
    short: shmem_short_prod_reduce, \
    int: shmem_int_prod_reduce, \
    long: shmem_long_prod_reduce, \
    long long: shmem_longlong_prod_reduce, \
    unsigned char: shmem_uchar_prod_reduce, \
    unsigned short: shmem_ushort_prod_reduce, \
    unsigned int: shmem_uint_prod_reduce, \
    unsigned long: shmem_ulong_prod_reduce, \
    unsigned long long: shmem_ulonglong_prod_reduce, \
    float: shmem_float_prod_reduce, \
    double: shmem_double_prod_reduce, \
    long double: shmem_longdouble_prod_reduce, \
    float _Complex: shmem_complexf_prod_reduce, \
    double _Complex: shmem_complexd_prod_reduce)(a1, a2, a3, a4)
#define shmem_prod_reduce(...) shmemi_prod_reduce_n(__VA_ARGS__)

#define shmemi_sum_inscan_n(a1, a2, a3, a4) _Generic(*(a2), \
    char: shmem_char_sum_inscan, \
    signed char: shmem_schar_sum_inscan, \
    short: shmem_short_sum_inscan, \
    int: shmem_int_sum_inscan, \
    long: shmem_long_sum_inscan, \
    long long: shmem_longlong_sum_inscan, \
    unsigned char: shmem_uchar_sum_inscan, \
    unsigned short: shmem_ushort_sum_inscan, \
    unsigned int: shmem_uint_sum_inscan, \
    unsigned long: shmem_ulong_sum_inscan, \
    unsigned long long: shmem_ulonglong_sum_inscan, \
    float: shmem_float_sum_inscan, \
    double: shmem_double_sum_inscan, \
    long double: shmem_longdouble_sum_inscan, \
    float _Complex: shmem_complexf_sum_inscan, \
    double _Complex: shmem_complexd_sum_inscan)(a1, a2, a3, a4)
#define shmem_sum_inscan(...) shmemi_sum_inscan_n(__VA_ARGS__)

#define shmemi_sum_exscan_n(a1, a2, a3, a4) _Generic(*(a2), \
    char: shmem_char_sum_exscan, \
    signed char: shmem_schar_sum_exscan, \
    short: shmem_short_sum_exscan, \
    int: shmem_int_sum_exscan, \
    long: shmem_long_sum_exscan, \
    long long: shmem_longlong_sum_exscan, \
    unsigned char: shmem_uchar_sum_exscan, \
    unsigned short: shmem_ushort_sum_exscan, \
    unsigned int: shmem_uint_sum_exscan, \
    unsigned long: shmem_ulong_sum_exscan, \
    unsigned long long: shmem_ulonglong_sum_exscan, \
    float: shmem_float_sum_exscan, \
    double: shmem_double_sum_exscan, \
    long double: shmem_longdouble_sum_exscan, \
    float _Complex: shmem_complexf_sum_exscan, \
    double _Complex: shmem_complexd_sum_exscan)(a1, a2, a3, a4)
#define shmem_sum_exscan(...) shmemi_sum_exscan_n(__VA_ARGS__)
#endif /* C11 */

#endif /* RSHMEM_SHMEM_H */
