//! Test values that give away a wrong source PE, target PE, offset or type.
//!
//! [`val`] derives an element from (type tag, source PE, target PE, index, salt) through a
//! strong mixer, so a value that lands on the wrong PE, at the wrong offset or reinterpreted as
//! another type does not match. [`Val::poison`] (bytes `0xA5`) is what targets hold before a
//! write; generated values never equal it.

use rshmem::{AmoBitwise, AmoInt, AmoType, RmaType};

/// SplitMix64's finalizer.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed for (tag, src, dst, idx, salt).
pub fn seed(tag: u64, src: usize, dst: usize, idx: usize, salt: u64) -> u64 {
    let mut h = mix(tag);
    for x in [src as u64, dst as u64, idx as u64, salt] {
        h = mix(h ^ x);
    }
    h
}

/// An element type under test.
pub trait Val: RmaType {
    /// Type name for messages.
    const NAME: &'static str;
    /// Distinguishes the types' value streams.
    const TAG: u64;
    /// A value derived from a seed; never equal to [`Val::poison`].
    fn from_seed(s: u64) -> Self;
    /// The pattern targets hold before a write (bytes `0xA5`).
    fn poison() -> Self;
    /// The value's bit pattern, for exact comparison (floats included).
    fn bits(self) -> u128;
}

macro_rules! int_val {
    ($($t:ty => $tag:expr),* $(,)?) => {$(
        impl Val for $t {
            const NAME: &'static str = stringify!($t);
            const TAG: u64 = $tag;
            fn from_seed(s: u64) -> Self {
                let wide = (s as u128) | ((mix(s) as u128) << 64);
                let v = wide as $t;
                if v == Self::poison() { v ^ 1 } else { v }
            }
            fn poison() -> Self {
                <$t>::from_ne_bytes([0xA5; std::mem::size_of::<$t>()])
            }
            fn bits(self) -> u128 {
                self as u128
            }
        }
    )*};
}

int_val!(
    i8 => 1, i16 => 2, i32 => 3, i64 => 4, i128 => 5, u8 => 6, u16 => 7, u32 => 8, u64 => 9,
    u128 => 10, isize => 11, usize => 12,
);

impl Val for f32 {
    const NAME: &'static str = "f32";
    const TAG: u64 = 13;
    fn from_seed(s: u64) -> Self {
        // A 22-bit integer plus one half: exact in f32, never the (tiny) poison.
        let m = ((s >> 20) & 0x3F_FFFF) as f32 + 0.5;
        if s & 1 == 1 {
            -m
        } else {
            m
        }
    }
    fn poison() -> Self {
        f32::from_bits(0xA5A5_A5A5)
    }
    fn bits(self) -> u128 {
        self.to_bits() as u128
    }
}

impl Val for f64 {
    const NAME: &'static str = "f64";
    const TAG: u64 = 14;
    fn from_seed(s: u64) -> Self {
        let m = ((s >> 12) & ((1 << 50) - 1)) as f64 + 0.5;
        if s & 1 == 1 {
            -m
        } else {
            m
        }
    }
    fn poison() -> Self {
        f64::from_bits(0xA5A5_A5A5_A5A5_A5A5)
    }
    fn bits(self) -> u128 {
        self.to_bits() as u128
    }
}

// The 16-bit floats: a 9-bit (half) or 7-bit (bfloat16) integer plus one half, exact in the
// type and never the poison (whose magnitude is below 0.5).
macro_rules! half_val {
    ($($t:ident, $tag:expr, $mask:expr);*) => {$(
        impl Val for rshmem::$t {
            const NAME: &'static str = stringify!($t);
            const TAG: u64 = $tag;
            fn from_seed(s: u64) -> Self {
                let m = ((s >> 20) & $mask) as f32 + 0.5;
                rshmem::$t::from_f32(if s & 1 == 1 { -m } else { m })
            }
            fn poison() -> Self {
                rshmem::$t::from_bits(0xA5A5)
            }
            fn bits(self) -> u128 {
                self.to_bits() as u128
            }
        }
    )*};
}
half_val!(F16, 15, 0x1FF; BF16, 16, 0x7F);

