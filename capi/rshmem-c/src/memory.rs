//! Queries, symmetric memory and ordering (my_pe, n_pes, fence, quiet, barrier_all and sync_all
//! come from `capi_core::world_entries!`, shared with libshmem).

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::{current, pe_of, report, with, CResult};

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

capi_core::world_entries!(my_pe: rshmem_my_pe, n_pes: rshmem_n_pes, fence: rshmem_fence,
    quiet: rshmem_quiet, barrier_all: rshmem_barrier_all, sync_all: rshmem_sync_all);

/// Checks a PE number for the typed calls (kept here so every family reports it the same way).
pub fn pe(rt: &crate::Rt, pe: c_int) -> CResult<usize> {
    pe_of(&rt.world, pe)
}

/// `rshmemx_cumodule_init`: **local**; the device state reaches a module the program loaded
/// itself (see `rt::device::units::init_module`).
#[no_mangle]
pub extern "C" fn rshmemx_cumodule_init(module: *mut c_void) -> c_int {
    crate::guarded_status("rshmemx_cumodule_init", || {
        current()?;
        Ok(rt::device::units::init_module(module as usize)?)
    })
}

/// `rshmemx_cumodule_finalize`: **local**; zeroes the module's state and stops updating it.
#[no_mangle]
pub extern "C" fn rshmemx_cumodule_finalize(module: *mut c_void) -> c_int {
    crate::guarded_status("rshmemx_cumodule_finalize", || {
        current()?;
        Ok(rt::device::units::finalize_module(module as usize)?)
    })
}

/// Adds `[addr, addr+len)` to `list` (sorted by start): refused when empty, NULL, wrapping,
/// or overlapping a registered range.
fn add_buffer(list: &mut Vec<(usize, usize)>, addr: usize, len: usize) -> Result<(), String> {
    if addr == 0 {
        return Err("addr is NULL".into());
    }
    if len == 0 {
        return Err("length is 0".into());
    }
    let Some(end) = addr.checked_add(len) else {
        return Err(format!(
            "the range {addr:#x}+{len} wraps around the address space"
        ));
    };
    if let Some(&(s, l)) = list.iter().find(|&&(s, l)| addr < s + l && s < end) {
        return Err(format!(
            "the range {addr:#x}+{len} overlaps the registered buffer {s:#x}+{l} \
             (unregister it first)"
        ));
    }
    let at = list.partition_point(|&(s, _)| s < addr);
    list.insert(at, (addr, len));
    Ok(())
}

/// Removes the registration starting at `addr`.
fn remove_buffer(list: &mut Vec<(usize, usize)>, addr: usize) -> Result<(), String> {
    match list.iter().position(|&(s, _)| s == addr) {
        Some(i) => {
            list.remove(i);
            Ok(())
        }
        None => Err(format!(
            "{addr:#x} is not the start of a buffer registered with rshmemx_buffer_register"
        )),
    }
}

/// `rshmemx_buffer_register`: **local**. Registers `[addr, addr+length)` of this process as a
/// local source or destination of RMA (NVSHMEM's `nvshmemx_buffer_register`). rshmem's
/// transports need no registration of local buffers (host calls copy from and to them with the
/// CPU or the copy engine), so this only checks the range (not NULL, not empty, not inside the
/// symmetric heap, which needs none, no overlap with a registered buffer) and records it for
/// `rshmemx_buffer_unregister`.
#[no_mangle]
pub extern "C" fn rshmemx_buffer_register(addr: *mut c_void, length: usize) -> c_int {
    crate::status("rshmemx_buffer_register", |rt| {
        let me = rt.world.my_pe();
        if !addr.is_null() && rt.world.ptr(addr.cast::<u8>(), me).is_some() {
            return crate::fail(
                crate::Code::InvalidValue,
                "addr is symmetric memory, which needs no registration",
            );
        }
        let mut list = rt.buffers.lock().unwrap_or_else(|e| e.into_inner());
        add_buffer(&mut list, addr as usize, length)
            .or_else(|why| crate::fail(crate::Code::InvalidValue, why))
    })
}

/// `rshmemx_buffer_unregister`: **local**. Ends the registration that starts at `addr`.
#[no_mangle]
pub extern "C" fn rshmemx_buffer_unregister(addr: *mut c_void) -> c_int {
    crate::status("rshmemx_buffer_unregister", |rt| {
        let mut list = rt.buffers.lock().unwrap_or_else(|e| e.into_inner());
        remove_buffer(&mut list, addr as usize)
            .or_else(|why| crate::fail(crate::Code::InvalidValue, why))
    })
}

/// `rshmemx_buffer_unregister_all`: **local**. Ends every registration of this PE.
#[no_mangle]
pub extern "C" fn rshmemx_buffer_unregister_all() {
    let _ = crate::status("rshmemx_buffer_unregister_all", |rt| {
        rt.buffers.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Ok(())
    });
}

/// `rshmemx_buffer_register_symmetric`: **collective**. Maps every PE's CUDA VMM buffer `buf`
/// of `size` bytes (the same size on every PE) at one symmetric address and returns it, or
/// NULL after printing the cause (NVSHMEM's `nvshmemx_buffer_register_symmetric`; see
/// `World::register_buffer_symmetric`). `flags` must be 0, as in NVSHMEM.
#[no_mangle]
pub extern "C" fn rshmemx_buffer_register_symmetric(
    buf: *mut c_void,
    size: usize,
    flags: c_int,
) -> *mut c_void {
    alloc("rshmemx_buffer_register_symmetric", |w| {
        if flags != 0 {
            // Refused before the collective part: every PE passes the same flags in a correct
            // program, and a PE that does not would leave the others waiting, so say so.
            return crate::invalid(format!(
                "flags is {flags}; only 0 is supported (as in NVSHMEM); the other PEs of a job \
                 that passes 0 there wait for this one"
            ));
        }
        Ok(w.register_buffer_symmetric(buf, size)?.cast())
    })
}

/// `rshmemx_buffer_unregister_symmetric`: **collective**. Ends the registration of
/// `rshmemx_buffer_register_symmetric` that returned `mmap_ptr` for `size` bytes. Returns 0, or
/// an error code after printing the cause.
#[no_mangle]
pub extern "C" fn rshmemx_buffer_unregister_symmetric(mmap_ptr: *mut c_void, size: usize) -> c_int {
    crate::status("rshmemx_buffer_unregister_symmetric", |rt| {
        Ok(rt.world.unregister_buffer_symmetric(mmap_ptr, size)?)
    })
}
