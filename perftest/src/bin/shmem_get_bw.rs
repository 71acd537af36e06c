//! `shmem_get_bw`: getmem_nbi of SIZE bytes by PE 0 from PE 1, a window of them from consecutive slots, then quiet.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/shmem_get_bw [--min 8] [--max 4M] [--same-slot] [--json]`

use std::process::ExitCode;

use rshmem_perftest::rma::{Dir, RmaSweep};
use rshmem_perftest::{run, sweep, Kind, Spec};

const SPEC: Spec = Spec {
    name: "shmem_get_bw",
    about: "getmem_nbi of SIZE bytes by PE 0 from PE 1, a window of them from consecutive slots, then quiet",
    kind: Kind::Bandwidth,
    min_pes: 2,
};

fn main() -> ExitCode {
    run(SPEC, |b| {
        let mut s = RmaSweep::new(b, Dir::Get)?;
        let what = if b.opts.same_slot {
            SPEC.about
                .replace("from consecutive slots", "from one slot (--same-slot)")
        } else {
            SPEC.about.to_string()
        };
        sweep(b, &what, &mut s)?;
        s.free(b)
    })
}
