//! The push engines: team collectives whose message count per PE is O(log n), for teams with
//! members on other hosts (every transfer there is a message: pulling a block from each of n
//! members cost n requests per PE, n² per collective).
//!
//! They run between the two team syncs of the usual protocol (quiet, checked sync, work, quiet,
//! sync): after the first sync every member is in the call, so any member's `dest` may be
//! written. Data moves with puts straight into the members' symmetric `dest`; each put is
//! followed by one *signal*, a store of the collective's epoch (the epoch of its first team
//! sync: the same on every member, larger than any earlier collective's) into a word of the
//! receiver's team slot, which the receiver awaits. Transports deliver a PE's operations to
//! one target in order, so the data is there when the signal is. Signal words never need
//! resetting: a later collective's epoch is larger.
//!
//! * broadcast: a binomial tree rooted at the root (⌈log2 n⌉ rounds; a PE sends to at most
//!   ⌈log2 n⌉ children, receives once).
//! * fcollect: Bruck's allgather into `dest`'s absolute block positions (⌈log2 n⌉ rounds; in
//!   round k a PE sends the 2^k blocks it holds, at most two contiguous runs, to the PE 2^k
//!   below it), so no final rotation.
//! * collect: the offsets by a chain (member j learns its offset from j − 1 and tells j + 1),
//!   the total by a binomial tree from the last member, then Bruck's allgather by pulls (the
//!   receiver knows which positions it lacks; the sender tells it, with its signal, how many it
//!   holds): ⌈log2 n⌉ rounds of at most two gets.
//! * reductions: a chain in team order (member j combines the running result from j − 1 with
//!   its own `source` and puts it into j + 1's `dest`), then a binomial broadcast of the result
//!   from the last member. The values are combined exactly as the other paths combine them
//!   (member 0's first, then each next member's), so results are bit-identical whatever the
//!   path. O(1) messages per PE for the chain, O(log n) for the broadcast; the chain's latency
//!   is n − 1 one-way hops.

use std::sync::atomic::Ordering;

use super::{bytes_of, Op, ReduceOp, ReduceType, BAD_COUNT};
use crate::error::{Error, Result};

use crate::team::{Team, SCRATCH};
use crate::transport::TransportOps as _;
use crate::types::Bits;
use crate::world::World;

/// Offsets of the collect's chain at or above this mark are no offsets (see
/// [`World::collect_offsets`]).
const BAD_MARK: u64 = 1 << 63;

/// Signal word: "my source is read, you may put into my dest" (chain reductions; in place the
/// incoming running result overwrites the source).
const W_READY: usize = 1;
/// Signal word: the running result (reductions) or my offset (collect) came from the member
/// before me.
const W_CHAIN: usize = 2;
/// Signal word: the broadcast tree's data (or value) came from my parent.
const W_BCAST: usize = 3;
/// Value word of [`W_CHAIN`] (collect: the offset after the sender's block).
const W_CHAIN_VAL: usize = 4;
/// Value word of [`W_BCAST`] (collect: the total).
const W_BCAST_VAL: usize = 5;
/// First round's signal word of the Bruck rounds; round r uses `W_ROUNDS + 2r` and its value
/// word `W_ROUNDS + 2r + 1`.
const W_ROUNDS: usize = 8;
/// Rounds the slot's scratch words have room for (teams of up to 2^this members).
pub(super) const MAX_ROUNDS: usize = (SCRATCH / 8 - W_ROUNDS) / 2;

/// One collective's signals: the team and the epoch of the collective's first sync.
pub(super) struct Signals<'a> {
    team: &'a Team,
    epoch: u64,
}

impl<'a> Signals<'a> {
    /// The signals of the collective whose first team sync just returned.
    pub(super) fn after_first_sync(team: &'a Team) -> Self {
        Signals {
            team,
            epoch: team.inner.epoch.load(Ordering::Acquire),
        }
    }
}

/// The round a PE receives the broadcast in and sends from: for root-relative rank `r`, the
/// lowest set bit of `r` (the root: the power of two at or above `n`).
fn low_bit(r: usize, n: usize) -> usize {
    if r == 0 {
        n.next_power_of_two()
    } else {
        r & r.wrapping_neg()
    }
}

