//! Teams and collectives of the C ABI (OpenSHMEM 1.5 teams, team-based collectives and the
//! deprecated active-set collectives).
//!
//! Team handles: `SHMEM_TEAM_INVALID` is NULL, `SHMEM_TEAM_WORLD`, `SHMEM_TEAM_SHARED` and
//! `SHMEM_TEAM_NODE` are 1, 2, 3; split teams get ids from 16 up, kept in a registry (an
//! unknown or destroyed handle is detected, never dereferenced).
//!
//! Team collectives call the runtime's collectives ([`rshmem::World::broadcast`], …) for every
//! symmetric buffer: heap objects and global or static variables alike (the data segment is a
//! symmetric region of the runtime, see [`crate::seg`]).
//!
//! Two kinds of collective still run on a small engine of this layer, over the runtime's
//! one-sided get/put/atomics: the **deprecated active-set forms** (OpenSHMEM 1.4's
//! `PE_start`/`logPE_stride`/`PE_size` with `pSync`; the runtime's collectives take teams, and
//! an active set is no team: its members share no team slot, only the caller's `pSync`), and
//! the reductions of **`long double` and complex** elements (`shmemi_reduce_cb*`: the
//! arithmetic is the header's C combine function, which the runtime's typed reductions cannot
//! call). The engine's protocol: quiet, sync, pull what this PE needs into a private buffer,
//! sync, write this PE's `dest`, quiet. Active sets synchronize with a dissemination barrier of
//! counters in the caller's `pSync` (every round adds 1 to the partner's word and consumes 1
//! from its own, so `pSync` is back to its initial zeros when the call returns); an active set
//! that is the whole job uses the runtime's barrier.

