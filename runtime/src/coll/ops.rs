//! Reduction element types and operators. Bitwise operators exist only for integer types:
//! `And`, `Or` and `Xor` implement [`ReduceOp<T>`] only for `T:` [`BitwiseReduceType`], so a
//! bitwise reduction of floats does not compile:
//!
//! ```compile_fail
//! fn f(w: &rshmem::World, t: &rshmem::Team, d: *mut f32, s: *const f32) {
//!     let _ = w.reduce(t, d, s, 1, rshmem::And);
//! }
//! ```
//!
//! while integers and the arithmetic operators on floats do:
//!
//! ```no_run
//! fn f(w: &rshmem::World, t: &rshmem::Team, d: *mut i32, s: *const i32, x: *mut f32) {
//!     let _ = w.reduce(t, d, s, 1, rshmem::And);
//!     let _ = w.reduce(t, x, x, 1, rshmem::Max);
//! }
//! ```

use crate::types::RmaType;

/// Types the arithmetic and ordering reductions (sum, prod, min, max) work on: every primitive
/// integer and float, and the 16-bit floats [`F16`](crate::F16) and [`BF16`](crate::BF16) (each
/// step computed in `f32` and rounded to nearest-even to 16 bits). Integer sums and products
/// wrap on overflow.
pub trait ReduceType: RmaType + PartialOrd {
    #[doc(hidden)]
    fn add(self, b: Self) -> Self;
    #[doc(hidden)]
    fn mul(self, b: Self) -> Self;
}

/// Integer types, which also have the bitwise reductions (and, or, xor).
pub trait BitwiseReduceType: ReduceType {
    #[doc(hidden)]
    fn and(self, b: Self) -> Self;
    #[doc(hidden)]
    fn or(self, b: Self) -> Self;
    #[doc(hidden)]
    fn xor(self, b: Self) -> Self;
}

macro_rules! int_reduce {
    ($($t:ty),*) => {$(
        impl ReduceType for $t {
            #[inline] fn add(self, b: Self) -> Self { self.wrapping_add(b) }
            #[inline] fn mul(self, b: Self) -> Self { self.wrapping_mul(b) }
        }
        impl BitwiseReduceType for $t {
            #[inline] fn and(self, b: Self) -> Self { self & b }
            #[inline] fn or(self, b: Self) -> Self { self | b }
            #[inline] fn xor(self, b: Self) -> Self { self ^ b }
        }
    )*};
}
int_reduce!(i8, i16, i32, i64, i128, u8, u16, u32, u64, u128, isize, usize);

macro_rules! float_reduce {
    ($($t:ty),*) => {$(
        impl ReduceType for $t {
            #[inline] fn add(self, b: Self) -> Self { self + b }
            #[inline] fn mul(self, b: Self) -> Self { self * b }
        }
    )*};
}
float_reduce!(f32, f64);

// 16-bit floats: each step in f32, rounded to nearest-even to 16 bits (crate::float16), as the
// device library does it.
macro_rules! half_reduce {
    ($($t:ty),*) => {$(
        impl ReduceType for $t {
            #[inline] fn add(self, b: Self) -> Self { <$t>::from_f32(self.to_f32() + b.to_f32()) }
            #[inline] fn mul(self, b: Self) -> Self { <$t>::from_f32(self.to_f32() * b.to_f32()) }
        }
    )*};
}
half_reduce!(crate::F16, crate::BF16);

/// A reduction operator over `T`: the markers [`Sum`], [`Prod`], [`Min`], [`Max`] (every
/// [`ReduceType`]) and [`And`], [`Or`], [`Xor`] (integers only).
pub trait ReduceOp<T>: Copy {
    /// The call name errors report, like `sum_reduce`.
    const CALL: &'static str;
    /// Combines two values (left: lower team PE number).
    fn combine(a: T, b: T) -> T;
}

macro_rules! op {
    ($(#[$m:meta])* $name:ident, $bound:ident, $call:literal, |$a:ident, $b:ident| $e:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;
        impl<T: $bound> ReduceOp<T> for $name {
            const CALL: &'static str = $call;
            #[inline]
            fn combine($a: T, $b: T) -> T {
                $e
            }
        }
    };
}

op!(
    /// Sum (`shmem_TYPE_sum_reduce`); integers wrap.
    Sum, ReduceType, "sum_reduce", |a, b| a.add(b)
);
op!(
    /// Product (`shmem_TYPE_prod_reduce`); integers wrap.
    Prod, ReduceType, "prod_reduce", |a, b| a.mul(b)
);
op!(
    /// Minimum (`shmem_TYPE_min_reduce`).
    Min, ReduceType, "min_reduce", |a, b| if b < a { b } else { a }
);
op!(
    /// Maximum (`shmem_TYPE_max_reduce`).
    Max, ReduceType, "max_reduce", |a, b| if b > a { b } else { a }
);
op!(
    /// Bitwise and (`shmem_TYPE_and_reduce`), integers only.
    And, BitwiseReduceType, "and_reduce", |a, b| a.and(b)
);
op!(
    /// Bitwise or (`shmem_TYPE_or_reduce`), integers only.
    Or, BitwiseReduceType, "or_reduce", |a, b| a.or(b)
);
op!(
    /// Bitwise exclusive or (`shmem_TYPE_xor_reduce`), integers only.
    Xor, BitwiseReduceType, "xor_reduce", |a, b| a.xor(b)
);
