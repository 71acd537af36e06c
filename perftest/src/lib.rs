//! Shared harness for the rshmem perftests (the programs in `src/bin/`, named like NVSHMEM's
//! perftests): command line, iteration scaling, timing, data patterns for verification, and
//! output as a human table or as JSON lines.
//!
//! Every program follows the same shape: [`run`] parses the command line, starts the runtime,
//! checks the number of PEs, calls the benchmark body with a [`Bench`] (world, options, report)
//! and finalizes. PE 0 measures and prints; PE 1 is the target; any other PE only takes part
//! in the collective calls (and, for `barrier_latency`, in the measurement).
//!
//! The command line is one `clap` definition for every program ([`cli`]), parsed before the
//! runtime starts (so `--help` and usage errors need no job). Rows go to stdout as a table or,
//! with `--json`, as one JSON object per row that also records the rshmem version, commit,
//! backend, transport, host, device and options ([`output::RunInfo`]). A closed stdout (`| head`)
//! stops the printing, and the PEs agree to end the sweep early and finalize cleanly.
//!
//! Each timed point is run `reps` times (`--reps`, default 5) after a warmup; a rep is `iters`
//! operations timed as one block with [`Instant`], and the reported value is the median over
//! the reps (the table also shows the best and worst rep).

pub mod cli;
pub mod coll;
pub mod gpu;
pub mod output;
pub mod plot;
pub mod rma;

use std::fmt;
use std::process::ExitCode;
use std::time::Instant;

pub use cli::{NoExtra, Options};
pub use output::{out, stdout_closed, Progress, RunInfo};
pub use rshmem;
/// The size syntax of `--min-size`/`--max-size` (`4K`, `64MiB`): the runtime's one parser.
pub use rshmem::config::parse_size;
use rshmem::{SymBuf, World};
use serde::Serialize;

/// Most bytes a bandwidth point keeps in flight (the window of slots is cut to fit).
pub const BW_REGION: usize = 128 << 20;
/// Default number of operations in flight per bandwidth iteration.
pub const BW_WINDOW: usize = 64;
/// Bytes a latency rep aims to move; `iters` is this over the size, within the bounds below.
const LAT_BUDGET: usize = 256 << 20;
const LAT_MIN_ITERS: usize = 20;
const LAT_MAX_ITERS: usize = 50_000;
/// Bytes a bandwidth rep aims to move.
const BW_BUDGET: usize = 512 << 20;
const BW_MIN_ITERS: usize = 4;
const BW_MAX_ITERS: usize = 20_000;
/// What a program measures, which decides the defaults and the options that apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One operation at a time over a range of sizes; the value is microseconds per operation.
    Latency,
    /// Many operations in flight, then a quiet, over a range of sizes; the value is GB/s.
    Bandwidth,
    /// A collective over all PEs over a range of sizes (default up to 16 MiB per PE); every PE
    /// times its own calls and the value is the mean over the PEs, in microseconds per call.
    Collective,
    /// No size sweep (one row per operation or type); `iters` is the default count per rep.
    Fixed {
        /// Default operations per rep.
        iters: usize,
    },
}

/// Static description of one program.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Program name, printed in the header and as `bench` in JSON rows.
    pub name: &'static str,
    /// One line on what is measured.
    pub about: &'static str,
    /// What kind of measurement it is.
    pub kind: Kind,
    /// Fewest PEs it can run with (it refuses to start with fewer).
    pub min_pes: usize,
}

/// Warmup and timed operation counts of one point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Untimed operations first.
    pub warmup: usize,
    /// Operations per timed rep.
    pub iters: usize,
    /// Timed reps.
    pub reps: usize,
}

impl Counts {
    /// Operations the body is called for in all (warmup and every rep).
    pub fn total(&self) -> usize {
        self.warmup + self.iters * self.reps
    }
}

impl Options {
    /// True if the row labelled `op` is selected by `--ops` (every row when it is not given).
    pub fn ops_selected(&self, op: Option<&str>) -> bool {
        self.ops.is_empty() || op.is_some_and(|o| self.ops.iter().any(|x| x == o))
    }

    /// The sizes of the sweep, `min` up to `max` inclusive.
    pub fn sizes(&self) -> Vec<usize> {
        let f = self.step_factor.max(2);
        let mut v = Vec::new();
        let mut s = self.min;
        while s <= self.max {
            v.push(s);
            match s.checked_mul(f) {
                Some(n) => s = n,
                None => break,
            }
        }
        v
    }