use std::ffi::{c_int, c_long, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rshmem::{ReduceOp, ReduceType, RmaType, Team, TeamConfig};

use crate::ops::{self, Op, Set, SetArgs};
use crate::{fatal, msg, with, CResult, Rt};

/// Handles of the predefined teams.
pub(crate) const WORLD: usize = 1;
const SHARED: usize = 2;
const NODE: usize = 3;
/// `SHMEM_TEAM_NUM_CONTEXTS`.
const NUM_CONTEXTS: c_long = 1;
/// `SHMEM_SYNC_SIZE` and friends (words of `pSync`).
const SYNC_SIZE: usize = 64;

static TEAMS: Mutex<Vec<(usize, Team)>> = Mutex::new(Vec::new());
static NEXT: AtomicUsize = AtomicUsize::new(16);

/// Forgets every split team (at `shmem_finalize`).
pub(crate) fn clear() {
    TEAMS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

fn register(t: Team) -> *mut c_void {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    TEAMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((id, t));
    id as *mut c_void
}

pub(crate) fn lookup(rt: &Rt, h: *mut c_void) -> Option<Team> {
    let t = match h as usize {
        0 => return None,
        WORLD => rt.world.team_world(),
        SHARED => rt.world.team_shared(),
        NODE => rt.world.team_node(),
        id => TEAMS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(i, _)| *i == id)?
            .1
            .clone(),
    };
    (!t.is_destroyed()).then_some(t)
}

/// The team behind a handle, or None for `SHMEM_TEAM_INVALID`, unknown or destroyed handles.
fn team(call: &'static str, h: *mut c_void) -> Option<Team> {
    with(call, |rt| Ok(lookup(rt, h)))
}

/// `shmem_team_config_t`.
#[repr(C)]
pub struct Config {
    num_contexts: c_int,
}

fn config_of(call: &str, c: *const Config, mask: c_long) -> CResult<TeamConfig> {
    if mask & NUM_CONTEXTS == 0 || c.is_null() {
        return Ok(TeamConfig::default());
    }
    // SAFETY: non-null; the caller passes a valid config.
    let n = unsafe { (*c).num_contexts };
    if n < 0 {
        return msg(format!("{call}: num_contexts {n} is negative"));
    }
    Ok(TeamConfig {
        num_contexts: n as usize,
    })
}

/// `shmem_team_my_pe`: this PE's number in `team`, or -1 for an invalid team.
#[no_mangle]
pub extern "C" fn shmem_team_my_pe(team_h: *mut c_void) -> c_int {
    team("shmem_team_my_pe", team_h).map_or(-1, |t| t.my_pe() as c_int)
}

/// `shmem_team_n_pes`: the team's size, or -1 for an invalid team.
#[no_mangle]
pub extern "C" fn shmem_team_n_pes(team_h: *mut c_void) -> c_int {
    team("shmem_team_n_pes", team_h).map_or(-1, |t| t.n_pes() as c_int)
}

/// `shmem_team_get_config`: 0, or non-zero for an invalid team.
///
/// # Safety
/// `config` valid for a write when `mask` asks for a field.
#[no_mangle]
pub unsafe extern "C" fn shmem_team_get_config(
    team_h: *mut c_void,
    mask: c_long,
    config: *mut Config,
) -> c_int {
    let Some(t) = team("shmem_team_get_config", team_h) else {
        return -1;
    };
    if mask & NUM_CONTEXTS != 0 {
        if config.is_null() {
            fatal("shmem_team_get_config", "config is NULL");
        }
        // SAFETY: non-null, valid by the caller's contract.
        unsafe { (*config).num_contexts = t.get_config().num_contexts as c_int };
    }
    0
}

/// `shmem_team_translate_pe`: `src_pe`'s number in `dest`, or -1.
#[no_mangle]
pub extern "C" fn shmem_team_translate_pe(
    src: *mut c_void,
    src_pe: c_int,
    dest: *mut c_void,
) -> c_int {
    let call = "shmem_team_translate_pe";
    let (Some(s), Some(d)) = (team(call, src), team(call, dest)) else {
        return -1;
    };
    if src_pe < 0 {
        return -1;
    }
    s.translate_pe(src_pe as usize, &d)
        .map_or(-1, |p| p as c_int)
}

/// `shmem_team_split_strided`: **collective over the parent**. 0 on success (the new team, or
/// `SHMEM_TEAM_INVALID` on parent PEs not in it); non-zero for an invalid parent or an invalid
/// start/stride/size triplet (then `*new_team` is `SHMEM_TEAM_INVALID` on every parent PE).
///
/// # Safety
/// `new_team` valid for one write; `config` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn shmem_team_split_strided(
    parent: *mut c_void,
    start: c_int,
    stride: c_int,
    size: c_int,
    config: *const Config,
    mask: c_long,
    new_team: *mut *mut c_void,
) -> c_int {
    let call = "shmem_team_split_strided";
    if new_team.is_null() {
        fatal(call, "new_team is NULL");
    }
    // SAFETY: non-null, the caller's contract.
    unsafe { new_team.write(std::ptr::null_mut()) };
    let r = with(call, |rt| {
        let Some(p) = lookup(rt, parent) else {
            return Ok(None);
        };
        // An invalid triplet is the same on every parent PE and is found before any
        // communication: every PE returns non-zero.
        if start < 0 || size < 1 {
            return Ok(None);
        }
        let cfg = config_of(call, config, mask)?;
        match rt.world.team_split_strided_with(
            &p,
            start as usize,
            stride as isize,
            size as usize,
            cfg,
        ) {
            Ok(t) => Ok(Some(t.map_or(std::ptr::null_mut(), register))),
            Err(rshmem::Error::InvalidArgument { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    });
    match r {
        None => -1,
        Some(h) => {
            // SAFETY: as above.
            unsafe { new_team.write(h) };
            0
        }
    }
}

/// `shmem_team_split_2d`: **collective over the parent**. 0 on success, non-zero for an invalid
/// parent or `xrange` < 1 (both outputs `SHMEM_TEAM_INVALID`).
///
/// # Safety
/// `xaxis_team`, `yaxis_team` valid for one write; configs NULL or valid.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn shmem_team_split_2d(
    parent: *mut c_void,
    xrange: c_int,
    xconfig: *const Config,
    xmask: c_long,
    xaxis_team: *mut *mut c_void,
    yconfig: *const Config,
    ymask: c_long,
    yaxis_team: *mut *mut c_void,
) -> c_int {
    let call = "shmem_team_split_2d";
    if xaxis_team.is_null() || yaxis_team.is_null() {
        fatal(call, "xaxis_team or yaxis_team is NULL");
    }
    // SAFETY: non-null, the caller's contract.
    unsafe {
        xaxis_team.write(std::ptr::null_mut());
        yaxis_team.write(std::ptr::null_mut());
    }
    let r = with(call, |rt| {
        let Some(p) = lookup(rt, parent) else {
            return Ok(None);
        };
        if xrange < 1 {
            return Ok(None);
        }
        let (xc, yc) = (
            config_of(call, xconfig, xmask)?,
            config_of(call, yconfig, ymask)?,
        );
        let (x, y) = rt.world.team_split_2d_with(&p, xrange as usize, xc, yc)?;
        Ok(Some((register(x), register(y))))
    });
    match r {
        None => -1,
        Some((x, y)) => {
            // SAFETY: as above.
            unsafe {
                xaxis_team.write(x);
                yaxis_team.write(y);
            }
            0
        }
    }
}

/// `shmem_team_destroy`: **collective over the team**. Destroying `SHMEM_TEAM_INVALID` does
/// nothing; destroying a predefined team aborts naming the call.
#[no_mangle]
pub extern "C" fn shmem_team_destroy(team_h: *mut c_void) {
    let call = "shmem_team_destroy";
    with(call, |rt| {
        let id = team_h as usize;
        if id == 0 {
            return Ok(());
        }
        if id <= NODE {
            return msg("a predefined team cannot be destroyed");
        }
        let t = {
            let mut g = TEAMS.lock().unwrap_or_else(|e| e.into_inner());
            match g.iter().position(|(i, _)| *i == id) {
                Some(k) => g.swap_remove(k).1,
                None => return Ok(()),
            }
        };
        Ok(rt.world.team_destroy(t)?)
    })
}

/// `shmem_team_sync`: **collective over the team**; 0, or non-zero for an invalid team.
#[no_mangle]
pub extern "C" fn shmem_team_sync(team_h: *mut c_void) -> c_int {
    let call = "shmem_team_sync";
    with(call, |rt| match lookup(rt, team_h) {
        None => Ok(-1),
        Some(t) => {
            rt.world.team_sync(&t)?;
            Ok(0)
        }
    })
}

// ---- the engine of the active-set collectives and the C-combined reductions ----

/// Who takes part in a collective the C layer runs itself.
enum Group {
    /// A team (synchronized with the runtime's team sync).
    Team(Team),
    /// An active set: world PEs, my index, the caller's pSync.
    Set {
        members: Vec<usize>,
        me: usize,
        psync: *mut i64,
    },
}

impl Group {
    fn n(&self) -> usize {
        match self {
            Group::Team(t) => t.n_pes(),
            Group::Set { members, .. } => members.len(),
        }
    }
    fn me(&self) -> usize {
        match self {
            Group::Team(t) => t.my_pe(),
            Group::Set { me, .. } => *me,
        }
    }
    /// World PE of member `j`.
    fn pe(&self, j: usize) -> c_int {
        (match self {
            Group::Team(t) => t.members()[j],
            Group::Set { members, .. } => members[j],
        }) as c_int
    }
    fn sync(&self, call: &'static str) {
        match self {
            Group::Team(t) => with(call, |rt| Ok(rt.world.team_sync(t)?)),
            Group::Set { members, me, psync } => set_sync(call, members, *me, *psync),
        }
    }
}

/// Dissemination barrier over an active set with counters in `pSync[0..rounds]`.
fn set_sync(call: &'static str, members: &[usize], me: usize, psync: *mut i64) {
    let n = members.len();
    let mut dist = 1;
    let mut round = 0;
    while dist < n {
        let w = psync.wrapping_add(round);
        ops::amo_int::<i64>(call, w, Op::Add, 1, members[(me + dist) % n] as c_int);
        let a = SetArgs {
            ivars: w,
            n: 1,
            status: std::ptr::null(),
            cmp: 3, // SHMEM_CMP_GE
            value: 1,
            values: std::ptr::null(),
            indices: std::ptr::null_mut(),
        };
        // SAFETY: one symmetric word (checked by the call).
        unsafe { ops::wait_set(call, a, Set::All, true) };
        ops::amo_int::<i64>(call, w, Op::Add, -1, members[me] as c_int);
        dist <<= 1;
        round += 1;
    }
}

/// Reads `out.len()` elements at symmetric `src` of world PE `pe` (heap or data segment).
fn rd<T: RmaType>(call: &'static str, out: &mut [T], src: *const T, pe: c_int) {
    if !out.is_empty() {
        // SAFETY: `out` is a valid local buffer.
        unsafe { ops::get(call, out.as_mut_ptr(), src, out.len(), pe) }
    }
}

/// Writes `v` to this PE's symmetric `dest`.
fn wr<T: RmaType>(call: &'static str, g: &Group, dest: *mut T, v: &[T]) {
    if !v.is_empty() {
        // SAFETY: `v` is a valid local buffer.
        unsafe { ops::put(call, dest, v.as_ptr(), v.len(), g.pe(g.me())) }
    }
}

fn quiet(call: &'static str) {
    with(call, |rt| Ok(rt.world.quiet()?));
}

/// quiet, sync, gather, sync, write, quiet.
fn engine<T>(
    call: &'static str,
    g: &Group,
    gather: impl FnOnce() -> Vec<T>,
    write: impl FnOnce(Vec<T>),
) {
    quiet(call);
    g.sync(call);
    let v = gather();
    g.sync(call);
    write(v);
    quiet(call);
}

fn check_root(call: &'static str, g: &Group, root: c_int) -> usize {
    if root < 0 || root as usize >= g.n() {
        fatal(
            call,
            format!(
                "root {root} is out of range: the team or active set has {} PEs",
                g.n()
            ),
        );
    }
    root as usize
}

fn e_broadcast<T: RmaType>(
    call: &'static str,
    g: &Group,
    dest: *mut T,
    src: *const T,
    n: usize,
    root: c_int,
    write_root: bool,
) {
    let root = check_root(call, g, root);
    engine(
        call,
        g,
        || {
            let mut v = vec![T::default_value(); n];
            rd(call, &mut v, src, g.pe(root));
            v
        },
        |v| {
            if write_root || g.me() != root {
                wr(call, g, dest, &v)
            }
        },
    )
}

fn e_fcollect<T: RmaType>(call: &'static str, g: &Group, dest: *mut T, src: *const T, n: usize) {
    engine(
        call,
        g,
        || {
            let mut v = vec![T::default_value(); n * g.n()];
            if n > 0 {
                for (j, c) in v.chunks_mut(n).enumerate() {
                    rd(call, c, src, g.pe(j));
                }
            }
            v
        },
        |v| wr(call, g, dest, &v),
    )
}

/// `collect` over an active set: the counts go through one word of the caller's `pSync`
/// (`word`).
fn e_collect<T: RmaType>(
    call: &'static str,
    g: &Group,
    dest: *mut T,
    src: *const T,
    n: usize,
    word: *mut i64,
) {
    quiet(call);
    wr(call, g, word, &[n as i64]);
    g.sync(call);
    let mut counts = vec![0i64; g.n()];
    for (j, c) in counts.iter_mut().enumerate() {
        rd(call, std::slice::from_mut(c), word, g.pe(j));
    }
    let total: usize = counts.iter().map(|&c| c as usize).sum();
    let mut v = vec![T::default_value(); total];
    let mut at = 0;
    for (j, &c) in counts.iter().enumerate() {
        rd(call, &mut v[at..at + c as usize], src, g.pe(j));
        at += c as usize;
    }
    g.sync(call);
    // The word is the caller's pSync: give it back zeroed.
    wr(call, g, word, &[0]);
    wr(call, g, dest, &v);
    quiet(call);
}

#[allow(clippy::too_many_arguments)]
fn e_alltoalls<T: RmaType>(
    call: &'static str,
    g: &Group,
    dest: *mut T,
    src: *const T,
    dst: usize,
    sst: usize,
    n: usize,
) {
    let (np, me) = (g.n(), g.me());
    engine(
        call,
        g,
        || {
            let mut v = vec![T::default_value(); n * np];
            if n == 0 {
                return v;
            }
            let mut block = vec![T::default_value(); (n - 1) * sst + 1];
            for (j, out) in v.chunks_mut(n).enumerate() {
                let start = src.wrapping_add(me * n * sst);
                rd(call, &mut block, start, g.pe(j));
                for (k, o) in out.iter_mut().enumerate() {
                    *o = block[k * sst];
                }
            }
            v
        },
        |v| {
            if v.is_empty() {
                return;
            }
            if dst == 1 {
                return wr(call, g, dest, &v);
            }
            let mut ext = vec![T::default_value(); (v.len() - 1) * dst + 1];
            rd(call, &mut ext, dest, g.pe(me));
            for (i, x) in v.into_iter().enumerate() {
                ext[i * dst] = x;
            }
            wr(call, g, dest, &ext)
        },
    )
}

fn e_reduce<T: ReduceType, O: ReduceOp<T>>(
    call: &'static str,
    g: &Group,
    dest: *mut T,
    src: *const T,
    n: usize,
) {
    engine(
        call,
        g,
        || {
            let mut acc = vec![T::default_value(); n];
            if n == 0 {
                return acc;
            }
            rd(call, &mut acc, src, g.pe(0));
            let mut tmp = acc.clone();
            for j in 1..g.n() {
                rd(call, &mut tmp, src, g.pe(j));
                for (a, &b) in acc.iter_mut().zip(&tmp) {
                    *a = O::combine(*a, b);
                }
            }
            acc
        },
        |v| wr(call, g, dest, &v),
    )
}

// ---- team collectives: the runtime, for any symmetric buffer (heap or data segment) ----

/// The team behind a handle (None: invalid) and runs `f` on it with the runtime.
fn on_team(call: &'static str, h: *mut c_void, f: impl FnOnce(&Rt, &Team) -> CResult<()>) -> c_int {
    with(call, |rt| match lookup(rt, h) {
        None => Ok(-1),
        Some(t) => f(rt, &t).map(|()| 0),
    })
}

/// `shmem_TYPE_broadcast`, `shmem_broadcastmem`.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn broadcast<T: RmaType>(
    call: &'static str,
    h: *mut c_void,
    dest: *mut T,
    src: *const T,
    n: usize,
    root: c_int,
) -> c_int {
    on_team(call, h, |rt, t| {
        if root < 0 {
            return msg(format!("root {root} is out of range"));
        }
        Ok(rt.world.broadcast(t, dest, src, n, root as usize)?)
    })
}

/// `shmem_TYPE_fcollect`, `shmem_fcollectmem`.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn fcollect<T: RmaType>(
    call: &'static str,
    h: *mut c_void,
    dest: *mut T,
    src: *const T,
    n: usize,
) -> c_int {
    on_team(call, h, |rt, t| Ok(rt.world.fcollect(t, dest, src, n)?))
}

