//! `shmem_put_latency`: putmem + quiet of SIZE bytes from PE 0 to PE 1, one at a time (one-way latency as seen by PE 0).
//!
//! Run: `target/release/rshmemrun -n 2 target/release/shmem_put_latency [--min 8] [--max 4M] [--json]`

use std::process::ExitCode;

use rshmem_perftest::rma::{Dir, RmaSweep};
use rshmem_perftest::{run, sweep, Kind, Spec};

const SPEC: Spec = Spec {
    name: "shmem_put_latency",
    about: "putmem + quiet of SIZE bytes from PE 0 to PE 1, one at a time (one-way latency as seen by PE 0)",
    kind: Kind::Latency,
    min_pes: 2,
};

fn main() -> ExitCode {
    run(SPEC, |b| {
        let mut s = RmaSweep::new(b, Dir::Put)?;
        sweep(b, SPEC.about, &mut s)?;
        s.free(b)
    })
}
