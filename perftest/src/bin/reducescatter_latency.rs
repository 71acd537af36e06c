//! `reducescatter_latency`: reducescatter leaving a SIZE-byte block on each PE (source: n_pes × SIZE bytes), per type and operator, back to back on all PEs; value = mean over PEs of the time per call.
//!
//! Rows (op column, NVSHMEM's labels): int-sum, int-max, int-and, long-sum, float-sum,
//! float-min, double-sum; `--ops int-sum,float-sum` runs only those. Every size is checked
//! once against a reduction computed here before it is timed (see `rshmem_perftest::coll`).
//!
//! Run: `target/release/rshmemrun -n 4 --bind-to core target/release/reducescatter_latency [--ops float-sum] [--max 16M] [--json]`

use std::process::ExitCode;

use rshmem_perftest::coll::{run_reductions, Coll};
use rshmem_perftest::{run, Kind, Spec};

const SPEC: Spec = Spec {
    name: "reducescatter_latency",
    about: "reducescatter leaving a SIZE-byte block on each PE (source: n_pes × SIZE bytes), per type and operator, back to back on all PEs; value = mean over PEs of the time per call",
    kind: Kind::Collective,
    min_pes: 1,
};

fn main() -> ExitCode {
    run(SPEC, |b| run_reductions(b, Coll::ReduceScatter))
}
