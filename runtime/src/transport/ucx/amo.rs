//! Atomics applied by rshmem on the target PE, carried by UCX active messages.
//!
//! Over transports without hardware atomics (TCP, shared memory), UCX emulates `ucp_atomic_op_nbx`
//! in software: the target's worker applies the operation with CPU atomics on the remote address,
//! whatever its memory type. On GPU memory that address is not host-accessible, so UCX cannot
//! do atomics (nor atomic signals) on a GPU heap there. rshmem therefore applies atomics on the
//! user heap itself when the heap is on a GPU, with a UCX newer than 1.13 on a host without an
//! RDMA device (see `transport::select::ucx_target_atomics`), and on request
//! (`RSHMEM_UCX_TARGET_ATOMICS=1`, which tests this path on the CPU backend): the initiator sends an active message
//! ([`Request`], id [`AM_REQUEST`]) carrying the operation; the target's handler checks it
//! against its heap (the range must lie inside one live allocation, the word aligned), applies
//! it — on the GPU with the same kernel the TCP transport's target uses
//! ([`GpuMem::amo`](crate::cuda::target::GpuMem::amo), system-scope atomics), on the host with
//! CPU atomics — and answers ([`Reply`], id [`AM_REPLY`]) with the old value or the reason it
//! refused. The initiator of a fetching atomic waits for the answer.
//!
//! Non-fetching atomics are posted and *counted*, not answered: the target tallies, per
//! initiator, how many it handled and the first it refused ([`Tally`]). The next flush sends each
//! target it posted to one *settle* request carrying how many it sent there in all; the answer
//! carries how many the target handled and the refusal, if any, which the flush reports. One
//! message per posted atomic and one round trip per target and flush, instead of an answer per
//! atomic. A settle answered before every counted request arrived (the count falls short) is
//! sent again.
//!
//! The runtime's own flag stores (barrier and team flags,
//! [`TransportOps::store`](crate::transport::TransportOps::store)) ask for no answer: the waiting target sees the flag,
//! and the initiator needs only the send to complete, so a barrier round costs one message
//! instead of a message and its answer collected by the next quiet.
//!
//! Ordering: before it sends a request, the initiator flushes the puts and stores it issued
//! since the last flush (remote completion), so the data of a put-with-signal is in the target's
//! memory before the signal is applied.

use crate::frame::{bits, get, put, unbits};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::cuda::target::GpuMem;
use crate::heap::Heap;
use crate::transport::{Amo, AmoOp, HeapId, RegionTargets};

/// Active message id of a request.
pub const AM_REQUEST: u32 = 0x5253;
/// Active message id of a reply.
pub const AM_REPLY: u32 = 0x5254;

/// Version byte of the request format.
const VERSION: u8 = 3;

/// Bytes of an encoded [`Request`].
pub const REQUEST_LEN: usize = 40;
/// Bytes of an encoded [`Reply`].
pub const REPLY_LEN: usize = 24;

/// One atomic on the target's user heap, control heap or symmetric regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The issuing PE (for messages).
    pub from: u32,
    /// The operation's wire code ([`AmoOp`]'s).
    pub op: u8,
    /// 4 or 8.
    pub size: u8,
    /// The initiator reads the old value (a non-fetching set on a GPU is a plain word write,
    /// no kernel: it completes even while kernels occupy every SM).
    pub fetch: bool,
    /// Which of the target's memories `off` is in: the user heap, the control heap (barrier
    /// and team flags) or the symmetric regions.
    pub heap: HeapId,
    /// The target answers. False for the runtime's flag stores
    /// ([`TransportOps::store`](crate::transport::TransportOps::store)), which nobody waits on: the target then only
    /// logs a refusal, and the initiator's flush completes the send alone (no round trip); and
    /// for counted requests.
    pub answer: bool,
    /// A posted atomic: the target adds its outcome to its [`Tally`] of the initiator, which
    /// the next settle request reads.
    pub counted: bool,
    /// Not an atomic: asks for the [`Tally`] of the initiator once `value` counted requests
    /// from it were handled (the answer's value says how many were).
    pub settle: bool,
    /// Matches the reply to the request.
    pub seq: u64,
    /// Offset in that memory.
    pub off: u64,
    pub value: u64,
    pub cond: u64,
}

impl Request {
    /// A settle request from `from` (see the module docs): answer `seq` once `sent` counted
    /// requests from it were handled.
    pub fn settle(from: u32, seq: u64, sent: u64) -> Request {
        Request {
            from,
            op: 0,
            size: 0,
            fetch: false,
            heap: HeapId::User,
            answer: true,
            counted: false,
            settle: true,
            seq,
            off: 0,
            value: sent,
            cond: 0,
        }
    }

