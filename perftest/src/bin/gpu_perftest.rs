//! `gpu_perftest`: every GPU benchmark in one program (device put/get bandwidth, p ping-pong,
//! fetch_add latency, device barriers, barrier_all_on_stream, putmem_on_stream bandwidth, host
//! putmem + quiet and host barrier on the GPU heap, the team collectives on stream), so one
//! launch measures everything. `--coll` runs only the collectives.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/gpu_perftest [--json] [--quick]`
//! (with 4 PEs the barrier rows are the 4-PE numbers; the point-to-point rows use PEs 0 and 1).

use std::process::ExitCode;

use rshmem_perftest::gpu::{Gpu, Row};

fn run() -> rshmem::Result<bool> {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    let world = rshmem::init()?;
    if world.n_pes() < 2 {
        eprintln!("gpu_perftest: needs at least 2 PEs");
        world.finalize()?;
        return Ok(false);
    }
    let Some(g) = Gpu::new(&world)? else {
        eprintln!("gpu_perftest: needs the GPU backend (no GPU found); nothing measured");
        world.finalize()?;
        return Ok(false);
    };
    let mut rows: Vec<Row> = Vec::new();
    let coll_only = args.iter().any(|a| a == "--coll");
    if !coll_only {
        let bw_sizes: Vec<usize> = if quick {
            vec![2 << 20, 128 << 20]
        } else {
            (3..=28).step_by(1).map(|s| 1usize << s).collect()
        };
        rows.extend(g.rma_bw(false, &bw_sizes, 132)?);
        rows.extend(g.rma_bw(true, &bw_sizes, 132)?);
        rows.extend(g.p_latency(10_000)?);
        rows.extend(g.atomic_latency(10_000)?);
        rows.extend(g.barrier_latency(10_000)?);
        rows.extend(g.barrier_on_stream(2_000)?);
        let stream_sizes: Vec<usize> = if quick {
            vec![256 << 20]
        } else {
            vec![1 << 20, 16 << 20, 64 << 20, 256 << 20]
        };
        rows.extend(g.put_on_stream_bw(&stream_sizes)?);
    }
    let coll_sizes: Vec<usize> = if quick {
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
    rows.extend(g.coll_on_stream(&coll_sizes)?);
    if !coll_only {
        rows.extend(g.host_latencies(2_000)?);
    }
    if world.my_pe() == 0 {
        if !json {
            println!(
                "{:<28} {:>12} {:>12} {:<5} note",
                "bench", "size", "value", "unit"
            );
        }
        for r in &rows {
            r.print(json);
        }
        if !json {
            println!(
                "init: {:.3} s on PE 0 (this run, CUDA context creation included)",
                world.init_time().as_secs_f64()
            );
        }
    }
    world.finalize()?;
    Ok(true)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("gpu_perftest: {e}");
            ExitCode::FAILURE
        }
    }
}
