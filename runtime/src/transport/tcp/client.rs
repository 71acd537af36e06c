//! The issuing side of the TCP transport: requests on this PE's outgoing connections.
//!
//! Every send and every wait for a reply is bounded by `RSHMEM_TIMEOUT` (see [`super::sock`]): a
//! peer that does not take a frame or send a reply within that time (stopped, overloaded, cut
//! off) makes the call fail with [`Error::Timeout`] naming the peer,
//! the call and the operation; the connection is then broken for good (a request may have been
//! cut in half) and the peer is reported lost, so waits that depend on it fail too.

use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::sock::{self, is_timeout};
use super::wire::{self, Reject, Rejection, FRAME, REJ, REP, REQ};
use super::{HeapId, Net};
use crate::error::{Error, Result};
use crate::node::peer_lost;
use crate::transport::{Amo, RemoteAddr};

/// `d` in nanoseconds, saturated to `u64` (the unit of the busy-poll setting).
fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Payloads up to this size are copied behind the header and sent with one write.
const INLINE: usize = 16 << 10;
/// Deferred output of a connection is written once it reaches this many bytes.
pub(super) const DEFER_MAX: usize = 64 << 10;

/// One outgoing connection.
pub(super) struct Conn {
    pub s: std::net::TcpStream,
    /// Bytes of requests not written yet (deferred puts, then the request being sent).
    pub out: Vec<u8>,
    pub broken: bool,
    /// `RSHMEM_TIMEOUT`: the most one send or receive may take.
    timeout: Option<Duration>,
    /// Names of the calls that issued requests on this connection; a request carries the
    /// index, a rejection record echoes it.
    calls: Vec<&'static str>,
}

impl Conn {
    pub fn new(s: std::net::TcpStream, timeout: Option<Duration>) -> Conn {
        Conn {
            s,
            out: Vec::new(),
            broken: false,
            timeout,
            calls: Vec::new(),
        }
    }

    /// Writes every pending byte.
    fn send(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            let r = sock::send_all(&self.s, &self.out, sock::deadline(self.timeout));
            self.out.clear();
            r?;
        }
        Ok(())
    }

    /// This connection's number for `call`.
    fn call_id(&mut self, call: &'static str) -> u16 {
        if let Some(i) = self.calls.iter().position(|c| *c == call) {
            return i as u16;
        }
        if self.calls.len() >= usize::from(u16::MAX) {
            return u16::MAX;
        }
        self.calls.push(call);
        (self.calls.len() - 1) as u16
    }

    fn call_name(&self, id: u16) -> &'static str {
        self.calls
            .get(usize::from(id))
            .copied()
            .unwrap_or("an earlier call")
    }
}

/// One remote PE's connection and its state.
pub(super) struct Link {
    pub conn: Mutex<Conn>,
    /// A put or store went out since the last flush.
    pub dirty: AtomicBool,
    /// Deferred bytes wait in the connection's output buffer.
    pub deferred: AtomicBool,
}

/// One get of [`Net::get_batch`]: `n` bytes at `at` into `dst` (live and writable).
#[derive(Debug, Clone, Copy)]
pub struct BatchGet {
    /// Where the bytes go (this PE's memory).
    pub dst: *mut u8,
    /// What is read.
    pub at: RemoteAddr,
    /// How many bytes.
    pub n: usize,
}

/// What a call was doing on a connection, for messages.
#[derive(Debug, Clone, Copy)]
enum Doing {
    Put(usize),
    Get(usize),
    Amo,
    Store,
    Push,
    Flush,
}

impl std::fmt::Display for Doing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Doing::Put(n) => write!(f, "a put of {n} bytes"),
            Doing::Get(n) => write!(f, "a get of {n} bytes"),
            Doing::Amo => write!(f, "an atomic"),
            Doing::Store => write!(f, "a flag store"),
            Doing::Push => write!(f, "sending buffered puts"),
            Doing::Flush => write!(f, "a flush (completing earlier puts)"),
        }
    }
}

fn heap_name(h: u8) -> &'static str {
    HeapId::from_code(h).unwrap_or(HeapId::User).describe()
}