    /// Operations in flight per bandwidth iteration at `size`: `--window`, else
    /// [`BW_WINDOW`] cut so that the window fits in [`BW_REGION`] bytes.
    pub fn window(&self, size: usize) -> usize {
        self.window
            .unwrap_or_else(|| (BW_REGION / size.max(1)).clamp(1, BW_WINDOW))
    }

    /// Bytes a bandwidth point at `size` spans: its window of consecutive slots, or one slot
    /// with `--same-slot`.
    pub fn bw_span(&self, size: usize) -> usize {
        if self.same_slot {
            size
        } else {
            size * self.window(size)
        }
    }

    /// Largest [`bw_span`](Options::bw_span) of the sweep: the buffer a bandwidth program needs.
    pub fn bw_region(&self) -> usize {
        self.sizes()
            .iter()
            .map(|&s| self.bw_span(s))
            .max()
            .unwrap_or(0)
    }

    /// Counts for a point of a latency sweep at `size` bytes per operation.
    pub fn latency_counts(&self, size: usize) -> Counts {
        let iters = self
            .iters
            .unwrap_or_else(|| (LAT_BUDGET / size.max(1)).clamp(LAT_MIN_ITERS, LAT_MAX_ITERS));
        self.counts(iters, (iters / 10).clamp(2, 1000))
    }

    /// Counts for a point of a bandwidth sweep moving `bytes` per iteration.
    pub fn bandwidth_counts(&self, bytes: usize) -> Counts {
        let iters = self
            .iters
            .unwrap_or_else(|| (BW_BUDGET / bytes.max(1)).clamp(BW_MIN_ITERS, BW_MAX_ITERS));
        self.counts(iters, (iters / 10).clamp(1, 100))
    }

    /// Counts for a fixed-size measurement whose default is `default_iters` per rep.
    pub fn fixed_counts(&self, default_iters: usize) -> Counts {
        let iters = self.iters.unwrap_or(default_iters);
        self.counts(iters, (iters / 10).clamp(2, 10_000))
    }

    fn counts(&self, iters: usize, auto_warmup: usize) -> Counts {
        Counts {
            warmup: self.warmup.unwrap_or(auto_warmup),
            iters: iters.max(1),
            reps: self.reps.max(1),
        }
    }
}

/// Why a benchmark stopped.
#[derive(Debug)]
pub enum BenchError {
    /// The runtime returned an error.
    Runtime(rshmem::Error),
    /// Data or values moved by the runtime were wrong.
    Check(String),
    /// The job cannot run this benchmark (too few PEs, ...); all PEs finalize and exit 2.
    Refused(String),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Runtime(e) => write!(f, "{e}"),
            BenchError::Check(m) => write!(f, "verification failed: {m}"),
            BenchError::Refused(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<rshmem::Error> for BenchError {
    fn from(e: rshmem::Error) -> Self {
        BenchError::Runtime(e)
    }
}

/// Result of the benchmark helpers.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Fails with [`BenchError::Check`] unless `ok`; `msg` is built only on failure.
#[inline]
pub fn check(ok: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(BenchError::Check(msg()))
    }
}

/// Per-rep times of one point.
#[derive(Debug, Clone)]
pub struct Samples {
    /// Seconds per operation, one entry per rep.
    pub per_op: Vec<f64>,
    /// Operations per rep.
    pub iters: usize,
}

/// Calls `body(k)` for `k = 0, 1, ...`: `counts.warmup` times untimed, then `counts.reps`
/// timed blocks of `counts.iters` calls. `k` keeps counting across warmup and reps, so PEs that
/// run the same counts see the same `k` (ping-pong programs use it as a sequence number).
#[inline]
pub fn time_reps(counts: Counts, mut body: impl FnMut(u64) -> Result<()>) -> Result<Samples> {
    let mut k = 0u64;
    for _ in 0..counts.warmup {
        body(k)?;
        k += 1;
    }
    let mut per_op = Vec::with_capacity(counts.reps);
    for _ in 0..counts.reps {
        let t0 = Instant::now();
        for _ in 0..counts.iters {
            body(k)?;
            k += 1;
        }
        per_op.push(t0.elapsed().as_secs_f64() / counts.iters as f64);
    }
    Ok(Samples {
        per_op,
        iters: counts.iters,
    })
}

/// Median, best and worst of a set of values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Stat {
    /// Summarizes `values` (NaN for an empty set).
    pub fn of(values: &[f64]) -> Stat {
        let mut v: Vec<f64> = values.to_vec();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return Stat {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        let m = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2.0
        };
        Stat {
            median,
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// Latency in microseconds from seconds per operation, scaled by `factor` (0.5 for a
    /// one-way latency from a round trip).
    pub fn latency_us(s: &Samples, factor: f64) -> Stat {
        let v: Vec<f64> = s.per_op.iter().map(|t| t * 1e6 * factor).collect();
        Stat::of(&v)
    }

    /// Bandwidth in GB/s (10^9 bytes per second) from seconds per operation moving `bytes`.
    pub fn bandwidth_gbs(s: &Samples, bytes: usize) -> Stat {
        let v: Vec<f64> = s.per_op.iter().map(|t| bytes as f64 / t / 1e9).collect();
        Stat::of(&v)
    }
}

/// One output row.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// Operation name for programs with one row per operation (`None` in size sweeps).
    pub op: Option<&'a str>,
    /// Bytes per operation.
    pub size: usize,
    /// The measured value (median) with the best and worst rep.
    pub stat: Stat,
    /// Operations per rep.
    pub iters: usize,
}

/// One row as JSON: the field names scripts and `docs/bench/*.jsonl` use (`bench`, `op`, `size`,
/// `value`, `unit`, `min`, `max`, `iters`, `reps`, `pes`), then the [`RunInfo`] fields.
#[derive(Debug, Serialize)]
struct JsonRow<'a> {
    bench: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    op: Option<&'a str>,
    size: usize,
    value: Option<f64>,
    unit: &'a str,
    min: Option<f64>,
    max: Option<f64>,
    iters: usize,
    reps: usize,
    pes: usize,
}

