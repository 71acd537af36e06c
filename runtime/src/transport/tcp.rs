//! The TCP transport: reaches PEs that share no memory with this one (other hosts, or every
//! other PE under `RSHMEM_DISABLE_P2P=1`).
//!
//! Every PE listens on one TCP port (advertised through the bootstrap allgather) and opens one
//! connection to every remote PE: connection A→B carries A's requests to B and B's replies to
//! them. Each connection presents the job token first. On B, one service thread per incoming
//! connection reads the requests and applies them to B's own memory in arrival order, so
//! everything A sends to B is applied in the order A issued it (`fence` is free). Puts and
//! flag stores are not acknowledged; gets, atomics and flushes are answered on the same
//! connection. [`Net::quiet`] sends a flush to every peer that got a put since the last one and
//! waits for the reply, which proves every earlier request was applied (and carries the number
//! of requests the peer rejected). Transfers are cut into frames of at most [`FRAME`] bytes.
//!
//! A service thread never trusts the wire: the heap, offset, length and alignment of every
//! request are checked against the memory mapped at that moment; a bad get or atomic is
//! answered with an error, a bad put or store is dropped and counted (reported by the next
//! flush). A connection that closes or fails outside finalize reports its PE through
//! [`Liveness`], so waits fail with `PeerLost` instead of hanging.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rshmem_bootstrap::Bootstrap;

use super::AmoOp;
use crate::error::{Error, Result};
use crate::node::Liveness;

/// Largest payload of one request or reply.
pub const FRAME: usize = 1 << 20;
const REQ: usize = 40;
const REP: usize = 16;
/// Payloads up to this size are copied behind the header and sent with one write.
const INLINE: usize = 16 << 10;

const OP_PUT: u8 = 1;
const OP_GET: u8 = 2;
const OP_AMO: u8 = 3;
const OP_FLUSH: u8 = 4;
const OP_STORE: u8 = 5;
/// An atomic whose old value nobody wants (signals, non-fetching device atomics): no reply,
/// rejections counted like a bad put.
const OP_AMO_NF: u8 = 6;
/// Deferred output of a connection is written once it reaches this many bytes.
const DEFER_MAX: usize = 64 << 10;
/// How long busy-polling threads spin for data before they block, while a proxy is active.
pub(crate) const PROXY_SPIN: Duration = Duration::from_micros(200);

/// Which heap of the target a request addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HeapId {
    /// The user's symmetric heap.
    User = 0,
    /// The host control heap (barrier and team flags).
    Ctrl = 1,
}

/// A heap as a service thread sees it: the offsets `[lo, min(hi, mapped))` are valid.
#[derive(Debug, Clone)]
pub(crate) struct Region {
    pub base: usize,
    pub lo: usize,
    pub hi: usize,
    pub mapped: Arc<AtomicUsize>,
    /// GPU memory (applied through the CUDA driver on a stream of its own), or None for host
    /// memory (load/store).
    pub gpu: Option<Arc<crate::proxy::gpu::GpuMem>>,
}

impl Region {
    /// The address of `[off, off+len)` if it lies inside the valid offsets and is aligned.
    fn check(&self, off: u64, len: u64, align: u64) -> Option<usize> {
        let end = off.checked_add(len)?;
        let hi = self.hi.min(self.mapped.load(Ordering::Acquire)) as u64;
        if off < self.lo as u64 || end > hi || (align > 1 && off % align != 0) {
            return None;
        }
        Some(self.base + off as usize)
    }

    /// Writes `data` at the checked address `a`; false if a GPU copy failed.
    fn write(&self, a: usize, data: &[u8]) -> bool {
        match &self.gpu {
            // SAFETY: `check` proved [a, a+len) lies in the mapped part of this PE's GPU heap;
            // the driver stages the pageable source before returning.
            Some(g) => unsafe { g.write_async("tcp", a as u64, data.as_ptr(), data.len()) }.is_ok(),
            None => {
                // SAFETY: `check` proved [a, a+len) lies in the mapped part of this PE's heap.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), a as *mut u8, data.len()) };
                true
            }
        }
    }

    /// Reads `out.len()` bytes at the checked address `a` (after every earlier write).
    fn read(&self, a: usize, out: &mut [u8]) -> bool {
        match &self.gpu {
            // SAFETY: as in `write`, for reading; out is a live exclusive slice.
            Some(g) => unsafe { g.read("tcp", out.as_mut_ptr(), a as u64, out.len()) }.is_ok(),
            None => {
                // SAFETY: as in `write`, for reading.
                unsafe {
                    std::ptr::copy_nonoverlapping(a as *const u8, out.as_mut_ptr(), out.len())
                };
                true
            }
        }
    }

