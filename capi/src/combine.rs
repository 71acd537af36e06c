//! The C arithmetic of the `long double` and complex reductions and scans (`combine.c`,
//! compiled into the library by `build.rs`): each `rshmemi_TYPENAME_OP(acc, b, n)` combines
//! `n` elements of `b` into `acc`. These symbols are internal (not exported by `libshmem.so`).

use std::ffi::c_void;

macro_rules! combine {
    ($($name:ident),*) => {
        unsafe extern "C" {
            $(
                #[doc = concat!("`", stringify!($name), "(acc, b, n)` of `combine.c`.")]
                pub fn $name(acc: *mut c_void, b: *const c_void, n: usize);
            )*
        }
    };
}

combine!(
    rshmemi_longdouble_max,
    rshmemi_longdouble_min,
    rshmemi_longdouble_sum,
    rshmemi_longdouble_prod,
    rshmemi_complexf_sum,
    rshmemi_complexf_prod,
    rshmemi_complexd_sum,
    rshmemi_complexd_prod
);
