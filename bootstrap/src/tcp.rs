//! TCP bootstrap: a unique-id rendezvous at rank 0, then collectives in `ceil(log2(N))`
//! rounds over links between the ranks.
//!
//! # Shape
//!
//! Rank 0 only hands out the rendezvous: every rank connects to it once, proves the secret,
//! and tells it the address of its own *link listener*; once all have joined, rank 0 sends each
//! rank the addresses of ranks `rank + 2^k` (mod N, `k < ceil(log2 N)`) and closes these
//! connections. Each rank then connects to those ranks and accepts ranks `rank - 2^k`, every
//! link authenticated like the first connection: a rank holds `2·ceil(log2 N)` connections,
//! rank 0 no more than the others. Barrier is the dissemination barrier, allgather Bruck's
//! (round `k` sends what this rank holds of ranks `rank - j`, `j < 2^k`, to `rank + 2^k`),
//! alltoall Bruck's routing, broadcast an allgather in which only the root contributes data
//! (every rank also names the root it called with, so disagreeing ranks fail). A failure is
//! sent as an `Abort` frame over every link of the rank that found it, and each rank that gets
//! one fails with the same diagnosis and passes it on, so it reaches every rank in
//! `O(log N)` hops.
//!
//! # Wire protocol (version 3)
//!
//! All integers are little-endian. The secret itself never crosses the network: each side
//! proves it knows it with an HMAC-SHA256 over both sides' fresh nonces and the claim. The
//! *acceptor* is rank 0 for the rendezvous, the rank `rank + 2^k` for a link.
//!
//! * **challenge** (acceptor → connector, 28 bytes, sent as soon as it accepts): magic
//!   `RSHMEMBS`, `u32` version, 16-byte random nonce `Na`.
//! * **hello** (connector → acceptor, 76 bytes): magic, `u32` version, `u64` rank, `u64` size,
//!   16-byte random nonce `Nc`, 32-byte proof `HMAC(secret, "rshmem-bootstrap-v3 peer" ‖ Na ‖
//!   Nc ‖ rank ‖ acceptor ‖ size)`.
//! * **ack** (acceptor → connector, 48 bytes): magic, `u32` version, `u32` status (0 =
//!   accepted, else the reason for refusal; the connection is then closed), 32-byte proof
//!   `HMAC(secret, "rshmem-bootstrap-v3 acceptor" ‖ Na ‖ Nc ‖ rank ‖ acceptor ‖ size)` when
//!   accepted (zeros otherwise), which the connector checks: a program that holds the address
//!   without the secret cannot pass for the rank it wanted to reach.
//! * **frame** (both ways): `u32` kind, `u64` length (at most [`MAX_FRAME`]), payload.
//!
//! After the rendezvous handshake a rank sends an `Addr` frame (its link listener,
//! `ip:port` as text); rank 0 answers with a `Ready` frame listing the addresses of ranks
//! `rank + 2^k` in order of `k`, or with an `Abort` frame describing why the job cannot start
//! (ranks late or gone), so every rank fails with the same diagnosis. Each round of a
//! collective is one frame on each link it uses.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::MsgFlags;
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::uid::{UniqueId, SECRET_LEN};
use crate::Bootstrap;

/// Largest payload of one bootstrap frame (1 GiB).
pub const MAX_FRAME: u64 = 1 << 30;

const MAGIC: [u8; 8] = *b"RSHMEMBS";
const VERSION: u32 = 3;
const NONCE_LEN: usize = 16;
const PROOF_LEN: usize = 32;
const CHALLENGE_LEN: usize = 8 + 4 + NONCE_LEN;
const HELLO_LEN: usize = 8 + 4 + 8 + 8 + NONCE_LEN + PROOF_LEN;
const ACK_LEN: usize = 8 + 4 + 4 + PROOF_LEN;
const FRAME_HDR: usize = 4 + 8;
/// How long rank 0 waits for a new connection's hello before dropping it.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Extra time a peer waits for rank 0's answer, so that rank 0's (more precise) verdict about
/// late ranks usually arrives before the peer's own timeout fires.
const PEER_SLACK: Duration = Duration::from_secs(1);
/// Longest a single connection attempt to rank 0 may take.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(5);

const ACK_OK: u32 = 0;
const ACK_BAD_VERSION: u32 = 1;
const ACK_BAD_SECRET: u32 = 2;
const ACK_BAD_RANK: u32 = 3;
const ACK_DUP_RANK: u32 = 4;
const ACK_BAD_SIZE: u32 = 5;

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ready = 1,
    Abort = 2,
    Allgather = 3,
    Alltoall = 4,
    Barrier = 5,
    Broadcast = 6,
    Addr = 7,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Kind> {
        Some(match v {
            1 => Kind::Ready,
            2 => Kind::Abort,
            3 => Kind::Allgather,
            4 => Kind::Alltoall,
            5 => Kind::Barrier,
            6 => Kind::Broadcast,
            7 => Kind::Addr,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Ready => "ready",
            Kind::Abort => "abort",
            Kind::Allgather => "allgather",
            Kind::Alltoall => "alltoall",
            Kind::Barrier => "barrier",
            Kind::Broadcast => "broadcast",
            Kind::Addr => "address",
        }
    }
}

/// A [`Bootstrap`] over TCP: rank 0 listens at the unique id's address, every other rank
/// connects to it and presents the job secret; rank 0 hands out the addresses of each rank's
/// `ceil(log2 N)` link partners, and collectives run in `ceil(log2 N)` rounds over those links
/// (no rank talks to more than `2·ceil(log2 N)` others).
///
/// The type is `Send + Sync`; concurrent calls from several threads are serialised (but note
/// that collectives must still be called in the same order on every rank).
#[derive(Debug)]
pub struct TcpBootstrap {
    rank: usize,
    size: usize,
    timeout: Option<Duration>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    links: Links,
    /// Set after the first failure: the streams may be out of step, so refuse further use.
    failed: Option<String>,
}

#[derive(Debug)]
enum Links {
    /// Size 1: nothing to talk to.
    Alone,
    /// `out[k]`: the connection this rank opened to rank `rank + 2^k`; `inn[k]`: the one rank
    /// `rank - 2^k` opened to this rank (both mod size).
    Tree {
        out: Vec<TcpStream>,
        inn: Vec<TcpStream>,
    },
}

/// How a single stream operation failed.
#[derive(Debug)]
enum LinkErr {
    Timeout,
    Eof,
    Io(io::Error),
    /// The peer sent something that is not a valid frame.
    Malformed(String),
}

impl LinkErr {
    fn describe(&self) -> String {
        match self {
            LinkErr::Timeout => "timed out".into(),
            LinkErr::Eof => "connection closed (the process exited or crashed?)".into(),
            LinkErr::Io(e) => e.to_string(),
            LinkErr::Malformed(m) => m.clone(),
        }
    }
}

