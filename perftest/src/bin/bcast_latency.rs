//! `bcast_latency`: broadcast of SIZE bytes from PE 0 to every PE (the root included), back to back on all PEs; value = mean over PEs of the time per call.
//!
//! Every size is checked once against the expected data before it is timed (see
//! `rshmem_perftest::coll`). Element type: 64-bit words; SIZE is bytes per PE.
//!
//! Run: `target/release/rshmemrun -n 4 --bind-to core target/release/bcast_latency [--min 8] [--max 16M] [--json]`

use std::process::ExitCode;

use rshmem_perftest::coll::{movement, Coll, CollSweep, Collective};
use rshmem_perftest::{run, Kind, Spec};

const SPEC: Spec = Spec {
    name: "bcast_latency",
    about: "broadcast of SIZE bytes from PE 0 to every PE (the root included), back to back on all PEs; value = mean over PEs of the time per call",
    kind: Kind::Collective,
    min_pes: 1,
};

fn main() -> ExitCode {
    run(SPEC, |b| {
        let mut s = CollSweep::new(b, &[Coll::Bcast], false)?;
        let call = movement::<u64>(Coll::Bcast);
        let c = Collective {
            coll: Coll::Bcast,
            label: None,
            call: &call,
            reference: |a, _| a,
        };
        s.run(b, &c, 1)?;
        s.free(b)
    })
}
