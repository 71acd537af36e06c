//! Collectives over an **active set** (OpenSHMEM 1.4's deprecated form: the PEs `start`,
//! `start + 2^log_stride`, … (`size` of them) and a caller-supplied symmetric `pSync` array),
//! and reductions whose arithmetic is a caller's function ([`World::reduce_with`], over a team
//! or an active set).
//!
//! Every call here is **collective over the set**: each member makes it, in the same order,
//! with the same arguments; PEs outside the set do not call it. An active set is no team (a
//! team split is collective over the parent, and PEs outside the set never call), so its
//! synchronization lives in the caller's `pSync`, used only as OpenSHMEM allows: a
//! dissemination barrier of counters, one word per round (each round adds 1 to the partner's
//! word and consumes 1 from its own, so `pSync` is back to its initial zeros,
//! `SHMEM_SYNC_VALUE`, when the call returns and may be reused at once); `collect` passes the
//! counts in the last word. `pWrk` is never needed.
//!
//! Data moves by the same engines as the team collectives, chosen at the same place
//! ([`World::engine`](crate::World), `coll/select.rs`): the direct engine (pulls straight into
//! `dest` between the two syncs, partitioned reductions when every member is on this host) or
//! the staged one (pull into private memory, write `dest` after the second sync). The push
//! engines need a team's signal words, so an active set never gets them. Buffers are symmetric
//! addresses (heap or a registered region), checked before anything moves.

use super::{Check, Op, ReduceOp, ReduceType};
use crate::error::{Error, Result};
use crate::team::Team;
use crate::types::{Cmp, RmaType};
use crate::world::World;

/// An active set with its `pSync` (see the module docs), made by [`World::active_set`].
#[derive(Debug, Clone)]
pub struct ActiveSet {
    /// World PEs of the members, in set order.
    members: Vec<usize>,
    /// My index in `members`.
    me: usize,
    /// The caller's pSync (symmetric, `words` long).
    psync: *mut i64,
    words: usize,
}

impl ActiveSet {
    /// The world PE numbers of the members, in set order.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// This PE's index in the set.
    pub fn my_index(&self) -> usize {
        self.me
    }

    /// The last word of `pSync`, where `collect` announces the members' counts.
    pub(super) fn count_word(&self) -> *mut i64 {
        self.psync.wrapping_add(self.words - 1)
    }
}

/// Who takes part in [`World::reduce_with`]: a team or an active set.
#[derive(Debug, Clone, Copy)]
pub enum Group<'a> {
    /// A team (synchronized with its team sync).
    Team(&'a Team),
    /// An active set (synchronized through its `pSync`).
    Set(&'a ActiveSet),
}

impl Group<'_> {
    /// Number of members.
    pub(super) fn n(&self) -> usize {
        match self {
            Group::Team(t) => t.n_pes(),
            Group::Set(s) => s.members.len(),
        }
    }
    /// My index among the members.
    pub(super) fn me(&self) -> usize {
        match self {
            Group::Team(t) => t.my_pe(),
            Group::Set(s) => s.me,
        }
    }
    /// World PE of member `j`.
    pub(super) fn pe(&self, j: usize) -> usize {
        match self {
            Group::Team(t) => t.world_pe(j),
            Group::Set(s) => s.members[j],
        }
    }

    /// Rejects a `root` that is not a member index.
    pub(super) fn check_root(&self, call: &'static str, root: usize) -> Result<()> {
        if root < self.n() {
            return Ok(());
        }
        let what = match self {
            Group::Team(_) => "team",
            Group::Set(_) => "active set",
        };
        Err(Error::invalid(
            call,
            format!(
                "root {root} is out of range: the {what} has {} PEs",
                self.n()
            ),
        ))
    }
}

