/*
 * combine.c — the arithmetic of the reductions and scans whose element types Rust does not
 * have: long double and the C99 complex types. Compiled into libshmem by capi/build.rs; each
 * function combines n elements of b into acc (acc[i] = acc[i] OP b[i]), the same expressions
 * OpenSHMEM's C definitions imply. capi/src/combine.rs declares them for Rust.
 */
#include <complex.h>
#include <stddef.h>

/* capi/src/typed.rs passes these element sizes to the runtime. */
_Static_assert(sizeof(long double) == 16, "rshmem assumes a 16-byte long double");
_Static_assert(sizeof(float _Complex) == 8, "float _Complex is two floats");
_Static_assert(sizeof(double _Complex) == 16, "double _Complex is two doubles");

#define COMBINE(NAME, T, EXPR)                                          \
    void rshmemi_##NAME(void *acc, const void *bv, size_t n) {          \
        T *a = (T *) acc;                                               \
        const T *b = (const T *) bv;                                    \
        for (size_t i = 0; i < n; i++) a[i] = (EXPR);                   \
    }

COMBINE(longdouble_max, long double, b[i] > a[i] ? b[i] : a[i])
COMBINE(longdouble_min, long double, b[i] < a[i] ? b[i] : a[i])
COMBINE(longdouble_sum, long double, a[i] + b[i])
COMBINE(longdouble_prod, long double, a[i] * b[i])
COMBINE(complexf_sum, float _Complex, a[i] + b[i])
COMBINE(complexf_prod, float _Complex, a[i] * b[i])
COMBINE(complexd_sum, double _Complex, a[i] + b[i])
COMBINE(complexd_prod, double _Complex, a[i] * b[i])