    /// `[version, op, size, flags, from: u32, seq, off, value, cond]`, little-endian; the flags
    /// byte holds, from bit 0 up: no old value wanted, the control heap, no answer wanted,
    /// counted (posted: the outcome goes into the target's [`Tally`]), settle, a symmetric
    /// region.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0] = VERSION;
        b[1] = self.op;
        b[2] = self.size;
        b[3] = bits([
            !self.fetch,
            self.heap == HeapId::Ctrl,
            !self.answer,
            self.counted,
            self.settle,
            self.heap == HeapId::Region,
        ]);
        put(&mut b, 4, self.from);
        for (i, v) in [self.seq, self.off, self.value, self.cond]
            .into_iter()
            .enumerate()
        {
            put(&mut b, 8 + 8 * i, v);
        }
        b
    }

    /// The inverse of [`Request::encode`]; None for anything else (wrong length or version).
    pub fn decode(b: &[u8]) -> Option<Request> {
        if b.len() != REQUEST_LEN || b[0] != VERSION {
            return None;
        }
        let [no_fetch, ctrl, no_answer, counted, settle, region] = unbits(b[3])?;
        let heap = match (ctrl, region) {
            (false, false) => HeapId::User,
            (true, false) => HeapId::Ctrl,
            (false, true) => HeapId::Region,
            (true, true) => return None,
        };
        // The length is checked above.
        let w = |i: usize| get::<u64>(b, 8 + 8 * i);
        Some(Request {
            op: b[1],
            size: b[2],
            fetch: !no_fetch,
            heap,
            answer: !no_answer,
            counted,
            settle,
            from: get(b, 4),
            seq: w(0),
            off: w(1),
            value: w(2),
            cond: w(3),
        })
    }
}

crate::wire::code_enum! {
    /// Why a target refused a request (0 in a reply means applied).
    pub enum Refusal: u32,
    /// Words for messages.
    fn reason {
        /// The word is not inside one live allocation of the target's heap.
        Outside = 1 => "the word is not inside one live allocation there",
        /// Not aligned to its size.
        Misaligned = 2 => "the word is not aligned to its size",
        /// Unknown operation or size.
        Malformed = 3 => "unknown operation or size",
        /// The GPU could not apply it (a CUDA error at the target).
        Device = 4 => "its GPU failed to apply it (see that PE's errors)",
        /// The target has not finished setting up (or takes no such requests).
        NotServing = 5 => "it does not serve such requests (set-up not finished, or mixed settings)",
    }
}

/// The answer to a [`Request`]: to an atomic, the old value or why it was refused; to a
/// settle, how many counted requests were handled and the first refusal among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub seq: u64,
    /// Why the atomic (or a counted one, for a settle) was refused.
    pub refusal: Option<Refusal>,
    /// The old value (a settle: the count).
    pub value: u64,
}

impl Reply {
    /// The answer to an atomic.
    pub fn of(seq: u64, result: Result<u64, Refusal>) -> Reply {
        match result {
            Ok(value) => Reply {
                seq,
                refusal: None,
                value,
            },
            Err(r) => Reply {
                seq,
                refusal: Some(r),
                value: 0,
            },
        }
    }

    /// The old value, or why the atomic was refused.
    pub fn result(&self) -> Result<u64, Refusal> {
        self.refusal.map_or(Ok(self.value), Err)
    }

    /// `[seq, status: u32, 0: u32, value]`, little-endian.
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        put(&mut b, 0, self.seq);
        put(&mut b, 8, self.refusal.map_or(0u32, |r| r as u32));
        put(&mut b, 16, self.value);
        b
    }

    /// The inverse of [`Reply::encode`]; None for anything else.
    pub fn decode(b: &[u8]) -> Option<Reply> {
        if b.len() != REPLY_LEN {
            return None;
        }
        let (seq, status, value) = (get(b, 0), get::<u32>(b, 8), get(b, 16));
        let refusal = match status {
            0 => None,
            c => Some(Refusal::from_code(c)?),
        };
        Some(Reply {
            seq,
            refusal,
            value,
        })
    }
}

/// The memory of this PE's user heap, as the handler applies atomics to it.
pub(crate) enum TargetMem {
    /// Host memory: CPU atomics.
    Host,
    /// GPU memory: the internal atomic kernel on a stream of its own.
    Gpu(Arc<GpuMem>),
}

/// What the request handler needs: this PE's user heap and how to touch it, and the part of
/// its control heap that holds the runtime's flag words (host memory).
pub(crate) struct Served {
    pub heap: Arc<Heap>,
    pub mem: TargetMem,
    /// Start of this PE's control heap and how many bytes of it take flag atomics.
    pub ctrl: (usize, usize),
    /// This PE's symmetric regions (host memory).
    pub regions: Arc<RegionTargets>,
}