fn deadline_after(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// A poll timeout for the time left until `deadline`, rounded up to whole milliseconds.
fn poll_timeout(deadline: Option<Instant>) -> PollTimeout {
    match remaining(deadline) {
        None => PollTimeout::NONE,
        Some(left) => {
            let ms = left.as_nanos().div_ceil(1_000_000);
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
        }
    }
}

/// Waits until `fd` is ready for `events` (or has an error/hang-up pending), or the deadline.
fn wait_fd(
    fd: &impl AsFd,
    events: PollFlags,
    deadline: Option<Instant>,
) -> std::result::Result<(), LinkErr> {
    loop {
        if expired(deadline) {
            return Err(LinkErr::Timeout);
        }
        let mut fds = [PollFd::new(fd.as_fd(), events)];
        match nix::poll::poll(&mut fds, poll_timeout(deadline)) {
            Ok(0) => continue, // re-check the deadline
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(LinkErr::Io(e.into())),
        }
    }
}

/// Reads exactly `buf.len()` bytes from a non-blocking stream before the deadline.
fn read_exact_by(
    stream: &TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> std::result::Result<(), LinkErr> {
    let mut off = 0;
    while off < buf.len() {
        let mut reader = stream;
        match reader.read(&mut buf[off..]) {
            Ok(0) => return Err(LinkErr::Eof),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_fd(stream, PollFlags::POLLIN, deadline)?
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_disconnect(&e) => return Err(LinkErr::Eof),
            Err(e) => return Err(LinkErr::Io(e)),
        }
    }
    Ok(())
}

/// Writes all of `buf` to a non-blocking stream before the deadline (never raises SIGPIPE).
fn write_all_by(
    stream: &TcpStream,
    buf: &[u8],
    deadline: Option<Instant>,
) -> std::result::Result<(), LinkErr> {
    let mut off = 0;
    while off < buf.len() {
        match nix::sys::socket::send(stream.as_raw_fd(), &buf[off..], MsgFlags::MSG_NOSIGNAL) {
            Ok(n) => off += n,
            Err(Errno::EAGAIN) => wait_fd(stream, PollFlags::POLLOUT, deadline)?,
            Err(Errno::EINTR) => {}
            Err(Errno::EPIPE | Errno::ECONNRESET | Errno::ENOTCONN) => return Err(LinkErr::Eof),
            Err(e) => return Err(LinkErr::Io(e.into())),
        }
    }
    Ok(())
}

fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected
    )
}

fn send_frame(
    stream: &TcpStream,
    kind: Kind,
    payload: &[u8],
    deadline: Option<Instant>,
) -> std::result::Result<(), LinkErr> {
    let mut buf = Vec::with_capacity(FRAME_HDR + payload.len());
    buf.extend_from_slice(&(kind as u32).to_le_bytes());
    buf.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    buf.extend_from_slice(payload);
    write_all_by(stream, &buf, deadline)
}

fn recv_frame(
    stream: &TcpStream,
    deadline: Option<Instant>,
) -> std::result::Result<(Kind, Vec<u8>), LinkErr> {
    let mut hdr = [0u8; FRAME_HDR];
    read_exact_by(stream, &mut hdr, deadline)?;
    let kind_raw = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let mut len_bytes = [0u8; 8];
    len_bytes.copy_from_slice(&hdr[4..]);
    let len = u64::from_le_bytes(len_bytes);
    let kind = Kind::from_u32(kind_raw)
        .ok_or_else(|| LinkErr::Malformed(format!("unknown frame kind {kind_raw}")))?;
    if len > MAX_FRAME {
        return Err(LinkErr::Malformed(format!(
            "frame of {len} bytes exceeds the {MAX_FRAME}-byte limit"
        )));
    }
    // `len <= MAX_FRAME` fits in usize on every supported (64-bit or 32-bit) target.
    let len = len as usize;
    // Grow as data arrives rather than trusting the length for one big allocation.
    const CHUNK: usize = 1 << 20;
    let mut payload = Vec::with_capacity(len.min(CHUNK));
    while payload.len() < len {
        let start = payload.len();
        let end = len.min(start + CHUNK);
        payload.resize(end, 0);
        read_exact_by(stream, &mut payload[start..end], deadline)?;
    }
    Ok((kind, payload))
}

fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// A little cursor for decoding payloads; every read is bounds-checked.
struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn u64(&mut self) -> Option<u64> {
        let (head, rest) = self.buf.split_at_checked(8)?;
        self.buf = rest;
        let mut b = [0u8; 8];
        b.copy_from_slice(head);
        Some(u64::from_le_bytes(b))
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.buf.split_at_checked(n)?;
        self.buf = rest;
        Some(head)
    }
}

/// Encodes a list of byte strings: `u64` count, then (`u64` length, bytes) each.
fn encode_list<'a>(items: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, items.len() as u64);
    for it in items {
        put_u64(&mut out, it.len() as u64);
        out.extend_from_slice(it);
    }
    out
}

fn decode_list(buf: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut c = Cursor { buf };
    let n = usize::try_from(c.u64()?).ok()?;
    // Each item takes at least 8 bytes: refuse counts the buffer cannot hold.
    if n > c.buf.len() / 8 {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = usize::try_from(c.u64()?).ok()?;
        out.push(c.bytes(len)?.to_vec());
    }
    if !c.buf.is_empty() {
        return None;
    }
    Some(out)
}

const ABORT_TIMEOUT: u8 = 1;
const ABORT_PEER_LOST: u8 = 2;
const ABORT_OTHER: u8 = 3;

/// Encodes a failure so that the ranks it is sent to can report the same diagnosis.
fn encode_abort(err: &Error) -> Vec<u8> {
    let mut out = Vec::new();
    let (tag, waited, ranks, msg): (u8, Duration, Vec<usize>, String) = match err {
        Error::Timeout {
            waited, missing, ..
        } => (ABORT_TIMEOUT, *waited, missing.clone(), String::new()),
        Error::PeerLost { rank, context } => (
            ABORT_PEER_LOST,
            Duration::ZERO,
            vec![*rank],
            context.clone(),
        ),
        other => (ABORT_OTHER, Duration::ZERO, Vec::new(), other.to_string()),
    };
    out.push(tag);
    put_u64(
        &mut out,
        u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX),
    );
    put_u64(&mut out, ranks.len() as u64);
    for r in ranks {
        put_u64(&mut out, r as u64);
    }
    out.extend_from_slice(msg.as_bytes());
    out
}

/// Turns an abort frame from rank `from` into the error this rank reports for `op`.
fn decode_abort(op: &str, from: usize, payload: &[u8]) -> Error {
    let parsed = (|| {
        let (&tag, rest) = payload.split_first()?;
        let mut c = Cursor { buf: rest };
        let waited = Duration::from_nanos(c.u64()?);
        let n = usize::try_from(c.u64()?).ok()?;
        if n > c.buf.len() / 8 {
            return None;
        }
        let mut ranks = Vec::with_capacity(n);
        for _ in 0..n {
            ranks.push(usize::try_from(c.u64()?).ok()?);
        }
        let msg = String::from_utf8_lossy(c.buf).into_owned();
        Some((tag, waited, ranks, msg))
    })();
    match parsed {
        Some((ABORT_TIMEOUT, waited, missing, _)) => Error::Timeout {
            op: op.to_owned(),
            waited,
            missing,
        },
        Some((ABORT_PEER_LOST, _, ranks, msg)) if ranks.len() == 1 => Error::PeerLost {
            rank: ranks[0],
            context: format!("{op} (reported by rank {from}): {msg}"),
        },
        Some((_, _, _, msg)) => Error::Protocol(format!("{op} failed on rank {from}: {msg}")),
        None => Error::Protocol(format!("{op}: rank {from} sent a malformed abort frame")),
    }
}

fn ack_reason(status: u32) -> &'static str {
    match status {
        ACK_BAD_VERSION => "protocol version mismatch (mixed rshmem versions in one job?)",
        ACK_BAD_SECRET => {
            "wrong job secret (RSHMEM_BOOTSTRAP_SECRET differs between ranks, or this address belongs to another job)"
        }
        ACK_BAD_RANK => "rank out of range for the job, or not one the acceptor links to",
        ACK_DUP_RANK => "another process already joined with this rank",
        ACK_BAD_SIZE => "job size differs between ranks",
        _ => "unknown reason",
    }
}

/// Which side a handshake proof comes from (domain separation: a connector's proof is never
/// valid as the acceptor's, and the other way round).
#[derive(Clone, Copy)]
enum Side {
    Peer,
    Root,
}

/// What a handshake proves: the connecting rank, the rank it wants to reach, the job size.
#[derive(Clone, Copy)]
struct Claim {
    rank: u64,
    acceptor: u64,
    size: u64,
}

