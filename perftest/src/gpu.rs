//! GPU benchmarks (the GPU backend: one PE per GPU). Device-side loops live in
//! `perftest/kernels/gpu_bench.cu`; kernels are timed with CUDA events (or `%globaltimer` inside
//! the kernel for latencies), so the numbers are device time, not host launch overhead.
//!
//! Every benchmark checks once that what it moved is right (data pattern or counter value)
//! and fails otherwise.

use std::sync::Arc;
use std::time::Instant;

use rshmem::cudarc::driver::sys::CUevent_flags;
use rshmem::cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use rshmem::{Error, Module, Result, SymBuf, World};

use crate::output::{json_f64, out, RunInfo};

/// The device loops.
pub const KERNELS: &str = include_str!("../kernels/gpu_bench.cu");

/// One result row.
#[derive(Debug, Clone)]
pub struct Row {
    /// Benchmark name.
    pub bench: String,
    /// Bytes per operation (0 when not applicable).
    pub size: usize,
    /// The measured value.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// Extra description (scope, PEs).
    pub note: String,
}

impl Row {
    /// Prints the row: a table line, or with `json` one JSON object (`bench`, `size`, `value`,
    /// `unit`, `note`, then the fields of `info`).
    pub fn print(&self, json: Option<&RunInfo>) {
        match json {
            Some(info) => out(&info.line(serde_json::json!({
                "bench": self.bench,
                "size": self.size,
                "value": json_f64((self.value * 1e4).round() / 1e4),
                "unit": self.unit,
                "note": self.note,
            }))),
            None => out(&format!(
                "{:<28} {:>12} {:>12.3} {:<5} {}",
                self.bench, self.size, self.value, self.unit, self.note
            )),
        }
    }
}

/// The benchmark context on one PE.
pub struct Gpu<'w> {
    /// The runtime.
    pub world: &'w World,
    module: Module,
    /// A stream of this PE's GPU for the benchmark's work.
    pub stream: Arc<CudaStream>,
}

fn cuda(what: &str, e: rshmem::cudarc::driver::DriverError) -> Error {
    Error::Cuda {
        call: "perftest",
        what: what.to_string(),
        code: format!("{e:?}"),
    }
}

fn bad(reason: String) -> Error {
    Error::InvalidArgument {
        call: "perftest",
        reason,
    }
}

/// Warms up with 2 iterations, picks the iteration count that takes about 20 ms, and returns the
/// best of 3 timed runs (milliseconds) with that count.
fn calibrated(run: impl Fn(usize) -> Result<f64>) -> Result<(f64, usize)> {
    run(2)?;
    let one = run(1)?.max(1e-3);
    let iters = ((20.0 / one) as usize).clamp(2, 10_000);
    let mut best = f64::MAX;
    for _ in 0..3 {
        best = best.min(run(iters)?);
    }
    Ok((best, iters))
}

/// Fails unless the first `n` bytes of this PE's `dst` equal `data`.
fn expect_pattern(name: &str, dst: &SymBuf<'_, u8>, data: &[u8], n: usize) -> Result<()> {
    let got = dst.to_vec()?;
    match (0..n).find(|&i| got[i] != data[i]) {
        Some(i) => Err(bad(format!(
            "{name}: byte {i} of {n} is {} instead of {}",
            got[i], data[i]
        ))),
        None => Ok(()),
    }
}

fn pattern(i: usize) -> u8 {
    ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u8
}

impl<'w> Gpu<'w> {
    /// None when the runtime is on the CPU backend.
    pub fn new(world: &'w World) -> Result<Option<Self>> {
        let Some(g) = world.gpu() else {
            return Ok(None);
        };
        let module = world.load_module(KERNELS)?;
        let stream = g.ctx.new_stream().map_err(|e| cuda("new stream", e))?;
        Ok(Some(Gpu {
            world,
            module,
            stream,
        }))
    }

    fn f(&self, name: &str) -> Result<CudaFunction> {
        self.module.function(name)
    }

