//! # rshmem-c
//!
//! The C API of rshmem (`librshmem.so` / `librshmem.a` with `capi/include/rshmem.h`), for C
//! and CUDA C++ programs. It runs on the GPU backend when the PE has a GPU and on the CPU
//! backend otherwise. Reference: `docs/c-cuda-api.md`.
//!
//! One runtime per process lives in a global `AtomicPtr` (published by `rshmem_init*`, taken
//! back by `rshmem_finalize` under a lifecycle mutex), as in the OpenSHMEM ABI crate. Every C
//! entry point runs inside `catch_unwind`, so no panic crosses the C boundary. Failures are
//! printed as `rshmem: PE <pe>: <call>: <cause>`; calls that return `int` status codes return
//! the code ([`status`]), the others end the process with status 1 ([`with`] / [`fatal`]),
//! which makes the launcher stop the job.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::fmt::Display;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

#[macro_use]
mod types;
mod ep;
mod init;
mod memory;
mod stream;
mod team;
mod typed;

/// The C return codes (`rshmem_error_t` in rshmem.h).
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
    Rt(rt::Error),
    /// An error found by the C layer, with its code.
    Msg(Code, String),
}

impl From<rt::Error> for Fail {
    fn from(e: rt::Error) -> Self {
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
        match self {
            Fail::Msg(c, _) => *c,
            Fail::Rt(e) => match e {
                rt::Error::InvalidArgument { .. } | rt::Error::NotSymmetric { .. } => {
                    Code::InvalidValue
                }
                rt::Error::AsymmetricCall { .. } | rt::Error::State { .. } => Code::State,
                rt::Error::OutOfMemory { .. } => Code::OutOfMemory,
                rt::Error::Timeout { .. } => Code::Timeout,
                rt::Error::PeerLost { .. } => Code::PeLost,
                rt::Error::Bootstrap(_) => Code::Bootstrap,
                rt::Error::Os { .. } => Code::System,
                rt::Error::Cuda { .. } | rt::Error::Driver(_) => Code::Cuda,
                rt::Error::Unsupported { .. } => Code::Unsupported,
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

/// An invalid-argument error.
pub fn invalid<T>(m: impl Into<String>) -> CResult<T> {
    fail(Code::InvalidValue, m)
}

/// The running runtime of this process.
pub struct Rt {
    /// The rshmem world.
    pub world: rt::World,
    /// Teams made by splits, by device handle (the predefined ones are not here).
    pub teams: Mutex<HashMap<i32, rt::Team>>,
    /// Local buffers of `rshmemx_buffer_register`: (start, length), sorted by start.
    pub buffers: Mutex<Vec<(usize, usize)>>,
}

/// The running runtime: published once by init, taken back by `rshmem_finalize`. Entry points
/// read the pointer without a lock; calls that race with `rshmem_finalize` are forbidden (as
/// in OpenSHMEM and NVSHMEM), so no reader outlives the `Rt`.
static RT: AtomicPtr<Rt> = AtomicPtr::new(std::ptr::null_mut());
// Entry points share the `Rt` between threads through the pointer: it must be Send + Sync.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Rt>();
};

/// Serializes init and finalize.
static LIFECYCLE: Mutex<()> = Mutex::new(());

const NOT_INIT: &str = "called before rshmem_init (or after rshmem_finalize)";

/// This PE's number for messages: the running world's, else the launcher's, else `?`.
fn pe_label() -> String {
    let p = RT.load(Ordering::Acquire);
    // SAFETY: as in `with`: a non-null pointer is a live leaked `Box<Rt>`.
    if let Some(rt) = unsafe { p.as_ref() } {
        return rt.world.my_pe().to_string();
    }
    rt::config::launcher_rank().map_or_else(|| "?".into(), |r| r.to_string())
}

/// Writes `line` to stderr with one `write` (lines of several PEs never interleave).
fn say(line: String) {
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Prints `rshmem: PE <pe>: <call>: <what>` on stderr.
pub fn report(call: &str, what: impl Display) {
    say(format!("rshmem: PE {}: {call}: {what}\n", pe_label()));
}

/// Prints the failure, flushes C stdio and ends the process with status 1; the launcher then
/// stops the other PEs (as libshmem does).
#[cold]
pub fn fatal(call: &str, what: impl Display) -> ! {
    say(format!(
        "rshmem: PE {}: {call}: {what}; aborting the job\n",
        pe_label()
    ));
    let _ = std::io::stdout().flush();
    // SAFETY: fflush(NULL) flushes every C output stream; _exit ends the process without
    // running atexit handlers (which might call back into this library).
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(1)
    }
}

/// The running runtime, or the not-initialized error.
pub(crate) fn current() -> CResult<&'static Rt> {
    let p = RT.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked `Box<Rt>` that stays alive until
    // `rshmem_finalize`, which the program may not run concurrently with other calls.
    match unsafe { p.as_ref() } {
        Some(rt) => Ok(rt),
        None => fail(Code::NotInitialized, NOT_INIT),
    }
}

/// Runs `f` with the runtime; any error or panic ends the job, naming `call`.
pub fn with<R>(call: &'static str, f: impl FnOnce(&Rt) -> CResult<R>) -> R {
    match catch_unwind(AssertUnwindSafe(|| f(current()?))) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => fatal(call, e),
        Err(_) => fatal(call, "internal error (a panic inside rshmem)"),
    }
}

/// Runs `f` with the runtime and returns its status code; failures are printed, never fatal.
pub fn status(call: &'static str, f: impl FnOnce(&Rt) -> CResult<()>) -> c_int {
    guarded_status(call, || f(current()?))
}

/// Runs `f` (no runtime needed) and returns its status code; failures are printed.
pub fn guarded_status(call: &'static str, f: impl FnOnce() -> CResult<()>) -> c_int {
    let e = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return Code::Success as c_int,
        Ok(Err(e)) => e,
        Err(_) => Fail::Msg(
            Code::Internal,
            "internal error (a panic inside rshmem)".into(),
        ),
    };
    report(call, &e);
    e.code() as c_int
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
    if pe < 0 || pe as usize >= world.n_pes() {
        return invalid(format!(
            "PE {pe} is out of range: the job has {} PEs (0..{})",
            world.n_pes(),
            world.n_pes()
        ));
    }
    Ok(pe as usize)
}

