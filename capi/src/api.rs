//! The untyped C entry points: setup and query, memory, ordering, barriers, contexts, signals.
//! The typed families are in `typed.rs`.
//!
//! # Safety (all entry points)
//! Pointer arguments must be valid as OpenSHMEM 1.5 requires; invalid symmetric addresses and PE
//! numbers are caught and reported, invalid local buffers cannot be.

use std::ffi::{c_char, c_int, c_long, c_void};

use rshmem::SignalOp;

use crate::ops::{self, pe_of};
use crate::{exit_now, fatal, guarded, init_runtime, msg, with, Rt};

const THREAD_MULTIPLE: c_int = 3;
const NAME: &std::ffi::CStr = c"rshmem";

/// `shmem_init`: **collective**; starts the runtime.
#[no_mangle]
pub extern "C" fn shmem_init() {
    guarded("shmem_init", || init_runtime("shmem_init", THREAD_MULTIPLE));
}

/// `shmem_init_thread`: every level up to `SHMEM_THREAD_MULTIPLE` is provided (one-sided calls
/// may come from any thread; collective calls from one thread at a time per PE). Returns 0.
///
/// # Safety
/// `provided` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmem_init_thread(requested: c_int, provided: *mut c_int) -> c_int {
    guarded("shmem_init_thread", || {
        if !(0..=THREAD_MULTIPLE).contains(&requested) {
            return msg(format!("{requested} is not a SHMEM_THREAD_* level"));
        }
        init_runtime("shmem_init_thread", requested)?;
        if !provided.is_null() {
            // SAFETY: non-null, valid by the caller's contract.
            unsafe { provided.write(requested) };
        }
        Ok(0)
    })
}

/// `shmem_query_thread`.
///
/// # Safety
/// `provided` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmem_query_thread(provided: *mut c_int) {
    let level = with("shmem_query_thread", |rt| Ok(rt.thread_level));
    // SAFETY: the caller's contract.
    unsafe { ops::store_fetch("shmem_query_thread", provided, level) };
}

/// `start_pes` (deprecated): `shmem_init`.
#[no_mangle]
pub extern "C" fn start_pes(_npes: c_int) {
    shmem_init();
}

/// `shmem_finalize`: **collective**.
#[no_mangle]
pub extern "C" fn shmem_finalize() {
    guarded("shmem_finalize", crate::finalize_runtime);
}

/// `shmem_global_exit`: ends every PE of the job with `status` (the other PEs get a signal that
/// makes them exit with it) and then this one.
#[no_mangle]
pub extern "C" fn shmem_global_exit(status: c_int) {
    guarded("shmem_global_exit", || {
        rshmem::exit::tell_others(status);
        Ok(())
    });
    exit_now(status)
}

/// `_my_pe` (deprecated).
#[no_mangle]
pub extern "C" fn _my_pe() -> c_int {
    shmem_my_pe()
}

/// `_num_pes` (deprecated).
#[no_mangle]
pub extern "C" fn _num_pes() -> c_int {
    shmem_n_pes()
}

/// `shmem_pe_accessible`: 1 if `pe` exists and can be reached (every PE of the job).
#[no_mangle]
pub extern "C" fn shmem_pe_accessible(pe: c_int) -> c_int {
    with("shmem_pe_accessible", |rt| {
        Ok((pe >= 0 && rt.world.pe_accessible(pe as usize)) as c_int)
    })
}

/// `shmem_addr_accessible`: 1 if `addr` is symmetric (heap or data segment) and `pe` exists.
#[no_mangle]
pub extern "C" fn shmem_addr_accessible(addr: *const c_void, pe: c_int) -> c_int {
    with("shmem_addr_accessible", |rt| {
        let Ok(pe) = pe_of(rt, pe) else { return Ok(0) };
        Ok(rt.world.addr_accessible(addr as *const u8, pe) as c_int)
    })
}

/// `shmem_ptr`: a load/store address of `pe`'s copy of `dest` (heap or data segment), or NULL
/// (GPU heap, not symmetric, bad PE).
#[no_mangle]
pub extern "C" fn shmem_ptr(dest: *const c_void, pe: c_int) -> *mut c_void {
    with("shmem_ptr", |rt| {
        let Ok(pe) = pe_of(rt, pe) else {
            return Ok(std::ptr::null_mut());
        };
        Ok(rt
            .world
            .ptr(dest as *const u8, pe)
            .map_or(std::ptr::null_mut(), |p| p.cast()))
    })
}

/// `shmem_team_ptr`: a load/store address of the copy of `dest` of PE `pe` of `team` (a PE
/// number in the team), or NULL (invalid or destroyed team, `pe` outside the team, or as
/// [`shmem_ptr`]).
#[no_mangle]
pub extern "C" fn shmem_team_ptr(team: *mut c_void, dest: *const c_void, pe: c_int) -> *mut c_void {
    let world_pe = with("shmem_team_ptr", |rt| {
        Ok(crate::coll::lookup(rt, team).and_then(|t| {
            usize::try_from(pe)
                .ok()
                .and_then(|p| t.members().get(p).copied())
        }))
    });
    match world_pe {
        Some(w) => shmem_ptr(dest, w as c_int),
        None => std::ptr::null_mut(),
    }
}

