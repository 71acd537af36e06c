//! `gpu_perftest`: every GPU benchmark in one program (device put/get bandwidth, p ping-pong,
//! fetch_add latency, device barriers, barrier_all_on_stream, putmem_on_stream bandwidth, host
//! putmem + quiet and host barrier on the GPU heap, the team collectives on stream), so one
//! launch measures everything. `--coll` runs only the collectives, `--quick` fewer sizes,
//! `--calls` only host-issued calls on a stream one at a time (the rows
//! `examples/python/calls_bench.py` prints for the same calls from Python).
//!
//! It takes the options of every perftest program (`--help`): `-b/-e` (`--min-size`,
//! `--max-size`) replace the default sizes of the bandwidth and collective sweeps, `-n`
//! (`--iters`) the iterations of the latency rows.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/gpu_perftest [--json] [--quick]`
//! (with 4 PEs the barrier rows are the 4-PE numbers; the point-to-point rows use PEs 0 and 1).

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use rshmem_perftest::gpu::{Gpu, Row};
use rshmem_perftest::{cli, Kind, Options, Progress, RunInfo, Spec};

const SPEC: Spec = Spec {
    name: "gpu_perftest",
    about: "the GPU benchmarks (device RMA, atomics, barriers, on-stream RMA and collectives, host calls on the GPU heap) in one launch",
    // Sizes apply (-b/-e replace the default sweeps), so not `Kind::Fixed`.
    kind: Kind::Bandwidth,
    min_pes: 2,
};

/// The options only this program has.
#[derive(Debug, Clone, Args, Serialize)]
#[command(next_help_heading = "gpu_perftest")]
struct GpuArgs {
    /// Fewer sizes (2 MiB and 128 MiB bandwidth, 8 B / 1 MiB / 16 MiB collectives)
    #[arg(long)]
    quick: bool,
    /// Only the collectives on stream
    #[arg(long)]
    coll: bool,
    /// Only host-issued calls on a stream, one at a time (8-byte put + quiet, alltoall at
    /// 8 B / 64 KiB / 1 MiB per PE unless -b/-e are given): the rows that
    /// examples/python/calls_bench.py prints for the same calls made from Python
    #[arg(long, conflicts_with = "coll")]
    calls: bool,
}

/// What the JSON rows record as `options`.
#[derive(Serialize)]
struct AllOptions<'a> {
    #[serde(flatten)]
    common: &'a Options,
    #[serde(flatten)]
    gpu: &'a GpuArgs,
}

fn run(opts: &Options, g_args: &GpuArgs) -> rshmem::Result<bool> {
    let world = rshmem::init()?;
    if world.n_pes() < 2 {
        eprintln!(
            "gpu_perftest: needs at least 2 PEs (this job has 1); run it as `rshmemrun -n 2 gpu_perftest`"
        );
        world.finalize()?;
        return Ok(false);
    }
    let Some(g) = Gpu::new(&world)? else {
        eprintln!("gpu_perftest: needs the GPU backend (no GPU found); nothing measured");
        world.finalize()?;
        return Ok(false);
    };
    let mut progress = Progress::new(SPEC.name, world.my_pe(), opts.quiet);
    let rows = if g_args.calls {
        let sizes = if opts.sizes_given {
            opts.sizes()
        } else {
            vec![8, 64 << 10, 1 << 20]
        };
        progress.show("host calls on a stream");
        g.host_calls_on_stream(opts.iters.unwrap_or(2_000), &sizes)?
    } else {
        all_rows(&g, opts, g_args, &mut progress)?
    };
    progress.clear();
    if world.my_pe() == 0 {
        let info = opts.json.then(|| {
            RunInfo::new(
                &world,
                &AllOptions {
                    common: opts,
                    gpu: g_args,
                },
            )
        });
        if !opts.json {
            rshmem_perftest::out(&format!(
                "{:<28} {:>12} {:>12} {:<5} note",
                "bench", "size", "value", "unit"
            ));
        }
        for r in &rows {
            r.print(info.as_ref());
        }
        if !opts.json {
            rshmem_perftest::out(&format!(
                "init: {:.3} s on PE 0 (this run, CUDA context creation included)",
                world.init_time().as_secs_f64()
            ));
        }
    }
    drop(g);
    world.finalize()?;
    Ok(true)
}

/// Every benchmark (or with `--coll` only the collectives on stream).
fn all_rows(
    g: &Gpu<'_>,
    opts: &Options,
    g_args: &GpuArgs,
    progress: &mut Progress,
) -> rshmem::Result<Vec<Row>> {
    let quick = g_args.quick;
    let iters = opts.iters.unwrap_or(10_000);
    let lat_iters = i32::try_from(iters).unwrap_or(i32::MAX);
    let host_iters = opts.iters.unwrap_or(2_000);
    let mut rows: Vec<Row> = Vec::new();
    if !g_args.coll {
        let bw_sizes: Vec<usize> = if opts.sizes_given {
            opts.sizes()
        } else if quick {
            vec![2 << 20, 128 << 20]
        } else {
            (3..=28).map(|s| 1usize << s).collect()
        };
        progress.show("device put bandwidth");
        rows.extend(g.rma_bw(false, &bw_sizes, 132)?);
        progress.show("device get bandwidth");
        rows.extend(g.rma_bw(true, &bw_sizes, 132)?);
        progress.show("device p latency");
        rows.extend(g.p_latency(lat_iters)?);
        progress.show("device atomic latency");
        rows.extend(g.atomic_latency(lat_iters)?);
        progress.show("device barrier latency");
        rows.extend(g.barrier_latency(lat_iters)?);
        progress.show("barrier_all_on_stream");
        rows.extend(g.barrier_on_stream(host_iters)?);
        let stream_sizes: Vec<usize> = if opts.sizes_given {
            opts.sizes()
        } else if quick {
            vec![256 << 20]
        } else {
            vec![1 << 20, 16 << 20, 64 << 20, 256 << 20]
        };
        progress.show("putmem_on_stream bandwidth");
        rows.extend(g.put_on_stream_bw(&stream_sizes)?);
    }
    let coll_sizes: Vec<usize> = if opts.sizes_given {
        opts.sizes()
    } else if quick {
        vec![8, 1 << 20, 16 << 20]
    } else {
        vec![
            8,
            64,
            1 << 10,
            16 << 10,
            128 << 10,
            1 << 20,
            4 << 20,
            16 << 20,
        ]
    };
    progress.show("collectives on stream");
    rows.extend(g.coll_on_stream(&coll_sizes)?);
    if !g_args.coll {
        progress.show("host calls on the GPU heap");
        rows.extend(g.host_latencies(host_iters)?);
    }
    Ok(rows)
}

fn main() -> ExitCode {
    let (opts, g_args) = cli::parse::<GpuArgs>(&SPEC);
    if opts.same_slot {
        eprintln!("gpu_perftest: --same-slot applies to shmem_put_bw and shmem_get_bw only");
        return ExitCode::from(2);
    }
    rshmem::init_logging();
    match run(&opts, &g_args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("gpu_perftest: {e}");
            ExitCode::FAILURE
        }
    }
}
