//! The 16-bit float element types [`F16`] (IEEE 754 binary16, CUDA's `__half`, NVSHMEM's
//! `half`) and [`BF16`] (bfloat16, CUDA's `__nv_bfloat16`). Each is its 16-bit pattern, with
//! the layout of the CUDA type, so a symmetric buffer of `F16` is a buffer of `__half` to a
//! kernel.
//!
//! They move like every [`RmaType`](crate::RmaType) and reduce with sum, prod, min and max
//! ([`ReduceType`](crate::ReduceType)). Arithmetic is done the way rshmem's device library does
//! it: both operands widened to `f32` (exact), the `f32` operation, and the result rounded to
//! nearest-even back to 16 bits, so every step equals the 16-bit operation correctly rounded
//! (`f32` has more than twice the significand bits plus two of either type, which makes the
//! double rounding harmless) and the host, CPU-backend and GPU reductions give bit-identical
//! results. Values beyond the largest finite 16-bit value round to infinity; a NaN stays a
//! (quiet) NaN but its payload is not kept. Comparisons are those of the `f32` values: `-0.0`
//! equals `0.0`, a NaN is unordered.

/// IEEE 754 binary16 (`half`), stored as its 16-bit pattern (the layout of CUDA's `__half`).
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct F16(u16);

/// bfloat16 (the upper half of an `f32`), stored as its 16-bit pattern (the layout of CUDA's
/// `__nv_bfloat16`).
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct BF16(u16);

impl F16 {
    /// The value with bit pattern `bits`.
    pub const fn from_bits(bits: u16) -> Self {
        F16(bits)
    }

    /// The bit pattern.
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// `f` rounded to nearest-even (beyond ±65504 to infinity; NaN to a quiet NaN).
    pub fn from_f32(f: f32) -> Self {
        let x = f.to_bits();
        let sign = ((x >> 16) & 0x8000) as u16;
        let a = x & 0x7fff_ffff;
        if a > 0x7f80_0000 {
            // NaN: quiet, with the top of the payload.
            return F16(sign | 0x7e00 | ((a >> 13) & 0x01ff) as u16);
        }
        if a >= 0x3880_0000 {
            // At least 2^-14 (the smallest normal half): rebias the exponent, round the
            // significand to 10 bits (ties to even); a carry into the exponent is the right
            // result, up to infinity.
            let r = a - ((127 - 15) << 23);
            let r = (r + 0x0fff + ((r >> 13) & 1)) >> 13;
            return F16(sign | r.min(0x7c00) as u16);
        }
        // Subnormal (or zero): the value in units of 2^-24 (exact: a power-of-two scaling of a
        // value below 2^-14), rounded to an integer ties to even; 1024 is the smallest normal,
        // whose pattern is 0x0400.
        let m = (f32::from_bits(a) * 16_777_216.0).round_ties_even() as u16;
        F16(sign | m)
    }

    /// The exact `f32` value.
    pub fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let man = h & 0x03ff;
        let bits = match exp {
            0 => {
                let v = man as f32 / 16_777_216.0;
                return if sign != 0 { -v } else { v };
            }
            31 => 0x7f80_0000 | (man << 13),
            _ => ((exp + 127 - 15) << 23) | (man << 13),
        };
        f32::from_bits(sign | bits)
    }
}

impl BF16 {
    /// The value with bit pattern `bits`.
    pub const fn from_bits(bits: u16) -> Self {
        BF16(bits)
    }

