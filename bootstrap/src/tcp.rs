//! TCP bootstrap: a unique-id rendezvous at rank 0 and star-shaped collectives through it.
//!
//! # Wire protocol (version 2)
//!
//! All integers are little-endian. The secret itself never crosses the network: each side
//! proves it knows it with an HMAC-SHA256 over both sides' fresh nonces and the claim.
//!
//! * **challenge** (rank 0 → peer, 28 bytes, sent as soon as rank 0 accepts): magic `RSHMEMBS`,
//!   `u32` version, 16-byte random nonce `Nr`.
//! * **hello** (peer → rank 0, 76 bytes): magic, `u32` version, `u64` rank, `u64` size, 16-byte
//!   random nonce `Np`, 32-byte proof `HMAC(secret, "rshmem-bootstrap-v2 peer" ‖ Nr ‖ Np ‖ rank
//!   ‖ size)`.
//! * **ack** (rank 0 → peer, 48 bytes): magic, `u32` version, `u32` status (0 = accepted, else
//!   the reason for refusal; the connection is then closed), 32-byte proof `HMAC(secret,
//!   "rshmem-bootstrap-v2 rank0" ‖ Nr ‖ Np ‖ rank ‖ size)` when accepted (zeros otherwise),
//!   which the peer checks: a program that holds the address without the secret cannot pass
//!   for rank 0.
//! * **frame** (both ways): `u32` kind, `u64` length (at most [`MAX_FRAME`]), payload.
//!
//! Once every rank has connected, rank 0 sends each peer a `Ready` frame. Each collective is a
//! request frame from every peer to rank 0 and a response frame back. If rank 0 cannot complete
//! a step (a rank is late or gone) it sends an `Abort` frame describing the failure to every
//! connected peer and closes all connections, so every rank fails with the same diagnosis.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
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
const VERSION: u32 = 2;
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
        }
    }
}

/// A [`Bootstrap`] over TCP: rank 0 listens at the unique id's address, every other rank
/// connects to it and presents the job secret; collectives go through rank 0.
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
    /// Rank 0: one stream per peer, indexed by rank (index 0 unused).
    Root(Vec<Option<TcpStream>>),
    /// Ranks 1..: the stream to rank 0.
    Leaf(TcpStream),
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

/// What rank 0 sends back after gathering requests.
enum Responses {
    /// The same payload to every rank.
    Same(Vec<u8>),
    /// One payload per rank, indexed by rank.
    PerRank(Vec<Vec<u8>>),
}

impl Responses {
    fn get(&self, rank: usize) -> &[u8] {
        match self {
            Responses::Same(v) => v,
            Responses::PerRank(v) => v.get(rank).map(Vec::as_slice).unwrap_or(&[]),
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

/// Encodes rank 0's failure so that peers can report the same diagnosis.
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

/// Turns an abort frame from rank 0 into the error this rank reports for `op`.
fn decode_abort(op: &str, payload: &[u8]) -> Error {
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
            context: format!("{op} (reported by rank 0): {msg}"),
        },
        Some((_, _, _, msg)) => Error::Protocol(format!("{op} failed on rank 0: {msg}")),
        None => Error::Protocol(format!("{op}: rank 0 sent a malformed abort frame")),
    }
}

fn ack_reason(status: u32) -> &'static str {
    match status {
        ACK_BAD_VERSION => "protocol version mismatch (mixed rshmem versions in one job?)",
        ACK_BAD_SECRET => {
            "wrong job secret (RSHMEM_BOOTSTRAP_SECRET differs between ranks, or this address belongs to another job)"
        }
        ACK_BAD_RANK => "rank out of range for the job",
        ACK_DUP_RANK => "another process already joined with this rank",
        ACK_BAD_SIZE => "job size differs between ranks",
        _ => "unknown reason",
    }
}

/// Which side a handshake proof comes from (domain separation: a peer's proof is never valid
/// as rank 0's, and the other way round).
#[derive(Clone, Copy)]
enum Side {
    Peer,
    Root,
}

