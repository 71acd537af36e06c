//! device_put: inside a user kernel, one block puts a buffer to the next PE with
//! `rshmem_putmem_signal_block`; the target waits for the signal on its stream and checks every
//! byte. Three rounds with fresh data each, so stale data is caught.
//!
//! Needs the GPU backend; on the CPU backend it does the same with the host API and says so.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/device_put [BYTES]`

#[path = "common.rs"]
mod common;

use std::process::ExitCode;

use common::{mismatches, pattern};
use rshmem::cudarc::driver::{LaunchConfig, PushKernelArg};
use rshmem::{Cmp, SignalOp};

const KERNEL: &str = include_str!("kernels/device_put.cu");

fn run() -> rshmem::Result<bool> {
    let nbytes: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or((1 << 20) + 13);
    let world = rshmem::init()?;
    let (me, n) = (world.my_pe(), world.n_pes());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let src = world.malloc::<u8>(nbytes)?;
    let dest = world.malloc::<u8>(nbytes)?;
    let sig = world.calloc::<u64>(1)?;
    let module = match world.gpu() {
        Some(_) => Some(world.load_module(KERNEL)?),
        None => None,
    };
    let mut ok = true;
    for round in 1..=3u64 {
        let data: Vec<u8> = (0..nbytes).map(|i| pattern(me, round, i)).collect();
        src.copy_from_slice(&data)?;
        dest.copy_from_slice(&vec![0xEE; nbytes])?; // poison
        world.barrier_all()?;
        match (&module, world.gpu()) {
            (Some(m), Some(gpu)) => {
                let f = m.function("device_put")?;
                let stream = &gpu.stream;
                let (nb, pe) = (nbytes as u64, to as i32);
                let cfg = LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (1024, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: device_put(uint8_t*, const uint8_t*, size_t, uint64_t*, uint64_t, int):
                // SymBuf arguments pass their symmetric addresses (live until the sync below),
                // then plain values.
                unsafe {
                    stream
                        .launch_builder(&f)
                        .arg(&dest)
                        .arg(&src)
                        .arg(&nb)
                        .arg(&sig)
                        .arg(&round)
                        .arg(&pe)
                        .launch(cfg)
                }?;
                world.signal_wait_until_on_stream(sig.as_ptr(), Cmp::Eq, round, stream)?;
                stream.synchronize()?;
            }
            _ => {
                world.put_signal(dest.as_ptr(), &data, sig.as_ptr(), round, SignalOp::Set, to)?;
                world.signal_wait_until(sig.as_ptr(), Cmp::Eq, round)?;
            }
        }
        let got = dest.to_vec()?;
        let bad = mismatches(&got, from, round);
        let path = if module.is_some() {
            "device"
        } else {
            "host (no GPU)"
        };
        if bad == 0 {
            println!(
                "{me}: round {round}: {nbytes} bytes from PE {from} matched ({path} put_signal)"
            );
        } else {
            println!("{me}: round {round}: {bad} of {nbytes} bytes from PE {from} WRONG ({path} put_signal)");
            ok = false;
        }
        world.barrier_all()?;
    }
    common::free_all(&world, [sig], [dest, src])?;
    world.finalize()?;
    Ok(ok)
}

fn main() -> ExitCode {
    common::main("device_put", run)
}
