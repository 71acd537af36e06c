//! Host-side collectives over a [`Team`] (OpenSHMEM 1.5 team-based collectives).
//!
//! Every call here is **collective over the team**: each member must make it, in the same
//! order as the team's other collectives, with the same `nelems` (except `collect`), root and
//! strides. PE numbers (`root`, block indices) are team-relative. Buffers are symmetric
//! addresses on the user heap (CPU or GPU), checked before anything moves.
//!
//! Algorithms (see `docs/collectives.md`): one place chooses the engine of every collective,
//! for teams and active sets alike (`World::engine`, `select.rs`). Every call completes this
//! PE's outstanding operations, syncs the team, moves the data, completes its own copies and
//! syncs the team again (no member returns, and so reuses its `source` or reads its `dest`,
//! while another still reads or writes them): two team syncs per call (the push engine's
//! broadcast, fcollect and reductions need only the first: see `World::pushed`).
//!
//! * Direct (every member on this host, or data movement on a GPU heap): broadcast, collect,
//!   fcollect and alltoall(s) *pull* each member's block straight into this PE's `dest`: a
//!   load/store copy on the CPU heap, a copy-engine copy on the GPU heap. No private staging.
//!   Reductions on the CPU heap are *partitioned*: the result is dealt out in
//!   cache-line-aligned slices, one per member; each member combines its slice of every
//!   member's `source` in team order, a cache-sized chunk at a time, and stores each chunk into
//!   every member's `dest`. Every element is combined by exactly one member in team order, so
//!   all members hold bit-identical results; since only the slice's owner reads that slice of
//!   any `source`, it may overwrite it right after reading (in-place reduce). `reducescatter`
//!   combines its own block straight into its `dest`.
//! * Push (a team with members on other hosts, CPU heap; `tree.rs`): broadcast by a binomial
//!   tree, fcollect by Bruck's allgather, collect by a chain of offsets and Bruck's allgather
//!   by pulls, reductions by a chain in team order and a binomial broadcast of the result:
//!   O(log n) messages per PE instead of one per member.
//! * Staged (reductions on the GPU heap or over remote members without load/store, active
//!   sets' reductions across hosts, `reduce_with`, the scans): pull every member's block into
//!   a private buffer, combine there in team order, sync, and write `dest` afterwards.
//!   `reducescatter` and alltoall(s) across hosts stay pulls: one request per member.

mod active_set;
pub(crate) mod device;
pub(crate) mod modules;
mod ops;
mod select;
mod tree;

pub use active_set::{ActiveSet, Group};
pub use ops::{And, BitwiseReduceType, Max, Min, Or, Prod, ReduceOp, ReduceType, Sum, Xor};

use crate::error::{Error, Result};
use crate::team::Team;
use crate::transport::{Transport, TransportOps as _};
use crate::types::RmaType;
use crate::world::{Target, World};
use select::{Engine, Kind};
use tree::Signals;

/// `collect`'s "my arguments are bad" mark in the exchanged count.
const BAD_COUNT: u64 = u64::MAX;

/// Bytes a partitioned reduction combines per step (its accumulator stays in the L1/L2 cache).
const CHUNK_BYTES: usize = 16 << 10;

/// Most bytes a staged reduction pulls into one private buffer to fetch every member's block
/// at once (larger ones go member by member).
const BATCH_BYTES: usize = 16 << 20;

/// Granularity of the slices a partitioned reduction deals out, in bytes: a cache line, so no
/// two members store into the same line of a `dest` at the same time.
const LINE_BYTES: usize = 64;

/// Bytes of `nelems` elements of `T`.
fn bytes_of<T>(call: &'static str, what: &str, nelems: usize) -> Result<usize> {
    nelems
        .checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::invalid(call, format!("{what}: {nelems} elements overflow")))
}