/// The HMAC over both nonces and the claim, keyed with the job secret.
fn handshake_mac(
    secret: &[u8; SECRET_LEN],
    side: Side,
    root_nonce: &[u8; NONCE_LEN],
    peer_nonce: &[u8; NONCE_LEN],
    rank: u64,
    size: u64,
) -> Hmac<Sha256> {
    // HMAC accepts keys of any length: this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(match side {
        Side::Peer => b"rshmem-bootstrap-v2 peer",
        Side::Root => b"rshmem-bootstrap-v2 rank0",
    });
    mac.update(root_nonce);
    mac.update(peer_nonce);
    mac.update(&rank.to_le_bytes());
    mac.update(&size.to_le_bytes());
    mac
}

fn handshake_proof(
    secret: &[u8; SECRET_LEN],
    side: Side,
    root_nonce: &[u8; NONCE_LEN],
    peer_nonce: &[u8; NONCE_LEN],
    rank: u64,
    size: u64,
) -> [u8; PROOF_LEN] {
    let mut out = [0u8; PROOF_LEN];
    out.copy_from_slice(
        &handshake_mac(secret, side, root_nonce, peer_nonce, rank, size)
            .finalize()
            .into_bytes(),
    );
    out
}

/// Checks a proof in constant time.
fn proof_ok(
    secret: &[u8; SECRET_LEN],
    side: Side,
    root_nonce: &[u8; NONCE_LEN],
    peer_nonce: &[u8; NONCE_LEN],
    rank: u64,
    size: u64,
    proof: &[u8],
) -> bool {
    handshake_mac(secret, side, root_nonce, peer_nonce, rank, size)
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
    rank: usize,
    size: usize,
    root_nonce: &[u8; NONCE_LEN],
    peer_nonce: &[u8; NONCE_LEN],
) -> [u8; HELLO_LEN] {
    let (rank, size) = (rank as u64, size as u64);
    let mut h = [0u8; HELLO_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&rank.to_le_bytes());
    h[20..28].copy_from_slice(&size.to_le_bytes());
    h[28..28 + NONCE_LEN].copy_from_slice(peer_nonce);
    h[28 + NONCE_LEN..].copy_from_slice(&handshake_proof(
        uid.secret(),
        Side::Peer,
        root_nonce,
        peer_nonce,
        rank,
        size,
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

impl TcpBootstrap {
    /// Joins the job described by `uid` as `rank` of `size`.
    ///
    /// Rank 0 listens at `uid.addr()` (or on `listener`, an already-bound socket, e.g. one
    /// inherited from `rshmemrun`) and waits for every other rank to connect; the others retry
    /// connecting until rank 0 answers. Returns once all ranks have joined. Each step is
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
        } else if rank == 0 {
            let listener = match listener {
                Some(l) => l,
                None => bind(uid.addr())?,
            };
            Links::Root(rendezvous_root(listener, size, uid, timeout)?)
        } else {
            Links::Leaf(rendezvous_leaf(rank, size, uid, timeout)?)
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

    /// Runs one collective: every rank sends `request` to rank 0, rank 0 turns all requests
    /// (indexed by rank) into responses with `respond`, and each rank gets its response.
    fn exchange(
        &self,
        kind: Kind,
        request: Vec<u8>,
        respond: &dyn Fn(Vec<Vec<u8>>) -> Result<Responses>,
    ) -> Result<Vec<u8>> {
        let op = kind.name();
        if request.len() as u64 > MAX_FRAME {
            return Err(Error::InvalidArgument(format!(
                "{op}: {} bytes exceed the bootstrap's {MAX_FRAME}-byte frame limit",
                request.len()
            )));
        }
        let mut state = self.lock();
        if let Some(why) = &state.failed {
            return Err(Error::Protocol(format!(
                "{op}: the bootstrap is unusable after an earlier failure ({why})"
            )));
        }
        let result = match &mut state.links {
            Links::Alone => respond(vec![request]).map(|r| r.get(0).to_vec()),
            Links::Root(peers) => self.root_exchange(peers, kind, request, respond),
            Links::Leaf(root) => self.leaf_exchange(root, kind, &request),
        };
        if let Err(e) = &result {
            fail(&mut state, e);
        }
        result
    }

    fn root_exchange(
        &self,
        peers: &mut [Option<TcpStream>],
        kind: Kind,
        request: Vec<u8>,
        respond: &dyn Fn(Vec<Vec<u8>>) -> Result<Responses>,
    ) -> Result<Vec<u8>> {
        let op = kind.name();
        let deadline = deadline_after(self.timeout);
        let requests = match self.gather(peers, kind, request, deadline) {
            Ok(r) => r,
            Err(e) => {
                abort_peers(peers, &e);
                return Err(e);
            }
        };
        let responses = match respond(requests) {
            Ok(r) => r,
            Err(e) => {
                abort_peers(peers, &e);
                return Err(e);
            }
        };
        // A fresh deadline for the answers: gathering may have used most of the first one.
        let deadline = deadline_after(self.timeout);
        for (r, slot) in peers.iter().enumerate().skip(1) {
            let Some(s) = slot else {
                continue;
            };
            let payload = responses.get(r);
            if payload.len() as u64 > MAX_FRAME {
                let e = Error::InvalidArgument(format!(
                    "{op}: the result for rank {r} ({} bytes) exceeds the bootstrap's \
                     {MAX_FRAME}-byte frame limit",
                    payload.len()
                ));
                abort_peers(peers, &e);
                return Err(e);
            }
            if let Err(le) = send_frame(s, kind, payload, deadline) {
                let e = link_error(op, r, le, self.timeout, vec![r]);
                abort_peers(peers, &e);
                return Err(e);
            }
        }
        Ok(responses.get(0).to_vec())
    }

    /// Rank 0: collects one `kind` frame from every peer, indexed by rank (rank 0's own first).
    fn gather(
        &self,
        peers: &[Option<TcpStream>],
        kind: Kind,
        mine: Vec<u8>,
        deadline: Option<Instant>,
    ) -> Result<Vec<Vec<u8>>> {
        let op = kind.name();
        let mut got: Vec<Option<Vec<u8>>> = vec![None; self.size];
        got[0] = Some(mine);
        let mut pending: Vec<usize> = (1..self.size).collect();
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
                    return Err(self.timeout_error(op, pending));
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
                        got[r] = Some(payload);
                        pending.retain(|&p| p != r);
                    }
                    Ok((k, _)) => {
                        return Err(Error::Protocol(format!(
                            "rank {r} called {} while rank 0 called {op}: every rank must call \
                             the same collectives in the same order",
                            k.name()
                        )))
                    }
                    Err(LinkErr::Timeout) => return Err(self.timeout_error(op, pending)),
                    Err(le) => return Err(link_error(op, r, le, self.timeout, pending)),
                }
            }
        }
        Ok(got.into_iter().map(Option::unwrap_or_default).collect())
    }

    fn timeout_error(&self, op: &str, mut missing: Vec<usize>) -> Error {
        missing.sort_unstable();
        Error::Timeout {
            op: op.to_owned(),
            waited: self.timeout.unwrap_or_default(),
            missing,
        }
    }

    fn leaf_exchange(&self, root: &TcpStream, kind: Kind, request: &[u8]) -> Result<Vec<u8>> {
        let op = kind.name();
        let deadline = deadline_after(self.timeout);
        send_frame(root, kind, request, deadline)
            .map_err(|le| link_error(op, 0, le, self.timeout, vec![0]))?;
        let deadline = deadline.and_then(|d| d.checked_add(PEER_SLACK));
        let (k, payload) = recv_frame(root, deadline)
            .map_err(|le| link_error(op, 0, le, self.timeout, vec![0]))?;
        match k {
            k if k == kind => Ok(payload),
            Kind::Abort => Err(decode_abort(op, &payload)),
            other => Err(Error::Protocol(format!(
                "{op}: rank 0 answered with a {} frame",
                other.name()
            ))),
        }
    }
}

