//! The TCP transport: reaches PEs that share no memory with this one (other hosts, or every
//! other PE under `RSHMEM_DISABLE_P2P=1`).
//!
//! Every PE listens on one TCP port of one address — the address it advertises to the other
//! PEs through the bootstrap allgather (see [`pick_address`]), never every interface — for
//! the whole life of the transport, and opens a connection to a remote PE **the first time it
//! issues a request to it** (put, get, atomic, flag store): connection A→B carries A's
//! requests to B and B's replies to them. At init a PE connects only to its dissemination
//! barrier partners both ways (PEs `me ± 2^k`), so that every PE holds a connection from each
//! PE it waits on in a barrier or stores to, and sees it go; everything else is opened on
//! demand, so a PE holds `O(log N)` connections plus one per PE it talks
//! to, and a job of N PEs is not N² connections and threads. Each connection opens with a
//! handshake (the job token, A's PE number and the protocol version, answered by B). On B,
//! the accept loop ([`accept`], a thread of its own) checks the handshake and starts one
//! service thread for the connection ([`service`]), which reads the requests and applies them
//! to B's own memory in arrival order, so everything A sends to B is applied in the order A
//! issued it (`fence` is free). Puts and flag stores are not acknowledged; gets, atomics and
//! flushes are answered on the same connection. [`Net::quiet`] sends a flush to every peer
//! that got a put since the last one (only connections that exist) and waits for the reply,
//! which proves every earlier request was applied (and names the first request the peer
//! refused, if any). Transfers are cut into frames of at most [`wire::FRAME`] bytes.
//!
//! **Connecting at first use.** Threads that issue to a peer without a connection take that
//! peer's opening lock; the first connects and the others find the connection made. Two PEs
//! that reach for each other at once open two independent connections (one per direction),
//! so there is nothing to arbitrate. A peer whose listener refuses the connection has left
//! (every listener is open from before the address exchange until the transport is
//! dropped): the request fails with `PeerLost` naming it at once; one that does not answer
//! fails with `Timeout` within `RSHMEM_TIMEOUT`. Either way the peer is reported lost.
//!
//! **The open listener.** Anyone who can reach the address can connect, during the whole job.
//! A connection is served only after it presented the job's token (16 random bytes from PE
//! 0, handed out over the bootstrap) and a PE number that reaches this PE over TCP and has
//! not connected yet; the accept loop gives each connection [`accept::HELLO_LIMIT`] (at most
//! `RSHMEM_TIMEOUT`) to do so, holds at most [`accept::MAX_PENDING`] such connections, logs
//! every refusal and never blocks the PE.
//!
//! Module map: [`wire`] (the bytes), [`sock`] (bounded socket I/O), [`accept`] (the accept
//! loop), `client` (the issuing side), [`service`] (the target side).
//!
//! **Time bounds.** Every blocking socket operation is bounded by `RSHMEM_TIMEOUT`: connecting
//! and the handshake by one deadline, every send or receive of a frame or a
//! reply by its own deadline ([`sock`]; a call whose data cannot move in time fails with
//! [`Error::Timeout`] naming the peer; a request that stops arriving halfway ends the
//! connection on the target side). A failed or
//! stalled connection reports its PE through [`Liveness`], so waits fail with `PeerLost`
//! instead of hanging. `RSHMEM_TIMEOUT=0` removes every bound.

pub mod accept;
mod client;
pub mod service;
pub mod sock;
pub mod wire;

use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rshmem_bootstrap::Bootstrap;

use crate::error::{Error, Result};
use crate::node::Liveness;
use crate::wait::Doorbell;
pub use client::BatchGet;
use client::{Conn, Link};
pub(crate) use service::Region;

/// How long busy-polling threads spin for data before they block, while a proxy is active.
pub(crate) const PROXY_SPIN: Duration = Duration::from_micros(200);
/// The same for a PE whose service threads share its cores (see `WaitPolicy::new`): a service
/// thread that just applied a request keeps polling this long (yielding to the PE between
/// polls), so a stream of small posted requests is applied without a wake-up for each.
pub(crate) const SHARED_CORE_SPIN: Duration = Duration::from_micros(20);
/// Longest single connection attempt (attempts repeat until the set-up deadline).
const CONNECT_ATTEMPT: Duration = Duration::from_secs(5);

