//! The one waiting loop every blocking call uses: spin briefly, then yield, then sleep in short
//! naps, so waits stay fast when each PE has a core and still make progress when PEs outnumber
//! cores. Every wait is bounded by `RSHMEM_TIMEOUT` and fails early when a peer PE is gone.
//!
//! A waiting thread also drives the remote transports that need this PE's CPU to serve its
//! peers ([`Progress`]; UCX, whose RMA and atomics over TCP are applied by the target's worker):
//! a PE that sits in a barrier or a wait answers its peers at once, instead of waking a
//! progress thread that shares its core. Once a wait naps, it leaves that to the transport.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::node::Liveness;

/// Spins before the first yield when this host's PEs outnumber its cores, and when they do not.
const SPINS_SHARED: u32 = 64;
const SPINS_OWN_CORE: u32 = 20_000;

/// How long a wait spins and yields before it naps between checks.
const NAP_AFTER: Duration = Duration::from_millis(20);
/// The same for a PE that has a core of its own and progresses a transport while it waits: it
/// keeps serving its peers at once (as OSHMEM's and NVSHMEM's waits do) for longer.
const NAP_AFTER_PROGRESSING: Duration = Duration::from_secs(1);

/// Whether a PE's waits share its cores (with other PEs of the host, or with the threads that
/// apply peers' requests to it), and whether those threads share them: `local_pes` PEs on
/// `cores` CPUs (this process's affinity), `served_by_threads` as in [`WaitPolicy::new`].
fn cores_shared(local_pes: usize, cores: usize, served_by_threads: bool) -> (bool, bool) {
    let serving = served_by_threads && local_pes >= cores;
    (local_pes > cores || serving, serving)
}

/// What a waiting thread calls between two checks of its condition: progress of a remote
/// transport. It must be cheap when there is nothing to do and must never block.
pub(crate) type Progress = Arc<dyn Fn() + Send + Sync>;

/// Parameters shared by every wait of one PE.
#[derive(Clone)]
pub(crate) struct WaitPolicy {
    pub me: usize,
    pub timeout: Option<Duration>,
    /// Spins before the first yield (small when PEs outnumber cores).
    pub spins: u32,
    /// Called between checks (see the module docs); None when no transport needs it.
    progress: Option<Progress>,
    /// When a wait starts napping.
    nap_after: Duration,
    /// The threads that apply peers' requests to this PE share its cores with it
    /// ([`WaitPolicy::new`]'s `served_by_threads` with no core to spare).
    serving_threads_share_core: bool,
}

crate::debug_fields!(WaitPolicy, |w| {
    me: w.me,
    timeout: w.timeout,
    spins: w.spins,
    progress: w.progress.is_some(),
    nap_after: w.nap_after,
});

impl WaitPolicy {
    /// `local_pes`: the PEs of this host. `served_by_threads`: peers' requests to this PE are
    /// applied by threads of its own (rshmem's TCP transport), which need a core too: a PE
    /// with no core to spare for them (e.g. bound to one core, as `mpirun` binds 2 ranks) then
    /// yields early instead of spinning while they wait to run (measured: a 2-PE barrier over
    /// TCP, each PE bound to one core, spent most of its 190-450 us in that spin).
    pub fn new(
        me: usize,
        timeout: Option<Duration>,
        local_pes: usize,
        served_by_threads: bool,
    ) -> Self {
        // The CPUs this process may run on (its affinity mask), not the host's.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (shared, serving) = cores_shared(local_pes, cores, served_by_threads);
        WaitPolicy {
            me,
            timeout,
            spins: if shared { SPINS_SHARED } else { SPINS_OWN_CORE },
            serving_threads_share_core: serving,
            progress: None,
            // PEs outnumbering the cores: a waiter that yields for 20 ms keeps the CPU from the
            // PEs (and their transport threads) it waits for; it naps after its spins instead.
            nap_after: if local_pes > cores {
                Duration::ZERO
            } else {
                NAP_AFTER
            },
        }
    }

    /// True if the threads that apply peers' requests to this PE have no core of their own
    /// (see [`WaitPolicy::new`]).
    pub fn serving_threads_share_core(&self) -> bool {
        self.serving_threads_share_core
    }

    /// Makes every wait call `p` between its checks until it naps (see the module docs).
    pub fn set_progress(&mut self, p: Option<Progress>) {
        let own_core = self.spins == SPINS_OWN_CORE;
        if p.is_some() && own_core {
            self.nap_after = NAP_AFTER_PROGRESSING;
        }
        self.progress = p;
    }

    /// Runs the progress hook, if any.
    #[inline]
    fn progress(&self) {
        if let Some(p) = &self.progress {
            p();
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
            self.progress();
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
            if start.elapsed() <= self.nap_after {
                // Past this, the waiter naps and the transport's own progress thread serves
                // the peers (a thread that sleeps 50 µs between checks would delay them).
                self.progress();
            }
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
            if waited > self.nap_after {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cores_shared;

    #[test]
    fn who_shares_the_cores() {
        // More PEs than CPUs: shared, whatever the transport.
        assert_eq!(cores_shared(4, 2, false), (true, false));
        // One PE bound to one CPU, TCP service threads: they share it.
        assert_eq!(cores_shared(1, 1, true), (true, true));
        assert_eq!(cores_shared(2, 2, true), (true, true));
        // A spare CPU for the service threads, or no service threads: a core of its own.
        assert_eq!(cores_shared(1, 2, true), (false, false));
        assert_eq!(cores_shared(1, 1, false), (false, false));
    }
}
