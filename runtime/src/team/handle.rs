//! Team handles and this PE's team bookkeeping: what a team is ([`Team`]: its members, this
//! PE's number in it, its synchronization slot) and which slots of the control heap's team
//! area are free ([`Teams`], a part of the world). The calls that make, synchronize and
//! destroy teams are the world's (`team/mod.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::heap::INTERNAL_SIZE;

/// Offset of the team slot area inside the control heap's internal region (the barrier flags
/// of `sync_all` use the first 4 KiB).
pub(crate) const TEAM_AREA: usize = 64 << 10;
/// Most team slots per PE (a bitmap of this many bits is exchanged on every split).
pub(crate) const MAX_SLOTS: usize = 4096;
/// Words of the free-slot bitmap.
pub(crate) const BITMAP_WORDS: usize = MAX_SLOTS / 64;
/// Bytes at the start of every slot for exchanges (the split bitmap, collect counts).
pub(crate) const SCRATCH: usize = BITMAP_WORDS * 8;
/// Bytes of one round's exchange words in a team slot, per epoch parity: the two check words
/// of `team_sync_checked`, then the AND word of `pick_slots`.
pub(crate) const CHECK_SET: usize = 24;
/// Slots of the predefined teams.
pub(crate) const SLOT_WORLD: usize = 0;
pub(crate) const SLOT_SHARED: usize = 1;
pub(crate) const SLOT_NODE: usize = 2;

/// Settings of a team (OpenSHMEM's `shmem_team_config_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TeamConfig {
    /// Communication contexts the team is expected to use. rshmem has no contexts yet; the
    /// value is kept and returned by [`Team::get_config`].
    pub num_contexts: usize,
}

/// A team: an ordered set of PEs. Cheap to clone; clones name the same team. After
/// [`World::team_destroy`](crate::World::team_destroy) every clone is invalid (calls with it fail).
#[derive(Clone)]
pub struct Team {
    pub(crate) inner: Arc<TeamInner>,
}

pub(crate) struct TeamInner {
    /// Name for messages (`world`, `shared`, `node`, `split #k`).
    pub(crate) name: String,
    /// World PE of each team PE, in team order.
    pub(crate) members: Vec<usize>,
    /// My team PE number.
    pub(crate) me: usize,
    /// Slot of the synchronization state.
    pub(crate) slot: usize,
    /// Last barrier epoch used (same on every member).
    pub(crate) epoch: AtomicU64,
    pub(crate) destroyed: AtomicBool,
    pub(crate) predefined: bool,
    pub(crate) config: TeamConfig,
}

crate::debug_fields!(Team, |t| {
    name: t.inner.name,
    my_pe: t.inner.me,
    n_pes: t.inner.members.len(),
    members: t.inner.members,
});

impl Team {
    /// My PE number in this team, `0..n_pes()`. Like `shmem_team_my_pe`.
    pub fn my_pe(&self) -> usize {
        self.inner.me
    }

    /// Number of PEs in this team. Like `shmem_team_n_pes`.
    pub fn n_pes(&self) -> usize {
        self.inner.members.len()
    }

    /// The team's settings. Like `shmem_team_get_config`.
    pub fn get_config(&self) -> TeamConfig {
        self.inner.config
    }

    /// The world PE numbers of the members, in team order.
    pub fn members(&self) -> &[usize] {
        &self.inner.members
    }

    /// True once [`World::team_destroy`](crate::World::team_destroy) destroyed the team.
    pub fn is_destroyed(&self) -> bool {
        self.inner.destroyed.load(Ordering::Acquire)
    }

    /// The number in `dest` of the PE numbered `pe` in this team; `None` when `pe` is out of
    /// range, the PE is not in `dest`, or either team is destroyed. Like
    /// `shmem_team_translate_pe`.
    pub fn translate_pe(&self, pe: usize, dest: &Team) -> Option<usize> {
        if self.is_destroyed() || dest.is_destroyed() {
            return None;
        }
        let w = *self.inner.members.get(pe)?;
        dest.inner.members.iter().position(|&m| m == w)
    }

    /// The team's handle in device code (`rshmem_team_t`; pass it to kernels that call the
    /// device library's team collectives). The predefined teams have `RSHMEM_TEAM_WORLD` (0),
    /// `RSHMEM_TEAM_SHARED` (1) and `RSHMEM_TEAM_NODE` (2). Handles of destroyed teams are
    /// reused by later splits.
    pub fn device_handle(&self) -> i32 {
        self.inner.slot as i32
    }

    /// World PE of team PE `pe` (checked by the caller).
    #[inline]
    pub(crate) fn world_pe(&self, pe: usize) -> usize {
        self.inner.members[pe]
    }
}

/// Per-PE team bookkeeping (a field of [`World`]).
pub(crate) struct Teams {
    /// Bit `s` set: slot `s` is free on this PE.
    pub(crate) free: Mutex<Vec<u64>>,
    /// Slots that fit in the area.
    pub(crate) n_slots: usize,
    /// Bytes per slot.
    pub(crate) slot_bytes: usize,
    /// Dissemination rounds a team barrier may need.
    pub(crate) rounds: usize,
    pub(crate) splits: AtomicU64,
    pub(crate) world: OnceLock<Team>,
    pub(crate) shared: OnceLock<Team>,
    pub(crate) node: OnceLock<Team>,
}

impl Teams {
    /// Bookkeeping for a job of `n` PEs.
    pub(crate) fn new(n: usize) -> Teams {
        let rounds = (usize::BITS - n.max(2).saturating_sub(1).leading_zeros()) as usize;
        // Scratch, the flags, then per round the check words of `team_sync_checked` and the
        // AND word of `pick_slots` (two sets of three, by epoch parity).
        let slot_bytes = (SCRATCH + 8 * rounds + CHECK_SET * 2 * rounds).div_ceil(64) * 64;
        let n_slots = ((INTERNAL_SIZE - TEAM_AREA) / slot_bytes).min(MAX_SLOTS);
        let mut free = vec![0u64; BITMAP_WORDS];
        for s in SLOT_NODE + 1..n_slots {
            free[s / 64] |= 1 << (s % 64);
        }
        Teams {
            free: Mutex::new(free),
            n_slots,
            slot_bytes,
            rounds,
            splits: AtomicU64::new(0),
            world: OnceLock::new(),
            shared: OnceLock::new(),
            node: OnceLock::new(),
        }
    }

    /// Offset of byte `off` of slot `slot` in the control heap's internal region.
    #[inline]
    pub(crate) fn slot_off(&self, slot: usize, off: usize) -> usize {
        TEAM_AREA + slot * self.slot_bytes + off
    }

    /// Offset of barrier flag `round` of slot `slot`.
    #[inline]
    pub(crate) fn flag_off(&self, slot: usize, round: usize) -> usize {
        self.slot_off(slot, SCRATCH + 8 * round)
    }

    /// Offset of the check words of `round` (epoch parity `parity`) of slot `slot`.
    #[inline]
    pub(crate) fn check_off(&self, slot: usize, round: usize, parity: usize) -> usize {
        self.slot_off(
            slot,
            SCRATCH + 8 * self.rounds + CHECK_SET * (2 * round + parity),
        )
    }
}
