//! proxy_latency: latency of device calls that go through the proxy (the host thread that
//! serves device requests to PEs not reachable by load/store) and the remote transport that
//! serves PE 1 (TCP, or UCX with `RSHMEM_REMOTE_TRANSPORT=ucx`).
//!
//! PE 0 runs one thread of a kernel that times `--iters` operations to PE 1 with
//! `%globaltimer` (after one untimed round): a bare ring round trip (NOP request), `p` 8 B +
//! quiet, `putmem` of 8 B / 4 KiB / 64 KiB from global memory + quiet, `putmem_signal` 8 B +
//! quiet, `atomic_fetch_add`, `g`, and a quiet with nothing outstanding. Needs the GPU backend
//! and a proxy, i.e. PEs that cannot reach each other by load/store: run it with
//! `RSHMEM_DISABLE_P2P=1` (two PEs may share one GPU).
//!
//! Run: `RSHMEM_DISABLE_P2P=1 target/release/rshmemrun -n 2 target/release/proxy_latency [--json] [--iters N]`

use std::process::ExitCode;

use rshmem::cudarc::driver::{LaunchConfig, PushKernelArg};
use rshmem::Error;
use rshmem_perftest::output::json_f64;
use rshmem_perftest::{cli, out as print_line, Kind, NoExtra, Options, RunInfo, Spec};

const SPEC: Spec = Spec {
    name: "proxy_latency",
    about: "latency of device calls served by the proxy over the remote transport (run with RSHMEM_DISABLE_P2P=1)",
    kind: Kind::Fixed { iters: 2000 },
    min_pes: 2,
};

const KERNEL: &str = include_str!("../../kernels/proxy_latency.cu");

/// (mode, name, bytes)
const CASES: &[(i32, &str, usize)] = &[
    (0, "ring round trip (nop)", 0),
    (5, "quiet, nothing outstanding", 0),
    (1, "p 8 B + quiet", 8),
    (2, "putmem + quiet", 8),
    (2, "putmem + quiet", 4096),
    (2, "putmem + quiet", 65536),
    (6, "putmem_signal + quiet", 8),
    (3, "atomic_fetch_add", 8),
    (4, "g 8 B", 8),
];

fn cuda(what: &str, e: rshmem::cudarc::driver::DriverError) -> Error {
    Error::Cuda {
        call: "proxy_latency",
        what: what.to_string(),
        code: format!("{e:?}"),
    }
}

fn run(opts: &Options) -> rshmem::Result<()> {
    let json = opts.json;
    let iters: i32 = i32::try_from(opts.iters.unwrap_or(2000)).unwrap_or(i32::MAX);
    let world = rshmem::init()?;
    let (me, n) = (world.my_pe(), world.n_pes());
    if n < 2 {
        return Err(Error::InvalidArgument {
            call: "proxy_latency",
            reason: "needs at least 2 PEs".into(),
        });
    }
    let Some(gpu) = world.gpu() else {
        if me == 0 {
            print_line("proxy_latency: no GPU backend, nothing to measure (SKIPPED)");
        }
        return world.finalize();
    };
    if world.device_state().proxy_slots == 0 {
        if me == 0 {
            print_line("proxy_latency: every PE is reachable by load/store, so there is no proxy; run with RSHMEM_DISABLE_P2P=1 (SKIPPED)");
        }
        return world.finalize();
    }
    let buf = world.calloc::<u64>(8192)?;
    let src = world.calloc::<u8>(65536)?;
    let out = world.calloc::<u64>(2)?;
    let module = world.load_module(KERNEL)?;
    let f = module.function("proxy_latency")?;
    let stream = &gpu.stream;
    world.barrier_all()?;
    if me == 0 {
        let info = json.then(|| RunInfo::new(&world, opts));
        if !json {
            let via = world.transport(1).map_or("?", |t| t.name);
            print_line(&format!(
                "# proxy_latency: PE 0 -> PE 1 through the proxy and {via}, {iters} operations per point"
            ));
            print_line(&format!(
                "{:<30} {:>10} {:>12}",
                "operation", "bytes", "us/op"
            ));
        }
        for &(mode, name, bytes) in CASES {
            let (b, s, o) = (
                buf.as_ptr() as u64,
                src.as_ptr() as u64,
                out.as_ptr() as u64,
            );
            let (nb, peer) = (bytes as u64, 1i32);
            let cfg = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: proxy_latency(int, uint64_t*, const uint8_t*, size_t, int, int,
            // unsigned long long*) with symmetric addresses of live allocations.
            unsafe {
                stream
                    .launch_builder(&f)
                    .arg(&mode)
                    .arg(&b)
                    .arg(&s)
                    .arg(&nb)
                    .arg(&peer)
                    .arg(&iters)
                    .arg(&o)
                    .launch(cfg)
            }
            .map_err(|e| cuda("launch", e))?;
            stream.synchronize().map_err(|e| cuda("synchronize", e))?;
            let ns = out.read(0).unwrap_or(0);
            let us = ns as f64 / 1e3 / iters as f64;
            match &info {
                Some(info) => print_line(&info.line(serde_json::json!({
                    "bench": "proxy_latency",
                    "op": name,
                    "bytes": bytes,
                    "iters": iters,
                    "us": json_f64((us * 1e3).round() / 1e3),
                }))),
                None => print_line(&format!("{name:<30} {bytes:>10} {us:>12.3}")),
            }
        }
    }
    world.barrier_all()?;
    world.free(out)?;
    world.free(src)?;
    world.free(buf)?;
    world.finalize()
}

fn main() -> ExitCode {
    let (opts, NoExtra {}) = cli::parse::<NoExtra>(&SPEC);
    rshmem::init_logging();
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy_latency: {e}");
            ExitCode::FAILURE
        }
    }
}
