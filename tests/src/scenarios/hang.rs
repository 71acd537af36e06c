//! `hang [DELAY_MS]` (2+ PEs): a job that hangs on purpose, for the hang report. PE 1 waits
//! `DELAY_MS` (default 0) and then blocks in `signal_wait_until` on a signal nobody sends; every
//! other PE blocks in `barrier_all`, which PE 1 never reaches. Run it under `rshmemrun
//! --timeout` (the launcher stops it and prints every PE's report) or with `RSHMEM_TIMEOUT`
//! (a PE gives up with a Timeout error; the launcher asks the others for their report before
//! stopping them). A PE whose wait returns fails with what it got.

use std::time::Duration;

use rshmem::Cmp;

use crate::check::{Ctx, Fail, R};

pub fn run(c: &Ctx<'_>) -> R {
    let delay: u64 = match c.args.first() {
        Some(a) => a
            .parse()
            .map_err(|_| Fail(format!("DELAY_MS must be a number, got {a:?}")))?,
        None => 0,
    };
    let sig = c.w.calloc::<u64>(1)?;
    if c.me == 1 {
        std::thread::sleep(Duration::from_millis(delay));
        let r = c.w.signal_wait_until(sig.as_ptr(), Cmp::Eq, 1);
        Err(Fail(format!("signal_wait_until returned: {r:?}")))
    } else {
        let r = c.w.barrier_all();
        Err(Fail(format!("barrier_all returned: {r:?}")))
    }
}