impl World {
    /// **Local.** The active set `start, start + 2^log_stride, …` (`size` PEs) with its
    /// `pSync` of `psync_words` words (symmetric, all `SHMEM_SYNC_VALUE` (0) before the first
    /// use). Errors: a bad triplet, PEs outside the job, this PE not in the set, a `pSync` that
    /// is null, not symmetric, or too short for the set's barrier rounds plus one word.
    pub fn active_set(
        &self,
        start: usize,
        log_stride: u32,
        size: usize,
        psync: *mut i64,
        psync_words: usize,
    ) -> Result<ActiveSet> {
        let call = "active_set";
        let desc = || format!("active set (start {start}, log stride {log_stride}, size {size})");
        if size == 0 || log_stride >= usize::BITS {
            return Err(Error::invalid(call, format!("{} is invalid", desc())));
        }
        let last = (size - 1)
            .checked_shl(log_stride)
            .filter(|x| x >> log_stride == size - 1)
            .and_then(|x| x.checked_add(start));
        let members: Vec<usize> = match last {
            Some(l) if l < self.n => (0..size).map(|i| start + (i << log_stride)).collect(),
            _ => {
                return Err(Error::invalid(
                    call,
                    format!("{} names PEs outside the job's 0..{}", desc(), self.n),
                ))
            }
        };
        let Some(me) = members.iter().position(|&p| p == self.me) else {
            return Err(Error::invalid(
                call,
                format!("PE {} is not in the {}", self.me, desc()),
            ));
        };
        if psync.is_null() {
            return Err(Error::invalid(call, "pSync is NULL"));
        }
        let rounds = (usize::BITS - (size.max(2) - 1).leading_zeros()) as usize;
        if rounds + 1 > psync_words {
            return Err(Error::invalid(
                call,
                format!(
                    "pSync has {psync_words} words, the {} needs {}",
                    desc(),
                    rounds + 1
                ),
            ));
        }
        World::check_aligned(call, "pSync", psync, 8)?;
        self.remote(call, psync as usize, psync_words * 8, self.me)?;
        Ok(ActiveSet {
            members,
            me,
            psync,
            words: psync_words,
        })
    }

    /// True when the set is every PE of the job, in order.
    fn whole_job(&self, set: &ActiveSet) -> bool {
        set.members.len() == self.n && set.members.iter().enumerate().all(|(i, &p)| i == p)
    }

    /// **Collective over the set.** Waits for every member without completing outstanding
    /// operations (`shmem_sync` with an active set). A set that is the whole job in order uses
    /// [`World::sync_all`] and leaves `pSync` alone.
    pub fn set_sync(&self, set: &ActiveSet) -> Result<()> {
        if self.whole_job(set) {
            return self.sync_all_named("set_sync");
        }
        self.set_sync_named("set_sync", set)
    }

    /// **Collective over the set.** Completes this PE's outstanding operations, then waits for
    /// every member (`shmem_barrier`). A set that is the whole job in order uses
    /// [`World::barrier_all`] and leaves `pSync` alone.
    pub fn set_barrier(&self, set: &ActiveSet) -> Result<()> {
        if self.whole_job(set) {
            return self.barrier_all_named("set_barrier");
        }
        self.quiet_all("set_barrier")?;
        self.set_sync_named("set_barrier", set)
    }

    /// The dissemination barrier of counters in `pSync` (see the module docs).
    pub(super) fn set_sync_named(&self, _call: &'static str, set: &ActiveSet) -> Result<()> {
        let n = set.members.len();
        let mut dist = 1;
        let mut round = 0;
        while dist < n {
            let w = set.psync.wrapping_add(round);
            self.atomic_add(w, 1i64, set.members[(set.me + dist) % n])?;
            self.wait_until(w.cast_const(), Cmp::Ge, 1)?;
            self.atomic_add(w, -1i64, self.me)?;
            dist <<= 1;
            round += 1;
        }
        Ok(())
    }

    calls! {
        [T: RmaType] (set: &ActiveSet, dest: *mut T, source: *const T, nelems: usize, root: usize)
            -> Result<()>;

        /// **Collective over the set.** Copies `nelems` elements of `source` on set member
        /// `root` to `dest` on every other member; the root's `dest` is not written (as
        /// OpenSHMEM 1.4's `shmem_broadcast32/64`).
        set_broadcast => broadcast_in(Op { g: Group::Set(set), dest, source, nelems }, root);
    }

    calls! {
        [T: RmaType] (set: &ActiveSet, dest: *mut T, source: *const T, nelems: usize) -> Result<()>;

        /// **Collective over the set.** Concatenates every member's `nelems` elements of
        /// `source` in set order into every member's `dest` (`shmem_fcollect32/64`).
        set_fcollect => fcollect_in(Op { g: Group::Set(set), dest, source, nelems });

        /// **Collective over the set.** Like [`set_fcollect`](World::set_fcollect) with a
        /// different `nelems` per member; the counts travel in the last word of `pSync`, which
        /// is zero again on return (`shmem_collect32/64`). A member's bad `source` or `nelems`
        /// fails the call on every member.
        set_collect => collect_in(Op { g: Group::Set(set), dest, source, nelems });
    }

    calls! {
        [T: RmaType]
        (set: &ActiveSet, dest: *mut T, source: *const T, dst: usize, sst: usize, nelems: usize)
            -> Result<()>;

        /// **Collective over the set.** Strided alltoall over the set: element `k` of block `j`
        /// is `dest[(j·nelems + k)·dst]` and `source[(j·nelems + k)·sst]`; elements of `dest`
        /// between the strided ones are left alone (`shmem_alltoall(s)32/64`).
        set_alltoalls => alltoall_in(Op { g: Group::Set(set), dest, source, nelems }, dst, sst);
    }

