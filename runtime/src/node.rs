//! The PEs that share this host: who they are, the Unix-socket links between them (used to pass
//! heap file descriptors with SCM_RIGHTS) and the liveness monitor that notices a local PE dying.
//!
//! With `n` PEs on the host, local PE `i` links only to local PEs `i ± 2^k` (mod `n`,
//! `k < ceil(log2 n)`): descriptors travel in `ceil(log2 n)` dissemination rounds (each PE
//! passes on what it holds so far), so a PE holds `2·ceil(log2 n)` sockets instead of `n - 1`.
//! The liveness monitor watches every local PE's process through a pidfd (no connection), or
//! its link socket where a pidfd cannot be had.
//!
//! Sockets are named in Linux's abstract namespace (no file that a killed PE could leave
//! behind), under a random name per job; every connection must present the job token and come
//! from the same user (SO_PEERCRED), checked on both ends.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use rshmem_bootstrap::Bootstrap;

use crate::error::{Error, Result};

/// Tags of the descriptors that carry registered user buffers in [`Node::exchange_fds`] (heap
/// chunks have tags below it).
pub(crate) const USER_TAG: u64 = 1 << 63;

const NO_FAILURE: usize = usize::MAX;

/// Shared failure state: which PE was seen dying first (if any), every PE seen gone, and
/// whether we are shutting down.
#[derive(Debug)]
pub struct Liveness {
    failed: AtomicUsize,
    reason: Mutex<String>,
    finalizing: AtomicBool,
    /// Every PE seen gone, also while finalizing (`finalize`'s last barrier needs it).
    lost: Box<[AtomicBool]>,
    /// Address of this PE's "gone PE" notice word in its control heap (0 until set): the first
    /// failure is written there (PE + 1), so that local peers that see this PE leave in
    /// reaction can blame the PE that died first.
    notice: AtomicUsize,
    /// Called when a failure is recorded: they ring the shared-memory bells this PE's waits
    /// may sleep on (its own, the host barrier's), so that those waits see it at once.
    on_failure: Mutex<Vec<FailureCall>>,
    /// Per PE, how its connection to this PE ended, as the target side of a remote transport
    /// saw it: 0 not (yet), [`LEFT_SILENTLY`] without a notice, else 1 + the PE it said it
    /// left because of (a wire notice sent before it closed).
    departed: Box<[AtomicUsize]>,
}

/// A call of [`Liveness::on_failure`].
struct FailureCall(Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for FailureCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FailureCall")
    }
}

/// [`Liveness::note_departure`]: the connection ended with no notice.
const LEFT_SILENTLY: usize = usize::MAX;

/// How long a PE whose connection to a peer failed waits for that peer's departure notice
/// (or the end of its other connection) before naming the peer itself.
pub(crate) const DEPARTURE_GRACE: Duration = Duration::from_secs(1);

