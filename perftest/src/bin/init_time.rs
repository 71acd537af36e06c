//! `init_time`: how long `rshmem::init()` takes once the CUDA context exists (the context is
//! created first, as an application would have it), per PE, plus the context creation itself.
//!
//! Every PE prints one JSON line (with or without `--json`).
//!
//! Run: `target/release/rshmemrun -n 4 target/release/init_time`

use std::process::ExitCode;
use std::time::Instant;

use rshmem_perftest::output::json_f64;
use rshmem_perftest::{cli, out, Kind, NoExtra, RunInfo, Spec};

const SPEC: Spec = Spec {
    name: "init_time",
    about: "time of rshmem::init() after the CUDA context exists, and of the context creation, per PE (one JSON line per PE)",
    kind: Kind::Fixed { iters: 1 },
    min_pes: 1,
};

fn main() -> ExitCode {
    let (opts, NoExtra {}) = cli::parse::<NoExtra>(&SPEC);
    rshmem::init_logging();
    let local: usize = std::env::var("RSHMEM_LOCAL_RANK")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let local_size: usize = std::env::var("RSHMEM_LOCAL_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let n_dev = rshmem::cuda::device_count(local_size);
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
    let r4 = |v: f64| json_f64((v * 1e4).round() / 1e4);
    out(&RunInfo::new(&world, &opts).line(serde_json::json!({
        "bench": "init_time",
        "pe": world.my_pe(),
        "n_pes": world.n_pes(),
        "gpu": world.gpu().is_some(),
        "context_s": r4(ctx_s),
        "init_after_context_s": r4(init_s),
    })));
    match world.finalize() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("init_time: {e}");
            ExitCode::FAILURE
        }
    }
}