crate::wire::code_enum! {
    /// Which heap of the target a request addresses (its wire code: [`HeapId::code`]).
    pub enum HeapId: u8 {
        /// The user's symmetric heap.
        User = 0,
        /// The host control heap (barrier and team flags).
        Ctrl = 1,
        /// The PE's symmetric regions (memory outside the heaps, [`crate::region`]): the offset's
        /// bits from [`REGION_SHIFT`](crate::transport::REGION_SHIFT) up name the region
        /// ([`RemoteAddr::region`](crate::transport::RemoteAddr::region)).
        Region = 2,
    }
}

impl HeapId {
    /// What it is, for messages ("symmetric heap", "control heap", "symmetric regions").
    pub fn describe(self) -> &'static str {
        match self {
            HeapId::User => "symmetric heap",
            HeapId::Ctrl => "control heap",
            HeapId::Region => "symmetric regions",
        }
    }
}

/// One remote PE as this PE's issuing side sees it.
struct Slot {
    /// Where it listens (None: not reached over TCP).
    at: Option<SocketAddr>,
    /// The outgoing connection, once opened.
    link: OnceLock<Link>,
    /// Held while the connection is being opened (the other threads wait for it).
    opening: Mutex<()>,
}

/// What the accept loop shares with the transport: the incoming connections and their
/// service threads.
#[derive(Default)]
struct Served {
    /// Incoming connections (clones), shut down at drop to stop the service threads.
    incoming: Mutex<Vec<TcpStream>>,
    services: Mutex<Vec<JoinHandle<()>>>,
}

/// The TCP transport of one PE.
pub struct Net {
    me: usize,
    token: Vec<u8>,
    /// One per PE (unused for local PEs and this one).
    slots: Vec<Slot>,
    served: Arc<Served>,
    /// The accept loop's thread, its stop flag (shared with the service threads) and
    /// wake-up.
    acceptor: Option<JoinHandle<()>>,
    wake: Arc<accept::Wake>,
    stop: Arc<AtomicBool>,
    live: Arc<Liveness>,
    timeout: Option<Duration>,
    /// Nanoseconds a thread waiting for bytes (a reply here, a request in a service thread)
    /// busy-polls its socket before it blocks; 0: block at once.
    spin: Arc<AtomicU64>,
    /// Rung by the service threads after each write they apply to this PE's memory.
    bell: Arc<Doorbell>,
    /// Where this PE's listener is bound (open until the transport is dropped).
    listened: SocketAddr,
    /// Its descriptor (owned by the accept loop's thread).
    listener_fd: std::os::fd::RawFd,
    /// Outgoing connections opened.
    opened: AtomicUsize,
    /// Requests this PE sent that wait for a reply (gets, fetching atomics, flushes).
    round_trips: AtomicU64,
    /// Requests this PE sent that are not answered (put frames, flag stores, posted atomics).
    one_way: AtomicU64,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let peers: Vec<usize> = (0..self.slots.len())
            .filter(|&p| self.slots[p].link.get().is_some())
            .collect();
        f.debug_struct("Net")
            .field("connected", &peers)
            .field("listened", &self.listened)
            .finish()
    }
}

/// The address this PE listens on and advertises: `RSHMEM_TCP_ADDR`, else the local address
/// of this host's route to the bootstrap rendezvous host (loopback when that is this host),
/// else loopback. The listener binds this one address only, never every interface.
pub(crate) fn pick_address(configured: Option<&str>, rendezvous: Option<&str>) -> Result<IpAddr> {
    if let Some(a) = configured {
        return a.trim().parse().map_err(|_| {
            Error::invalid(
                "init",
                format!("RSHMEM_TCP_ADDR={a:?} is not an IP address"),
            )
        });
    }
    let guess = rendezvous.and_then(|r| {
        use std::net::ToSocketAddrs;
        let target = r.to_socket_addrs().ok()?.next()?;
        let bind: SocketAddr = if target.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let u = UdpSocket::bind(bind).ok()?;
        u.connect(target).ok()?;
        Some(u.local_addr().ok()?.ip())
    });
    Ok(guess
        .filter(|ip| !ip.is_unspecified())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)))
}

/// The PEs `me ± 2^k` (`2^k < n`) of a job of `n` PEs, each once, in order of distance.
pub(crate) fn partners(me: usize, n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    let mut dist = 1;
    while dist < n {
        for p in [(me + dist) % n, (me + n - dist) % n] {
            if p != me && !out.contains(&p) {
                out.push(p);
            }
        }
        dist *= 2;
    }
    out
}