impl Liveness {
    pub(crate) fn new(n_pes: usize) -> Self {
        Liveness {
            failed: AtomicUsize::new(NO_FAILURE),
            reason: Mutex::new(String::new()),
            finalizing: AtomicBool::new(false),
            lost: (0..n_pes).map(|_| AtomicBool::new(false)).collect(),
            notice: AtomicUsize::new(0),
            on_failure: Mutex::new(Vec::new()),
            departed: (0..n_pes).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Records how PE `from`'s connection to this PE ended: with a notice that it left
    /// because PE `cause` was gone, or (None) without one. The first record stays.
    pub(crate) fn note_departure(&self, from: usize, cause: Option<usize>) {
        if let Some(d) = self.departed.get(from) {
            let v = cause.map_or(LEFT_SILENTLY, |c| c + 1);
            let _ = d.compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// How PE `from`'s connection ended, once it did: `Some(Some(cause))` if it said it left
    /// because PE `cause` was gone, `Some(None)` if it ended silently.
    pub(crate) fn departure(&self, from: usize) -> Option<Option<usize>> {
        match self.departed.get(from)?.load(Ordering::Acquire) {
            0 => None,
            LEFT_SILENTLY => Some(None),
            v => Some(Some(v - 1)),
        }
    }

    /// The PE to blame for PE `pe`'s failed connection: waits up to [`DEPARTURE_GRACE`] for
    /// its departure to be recorded, and names the PE its notice names, if any (with the
    /// reason to give), else `pe`.
    pub(crate) fn blame(&self, pe: usize) -> (usize, Option<String>) {
        let until = std::time::Instant::now() + DEPARTURE_GRACE;
        loop {
            match self.departure(pe) {
                Some(Some(c)) if c != pe => {
                    return (
                        c,
                        Some(format!(
                            "PE {pe} left because it saw PE {c} gone (its notice to this PE)"
                        )),
                    )
                }
                Some(_) => return (pe, None),
                None if self.is_finalizing() || std::time::Instant::now() >= until => {
                    return (pe, None)
                }
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// The PE seen failing, with how it was noticed.
    pub fn failed(&self) -> Option<(usize, String)> {
        let pe = self.failed.load(Ordering::Acquire);
        (pe != NO_FAILURE).then(|| {
            (
                pe,
                self.reason.lock().map(|r| r.clone()).unwrap_or_default(),
            )
        })
    }

    /// Cheap check for wait loops.
    #[inline]
    pub fn any_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed) != NO_FAILURE
    }

    /// True once `pe` was seen gone (exited, crashed or closed its connection), also when that
    /// happened while finalizing.
    #[inline]
    pub fn is_lost(&self, pe: usize) -> bool {
        self.lost.get(pe).is_some_and(|l| l.load(Ordering::Acquire))
    }

    /// Records that `pe` is gone. Outside finalize the first report is the job's failure (waits
    /// fail with it); while finalizing only `is_lost` changes (a peer that finished finalize
    /// closes its connections, which is no failure).
    pub(crate) fn report(&self, pe: usize, reason: String) {
        if let Some(l) = self.lost.get(pe) {
            l.store(true, Ordering::Release);
        }
        if self.finalizing.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut r) = self.reason.lock() {
            if self.failed.load(Ordering::Acquire) == NO_FAILURE {
                *r = reason;
                self.failed.store(pe, Ordering::Release);
                crate::hang::tell_launcher_lost(pe);
                let at = self.notice.load(Ordering::Acquire);
                if at != 0 {
                    // SAFETY: `at` is the aligned notice word in this PE's control heap, set by
                    // `set_notice` and mapped until the World (which owns this Liveness's
                    // users) is dropped; peers only read it.
                    unsafe { &*(at as *const AtomicU64) }.store(pe as u64 + 1, Ordering::Release);
                }
                // Waits asleep on a shared-memory bell see the failure now, not after a nap.
                if let Ok(calls) = self.on_failure.lock() {
                    for ring in calls.iter() {
                        (ring.0)();
                    }
                }
            }
        }
    }

    /// Forgets the calls of [`on_failure`](Liveness::on_failure) (the bells they ring are
    /// about to be unmapped).
    pub(crate) fn clear_on_failure(&self) {
        if let Ok(mut c) = self.on_failure.lock() {
            c.clear();
        }
    }

    /// Adds a call made when a failure is recorded (see the field).
    pub(crate) fn on_failure(&self, call: Box<dyn Fn() + Send + Sync>) {
        if let Ok(mut c) = self.on_failure.lock() {
            c.push(FailureCall(call));
        }
    }

    /// Writes `pe` into this PE's notice word unless one is there already (for failures found
    /// while finalizing, which `report` does not record).
    pub(crate) fn note_root(&self, pe: usize) {
        let at = self.notice.load(Ordering::Acquire);
        if at != 0 {
            // SAFETY: as in `report`.
            let w = unsafe { &*(at as *const AtomicU64) };
            let _ = w.compare_exchange(0, pe as u64 + 1, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Sets the address of this PE's notice word (see the field).
    pub(crate) fn set_notice(&self, addr: usize) {
        self.notice.store(addr, Ordering::Release);
    }

    /// True once finalize stopped watching peers (a closing connection is then expected).
    pub(crate) fn is_finalizing(&self) -> bool {
        self.finalizing.load(Ordering::Acquire)
    }

    pub(crate) fn set_finalizing(&self) {
        self.finalizing.store(true, Ordering::Release);
    }
}

/// The [`Error::PeerLost`] that the call `call` of PE `me` fails with when it finds PE `pe`
/// gone for `reason`, after reporting `pe` to `live` (as [`Liveness::report`]) where there is
/// one (a transport made before the job's liveness watch has none yet).
pub(crate) fn peer_lost(
    live: Option<&Liveness>,
    call: &'static str,
    me: usize,
    pe: usize,
    reason: String,
) -> Error {
    if let Some(l) = live {
        l.report(pe, reason.clone());
    }
    Error::PeerLost {
        call,
        me,
        pe,
        reason,
    }
}

/// The node-local group of PEs.
pub struct Node {
    /// Global PE numbers of the PEs on this host, ascending.
    pub pes: Vec<usize>,
    /// This PE's index in `pes`.
    pub me: usize,
    /// `local_of[pe]` = index in `pes`, or None for PEs on other hosts.
    pub local_of: Vec<Option<usize>>,
    /// The job token (from PE 0), presented by every connection between PEs.
    pub token: Vec<u8>,
    /// `out[k]`: the stream this PE opened to local PE `me + 2^k`; `inn[k]`: the one local PE
    /// `me - 2^k` opened to this PE (local indices, mod the number of local PEs).
    out: Vec<UnixStream>,
    inn: Vec<UnixStream>,
    /// Process id and start time (clock ticks after boot) of each local PE, as it reported them.
    procs: Vec<(u32, u64)>,
    /// Every local PE runs in this process's PID namespace (as they reported it).
    one_pidns: bool,
    timeout: Option<Duration>,
    /// The liveness thread, the write end of its stop pipe, and a second read end kept open
    /// here so that the stop write never meets a closed pipe (EPIPE, and SIGPIPE in C
    /// programs, which do not ignore it) when the thread has already ended on its own.
    monitor: Option<(std::thread::JoinHandle<()>, OwnedFd, OwnedFd)>,
}

crate::debug_fields!(Node, |n| { pes: n.pes, me: n.me });

/// This host's identity: `RSHMEM_NODE_ID`, else hostname plus kernel boot id.
pub fn host_identity(over: Option<&str>) -> String {
    if let Some(id) = over {
        return id.to_string();
    }
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("{host}/{}", boot.trim())
}

impl Node {
    /// Collective over all PEs: finds the PEs sharing this host and connects them pairwise.
    pub fn establish(
        boot: &dyn Bootstrap,
        node_id: &str,
        timeout: Option<Duration>,
    ) -> Result<Self> {
        let call = "init";
        let n = boot.size();
        let my_pe = boot.rank();
        // Host identity, with this process's id, start time and PID namespace (for the
        // liveness watch and for opening a local PE's heap through /proc).
        let mut mine = Vec::with_capacity(ID_AT + node_id.len());
        mine.extend_from_slice(&std::process::id().to_le_bytes());
        mine.extend_from_slice(
            &proc_start_time(std::process::id())
                .unwrap_or(0)
                .to_le_bytes(),
        );
        mine.extend_from_slice(&pid_namespace().unwrap_or(0).to_le_bytes());
        mine.extend_from_slice(node_id.as_bytes());
        let all = boot.allgather(&mine)?;
        let same_host = |b: &[u8]| b.get(ID_AT..) == Some(node_id.as_bytes());
        let pes: Vec<usize> = (0..n).filter(|&p| same_host(&all[p])).collect();
        let word = |b: &[u8], at: usize| {
            let mut t = [0u8; 8];
            t.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(t)
        };
        let procs: Vec<(u32, u64)> = pes
            .iter()
            .map(|&p| {
                let b = &all[p];
                (u32::from_le_bytes([b[0], b[1], b[2], b[3]]), word(b, 4))
            })
            .collect();
        // One PID namespace for the host's PEs (and a known one): their process ids are valid
        // here, so a pidfd or /proc/PID needs no check of the start time.
        let my_ns = word(&all[my_pe], 12);
        let one_pidns = my_ns != 0 && pes.iter().all(|&p| word(&all[p], 12) == my_ns);
        let mut local_of = vec![None; n];
        for (i, &p) in pes.iter().enumerate() {
            local_of[p] = Some(i);
        }
        let me =
            local_of[my_pe].ok_or_else(|| Error::invalid(call, "node identity inconsistent"))?;

        // Job token from rank 0, used to authenticate local socket connections.
        let mut tok = [0u8; 16];
        if my_pe == 0 {
            getrandom::fill(&mut tok).map_err(|e| {
                Error::os(call, "random token", std::io::Error::other(e.to_string()))
            })?;
        }
        let token = boot.broadcast(0, &tok)?;

        // The node leader picks a random name for the node's sockets. They live in the
        // abstract namespace (no file anywhere), so a PE killed at any moment leaves nothing
        // behind; the name is no secret (it is visible in /proc/net/unix): connections are
        // authenticated by the job token and the peer's user id.
        let mut nonce = [0u8; 16];
        if me == 0 && pes.len() > 1 {
            getrandom::fill(&mut nonce).map_err(|e| {
                Error::os(
                    call,
                    "random socket name",
                    std::io::Error::other(e.to_string()),
                )
            })?;
        }
        let names = boot.allgather(&nonce)?;
        let leader_nonce: String = names[pes[0]].iter().map(|b| format!("{b:02x}")).collect();
        let addr_of = |j: usize| -> Result<std::os::unix::net::SocketAddr> {
            let name = format!("rshmem-{leader_nonce}-{j}");
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .map_err(|e| Error::os(call, format!("socket name {name}"), e))
        };

        let n_local = pes.len();
        let rounds = log2_ceil(n_local);
        let mut out: Vec<UnixStream> = Vec::with_capacity(rounds);
        let mut inn: Vec<Option<UnixStream>> = (0..rounds).map(|_| None).collect();
        let mut listener = None;
        let result = (|| -> Result<()> {
            if n_local > 1 {
                let l = UnixListener::bind_addr(&addr_of(me)?).map_err(|e| {
                    Error::os(call, format!("binding the local socket of PE {my_pe}"), e)
                })?;
                listener = Some(l);
            }
            boot.barrier()?;
            // Connect to local PEs me + 2^k (the connections wait in their listeners' backlog),
            // then accept local PEs me - 2^k.
            for k in 0..rounds {
                let j = (me + (1 << k)) % n_local;
                let mut s = UnixStream::connect_addr(&addr_of(j)?).map_err(|e| {
                    Error::os(call, format!("connecting to local PE {}", pes[j]), e)
                })?;
                let same_user =
                    nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
                        .map(|c| c.uid() == nix::unistd::getuid().as_raw())
                        .unwrap_or(false);
                if !same_user {
                    return Err(Error::invalid(
                        call,
                        format!("the local socket of PE {} belongs to another user", pes[j]),
                    ));
                }
                let mut hello = token.clone();
                hello.extend_from_slice(&(me as u32).to_le_bytes());
                s.write_all(&hello)
                    .map_err(|e| Error::os(call, "local hello", e))?;
                out.push(s);
            }
            if let Some(l) = &listener {
                let deadline = timeout.map(|t| Instant::now() + t);
                let from_round = |j: usize| (0..rounds).find(|&k| (j + (1 << k)) % n_local == me);
                let mut waiting: Vec<usize> = (0..rounds)
                    .map(|k| (me + n_local - (1 << k)) % n_local)
                    .collect();
                l.set_nonblocking(true)
                    .map_err(|e| Error::os(call, "listener", e))?;
                while !waiting.is_empty() {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            s.set_nonblocking(false)
                                .map_err(|e| Error::os(call, "accept", e))?;
                            s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                            let uid_ok = nix::sys::socket::getsockopt(
                                &s,
                                nix::sys::socket::sockopt::PeerCredentials,
                            )
                            .map(|c| c.uid() == nix::unistd::getuid().as_raw())
                            .unwrap_or(false);
                            let mut hello = [0u8; 20];
                            let ok = uid_ok
                                && s.read_exact(&mut hello).is_ok()
                                && hello[..16] == token[..];
                            let j = u32::from_le_bytes([hello[16], hello[17], hello[18], hello[19]])
                                as usize;
                            let round = from_round(j).filter(|_| j < n_local);
                            let Some(k) = round.filter(|_| ok && waiting.contains(&j)) else {
                                tracing::warn!(target: "rshmem::node", "refused a local connection without the job token (or from a PE that links elsewhere)");
                                continue;
                            };
                            s.set_read_timeout(None).ok();
                            waiting.retain(|&w| w != j);
                            inn[k] = Some(s);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            if deadline.is_some_and(|d| Instant::now() > d) {
                                let names: Vec<String> =
                                    waiting.iter().map(|&j| pes[j].to_string()).collect();
                                return Err(Error::Timeout {
                                    call,
                                    me: my_pe,
                                    pe: waiting.first().map(|&j| pes[j]),
                                    what: format!("local PE(s) {} to connect", names.join(", ")),
                                    waited: timeout.unwrap_or_default(),
                                });
                            }
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        Err(e) => return Err(Error::os(call, "accepting local PEs", e)),
                    }
                }
            }
            Ok(())
        })();
        // Everyone is connected (or failed); the listeners' names disappear with them.
        let sync = boot.barrier();
        drop(listener);
        result?;
        sync?;
        let inn = inn
            .into_iter()
            .enumerate()
            .map(|(k, s)| {
                s.ok_or_else(|| {
                    Error::invalid(
                        call,
                        format!(
                            "no link from local PE {}",
                            pes[(me + n_local - (1 << k)) % n_local]
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Node {
            pes,
            me,
            local_of,
            token,
            out,
            inn,
            procs,
            one_pidns,
            timeout,
            monitor: None,
        })
    }

    /// Number of PEs on this host.
    /// Process id and start time of local PE `j`, and whether every local PE shares this
    /// process's PID namespace (so that the id means the same process here).
    pub(crate) fn process(&self, j: usize) -> ((u32, u64), bool) {
        (self.procs[j], self.one_pidns)
    }

    /// The job's timeout for waits on local PEs.
    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    pub fn len(&self) -> usize {
        self.pes.len()
    }

    /// Shares `fd` (tagged with `tag`) with every other local PE and returns theirs, indexed by
    /// local index (None for myself). Collective over the node: in round `k` this PE passes the
    /// descriptors of local PEs `me - j` (`j < min(2^k, n - 2^k)`, its own first) to local PE
    /// `me + 2^k` and receives as many from local PE `me - 2^k`.
    pub fn exchange_fds(
        &self,
        call: &'static str,
        tag: u64,
        fd: &OwnedFd,
        live: &Liveness,
    ) -> Result<Vec<Option<OwnedFd>>> {
        let n = self.pes.len();
        let me = self.me;
        let my_pe = self.pes[me];
        let mut have: Vec<Option<OwnedFd>> = (0..n).map(|_| None).collect();
        for (k, (out, inn)) in self.out.iter().zip(&self.inn).enumerate() {
            let step = 1usize << k;
            let cnt = step.min(n - step);
            let (to, from) = ((me + step) % n, (me + n - step) % n);
            let mut raw: Vec<RawFd> = Vec::with_capacity(cnt);
            for j in 0..cnt {
                let o = (me + n - j) % n;
                let f = if o == me {
                    fd.as_raw_fd()
                } else {
                    have[o].as_ref().map(AsRawFd::as_raw_fd).ok_or_else(|| {
                        Error::invalid(
                            call,
                            format!("no descriptor of PE {} to pass on", self.pes[o]),
                        )
                    })?
                };
                raw.push(f);
            }
            for (c, chunk) in raw.chunks(FD_CHUNK).enumerate() {
                let hdr = fd_header(tag, k, c * FD_CHUNK, chunk.len());
                let iov = [IoSlice::new(&hdr)];
                let cmsg = [ControlMessage::ScmRights(chunk)];
                sendmsg::<()>(out.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None)
                    .map_err(|e| self.link_error(call, to, e.into(), live))?;
            }
            let mut got = 0;
            while got < cnt {
                self.wait_readable(call, from, inn, my_pe)?;
                let mut hdr = [0u8; 32];
                let mut iov = [IoSliceMut::new(&mut hdr)];
                let mut space = nix::cmsg_space!([RawFd; FD_CHUNK]);
                let msg = recvmsg::<()>(
                    inn.as_raw_fd(),
                    &mut iov,
                    Some(&mut space),
                    MsgFlags::MSG_CMSG_CLOEXEC,
                )
                .map_err(|e| self.link_error(call, from, e.into(), live))?;
                let mut fds: Vec<OwnedFd> = Vec::new();
                for c in msg
                    .cmsgs()
                    .map_err(|e| Error::os(call, "reading a heap descriptor", e))?
                {
                    if let ControlMessageOwned::ScmRights(list) = c {
                        for raw in list {
                            // SAFETY: the kernel just installed `raw` in our fd table for this
                            // message; nothing else owns it.
                            fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                        }
                    }
                }
                let bytes = msg.bytes;
                if bytes == 0 {
                    return Err(self.lost(call, from, "its socket closed"));
                }
                let word = |i: usize| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&hdr[8 * i..8 * i + 8]);
                    u64::from_le_bytes(b)
                };
                if bytes != hdr.len() || word(0) != tag {
                    let what = |t: u64| {
                        if t & USER_TAG != 0 {
                            format!("a registered buffer (share {})", t & !USER_TAG)
                        } else {
                            format!("heap chunk {t}")
                        }
                    };
                    return Err(Error::AsymmetricCall {
                        call,
                        details: format!(
                            "PE {} shared {} while PE {my_pe} shared {}",
                            self.pes[from],
                            what(word(0)),
                            what(tag)
                        ),
                    });
                }
                let count = word(3) as usize;
                if word(1) != k as u64
                    || word(2) != got as u64
                    || count != fds.len()
                    || got + count > cnt
                {
                    return Err(Error::invalid(
                        call,
                        format!(
                            "PE {} sent a malformed set of heap descriptors (round {k}: {} of {cnt} from {got})",
                            self.pes[from],
                            fds.len()
                        ),
                    ));
                }
                for (i, f) in fds.into_iter().enumerate() {
                    let o = (from + n - (got + i)) % n;
                    if o != me {
                        have[o] = Some(f);
                    }
                }
                got += count;
            }
        }
        if let Some(j) = (0..n).find(|&j| j != me && have[j].is_none()) {
            return Err(Error::invalid(
                call,
                format!("PE {} sent no heap descriptor", self.pes[j]),
            ));
        }
        Ok(have)
    }

    fn wait_readable(
        &self,
        call: &'static str,
        j: usize,
        s: &UnixStream,
        my_pe: usize,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            let mut pfd = [PollFd::new(s.as_fd(), PollFlags::POLLIN)];
            let n = poll(&mut pfd, PollTimeout::from(100u16))
                .map_err(|e| Error::os(call, "poll", e))?;
            if n > 0 {
                return Ok(());
            }
            if let Some(t) = self.timeout {
                if start.elapsed() > t {
                    return Err(Error::Timeout {
                        call,
                        me: my_pe,
                        pe: Some(self.pes[j]),
                        what: format!("PE {} to share its new heap chunk (did it make the same allocation call?)", self.pes[j]),
                        waited: t,
                    });
                }
            }
        }
    }

    fn link_error(
        &self,
        call: &'static str,
        j: usize,
        e: std::io::Error,
        live: &Liveness,
    ) -> Error {
        let err = self.lost(call, j, &format!("its socket failed: {e}"));
        live.report(self.pes[j], "socket failed".into());
        err
    }

    fn lost(&self, call: &'static str, j: usize, why: &str) -> Error {
        Error::PeerLost {
            call,
            me: self.pes[self.me],
            pe: self.pes[j],
            reason: why.to_string(),
        }
    }

    /// Starts a thread that reports a local PE whose socket hangs up (it exited or crashed).
    /// `notice(j)` is the address of local PE `j`'s notice word (see [`Liveness`]), mapped
    /// until [`stop_monitor`](Node::stop_monitor) returns.
    pub(crate) fn start_monitor(
        &mut self,
        live: Arc<Liveness>,
        notice: impl Fn(usize) -> usize,
        notice_mapped: impl Fn(usize) -> bool + Send + 'static,
    ) -> Result<()> {
        let mut watched = Vec::new();
        let n = self.pes.len();
        for j in (0..n).filter(|&j| j != self.me) {
            // The process itself where a pidfd can be had (no connection needed), else the link
            // socket to it where there is one.
            if let Some(fd) = pidfd_of(self.procs[j], self.one_pidns) {
                watched.push(Watched {
                    pe: self.pes[j],
                    local: j,
                    fd,
                    events: libc::POLLIN,
                    notice: notice(j),
                });
                continue;
            }
            let link = (0..self.out.len()).find_map(|k| {
                if (self.me + (1 << k)) % n == j {
                    Some(&self.out[k])
                } else if (j + (1 << k)) % n == self.me {
                    Some(&self.inn[k])
                } else {
                    None
                }
            });
            match link {
                Some(s) => watched.push(Watched {
                    pe: self.pes[j],
                    local: j,
                    fd: s
                        .as_fd()
                        .try_clone_to_owned()
                        .map_err(|e| Error::os("init", "dup", e))?,
                    events: libc::POLLRDHUP,
                    notice: notice(j),
                }),
                None => {
                    tracing::warn!(target: "rshmem::node", "cannot watch local PE {} (no pidfd: another PID namespace, or a kernel before 5.3): its death is found by the timeout instead", self.pes[j])
                }
            }
        }
        if watched.is_empty() {
            return Ok(());
        }
        // Close-on-exec: a program that starts others (`system()`) must not hand them this pipe, one
        // byte of which would stop the watch.
        let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::os("init", "pipe", e))?;
        let keep_r = stop_r
            .try_clone()
            .map_err(|e| Error::os("init", "dup", e))?;
        let h = std::thread::Builder::new()
            .name("rshmem-liveness".into())
            .spawn(move || monitor_loop(watched, stop_r, live, notice_mapped))
            .map_err(|e| Error::os("init", "spawning the liveness thread", e))?;
        self.monitor = Some((h, stop_w, keep_r));
        Ok(())
    }

    /// For a world dropped without finalize: keeps the connections to the local PEs open for
    /// `for_how_long` more (or until the process exits, if sooner), so that the peers' reports
    /// of this PE's departure come after what the program prints as it ends (the error its
    /// `main` returns), not before it.
    pub(crate) fn close_links_later(&mut self, for_how_long: Duration) {
        let links: Vec<UnixStream> = self.out.drain(..).chain(self.inn.drain(..)).collect();
        if links.is_empty() {
            return;
        }
        let _ = std::thread::Builder::new()
            .name("rshmem-linger".into())
            .spawn(move || {
                std::thread::sleep(for_how_long);
                drop(links);
            });
    }

    /// Stops the liveness thread (it may have returned already, once every peer was gone).
    pub(crate) fn stop_monitor(&mut self) {
        if let Some((h, w, keep_r)) = self.monitor.take() {
            let _ = nix::unistd::write(&w, &[1u8]);
            drop(w);
            let _ = h.join();
            drop(keep_r);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_monitor();
    }
}

/// A local PE the liveness thread watches.
struct Watched {
    pe: usize,
    /// Its local index.
    local: usize,
    /// Its pidfd (readable once it exited) or a socket linked to it (hung up once it exited).
    fd: OwnedFd,
    /// The poll events meaning "gone": `POLLIN` for a pidfd, `POLLRDHUP` for a socket.
    events: libc::c_short,
    /// Address of its notice word (0: none).
    notice: usize,
}

fn monitor_loop(
    watched: Vec<Watched>,
    stop: OwnedFd,
    live: Arc<Liveness>,
    notice_mapped: impl Fn(usize) -> bool,
) {
    let mut alive: Vec<bool> = vec![true; watched.len()];
    loop {
        let idx: Vec<usize> = (0..watched.len()).filter(|&i| alive[i]).collect();
        let mut pfds: Vec<libc::pollfd> = Vec::with_capacity(idx.len() + 1);
        pfds.push(libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for &i in &idx {
            pfds.push(libc::pollfd {
                fd: watched[i].fd.as_raw_fd(),
                events: watched[i].events,
                revents: 0,
            });
        }
        // SAFETY: `pfds` is a valid array of pollfd for the given length; the fds are owned by
        // this thread (`watched`, `stop`) and stay open during the call. Raw poll(2) is used
        // because nix's PollFlags cannot represent POLLRDHUP in `revents`.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, -1) };
        if r < 0 {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        if pfds[0].revents != 0 {
            return;
        }
        // Hang-ups of PEs that left in reaction to another's death (their notice names it)
        // are handled after the others, and blame the PE named: the first failure reported is
        // the one that started it.
        let mut gone: Vec<(usize, Option<usize>)> = Vec::new();
        for (k, &i) in idx.iter().enumerate() {
            if pfds[k + 1].revents
                & (watched[i].events | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL)
                != 0
            {
                alive[i] = false;
                let w = &watched[i];
                // A PE whose control heap this PE never mapped (lazy mapping) cannot be read
                // any more: it is blamed itself.
                let blamed = (w.notice != 0 && notice_mapped(w.local))
                    .then(|| {
                        // SAFETY: the notice word is an aligned u64 in that PE's control-heap
                        // slice, mapped in this process (checked above) until the monitor is
                        // stopped (the memory stays valid after its owner exits).
                        unsafe { &*(w.notice as *const AtomicU64) }.load(Ordering::Acquire)
                    })
                    .and_then(|v| v.checked_sub(1))
                    .and_then(|p| usize::try_from(p).ok())
                    .filter(|&p| p != w.pe && p < live.lost.len());
                gone.push((w.pe, blamed));
            }
        }
        gone.sort_by_key(|&(_, blamed)| blamed.is_some());
        for (pe, blamed) in gone {
            if !live.finalizing.load(Ordering::Acquire) {
                match blamed {
                    Some(root) => {
                        tracing::error!(target: "rshmem::node", "PE {pe} left after it saw PE {root} gone")
                    }
                    None => {
                        tracing::error!(target: "rshmem::node", "PE {pe} closed its connection (exited or crashed)")
                    }
                }
            }
            if let Some(root) = blamed {
                live.report(root, format!("PE {pe} saw it gone first, then left too"));
            }
            live.report(
                pe,
                "it exited or crashed: its connection to this PE closed".into(),
            );
        }
        if alive.iter().all(|a| !a) {
            return;
        }
    }
}

/// Most descriptors passed in one message (the kernel's limit, SCM_MAX_FD, is 253).
const FD_CHUNK: usize = 250;

/// The header of one message of [`Node::exchange_fds`]: tag, round, index of its first
/// descriptor in the round, number of descriptors.
fn fd_header(tag: u64, round: usize, first: usize, count: usize) -> [u8; 32] {
    let mut h = [0u8; 32];
    for (i, v) in [tag, round as u64, first as u64, count as u64]
        .into_iter()
        .enumerate()
    {
        h[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }
    h
}

/// `ceil(log2(n))`: the dissemination rounds among `n` PEs (0 for one).
fn log2_ceil(n: usize) -> usize {
    if n <= 1 {
        0
    } else {
        (usize::BITS - (n - 1).leading_zeros()) as usize
    }
}

/// Where the host identity starts in a PE's [`Node::establish`] record, after its process
/// id (4 bytes), start time (8) and PID namespace (8).
const ID_AT: usize = 20;

/// This process's PID namespace: the inode of `/proc/self/ns/pid` (None where it cannot be
/// read).
fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// Start time of process `pid` in clock ticks after boot (field 22 of `/proc/PID/stat`).
pub(crate) fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// A pidfd for local PE process `(pid, start time)`, if this kernel has pidfds and the process
/// with that id here is that PE (not another process of another PID namespace). With
/// `one_pidns` (every local PE reported this process's PID namespace) the start time is not
/// read again: the PE was alive when it reported its id moments ago, and for another process
/// to hold that id since, the kernel would have had to hand out every other id first.
fn pidfd_of((pid, start): (u32, u64), one_pidns: bool) -> Option<OwnedFd> {
    if pid == 0 || start == 0 {
        return None;
    }
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new descriptor or -1;
    // no memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if r < 0 {
        return None;
    }
    // SAFETY: the syscall just returned this descriptor (close-on-exec by definition); nothing
    // else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(r as RawFd) };
    // Checked after opening: the pidfd holds on to the process it was opened for.
    (one_pidns || proc_start_time(pid) == Some(start)).then_some(fd)
}

/// This PE's rank among the PEs of its host (picks the GPU) and how many PEs the host runs.
/// Under `RSHMEM_DISABLE_P2P=1` every PE is its own node, so the real host is found again from
/// the host identity (one allgather, made by every PE since they share the setting).
pub(crate) fn host_place(
    boot: &dyn rshmem_bootstrap::Bootstrap,
    cfg: &crate::config::Config,
    node: &Node,
) -> crate::error::Result<(usize, usize)> {
    if !cfg.disable_p2p {
        return Ok((node.me, node.len()));
    }
    let id = host_identity(cfg.node_id.as_deref());
    let all = boot.allgather(id.as_bytes())?;
    let me = boot.rank();
    let same = |p: &usize| all[*p] == all[me];
    Ok((
        (0..me).filter(same).count(),
        (0..all.len()).filter(same).count(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the liveness thread on `peers` (PE, its notice value) whose other ends are already
    /// closed, until it has seen every hang-up; returns what it recorded.
    fn monitor_after_hangups(n: usize, peers: &[(usize, u64)]) -> Liveness {
        monitor_after_hangups_mapped(n, peers, true)
    }

    /// As above; `mapped`: whether the notice words count as mapped (lazy mapping).
    fn monitor_after_hangups_mapped(n: usize, peers: &[(usize, u64)], mapped: bool) -> Liveness {
        let live = Arc::new(Liveness::new(n));
        let notices: Vec<Box<AtomicU64>> = peers
            .iter()
            .map(|&(_, v)| Box::new(AtomicU64::new(v)))
            .collect();
        let mut watched = Vec::new();
        for (&(pe, _), notice) in peers.iter().zip(&notices) {
            let (a, b) = UnixStream::pair().expect("socketpair");
            drop(b);
            watched.push(Watched {
                pe,
                local: pe,
                fd: OwnedFd::from(a),
                events: libc::POLLRDHUP,
                notice: &**notice as *const AtomicU64 as usize,
            });
        }
        let (stop_r, _stop_w) = nix::unistd::pipe().expect("pipe");
        let l = live.clone();
        // Returns once every watched PE hung up (all did before it started).
        std::thread::spawn(move || monitor_loop(watched, stop_r, l, move |_| mapped))
            .join()
            .expect("monitor thread");
        drop(notices);
        Arc::into_inner(live).expect("the monitor thread is done")
    }

    #[test]
    fn a_pe_that_left_in_reaction_is_not_blamed() {
        // PE 1 left after seeing PE 3 gone (its notice says 3 + 1), in the same poll as PE 3's
        // own hang-up and before it in watch order: PE 3 is the failure.
        let live = monitor_after_hangups(4, &[(1, 4), (3, 0)]);
        assert_eq!(live.failed().map(|f| f.0), Some(3));
        assert!(live.is_lost(1) && live.is_lost(3) && !live.is_lost(2));
        // Only the PE that left in reaction hung up (the first one is on another host, say).
        let live = monitor_after_hangups(4, &[(1, 4)]);
        let (pe, why) = live.failed().expect("a failure");
        assert_eq!(pe, 3, "{why}");
        assert!(why.contains("PE 1 saw it gone first"), "{why}");
        // No notice: the PE that hung up is the failure.
        let live = monitor_after_hangups(4, &[(2, 0)]);
        assert_eq!(live.failed().map(|f| f.0), Some(2));
        // A notice in a control heap this PE never mapped (lazy mapping) is not read: the PE
        // that hung up is the failure.
        let live = monitor_after_hangups_mapped(4, &[(1, 4)], false);
        assert_eq!(live.failed().map(|f| f.0), Some(1));
    }

    #[test]
    fn reports_while_finalizing_only_mark_pes_lost() {
        let live = Liveness::new(3);
        live.set_finalizing();
        live.report(2, "gone".into());
        assert!(live.is_lost(2));
        assert!(!live.any_failed() && live.failed().is_none());
        live.report(7, "out of range".into());
        assert!(!live.is_lost(7));
    }
}