/// `shmem_TYPE_collect`, `shmem_collectmem`.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn collect<T: RmaType>(
    call: &'static str,
    h: *mut c_void,
    dest: *mut T,
    src: *const T,
    n: usize,
) -> c_int {
    on_team(call, h, |rt, t| Ok(rt.world.collect(t, dest, src, n)?))
}

fn stride_of(call: &'static str, s: isize) -> usize {
    if s < 1 {
        fatal(call, format!("stride {s} is not positive"));
    }
    s as usize
}

/// `shmem_TYPE_alltoall(s)`, `shmem_alltoall(s)mem`.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn alltoalls<T: RmaType>(
    call: &'static str,
    h: *mut c_void,
    dest: *mut T,
    src: *const T,
    dst: isize,
    sst: isize,
    n: usize,
) -> c_int {
    let (dst, sst) = (stride_of(call, dst), stride_of(call, sst));
    on_team(call, h, |rt, t| {
        if dst == 1 && sst == 1 {
            rt.world.alltoall(t, dest, src, n)?
        } else {
            rt.world.alltoalls(t, dest, src, dst, sst, n)?
        }
        Ok(())
    })
}

/// `shmem_TYPE_OP_reduce`.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn reduce<T: ReduceType, O: ReduceOp<T> + Default>(
    call: &'static str,
    h: *mut c_void,
    dest: *mut T,
    src: *const T,
    n: usize,
) -> c_int {
    on_team(call, h, |rt, t| {
        Ok(rt.world.reduce(t, dest, src, n, O::default())?)
    })
}

