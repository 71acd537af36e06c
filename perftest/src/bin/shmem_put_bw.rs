//! `shmem_put_bw`: putmem_nbi of SIZE bytes from PE 0 to PE 1, a window of them to consecutive slots, then quiet.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/shmem_put_bw [--min 8] [--max 4M] [--same-slot] [--json]`

use std::process::ExitCode;

use rshmem_perftest::rma::{Dir, RmaSweep};
use rshmem_perftest::{run, sweep, Kind, Spec};

const SPEC: Spec = Spec {
    name: "shmem_put_bw",
    about: "putmem_nbi of SIZE bytes from PE 0 to PE 1, a window of them to consecutive slots, then quiet",
    kind: Kind::Bandwidth,
    min_pes: 2,
};

fn main() -> ExitCode {
    run(SPEC, |b| {
        let mut s = RmaSweep::new(b, Dir::Put)?;
        let what = if b.opts.same_slot {
            SPEC.about
                .replace("to consecutive slots", "to one slot (--same-slot)")
        } else {
            SPEC.about.to_string()
        };
        sweep(b, &what, &mut s)?;
        s.free(b)
    })
}
