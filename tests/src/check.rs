//! Failure reporting and the checks every scenario shares.
//!
//! A scenario returns [`R`]; the first failed check becomes a [`Fail`] whose text `main` prints
//! as `PE <me>: FAIL <scenario>: <text>` before exiting 1.

use std::fmt::{Debug, Display};
use std::io::Write;
use std::time::{Duration, Instant};

use rshmem::{Error, SymBuf, World};

use crate::vals::Val;

/// Why a scenario failed: what was checked, expected versus got.
#[derive(Debug)]
pub struct Fail(pub String);

/// Result of a scenario step.
pub type R<T = ()> = Result<T, Fail>;

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail(format!("unexpected error: {e}"))
    }
}

/// Writes `line` and a newline to stderr (`err`) or stdout with one `write` call, so that the
/// lines of PEs sharing a pipe never interleave (pipes keep writes up to 4 KiB whole).
pub fn say(err: bool, line: &str) {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    if err {
        let _ = std::io::stderr().lock().write_all(buf.as_bytes());
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(buf.as_bytes()).and_then(|()| out.flush());
    }
}

/// Prints a formatted line to stderr in one piece (see [`say`]).
#[macro_export]
macro_rules! note {
    ($($arg:tt)+) => {
        $crate::check::say(true, &format!($($arg)+))
    };
}

/// Returns a [`Fail`] with a formatted message when the condition is false.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::check::Fail(format!($($arg)+)));
        }
    };
}

/// Adds what was being done to an unexpected rshmem error.
pub trait Context<T> {
    /// Turns an error into a [`Fail`] that starts with `what`.
    fn ctx(self, what: impl Display) -> R<T>;
}

impl<T> Context<T> for rshmem::Result<T> {
    fn ctx(self, what: impl Display) -> R<T> {
        self.map_err(|e| Fail(format!("{what}: unexpected error: {e}")))
    }
}

/// The running PE and the job it belongs to.
pub struct Ctx<'w> {
    /// The runtime.
    pub w: &'w World,
    /// This PE.
    pub me: usize,
    /// Number of PEs.
    pub n: usize,
    /// The scenario's arguments (after its name).
    pub args: Vec<String>,
}

impl<'w> Ctx<'w> {
    /// Wraps an initialized world.
    pub fn new(w: &'w World, args: Vec<String>) -> Self {
        Ctx {
            w,
            me: w.my_pe(),
            n: w.n_pes(),
            args,
        }
    }

    /// The next PE on the ring.
    pub fn succ(&self) -> usize {
        (self.me + 1) % self.n
    }

    /// The previous PE on the ring.
    pub fn pred(&self) -> usize {
        (self.me + self.n - 1) % self.n
    }

    /// `barrier_all`, naming the step in the failure.
    pub fn barrier(&self, step: &str) -> R {
        self.w
            .barrier_all()
            .ctx(format_args!("barrier_all after {step}"))
    }
}

/// Error variants the scenarios expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// [`Error::InvalidArgument`].
    Invalid,
    /// [`Error::NotSymmetric`].
    NotSymmetric,
    /// [`Error::AsymmetricCall`].
    Asymmetric,
    /// [`Error::OutOfMemory`].
    Oom,
    /// [`Error::Timeout`].
    Timeout,
    /// [`Error::PeerLost`].
    PeerLost,
    /// [`Error::Unsupported`].
    Unsupported,
}

/// The variant of `e`, if it is one of [`Kind`].
pub fn kind_of(e: &Error) -> Option<Kind> {
    Some(match e {
        Error::InvalidArgument { .. } => Kind::Invalid,
        Error::NotSymmetric { .. } => Kind::NotSymmetric,
        Error::AsymmetricCall { .. } => Kind::Asymmetric,
        Error::OutOfMemory { .. } => Kind::Oom,
        Error::Timeout { .. } => Kind::Timeout,
        Error::PeerLost { .. } => Kind::PeerLost,
        Error::Unsupported { .. } => Kind::Unsupported,
        _ => return None,
    })
}

/// The call an error names in its `call` field.
pub fn call_of(e: &Error) -> Option<&'static str> {
    Some(match e {
        Error::InvalidArgument { call, .. }
        | Error::NotSymmetric { call, .. }
        | Error::AsymmetricCall { call, .. }
        | Error::OutOfMemory { call, .. }
        | Error::Timeout { call, .. }
        | Error::PeerLost { call, .. }
        | Error::Os { call, .. }
        | Error::Cuda { call, .. }
        | Error::Unsupported { call, .. }
        | Error::State { call, .. } => call,
        _ => return None,
    })
}

