//! cudarc and rshmem together (GPU backend): the program's own `CudaContext`, stream and
//! `CudaSlice` next to symmetric buffers.
//!
//! Each PE fills a `CudaSlice` of its own, puts it into the symmetric buffer of the next PE with
//! `put_from_device_on_stream` on its own stream, runs a kernel that takes the symmetric buffer
//! as an argument (`.arg(&inbox)`), copies the result back into a `CudaSlice` with
//! `get_to_device_on_stream` and to the host with cudarc's `memcpy_dtoh`, reading the symmetric
//! buffer through `inbox.device()`. Every cudarc error converts into `rshmem::Error` with `?`.
//! On the CPU backend it says so and exits 0.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/cudarc_interop`

use std::process::ExitCode;

use rshmem::cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};

const KERNEL: &str = include_str!("kernels/cudarc_interop.cu");
const N: usize = 1 << 16;

fn run() -> rshmem::Result<bool> {
    let world = rshmem::init()?;
    let (me, n) = (world.my_pe(), world.n_pes());
    let Some(gpu) = world.gpu() else {
        if me == 0 {
            println!("cudarc_interop: CPU backend, nothing to show (needs one GPU per PE)");
        }
        world.finalize()?;
        return Ok(true);
    };
    // The program's own context handle (the device's primary context, the one rshmem uses)
    // and stream.
    let ctx = CudaContext::new(gpu.ordinal)?;
    let stream = ctx.new_stream()?;
    let inbox = world.calloc::<f32>(N)?;
    let mine: Vec<f32> = (0..N).map(|i| (me * N + i) as f32).collect();
    let slice = stream.clone_htod(&mine)?; // a CudaSlice<f32> of this program
    world.barrier_all()?;

    // 1. A CudaSlice as the source of a put into the next PE's symmetric buffer.
    world.put_from_device_on_stream(inbox.as_ptr(), &slice, N, (me + 1) % n, &stream)?;
    world.barrier_all_on_stream(&stream)?;

    // 2. The symmetric buffer as a kernel argument.
    let module = world.load_module(KERNEL)?;
    let f = module.function("add_one")?;
    let cfg = LaunchConfig::for_num_elems(N as u32);
    let len = N as u64;
    // SAFETY: add_one(float*, unsigned long long): the SymBuf passes this PE's GPU-heap address
    // of N floats, which stays allocated until after the synchronize below.
    unsafe { stream.launch_builder(&f).arg(&inbox).arg(&len).launch(cfg) }?;

    // 3. Back into a CudaSlice of this PE, and the symmetric buffer read with cudarc.
    let mut back = stream.alloc_zeros::<f32>(N)?;
    world.get_to_device_on_stream(&mut back, inbox.as_ptr(), N, me, &stream)?;
    let via_slice = stream.clone_dtoh(&back)?;
    let mut via_sym = vec![0f32; N];
    stream.memcpy_dtoh(&inbox.device()?, &mut via_sym)?;
    stream.synchronize()?;

    let from = (me + n - 1) % n;
    let bad = (0..N)
        .filter(|&i| {
            let want = (from * N + i) as f32 + 1.0;
            via_slice[i] != want || via_sym[i] != want
        })
        .count();
    if bad == 0 {
        println!("{me}: {N} floats from PE {from}, +1 on the GPU: matched");
    } else {
        println!("{me}: {N} floats from PE {from}, +1 on the GPU: {bad} WRONG");
    }
    world.barrier_all()?;
    world.free(inbox)?;
    world.finalize()?;
    Ok(bad == 0)
}

fn main() -> ExitCode {
    rshmem::init_logging();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cudarc_interop: {e}");
            ExitCode::FAILURE
        }
    }
}
