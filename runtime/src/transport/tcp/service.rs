//! The target side of the TCP transport: one service thread per incoming connection applies
//! the requests of that connection's PE to this PE's memory, in arrival order.
//!
//! A service thread never trusts the wire. Every request is checked before it touches memory:
//!
//! * **User heap**: the range must lie inside one live allocation of this PE's heap — the same
//!   check the host API makes on the issuing side ([`Heap::check_range`]); the runtime's
//!   internal area at the start of the heap, unmapped or unallocated offsets (a peer whose
//!   allocations differ from ours, after an asymmetric `malloc`/`free`) are refused. Atomics
//!   must be aligned.
//! * **Control heap** (barrier and team flags): only the accesses the runtime makes are
//!   accepted — an 8-byte aligned store into a barrier round's flag or check words (the host
//!   API's barrier, and the proxy's barrier for device barriers), only from
//!   the PE the dissemination barrier assigns that round's slot to (in round `r`, PE
//!   `me − 2^r`), or into the team area, and an 8-byte read of a team-area word. No put, get or
//!   modifying atomic.
//! * **Symmetric regions** (the program's static variables, [`crate::region`]): the range must
//!   lie inside one region this PE registered ([`RegionTargets::resolve`]); atomics must be
//!   aligned.
//!
//! A refused get or fetching atomic is answered with the reason; a refused put, store or
//! non-fetching atomic is dropped and counted, and the next flush answers the count with the
//! first refused request (its call, offset, length and reason), so the issuing PE's `quiet`
//! reports it naming the call that issued it.
//!
//! Every receive is bounded by `RSHMEM_TIMEOUT` once a request has started, every reply too: a request cut off in the middle (a truncated frame, a PE stopped halfway)
//! ends the connection, and the PE is reported lost, instead of stalling it forever. Between
//! requests a connection may stay idle as long as it likes.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::sock::{self, is_timeout};
use super::wire::{self, Reject, Rejection, Req, FRAME, REP, REQ};
use crate::heap::internal::{
    BARRIER_FLAGS, BARRIER_ROUNDS, CHECK_WORDS, FLAG_STRIDE, PROXY_BARRIER_FLAGS, TEAM_AREA_START,
};
use crate::heap::{Heap, INTERNAL_SIZE};
use crate::node::Liveness;
use crate::transport::{Amo, AmoOp, RegionTargets};

/// What the requests of one heap may address.
#[derive(Clone)]
enum Exposed {
    /// The user heap: live allocations only (checked by the heap's own range check).
    User(Arc<Heap>),
    /// The control heap: the runtime's flag accesses only.
    Ctrl,
    /// The symmetric regions (host memory): inside one registered region.
    Regions(Arc<RegionTargets>),
}

/// A heap as a service thread sees it.
#[derive(Clone)]
pub(crate) struct Region {
    base: usize,
    exposed: Exposed,
    mapped: Arc<AtomicUsize>,
    /// GPU memory (applied through the CUDA driver on a stream of its own), or None for host
    /// memory (load/store).
    gpu: Option<Arc<crate::cuda::target::GpuMem>>,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("base", &format_args!("{:#x}", self.base))
            .field("user", &matches!(self.exposed, Exposed::User(_)))
            .finish()
    }
}

impl Region {
    /// The user heap: requests must lie inside one of its live allocations.
    pub(crate) fn user(heap: &Arc<Heap>, gpu: Option<Arc<crate::cuda::target::GpuMem>>) -> Region {
        Region {
            base: heap.my_base(),
            exposed: Exposed::User(heap.clone()),
            mapped: heap.mapped_handle(),
            gpu,
        }
    }

    /// The host control heap: only the runtime's barrier and team flag accesses.
    pub(crate) fn ctrl(ctrl: &Heap) -> Region {
        Region {
            base: ctrl.my_base(),
            exposed: Exposed::Ctrl,
            mapped: ctrl.mapped_handle(),
            gpu: None,
        }
    }

    /// This PE's symmetric regions (offsets resolved through `targets`, addresses absolute).
    pub(crate) fn regions(targets: &Arc<RegionTargets>) -> Region {
        Region {
            base: 0,
            exposed: Exposed::Regions(targets.clone()),
            mapped: Arc::new(AtomicUsize::new(0)),
            gpu: None,
        }
    }