/// Checks that `r` failed with variant `kind` of call `call`, and that the message starts
/// with the call's name. Returns the error for further checks.
pub fn expect_err<T: Debug>(
    what: impl Display,
    r: rshmem::Result<T>,
    kind: Kind,
    call: &str,
) -> R<Error> {
    let e = match r {
        Ok(v) => {
            return Err(Fail(format!(
                "{what}: expected {kind:?} error from {call}, got Ok({v:?})"
            )))
        }
        Err(e) => e,
    };
    let got_kind = kind_of(&e);
    ensure!(
        got_kind == Some(kind),
        "{what}: expected {kind:?} error from {call}, got {got_kind:?}: {e} ({e:?})"
    );
    let named = call_of(&e).unwrap_or_default();
    ensure!(
        named == call,
        "{what}: expected the error to name call {call:?}, got {named:?}: {e}"
    );
    let msg = e.to_string();
    ensure!(
        msg.starts_with(&format!("{call}: ")) || msg.starts_with(&format!("{call} on PE ")),
        "{what}: message does not start with the call name {call:?}: {msg}"
    );
    Ok(e)
}

/// Checks that `msg` contains every one of `parts`.
pub fn expect_contains(what: impl Display, msg: &str, parts: &[&str]) -> R {
    for p in parts {
        ensure!(
            msg.contains(p),
            "{what}: message does not contain {p:?}: {msg}"
        );
    }
    Ok(())
}

/// Checks `got == expected` (bitwise for [`Val`] types).
pub fn expect_val<T: Val>(what: impl Display, expected: T, got: T) -> R {
    ensure!(
        expected.bits() == got.bits(),
        "{what} ({}): expected {expected:?}, got {got:?}",
        T::NAME
    );
    Ok(())
}

/// Checks `got == expected`.
pub fn expect_eq<T: PartialEq + Debug>(what: impl Display, expected: T, got: T) -> R {
    ensure!(
        expected == got,
        "{what}: expected {expected:?}, got {got:?}"
    );
    Ok(())
}

/// Checks every element of this PE's copy of `buf` against `expected(index)`.
pub fn expect_buf<T: Val>(
    what: impl Display,
    buf: &SymBuf<'_, T>,
    expected: impl Fn(usize) -> T,
) -> R {
    let got = buf.to_vec().ctx(format_args!("{what}: reading my copy"))?;
    ensure!(
        got.len() == buf.len(),
        "{what}: read {} of {} elements",
        got.len(),
        buf.len()
    );
    expect_slice(what, &got, expected)
}

/// Checks every element of a local slice against `expected(index)`.
pub fn expect_slice<T: Val>(what: impl Display, got: &[T], expected: impl Fn(usize) -> T) -> R {
    for (i, g) in got.iter().enumerate() {
        let want = expected(i);
        ensure!(
            g.bits() == want.bits(),
            "{what} ({}): element {i} of {}: expected {want:?}, got {g:?}",
            T::NAME,
            got.len()
        );
    }
    Ok(())
}

/// Writes `v(i)` to every element `i` of this PE's copy of `buf`.
pub fn fill<T: Val>(buf: &SymBuf<'_, T>, v: impl Fn(usize) -> T) -> R {
    let vals: Vec<T> = (0..buf.len()).map(v).collect();
    buf.copy_from_slice(&vals).ctx("SymBuf::copy_from_slice")
}

/// This PE's copy of `len` bytes of a symmetric byte allocation (a getmem from myself, which
/// works on every heap backend).
pub fn peek(w: &World, p: *const u8, len: usize) -> R<Vec<u8>> {
    let mut v = vec![0u8; len];
    w.getmem(&mut v, p, w.my_pe()).ctx("getmem from myself")?;
    Ok(v)
}

/// Sets `len` bytes of this PE's copy of a symmetric byte allocation to `b`.
pub fn poke(w: &World, p: *mut u8, b: u8, len: usize) -> R {
    w.putmem(p, &vec![b; len], w.my_pe())
        .ctx("putmem to myself")?;
    w.quiet().ctx("quiet")
}

/// Runs `f` in a scoped thread after `delay`, while this thread runs `main`; both must pass.
/// Used to make a local wait really block until the (possibly self-targeted) write arrives.
pub fn after_delay<'a, A, B>(delay: Duration, f: A, main: B) -> R
where
    A: FnOnce() -> R + Send + 'a,
    B: FnOnce() -> R,
{
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            std::thread::sleep(delay);
            f()
        });
        let m = main();
        let t = h
            .join()
            .map_err(|_| Fail("helper thread panicked".into()))?;
        m.and(t)
    })
}

/// Polls `f` until it returns `Some`, failing after `limit`.
pub fn poll_until<T>(
    what: impl Display,
    limit: Duration,
    mut f: impl FnMut() -> R<Option<T>>,
) -> R<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        ensure!(
            start.elapsed() < limit,
            "{what}: still not done after {limit:?}"
        );
        std::thread::yield_now();
    }
}
