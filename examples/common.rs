//! Helpers shared by the examples (included with `#[path]`; not a public API).

use rshmem::cudarc::driver::DriverError;

/// The value element `i` of PE `pe`'s buffer holds in round `round`: distinct per PE, index and
/// round, so a wrong PE, offset or stale round is caught.
pub fn pattern(pe: usize, round: u64, i: usize) -> u8 {
    let x = (pe as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (i as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ round;
    (x ^ (x >> 29) ^ (x >> 47)) as u8
}

/// A CUDA error from an example, as an rshmem error.
pub fn cuda(call: &'static str, what: &str, e: DriverError) -> rshmem::Error {
    rshmem::Error::Cuda {
        call,
        what: what.to_string(),
        code: format!("{e:?}"),
    }
}

/// Counts the bytes of `got` that differ from PE `pe`'s pattern.
pub fn mismatches(got: &[u8], pe: usize, round: u64) -> usize {
    got.iter()
        .enumerate()
        .filter(|&(i, &b)| b != pattern(pe, round, i))
        .count()
}
