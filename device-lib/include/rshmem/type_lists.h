/*
 * rshmem/type_lists.h: what the host C API (rshmem.h) and the device library (util.cuh,
 * team.cuh, coll.cuh) share, defined once: the C constants of both APIs (team handles,
 * comparisons, signal operations, RSHMEM_SIZE_MAX) and the element types of rshmem's typed
 * calls, as X-macros that expand X(TYPENAME, C type) per type. Plain C (C11, C++17 and CUDA
 * alike); both sides include this file and define none of these names themselves (the c_api
 * test constants_are_defined_once checks it). The comparison and signal codes are the runtime's
 * (rshmem::wire): the host/device contract (runtime/tests/device_compile.rs) and the
 * rshmem-capi-core tests check them. Expanding a list, or RSHMEM_SIZE_MAX, needs size_t,
 * ptrdiff_t and the intN_t types (<stddef.h>, <stdint.h>).
 */
#ifndef RSHMEM_TYPE_LISTS_H
#define RSHMEM_TYPE_LISTS_H

/* Predefined team handles (rshmem_team_t). */
#define RSHMEM_TEAM_INVALID (-1)
#define RSHMEM_TEAM_WORLD 0
#define RSHMEM_TEAM_SHARED 1
#define RSHMEM_TEAM_NODE 2

/* Comparison operators of the wait/test calls (rshmem::wire::CmpCode). */
#define RSHMEM_CMP_EQ 0
#define RSHMEM_CMP_NE 1
#define RSHMEM_CMP_GT 2
#define RSHMEM_CMP_GE 3
#define RSHMEM_CMP_LT 4
#define RSHMEM_CMP_LE 5

/* Signal operations of put_signal / signal_op (rshmem::wire::SignalCode). */
#define RSHMEM_SIGNAL_SET 0
#define RSHMEM_SIGNAL_ADD 1

/* Largest size_t: what wait_until_any / test_any return when no element can be chosen. */
#define RSHMEM_SIZE_MAX (~(size_t)0)

/* RMA types: p, g, put, get, put_signal, alltoall, fcollect, broadcast. */
#define RSHMEM_FOR_RMA_TYPES(X)                                                                \
    X(char, char)                                                                              \
    X(schar, signed char)                                                                      \
    X(short, short)                                                                            \
    X(int, int)                                                                                \
    X(long, long)                                                                              \
    X(longlong, long long)                                                                     \
    X(uchar, unsigned char)                                                                    \
    X(ushort, unsigned short)                                                                  \
    X(uint, unsigned int)                                                                      \
    X(ulong, unsigned long)                                                                    \
    X(ulonglong, unsigned long long)                                                           \
    X(int8, int8_t)                                                                            \
    X(int16, int16_t)                                                                          \
    X(int32, int32_t)                                                                          \
    X(int64, int64_t)                                                                          \
    X(uint8, uint8_t)                                                                          \
    X(uint16, uint16_t)                                                                        \
    X(uint32, uint32_t)                                                                        \
    X(uint64, uint64_t)                                                                        \
    X(size, size_t)                                                                            \
    X(ptrdiff, ptrdiff_t)                                                                      \
    X(float, float)                                                                            \
    X(double, double)

/* Integer atomic types (every atomic but the bitwise ones). */
#define RSHMEM_FOR_AMO_TYPES(X)                                                                \
    X(int, int)                                                                                \
    X(long, long)                                                                              \
    X(longlong, long long)                                                                     \
    X(uint, unsigned int)                                                                      \
    X(ulong, unsigned long)                                                                    \
    X(ulonglong, unsigned long long)                                                           \
    X(int32, int32_t)                                                                          \
    X(int64, int64_t)                                                                          \
    X(uint32, uint32_t)                                                                        \
    X(uint64, uint64_t)                                                                        \
    X(size, size_t)                                                                            \
    X(ptrdiff, ptrdiff_t)

/* Floating-point atomic types (fetch, set, swap only). */
#define RSHMEM_FOR_AMO_FLOAT_TYPES(X)                                                          \
    X(float, float)                                                                            \
    X(double, double)

/* Bitwise atomic types (and, or, xor and their fetching forms). */
#define RSHMEM_FOR_AMO_BITWISE_TYPES(X)                                                        \
    X(uint, unsigned int)                                                                      \
    X(ulong, unsigned long)                                                                    \
    X(ulonglong, unsigned long long)                                                           \
    X(int32, int32_t)                                                                          \
    X(int64, int64_t)                                                                          \
    X(uint32, uint32_t)                                                                        \
    X(uint64, uint64_t)

/* Point-to-point synchronization types (wait_until, test and their _all/_any/_some forms). */
#define RSHMEM_FOR_WAIT_TYPES(X) RSHMEM_FOR_AMO_TYPES(X)

/* Reduction types: integers have sum, prod, min, max, and, or, xor; floats the first four. */
#define RSHMEM_FOR_REDUCE_INT_TYPES(X)                                                         \
    X(char, char)                                                                              \
    X(schar, signed char)                                                                      \
    X(short, short)                                                                            \
    X(int, int)                                                                                \
    X(long, long)                                                                              \
    X(longlong, long long)                                                                     \
    X(ptrdiff, ptrdiff_t)                                                                      \
    X(uchar, unsigned char)                                                                    \
    X(ushort, unsigned short)                                                                  \
    X(uint, unsigned int)                                                                      \
    X(ulong, unsigned long)                                                                    \
    X(ulonglong, unsigned long long)                                                           \
    X(int8, int8_t)                                                                            \
    X(int16, int16_t)                                                                          \
    X(int32, int32_t)                                                                          \
    X(int64, int64_t)                                                                          \
    X(uint8, uint8_t)                                                                          \
    X(uint16, uint16_t)                                                                        \
    X(uint32, uint32_t)                                                                        \
    X(uint64, uint64_t)                                                                        \
    X(size, size_t)
#define RSHMEM_FOR_REDUCE_FLOAT_TYPES(X)                                                       \
    X(float, float)                                                                            \
    X(double, double)

#endif /* RSHMEM_TYPE_LISTS_H */