// ---- deprecated active-set forms ----

/// The active set `start, start + 2^log_stride, …` (`size` PEs) with this PE in it.
fn set(
    call: &'static str,
    start: c_int,
    log_stride: c_int,
    size: c_int,
    psync: *mut c_long,
) -> Group {
    with(call, |rt| {
        let n = rt.world.n_pes();
        let me = rt.world.my_pe();
        if start < 0 || size < 1 || !(0..31).contains(&log_stride) {
            return msg(format!(
                "active set (start {start}, log stride {log_stride}, size {size}) is invalid"
            ));
        }
        let stride = 1usize << log_stride;
        let members: Vec<usize> = (0..size as usize)
            .map(|i| start as usize + i * stride)
            .collect();
        if members.last().is_some_and(|&l| l >= n) {
            return msg(format!(
                "active set (start {start}, log stride {log_stride}, size {size}) names PEs outside the job's 0..{n}"
            ));
        }
        let Some(i) = members.iter().position(|&p| p == me) else {
            return msg(format!(
                "PE {me} is not in the active set (start {start}, log stride {log_stride}, size {size})"
            ));
        };
        if psync.is_null() {
            return msg("pSync is NULL");
        }
        let rounds = (usize::BITS - (members.len().max(2) - 1).leading_zeros()) as usize;
        if rounds > SYNC_SIZE - 1 {
            return msg("the active set is too large for pSync");
        }
        Ok(Group::Set {
            members,
            me: i,
            psync: psync.cast(),
        })
    })
}

