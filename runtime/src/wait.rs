//! The one waiting loop every blocking call uses: spin briefly, then yield, then sleep in short
//! naps, so waits stay fast when each PE has a core and still make progress when PEs outnumber
//! cores. Every wait is bounded by `RSHMEM_TIMEOUT` and fails early when a peer PE is gone.
//!
//! A waiting thread also drives the remote transports that need this PE's CPU to serve its
//! peers ([`Progress`]; UCX, whose RMA and atomics over TCP are applied by the target's worker):
//! a PE that sits in a barrier or a wait answers its peers at once, instead of waking a
//! progress thread that shares its core. Once a wait naps, it leaves that to the transport.
//!
//! When a wait starts napping it tells the transport so ([`Progress::napping`]): UCX's progress
//! thread then serves the peers at once instead of leaving that to the waiter.
//!
//! A napping wait sleeps on the PE's [`Doorbell`] when it has one: the threads that apply
//! peers' writes to this PE (the TCP transport's service threads, and UCX's worker progress,
//! which applies RMA over TCP) ring it after each write, so the waiter wakes when its condition
//! may have changed instead of at the end of a fixed nap. When those threads are the only
//! writers of the PE's memory (CPU heap, no PE of its own host mapped, every other PE reached
//! over TCP or over UCX on TCP only), a nap lasts up to [`NAP_RUNG`] — a PE no longer
//! wakes thousands of times a second to look at memory nobody wrote, which is what kept 32 PEs
//! on 2 cores busy doing nothing in each other's way; otherwise up to [`NAP`].

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
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

/// A fixed nap between two checks of a waiting condition.
const NAP: Duration = Duration::from_micros(50);
/// The longest nap on a doorbell that every writer of the PE's memory rings (a bound, so that
/// timeouts, lost peers and the hang report are still looked at often).
const NAP_RUNG: Duration = Duration::from_millis(2);
/// One nap on a [`SharedBell`]. A wait on a shared-memory bell is woken by the store it waits
/// for and by a peer's loss (`Liveness` rings the bells), so its naps only bound how late a
/// timeout or a hang report (answered within [`crate::hang::ANSWER_WITHIN`]) can be seen.
/// Shorter naps cost wake-ups that do nothing: with naps of 2 ms doubling to 64 ms, the early
/// arrivals of a barrier that took longer than 2 ms woke to look once or more; 512 PEs on 2
/// cores switched context 1.75 times per PE per barrier (4.8–5.3 ms a barrier), and 1.0 times
/// (2.4–2.7 ms) with 64 ms naps from the start; 1,024 PEs took 19–94 ms, then 5.4–5.7 ms.
const NAP_SHARED: Duration = Duration::from_millis(64);
// A napping wait answers a hang report in time.
const _: () = assert!(NAP_SHARED.as_millis() < crate::hang::ANSWER_WITHIN.as_millis());

/// What wakes a PE's napping waits early: rung by the threads that write peers' data into this
/// PE's memory ([`Doorbell::ring`]); a wait reads [`Doorbell::seq`] before it checks its
/// condition and sleeps only while no ring came since ([`Doorbell::sleep`]), so no ring is lost.
#[derive(Debug, Default)]
pub(crate) struct Doorbell {
    /// Rings so far.
    seq: AtomicU32,
    /// Waits asleep on it (rings skip the wake-up while there are none).
    sleepers: AtomicU32,
    /// The threads asleep on it.
    threads: Mutex<Vec<Thread>>,
}