    /// Writes `data` at the checked address `a`; false if a GPU copy failed.
    fn write(&self, a: usize, data: &[u8]) -> bool {
        match &self.gpu {
            // SAFETY: `Service::target` proved [a, a+len) lies in a live allocation of this PE's
            // GPU heap; the driver stages the pageable source before returning.
            Some(g) => gpu_ok(unsafe { g.write_async("tcp", a as u64, data.as_ptr(), data.len()) })
                .is_some(),
            None => {
                // SAFETY: `Service::target` proved [a, a+len) lies in the mapped part of this
                // PE's heap (a live allocation, or a runtime flag word).
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), a as *mut u8, data.len()) };
                true
            }
        }
    }

    /// Reads `out.len()` bytes at the checked address `a` (after every earlier write).
    fn read(&self, a: usize, out: &mut [u8]) -> bool {
        match &self.gpu {
            Some(g) => {
                // SAFETY: as in `write`, for reading; out is a live exclusive slice.
                gpu_ok(unsafe { g.read("tcp", out.as_mut_ptr(), a as u64, out.len()) }).is_some()
            }
            None => {
                // SAFETY: as in `write`, for reading.
                unsafe {
                    std::ptr::copy_nonoverlapping(a as *const u8, out.as_mut_ptr(), out.len())
                };
                true
            }
        }
    }

    /// Applies the atomic `op` to the checked, aligned word at `a`; the old value.
    fn amo(&self, a: usize, op: Amo) -> Option<u64> {
        match &self.gpu {
            Some(g) => gpu_ok(g.amo("tcp", a as u64, op)),
            // SAFETY: an aligned word of `op.size` bytes in the mapped heap (checked).
            None => Some(unsafe { super::super::shm::amo(a, op) }),
        }
    }

    /// [`amo`](Region::amo) whose old value nobody reads: on a GPU it is queued in order
    /// after the writes before it and completed by the next flush. False if it failed.
    fn amo_nf(&self, a: usize, op: Amo) -> bool {
        match &self.gpu {
            Some(g) => gpu_ok(g.amo_async("tcp", a as u64, op)).is_some(),
            None => {
                // SAFETY: an aligned word of `op.size` bytes in the mapped heap (checked).
                unsafe { super::super::shm::amo(a, op) };
                true
            }
        }
    }

    /// Completes the GPU writes queued so far (nothing for host memory).
    fn flush(&self) -> bool {
        self.gpu
            .as_ref()
            .is_none_or(|g| gpu_ok(g.flush("tcp")).is_some())
    }
}

/// The result of a GPU access made for a peer's request; a failure is reported here (the peer
/// only learns that its request was refused: [`Reject::Device`]).
fn gpu_ok<T>(r: crate::error::Result<T>) -> Option<T> {
    r.map_err(|e| {
        tracing::error!(target: "rshmem::tcp", "a peer's request to this PE's GPU memory failed: {e}");
        crate::say!("rshmem: a peer's request to this PE's GPU memory failed: {e}");
    })
    .ok()
}

/// One incoming connection's service: who sent it and what it may touch.
pub(crate) struct Service {
    /// The PE at the other end (it presented the job token and this number).
    pub from: usize,
    /// This PE and the job size (for the barrier-slot rule).
    pub me: usize,
    pub n: usize,
    /// The user heap, the control heap and the symmetric regions, by [`HeapId`](super::HeapId).
    pub regions: [Region; 3],
    pub spin: Arc<AtomicU64>,
    /// Rung after each write applied to this PE's memory (wakes its napping waits).
    pub bell: Arc<crate::wait::Doorbell>,
    pub stop: Arc<AtomicBool>,
    pub live: Arc<Liveness>,
    /// `RSHMEM_TIMEOUT` (the sockets' timeouts), for messages.
    pub timeout: Option<Duration>,
}

/// Reads the request stream: a buffer that many requests arrive in at once.
struct Rx<'a> {
    s: &'a TcpStream,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    spin: &'a AtomicU64,
    stop: &'a AtomicBool,
    timeout: Option<Duration>,
}

/// A request that stopped arriving halfway.
fn stalled(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what} stopped arriving halfway (a truncated frame, or the PE stalled)"),
    )
}

