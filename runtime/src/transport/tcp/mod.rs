//! The TCP transport: reaches PEs that share no memory with this one (other hosts, or every
//! other PE under `RSHMEM_DISABLE_P2P=1`).
//!
//! Every PE listens on one TCP port of one address — the address it advertises to the other
//! PEs through the bootstrap allgather (see [`pick_address`]), never every interface — and
//! opens one connection to every remote PE: connection A→B carries A's requests to B and B's
//! replies to them. Each connection opens with a handshake (the job token, A's PE number and
//! the protocol version, answered by B). On B, one service thread per incoming connection
//! ([`service`]) reads the requests and applies them to B's own memory in arrival order, so
//! everything A sends to B is applied in the order A issued it (`fence` is free). Puts and
//! flag stores are not acknowledged; gets, atomics and flushes are answered on the same
//! connection. [`Net::quiet`] sends a flush to every peer that got a put since the last one and
//! waits for the reply, which proves every earlier request was applied (and names the first
//! request the peer refused, if any). Transfers are cut into frames of at most [`wire::FRAME`]
//! bytes.
//!
//! Module map: [`wire`] (the bytes), [`sock`] (bounded socket I/O), [`accept`] (the
//! multiplexed accept loop of init), `client` (the issuing side), [`service`] (the target side).
//!
//! **Time bounds.** Every blocking socket operation is bounded by `RSHMEM_TIMEOUT`: connecting
//! and the handshake by a deadline for the whole set-up, every send or receive of a frame or a
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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