impl Doorbell {
    /// After a write to this PE's memory: wakes the waits asleep on it.
    #[inline]
    pub(crate) fn ring(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.wake();
        }
    }

    #[cold]
    fn wake(&self) {
        if let Ok(ts) = self.threads.lock() {
            for t in ts.iter() {
                t.unpark();
            }
        }
    }

    /// The rings so far (read before checking a condition).
    #[inline]
    pub(crate) fn seq(&self) -> u32 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Sleeps up to `nap` unless it rang since [`seq`](Doorbell::seq) returned `seen`.
    fn sleep(&self, seen: u32, nap: Duration) {
        let me = std::thread::current();
        let id = me.id();
        match self.threads.lock() {
            Ok(mut ts) => ts.push(me),
            Err(_) => return std::thread::sleep(NAP),
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // A ring after `seen` either shows here, or found this sleeper registered and unparks
        // it (an unpark before the park makes the park return at once). A park may also end
        // for no reason: sleep again until the nap is over.
        let end = Instant::now() + nap;
        while self.seq.load(Ordering::SeqCst) == seen {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        if let Ok(mut ts) = self.threads.lock() {
            if let Some(i) = ts.iter().position(|t| t.id() == id) {
                ts.swap_remove(i);
            }
        }
    }
}

/// A bell in shared memory: two 32-bit words at `addr` in a PE's control heap (a ring count, the
/// count of that PE's waits asleep on it; `crate::heap::internal::BELL`). The PEs of a host
/// ring each other's bells after storing a barrier or team flag into each other's control heap
/// ([`SharedBell::ring`]), and a napping wait on a flag that only those stores raise sleeps on
/// its own PE's bell (a futex shared between processes) instead of waking every [`NAP`] to look:
/// with many PEs to a core, each nap was a context switch that kept the CPU from the PEs with
/// work to do.
///
/// No ring is lost: the waiter counts itself asleep, then checks its condition again, then
/// sleeps only while the ring count is what it read before that check; a ringer stores its flag,
/// then (sequentially consistent) reads the sleeper count and, when someone sleeps, bumps the
/// ring count and wakes them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SharedBell {
    /// The ring count (the futex word); the sleeper count is the next word.
    addr: usize,
}

impl SharedBell {
    /// The bell at `addr` (8 bytes, 4-aligned, mapped as long as the bell is used).
    pub(crate) fn at(addr: usize) -> SharedBell {
        SharedBell { addr }
    }

    fn seq(&self) -> &AtomicU32 {
        // SAFETY: `at`'s contract: a 4-aligned word mapped while the bell is used.
        unsafe { &*(self.addr as *const AtomicU32) }
    }

    fn sleepers(&self) -> &AtomicU32 {
        // SAFETY: as in `seq`, the word after it.
        unsafe { &*((self.addr + 4) as *const AtomicU32) }
    }

    /// After a store that a wait on this bell's PE may be waiting for: wakes its sleepers.
    #[inline]
    pub(crate) fn ring(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleepers().load(Ordering::SeqCst) > 0 {
            self.wake();
        }
    }

    #[cold]
    fn wake(&self) {
        self.seq().fetch_add(1, Ordering::SeqCst);
        // SAFETY: FUTEX_WAKE on a mapped, aligned u32; shared (not private): the sleepers are
        // other processes mapping the same page.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.addr as *const u32,
                libc::FUTEX_WAKE,
                i32::MAX,
            );
        }
    }

    /// Sleeps up to `nap` unless `done` holds once this wait counts as asleep, or the bell
    /// rings. Returns `done`'s value when it held.
    fn sleep<T>(&self, nap: Duration, done: &mut dyn FnMut() -> Option<T>) -> Option<T> {
        let seen = self.seq().load(Ordering::SeqCst);
        self.sleepers().fetch_add(1, Ordering::SeqCst);
        // Pairs with the ringer's fence: either it sees this sleeper, or this check sees its
        // store.
        std::sync::atomic::fence(Ordering::SeqCst);
        let v = done();
        if v.is_none() {
            let ts = libc::timespec {
                tv_sec: nap.as_secs() as libc::time_t,
                tv_nsec: nap.subsec_nanos() as libc::c_long,
            };
            // SAFETY: FUTEX_WAIT on a mapped, aligned u32 with a relative timeout; it returns
            // at once when the word no longer holds `seen` (a ring since), when woken, on a
            // signal, or at the timeout: the caller checks its condition again in every case.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.addr as *const u32,
                    libc::FUTEX_WAIT,
                    seen,
                    &ts as *const libc::timespec,
                );
            }
        }
        self.sleepers().fetch_sub(1, Ordering::SeqCst);
        v
    }
}