/// Marks the bootstrap unusable and closes its connections, so that the other ranks notice.
fn fail(state: &mut State, e: &Error) {
    state.failed = Some(e.to_string());
    match &mut state.links {
        Links::Root(peers) => peers.iter_mut().for_each(|p| *p = None),
        Links::Leaf(s) => {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        Links::Alone => {}
    }
}

/// Rank 0: tells every connected peer why the current step failed (best effort).
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

/// A connection rank 0 has accepted whose hello has not fully arrived yet.
struct Pending {
    stream: TcpStream,
    from: SocketAddr,
    /// The nonce rank 0 sent in its challenge.
    nonce: [u8; NONCE_LEN],
    hello: [u8; HELLO_LEN],
    got: usize,
    /// When it is dropped if the hello is still incomplete.
    deadline: Option<Instant>,
}

/// Most connections rank 0 keeps waiting for a hello at once (beyond the job's own ranks);
/// when more arrive, the oldest is dropped.
const MAX_PENDING: usize = 256;

/// Rank 0: accepts connections until every other rank has joined, then sends `Ready`.
///
/// Hellos are read from all accepted connections at once (one `poll` over the listener and
/// every connection still owing its hello), each with its own deadline, so idle or slow
/// connections cannot delay a rank that sends its hello at once.
fn rendezvous_root(
    listener: TcpListener,
    size: usize,
    uid: &UniqueId,
    timeout: Option<Duration>,
) -> Result<Vec<Option<TcpStream>>> {
    let addr = uid.addr();
    let op = format!("rendezvous at {addr}");
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("making the bootstrap listener non-blocking", e))?;
    let deadline = deadline_after(timeout);
    let mut peers: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    let mut pending: Vec<Pending> = Vec::new();
    let mut joined = 1;
    while joined < size {
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
            let missing: Vec<usize> = (1..size).filter(|&r| peers[r].is_none()).collect();
            let e = Error::Timeout {
                op,
                waited: timeout.unwrap_or_default(),
                missing,
            };
            abort_peers(&peers, &e);
            return Err(e);
        }
        let wake = pending
            .iter()
            .fold(deadline, |acc, p| earlier(acc, p.deadline));
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
                    if let Some(rank) =
                        admit(&p.stream, p.from, &p.nonce, &p.hello, &peers, size, uid)
                    {
                        tracing::debug!(rank, from = %p.from, "bootstrap: rank joined");
                        peers[rank] = Some(p.stream);
                        joined += 1;
                    }
                }
            }
        }
        if listener_ready && joined < size {
            accept_pending(&listener, &mut pending, deadline, size, &op)
                .inspect_err(|e| abort_peers(&peers, e))?;
        }
    }
    drop(listener);
    drop(pending);
    let deadline = deadline_after(timeout);
    for (r, slot) in peers.iter().enumerate().skip(1) {
        if let Some(s) = slot {
            if let Err(le) = send_frame(s, Kind::Ready, &[], deadline) {
                let e = link_error(&op, r, le, timeout, vec![r]);
                abort_peers(&peers, &e);
                return Err(e);
            }
        }
    }
    Ok(peers)
}