/// Prints the rows of one program on PE 0, as a table or as JSON lines.
#[derive(Debug)]
pub struct Report {
    name: &'static str,
    unit: &'static str,
    json: bool,
    printer: bool,
    reps: usize,
    pes: usize,
    ops: bool,
    info: Option<RunInfo>,
}

impl Report {
    /// A report in `unit` ("us" or "GB/s"); `ops` adds an operation column. Only PE 0 prints.
    pub fn new(
        world: &World,
        spec: &Spec,
        opts: &Options,
        unit: &'static str,
        ops: bool,
    ) -> Report {
        let printer = world.my_pe() == 0;
        Report {
            name: spec.name,
            unit,
            json: opts.json,
            printer,
            reps: opts.reps.max(1),
            pes: world.n_pes(),
            ops,
            info: (printer && opts.json).then(|| RunInfo::new(world, opts)),
        }
    }

    /// Prints the title and column names (nothing in JSON mode).
    pub fn header(&self, what: &str) {
        if self.json || !self.printer {
            return;
        }
        out(&format!("# {}: {what}", self.name));
        let pes = if self.pes == 1 {
            "1 PE".to_string()
        } else {
            format!("{} PEs", self.pes)
        };
        out(&format!(
            "# {pes}; value = median of {} reps, min/max = best/worst rep",
            self.reps
        ));
        let value = if self.unit == "us" {
            "latency(us)"
        } else {
            "bw(GB/s)"
        };
        let op = if self.ops {
            format!("{:<14}", "op")
        } else {
            String::new()
        };
        out(&format!(
            "{op}{:>10} {:>14} {:>12} {:>12} {:>9}",
            "size(B)", value, "min", "max", "iters"
        ));
    }

    /// Prints one row.
    pub fn row(&self, row: Row<'_>) {
        if !self.printer {
            return;
        }
        let Stat { median, min, max } = row.stat;
        if let (true, Some(info)) = (self.json, &self.info) {
            out(&info.line(JsonRow {
                bench: self.name,
                op: row.op,
                size: row.size,
                value: output::json_f64(median),
                unit: self.unit,
                min: output::json_f64(min),
                max: output::json_f64(max),
                iters: row.iters,
                reps: self.reps,
                pes: self.pes,
            }));
        } else {
            let op = row.op.map(|o| format!("{o:<14}")).unwrap_or_default();
            let p = if self.unit == "us" { 4 } else { 3 };
            out(&format!(
                "{op}{:>10} {median:>14.p$} {min:>12.p$} {max:>12.p$} {:>9}",
                row.size, row.iters
            ));
        }
    }
}