    calls! {
        [T: ReduceType, O: ReduceOp<T>]
        (set: &ActiveSet, dest: *mut T, source: *const T, nelems: usize, op: O) -> Result<()>;

        /// **Collective over the set.** Element-wise reduction with `op` of every member's
        /// `source` into every member's `dest`, combined in set order (bit-identical results on
        /// every member); `dest` and `source` may be the very same range
        /// (`shmem_TYPE_OP_to_all`).
        set_reduce => reduce_in(Op { g: Group::Set(set), dest, source, nelems }, op);
    }

    /// **Collective over the team or set.** Reduction of `nelems` elements of `elem_size`
    /// bytes whose arithmetic is `combine(acc, other)`: called in member order with member 0's
    /// `source` in `acc` and each further member's in `other` (both `nelems · elem_size`
    /// bytes, 16-byte aligned); the result goes to every member's `dest`. For element types
    /// the typed reductions do not have (the C library's `long double` and complex).
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_with(
        &self,
        group: Group<'_>,
        dest: *mut u8,
        source: *const u8,
        nelems: usize,
        elem_size: usize,
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
    ) -> Result<()> {
        self.combine_members(
            "reduce_with",
            group,
            dest,
            source,
            nelems,
            elem_size,
            &|g| g.n(),
            combine,
        )
    }

    /// **Collective over the team or set.** Prefix reduction (scan) of `nelems` elements of
    /// `elem_size` bytes whose arithmetic is `combine(acc, other)` (called in member order,
    /// as for [`World::reduce_with`]): member `i`'s `dest` gets the combination of the
    /// `source` of members `0..=i` (inclusive scan) or `0..i` (`exclusive`; member 0 gets zero
    /// bytes, the value 0 of every integer, float and complex type). `dest` and `source` may
    /// be the very same range but must not overlap otherwise. Like OpenSHMEM 1.6's
    /// `shmem_TYPE_sum_inscan` / `_exscan`; errors name `inscan` or `exscan`.
    #[allow(clippy::too_many_arguments)]
    pub fn scan_with(
        &self,
        group: Group<'_>,
        dest: *mut u8,
        source: *const u8,
        nelems: usize,
        elem_size: usize,
        exclusive: bool,
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
    ) -> Result<()> {
        let call = if exclusive { "exscan" } else { "inscan" };
        // Members whose source enters my result.
        let upto = |g: &Group<'_>| g.me() + usize::from(!exclusive);
        self.combine_members(call, group, dest, source, nelems, elem_size, &upto, combine)
    }

    /// The body of [`reduce_with`](World::reduce_with) and [`scan_with`](World::scan_with):
    /// `dest` gets the combination, in member order, of the `source` of members `0..upto`
    /// (`upto(group)`, asked after the arguments are checked; zero bytes when it is 0).
    #[allow(clippy::too_many_arguments)]
    fn combine_members(
        &self,
        call: &'static str,
        group: Group<'_>,
        dest: *mut u8,
        source: *const u8,
        nelems: usize,
        elem_size: usize,
        upto: &dyn Fn(&Group<'_>) -> usize,
        combine: &mut dyn FnMut(&mut [u8], &[u8]),
    ) -> Result<()> {
        self.group_check(call, group)?;
        let bytes = nelems
            .checked_mul(elem_size)
            .ok_or_else(|| Error::invalid(call, "nelems × element size overflows"))?;
        self.coll_bufs(call, dest, bytes, source, bytes, true)?;
        // 16-byte aligned staging (long double needs it).
        let words = bytes.div_ceil(16);
        let upto = upto(&group);
        let check = Check::new(&[
            ("nelems", nelems as u64),
            ("element size", elem_size as u64),
        ]);
        self.pull_protocol(
            call,
            group,
            &check,
            || {
                let mut acc = vec![0u128; words];
                if bytes == 0 || upto == 0 {
                    return Ok(acc);
                }
                let mut tmp = vec![0u128; words];
                self.get_impl(call, staging(&mut acc, bytes), source, group.pe(0))?;
                for j in 1..upto {
                    self.get_impl(call, staging(&mut tmp, bytes), source, group.pe(j))?;
                    combine(staging(&mut acc, bytes), staging(&mut tmp, bytes));
                }
                Ok(acc)
            },
            |mut v| self.write_mine(call, dest, staging(&mut v, bytes)),
        )
    }
}

/// The first `bytes` bytes of `v` (all of them if it holds fewer; callers size it to hold
/// `bytes`).
fn staging(v: &mut [u128], bytes: usize) -> &mut [u8] {
    let n = bytes.min(std::mem::size_of_val(v));
    // SAFETY: `v` holds at least `n` initialized bytes; u8 has no alignment or validity
    // requirement, and the slice borrows `v` mutably.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), n) }
}