/// The HMAC over both nonces and the claim, keyed with the job secret.
fn handshake_mac(
    secret: &[u8; SECRET_LEN],
    side: Side,
    acceptor_nonce: &[u8; NONCE_LEN],
    connector_nonce: &[u8; NONCE_LEN],
    claim: Claim,
) -> Hmac<Sha256> {
    // HMAC accepts keys of any length: this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(match side {
        Side::Peer => b"rshmem-bootstrap-v3 peer",
        Side::Root => b"rshmem-bootstrap-v3 acceptor",
    });
    mac.update(acceptor_nonce);
    mac.update(connector_nonce);
    mac.update(&claim.rank.to_le_bytes());
    mac.update(&claim.acceptor.to_le_bytes());
    mac.update(&claim.size.to_le_bytes());
    mac
}

fn handshake_proof(
    secret: &[u8; SECRET_LEN],
    side: Side,
    acceptor_nonce: &[u8; NONCE_LEN],
    connector_nonce: &[u8; NONCE_LEN],
    claim: Claim,
) -> [u8; PROOF_LEN] {
    let mut out = [0u8; PROOF_LEN];
    out.copy_from_slice(
        &handshake_mac(secret, side, acceptor_nonce, connector_nonce, claim)
            .finalize()
            .into_bytes(),
    );
    out
}

/// Checks a proof in constant time.
fn proof_ok(
    secret: &[u8; SECRET_LEN],
    side: Side,
    acceptor_nonce: &[u8; NONCE_LEN],
    connector_nonce: &[u8; NONCE_LEN],
    claim: Claim,
    proof: &[u8],
) -> bool {
    handshake_mac(secret, side, acceptor_nonce, connector_nonce, claim)
        .verify_slice(proof)
        .is_ok()
}

fn fresh_nonce() -> Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| {
        Error::io(
            "generating a bootstrap handshake nonce",
            io::Error::other(e.to_string()),
        )
    })?;
    Ok(n)
}

fn encode_challenge(root_nonce: &[u8; NONCE_LEN]) -> [u8; CHALLENGE_LEN] {
    let mut c = [0u8; CHALLENGE_LEN];
    c[..8].copy_from_slice(&MAGIC);
    c[8..12].copy_from_slice(&VERSION.to_le_bytes());
    c[12..].copy_from_slice(root_nonce);
    c
}

fn encode_hello(
    uid: &UniqueId,
    claim: Claim,
    acceptor_nonce: &[u8; NONCE_LEN],
    my_nonce: &[u8; NONCE_LEN],
) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&claim.rank.to_le_bytes());
    h[20..28].copy_from_slice(&claim.size.to_le_bytes());
    h[28..28 + NONCE_LEN].copy_from_slice(my_nonce);
    h[28 + NONCE_LEN..].copy_from_slice(&handshake_proof(
        uid.secret(),
        Side::Peer,
        acceptor_nonce,
        my_nonce,
        claim,
    ));
    h
}

fn encode_ack(status: u32, proof: &[u8; PROOF_LEN]) -> [u8; ACK_LEN] {
    let mut a = [0u8; ACK_LEN];
    a[..8].copy_from_slice(&MAGIC);
    a[8..12].copy_from_slice(&VERSION.to_le_bytes());
    a[12..16].copy_from_slice(&status.to_le_bytes());
    a[16..].copy_from_slice(proof);
    a
}

fn le_u32(b: &[u8]) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[..4]);
    u32::from_le_bytes(x)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[..8]);
    u64::from_le_bytes(x)
}

/// Binds rank 0's listening socket at `addr` (`host:port`).
fn bind(addr: &str) -> Result<TcpListener> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| Error::io(format!("resolving bootstrap address {addr}"), e))?
        .collect();
    let mut last = None;
    for a in &addrs {
        match TcpListener::bind(a) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    let e = last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no addresses"));
    Err(Error::io(
        format!(
            "rank 0 binding bootstrap address {addr} (it must be an address of rank 0's host \
             with a free port)"
        ),
        e,
    ))
}

/// Number of dissemination rounds for `size` ranks: the `k` with `2^k < size`
/// (`ceil(log2(size))`).
fn rounds(size: usize) -> usize {
    if size <= 1 {
        0
    } else {
        (usize::BITS - (size - 1).leading_zeros()) as usize
    }
}

/// The rank `2^k` after `me` on the ring (whom `me` connects to for round `k`).
fn up(me: usize, k: usize, size: usize) -> usize {
    (me + (1usize << k)) % size
}

/// The rank `2^k` before `me` on the ring (who connects to `me` for round `k`).
fn down(me: usize, k: usize, size: usize) -> usize {
    (me + size - (1usize << k)) % size
}

impl TcpBootstrap {
    /// Joins the job described by `uid` as `rank` of `size`.
    ///
    /// Rank 0 listens at `uid.addr()` (or on `listener`, an already-bound socket, e.g. one
    /// inherited from `rshmemrun`) and waits for every other rank to connect; the others retry
    /// connecting until rank 0 answers. Rank 0 then hands every rank the addresses of the
    /// `ceil(log2(size))` ranks it links to and closes these connections; each rank connects to
    /// ranks `rank + 2^k` and accepts ranks `rank - 2^k` (modulo `size`), every link
    /// authenticated like the first. Returns once this rank's links are up. Each step is
    /// bounded by `timeout` (`None`: wait forever); on expiry rank 0 fails with
    /// [`Error::Timeout`] naming the ranks that never connected, and tells the connected ranks.
    ///
    /// `listener` may only be given to rank 0.
    pub fn new(
        rank: usize,
        size: usize,
        uid: &UniqueId,
        timeout: Option<Duration>,
        listener: Option<TcpListener>,
    ) -> Result<Self> {
        if size == 0 {
            return Err(Error::InvalidArgument(
                "a job needs at least one rank (size 0)".into(),
            ));
        }
        if rank >= size {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is out of range for a job of {size} rank(s)"
            )));
        }
        if timeout == Some(Duration::ZERO) {
            return Err(Error::InvalidArgument(
                "bootstrap timeout must be positive (None waits forever)".into(),
            ));
        }
        if rank != 0 && listener.is_some() {
            return Err(Error::InvalidArgument(format!(
                "only rank 0 listens, but rank {rank} was given a listener"
            )));
        }
        let links = if size == 1 {
            Links::Alone
        } else {
            let (tree_listener, targets) = if rank == 0 {
                let listener = match listener {
                    Some(l) => l,
                    None => bind(uid.addr())?,
                };
                rendezvous_root(listener, size, uid, timeout)?
            } else {
                rendezvous_leaf(rank, size, uid, timeout)?
            };
            connect_tree(rank, size, uid, timeout, tree_listener, &targets)?
        };
        Ok(TcpBootstrap {
            rank,
            size,
            timeout,
            state: Mutex::new(State {
                links,
                failed: None,
            }),
        })
    }

    /// The TCP connections this rank holds for the bootstrap's collectives (after `new`:
    /// `2 * ceil(log2(size))`, none for a single rank; the connections of the rendezvous with
    /// rank 0 are closed by then).
    pub fn connections(&self) -> usize {
        match &self.lock().links {
            Links::Alone => 0,
            Links::Tree { out, inn } => out.len() + inn.len(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => {
                let mut g = poisoned.into_inner();
                if g.failed.is_none() {
                    g.failed = Some("a thread panicked during a bootstrap operation".into());
                }
                g
            }
        }
    }

    /// Runs one collective of `kind` over the links (`size > 1`). On failure, tells every
    /// linked rank why (so that the failure spreads with its diagnosis) and closes the links.
    fn collective<T>(&self, kind: Kind, body: impl FnOnce(&Rounds<'_>) -> Result<T>) -> Result<T> {
        let op = kind.name();
        let mut state = self.lock();
        if let Some(why) = &state.failed {
            return Err(Error::Protocol(format!(
                "{op}: the bootstrap is unusable after an earlier failure ({why})"
            )));
        }
        let result = match &state.links {
            Links::Alone => Err(Error::Protocol(format!(
                "{op}: no links in a job of one rank"
            ))),
            Links::Tree { out, inn } => body(&Rounds {
                me: self.rank,
                size: self.size,
                kind,
                out,
                inn,
                timeout: self.timeout,
                deadline: deadline_after(self.timeout),
            }),
        };
        if let Err(e) = &result {
            fail(&mut state, e);
        }
        result
    }

    /// Bruck's allgather in `ceil(log2(size))` rounds: after round `k` this rank holds the
    /// contributions of ranks `rank - j` for `j < min(2^(k+1), size)`.
    fn allgather_as(&self, kind: Kind, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let (me, n) = (self.rank, self.size);
        if n == 1 {
            return Ok(vec![mine.to_vec()]);
        }
        self.collective(kind, |net| {
            let mut have: Vec<Option<Vec<u8>>> = vec![None; n];
            have[me] = Some(mine.to_vec());
            for k in 0..rounds(n) {
                let step = 1usize << k;
                let cnt = step.min(n - step);
                let mut payload = Vec::new();
                put_u64(&mut payload, cnt as u64);
                for j in 0..cnt {
                    let origin = (me + n - j) % n;
                    let data = have[origin].as_deref().unwrap_or_default();
                    put_u64(&mut payload, origin as u64);
                    put_u64(&mut payload, data.len() as u64);
                    payload.extend_from_slice(data);
                }
                let got = net.step(k, &payload)?;
                let from = down(me, k, n);
                let bad = || {
                    Error::Protocol(format!(
                        "{}: rank {from} sent a malformed round {k}",
                        kind.name()
                    ))
                };
                let mut c = Cursor { buf: &got };
                if c.u64() != Some(cnt as u64) {
                    return Err(bad());
                }
                for j in 0..cnt {
                    let origin = (from + n - j) % n;
                    if c.u64() != Some(origin as u64) || have[origin].is_some() {
                        return Err(bad());
                    }
                    let len = c
                        .u64()
                        .and_then(|l| usize::try_from(l).ok())
                        .ok_or_else(bad)?;
                    have[origin] = Some(c.bytes(len).ok_or_else(bad)?.to_vec());
                }
                if !c.buf.is_empty() {
                    return Err(bad());
                }
            }
            Ok(have.into_iter().map(Option::unwrap_or_default).collect())
        })
    }
}

/// One collective in progress: this rank's links and the collective's deadline.
struct Rounds<'a> {
    me: usize,
    size: usize,
    kind: Kind,
    out: &'a [TcpStream],
    inn: &'a [TcpStream],
    timeout: Option<Duration>,
    deadline: Option<Instant>,
}