impl Net {
    /// The error for a connection to `pe` that failed with `e` while `doing`; the peer is
    /// reported lost (the connection cannot be used again).
    fn lost(&self, call: &'static str, pe: usize, doing: Doing, e: &std::io::Error) -> Error {
        if is_timeout(e) {
            let t = self.timeout.unwrap_or_default();
            self.live.report(
                pe,
                format!(
                    "its TCP connection stalled for {t:?} during {doing} from PE {}",
                    self.me
                ),
            );
            return Error::Timeout {
                call,
                me: self.me,
                pe: Some(pe),
                what: format!(
                    "PE {pe} to complete {doing} over TCP (is it stopped, overloaded or unreachable?)"
                ),
                waited: t,
            };
        }
        let reason = if e.kind() == ErrorKind::UnexpectedEof {
            "it exited or crashed: its TCP connection to this PE closed".to_string()
        } else {
            format!("its TCP connection failed during {doing}: {e}")
        };
        // A peer that left because it saw another PE gone sent a notice on its own
        // connection to this PE before it closed: name the PE it names.
        if let (c, Some(why)) = self.live.blame(pe) {
            self.live.report(pe, reason);
            return peer_lost(Some(&self.live), call, self.me, c, why);
        }
        peer_lost(Some(&self.live), call, self.me, pe, reason)
    }

