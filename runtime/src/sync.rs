//! Ordering (fence, quiet), barriers, and point-to-point synchronization (wait/test).
//!
//! * [`World::fence`] — **one-sided**: puts, atomics and signals to the same PE issued before it
//!   are delivered before those issued after it.
//! * [`World::quiet`] — **one-sided**: every put, atomic and signal this PE issued before it is
//!   complete and visible at its target when it returns.
//! * [`World::barrier_all`] — **collective**: quiet, then wait until every PE arrives.
//! * [`World::sync_all`] — **collective**: wait until every PE arrives (no quiet; on the
//!   shared-memory transport the two are equivalent).
//! * `wait_until*` / `test*` — **local**: watch symmetric variables of this PE that other PEs
//!   update; a satisfied wait acquires (data written before the update is visible).
//!
//! The `*_any` calls return one satisfied index, and a series of them returns every satisfied
//! index in turn (OpenSHMEM requires that no satisfied element is starved): each remembers,
//! per array address, where the next call starts looking ([`pick_any`]).
//!
//! Every blocking call is bounded by `RSHMEM_TIMEOUT` and fails early with
//! [`crate::Error::PeerLost`] when a PE it depends on is gone.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::heap::internal::{
    host_barrier_bells, BARRIER_FLAGS, BARRIER_ROUNDS, BELL, CHECK_WORDS, FLAG_STRIDE,
    HOST_BARRIER, HOST_BARRIER_BELL, HOST_BARRIER_COUNT_BITS, HOST_BARRIER_NAMED,
    HOST_BARRIER_SLOTS, PEER_NOTICE,
};
use crate::types::{AmoInt, Bits, Cmp};
use crate::wait::SharedBell;
use crate::world::World;