/// Elements in `n` team blocks of `nelems` each.
pub(crate) fn team_total(call: &'static str, nelems: usize, n: usize) -> Result<usize> {
    nelems
        .checked_mul(n)
        .ok_or_else(|| Error::invalid(call, "nelems × team size overflows"))
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

/// A strided alltoall's checked extents: of `dest` and of one source block (elements), and
/// `dest`'s bytes.
struct Strided {
    dspan: usize,
    bspan: usize,
    dbytes: usize,
}

/// The arguments a collective compares across the members at its first sync (every member
/// must pass the same), with their names for the error (formatted only then).
struct Check {
    args: [(&'static str, u64); 4],
    len: usize,
}

impl Check {
    /// The first four of `args`.
    fn new(args: &[(&'static str, u64)]) -> Check {
        debug_assert!(args.len() <= 4, "a check compares four arguments at most");
        let mut c = Check {
            args: [("", 0); 4],
            len: args.len().min(4),
        };
        c.args[..c.len].copy_from_slice(&args[..c.len]);
        c
    }

    /// `args` of a collective on elements of `T`, then the element size (four at most).
    fn of<T>(args: &[(&'static str, u64)]) -> Check {
        let mut c = Check::new(args);
        if c.len < 4 {
            c.args[c.len] = ("element size", std::mem::size_of::<T>() as u64);
            c.len += 1;
        }
        c
    }

    fn digest(&self, call: &str) -> u64 {
        let v = self.args.map(|(_, x)| x);
        crate::sync::digest(call, &v[..self.len])
    }

    fn shown(&self) -> String {
        self.args[..self.len]
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What one call of a collective that teams and active sets share works on: the group and
/// `nelems` elements of `dest` and `source` (each engine says what `nelems` counts).
#[derive(Clone, Copy)]
struct Op<'a, T> {
    g: Group<'a>,
    dest: *mut T,
    source: *const T,
    nelems: usize,
}

impl<'a, T> Op<'a, T> {
    /// The group, `dest`, `source` and `nelems`.
    fn parts(self) -> (Group<'a>, *mut T, *const T, usize) {
        (self.g, self.dest, self.source, self.nelems)
    }
}

/// Where the members of a collect announce their counts: a team in the first control word of
/// its slot (an offset in the control heap), an active set in the last word of its `pSync`.
#[derive(Clone, Copy)]
enum CountWord {
    Slot(usize),
    PSync(*mut i64),
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

    /// Checks `dest` (`dn` elements) and `source` (`sn` elements) with
    /// [`coll_buf`](World::coll_buf) and against each other with
    /// [`coll_overlap`](World::coll_overlap); returns the bytes of `dest`.
    fn coll_bufs<T: RmaType>(
        &self,
        call: &'static str,
        dest: *mut T,
        dn: usize,
        source: *const T,
        sn: usize,
        identical_ok: bool,
    ) -> Result<usize> {
        let db = self.coll_buf(call, "dest", dest, dn)?;
        let sb = self.coll_buf(call, "source", source, sn)?;
        Self::coll_overlap(call, dest, db, source, sb, identical_ok)?;
        Ok(db)
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

    /// Writes `vals` to my copy of the symmetric `dest`.
    fn write_mine<T: RmaType>(&self, call: &'static str, dest: *mut T, vals: &[T]) -> Result<()> {
        let bytes = std::mem::size_of_val(vals);
        if bytes == 0 {
            return Ok(());
        }
        let addr = self.remote(call, dest as usize, bytes, self.me)?;
        self.xport.put(call, addr, vals.as_ptr().cast(), bytes)
    }

    /// Copies `nelems` elements of the symmetric `src` on world PE `pe` straight into my copy
    /// of the symmetric `dst` (no private buffer where the transports allow it: load/store or
    /// a TCP get into host memory on the CPU heap, a copy-engine copy on the GPU heap).
    fn pull_into<T: RmaType>(
        &self,
        call: &'static str,
        dst: *mut T,
        src: *const T,
        nelems: usize,
        pe: usize,
    ) -> Result<()> {
        let bytes = bytes_of::<T>(call, "block", nelems)?;
        if bytes == 0 {
            return Ok(());
        }
        let t = self.target(call, src as usize, bytes, pe)?;
        let d = self.remote(call, dst as usize, bytes, self.me)?;
        match (&self.xport, t) {
            // My CPU heap is host memory: the transports copy into it directly.
            (Transport::Shm, t) => self.get_from(call, d as *mut u8, t, bytes),
            (_, Target::Local(a)) => self.xport.copy(call, d, a, bytes),
            (_, t) => {
                let mut v = vec![0u8; bytes];
                self.get_from(call, v.as_mut_ptr(), t, bytes)?;
                self.xport.put(call, d, v.as_ptr(), bytes)
            }
        }
    }

    /// Load/store addresses of every member's copy of the `nelems` elements at `p`, in team
    /// order, when the user heap is host memory and every member is on this host (the
    /// partitioned reductions and direct strided copies need them); `None` otherwise.
    fn member_ptrs<T: RmaType>(
        &self,
        call: &'static str,
        g: Group<'_>,
        p: *const T,
        nelems: usize,
    ) -> Result<Option<Vec<*mut T>>> {
        if !matches!(self.xport, Transport::Shm) {
            return Ok(None);
        }
        let bytes = bytes_of::<T>(call, "buffer", nelems)?;
        if bytes == 0 || (p as usize) % std::mem::align_of::<T>() != 0 {
            return Ok(None);
        }
        let mut v = Vec::with_capacity(g.n());
        for j in 0..g.n() {
            match self.target(call, p as usize, bytes, g.pe(j))? {
                Target::Local(a) => v.push(a as *mut T),
                Target::Remote { .. } => return Ok(None),
            }
        }
        Ok(Some(v))
    }

    /// The first team sync of a collective, which also compares the call's arguments across
    /// the members (no extra round trip: they travel with the sync's flags). On a mismatch
    /// every member returns the same [`Error::AsymmetricCall`] before anything moves.
    fn checked_team_sync(&self, call: &'static str, team: &Team, check: &Check) -> Result<()> {
        let d = check.digest(call);
        match self.team_sync_checked(call, team, Some(d))? {
            None => Ok(()),
            Some(m) => Err(Error::AsymmetricCall {
                call,
                details: crate::mem::asymmetry_details(
                    m,
                    &format!("{call} on team {} with {}", team.inner.name, check.shown()),
                    "every member must pass the same arguments",
                ),
            }),
        }
    }

    /// The first sync of a collective over `g`: a team's compares `check` (the call's
    /// arguments) across the members ([`checked_team_sync`](World::checked_team_sync)); an
    /// active set's is its `pSync` barrier, which carries no check.
    fn first_sync(&self, call: &'static str, g: Group<'_>, check: &Check) -> Result<()> {
        match g {
            Group::Team(t) => self.checked_team_sync(call, t, check),
            Group::Set(s) => self.set_sync_named(call, s),
        }
    }

    /// Rejects a team that is not usable (see `team_check`); an active set was checked when it
    /// was made.
    fn group_check(&self, call: &'static str, g: Group<'_>) -> Result<()> {
        match g {
            Group::Team(t) => self.team_check(call, t),
            Group::Set(_) => Ok(()),
        }
    }

    /// A collective's other syncs over `g` (a team sync, or the active set's `pSync` barrier).
    pub(super) fn group_sync(&self, call: &'static str, g: Group<'_>) -> Result<()> {
        match g {
            Group::Team(t) => self.team_sync_named(call, t),
            Group::Set(s) => self.set_sync_named(call, s),
        }
    }

    /// The protocol of the staged engine: quiet, first sync, `gather` what this PE needs into
    /// private memory, sync (also when that failed, so that no member is left waiting),
    /// `write` my `dest`, quiet.
    fn pull_protocol<V>(
        &self,
        call: &'static str,
        g: Group<'_>,
        check: &Check,
        gather: impl FnOnce() -> Result<V>,
        write: impl FnOnce(V) -> Result<()>,
    ) -> Result<()> {
        self.quiet_all(call)?;
        self.first_sync(call, g, check)?;
        let got = gather();
        let synced = self.group_sync(call, g);
        let v = got?;
        synced?;
        write(v)?;
        self.quiet_all(call)
    }

    /// The protocol of the direct engine: quiet, first sync, `work` (reads the members'
    /// `source`, writes `dest`s), quiet (my copies are complete), sync (also when `work`
    /// failed, so that no member is left waiting).
    fn one_phase(
        &self,
        call: &'static str,
        g: Group<'_>,
        check: &Check,
        work: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.quiet_all(call)?;
        self.first_sync(call, g, check)?;
        let r = work();
        self.finish(call, g, r)
    }

    /// The protocol of the push engine (a team's): quiet, first sync, `work` with the
    /// collective's [`Signals`], quiet. With no `check` the first sync compares nothing and a
    /// second sync ends the call (collect: the members' counts differ, and its pulls read the
    /// other members' `dest`). With a `check` there is no second sync: every byte a member
    /// receives comes with a signal that it awaits, and no member reads another's memory, so
    /// once a member has its signals nobody touches its buffers any more (broadcast, fcollect,
    /// reductions: ⌈log2 n⌉ rounds fewer per call).
    fn pushed(
        &self,
        call: &'static str,
        team: &Team,
        check: Option<&Check>,
        work: impl FnOnce(&Signals<'_>) -> Result<()>,
    ) -> Result<()> {
        self.quiet_all(call)?;
        match check {
            Some(c) => self.checked_team_sync(call, team, c)?,
            None => self.team_sync_named(call, team)?,
        }
        let s = Signals::after_first_sync(team);
        let r = work(&s);
        if check.is_none() {
            return self.finish(call, Group::Team(team), r);
        }
        let q = self.quiet_all(call);
        r?;
        q
    }

    /// The end of a one-phase collective whose work returned `r`: quiet (my copies are
    /// complete), then sync, also when `r` failed, so that no member is left waiting.
    fn finish(&self, call: &'static str, g: Group<'_>, r: Result<()>) -> Result<()> {
        let q = self.quiet_all(call);
        let synced = self.group_sync(call, g);
        r?;
        q?;
        synced
    }

    /// Pulls block `j` (`nelems` elements at `source`) of every member `j` of the group into
    /// block `j` of `dest`, starting with my own block, then the next members': at any moment the
    /// members read different sources.
    fn pull_blocks<T: RmaType>(&self, call: &'static str, op: Op<'_, T>) -> Result<()> {
        let (g, dest, src, nelems) = op.parts();
        let n = g.n();
        let me = g.me();
        if matches!(self.xport, Transport::Shm) {
            // Host memory: every block straight into my dest, the remote ones' round trips
            // overlapped.
            let bytes = bytes_of::<T>(call, "block", nelems)?;
            if bytes == 0 {
                return Ok(());
            }
            let mut gets = Vec::with_capacity(n);
            for i in 0..n {
                let j = (me + i) % n;
                let at = dest.wrapping_add(j * nelems);
                let t = self.target(call, src as usize, bytes, g.pe(j))?;
                let d = self.remote(call, at as usize, bytes, self.me)?;
                gets.push((d as *mut u8, t, bytes));
            }
            return self.get_batched(call, &gets);
        }
        for i in 0..n {
            let j = (me + i) % n;
            let at = dest.wrapping_add(j * nelems);
            self.pull_into(call, at, src, nelems, g.pe(j))?;
        }
        Ok(())
    }

    calls! {
        [T: RmaType] (team: &Team, dest: *mut T, source: *const T, nelems: usize, root: usize)
            -> Result<()>;

        /// **Collective over the team.** Copies `nelems` elements of `source` on team PE `root`
        /// to `dest` on every member, the root included. `dest` and `source` may be the very
        /// same range but must not overlap otherwise. Like `shmem_broadcast`.
        broadcast => broadcast_in(Op { g: Group::Team(team), dest, source, nelems }, root);
    }

    /// The broadcast of teams and active sets by the engine [`World::engine`] picks, after
    /// checking `root` and the buffers. A team's root gets the data in its `dest` too; an
    /// active set's root's `dest` is not written (OpenSHMEM 1.4's `shmem_broadcast32/64`).
    fn broadcast_in<T: RmaType>(
        &self,
        call: &'static str,
        op: Op<'_, T>,
        root: usize,
    ) -> Result<()> {
        let (g, dest, source, nelems) = op.parts();
        self.group_check(call, g)?;
        let check = Check::of::<T>(&[("root", root as u64), ("nelems", nelems as u64)]);
        let root_writes = matches!(g, Group::Team(_));
        g.check_root(call, root)?;
        self.coll_bufs(call, dest, nelems, source, nelems, true)?;
        let bytes = bytes_of::<T>(call, "block", nelems)?;
        let at_root = g.me() == root;
        if let (Engine::Push, Group::Team(team)) = (self.engine(Kind::Broadcast, g, false), g) {
            return self.pushed(call, team, Some(&check), |s| {
                if bytes == 0 {
                    return Ok(());
                }
                let (d, src) = (dest.cast::<u8>(), source.cast::<u8>());
                let from = if at_root {
                    if root_writes {
                        self.copy_mine(call, d, src, bytes)?;
                    }
                    self.remote(call, src as usize, bytes, self.me)? as *const u8
                } else {
                    std::ptr::null()
                };
                self.bcast_push(call, s, d, from, bytes, root)
            });
        }
        self.one_phase(call, g, &check, || {
            if at_root && (!root_writes || dest.cast_const() == source) {
                // The root's dest is left alone, or already holds the data (in place; the
                // others are reading it).
                return Ok(());
            }
            // Nobody reads a non-root's source, so an in-place non-root may overwrite it.
            self.pull_into(call, dest, source, nelems, g.pe(root))
        })
    }

    calls! {
        [T: RmaType] (team: &Team, dest: *mut T, source: *const T, nelems: usize) -> Result<()>;

        /// **Collective over the team.** Concatenates every member's `source` block of
        /// `nelems` elements in team order into every member's `dest` (`n_pes()·nelems`
        /// elements); `dest` and `source` must not overlap. Like `shmem_fcollect`.
        fcollect => fcollect_in(Op { g: Group::Team(team), dest, source, nelems });

        /// **Collective over the team.** Like [`fcollect`](World::fcollect) but every member
        /// may contribute a different `nelems`; `dest` receives the blocks back to back in team
        /// order and must hold their sum. Like `shmem_collect`.
        collect => collect_in(Op { g: Group::Team(team), dest, source, nelems });

        /// **Collective over the team.** Block `j` (of `nelems` elements) of `source` on team
        /// PE `i` goes to block `i` of `dest` on team PE `j`. Both hold `n_pes()·nelems`
        /// elements and must not overlap. Like `shmem_alltoall`.
        alltoall => alltoall_in(Op { g: Group::Team(team), dest, source, nelems }, 1, 1);
    }

    /// The fcollect of teams and active sets by the engine [`World::engine`] picks.
    fn fcollect_in<T: RmaType>(&self, call: &'static str, op: Op<'_, T>) -> Result<()> {
        let (g, dest, source, nelems) = op.parts();
        self.group_check(call, g)?;
        let check = Check::of::<T>(&[("nelems", nelems as u64)]);
        let total = team_total(call, nelems, g.n())?;
        self.coll_bufs(call, dest, total, source, nelems, false)?;
        let block = bytes_of::<T>(call, "block", nelems)?;
        if let (Engine::Push, Group::Team(team)) = (self.engine(Kind::Fcollect, g, false), g) {
            return self.pushed(call, team, Some(&check), |s| {
                if block == 0 {
                    return Ok(());
                }
                self.fcollect_push(call, s, dest.cast(), source.cast(), block)
            });
        }
        self.one_phase(call, g, &check, || self.pull_blocks(call, op))
    }

    /// The collect of teams and active sets. The members announce their counts before the
    /// first sync (a team in its slot's first control word, an active set in the last word of
    /// its `pSync`, which is zero again on return); a member whose own arguments are bad
    /// announces [`BAD_COUNT`], so the others fail too instead of waiting.
    fn collect_in<T: RmaType>(&self, call: &'static str, op: Op<'_, T>) -> Result<()> {
        let (g, dest, source, nelems) = op.parts();
        self.group_check(call, g)?;
        // My arguments, checked before the exchange.
        let mine = self.coll_buf(call, "source", source, nelems);
        let word = match &mine {
            Ok(_) if (nelems as u64) < BAD_COUNT => nelems as u64,
            _ => BAD_COUNT,
        };
        if let (Engine::Push, Group::Team(team)) = (self.engine(Kind::Collect, g, false), g) {
            return self.pushed(call, team, None, |s| {
                let (off, total) = match self.collect_offsets(call, s, word) {
                    Ok(v) => v,
                    // My own bad argument is the error I report.
                    Err(e) => return Err(mine.err().unwrap_or(e)),
                };
                let sb = mine?;
                let size = std::mem::size_of::<T>();
                // Every member checks the same symmetric dest against the same total.
                let fits = self.coll_buf(call, "dest", dest, total).and_then(|db| {
                    Self::coll_overlap(call, dest, db, source, sb, false)?;
                    self.copy_mine(
                        call,
                        dest.wrapping_add(off).cast(),
                        source.cast(),
                        nelems * size,
                    )
                });
                let d = dest.cast::<u8>();
                let pulled = self.collect_pull(call, s, d, size, off, nelems, total, fits.is_ok());
                fits?;
                pulled
            });
        }
        let (at, who) = match g {
            Group::Team(t) => (
                CountWord::Slot(self.teams.slot_off(t.inner.slot, 0)),
                "team PE",
            ),
            Group::Set(s) => (CountWord::PSync(s.count_word()), "active set member"),
        };
        self.quiet_all(call)?;
        // Between the two syncs of a collective only their owner writes the count words.
        self.count_store(call, at, word)?;
        self.group_sync(call, g)?;
        let gathered = (|| {
            let sb = mine?;
            let mut counts = Vec::with_capacity(g.n());
            for j in 0..g.n() {
                let pe = g.pe(j);
                let c = self.count_load(call, at, pe)?;
                if c == BAD_COUNT {
                    return Err(Error::invalid(
                        call,
                        format!("{who} {j} (PE {pe}) passed a bad source or nelems"),
                    ));
                }
                counts.push(c as usize);
            }
            self.pull_counted(call, op, sb, &counts)
        })();
        let done = self.finish(call, g, gathered);
        let CountWord::PSync(w) = at else {
            return done;
        };
        // Nobody reads my count any more once every member's gather is done; the word is the
        // caller's pSync: give it back zeroed.
        let zeroed = self.write_mine(call, w, &[0i64]);
        done?;
        zeroed?;
        self.quiet_all(call)
    }

    /// Announces my count in `at` (complete on return).
    fn count_store(&self, call: &'static str, at: CountWord, count: u64) -> Result<()> {
        match at {
            CountWord::Slot(off) => self.ctrl_store(call, self.me, off, count),
            CountWord::PSync(w) => {
                self.write_mine(call, w, &[count as i64])?;
                self.quiet_all(call)
            }
        }
    }

    /// The count world PE `pe` announced in `at`.
    fn count_load(&self, call: &'static str, at: CountWord, pe: usize) -> Result<u64> {
        match at {
            CountWord::Slot(off) => self.ctrl_load(call, pe, off),
            CountWord::PSync(w) => Ok(self.g(w.cast_const(), pe)? as u64),
        }
    }

    /// The data of a collect whose members' counts are known (`sb`: my source's bytes):
    /// checks `dest` against their sum and pulls each member's block into place.
    fn pull_counted<T: RmaType>(
        &self,
        call: &'static str,
        op: Op<'_, T>,
        sb: usize,
        counts: &[usize],
    ) -> Result<()> {
        let (g, dest, source, _) = op.parts();
        let total = counts.iter().try_fold(0usize, |a, &c| a.checked_add(c));
        let total = total.ok_or_else(|| Error::invalid(call, "the members' nelems overflow"))?;
        let db = self.coll_buf(call, "dest", dest, total)?;
        Self::coll_overlap(call, dest, db, source, sb, false)?;
        let mut at = 0;
        for (j, &c) in counts.iter().enumerate() {
            self.pull_into(call, dest.wrapping_add(at), source, c, g.pe(j))?;
            at += c;
        }
        Ok(())
    }

    calls! {
        [T: RmaType]
        (team: &Team, dest: *mut T, source: *const T, dst: usize, sst: usize, nelems: usize)
            -> Result<()>;

        /// **Collective over the team.** Strided [`alltoall`](World::alltoall): element `k` of
        /// block `j` is `dest[(j·nelems + k)·dst]` and `source[(j·nelems + k)·sst]`; strides
        /// count elements and must be at least 1. Elements of `dest` between the strided ones
        /// are left alone. Like `shmem_alltoalls`.
        alltoalls => alltoall_in(Op { g: Group::Team(team), dest, source, nelems }, dst, sst);
    }

    /// The (strided) alltoall of teams and active sets: every member pulls its block of each
    /// member's `source` (one message per member: alltoall is O(n) per PE by nature).
    fn alltoall_in<T: RmaType>(
        &self,
        call: &'static str,
        op: Op<'_, T>,
        dst: usize,
        sst: usize,
    ) -> Result<()> {
        let (g, dest, source, nelems) = op.parts();
        self.group_check(call, g)?;
        let check = Check::of::<T>(&[
            ("nelems", nelems as u64),
            ("dst", dst as u64),
            ("sst", sst as u64),
        ]);
        let n = g.n();
        let me = g.me();
        let ext = self.strided_args(call, dest, source, dst, sst, nelems, n)?;
        let Strided {
            dspan,
            bspan,
            dbytes: db,
        } = ext;
        // My block in every member's source starts at element me·nelems·sst.
        let start = source.wrapping_add(me * nelems * sst);
        let mine = Op {
            source: start,
            ..op
        };
        debug_assert_eq!(self.engine(Kind::Alltoall, g, false), Engine::Direct);
        self.one_phase(call, g, &check, || {
            if nelems == 0 {
                return Ok(());
            }
            if dst == 1 && sst == 1 {
                return self.pull_blocks(call, mine);
            }
            if let Some(srcs) = self.member_ptrs(call, g, start, bspan)? {
                // Strided, every member's memory reachable: element by element, straight
                // into my dest (the elements between the strided ones are not touched).
                let d = self.remote(call, dest as usize, db, self.me)? as *mut T;
                for i in 0..n {
                    let j = (me + i) % n;
                    for k in 0..nelems {
                        // SAFETY: `srcs[j]` addresses `bspan` elements of member j's source,
                        // checked against a live allocation, which nobody writes during the
                        // call; `d` addresses my dest extent of `dspan` elements, which only
                        // this PE writes during the call, and (j·nelems + k)·dst < dspan.
                        unsafe {
                            let x = srcs[j].add(k * sst).read();
                            d.add((j * nelems + k) * dst).write(x);
                        }
                    }
                }
                return Ok(());
            }
            // Otherwise through private buffers.
            let v = self.gather_strided(call, mine, sst, &ext)?;
            self.scatter_mine(call, dest, v, dst, dspan)
        })
    }

    /// Checks a strided alltoall's arguments (strides in elements, at least 1) for a group of
    /// `n` members.
    #[allow(clippy::too_many_arguments)]
    fn strided_args<T: RmaType>(
        &self,
        call: &'static str,
        dest: *mut T,
        source: *const T,
        dst: usize,
        sst: usize,
        nelems: usize,
        n: usize,
    ) -> Result<Strided> {
        if dst == 0 || sst == 0 {
            return Err(Error::invalid(
                call,
                format!("strides must be at least 1 (dst {dst}, sst {sst})"),
            ));
        }
        let total = team_total(call, nelems, n)?;
        let dspan = span(call, "dest", total, dst)?;
        let sspan = span(call, "source", total, sst)?;
        let dbytes = self.coll_bufs(call, dest, dspan, source, sspan, false)?;
        Ok(Strided {
            dspan,
            // Elements of one block as seen from its start: (nelems−1)·sst + 1.
            bspan: span(call, "source", nelems, sst)?,
            dbytes,
        })
    }

    /// My strided block of a strided alltoall (`nelems` elements `sst` apart from `source`,
    /// an extent of `ext.bspan`) from every member of the group, in member order, in a private
    /// buffer (`op.dest` is not used).
    fn gather_strided<T: RmaType>(
        &self,
        call: &'static str,
        op: Op<'_, T>,
        sst: usize,
        ext: &Strided,
    ) -> Result<Vec<T>> {
        let (g, _, start, nelems) = op.parts();
        let bspan = ext.bspan;
        let mut v = vec![T::default_value(); g.n() * nelems];
        if nelems == 0 {
            return Ok(v);
        }
        let bbytes = bytes_of::<T>(call, "block", bspan)?;
        if self.remotes.tcp().is_some() && bbytes.saturating_mul(g.n()) <= BATCH_BYTES {
            // Every member's block at once (remote round trips overlapped).
            let mut blocks = vec![T::default_value(); g.n() * bspan];
            let mut gets = Vec::with_capacity(g.n());
            for (j, out) in blocks.chunks_mut(bspan).enumerate() {
                let t = self.target(call, start as usize, bbytes, g.pe(j))?;
                gets.push((out.as_mut_ptr().cast::<u8>(), t, bbytes));
            }
            self.get_batched(call, &gets)?;
            for (out, block) in v.chunks_mut(nelems).zip(blocks.chunks(bspan)) {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = block[k * sst];
                }
            }
            return Ok(v);
        }
        let mut block = vec![T::default_value(); bspan];
        for (j, out) in v.chunks_mut(nelems).enumerate() {
            if sst == 1 {
                self.get_impl(call, out, start, g.pe(j))?;
            } else {
                self.get_impl(call, &mut block, start, g.pe(j))?;
                for (k, o) in out.iter_mut().enumerate() {
                    *o = block[k * sst];
                }
            }
        }
        Ok(v)
    }

    /// Writes element `i` of `v` to element `i·dst` of my `dest` (an extent of `dspan`),
    /// keeping the elements between the strided ones (a read-modify-write of the extent).
    fn scatter_mine<T: RmaType>(
        &self,
        call: &'static str,
        dest: *mut T,
        v: Vec<T>,
        dst: usize,
        dspan: usize,
    ) -> Result<()> {
        if v.is_empty() || dst == 1 {
            return self.write_mine(call, dest, &v);
        }
        let mut ext = vec![T::default_value(); dspan];
        self.get_impl(call, &mut ext, dest, self.me)?;
        for (i, x) in v.into_iter().enumerate() {
            ext[i * dst] = x;
        }
        self.write_mine(call, dest, &ext)
    }

    calls! {
        [T: ReduceType, O: ReduceOp<T>]
        (team: &Team, dest: *mut T, source: *const T, nelems: usize, op: O) -> Result<()>;

        /// **Collective over the team.** Element-wise reduction with `op` of every member's
        /// `source` (`nelems` elements) into every member's `dest`. `dest` and `source` may be
        /// the very same range but must not overlap otherwise. Values are combined in team PE
        /// order, so every member gets bit-identical results (floats included). Like
        /// `shmem_TYPE_OP_reduce`; `op` is [`Sum`], [`Prod`], [`Min`], [`Max`], or, for
        /// integers, [`And`], [`Or`], [`Xor`]. Errors name the OpenSHMEM call (`sum_reduce`, …).
        reduce => reduce_in(Op { g: Group::Team(team), dest, source, nelems }, op);
    }

    /// The element-wise reduction of teams and active sets by the engine [`World::engine`]
    /// picks; every engine combines in member order (bit-identical results). Errors name the
    /// OpenSHMEM call (`O::CALL`, `sum_reduce`, …) whichever form (`_form`) was called.
    fn reduce_in<T: ReduceType, O: ReduceOp<T>>(
        &self,
        _form: &str,
        op: Op<'_, T>,
        _: O,
    ) -> Result<()> {
        let call = O::CALL;
        let (g, dest, source, nelems) = op.parts();
        self.group_check(call, g)?;
        let check = &Check::of::<T>(&[("nelems", nelems as u64)]);
        self.coll_bufs(call, dest, nelems, source, nelems, true)?;
        let srcs = self.member_ptrs(call, g, source, nelems)?;
        let dsts = self.member_ptrs(call, g, dest.cast_const(), nelems)?;
        let direct = srcs.is_some() && dsts.is_some();
        match (self.engine(Kind::Reduce, g, direct), g, srcs, dsts) {
            (Engine::Push, Group::Team(team), _, _) => self.pushed(call, team, Some(check), |s| {
                if nelems == 0 {
                    return Ok(());
                }
                self.reduce_push::<T, O>(call, s, op)
            }),
            (Engine::Direct, _, Some(srcs), Some(dsts)) => {
                // Partitioned: my cache-line-aligned slice of the result, combined from every
                // member's source and stored into every member's dest. Only I read this slice
                // of any source, so storing right after reading is safe in place too.
                let n = g.n();
                let unit = (LINE_BYTES / std::mem::size_of::<T>()).max(1);
                let per = nelems.div_ceil(unit).div_ceil(n) * unit;
                let lo = (g.me() * per).min(nelems);
                let hi = (lo + per).min(nelems);
                self.one_phase(call, g, check, || {
                    fold_range::<T, O>(&srcs, lo, hi, |at, chunk| {
                        for &d in &dsts {
                            // SAFETY: `d` addresses a member's dest of `nelems` elements
                            // (checked, live, mapped), `at + chunk.len() <= hi <= nelems`;
                            // during the call only this PE writes this slice of any dest,
                            // nobody reads it, and in place this PE already read it (it is the
                            // slice's only reader).
                            unsafe { store(d, at, chunk) };
                        }
                    });
                    Ok(())
                })
            }
            _ => self.pull_protocol(
                call,
                g,
                check,
                || self.reduce_blocks::<T, O>(call, g, source, nelems),
                |v| self.write_mine(call, dest, &v),
            ),
        }
    }

    /// **Collective over the team.** Reduces every member's `source` of `n_pes()·nelems`
    /// elements with `op` and leaves block `i` (`nelems` elements) of the result in `dest` on
    /// team PE `i`. `dest` and `source` must not overlap. Like NVSHMEM's
    /// `nvshmem_TYPE_OP_reducescatter`; errors name `reducescatter`.
    pub fn reducescatter<T: ReduceType, O: ReduceOp<T>>(
        &self,
        team: &Team,
        dest: *mut T,
        source: *const T,
        nelems: usize,
        op: O,
    ) -> Result<()> {
        let _ = op;
        let call = "reducescatter";
        self.team_check(call, team)?;
        let total = team_total(call, nelems, team.n_pes())?;
        let db = self.coll_bufs(call, dest, nelems, source, total, false)?;
        let start = source.wrapping_add(team.my_pe() * nelems);
        let check = Check::of::<T>(&[("nelems", nelems as u64)]);
        let g = Group::Team(team);
        let srcs = self.member_ptrs(call, g, start, nelems)?;
        match (self.engine(Kind::ReduceScatter, g, srcs.is_some()), srcs) {
            (Engine::Direct, Some(srcs)) => {
                // My block, combined from every member's source straight into my dest (which
                // nobody else reads or writes during the call).
                let d = self.remote(call, dest as usize, db, self.me)? as *mut T;
                self.one_phase(call, g, &check, || {
                    fold_range::<T, O>(&srcs, 0, nelems, |at, chunk| {
                        // SAFETY: `d` is my dest of `nelems` elements (checked, live, mapped)
                        // and `at + chunk.len() <= nelems`; nobody else accesses it during the
                        // call.
                        unsafe { store(d, at, chunk) }
                    });
                    Ok(())
                })
            }
            _ => self.pull_protocol(
                call,
                g,
                &check,
                || self.reduce_blocks::<T, O>(call, g, start, nelems),
                |v| self.write_mine(call, dest, &v),
            ),
        }
    }

    /// Pulls `nelems` elements at `src` from every member of `g` in member order, combining
    /// them.
    fn reduce_blocks<T: ReduceType, O: ReduceOp<T>>(
        &self,
        call: &'static str,
        g: Group<'_>,
        src: *const T,
        nelems: usize,
    ) -> Result<Vec<T>> {
        let mut acc = vec![T::default_value(); nelems];
        if nelems == 0 {
            return Ok(acc);
        }
        let bytes = bytes_of::<T>(call, "block", nelems)?;
        if self.remotes.tcp().is_some() && bytes.saturating_mul(g.n()) <= BATCH_BYTES {
            // Every member's block at once (remote round trips overlapped), then combined in
            // member order as below.
            let mut all = vec![T::default_value(); nelems * g.n()];
            let mut gets = Vec::with_capacity(g.n());
            for (j, out) in all.chunks_mut(nelems).enumerate() {
                let t = self.target(call, src as usize, bytes, g.pe(j))?;
                gets.push((out.as_mut_ptr().cast::<u8>(), t, bytes));
            }
            self.get_batched(call, &gets)?;
            acc.copy_from_slice(&all[..nelems]);
            for b in all.chunks(nelems).skip(1) {
                for (a, &x) in acc.iter_mut().zip(b) {
                    *a = O::combine(*a, x);
                }
            }
            return Ok(acc);
        }
        self.get_impl(call, &mut acc, src, g.pe(0))?;
        let mut tmp = vec![T::default_value(); nelems];
        for j in 1..g.n() {
            self.get_impl(call, &mut tmp, src, g.pe(j))?;
            for (a, &b) in acc.iter_mut().zip(&tmp) {
                *a = O::combine(*a, b);
            }
        }
        Ok(acc)
    }
}

/// Combines elements `[lo, hi)` of the members' copies at `srcs` (team order) with `O`, a
/// cache-sized chunk at a time, and hands each result chunk with its element offset to `emit`.
/// The accumulator starts as member 0's values and folds in the others in order, exactly as
/// the staged path does, so every path gives bit-identical results.
fn fold_range<T: ReduceType, O: ReduceOp<T>>(
    srcs: &[*mut T],
    lo: usize,
    hi: usize,
    mut emit: impl FnMut(usize, &[T]),
) {
    if lo >= hi {
        return;
    }
    let step = (CHUNK_BYTES / std::mem::size_of::<T>()).max(1);
    let mut acc = vec![T::default_value(); step.min(hi - lo)];
    let mut at = lo;
    while at < hi {
        let len = step.min(hi - at);
        let a = &mut acc[..len];
        // SAFETY: every `srcs[j]` addresses an aligned, checked, live range of at least `hi`
        // elements of a member's source, mapped in this process; nobody writes elements
        // `[lo, hi)` of any source while this PE combines them (only this PE stores there, and
        // only after reading them).
        a.copy_from_slice(unsafe { std::slice::from_raw_parts(srcs[0].add(at), len) });
        for &s in &srcs[1..] {
            // SAFETY: as above.
            let b = unsafe { std::slice::from_raw_parts(s.add(at), len) };
            for (x, &y) in a.iter_mut().zip(b) {
                *x = O::combine(*x, y);
            }
        }
        emit(at, a);
        at += len;
    }
}

/// Copies `chunk` to elements `at..at + chunk.len()` of `d` (bytewise: `d` need not be aligned).
///
/// # Safety
/// That range of `d` must be mapped, writable, and not accessed by anyone else meanwhile.
unsafe fn store<T: RmaType>(d: *mut T, at: usize, chunk: &[T]) {
    let n = std::mem::size_of_val(chunk);
    // SAFETY: forwarded; `chunk` is private memory, so the ranges do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            chunk.as_ptr().cast::<u8>(),
            d.cast::<u8>().add(at * std::mem::size_of::<T>()),
            n,
        )
    };
}