impl World {
    /// Control-heap offset of scratch word `word` of the team's slot.
    fn sig_off(&self, s: &Signals<'_>, word: usize) -> usize {
        self.teams.slot_off(s.team.inner.slot, word * 8)
    }

    /// Reads (acquire) my copy of scratch word `word`.
    fn sig_word(&self, s: &Signals<'_>, word: usize) -> u64 {
        let a = self
            .ctrl
            .internal_addr(self.ctrl.me_local(), self.sig_off(s, word));
        // SAFETY: team slots are aligned u64s inside my control heap's internal area, mapped
        // for the World's lifetime.
        unsafe { u64::load(a, Ordering::Acquire) }
    }

    /// Signals team member `j` on word `word`, after storing `val` into its value word
    /// `val.0` (the signal is stored last: ordered after the data and the value).
    fn signal(
        &self,
        call: &'static str,
        s: &Signals<'_>,
        j: usize,
        word: usize,
        val: Option<(usize, u64)>,
    ) -> Result<()> {
        let pe = s.team.world_pe(j);
        // Orders the data before the signal on transports that do not by themselves.
        self.fence();
        if let Some((w, v)) = val {
            self.ctrl_store(call, pe, self.sig_off(s, w), v)?;
        }
        self.ctrl_store(call, pe, self.sig_off(s, word), s.epoch)
    }

    /// Waits for team member `j`'s signal on word `word` (timeout and lost peers as every
    /// wait).
    fn await_signal(
        &self,
        call: &'static str,
        s: &Signals<'_>,
        j: usize,
        word: usize,
    ) -> Result<()> {
        let from = s.team.world_pe(j);
        self.wait.wait(
            &self.live,
            call,
            Some(from),
            || (self.sig_word(s, word) >= s.epoch).then_some(()),
            || {
                format!(
                    "team PE {j} (PE {from}) to signal word {word} of team {} (collective #{}; seen {})",
                    s.team.inner.name,
                    s.epoch,
                    self.sig_word(s, word)
                )
            },
        )
    }

    /// Puts `bytes` bytes from my memory `src` to team member `j`'s copy of the symmetric
    /// `dest`.
    fn put_member(
        &self,
        call: &'static str,
        s: &Signals<'_>,
        j: usize,
        dest: *mut u8,
        src: *const u8,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let t = self.target(call, dest as usize, bytes, s.team.world_pe(j))?;
        self.put_to(call, t, src, bytes)
    }

    /// Copies `bytes` bytes from my symmetric `src` to my symmetric `dest` (no-op when they
    /// are the same).
    pub(super) fn copy_mine(
        &self,
        call: &'static str,
        dest: *mut u8,
        src: *const u8,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 || dest.cast_const() == src {
            return Ok(());
        }
        let d = self.remote(call, dest as usize, bytes, self.me)?;
        let s = self.remote(call, src as usize, bytes, self.me)?;
        self.xport.put(call, d, s as *const u8, bytes)
    }

    /// Binomial broadcast of `bytes` bytes from team member `root` into every member's
    /// `dest`; `from` is the root's copy of the data (its `source`, or its `dest` itself).
    /// The root's own `dest` is written by the caller.
    pub(super) fn bcast_push(
        &self,
        call: &'static str,
        s: &Signals<'_>,
        dest: *mut u8,
        from: *const u8,
        bytes: usize,
        root: usize,
    ) -> Result<()> {
        let n = s.team.n_pes();
        let r = (s.team.my_pe() + n - root) % n;
        let low = low_bit(r, n);
        let src = if r == 0 {
            from
        } else {
            self.await_signal(call, s, (r - low + root) % n, W_BCAST)?;
            self.remote(call, dest as usize, bytes, self.me)? as *const u8
        };
        let mut m = low >> 1;
        while m > 0 {
            if r + m < n {
                let j = (r + m + root) % n;
                self.put_member(call, s, j, dest, src, bytes)?;
                self.signal(call, s, j, W_BCAST, None)?;
            }
            m >>= 1;
        }
        Ok(())
    }

