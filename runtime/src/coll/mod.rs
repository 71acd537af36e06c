//! Host-side collectives over a [`Team`] (OpenSHMEM 1.5 team-based collectives).
//!
//! Every call here is **collective over the team**: each member must make it, in the same
//! order as the team's other collectives, with the same `nelems` (except `collect`), root and
//! strides. PE numbers (`root`, block indices) are team-relative. Buffers are symmetric
//! addresses on the user heap (CPU or GPU), checked before anything moves.
//!
//! Algorithm (the same for all, see `docs/collectives.md`): complete this PE's outstanding
//! operations, team sync, *pull* what this PE needs from the members' `source` with one-sided
//! gets into a private buffer (reducing as it goes), team sync (no member returns, and so
//! reuses its `source`, while another still reads it), then write this PE's `dest` and quiet.
//! Because the result is staged privately, in-place reductions and broadcasts work.

mod ops;

pub use ops::{And, BitwiseReduceType, Max, Min, Or, Prod, ReduceOp, ReduceType, Sum, Xor};

use crate::error::{Error, Result};
use crate::team::Team;
use crate::types::RmaType;
use crate::world::World;

/// `collect`'s "my arguments are bad" mark in the exchanged count.
const BAD_COUNT: u64 = u64::MAX;

/// Bytes of `nelems` elements of `T`.
fn bytes_of<T>(call: &'static str, what: &str, nelems: usize) -> Result<usize> {
    nelems
        .checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::invalid(call, format!("{what}: {nelems} elements overflow")))
}

/// Elements spanned by `count` elements `stride` apart.
fn span(call: &'static str, what: &str, count: usize, stride: usize) -> Result<usize> {
    if count == 0 {
        return Ok(0);
    }
    (count - 1)
        .checked_mul(stride)
        .and_then(|x| x.checked_add(1))
        .ok_or_else(|| Error::invalid(call, format!("{what}: stride {stride} × {count} overflows")))
}

/// True if the byte ranges `[a, a+al)` and `[b, b+bl)` share a byte.
fn overlap(a: usize, al: usize, b: usize, bl: usize) -> bool {
    al > 0 && bl > 0 && a < b.saturating_add(bl) && b < a.saturating_add(al)
}

impl World {
    /// Checks that `nelems` elements at `p` lie in one live allocation of my symmetric heap.
    fn coll_buf<T: RmaType>(
        &self,
        call: &'static str,
        what: &str,
        p: *const T,
        nelems: usize,
    ) -> Result<usize> {
        let bytes = bytes_of::<T>(call, what, nelems)?;
        if bytes == 0 {
            return Ok(0);
        }
        self.remote(call, p as usize, bytes, self.me)
            .map(|_| bytes)
            .map_err(|e| match e {
                Error::NotSymmetric { call, reason } => Error::NotSymmetric {
                    call,
                    reason: format!("{what} ({nelems} elements): {reason}"),
                },
                e => e,
            })
    }