    /// The bit pattern.
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// `f` rounded to nearest-even (beyond the largest finite bfloat16 to infinity; NaN to a
    /// quiet NaN).
    pub fn from_f32(f: f32) -> Self {
        let u = f.to_bits();
        if (u & 0x7fff_ffff) > 0x7f80_0000 {
            return BF16(((u >> 16) | 0x40) as u16);
        }
        BF16(((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16)
    }

    /// The exact `f32` value.
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

macro_rules! common {
    ($($t:ident),*) => {$(
        impl From<$t> for f32 {
            fn from(v: $t) -> f32 {
                v.to_f32()
            }
        }
        impl PartialEq for $t {
            fn eq(&self, o: &Self) -> bool {
                self.to_f32() == o.to_f32()
            }
        }
        impl PartialOrd for $t {
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                self.to_f32().partial_cmp(&o.to_f32())
            }
        }
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.to_f32(), f)
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.to_f32(), f)
            }
        }
    )*};
}
common!(F16, BF16);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finite pattern (both signs), in increasing order of magnitude.
    fn finite<T>(max_exp_bits: u16, from: fn(u16) -> T) -> impl Iterator<Item = (u16, T)> {
        (0..max_exp_bits).map(move |b| (b, from(b)))
    }

    #[test]
    fn f16_round_trips_and_known_values() {
        for b in 0..=u16::MAX {
            let h = F16::from_bits(b);
            let f = h.to_f32();
            if f.is_nan() {
                assert!(F16::from_f32(f).to_f32().is_nan(), "{b:#x}");
                continue;
            }
            assert_eq!(F16::from_f32(f).to_bits(), b, "{b:#x} -> {f}");
        }
        assert_eq!(F16::from_f32(1.0).to_bits(), 0x3c00);
        assert_eq!(F16::from_f32(-2.0).to_bits(), 0xc000);
        assert_eq!(F16::from_f32(65504.0).to_bits(), 0x7bff);
        assert_eq!(F16::from_f32(65519.99).to_bits(), 0x7bff);
        assert_eq!(F16::from_f32(65520.0).to_bits(), 0x7c00); // the tie rounds to even: inf
        assert_eq!(F16::from_f32(f32::INFINITY).to_bits(), 0x7c00);
        assert_eq!(F16::from_f32(f32::NEG_INFINITY).to_bits(), 0xfc00);
        assert_eq!(F16::from_f32(5.960_464_5e-8).to_bits(), 0x0001); // 2^-24
        assert_eq!(F16::from_f32(2.980_232_2e-8).to_bits(), 0x0000); // 2^-25: tie to even 0
        assert_eq!(F16::from_f32(-0.0).to_bits(), 0x8000);
        assert_eq!(F16::from_f32(1e-10).to_bits(), 0x0000);
    }

    /// Between two neighbours a and b (a < b, both finite, positive): values below the midpoint
    /// round to a, above it to b, and the midpoint itself to the one with the even pattern.
    fn check_midpoints<T: Copy>(
        name: &str,
        pats: impl Iterator<Item = (u16, T)>,
        to: fn(T) -> f32,
        from: fn(f32) -> u16,
    ) {
        let v: Vec<(u16, f32)> = pats.map(|(b, x)| (b, to(x))).collect();
        for w in v.windows(2) {
            let ((pa, a), (pb, b)) = (w[0], w[1]);
            let mid = ((a as f64 + b as f64) / 2.0) as f32; // exact: 16-bit values have few bits
            assert_eq!(mid as f64, (a as f64 + b as f64) / 2.0);
            let even = if pa % 2 == 0 { pa } else { pb };
            assert_eq!(from(mid), even, "{name}: midpoint of {pa:#x} and {pb:#x}");
            assert_eq!(
                from(f32::from_bits(mid.to_bits() - 1)),
                pa,
                "{name} below mid {pa:#x}"
            );
            assert_eq!(
                from(f32::from_bits(mid.to_bits() + 1)),
                pb,
                "{name} above mid {pa:#x}"
            );
            assert_eq!(
                from(-mid),
                even | 0x8000,
                "{name}: negative midpoint {pa:#x}"
            );
        }
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        check_midpoints("f16", finite(0x7c00, F16::from_bits), F16::to_f32, |f| {
            F16::from_f32(f).to_bits()
        });
    }

    #[test]
    fn bf16_round_trips_and_rounds_to_nearest_even() {
        for b in 0..=u16::MAX {
            let f = BF16::from_bits(b).to_f32();
            if f.is_nan() {
                assert!(BF16::from_f32(f).to_f32().is_nan());
            } else {
                assert_eq!(BF16::from_f32(f).to_bits(), b);
            }
        }
        check_midpoints("bf16", finite(0x7f80, BF16::from_bits), BF16::to_f32, |f| {
            BF16::from_f32(f).to_bits()
        });
        assert_eq!(BF16::from_f32(1.0).to_bits(), 0x3f80);
        assert_eq!(BF16::from_f32(f32::MAX).to_bits(), 0x7f80); // rounds up to infinity
    }

    #[test]
    fn comparisons_are_the_float_ones() {
        assert_eq!(F16::from_f32(0.0), F16::from_f32(-0.0));
        assert!(F16::from_f32(-1.0) < F16::from_f32(0.5));
        let nan = F16::from_bits(0x7e00);
        assert!(nan != nan);
        assert_eq!(nan.partial_cmp(&F16::from_f32(1.0)), None);
        assert!(BF16::from_f32(2.0) > BF16::from_f32(1.5));
    }
}
