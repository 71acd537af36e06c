//! The command line every perftest program takes (one `clap` definition for all of them).
//!
//! Long names are rshmem's; the short flags follow NVSHMEM's perftests (`-b` min size, `-e` max
//! size, `-f` step factor, `-n` iterations, `-w` warmup) with OSU's `-i` (iterations) and `-x`
//! (warmup) as aliases. The older spellings `--min`, `--max` and `--sizes pow2|pow4` still work.

use clap::{Args, CommandFactory, FromArgMatches, Parser};
use serde::Serialize;

use rshmem::config::parse_size;

use crate::{Kind, Spec};

/// Largest size accepted on the command line.
pub const MAX_SIZE: usize = 1 << 30;
/// Default largest size of a latency or bandwidth sweep.
pub const DEFAULT_MAX: usize = 4 << 20;
/// Default largest size of a [`Kind::Collective`] sweep (bytes per PE).
pub const COLL_MAX: usize = 16 << 20;

/// The options common to every perftest program, as typed.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Sweep and timing")]
pub struct CommonArgs {
    /// Smallest message size in bytes (suffixes K, M, G: 4K = 4096) [default: 8]
    #[arg(short = 'b', long = "min-size", visible_alias = "min", value_name = "SIZE", value_parser = size_arg)]
    pub min_size: Option<usize>,
    /// Largest message size in bytes [default: 4M; 16M per PE for collectives]
    #[arg(short = 'e', long = "max-size", visible_alias = "max", value_name = "SIZE", value_parser = size_arg)]
    pub max_size: Option<usize>,
    /// Each size is the previous one times this factor [default: 2]
    #[arg(short = 'f', long = "step-factor", value_name = "N", value_parser = clap::value_parser!(u64).range(2..=1024))]
    pub step_factor: Option<u64>,
    /// Same as --step-factor 2 (pow2) or 4 (pow4)
    #[arg(long = "sizes", value_name = "pow2|pow4", value_parser = ["pow2", "pow4", "2", "4"], conflicts_with = "step_factor")]
    pub sizes: Option<String>,
    /// Timed operations per rep [default: scaled by size]
    #[arg(short = 'n', long = "iters", visible_short_alias = 'i', value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub iters: Option<u64>,
    /// Untimed operations before the first rep [default: iters/10]
    #[arg(
        short = 'w',
        long = "warmup",
        visible_short_alias = 'x',
        value_name = "N"
    )]
    pub warmup: Option<u64>,
    /// Timed reps per point; the printed value is their median
    #[arg(short = 'r', long = "reps", value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub reps: u64,
    /// Operations in flight per bandwidth iteration [default: 64, fewer above 2M]
    #[arg(short = 'W', long = "window", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub window: Option<u64>,
    /// Bandwidth programs: every operation of a window reads the same local bytes and writes
    /// the same remote slot (as ucx_perftest's bandwidth tests do) instead of consecutive slots
    #[arg(long = "same-slot")]
    pub same_slot: bool,
    /// Only these rows of the op column (e.g. reduction_latency --ops int-sum,float-sum)
    #[arg(long = "ops", value_name = "A,B", value_delimiter = ',')]
    pub ops: Vec<String>,
    /// One JSON object per row on stdout instead of the table
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// No progress line on stderr (it is shown only when stderr is a terminal)
    #[arg(short = 'q', long = "quiet", help_heading = "Output")]
    pub quiet: bool,
}

/// No options beyond the common ones.
#[derive(Debug, Clone, Default, Args, Serialize)]
pub struct NoExtra {}

#[derive(Debug, Parser)]
#[command(disable_version_flag = true)]
struct Cli<E: Args> {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    extra: E,
}

/// The resolved options of a run (what the JSON rows record as `options`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Options {
    /// Smallest size in bytes.
    pub min: usize,
    /// Largest size in bytes.
    pub max: usize,
    /// Each size of the sweep is the previous one times this.
    pub step_factor: usize,
    /// Operations per rep (auto-scaled by size when `None`).
    pub iters: Option<usize>,
    /// Operations before the first timed rep (auto when `None`).
    pub warmup: Option<usize>,
    /// Timed reps per point; the reported value is their median.
    pub reps: usize,
    /// Operations in flight per bandwidth iteration (auto when `None`).
    pub window: Option<usize>,
    /// Bandwidth: every operation of a window uses slot 0 (`--same-slot`).
    pub same_slot: bool,
    /// Print one JSON object per row instead of the table.
    pub json: bool,
    /// Rows to run in programs with an op column that honour it (`--ops`; empty: all).
    pub ops: Vec<String>,
    /// No progress line.
    pub quiet: bool,
    /// True when `--min-size` or `--max-size` was given (programs with their own default
    /// sizes, like `gpu_perftest`, use the sweep only then).
    #[serde(skip)]
    pub sizes_given: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            min: 8,
            max: DEFAULT_MAX,
            step_factor: 2,
            iters: None,
            warmup: None,
            reps: 5,
            window: None,
            same_slot: false,
            json: false,
            ops: Vec::new(),
            quiet: false,
            sizes_given: false,
        }
    }
}