/// Connects to PE `p` at `sa` for `call` and completes the handshake, retrying failed
/// attempts (other than a refusal: the PE left) until `deadline`. `Ok(None)`: `abort` was
/// raised meanwhile.
#[allow(clippy::too_many_arguments)]
fn connect_peer(
    call: &'static str,
    me: usize,
    p: usize,
    sa: SocketAddr,
    token: &[u8],
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    abort: &AtomicBool,
) -> Result<Option<TcpStream>> {
    let waited = timeout.unwrap_or_default();
    let mut attempts = 0u32;
    let s = loop {
        if abort.load(Ordering::Acquire) {
            return Ok(None);
        }
        let attempt = sock::left(deadline).map_or(CONNECT_ATTEMPT, |l| l.min(CONNECT_ATTEMPT));
        attempts += 1;
        let err = match TcpStream::connect_timeout(&sa, attempt) {
            Ok(s) => break s,
            Err(e) => e,
        };
        // Every PE's listener is open from before the address exchange until its transport
        // is dropped: a refusal means the PE left (or its host is gone).
        if err.kind() == std::io::ErrorKind::ConnectionRefused {
            return Err(Error::PeerLost {
                call,
                me,
                pe: p,
                reason: format!(
                    "its TCP transport listener at {sa} refused the connection ({err}): it has left the job"
                ),
            });
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Error::Timeout {
                call,
                me,
                pe: Some(p),
                what: format!(
                    "a TCP transport connection to PE {p} at {sa} ({attempts} attempt(s); the last failed with: {err})"
                ),
                waited,
            });
        }
        tracing::debug!(target: "rshmem::tcp", "connecting to PE {p} at {sa}: {err}; retrying");
        std::thread::sleep(sock::left(deadline).map_or(Duration::from_millis(50), |l| {
            l.min(Duration::from_millis(50))
        }));
    };
    let hs = |e: std::io::Error| {
        if sock::is_timeout(&e) {
            Error::Timeout {
                call,
                me,
                pe: Some(p),
                what: format!("PE {p} at {sa} to answer the TCP transport handshake"),
                waited,
            }
        } else {
            Error::PeerLost {
                call,
                me,
                pe: p,
                reason: format!(
                    "the TCP transport handshake with it at {sa} failed: {e} (it refuses connections without this job's token: is {sa} another job's PE?)"
                ),
            }
        }
    };
    s.set_nodelay(true).ok();
    sock::send_all(&s, &wire::hello(token, me, wire::VERSION), deadline).map_err(&hs)?;
    let mut a = [0u8; wire::ACK];
    sock::recv_exact(&s, &mut a, Duration::ZERO, deadline).map_err(&hs)?;
    match wire::parse_ack(&a) {
        Some(wire::ACK_OK) => {}
        Some(wire::ACK_VERSION) => {
            return Err(Error::Unsupported {
                call,
                reason: format!("PE {p} speaks another version of the TCP transport protocol (mixed rshmem builds in one job?)"),
            })
        }
        _ => {
            return Err(Error::PeerLost {
                call,
                me,
                pe: p,
                reason: format!("{sa} answered the TCP transport handshake with bytes that are not rshmem's"),
            })
        }
    }
    Ok(Some(s))
}