    /// Applies an atomic to the checked, aligned word at `a`; the old value.
    fn amo(&self, op: AmoOp, a: usize, size: usize, value: u64, cond: u64) -> Option<u64> {
        match &self.gpu {
            Some(g) => g.amo("tcp", op, a as u64, size, value, cond).ok(),
            // SAFETY: an aligned word of `size` bytes in the mapped heap.
            None => Some(unsafe { super::shm::amo(op, a, size, value, cond) }),
        }
    }

    /// [`amo`](Region::amo) whose old value nobody reads: on a GPU it is queued in order
    /// after the writes before it and completed by the next flush. False if it failed.
    fn amo_nf(&self, op: AmoOp, a: usize, size: usize, value: u64, cond: u64) -> bool {
        match &self.gpu {
            Some(g) => g.amo_async("tcp", op, a as u64, size, value, cond).is_ok(),
            None => {
                // SAFETY: an aligned word of `size` bytes in the mapped heap.
                unsafe { super::shm::amo(op, a, size, value, cond) };
                true
            }
        }
    }

    /// Completes the GPU writes queued so far (nothing for host memory).
    fn flush(&self) -> bool {
        self.gpu.as_ref().is_none_or(|g| g.flush("tcp").is_ok())
    }
}

struct Conn {
    s: TcpStream,
    /// Bytes of requests not written yet (deferred puts, then the request being sent).
    out: Vec<u8>,
    broken: bool,
}

impl Conn {
    /// Writes every pending byte.
    fn send(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            let r = self.s.write_all(&self.out);
            self.out.clear();
            r?;
        }
        Ok(())
    }
}

struct Link {
    conn: Mutex<Conn>,
    /// A put or store went out since the last flush.
    dirty: AtomicBool,
    /// Deferred bytes wait in the connection's output buffer.
    deferred: AtomicBool,
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
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let peers: Vec<usize> = (0..self.links.len())
            .filter(|&p| self.links[p].is_some())
            .collect();
        f.debug_struct("Net").field("peers", &peers).finish()
    }
}

/// The address this PE advertises: `RSHMEM_TCP_ADDR`, else the local address of a route to the
/// bootstrap rendezvous host (loopback when that is this host), else loopback.
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
    Ok(guess.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)))
}