/// The CPUs online on this host (not this process's affinity: the same answer in every PE of
/// the host).
pub(crate) fn host_cpus() -> Option<usize> {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(online).ok().filter(|&c| c > 0)
}

/// Whether world barriers are host barriers (`World::host_barrier`): every one of the `n`
/// PEs is on this host (`n_local` of them), they outnumber the host's CPUs (`host_cpus`, the
/// same count in every PE of the host), and the arrival word counts them. With a core each a
/// dissemination barrier is faster: its rounds' flags each go to another cache line, where the
/// host barrier's arrivals queue on one (on 16 cores: 16 PEs 1.06 against 2.3–2.5 µs, 4 PEs
/// 0.54 against 0.71–0.77 µs; 64 PEs 140–159 against 94–99 µs, 256 PEs 933–998 against
/// 385–397 µs). `force` (`RSHMEM_HOST_BARRIER`): Some(true) for every one-host job of more
/// than one PE, Some(false) never.
pub(crate) fn host_barrier_serves(
    n_local: usize,
    n: usize,
    host_cpus: usize,
    force: Option<bool>,
) -> bool {
    let many = match force {
        None => n > host_cpus.max(2),
        Some(on) => on && n > 1,
    };
    n_local == n && many && n < 1 << crate::heap::internal::HOST_BARRIER_COUNT_BITS
}

/// Whether a PE's waits share its cores (with other PEs of the host, or with the threads that
/// apply peers' requests to it), and whether those threads share them with it and should poll
/// for a while after each request: `local_pes` PEs on `cores` CPUs (this process's affinity) of
/// the host's `host_cpus`, `served_by_threads` as in [`WaitPolicy::new`]. Polling pays when each
/// PE has a core that its service threads share (e.g. `mpirun` binds 2 ranks to one core each);
/// when the host's PEs outnumber its CPUs, every polling thread takes a CPU from a PE or a
/// thread with work to do, so they block at once.
fn cores_shared(
    local_pes: usize,
    cores: usize,
    host_cpus: usize,
    served_by_threads: bool,
) -> (bool, bool) {
    let serving = served_by_threads && local_pes >= cores && local_pes <= host_cpus.max(cores);
    (local_pes > cores || serving, serving)
}

/// What a waiting thread calls between two checks of its condition: progress of a remote
/// transport ([`Progress::progress`], cheap when there is nothing to do, never blocking), and,
/// once, when it stops doing so to nap ([`Progress::napping`]): from then on the transport's
/// own thread serves the peers (and rings the PE's doorbell), so it must not wait for the
/// waiter to come back.
pub(crate) trait Progress: Send + Sync {
    /// Progresses the transport once.
    fn progress(&self);
    /// The waiting thread stops progressing the transport and naps.
    fn napping(&self);
}