/// Declares the public wait and test calls on a set of variables, one row a pair of calls:
/// the docs and name of the call with one comparison value, then those of the call with one
/// value per element (`_vector`), whether they block (`Block`) or look once (`Now`), and what
/// they return (see [`SetAnswer`]).
macro_rules! set_calls {
    ($($(#[$doc:meta])* $name:ident, $(#[$vdoc:meta])* $vname:ident($mode:ident) -> $ret:ty;)+) => {$(
        set_calls!(@one
            (ivars: *const T, nelems: usize, status: Option<&[i32]>, cmp: Cmp, value: T)
            (ivars, nelems, status, cmp, &|_| value)
            $(#[$doc])* $name $mode $ret);
        set_calls!(@one
            (ivars: *const T, status: Option<&[i32]>, cmp: Cmp, values: &[T])
            (ivars, values.len(), status, cmp, &|i| values[i])
            $(#[$vdoc])* $vname $mode $ret);
    )+};
    (@one ($($p:tt)*) ($($a:tt)*) $(#[$doc:meta])* $name:ident $mode:ident $ret:ty) => {
        $(#[$doc])*
        pub fn $name<T: AmoInt>(&self, $($p)*) -> Result<$ret> {
            self.set_call(stringify!($name), Mode::$mode, $($a)*)
        }
    };
}

impl World {
    /// **One-sided.** Orders this PE's puts, atomics and signals per target PE. Like
    /// `shmem_fence`. It cannot fail (OpenSHMEM's `shmem_fence` returns nothing): when a PE
    /// is known to be gone it logs an error, and the next [`quiet`](World::quiet), barrier or
    /// wait returns [`Error::PeerLost`].
    #[inline]
    pub fn fence(&self) {
        fence(Ordering::SeqCst);
        if let Err(e) = self.fence_transports("fence") {
            tracing::error!(target: "rshmem::sync", "fence on PE {}: {e}", self.me);
        }
        if self.live.any_failed() {
            self.fence_after_loss();
        }
    }

    /// Calls `fence` of every transport in use that does not deliver each PE's operations in
    /// issue order by itself (of the built-in ones only UCX).
    #[inline]
    fn fence_transports(&self, call: &'static str) -> Result<()> {
        use crate::transport::{Caps, TransportOps};
        if !self.xport.caps().contains(Caps::ORDERED) {
            self.xport.fence(call)?;
        }
        self.remotes.fence(call)
    }

    /// **Local.** What this PE's barriers and remote traffic cost so far: the dissemination
    /// rounds it ran (every barrier, sync and team sync, those inside collectives and heap
    /// calls included: ⌈log2 n⌉ for each over n PEs), the requests it sent over rshmem's
    /// TCP transport and the connections that transport holds. For diagnostics and tests (e.g. that a barrier sends O(log n) messages).
    pub fn comm_counters(&self) -> CommCounters {
        let (tcp_round_trips, tcp_one_way) = self.remotes.tcp().map_or((0, 0), |n| n.counters());
        let (tcp_opened, tcp_accepted) = self.remotes.tcp().map_or((0, 0), |n| n.connections());
        CommCounters {
            sync_rounds: self.sync_rounds.load(Ordering::Relaxed),
            tcp_round_trips,
            tcp_one_way,
            tcp_opened,
            tcp_accepted,
            heap_peers_mapped: self.heap.peers_mapped(),
            ctrl_peers_mapped: self.ctrl.peers_mapped(),
        }
    }

    /// **Local.** Where rshmem's TCP transport of this PE listens (None when the job has no
    /// TCP transport). The listener stays open for the whole job, since PEs connect at first
    /// use; every connection to it must present the job token in its handshake or is closed
    /// (docs/transports.md). For diagnostics and tests.
    pub fn tcp_listener(&self) -> Option<std::net::SocketAddr> {
        self.remotes.tcp().map(|n| n.listened())
    }

    #[cold]
    fn fence_after_loss(&self) {
        if let Some((pe, reason)) = self.live.failed() {
            tracing::error!(target: "rshmem::sync", "fence on PE {}: PE {pe} is gone ({reason}); puts to it are lost", self.me);
        }
    }

    /// **One-sided.** Completes this PE's outstanding puts, atomics and signals. Like
    /// `shmem_quiet`.
    /// On the GPU heap this waits for the copies and atomics queued on rshmem's stream, so it
    /// can fail with a CUDA error. When a PE is known to be gone (it exited or crashed) it
    /// returns [`Error::PeerLost`] naming it: puts to it were not delivered, whichever
    /// transport carried them (on shared memory they land in memory nobody reads any more).
    #[inline]
    pub fn quiet(&self) -> Result<()> {
        self.quiet_all("quiet")?;
        if self.live.any_failed() {
            return Err(self.peer_lost_error("quiet"));
        }
        Ok(())
    }

    #[cold]
    fn peer_lost_error(&self, call: &'static str) -> Error {
        let (pe, reason) = self.live.failed().unwrap_or_default();
        Error::PeerLost {
            call,
            me: self.me,
            pe,
            reason: format!("{reason}; puts to it may not have been delivered"),
        }
    }

    /// **Collective.** Completes this PE's outstanding operations ([`quiet`](World::quiet)) and
    /// waits for every PE. Like `shmem_barrier_all`.
    pub fn barrier_all(&self) -> Result<()> {
        self.barrier_all_named("barrier_all")
    }

    /// **Collective.** Waits for every PE without completing outstanding operations. Like
    /// `shmem_sync_all`.
    pub fn sync_all(&self) -> Result<()> {
        self.sync_all_named("sync_all")
    }

    pub(crate) fn barrier_all_named(&self, call: &'static str) -> Result<()> {
        self.quiet_all(call)?;
        self.sync_all_named(call)
    }

    /// Barrier over all PEs: the host barrier when every PE is on this host
    /// ([`host_barrier`](World::host_barrier)), else a dissemination barrier through flags in
    /// each PE's control-heap internal area (see [`dissemination`](World::dissemination)).
    pub(crate) fn sync_all_named(&self, call: &'static str) -> Result<()> {
        self.sync_all_checked(call, None, false).map(drop)
    }

    /// [`sync_all_named`](World::sync_all_named) that can also compare `check` across PEs and
    /// watch for peers that left during finalize (`last`); see
    /// [`dissemination`](World::dissemination).
    pub(crate) fn sync_all_checked(
        &self,
        call: &'static str,
        check: Option<u64>,
        last: bool,
    ) -> Result<Option<Mismatch>> {
        if self.n == 1 {
            fence(Ordering::SeqCst);
            return Ok(None);
        }
        let epoch = self.barrier_epoch.fetch_add(1, Ordering::AcqRel) + 1;
        let kind = if call == "finalize" {
            KIND_FINALIZE
        } else {
            KIND_BARRIER
        };
        // Every PE on this host, more than its CPUs: one shared arrival count
        // ([`host_barrier`], [`crate::wait::host_barrier_serves`]). Finalize's last barrier stays a
        // dissemination barrier (its peers may leave once they passed it, which only
        // per-partner flags tell apart from leaving early); it follows finalize's first
        // barrier, which every PE passed only if every PE is in finalize.
        if !last && self.host_barrier {
            let mine = kind
                | if check.is_some() {
                    KIND_CHECKED
                } else {
                    KIND_PLAIN
                };
            let all = self.host_barrier(call, epoch, mine)?;
            if all != mine {
                return Err(kinds_mismatch(call, epoch, mine, all));
            }
            if check.is_none() {
                return Ok(None);
            }
            // A heap call's check: compared in a dissemination barrier, which every PE makes
            // too (every one of them is in a checked call: the kinds agree).
        }
        let mut kinds = kind;
        let r = self.dissemination(
            call,
            &WorldMembers(self),
            epoch,
            check,
            last,
            Some(&mut kinds),
            None,
        );
        if r.is_ok() && kinds != kind {
            // Every PE saw every PE's kind (the flags carry what each saw so far): all fail.
            return Err(kinds_mismatch(call, epoch, kind, kinds));
        }
        r
    }

    /// Maps the control heaps of this PE's world-barrier partners on this host (PEs `me ± 2^k`)
    /// where they are mapped at first access; a partner that cannot be mapped is left to the
    /// barrier to report.
    pub(crate) fn map_sync_partners(&self) {
        let mut dist = 1;
        while dist < self.n {
            for pe in [
                (self.me + dist) % self.n,
                (self.me + self.n - dist) % self.n,
            ] {
                if let Some(Some(l)) = self.node.local_of.get(pe) {
                    let _ = self.ctrl_mapped("finalize", *l);
                }
            }
            dist *= 2;
        }
    }

    /// The world barrier when every PE is on this host: each PE adds itself, and the kind of
    /// its call, to one arrival word in local PE 0's control heap ([`HOST_BARRIER`]; a count of
    /// arrivals, of finalizes and of checked heap calls, [`HOST_BARRIER_COUNT_BITS`] each); the last to
    /// arrive keeps the sum for this barrier's epoch parity, clears the word, publishes the
    /// epoch and rings the barrier's bell, which wakes every PE asleep on it in one `futex`
    /// call. A PE runs about twice per barrier instead of once per round of a dissemination
    /// barrier (⌈log2 n⌉ rounds): what a barrier costs when the PEs outnumber the cores. (The
    /// kept sum of one parity is read by every PE before any can arrive at the barrier after
    /// next, which overwrites it.) Returns the kinds of call every PE made, as `KIND_*` bits.
    fn host_barrier(&self, call: &'static str, epoch: u64, kind: u64) -> Result<u64> {
        // After a PE was lost the count holds arrivals of a barrier that never completed: no
        // later one could be counted right.
        if self.live.any_failed() {
            return Err(self.peer_lost_error(call));
        }
        self.ctrl_mapped(call, 0)?;
        let word = |i: usize| -> &AtomicU64 {
            // SAFETY: the host barrier's words are aligned u64s in local PE 0's control-heap
            // internal area, mapped (above) for the World's lifetime.
            unsafe { &*(self.ctrl.internal_addr(0, HOST_BARRIER + 64 * i) as *const AtomicU64) }
        };
        let (arrived, done) = (word(0), word(1));
        let sum = word(2 + (epoch & 1) as usize);
        let (sleeps_on, rings) = host_barrier_bells(self.ctrl.me_local());
        let bell = SharedBell::at(self.ctrl.internal_addr(0, sleeps_on));
        let leader = rings.map(|g| SharedBell::at(self.ctrl.internal_addr(0, g)));
        let leaders = SharedBell::at(self.ctrl.internal_addr(0, HOST_BARRIER_BELL));
        let slot = |l: usize| {
            (l < HOST_BARRIER_NAMED).then(|| {
                // SAFETY: as `word`: an aligned u32 of the slots, below the team area.
                unsafe {
                    &*(self.ctrl.internal_addr(0, HOST_BARRIER_SLOTS + 4 * l)
                        as *const std::sync::atomic::AtomicU32)
                }
            })
        };
        if let Some(s) = slot(self.ctrl.me_local()) {
            s.store(epoch as u32, Ordering::Relaxed);
        }
        let field = |v: u64, i: u32| {
            (v >> (i * HOST_BARRIER_COUNT_BITS)) & ((1 << HOST_BARRIER_COUNT_BITS) - 1)
        };
        let mine = 1
            | u64::from(kind & KIND_FINALIZE != 0) << HOST_BARRIER_COUNT_BITS
            | u64::from(kind & KIND_CHECKED != 0) << (2 * HOST_BARRIER_COUNT_BITS);
        // AcqRel: each arrival releases this PE's writes; the last one acquires them all
        // (a release sequence of read-modify-writes) and releases them with `done`.
        let all = arrived.fetch_add(mine, Ordering::AcqRel) + mine;
        if field(all, 0) == self.n as u64 {
            sum.store(all, Ordering::Relaxed);
            arrived.store(0, Ordering::Relaxed);
            done.store(epoch, Ordering::SeqCst);
            leaders.ring();
        } else {
            // The first PE (local index) that has not arrived, when the slots tell.
            let missing = || {
                (0..self.n)
                    .find(|&l| slot(l).is_some_and(|s| s.load(Ordering::Relaxed) != epoch as u32))
            };
            let r = self.wait.wait_rung(
                &self.live,
                call,
                missing().map(|l| self.node.pes[l]),
                Some(bell),
                || (done.load(Ordering::Acquire) >= epoch).then_some(()),
                || {
                    let who = missing().map_or("every PE".to_string(), |l| {
                        format!("PE {} (and any other missing PE)", self.node.pes[l])
                    });
                    format!(
                        "{who} to reach barrier #{epoch} ({} of {} PEs have arrived)",
                        field(arrived.load(Ordering::Relaxed), 0),
                        self.n
                    )
                },
            );
            // A timeout names a PE that has not arrived (now), as a dissemination barrier names
            // the partner it waited for.
            r.map_err(|e| match e {
                Error::Timeout {
                    call,
                    me,
                    pe: _,
                    what,
                    waited,
                } => Error::Timeout {
                    call,
                    me,
                    pe: missing().map(|l| self.node.pes[l]),
                    what,
                    waited,
                },
                e => e,
            })?;
        }
        // A group's leader wakes its group: the wake-ups of one barrier are spread over the
        // leaders instead of one `futex` call waking every PE in turn.
        if let Some(g) = leader {
            g.ring();
        }
        // Ordered after the acquire of `done` (or written by this PE).
        let all = sum.load(Ordering::Relaxed);
        let n = self.n as u64;
        let (fin, chk) = (field(all, 1), field(all, 2));
        let has = |b: bool, k: u64| if b { k } else { 0 };
        Ok(has(fin > 0, KIND_FINALIZE)
            | has(fin < n, KIND_BARRIER)
            | has(chk > 0, KIND_CHECKED)
            | has(chk < n, KIND_PLAIN))
    }

    /// One dissemination barrier over the members `m` (all PEs, or a team) through flags in
    /// each PE's control heap: in round k member i raises its flag (the epoch) on member
    /// i+2^k — a store on this node, a store request over TCP otherwise — and waits for member
    /// i−2^k's (always a local poll).
    ///
    /// `check`: every member passes a value (a [`digest`] of its call's arguments); each
    /// round's flag is preceded by two words with the smallest and largest (value, PE) seen so
    /// far ([`CheckAgg`]), so after the last round every member holds the same extremes of all
    /// members' values, at no extra round trip. Returns them when they differ (every member
    /// then returns the same pair). The words are double-buffered by epoch parity: a member is
    /// at most one barrier ahead of the reader of its last words.
    ///
    /// `last` (finalize's last barrier): peers that finished it may leave at any time, so
    /// only a peer this PE waits on, seen gone with its flag still down, is an error (its
    /// stores were all made before it left: in memory at once, over TCP before the end of
    /// its stream, allowed a short grace for the other sockets' end to be seen first).
    ///
    /// `kinds` (when given): the flags also carry, above the epoch ([`EPOCH_MASK`]), the kinds of call (`KIND_*` bits) the storing PE saw so far, its own
    /// included: `kinds` starts as this PE's and ends as every member's (each member hears from
    /// every other through the rounds), so a finalize that meets a barrier_all is found by
    /// every member. A flag of a member already one barrier ahead tells nothing (its kinds are
    /// of the next barrier).
    ///
    /// `and`: a word every member passes in; each round's flag is preceded by the AND of the
    /// words seen so far (at [`Members::and_off`]), so it ends as the AND of every member's
    /// word, identical on every member, in the same rounds (an all-reduce for free: AND is
    /// idempotent, so the PEs a dissemination barrier hears from twice do no harm).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dissemination<M: Members>(
        &self,
        call: &'static str,
        m: &M,
        epoch: u64,
        check: Option<u64>,
        last: bool,
        mut kinds: Option<&mut u64>,
        mut and: Option<&mut u64>,
    ) -> Result<Option<Mismatch>> {
        let n = m.n();
        let me = m.me();
        let my_local = self.ctrl.me_local();
        let parity = (epoch & 1) as usize;
        let mut agg = check.map(|v| CheckAgg::new(v, self.me));
        let mut dist = 1usize;
        let mut round = 0usize;
        while dist < n {
            if round >= m.max_rounds() {
                return Err(Error::State {
                    call,
                    reason: format!("{n} members need more than {round} barrier rounds"),
                });
            }
            self.sync_rounds.fetch_add(1, Ordering::Relaxed);
            let to = m.pe((me + dist) % n);
            let from_pe = m.pe((me + n - dist) % n);
            let slot = m.flag_off(round);
            let mine = self.ctrl.internal_addr(my_local, slot);
            let words = agg
                .as_ref()
                .map(|a| (m.check_off(round, parity), a.lo, a.hi));
            if let Some((words, lo, hi)) = words {
                self.ctrl_store(call, to, words, lo)?;
                self.ctrl_store(call, to, words + 8, hi)?;
            }
            let and_at = match and.as_deref() {
                Some(&v) => {
                    let Some(at) = m.and_off(round, parity) else {
                        return Err(Error::State {
                            call,
                            reason: "this barrier has no room for an AND word".into(),
                        });
                    };
                    self.ctrl_store(call, to, at, v)?;
                    Some(at)
                }
                None => None,
            };
            let tag = kinds.as_deref().copied().unwrap_or(0);
            self.ctrl_store(call, to, slot, epoch | tag)?;
            let remote = match self.node.local_of[from_pe] {
                // The partner this PE waits on, mapped here (lazy mapping) while it is alive,
                // so that its notice word can be read should it leave ([`World::root_cause`]).
                // A failure here is seen by the wait below.
                Some(l) => {
                    let _ = self.ctrl_mapped(call, l);
                    false
                }
                None => true,
            };
            let mut seen_gone: Option<std::time::Instant> = None;
            // SAFETY: flag slots are aligned u64s inside my control heap's internal area,
            // mapped for the World's lifetime.
            let flag = || unsafe { u64::load(mine, Ordering::Acquire) };
            let up = || (flag() & EPOCH_MASK) >= epoch;
            // A local partner's flag store rings my bell ([`World::ctrl_store`]).
            let bell = (!remote).then(|| SharedBell::at(self.ctrl.internal_addr(my_local, BELL)));
            self.wait
                .wait_rung(
                    &self.live,
                    call,
                    Some(from_pe),
                    bell,
                    || {
                        if up() {
                            return Some(Ok(()));
                        }
                        if !last || !self.live.is_lost(from_pe) {
                            return None;
                        }
                        // Gone: its flag is final once the loss is seen (memory), or after a
                        // short grace (its TCP stream's end may be seen on another socket).
                        let since = *seen_gone.get_or_insert_with(std::time::Instant::now);
                        if up() {
                            return Some(Ok(()));
                        }
                        if remote && since.elapsed() < LAST_BARRIER_GRACE {
                            return None;
                        }
                        let root = self.root_cause(from_pe);
                        self.live.note_root(root);
                        Some(Err(Error::PeerLost {
                            call,
                            me: self.me,
                            pe: root,
                            reason: if root == from_pe {
                                format!(
                                    "it left without reaching the last barrier of finalize (round {round} of barrier #{epoch})"
                                )
                            } else {
                                format!("PE {from_pe}, which this PE waited on in the last barrier of finalize, saw it gone first and left")
                            },
                        }))
                    },
                    || m.describe(from_pe, epoch, round),
                )
                .and_then(|r| r)?;
            if let Some(k) = kinds.as_deref_mut() {
                let v = flag();
                if v & EPOCH_MASK == epoch {
                    *k |= v & !EPOCH_MASK;
                }
            }
            if let (Some(at), Some(v)) = (and_at, and.as_deref_mut()) {
                let at = self.ctrl.internal_addr(my_local, at);
                // SAFETY: as for the check words below: an aligned u64 of my control heap's
                // internal area, stored before the flag seen above.
                *v &= unsafe { u64::load(at, Ordering::Relaxed) };
            }
            if let Some((words, _, _)) = words {
                let at = self.ctrl.internal_addr(my_local, words);
                // SAFETY: the check words are aligned u64s inside my control heap's internal
                // area, mapped for the World's lifetime; the flag seen above was stored after
                // them (release/acquire, or in order over TCP).
                let seen = unsafe {
                    [
                        u64::load(at, Ordering::Relaxed),
                        u64::load(at + 8, Ordering::Relaxed),
                    ]
                };
                if let Some(a) = &mut agg {
                    a.merge(seen);
                }
            }
            dist <<= 1;
            round += 1;
        }
        Ok(agg.and_then(|a| a.mismatch()))
    }

    /// The PE that local PE `pe` names in its notice word as the first it saw gone (see
    /// [`crate::node::Liveness`]), else `pe` itself.
    pub(crate) fn root_cause(&self, pe: usize) -> usize {
        let Some(Some(l)) = self.node.local_of.get(pe) else {
            return pe;
        };
        // Not mapped here (lazy mapping) and no longer mappable: that PE is gone, and so is
        // what it would have said.
        if self.ctrl_mapped("finalize", *l).is_err() {
            return pe;
        }
        let at = self.ctrl.internal_addr(*l, PEER_NOTICE);
        // SAFETY: the notice word is an aligned u64 in that PE's control-heap slice, mapped for
        // the World's lifetime (and valid after its owner exited).
        let v = unsafe { u64::load(at, Ordering::Acquire) };
        v.checked_sub(1)
            .and_then(|p| usize::try_from(p).ok())
            .filter(|&p| p < self.n)
            .unwrap_or(pe)
    }

    fn ivar_addr<T: AmoInt>(
        &self,
        call: &'static str,
        ivar: *const T,
        nelems: usize,
    ) -> Result<usize> {
        let size = std::mem::size_of::<T>();
        Self::check_aligned(call, "address", ivar, size)?;
        let bytes = nelems
            .checked_mul(size)
            .ok_or_else(|| Error::invalid(call, "nelems overflows"))?;
        self.remote(call, ivar as usize, bytes.max(size), self.me)
    }

    /// **Local, blocking.** Waits until this PE's symmetric `ivar` satisfies `cmp value`. Like
    /// `shmem_wait_until`.
    pub fn wait_until<T: AmoInt>(&self, ivar: *const T, cmp: Cmp, value: T) -> Result<()> {
        let call = "wait_until";
        let a = self.ivar_addr(call, ivar, 1)?;
        self.wait
            .wait(
                &self.live,
                call,
                None,
                || match self.load_at::<T>(call, a, 0) {
                    Ok(v) => cmp.holds(v, value).then_some(Ok(())),
                    Err(e) => Some(Err(e)),
                },
                || {
                    format!(
                        "{ivar:p} to become {} {value:?} (it is {})",
                        cmp.symbol(),
                        crate::signal::shown(self.load_at::<T>(call, a, 0))
                    )
                },
            )
            .and_then(|r| r)
    }

    /// **Local.** True if this PE's `ivar` satisfies `cmp value` now. Like `shmem_test`.
    pub fn test<T: AmoInt>(&self, ivar: *const T, cmp: Cmp, value: T) -> Result<bool> {
        let a = self.ivar_addr("test", ivar, 1)?;
        Ok(cmp.holds(self.load_at::<T>("test", a, 0)?, value))
    }

    set_calls! {
        /// **Local, blocking.** Waits until every `ivars[i]` (`i < nelems`) not excluded by a
        /// non-zero `status[i]` satisfies `cmp value`. Like `shmem_wait_until_all`.
        wait_until_all,
        /// **Local, blocking.** [`wait_until_all`](World::wait_until_all) with one comparison
        /// value per element. Like `shmem_wait_until_all_vector`.
        wait_until_all_vector(Block) -> ();

        /// **Local, blocking.** Waits until some non-excluded `ivars[i]` satisfies `cmp value`
        /// and returns its index; `None` when every element is excluded. Like
        /// `shmem_wait_until_any`.
        wait_until_any,
        /// **Local, blocking.** [`wait_until_any`](World::wait_until_any) with one value per
        /// element.
        wait_until_any_vector(Block) -> Option<usize>;

        /// **Local, blocking.** Waits until at least one non-excluded `ivars[i]` satisfies
        /// `cmp value` and returns the indices of all that do (empty when every element is
        /// excluded). Like `shmem_wait_until_some`.
        wait_until_some,
        /// **Local, blocking.** [`wait_until_some`](World::wait_until_some) with one value per
        /// element.
        wait_until_some_vector(Block) -> Vec<usize>;

        /// **Local.** True if every non-excluded `ivars[i]` satisfies `cmp value` now. Like
        /// `shmem_test_all`.
        test_all,
        /// **Local.** [`test_all`](World::test_all) with one value per element.
        test_all_vector(Now) -> bool;

        /// **Local.** Index of one non-excluded `ivars[i]` satisfying `cmp value` now, if any.
        /// Like `shmem_test_any`.
        test_any,
        /// **Local.** [`test_any`](World::test_any) with one value per element.
        test_any_vector(Now) -> Option<usize>;

        /// **Local.** Indices of all non-excluded `ivars[i]` satisfying `cmp value` now. Like
        /// `shmem_test_some`.
        test_some,
        /// **Local.** [`test_some`](World::test_some) with one value per element.
        test_some_vector(Now) -> Vec<usize>;
    }

    fn set_args<T: AmoInt>(
        &self,
        call: &'static str,
        ivars: *const T,
        nelems: usize,
        status: Option<&[i32]>,
    ) -> Result<(usize, Vec<usize>)> {
        if let Some(s) = status {
            if s.len() < nelems {
                return Err(Error::invalid(
                    call,
                    format!("status has {} entries for {nelems} variables", s.len()),
                ));
            }
        }
        if nelems == 0 {
            return Ok((0, Vec::new()));
        }
        let a = self.ivar_addr(call, ivars, nelems)?;
        let active = (0..nelems)
            .filter(|&i| status.is_none_or(|s| s[i] == 0))
            .collect();
        Ok((a, active))
    }

    /// The wait and test calls on a set of variables: checks the arguments, then scans once
    /// (`Mode::Now`) or until the set is satisfied (`Mode::Block`), and answers as `R` does.
    #[allow(clippy::too_many_arguments)]
    fn set_call<T: AmoInt, R: SetAnswer>(
        &self,
        call: &'static str,
        mode: Mode,
        ivars: *const T,
        nelems: usize,
        status: Option<&[i32]>,
        cmp: Cmp,
        value: &dyn Fn(usize) -> T,
    ) -> Result<R> {
        let (a, active) = self.set_args(call, ivars, nelems, status)?;
        let want = R::WANT;
        let hits = match mode {
            Mode::Now => self.scan::<T>(call, a, &active, cmp, value, want)?,
            Mode::Block if active.is_empty() => Some(Vec::new()),
            Mode::Block => Some(
                self.wait
                    .wait(
                        &self.live,
                        call,
                        None,
                        || {
                            self.scan::<T>(call, a, &active, cmp, value, want)
                                .transpose()
                        },
                        || {
                            let pending: Vec<String> = active
                                .iter()
                                .filter_map(|&i| self.load_at::<T>(call, a, i).ok().map(|v| (i, v)))
                                .filter(|&(i, v)| !cmp.holds(v, value(i)))
                                .take(8)
                                .map(|(i, v)| {
                                    format!("[{i}] = {v:?} (want {} {:?})", cmp.symbol(), value(i))
                                })
                                .collect();
                            format!(
                                "{} of {nelems} variables at {ivars:p}; unsatisfied: {}",
                                want.word(),
                                pending.join(", ")
                            )
                        },
                    )
                    .and_then(|r| r)?,
            ),
        };
        Ok(R::answer(ivars as usize, nelems, hits))
    }

    /// Reads element `i` of the checked array at `base` (acquire).
    #[inline]
    fn load_at<T: AmoInt>(&self, call: &'static str, base: usize, i: usize) -> Result<T> {
        let addr = base + i * std::mem::size_of::<T>();
        if self.xport.cheap_loads() {
            // SAFETY: callers pass a base checked by `ivar_addr` for at least i+1 aligned
            // elements in a live allocation of this PE's host heap.
            return Ok(T::from_bits(unsafe {
                T::Bits::load(addr, Ordering::Acquire)
            }));
        }
        let w = self.xport.load(call, addr, std::mem::size_of::<T>())?;
        Ok(T::from_bits(T::Bits::from_u64(w)))
    }

    /// All: Some(empty) once every active element holds. Any: Some(indices that hold) once one
    /// does.
    fn scan<T: AmoInt>(
        &self,
        call: &'static str,
        base: usize,
        active: &[usize],
        cmp: Cmp,
        value: &dyn Fn(usize) -> T,
        want: Want,
    ) -> Result<Option<Vec<usize>>> {
        match want {
            Want::All => {
                for &i in active {
                    if !cmp.holds(self.load_at::<T>(call, base, i)?, value(i)) {
                        return Ok(None);
                    }
                }
                Ok(Some(Vec::new()))
            }
            Want::Any => {
                let mut hits = Vec::new();
                for &i in active {
                    if cmp.holds(self.load_at::<T>(call, base, i)?, value(i)) {
                        hits.push(i);
                    }
                }
                Ok((!hits.is_empty()).then_some(hits))
            }
        }
    }
}

/// Counters of one PE's synchronization and remote traffic since init
/// ([`World::comm_counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommCounters {
    /// Dissemination rounds run (one flag sent and one awaited per round; a world barrier
    /// with every PE on one host is a host barrier and counts none).
    pub sync_rounds: u64,
    /// Requests sent over rshmem's TCP transport that wait for a reply (gets, fetching
    /// atomics, the flushes of `quiet`).
    pub tcp_round_trips: u64,
    /// Requests sent over rshmem's TCP transport that are not answered (put frames, flag
    /// stores, non-fetching atomics).
    pub tcp_one_way: u64,
    /// Connections of rshmem's TCP transport this PE opened (at init to the PEs its barrier
    /// stores to, later at the first request to each other PE).
    pub tcp_opened: usize,
    /// Connections of rshmem's TCP transport that other PEs opened to this one.
    pub tcp_accepted: usize,
    /// Other PEs of this host whose heap is mapped in this process: all of them, or with
    /// `RSHMEM_LAZY_MAPPING` on the CPU backend those this PE has reached so far.
    pub heap_peers_mapped: usize,
    /// The same for the control heaps (barrier flags): at least the barrier partners.
    pub ctrl_peers_mapped: usize,
}

/// The members of one dissemination barrier and where their flags live (all PEs: the
/// world's barrier area; a team: its slot).
pub(crate) trait Members {
    /// Members.
    fn n(&self) -> usize;
    /// This PE's member index.
    fn me(&self) -> usize;
    /// The PE of member `i`.
    fn pe(&self, i: usize) -> usize;
    /// Rounds the flag area has room for.
    fn max_rounds(&self) -> usize;
    /// Control-heap internal offset of round `round`'s flag.
    fn flag_off(&self, round: usize) -> usize;
    /// Control-heap internal offset of round `round`'s two check words (buffer `parity`).
    fn check_off(&self, round: usize, parity: usize) -> usize;
    /// Control-heap internal offset of round `round`'s AND word (buffer `parity`), where the
    /// members' area has one.
    fn and_off(&self, _round: usize, _parity: usize) -> Option<usize> {
        None
    }
    /// What a wait on `from_pe` in `round` of barrier `epoch` is for (timeout messages).
    fn describe(&self, from_pe: usize, epoch: u64, round: usize) -> String;
}

/// All PEs, in the world's barrier area.
struct WorldMembers<'a>(&'a World);

impl Members for WorldMembers<'_> {
    fn n(&self) -> usize {
        self.0.n
    }
    fn me(&self) -> usize {
        self.0.me
    }
    fn pe(&self, i: usize) -> usize {
        i
    }
    fn max_rounds(&self) -> usize {
        BARRIER_ROUNDS
    }
    fn flag_off(&self, round: usize) -> usize {
        BARRIER_FLAGS + round * FLAG_STRIDE
    }
    fn check_off(&self, round: usize, parity: usize) -> usize {
        CHECK_WORDS + round * FLAG_STRIDE + parity * 16
    }
    fn describe(&self, from_pe: usize, epoch: u64, round: usize) -> String {
        format!(
            "PE {from_pe} to reach barrier #{epoch} (round {round}; it, or a PE it waits for, has not arrived)"
        )
    }
}

/// The epoch bits of a world barrier's flag; the bits above carry the kinds of call seen.
const EPOCH_MASK: u64 = (1 << 56) - 1;
/// Kind bit of barrier_all, sync_all and the heap calls' barriers.
const KIND_BARRIER: u64 = 1 << 56;
/// Kind bit of finalize's barriers.
const KIND_FINALIZE: u64 = 1 << 57;

/// Kind bits of the host barrier only ([`World::host_barrier`]), where a heap call's check is
/// a second barrier: one of them set by every PE, so that a heap call meeting a barrier_all is
/// seen by both.
const KIND_CHECKED: u64 = 1 << 58;
const KIND_PLAIN: u64 = 1 << 59;

/// The error of a world barrier whose PEs made different calls: this PE's `mine`, `all` every
/// PE's (ORed).
fn kinds_mismatch(call: &'static str, epoch: u64, mine: u64, all: u64) -> Error {
    let name = |k: u64| {
        if k & KIND_FINALIZE != 0 {
            "finalize"
        } else if k & KIND_CHECKED != 0 {
            "a collective heap call (malloc, free, realloc, ...)"
        } else if k & KIND_PLAIN != 0 {
            "barrier_all or sync_all"
        } else {
            "barrier_all, sync_all or a heap call"
        }
    };
    // The calls in `all` other than mine: a kind bit that is not mine names one.
    let other = [KIND_FINALIZE, KIND_CHECKED, KIND_PLAIN, KIND_BARRIER]
        .into_iter()
        .find(|&b| all & b != 0 && mine & b == 0)
        .map_or("another collective call", name);
    Error::AsymmetricCall {
        call,
        details: format!(
            "this PE called {} while another PE called {other} at the same point (barrier \
             #{epoch}); every PE must make the same collective calls in the same order",
            name(mine)
        ),
    }
}

/// How long finalize's last barrier keeps waiting on a gone PE on another host whose flag is
/// still down (its stores may still be in the socket being read).
const LAST_BARRIER_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Two PEs whose values differ in a checked barrier: those with the smallest and the largest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The PE with the smallest value (the lowest-numbered one among equals).
    pub low_pe: usize,
    /// The PE with the largest value (the highest-numbered one among equals).
    pub high_pe: usize,
}

/// What a checked barrier carries: the smallest and largest (value, PE) seen so far, each
/// packed in one word as `value << 32 | PE` (the value is a 32-bit fold of the caller's
/// 64-bit digest), so that the word order is the pair order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckAgg {
    pub lo: u64,
    pub hi: u64,
}

impl CheckAgg {
    pub(crate) fn new(digest: u64, pe: usize) -> Self {
        let v = u64::from((digest ^ (digest >> 32)) as u32);
        let w = (v << 32) | (pe as u64 & 0xffff_ffff);
        CheckAgg { lo: w, hi: w }
    }

    /// Folds in a peer's `[lo, hi]`.
    pub(crate) fn merge(&mut self, got: [u64; 2]) {
        self.lo = self.lo.min(got[0]);
        self.hi = self.hi.max(got[1]);
    }

    pub(crate) fn mismatch(&self) -> Option<Mismatch> {
        (self.lo >> 32 != self.hi >> 32).then_some(Mismatch {
            low_pe: (self.lo & 0xffff_ffff) as usize,
            high_pe: (self.hi & 0xffff_ffff) as usize,
        })
    }
}

/// A stable 64-bit digest of a collective call's name and arguments, for the checked
/// barriers (the same on every PE and build): a multiply-xorshift mix over 8-byte words, a few
/// nanoseconds per call.
pub(crate) fn digest(call: &str, args: &[u64]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mix = |h: u64, x: u64| {
        let h = (h ^ x).wrapping_mul(K);
        h ^ (h >> 29)
    };
    let mut h = mix(0x243F_6A88_85A3_08D3, call.len() as u64);
    for c in call.as_bytes().chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = mix(h, u64::from_le_bytes(w));
    }
    for &a in args {
        h = mix(h, a);
    }
    h
}