    /// Binomial broadcast of one word from the last member (the collect's total): returns it.
    fn bcast_value(&self, call: &'static str, s: &Signals<'_>, v: u64) -> Result<u64> {
        let n = s.team.n_pes();
        let root = n - 1;
        let r = (s.team.my_pe() + n - root) % n;
        let low = low_bit(r, n);
        let v = if r == 0 {
            v
        } else {
            self.await_signal(call, s, (r - low + root) % n, W_BCAST)?;
            self.sig_word(s, W_BCAST_VAL)
        };
        let mut m = low >> 1;
        while m > 0 {
            if r + m < n {
                self.signal(call, s, (r + m + root) % n, W_BCAST, Some((W_BCAST_VAL, v)))?;
            }
            m >>= 1;
        }
        Ok(v)
    }

    /// Bruck's allgather of `block` bytes per member: my `src` block goes to block `me` of
    /// every member's `dest`.
    pub(super) fn fcollect_push(
        &self,
        call: &'static str,
        s: &Signals<'_>,
        dest: *mut u8,
        src: *const u8,
        block: usize,
    ) -> Result<()> {
        let n = s.team.n_pes();
        let me = s.team.my_pe();
        self.copy_mine(call, dest.wrapping_add(me * block), src, block)?;
        let mine = self.remote(call, dest as usize, n * block, self.me)? as *const u8;
        let (mut dist, mut round) = (1usize, 0usize);
        while dist < n {
            let word = W_ROUNDS + 2 * round;
            // I hold blocks me .. me + dist − 1 (mod n); the PE `dist` below me lacks the
            // first `cnt` of them.
            let cnt = dist.min(n - dist);
            let to = (me + n - dist) % n;
            let first = cnt.min(n - me);
            for (b, k) in [(me, first), (0, cnt - first)] {
                let at = b * block;
                self.put_member(
                    call,
                    s,
                    to,
                    dest.wrapping_add(at),
                    mine.wrapping_add(at),
                    k * block,
                )?;
            }
            self.signal(call, s, to, word, None)?;
            self.await_signal(call, s, (me + dist) % n, word)?;
            dist <<= 1;
            round += 1;
        }
        Ok(())
    }

    /// The collect's offsets: returns (my offset, total) in elements, or the error every
    /// member returns when some member announced a bad count (`mine` is [`BAD_COUNT`] for a
    /// bad one of mine). The chain's values at or above [`BAD_MARK`] name the first member
    /// with a bad count ([`BAD_COUNT`] itself: the counts overflow).
    pub(super) fn collect_offsets(
        &self,
        call: &'static str,
        s: &Signals<'_>,
        mine: u64,
    ) -> Result<(usize, usize)> {
        let n = s.team.n_pes();
        let me = s.team.my_pe();
        let off = if me == 0 {
            0
        } else {
            self.await_signal(call, s, me - 1, W_CHAIN)?;
            self.sig_word(s, W_CHAIN_VAL)
        };
        let end = if off >= BAD_MARK {
            off
        } else if mine >= BAD_MARK {
            BAD_MARK + me as u64
        } else {
            off.checked_add(mine)
                .filter(|&e| e < BAD_MARK)
                .unwrap_or(BAD_COUNT)
        };
        if me + 1 < n {
            self.signal(call, s, me + 1, W_CHAIN, Some((W_CHAIN_VAL, end)))?;
        }
        let total = self.bcast_value(call, s, end)?;
        if total == BAD_COUNT {
            return Err(Error::invalid(call, "the members' nelems overflow"));
        }
        if total >= BAD_MARK {
            let j = (total - BAD_MARK) as usize;
            let pe = s.team.members().get(j).copied().unwrap_or(usize::MAX);
            return Err(Error::invalid(
                call,
                format!("team PE {j} (PE {pe}) passed a bad source or nelems"),
            ));
        }
        // Below BAD_MARK (2^63): fits a usize on the 64-bit targets rshmem supports.
        Ok((off as usize, total as usize))
    }