impl Rounds<'_> {
    /// Round `k`: sends `payload` to rank `me + 2^k` while receiving rank `me - 2^k`'s.
    fn step(&self, k: usize, payload: &[u8]) -> Result<Vec<u8>> {
        let op = self.kind.name();
        let (to, from) = (up(self.me, k, self.size), down(self.me, k, self.size));
        if payload.len() as u64 > MAX_FRAME {
            return Err(Error::InvalidArgument(format!(
                "{op}: {} bytes for rank {to} exceed the bootstrap's {MAX_FRAME}-byte frame limit",
                payload.len()
            )));
        }
        let mut frame = Vec::with_capacity(FRAME_HDR + payload.len());
        frame.extend_from_slice(&(self.kind as u32).to_le_bytes());
        frame.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        frame.extend_from_slice(payload);
        match sendrecv(&self.out[k], &frame, &self.inn[k], self.deadline) {
            Ok((kind, got)) if kind == self.kind => Ok(got),
            Ok((Kind::Abort, got)) => Err(decode_abort(op, from, &got)),
            Ok((other, _)) => Err(Error::Protocol(format!(
                "rank {from} called {} while rank {} called {op}: every rank must call the same \
                 collectives in the same order",
                other.name(),
                self.me
            ))),
            Err((Dir::Out, le)) => Err(link_error(op, to, le, self.timeout, vec![to])),
            Err((Dir::In, le)) => Err(link_error(op, from, le, self.timeout, vec![from])),
        }
    }
}

/// Which link of a round failed.
enum Dir {
    Out,
    In,
}