/// How many arrays [`pick_any`] remembers a start index for (the oldest is forgotten first).
const ANY_ARRAYS: usize = 64;

/// Per array address (most recently used last): the index where the next `*_any` call on it
/// starts looking.
static ANY_START: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Chooses the index a `*_any` call on the `nelems`-element array at `key` returns among
/// `hits` (the satisfied indices, ascending): the first at or after the array's remembered
/// start, wrapping around; the start then moves just past it. So while several elements stay
/// satisfied, successive calls return each of them in turn instead of always the lowest.
/// `None` when `hits` is empty. Used by the C library's own polling waits too.
pub fn pick_any(key: usize, nelems: usize, hits: &[usize]) -> Option<usize> {
    let first = *hits.first()?;
    let mut g = ANY_START.lock().unwrap_or_else(|e| e.into_inner());
    let pos = g.iter().position(|&(k, _)| k == key);
    let start = pos.map_or(0, |p| g[p].1);
    let pick = hits.iter().copied().find(|&i| i >= start).unwrap_or(first);
    let next = (pick + 1) % nelems.max(1);
    match pos {
        Some(p) => {
            g.remove(p);
        }
        None if g.len() >= ANY_ARRAYS => {
            g.remove(0);
        }
        None => {}
    }
    g.push((key, next));
    Some(pick)
}

