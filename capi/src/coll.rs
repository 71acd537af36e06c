//! Teams and collectives of the C ABI (OpenSHMEM 1.5 teams, team-based collectives and the
//! deprecated active-set collectives).
//!
//! Team handles: `SHMEM_TEAM_INVALID` is NULL, `SHMEM_TEAM_WORLD`, `SHMEM_TEAM_SHARED` and
//! `SHMEM_TEAM_NODE` are 1, 2, 3; split teams get ids from 16 up, kept in a registry (an
//! unknown or destroyed handle is detected, never dereferenced).
//!
//! Every collective is the runtime's, for every symmetric buffer: heap objects and global or
//! static variables alike (the data segment is a symmetric region of the runtime, see
//! [`crate::seg`]). Team collectives call [`rshmem::World::broadcast`], …; the deprecated
//! active-set forms (OpenSHMEM 1.4's `PE_start`/`logPE_stride`/`PE_size` with `pSync`) call the
//! runtime's active-set collectives ([`rshmem::World::active_set`], `set_barrier`,
//! `set_broadcast`, …), whose synchronization lives in the caller's `pSync`; the `long double`
//! and complex reductions hand a C combine function (`combine.c`) to
//! [`rshmem::World::reduce_with`]; the scans (1.6) call [`rshmem::World::scan_with`]. This
//! module only converts arguments.