/// `shmem_barrier` (deprecated): quiet, then a barrier over the active set through `pSync`.
#[no_mangle]
pub extern "C" fn shmem_barrier(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) {
    let call = "shmem_barrier";
    let g = set(call, start, log_stride, size, psync);
    if whole_job(&g) {
        // The whole job: the runtime's barrier (pSync is left alone).
        return with(call, |rt| Ok(rt.world.barrier_all()?));
    }
    quiet(call);
    g.sync(call);
}

/// True when an active set is every PE of the job in order.
fn whole_job(g: &Group) -> bool {
    let Group::Set { members, .. } = g else {
        return false;
    };
    let n = with("shmem_n_pes", |rt| Ok(rt.world.n_pes()));
    members.len() == n && members.iter().enumerate().all(|(i, &p)| i == p)
}

/// `shmem_sync` (deprecated active-set form): a barrier over the active set without quiet.
#[no_mangle]
pub extern "C" fn shmem_sync(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) {
    let call = "shmem_sync";
    let g = set(call, start, log_stride, size, psync);
    if whole_job(&g) {
        return with(call, |rt| Ok(rt.world.sync_all()?));
    }
    g.sync(call);
}

/// `shmem_broadcast32/64` (deprecated): the root's `dest` is not written.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
#[allow(clippy::too_many_arguments)]
pub unsafe fn broadcast_set<T: RmaType>(
    call: &'static str,
    dest: *mut T,
    src: *const T,
    n: usize,
    root: c_int,
    start: c_int,
    log_stride: c_int,
    size: c_int,
    psync: *mut c_long,
) {
    let g = set(call, start, log_stride, size, psync);
    e_broadcast(call, &g, dest, src, n, root, false)
}