/// The state a benchmark body works with.
#[derive(Debug)]
pub struct Bench<'a> {
    /// The running runtime.
    pub world: &'a World,
    /// The command line.
    pub opts: &'a Options,
    /// The program's description.
    pub spec: &'a Spec,
    /// A symmetric word PE 0 sets on every PE when stdout closed (see [`Bench::keep_going`]).
    stop: SymBuf<'a, u64>,
    progress: std::cell::RefCell<Progress>,
}

impl Bench<'_> {
    /// This PE.
    pub fn me(&self) -> usize {
        self.world.my_pe()
    }

    /// A report in `unit`; `ops` adds an operation column.
    pub fn report(&self, unit: &'static str, ops: bool) -> Report {
        Report::new(self.world, self.spec, self.opts, unit, ops)
    }

    /// Counts of a [`Kind::Fixed`] program (its default iterations unless `--iters`).
    pub fn fixed_counts(&self) -> Counts {
        let iters = match self.spec.kind {
            Kind::Fixed { iters } => iters,
            _ => LAT_MIN_ITERS,
        };
        self.opts.fixed_counts(iters)
    }

    /// `barrier_all`, with the error converted.
    pub fn barrier(&self) -> Result<()> {
        Ok(self.world.barrier_all()?)
    }

    /// Shows `what` on PE 0's progress line (when stderr is a terminal).
    pub fn progress(&self, what: &str) {
        if let Ok(mut p) = self.progress.try_borrow_mut() {
            p.show(what);
        }
    }

    /// **Collective.** False once PE 0's stdout is closed (its reader went away): every PE
    /// gets the same answer, so they all leave the sweep at the same point and finalize
    /// cleanly instead of measuring rows nobody reads.
    pub fn keep_going(&self) -> Result<bool> {
        if self.me() == 0 && stdout_closed() && self.stop.read(0).ok() != Some(1) {
            for pe in 0..self.world.n_pes() {
                self.world.p(self.stop.as_ptr(), 1u64, pe)?;
            }
        }
        self.world.barrier_all()?;
        let stop = self.stop.read(0).ok() == Some(1);
        if stop {
            if let Ok(mut p) = self.progress.try_borrow_mut() {
                p.clear();
            }
        }
        Ok(!stop)
    }
}