use std::ffi::{c_int, c_long, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rshmem::{ActiveSet, Group, ReduceOp, ReduceType, RmaType, Sum, Team, TeamConfig};

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
        crate::non_null("shmem_team_get_config", "config", config);
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
/// `SHMEM_TEAM_INVALID` on parent PEs not in it); non-zero for an invalid parent, an invalid
/// start/stride/size triplet or no free team slot (then `*new_team` is `SHMEM_TEAM_INVALID` on
/// every parent PE).
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
    crate::non_null(call, "new_team", new_team);
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
            Err(e) => split_failed(call, e).map(|()| None),
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

/// A split that could not make its team (an invalid triplet, no free team slot on some PE)
/// returns non-zero with `SHMEM_TEAM_INVALID`, as OpenSHMEM says, after printing why; any other
/// error (a peer lost, a timeout) stays fatal.
fn split_failed(call: &'static str, e: rshmem::Error) -> CResult<()> {
    match e {
        rshmem::Error::InvalidArgument { .. } => Ok(()),
        rshmem::Error::Unsupported { .. } => {
            crate::report(call, &e);
            Ok(())
        }
        e => Err(e.into()),
    }
}

/// `shmem_team_split_2d`: **collective over the parent**. 0 on success, non-zero for an invalid
/// parent, `xrange` < 1 or no free team slot (both outputs `SHMEM_TEAM_INVALID`).
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
        match rt.world.team_split_2d_with(&p, xrange as usize, xc, yc) {
            Ok((x, y)) => Ok(Some((register(x), register(y)))),
            Err(e) => split_failed(call, e).map(|()| None),
        }
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

// ---- team collectives: the runtime, for any symmetric buffer (heap or data segment) ----

/// The team behind a handle (None: invalid) and runs `f` on it with the runtime: the body of
/// every team collective (`shmem_TYPE_collect`, `shmem_TYPE_OP_reduce`, …). 0, or -1 for an
/// invalid team.
pub(crate) fn on_team(
    call: &'static str,
    h: *mut c_void,
    f: impl FnOnce(&Rt, &Team) -> CResult<()>,
) -> c_int {
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

// ---- deprecated active-set forms: the runtime's active-set collectives ----

/// The arguments that name a deprecated active set: PEs `start, start + 2^log_stride, …`
/// (`size` PEs) and the caller's `pSync` of `SHMEM_*_SYNC_SIZE` words, as the C call passed them
/// (checked by [`on_set`]).
#[derive(Clone, Copy)]
pub struct SetSpec {
    /// The first PE.
    pub start: c_int,
    /// log2 of the stride between PEs.
    pub log_stride: c_int,
    /// How many PEs.
    pub size: c_int,
    /// The caller's `pSync` array.
    pub psync: *mut c_long,
}

impl SetSpec {
    /// The active set of a C call's `PE_start, logPE_stride, PE_size, pSync` arguments.
    pub fn new(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) -> Self {
        Self {
            start,
            log_stride,
            size,
            psync,
        }
    }
}

/// Runs `f` with the runtime and the active set `set` (this PE in it).
fn on_set(call: &'static str, set: SetSpec, f: impl FnOnce(&Rt, &ActiveSet) -> CResult<()>) {
    let SetSpec {
        start,
        log_stride,
        size,
        psync,
    } = set;
    with(call, |rt| {
        let (Ok(s), Ok(l), Ok(n)) = (
            usize::try_from(start),
            u32::try_from(log_stride),
            usize::try_from(size),
        ) else {
            return msg(format!(
                "active set (start {start}, log stride {log_stride}, size {size}) is invalid"
            ));
        };
        let set = rt.world.active_set(s, l, n, psync.cast(), SYNC_SIZE)?;
        f(rt, &set)
    })
}

/// The active-set barrier of `shmem_barrier` (`quiet`: completes the PE's operations first)
/// and `shmem_sync`.
fn barrier_set(call: &'static str, set: SetSpec, quiet: bool) {
    on_set(call, set, |rt, s| {
        if quiet {
            Ok(rt.world.set_barrier(s)?)
        } else {
            Ok(rt.world.set_sync(s)?)
        }
    })
}

/// `shmem_barrier` (deprecated): quiet, then a barrier over the active set through `pSync`.
#[no_mangle]
pub extern "C" fn shmem_barrier(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) {
    barrier_set(
        "shmem_barrier",
        SetSpec::new(start, log_stride, size, psync),
        true,
    );
}

/// `shmem_sync` (deprecated active-set form): a barrier over the active set without quiet.
#[no_mangle]
pub extern "C" fn shmem_sync(start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long) {
    barrier_set(
        "shmem_sync",
        SetSpec::new(start, log_stride, size, psync),
        false,
    );
}

fn root_of(root: c_int) -> CResult<usize> {
    usize::try_from(root).or_else(|_| msg(format!("root {root} is out of range")))
}

/// `shmem_broadcast32/64` (deprecated): the root's `dest` is not written.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn broadcast_set<T: RmaType>(
    call: &'static str,
    dest: *mut T,
    src: *const T,
    n: usize,
    root: c_int,
    set: SetSpec,
) {
    on_set(call, set, |rt, s| {
        Ok(rt.world.set_broadcast(s, dest, src, n, root_of(root)?)?)
    })
}

/// `shmem_collect32/64`, `shmem_fcollect32/64` (deprecated).
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn collect_set<T: RmaType>(
    call: &'static str,
    fixed: bool,
    dest: *mut T,
    src: *const T,
    n: usize,
    set: SetSpec,
) {
    on_set(call, set, |rt, s| {
        if fixed {
            Ok(rt.world.set_fcollect(s, dest, src, n)?)
        } else {
            Ok(rt.world.set_collect(s, dest, src, n)?)
        }
    })
}

/// `shmem_alltoall32/64`, `shmem_alltoalls32/64` (deprecated).
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn alltoalls_set<T: RmaType>(
    call: &'static str,
    dest: *mut T,
    src: *const T,
    dst: isize,
    sst: isize,
    n: usize,
    set: SetSpec,
) {
    let (dst, sst) = (stride_of(call, dst), stride_of(call, sst));
    on_set(call, set, |rt, s| {
        Ok(rt.world.set_alltoalls(s, dest, src, dst, sst, n)?)
    })
}

/// `shmem_TYPE_OP_to_all` (deprecated); `pWrk` is not needed.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn reduce_set<T: ReduceType, O: ReduceOp<T> + Default>(
    call: &'static str,
    dest: *mut T,
    src: *const T,
    n: c_int,
    set: SetSpec,
) {
    let n = nreduce(call, n);
    on_set(call, set, |rt, s| {
        Ok(rt.world.set_reduce(s, dest, src, n, O::default())?)
    })
}

/// The element count of an active-set reduction; a negative one is fatal, naming `call`.
fn nreduce(call: &'static str, n: c_int) -> usize {
    usize::try_from(n).unwrap_or_else(|_| fatal(call, format!("nreduce {n} is negative")))
}

// ---- reductions and scans of types Rust cannot compute (long double, complex): the C
// combine functions of combine.c do the arithmetic, the runtime's `reduce_with` / `scan_with`
// the communication ----

/// Combines `n` elements of `b` into `acc` (both arrays of the reduced C type).
pub type Combine = unsafe extern "C" fn(acc: *mut c_void, b: *const c_void, n: usize);