impl Net {
    /// Collective over all PEs: listens, exchanges addresses, connects to every remote PE
    /// (`local_of[pe] == None`) and starts the service threads.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn establish(
        boot: &dyn Bootstrap,
        local_of: &[Option<usize>],
        token: &[u8],
        addr: IpAddr,
        bind_any: bool,
        timeout: Option<Duration>,
        live: Arc<Liveness>,
        regions: [Region; 2],
    ) -> Result<Net> {
        let call = "init";
        let me = boot.rank();
        let n = boot.size();
        let bind_ip = if bind_any {
            match addr {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            }
        } else {
            addr
        };
        let listener = TcpListener::bind((bind_ip, 0)).map_err(|e| {
            Error::os(
                call,
                format!("listening on {bind_ip} for the TCP transport"),
                e,
            )
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::os(call, "TCP listener address", e))?
            .port();
        let mine = SocketAddr::new(addr, port).to_string();
        let all = boot.allgather(mine.as_bytes())?;
        let remote: Vec<usize> = (0..n).filter(|&p| local_of[p].is_none()).collect();
        let deadline = timeout.map(|t| Instant::now() + t);

        let mut links: Vec<Option<Link>> = (0..n).map(|_| None).collect();
        for &p in &remote {
            let text = String::from_utf8_lossy(&all[p]).into_owned();
            let sa: SocketAddr = text.parse().map_err(|_| {
                Error::invalid(
                    call,
                    format!("PE {p} advertised a bad TCP address {text:?}"),
                )
            })?;
            let mut s = loop {
                match TcpStream::connect_timeout(&sa, Duration::from_secs(5)) {
                    Ok(s) => break s,
                    Err(e) if deadline.is_none_or(|d| Instant::now() < d) => {
                        tracing::debug!(target: "rshmem::tcp", "connecting to PE {p} at {sa}: {e}; retrying");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => {
                        return Err(Error::os(
                            call,
                            format!("connecting to PE {p} at {sa} (TCP transport)"),
                            e,
                        ))
                    }
                }
            };
            s.set_nodelay(true).ok();
            let mut hello = token.to_vec();
            hello.extend_from_slice(&(me as u32).to_le_bytes());
            s.write_all(&hello)
                .map_err(|e| Error::os(call, format!("TCP hello to PE {p}"), e))?;
            s.set_read_timeout(timeout)
                .map_err(|e| Error::os(call, "socket timeout", e))?;
            links[p] = Some(Link {
                conn: Mutex::new(Conn {
                    s,
                    out: Vec::new(),
                    broken: false,
                }),
                dirty: AtomicBool::new(false),
                deferred: AtomicBool::new(false),
            });
        }

        let mut accepted: Vec<(usize, TcpStream)> = Vec::new();
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::os(call, "TCP listener", e))?;
        while accepted.len() < remote.len() {
            match listener.accept() {
                Ok((mut s, from)) => {
                    s.set_nonblocking(false)
                        .map_err(|e| Error::os(call, "accept", e))?;
                    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                    let mut hello = vec![0u8; token.len() + 4];
                    let ok = s.read_exact(&mut hello).is_ok() && hello[..token.len()] == *token;
                    let t = token.len();
                    let p = u32::from_le_bytes([hello[t], hello[t + 1], hello[t + 2], hello[t + 3]])
                        as usize;
                    if !ok
                        || p >= n
                        || local_of[p].is_some()
                        || accepted.iter().any(|(q, _)| *q == p)
                    {
                        tracing::warn!(target: "rshmem::tcp", "refused a TCP connection from {from} without the job token");
                        continue;
                    }
                    s.set_read_timeout(None).ok();
                    s.set_nodelay(true).ok();
                    accepted.push((p, s));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if deadline.is_some_and(|d| Instant::now() > d) {
                        let missing: Vec<String> = remote
                            .iter()
                            .filter(|p| !accepted.iter().any(|(q, _)| q == *p))
                            .map(|p| p.to_string())
                            .collect();
                        return Err(Error::Timeout {
                            call,
                            me,
                            pe: remote
                                .iter()
                                .copied()
                                .find(|p| !accepted.iter().any(|(q, _)| q == p)),
                            what: format!("PE(s) {} to connect over TCP", missing.join(", ")),
                            waited: timeout.unwrap_or_default(),
                        });
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(e) => return Err(Error::os(call, "accepting TCP connections", e)),
            }
        }

        let stop = Arc::new(AtomicBool::new(false));
        let spin = Arc::new(AtomicU64::new(0));
        let mut net = Net {
            me,
            links,
            incoming: Vec::new(),
            services: Vec::new(),
            stop: stop.clone(),
            live: live.clone(),
            timeout,
            spin: spin.clone(),
        };
        for (p, s) in accepted {
            let clone = s
                .try_clone()
                .map_err(|e| Error::os(call, "cloning a TCP socket", e))?;
            net.incoming.push(clone);
            let (stop, live, regions, spin) =
                (stop.clone(), live.clone(), regions.clone(), spin.clone());
            let h = std::thread::Builder::new()
                .name(format!("rshmem-tcp-{p}"))
                .spawn(move || serve(p, s, regions, stop, live, spin))
                .map_err(|e| Error::os(call, "spawning a TCP service thread", e))?;
            net.services.push(h);
        }
        tracing::debug!(target: "rshmem::tcp", pe = me, peers = remote.len(), %mine, "TCP transport up");
        Ok(net)
    }

    fn link(&self, call: &'static str, pe: usize) -> Result<&Link> {
        self.links
            .get(pe)
            .and_then(|l| l.as_ref())
            .ok_or_else(|| Error::invalid(call, format!("PE {pe} is not a TCP peer")))
    }

    fn lost(&self, call: &'static str, pe: usize, e: &std::io::Error) -> Error {
        if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
            return Error::Timeout {
                call,
                me: self.me,
                pe: Some(pe),
                what: format!("PE {pe} to answer over TCP"),
                waited: self.timeout.unwrap_or_default(),
            };
        }
        let reason = if e.kind() == ErrorKind::UnexpectedEof {
            "it exited or crashed: its TCP connection to this PE closed".to_string()
        } else {
            format!("its TCP connection failed: {e}")
        };
        self.live.report(pe, reason.clone());
        Error::PeerLost {
            call,
            me: self.me,
            pe,
            reason,
        }
    }

    /// Runs `f` on the connection to `pe`; an I/O error breaks the connection for good.
    fn with<T>(
        &self,
        call: &'static str,
        pe: usize,
        f: impl FnOnce(&mut Conn) -> std::io::Result<T>,
    ) -> Result<T> {
        let link = self.link(call, pe)?;
        let mut c = link.conn.lock().map_err(|_| Error::State {
            call,
            reason: "a TCP connection lock is poisoned".into(),
        })?;
        if c.broken {
            return Err(Error::PeerLost {
                call,
                me: self.me,
                pe,
                reason: "its TCP connection failed earlier".into(),
            });
        }
        f(&mut c).map_err(|e| {
            c.broken = true;
            self.lost(call, pe, &e)
        })
    }

    /// Sets how long threads waiting for TCP bytes busy-poll before they block (the proxy
    /// sets [`PROXY_SPIN`]; 0, the default, blocks at once). Applies to this PE's service
    /// threads and to replies it waits for.
    pub fn set_spin(&self, d: Duration) {
        self.spin
            .store(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Release);
    }

    fn spin(&self) -> Duration {
        Duration::from_nanos(self.spin.load(Ordering::Acquire))
    }

    /// Appends a put of `n` bytes (n <= INLINE, or a frame sent at once) to `c`'s output.
    fn put_frames(
        c: &mut Conn,
        heap: HeapId,
        off: usize,
        src: *const u8,
        n: usize,
        defer: bool,
    ) -> std::io::Result<()> {
        let mut done = 0;
        while done < n {
            let k = (n - done).min(FRAME);
            // SAFETY: the caller passes a live readable range of n bytes at src.
            let data = unsafe { std::slice::from_raw_parts(src.add(done), k) };
            let h = req(OP_PUT, heap, 0, 0, (off + done) as u64, k as u64, 0, 0);
            c.out.extend_from_slice(&h);
            if k <= INLINE {
                c.out.extend_from_slice(data);
            } else {
                c.send()?;
                c.s.write_all(data)?;
            }
            done += k;
        }
        if !defer || c.out.len() >= DEFER_MAX {
            c.send()?;
        }
        Ok(())
    }

    /// Sends `n` bytes from `src` to `[off, off+n)` of `pe`'s heap `heap` (not acknowledged).
    pub fn put(
        &self,
        call: &'static str,
        pe: usize,
        heap: HeapId,
        off: usize,
        src: *const u8,
        n: usize,
    ) -> Result<()> {
        let r = self.with(call, pe, |c| Self::put_frames(c, heap, off, src, n, false));
        self.link(call, pe)?.dirty.store(true, Ordering::Release);
        self.tolerate(r)
    }

    /// [`put`](Net::put) that may leave the request in the connection's output buffer (one
    /// write for a burst of small puts): it goes out with the next request to that PE that is
    /// not deferred, a round trip to any PE, [`push`](Net::push), or once [`DEFER_MAX`] bytes
    /// wait. Order with everything else sent to `pe` is kept.
    pub fn put_deferred(
        &self,
        call: &'static str,
        pe: usize,
        heap: HeapId,
        off: usize,
        src: *const u8,
        n: usize,
    ) -> Result<()> {
        let link = self.link(call, pe)?;
        let r = self.with(call, pe, |c| {
            Self::put_frames(c, heap, off, src, n, true)?;
            link.deferred.store(!c.out.is_empty(), Ordering::Release);
            Ok(())
        });
        link.dirty.store(true, Ordering::Release);
        self.tolerate(r)
    }

    /// Writes the deferred output of every connection.
    pub fn push(&self, call: &'static str) -> Result<()> {
        for pe in 0..self.links.len() {
            let Some(link) = &self.links[pe] else {
                continue;
            };
            if link.deferred.swap(false, Ordering::AcqRel) {
                let r = self.with(call, pe, |c| c.send());
                self.tolerate(r)?;
            }
        }
        Ok(())
    }

    /// Before a round trip: nothing deferred may wait behind it (a reply may depend on it).
    fn push_all(&self, call: &'static str) -> Result<()> {
        if self
            .links
            .iter()
            .flatten()
            .any(|l| l.deferred.load(Ordering::Acquire))
        {
            self.push(call)?;
        }
        Ok(())
    }

    /// Stores `value` (8 bytes, release) at `off` of `pe`'s heap `heap` (not acknowledged).
    pub fn store(
        &self,
        call: &'static str,
        pe: usize,
        heap: HeapId,
        off: usize,
        value: u64,
    ) -> Result<()> {
        let link = self.link(call, pe)?;
        let r = self.with(call, pe, |c| {
            c.out
                .extend_from_slice(&req(OP_STORE, heap, 8, 0, off as u64, 8, value, 0));
            link.deferred.store(false, Ordering::Release);
            c.send()
        });
        link.dirty.store(true, Ordering::Release);
        self.tolerate(r)
    }

    /// While finalizing, a peer that already left needs nothing more from this PE.
    fn tolerate(&self, r: Result<()>) -> Result<()> {
        match r {
            Err(Error::PeerLost { .. }) if self.live.is_finalizing() => Ok(()),
            r => r,
        }
    }

    /// Sends `h` (with whatever output is pending) on `c` and reads the reply header.
    fn round_trip(&self, c: &mut Conn, h: &[u8; REQ]) -> std::io::Result<(u32, u64)> {
        c.out.extend_from_slice(h);
        c.send()?;
        reply(&c.s, self.spin())
    }

    /// Reads `n` bytes at `[off, off+n)` of `pe`'s heap `heap` into `dst`.
    pub fn get(
        &self,
        call: &'static str,
        pe: usize,
        heap: HeapId,
        off: usize,
        dst: *mut u8,
        n: usize,
    ) -> Result<()> {
        self.push_all(call)?;
        let link = self.link(call, pe)?;
        let mut done = 0;
        while done < n {
            let k = (n - done).min(FRAME);
            let status = self.with(call, pe, |c| {
                link.deferred.store(false, Ordering::Release);
                let h = req(OP_GET, heap, 0, 0, (off + done) as u64, k as u64, 0, 0);
                let (status, _) = self.round_trip(c, &h)?;
                if status == 0 {
                    // SAFETY: the caller passes a live writable range of n bytes at dst.
                    let out = unsafe { std::slice::from_raw_parts_mut(dst.add(done), k) };
                    recv_exact(&c.s, out, self.spin())?;
                }
                Ok(status)
            })?;
            if status != 0 {
                return Err(self.rejected(call, pe, "get", off + done, k));
            }
            done += k;
        }
        Ok(())
    }

    /// Applies `op` to the word of `size` bytes at `off` of `pe`'s heap; returns the old value.
    #[allow(clippy::too_many_arguments)]
    pub fn amo(
        &self,
        call: &'static str,
        pe: usize,
        heap: HeapId,
        op: AmoOp,
        off: usize,
        size: usize,
        value: u64,
        cond: u64,
    ) -> Result<u64> {
        self.push_all(call)?;
        let link = self.link(call, pe)?;
        let (status, v) = self.with(call, pe, |c| {
            link.deferred.store(false, Ordering::Release);
            let h = req(
                OP_AMO,
                heap,
                size as u8,
                op as u8,
                off as u64,
                size as u64,
                value,
                cond,
            );
            self.round_trip(c, &h)
        })?;
        if status != 0 {
            return Err(self.rejected(call, pe, "atomic", off, size));
        }
        Ok(v)
    }

    /// [`amo`](Net::amo) without the old value: not acknowledged (like a put; a rejection is
    /// reported by the next [`quiet`](Net::quiet)), applied in order after everything sent
    /// to `pe` before it.
    #[allow(clippy::too_many_arguments)]
    pub fn amo_nf(
        &self,
        call: &'static str,
        pe: usize,
        heap: HeapId,
        op: AmoOp,
        off: usize,
        size: usize,
        value: u64,
        cond: u64,
    ) -> Result<()> {
        let link = self.link(call, pe)?;
        let r = self.with(call, pe, |c| {
            c.out.extend_from_slice(&req(
                OP_AMO_NF,
                heap,
                size as u8,
                op as u8,
                off as u64,
                size as u64,
                value,
                cond,
            ));
            link.deferred.store(false, Ordering::Release);
            c.send()
        });
        link.dirty.store(true, Ordering::Release);
        self.tolerate(r)
    }

    fn rejected(&self, call: &'static str, pe: usize, what: &str, off: usize, n: usize) -> Error {
        Error::invalid(
            call,
            format!("PE {pe} rejected a {what} of {n} bytes at heap offset {off:#x} (outside its mapped heap or misaligned)"),
        )
    }

    /// Waits until every put, store and non-fetching atomic issued so far to every peer has
    /// been applied. Peers with nothing outstanding cost nothing; the flushes to several peers
    /// are all sent before the first reply is awaited.
    pub fn quiet(&self, call: &'static str) -> Result<()> {
        self.push_all(call)?;
        let mut sent: Vec<(usize, std::sync::MutexGuard<'_, Conn>)> = Vec::new();
        let mut result = Ok(());
        // Locks are taken in PE order (every other path holds one lock at a time).
        for pe in 0..self.links.len() {
            let Some(link) = &self.links[pe] else {
                continue;
            };
            if !link.dirty.swap(false, Ordering::AcqRel) {
                continue;
            }
            let mut c = match link.conn.lock() {
                Ok(c) => c,
                Err(_) => {
                    result = Err(Error::State {
                        call,
                        reason: "a TCP connection lock is poisoned".into(),
                    });
                    break;
                }
            };
            if c.broken {
                if !self.live.is_finalizing() {
                    result = Err(Error::PeerLost {
                        call,
                        me: self.me,
                        pe,
                        reason: "its TCP connection failed earlier".into(),
                    });
                    break;
                }
                continue;
            }
            link.deferred.store(false, Ordering::Release);
            c.out
                .extend_from_slice(&req(OP_FLUSH, HeapId::User, 0, 0, 0, 0, 0, 0));
            if let Err(e) = c.send() {
                c.broken = true;
                if !self.live.is_finalizing() {
                    result = Err(self.lost(call, pe, &e));
                    break;
                }
                continue;
            }
            sent.push((pe, c));
        }
        let spin = self.spin();
        for (pe, mut c) in sent {
            let r = reply(&c.s, spin);
            let bad = match r {
                Ok((_, bad)) => bad,
                Err(e) => {
                    c.broken = true;
                    if result.is_ok() && !self.live.is_finalizing() {
                        result = Err(self.lost(call, pe, &e));
                    }
                    continue;
                }
            };
            if bad != 0 && result.is_ok() {
                result = Err(Error::invalid(
                    call,
                    format!("PE {pe} rejected {bad} put(s), store(s) or atomic(s) from this PE (outside its mapped heap or misaligned)"),
                ));
            }
        }
        result
    }
}

impl Drop for Net {
    fn drop(&mut self) {
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

#[allow(clippy::too_many_arguments)]
fn req(
    op: u8,
    heap: HeapId,
    size: u8,
    amo: u8,
    off: u64,
    len: u64,
    value: u64,
    cond: u64,
) -> [u8; REQ] {
    let mut h = [0u8; REQ];
    h[0] = op;
    h[1] = heap as u8;
    h[2] = size;
    h[3] = amo;
    h[8..16].copy_from_slice(&off.to_le_bytes());
    h[16..24].copy_from_slice(&len.to_le_bytes());
    h[24..32].copy_from_slice(&value.to_le_bytes());
    h[32..40].copy_from_slice(&cond.to_le_bytes());
    h
}

/// One `recv` into `buf`: `Ok(0)` at end of stream. With `nowait`, `WouldBlock` when nothing
/// is there; otherwise it blocks (bounded by the socket's read timeout, if any).
fn recv_some(s: &TcpStream, buf: &mut [u8], nowait: bool) -> std::io::Result<usize> {
    let flags = if nowait { libc::MSG_DONTWAIT } else { 0 };
    loop {
        // SAFETY: buf is a live writable slice of buf.len() bytes; the fd is the open socket.
        let r = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives at least one byte into `buf` (`Ok(0)`: end of stream): busy-polls for up to
/// `spin`, then blocks.
fn recv_spin(s: &TcpStream, buf: &mut [u8], spin: Duration) -> std::io::Result<usize> {
    if !spin.is_zero() {
        let mut t0: Option<Instant> = None;
        let mut polls = 0u32;
        loop {
            match recv_some(s, buf, true) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                r => return r,
            }
            polls = polls.wrapping_add(1);
            if polls % 64 == 0 {
                let t = *t0.get_or_insert_with(Instant::now);
                if t.elapsed() >= spin {
                    break;
                }
            }
            std::hint::spin_loop();
        }
    }
    recv_some(s, buf, false)
}

/// Fills `out` from `s` (spinning up to `spin` whenever it has to wait).
fn recv_exact(s: &TcpStream, out: &mut [u8], spin: Duration) -> std::io::Result<()> {
    let mut done = 0;
    while done < out.len() {
        match recv_spin(s, &mut out[done..], spin)? {
            0 => return Err(ErrorKind::UnexpectedEof.into()),
            k => done += k,
        }
    }
    Ok(())
}

fn reply(s: &TcpStream, spin: Duration) -> std::io::Result<(u32, u64)> {
    let mut r = [0u8; REP];
    recv_exact(s, &mut r, spin)?;
    Ok((
        u32::from_le_bytes([r[0], r[1], r[2], r[3]]),
        u64::from_le_bytes(r[8..16].try_into().unwrap_or([0; 8])),
    ))
}

/// The receiving side of a service thread: a buffer that many requests arrive in at once.
struct Rx<'a> {
    s: &'a TcpStream,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    spin: &'a AtomicU64,
}

impl Rx<'_> {
    fn spin(&self) -> Duration {
        Duration::from_nanos(self.spin.load(Ordering::Relaxed))
    }

    /// Reads more bytes into the buffer; false at end of stream.
    fn fill(&mut self) -> std::io::Result<bool> {
        if self.lo == self.hi {
            self.lo = 0;
            self.hi = 0;
        } else if self.hi == self.buf.len() {
            self.buf.copy_within(self.lo..self.hi, 0);
            self.hi -= self.lo;
            self.lo = 0;
        }
        let spin = self.spin();
        let k = recv_spin(self.s, &mut self.buf[self.hi..], spin)?;
        self.hi += k;
        Ok(k != 0)
    }

    /// The next request header; None at a clean end of stream (between requests).
    fn header(&mut self) -> std::io::Result<Option<[u8; REQ]>> {
        while self.hi - self.lo < REQ {
            if !self.fill()? {
                return if self.hi == self.lo {
                    Ok(None)
                } else {
                    Err(ErrorKind::UnexpectedEof.into())
                };
            }
        }
        let mut h = [0u8; REQ];
        h.copy_from_slice(&self.buf[self.lo..self.lo + REQ]);
        self.lo += REQ;
        Ok(Some(h))
    }

    /// Fills `out` with the next bytes of the stream.
    fn read_exact(&mut self, out: &mut [u8]) -> std::io::Result<()> {
        let k = (self.hi - self.lo).min(out.len());
        out[..k].copy_from_slice(&self.buf[self.lo..self.lo + k]);
        self.lo += k;
        if k < out.len() {
            recv_exact(self.s, &mut out[k..], self.spin())?;
        }
        Ok(())
    }
}

fn rep(status: u32, value: u64) -> [u8; REP] {
    let mut r = [0u8; REP];
    r[..4].copy_from_slice(&status.to_le_bytes());
    r[8..16].copy_from_slice(&value.to_le_bytes());
    r
}

fn amo_op(v: u8) -> Option<AmoOp> {
    Some(match v {
        0 => AmoOp::Fetch,
        1 => AmoOp::Set,
        2 => AmoOp::Swap,
        3 => AmoOp::CompareSwap,
        4 => AmoOp::FetchAdd,
        5 => AmoOp::FetchAnd,
        6 => AmoOp::FetchOr,
        7 => AmoOp::FetchXor,
        _ => return None,
    })
}

/// The service loop of the connection from PE `pe`.
fn serve(
    pe: usize,
    s: TcpStream,
    regions: [Region; 2],
    stop: Arc<AtomicBool>,
    live: Arc<Liveness>,
    spin: Arc<AtomicU64>,
) {
    let why = match serve_inner(&s, &regions, &spin) {
        Ok(()) => "it exited or crashed: its TCP connection to this PE closed".to_string(),
        Err(e) => format!("its TCP connection failed: {e}"),
    };
    if !stop.load(Ordering::Acquire) {
        if !live.is_finalizing() {
            tracing::error!(target: "rshmem::tcp", "PE {pe}: {why}");
        }
        live.report(pe, why);
    }
}

/// Completes the GPU writes queued so far in every region (before a host-memory flag or
/// atomic, so the data it announces is visible first).
fn flush_gpu(regions: &[Region; 2]) {
    regions.iter().for_each(|r| {
        r.flush();
    });
}

fn serve_inner(s: &TcpStream, regions: &[Region; 2], spin: &AtomicU64) -> std::io::Result<()> {
    let mut rd = Rx {
        s,
        buf: vec![0u8; 64 << 10],
        lo: 0,
        hi: 0,
        spin,
    };
    let mut wr = s;
    let mut bounce: Vec<u8> = Vec::new();
    let mut rejected: u64 = 0;
    let proto = |what: &str| std::io::Error::new(ErrorKind::InvalidData, what.to_string());
    loop {
        let Some(h) = rd.header()? else {
            return Ok(());
        };
        let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
        let (op, off, len, value, cond) = (h[0], word(8), word(16), word(24), word(32));
        let region = match h[1] {
            0 => Some(&regions[0]),
            1 => Some(&regions[1]),
            _ => None,
        };
        match op {
            OP_PUT => {
                if len > FRAME as u64 {
                    return Err(proto("oversized put frame"));
                }
                bounce.resize(len as usize, 0);
                rd.read_exact(&mut bounce)?;
                match region.and_then(|r| r.check(off, len, 1).map(|a| (r, a))) {
                    Some((r, a)) if r.write(a, &bounce) => {}
                    _ => rejected += 1,
                }
            }
            OP_STORE => match region.and_then(|r| r.check(off, 8, 8).map(|a| (r, a))) {
                Some((r, a)) if r.gpu.is_some() => {
                    if !r.write(a, &value.to_le_bytes()) {
                        rejected += 1;
                    }
                }
                Some((_, a)) => {
                    flush_gpu(regions);
                    // SAFETY: an aligned word in the mapped part of this PE's heap.
                    unsafe { super::shm::amo(AmoOp::Set, a, 8, value, 0) };
                }
                None => rejected += 1,
            },
            OP_GET => {
                if len > FRAME as u64 {
                    return Err(proto("oversized get frame"));
                }
                match region.and_then(|r| r.check(off, len, 1).map(|a| (r, a))) {
                    Some((r, a)) => {
                        bounce.clear();
                        bounce.extend_from_slice(&rep(0, 0));
                        bounce.resize(REP + len as usize, 0);
                        if r.read(a, &mut bounce[REP..]) {
                            wr.write_all(&bounce)?;
                        } else {
                            wr.write_all(&rep(1, 0))?;
                        }
                    }
                    None => wr.write_all(&rep(1, 0))?,
                }
            }
            OP_AMO | OP_AMO_NF => {
                let size = h[2] as u64;
                let target = match (amo_op(h[3]), size) {
                    (Some(aop), 4 | 8) => {
                        region.and_then(|r| r.check(off, size, size).map(|a| (r, a, aop)))
                    }
                    _ => None,
                };
                if let Some((r, _, _)) = target {
                    if r.gpu.is_none() {
                        flush_gpu(regions);
                    }
                }
                if op == OP_AMO {
                    let old =
                        target.and_then(|(r, a, aop)| r.amo(aop, a, size as usize, value, cond));
                    match old {
                        Some(old) => wr.write_all(&rep(0, old))?,
                        None => wr.write_all(&rep(1, 0))?,
                    }
                } else {
                    let ok = target
                        .is_some_and(|(r, a, aop)| r.amo_nf(aop, a, size as usize, value, cond));
                    if !ok {
                        rejected += 1;
                    }
                }
            }
            OP_FLUSH => {
                for r in regions {
                    if !r.flush() {
                        rejected += 1;
                    }
                }
                wr.write_all(&rep(0, rejected))?;
                rejected = 0;
            }
            _ => return Err(proto("unknown request")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service thread applies good requests and rejects (never applies) bad ones: below the
    /// user area, past the mapped end, overflowing, misaligned atomics, unknown heaps.
    #[test]
    fn bad_requests_are_rejected_not_applied() {
        bad_requests(Duration::ZERO);
    }

    /// The same with a busy-polling service thread (as while a proxy is active).
    #[test]
    fn bad_requests_are_rejected_not_applied_spinning() {
        bad_requests(PROXY_SPIN);
    }

    fn bad_requests(spin: Duration) {
        let mut mem = vec![0u64; 1024];
        let base = mem.as_mut_ptr() as usize;
        let user = Region {
            base,
            lo: 4096,
            hi: usize::MAX,
            mapped: Arc::new(AtomicUsize::new(8192)),
            gpu: None,
        };
        let ctrl = Region {
            lo: 0,
            hi: 4096,
            ..user.clone()
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let spin = AtomicU64::new(spin.as_nanos() as u64);
        let t = std::thread::spawn(move || serve_inner(&s, &[user, ctrl], &spin));
        let put = |c: &mut TcpStream, heap, off: u64, data: &[u8]| {
            c.write_all(&req(OP_PUT, heap, 0, 0, off, data.len() as u64, 0, 0))
                .unwrap();
            c.write_all(data).unwrap();
        };
        put(&mut c, HeapId::User, 0, &[0xAA; 8]); // in the internal area
        put(&mut c, HeapId::User, 8188, &[0xAA; 8]); // past the mapped end
        put(&mut c, HeapId::Ctrl, 4092, &[0xAA; 8]); // past the control area
        put(&mut c, HeapId::User, 4096, &[0x11; 8]); // good
        c.write_all(&req(OP_STORE, HeapId::Ctrl, 8, 0, 12, 8, 7, 0))
            .unwrap(); // misaligned
        c.write_all(&req(OP_STORE, HeapId::Ctrl, 8, 0, 16, 8, 7, 0))
            .unwrap(); // good
        c.write_all(&req(OP_GET, HeapId::User, 0, 0, u64::MAX - 4, 8, 0, 0))
            .unwrap();
        assert_eq!(reply(&c, Duration::ZERO).unwrap().0, 1, "overflowing get");
        c.write_all(&req(OP_AMO, HeapId::User, 8, 4, 4100, 8, 1, 0))
            .unwrap();
        assert_eq!(reply(&c, Duration::ZERO).unwrap().0, 1, "misaligned atomic");
        let mut h = req(OP_AMO, HeapId::User, 8, 4, 4104, 8, 1, 0);
        h[1] = 9;
        c.write_all(&h).unwrap();
        assert_eq!(reply(&c, Duration::ZERO).unwrap().0, 1, "unknown heap");
        c.write_all(&req(OP_AMO, HeapId::User, 8, 4, 4104, 8, 5, 0))
            .unwrap();
        assert_eq!(reply(&c, Duration::ZERO).unwrap(), (0, 0), "good fetch_add");
        c.write_all(&req(OP_GET, HeapId::User, 0, 0, 4096, 16, 0, 0))
            .unwrap();
        assert_eq!(reply(&c, Duration::ZERO).unwrap().0, 0, "good get");
        let mut got = [0u8; 16];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got[..8], &[0x11; 8]);
        assert_eq!(u64::from_le_bytes(got[8..].try_into().unwrap()), 5);
        c.write_all(&req(OP_AMO_NF, HeapId::User, 8, 4, 4100, 8, 1, 0))
            .unwrap(); // misaligned, not answered
        c.write_all(&req(OP_AMO_NF, HeapId::User, 8, 4, 4112, 8, 10, 0))
            .unwrap(); // good, not answered
        c.write_all(&req(OP_FLUSH, HeapId::User, 0, 0, 0, 0, 0, 0))
            .unwrap();
        assert_eq!(
            reply(&c, Duration::ZERO).unwrap(),
            (0, 5),
            "four puts/stores and an atomic rejected"
        );
        drop(c);
        t.join().unwrap().unwrap();
        assert_eq!(mem[0], 0, "the internal area was written");
        assert_eq!(mem[1023], 0, "past the mapped end was written");
        assert_eq!(mem[511], 0, "past the control area was written");
        assert_eq!(mem[1], 0, "a misaligned store was applied");
        assert_eq!(mem[2], 7, "the good store");
        assert_eq!(mem[514], 10, "the good non-fetching atomic");
    }
}
