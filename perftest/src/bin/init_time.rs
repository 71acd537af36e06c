//! `init_time`: how long `rshmem::init()` takes once the CUDA context exists (the context is
//! created first, as an application would have it), per PE, plus the context creation itself.
//!
//! Run: `target/release/rshmemrun -n 4 target/release/init_time`

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let local: usize = std::env::var("RSHMEM_LOCAL_RANK")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let n_dev = rshmem::cuda::device_count();
    let mut ctx_s = 0.0;
    let _ctx = if n_dev > 0 {
        let t = Instant::now();
        let c = rshmem::cudarc::driver::CudaContext::new(local % n_dev);
        ctx_s = t.elapsed().as_secs_f64();
        match c {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("init_time: creating the CUDA context failed: {e:?}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let t = Instant::now();
    let world = match rshmem::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("init_time: {e}");
            return ExitCode::FAILURE;
        }
    };
    let init_s = t.elapsed().as_secs_f64();
    println!(
        "{{\"bench\":\"init_time\",\"pe\":{},\"n_pes\":{},\"gpu\":{},\"context_s\":{ctx_s:.4},\"init_after_context_s\":{init_s:.4}}}",
        world.my_pe(),
        world.n_pes(),
        world.gpu().is_some()
    );
    match world.finalize() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("init_time: {e}");
            ExitCode::FAILURE
        }
    }
}