/// One program of the size sweep (latency or bandwidth, from [`Spec::kind`]), driven by
/// [`sweep`]. Every method runs on every PE; each decides from [`Bench::me`] what to do.
pub trait Sweep {
    /// Before the point: set up the data the point moves (and clear what it will fill).
    fn prepare(&mut self, b: &Bench<'_>, size: usize, window: usize, seed: u8) -> Result<()>;
    /// On PE 0 only: the timed operations of the point, `window` at a time (1 for latency).
    fn measure(
        &mut self,
        b: &Bench<'_>,
        size: usize,
        window: usize,
        counts: Counts,
    ) -> Result<Samples>;
    /// After the point and a barrier: check the data that moved.
    fn verify(&mut self, b: &Bench<'_>, size: usize, window: usize, seed: u8) -> Result<()>;
}

/// Runs the size sweep of `s` and prints its table: for each size, prepare on every PE,
/// barrier, measure on PE 0, barrier, verify, barrier, and only then print the row, so a row is
/// printed only for data that arrived intact.
pub fn sweep(b: &Bench<'_>, what: &str, s: &mut impl Sweep) -> Result<()> {
    let bw = b.spec.kind == Kind::Bandwidth;
    let report = b.report(if bw { "GB/s" } else { "us" }, false);
    report.header(what);
    let sizes = b.opts.sizes();
    for (idx, &size) in sizes.iter().enumerate() {
        if !b.keep_going()? {
            break;
        }
        b.progress(&format!("size {size} B ({} of {})", idx + 1, sizes.len()));
        let seed = seed_for(idx);
        let window = if bw { b.opts.window(size) } else { 1 };
        let counts = if bw {
            b.opts.bandwidth_counts(size * window)
        } else {
            b.opts.latency_counts(size)
        };
        s.prepare(b, size, window, seed)?;
        b.barrier()?;
        let samples = if b.me() == 0 {
            Some(s.measure(b, size, window, counts)?)
        } else {
            None
        };
        b.barrier()?;
        s.verify(b, size, window, seed)?;
        b.barrier()?;
        if let Some(sm) = samples {
            let stat = if bw {
                Stat::bandwidth_gbs(&sm, size * window)
            } else {
                Stat::latency_us(&sm, 1.0)
            };
            report.row(Row {
                op: None,
                size,
                stat,
                iters: sm.iters,
            });
        }
    }
    Ok(())
}

/// Runs one benchmark program: parses the command line (before the runtime starts: `--help`
/// and usage errors need no job), starts rshmem, refuses to run with fewer than
/// `spec.min_pes` PEs, calls `body`, and finalizes. Exit status: 0 on success (also when
/// stdout was closed early), 1 when the runtime failed or a verification failed, 2 for a usage
/// error or a refused job.
pub fn run(spec: Spec, body: impl FnOnce(&Bench<'_>) -> Result<()>) -> ExitCode {
    let (opts, NoExtra {}) = cli::parse::<NoExtra>(&spec);
    rshmem::init_logging();
    let world = match rshmem::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{}: {e}", spec.name);
            return ExitCode::FAILURE;
        }
    };
    let me = world.my_pe();
    let result = if world.n_pes() < spec.min_pes {
        Err(BenchError::Refused(format!(
            "needs at least {} PEs (PE 0 measures, PE 1 is the target); this job has {}. Run it as `rshmemrun -n {} {}`",
            spec.min_pes,
            world.n_pes(),
            spec.min_pes,
            spec.name
        )))
    } else {
        match world.calloc::<u64>(1) {
            Ok(stop) => {
                let b = Bench {
                    world: &world,
                    opts: &opts,
                    spec: &spec,
                    stop,
                    progress: std::cell::RefCell::new(Progress::new(spec.name, me, opts.quiet)),
                };
                let r = body(&b);
                drop(b.progress);
                match r {
                    Ok(()) => world.free(b.stop).map_err(BenchError::from),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e.into()),
        }
    };
    match result {
        Ok(()) => match world.finalize() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{}: PE {me}: {e}", spec.name);
                ExitCode::FAILURE
            }
        },
        Err(BenchError::Refused(m)) => {
            if me == 0 {
                eprintln!("{}: {m}", spec.name);
            }
            let _ = world.finalize();
            ExitCode::from(2)
        }
        Err(e) => {
            // No finalize: the peers may be stuck waiting for this PE; dropping the world makes
            // them see it as gone, so the whole job fails instead of hanging.
            eprintln!("{}: PE {me}: {e}", spec.name);
            drop(world);
            ExitCode::FAILURE
        }
    }
}

/// A private (non-symmetric) byte buffer whose first byte is page-aligned, like the symmetric
/// buffers it is copied to and from.
///
/// The alignment matters: a large `Vec<u8>` comes from `mmap` through malloc and starts 16
/// bytes into a page, and glibc's `memmove` on this class of CPU copies 4–16 KiB about twice as
/// slowly when the destination is 16 bytes off the source's cache-line alignment (OSU's
/// benchmarks align their buffers too).
#[derive(Debug, Clone)]
pub struct LocalBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

/// Alignment of [`LocalBuf`].
pub const LOCAL_ALIGN: usize = 4096;

impl LocalBuf {
    /// A zeroed buffer of `len` bytes starting on a [`LOCAL_ALIGN`] boundary.
    pub fn new(len: usize) -> LocalBuf {
        let raw = vec![0u8; len + LOCAL_ALIGN];
        let start = (LOCAL_ALIGN - raw.as_ptr() as usize % LOCAL_ALIGN) % LOCAL_ALIGN;
        LocalBuf { raw, start, len }
    }

    /// The buffer.
    pub fn bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }

    /// The buffer, mutable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// Byte `i` of the verification pattern `seed`. Two different seeds differ at every byte, and
/// the bytes depend on the position, so data at a wrong offset or from an earlier point fails.
#[inline]
pub fn pattern_byte(seed: u8, i: usize) -> u8 {
    pattern_word(seed, i >> 3).to_le_bytes()[i & 7]
}

/// The seed of the `index`-th point of a sweep (never 0, so freshly zeroed memory fails).
pub fn seed_for(index: usize) -> u8 {
    (index % 255) as u8 + 1
}

/// A seed different from `seed` at every byte of the pattern: what a buffer is filled with
/// before the operation under test should overwrite it with `seed`.
pub fn poison(seed: u8) -> u8 {
    seed ^ 0x80
}