/// Writes `frame` to `out` while reading one frame from `inn` (both non-blocking), so that
/// two ranks sending large frames to each other's neighbours never wait on full buffers.
fn sendrecv(
    out: &TcpStream,
    frame: &[u8],
    inn: &TcpStream,
    deadline: Option<Instant>,
) -> std::result::Result<(Kind, Vec<u8>), (Dir, LinkErr)> {
    let mut sent = 0;
    let mut hdr = [0u8; FRAME_HDR];
    let mut got_hdr = 0;
    let mut head: Option<(Kind, usize)> = None;
    let mut payload: Vec<u8> = Vec::new();
    loop {
        let received = head.is_some_and(|(_, len)| payload.len() == len);
        if sent == frame.len() && received {
            let (kind, _) = head.unwrap_or((Kind::Abort, 0));
            return Ok((kind, payload));
        }
        let mut progress = false;
        if sent < frame.len() {
            match nix::sys::socket::send(
                out.as_raw_fd(),
                &frame[sent..],
                MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(n) => {
                    sent += n;
                    progress = true;
                }
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(Errno::EPIPE | Errno::ECONNRESET | Errno::ENOTCONN) => {
                    return Err((Dir::Out, LinkErr::Eof))
                }
                Err(e) => return Err((Dir::Out, LinkErr::Io(e.into()))),
            }
        }
        if !received {
            let mut reader = inn;
            let r = match head {
                None => reader.read(&mut hdr[got_hdr..]),
                Some((_, len)) => {
                    // Grow as data arrives rather than trusting the length for one allocation.
                    let start = payload.len();
                    let end = len.min(start + (1 << 20));
                    payload.resize(end, 0);
                    let r = reader.read(&mut payload[start..end]);
                    let n = *r.as_ref().unwrap_or(&0);
                    payload.truncate(start + n);
                    r
                }
            };
            match r {
                Ok(0) => return Err((Dir::In, LinkErr::Eof)),
                Ok(n) => {
                    progress = true;
                    if head.is_none() {
                        got_hdr += n;
                        if got_hdr == FRAME_HDR {
                            let kind_raw = le_u32(&hdr[..4]);
                            let len = le_u64(&hdr[4..]);
                            let kind = Kind::from_u32(kind_raw).ok_or_else(|| {
                                (
                                    Dir::In,
                                    LinkErr::Malformed(format!("unknown frame kind {kind_raw}")),
                                )
                            })?;
                            if len > MAX_FRAME {
                                return Err((
                                    Dir::In,
                                    LinkErr::Malformed(format!(
                                        "frame of {len} bytes exceeds the {MAX_FRAME}-byte limit"
                                    )),
                                ));
                            }
                            // `len <= MAX_FRAME` fits in usize on every supported target.
                            head = Some((kind, len as usize));
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_disconnect(&e) => return Err((Dir::In, LinkErr::Eof)),
                Err(e) => return Err((Dir::In, LinkErr::Io(e))),
            }
        }
        if progress {
            continue;
        }
        if expired(deadline) {
            let dir = if head.is_some_and(|(_, len)| payload.len() == len) {
                Dir::Out
            } else {
                Dir::In
            };
            return Err((dir, LinkErr::Timeout));
        }
        let mut fds = Vec::with_capacity(2);
        if sent < frame.len() {
            fds.push(PollFd::new(out.as_fd(), PollFlags::POLLOUT));
        }
        if head.is_none_or(|(_, len)| payload.len() != len) {
            fds.push(PollFd::new(inn.as_fd(), PollFlags::POLLIN));
        }
        match nix::poll::poll(&mut fds, poll_timeout(deadline)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err((Dir::In, LinkErr::Io(e.into()))),
        }
    }
}

/// Marks the bootstrap unusable, tells every linked rank why (best effort) and closes the
/// links, so that the failure reaches every rank in `O(log size)` hops with its diagnosis.
fn fail(state: &mut State, e: &Error) {
    state.failed = Some(e.to_string());
    if let Links::Tree { out, inn } = &state.links {
        let payload = encode_abort(e);
        let deadline = deadline_after(Some(Duration::from_millis(200)));
        for s in out.iter().chain(inn.iter()) {
            let _ = send_frame(s, Kind::Abort, &payload, deadline);
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Rank 0 during the rendezvous: tells every connected peer why it failed (best effort).
fn abort_peers(peers: &[Option<TcpStream>], e: &Error) {
    let payload = encode_abort(e);
    let deadline = deadline_after(Some(Duration::from_millis(200)));
    for s in peers.iter().flatten() {
        let _ = send_frame(s, Kind::Abort, &payload, deadline);
    }
}

/// Converts a stream failure while talking to `rank` into the crate's error.
fn link_error(
    op: &str,
    rank: usize,
    le: LinkErr,
    timeout: Option<Duration>,
    mut missing: Vec<usize>,
) -> Error {
    match le {
        LinkErr::Timeout => {
            missing.sort_unstable();
            Error::Timeout {
                op: op.to_owned(),
                waited: timeout.unwrap_or_default(),
                missing,
            }
        }
        LinkErr::Malformed(m) => Error::Protocol(format!("{op}: rank {rank} sent {m}")),
        other => Error::PeerLost {
            rank,
            context: format!("{op}: {}", other.describe()),
        },
    }
}

/// Rank 0: collects one `kind` frame from every peer, indexed by rank (rank 0's empty).
fn gather_frames(
    peers: &[Option<TcpStream>],
    kind: Kind,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    op: &str,
) -> Result<Vec<Vec<u8>>> {
    let size = peers.len();
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); size];
    let mut pending: Vec<usize> = (1..size).collect();
    let timed_out = |mut missing: Vec<usize>| {
        missing.sort_unstable();
        Error::Timeout {
            op: op.to_owned(),
            waited: timeout.unwrap_or_default(),
            missing,
        }
    };
    while !pending.is_empty() {
        let mut ready = Vec::new();
        {
            let mut fds = Vec::with_capacity(pending.len());
            for &r in &pending {
                let s = peers[r].as_ref().ok_or_else(|| Error::PeerLost {
                    rank: r,
                    context: format!("{op}: no connection to rank {r}"),
                })?;
                fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
            }
            if expired(deadline) {
                return Err(timed_out(pending));
            }
            match nix::poll::poll(&mut fds, poll_timeout(deadline)) {
                Ok(0) | Err(Errno::EINTR) => continue,
                Ok(_) => {}
                Err(e) => return Err(Error::io(format!("{op}: poll"), e.into())),
            }
            for (i, fd) in fds.iter().enumerate() {
                if fd.revents().is_some_and(|ev| !ev.is_empty()) {
                    ready.push(pending[i]);
                }
            }
        }
        for r in ready {
            let Some(s) = peers[r].as_ref() else {
                continue;
            };
            match recv_frame(s, deadline) {
                Ok((k, payload)) if k == kind => {
                    got[r] = payload;
                    pending.retain(|&p| p != r);
                }
                Ok((k, _)) => {
                    return Err(Error::Protocol(format!(
                        "{op}: rank {r} sent a {} frame where its {} was expected",
                        k.name(),
                        kind.name()
                    )))
                }
                Err(LinkErr::Timeout) => return Err(timed_out(pending)),
                Err(le) => return Err(link_error(op, r, le, timeout, pending)),
            }
        }
    }
    Ok(got)
}

/// A connection being accepted whose hello has not fully arrived yet.
struct Pending {
    stream: TcpStream,
    from: SocketAddr,
    /// The nonce sent in the challenge.
    nonce: [u8; NONCE_LEN],
    hello: [u8; HELLO_LEN],
    got: usize,
    /// When it is dropped if the hello is still incomplete.
    deadline: Option<Instant>,
}

/// Most connections a listener keeps waiting for a hello at once (beyond the ranks it
/// expects); when more arrive, the oldest is dropped.
const MAX_PENDING: usize = 256;

/// Rank 0: accepts every other rank, collects the address each listens at for its links, and
/// hands each rank the addresses of the ranks it connects to (`rank + 2^k`). Returns rank 0's
/// own link listener and targets; the rendezvous connections are closed.
fn rendezvous_root(
    listener: TcpListener,
    size: usize,
    uid: &UniqueId,
    timeout: Option<Duration>,
) -> Result<(TcpListener, Vec<SocketAddr>)> {
    let addr = uid.addr();
    let op = format!("rendezvous at {addr}");
    let expected: Vec<bool> = (0..size).map(|r| r != 0).collect();
    let Some(peers) = accept_ranks(&listener, uid, 0, &expected, timeout, &op, None)? else {
        return Err(Error::Protocol(format!("{op}: abandoned")));
    };
    drop(listener);
    let deadline = deadline_after(timeout);
    let fail_with = |e: Error| {
        abort_peers(&peers, &e);
        e
    };
    let raw = gather_frames(&peers, Kind::Addr, deadline, timeout, &op).map_err(fail_with)?;
    // Rank 0's own links listen where the others reached it.
    let ip = peers
        .iter()
        .flatten()
        .next()
        .and_then(|s| s.local_addr().ok())
        .map(|a| a.ip())
        .ok_or_else(|| fail_with(Error::Protocol(format!("{op}: no rank connected"))))?;
    let own = TcpListener::bind((ip, 0)).map_err(|e| {
        fail_with(Error::io(
            format!("{op}: binding rank 0's link listener on {ip}"),
            e,
        ))
    })?;
    let mut addrs: Vec<SocketAddr> = Vec::with_capacity(size);
    addrs.push(
        own.local_addr()
            .map_err(|e| fail_with(Error::io(format!("{op}: rank 0's link listener"), e)))?,
    );
    for (r, bytes) in raw.iter().enumerate().skip(1) {
        let a = std::str::from_utf8(bytes)
            .ok()
            .and_then(|t| t.parse::<SocketAddr>().ok())
            .ok_or_else(|| {
                fail_with(Error::Protocol(format!(
                    "{op}: rank {r} sent a malformed link address"
                )))
            })?;
        addrs.push(a);
    }
    let targets_of = |r: usize| -> Vec<SocketAddr> {
        (0..rounds(size)).map(|k| addrs[up(r, k, size)]).collect()
    };
    let deadline = deadline_after(timeout);
    for (r, slot) in peers.iter().enumerate().skip(1) {
        if let Some(s) = slot {
            let names: Vec<String> = targets_of(r).iter().map(SocketAddr::to_string).collect();
            let payload = encode_list(names.iter().map(|t| t.as_bytes()));
            if let Err(le) = send_frame(s, Kind::Ready, &payload, deadline) {
                return Err(fail_with(link_error(&op, r, le, timeout, vec![r])));
            }
        }
    }
    Ok((own, targets_of(0)))
}

/// Rank 0's listener, or a rank's link listener: accepts connections until every rank marked
/// in `expected` has proved the secret and claimed its rank (as `me`'s peer), or the timeout,
/// or `stop` is set (then returns `Ok(None)`). Returns the streams indexed by rank.
///
/// Hellos are read from all accepted connections at once (one `poll` over the listener and
/// every connection still owing its hello), each with its own deadline, so idle or slow
/// connections cannot delay a rank that sends its hello at once.
fn accept_ranks(
    listener: &TcpListener,
    uid: &UniqueId,
    me: usize,
    expected: &[bool],
    timeout: Option<Duration>,
    op: &str,
    stop: Option<&AtomicBool>,
) -> Result<Option<Vec<Option<TcpStream>>>> {
    let size = expected.len();
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("making the bootstrap listener non-blocking", e))?;
    let deadline = deadline_after(timeout);
    let mut peers: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    let mut pending: Vec<Pending> = Vec::new();
    let want = expected.iter().filter(|&&e| e).count();
    let mut joined = 0;
    while joined < want {
        if stop.is_some_and(|s| s.load(Ordering::Acquire)) {
            return Ok(None);
        }
        // Drop connections whose hello is overdue.
        let now = Instant::now();
        pending.retain(|p| {
            let late = p.deadline.is_some_and(|d| now >= d);
            if late {
                tracing::warn!(from = %p.from, "bootstrap: dropping connection that sent no complete hello in time");
            }
            !late
        });
        if expired(deadline) {
            let missing: Vec<usize> = (0..size)
                .filter(|&r| expected[r] && peers[r].is_none())
                .collect();
            let e = Error::Timeout {
                op: op.to_owned(),
                waited: timeout.unwrap_or_default(),
                missing,
            };
            abort_peers(&peers, &e);
            return Err(e);
        }
        let mut wake = pending
            .iter()
            .fold(deadline, |acc, p| earlier(acc, p.deadline));
        if stop.is_some() {
            wake = earlier(wake, deadline_after(Some(Duration::from_millis(50))));
        }
        let (listener_ready, ready) = {
            let mut fds = Vec::with_capacity(1 + pending.len());
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            for p in &pending {
                fds.push(PollFd::new(p.stream.as_fd(), PollFlags::POLLIN));
            }
            match nix::poll::poll(&mut fds, poll_timeout(wake)) {
                Ok(0) | Err(Errno::EINTR) => continue,
                Ok(_) => {}
                Err(e) => {
                    let err = Error::io(format!("{op}: waiting for connections"), e.into());
                    abort_peers(&peers, &err);
                    return Err(err);
                }
            }
            let is_ready = |fd: &PollFd<'_>| fd.revents().is_some_and(|ev| !ev.is_empty());
            let ready: Vec<bool> = fds[1..].iter().map(is_ready).collect();
            (is_ready(&fds[0]), ready)
        };
        // Hellos first (in arrival order), then new connections.
        let mut i = 0;
        let mut ready = ready.into_iter();
        while i < pending.len() {
            if !ready.next().unwrap_or(false) {
                i += 1;
                continue;
            }
            match read_hello(&mut pending[i]) {
                HelloRead::Partial => i += 1,
                HelloRead::Failed(why) => {
                    let p = pending.remove(i);
                    tracing::warn!(from = %p.from, "bootstrap: dropping connection that sent no hello: {why}");
                }
                HelloRead::Complete => {
                    let p = pending.remove(i);
                    if let Some(rank) = admit(
                        &p.stream, p.from, &p.nonce, &p.hello, &peers, expected, me, uid,
                    ) {
                        tracing::debug!(rank, me, from = %p.from, "bootstrap: rank joined");
                        peers[rank] = Some(p.stream);
                        joined += 1;
                    }
                }
            }
        }
        if listener_ready && joined < want {
            accept_pending(listener, &mut pending, deadline, size, op)
                .inspect_err(|e| abort_peers(&peers, e))?;
        }
    }
    Ok(Some(peers))
}

/// Accepts every connection waiting on the listener into `pending`.
fn accept_pending(
    listener: &TcpListener,
    pending: &mut Vec<Pending>,
    deadline: Option<Instant>,
    size: usize,
    op: &str,
) -> Result<()> {
    loop {
        let (stream, from) = match listener.accept() {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::Interrupted
                        | io::ErrorKind::ConnectionAborted
                ) =>
            {
                return Ok(())
            }
            // Out of descriptors (a flood of connections?): make room and go on.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                if pending.is_empty() {
                    return Err(Error::io(format!("{op}: accepting a connection"), e));
                }
                let p = pending.remove(0);
                tracing::warn!(from = %p.from, "bootstrap: out of file descriptors; dropping the oldest connection still owing a hello");
                continue;
            }
            Err(e) => return Err(Error::io(format!("{op}: accepting a connection"), e)),
        };
        if let Err(e) = stream
            .set_nonblocking(true)
            .and_then(|()| stream.set_nodelay(true))
        {
            tracing::warn!(%from, error = %e, "bootstrap: dropping connection: cannot configure socket");
            continue;
        }
        if pending.len() >= MAX_PENDING + size {
            let p = pending.remove(0);
            tracing::warn!(from = %p.from, "bootstrap: too many connections owing a hello; dropping the oldest");
        }
        let nonce = fresh_nonce()?;
        // 28 bytes into a fresh socket's empty send buffer: never blocks.
        let quick = deadline_after(Some(Duration::from_millis(100)));
        if let Err(le) = write_all_by(&stream, &encode_challenge(&nonce), quick) {
            tracing::warn!(%from, "bootstrap: dropping connection: cannot send the challenge: {}", le.describe());
            continue;
        }
        pending.push(Pending {
            stream,
            from,
            nonce,
            hello: [0; HELLO_LEN],
            got: 0,
            deadline: earlier(deadline, deadline_after(Some(HELLO_TIMEOUT))),
        });
    }
}