/// Rank 0: accepts every connection waiting on the listener into `pending`.
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

/// Rank 0: checks a complete hello. The secret is checked before anything else about the
/// claim, and a rank already held is never replaced. Returns the rank if admitted; otherwise
/// logs why and tells the peer, and the caller drops it.
fn admit(
    stream: &TcpStream,
    from: SocketAddr,
    root_nonce: &[u8; NONCE_LEN],
    hello: &[u8; HELLO_LEN],
    peers: &[Option<TcpStream>],
    size: usize,
    uid: &UniqueId,
) -> Option<usize> {
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
    let status = if version != VERSION {
        ACK_BAD_VERSION
    } else if !proof_ok(
        uid.secret(),
        Side::Peer,
        root_nonce,
        &peer_nonce,
        rank,
        their_size,
        proof,
    ) {
        ACK_BAD_SECRET
    } else if their_size != size as u64 {
        ACK_BAD_SIZE
    } else if rank == 0 || rank >= size as u64 {
        ACK_BAD_RANK
    } else if peers[rank as usize].is_some() {
        ACK_DUP_RANK
    } else {
        ACK_OK
    };
    let root_proof = if status == ACK_OK {
        handshake_proof(
            uid.secret(),
            Side::Root,
            root_nonce,
            &peer_nonce,
            rank,
            their_size,
        )
    } else {
        [0; PROOF_LEN]
    };
    let ack_deadline = deadline_after(Some(Duration::from_secs(1)));
    let sent = write_all_by(stream, &encode_ack(status, &root_proof), ack_deadline);
    if status == ACK_DUP_RANK {
        tracing::error!(
            %from,
            claimed_rank = rank,
            "bootstrap: refusing a second claim of rank {rank}, which another connection already \
             holds (the claimer had the job's secret: two processes were started as rank {rank}, \
             or the secret has leaked); the first claim stays"
        );
        return None;
    }
    if status != ACK_OK {
        tracing::warn!(
            %from,
            claimed_rank = rank,
            "bootstrap: refusing connection: {}",
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

/// Ranks 1..: connects to rank 0 (retrying until it listens), says hello, waits for `Ready`.
fn rendezvous_leaf(
    rank: usize,
    size: usize,
    uid: &UniqueId,
    timeout: Option<Duration>,
) -> Result<TcpStream> {
    let addr = uid.addr();
    let deadline = deadline_after(timeout);
    let waited = timeout.unwrap_or_default();
    let targets: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| Error::io(format!("resolving rank 0's bootstrap address {addr}"), e))?
        .collect();
    if targets.is_empty() {
        return Err(Error::Config(format!(
            "bootstrap address {addr} resolves to no address"
        )));
    }
    let mut backoff = Duration::from_millis(5);
    // The last real failure, over all rounds (a round cut short by the deadline keeps it).
    let mut last_err: Option<(SocketAddr, io::Error)> = None;
    let stream = 'connect: loop {
        for t in &targets {
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
                op: format!("connect to rank 0 at {addr} (last error: {why})"),
                waited,
                missing: vec![0],
            });
        }
        let pause = remaining(deadline).map_or(backoff, |r| r.min(backoff));
        std::thread::sleep(pause);
        backoff = (backoff * 2).min(Duration::from_millis(250));
    };
    let lost = |le: LinkErr, what: &str| match le {
        LinkErr::Timeout => Error::Timeout {
            op: format!("{what} with rank 0 at {addr}"),
            waited,
            missing: vec![0],
        },
        other => Error::PeerLost {
            rank: 0,
            context: format!("{what} with rank 0 at {addr}: {}", other.describe()),
        },
    };
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_nonblocking(true))
        .map_err(|e| Error::io("configuring the bootstrap connection", e))?;
    let closed = || {
        Error::Refused(format!(
            "rank 0 at {addr} closed the connection during the handshake (all ranks had \
             already joined, or the address belongs to another program or job)"
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
            "rank 0 at {addr}: {}",
            ack_reason(ACK_BAD_VERSION)
        )));
    }
    let mut root_nonce = [0u8; NONCE_LEN];
    root_nonce.copy_from_slice(&challenge[12..]);
    let peer_nonce = fresh_nonce()?;
    write_all_by(
        &stream,
        &encode_hello(uid, rank, size, &root_nonce, &peer_nonce),
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
            "rank 0 at {addr} refused rank {rank}: {}",
            ack_reason(status)
        )));
    }
    if !proof_ok(
        uid.secret(),
        Side::Root,
        &root_nonce,
        &peer_nonce,
        rank as u64,
        size as u64,
        &ack[16..],
    ) {
        return Err(Error::Refused(format!(
            "the program listening at {addr} did not prove that it knows the job secret: it is \
             not this job's rank 0 (another program or user holds the address?)"
        )));
    }
    let op = format!("rendezvous at {addr}");
    let ready_deadline = deadline.and_then(|d| d.checked_add(PEER_SLACK));
    match recv_frame(&stream, ready_deadline) {
        Ok((Kind::Ready, _)) => Ok(stream),
        Ok((Kind::Abort, payload)) => Err(decode_abort(&op, &payload)),
        Ok((k, _)) => Err(Error::Protocol(format!(
            "{op}: expected ready, rank 0 sent {}",
            k.name()
        ))),
        Err(LinkErr::Malformed(m)) => Err(Error::Protocol(format!("{op}: rank 0 sent {m}"))),
        Err(le) => Err(lost(le, "waiting for the other ranks")),
    }
}

