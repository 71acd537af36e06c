//! The job's unique id: where rank 0 listens, and the secret every rank must present.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Length of the job secret in bytes.
pub const SECRET_LEN: usize = 16;

/// Identifies one job's rendezvous: rank 0's `host:port` and a 16-byte secret.
///
/// Written as `host:port#<32 lowercase hex digits>` (see [`fmt::Display`] and [`FromStr`]).
/// IPv6 hosts are written in brackets: `[fe80::1]:4000#...`.
#[derive(Clone, PartialEq, Eq)]
pub struct UniqueId {
    addr: String,
    secret: [u8; SECRET_LEN],
}

impl UniqueId {
    /// A unique id for `addr` (`host:port`) with a fresh random secret.
    pub fn new(addr: impl Into<String>) -> Result<Self> {
        let mut secret = [0u8; SECRET_LEN];
        getrandom::fill(&mut secret).map_err(|e| {
            Error::io(
                "generating the bootstrap secret",
                std::io::Error::other(e.to_string()),
            )
        })?;
        Self::with_secret(addr, secret)
    }

    /// A unique id for `addr` (`host:port`) with the given secret.
    pub fn with_secret(addr: impl Into<String>, secret: [u8; SECRET_LEN]) -> Result<Self> {
        let addr = addr.into();
        validate_addr(&addr).map_err(Error::InvalidArgument)?;
        Ok(UniqueId { addr, secret })
    }

    /// Rank 0's address, `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The job secret.
    pub fn secret(&self) -> &[u8; SECRET_LEN] {
        &self.secret
    }

    /// The job secret as 32 lowercase hex digits (the form `RSHMEM_BOOTSTRAP_SECRET` takes).
    pub fn secret_hex(&self) -> String {
        secret_to_hex(&self.secret)
    }

    /// Compares `other` with this id's secret in constant time.
    pub fn secret_matches(&self, other: &[u8; SECRET_LEN]) -> bool {
        secrets_equal(&self.secret, other)
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.addr, self.secret_hex())
    }
}

impl fmt::Debug for UniqueId {
    // Never print the secret in debug output (logs end up in bug reports).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UniqueId")
            .field("addr", &self.addr)
            .field("secret", &"<hidden>")
            .finish()
    }
}

impl FromStr for UniqueId {
    type Err = Error;

    /// Parses `host:port#<32 hex digits>`.
    fn from_str(s: &str) -> Result<Self> {
        let (addr, hex) = s.rsplit_once('#').ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unique id {s:?} has no '#': expected host:port#<32 hex digits>"
            ))
        })?;
        let secret = secret_from_hex(hex)?;
        UniqueId::with_secret(addr, secret)
    }
}

/// Parses a secret written as exactly 32 hex digits (either case).
pub fn secret_from_hex(hex: &str) -> Result<[u8; SECRET_LEN]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 2 * SECRET_LEN {
        return Err(Error::InvalidArgument(format!(
            "secret must be exactly {} hex digits, got {} characters",
            2 * SECRET_LEN,
            hex.chars().count()
        )));
    }
    let mut out = [0u8; SECRET_LEN];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let hi = hex_val(pair[0]);
        let lo = hex_val(pair[1]);
        match (hi, lo) {
            (Some(hi), Some(lo)) => out[i] = (hi << 4) | lo,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "secret contains a non-hex character near position {}",
                    2 * i
                )))
            }
        }
    }
    Ok(out)
}

/// Writes a secret as 32 lowercase hex digits.
pub fn secret_to_hex(secret: &[u8; SECRET_LEN]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * SECRET_LEN);
    for b in secret {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// Compares two secrets without an early exit, so the time taken does not reveal how many
/// leading bytes matched.
pub fn secrets_equal(a: &[u8; SECRET_LEN], b: &[u8; SECRET_LEN]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b.iter()) {
        diff |= std::hint::black_box(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Checks that `addr` is `host:port` (IPv6 hosts in brackets) with a non-zero port.
/// Returns a human-readable reason on failure.
pub(crate) fn validate_addr(addr: &str) -> std::result::Result<(), String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{addr:?} is not host:port (no ':port')"))?;
    if host.is_empty() {
        return Err(format!("{addr:?} has an empty host"));
    }
    if let Some(inner) = host.strip_prefix('[') {
        if !inner.ends_with(']') || inner.len() < 2 {
            return Err(format!("{addr:?}: unbalanced '[' in host"));
        }
    } else if host.contains(':') {
        return Err(format!(
            "{addr:?}: write IPv6 hosts in brackets, e.g. [fe80::1]:4000"
        ));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c == '#' || c == '/')
    {
        return Err(format!("{addr:?}: host contains whitespace, '#' or '/'"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{addr:?}: port {port:?} is not a number in 1..65535"))?;
    if port == 0 {
        return Err(format!(
            "{addr:?}: port 0 cannot be reached by the other ranks"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let secret = [0xab; SECRET_LEN];
        let id = UniqueId::with_secret("127.0.0.1:4000", secret).unwrap();
        let s = id.to_string();
        assert_eq!(s, format!("127.0.0.1:4000#{}", "ab".repeat(16)));
        let back: UniqueId = s.parse().unwrap();
        assert_eq!(back, id);
        let v6: UniqueId = format!("[::1]:5#{}", "0F".repeat(16)).parse().unwrap();
        assert_eq!(v6.addr(), "[::1]:5");
        assert_eq!(v6.secret(), &[0x0f; SECRET_LEN]);
        assert_eq!(v6.secret_hex(), "0f".repeat(16));
    }

    #[test]
    fn new_makes_distinct_random_secrets() {
        let a = UniqueId::new("h:1").unwrap();
        let b = UniqueId::new("h:1").unwrap();
        assert_ne!(a.secret(), b.secret());
        assert!(!format!("{a:?}").contains(&a.secret_hex()));
    }

    #[test]
    fn parse_errors_are_clear() {
        let err = |s: &str| s.parse::<UniqueId>().unwrap_err().to_string();
        assert!(err("127.0.0.1:4000").contains("no '#'"));
        assert!(err("127.0.0.1:4000#abc").contains("32 hex digits"));
        assert!(err(&format!("127.0.0.1:4000#{}", "zz".repeat(16))).contains("non-hex"));
        assert!(err(&format!("127.0.0.1#{}", "00".repeat(16))).contains("host:port"));
        assert!(err(&format!("h:0#{}", "00".repeat(16))).contains("port 0"));
        assert!(err(&format!("h:99999#{}", "00".repeat(16))).contains("not a number"));
        assert!(err(&format!(":80#{}", "00".repeat(16))).contains("empty host"));
        assert!(err(&format!("::1:80#{}", "00".repeat(16))).contains("brackets"));
    }

    #[test]
    fn constant_time_compare() {
        let a = [1u8; SECRET_LEN];
        let mut b = a;
        assert!(secrets_equal(&a, &b));
        b[15] = 2;
        assert!(!secrets_equal(&a, &b));
        b = a;
        b[0] = 0;
        assert!(!secrets_equal(&a, &b));
        let id = UniqueId::with_secret("x:1", a).unwrap();
        assert!(id.secret_matches(&a));
        assert!(!id.secret_matches(&b));
    }
}
