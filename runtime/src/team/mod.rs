//! Teams: ordered subsets of the job's PEs that collectives run over (OpenSHMEM 1.5 teams).
//!
//! * [`World::team_world`], [`World::team_shared`], [`World::team_node`] — the predefined teams
//!   (`SHMEM_TEAM_WORLD`, `SHMEM_TEAM_SHARED`, and NVSHMEM's `TEAM_NODE`): WORLD holds every
//!   PE, SHARED and NODE the PEs of this PE's host (all PEs when the job runs on one host);
//!   each has its own synchronization state, so their barriers never mix.
//! * [`World::team_split_strided`] and [`World::team_split_2d`] — **collective over the parent
//!   team**: make new teams; PEs not in a new team get `None`.
//! * [`World::team_destroy`] — **collective over the team**.
//! * [`Team::my_pe`], [`Team::n_pes`], [`Team::get_config`], [`Team::translate_pe`] — local.
//!
//! Team-relative PE numbers (`0..team.n_pes()`) are used wherever a team is passed.
//!
//! Synchronization state lives in a per-PE **slot area** of the host control heap's internal
//! region (never the user heap), reserved for every PE at init. A split picks a slot free on
//! every parent member (an AND of their free-slot bitmaps, exchanged through the parent's
//! slot) so that no world-collective allocation is needed. See `docs/collectives.md`.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::sync::Mismatch;
use crate::types::Bits;
use crate::world::World;

pub(crate) mod handle;

pub use handle::{Team, TeamConfig};
pub(crate) use handle::{TeamInner, SCRATCH};
use handle::{SLOT_NODE, SLOT_SHARED, SLOT_WORLD};

/// A team's members in a dissemination barrier ([`World::dissemination`]): its PEs, the flags
/// and check words of its slot.
struct TeamMembers<'a> {
    w: &'a World,
    t: &'a TeamInner,
}

impl crate::sync::Members for TeamMembers<'_> {
    fn n(&self) -> usize {
        self.t.members.len()
    }
    fn me(&self) -> usize {
        self.t.me
    }
    fn pe(&self, i: usize) -> usize {
        self.t.members[i]
    }
    fn max_rounds(&self) -> usize {
        self.w.teams.rounds
    }
    fn flag_off(&self, round: usize) -> usize {
        self.w.teams.flag_off(self.t.slot, round)
    }
    fn check_off(&self, round: usize, parity: usize) -> usize {
        self.w.teams.check_off(self.t.slot, round, parity)
    }
    fn and_off(&self, round: usize, parity: usize) -> Option<usize> {
        Some(self.w.teams.check_off(self.t.slot, round, parity) + 16)
    }
    fn describe(&self, from_pe: usize, epoch: u64, round: usize) -> String {
        format!(
            "PE {from_pe} to reach sync #{epoch} of team {} (round {round}; it, or a PE it waits for, has not arrived)",
            self.t.name
        )
    }
}

fn poisoned(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "the team lock is poisoned (another thread panicked inside rshmem)".into(),
    }
}

impl World {
    fn predefined(&self, which: usize) -> Team {
        let (cell, name) = match which {
            SLOT_WORLD => (&self.teams.world, "world"),
            SLOT_SHARED => (&self.teams.shared, "shared"),
            _ => (&self.teams.node, "node"),
        };
        cell.get_or_init(|| {
            let members: Vec<usize> = if which == SLOT_WORLD {
                (0..self.n).collect()
            } else {
                self.node.pes.clone()
            };
            let me = members.iter().position(|&p| p == self.me).unwrap_or(0);
            Team {
                inner: Arc::new(TeamInner {
                    name: name.into(),
                    members,
                    me,
                    slot: which,
                    epoch: AtomicU64::new(0),
                    destroyed: AtomicBool::new(false),
                    predefined: true,
                    config: TeamConfig::default(),
                }),
            }
        })
        .clone()
    }

    /// The team of every PE, numbered as the world (`SHMEM_TEAM_WORLD`).
    pub fn team_world(&self) -> Team {
        self.predefined(SLOT_WORLD)
    }

    /// The PEs that share memory with this PE (`SHMEM_TEAM_SHARED`): the PEs of this host.
    pub fn team_shared(&self) -> Team {
        self.predefined(SLOT_SHARED)
    }

    /// The PEs of this host ([`World::node_pes`]), like NVSHMEM's `NVSHMEMX_TEAM_NODE`.
    pub fn team_node(&self) -> Team {
        self.predefined(SLOT_NODE)
    }

