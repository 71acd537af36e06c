//! `fcollect_latency`: fcollect of a SIZE-byte block per PE into every PE (n_pes × SIZE bytes), back to back on all PEs; value = mean over PEs of the time per call.
//!
//! Every size is checked once against the expected data before it is timed (see
//! `rshmem_perftest::coll`). Element type: 64-bit words; SIZE is bytes per PE.
//!
//! Run: `target/release/rshmemrun -n 4 --bind-to core target/release/fcollect_latency [--min 8] [--max 16M] [--json]`

use std::process::ExitCode;

use rshmem_perftest::coll::{movement, Coll, CollSweep, Collective};
use rshmem_perftest::{run, Kind, Spec};

const SPEC: Spec = Spec {
    name: "fcollect_latency",
    about: "fcollect of a SIZE-byte block per PE into every PE (n_pes × SIZE bytes), back to back on all PEs; value = mean over PEs of the time per call",
    kind: Kind::Collective,
    min_pes: 1,
};

fn main() -> ExitCode {
    run(SPEC, |b| {
        let mut s = CollSweep::new(b, &[Coll::Fcollect], false)?;
        let call = movement::<u64>(Coll::Fcollect);
        let c = Collective {
            coll: Coll::Fcollect,
            label: None,
            call: &call,
            reference: |a, _| a,
        };
        s.run(b, &c, 1)?;
        s.free(b)
    })
}