    /// Rejects overlapping `dest` and `source` (`identical_ok`: except exactly the same range).
    fn coll_overlap<T>(
        call: &'static str,
        dest: *const T,
        dbytes: usize,
        source: *const T,
        sbytes: usize,
        identical_ok: bool,
    ) -> Result<()> {
        let (d, s) = (dest as usize, source as usize);
        if identical_ok && d == s && dbytes == sbytes {
            return Ok(());
        }
        if overlap(d, dbytes, s, sbytes) {
            return Err(Error::invalid(
                call,
                format!(
                    "dest [{d:#x}, +{dbytes}) and source [{s:#x}, +{sbytes}) overlap{}",
                    if identical_ok {
                        " (only the very same range is allowed)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        Ok(())
    }

    /// Copies `out.len()` elements from the symmetric `src` on world PE `pe` into `out`.
    fn pull<T: RmaType>(
        &self,
        call: &'static str,
        out: &mut [T],
        src: *const T,
        pe: usize,
    ) -> Result<()> {
        let bytes = std::mem::size_of_val(out);
        if bytes == 0 {
            return Ok(());
        }
        let t = self.target(call, src as usize, bytes, pe)?;
        self.get_from(call, out.as_mut_ptr().cast(), t, bytes)
    }

    /// Writes `vals` to my copy of the symmetric `dest`.
    fn write_mine<T: RmaType>(&self, call: &'static str, dest: *mut T, vals: &[T]) -> Result<()> {
        let bytes = std::mem::size_of_val(vals);
        if bytes == 0 {
            return Ok(());
        }
        let addr = self.remote(call, dest as usize, bytes, self.me)?;
        self.xport.put(call, addr, vals.as_ptr().cast(), bytes)
    }

    /// The protocol every collective follows: quiet, sync, `gather` (pulls into private
    /// memory), sync (also when `gather` failed, so that no member is left waiting), `write`
    /// (my `dest`), quiet.
    fn two_phase<V>(
        &self,
        call: &'static str,
        team: &Team,
        gather: impl FnOnce() -> Result<V>,
        write: impl FnOnce(V) -> Result<()>,
    ) -> Result<()> {
        self.quiet_all(call)?;
        self.team_sync_named(call, team)?;
        let got = gather();
        let synced = self.team_sync_named(call, team);
        let v = got?;
        synced?;
        write(v)?;
        self.quiet_all(call)
    }

    /// **Collective over the team.** Copies `nelems` elements of `source` on team PE `root`
    /// to `dest` on every member, the root included. `dest` and `source` may be the very same
    /// range but must not overlap otherwise. Like `shmem_broadcast`.
    pub fn broadcast<T: RmaType>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
        root: usize,
    ) -> Result<()> {
        let call = "broadcast";
        self.team_check(call, team)?;
        if root >= team.n_pes() {
            return Err(Error::invalid(
                call,
                format!(
                    "root {root} is out of range: the team has {} PEs",
                    team.n_pes()
                ),
            ));
        }
        let db = self.coll_buf(call, "dest", dest, nelems)?;
        let sb = self.coll_buf(call, "source", source, nelems)?;
        Self::coll_overlap(call, dest, db, source, sb, true)?;
        let root_pe = team.world_pe(root);
        self.two_phase(
            call,
            team,
            || {
                let mut v = vec![T::default_value(); nelems];
                self.pull(call, &mut v, source, root_pe)?;
                Ok(v)
            },
            |v| self.write_mine(call, dest, &v),
        )
    }

    /// **Collective over the team.** Concatenates every member's `source` block of
    /// `nelems` elements in team order into every member's `dest` (`n_pes()·nelems`
    /// elements); `dest` and `source` must not overlap. Like `shmem_fcollect`.
    pub fn fcollect<T: RmaType>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
    ) -> Result<()> {
        let call = "fcollect";
        self.team_check(call, team)?;
        let n = team.n_pes();
        let total = nelems
            .checked_mul(n)
            .ok_or_else(|| Error::invalid(call, "nelems × team size overflows"))?;
        let db = self.coll_buf(call, "dest", dest, total)?;
        let sb = self.coll_buf(call, "source", source, nelems)?;
        Self::coll_overlap(call, dest, db, source, sb, false)?;
        self.two_phase(
            call,
            team,
            || {
                let mut v = vec![T::default_value(); total];
                if nelems > 0 {
                    for (j, chunk) in v.chunks_mut(nelems).enumerate() {
                        self.pull(call, chunk, source, team.world_pe(j))?;
                    }
                }
                Ok(v)
            },
            |v| self.write_mine(call, dest, &v),
        )
    }

    /// **Collective over the team.** Like [`fcollect`](World::fcollect) but every member may
    /// contribute a different `nelems`; `dest` receives the blocks back to back in team order
    /// and must hold their sum. Like `shmem_collect`.
    pub fn collect<T: RmaType>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
    ) -> Result<()> {
        let call = "collect";
        self.team_check(call, team)?;
        let n = team.n_pes();
        // My arguments, checked before the exchange; a bad count is announced, not hidden, so
        // the other members fail too instead of waiting.
        let mine = self.coll_buf(call, "source", source, nelems);
        let word = match &mine {
            Ok(_) if (nelems as u64) < BAD_COUNT => nelems as u64,
            _ => BAD_COUNT,
        };
        let slot_word = self.teams.slot_off(team.inner.slot, 0);
        self.quiet_all(call)?;
        // Between the two syncs of a collective only their owner writes the slot's words.
        self.ctrl_store(call, self.me, slot_word, word)?;
        self.team_sync_named(call, team)?;
        let gathered = (|| {
            let sb = mine?;
            let mut counts = Vec::with_capacity(n);
            for j in 0..n {
                let pe = team.world_pe(j);
                let c = self.ctrl_load(call, pe, slot_word)?;
                if c == BAD_COUNT {
                    return Err(Error::invalid(
                        call,
                        format!("team PE {j} (PE {pe}) passed a bad source or nelems"),
                    ));
                }
                counts.push(c as usize);
            }
            let total = counts.iter().try_fold(0usize, |a, &c| a.checked_add(c));
            let total =
                total.ok_or_else(|| Error::invalid(call, "the members' nelems overflow"))?;
            let db = self.coll_buf(call, "dest", dest, total)?;
            Self::coll_overlap(call, dest, db, source, sb, false)?;
            let mut v = vec![T::default_value(); total];
            let mut at = 0;
            for (j, &c) in counts.iter().enumerate() {
                self.pull(call, &mut v[at..at + c], source, team.world_pe(j))?;
                at += c;
            }
            Ok(v)
        })();
        let synced = self.team_sync_named(call, team);
        let v = gathered?;
        synced?;
        self.write_mine(call, dest, &v)?;
        self.quiet_all(call)
    }

    /// **Collective over the team.** Block `j` (of `nelems` elements) of `source` on team PE
    /// `i` goes to block `i` of `dest` on team PE `j`. Both hold `n_pes()·nelems` elements and
    /// must not overlap. Like `shmem_alltoall`.
    pub fn alltoall<T: RmaType>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
    ) -> Result<()> {
        self.alltoall_impl("alltoall", team, dest, source, 1, 1, nelems)
    }

    /// **Collective over the team.** Strided [`alltoall`](World::alltoall): element `k` of
    /// block `j` is `dest[(j·nelems + k)·dst]` and `source[(j·nelems + k)·sst]`; strides
    /// count elements and must be at least 1. Elements of `dest` between the strided ones are
    /// left alone. Like `shmem_alltoalls`.
    pub fn alltoalls<T: RmaType>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        dst: usize,
        sst: usize,
        nelems: usize,
    ) -> Result<()> {
        self.alltoall_impl("alltoalls", team, dest, source, dst, sst, nelems)
    }

