//! bidir_put_signal: PEs pair up (0↔1, 2↔3, …) and put to each other at the same time with
//! signals, at 1 KiB, 1 MiB and 128 MiB: every block of a kernel puts its chunk and adds 1 to the
//! peer's signal; each PE waits until its signal counts every block of its peer, then checks every
//! byte.
//!
//! Needs the GPU backend and an even number of PEs; on the CPU backend it uses the host API.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/bidir_put_signal`

#[path = "common.rs"]
mod common;

use std::process::ExitCode;

use common::{mismatches, pattern};
use rshmem::cudarc::driver::{LaunchConfig, PushKernelArg};
use rshmem::{Cmp, SignalOp};

const KERNEL: &str = include_str!("kernels/bidir_put_signal.cu");
const SIZES: [usize; 3] = [1 << 10, 1 << 20, 128 << 20];
const BLOCKS: u64 = 32;

fn run() -> rshmem::Result<bool> {
    let world = rshmem::init()?;
    let (me, n) = (world.my_pe(), world.n_pes());
    if n % 2 != 0 {
        return Err(rshmem::Error::InvalidArgument {
            call: "bidir_put_signal",
            reason: format!("needs an even number of PEs, got {n}"),
        });
    }
    let peer = me ^ 1;
    let max = *SIZES.iter().max().unwrap_or(&0);
    let src = world.malloc::<u8>(max)?;
    let dest = world.malloc::<u8>(max)?;
    let sig = world.calloc::<u64>(1)?;
    let module = match world.gpu() {
        Some(_) => Some(world.load_module(KERNEL)?),
        None => None,
    };
    let mut ok = true;
    let mut expected_sig = 0u64;
    for (round, &size) in SIZES.iter().enumerate() {
        let round = round as u64 + 1;
        let data: Vec<u8> = (0..size).map(|i| pattern(me, round, i)).collect();
        src.copy_from_slice(&data)?;
        dest.copy_from_slice(&vec![0xEE; size])?;
        world.barrier_all()?;
        match (&module, world.gpu()) {
            (Some(m), Some(gpu)) => {
                let f = m.function("bidir_put")?;
                let stream = &gpu.stream;
                let (nb, pe) = (size as u64, peer as i32);
                let cfg = LaunchConfig {
                    grid_dim: (BLOCKS as u32, 1, 1),
                    block_dim: (512, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: bidir_put(uint8_t*, const uint8_t*, size_t, uint64_t*, int): SymBuf
                // arguments pass their symmetric addresses (live until the sync below).
                unsafe {
                    stream
                        .launch_builder(&f)
                        .arg(&dest)
                        .arg(&src)
                        .arg(&nb)
                        .arg(&sig)
                        .arg(&pe)
                        .launch(cfg)
                }?;
                expected_sig += BLOCKS;
                world.signal_wait_until_on_stream(sig.as_ptr(), Cmp::Ge, expected_sig, stream)?;
                stream.synchronize()?;
            }
            _ => {
                expected_sig += 1;
                world.put_signal(dest.as_ptr(), &data, sig.as_ptr(), 1, SignalOp::Add, peer)?;
                world.signal_wait_until(sig.as_ptr(), Cmp::Ge, expected_sig)?;
            }
        }
        let got = dest.to_vec()?;
        let bad = mismatches(&got[..size], peer, round);
        if bad == 0 {
            println!("{me}: {size} bytes from PE {peer} matched");
        } else {
            println!("{me}: {size} bytes from PE {peer}: {bad} WRONG");
            ok = false;
        }
        world.barrier_all()?;
    }
    common::free_all(&world, [sig], [dest, src])?;
    world.finalize()?;
    Ok(ok)
}

fn main() -> ExitCode {
    common::main("bidir_put_signal", run)
}
