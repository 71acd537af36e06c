//! Communication contexts (`shmem_ctx_t`), including contexts on a team.
//!
//! `SHMEM_CTX_DEFAULT` is handle 1 and belongs to `SHMEM_TEAM_WORLD`. `shmem_ctx_create` and
//! `shmem_team_create_ctx` register a context and return its id (from 16 up) as the handle, so
//! an unknown or destroyed handle is detected, never dereferenced. Every context shares the PE's
//! one completion path (fence and quiet on any context order and complete all of the PE's
//! operations, which OpenSHMEM allows); what a context changes is its **team**: PE numbers given
//! to an operation on a team's context are numbers in that team.
//!
//! How an operation learns its context: a `shmem_ctx_*` entry point first calls [`select`] (via
//! `ops::ctx`), which checks the handle and, for a context on a team other than the world,
//! records the team for this thread. The entry point's [`crate::with`] takes that record when it
//! starts and keeps it active while it runs, so [`crate::ops::pe_of`] translates the PE through
//! the team; nothing outlives the one call.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_long, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rshmem::Team;

use crate::{coll, fatal, msg, with, CResult, Rt};

/// `SHMEM_CTX_DEFAULT`.
const DEFAULT: usize = 1;
/// The context options OpenSHMEM 1.5 defines (`SHMEM_CTX_PRIVATE | SERIALIZED | NOSTORE`).
const OPTIONS: c_long = 7;

/// A registered context: its id and the handle of its team.
struct Ctx {
    id: usize,
    team: usize,
}

static CTXS: Mutex<Vec<Ctx>> = Mutex::new(Vec::new());
static NEXT: AtomicUsize = AtomicUsize::new(16);

thread_local! {
    /// The team of the context named by the `shmem_ctx_*` call this thread is entering.
    static SELECTED: Cell<Option<Team>> = const { Cell::new(None) };
    /// The team of the context of the call this thread is running (`None`: the world).
    static ACTIVE: RefCell<Option<Team>> = const { RefCell::new(None) };
}

/// Forgets every context (at `shmem_finalize`).
pub(crate) fn clear() {
    CTXS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The team handle of context `h`, or an error for `SHMEM_CTX_INVALID` and unknown or
/// destroyed handles.
fn team_handle(h: *mut c_void) -> CResult<usize> {
    match h as usize {
        0 => msg("the context is SHMEM_CTX_INVALID"),
        DEFAULT => Ok(coll::WORLD),
        id => CTXS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.team)
            .map_or_else(
                || msg(format!("{h:p} is not a context (unknown or destroyed)")),
                Ok,
            ),
    }
}

/// Checks context `h` for `call` and selects its team for the operation `call` runs next on
/// this thread (see the module documentation). Bad handles abort naming the call.
pub fn select(call: &'static str, h: *mut c_void) {
    if h as usize == DEFAULT {
        return;
    }
    let r = team_handle(h).and_then(|t| {
        if t == coll::WORLD {
            return Ok(None);
        }
        with(call, |rt| Ok(coll::lookup(rt, t as *mut c_void)))
            .map(Some)
            .ok_or_else(|| {
                crate::Fail::Msg(
                    capi_core::Code::InvalidValue,
                    "the context's team has been destroyed".into(),
                )
            })
    });
    match r {
        Ok(team) => SELECTED.set(team),
        Err(e) => fatal(call, e),
    }
}

/// Checks context `h` for `call` without selecting it (fence, quiet, ...).
fn check(call: &'static str, h: *mut c_void) {
    if let Err(e) = team_handle(h) {
        fatal(call, e);
    }
}

/// Whether a call on `ctx` goes ahead: not for `SHMEM_CTX_INVALID` (NULL), on which the
/// context calls that allow it do nothing (OpenSHMEM 1.5); an unknown or destroyed handle ends
/// the job naming `call`.
fn live(call: &'static str, ctx: *mut c_void) -> bool {
    if ctx.is_null() {
        return false;
    }
    check(call, ctx);
    true
}

/// Restores the previous active team when a call ends.
pub(crate) struct Scope(Option<Team>);

impl Drop for Scope {
    fn drop(&mut self) {
        let prev = self.0.take();
        ACTIVE.with_borrow_mut(|a| *a = prev);
    }
}

/// Called by [`crate::with`] as it starts: makes the context selected for this call (if any)
/// active until the returned scope ends.
#[inline]
pub(crate) fn enter() -> Option<Scope> {
    let t = SELECTED.take()?;
    Some(Scope(ACTIVE.with_borrow_mut(|a| a.replace(t))))
}

