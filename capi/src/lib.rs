//! # rshmem-capi
//!
//! The OpenSHMEM 1.6 C ABI of rshmem: `libshmem.so` / `libshmem.a` with `include/shmem.h`.
//!
//! One runtime instance per process lives in a `capi_core::Global` (set by `shmem_init`,
//! cleared by `shmem_finalize` under its lifecycle lock); every C entry point loads it, converts
//! its C arguments and calls the rshmem [`rshmem::World`]. No panic crosses the C boundary: each
//! entry point runs inside `catch_unwind`, and every error (bad PE, address outside the
//! symmetric heap and data segment, misaligned atomic, timeout, a peer gone, a call before
//! `shmem_init`) is printed to stderr naming the C call and ends the job like
//! `shmem_global_exit(1)`. What this library shares with librshmem (`capi/rshmem-c`) is in the
//! C core crate `capi/core` (`rshmem-capi-core`, docs/capi.md).
//!
//! Symmetric objects are what `shmem_malloc` and friends return and, as in OpenSHMEM, the
//! global and static variables of the program: at `shmem_init` the program's writable data
//! segment is moved onto shared memory and registered with the runtime as a symmetric region,
//! which every PE of the host maps (see [`seg`]). Every call, on heap or data-segment
//! addresses, goes to the runtime.

use std::ffi::c_int;

pub use capi_core::{exit_now, fatal, guarded, report, CResult, Fail};
use capi_core::{Abi, Global};

mod api;
mod coll;
mod combine;
mod ctx;
#[cfg(target_arch = "x86_64")]
mod longdouble;
pub mod ops;
mod profiling;
pub mod seg;
mod typed;

/// This library's wording of messages (`SHMEM_*` constants).
const ABI: Abi = Abi::Shmem;

/// Shorthand for a C-layer error (libshmem reports no codes: every error is fatal).
pub fn msg<T>(m: impl Into<String>) -> CResult<T> {
    capi_core::invalid(m)
}

/// Ends the job naming `call` when its pointer argument `what` (an out-pointer the call must
/// write) is NULL.
pub(crate) fn non_null<T>(call: &str, what: &str, p: *const T) {
    if p.is_null() {
        capi_core::fatal(call, format!("{what} is NULL"));
    }
}

/// The running runtime of this process.
pub struct Rt {
    /// The rshmem world (the program's data segment is one of its symmetric regions).
    pub world: rshmem::World,
    /// The thread level granted by `shmem_init_thread`.
    pub thread_level: c_int,
}

/// The running runtime: published once by `shmem_init`, taken back by `shmem_finalize` (see
/// [`Global`]).
static RT: Global<Rt> = Global::new();

/// Whether the runtime is running (between `shmem_init` and `shmem_finalize`).
pub(crate) fn initialized() -> bool {
    RT.is_set()
}

/// Runs `f` with the runtime; any error or panic is fatal for the job, naming `call`.
pub fn with<R>(call: &'static str, f: impl FnOnce(&Rt) -> CResult<R>) -> R {
    guarded(call, || {
        let _ctx = ctx::enter();
        match RT.get() {
            None => msg("called before shmem_init (or after shmem_finalize)"),
            Some(rt) => f(rt),
        }
    })
}

/// Starts the runtime if it is not running (idempotent like `shmem_init` after `start_pes`).
pub(crate) fn init_runtime(call: &'static str, level: c_int) -> CResult<()> {
    let _g = RT.lock();
    if RT.is_set() {
        return Ok(());
    }
    // Move the data segment onto shared memory before any other thread exists.
    let local = seg::prepare(call);
    rshmem::exit::install();
    // A C program loads and stores its symmetric heap directly: keep the heap in host memory
    // unless the user asked for the GPU backend explicitly.
    if std::env::var_os("RSHMEM_BACKEND").is_none() {
        std::env::set_var("RSHMEM_BACKEND", "cpu");
    }
    let world = rshmem::init()?;
    seg::register(&world, local)?;
    rshmem::exit::set_pids(pids(&world)?);
    let me = world.my_pe();
    let rt = Box::new(Rt {
        world,
        thread_level: level,
    });
    RT.publish(rt, me);
    Ok(())
}

/// **Collective.** The process ids of every PE (for `shmem_global_exit`).
fn pids(world: &rshmem::World) -> CResult<Vec<libc::pid_t>> {
    let n = world.n_pes();
    let mine = world.calloc::<i64>(1)?;
    let all = world.calloc::<i64>(n)?;
    // SAFETY: getpid has no preconditions.
    mine.write(0, i64::from(unsafe { libc::getpid() }))?;
    world.fcollect(&world.team_world(), all.as_ptr(), mine.as_ptr(), 1)?;
    let v = all.to_vec()?;
    world.free(all)?;
    world.free(mine)?;
    Ok(v.into_iter().map(|p| p as libc::pid_t).collect())
}

/// Stops the runtime (collective).
pub(crate) fn finalize_runtime() -> CResult<()> {
    let _g = RT.lock();
    match RT.take() {
        None => Ok(()),
        Some(rt) => {
            coll::clear();
            ctx::clear();
            rt.world.finalize()?;
            Ok(())
        }
    }
}