    /// Bruck's allgather by pulls of the collect's blocks (`esize`-byte elements; mine is
    /// `count` elements at element `off` of `total`). With `ok` false (my `dest` is bad) this
    /// PE only signals, so that nobody waits for it in vain; no member pulls from it then
    /// (every member checks the same symmetric `dest` against the same total).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn collect_pull(
        &self,
        call: &'static str,
        s: &Signals<'_>,
        dest: *mut u8,
        esize: usize,
        off: usize,
        count: usize,
        total: usize,
        ok: bool,
    ) -> Result<()> {
        let n = s.team.n_pes();
        let me = s.team.my_pe();
        // Elements I hold, from `off` on (cyclically in `dest`).
        let mut held = count;
        let (mut dist, mut round) = (1usize, 0usize);
        while dist < n {
            let word = W_ROUNDS + 2 * round;
            let to = (me + n - dist) % n;
            self.signal(call, s, to, word, Some((word + 1, held as u64)))?;
            let from = (me + dist) % n;
            self.await_signal(call, s, from, word)?;
            let theirs = usize::try_from(self.sig_word(s, word + 1)).unwrap_or(usize::MAX);
            let want = theirs.min(total - held);
            if ok && want > 0 {
                let start = (off + held) % total;
                let first = want.min(total - start);
                let mut gets = Vec::with_capacity(2);
                for (at, k) in [(start, first), (0, want - first)] {
                    if k == 0 {
                        continue;
                    }
                    let (a, b) = (at * esize, k * esize);
                    let p = dest.wrapping_add(a);
                    let t = self.target(call, p as usize, b, s.team.world_pe(from))?;
                    let d = self.remote(call, p as usize, b, self.me)?;
                    gets.push((d as *mut u8, t, b));
                }
                self.get_batched(call, &gets)?;
            }
            held += want;
            dist <<= 1;
            round += 1;
        }
        Ok(())
    }

    /// The chain reduction with a broadcast of the result (see the module docs): every
    /// member's `dest` gets the combination, in team order, of every member's `source` (`op`:
    /// `nelems` elements each; `dest` and `source` are the same range or disjoint).
    pub(super) fn reduce_push<T: ReduceType, O: ReduceOp<T>>(
        &self,
        call: &'static str,
        s: &Signals<'_>,
        op: Op<'_, T>,
    ) -> Result<()> {
        let (_, dest, source, nelems) = op.parts();
        let n = s.team.n_pes();
        let me = s.team.my_pe();
        let bytes = bytes_of::<T>(call, "block", nelems)?;
        let mut acc = vec![T::default_value(); nelems];
        self.get_impl(call, &mut acc, source, self.me)?;
        if me > 0 {
            // My source is read: the member before me may overwrite my dest (in place, my
            // source).
            self.signal(call, s, me - 1, W_READY, None)?;
            self.await_signal(call, s, me - 1, W_CHAIN)?;
            let mut before = vec![T::default_value(); nelems];
            self.get_impl(call, &mut before, dest.cast_const(), self.me)?;
            for (b, &x) in before.iter_mut().zip(&acc) {
                *b = O::combine(*b, x);
            }
            acc = before;
        }
        let d = dest.cast::<u8>();
        if me + 1 < n {
            self.await_signal(call, s, me + 1, W_READY)?;
            self.put_member(call, s, me + 1, d, acc.as_ptr().cast(), bytes)?;
            self.signal(call, s, me + 1, W_CHAIN, None)?;
        } else {
            self.write_mine(call, dest, &acc)?;
        }
        let mine = self.remote(call, d as usize, bytes, self.me)? as *const u8;
        self.bcast_push(call, s, d, mine, bytes, n - 1)
    }
}

/// Whether the push engines can serve a team of `n` members (the slot has room for its
/// rounds).
pub(super) fn fits(n: usize) -> bool {
    let rounds = (usize::BITS - n.saturating_sub(1).leading_zeros()) as usize;
    rounds <= MAX_ROUNDS
}
