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