impl Rx<'_> {
    fn spin(&self) -> Duration {
        Duration::from_nanos(self.spin.load(Ordering::Relaxed))
    }

    /// Reads more bytes into the buffer by `deadline`: Ok(0) at end of stream.
    fn fill(&mut self, deadline: Option<Instant>) -> std::io::Result<usize> {
        if self.lo == self.hi {
            self.lo = 0;
            self.hi = 0;
        } else if self.hi == self.buf.len() {
            self.buf.copy_within(self.lo..self.hi, 0);
            self.hi -= self.lo;
            self.lo = 0;
        }
        let spin = self.spin();
        let k = sock::recv_spin(self.s, &mut self.buf[self.hi..], spin, deadline)?;
        self.hi += k;
        Ok(k)
    }

    /// The next request header; None at a clean end of stream (between requests) or when the
    /// service is told to stop. Idle time between requests is unlimited; a header that stops
    /// arriving halfway fails after the socket's receive timeout.
    fn header(&mut self) -> std::io::Result<Option<[u8; REQ]>> {
        // Unbounded while nothing of the request is here, then RSHMEM_TIMEOUT for the rest.
        let mut deadline = None;
        while self.hi - self.lo < REQ {
            if self.hi > self.lo && deadline.is_none() {
                deadline = sock::deadline(self.timeout);
            }
            match self.fill(deadline) {
                Ok(0) if self.hi == self.lo => return Ok(None),
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if is_timeout(&e) => return Err(stalled("a request header")),
                Err(e) => return Err(e),
            }
            if self.hi == self.lo && self.stop.load(Ordering::Acquire) {
                return Ok(None);
            }
        }
        let mut h = [0u8; REQ];
        h.copy_from_slice(&self.buf[self.lo..self.lo + REQ]);
        self.lo += REQ;
        Ok(Some(h))
    }

    /// Fills `out` with the next bytes of the stream (a payload: bounded by the timeout).
    fn read_exact(&mut self, out: &mut [u8]) -> std::io::Result<()> {
        let k = (self.hi - self.lo).min(out.len());
        out[..k].copy_from_slice(&self.buf[self.lo..self.lo + k]);
        self.lo += k;
        if k < out.len() {
            sock::recv_exact(
                self.s,
                &mut out[k..],
                self.spin(),
                sock::deadline(self.timeout),
            )
            .map_err(|e| {
                if is_timeout(&e) {
                    stalled("the payload of a put")
                } else {
                    e
                }
            })?;
        }
        Ok(())
    }
}

/// Completes the GPU writes queued so far in every region (before a host-memory flag or
/// atomic, so the data it announces is visible first).
fn flush_gpu(regions: &[Region; 3]) {
    regions.iter().for_each(|r| {
        r.flush();
    });
}

/// The requests refused since the last flush: how many, and the first.
#[derive(Default)]
struct Rejects {
    count: u64,
    first: Option<Rejection>,
}

impl Rejects {
    fn add(&mut self, r: &Req, len: u64, why: Reject) {
        self.count += 1;
        self.first.get_or_insert(Rejection {
            call: r.call,
            op: r.op,
            heap: r.heap,
            why,
            off: r.off,
            len,
        });
    }

    /// The flush reply: the count, then the first refused request if there was one.
    fn take_reply(&mut self) -> Vec<u8> {
        let mut out = wire::rep(0, self.count).to_vec();
        if let Some(j) = self.first.take() {
            out.extend_from_slice(&j.encode());
        }
        self.count = 0;
        out
    }
}

impl Service {
    /// Serves the connection until it ends; a failure outside finalize reports the PE lost.
    pub(crate) fn run(self, s: TcpStream) {
        let why = match self.serve(&s) {
            Ok(()) => "it exited or crashed: its TCP connection to this PE closed".to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => format!(
                "its TCP connection failed: {e}; nothing arrived for {:?}",
                self.timeout.unwrap_or_default()
            ),
            Err(e) => format!("its TCP connection failed: {e}"),
        };
        let _ = s.shutdown(std::net::Shutdown::Both);
        self.live.note_departure(self.from, None);
        if !self.stop.load(Ordering::Acquire) {
            // A PE that left because another was gone said so first: blame that one.
            if let Some(Some(c)) = self.live.departure(self.from) {
                if c != self.from {
                    let reason = format!(
                        "PE {} left because it saw PE {c} gone (its notice to this PE)",
                        self.from
                    );
                    if !self.live.is_finalizing() {
                        tracing::error!(target: "rshmem::tcp", "PE {c}: {reason}");
                    }
                    self.live.report(c, reason);
                }
            }
            if !self.live.is_finalizing() {
                tracing::error!(target: "rshmem::tcp", "PE {}: {why}", self.from);
            }
            self.live.report(self.from, why);
        }
        // Waits on this PE look at the lost peer now rather than at the end of a nap.
        self.bell.ring();
    }