impl CommonArgs {
    /// The options for a program of kind `kind`, defaults filled in; an error for `--min`
    /// larger than `--max`.
    pub fn resolve(&self, kind: Kind) -> Result<Options, String> {
        let default_max = if kind == Kind::Collective {
            COLL_MAX
        } else {
            DEFAULT_MAX
        };
        let o = Options {
            min: self.min_size.unwrap_or(8),
            max: self.max_size.unwrap_or(default_max),
            step_factor: match (self.step_factor, self.sizes.as_deref()) {
                (Some(f), _) => f as usize,
                (None, Some("pow4" | "4")) => 4,
                _ => 2,
            },
            iters: self.iters.map(|n| n as usize),
            warmup: self.warmup.map(|n| n as usize),
            reps: self.reps.max(1) as usize,
            window: self.window.map(|n| n as usize),
            same_slot: self.same_slot,
            json: self.json,
            ops: self
                .ops
                .iter()
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect(),
            quiet: self.quiet,
            sizes_given: self.min_size.is_some() || self.max_size.is_some(),
        };
        if o.same_slot && kind != Kind::Bandwidth {
            return Err("--same-slot applies to the bandwidth programs only".into());
        }
        if o.min > o.max {
            return Err(format!(
                "--min-size ({}) is larger than --max-size ({})",
                o.min, o.max
            ));
        }
        Ok(o)
    }
}

fn size_arg(s: &str) -> Result<usize, String> {
    parse_size(s)
        .filter(|&n| (1..=MAX_SIZE).contains(&n))
        .ok_or_else(|| format!("expected a size from 1 to 1G (suffixes K, M, G), got {s:?}"))
}

/// The `clap` command of program `spec` with extra options `E`.
fn command<E: Args>(spec: &Spec) -> clap::Command {
    let sweep = match spec.kind {
        Kind::Fixed { .. } => {
            "This program has no size sweep: the size options are accepted and ignored.\n"
        }
        _ => "",
    };
    Cli::<E>::command()
        .name(spec.name)
        .bin_name(spec.name)
        .about(spec.about)
        .override_usage(format!(
            "rshmemrun -n {} {} [OPTIONS]",
            spec.min_pes.max(1),
            spec.name
        ))
        .after_help(format!(
            "{sweep}JSON rows carry the rshmem version, git commit, backend, transport, host, device \
             and these options. Exit status: 0 done, 1 runtime or verification failure, 2 usage \
             error or a job this program cannot run on."
        ))
}

/// Parses `args` (the program name first) for `spec`; `Err` carries clap's error (which
/// includes `--help`).
pub fn try_parse<E: Args>(
    spec: &Spec,
    args: impl IntoIterator<Item = String>,
) -> Result<(Options, E), clap::Error> {
    let mut cmd = command::<E>(spec);
    let m = cmd.try_get_matches_from_mut(args)?;
    let cli = Cli::<E>::from_arg_matches(&m).map_err(|e| e.format(&mut cmd))?;
    let opts = cli
        .common
        .resolve(spec.kind)
        .map_err(|msg| cmd.error(clap::error::ErrorKind::ArgumentConflict, msg))?;
    Ok((opts, cli.extra))
}

/// True when this process is PE 0 as the launcher numbers it (or when no launcher says):
/// only that process prints usage errors and help, so a job of N PEs prints them once.
pub fn launcher_rank0() -> bool {
    for v in [
        "RSHMEM_RANK",
        "OMPI_COMM_WORLD_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
        "PMI_RANK",
    ] {
        if let Ok(r) = std::env::var(v) {
            if !r.trim().is_empty() {
                return r.trim() == "0";
            }
        }
    }
    true
}

