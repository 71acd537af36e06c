//! Shared harness for the rshmem perftests (the programs in `src/bin/`, named like NVSHMEM's
//! perftests): command line, iteration scaling, timing, data patterns for verification, and
//! output as a human table or as JSON lines.
//!
//! Every program follows the same shape: [`run`] parses the command line, starts the runtime,
//! checks the number of PEs, calls the benchmark body with a [`Bench`] (world, options, report)
//! and finalizes. PE 0 measures and prints; PE 1 is the target; any other PE only takes part
//! in the collective calls (and, for `barrier_latency`, in the measurement).
//!
//! Each timed point is run `reps` times (`--reps`, default 5) after a warmup; a rep is `iters`
//! operations timed as one block with [`Instant`], and the reported value is the median over
//! the reps (the table also shows the best and worst rep).

pub mod coll;
pub mod gpu;
pub mod rma;

use std::fmt::{self, Write as _};
use std::process::ExitCode;
use std::time::Instant;

pub use rshmem;
use rshmem::World;

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
/// Largest size accepted on the command line.
const MAX_SIZE: usize = 1 << 30;
/// Default largest size of a [`Kind::Collective`] sweep (bytes per PE).
const COLL_MAX: usize = 16 << 20;

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

/// Growth of the size sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// 8, 16, 32, ...
    Pow2,
    /// 8, 32, 128, ...
    Pow4,
}

/// Parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Smallest size in bytes.
    pub min: usize,
    /// Largest size in bytes.
    pub max: usize,
    /// Growth of the sweep.
    pub step: Step,
    /// Operations per rep (auto-scaled by size when `None`).
    pub iters: Option<usize>,
    /// Operations before the first timed rep (auto when `None`).
    pub warmup: Option<usize>,
    /// Timed reps per point; the reported value is their median.
    pub reps: usize,
    /// Operations in flight per bandwidth iteration (auto when `None`).
    pub window: Option<usize>,
    /// Print one JSON object per row instead of the table.
    pub json: bool,
    /// Rows to run in programs with an op column that honour it (`--ops`; empty: all).
    pub ops: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            min: 8,
            max: 4 << 20,
            step: Step::Pow2,
            iters: None,
            warmup: None,
            reps: 5,
            window: None,
            json: false,
            ops: Vec::new(),
        }
    }
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
        let f = match self.step {
            Step::Pow2 => 2,
            Step::Pow4 => 4,
        };
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

    /// Largest `window(size) * size` of the sweep: the buffer a bandwidth program needs.
    pub fn bw_region(&self) -> usize {
        self.sizes()
            .iter()
            .map(|&s| s * self.window(s))
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
        Report {
            name: spec.name,
            unit,
            json: opts.json,
            printer: world.my_pe() == 0,
            reps: opts.reps.max(1),
            pes: world.n_pes(),
            ops,
        }
    }

    /// Prints the title and column names (nothing in JSON mode).
    pub fn header(&self, what: &str) {
        if self.json || !self.printer {
            return;
        }
        println!("# {}: {what}", self.name);
        let pes = if self.pes == 1 {
            "1 PE".to_string()
        } else {
            format!("{} PEs", self.pes)
        };
        println!(
            "# {pes}; value = median of {} reps, min/max = best/worst rep",
            self.reps
        );
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
        println!(
            "{op}{:>10} {:>14} {:>12} {:>12} {:>9}",
            "size(B)", value, "min", "max", "iters"
        );
    }

    /// Prints one row.
    pub fn row(&self, row: Row<'_>) {
        if !self.printer {
            return;
        }
        let Stat { median, min, max } = row.stat;
        if self.json {
            let mut s = String::new();
            let _ = write!(s, "{{\"bench\":\"{}\"", self.name);
            if let Some(op) = row.op {
                let _ = write!(s, ",\"op\":\"{op}\"");
            }
            let _ = write!(
                s,
                ",\"size\":{},\"value\":{},\"unit\":\"{}\",\"min\":{},\"max\":{},\"iters\":{},\"reps\":{},\"pes\":{}}}",
                row.size,
                json_num(median),
                self.unit,
                json_num(min),
                json_num(max),
                row.iters,
                self.reps,
                self.pes
            );
            println!("{s}");
        } else {
            let op = row.op.map(|o| format!("{o:<14}")).unwrap_or_default();
            let p = if self.unit == "us" { 4 } else { 3 };
            println!(
                "{op}{:>10} {median:>14.p$} {min:>12.p$} {max:>12.p$} {:>9}",
                row.size, row.iters
            );
        }
    }
}

