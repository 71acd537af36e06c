//! Little-endian frames, the one codec of the runtime's wire formats: the fixed-layout headers
//! of the TCP transport and of UCX's atomic messages ([`put`] and [`get`] at constant offsets
//! of a byte array whose length the caller fixed or checked, [`bits`] and [`unbits`] for a
//! byte of flags), and the variable payloads PEs
//! exchange at set-up ([`push`] appends, [`Reader`] reads back and names what was missing, so
//! a malformed payload from a peer is an error, never a panic).

/// An integer as little-endian bytes.
pub trait Le: Copy {
    /// Bytes.
    const N: usize;
    /// Writes it into `b` (exactly `N` bytes).
    fn write(self, b: &mut [u8]);
    /// Reads it from `b` (exactly `N` bytes).
    fn read(b: &[u8]) -> Self;
}

macro_rules! le {
    ($($t:ty),*) => {$(
        impl Le for $t {
            const N: usize = std::mem::size_of::<$t>();
            fn write(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_le_bytes());
            }
            fn read(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    )*};
}

le!(u8, u16, u32, u64);

/// Writes `v` at byte `at` of the frame `b`. The layout is fixed: `at + size` lies inside `b`
/// (a constant offset into an array of the frame's length).
pub fn put<T: Le>(b: &mut [u8], at: usize, v: T) {
    v.write(&mut b[at..at + T::N]);
}

/// Reads the integer at byte `at` of the frame `b` (a fixed layout, as for [`put`]; the caller
/// checked the length of a frame a peer sent).
pub fn get<T: Le>(b: &[u8], at: usize) -> T {
    T::read(&b[at..at + T::N])
}

/// A byte of flags: `flags[i]` is bit `i` (at most 8).
pub fn bits<const N: usize>(flags: [bool; N]) -> u8 {
    const { assert!(N <= 8) };
    flags
        .iter()
        .enumerate()
        .fold(0, |b, (i, &on)| b | (u8::from(on) << i))
}

/// The inverse of [`bits`]: bit `i` of `b` as element `i`; None when a bit above the `N` known
/// ones is set (a flag this side does not know).
pub fn unbits<const N: usize>(b: u8) -> Option<[bool; N]> {
    const { assert!(N <= 8) };
    if N < 8 && b >> N != 0 {
        return None;
    }
    Some(std::array::from_fn(|i| b >> i & 1 != 0))
}

/// Appends `v` to a payload.
pub fn push<T: Le>(out: &mut Vec<u8>, v: T) {
    let at = out.len();
    out.resize(at + T::N, 0);
    put(out, at, v);
}

/// Little-endian reader of a peer's payload that reports what was missing.
pub struct Reader<'a> {
    /// What is left to read.
    pub b: &'a [u8],
    /// What the payload is (for errors).
    pub what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader of the payload `b` (`what`, for errors) after its 4-byte magic and its
    /// version byte, both checked.
    pub fn open(
        b: &'a [u8],
        what: &'static str,
        magic: [u8; 4],
        version: u8,
    ) -> Result<Reader<'a>, String> {
        let mut r = Reader { b, what };
        if r.take(4)? != magic {
            return Err(format!("not {what} (bad magic)"));
        }
        let v = r.u8()?;
        if v != version {
            return Err(format!(
                "{what} of version {v}, this rshmem speaks {version} (mixed rshmem versions in one job?)"
            ));
        }
        Ok(r)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err(format!(
                "truncated {} ({} bytes left, {n} needed)",
                self.what,
                self.b.len()
            ));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }

    /// The next little-endian integer.
    pub fn le<T: Le>(&mut self) -> Result<T, String> {
        self.take(T::N).map(T::read)
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8, String> {
        self.le()
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> Result<u16, String> {
        self.le()
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> Result<u32, String> {
        self.le()
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Result<u64, String> {
        self.le()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_frames_and_payloads_round_trip_little_endian() {
        let mut b = [0u8; 16];
        put(&mut b, 0, 0x0102u16);
        put(&mut b, 4, 0x0a0b0c0du32);
        put(&mut b, 8, u64::MAX - 1);
        assert_eq!(b[..8], [2, 1, 0, 0, 0x0d, 0x0c, 0x0b, 0x0a]);
        assert_eq!(get::<u16>(&b, 0), 0x0102);
        assert_eq!(get::<u32>(&b, 4), 0x0a0b0c0d);
        assert_eq!(get::<u64>(&b, 8), u64::MAX - 1);
        let mut out = b"RSHM".to_vec();
        push(&mut out, 3u8);
        push(&mut out, 7u32);
        push(&mut out, 9u64);
        let mut r = Reader::open(&out, "test payload", *b"RSHM", 3).expect("header");
        assert_eq!((r.u32(), r.u64()), (Ok(7), Ok(9)));
        let e = r.u8().expect_err("nothing left");
        assert!(e.contains("truncated test payload"), "{e}");
        assert_eq!(bits([true, false, true]), 0b101);
        assert_eq!(unbits::<3>(0b101), Some([true, false, true]));
        assert_eq!(unbits::<3>(0b1000), None, "an unknown flag");
        assert_eq!(unbits::<8>(0xff), Some([true; 8]));
        let e = Reader::open(&out, "test payload", *b"RSHM", 4)
            .err()
            .expect("version");
        assert!(e.contains("version 3"), "{e}");
    }
}
