//! The error type of every fallible rshmem call.

use std::time::Duration;

/// Result alias used throughout rshmem.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in an rshmem call. Each variant names the call that failed and
/// says what to do about it; nothing is written when a call returns an error for bad input.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
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
    #[error("{call}: {reason} (only addresses returned by rshmem's malloc/calloc/align/realloc on this PE are symmetric)")]
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
    #[error("{call}: CUDA error {code} while {what}")]
    Cuda {
        /// The rshmem call.
        call: &'static str,
        /// What rshmem was doing.
        what: String,
        /// The driver's status.
        code: String,
    },

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
