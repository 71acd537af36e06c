//! The crate's error type.

use std::fmt;
use std::time::Duration;

/// Everything that can go wrong while discovering ranks or running a bootstrap collective.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A launcher variable is present but malformed (or inconsistent with another one).
    #[error("invalid launcher variable {var}={value:?}: {reason}")]
    Env {
        /// The variable's name, e.g. `RSHMEM_RANK`.
        var: String,
        /// The value it had.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The launch is incomplete or inconsistent; the message says what to set.
    #[error("bootstrap configuration: {0}")]
    Config(String),
    /// An operating-system error, with what was being done.
    #[error("bootstrap: {context}: {source}")]
    Io {
        /// What was being done, e.g. `binding bootstrap address 10.0.0.1:4000`.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A bootstrap step did not complete in time.
    #[error("bootstrap {op} timed out after {} waiting for {}", Secs(*.waited), RankList(.missing))]
    Timeout {
        /// The operation, e.g. `allgather`.
        op: String,
        /// How long was waited.
        waited: Duration,
        /// The ranks that had not arrived (sorted).
        missing: Vec<usize>,
    },
    /// The connection to a rank broke (the process exited or crashed).
    #[error("bootstrap lost rank {rank}: {context}")]
    PeerLost {
        /// The rank whose connection broke.
        rank: usize,
        /// What was being done, and how it broke.
        context: String,
    },
    /// A connection was refused during the handshake (wrong secret, rank, size or version).
    #[error("bootstrap handshake refused: {0}")]
    Refused(String),
    /// A caller passed an argument that cannot be right (wrong length, rank out of range...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The ranks disagree about the sequence of collectives, or a peer sent a malformed frame.
    /// After this (and after any timeout or lost peer) the bootstrap is unusable.
    #[error("bootstrap protocol error: {0}")]
    Protocol(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A malformed-variable error.
    pub(crate) fn env(var: &str, value: &str, reason: impl Into<String>) -> Self {
        Error::Env {
            var: var.to_owned(),
            value: value.to_owned(),
            reason: reason.into(),
        }
    }
}

/// Formats a duration as seconds, e.g. `30s` or `0.25s`.
struct Secs(Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs_f64();
        if self.0.subsec_nanos() == 0 {
            write!(f, "{}s", self.0.as_secs())
        } else {
            // Three decimals are plenty; trim trailing zeros.
            let s = format!("{secs:.3}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            write!(f, "{s}s")
        }
    }
}

/// Formats ranks as `rank 3` or `rank(s) 2, 3`.
struct RankList<'a>(&'a [usize]);

impl fmt::Display for RankList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("the other ranks");
        }
        f.write_str("rank(s) ")?;
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_message_names_ranks_and_seconds() {
        let e = Error::Timeout {
            op: "allgather".into(),
            waited: Duration::from_secs(30),
            missing: vec![2, 3],
        };
        assert_eq!(
            e.to_string(),
            "bootstrap allgather timed out after 30s waiting for rank(s) 2, 3"
        );
        let e = Error::Timeout {
            op: "barrier".into(),
            waited: Duration::from_millis(250),
            missing: vec![1],
        };
        assert_eq!(
            e.to_string(),
            "bootstrap barrier timed out after 0.25s waiting for rank(s) 1"
        );
    }

    #[test]
    fn env_message_names_var_and_value() {
        let e = Error::env("RSHMEM_RANK", "x", "not a number");
        let s = e.to_string();
        assert!(
            s.contains("RSHMEM_RANK") && s.contains("\"x\"") && s.contains("not a number"),
            "{s}"
        );
    }
}