    #[allow(clippy::too_many_arguments)]
    fn alltoall_impl<T: RmaType>(
        &self,
        call: &'static str,
        team: &Team,
        dest: *mut T,
        source: *const T,
        dst: usize,
        sst: usize,
        nelems: usize,
    ) -> Result<()> {
        self.team_check(call, team)?;
        if dst == 0 || sst == 0 {
            return Err(Error::invalid(
                call,
                format!("strides must be at least 1 (dst {dst}, sst {sst})"),
            ));
        }
        let n = team.n_pes();
        let me = team.my_pe();
        let total = nelems
            .checked_mul(n)
            .ok_or_else(|| Error::invalid(call, "nelems × team size overflows"))?;
        let dspan = span(call, "dest", total, dst)?;
        let sspan = span(call, "source", total, sst)?;
        let db = self.coll_buf(call, "dest", dest, dspan)?;
        let sb = self.coll_buf(call, "source", source, sspan)?;
        Self::coll_overlap(call, dest, db, source, sb, false)?;
        // Elements of one block as seen from its start: (nelems−1)·sst + 1.
        let bspan = span(call, "source", nelems, sst)?;
        self.two_phase(
            call,
            team,
            || {
                let mut v = vec![T::default_value(); total];
                if nelems == 0 {
                    return Ok(v);
                }
                let mut block = vec![T::default_value(); bspan];
                for (j, out) in v.chunks_mut(nelems).enumerate() {
                    // My block in member j's source starts at element me·nelems·sst.
                    let start = source.wrapping_add(me * nelems * sst);
                    if sst == 1 {
                        self.pull(call, out, start, team.world_pe(j))?;
                    } else {
                        self.pull(call, &mut block, start, team.world_pe(j))?;
                        for (k, o) in out.iter_mut().enumerate() {
                            *o = block[k * sst];
                        }
                    }
                }
                Ok(v)
            },
            |v| {
                if dst == 1 {
                    return self.write_mine(call, dest, &v);
                }
                if v.is_empty() {
                    return Ok(());
                }
                // Read-modify-write of my dest extent keeps the elements between the strided
                // ones; nobody else writes my dest during the call.
                let mut ext = vec![T::default_value(); dspan];
                self.pull(call, &mut ext, dest, self.me)?;
                for (i, x) in v.into_iter().enumerate() {
                    ext[i * dst] = x;
                }
                self.write_mine(call, dest, &ext)
            },
        )
    }

