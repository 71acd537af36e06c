//! `shmem_get_latency`: blocking getmem of SIZE bytes by PE 0 from PE 1, one at a time.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/shmem_get_latency [--min 8] [--max 4M] [--json]`

use std::process::ExitCode;

use rshmem_perftest::rma::{Dir, RmaSweep};
use rshmem_perftest::{run, sweep, Kind, Spec};

const SPEC: Spec = Spec {
    name: "shmem_get_latency",
    about: "blocking getmem of SIZE bytes by PE 0 from PE 1, one at a time",
    kind: Kind::Latency,
    min_pes: 2,
};

fn main() -> ExitCode {
    run(SPEC, |b| {
        let mut s = RmaSweep::new(b, Dir::Get)?;
        sweep(b, SPEC.about, &mut s)?;
        s.free(b)
    })
}