/// The value source PE `src` writes for target PE `dst` at index `idx`.
pub fn val<T: Val>(src: usize, dst: usize, idx: usize) -> T {
    T::from_seed(seed(T::TAG, src, dst, idx, 0))
}

/// Like [`val`], for round `salt` of a repeated exchange.
pub fn val_r<T: Val>(src: usize, dst: usize, idx: usize, salt: u64) -> T {
    T::from_seed(seed(T::TAG, src, dst, idx, salt))
}

/// The byte source PE `src` writes for `dst` at byte offset `idx`.
pub fn byte(src: usize, dst: usize, idx: usize) -> u8 {
    let b = seed(0xB17E, src, dst, idx, 0) as u8;
    if b == 0xA5 {
        0x5A
    } else {
        b
    }
}

/// The integer AMO types (standard AMO types) with conversions for tests.
pub trait Int: AmoInt + Val {
    /// Whether the type is signed.
    const SIGNED: bool;
    /// `v` converted with wrapping (negative values wrap for unsigned types).
    fn of(v: i64) -> Self;
}

/// The bitwise AMO types with mask conversions.
pub trait Bitw: Int + AmoBitwise {
    /// Width in bits.
    const BITS: u32;
    /// The type's value with bit pattern `m` (truncated to the width).
    fn from_mask(m: u64) -> Self;
    /// The value's bit pattern, zero-extended.
    fn mask(self) -> u64;
}

macro_rules! int_amo {
    ($($t:ty: $signed:expr),* $(,)?) => {$(
        impl Int for $t {
            const SIGNED: bool = $signed;
            fn of(v: i64) -> Self {
                v as $t
            }
        }
    )*};
}
int_amo!(i32: true, u32: false, i64: true, u64: false, isize: true, usize: false);

macro_rules! bitw {
    ($($t:ty => $u:ty),* $(,)?) => {$(
        impl Bitw for $t {
            const BITS: u32 = <$t>::BITS;
            fn from_mask(m: u64) -> Self {
                m as $u as $t
            }
            fn mask(self) -> u64 {
                self as $u as u64
            }
        }
    )*};
}
bitw!(i32 => u32, u32 => u32, i64 => u64, u64 => u64);

/// Marker for the AMO types with fetch/set/swap that are also [`Val`]s.
pub trait Amo: AmoType + Val {}
impl<T: AmoType + Val> Amo for T {}

/// Calls `$f::<T>($args)?` for every RMA type.
#[macro_export]
macro_rules! each_rma_type {
    ($f:ident($($arg:expr),*)) => {{
        $f::<i8>($($arg),*)?;
        $f::<i16>($($arg),*)?;
        $f::<i32>($($arg),*)?;
        $f::<i64>($($arg),*)?;
        $f::<i128>($($arg),*)?;
        $f::<u8>($($arg),*)?;
        $f::<u16>($($arg),*)?;
        $f::<u32>($($arg),*)?;
        $f::<u64>($($arg),*)?;
        $f::<u128>($($arg),*)?;
        $f::<isize>($($arg),*)?;
        $f::<usize>($($arg),*)?;
        $f::<f32>($($arg),*)?;
        $f::<f64>($($arg),*)?;
    }};
}

/// Calls `$f::<T>($args)?` for every integer AMO type.
#[macro_export]
macro_rules! each_int_type {
    ($f:ident($($arg:expr),*)) => {{
        $f::<i32>($($arg),*)?;
        $f::<u32>($($arg),*)?;
        $f::<i64>($($arg),*)?;
        $f::<u64>($($arg),*)?;
        $f::<isize>($($arg),*)?;
        $f::<usize>($($arg),*)?;
    }};
}
