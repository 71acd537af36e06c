//! The error type of every fallible rshmem call.

use std::time::Duration;

/// Result alias used throughout rshmem.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in an rshmem call. Each variant names the call that failed and
/// says what to do about it; nothing is written when a call returns an error for bad input.
///
/// `Debug` prints the variant and the same text as `Display` (so `fn main() -> rshmem::Result<()>`
/// shows the whole message, hint included), e.g.
/// `NotSymmetric: put: ... (only addresses returned by rshmem's malloc/calloc/align/realloc on this
/// PE are symmetric)`; `{:#?}` adds the cause chain ([`std::error::Error::source`]) one per line.
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum Error {
    /// Starting the job failed: launcher variables, rendezvous, or a bootstrap collective.
    #[error("bootstrap: {0}")]
    Bootstrap(#[from] rshmem_bootstrap::Error),

    /// An argument is invalid (PE out of range, misaligned atomic, bad size, ...).
    #[error("{call}: {reason}")]
    InvalidArgument {
        /// The rshmem call, e.g. `putmem`.
        call: &'static str,
        /// What is wrong with the argument.
        reason: String,
    },

    /// An address is not inside this PE's symmetric heap, or a range runs past its allocation.
    #[error("{call}: {reason} (only addresses returned by rshmem's malloc/calloc/align/realloc on this PE, and addresses inside a registered symmetric region, are symmetric)")]
    NotSymmetric {
        /// The rshmem call.
        call: &'static str,
        /// What is wrong with the address.
        reason: String,
    },

    /// PEs made different collective calls (found by `RSHMEM_DEBUG_SYMMETRY=1`).
    #[error("{call}: collective calls differ between PEs: {details}")]
    AsymmetricCall {
        /// The rshmem call.
        call: &'static str,
        /// Which PEs made which calls.
        details: String,
    },

    /// The symmetric heap cannot grow enough to satisfy the request.
    #[error("{call}: out of symmetric memory: requested {requested} bytes, {reason}")]
    OutOfMemory {
        /// The rshmem call.
        call: &'static str,
        /// Bytes requested.
        requested: usize,
        /// Why the heap could not satisfy it (and the variable that raises the limit).
        reason: String,
    },

    /// A blocking wait ran past `RSHMEM_TIMEOUT`.
    #[error("{call} on PE {me}: timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// The rshmem call.
        call: &'static str,
        /// The PE that was waiting.
        me: usize,
        /// The PE waited on, when one is known.
        pe: Option<usize>,
        /// What the call was waiting for (address, condition, last value seen).
        what: String,
        /// How long it waited.
        waited: Duration,
    },

    /// A peer PE exited or closed its connection while this PE depended on it.
    #[error("{call} on PE {me}: PE {pe} is gone ({reason}); the job cannot continue")]
    PeerLost {
        /// The rshmem call.
        call: &'static str,
        /// The PE reporting.
        me: usize,
        /// The PE that is gone.
        pe: usize,
        /// How it was noticed.
        reason: String,
    },

    /// An operating-system call failed.
    #[error("{call}: {context}: {source}")]
    Os {
        /// The rshmem call.
        call: &'static str,
        /// What rshmem was doing.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },

    /// A CUDA driver call failed.
    #[error("{call}: CUDA error {code} while {what}{}", failed_context_note(.code))]
    Cuda {
        /// The rshmem call.
        call: &'static str,
        /// What rshmem was doing.
        what: String,
        /// The driver's status.
        code: String,
    },

    /// A CUDA driver call made through `cudarc` failed (the `?` operator converts a
    /// [`cudarc::driver::DriverError`] into this variant, so application code that mixes
    /// `cudarc` and rshmem calls can return [`Result`]). The driver error is the
    /// [`source`](std::error::Error::source).
    #[error("CUDA driver call failed: {}", driver_text(.0))]
    Driver(#[from] cudarc::driver::DriverError),

    /// The request is valid but this build or backend cannot do it yet.
    #[error("{call}: unsupported: {reason}")]
    Unsupported {
        /// The rshmem call.
        call: &'static str,
        /// What is missing.
        reason: String,
    },

    /// The runtime is not in a state that allows the call (already initialized, finalized).
    #[error("{call}: {reason}")]
    State {
        /// The rshmem call.
        call: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl Error {
    pub(crate) fn invalid(call: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            call,
            reason: reason.into(),
        }
    }

    pub(crate) fn os(
        call: &'static str,
        context: impl Into<String>,
        source: impl Into<std::io::Error>,
    ) -> Self {
        Error::Os {
            call,
            context: context.into(),
            source: source.into(),
        }
    }
}

/// PE numbers for a message, separated by `sep`.
pub(crate) fn join_pes(pes: &[usize], sep: &str) -> String {
    pes.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

/// The driver status and, when libcuda is loaded, its description (cudarc's own `Display`
/// loads libcuda to describe the status, which panics on a machine without the driver).
fn driver_text(e: &cudarc::driver::DriverError) -> String {
    let code = format!("{:?}", e.0);
    // SAFETY: only probes for the library with dlopen (as `cuda::driver_present`; asked of
    // cudarc here so that errors, the bottom layer, do not depend on the `cuda` layer).
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return code;
    }
    match e.error_string() {
        Ok(s) => format!("{code} ({})", s.to_string_lossy()),
        Err(_) => code,
    }
}

impl Error {
    /// The variant's name, as `Debug` prints it first.
    fn variant(&self) -> &'static str {
        #[allow(unreachable_patterns)] // variants added later fall back to "Error"
        match self {
            Error::Bootstrap(_) => "Bootstrap",
            Error::InvalidArgument { .. } => "InvalidArgument",
            Error::NotSymmetric { .. } => "NotSymmetric",
            Error::AsymmetricCall { .. } => "AsymmetricCall",
            Error::OutOfMemory { .. } => "OutOfMemory",
            Error::Timeout { .. } => "Timeout",
            Error::PeerLost { .. } => "PeerLost",
            Error::Os { .. } => "Os",
            Error::Cuda { .. } => "Cuda",
            Error::Driver(_) => "Driver",
            Error::Unsupported { .. } => "Unsupported",
            Error::State { .. } => "State",
            _ => "Error",
        }
    }
}

impl std::fmt::Debug for Error {
    /// `PE <me>: Variant: <the Display text>` (`PE <me>: ` once this process initialized a
    /// world, so the `Error: …` line of a `main` that returns the error names its PE); with
    /// `{:#?}`, the chain of causes follows, one per line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(me) = crate::hang::my_pe() {
            write!(f, "PE {me}: ")?;
        }
        write!(f, "{}: {self}", self.variant())?;
        // A driver error's text is already in the message (and formatting it through cudarc
        // needs libcuda), so its chain is not repeated.
        if f.alternate() && !matches!(self, Error::Driver(_)) {
            let mut cause = std::error::Error::source(self);
            while let Some(c) = cause {
                write!(f, "\n  caused by: {c}")?;
                cause = c.source();
            }
        }
        Ok(())
    }
}