/// `shmem_info_get_version`: 1.6.
///
/// # Safety
/// Both pointers valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmem_info_get_version(major: *mut c_int, minor: *mut c_int) {
    // SAFETY: the caller's contract.
    unsafe {
        ops::store_fetch("shmem_info_get_version", major, 1);
        ops::store_fetch("shmem_info_get_version", minor, 6);
    }
}

/// `shmem_info_get_name`: writes "rshmem" (NUL-terminated; at most `SHMEM_MAX_NAME_LEN`).
///
/// # Safety
/// `name` valid for `SHMEM_MAX_NAME_LEN` bytes.
#[no_mangle]
pub unsafe extern "C" fn shmem_info_get_name(name: *mut c_char) {
    crate::non_null("shmem_info_get_name", "name", name);
    let b = NAME.to_bytes_with_nul();
    // SAFETY: the buffer holds SHMEM_MAX_NAME_LEN (256) bytes by the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr().cast(), name, b.len()) };
}

// ---- memory ----

/// Allocations up to this size are prefaulted (see [`prefault`]).
const PREFAULT_MAX: usize = 64 << 20;

/// Maps the pages of every host-local PE's copy of the new allocation `[p, p+size)` into this
/// process's page tables now (`MADV_POPULATE_WRITE`), so that the first RMA to a peer's copy
/// does not take one page fault per 4 KiB inside the caller's timed loop. Only on the CPU heap
/// (`shm` transport) and for allocations up to [`PREFAULT_MAX`]; best effort (errors, e.g. on
/// kernels before 5.14, are ignored). Touches no data.
fn prefault(rt: &Rt, p: *mut u8, size: usize) -> *mut u8 {
    let w = &rt.world;
    if p.is_null() || size == 0 || size > PREFAULT_MAX {
        return p;
    }
    if w.transport(w.my_pe()).map(|t| t.name) != Some("shm") {
        return p;
    }
    const PAGE: usize = 4096;
    for pe in 0..w.n_pes() {
        if let Some(q) = w.ptr(p, pe) {
            let start = q as usize & !(PAGE - 1);
            let end = (q as usize + size).next_multiple_of(PAGE);
            // SAFETY: `[q, q+size)` is PE pe's copy of a live allocation, mapped shared in this
            // process; the rounded range stays inside the same mapped heap slice (slices are
            // page-aligned). Populating changes no contents.
            unsafe {
                libc::madvise(start as *mut c_void, end - start, libc::MADV_POPULATE_WRITE);
            }
        }
    }
    p
}

/// `shmem_malloc`: **collective**.
#[no_mangle]
pub extern "C" fn shmem_malloc(size: usize) -> *mut c_void {
    with("shmem_malloc", |rt| {
        Ok(prefault(rt, rt.world.malloc_bytes(size)?, size).cast())
    })
}

/// `shmem_malloc_with_hints`: hints are accepted and ignored.
#[no_mangle]
pub extern "C" fn shmem_malloc_with_hints(size: usize, _hints: c_long) -> *mut c_void {
    with("shmem_malloc_with_hints", |rt| {
        Ok(prefault(rt, rt.world.malloc_bytes(size)?, size).cast())
    })
}

/// `shmem_calloc`: **collective**.
#[no_mangle]
pub extern "C" fn shmem_calloc(count: usize, size: usize) -> *mut c_void {
    with("shmem_calloc", |rt| {
        let p = rt.world.calloc_bytes(count, size)?;
        Ok(prefault(rt, p, count.saturating_mul(size)).cast())
    })
}

/// `shmem_align`: **collective**.
#[no_mangle]
pub extern "C" fn shmem_align(alignment: usize, size: usize) -> *mut c_void {
    with("shmem_align", |rt| {
        Ok(prefault(rt, rt.world.align_bytes(alignment, size)?, size).cast())
    })
}

/// `shmem_realloc`: **collective**.
#[no_mangle]
pub extern "C" fn shmem_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    with("shmem_realloc", |rt| {
        Ok(prefault(rt, rt.world.realloc_bytes(ptr.cast(), size)?, size).cast())
    })
}

/// `shmem_free`: **collective**.
#[no_mangle]
pub extern "C" fn shmem_free(ptr: *mut c_void) {
    with("shmem_free", |rt| Ok(rt.world.free_bytes(ptr.cast())?))
}

/// `shmalloc` (deprecated).
#[no_mangle]
pub extern "C" fn shmalloc(size: usize) -> *mut c_void {
    shmem_malloc(size)
}

/// `shfree` (deprecated).
#[no_mangle]
pub extern "C" fn shfree(ptr: *mut c_void) {
    shmem_free(ptr)
}