/// `shmem_collect32/64`, `shmem_fcollect32/64` (deprecated).
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
#[allow(clippy::too_many_arguments)]
pub unsafe fn collect_set<T: RmaType>(
    call: &'static str,
    fixed: bool,
    dest: *mut T,
    src: *const T,
    n: usize,
    start: c_int,
    log_stride: c_int,
    size: c_int,
    psync: *mut c_long,
) {
    let g = set(call, start, log_stride, size, psync);
    if fixed {
        e_fcollect(call, &g, dest, src, n)
    } else {
        e_collect(
            call,
            &g,
            dest,
            src,
            n,
            psync.cast::<i64>().wrapping_add(SYNC_SIZE - 1),
        )
    }
}

/// `shmem_alltoall32/64`, `shmem_alltoalls32/64` (deprecated).
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
#[allow(clippy::too_many_arguments)]
pub unsafe fn alltoalls_set<T: RmaType>(
    call: &'static str,
    dest: *mut T,
    src: *const T,
    dst: isize,
    sst: isize,
    n: usize,
    start: c_int,
    log_stride: c_int,
    size: c_int,
    psync: *mut c_long,
) {
    let (dst, sst) = (stride_of(call, dst), stride_of(call, sst));
    let g = set(call, start, log_stride, size, psync);
    e_alltoalls(call, &g, dest, src, dst, sst, n)
}