    /// **Collective over the team.** Element-wise reduction with `op` of every member's
    /// `source` (`nelems` elements) into every member's `dest`. `dest` and `source` may be the
    /// very same range but must not overlap otherwise. Values are combined in team PE order,
    /// so every member gets bit-identical results (floats included). Like
    /// `shmem_TYPE_OP_reduce`; `op` is [`Sum`], [`Prod`], [`Min`], [`Max`], or, for
    /// integers, [`And`], [`Or`], [`Xor`]. Errors name the OpenSHMEM call (`sum_reduce`, …).
    pub fn reduce<T: ReduceType, O: ReduceOp<T>>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
        op: O,
    ) -> Result<()> {
        let _ = op;
        let call = O::CALL;
        self.team_check(call, team)?;
        let db = self.coll_buf(call, "dest", dest, nelems)?;
        let sb = self.coll_buf(call, "source", source, nelems)?;
        Self::coll_overlap(call, dest, db, source, sb, true)?;
        self.two_phase(
            call,
            team,
            || self.reduce_blocks::<T, O>(call, team, source, nelems),
            |v| self.write_mine(call, dest, &v),
        )
    }

    /// **Collective over the team.** Reduces every member's `source` of `n_pes()·nelems`
    /// elements with `op` and leaves block `i` (`nelems` elements) of the result in `dest` on
    /// team PE `i`. `dest` and `source` must not overlap. Like NVSHMEM's
    /// `nvshmem_TYPE_OP_reducescatter`; errors name `reduce_scatter`.
    pub fn reduce_scatter<T: ReduceType, O: ReduceOp<T>>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
        op: O,
    ) -> Result<()> {
        let _ = op;
        let call = "reduce_scatter";
        self.team_check(call, team)?;
        let total = nelems
            .checked_mul(team.n_pes())
            .ok_or_else(|| Error::invalid(call, "nelems × team size overflows"))?;
        let db = self.coll_buf(call, "dest", dest, nelems)?;
        let sb = self.coll_buf(call, "source", source, total)?;
        Self::coll_overlap(call, dest, db, source, sb, false)?;
        let start = source.wrapping_add(team.my_pe() * nelems);
        self.two_phase(
            call,
            team,
            || self.reduce_blocks::<T, O>(call, team, start, nelems),
            |v| self.write_mine(call, dest, &v),
        )
    }

    /// Pulls `nelems` elements at `src` from every member in team order, combining them.
    fn reduce_blocks<T: ReduceType, O: ReduceOp<T>>(
        &self,
        call: &'static str,
        team: &Team,
        src: *const T,
        nelems: usize,
    ) -> Result<Vec<T>> {
        let mut acc = vec![T::default_value(); nelems];
        if nelems == 0 {
            return Ok(acc);
        }
        self.pull(call, &mut acc, src, team.world_pe(0))?;
        let mut tmp = vec![T::default_value(); nelems];
        for j in 1..team.n_pes() {
            self.pull(call, &mut tmp, src, team.world_pe(j))?;
            for (a, &b) in acc.iter_mut().zip(&tmp) {
                *a = O::combine(*a, b);
            }
        }
        Ok(acc)
    }
}
