//! `timeout` (run with `RSHMEM_TIMEOUT=1`): waits nobody satisfies fail with
//! [`rshmem::Error::Timeout`] naming this PE and the address; then PE 0 sleeps 3 s before a
//! barrier and the other PEs' barrier times out naming the PE they waited for.
//!
//! After a barrier times out the job cannot go on collectively (the PEs disagree about which
//! barrier they are in), so no PE finalizes. The others print their error, count themselves on
//! a counter of PE 1 and leave once all of them timed out (leaving earlier would turn a slower
//! PE's timeout into PeerLost), and exit 0. PE 0 enters its late barrier, which may pass, time
//! out or see the others gone, and exits 0.

use std::time::{Duration, Instant};

use rshmem::{Cmp, Error};

use crate::check::{expect_contains, expect_err, poll_until, Context, Ctx, Fail, Kind, R};
use crate::ensure;

const LATE: Duration = Duration::from_secs(3);

pub fn run(c: &Ctx<'_>) -> R {
    let (w, me) = (c.w, c.me);
    let timeout = w.config().timeout;
    ensure!(
        timeout == Some(Duration::from_secs(1)),
        "run the timeout scenario with RSHMEM_TIMEOUT=1 (timeout is {timeout:?})"
    );
    let iv = w.calloc::<i64>(4).ctx("calloc")?;
    let sig = w.calloc::<u64>(1).ctx("calloc")?;
    let timed_out = w.calloc::<u64>(1).ctx("calloc")?;
    let left = w.calloc::<u64>(1).ctx("calloc")?;
    c.barrier("calloc")?;

    // Three waits at once (one per thread), each running into the timeout.
    let timed =
        |what: &str, call: &str, addr: String, r: rshmem::Result<()>, start: Instant| -> R {
            let el = start.elapsed();
            let e = expect_err(what, r, Kind::Timeout, call)?;
            expect_contains(
                what,
                &e.to_string(),
                &[&format!("{call} on PE {me}"), &addr],
            )?;
            ensure!(
                matches!(e, Error::Timeout { me: m, .. } if m == me),
                "{what}: the error names the wrong PE: {e:?}"
            );
            ensure!(
                el >= Duration::from_millis(950) && el < Duration::from_secs(10),
                "{what}: timed out after {el:?}, expected about 1 s"
            );
            crate::note!("PE {me}: {what} timed out as expected: {e}");
            Ok(())
        };
    std::thread::scope(|s| -> R {
        let a = s.spawn(|| {
            let start = Instant::now();
            let r = w.wait_until(iv.as_ptr(), Cmp::Eq, 1);
            timed(
                "wait_until",
                "wait_until",
                format!("{:p}", iv.as_ptr()),
                r,
                start,
            )
        });
        let b = s.spawn(|| {
            let start = Instant::now();
            let r = w.signal_wait_until(sig.as_ptr(), Cmp::Ge, 1).map(drop);
            timed(
                "signal_wait_until",
                "signal_wait_until",
                format!("{:p}", sig.as_ptr()),
                r,
                start,
            )
        });
        let start = Instant::now();
        let r = w.wait_until_any(iv.at(1), 3, None, Cmp::Gt, 5).map(drop);
        let m = timed(
            "wait_until_any",
            "wait_until_any",
            format!("{:p}", iv.at(1)),
            r,
            start,
        );
        let ja = a
            .join()
            .map_err(|_| Fail("wait_until thread panicked".into()))?;
        let jb = b
            .join()
            .map_err(|_| Fail("signal_wait_until thread panicked".into()))?;
        m.and(ja).and(jb)
    })?;
    // Everyone is alive and in step: a barrier works.
    c.barrier("the timed-out waits")?;
    if c.n == 1 {
        return Ok(());
    }

    if me == 0 {
        std::thread::sleep(LATE);
        let r = w.barrier_all();
        match &r {
            Ok(()) | Err(Error::Timeout { .. } | Error::PeerLost { .. }) => {
                crate::note!("PE 0: late barrier_all returned {r:?}");
                Ok(())
            }
            Err(e) => Err(Fail(format!(
                "late barrier_all: expected Ok, Timeout or PeerLost, got {e}"
            ))),
        }
    } else {
        let start = Instant::now();
        let r = w.barrier_all();
        let el = start.elapsed();
        let e = expect_err(
            "barrier_all while PE 0 sleeps",
            r,
            Kind::Timeout,
            "barrier_all",
        )?;
        let Error::Timeout {
            me: m,
            pe: Some(waited_for),
            ..
        } = &e
        else {
            return Err(Fail(format!(
                "barrier_all timeout does not name the PE it waited for: {e:?}"
            )));
        };
        ensure!(
            *m == me && *waited_for < c.n && *waited_for != me,
            "barrier_all timeout names PEs {m} and {waited_for}: {e}"
        );
        expect_contains(
            "barrier_all timeout",
            &e.to_string(),
            &[
                &format!("barrier_all on PE {me}"),
                &format!("PE {waited_for}"),
            ],
        )?;
        ensure!(
            el >= Duration::from_millis(950) && el < LATE - Duration::from_millis(200),
            "barrier_all timed out after {el:?}, expected about 1 s (before PE 0 wakes up)"
        );
        crate::note!("PE {me}: barrier_all timed out as expected after {el:?}: {e}");
        // Stay until every waiting PE has timed out. Plain atomics never fail for a gone PE.
        w.atomic_inc(timed_out.as_ptr(), 1).ctx("atomic_inc")?;
        poll_until(
            "waiting for the other PEs' barriers to time out",
            Duration::from_secs(20),
            || {
                Ok(
                    (w.atomic_fetch(timed_out.as_ptr(), 1).ctx("atomic_fetch")? == c.n as u64 - 1)
                        .then_some(()),
                )
            },
        )?;
        // PE 1 holds the counters: it leaves last, so that no PE polls a PE that is gone (over
        // TCP an atomic to an exited PE fails with PeerLost).
        w.atomic_inc(left.as_ptr(), 1).ctx("atomic_inc")?;
        if me == 1 {
            poll_until(
                "waiting for the other PEs to stop polling",
                Duration::from_secs(20),
                || {
                    Ok(
                        (w.atomic_fetch(left.as_ptr(), 1).ctx("atomic_fetch")? == c.n as u64 - 1)
                            .then_some(()),
                    )
                },
            )?;
        }
        Ok(())
    }
}