/// Parses the process's command line for `spec` before the runtime starts. `--help` prints the
/// help and exits 0; a bad or unknown option prints clap's error and exits 2 (both printed by
/// PE 0 of the launcher only).
pub fn parse<E: Args>(spec: &Spec) -> (Options, E) {
    match try_parse::<E>(spec, std::env::args()) {
        Ok(v) => v,
        Err(e) => {
            let code = e.exit_code();
            if launcher_rank0() {
                // clap prints help to stdout and errors to stderr; a closed stdout is no reason
                // to panic.
                let _ = e.print();
            }
            std::process::exit(code)
        }
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

    fn parse(kind: Kind, a: &[&str]) -> Result<Options, clap::Error> {
        let args = std::iter::once("t".to_string()).chain(a.iter().map(|s| s.to_string()));
        try_parse::<NoExtra>(&spec(kind), args).map(|(o, _)| o)
    }

    #[derive(Debug, Args)]
    struct Gpu {
        #[arg(long)]
        quick: bool,
    }

    #[test]
    fn sizes_and_aliases() {
        let o = parse(Kind::Latency, &[]).unwrap();
        let s = o.sizes();
        assert_eq!((s[0], *s.last().unwrap(), s.len()), (8, 4 << 20, 20));
        let want = vec![8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288];
        let o = parse(
            Kind::Latency,
            &["--sizes", "pow4", "--min=8", "--max", "1M"],
        )
        .unwrap();
        assert_eq!(o.sizes(), want);
        // NVSHMEM's short flags.
        let o = parse(
            Kind::Latency,
            &["-b", "8", "-e", "1M", "-f", "4", "-n", "7", "-w", "3"],
        )
        .unwrap();
        assert_eq!(o.sizes(), want);
        assert_eq!((o.iters, o.warmup), (Some(7), Some(3)));
        // OSU's -i and -x, and the long names.
        let o = parse(
            Kind::Latency,
            &["-i", "9", "-x", "1", "--min-size", "4K", "--max-size", "4K"],
        )
        .unwrap();
        assert_eq!(
            (o.iters, o.warmup, o.sizes()),
            (Some(9), Some(1), vec![4096])
        );
        assert_eq!(
            parse(Kind::Bandwidth, &["--window", "8"])
                .unwrap()
                .window(1 << 20),
            8
        );
        // --same-slot: one slot per point, so the buffers shrink to the largest size.
        let o = parse(Kind::Bandwidth, &["--window", "8", "--max", "64K"]).unwrap();
        assert_eq!((o.bw_span(4096), o.bw_region()), (8 * 4096, 8 << 16));
        let o = parse(
            Kind::Bandwidth,
            &["--window", "8", "--max", "64K", "--same-slot"],
        )
        .unwrap();
        assert_eq!((o.bw_span(4096), o.bw_region()), (4096, 1 << 16));
    }

    #[test]
    fn bad_input_is_a_clap_error() {
        use clap::error::ErrorKind;
        let kind = |a: &[&str]| parse(Kind::Latency, a).map(|_| ()).unwrap_err().kind();
        assert_eq!(kind(&["--bogus"]), ErrorKind::UnknownArgument);
        assert_eq!(kind(&["--iters"]), ErrorKind::InvalidValue);
        assert_eq!(
            kind(&["--min", "1M", "--max", "4K"]),
            ErrorKind::ArgumentConflict
        );
        assert_eq!(kind(&["-b", "2G"]), ErrorKind::ValueValidation);
        assert_eq!(kind(&["-f", "1"]), ErrorKind::ValueValidation);
        assert_eq!(kind(&["--sizes", "pow3"]), ErrorKind::InvalidValue);
        assert_eq!(kind(&["-h"]), ErrorKind::DisplayHelp);
        assert_eq!(kind(&["--quick"]), ErrorKind::UnknownArgument);
        // A latency program has no window whose slots --same-slot could merge.
        assert_eq!(kind(&["--same-slot"]), ErrorKind::ArgumentConflict);
        // Size options are accepted (and ignored) by programs without a sweep.
        assert!(parse(Kind::Fixed { iters: 1 }, &["--min", "8", "--window", "2"]).is_ok());
    }

    #[test]
    fn extra_options_and_help() {
        let args = ["t", "--quick", "-n", "5"].map(String::from);
        let (o, g) = try_parse::<Gpu>(&spec(Kind::Fixed { iters: 1 }), args).unwrap();
        assert!(g.quick);
        assert_eq!(o.iters, Some(5));
        let help = command::<Gpu>(&spec(Kind::Latency))
            .render_help()
            .to_string();
        for flag in [
            "-b, --min-size",
            "-e, --max-size",
            "-f, --step-factor",
            "-n, --iters",
            "-w, --warmup",
            "--quick",
            "--json",
        ] {
            assert!(help.contains(flag), "{flag} missing from:\n{help}");
        }
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
    fn size_arguments() {
        // The syntax is rshmem::config::parse_size's (tested there); the range is the perftests'.
        assert_eq!(size_arg("4KiB"), Ok(4096));
        assert_eq!(size_arg("1G"), Ok(1 << 30));
        assert!(size_arg("0").is_err());
        assert!(size_arg("2G").unwrap_err().contains("from 1 to 1G"));
        assert!(size_arg("x").is_err());
    }
}