/// Converts a C comparison constant (the runtime's one table of codes, `rt::wire`).
pub fn cmp_of(cmp: c_int) -> CResult<rt::Cmp> {
    rt::Cmp::try_from(cmp).or_else(|e| invalid(format!("{e}: use an RSHMEM_CMP_* constant")))
}

/// Converts a C signal operation (`rt::wire`).
pub fn sigop_of(op: c_int) -> CResult<rt::SignalOp> {
    rt::SignalOp::try_from(op)
        .or_else(|e| invalid(format!("{e}: use RSHMEM_SIGNAL_SET or RSHMEM_SIGNAL_ADD")))
}

/// A local buffer of `n` elements as a slice.
///
/// # Safety
/// `p` must be valid for reads of `n` elements (when `n > 0`) for `'a`.
pub unsafe fn src_slice<'a, T>(what: &str, p: *const T, n: usize) -> CResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return invalid(format!("{what} is NULL"));
    }
    if (p as usize) % std::mem::align_of::<T>() != 0 {
        return invalid(format!("{what} {p:p} is misaligned"));
    }
    // A slice longer than isize::MAX bytes is undefined behaviour (a wrapped count once
    // silently moved 8 bytes or none): refuse it as every other transfer does.
    if let Err(why) = rt::transfer_bytes::<T>(n) {
        return invalid(why);
    }
    // SAFETY: non-null, aligned, and at most isize::MAX bytes, and valid for n elements by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// A local buffer of `n` elements as a mutable slice.
///
/// # Safety
/// `p` must be valid for writes of `n` elements (when `n > 0`) for `'a`.
pub unsafe fn dst_slice<'a, T>(what: &str, p: *mut T, n: usize) -> CResult<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return invalid(format!("{what} is NULL"));
    }
    if (p as usize) % std::mem::align_of::<T>() != 0 {
        return invalid(format!("{what} {p:p} is misaligned"));
    }
    // A slice longer than isize::MAX bytes is undefined behaviour (a wrapped count once
    // silently moved 8 bytes or none): refuse it as every other transfer does.
    if let Err(why) = rt::transfer_bytes::<T>(n) {
        return invalid(why);
    }
    // SAFETY: non-null, aligned, and at most isize::MAX bytes, and valid for n elements by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}