/// A JSON number (JSON has no NaN or infinity: those become `null`).
fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.6}")
    } else {
        "null".into()
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
    for (idx, size) in b.opts.sizes().into_iter().enumerate() {
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

/// Runs one benchmark program: parses the command line, starts rshmem, refuses to run with
/// fewer than `spec.min_pes` PEs, calls `body`, and finalizes. Exit status: 0 on success, 1 when
/// the runtime failed or a verification failed, 2 for a usage error or a refused job.
pub fn run(spec: Spec, body: impl FnOnce(&Bench<'_>) -> Result<()>) -> ExitCode {
    let rank0 = std::env::var("RSHMEM_RANK").map_or(true, |r| r.trim() == "0");
    let opts = match parse_args(&spec, std::env::args().skip(1)) {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::Help(text)) => {
            if rank0 {
                print!("{text}");
            }
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            if rank0 {
                eprintln!("{}: {msg}\n\n{}", spec.name, usage(&spec));
            }
            return ExitCode::from(2);
        }
    };
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
        body(&Bench {
            world: &world,
            opts: &opts,
            spec: &spec,
        })
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

enum Parsed {
    Run(Options),
    Help(String),
}

fn usage(spec: &Spec) -> String {
    let mut s = format!(
        "{} — {}\n\nUsage: rshmemrun -n 2 {} [OPTIONS]\n\nOptions:\n",
        spec.name, spec.about, spec.name
    );
    let sweep = !matches!(spec.kind, Kind::Fixed { .. });
    let ignored = if sweep {
        ""
    } else {
        " [no size sweep here: ignored]"
    };
    let _ = writeln!(
        s,
        "  --min SIZE       smallest message size (default 8; suffixes K, M, G){ignored}"
    );
    let _ = writeln!(
        s,
        "  --max SIZE       largest message size (default {}){ignored}",
        if spec.kind == Kind::Collective {
            "16M"
        } else {
            "4M"
        }
    );
    let _ = writeln!(
        s,
        "  --sizes pow2|pow4  sweep in powers of 2 (default) or of 4{ignored}"
    );
    s.push_str("  --iters N        timed operations per rep (default: auto-scaled)\n");
    s.push_str("  --warmup N       untimed operations first (default: iters/10)\n");
    s.push_str("  --reps N         timed reps per point; the value is their median (default 5)\n");
    let ignored = if spec.kind == Kind::Bandwidth {
        ""
    } else {
        " [bandwidth only: ignored]"
    };
    let _ = writeln!(s, "  --window N       operations in flight per iteration (default 64, fewer above 2M){ignored}");
    if spec.kind == Kind::Collective {
        s.push_str(
            "  --ops A,B        only these rows of the op column (reduction_latency: int-sum, ...)\n",
        );
    }
    s.push_str("  --json           one JSON object per row instead of the table\n");
    s.push_str("  -h, --help       this text\n");
    s
}

/// Parses a size: digits with an optional K/M/G suffix (binary: 4K = 4096), optional "B"/"iB".
pub fn parse_size(s: &str) -> Option<usize> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 10),
        'm' | 'M' => (&t[..t.len() - 1], 20),
        'g' | 'G' => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: usize = num.parse().ok()?;
    n.checked_mul(1usize << shift)
}

fn parse_args(
    spec: &Spec,
    args: impl Iterator<Item = String>,
) -> std::result::Result<Parsed, String> {
    let mut o = Options::default();
    if spec.kind == Kind::Collective {
        o.max = COLL_MAX;
    }
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> std::result::Result<String, String> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let count = |name: &str, v: String| -> std::result::Result<usize, String> {
            v.parse::<usize>()
                .map_err(|_| format!("{name} expects a whole number, got {v:?}"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help(usage(spec))),
            "--json" => o.json = true,
            "--ops" => {
                o.ops = value(&flag)?
                    .split(',')
                    .map(|x| x.trim().to_string())
                    .filter(|x| !x.is_empty())
                    .collect();
            }
            "--min" | "--max" => {
                let v = value(&flag)?;
                let n = parse_size(&v)
                    .filter(|&n| (1..=MAX_SIZE).contains(&n))
                    .ok_or_else(|| format!("{flag} expects a size from 1 to 1G, got {v:?}"))?;
                if flag == "--min" {
                    o.min = n;
                } else {
                    o.max = n;
                }
            }
            "--sizes" => {
                o.step = match value(&flag)?.as_str() {
                    "pow2" | "2" => Step::Pow2,
                    "pow4" | "4" => Step::Pow4,
                    v => return Err(format!("--sizes expects pow2 or pow4, got {v:?}")),
                }
            }
            "--iters" => o.iters = Some(count(&flag, value(&flag)?)?.max(1)),
            "--warmup" => o.warmup = Some(count(&flag, value(&flag)?)?),
            "--reps" => o.reps = count(&flag, value(&flag)?)?.max(1),
            "--window" => {
                o.window = Some(count(&flag, value(&flag)?)?.max(1));
            }
            _ => return Err(format!("unknown option {arg:?}")),
        }
    }
    if o.min > o.max {
        return Err(format!(
            "--min ({}) is larger than --max ({})",
            o.min, o.max
        ));
    }
    Ok(Parsed::Run(o))
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

    fn spec(kind: Kind) -> Spec {
        Spec {
            name: "t",
            about: "test",
            kind,
            min_pes: 2,
        }
    }

    fn parse(kind: Kind, a: &[&str]) -> std::result::Result<Options, String> {
        match parse_args(&spec(kind), a.iter().map(|s| s.to_string()))? {
            Parsed::Run(o) => Ok(o),
            Parsed::Help(_) => Err("help".into()),
        }
    }

    #[test]
    fn sizes() {
        let o = parse(Kind::Latency, &[]).unwrap();
        let s = o.sizes();
        assert_eq!((s[0], *s.last().unwrap(), s.len()), (8, 4 << 20, 20));
        let o = parse(
            Kind::Latency,
            &["--sizes", "pow4", "--min=8", "--max", "1M"],
        )
        .unwrap();
        assert_eq!(
            o.sizes(),
            vec![8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288]
        );
        assert!(parse(Kind::Latency, &["--min", "1M", "--max", "4K"]).is_err());
        assert!(parse(Kind::Latency, &["--bogus"]).is_err());
        assert!(parse(Kind::Fixed { iters: 1 }, &["--min", "8", "--window", "2"]).is_ok());
        assert!(parse(Kind::Latency, &["--iters"]).is_err());
        assert_eq!(
            parse(Kind::Bandwidth, &["--window", "8"])
                .unwrap()
                .window(1 << 20),
            8
        );
        assert_eq!(parse(Kind::Latency, &["-h"]), Err("help".into()));
    }

    #[test]
    fn collective_options() {
        let o = parse(Kind::Collective, &[]).unwrap();
        assert_eq!((o.min, o.max), (8, 16 << 20));
        assert!(o.ops_selected(Some("int-sum")) && o.ops_selected(None));
        let o = parse(Kind::Collective, &["--ops", "int-sum,float-sum"]).unwrap();
        assert_eq!(o.ops, vec!["int-sum".to_string(), "float-sum".to_string()]);
        assert!(o.ops_selected(Some("float-sum")));
        assert!(!o.ops_selected(Some("int-max")) && !o.ops_selected(None));
        assert_eq!(parse(Kind::Latency, &[]).unwrap().max, 4 << 20);
    }

    #[test]
    fn size_suffixes() {
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("4KiB"), Some(4096));
        assert_eq!(parse_size("2m"), Some(2 << 20));
        assert_eq!(parse_size("16"), Some(16));
        assert_eq!(parse_size("x"), None);
    }

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
