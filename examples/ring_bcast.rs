//! Ring broadcast: PE 0's buffer travels around the ring hop by hop. Each PE waits for the
//! signal from its left neighbour, checks every element, and forwards the buffer to its right
//! neighbour with one `put_signal` (data first, then the signal).
//!
//! Run: `target/release/rshmemrun -n 4 target/release/ring_bcast [ELEMENTS]`

use std::process::ExitCode;

use rshmem::{Cmp, SignalOp};

fn pattern(i: usize) -> u64 {
    (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5DEE_CE66_D1CE_4E5B
}

fn run() -> rshmem::Result<bool> {
    let elems: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 16);
    let world = rshmem::init()?;
    let (me, n) = (world.my_pe(), world.n_pes());
    let data = world.calloc::<u64>(elems)?;
    let signal = world.calloc::<u64>(1)?;

    if me == 0 {
        let src: Vec<u64> = (0..elems).map(pattern).collect();
        data.copy_from_slice(&src)?;
    } else {
        world.signal_wait_until(signal.as_ptr(), Cmp::Eq, 1)?;
    }
    let got = data.to_vec()?;
    let bad = got
        .iter()
        .enumerate()
        .filter(|&(i, v)| *v != pattern(i))
        .count();
    if me + 1 < n {
        world.put_signal(
            data.as_ptr(),
            &got,
            signal.as_ptr(),
            1,
            SignalOp::Set,
            me + 1,
        )?;
    }
    if bad == 0 {
        println!("{me}: data matched ({elems} elements from PE 0)");
    } else {
        println!("{me}: data MISMATCH ({bad} of {elems} elements wrong)");
    }
    world.barrier_all()?;
    world.free(signal)?;
    world.free(data)?;
    world.finalize()?;
    Ok(bad == 0)
}

fn main() -> ExitCode {
    rshmem::init_logging();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ring_bcast: {e}");
            ExitCode::FAILURE
        }
    }
}