    /// The number in `dest` of the PE numbered `pe` in `src`, or `None` (see
    /// [`Team::translate_pe`]). Like `shmem_team_translate_pe`.
    pub fn team_translate_pe(&self, src: &Team, pe: usize, dest: &Team) -> Option<usize> {
        src.translate_pe(pe, dest)
    }

    /// Checks that `team` is usable by this PE.
    pub(crate) fn team_check(&self, call: &'static str, team: &Team) -> Result<()> {
        if team.is_destroyed() {
            return Err(Error::invalid(
                call,
                format!("team {} was destroyed", team.inner.name),
            ));
        }
        if team.inner.members.get(team.inner.me) != Some(&self.me) {
            return Err(Error::invalid(
                call,
                format!(
                    "PE {} is not a member of team {} (members {:?})",
                    self.me, team.inner.name, team.inner.members
                ),
            ));
        }
        Ok(())
    }

    /// **Collective over the parent.** Makes the team of parent PEs `start`, `start+stride`,
    /// …, `size` of them, numbered in that order; returns `None` on parent PEs not in it.
    /// Like `shmem_team_split_strided`. `stride` may be negative; it may be 0 only when
    /// `size` is 1.
    pub fn team_split_strided(
        &self,
        parent: &Team,
        start: usize,
        stride: isize,
        size: usize,
    ) -> Result<Option<Team>> {
        self.team_split_strided_with(parent, start, stride, size, TeamConfig::default())
    }

    /// [`team_split_strided`](World::team_split_strided) with a [`TeamConfig`].
    pub fn team_split_strided_with(
        &self,
        parent: &Team,
        start: usize,
        stride: isize,
        size: usize,
        config: TeamConfig,
    ) -> Result<Option<Team>> {
        let call = "team_split_strided";
        self.team_check(call, parent)?;
        let pn = parent.n_pes();
        if size == 0 || size > pn {
            return Err(Error::invalid(
                call,
                format!("size {size} must be in 1..={pn} (the parent team's size)"),
            ));
        }
        if stride == 0 && size > 1 {
            return Err(Error::invalid(
                call,
                format!("stride 0 names one PE {size} times"),
            ));
        }
        let mut members = Vec::with_capacity(size);
        for i in 0..size {
            let p = (start as i128) + (i as i128) * (stride as i128);
            if p < 0 || p >= pn as i128 {
                return Err(Error::invalid(
                    call,
                    format!(
                        "start {start}, stride {stride}, size {size} names parent PE {p}, outside the parent team's 0..{pn}"
                    ),
                ));
            }
            members.push(parent.world_pe(p as usize));
        }
        let slots = self.pick_slots(call, parent, &[&members])?;
        Ok(self.make_team(members, slots[0], config, "strided"))
    }

    /// **Collective over the parent.** Arranges the parent's PEs in rows of `xrange` (the last
    /// row may be short) and returns `(row team, column team)` of this PE: parent PE `p` is PE
    /// `p % xrange` of row `p / xrange` and PE `p / xrange` of column `p % xrange`. Like
    /// `shmem_team_split_2d`; `xrange` larger than the parent is clamped to its size.
    pub fn team_split_2d(&self, parent: &Team, xrange: usize) -> Result<(Team, Team)> {
        self.team_split_2d_with(parent, xrange, TeamConfig::default(), TeamConfig::default())
    }

    /// [`team_split_2d`](World::team_split_2d) with a [`TeamConfig`] per new team.
    pub fn team_split_2d_with(
        &self,
        parent: &Team,
        xrange: usize,
        xconfig: TeamConfig,
        yconfig: TeamConfig,
    ) -> Result<(Team, Team)> {
        let call = "team_split_2d";
        self.team_check(call, parent)?;
        if xrange == 0 {
            return Err(Error::invalid(call, "xrange must be at least 1"));
        }
        let pn = parent.n_pes();
        let x = xrange.min(pn);
        let me = parent.my_pe();
        let (row, col) = (me / x, me % x);
        let xs: Vec<usize> = (row * x..((row + 1) * x).min(pn))
            .map(|p| parent.world_pe(p))
            .collect();
        let ys: Vec<usize> = (col..pn).step_by(x).map(|p| parent.world_pe(p)).collect();
        let slots = self.pick_slots(call, parent, &[&xs, &ys])?;
        let xt = self.make_team(xs, slots[0], xconfig, "2d-x");
        let yt = self.make_team(ys, slots[1], yconfig, "2d-y");
        match (xt, yt) {
            (Some(a), Some(b)) => Ok((a, b)),
            _ => Err(Error::State {
                call,
                reason: "this PE is missing from its own row or column team".into(),
            }),
        }
    }

