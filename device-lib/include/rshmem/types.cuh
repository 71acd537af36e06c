// Fixed-width types without system headers (NVRTC has no libc headers).
#pragma once

#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long size_t;
typedef long ptrdiff_t;
#ifndef offsetof
// NVRTC's front end has no __builtin_offsetof; __INTADDR__ makes the classic form a constant
// expression (usable in static_assert).
#define offsetof(T, f) ((size_t)__INTADDR__(&(((T*)0)->f)))
#endif
#else
#include <stddef.h>
#include <stdint.h>
#endif

// A cold function that never returns (it prints and traps): its callers keep nothing alive
// across the call, so it costs them no registers.
#define RSHMEM_NORETURN __attribute__((noreturn))