/// Parameters shared by every wait of one PE.
#[derive(Clone)]
pub(crate) struct WaitPolicy {
    pub me: usize,
    pub timeout: Option<Duration>,
    /// Spins before the first yield (small when PEs outnumber cores).
    pub spins: u32,
    /// Called between checks (see the module docs); None when no transport needs it.
    progress: Option<Arc<dyn Progress>>,
    /// When a wait starts napping.
    nap_after: Duration,
    /// The threads that apply peers' requests to this PE share its cores with it
    /// ([`WaitPolicy::new`]'s `served_by_threads` with no core to spare).
    serving_threads_share_core: bool,
    /// The doorbell napping waits sleep on, and how long one nap may last
    /// ([`WaitPolicy::set_doorbell`]).
    bell: Option<(Arc<Doorbell>, Duration)>,
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
        let host_cpus = host_cpus().unwrap_or(cores);
        let (shared, serving) = cores_shared(local_pes, cores, host_cpus, served_by_threads);
        WaitPolicy {
            me,
            timeout,
            spins: if shared { SPINS_SHARED } else { SPINS_OWN_CORE },
            serving_threads_share_core: serving,
            progress: None,
            bell: None,
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

    /// True if this host's PEs outnumber the CPUs this PE may run on (its waits nap after a
    /// few checks).
    pub fn pes_outnumber_cores(&self) -> bool {
        self.nap_after.is_zero()
    }

    /// Makes every wait call `p` between its checks until it naps (see the module docs).
    pub fn set_progress(&mut self, p: Option<Arc<dyn Progress>>) {
        let own_core = self.spins == SPINS_OWN_CORE;
        if p.is_some() && own_core {
            self.nap_after = NAP_AFTER_PROGRESSING;
        }
        self.progress = p;
    }

    /// Makes napping waits sleep on `bell`; `only_writer`: the threads that ring it are the
    /// only writers of this PE's memory (see the module docs), so a nap may last longer.
    pub fn set_doorbell(&mut self, bell: Arc<Doorbell>, only_writer: bool) {
        self.bell = Some((bell, if only_writer { NAP_RUNG } else { NAP }));
    }

    /// Runs the progress hook, if any.
    #[inline]
    fn progress(&self) {
        if let Some(p) = &self.progress {
            p.progress();
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
        done: impl FnMut() -> Option<T>,
        describe: impl Fn() -> String,
    ) -> Result<T> {
        self.wait_rung(live, call, pe, None, done, describe)
    }

    /// [`wait`](WaitPolicy::wait) for a condition that only stores followed by a ring of
    /// `bell` (this PE's [`SharedBell`]) can make true, besides the writes that ring the PE's
    /// [`Doorbell`]: a napping wait sleeps on `bell` for up to [`NAP_SHARED`].
    #[inline]
    pub fn wait_rung<T>(
        &self,
        live: &Liveness,
        call: &'static str,
        pe: Option<usize>,
        bell: Option<SharedBell>,
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
        self.wait_slow(live, call, pe, bell, &mut done, &describe)
    }

    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn wait_slow<T>(
        &self,
        live: &Liveness,
        call: &'static str,
        pe: Option<usize>,
        shared: Option<SharedBell>,
        done: &mut dyn FnMut() -> Option<T>,
        describe: &dyn Fn() -> String,
    ) -> Result<T> {
        let start = Instant::now();
        let mut waiting = crate::hang::Waiting::enter(call, pe, start);
        let mut napped = false;
        loop {
            if start.elapsed() <= self.nap_after {
                // Past this, the waiter naps and the transport's own progress thread serves
                // the peers (a thread that sleeps 50 µs between checks would delay them).
                self.progress();
            }
            let rung = self.bell.as_ref().map_or(0, |(b, _)| b.seq());
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
                if !napped {
                    napped = true;
                    if let Some(p) = &self.progress {
                        p.napping();
                    }
                }
                match (&shared, &self.bell) {
                    (Some(b), _) => {
                        // Not past the timeout by more than the first nap.
                        let left = self
                            .timeout
                            .map_or(NAP_SHARED, |t| t.saturating_sub(waited).max(NAP_RUNG));
                        if let Some(v) = b.sleep(NAP_SHARED.min(left), done) {
                            return Ok(v);
                        }
                    }
                    (None, Some((b, nap))) => b.sleep(rung, *nap),
                    (None, None) => std::thread::sleep(NAP),
                }
                continue;
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{cores_shared, Doorbell};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_ring_wakes_a_sleeper_and_none_is_lost() {
        let b = Arc::new(Doorbell::default());
        // Rung after the sleeper read the count: the sleep returns at once.
        let seen = b.seq();
        b.ring();
        let t0 = Instant::now();
        b.sleep(seen, Duration::from_secs(10));
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "a ring before the sleep was lost"
        );
        // Rung while it sleeps: it wakes long before its nap ends.
        let b2 = b.clone();
        let seen = b.seq();
        let sleeper = std::thread::spawn(move || {
            let t0 = Instant::now();
            b2.sleep(seen, Duration::from_secs(20));
            t0.elapsed()
        });
        while b.sleepers.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        b.ring();
        let slept = sleeper.join().unwrap();
        assert!(
            slept < Duration::from_secs(10),
            "the ring did not wake the sleeper ({slept:?})"
        );
        // Not rung: the nap runs to its end.
        let t0 = Instant::now();
        b.sleep(b.seq(), Duration::from_millis(30));
        assert!(t0.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn a_shared_bell_wakes_its_sleeper_and_no_ring_is_lost() {
        use super::SharedBell;
        use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
        // The two words as they lie in a control heap (ring count, sleepers).
        let words: &'static [AtomicU32; 2] =
            Box::leak(Box::new([AtomicU32::new(0), AtomicU32::new(0)]));
        let bell = SharedBell::at(words.as_ptr() as usize);
        let flag: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let up = || flag.load(Ordering::Acquire).then_some(());
        // Raised before the sleep: the check made once asleep sees it, no wait at all.
        flag.store(true, Ordering::Release);
        let t0 = Instant::now();
        assert_eq!(bell.sleep(Duration::from_secs(20), &mut { up }), Some(()));
        assert!(t0.elapsed() < Duration::from_secs(5));
        // A ring with nobody asleep costs no wake-up (the ring count stays).
        bell.ring();
        assert_eq!(words[0].load(Ordering::SeqCst), 0);
        // Raised and rung while it sleeps: it wakes long before its nap ends.
        flag.store(false, Ordering::Release);
        let sleeper = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut up = || flag.load(Ordering::Acquire).then_some(());
            while bell.sleep(Duration::from_secs(20), &mut up).is_none() {}
            t0.elapsed()
        });
        while words[1].load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        flag.store(true, Ordering::Release);
        bell.ring();
        let slept = sleeper.join().unwrap();
        assert!(
            slept < Duration::from_secs(10),
            "the ring did not wake the sleeper ({slept:?})"
        );
        assert_eq!(
            words[1].load(Ordering::SeqCst),
            0,
            "the sleeper did not count itself out"
        );
        // Not rung: the nap runs to its end.
        flag.store(false, Ordering::Release);
        let t0 = Instant::now();
        assert_eq!(bell.sleep(Duration::from_millis(30), &mut { up }), None);
        assert!(t0.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn a_recorded_failure_rings_the_bells_waits_sleep_on() {
        use super::SharedBell;
        use crate::node::Liveness;
        use std::sync::atomic::{AtomicU32, Ordering};
        let words: &'static [AtomicU32; 2] =
            Box::leak(Box::new([AtomicU32::new(0), AtomicU32::new(0)]));
        let bell = SharedBell::at(words.as_ptr() as usize);
        let live: &'static Liveness = Box::leak(Box::new(Liveness::new(4)));
        live.on_failure(Box::new(move || bell.ring()));
        // A barrier wait asleep on the bell, waiting for a store that never comes.
        let sleeper = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut failed = || live.any_failed().then_some(());
            while bell.sleep(Duration::from_secs(20), &mut failed).is_none() {}
            t0.elapsed()
        });
        while words[1].load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        live.report(2, "gone".into());
        let slept = sleeper.join().unwrap();
        assert!(
            slept < Duration::from_secs(10),
            "the failure did not wake the sleeper ({slept:?})"
        );
    }

    #[test]
    fn who_shares_the_cores() {
        // More PEs than CPUs: shared, whatever the transport.
        assert_eq!(cores_shared(4, 2, 2, false), (true, false));
        // One PE bound to one CPU, TCP service threads: they share it.
        assert_eq!(cores_shared(1, 1, 2, true), (true, true));
        assert_eq!(cores_shared(2, 2, 2, true), (true, true));
        // Two PEs each bound to one of the host's two CPUs: their service threads share them.
        assert_eq!(cores_shared(2, 1, 2, true), (true, true));
        // 16 PEs on a 2-CPU host: shared, and the service threads must not poll.
        assert_eq!(cores_shared(16, 2, 2, true), (true, false));
        assert_eq!(cores_shared(16, 1, 2, true), (true, false));
        // A spare CPU for the service threads, or no service threads: a core of its own.
        assert_eq!(cores_shared(1, 2, 2, true), (false, false));
        assert_eq!(cores_shared(1, 1, 2, false), (false, false));
    }
}