/// The driver's statuses after which the CUDA context is unusable: a kernel faulted, and every
/// later call in the process returns the same status.
const STICKY: [&str; 9] = [
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_ECC_UNCORRECTABLE",
];

/// What to add to a message that reports the driver status `code` (as the driver names it, or
/// its `Debug` text): for a status that breaks the context, that the cause is an earlier kernel
/// and not this call; nothing for any other.
pub fn failed_context_note(code: &str) -> &'static str {
    if STICKY.iter().any(|s| code.contains(s)) {
        " (the CUDA context of this process failed earlier: a kernel that ran before this call \
         faulted, and every CUDA call of the process fails from then on; compute-sanitizer names \
         the kernel)"
    } else {
        ""
    }
}

/// The hint for a failed query of a program's stream with status `code`: the failed context
/// when the status says so, otherwise the likeliest cause, a stream that is not live.
pub fn stream_query_hint(code: &str) -> &'static str {
    match failed_context_note(code) {
        "" => ": is it a live CUDA stream?",
        note => note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn debug_shows_the_display_text_and_the_hint() {
        let e = Error::NotSymmetric {
            call: "put",
            reason: "dest 0x10 is outside the heap".into(),
        };
        let d = format!("{e:?}");
        assert_eq!(d, format!("NotSymmetric: {e}"));
        assert!(
            d.contains("only addresses returned by rshmem's malloc"),
            "{d}"
        );
        // What `fn main() -> rshmem::Result<()>` prints is "Error: " followed by Debug.
        let e = Error::invalid("putmem", "PE 7 is out of range (2 PEs)");
        let d = format!("{e:?}");
        assert_eq!(d, "InvalidArgument: putmem: PE 7 is out of range (2 PEs)");
    }

    #[test]
    fn alternate_debug_lists_the_causes() {
        let e = Error::os(
            "init",
            "opening the heap file",
            std::io::Error::from_raw_os_error(libc::ENOENT),
        );
        let d = format!("{e:#?}");
        assert!(d.starts_with("Os: init: opening the heap file: "), "{d}");
        assert!(
            d.contains("\n  caused by: No such file or directory"),
            "{d}"
        );
    }

    #[test]
    fn driver_error_converts_with_its_source() {
        fn launch() -> Result<()> {
            Err(cudarc::driver::DriverError(
                cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            ))?;
            Ok(())
        }
        let e = launch().unwrap_err();
        assert!(matches!(e, Error::Driver(_)), "{e:?}");
        assert!(e.to_string().contains("CUDA_ERROR_INVALID_VALUE"), "{e}");
        let src = e.source().expect("the driver error is the source");
        let d = src.downcast_ref::<cudarc::driver::DriverError>();
        assert_eq!(
            d.map(|d| d.0),
            Some(cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE)
        );
        assert!(format!("{e:#?}").starts_with("Driver: CUDA driver call failed: "));
        assert_eq!(format!("{e:?}"), format!("Driver: {e}"));
    }
}
