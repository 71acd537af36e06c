//! The element types rshmem moves and operates on atomically (OpenSHMEM's standard RMA and AMO
//! types, as Rust primitives).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

mod sealed {
    pub trait Sealed {}
}

/// Types that RMA calls (put, get, p, g, iput, iget) move: every primitive integer and float,
/// and the 16-bit floats [`F16`](crate::F16) and [`BF16`](crate::BF16). OpenSHMEM's
/// `char`..`long long`, `intN_t`, `uintN_t`, `size_t`, `ptrdiff_t`, `float`, `double` map to
/// these (NVSHMEM's `half` and `bfloat16` to the 16-bit ones).
pub trait RmaType: Copy + Send + Sync + 'static + sealed::Sealed + std::fmt::Debug {
    #[doc(hidden)]
    fn default_value() -> Self;
}

macro_rules! rma {
    ($($t:ty),*) => {$( impl sealed::Sealed for $t {} impl RmaType for $t { #[inline] fn default_value() -> Self { 0 as $t } } )*};
}
rma!(i8, i16, i32, i64, i128, u8, u16, u32, u64, u128, isize, usize, f32, f64);

// The 16-bit floats (crate::float16): their zero pattern is 0.0.
macro_rules! rma16 {
    ($($t:ty),*) => {$( impl sealed::Sealed for $t {} impl RmaType for $t { #[inline] fn default_value() -> Self { <$t>::from_bits(0) } } )*};
}
rma16!(crate::F16, crate::BF16);

/// Types with fetch, set and swap atomics (OpenSHMEM's extended AMO types): the 32- and 64-bit
/// integers and `f32`/`f64`.
pub trait AmoType: RmaType {
    #[doc(hidden)]
    type Bits: Bits;
    #[doc(hidden)]
    fn to_bits(self) -> Self::Bits;
    #[doc(hidden)]
    fn from_bits(b: Self::Bits) -> Self;
}

/// Types with the arithmetic atomics (compare_swap, fetch_add, add, fetch_inc, inc) and the
/// point-to-point wait/test calls (OpenSHMEM's standard AMO types): the 32- and 64-bit integers.
pub trait AmoInt: AmoType + PartialOrd {
    #[doc(hidden)]
    fn one() -> Self;
}

/// Types with the bitwise atomics (and, or, xor): `u32`, `u64`, `i32`, `i64`.
pub trait AmoBitwise: AmoInt {}

#[doc(hidden)]
pub trait Bits: Copy + Eq + std::fmt::Debug {
    const SIZE: usize;
    /// Zero-extends to 64 bits.
    fn to_u64(self) -> u64;
    /// Truncates from 64 bits.
    fn from_u64(v: u64) -> Self;
    /// # Safety
    /// `addr` must be aligned, mapped and valid for the returned lifetime.
    unsafe fn load(addr: usize, o: Ordering) -> Self;
    /// # Safety
    /// As [`Bits::load`].
    unsafe fn store(addr: usize, v: Self, o: Ordering);
    /// # Safety
    /// As [`Bits::load`].
    unsafe fn swap(addr: usize, v: Self) -> Self;
    /// # Safety
    /// As [`Bits::load`].
    unsafe fn cas(addr: usize, cond: Self, v: Self) -> Self;
    /// # Safety
    /// As [`Bits::load`].
    unsafe fn fetch_add(addr: usize, v: Self) -> Self;
    /// # Safety
    /// As [`Bits::load`].
    unsafe fn fetch_and(addr: usize, v: Self) -> Self;
    /// # Safety
    /// As [`Bits::load`].
    unsafe fn fetch_or(addr: usize, v: Self) -> Self;
    /// # Safety
    /// As [`Bits::load`].
    unsafe fn fetch_xor(addr: usize, v: Self) -> Self;
}

macro_rules! bits {
    // The read-modify-write operations with one operand, each one atomic method of the same name.
    (@rmw $b:ty, $a:ty; $($f:ident)*) => {$(
        #[inline(always)]
        unsafe fn $f(addr: usize, v: Self) -> Self {
            // SAFETY: the caller guarantees `addr` is aligned, mapped and lives long enough.
            unsafe { <$a>::from_ptr(addr as *mut $b) }.$f(v, Ordering::AcqRel)
        }
    )*};
    ($b:ty, $a:ty) => {
        impl Bits for $b {
            const SIZE: usize = std::mem::size_of::<$b>();
            #[inline]
            fn to_u64(self) -> u64 {
                self as u64
            }
            #[inline]
            fn from_u64(v: u64) -> Self {
                v as $b
            }
            #[inline(always)]
            unsafe fn load(addr: usize, o: Ordering) -> Self {
                // SAFETY: the caller guarantees `addr` is aligned, mapped and lives long enough.
                unsafe { <$a>::from_ptr(addr as *mut $b) }.load(o)
            }
            #[inline(always)]
            unsafe fn store(addr: usize, v: Self, o: Ordering) {
                // SAFETY: as above.
                unsafe { <$a>::from_ptr(addr as *mut $b) }.store(v, o)
            }
            #[inline(always)]
            unsafe fn cas(addr: usize, cond: Self, v: Self) -> Self {
                // SAFETY: as above.
                match unsafe { <$a>::from_ptr(addr as *mut $b) }.compare_exchange(
                    cond,
                    v,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(x) | Err(x) => x,
                }
            }
            bits!(@rmw $b, $a; swap fetch_add fetch_and fetch_or fetch_xor);
        }
    };
}
bits!(u32, AtomicU32);
bits!(u64, AtomicU64);

macro_rules! amo_int {
    ($($t:ty => $b:ty),*) => {$(
        impl AmoType for $t {
            type Bits = $b;
            #[inline] fn to_bits(self) -> $b { self as $b }
            #[inline] fn from_bits(b: $b) -> Self { b as $t }
        }
        impl AmoInt for $t { #[inline] fn one() -> Self { 1 } }
    )*};
}
amo_int!(i32 => u32, u32 => u32, i64 => u64, u64 => u64, isize => u64, usize => u64);

impl AmoBitwise for i32 {}
impl AmoBitwise for u32 {}
impl AmoBitwise for i64 {}
impl AmoBitwise for u64 {}

macro_rules! amo_float {
    ($($t:ty => $b:ty),*) => {$(
        impl AmoType for $t {
            type Bits = $b;
            #[inline] fn to_bits(self) -> $b { <$t>::to_bits(self) }
            #[inline] fn from_bits(b: $b) -> Self { <$t>::from_bits(b) }
        }
    )*};
}
amo_float!(f32 => u32, f64 => u64);

/// Comparison used by the wait/test calls and `signal_wait_until` (OpenSHMEM's `SHMEM_CMP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl Cmp {
    /// Evaluates `a <op> b`.
    #[inline]
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
        }
    }

    /// The operator as text.
    pub fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
        }
    }
}

/// How a signal word is updated by `put_signal` and `signal_op` (`SHMEM_SIGNAL_SET/ADD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// Store the value.
    Set,
    /// Atomically add the value.
    Add,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmp() {
        assert!(Cmp::Gt.holds(-1i32, -2));
        assert!(!Cmp::Gt.holds(-2i32, -1));
        assert!(Cmp::Le.holds(3u64, 3));
        assert!(Cmp::Ne.holds(1, 2));
    }

    #[test]
    fn bits_roundtrip() {
        assert_eq!(<i32 as AmoType>::from_bits((-5i32).to_bits()), -5);
        assert_eq!(<f64 as AmoType>::from_bits(AmoType::to_bits(-2.5f64)), -2.5);
        assert_eq!(<isize as AmoType>::from_bits((-7isize).to_bits()), -7);
    }
}
