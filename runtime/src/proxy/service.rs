//! The proxy's service thread: takes requests off the ring in ticket order and executes them
//! through an [`Exec`] (the real one moves data between this PE's GPU and the remote transport
//! serving the target PE, whichever it is: TCP, UCX or verbs, through
//! [`Remotes`](crate::transport::remote::Remotes)).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fifo::{op, Failure, Outcome, Request, Ring, INLINE};
use crate::cuda::pinned::Pinned;
use crate::cuda::target::GpuMem;
use crate::error::{Error, Result};
use crate::node::Liveness;
use crate::transport::remote::Remotes;
use crate::transport::{Amo, AmoOp, Caps, HeapId, RemoteAddr, RemoteRef, TransportOps};

/// Executes one request.
pub(crate) trait Exec {
    /// Runs `r`; what comes back goes to the device for fetching requests.
    fn exec(&mut self, r: &Request) -> Result<Outcome>;

    /// The ring ran empty: send what was held back to batch requests.
    fn idle(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The failure code the device sees for an error.
pub(crate) fn failure_of(e: &Error) -> Failure {
    match e {
        Error::PeerLost { .. } => Failure::PeerLost,
        Error::Timeout { .. } => Failure::Timeout,
        Error::Cuda { .. } => Failure::Cuda,
        _ => Failure::BadRequest,
    }
}

/// The name of a request's operation, for messages.
pub(crate) fn op_name(code: u8) -> &'static str {
    match code {
        op::PUT => "put",
        op::GET => "get",
        op::AMO => "atomic",
        op::SIGNAL => "signal",
        op::QUIET => "quiet",
        op::BARRIER => "barrier",
        op::NOP => "nop",
        _ => "unknown request",
    }
}

/// The service loop: runs until `stop` is set and the ring is empty. After the first failure
/// it keeps reading requests (so device pushes never block on a full ring) but executes none
/// and stops advancing `completed`: device waits then see the error and trap.
pub(crate) fn run(mut ring: Ring, mut ex: impl Exec, stop: Arc<AtomicBool>, me: usize) {
    let mut idle: u32 = 0;
    let mut failed = false;
    loop {
        match ring.poll() {
            Some(r) => {
                idle = 0;
                if !failed {
                    match ex.exec(&r) {
                        Ok(out) => {
                            ring.finish(&r, out);
                            ring.complete(r.ticket);
                        }
                        Err(e) => {
                            failed = true;
                            ring.fail(failure_of(&e), r.pe, r.ticket);
                            tracing::error!(target: "rshmem::proxy", pe = me, ticket = r.ticket, "device {} to PE {} failed: {e}", op_name(r.op), r.pe);
                            crate::say!(
                                "rshmem: proxy of PE {me}: device {} request #{} to PE {} failed: {e}",
                                op_name(r.op),
                                r.ticket,
                                r.pe
                            );
                        }
                    }
                }
                ring.reap();
            }
            None => {
                ring.reap();
                if idle == 0 && !failed {
                    if let Err(e) = ex.idle() {
                        // The connection is broken and its PE reported lost: the next request
                        // to it, or the next quiet, fails with that.
                        tracing::debug!(target: "rshmem::proxy", pe = me, "sending batched requests: {e}");
                    }
                }
                if stop.load(Ordering::Acquire) {
                    return;
                }
                idle = idle.saturating_add(1);
                if idle < 200_000 {
                    std::hint::spin_loop();
                } else if idle < 220_000 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }
}

/// Bytes moved per step of a large put or get (pinned bounce buffer).
pub(crate) const BOUNCE: usize = 4 << 20;

/// Offset in every PE's host control heap of the proxy barrier's flags (one cache line per
/// dissemination round; below the team area).
pub(crate) const BARRIER_FLAGS: usize = crate::heap::internal::PROXY_BARRIER_FLAGS;

const _: () = {
    use crate::heap::internal as hi;
    assert!(hi::BARRIER_FLAGS + hi::BARRIER_ROUNDS * hi::FLAG_STRIDE <= BARRIER_FLAGS);
    assert!(hi::PEER_NOTICE + 8 <= BARRIER_FLAGS);
    assert!(BARRIER_FLAGS + hi::BARRIER_ROUNDS * hi::FLAG_STRIDE <= hi::TEAM_AREA_START);
};

/// The dissemination barrier the proxy runs for device barriers when some PE is on another
/// node: host-memory flags of its own (not the host API barrier's), so device and host
/// barriers never mix.
pub(crate) struct HostBarrier {
    pub me: usize,
    pub n: usize,
    pub epoch: u64,
    /// Local index of each PE (None: another node).
    pub local_of: Vec<Option<usize>>,
    /// Start of each local PE's control-heap slice.
    pub ctrl_base: Vec<usize>,
    pub my_local: usize,
    pub live: Arc<Liveness>,
    pub timeout: Option<Duration>,
}

impl HostBarrier {
    /// One device barrier; `store(pe, off, v)` raises a flag on a PE of another node.
    fn run(
        &mut self,
        call: &'static str,
        store: impl Fn(usize, usize, u64) -> Result<()>,
    ) -> Result<()> {
        let n = self.n;
        if n == 1 {
            return Ok(());
        }
        self.epoch += 1;
        let epoch = self.epoch;
        let mut dist = 1usize;
        let mut round = 0usize;
        while dist < n {
            let to = (self.me + dist) % n;
            let from = (self.me + n - dist) % n;
            let off = BARRIER_FLAGS + round * crate::heap::internal::FLAG_STRIDE;
            match self.local_of[to] {
                Some(l) => {
                    // SAFETY: an aligned u64 in the internal area of a local PE's control
                    // heap, mapped for the World's lifetime (the proxy stops before it).
                    let w = unsafe {
                        &*((self.ctrl_base[l] + off) as *const std::sync::atomic::AtomicU64)
                    };
                    w.store(epoch, Ordering::Release);
                }
                None => store(to, off, epoch)?,
            }
            // SAFETY: as above, this PE's own flag.
            let mine = unsafe {
                &*((self.ctrl_base[self.my_local] + off) as *const std::sync::atomic::AtomicU64)
            };
            let t0 = Instant::now();
            let mut spins = 0u32;
            while mine.load(Ordering::Acquire) < epoch {
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 {
                    if let Some((pe, reason)) = self.live.failed() {
                        return Err(Error::PeerLost {
                            call,
                            me: self.me,
                            pe,
                            reason,
                        });
                    }
                    if self.timeout.is_some_and(|t| t0.elapsed() > t) {
                        return Err(Error::Timeout {
                            call,
                            me: self.me,
                            pe: Some(from),
                            what: format!(
                                "PE {from} to reach device barrier #{epoch} (round {round}, through the proxy)"
                            ),
                            waited: t0.elapsed(),
                        });
                    }
                    if spins > 1 << 20 {
                        std::thread::sleep(Duration::from_micros(20));
                    } else {
                        std::thread::yield_now();
                    }
                }
                std::hint::spin_loop();
            }
            dist <<= 1;
            round += 1;
        }
        Ok(())
    }
}

/// The real executor: this PE's GPU memory on one side, the remote transports on the other.
pub(crate) struct NetExec {
    /// The remote transports and how each PE is reached.
    pub remotes: Arc<Remotes>,
    pub mem: Arc<GpuMem>,
    /// Start of this PE's GPU slice: a symmetric address minus it is the heap offset.
    pub heap_base: usize,
    pub bounce: Pinned,
    pub barrier: HostBarrier,
}

const CALL: &str = "device call through the proxy";

fn user(pe: usize, off: usize) -> RemoteAddr {
    RemoteAddr {
        pe,
        heap: HeapId::User,
        off,
    }
}

impl NetExec {
    /// The transport of `pe`. Device requests of this PE are executed in order (device code
    /// relies on it: `rshmem_fence` pushes nothing): a transport that does not order requests
    /// by itself (UCX) is fenced before each request after the ones before it (a no-op when
    /// nothing is outstanding).
    fn route(&self, pe: usize) -> Result<RemoteRef<'_>> {
        let r = self.remotes.get(CALL, pe)?;
        if !r.caps().contains(Caps::ORDERED) {
            r.fence(CALL)?;
        }
        Ok(r)
    }

    fn target(&self, r: &Request) -> Result<(usize, usize)> {
        let pe = usize::try_from(r.pe).ok().filter(|&p| p < self.barrier.n);
        match (pe, (r.remote as usize).checked_sub(self.heap_base)) {
            (Some(pe), Some(off)) => Ok((pe, off)),
            _ => Err(Error::invalid(
                CALL,
                format!(
                    "request #{} names PE {} and address {:#x} (outside this PE's heap or the job)",
                    r.ticket, r.pe, r.remote
                ),
            )),
        }
    }
}

fn amo_of(code: u8) -> Option<AmoOp> {
    AmoOp::try_from(code).ok()
}

impl Exec for NetExec {
    fn exec(&mut self, r: &Request) -> Result<Outcome> {
        let n = r.nbytes as usize;
        match r.op {
            op::PUT => {
                let (pe, off) = self.target(r)?;
                let via = self.route(pe)?;
                if r.inline() {
                    if n > INLINE {
                        return Err(Error::invalid(CALL, "inline put longer than a slot holds"));
                    }
                    via.put_batched(CALL, user(pe, off), r.data.as_ptr(), n)?;
                } else {
                    let mut done = 0;
                    while done < n {
                        let k = (n - done).min(self.bounce.len());
                        // SAFETY: the bounce buffer holds k bytes; the source is the device's
                        // buffer (a bad address is a CUDA error).
                        unsafe {
                            self.mem
                                .read(CALL, self.bounce.ptr(), r.local + done as u64, k)?
                        };
                        // The bounce buffer may be reused on return (TCP copies small frames
                        // into its connection buffer; UCX and verbs complete it locally).
                        via.put_batched(CALL, user(pe, off + done), self.bounce.ptr(), k)?;
                        done += k;
                    }
                }
                Ok(Outcome::Done)
            }
            op::GET => {
                let (pe, off) = self.target(r)?;
                let via = self.route(pe)?;
                let get = |off: usize, dst: *mut u8, k: usize| via.get(CALL, dst, user(pe, off), k);
                if r.inline() {
                    if n > INLINE {
                        return Err(Error::invalid(CALL, "inline get longer than a slot holds"));
                    }
                    let mut d = [0u8; INLINE];
                    get(off, d.as_mut_ptr(), n)?;
                    return Ok(Outcome::Data(d));
                }
                let mut done = 0;
                while done < n {
                    let k = (n - done).min(self.bounce.len());
                    get(off + done, self.bounce.ptr(), k)?;
                    // SAFETY: k bytes of the bounce buffer; the destination is the device's.
                    unsafe {
                        self.mem
                            .write_async(CALL, r.local + done as u64, self.bounce.ptr(), k)?
                    };
                    // The bounce buffer is refilled next round: the copy must have read it.
                    self.mem.sync(CALL)?;
                    done += k;
                }
                Ok(Outcome::Done)
            }
            op::AMO => {
                let (pe, off) = self.target(r)?;
                let aop = amo_of(r.amo)
                    .ok_or_else(|| Error::invalid(CALL, format!("unknown atomic {}", r.amo)))?;
                let a = Amo::new(aop, r.size as usize, r.value, r.cond);
                let at = user(pe, off);
                let via = self.route(pe)?;
                if !r.fetching() {
                    // Nobody waits for the old value: posted where the transport can (TCP: no
                    // round trip), applied at the target when it returns otherwise (UCX).
                    via.amo_nf(CALL, at, a)?;
                    return Ok(Outcome::Done);
                }
                Ok(Outcome::Value(via.amo(CALL, at, a)?))
            }
            op::SIGNAL => {
                let (pe, off) = self.target(r)?;
                let aop = if r.amo == 0 {
                    AmoOp::Set
                } else {
                    AmoOp::FetchAdd
                };
                let (at, a) = (user(pe, off), Amo::new(aop, 8, r.value, 0));
                // After every earlier request to that PE (an ordered transport, or the fence of
                // `route`); not waited for on TCP, applied when it returns on UCX.
                self.route(pe)?.amo_nf(CALL, at, a)?;
                Ok(Outcome::Done)
            }
            op::QUIET => {
                self.remotes.quiet(CALL)?;
                Ok(Outcome::Done)
            }
            op::BARRIER => {
                self.remotes.quiet(CALL)?;
                let remotes = &self.remotes;
                self.barrier.run(CALL, |to, off, v| {
                    let at = RemoteAddr {
                        pe: to,
                        heap: HeapId::Ctrl,
                        off,
                    };
                    remotes.get(CALL, to)?.store(CALL, at, v)
                })?;
                Ok(Outcome::Done)
            }
            op::NOP => Ok(Outcome::Done),
            other => Err(Error::invalid(
                CALL,
                format!("request #{} has unknown operation {other}", r.ticket),
            )),
        }
    }

    fn idle(&mut self) -> Result<()> {
        self.remotes.push(CALL)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fifo::{tests::Mem, FLAG_FETCH};
    use super::*;

    /// Records what it executes; fails on request value 666.
    struct Rec(std::sync::mpsc::Sender<(u64, u8)>);

    impl Exec for Rec {
        fn exec(&mut self, r: &Request) -> Result<Outcome> {
            if r.value == 666 {
                return Err(Error::PeerLost {
                    call: "test",
                    me: 0,
                    pe: r.pe as usize,
                    reason: "test".into(),
                });
            }
            self.0.send((r.ticket, r.op)).ok();
            Ok(Outcome::Value(r.value * 2))
        }
    }

    /// A ring served by [`run`] with a [`Rec`] on a thread.
    struct Served {
        m: Arc<Mem>,
        rx: std::sync::mpsc::Receiver<(u64, u8)>,
        /// Set to stop the service.
        stop: Arc<AtomicBool>,
        t: std::thread::JoinHandle<()>,
    }

    /// A ring of `slots` slots, served.
    fn serve(slots: usize) -> Served {
        let m = Mem::new(slots);
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let ring = m.ring();
        let s = stop.clone();
        let t = std::thread::spawn(move || run(ring, Rec(tx), s, 0));
        Served { m, rx, stop, t }
    }

    #[test]
    fn service_executes_in_order_returns_results_and_stops() {
        let Served { m, rx, stop, t } = serve(4);
        for i in 0..50u64 {
            let k = m.push(op::PUT, 0, 1, i, true).unwrap();
            assert_eq!(k, 2 * i);
            let f = m.push(op::AMO, FLAG_FETCH, 1, i, true).unwrap();
            assert_eq!(m.fetch(f), 2 * i);
        }
        while m.completed() < 100 {
            std::hint::spin_loop();
        }
        stop.store(true, Ordering::Release);
        t.join().unwrap();
        let seen: Vec<u64> = rx.try_iter().map(|(t, _)| t).collect();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn a_failure_stops_completion_but_not_consumption() {
        let Served { m, stop, t, .. } = serve(2);
        m.push(op::PUT, 0, 3, 1, true);
        m.push(op::PUT, 0, 3, 666, true);
        for i in 0..10 {
            m.push(op::PUT, 0, 3, i, true); // would block forever if slots were not freed
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(m.completed(), 1, "completion went past the failed request");
        stop.store(true, Ordering::Release);
        t.join().unwrap();
        let r = m.ring();
        assert_eq!(r.failure(), Failure::PeerLost as u64);
    }
}
