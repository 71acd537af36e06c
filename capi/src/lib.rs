//! # rshmem-capi
//!
//! The OpenSHMEM 1.6 C ABI of rshmem: `libshmem.so` / `libshmem.a` with `include/shmem.h`.
//!
//! One runtime instance per process lives in a global `AtomicPtr` (set by `shmem_init`, cleared
//! by `shmem_finalize` under a lifecycle mutex); every C entry point loads it, converts its C arguments and calls the rshmem [`rshmem::World`]. No
//! panic crosses the C boundary: each entry point runs inside `catch_unwind`, and every error
//! (bad PE, address outside the symmetric heap and data segment, misaligned atomic, timeout, a
//! peer gone, a call before `shmem_init`) is printed to stderr naming the C call and ends the
//! job like `shmem_global_exit(1)`.
//!
//! Symmetric objects are what `shmem_malloc` and friends return and, as in OpenSHMEM, the
//! global and static variables of the program: at `shmem_init` the program's writable data
//! segment is moved onto shared memory and registered with the runtime as a symmetric region,
//! which every PE of the host maps (see [`seg`]). Every call, on heap or data-segment
//! addresses, goes to the runtime.

use std::ffi::c_int;
use std::fmt::Display;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

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

/// What a failing entry point reports.
#[derive(Debug)]
pub enum Fail {
    /// An error from the runtime.
    Rt(rshmem::Error),
    /// An error found by the C layer.
    Msg(String),
}

impl From<rshmem::Error> for Fail {
    fn from(e: rshmem::Error) -> Self {
        Fail::Rt(e)
    }
}

impl Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Rt(e) => write!(f, "{e}"),
            Fail::Msg(m) => f.write_str(m),
        }
    }
}

/// Result of the C layer's helpers.
pub type CResult<T> = Result<T, Fail>;

/// Shorthand for a C-layer error.
pub fn msg<T>(m: impl Into<String>) -> CResult<T> {
    Err(Fail::Msg(m.into()))
}

/// The running runtime of this process.
pub struct Rt {
    /// The rshmem world (the program's data segment is one of its symmetric regions).
    pub world: rshmem::World,
    /// The thread level granted by `shmem_init_thread`.
    pub thread_level: c_int,
}

/// The running runtime: published once by `shmem_init`, taken back by `shmem_finalize`.
/// Entry points read the pointer without a lock (a lock's two atomic operations per call were
/// a third of the cost of a remote atomic); OpenSHMEM forbids calls that race with
/// `shmem_finalize`, so no reader can outlive the `Rt`.
static RT: AtomicPtr<Rt> = AtomicPtr::new(std::ptr::null_mut());
// Entry points share the `Rt` between threads through the pointer: it must be Send + Sync.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Rt>();
};

/// Whether the runtime is running (between `shmem_init` and `shmem_finalize`).
pub(crate) fn initialized() -> bool {
    !RT.load(Ordering::Acquire).is_null()
}

/// Serializes `shmem_init` and `shmem_finalize`.
static LIFECYCLE: Mutex<()> = Mutex::new(());

/// This PE's number for messages: the running world's, else the launcher's, else `?`.
fn pe_label() -> String {
    let p = RT.load(Ordering::Acquire);
    // SAFETY: as in `with`: a non-null pointer is a live leaked `Box<Rt>`.
    if let Some(rt) = unsafe { p.as_ref() } {
        return rt.world.my_pe().to_string();
    }
    rshmem::config::launcher_rank().map_or_else(|| "?".into(), |r| r.to_string())
}

/// Writes `line` to stderr with one `write` (the lines of several PEs sharing a pipe never
/// interleave: `writeln!` on the unbuffered stderr made one `write` per piece).
fn say(line: String) {
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Prints `rshmem: PE <pe>: <call>: <what>` on stderr (a failure that is not fatal).
pub fn report(call: &str, what: impl Display) {
    say(format!("rshmem: PE {}: {call}: {what}\n", pe_label()));
}

/// Prints `call: what` to stderr, flushes C stdio and ends the process with status 1; the
/// launcher then stops the other PEs (like `shmem_global_exit(1)`).
#[cold]
pub fn fatal(call: &str, what: impl Display) -> ! {
    say(format!(
        "rshmem: PE {}: {call}: {what}; aborting the job\n",
        pe_label()
    ));
    exit_now(1)
}

/// Flushes C stdio and ends the process at once with `status`.
pub fn exit_now(status: c_int) -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: fflush(NULL) flushes every C output stream; _exit ends the process without running
    // atexit handlers (which might call back into this library while it holds its lock).
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(status)
    }
}

/// Runs `f` with the runtime; any error or panic is fatal for the job, naming `call`.
pub fn with<R>(call: &'static str, f: impl FnOnce(&Rt) -> CResult<R>) -> R {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ctx = ctx::enter();
        let p = RT.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a leaked `Box<Rt>` that stays alive until
        // `shmem_finalize`, which the program may not run concurrently with other calls.
        match unsafe { p.as_ref() } {
            None => msg("called before shmem_init (or after shmem_finalize)"),
            Some(rt) => f(rt),
        }
    }));
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => fatal(call, e),
        Err(_) => fatal(call, "internal error (a panic inside rshmem)"),
    }
}

/// Runs `f` without the runtime (for calls allowed before init); panics are fatal.
pub fn guarded<R>(call: &'static str, f: impl FnOnce() -> CResult<R>) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => fatal(call, e),
        Err(_) => fatal(call, "internal error (a panic inside rshmem)"),
    }
}

/// Starts the runtime if it is not running (idempotent like `shmem_init` after `start_pes`).
pub(crate) fn init_runtime(call: &'static str, level: c_int) -> CResult<()> {
    let _g = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    if !RT.load(Ordering::Acquire).is_null() {
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
    let rt = Box::new(Rt {
        world,
        thread_level: level,
    });
    RT.store(Box::into_raw(rt), Ordering::Release);
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
    let _g = LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
    let p = RT.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: a non-null pointer came from `Box::into_raw` in `init_runtime` and is taken
    // back exactly once (the swap).
    let rt = (!p.is_null()).then(|| unsafe { Box::from_raw(p) });
    match rt {
        None => Ok(()),
        Some(rt) => {
            coll::clear();
            ctx::clear();
            rt.world.finalize()?;
            Ok(())
        }
    }
}