/// What `World::reduce_with` and `World::scan_with` call to combine two staged buffers: the C
/// combine function `f` over their `n` elements.
///
/// # Safety
/// `f` combines `n` elements of the element size the runtime is given.
pub unsafe fn c_combine(f: Combine, n: usize) -> impl FnMut(&mut [u8], &[u8]) {
    move |acc: &mut [u8], b: &[u8]| {
        // SAFETY: the runtime hands two 16-byte aligned buffers of `n · size` bytes: `n`
        // elements of the reduced type, which `f` reads and writes (the caller's contract).
        unsafe { f(acc.as_mut_ptr().cast(), b.as_ptr().cast(), n) }
    }
}

/// `World::reduce_with` over `group` with the C combine function `f`.
fn reduce_cb(
    rt: &Rt,
    group: Group<'_>,
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    f: Combine,
) -> CResult<()> {
    // SAFETY: `f` combines `n` elements of `size` bytes (the callers' contract).
    let mut combine = unsafe { c_combine(f, n) };
    Ok(rt
        .world
        .reduce_with(group, dest.cast(), src.cast(), n, size, &mut combine)?)
}

/// `shmem_{longdouble,complexf,complexd}_OP_reduce`: team reduction of `n` elements of
/// `size` bytes combined by `f`. 0, or -1 for an invalid team.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires; `f` combines `n` elements of `size` bytes.
pub unsafe fn reduce_c(
    call: &'static str,
    team_h: *mut c_void,
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    f: Combine,
) -> c_int {
    on_team(call, team_h, |rt, t| {
        reduce_cb(rt, Group::Team(t), dest, src, n, size, f)
    })
}

/// `shmem_{longdouble,complexf,complexd}_OP_to_all` (deprecated active-set form).
///
/// # Safety
/// As [`reduce_c`]; `psync` a valid pSync.
pub unsafe fn reduce_c_set(
    call: &'static str,
    dest: *mut c_void,
    src: *const c_void,
    n: c_int,
    size: usize,
    f: Combine,
    set: SetSpec,
) {
    let n = nreduce(call, n);
    on_set(call, set, |rt, s| {
        reduce_cb(rt, Group::Set(s), dest, src, n, size, f)
    })
}

// ---- scans (1.6): prefix sums over a team ----

/// `shmem_TYPE_sum_inscan` (`exclusive` false) and `shmem_TYPE_sum_exscan`: on team PE `i`,
/// `dest[j]` is the sum of `source[j]` of team PEs `0..=i` (inscan) or `0..i` (exscan; 0 on
/// team PE 0). 0, or -1 for an invalid team.
///
/// # Safety
/// Buffers valid as OpenSHMEM requires.
pub unsafe fn scan<T: ReduceType>(
    call: &'static str,
    h: *mut c_void,
    dest: *mut T,
    src: *const T,
    n: usize,
    exclusive: bool,
) -> c_int {
    let size = std::mem::size_of::<T>();
    let mut combine = |acc: &mut [u8], b: &[u8]| {
        for (a, b) in acc.chunks_exact_mut(size).zip(b.chunks_exact(size)) {
            // SAFETY: each chunk holds the bytes of one `T` (the runtime stages `n`
            // elements of `size` bytes); every bit pattern is a valid integer or float.
            unsafe {
                let x = a.as_ptr().cast::<T>().read_unaligned();
                let y = b.as_ptr().cast::<T>().read_unaligned();
                a.as_mut_ptr()
                    .cast::<T>()
                    .write_unaligned(<Sum as ReduceOp<T>>::combine(x, y));
            }
        }
    };
    scan_team(
        call,
        h,
        dest.cast(),
        src.cast(),
        n,
        size,
        exclusive,
        &mut combine,
    )
}

/// `World::scan_with` over the team of handle `h` with `combine`: the body of [`scan`] and of
/// the `long double` and complex scans (`combine` from [`c_combine`]). 0, or -1 for an invalid
/// team.
#[allow(clippy::too_many_arguments)]
pub fn scan_team(
    call: &'static str,
    h: *mut c_void,
    dest: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    exclusive: bool,
    combine: &mut dyn FnMut(&mut [u8], &[u8]),
) -> c_int {
    on_team(call, h, |rt, t| {
        Ok(rt.world.scan_with(
            Group::Team(t),
            dest.cast(),
            src.cast(),
            n,
            size,
            exclusive,
            combine,
        )?)
    })
}
