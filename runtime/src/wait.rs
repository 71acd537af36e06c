//! The one waiting loop every blocking call uses: spin briefly, then yield, then sleep in short
//! naps, so waits stay fast when each PE has a core and still make progress when PEs outnumber
//! cores. Every wait is bounded by `RSHMEM_TIMEOUT` and fails early when a peer PE is gone.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::node::Liveness;

/// Parameters shared by every wait of one PE.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitPolicy {
    pub me: usize,
    pub timeout: Option<Duration>,
    /// Spins before the first yield (small when PEs outnumber cores).
    pub spins: u32,
}

impl WaitPolicy {
    pub fn new(me: usize, timeout: Option<Duration>, local_pes: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        WaitPolicy {
            me,
            timeout,
            spins: if local_pes > cores { 64 } else { 20_000 },
        }
    }

    /// Waits until `done()` returns `Some`. `describe` builds the timeout message (what was
    /// awaited, including the last value seen); `pe` is the peer waited on when known.
    #[inline]
    pub fn wait<T>(
        &self,
        live: &Liveness,
        call: &'static str,
        pe: Option<usize>,
        mut done: impl FnMut() -> Option<T>,
        describe: impl Fn() -> String,
    ) -> Result<T> {
        if let Some(v) = done() {
            return Ok(v);
        }
        for _ in 0..self.spins {
            std::hint::spin_loop();
            if let Some(v) = done() {
                return Ok(v);
            }
        }
        self.wait_slow(live, call, pe, &mut done, &describe)
    }

    #[cold]
    fn wait_slow<T>(
        &self,
        live: &Liveness,
        call: &'static str,
        pe: Option<usize>,
        done: &mut dyn FnMut() -> Option<T>,
        describe: &dyn Fn() -> String,
    ) -> Result<T> {
        let start = Instant::now();
        let mut waiting = crate::hang::Waiting::enter(call, pe, start);
        loop {
            if let Some(v) = done() {
                return Ok(v);
            }
            waiting.poll(describe);
            let waited = start.elapsed();
            if live.any_failed() {
                if let Some(v) = done() {
                    return Ok(v);
                }
                if let Some((dead, reason)) = live.failed() {
                    let what = describe();
                    waiting.gave_up(
                        "peer-lost",
                        start.elapsed(),
                        &format!("PE {dead}: {reason}; was waiting for {what}"),
                    );
                    return Err(Error::PeerLost {
                        call,
                        me: self.me,
                        pe: dead,
                        reason: format!("{reason}; this PE was waiting for {what}"),
                    });
                }
            }
            if let Some(t) = self.timeout {
                if waited > t {
                    if let Some(v) = done() {
                        return Ok(v);
                    }
                    let what = describe();
                    waiting.gave_up("timed-out", waited, &what);
                    return Err(Error::Timeout {
                        call,
                        me: self.me,
                        pe,
                        what,
                        waited,
                    });
                }
            }
            if waited > Duration::from_millis(20) {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            std::thread::yield_now();
        }
    }
}