#[derive(Clone, Copy)]
enum Want {
    All,
    Any,
}

impl Want {
    fn word(self) -> &'static str {
        match self {
            Want::All => "all",
            Want::Any => "any",
        }
    }
}

/// Whether a set call waits until its set is satisfied or looks once.
#[derive(Clone, Copy)]
enum Mode {
    Block,
    Now,
}

/// What a wait or test call on a set of variables returns, made from its scan: `None` when
/// the set is not satisfied (only a test), else the satisfied indices (empty for `All`).
trait SetAnswer {
    /// Whether every element or any one must hold.
    const WANT: Want;
    /// The answer for the `nelems`-element array at `key`.
    fn answer(key: usize, nelems: usize, hits: Option<Vec<usize>>) -> Self;
}

/// `wait_until_all*`: nothing.
impl SetAnswer for () {
    const WANT: Want = Want::All;
    fn answer(_: usize, _: usize, _: Option<Vec<usize>>) {}
}

/// `test_all*`: whether every element holds.
impl SetAnswer for bool {
    const WANT: Want = Want::All;
    fn answer(_: usize, _: usize, hits: Option<Vec<usize>>) -> bool {
        hits.is_some()
    }
}

/// `*_any*`: one satisfied index, in turn ([`pick_any`]).
impl SetAnswer for Option<usize> {
    const WANT: Want = Want::Any;
    fn answer(key: usize, nelems: usize, hits: Option<Vec<usize>>) -> Option<usize> {
        hits.and_then(|v| pick_any(key, nelems, &v))
    }
}

