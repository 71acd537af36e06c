//! Ring shift: every PE puts its PE number into a symmetric int on the next PE, then all meet at
//! a barrier and print what arrived (the output of NVSHMEM's introductory example).
//!
//! Run: `target/release/rshmemrun -n 4 target/release/ring_shift`

use std::process::ExitCode;

fn run() -> rshmem::Result<()> {
    let world = rshmem::init()?;
    let (me, n) = (world.my_pe(), world.n_pes());
    let message = world.calloc::<i32>(1)?;
    world.p(message.as_ptr(), me as i32, (me + 1) % n)?;
    world.barrier_all()?;
    let got = message.read(0).unwrap_or(-1);
    println!("{me}: received message {got}");
    let expected = ((me + n - 1) % n) as i32;
    world.free(message)?;
    world.finalize()?;
    if got != expected {
        eprintln!("ring_shift: PE {me} expected {expected}, got {got}");
        std::process::exit(1);
    }
    Ok(())
}

fn main() -> ExitCode {
    rshmem::init_logging();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ring_shift: {e}");
            ExitCode::FAILURE
        }
    }
}