/// The TCP mesh of one PE.
pub struct Net {
    me: usize,
    /// Outgoing connection to each remote PE (None for local PEs).
    links: Vec<Option<Link>>,
    /// Incoming connections (clones), shut down at drop to stop the service threads.
    incoming: Vec<TcpStream>,
    services: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    live: Arc<Liveness>,
    timeout: Option<Duration>,
    /// Nanoseconds a thread waiting for bytes (a reply here, a request in a service thread)
    /// busy-polls its socket before it blocks; 0: block at once.
    spin: Arc<AtomicU64>,
    /// Rung by the service threads after each write they apply to this PE's memory.
    bell: Arc<Doorbell>,
    /// Where this PE's listener was bound (it is closed once every peer connected).
    listened: SocketAddr,
    /// Requests this PE sent that wait for a reply (gets, fetching atomics, flushes).
    round_trips: AtomicU64,
    /// Requests this PE sent that are not answered (put frames, flag stores, posted atomics).
    one_way: AtomicU64,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let peers: Vec<usize> = (0..self.links.len())
            .filter(|&p| self.links[p].is_some())
            .collect();
        f.debug_struct("Net")
            .field("peers", &peers)
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

/// Connects to PE `p` at `sa` and completes the handshake, retrying refused or failed
/// attempts until `deadline`. `Ok(None)`: `abort` was raised meanwhile.
#[allow(clippy::too_many_arguments)]
fn connect_peer(
    me: usize,
    p: usize,
    sa: SocketAddr,
    token: &[u8],
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    abort: &AtomicBool,
) -> Result<Option<TcpStream>> {
    let call = "init";
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
    /// Collective over all PEs: listens, exchanges addresses, connects to every remote PE
    /// (`local_of[pe] == None`) and starts the service threads. Connecting and accepting run
    /// at the same time (two threads), both bounded by `timeout` from the start.
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
        let mine = listened.to_string();
        let all = boot.allgather(mine.as_bytes())?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let expected: Vec<bool> = local_of.iter().map(Option::is_none).collect();
        let mut targets = Vec::new();
        for p in (0..n).filter(|&p| p != me && expected[p]) {
            let text = String::from_utf8_lossy(&all[p]).into_owned();
            let sa: SocketAddr = text.parse().map_err(|_| {
                Error::invalid(
                    call,
                    format!("PE {p} advertised no usable TCP address ({text:?})"),
                )
            })?;
            targets.push((p, sa));
        }
        let mut expected = expected;
        if let Some(e) = expected.get_mut(me) {
            *e = false;
        }

        let abort = AtomicBool::new(false);
        let accept = accept::Accept {
            me,
            token,
            expected: &expected,
            deadline,
            timeout,
            abort: &abort,
            hello_limit: accept::HELLO_LIMIT,
        };
        let (accepted, outgoing) = std::thread::scope(|sc| {
            let acceptor = std::thread::Builder::new()
                .name("rshmem-tcp-accept".into())
                .spawn_scoped(sc, || {
                    let r = accept.run(&listener);
                    if r.is_err() {
                        abort.store(true, Ordering::Release);
                    }
                    r
                })
                .map_err(|e| Error::os(call, "spawning the TCP accept thread", e))?;
            let mut outgoing: Vec<(usize, TcpStream)> = Vec::new();
            let mut failed = None;
            for &(p, sa) in &targets {
                match connect_peer(me, p, sa, token, deadline, timeout, &abort) {
                    Ok(Some(s)) => outgoing.push((p, s)),
                    Ok(None) => break,
                    Err(e) => {
                        abort.store(true, Ordering::Release);
                        failed = Some(e);
                        break;
                    }
                }
            }
            let accepted = acceptor.join().unwrap_or_else(|_| {
                Err(Error::State {
                    call,
                    reason: "the TCP accept thread panicked".into(),
                })
            });
            match (failed, accepted) {
                (Some(e), _) => Err(e),
                (None, Err(e)) => Err(e),
                (None, Ok(Some(a))) if outgoing.len() == targets.len() => Ok((a, outgoing)),
                (None, Ok(_)) => Err(Error::State {
                    call,
                    reason: "setting up the TCP transport was abandoned".into(),
                }),
            }
        })?;
        drop(listener);

        let mut links: Vec<Option<Link>> = (0..n).map(|_| None).collect();
        for (p, s) in outgoing {
            links[p] = Some(Link {
                conn: Mutex::new(Conn::new(s, timeout)),
                dirty: AtomicBool::new(false),
                deferred: AtomicBool::new(false),
            });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let spin = Arc::new(AtomicU64::new(0));
        let bell = Arc::new(Doorbell::default());
        let mut net = Net {
            me,
            links,
            incoming: Vec::new(),
            services: Vec::new(),
            stop: stop.clone(),
            live: live.clone(),
            timeout,
            spin: spin.clone(),
            bell: bell.clone(),
            listened,
            round_trips: AtomicU64::new(0),
            one_way: AtomicU64::new(0),
        };
        for (p, s) in accepted {
            let prep = s.set_nonblocking(false).and_then(|()| s.set_nodelay(true));
            prep.map_err(|e| {
                Error::os(
                    call,
                    format!("configuring the TCP connection from PE {p}"),
                    e,
                )
            })?;
            let clone = s
                .try_clone()
                .map_err(|e| Error::os(call, "cloning a TCP socket", e))?;
            net.incoming.push(clone);
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
            let h = std::thread::Builder::new()
                .name(format!("rshmem-tcp-{p}"))
                .spawn(move || svc.run(s))
                .map_err(|e| Error::os(call, "spawning a TCP service thread", e))?;
            net.services.push(h);
        }
        tracing::debug!(target: "rshmem::tcp", pe = me, peers = targets.len(), %mine, "TCP transport up");
        Ok(net)
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

    /// The address this PE's listener was bound to during init.
    #[cfg(test)]
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
        for (pe, l) in self.links.iter().enumerate() {
            let Some(l) = l else { continue };
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
        for s in &self.incoming {
            let _ = s.shutdown(Shutdown::Both);
        }
        for l in self.links.iter().flatten() {
            if let Ok(c) = l.conn.lock() {
                let _ = c.s.shutdown(Shutdown::Both);
            }
        }
        for h in self.services.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests;