impl Served {
    /// Checks and applies `r`; the old value or why not.
    pub(crate) fn apply(&self, r: &Request) -> Result<u64, Refusal> {
        let op = AmoOp::try_from(r.op).map_err(|_| Refusal::Malformed)?;
        let size = usize::from(r.size);
        let a = Amo::new(op, size, r.value, r.cond);
        if size != 4 && size != 8 {
            return Err(Refusal::Malformed);
        }
        if r.off % size as u64 != 0 {
            return Err(Refusal::Misaligned);
        }
        match r.heap {
            HeapId::Ctrl => {
                // The runtime's flag words: aligned words inside the control heap's internal
                // area.
                let (base, len) = self.ctrl;
                let end = r.off.checked_add(size as u64).ok_or(Refusal::Outside)?;
                if end > len as u64 {
                    return Err(Refusal::Outside);
                }
                // SAFETY: an aligned word of `size` bytes inside the mapped internal area of
                // this PE's control heap (host memory, mapped while the transport serves
                // requests).
                return Ok(unsafe { crate::transport::shm::amo(base + r.off as usize, a) });
            }
            HeapId::Region => {
                let addr = self
                    .regions
                    .resolve(r.off, size as u64)
                    .ok_or(Refusal::Outside)?;
                // SAFETY: an aligned word (regions start on a page) of `size` bytes inside a
                // symmetric region this PE registered: host memory mapped for the world's life.
                return Ok(unsafe { crate::transport::shm::amo(addr, a) });
            }
            HeapId::User => {}
        }
        let off = usize::try_from(r.off).map_err(|_| Refusal::Outside)?;
        let addr = self
            .heap
            .my_base()
            .checked_add(off)
            .ok_or(Refusal::Outside)?;
        // The host API's own check: inside one live allocation of this PE's heap.
        self.heap
            .check_range("ucx", addr, size)
            .map_err(|_| Refusal::Outside)?;
        match &self.mem {
            // SAFETY: an aligned word of `size` bytes inside a live allocation of this PE's
            // (host) heap, which stays mapped while the transport serves requests.
            TargetMem::Host => Ok(unsafe { crate::transport::shm::amo(addr, a) }),
            TargetMem::Gpu(g) if op == AmoOp::Set && !r.fetch => g
                .amo_async("ucx", addr as u64, a)
                .and_then(|()| g.flush("ucx"))
                .map(|()| 0)
                .map_err(|e| {
                    tracing::error!(target: "rshmem::ucx", "signal from PE {} on the GPU heap failed: {e}", r.from);
                    Refusal::Device
                }),
            TargetMem::Gpu(g) => g
                .amo("ucx", addr as u64, a)
                .map_err(|e| {
                    tracing::error!(target: "rshmem::ucx", "atomic from PE {} on the GPU heap failed: {e}", r.from);
                    Refusal::Device
                }),
        }
    }
}

/// The initiator's side: the reply awaited (one request at a time: fetching atomics and
/// settles are sent and waited for under the transport's lock).
#[derive(Default)]
pub(crate) struct Awaited {
    /// Sequence number of the last request sent.
    pub seq: AtomicU64,
    /// The last reply received: its sequence number (0: none yet) and result.
    pub got: Mutex<Option<Reply>>,
}

impl Awaited {
    /// Takes the reply to `seq` if it arrived.
    pub(crate) fn take(&self, seq: u64) -> Option<Reply> {
        let mut g = self.got.lock().ok()?;
        match *g {
            Some(r) if r.seq == seq => g.take(),
            _ => None,
        }
    }

    /// Records a reply (replies to requests given up on are dropped by [`Awaited::take`]).
    pub(crate) fn put(&self, r: Reply) {
        if r.seq == self.seq.load(Ordering::Acquire) {
            if let Ok(mut g) = self.got.lock() {
                *g = Some(r);
            }
        }
    }
}

/// The target's side of counted requests: per initiator, how many it handled and the first it
/// refused since the last settle that saw them all.
pub(crate) struct Tally {
    from: Mutex<Vec<(u64, Option<Refusal>)>>,
}

impl Tally {
    /// A tally for a job of `n` PEs.
    pub(crate) fn new(n: usize) -> Tally {
        Tally {
            from: Mutex::new(vec![(0, None); n]),
        }
    }

    /// Counts a request from `pe` that was handled with `result`; false for a PE outside the
    /// job.
    pub(crate) fn record(&self, pe: usize, result: Result<u64, Refusal>) -> bool {
        let Ok(mut g) = self.from.lock() else {
            return false;
        };
        let Some((seen, refused)) = g.get_mut(pe) else {
            return false;
        };
        *seen += 1;
        if let Err(r) = result {
            refused.get_or_insert(r);
        }
        true
    }

