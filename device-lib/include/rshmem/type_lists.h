/*
 * rshmem/type_lists.h: the element types of rshmem's typed calls, listed once, as X-macros
 * that expand X(TYPENAME, C type) per type. Plain C (C11, C++17 and CUDA alike): the host C
 * API (rshmem.h) and the device library (util.cuh, coll.cuh) both include it. Expanding a list
 * needs size_t, ptrdiff_t and the intN_t types (<stddef.h>, <stdint.h>).
 */
#ifndef RSHMEM_TYPE_LISTS_H
#define RSHMEM_TYPE_LISTS_H

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