enum HelloRead {
    Partial,
    Complete,
    Failed(String),
}

/// Reads what has arrived of a pending connection's hello, without blocking.
fn read_hello(p: &mut Pending) -> HelloRead {
    loop {
        let mut reader = &p.stream;
        match reader.read(&mut p.hello[p.got..]) {
            Ok(0) => return HelloRead::Failed(LinkErr::Eof.describe()),
            Ok(n) => {
                p.got += n;
                if p.got == HELLO_LEN {
                    return HelloRead::Complete;
                }
                if p.got >= MAGIC.len() && p.hello[..MAGIC.len()] != MAGIC {
                    return HelloRead::Failed("not an rshmem bootstrap peer".into());
                }
                // Another protocol version has another hello length: answer it now.
                if p.got >= 12 && le_u32(&p.hello[8..12]) != VERSION {
                    return HelloRead::Complete;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return HelloRead::Partial,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return HelloRead::Failed(e.to_string()),
        }
    }
}

/// The accepting rank `me`: checks a complete hello. The secret is checked before anything
/// else about the claim, and a rank already held is never replaced. Returns the rank if
/// admitted; otherwise logs why and tells the peer, and the caller drops it.
#[allow(clippy::too_many_arguments)]
fn admit(
    stream: &TcpStream,
    from: SocketAddr,
    my_nonce: &[u8; NONCE_LEN],
    hello: &[u8; HELLO_LEN],
    peers: &[Option<TcpStream>],
    expected: &[bool],
    me: usize,
    uid: &UniqueId,
) -> Option<usize> {
    let size = expected.len();
    if hello[..8] != MAGIC {
        tracing::warn!(%from, "bootstrap: dropping connection: not an rshmem bootstrap peer");
        return None;
    }
    let version = le_u32(&hello[8..12]);
    let rank = le_u64(&hello[12..20]);
    let their_size = le_u64(&hello[20..28]);
    let mut peer_nonce = [0u8; NONCE_LEN];
    peer_nonce.copy_from_slice(&hello[28..28 + NONCE_LEN]);
    let proof = &hello[28 + NONCE_LEN..];
    let claim = Claim {
        rank,
        acceptor: me as u64,
        size: their_size,
    };
    let status = if version != VERSION {
        ACK_BAD_VERSION
    } else if !proof_ok(
        uid.secret(),
        Side::Peer,
        my_nonce,
        &peer_nonce,
        claim,
        proof,
    ) {
        ACK_BAD_SECRET
    } else if their_size != size as u64 {
        ACK_BAD_SIZE
    } else if rank >= size as u64 || !expected[rank as usize] {
        ACK_BAD_RANK
    } else if peers[rank as usize].is_some() {
        ACK_DUP_RANK
    } else {
        ACK_OK
    };
    let my_proof = if status == ACK_OK {
        handshake_proof(uid.secret(), Side::Root, my_nonce, &peer_nonce, claim)
    } else {
        [0; PROOF_LEN]
    };
    let ack_deadline = deadline_after(Some(Duration::from_secs(1)));
    let sent = write_all_by(stream, &encode_ack(status, &my_proof), ack_deadline);
    if status == ACK_DUP_RANK {
        tracing::error!(
            %from,
            claimed_rank = rank,
            "bootstrap: rank {me} refuses a second claim of rank {rank}, which another \
             connection already holds (the claimer had the job's secret: two processes were \
             started as rank {rank}, or the secret has leaked); the first claim stays"
        );
        return None;
    }
    if status != ACK_OK {
        tracing::warn!(
            %from,
            claimed_rank = rank,
            "bootstrap: rank {me} refusing connection: {}",
            ack_reason(status)
        );
        return None;
    }
    if let Err(le) = sent {
        tracing::warn!(%from, rank, "bootstrap: dropping rank whose ack failed: {}", le.describe());
        return None;
    }
    Some(rank as usize)
}

/// Connects to rank `acceptor` at one of `targets` (retrying until it listens) and proves the
/// secret as `rank` of `size`; checks the acceptor's proof. `Ok(None)`: `stop` was set.
#[allow(clippy::too_many_arguments)]
fn connect_and_prove(
    rank: usize,
    size: usize,
    acceptor: usize,
    addr: &str,
    targets: &[SocketAddr],
    uid: &UniqueId,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    stop: Option<&AtomicBool>,
) -> Result<Option<TcpStream>> {
    let waited = timeout.unwrap_or_default();
    let mut backoff = Duration::from_millis(5);
    // The last real failure, over all rounds (a round cut short by the deadline keeps it).
    let mut last_err: Option<(SocketAddr, io::Error)> = None;
    let stream = 'connect: loop {
        if stop.is_some_and(|s| s.load(Ordering::Acquire)) {
            return Ok(None);
        }
        for t in targets {
            let attempt = remaining(deadline).map_or(CONNECT_ATTEMPT, |r| r.min(CONNECT_ATTEMPT));
            if attempt.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(t, attempt) {
                Ok(s) => break 'connect s,
                Err(e) => last_err = Some((*t, e)),
            }
        }
        if expired(deadline) {
            let why = match &last_err {
                Some((t, e)) if targets.len() > 1 => format!("{t}: {e}"),
                Some((_, e)) => e.to_string(),
                None => {
                    "the timeout expired before a first connection attempt could be made".to_owned()
                }
            };
            return Err(Error::Timeout {
                op: format!("connect to rank {acceptor} at {addr} (last error: {why})"),
                waited,
                missing: vec![acceptor],
            });
        }
        let pause = remaining(deadline).map_or(backoff, |r| r.min(backoff));
        std::thread::sleep(pause);
        backoff = (backoff * 2).min(Duration::from_millis(250));
    };
    let lost = |le: LinkErr, what: &str| match le {
        LinkErr::Timeout => Error::Timeout {
            op: format!("{what} with rank {acceptor} at {addr}"),
            waited,
            missing: vec![acceptor],
        },
        other => Error::PeerLost {
            rank: acceptor,
            context: format!(
                "{what} with rank {acceptor} at {addr}: {}",
                other.describe()
            ),
        },
    };
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_nonblocking(true))
        .map_err(|e| Error::io("configuring the bootstrap connection", e))?;
    let closed = || {
        Error::Refused(format!(
            "rank {acceptor} at {addr} closed the connection during the handshake (all ranks \
             had already joined, or the address belongs to another program or job)"
        ))
    };
    let mut challenge = [0u8; CHALLENGE_LEN];
    read_exact_by(&stream, &mut challenge, deadline).map_err(|le| match le {
        LinkErr::Eof => closed(),
        other => lost(other, "handshake"),
    })?;
    if challenge[..8] != MAGIC {
        return Err(Error::Refused(format!(
            "{addr} is not an rshmem bootstrap (bad magic)"
        )));
    }
    if le_u32(&challenge[8..12]) != VERSION {
        return Err(Error::Refused(format!(
            "rank {acceptor} at {addr}: {}",
            ack_reason(ACK_BAD_VERSION)
        )));
    }
    let mut their_nonce = [0u8; NONCE_LEN];
    their_nonce.copy_from_slice(&challenge[12..]);
    let my_nonce = fresh_nonce()?;
    let claim = Claim {
        rank: rank as u64,
        acceptor: acceptor as u64,
        size: size as u64,
    };
    write_all_by(
        &stream,
        &encode_hello(uid, claim, &their_nonce, &my_nonce),
        deadline,
    )
    .map_err(|le| lost(le, "handshake"))?;
    let mut ack = [0u8; ACK_LEN];
    read_exact_by(&stream, &mut ack, deadline).map_err(|le| match le {
        LinkErr::Eof => closed(),
        other => lost(other, "handshake"),
    })?;
    if ack[..8] != MAGIC {
        return Err(Error::Refused(format!(
            "{addr} is not an rshmem bootstrap (bad magic)"
        )));
    }
    let status = le_u32(&ack[12..16]);
    if status != ACK_OK {
        return Err(Error::Refused(format!(
            "rank {acceptor} at {addr} refused rank {rank}: {}",
            ack_reason(status)
        )));
    }
    if !proof_ok(
        uid.secret(),
        Side::Root,
        &their_nonce,
        &my_nonce,
        claim,
        &ack[16..],
    ) {
        return Err(Error::Refused(format!(
            "the program listening at {addr} did not prove that it knows the job secret: it is \
             not this job's rank {acceptor} (another program or user holds the address?)"
        )));
    }
    Ok(Some(stream))
}