    /// The answer to `pe`'s settle for `sent` counted requests: how many were handled and,
    /// once all of them were, the first refusal (forgotten once reported). None for a PE
    /// outside the job.
    pub(crate) fn settle(&self, pe: usize, sent: u64) -> Option<(u64, Option<Refusal>)> {
        let mut g = self.from.lock().ok()?;
        let (seen, refused) = g.get_mut(pe)?;
        let r = if *seen >= sent { refused.take() } else { None };
        Some((*seen, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip_and_rejects() {
        let r = Request {
            from: 3,
            op: AmoOp::CompareSwap as u8,
            size: 8,
            fetch: true,
            heap: HeapId::User,
            answer: true,
            counted: false,
            settle: false,
            seq: 77,
            off: 0x20_0040,
            value: u64::MAX,
            cond: 5,
        };
        let b = r.encode();
        assert_eq!(Request::decode(&b), Some(r));
        for (fetch, heap, answer, counted) in [
            (false, HeapId::User, true, false),
            (true, HeapId::Ctrl, true, false),
            (false, HeapId::Ctrl, true, false),
            (false, HeapId::Ctrl, false, false),
            (false, HeapId::User, false, true),
            (true, HeapId::Region, true, false),
            (false, HeapId::Region, false, true),
        ] {
            let x = Request {
                fetch,
                heap,
                answer,
                counted,
                ..r
            };
            assert_eq!(Request::decode(&x.encode()), Some(x));
        }
        let st = Request::settle(2, 9, 1000);
        assert_eq!(Request::decode(&st.encode()), Some(st));
        assert!(st.settle && st.answer && !st.counted && st.value == 1000);
        assert_eq!(Request::decode(&b[..REQUEST_LEN - 1]), None);
        let mut bad = b;
        bad[0] = 1;
        assert_eq!(Request::decode(&bad), None, "other version");
        let mut bad = b;
        bad[3] = 64;
        assert_eq!(Request::decode(&bad), None, "unknown flag");
        let mut bad = b;
        // The control heap and a region.
        bad[3] = bits([false, true, false, false, false, true]);
        assert_eq!(Request::decode(&bad), None, "two memories at once");
    }

    #[test]
    fn reply_round_trip_and_rejects() {
        for result in [
            Ok(0),
            Ok(u64::MAX),
            Err(Refusal::Outside),
            Err(Refusal::NotServing),
        ] {
            let r = Reply::of(9, result);
            assert_eq!(Reply::decode(&r.encode()), Some(r));
            assert_eq!(r.result(), result);
        }
        // A settle's answer carries both a count and a refusal.
        let r = Reply {
            seq: 4,
            refusal: Some(Refusal::Misaligned),
            value: 12,
        };
        assert_eq!(Reply::decode(&r.encode()), Some(r));
        let mut b = Reply::of(1, Ok(2)).encode();
        b[8] = 99;
        assert_eq!(Reply::decode(&b), None, "unknown status");
        assert_eq!(Reply::decode(&b[1..]), None);
    }

    #[test]
    fn tally_reports_a_refusal_once_all_counted_requests_arrived() {
        let t = Tally::new(3);
        assert_eq!(t.settle(1, 0), Some((0, None)), "nothing posted");
        assert!(t.record(1, Ok(5)));
        assert!(t.record(1, Err(Refusal::Outside)));
        assert!(t.record(1, Err(Refusal::Misaligned)));
        assert_eq!(
            t.settle(1, 4),
            Some((3, None)),
            "one of 4 still on its way: the count falls short, the refusal is kept"
        );
        assert!(t.record(1, Ok(0)));
        assert_eq!(
            t.settle(1, 4),
            Some((4, Some(Refusal::Outside))),
            "the first refusal"
        );
        assert_eq!(t.settle(1, 4), Some((4, None)), "reported once");
        assert_eq!(t.settle(0, 0), Some((0, None)), "other PEs are apart");
        assert!(!t.record(3, Ok(0)), "a PE outside the job");
        assert_eq!(t.settle(3, 1), None);
    }

    #[test]
    fn awaited_takes_only_its_reply() {
        let a = Awaited::default();
        a.seq.store(5, Ordering::Release);
        a.put(Reply::of(4, Ok(1)));
        assert_eq!(
            a.take(5),
            None,
            "a late reply to a request given up on is dropped"
        );
        a.put(Reply::of(5, Ok(7)));
        assert_eq!(a.take(4), None);
        assert_eq!(a.take(5), Some(Reply::of(5, Ok(7))));
        assert_eq!(a.take(5), None);
    }
}
