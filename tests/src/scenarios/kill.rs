//! `kill-stream DELAY_MS [mixed]` (2+ PEs, started without a launcher or under one that lets
//! the survivors finish, `RSHMEM_TIMEOUT` ≥ 5): the last PE puts 64 KiB blocks (with `mixed`,
//! each followed by a get and a fetching atomic), in turn to every other PE, and kills itself with `SIGKILL` after `DELAY_MS` of it; every other PE waits in
//! `barrier_all` meanwhile (the incoming puts are served by its progress thread, over UCX on
//! TCP by UCX's put handler). Every survivor's barrier must fail with `PeerLost` naming the
//! killed PE within 5 s, and the survivor exits 0 after printing it: it must not abort inside
//! a transport library (UCX 1.13 did, `Endpoint timeout` in its put handler) nor blame a PE
//! that is still alive.

use std::time::{Duration, Instant};

use rshmem::Error;

use crate::check::{Context, Ctx, Fail, R};
use crate::{ensure, note};

pub fn stream(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let delay: u64 = c
        .args
        .first()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| Fail("usage: kill-stream DELAY_MS [mixed]".into()))?;
    let mixed = c.args.get(1).is_some_and(|a| a == "mixed");
    let dead = n - 1;
    let size = 64 << 10;
    let buf = w.malloc_bytes(size).ctx("malloc")?;
    c.barrier("malloc")?;
    if me == dead {
        let src = vec![0x5au8; size];
        let mut back = vec![0u8; size];
        let until = Instant::now() + Duration::from_millis(delay);
        let mut k = 0usize;
        while Instant::now() < until {
            // Each is served by the target (over UCX on TCP, by UCX's emulation or rshmem's
            // handlers), which answers the killed PE; plain puts keep many in flight.
            let to = k % (n - 1);
            w.putmem(buf, &src, to).ctx("putmem")?;
            if mixed {
                w.getmem(&mut back, buf, to).ctx("getmem")?;
                w.atomic_fetch_inc(buf.cast::<u64>(), to)
                    .ctx("atomic_fetch_inc")?;
            }
            k += 1;
        }
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        return Err(Fail("SIGKILL did not end the process".into()));
    }
    let t0 = Instant::now();
    let r = w.barrier_all();
    let el = t0.elapsed();
    let e = match r {
        Ok(()) => return Err(Fail("barrier_all succeeded with the last PE killed".into())),
        Err(e) => e,
    };
    ensure!(
        matches!(e, Error::PeerLost { pe, me: m, .. } if pe == dead && m == me),
        "barrier_all: expected PeerLost naming PE {dead}, got {e:?}"
    );
    ensure!(
        el < Duration::from_millis(delay) + Duration::from_secs(5),
        "barrier_all failed only after {el:?}"
    );
    note!(
        "PE {me}: barrier_all failed as expected after {} ms: {e}",
        el.as_millis()
    );
    Ok(())
}