/// `shmem_TYPE_OP_to_all` (deprecated); `pWrk` is not needed.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce_set<T: ReduceType, O: ReduceOp<T>>(
    call: &'static str,
    dest: *mut T,
    src: *const T,
    n: c_int,
    start: c_int,
    log_stride: c_int,
    size: c_int,
    psync: *mut c_long,
) {
    if n < 0 {
        fatal(call, format!("nreduce {n} is negative"));
    }
    let g = set(call, start, log_stride, size, psync);
    e_reduce::<T, O>(call, &g, dest, src, n as usize)
}

// ---- reductions of types Rust cannot compute (long double, complex): the header's inline
// combine function does the arithmetic ----

/// Combines `n` elements of `b` into `acc` (both arrays of the reduced C type).
pub type Combine = unsafe extern "C" fn(acc: *mut c_void, b: *const c_void, n: usize);

/// The engine's reduction over `n` elements of `size` bytes with a C combine function.
fn e_reduce_cb(
    call: &'static str,
    g: &Group,
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    f: Combine,
) {
    let bytes = n
        .checked_mul(size)
        .unwrap_or_else(|| fatal(call, "nreduce overflows"));
    // 16-byte aligned staging (long double needs it).
    let words = bytes.div_ceil(16);
    let view = |v: &mut Vec<u128>| -> *mut u8 { v.as_mut_ptr().cast() };
    engine(
        call,
        g,
        || {
            let mut acc = vec![0u128; words];
            if n == 0 {
                return acc;
            }
            let mut tmp = vec![0u128; words];
            // SAFETY: both vectors hold at least `bytes` bytes.
            let (a, t) = unsafe {
                (
                    std::slice::from_raw_parts_mut(view(&mut acc), bytes),
                    std::slice::from_raw_parts_mut(view(&mut tmp), bytes),
                )
            };
            rd(call, a, src.cast::<u8>(), g.pe(0));
            for j in 1..g.n() {
                rd(call, t, src.cast::<u8>(), g.pe(j));
                // SAFETY: the header's combine reads and writes `n` elements of both buffers.
                unsafe { f(a.as_mut_ptr().cast(), t.as_ptr().cast(), n) };
            }
            acc
        },
        |mut v| {
            // SAFETY: `v` holds at least `bytes` bytes.
            let s = unsafe { std::slice::from_raw_parts(view(&mut v), bytes) };
            wr(call, g, dest.cast::<u8>(), s)
        },
    )
}

/// Team reduction of `long double` / complex elements (called by the header's inline
/// `shmem_longdouble_max_reduce`, `shmem_complexd_sum_reduce`, …). 0, or non-zero for an
/// invalid team.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires; `f` combines `n` elements of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn shmemi_reduce_cb(
    name: *const std::ffi::c_char,
    team_h: *mut c_void,
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    f: Option<Combine>,
) -> c_int {
    let call = call_name(name);
    let Some(f) = f else {
        fatal(call, "no combine function")
    };
    let Some(t) = team(call, team_h) else {
        return -1;
    };
    e_reduce_cb(call, &Group::Team(t), dest, src, n, size, f);
    0
}

/// Active-set (`_to_all`) reduction of `long double` / complex elements.
///
/// # Safety
/// As [`shmemi_reduce_cb`]; `psync` a valid pSync.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn shmemi_reduce_cb_set(
    name: *const std::ffi::c_char,
    dest: *mut c_void,
    src: *const c_void,
    n: c_int,
    size: usize,
    f: Option<Combine>,
    start: c_int,
    log_stride: c_int,
    set_size: c_int,
    psync: *mut c_long,
) {
    let call = call_name(name);
    let Some(f) = f else {
        fatal(call, "no combine function")
    };
    if n < 0 {
        fatal(call, format!("nreduce {n} is negative"));
    }
    let g = set(call, start, log_stride, set_size, psync);
    e_reduce_cb(call, &g, dest, src, n as usize, size, f)
}

/// The C routine's name for messages (the header passes a string literal).
fn call_name(name: *const std::ffi::c_char) -> &'static str {
    if name.is_null() {
        return "shmem reduction";
    }
    // SAFETY: the header passes a NUL-terminated string literal, which lives forever.
    let s: &'static std::ffi::CStr = unsafe { std::ffi::CStr::from_ptr(name) };
    s.to_str().unwrap_or("shmem reduction")
}
