//! Ring shift: every PE puts its PE number into a symmetric int on the next PE, then all meet at
//! a barrier and print what arrived (the output of NVSHMEM's introductory example).
//!
//! With GPUs (one per PE) the put is a device `p` from a kernel, followed by
//! `barrier_all_on_stream`; without, it is a host `p` and `barrier_all` on the CPU backend.
//!
//! Run: `target/release/rshmemrun -n 4 target/release/ring_shift`

use std::process::ExitCode;

use rshmem::cudarc::driver::{LaunchConfig, PushKernelArg};

const KERNEL: &str = include_str!("kernels/ring_shift.cu");

fn run() -> rshmem::Result<()> {
    let world = rshmem::init()?;
    let (me, n) = (world.my_pe(), world.n_pes());
    let message = world.calloc::<i32>(1)?;
    if let Some(gpu) = world.gpu() {
        let module = world.load_module(KERNEL)?;
        let f = module.function("ring_shift")?;
        // cudarc's errors convert into rshmem::Error with `?`.
        let stream = gpu.ctx.new_stream()?;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: ring_shift takes one `int*`; a SymBuf argument passes its symmetric (GPU heap)
        // address, and `message` outlives the kernel (synchronized below).
        unsafe { stream.launch_builder(&f).arg(&message).launch(cfg) }?;
        world.barrier_all_on_stream(&stream)?;
        stream.synchronize()?;
    } else {
        world.p(message.as_ptr(), me as i32, (me + 1) % n)?;
        world.barrier_all()?;
    }
    let got = message.read(0)?;
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
    // Opt in to rshmem's log lines (warnings by default; RSHMEM_LOG=rshmem=debug for more).
    rshmem::init_logging();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ring_shift: {e}");
            ExitCode::FAILURE
        }
    }
}
