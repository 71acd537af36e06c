//! # rshmem-capi-core (internal)
//!
//! The C core that rshmem's two C libraries share: `libshmem` (the OpenSHMEM ABI, crate
//! `rshmem-capi`, `capi/`) and `librshmem` (rshmem's own C API, crate `rshmem-c`,
//! `capi/rshmem-c/`). Each library is a `cdylib` that links its own copy of this crate, so the
//! process-wide state below exists once per library. It holds what both need and nothing that
//! names one ABI's functions:
//!
//! - [`Global`]: the one runtime of the process (published by init, taken back by finalize,
//!   read lock-free by every entry point) and the lifecycle lock;
//! - error reporting: [`Fail`], [`Code`] (`rshmem_error_t`), [`report`], [`fatal`],
//!   [`guarded`] (a failure ends the job) and [`guarded_status`] (a failure is a status code);
//!   no panic crosses the C boundary;
//! - argument checks ([`args`]): PE numbers, local buffers as slices, comparison and signal
//!   codes (with each ABI's wording, [`Abi`]), the set waits and tests;
//! - the type tables of the typed calls ([`types`]): one table of C type names to Rust
//!   element types and the per-family lists, as `macro_rules!` both libraries expand.
//! - the whole-job calls both ABIs have (`my_pe`, `n_pes`, `fence`, `quiet`, `barrier_all`,
//!   `sync_all`): [`world_entries!`], which each library expands with its own names.
//!
//! Every message has the form `rshmem: PE <pe>: <call>: <cause>`; the libraries pass the C
//! call's name.

use std::ffi::c_int;
use std::fmt::Display;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

pub mod args;
pub mod types;

pub use args::{dst_slice, host_put_signal, host_rma, nonneg, pe_in, src_slice, Abi, Way};

/// The runtime crate, for the exported macros (`$crate::rt::F16`).
#[doc(hidden)]
pub use rshmem as rt;

/// The C return codes (`rshmem_error_t` in rshmem.h; libshmem reports no codes).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// `RSHMEM_SUCCESS`.
    Success = 0,
    /// `RSHMEM_ERROR_INVALID_VALUE`.
    InvalidValue = 1,
    /// `RSHMEM_ERROR_NOT_INITIALIZED`.
    NotInitialized = 2,
    /// `RSHMEM_ERROR_UNSUPPORTED`.
    Unsupported = 3,
    /// `RSHMEM_ERROR_OUT_OF_MEMORY`.
    OutOfMemory = 4,
    /// `RSHMEM_ERROR_CUDA`.
    Cuda = 5,
    /// `RSHMEM_ERROR_TIMEOUT`.
    Timeout = 6,
    /// `RSHMEM_ERROR_PE_LOST`.
    PeLost = 7,
    /// `RSHMEM_ERROR_BOOTSTRAP`.
    Bootstrap = 8,
    /// `RSHMEM_ERROR_SYSTEM`.
    System = 9,
    /// `RSHMEM_ERROR_STATE`.
    State = 10,
    /// `RSHMEM_ERROR_INTERNAL`.
    Internal = 11,
}

/// What a failing entry point reports.
#[derive(Debug)]
pub enum Fail {
    /// An error from the runtime.
    Rt(rshmem::Error),
    /// An error found by the C layer, with its code.
    Msg(Code, String),
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
            Fail::Msg(_, m) => f.write_str(m),
        }
    }
}

impl Fail {
    /// The C code of this failure.
    pub fn code(&self) -> Code {
        use rshmem::Error as E;
        match self {
            Fail::Msg(c, _) => *c,
            Fail::Rt(e) => match e {
                E::InvalidArgument { .. } | E::NotSymmetric { .. } => Code::InvalidValue,
                E::AsymmetricCall { .. } | E::State { .. } => Code::State,
                E::OutOfMemory { .. } => Code::OutOfMemory,
                E::Timeout { .. } => Code::Timeout,
                E::PeerLost { .. } => Code::PeLost,
                E::Bootstrap(_) => Code::Bootstrap,
                E::Os { .. } => Code::System,
                E::Cuda { .. } | E::Driver(_) => Code::Cuda,
                E::Unsupported { .. } => Code::Unsupported,
                _ => Code::Internal,
            },
        }
    }
}

/// Result of the C layer's helpers.
pub type CResult<T> = Result<T, Fail>;

/// A C-layer error with `code`.
pub fn fail<T>(code: Code, m: impl Into<String>) -> CResult<T> {
    Err(Fail::Msg(code, m.into()))
}

/// An invalid-argument error (the C layer's usual error).
pub fn invalid<T>(m: impl Into<String>) -> CResult<T> {
    fail(Code::InvalidValue, m)
}

/// The message of a panic caught at the C boundary.
const PANICKED: &str = "internal error (a panic inside rshmem)";

// ------------------------------------------------------------------------------------------
// The runtime of the process
// ------------------------------------------------------------------------------------------