/// `shrealloc` (deprecated).
#[no_mangle]
pub extern "C" fn shrealloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    shmem_realloc(ptr, size)
}

/// `shmemalign` (deprecated).
#[no_mangle]
pub extern "C" fn shmemalign(alignment: usize, size: usize) -> *mut c_void {
    shmem_align(alignment, size)
}

// ---- ordering, barriers ----

capi_core::world_entries!(my_pe: shmem_my_pe, n_pes: shmem_n_pes, fence: shmem_fence,
    quiet: shmem_quiet, barrier_all: shmem_barrier_all, sync_all: shmem_sync_all);

/// `shmem_pcontrol(level, ...)`: accepted, no effect (a hint for profiling tools, which
/// interpose it). Variadic in C; the arguments after `level` are not read, so this
/// fixed-argument definition is what a variadic call reaches (on x86-64 and AArch64 Linux a
/// variadic call passes `level` where a fixed-argument one does).
#[no_mangle]
pub extern "C" fn shmem_pcontrol(_level: c_int) {}

/// `shmem_query_initialized` (1.6): writes non-zero to `*initialized` between `shmem_init`
/// and `shmem_finalize`, else 0. Callable at any time.
///
/// # Safety
/// `initialized` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn shmem_query_initialized(initialized: *mut c_int) {
    crate::non_null("shmem_query_initialized", "initialized", initialized);
    // SAFETY: non-null, valid for one write by the caller's contract.
    unsafe { initialized.write(c_int::from(crate::initialized())) };
}

// ---- distributed locks: the lock word on PE 0 holds 0 (free) or 1 + the owner's PE ----

/// `shmem_set_lock`: **blocking**; acquires the lock (spins on PE 0's copy with back-off).
#[no_mangle]
pub extern "C" fn shmem_set_lock(lock: *mut c_long) {
    let call = "shmem_set_lock";
    let me = shmem_my_pe() as i64;
    let mut spins = 0u32;
    while ops::amo_int::<i64>(call, lock, ops::Op::Cswap(0), me + 1, 0) != 0 {
        spins = spins.saturating_add(1);
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// `shmem_clear_lock`: completes this PE's operations, then releases the lock.
#[no_mangle]
pub extern "C" fn shmem_clear_lock(lock: *mut c_long) {
    let call = "shmem_clear_lock";
    shmem_quiet();
    let me = shmem_my_pe() as i64;
    let old = ops::amo_int::<i64>(call, lock, ops::Op::Cswap((me + 1) as u64), 0, 0);
    if old != me + 1 {
        fatal(
            call,
            format!("the lock is not held by this PE (its word is {old})"),
        );
    }
}

/// `shmem_test_lock`: 0 if the lock was acquired, 1 if another PE holds it.
#[no_mangle]
pub extern "C" fn shmem_test_lock(lock: *mut c_long) -> c_int {
    let me = shmem_my_pe() as i64;
    (ops::amo_int::<i64>("shmem_test_lock", lock, ops::Op::Cswap(0), me + 1, 0) != 0) as c_int
}

// ---- signals ----

/// `shmem_signal_fetch`.
#[no_mangle]
pub extern "C" fn shmem_signal_fetch(sig: *const u64) -> u64 {
    ops::signal_fetch("shmem_signal_fetch", sig)
}

/// `shmem_signal_wait_until`.
#[no_mangle]
pub extern "C" fn shmem_signal_wait_until(sig: *mut u64, cmp: c_int, value: u64) -> u64 {
    ops::signal_wait_until("shmem_signal_wait_until", sig, cmp, value)
}

/// `shmem_signal_set`.
#[no_mangle]
pub extern "C" fn shmem_signal_set(sig: *mut u64, value: u64, pe: c_int) {
    ops::signal_op("shmem_signal_set", sig, value, SignalOp::Set, pe)
}

/// `shmem_signal_add`.
#[no_mangle]
pub extern "C" fn shmem_signal_add(sig: *mut u64, value: u64, pe: c_int) {
    ops::signal_op("shmem_signal_add", sig, value, SignalOp::Add, pe)
}

/// `shmem_ctx_signal_set`.
#[no_mangle]
pub extern "C" fn shmem_ctx_signal_set(ctx: *mut c_void, sig: *mut u64, value: u64, pe: c_int) {
    ops::ctx("shmem_ctx_signal_set", ctx);
    ops::signal_op("shmem_ctx_signal_set", sig, value, SignalOp::Set, pe)
}

/// `shmem_ctx_signal_add`.
#[no_mangle]
pub extern "C" fn shmem_ctx_signal_add(ctx: *mut c_void, sig: *mut u64, value: u64, pe: c_int) {
    ops::ctx("shmem_ctx_signal_add", ctx);
    ops::signal_op("shmem_ctx_signal_add", sig, value, SignalOp::Add, pe)
}
