//! `rshmem-bench`: tools around the perftests' results (no job, no runtime).
//!
//! `rshmem-bench plot [--out DIR] [--prefix NAME] [--chart NAME=BENCH,...] [LABEL=]FILE...`
//! turns JSON rows (rshmem's perftests, `gpu_perftest`, `scripts/nccl-bench.py`, or any library's
//! results in the same schema) into SVG charts: put/get bandwidth and putmem latency vs size,
//! p latency, and one chart per collective (rshmem's stream and host rows and NCCL's).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rshmem_perftest::plot;

#[derive(Debug, Parser)]
#[command(
    name = "rshmem-bench",
    version,
    about = "Tools for rshmem benchmark results"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Draw SVG charts from JSON rows of one or more runs
    Plot {
        /// JSON-lines files, each optionally as LABEL=FILE (the label names its series;
        /// default: the file name)
        #[arg(required = true, value_name = "[LABEL=]FILE")]
        inputs: Vec<String>,
        /// Folder for the charts
        #[arg(short, long, default_value = ".")]
        out: PathBuf,
        /// File name prefix: PREFIX-put-bw.svg, PREFIX-coll-alltoall.svg, ...
        #[arg(short, long, default_value = "bench")]
        prefix: String,
        /// An extra chart of these benches (rows with exactly these `bench` names)
        #[arg(long = "chart", value_name = "NAME=BENCH[,BENCH...]", value_parser = plot::parse_chart)]
        charts: Vec<plot::ChartSpec>,
        /// Only the extra charts given with --chart
        #[arg(long)]
        only: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Plot {
            inputs,
            out,
            prefix,
            charts,
            only,
        } => {
            let mut rows = Vec::new();
            for i in &inputs {
                match plot::load(i) {
                    Ok(r) => rows.extend(r),
                    Err(e) => {
                        eprintln!("rshmem-bench plot: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            let mut specs = if only {
                Vec::new()
            } else {
                plot::builtin_charts()
            };
            specs.extend(charts);
            match plot::plot_all(&rows, &specs, &out, &prefix) {
                Ok(files) if files.is_empty() => {
                    eprintln!(
                        "rshmem-bench plot: none of the {} rows belongs to a chart (see --chart)",
                        rows.len()
                    );
                    ExitCode::FAILURE
                }
                Ok(files) => {
                    for f in files {
                        rshmem_perftest::out(&f.display().to_string());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("rshmem-bench plot: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
