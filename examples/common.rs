//! Helpers shared by the examples (included with `#[path]`; not a public API).

use std::process::ExitCode;

use rshmem::{SymBuf, World};

/// The value element `i` of PE `pe`'s buffer holds in round `round`: distinct per PE, index and
/// round, so a wrong PE, offset or stale round is caught.
pub fn pattern(pe: usize, round: u64, i: usize) -> u8 {
    let x = (pe as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (i as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ round;
    (x ^ (x >> 29) ^ (x >> 47)) as u8
}

/// Counts the bytes of `got` that differ from PE `pe`'s pattern.
pub fn mismatches(got: &[u8], pe: usize, round: u64) -> usize {
    got.iter()
        .enumerate()
        .filter(|&(i, &b)| b != pattern(pe, round, i))
        .count()
}

/// Installs rshmem's logger (`rshmem::init_logging`: warnings, or what `RSHMEM_LOG` asks for),
/// runs the example and turns its outcome into the exit code (errors are
/// printed with the example's name).
pub fn main(name: &str, run: fn() -> rshmem::Result<bool>) -> ExitCode {
    rshmem::init_logging();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Frees the examples' buffers (collective), in order.
pub fn free_all<'w, const A: usize, const B: usize>(
    world: &'w World,
    words: [SymBuf<'w, u64>; A],
    bytes: [SymBuf<'w, u8>; B],
) -> rshmem::Result<()> {
    for b in words {
        world.free(b)?;
    }
    for b in bytes {
        world.free(b)?;
    }
    Ok(())
}
