//! # rshmem-c
//!
//! The C API of rshmem (`librshmem.so` / `librshmem.a` with `capi/include/rshmem.h`), for C
//! and CUDA C++ programs. It runs on the GPU backend when the PE has a GPU and on the CPU
//! backend otherwise. Reference: `docs/c-cuda-api.md`.
//!
//! One runtime per process lives in a `capi_core::Global` (published by `rshmem_init*`, taken
//! back by `rshmem_finalize` under its lifecycle lock). What this library shares with the
//! OpenSHMEM library (`capi/`) is in the C core crate `capi/core` (`rshmem-capi-core`): the
//! runtime holder, error reporting, argument checks, the put/get and set-wait bodies and the type
//! tables (docs/capi.md, "One C core under both C libraries"). Every C entry point runs inside
//! `catch_unwind`, so no panic crosses the C boundary. Failures are printed as
//! `rshmem: PE <pe>: <call>: <cause>`; calls that return `int` status codes return the code
//! ([`status`]), the others end the process with status 1 ([`with`] / [`fatal`]), which makes
//! the launcher stop the job.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::panic::catch_unwind;
use std::sync::Mutex;

pub use capi_core::{fail, fatal, guarded_status, invalid, report, CResult, Code, Fail};
use capi_core::{Abi, Global};

mod ep;
mod init;
mod memory;
mod stream;
mod team;
mod typed;

/// This library's wording of messages (`RSHMEM_*` constants).
const ABI: Abi = Abi::Rshmem;

/// The running runtime of this process.
pub struct Rt {
    /// The rshmem world.
    pub world: rt::World,
    /// Teams made by splits, by device handle (the predefined ones are not here).
    pub teams: Mutex<HashMap<i32, rt::Team>>,
    /// Local buffers of `rshmemx_buffer_register`: (start, length), sorted by start.
    pub buffers: Mutex<Vec<(usize, usize)>>,
}

/// The running runtime: published once by init, taken back by `rshmem_finalize` (see
/// [`Global`]).
static RT: Global<Rt> = Global::new();

const NOT_INIT: &str = "called before rshmem_init (or after rshmem_finalize)";

/// The running runtime, or the not-initialized error.
pub(crate) fn current() -> CResult<&'static Rt> {
    match RT.get() {
        Some(rt) => Ok(rt),
        None => fail(Code::NotInitialized, NOT_INIT),
    }
}

/// Runs `f` with the runtime; any error or panic ends the job, naming `call`.
pub fn with<R>(call: &'static str, f: impl FnOnce(&Rt) -> CResult<R>) -> R {
    capi_core::guarded(call, || f(current()?))
}

/// Runs `f` with the runtime and returns its status code; failures are printed, never fatal.
pub fn status(call: &'static str, f: impl FnOnce(&Rt) -> CResult<()>) -> c_int {
    guarded_status(call, || f(current()?))
}

/// `rshmemi_report`: prints `rshmem: PE <pe>: <call>: <msg>` on stderr (used by rshmem.h's
/// inline functions).
///
/// # Safety
/// `call` and `msg` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn rshmemi_report(call: *const c_char, msg: *const c_char) {
    let text = |p: *const c_char| {
        if p.is_null() {
            "(null)".to_string()
        } else {
            // SAFETY: the caller passes a NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let _ = catch_unwind(|| report(&text(call), text(msg)));
}

/// Converts a C PE number.
pub fn pe_of(world: &rt::World, pe: c_int) -> CResult<usize> {
    capi_core::pe_in(world.n_pes(), pe)
}

/// Converts a C comparison constant (the runtime's one table of codes, `rt::wire`).
pub fn cmp_of(cmp: c_int) -> CResult<rt::Cmp> {
    ABI.cmp_of(cmp)
}

/// Converts a C signal operation (`rt::wire`).
pub fn sigop_of(op: c_int) -> CResult<rt::SignalOp> {
    ABI.sigop_of(op)
}