/// The world PE number of PE `pe` of the active context's team (the world when none).
#[inline]
pub fn world_pe(rt: &Rt, pe: c_int) -> CResult<usize> {
    ACTIVE.with_borrow(|a| match a {
        None => {
            let n = rt.world.n_pes();
            if pe < 0 || pe as usize >= n {
                return msg(format!(
                    "PE {pe} is out of range: the job has {n} PEs (0..{n})"
                ));
            }
            Ok(pe as usize)
        }
        Some(t) => {
            if t.is_destroyed() {
                return msg("the context's team has been destroyed");
            }
            let n = t.n_pes();
            match usize::try_from(pe).ok().and_then(|p| t.members().get(p)) {
                Some(&w) => Ok(w),
                None => msg(format!(
                    "PE {pe} is out of range: the context's team has {n} PEs (0..{n})"
                )),
            }
        }
    })
}

fn register(team: usize) -> *mut c_void {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    CTXS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Ctx { id, team });
    id as *mut c_void
}

fn check_options(options: c_long) -> CResult<()> {
    if options & !OPTIONS != 0 {
        return msg(format!("unknown context options {options:#x}"));
    }
    Ok(())
}

/// `shmem_ctx_create`: a new context on `SHMEM_TEAM_WORLD`; returns 0.
///
/// # Safety
/// `ctx` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmem_ctx_create(options: c_long, ctx: *mut *mut c_void) -> c_int {
    let call = "shmem_ctx_create";
    crate::non_null(call, "ctx", ctx);
    let h = with(call, |_| {
        check_options(options)?;
        Ok(register(coll::WORLD))
    });
    // SAFETY: non-null, valid for one write by the caller's contract.
    unsafe { ctx.write(h) };
    0
}

/// `shmem_team_create_ctx`: a new context on `team`; returns 0, or non-zero (and
/// `SHMEM_CTX_INVALID` in `*ctx`) when `team` is `SHMEM_TEAM_INVALID` or destroyed.
///
/// # Safety
/// `ctx` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmem_team_create_ctx(
    team: *mut c_void,
    options: c_long,
    ctx: *mut *mut c_void,
) -> c_int {
    let call = "shmem_team_create_ctx";
    crate::non_null(call, "ctx", ctx);
    let h = with(call, |rt| {
        check_options(options)?;
        Ok(coll::lookup(rt, team).map(|_| register(team as usize)))
    });
    // SAFETY: non-null, valid for one write by the caller's contract.
    unsafe { ctx.write(h.unwrap_or(std::ptr::null_mut())) };
    if h.is_some() {
        0
    } else {
        -1
    }
}

/// `shmem_ctx_destroy`: completes the PE's operations and forgets the context.
/// `SHMEM_CTX_INVALID` is ignored (OpenSHMEM 1.5); destroying `SHMEM_CTX_DEFAULT` or an unknown
/// handle aborts naming the call.
#[no_mangle]
pub extern "C" fn shmem_ctx_destroy(ctx: *mut c_void) {
    let call = "shmem_ctx_destroy";
    match ctx as usize {
        0 => return,
        DEFAULT => fatal(call, "SHMEM_CTX_DEFAULT cannot be destroyed"),
        _ => check(call, ctx),
    }
    with(call, |rt| Ok(rt.world.quiet()?));
    let id = ctx as usize;
    CTXS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|c| c.id != id);
}

/// `shmem_ctx_fence`: no operation for `SHMEM_CTX_INVALID` (OpenSHMEM 1.5).
#[no_mangle]
pub extern "C" fn shmem_ctx_fence(ctx: *mut c_void) {
    if !live("shmem_ctx_fence", ctx) {
        return;
    }
    with("shmem_ctx_fence", |rt| {
        rt.world.fence();
        Ok(())
    })
}

/// `shmem_ctx_quiet`: no operation for `SHMEM_CTX_INVALID` (OpenSHMEM 1.5).
#[no_mangle]
pub extern "C" fn shmem_ctx_quiet(ctx: *mut c_void) {
    if !live("shmem_ctx_quiet", ctx) {
        return;
    }
    with("shmem_ctx_quiet", |rt| Ok(rt.world.quiet()?))
}