    /// Builds the team if this PE is in `members` (the slot was taken by `pick_slots`).
    fn make_team(
        &self,
        members: Vec<usize>,
        slot: usize,
        config: TeamConfig,
        kind: &str,
    ) -> Option<Team> {
        let me = members.iter().position(|&p| p == self.me)?;
        let k = self.teams.splits.fetch_add(1, Ordering::Relaxed);
        Some(Team {
            inner: Arc::new(TeamInner {
                name: format!("{kind} #{k} (slot {slot})"),
                members,
                me,
                slot,
                epoch: AtomicU64::new(0),
                destroyed: AtomicBool::new(false),
                predefined: false,
                config,
            }),
        })
    }

    /// Collective over `parent`: finds one slot per new team (`new[i]` lists the world PEs of
    /// this PE's `i`-th new team) free on every parent member, and takes on this PE those of
    /// the teams it belongs to, zeroing their barrier flags before the closing sync (after it,
    /// members may raise them).
    fn pick_slots(
        &self,
        call: &'static str,
        parent: &Team,
        new: &[&[usize]],
    ) -> Result<Vec<usize>> {
        let k = new.len();
        let t = &self.teams;
        let mine = {
            let free = t.free.lock().map_err(|_| poisoned(call))?;
            free.clone()
        };
        // The AND of the members' bitmaps, one 64-slot word at a time, each through one
        // dissemination sync of the parent (O(log n) rounds, a word riding with each flag):
        // every member gets the same word, so all stop at the same one. The first word
        // usually has the free slots: one sync, where reading every member's whole bitmap
        // cost n × words round trips over remote transports.
        let mut got = Vec::with_capacity(k);
        for (i, &w) in mine.iter().enumerate().take(t.n_slots.div_ceil(64)) {
            let mut w = w;
            self.team_and(call, parent, &mut w)?;
            while w != 0 && got.len() < k {
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                got.push(i * 64 + b);
            }
            if got.len() == k {
                break;
            }
        }
        let claimed = if got.len() == k {
            new.iter()
                .zip(&got)
                .filter(|(m, _)| m.contains(&self.me))
                .try_for_each(|(m, &s)| {
                    self.claim(call, s)?;
                    self.device_team_install(call, s, m)
                })
        } else {
            Ok(())
        };
        // Everybody has zeroed the new teams' flags before any member raises them.
        let r = self.team_sync_named(call, parent);
        claimed?;
        if got.len() < k {
            r?;
            return Err(Error::Unsupported {
                call,
                reason: format!(
                    "no free team slot: every PE can be in at most {} teams besides the predefined ones at a time (and a split needs a slot free on every parent PE); destroy unused teams",
                    t.n_slots - SLOT_NODE - 1
                ),
            });
        }
        r?;
        Ok(got)
    }

    /// Records slot use for a new team this PE belongs to and zeroes its flags and its
    /// scratch words (the collectives' signal words, `coll/tree.rs`: a destroyed team's
    /// collectives left its epochs there).
    fn claim(&self, call: &'static str, slot: usize) -> Result<()> {
        let t = &self.teams;
        let me_local = self.ctrl.me_local();
        let flags = (0..t.rounds).map(|r| t.flag_off(slot, r));
        let scratch = (0..SCRATCH / 8).map(|w| t.slot_off(slot, 8 * w));
        for off in flags.chain(scratch) {
            let a = self.ctrl.internal_addr(me_local, off);
            // SAFETY: as in `pick_slots`.
            unsafe { u64::store(a, 0, Ordering::Release) };
        }
        let mut free = t.free.lock().map_err(|_| poisoned(call))?;
        free[slot / 64] &= !(1 << (slot % 64));
        Ok(())
    }