    /// The address of a request's range if this PE lets the connection's PE make it.
    fn target(
        &self,
        r: &Req,
        len: u64,
        align: u64,
    ) -> std::result::Result<(&Region, usize), Reject> {
        let region = self
            .regions
            .get(usize::from(r.heap))
            .ok_or(Reject::Malformed)?;
        let end = r.off.checked_add(len).ok_or(Reject::Outside)?;
        if align > 1 && r.off % align != 0 {
            return Err(Reject::Misaligned);
        }
        let off = usize::try_from(r.off).map_err(|_| Reject::Outside)?;
        let end = usize::try_from(end).map_err(|_| Reject::Outside)?;
        let len = end - off;
        match &region.exposed {
            Exposed::User(heap) => {
                let addr = region.base.checked_add(off).ok_or(Reject::Outside)?;
                // The host API's own check: inside one live allocation of this PE's heap.
                if heap.check_range("tcp", addr, len.max(1)).is_err() {
                    return Err(if off < heap.internal() || end > heap.mapped() {
                        Reject::Outside
                    } else {
                        Reject::Unallocated
                    });
                }
                Ok((region, addr))
            }
            Exposed::Ctrl => {
                self.ctrl_allowed(r, off, len)?;
                if end > region.mapped.load(Ordering::Acquire).min(INTERNAL_SIZE) {
                    return Err(Reject::Outside);
                }
                Ok((region, region.base + off))
            }
            Exposed::Regions(t) => t
                .resolve(r.off, len as u64)
                .map(|a| (region, a))
                .ok_or(Reject::Outside),
        }
    }

    /// The control-heap accesses the runtime makes: flag stores into the slots of the
    /// dissemination barriers — the host barrier's round flag and its four check words (two
    /// per epoch parity), the proxy barrier's round flag — only from the PE the barrier
    /// assigns each round's slot to; stores into the
    /// team area; and 8-byte reads of team-area words (`ctrl_load`).
    fn ctrl_allowed(&self, r: &Req, off: usize, len: usize) -> std::result::Result<(), Reject> {
        if len != 8 {
            return Err(Reject::Control);
        }
        let span = BARRIER_ROUNDS * FLAG_STRIDE;
        // (start of the area, bytes of each round's slot the sender writes)
        let barrier = [
            (BARRIER_FLAGS, 8),
            (CHECK_WORDS, 32),
            (PROXY_BARRIER_FLAGS, 8),
        ]
        .into_iter()
        .find(|&(a, _)| (a..a + span).contains(&off));
        let team = off >= TEAM_AREA_START && off + 8 <= INTERNAL_SIZE;
        match r.op {
            wire::OP_STORE => {
                if let Some((area, used)) = barrier {
                    let rel = off - area;
                    if rel % FLAG_STRIDE >= used {
                        return Err(Reject::Control);
                    }
                    let round = (rel / FLAG_STRIDE) as u32;
                    // In round r, PE i writes the slot of PE i + 2^r (mod n).
                    return match 1usize.checked_shl(round) {
                        Some(dist) if dist < self.n && (self.from + dist) % self.n == self.me => {
                            Ok(())
                        }
                        _ => Err(Reject::Control),
                    };
                }
                if team {
                    Ok(())
                } else {
                    Err(Reject::Control)
                }
            }
            wire::OP_AMO
                if team && r.size == 8 && AmoOp::from_code(r.amo) == Some(AmoOp::Fetch) =>
            {
                Ok(())
            }
            _ => Err(Reject::Control),
        }
    }