/// The PEs of `shmem_pe_quiet` / `shmem_ctx_pe_quiet`, each checked against the selected
/// context's team; then the PE's quiet (rshmem completes operations per PE, not per target,
/// which OpenSHMEM 1.6 allows: "the performance might be equivalent to shmem_quiet").
///
/// # Safety
/// `pes` valid for reads of `npes` ints.
unsafe fn pe_quiet(call: &'static str, pes: *const c_int, npes: usize) {
    if npes == 0 {
        return;
    }
    if pes.is_null() {
        fatal(call, format!("target_pes is NULL with npes {npes}"));
    }
    // SAFETY: non-null, valid for `npes` reads by the caller's contract.
    let pes = unsafe { std::slice::from_raw_parts(pes, npes) };
    with(call, |rt| {
        for &pe in pes {
            world_pe(rt, pe)?;
        }
        Ok(rt.world.quiet()?)
    })
}

/// `shmem_pe_quiet` (1.6): completes the PE's operations to the world PEs `target_pes`
/// (`npes` of them; none: returns at once).
///
/// # Safety
/// `target_pes` valid for reads of `npes` ints.
#[no_mangle]
pub unsafe extern "C" fn shmem_pe_quiet(target_pes: *const c_int, npes: usize) {
    // SAFETY: the caller's contract.
    unsafe { pe_quiet("shmem_pe_quiet", target_pes, npes) }
}

/// `shmem_ctx_pe_quiet` (1.6): as `shmem_pe_quiet` on `ctx`, whose team numbers the PEs; no
/// operation for `SHMEM_CTX_INVALID` (like `shmem_ctx_quiet`).
///
/// # Safety
/// `target_pes` valid for reads of `npes` ints.
#[no_mangle]
pub unsafe extern "C" fn shmem_ctx_pe_quiet(
    ctx: *mut c_void,
    target_pes: *const c_int,
    npes: usize,
) {
    let call = "shmem_ctx_pe_quiet";
    if ctx.is_null() {
        return;
    }
    select(call, ctx);
    // SAFETY: the caller's contract.
    unsafe { pe_quiet(call, target_pes, npes) }
}

/// `SHMEM_CTX_SESSION_TOTAL_OPS`, the only field mask of `shmem_ctx_session_config_t`.
const SESSION_TOTAL_OPS: c_long = 1;

/// `shmem_ctx_session_config_t` (1.6).
#[repr(C)]
pub struct SessionConfig {
    /// Expected number of RMA calls in the session (a hint).
    pub total_ops: usize,
}

/// `shmem_ctx_session_start` (1.6): sessions are performance hints; rshmem checks the
/// arguments and applies no optimization (which OpenSHMEM allows). No operation for
/// `SHMEM_CTX_INVALID`. Any `options` are accepted (the specification says no combination is
/// an error); a `config_mask` with bits other than `SHMEM_CTX_SESSION_TOTAL_OPS`, or one that
/// selects a field of a NULL `config`, aborts naming the call.
///
/// # Safety
/// `config` NULL or valid for one read.
#[no_mangle]
pub unsafe extern "C" fn shmem_ctx_session_start(
    ctx: *mut c_void,
    _options: c_long,
    config: *const SessionConfig,
    config_mask: c_long,
) {
    let call = "shmem_ctx_session_start";
    if !live(call, ctx) {
        return;
    }
    with(call, |_| {
        if config_mask & !SESSION_TOTAL_OPS != 0 {
            return msg(format!(
                "config_mask {config_mask:#x} has bits other than SHMEM_CTX_SESSION_TOTAL_OPS"
            ));
        }
        if config_mask != 0 && config.is_null() {
            return msg("config is NULL but config_mask selects its total_ops");
        }
        Ok(())
    })
}

/// `shmem_ctx_session_stop` (1.6): ends a session (no operation, like stopping one that is
/// not started; also for `SHMEM_CTX_INVALID`).
#[no_mangle]
pub extern "C" fn shmem_ctx_session_stop(ctx: *mut c_void) {
    let call = "shmem_ctx_session_stop";
    if !live(call, ctx) {
        return;
    }
    with(call, |_| Ok(()))
}

/// `shmem_ctx_get_team`: the team of `ctx` (`SHMEM_TEAM_WORLD` for `SHMEM_CTX_DEFAULT` and
/// `shmem_ctx_create` contexts). Non-zero (and `SHMEM_TEAM_INVALID`) for `SHMEM_CTX_INVALID`
/// or an unknown or destroyed context.
///
/// # Safety
/// `team` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmem_ctx_get_team(ctx: *mut c_void, team: *mut *mut c_void) -> c_int {
    crate::non_null("shmem_ctx_get_team", "team", team);
    let (h, r) = match team_handle(ctx) {
        Ok(t) => (t as *mut c_void, 0),
        Err(_) => (std::ptr::null_mut(), -1),
    };
    // SAFETY: non-null, valid for one write by the caller's contract.
    unsafe { team.write(h) };
    r
}