impl Bootstrap for TcpBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let resp = self.exchange(Kind::Allgather, mine.to_vec(), &|reqs| {
            Ok(Responses::Same(encode_list(reqs.iter().map(Vec::as_slice))))
        })?;
        match decode_list(&resp) {
            Some(v) if v.len() == self.size => Ok(v),
            _ => Err(Error::Protocol(
                "allgather: malformed result from rank 0".into(),
            )),
        }
    }

    fn alltoall(&self, to_each: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        let size = self.size;
        if to_each.len() != size {
            return Err(Error::InvalidArgument(format!(
                "alltoall needs one buffer per rank ({size}), got {}",
                to_each.len()
            )));
        }
        let request = encode_list(to_each.iter().map(Vec::as_slice));
        let resp = self.exchange(Kind::Alltoall, request, &|reqs| {
            let mut lists = Vec::with_capacity(size);
            for (r, req) in reqs.iter().enumerate() {
                match decode_list(req) {
                    Some(l) if l.len() == size => lists.push(l),
                    _ => {
                        return Err(Error::Protocol(format!(
                            "alltoall: rank {r} sent a malformed request"
                        )))
                    }
                }
            }
            let per_rank = (0..size)
                .map(|dst| encode_list(lists.iter().map(|from| from[dst].as_slice())))
                .collect();
            Ok(Responses::PerRank(per_rank))
        })?;
        match decode_list(&resp) {
            Some(v) if v.len() == size => Ok(v),
            _ => Err(Error::Protocol(
                "alltoall: malformed result from rank 0".into(),
            )),
        }
    }

    fn barrier(&self) -> Result<()> {
        self.exchange(Kind::Barrier, Vec::new(), &|_| {
            Ok(Responses::Same(Vec::new()))
        })?;
        Ok(())
    }

    fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.size {
            return Err(Error::InvalidArgument(format!(
                "broadcast root {root} is out of range for a job of {} rank(s)",
                self.size
            )));
        }
        let mut request = Vec::with_capacity(8 + data.len());
        put_u64(&mut request, root as u64);
        if self.rank == root {
            request.extend_from_slice(data);
        }
        self.exchange(Kind::Broadcast, request, &|mut reqs| {
            for (r, req) in reqs.iter().enumerate() {
                let theirs = req.get(..8).map(le_u64);
                if theirs != Some(root as u64) {
                    return Err(Error::Protocol(format!(
                        "broadcast: rank {r} named root {} but rank 0 named root {root}",
                        theirs.map_or_else(|| "?".to_owned(), |t| t.to_string())
                    )));
                }
            }
            let mut payload = std::mem::take(&mut reqs[root]);
            payload.drain(..8);
            Ok(Responses::Same(payload))
        })
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}