/// This PE's number while a runtime is published (`usize::MAX`: none), for messages.
static MY_PE: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The one running runtime `R` of a library: published once by init, taken back by finalize.
/// Entry points read the pointer without a lock (a lock's two atomic operations per call were
/// a third of the cost of a remote atomic); OpenSHMEM and NVSHMEM forbid calls that race with
/// finalize, so no reader outlives the `R`. Init and finalize serialize on [`Global::lock`].
pub struct Global<R> {
    ptr: AtomicPtr<R>,
    lifecycle: Mutex<()>,
}

impl<R: Send + Sync> Global<R> {
    /// No runtime yet.
    pub const fn new() -> Self {
        Global {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            lifecycle: Mutex::new(()),
        }
    }

    /// The running runtime, if any.
    pub fn get(&self) -> Option<&R> {
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a leaked `Box<R>` (from `publish`) that stays alive
        // until `take`, which the program may not run concurrently with other calls.
        unsafe { p.as_ref() }
    }

    /// Whether a runtime is running (between init and finalize).
    pub fn is_set(&self) -> bool {
        !self.ptr.load(Ordering::Acquire).is_null()
    }

    /// Serializes init and finalize (a poisoned lock is taken over: it guards no data).
    pub fn lock(&self) -> MutexGuard<'_, ()> {
        self.lifecycle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes `rt`, the runtime of PE `my_pe` (call with [`Global::lock`] held, when
    /// [`Global::is_set`] is false).
    pub fn publish(&self, rt: Box<R>, my_pe: usize) {
        MY_PE.store(my_pe, Ordering::Release);
        self.ptr.store(Box::into_raw(rt), Ordering::Release);
    }

    /// Takes the runtime back (call with [`Global::lock`] held); `None` if none was running.
    pub fn take(&self) -> Option<Box<R>> {
        let p = self.ptr.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if p.is_null() {
            return None;
        }
        MY_PE.store(usize::MAX, Ordering::Release);
        // SAFETY: a non-null pointer came from `Box::into_raw` in `publish` and is taken back
        // exactly once (the swap).
        Some(unsafe { Box::from_raw(p) })
    }
}

impl<R: Send + Sync> Default for Global<R> {
    fn default() -> Self {
        Self::new()
    }
}

// ------------------------------------------------------------------------------------------
// Reporting
// ------------------------------------------------------------------------------------------

/// This PE's number for messages: the running world's, else the launcher's, else `?`.
fn pe_label() -> String {
    match MY_PE.load(Ordering::Acquire) {
        usize::MAX => rshmem::config::launcher_rank().map_or_else(|| "?".into(), |r| r.to_string()),
        pe => pe.to_string(),
    }
}

/// Writes `line` to stderr with one `write` (the lines of several PEs sharing a pipe never
/// interleave: `writeln!` on the unbuffered stderr made one `write` per piece).
fn say(line: String) {
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Prints `rshmem: PE <pe>: <call>: <what>` on stderr (a failure that is not fatal). A global
/// exit that another PE asked for and that is pending here ends the process with its status
/// first (the failure is then most likely that PE leaving on the exit).
pub fn report(call: &str, what: impl Display) {
    rshmem::exit::honour_pending();
    say(format!("rshmem: PE {}: {call}: {what}\n", pe_label()));
}

/// Prints `rshmem: PE <pe>: <call>: <what>; aborting the job`, flushes C stdio and ends the
/// process with status 1; the launcher then stops the other PEs (like `shmem_global_exit(1)`).
/// A pending global exit of another PE wins, as in [`report`].
#[cold]
pub fn fatal(call: &str, what: impl Display) -> ! {
    rshmem::exit::honour_pending();
    say(format!(
        "rshmem: PE {}: {call}: {what}; aborting the job\n",
        pe_label()
    ));
    exit_now(1)
}

/// Flushes Rust's and C's stdout and ends the process at once with `status`.
pub fn exit_now(status: c_int) -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: fflush(NULL) flushes every C output stream; _exit ends the process without running
    // atexit handlers (which might call back into this library while it holds its lock).
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(status)
    }
}

/// Runs `f`; an error or a panic ends the job naming `call` ([`fatal`]).
pub fn guarded<R>(call: &str, f: impl FnOnce() -> CResult<R>) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            settle(&e);
            fatal(call, e)
        }
        Err(_) => fatal(call, PANICKED),
    }
}

/// How long a call that failed because a peer is gone watches for a global exit of another PE
/// before it reports the failure (the exit's status then wins; see `rshmem::exit`).
const GLOBAL_EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// Before a failure is reported: when a peer is gone, a global exit that another PE asked for may
/// be on its way to this PE; it ends the process with its status.
fn settle(e: &Fail) {
    if let Fail::Rt(rshmem::Error::PeerLost { .. }) = e {
        rshmem::exit::await_pending(GLOBAL_EXIT_GRACE);
    }
}

/// Runs `f` and returns its status code (`RSHMEM_SUCCESS` or the failure's [`Code`]); a
/// failure is printed ([`report`]), never fatal.
pub fn guarded_status(call: &str, f: impl FnOnce() -> CResult<()>) -> c_int {
    let e = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return Code::Success as c_int,
        Ok(Err(e)) => e,
        Err(_) => Fail::Msg(Code::Internal, PANICKED.into()),
    };
    settle(&e);
    report(call, &e);
    e.code() as c_int
}