/// `*_some*`: every satisfied index.
impl SetAnswer for Vec<usize> {
    const WANT: Want = Want::Any;
    fn answer(_: usize, _: usize, hits: Option<Vec<usize>>) -> Vec<usize> {
        hits.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::pick_any;

    #[test]
    fn any_rotates_over_every_satisfied_index() {
        // A fresh key per test: the table is process-wide.
        let key = 0x1000_0001;
        let hits = [0, 2, 3];
        let got: Vec<_> = (0..6).filter_map(|_| pick_any(key, 4, &hits)).collect();
        assert_eq!(got, [0, 2, 3, 0, 2, 3]);
        // Excluding the returned index each time (as a status array does) finishes the set.
        let key = 0x1000_0002;
        let mut left = vec![0usize, 1, 2, 3];
        while let Some(i) = pick_any(key, 4, &left) {
            left.retain(|&x| x != i);
        }
        assert!(left.is_empty());
        assert_eq!(pick_any(key, 4, &[]), None);
    }

    #[test]
    fn any_keeps_one_start_per_array() {
        let (a, b) = (0x2000_0001, 0x2000_0002);
        assert_eq!(pick_any(a, 3, &[0, 1, 2]), Some(0));
        assert_eq!(pick_any(b, 3, &[0, 1, 2]), Some(0));
        assert_eq!(pick_any(a, 3, &[0, 1, 2]), Some(1));
        assert_eq!(pick_any(b, 3, &[0, 1, 2]), Some(1));
        assert_eq!(pick_any(a, 3, &[0, 1, 2]), Some(2));
        assert_eq!(pick_any(a, 3, &[0, 1, 2]), Some(0));
    }
}