/// Ranks 1..: connects to rank 0 (retrying until it listens), proves the secret, tells rank 0
/// where it listens for its links, and receives the addresses of the ranks it connects to.
fn rendezvous_leaf(
    rank: usize,
    size: usize,
    uid: &UniqueId,
    timeout: Option<Duration>,
) -> Result<(TcpListener, Vec<SocketAddr>)> {
    let addr = uid.addr();
    let deadline = deadline_after(timeout);
    let targets: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| Error::io(format!("resolving rank 0's bootstrap address {addr}"), e))?
        .collect();
    if targets.is_empty() {
        return Err(Error::Config(format!(
            "bootstrap address {addr} resolves to no address"
        )));
    }
    let Some(stream) =
        connect_and_prove(rank, size, 0, addr, &targets, uid, timeout, deadline, None)?
    else {
        return Err(Error::Protocol(format!("rendezvous at {addr}: abandoned")));
    };
    let op = format!("rendezvous at {addr}");
    let waited = timeout.unwrap_or_default();
    let lost = |le: LinkErr, what: &str| match le {
        LinkErr::Timeout => Error::Timeout {
            op: format!("{what} with rank 0 at {addr}"),
            waited,
            missing: vec![0],
        },
        LinkErr::Malformed(m) => Error::Protocol(format!("{op}: rank 0 sent {m}")),
        other => Error::PeerLost {
            rank: 0,
            context: format!("{what} with rank 0 at {addr}: {}", other.describe()),
        },
    };
    // The links listen on the address this host reached rank 0 from.
    let ip = stream
        .local_addr()
        .map_err(|e| Error::io(format!("{op}: this end's address"), e))?
        .ip();
    let own = TcpListener::bind((ip, 0)).map_err(|e| {
        Error::io(
            format!("{op}: binding rank {rank}'s link listener on {ip}"),
            e,
        )
    })?;
    let mine = own
        .local_addr()
        .map_err(|e| Error::io(format!("{op}: rank {rank}'s link listener"), e))?
        .to_string();
    send_frame(&stream, Kind::Addr, mine.as_bytes(), deadline)
        .map_err(|le| lost(le, "sending the link address"))?;
    let ready_deadline = deadline.and_then(|d| d.checked_add(PEER_SLACK));
    let payload = match recv_frame(&stream, ready_deadline) {
        Ok((Kind::Ready, payload)) => payload,
        Ok((Kind::Abort, payload)) => return Err(decode_abort(&op, 0, &payload)),
        Ok((k, _)) => {
            return Err(Error::Protocol(format!(
                "{op}: expected ready, rank 0 sent {}",
                k.name()
            )))
        }
        Err(le) => return Err(lost(le, "waiting for the other ranks")),
    };
    let links: Option<Vec<SocketAddr>> = decode_list(&payload).and_then(|l| {
        l.iter()
            .map(|b| std::str::from_utf8(b).ok()?.parse().ok())
            .collect()
    });
    match links {
        Some(l) if l.len() == rounds(size) => Ok((own, l)),
        _ => Err(Error::Protocol(format!(
            "{op}: rank 0 sent a malformed list of link addresses"
        ))),
    }
}

