//! `crash` (2+ PEs): PE 1 aborts while the others wait in barrier_all. The launcher must stop
//! the job and exit non-zero naming PE 1. A PE whose barrier reports PeerLost checks that it
//! names PE 1, then waits to be stopped by the launcher (leaving on its own would make it a
//! second gone PE that a slower PE might report instead). If nobody stops it, it fails after
//! 20 s, which the harness's time limit catches anyway.

use std::time::Duration;

use rshmem::Error;

use crate::check::{Ctx, Fail, R};

pub fn run(c: &Ctx<'_>) -> R {
    if c.me == 1 {
        std::thread::sleep(Duration::from_millis(200));
        std::process::abort();
    }
    match c.w.barrier_all() {
        Err(Error::PeerLost { pe: 1, .. }) => {
            std::thread::sleep(Duration::from_secs(20));
            Err(Fail(
                "the launcher did not stop this PE within 20 s of PE 1's crash".into(),
            ))
        }
        other => Err(Fail(format!(
            "barrier_all with PE 1 crashed: expected PeerLost naming PE 1, got {other:?}"
        ))),
    }
}

/// `panic` (2+ PEs): PE 1 panics (exit status 101) while the others wait in barrier_all; each
/// of them exits with status 1 as soon as its barrier reports PE 1 gone, as a program that
/// propagates the error would, which is usually before PE 1's process has finished exiting.
/// The launcher must still name PE 1 as the PE that failed first and exit with its 101.
pub fn panic(c: &Ctx<'_>) -> R {
    if c.me == 1 {
        std::thread::sleep(Duration::from_millis(200));
        panic!("PE 1 panics on purpose");
    }
    match c.w.barrier_all() {
        Err(e @ Error::PeerLost { pe: 1, .. }) => {
            crate::note!("PE {}: barrier_all failed as expected: {e}", c.me);
            std::process::exit(1)
        }
        other => Err(Fail(format!(
            "barrier_all with PE 1 panicked: expected PeerLost naming PE 1, got {other:?}"
        ))),
    }
}