    /// Runs `f` on the connection to `pe`; an I/O error breaks the connection for good.
    fn with<T>(
        &self,
        call: &'static str,
        pe: usize,
        doing: Doing,
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
            self.lost(call, pe, doing, &e)
        })
    }

    /// Sets how long threads waiting for TCP bytes busy-poll before they block (the proxy
    /// sets [`super::PROXY_SPIN`]; 0, the default, blocks at once). Applies to this PE's
    /// service threads and to replies it waits for.
    pub fn set_spin(&self, d: Duration) {
        self.spin.store(nanos(d), Ordering::Release);
    }

    /// Raises the busy-poll time of [`set_spin`](Net::set_spin) to at least `d`.
    pub fn spin_at_least(&self, d: Duration) {
        self.spin.fetch_max(nanos(d), Ordering::AcqRel);
    }

    fn spin(&self) -> Duration {
        Duration::from_nanos(self.spin.load(Ordering::Acquire))
    }

    /// Appends a put of `n` bytes (n <= INLINE, or a frame sent at once) to `c`'s output.
    #[allow(clippy::too_many_arguments)]
    fn put_frames(
        c: &mut Conn,
        call: &'static str,
        heap: HeapId,
        off: usize,
        src: *const u8,
        n: usize,
        defer: bool,
    ) -> std::io::Result<()> {
        let id = c.call_id(call);
        let mut done = 0;
        while done < n {
            let k = (n - done).min(FRAME);
            // SAFETY: the caller passes a live readable range of n bytes at src.
            let data = unsafe { std::slice::from_raw_parts(src.add(done), k) };
            let h = wire::req(
                wire::OP_PUT,
                heap as u8,
                0,
                0,
                id,
                (off + done) as u64,
                k as u64,
                0,
                0,
            );
            c.out.extend_from_slice(&h);
            if k <= INLINE {
                c.out.extend_from_slice(data);
            } else {
                c.send()?;
                sock::send_all(&c.s, data, sock::deadline(c.timeout))?;
            }
            done += k;
        }
        if !defer || c.out.len() >= DEFER_MAX {
            c.send()?;
        }
        Ok(())
    }

    /// Sends `n` bytes from `src` to `[at.off, at.off+n)` of PE `at.pe`'s heap `at.heap` (not
    /// acknowledged; a rejection is reported by the next [`quiet`](Net::quiet)). With `defer`
    /// the request may stay in the connection's output buffer (one write for a burst of small
    /// puts): it goes out with the next request to that PE that is not deferred, a round trip
    /// to any PE, [`push`](Net::push), or once [`DEFER_MAX`] bytes wait. Order with everything
    /// else sent to the PE is kept.
    pub fn put(
        &self,
        call: &'static str,
        at: RemoteAddr,
        src: *const u8,
        n: usize,
        defer: bool,
    ) -> Result<()> {
        let link = self.link(call, at.pe)?;
        self.one_way
            .fetch_add(n.div_ceil(FRAME).max(1) as u64, Ordering::Relaxed);
        let r = self.with(call, at.pe, Doing::Put(n), |c| {
            Self::put_frames(c, call, at.heap, at.off, src, n, defer)?;
            link.deferred.store(!c.out.is_empty(), Ordering::Release);
            Ok(())
        });
        link.dirty.store(true, Ordering::Release);
        self.tolerate(r)
    }

    /// Writes the deferred output of every connection.
    pub fn push(&self, call: &'static str) -> Result<()> {
        for pe in 0..self.slots.len() {
            let Some(link) = self.slots[pe].link.get() else {
                continue;
            };
            if link.deferred.swap(false, Ordering::AcqRel) {
                let r = self.with(call, pe, Doing::Push, |c| c.send());
                self.tolerate(r)?;
            }
        }
        Ok(())
    }

    /// Before a round trip: nothing deferred may wait behind it (a reply may depend on it).
    fn push_all(&self, call: &'static str) -> Result<()> {
        if self
            .slots
            .iter()
            .filter_map(|s| s.link.get())
            .any(|l| l.deferred.load(Ordering::Acquire))
        {
            self.push(call)?;
        }
        Ok(())
    }

    /// Stores `value` (8 bytes, release) at `at` (not acknowledged). A store into the control
    /// heap (a barrier or team flag, which the runtime's own waits complete) leaves the link
    /// clean: the next [`quiet`](Net::quiet) sends no flush for it (one round trip per
    /// barrier round and collective saved; nothing there can be refused, and the target
    /// applies it before anything sent after it).
    pub fn store(&self, call: &'static str, at: RemoteAddr, value: u64) -> Result<()> {
        let dirty = at.heap != HeapId::Ctrl;
        self.post(call, at.pe, Doing::Store, dirty, |id| {
            wire::req(
                wire::OP_STORE,
                at.heap as u8,
                8,
                0,
                id,
                at.off as u64,
                8,
                value,
                0,
            )
        })
    }

    /// Sends the request `req(call id)` to `pe` at once, with whatever output is deferred
    /// before it; not acknowledged (a rejection is reported by the next
    /// [`quiet`](Net::quiet), which flushes the link when `dirty`).
    fn post(
        &self,
        call: &'static str,
        pe: usize,
        doing: Doing,
        dirty: bool,
        req: impl FnOnce(u16) -> [u8; REQ],
    ) -> Result<()> {
        let link = self.link(call, pe)?;
        self.one_way.fetch_add(1, Ordering::Relaxed);
        let r = self.with(call, pe, doing, |c| {
            let id = c.call_id(call);
            c.out.extend_from_slice(&req(id));
            link.deferred.store(false, Ordering::Release);
            c.send()
        });
        if dirty {
            link.dirty.store(true, Ordering::Release);
        }
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
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        c.out.extend_from_slice(h);
        c.send()?;
        let mut r = [0u8; REP];
        sock::recv_exact(&c.s, &mut r, self.spin(), sock::deadline(c.timeout))?;
        Ok(wire::decode_rep(&r))
    }

    /// Reads `n` bytes at `[at.off, at.off+n)` of PE `at.pe`'s heap `at.heap` into `dst`.
    pub fn get(&self, call: &'static str, dst: *mut u8, at: RemoteAddr, n: usize) -> Result<()> {
        let RemoteAddr { pe, heap, off } = at;
        self.push_all(call)?;
        let link = self.link(call, pe)?;
        let mut done = 0;
        while done < n {
            let k = (n - done).min(FRAME);
            let status = self.with(call, pe, Doing::Get(k), |c| {
                link.deferred.store(false, Ordering::Release);
                let h = wire::req(
                    wire::OP_GET,
                    heap as u8,
                    0,
                    0,
                    0,
                    (off + done) as u64,
                    k as u64,
                    0,
                    0,
                );
                let (status, _) = self.round_trip(c, &h)?;
                if status == 0 {
                    // SAFETY: the caller passes a live writable range of n bytes at dst.
                    let out = unsafe { std::slice::from_raw_parts_mut(dst.add(done), k) };
                    sock::recv_exact(&c.s, out, self.spin(), sock::deadline(c.timeout))?;
                }
                Ok(status)
            })?;
            if status != 0 {
                return Err(refused(call, pe, wire::OP_GET, heap, status, off + done, k));
            }
            done += k;
        }
        Ok(())
    }

    /// Reads several ranges, as [`get`](Net::get) would one after the other, with their round
    /// trips overlapped: a get of at most one frame to each of several PEs is sent to all of
    /// them before the first reply is awaited (a collective pulling from n − 1 members waits
    /// about one round trip instead of n − 1). Others (larger, or a second one to the same
    /// PE in the same wave) go in later waves. Every request is answered (or its connection
    /// broken) before this returns; the first error is returned.
    pub fn get_batch(&self, call: &'static str, gets: &[BatchGet]) -> Result<()> {
        self.push_all(call)?;
        let mut left: Vec<usize> = Vec::new();
        let mut wave: Vec<usize> = Vec::new();
        let mut result = Ok(());
        for (i, g) in gets.iter().enumerate() {
            if g.n == 0 {
                continue;
            }
            if g.n > FRAME || wave.iter().any(|&w| gets[w].at.pe == g.at.pe) {
                left.push(i);
            } else {
                wave.push(i);
            }
        }
        // Locks in PE order, as `quiet` takes them.
        wave.sort_by_key(|&i| gets[i].at.pe);
        let mut sent = Vec::with_capacity(wave.len());
        for &i in &wave {
            let RemoteAddr { pe, heap, off } = gets[i].at;
            let link = match self.link(call, pe) {
                Ok(l) => l,
                Err(e) => {
                    result = result.and(Err(e));
                    continue;
                }
            };
            let mut c = match link.conn.lock() {
                Ok(c) => c,
                Err(_) => {
                    result = result.and(Err(Error::State {
                        call,
                        reason: "a TCP connection lock is poisoned".into(),
                    }));
                    continue;
                }
            };
            if c.broken {
                result = result.and(Err(Error::PeerLost {
                    call,
                    me: self.me,
                    pe,
                    reason: "its TCP connection failed earlier".into(),
                }));
                continue;
            }
            link.deferred.store(false, Ordering::Release);
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            let n = gets[i].n;
            let h = wire::req(
                wire::OP_GET,
                heap as u8,
                0,
                0,
                0,
                off as u64,
                n as u64,
                0,
                0,
            );
            c.out.extend_from_slice(&h);
            if let Err(e) = c.send() {
                c.broken = true;
                result = result.and(Err(self.lost(call, pe, Doing::Get(n), &e)));
                continue;
            }
            sent.push((i, c));
        }
        let spin = self.spin();
        for (i, mut c) in sent {
            let BatchGet { dst, at, n } = gets[i];
            let r = (|| {
                let mut h = [0u8; REP];
                sock::recv_exact(&c.s, &mut h, spin, sock::deadline(c.timeout))?;
                let (status, _) = wire::decode_rep(&h);
                if status == 0 {
                    // SAFETY: the caller passes a live writable range of n bytes at dst.
                    let out = unsafe { std::slice::from_raw_parts_mut(dst, n) };
                    sock::recv_exact(&c.s, out, spin, sock::deadline(c.timeout))?;
                }
                Ok::<_, std::io::Error>(status)
            })();
            match r {
                Ok(0) => {}
                Ok(status) => {
                    let e = refused(call, at.pe, wire::OP_GET, at.heap, status, at.off, n);
                    result = result.and(Err(e));
                }
                Err(e) => {
                    c.broken = true;
                    result = result.and(Err(self.lost(call, at.pe, Doing::Get(n), &e)));
                }
            }
        }
        result?;
        if left.is_empty() {
            return Ok(());
        }
        let rest: Vec<BatchGet> = left.iter().map(|&i| gets[i]).collect();
        if rest.len() == gets.len() {
            // Nothing fit in a wave (all larger than a frame): one at a time.
            return rest
                .iter()
                .try_for_each(|g| self.get(call, g.dst, g.at, g.n));
        }
        self.get_batch(call, &rest)
    }

    /// Applies `a` to the word at `at`; returns the old value.
    pub fn amo(&self, call: &'static str, at: RemoteAddr, a: Amo) -> Result<u64> {
        let RemoteAddr { pe, heap, off } = at;
        self.push_all(call)?;
        let link = self.link(call, pe)?;
        let (status, v) = self.with(call, pe, Doing::Amo, |c| {
            link.deferred.store(false, Ordering::Release);
            self.round_trip(c, &wire::amo_req(wire::OP_AMO, at, a, 0))
        })?;
        if status != 0 {
            return Err(refused(call, pe, wire::OP_AMO, heap, status, off, a.size));
        }
        Ok(v)
    }

    /// [`amo`](Net::amo) without the old value: not acknowledged (like a put; a rejection is
    /// reported by the next [`quiet`](Net::quiet)), applied in order after everything sent
    /// to the PE before it.
    pub fn amo_nf(&self, call: &'static str, at: RemoteAddr, a: Amo) -> Result<()> {
        self.post(call, at.pe, Doing::Amo, true, |id| {
            wire::amo_req(wire::OP_AMO_NF, at, a, id)
        })
    }

    /// Waits until every put, store and non-fetching atomic issued so far to every peer has
    /// been applied. Peers with nothing outstanding cost nothing; the flushes to several peers
    /// are all sent before the first reply is awaited. A peer that refused some of them makes
    /// it fail naming the call that issued the first refused one.
    pub fn quiet(&self, call: &'static str) -> Result<()> {
        self.push_all(call)?;
        let mut sent: Vec<(usize, std::sync::MutexGuard<'_, super::client::Conn>)> = Vec::new();
        let mut result = Ok(());
        // Locks are taken in PE order (every other path holds one lock at a time).
        for pe in 0..self.slots.len() {
            let Some(link) = self.slots[pe].link.get() else {
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
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            c.out.extend_from_slice(&wire::req(
                wire::OP_FLUSH,
                HeapId::User as u8,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            ));
            if let Err(e) = c.send() {
                c.broken = true;
                if !self.live.is_finalizing() {
                    result = Err(self.lost(call, pe, Doing::Flush, &e));
                    break;
                }
                continue;
            }
            sent.push((pe, c));
        }
        let spin = self.spin();
        for (pe, mut c) in sent {
            let r = (|| {
                let mut h = [0u8; REP];
                sock::recv_exact(&c.s, &mut h, spin, sock::deadline(c.timeout))?;
                let (_, bad) = wire::decode_rep(&h);
                let mut first = None;
                if bad != 0 {
                    let mut j = [0u8; REJ];
                    sock::recv_exact(&c.s, &mut j, spin, sock::deadline(c.timeout))?;
                    first = Some(Rejection::decode(&j));
                }
                Ok::<_, std::io::Error>((bad, first))
            })();
            match r {
                Ok((bad, Some(j))) if result.is_ok() => {
                    result = Err(rejected(c.call_name(j.call), call, pe, &j, bad));
                }
                Ok(_) => {}
                Err(e) => {
                    c.broken = true;
                    if result.is_ok() && !self.live.is_finalizing() {
                        result = Err(self.lost(call, pe, Doing::Flush, &e));
                    }
                }
            }
        }
        result
    }
}

/// The error for the round trip `op` on `[off, off+len)` of `pe`'s heap `heap` that `pe`
/// answered with the refusal `status`.
#[cold]
fn refused(
    call: &'static str,
    pe: usize,
    op: u8,
    heap: HeapId,
    status: u32,
    off: usize,
    len: usize,
) -> Error {
    let j = Rejection {
        call: 0,
        op,
        heap: heap as u8,
        why: Reject::from_status(status),
        off: off as u64,
        len: len as u64,
    };
    rejected(call, call, pe, &j, 1)
}

/// The error for a request `pe` refused: named after `issuer`, the call that made it (`now`
/// is the call that learned of it, when later); `count` refused since the last flush.
fn rejected(
    issuer: &'static str,
    now: &'static str,
    pe: usize,
    j: &Rejection,
    count: u64,
) -> Error {
    let what = wire::op_name(j.op);
    let article = if what.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    let mut reason = format!(
        "PE {pe} refused {article} {what} of {} bytes at offset {:#x} of its {}: {}",
        j.len,
        j.off,
        heap_name(j.heap),
        j.why.describe()
    );
    if count > 1 {
        reason += &format!(
            " ({} more of this PE's requests were refused since)",
            count - 1
        );
    }
    if issuer != now {
        reason += &format!(" (reported by {now})");
    }
    if j.why.is_range() {
        Error::NotSymmetric {
            call: issuer,
            reason,
        }
    } else {
        Error::invalid(issuer, reason)
    }
}