#[inline]
fn pattern_word(seed: u8, word: usize) -> u64 {
    ((word as u64) ^ 0x5bd1_e995).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (u64::from(seed) * 0x0101_0101_0101_0101)
}

/// Fills `buf` with the pattern `seed`, `buf[0]` being byte `offset` of the pattern.
pub fn fill_pattern(buf: &mut [u8], seed: u8, offset: usize) {
    if offset & 7 == 0 {
        let mut chunks = buf.chunks_exact_mut(8);
        for (w, c) in (&mut chunks).enumerate() {
            c.copy_from_slice(&pattern_word(seed, offset / 8 + w).to_le_bytes());
        }
        let done = buf.len() / 8 * 8;
        for (i, b) in buf[done..].iter_mut().enumerate() {
            *b = pattern_byte(seed, offset + done + i);
        }
    } else {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern_byte(seed, offset + i);
        }
    }
}

/// Checks `buf` against the pattern `seed` starting at pattern byte `offset`; `what` names the
/// buffer in the error.
pub fn verify_pattern(buf: &[u8], seed: u8, offset: usize, what: &str) -> Result<()> {
    let fast_ok = offset & 7 == 0
        && buf
            .chunks(8)
            .enumerate()
            .all(|(w, c)| c == &pattern_word(seed, offset / 8 + w).to_le_bytes()[..c.len()]);
    if fast_ok {
        return Ok(());
    }
    match buf
        .iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern_byte(seed, offset + i))
    {
        None => Ok(()),
        Some((i, &b)) => Err(BenchError::Check(format!(
            "{what}: byte {} of {} is {b:#04x}, expected {:#04x}",
            offset + i,
            buf.len(),
            pattern_byte(seed, offset + i)
        ))),
    }
}

/// Integer types the atomic and ping-pong programs run with.
pub trait Word: rshmem::AmoInt + Copy + PartialEq + fmt::Debug {
    /// Type name for the output.
    const NAME: &'static str;
    /// `v` truncated to this type.
    fn from_u64(v: u64) -> Self;
}

impl Word for u32 {
    const NAME: &'static str = "u32";
    #[inline]
    fn from_u64(v: u64) -> Self {
        v as u32
    }
}

impl Word for u64 {
    const NAME: &'static str = "u64";
    #[inline]
    fn from_u64(v: u64) -> Self {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_scale() {
        let o = Options::default();
        assert_eq!(o.latency_counts(8).iters, LAT_MAX_ITERS);
        assert_eq!(o.latency_counts(4 << 20).iters, 64);
        assert_eq!(o.window(8), BW_WINDOW);
        assert_eq!(o.window(4 << 20), 32);
        assert_eq!(o.bw_region(), BW_REGION);
        let o = Options {
            iters: Some(7),
            warmup: Some(0),
            ..Options::default()
        };
        assert_eq!(
            o.bandwidth_counts(1 << 20),
            Counts {
                warmup: 0,
                iters: 7,
                reps: 5
            }
        );
    }

    #[test]
    fn patterns_differ() {
        let mut a = vec![0u8; 1000];
        fill_pattern(&mut a, 3, 17);
        assert!(verify_pattern(&a, 3, 17, "a").is_ok());
        assert!(verify_pattern(&a, 4, 17, "a").is_err());
        assert!(verify_pattern(&a, 3, 18, "a").is_err());
        assert!((0..4096).all(|i| pattern_byte(1, i) != pattern_byte(2, i)));
        let mut b = vec![0u8; 1003];
        fill_pattern(&mut b[..], 9, 0);
        assert!((0..1003).all(|i| b[i] == pattern_byte(9, i)));
        assert!(verify_pattern(&b, 9, 0, "b").is_ok());
        b[1001] ^= 1;
        let e = verify_pattern(&b, 9, 0, "b").unwrap_err().to_string();
        assert!(e.contains("byte 1001 of 1003"), "{e}");
    }

    #[test]
    fn local_buf_is_aligned() {
        for len in [0, 1, 4096, 3 << 20] {
            let mut b = LocalBuf::new(len);
            assert_eq!(b.bytes().len(), len);
            assert_eq!(b.bytes_mut().as_ptr() as usize % LOCAL_ALIGN, 0);
        }
    }

    #[test]
    fn stats() {
        let s = Stat::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Stat::of(&[1.0, 2.0, 3.0, 10.0]).median, 2.5);
        assert!(Stat::of(&[]).median.is_nan());
    }
}