impl Net {
    /// Collective over all PEs: listens, exchanges addresses, starts the accept loop and
    /// connects to the remote PEs (`local_of[pe] == None`) among its barrier partners
    /// (`me ± 2^k`, [`partners`]); every other connection is opened at first use.
    pub(crate) fn establish(
        boot: &dyn Bootstrap,
        local_of: &[Option<usize>],
        token: &[u8],
        addr: IpAddr,
        timeout: Option<Duration>,
        live: Arc<Liveness>,
        regions: [Region; 3],
    ) -> Result<Net> {
        let call = "init";
        let me = boot.rank();
        let n = boot.size();
        let listener = TcpListener::bind((addr, 0)).map_err(|e| {
            Error::os(
                call,
                format!("listening on {addr} for the TCP transport (set RSHMEM_TCP_ADDR to an address of this host)"),
                e,
            )
        })?;
        let listened = listener
            .local_addr()
            .map_err(|e| Error::os(call, "TCP listener address", e))?;
        let listener_fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
        let mine = listened.to_string();
        let all = boot.allgather(mine.as_bytes())?;
        let mut slots = Vec::with_capacity(n);
        let mut expected = vec![false; n];
        for p in 0..n {
            let remote = p != me && local_of.get(p).is_some_and(Option::is_none);
            let at = if remote {
                let text = String::from_utf8_lossy(&all[p]).into_owned();
                let sa: SocketAddr = text.parse().map_err(|_| {
                    Error::invalid(
                        call,
                        format!("PE {p} advertised no usable TCP address ({text:?})"),
                    )
                })?;
                expected[p] = true;
                Some(sa)
            } else {
                None
            };
            slots.push(Slot {
                at,
                link: OnceLock::new(),
                opening: Mutex::new(()),
            });
        }

        let stop = Arc::new(AtomicBool::new(false));
        let spin = Arc::new(AtomicU64::new(0));
        let bell = Arc::new(Doorbell::default());
        let served = Arc::new(Served::default());
        let wake = Arc::new(accept::Wake::new()?);
        let hello_limit = timeout.map_or(accept::HELLO_LIMIT, |t| t.min(accept::HELLO_LIMIT));
        let acceptor = {
            let (stop, wake, served, token) =
                (stop.clone(), wake.clone(), served.clone(), token.to_vec());
            let (spin, bell, live) = (spin.clone(), bell.clone(), live.clone());
            std::thread::Builder::new()
                .name("rshmem-tcp-accept".into())
                .spawn(move || {
                    let a = accept::Accept {
                        me,
                        token: &token,
                        expected: &expected,
                        stop: &stop,
                        wake: &wake,
                        hello_limit,
                    };
                    let r = a.run(&listener, |p, s| {
                        let clone = match s.try_clone() {
                            Ok(c) => c,
                            Err(e) => {
                                tracing::warn!(target: "rshmem::tcp", "PE {me}: cloning the TCP connection from PE {p}: {e}");
                                return;
                            }
                        };
                        let svc = service::Service {
                            from: p,
                            me,
                            n,
                            regions: regions.clone(),
                            spin: spin.clone(),
                            bell: bell.clone(),
                            stop: stop.clone(),
                            live: live.clone(),
                            timeout,
                        };
                        match std::thread::Builder::new()
                            .name(format!("rshmem-tcp-{p}"))
                            .spawn(move || svc.run(s))
                        {
                            Ok(h) => {
                                if let Ok(mut v) = served.incoming.lock() {
                                    v.push(clone);
                                }
                                if let Ok(mut v) = served.services.lock() {
                                    v.push(h);
                                }
                            }
                            Err(e) => {
                                let _ = clone.shutdown(Shutdown::Both);
                                live.report(p, format!("PE {me} could not start a thread to serve its TCP connection: {e}"));
                            }
                        }
                    });
                    if let Err(e) = r {
                        tracing::error!(target: "rshmem::tcp", "PE {me}: the TCP accept loop stopped: {e}");
                    }
                })
                .map_err(|e| Error::os(call, "spawning the TCP accept thread", e))?
        };
        let net = Net {
            me,
            token: token.to_vec(),
            slots,
            served,
            acceptor: Some(acceptor),
            wake,
            stop,
            live,
            timeout,
            spin,
            bell,
            listened,
            listener_fd,
            opened: AtomicUsize::new(0),
            round_trips: AtomicU64::new(0),
            one_way: AtomicU64::new(0),
        };
        // The barrier partners, both ways (PEs me ± 2^k): every PE then holds a connection from
        // each PE it waits on in a barrier and from each it stores to, and sees them go (a
        // service thread reads the end of each incoming connection).
        for p in partners(me, n) {
            if net.slots[p].at.is_some() {
                net.link(call, p)?;
            }
        }
        tracing::debug!(target: "rshmem::tcp", pe = me, opened = net.connections().0, %mine, "TCP transport up");
        Ok(net)
    }

    /// The connection to PE `pe`, opened now if this is the first request to it (see the
    /// module docs). Fails for a PE not reached over TCP, or one that cannot be reached.
    fn link(&self, call: &'static str, pe: usize) -> Result<&Link> {
        let Some(slot) = self.slots.get(pe).filter(|s| s.at.is_some()) else {
            return Err(Error::invalid(call, format!("PE {pe} is not a TCP peer")));
        };
        match slot.link.get() {
            Some(l) => Ok(l),
            None => self.open(call, pe, slot),
        }
    }