    /// Runs `launch` between two timing events on the benchmark stream; returns milliseconds.
    fn timed(&self, launch: impl FnOnce(&CudaStream) -> Result<()>) -> Result<f64> {
        let s = &self.stream;
        let a = s
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| cuda("event", e))?;
        launch(s)?;
        let b = s
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| cuda("event", e))?;
        b.synchronize().map_err(|e| cuda("event sync", e))?;
        Ok(a.elapsed_ms(&b).map_err(|e| cuda("elapsed", e))? as f64)
    }

    fn sync(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda("stream sync", e))
    }

    /// Device put (`get == false`) or get bandwidth from PE 0 to PE 1, block scope, `blocks`
    /// CTAs × 1024 threads, for each size. PE 1 checks the data of the largest size.
    pub fn rma_bw(&self, get: bool, sizes: &[usize], blocks: u32) -> Result<Vec<Row>> {
        let w = self.world;
        let me = w.my_pe();
        let max = sizes.iter().copied().max().unwrap_or(0);
        let src = w.malloc::<u8>(max)?;
        let dst = w.malloc::<u8>(max)?;
        let data: Vec<u8> = (0..max).map(pattern).collect();
        src.copy_from_slice(&data)?;
        dst.copy_from_slice(&vec![0u8; max])?;
        w.barrier_all()?;
        let name = if get { "get_bw" } else { "put_bw" };
        let f = self.f(name)?;
        let mut rows = Vec::new();
        for &size in sizes {
            w.barrier_all()?;
            if me == 0 {
                // get: PE 0 reads PE 1's src into its own dst; put: PE 0 writes its src into PE 1's dst.
                let (d, s) = (dst.as_ptr() as u64, src.as_ptr() as u64);
                let (nb, peer) = (size as u64, 1i32);
                let cfg = LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (1024, 1, 1),
                    shared_mem_bytes: 0,
                };
                let launch = |iters: i32| -> Result<f64> {
                    self.timed(|st| {
                        // SAFETY: put_bw/get_bw(uint8_t*, const uint8_t*, size_t, int, int) with
                        // symmetric addresses of allocations of at least `size` bytes.
                        unsafe {
                            st.launch_builder(&f)
                                .arg(&d)
                                .arg(&s)
                                .arg(&nb)
                                .arg(&peer)
                                .arg(&iters)
                                .launch(cfg)
                        }
                        .map(drop)
                        .map_err(|e| cuda("launch", e))
                    })
                };
                let (best, iters) = calibrated(|i| launch(i as i32))?;
                let gbps = size as f64 * iters as f64 / (best * 1e-3) / 1e9;
                rows.push(Row {
                    bench: format!("shmem_{name}"),
                    size,
                    value: gbps,
                    unit: "GB/s",
                    note: format!("device, block scope, {blocks} CTAs x 1024 threads, 64 KiB pieces round robin, best of 3 × {iters} iters"),
                });
            }
            w.barrier_all()?;
        }
        // Correctness: the last transfer moved PE 0's / PE 1's pattern.
        let check_pe = if get { 0 } else { 1 };
        if me == check_pe {
            expect_pattern(name, &dst, &data, sizes.last().copied().unwrap_or(0))?;
        }
        w.barrier_all()?;
        w.free(dst)?;
        w.free(src)?;
        Ok(rows)
    }

    /// p ping-pong between PE 0 and PE 1 (one thread each); one-way latency.
    pub fn p_latency(&self, iters: i32) -> Result<Vec<Row>> {
        let w = self.world;
        let me = w.my_pe();
        let flag = w.calloc::<u64>(1)?;
        let out = w.calloc::<u64>(2)?;
        let f = self.f("p_pingpong")?;
        let mut rows = Vec::new();
        for round in 0..2 {
            flag.write(0, 0)?;
            w.barrier_all()?;
            if me < 2 {
                let (fl, o) = (flag.as_ptr() as u64, out.as_ptr() as u64);
                let (peer, init) = (1 - me as i32, (me == 0) as i32);
                let cfg = LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (1, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: p_pingpong(uint64_t*, int, int, int, uint64_t*) with symmetric addresses.
                unsafe {
                    self.stream
                        .launch_builder(&f)
                        .arg(&fl)
                        .arg(&peer)
                        .arg(&iters)
                        .arg(&init)
                        .arg(&o)
                        .launch(cfg)
                }
                .map_err(|e| cuda("launch", e))?;
                self.sync()?;
            }
            w.barrier_all()?;
            if me == 0 && round == 1 {
                let ns = out.read(0).unwrap_or(0) as f64;
                let last = flag.read(0).unwrap_or(0);
                if last != iters as u64 {
                    return Err(bad(format!(
                        "p ping-pong: final flag {last}, expected {iters}"
                    )));
                }
                rows.push(Row {
                    bench: "shmem_p_latency".into(),
                    size: 8,
                    value: ns / 1e3 / (2.0 * iters as f64),
                    unit: "us",
                    note: format!("device, one way (round trip / 2), {iters} round trips"),
                });
            }
        }
        w.free(out)?;
        w.free(flag)?;
        Ok(rows)
    }

    /// fetch_add round trips from PE 0 to PE 1.
    pub fn atomic_latency(&self, iters: i32) -> Result<Vec<Row>> {
        let w = self.world;
        let me = w.my_pe();
        let counter = w.calloc::<u64>(1)?;
        let out = w.calloc::<u64>(2)?;
        let f = self.f("amo_latency")?;
        let mut rows = Vec::new();
        for round in 0..2u64 {
            w.barrier_all()?;
            if me == 0 {
                let (c, o) = (counter.as_ptr() as u64, out.as_ptr() as u64);
                let peer = 1i32;
                let cfg = LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (1, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: amo_latency(uint64_t*, int, int, uint64_t*) with symmetric addresses.
                unsafe {
                    self.stream
                        .launch_builder(&f)
                        .arg(&c)
                        .arg(&peer)
                        .arg(&iters)
                        .arg(&o)
                        .launch(cfg)
                }
                .map_err(|e| cuda("launch", e))?;
                self.sync()?;
                let ns = out.read(0).unwrap_or(0) as f64;
                let acc = out.read(1).unwrap_or(0);
                let n = iters as u64;
                let base = round * n;
                let want = n * base + n * (n - 1) / 2;
                if acc != want {
                    return Err(bad(format!(
                        "fetch_add: sum of fetched values {acc}, expected {want}"
                    )));
                }
                if round == 1 {
                    rows.push(Row {
                        bench: "shmem_atomic_latency".into(),
                        size: 8,
                        value: ns / 1e3 / iters as f64,
                        unit: "us",
                        note: format!("device fetch_add round trip, {iters} ops"),
                    });
                }
            }
            w.barrier_all()?;
        }
        if me == 1 {
            let v = counter.read(0).unwrap_or(0);
            if v != 2 * iters as u64 {
                return Err(bad(format!(
                    "fetch_add: counter is {v}, expected {}",
                    2 * iters
                )));
            }
        }
        w.barrier_all()?;
        w.free(out)?;
        w.free(counter)?;
        Ok(rows)
    }

    /// Device barrier_all latency at thread, warp and block scope (all PEs).
    pub fn barrier_latency(&self, iters: i32) -> Result<Vec<Row>> {
        let w = self.world;
        let out = w.calloc::<u64>(1)?;
        let f = self.f("barrier_loop")?;
        let mut rows = Vec::new();
        for (scope, threads, label) in [(0i32, 1u32, "thread"), (1, 32, "warp"), (2, 128, "block")]
        {
            let mut best = f64::MAX;
            for _ in 0..3 {
                w.barrier_all()?;
                let o = out.as_ptr() as u64;
                let cfg = LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (threads, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: barrier_loop(int, int, uint64_t*) with a symmetric address.
                unsafe {
                    self.stream
                        .launch_builder(&f)
                        .arg(&iters)
                        .arg(&scope)
                        .arg(&o)
                        .launch(cfg)
                }
                .map_err(|e| cuda("launch", e))?;
                self.sync()?;
                best = best.min(out.read(0).unwrap_or(0) as f64 / 1e3 / iters as f64);
            }
            if w.my_pe() == 0 {
                rows.push(Row {
                    bench: "barrier_latency".into(),
                    size: 0,
                    value: best,
                    unit: "us",
                    note: format!(
                        "device barrier_all, {label} scope, {} PEs, best of 3 × {iters}",
                        w.n_pes()
                    ),
                });
            }
        }
        w.barrier_all()?;
        w.free(out)?;
        Ok(rows)
    }

    /// barrier_all_on_stream back to back on every PE; time per barrier.
    pub fn barrier_on_stream(&self, iters: usize) -> Result<Vec<Row>> {
        let w = self.world;
        let mut best = f64::MAX;
        for _ in 0..3 {
            w.barrier_all()?;
            let ms = self.timed(|s| {
                for _ in 0..iters {
                    w.barrier_all_on_stream(s)?;
                }
                Ok(())
            })?;
            best = best.min(ms * 1e3 / iters as f64);
        }
        w.barrier_all()?;
        Ok(if w.my_pe() == 0 {
            vec![Row {
                bench: "barrier_all_on_stream".into(),
                size: 0,
                value: best,
                unit: "us",
                note: format!(
                    "{} PEs, {iters} back to back, stream time per barrier",
                    w.n_pes()
                ),
            }]
        } else {
            vec![]
        })
    }

    /// The team collectives on stream over the world team (NVSHMEM's `*_latency` collective
    /// perftests, on stream): alltoall, fcollect, broadcast, float sum reduce and
    /// reduce-scatter, each at `sizes` bytes per PE, back to back on every PE's stream; the
    /// stream time per collective on PE 0. Every size is checked once against a host
    /// reference before it is timed.
    pub fn coll_on_stream(&self, sizes: &[usize]) -> Result<Vec<Row>> {
        let w = self.world;
        let t = w.team_world();
        let n = w.n_pes();
        let me = w.my_pe();
        let max = sizes.iter().copied().max().unwrap_or(4).max(4) / 4;
        let src = w.malloc::<f32>(max * n)?;
        let dst = w.malloc::<f32>(max * n)?;
        let val = |pe: usize, i: usize| ((pe * 7 + i * 13) % 17) as f32 - 8.0;
        src.copy_from_slice(&(0..max * n).map(|i| val(me, i)).collect::<Vec<_>>())?;
        let mut rows = Vec::new();
        let names = [
            "alltoall_on_stream",
            "fcollect_on_stream",
            "broadcast_on_stream",
            "reduce_on_stream",
            "reducescatter_on_stream",
        ];
        for name in names {
            for &size in sizes {
                let m = (size / 4).max(1);
                let run = |s: &CudaStream| -> Result<()> {
                    match name {
                        "alltoall_on_stream" => {
                            w.alltoall_on_stream(&t, dst.as_ptr(), src.as_ptr(), m, s)
                        }
                        "fcollect_on_stream" => {
                            w.fcollect_on_stream(&t, dst.as_ptr(), src.as_ptr(), m, s)
                        }
                        "broadcast_on_stream" => {
                            w.broadcast_on_stream(&t, dst.as_ptr(), src.as_ptr(), m, 0, s)
                        }
                        "reduce_on_stream" => {
                            w.reduce_on_stream(&t, dst.as_ptr(), src.as_ptr(), m, rshmem::Sum, s)
                        }
                        _ => w.reducescatter_on_stream(
                            &t,
                            dst.as_ptr(),
                            src.as_ptr(),
                            m,
                            rshmem::Sum,
                            s,
                        ),
                    }
                };
                // Check once.
                w.barrier_all()?;
                run(&self.stream)?;
                self.sync()?;
                w.barrier_all()?;
                let got = dst.to_vec()?;
                let sum = |i: usize| (0..n).fold(0f32, |a, j| a + val(j, i));
                let want: Vec<f32> = match name {
                    "alltoall_on_stream" => {
                        (0..n * m).map(|i| val(i / m, me * m + i % m)).collect()
                    }
                    "fcollect_on_stream" => (0..n * m).map(|i| val(i / m, i % m)).collect(),
                    "broadcast_on_stream" => (0..m).map(|i| val(0, i)).collect(),
                    "reduce_on_stream" => (0..m).map(sum).collect(),
                    _ => (0..m).map(|i| sum(me * m + i)).collect(),
                };
                if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
                    return Err(bad(format!(
                        "{name} {size} B: element {i} is {} instead of {}",
                        got[i], want[i]
                    )));
                }
                // The same iteration count on every PE (collectives must match).
                let iters = match size {
                    0..=65536 => 2000,
                    65537..=1048576 => 500,
                    _ => 100,
                };
                let mut best = f64::MAX;
                for k in 0..4 {
                    w.barrier_all()?;
                    let ms = self.timed(|s| {
                        for _ in 0..(if k == 0 { 2 } else { iters }) {
                            run(s)?;
                        }
                        Ok(())
                    })?;
                    if k > 0 {
                        best = best.min(ms);
                    }
                }
                if me == 0 {
                    rows.push(Row {
                        bench: name.into(),
                        size: m * 4,
                        value: best * 1e3 / iters as f64,
                        unit: "us",
                        note: format!(
                            "{n} PEs, world team, float, bytes per PE, best of 3 × {iters} back to back"
                        ),
                    });
                }
            }
        }
        w.barrier_all()?;
        w.free(dst)?;
        w.free(src)?;
        Ok(rows)
    }

    /// putmem_on_stream (copy engine) bandwidth from PE 0 to PE 1.
    pub fn put_on_stream_bw(&self, sizes: &[usize]) -> Result<Vec<Row>> {
        let w = self.world;
        let me = w.my_pe();
        let max = sizes.iter().copied().max().unwrap_or(0);
        let src = w.malloc::<u8>(max)?;
        let dst = w.malloc::<u8>(max)?;
        let data: Vec<u8> = (0..max).map(pattern).collect();
        src.copy_from_slice(&data)?;
        w.barrier_all()?;
        let mut rows = Vec::new();
        for &size in sizes {
            w.barrier_all()?;
            if me == 0 {
                let run = |iters: usize| {
                    self.timed(|s| {
                        for _ in 0..iters {
                            w.putmem_on_stream(dst.as_ptr(), src.as_ptr(), size, 1, s)?;
                        }
                        Ok(())
                    })
                };
                let (best, iters) = calibrated(run)?;
                rows.push(Row {
                    bench: "putmem_on_stream".into(),
                    size,
                    value: size as f64 * iters as f64 / (best * 1e-3) / 1e9,
                    unit: "GB/s",
                    note: format!("copy engine, best of 3 × {iters}"),
                });
            }
            w.barrier_all()?;
        }
        if me == 1 {
            expect_pattern(
                "putmem_on_stream",
                &dst,
                &data,
                sizes.last().copied().unwrap_or(0),
            )?;
        }
        w.barrier_all()?;
        w.free(dst)?;
        w.free(src)?;
        Ok(rows)
    }

    /// Host-issued putmem of 8 bytes + quiet, and host barrier_all, on the GPU heap.
    pub fn host_latencies(&self, iters: usize) -> Result<Vec<Row>> {
        let w = self.world;
        let me = w.my_pe();
        let buf = w.calloc::<u64>(8)?;
        let mut rows = Vec::new();
        w.barrier_all()?;
        if me == 0 {
            // 8 B goes inside the stream command (write-value), 64 B through pinned staging.
            for size in [64usize, 8] {
                let mut best = f64::MAX;
                for rep in 0..5u64 {
                    let t = Instant::now();
                    for i in 0..iters as u64 {
                        let mut v = [0u8; 64];
                        v[..8].copy_from_slice(&(rep * 1_000_000 + i).to_le_bytes());
                        w.putmem(buf.as_ptr().cast(), &v[..size], 1)?;
                        w.quiet()?;
                    }
                    best = best.min(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
                }
                rows.push(Row {
                    bench: "shmem_put_latency".into(),
                    size,
                    value: best,
                    unit: "us",
                    note: format!("host putmem + quiet to a GPU heap, best of 5 × {iters}"),
                });
            }
        }
        w.barrier_all()?;
        if me == 1 {
            let v = buf.read(0).unwrap_or(0);
            let want = 4 * 1_000_000 + iters as u64 - 1;
            if v != want {
                return Err(bad(format!("host putmem: value {v}, expected {want}")));
            }
        }
        let mut best = f64::MAX;
        for _ in 0..5 {
            w.barrier_all()?;
            let t = Instant::now();
            for _ in 0..iters {
                w.barrier_all()?;
            }
            best = best.min(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
        }
        if me == 0 {
            rows.push(Row {
                bench: "barrier_latency".into(),
                size: 0,
                value: best,
                unit: "us",
                note: format!(
                    "host barrier_all on the GPU backend, {} PEs, best of 5 × {iters}",
                    w.n_pes()
                ),
            });
        }
        w.barrier_all()?;
        w.free(buf)?;
        Ok(rows)
    }

    /// Host-issued calls on a stream, one call at a time as a language binding issues them:
    /// `putmem_on_stream` of 8 bytes from PE 0 to PE 1 followed by `quiet_on_stream`, and
    /// `alltoall_on_stream` on the world team for each size (bytes per PE). The time is wall
    /// clock over `iters` calls and one stream synchronize, best of 5, in µs per call: host issue
    /// cost and GPU time together. `examples/python/calls_bench.py` times the same loops through
    /// the Python package, so the two print comparable rows.
    pub fn host_calls_on_stream(&self, iters: usize, sizes: &[usize]) -> Result<Vec<Row>> {
        let w = self.world;
        let me = w.my_pe();
        let n = w.n_pes();
        let t = w.team_world();
        let max = sizes.iter().copied().max().unwrap_or(8).max(8);
        let src = w.malloc::<u8>(max * n)?;
        let dst = w.calloc::<u8>(max * n)?;
        let data: Vec<u8> = (0..max * n).map(|i| pattern(i + me)).collect();
        src.copy_from_slice(&data)?;
        let s = &self.stream;
        let best_of_5 = |call: &dyn Fn() -> Result<()>| -> Result<f64> {
            for _ in 0..3 {
                call()?;
            }
            self.sync()?;
            let mut best = f64::MAX;
            for _ in 0..5 {
                w.barrier_all()?;
                let t0 = Instant::now();
                for _ in 0..iters {
                    call()?;
                }
                self.sync()?;
                best = best.min(t0.elapsed().as_secs_f64() * 1e6 / iters as f64);
            }
            Ok(best)
        };
        let mut rows = Vec::new();
        w.barrier_all()?;
        if me == 0 {
            let put8 = || -> Result<()> {
                w.putmem_on_stream(dst.as_ptr(), src.as_ptr(), 8, 1, s)?;
                w.quiet_on_stream(s)
            };
            // PE 1 waits in the barriers of best_of_5 below.
            let us = best_of_5(&put8)?;
            rows.push(Row {
                bench: "put8_quiet_on_stream".into(),
                size: 8,
                value: us,
                unit: "us",
                note: format!(
                    "putmem_on_stream + quiet_on_stream per call, wall clock, best of 5 × {iters}"
                ),
            });
        } else {
            for _ in 0..5 {
                w.barrier_all()?;
            }
        }
        w.barrier_all()?;
        if me == 1 {
            // PE 0's first 8 source bytes.
            let sent: Vec<u8> = (0..8).map(pattern).collect();
            expect_pattern("put8_quiet_on_stream", &dst, &sent, 8)?;
        }
        for &size in sizes {
            let all = || w.alltoall_on_stream(&t, dst.as_ptr(), src.as_ptr(), size, s);
            w.barrier_all()?;
            let us = best_of_5(&all)?;
            // Block `me` of every PE's source lands in block `pe` here.
            let got = dst.to_vec()?;
            for pe in 0..n {
                let want: Vec<u8> = (0..size).map(|i| pattern(me * size + i + pe)).collect();
                if got[pe * size..(pe + 1) * size] != want[..] {
                    return Err(bad(format!(
                        "alltoall_on_stream: block from PE {pe} wrong at {size} B per PE"
                    )));
                }
            }
            if me == 0 {
                rows.push(Row {
                    bench: "alltoall_on_stream_call".into(),
                    size,
                    value: us,
                    unit: "us",
                    note: format!("{n} PEs, wall clock per call, best of 5 × {iters}"),
                });
            }
        }
        w.barrier_all()?;
        w.free(dst)?;
        w.free(src)?;
        Ok(rows)
    }
}
