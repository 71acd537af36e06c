//! `alltoall_latency`: alltoall of a SIZE-byte block per pair of PEs (n_pes × SIZE bytes in and out per PE), back to back on all PEs; value = mean over PEs of the time per call.
//!
//! Every size is checked once against the expected data before it is timed (see
//! `rshmem_perftest::coll`). Element type: 64-bit words; SIZE is bytes per PE.
//!
//! Run: `target/release/rshmemrun -n 4 --bind-to core target/release/alltoall_latency [--min 8] [--max 16M] [--json]`

use std::process::ExitCode;

use rshmem_perftest::coll::{movement, Coll, CollSweep, Collective};
use rshmem_perftest::{run, Kind, Spec};

const SPEC: Spec = Spec {
    name: "alltoall_latency",
    about: "alltoall of a SIZE-byte block per pair of PEs (n_pes × SIZE bytes in and out per PE), back to back on all PEs; value = mean over PEs of the time per call",
    kind: Kind::Collective,
    min_pes: 1,
};

fn main() -> ExitCode {
    run(SPEC, |b| {
        let mut s = CollSweep::new(b, &[Coll::Alltoall], false)?;
        let call = movement::<u64>(Coll::Alltoall);
        let c = Collective {
            coll: Coll::Alltoall,
            label: None,
            call: &call,
            reference: |a, _| a,
        };
        s.run(b, &c, 1)?;
        s.free(b)
    })
}