/// Every rank after the rendezvous: connects to ranks `rank + 2^k` (at `targets[k]`) while
/// accepting ranks `rank - 2^k` on `listener`, each link authenticated by the secret.
fn connect_tree(
    me: usize,
    size: usize,
    uid: &UniqueId,
    timeout: Option<Duration>,
    listener: TcpListener,
    targets: &[SocketAddr],
) -> Result<Links> {
    let r = rounds(size);
    let op = format!("connecting rank {me}'s bootstrap links");
    let mut expected = vec![false; size];
    for k in 0..r {
        expected[down(me, k, size)] = true;
    }
    let deadline = deadline_after(timeout);
    let stop = AtomicBool::new(false);
    let (accepted, connected) = std::thread::scope(|sc| {
        let acceptor = std::thread::Builder::new()
            .name("rshmem-bootstrap-accept".into())
            .spawn_scoped(sc, || {
                let r = accept_ranks(&listener, uid, me, &expected, timeout, &op, Some(&stop));
                if !matches!(r, Ok(Some(_))) {
                    stop.store(true, Ordering::Release);
                }
                r
            });
        let acceptor = match acceptor {
            Ok(h) => h,
            Err(e) => {
                return (
                    Err(Error::io(format!("{op}: spawning the accept thread"), e)),
                    Ok(None),
                )
            }
        };
        let mut out = Vec::with_capacity(r);
        let mut connected = Ok(None);
        for (k, t) in targets.iter().enumerate() {
            let peer = up(me, k, size);
            match connect_and_prove(
                me,
                size,
                peer,
                &t.to_string(),
                std::slice::from_ref(t),
                uid,
                timeout,
                deadline,
                Some(&stop),
            ) {
                Ok(Some(s)) => out.push(s),
                Ok(None) => break,
                Err(e) => {
                    stop.store(true, Ordering::Release);
                    connected = Err(e);
                    break;
                }
            }
        }
        if out.len() == r {
            connected = Ok(Some(out));
        }
        let accepted = acceptor
            .join()
            .unwrap_or_else(|_| Err(Error::Protocol(format!("{op}: the accept thread panicked"))));
        (accepted, connected)
    });
    drop(listener);
    let (mut accepted, out) = match (accepted, connected) {
        (_, Err(e)) => return Err(e),
        (Err(e), _) => return Err(e),
        (Ok(Some(a)), Ok(Some(o))) => (a, o),
        _ => return Err(Error::Protocol(format!("{op}: abandoned"))),
    };
    let mut inn = Vec::with_capacity(r);
    for k in 0..r {
        let from = down(me, k, size);
        let s = accepted[from].take().ok_or_else(|| Error::PeerLost {
            rank: from,
            context: format!("{op}: no link from rank {from}"),
        })?;
        s.set_nonblocking(true)
            .and_then(|()| s.set_nodelay(true))
            .map_err(|e| Error::io(format!("{op}: configuring the link from rank {from}"), e))?;
        inn.push(s);
    }
    tracing::debug!(rank = me, size, links = 2 * r, "bootstrap: links up");
    Ok(Links::Tree { out, inn })
}

impl Bootstrap for TcpBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.allgather_as(Kind::Allgather, mine)
    }

    fn alltoall(&self, to_each: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        let (me, n) = (self.rank, self.size);
        if to_each.len() != n {
            return Err(Error::InvalidArgument(format!(
                "alltoall needs one buffer per rank ({n}), got {}",
                to_each.len()
            )));
        }
        if n == 1 {
            return Ok(to_each.to_vec());
        }
        // Bruck's routing: in round k every item whose distance to its destination has bit k
        // set moves 2^k ranks on.
        self.collective(Kind::Alltoall, |net| {
            let mut items: Vec<(usize, usize, Vec<u8>)> = to_each
                .iter()
                .enumerate()
                .map(|(dst, d)| (me, dst, d.clone()))
                .collect();
            for k in 0..rounds(n) {
                let (send, keep): (Vec<_>, Vec<_>) = items
                    .into_iter()
                    .partition(|(_, dst, _)| ((dst + n - me) % n) >> k & 1 == 1);
                items = keep;
                let mut payload = Vec::new();
                put_u64(&mut payload, send.len() as u64);
                for (origin, dst, d) in &send {
                    put_u64(&mut payload, *origin as u64);
                    put_u64(&mut payload, *dst as u64);
                    put_u64(&mut payload, d.len() as u64);
                    payload.extend_from_slice(d);
                }
                drop(send);
                let got = net.step(k, &payload)?;
                let from = down(me, k, n);
                let bad =
                    || Error::Protocol(format!("alltoall: rank {from} sent a malformed round {k}"));
                let mut c = Cursor { buf: &got };
                let count = c
                    .u64()
                    .and_then(|v| usize::try_from(v).ok())
                    .ok_or_else(bad)?;
                if count > c.buf.len() / 24 {
                    return Err(bad());
                }
                for _ in 0..count {
                    let origin = c
                        .u64()
                        .and_then(|v| usize::try_from(v).ok())
                        .ok_or_else(bad)?;
                    let dst = c
                        .u64()
                        .and_then(|v| usize::try_from(v).ok())
                        .ok_or_else(bad)?;
                    let len = c
                        .u64()
                        .and_then(|v| usize::try_from(v).ok())
                        .ok_or_else(bad)?;
                    let d = c.bytes(len).ok_or_else(bad)?.to_vec();
                    if origin >= n || dst >= n {
                        return Err(bad());
                    }
                    items.push((origin, dst, d));
                }
                if !c.buf.is_empty() {
                    return Err(bad());
                }
            }
            let mut out: Vec<Option<Vec<u8>>> = vec![None; n];
            for (origin, dst, d) in items {
                if dst != me || out[origin].is_some() {
                    return Err(Error::Protocol(format!(
                        "alltoall: rank {me} ended with rank {origin}'s item for rank {dst}"
                    )));
                }
                out[origin] = Some(d);
            }
            out.into_iter()
                .enumerate()
                .map(|(r, d)| {
                    d.ok_or_else(|| {
                        Error::Protocol(format!("alltoall: rank {me} got nothing from rank {r}"))
                    })
                })
                .collect()
        })
    }

    fn barrier(&self) -> Result<()> {
        if self.size == 1 {
            return Ok(());
        }
        // Dissemination: after round k, this rank has heard (indirectly) from 2^(k+1) ranks.
        self.collective(Kind::Barrier, |net| {
            for k in 0..rounds(self.size) {
                net.step(k, &[])?;
            }
            Ok(())
        })
    }

    fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.size {
            return Err(Error::InvalidArgument(format!(
                "broadcast root {root} is out of range for a job of {} rank(s)",
                self.size
            )));
        }
        // An allgather in which only the root contributes data and every rank names the root
        // it called with, so that ranks disagreeing about the root fail instead of hanging.
        let mut mine = Vec::with_capacity(8 + data.len());
        put_u64(&mut mine, root as u64);
        if self.rank == root {
            mine.extend_from_slice(data);
        }
        let mut all = self.allgather_as(Kind::Broadcast, &mine)?;
        for (r, got) in all.iter().enumerate() {
            let theirs = got.get(..8).map(le_u64);
            if theirs != Some(root as u64) {
                return Err(Error::Protocol(format!(
                    "broadcast: rank {r} named root {} but rank {} named root {root}",
                    theirs.map_or_else(|| "?".to_owned(), |t| t.to_string()),
                    self.rank
                )));
            }
        }
        let mut payload = std::mem::take(&mut all[root]);
        payload.drain(..8);
        Ok(payload)
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}