    #[cold]
    fn open<'a>(&self, call: &'static str, pe: usize, slot: &'a Slot) -> Result<&'a Link> {
        let _opening = slot.opening.lock().map_err(|_| Error::State {
            call,
            reason: "a TCP connection lock is poisoned".into(),
        })?;
        if let Some(l) = slot.link.get() {
            return Ok(l);
        }
        if self.live.is_lost(pe) {
            return Err(crate::node::peer_lost(
                Some(&self.live),
                call,
                self.me,
                pe,
                "it was seen gone before this PE first reached it over TCP".into(),
            ));
        }
        let Some(sa) = slot.at else {
            return Err(Error::invalid(call, format!("PE {pe} is not a TCP peer")));
        };
        let deadline = sock::deadline(self.timeout);
        let s = match connect_peer(
            call,
            self.me,
            pe,
            sa,
            &self.token,
            deadline,
            self.timeout,
            &self.stop,
        ) {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(Error::State {
                    call,
                    reason: "the TCP transport is closing".into(),
                })
            }
            Err(e) => {
                self.live.report(pe, e.to_string());
                return Err(e);
            }
        };
        let l = slot.link.get_or_init(|| Link {
            conn: Mutex::new(Conn::new(s, self.timeout)),
            dirty: AtomicBool::new(false),
            deferred: AtomicBool::new(false),
        });
        self.opened.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "rshmem::tcp", pe = self.me, to = pe, %sa, "TCP connection opened");
        Ok(l)
    }

    /// The descriptor of this PE's listener (open until the transport is dropped), which init
    /// leaves open to new connections (see `cloexec::shut_new_listeners`).
    pub(crate) fn listener_fd(&self) -> std::os::fd::RawFd {
        self.listener_fd
    }

    /// The connections of this transport now: (outgoing ones this PE opened, incoming ones
    /// it accepted).
    pub fn connections(&self) -> (usize, usize) {
        let incoming = self.served.incoming.lock().map_or(0, |v| v.len());
        (self.opened.load(Ordering::Relaxed), incoming)
    }

    /// Requests sent so far: (answered ones, one-way ones); see [`crate::CommCounters`].
    pub fn counters(&self) -> (u64, u64) {
        (
            self.round_trips.load(Ordering::Relaxed),
            self.one_way.load(Ordering::Relaxed),
        )
    }

    /// The doorbell the service threads ring after each write to this PE's memory (for
    /// [`WaitPolicy::set_doorbell`](crate::wait::WaitPolicy::set_doorbell)).
    pub(crate) fn bell(&self) -> Arc<Doorbell> {
        self.bell.clone()
    }

    /// The address this PE's listener is bound to.
    pub fn listened(&self) -> SocketAddr {
        self.listened
    }
}

impl Net {
    /// Leaving because a PE is gone (the job's first failure): tells every peer still
    /// connected which PE that was ([`wire::OP_GONE`]), before the connections close, so that
    /// a survivor that sees this PE's connection end blames that PE, not this one. Each
    /// notice waits at most a second for room in its socket.
    fn tell_departure(&self) {
        let Some((cause, _)) = self.live.failed() else {
            return;
        };
        // (A failure is only recorded before finalize: a PE that called finalize after it
        // still tells.)
        if cause == self.me {
            return;
        }
        let h = wire::req(wire::OP_GONE, 0, 0, 0, 0, 0, 0, cause as u64, 0);
        for (pe, slot) in self.slots.iter().enumerate() {
            let Some(l) = slot.link.get() else { continue };
            if pe == cause || self.live.is_lost(pe) {
                continue;
            }
            let Ok(mut c) = l.conn.try_lock() else {
                continue;
            };
            if c.broken {
                continue;
            }
            c.out.extend_from_slice(&h);
            let out = std::mem::take(&mut c.out);
            let deadline = Some(Instant::now() + Duration::from_secs(1));
            let _ = sock::send_all(&c.s, &out, deadline);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.tell_departure();
        self.stop.store(true, Ordering::Release);
        self.wake.ring();
        // The accept loop first: after it no service thread is added.
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        if let Ok(v) = self.served.incoming.lock() {
            for s in v.iter() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        for l in self.slots.iter().filter_map(|s| s.link.get()) {
            if let Ok(c) = l.conn.lock() {
                let _ = c.s.shutdown(Shutdown::Both);
            }
        }
        let services = self
            .served
            .services
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        for h in services {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests;
