//! Queries, symmetric memory, ordering and the world barriers.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::{current, pe_of, report, with, CResult};

/// `rshmem_my_pe`: **local**.
#[no_mangle]
pub extern "C" fn rshmem_my_pe() -> c_int {
    with("rshmem_my_pe", |rt| Ok(rt.world.my_pe() as c_int))
}

/// `rshmem_n_pes`: **local**.
#[no_mangle]
pub extern "C" fn rshmem_n_pes() -> c_int {
    with("rshmem_n_pes", |rt| Ok(rt.world.n_pes() as c_int))
}

/// `rshmem_ptr`: **local**; NULL when PE `pe`'s copy is not load/store reachable.
#[no_mangle]
pub extern "C" fn rshmem_ptr(ptr: *const c_void, pe: c_int) -> *mut c_void {
    with("rshmem_ptr", |rt| {
        if pe < 0 || pe as usize >= rt.world.n_pes() {
            return Ok(std::ptr::null_mut());
        }
        Ok(rt
            .world
            .ptr(ptr.cast::<u8>(), pe as usize)
            .map_or(std::ptr::null_mut(), |p| p.cast()))
    })
}

/// Runs an allocation: the pointer, or NULL after printing the failure.
fn alloc(call: &'static str, f: impl FnOnce(&rt::World) -> CResult<*mut u8>) -> *mut c_void {
    let r = catch_unwind(AssertUnwindSafe(|| f(&current()?.world)));
    match r {
        Ok(Ok(p)) => p.cast(),
        Ok(Err(e)) => {
            report(call, e);
            std::ptr::null_mut()
        }
        Err(_) => {
            report(call, "internal error (a panic inside rshmem)");
            std::ptr::null_mut()
        }
    }
}

/// `rshmem_malloc`: **collective**; NULL (printed) on failure.
#[no_mangle]
pub extern "C" fn rshmem_malloc(size: usize) -> *mut c_void {
    alloc("rshmem_malloc", |w| Ok(w.malloc_bytes(size)?))
}

/// `rshmem_calloc`: **collective**; zeroed.
#[no_mangle]
pub extern "C" fn rshmem_calloc(count: usize, size: usize) -> *mut c_void {
    alloc("rshmem_calloc", |w| Ok(w.calloc_bytes(count, size)?))
}

/// `rshmem_align`: **collective**.
#[no_mangle]
pub extern "C" fn rshmem_align(alignment: usize, size: usize) -> *mut c_void {
    alloc("rshmem_align", |w| Ok(w.align_bytes(alignment, size)?))
}

/// `rshmem_free`: **collective**; failures end the job.
#[no_mangle]
pub extern "C" fn rshmem_free(ptr: *mut c_void) {
    with("rshmem_free", |rt| Ok(rt.world.free_bytes(ptr.cast())?))
}

/// `rshmem_fence`: **one-sided**.
#[no_mangle]
pub extern "C" fn rshmem_fence() {
    with("rshmem_fence", |rt| {
        rt.world.fence();
        Ok(())
    })
}

/// `rshmem_quiet`: **one-sided**.
#[no_mangle]
pub extern "C" fn rshmem_quiet() {
    with("rshmem_quiet", |rt| Ok(rt.world.quiet()?))
}

/// `rshmem_barrier_all`: **collective**.
#[no_mangle]
pub extern "C" fn rshmem_barrier_all() {
    with("rshmem_barrier_all", |rt| Ok(rt.world.barrier_all()?))
}

/// `rshmem_sync_all`: **collective**.
#[no_mangle]
pub extern "C" fn rshmem_sync_all() {
    with("rshmem_sync_all", |rt| Ok(rt.world.sync_all()?))
}

/// Checks a PE number for the typed calls (kept here so every family reports it the same way).
pub fn pe(rt: &crate::Rt, pe: c_int) -> CResult<usize> {
    pe_of(&rt.world, pe)
}