    fn serve(&self, s: &TcpStream) -> std::io::Result<()> {
        let mut rd = Rx {
            s,
            buf: vec![0u8; 64 << 10],
            lo: 0,
            hi: 0,
            spin: &self.spin,
            stop: &self.stop,
            timeout: self.timeout,
        };
        let mut bounce: Vec<u8> = Vec::new();
        let mut rejects = Rejects::default();
        let proto =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let regions = &self.regions;
        loop {
            let Some(h) = rd.header()? else {
                return Ok(());
            };
            let r = Req::decode(&h);
            match r.op {
                wire::OP_PUT => {
                    if r.len > FRAME as u64 {
                        return Err(proto("oversized put frame"));
                    }
                    bounce.resize(r.len as usize, 0);
                    rd.read_exact(&mut bounce)?;
                    match self.target(&r, r.len, 1) {
                        Ok((g, a)) if g.write(a, &bounce) => self.bell.ring(),
                        Ok(_) => rejects.add(&r, r.len, Reject::Device),
                        Err(why) => rejects.add(&r, r.len, why),
                    }
                }
                wire::OP_STORE => match self.target(&r, 8, 8) {
                    Ok((g, a)) if g.gpu.is_some() => {
                        if g.write(a, &r.value.to_le_bytes()) {
                            self.bell.ring();
                        } else {
                            rejects.add(&r, 8, Reject::Device);
                        }
                    }
                    Ok((_, a)) => {
                        flush_gpu(regions);
                        // SAFETY: an aligned word in the mapped part of this PE's heap (checked).
                        unsafe { super::super::shm::amo(a, Amo::set64(r.value)) };
                        self.bell.ring();
                    }
                    Err(why) => rejects.add(&r, 8, why),
                },
                wire::OP_GET => {
                    if r.len > FRAME as u64 {
                        return Err(proto("oversized get frame"));
                    }
                    match self.target(&r, r.len, 1) {
                        Ok((g, a)) => {
                            bounce.clear();
                            bounce.extend_from_slice(&wire::rep(0, 0));
                            bounce.resize(REP + r.len as usize, 0);
                            if g.read(a, &mut bounce[REP..]) {
                                sock::send_all(s, &bounce, sock::deadline(self.timeout))?;
                            } else {
                                sock::send_all(
                                    s,
                                    &wire::rep(Reject::Device as u32, 0),
                                    sock::deadline(self.timeout),
                                )?;
                            }
                        }
                        Err(why) => sock::send_all(
                            s,
                            &wire::rep(why as u32, 0),
                            sock::deadline(self.timeout),
                        )?,
                    }
                }
                wire::OP_AMO | wire::OP_AMO_NF => {
                    let size = u64::from(r.size);
                    let target = match (AmoOp::from_code(r.amo), size) {
                        (Some(aop), 4 | 8) => self
                            .target(&r, size, size)
                            .map(|(g, a)| (g, a, Amo::new(aop, size as usize, r.value, r.cond))),
                        _ => Err(Reject::Malformed),
                    };
                    if let Ok((g, _, _)) = target {
                        if g.gpu.is_none() {
                            flush_gpu(regions);
                        }
                    }
                    if r.op == wire::OP_AMO {
                        let reply = match target {
                            Ok((g, a, aop)) => match g.amo(a, aop) {
                                Some(old) => {
                                    self.bell.ring();
                                    wire::rep(0, old)
                                }
                                None => wire::rep(Reject::Device as u32, 0),
                            },
                            Err(why) => wire::rep(why as u32, 0),
                        };
                        sock::send_all(s, &reply, sock::deadline(self.timeout))?;
                    } else {
                        match target {
                            Ok((g, a, aop)) => {
                                if g.amo_nf(a, aop) {
                                    self.bell.ring();
                                } else {
                                    rejects.add(&r, size, Reject::Device);
                                }
                            }
                            Err(why) => rejects.add(&r, size, why),
                        }
                    }
                }
                wire::OP_FLUSH => {
                    for g in regions {
                        if !g.flush() {
                            rejects.add(&r, 0, Reject::Device);
                        }
                    }
                    sock::send_all(s, &rejects.take_reply(), sock::deadline(self.timeout))?;
                }
                wire::OP_GONE => {
                    let c = r.value as usize;
                    if r.value >= self.n as u64 || c == self.from {
                        return Err(proto("a departure notice naming no other PE"));
                    }
                    self.live.note_departure(self.from, Some(c));
                }
                _ => return Err(proto("unknown request")),
            }
        }
    }
}