    /// **Collective over the team.** Waits for every member, then releases the team's
    /// synchronization slot; every clone of the handle becomes invalid. Like
    /// `shmem_team_destroy`. The predefined teams cannot be destroyed.
    pub fn team_destroy(&self, team: Team) -> Result<()> {
        let call = "team_destroy";
        self.team_check(call, &team)?;
        if team.inner.predefined {
            return Err(Error::invalid(
                call,
                format!(
                    "team {} is predefined and cannot be destroyed",
                    team.inner.name
                ),
            ));
        }
        self.team_sync_named(call, &team)?;
        team.inner.destroyed.store(true, Ordering::Release);
        let slot = team.inner.slot;
        self.device_team_install(call, slot, &[])?;
        let mut free = self.teams.free.lock().map_err(|_| poisoned(call))?;
        free[slot / 64] |= 1 << (slot % 64);
        Ok(())
    }

    /// GPU heaps: writes the device descriptor of team slot `slot` (world PEs `members` in team
    /// order; empty clears it) into my GPU internal area and zeroes the slot's device sync
    /// block. Called by every member before the sync that makes the team usable, so no member
    /// raises a flag in a block that is still to be zeroed. Nothing on the CPU backend.
    pub(crate) fn device_team_install(
        &self,
        call: &'static str,
        slot: usize,
        members: &[usize],
    ) -> Result<()> {
        use crate::device::state::internal as di;
        let crate::transport::Transport::P2p(p) = &self.xport else {
            return Ok(());
        };
        if slot >= di::MAX_TEAMS {
            return Ok(());
        }
        let stride = if members.len() >= 2 {
            members[1] as i64 - members[0] as i64
        } else {
            1
        };
        let arithmetic = members
            .windows(2)
            .all(|w| w[1] as i64 - w[0] as i64 == stride)
            && stride >= 1;
        let mut desc = [0i32; 4];
        if !members.is_empty() && arithmetic {
            desc = [
                members[0] as i32,
                stride as i32,
                members.len() as i32,
                members
                    .iter()
                    .position(|&m| m == self.me)
                    .map_or(-1, |i| i as i32),
            ];
        }
        let bytes: Vec<u8> = desc.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mine = self.heap.my_base();
        if !members.is_empty() {
            p.zero(
                call,
                mine + di::TEAM_SYNC + slot * di::TEAM_SYNC_STRIDE,
                di::TEAM_SYNC_STRIDE,
            )?;
        }
        p.put(
            call,
            mine + di::TEAM_TABLE + slot * di::TEAM_DESC,
            bytes.as_ptr(),
            bytes.len(),
        )?;
        p.quiet(call)
    }

    /// **Collective over the team.** Waits for every member without completing outstanding
    /// operations. Like `shmem_team_sync`.
    pub fn team_sync(&self, team: &Team) -> Result<()> {
        self.team_check("team_sync", team)?;
        self.team_sync_named("team_sync", team)
    }

    /// **Collective over the team.** Completes this PE's outstanding operations, then waits
    /// for every member. Like NVSHMEM's `nvshmem_barrier(team)`.
    pub fn barrier(&self, team: &Team) -> Result<()> {
        self.team_check("barrier", team)?;
        self.quiet_all("barrier")?;
        self.team_sync_named("barrier", team)
    }

    /// Dissemination barrier over the team's members through the flags of its slot (see
    /// [`World::dissemination`]). Flags hold the team's epoch, so they never need resetting
    /// while the team lives.
    pub(crate) fn team_sync_named(&self, call: &'static str, team: &Team) -> Result<()> {
        self.team_sync_checked(call, team, None).map(drop)
    }

    /// A team sync whose flags also carry `w`: it returns holding the AND of every member's
    /// `w` (see [`World::dissemination`]).
    pub(crate) fn team_and(&self, call: &'static str, team: &Team, w: &mut u64) -> Result<()> {
        let t = &team.inner;
        if t.members.len() == 1 {
            fence(Ordering::SeqCst);
            return Ok(());
        }
        let epoch = t.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        let m = TeamMembers { w: self, t };
        self.dissemination(call, &m, epoch, None, false, None, Some(w))
            .map(drop)
    }

    /// A team sync that also compares `check` (a digest of the call's arguments) across the
    /// members, like [`World::sync_all_checked`](crate::World): the extremes travel with the
    /// flags, and every member returns the same [`Mismatch`] when they differ.
    pub(crate) fn team_sync_checked(
        &self,
        call: &'static str,
        team: &Team,
        check: Option<u64>,
    ) -> Result<Option<Mismatch>> {
        let t = &team.inner;
        if t.members.len() == 1 {
            fence(Ordering::SeqCst);
            return Ok(None);
        }
        let epoch = t.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        self.dissemination(
            call,
            &TeamMembers { w: self, t },
            epoch,
            check,
            false,
            None,
            None,
        )
    }
}
