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
//! refused. The initiator of a fetching atomic waits for the answer; the answers to non-fetching
//! ones (posted: their sequence numbers carry [`POSTED`]) are collected by the next flush, which
//! reports the first refusal among them.
//!
//! The runtime's own flag stores (barrier and team flags,
//! [`TransportOps::store`](crate::transport::TransportOps::store)) ask for no answer: the waiting target sees the flag,
//! and the initiator needs only the send to complete, so a barrier round costs one message
//! instead of a message and its answer collected by the next quiet.
//!
//! Ordering: before it sends a request, the initiator flushes the puts and stores it issued
//! since the last flush (remote completion), so the data of a put-with-signal is in the target's
//! memory before the signal is applied.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::cuda::target::GpuMem;
use crate::heap::Heap;
use crate::transport::{Amo, AmoOp};

/// Active message id of a request.
pub const AM_REQUEST: u32 = 0x5253;
/// Active message id of a reply.
pub const AM_REPLY: u32 = 0x5254;

/// Version byte of the request format.
const VERSION: u8 = 1;

/// Bytes of an encoded [`Request`].
pub const REQUEST_LEN: usize = 40;
/// Bytes of an encoded [`Reply`].
pub const REPLY_LEN: usize = 24;

/// One atomic on the target's user heap.
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
    /// On the control heap (barrier and team flags) instead of the user heap.
    pub ctrl: bool,
    /// The target answers. False for the runtime's flag stores
    /// ([`TransportOps::store`](crate::transport::TransportOps::store)), which nobody waits on: the target then only
    /// logs a refusal, and the initiator's flush completes the send alone (no round trip).
    pub answer: bool,
    /// Matches the reply to the request.
    pub seq: u64,
    /// Offset in the target's user heap.
    pub off: u64,
    pub value: u64,
    pub cond: u64,
}

impl Request {
    /// `[version, op, size, flags, from: u32, seq, off, value, cond]`, little-endian; flags bit
    /// 0: no old value wanted, bit 1: the control heap, bit 2: no answer wanted.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0] = VERSION;
        b[1] = self.op;
        b[2] = self.size;
        b[3] = u8::from(!self.fetch) | u8::from(self.ctrl) << 1 | u8::from(!self.answer) << 2;
        b[4..8].copy_from_slice(&self.from.to_le_bytes());
        for (i, v) in [self.seq, self.off, self.value, self.cond]
            .iter()
            .enumerate()
        {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// The inverse of [`Request::encode`]; None for anything else (wrong length or version).
    pub fn decode(b: &[u8]) -> Option<Request> {
        if b.len() != REQUEST_LEN || b[0] != VERSION || b[3] > 7 {
            return None;
        }
        let w =
            |i: usize| u64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().unwrap_or([0; 8]));
        Some(Request {
            op: b[1],
            size: b[2],
            fetch: b[3] & 1 == 0,
            ctrl: b[3] & 2 != 0,
            answer: b[3] & 4 == 0,
            from: u32::from_le_bytes(b[4..8].try_into().ok()?),
            seq: w(0),
            off: w(1),
            value: w(2),
            cond: w(3),
        })
    }
}

/// Why a target refused a request (0 in a reply means applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Refusal {
    /// The word is not inside one live allocation of the target's heap.
    Outside = 1,
    /// Not aligned to its size.
    Misaligned = 2,
    /// Unknown operation or size.
    Malformed = 3,
    /// The GPU could not apply it (a CUDA error at the target).
    Device = 4,
    /// The target has not finished setting up (or takes no such requests).
    NotServing = 5,
}

impl Refusal {
    fn from_code(c: u32) -> Option<Refusal> {
        Some(match c {
            1 => Refusal::Outside,
            2 => Refusal::Misaligned,
            3 => Refusal::Malformed,
            4 => Refusal::Device,
            5 => Refusal::NotServing,
            _ => return None,
        })
    }

    /// Words for messages.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Outside => "the word is not inside one live allocation there",
            Refusal::Misaligned => "the word is not aligned to its size",
            Refusal::Malformed => "unknown operation or size",
            Refusal::Device => "its GPU failed to apply it (see that PE's errors)",
            Refusal::NotServing => {
                "it does not serve such requests (set-up not finished, or mixed settings)"
            }
        }
    }
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub seq: u64,
    /// The old value, or why it was refused.
    pub result: Result<u64, Refusal>,
}

impl Reply {
    /// `[seq, status: u32, 0: u32, old]`, little-endian.
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        b[0..8].copy_from_slice(&self.seq.to_le_bytes());
        let (status, old) = match self.result {
            Ok(v) => (0u32, v),
            Err(r) => (r as u32, 0),
        };
        b[8..12].copy_from_slice(&status.to_le_bytes());
        b[16..24].copy_from_slice(&old.to_le_bytes());
        b
    }

    /// The inverse of [`Reply::encode`]; None for anything else.
    pub fn decode(b: &[u8]) -> Option<Reply> {
        if b.len() != REPLY_LEN {
            return None;
        }
        let seq = u64::from_le_bytes(b[0..8].try_into().ok()?);
        let status = u32::from_le_bytes(b[8..12].try_into().ok()?);
        let old = u64::from_le_bytes(b[16..24].try_into().ok()?);
        let result = match status {
            0 => Ok(old),
            c => Err(Refusal::from_code(c)?),
        };
        Some(Reply { seq, result })
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
        if r.ctrl {
            // The runtime's flag words: aligned words inside the control heap's internal area.
            let (base, len) = self.ctrl;
            let end = r.off.checked_add(size as u64).ok_or(Refusal::Outside)?;
            if end > len as u64 {
                return Err(Refusal::Outside);
            }
            // SAFETY: an aligned word of `size` bytes inside the mapped internal area of this
            // PE's control heap (host memory, mapped while the transport serves requests).
            return Ok(unsafe { crate::transport::shm::amo(base + r.off as usize, a) });
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

/// The bit of a sequence number that marks a posted request (a non-fetching atomic whose
/// answer nobody waits for until the next flush).
pub const POSTED: u64 = 1 << 63;

/// The initiator's side: the reply awaited (one fetching request at a time per PE: they are
/// sent and waited for under the transport's lock), and the answers to posted requests.
#[derive(Default)]
pub(crate) struct Awaited {
    /// Sequence number of the last request sent.
    pub seq: AtomicU64,
    /// The last reply received: its sequence number (0: none yet) and result.
    pub got: Mutex<Option<Reply>>,
    /// Posted requests sent, and answered.
    pub posted: AtomicU64,
    answered: AtomicU64,
    /// The first refusal among the posted requests since the last [`Awaited::settle`].
    refused: Mutex<Option<Refusal>>,
}

impl Awaited {
    /// Once every posted request has been answered: `Some(the first refusal since the last
    /// settle)`, forgetting it; None while answers are outstanding.
    pub(crate) fn settle(&self) -> Option<Option<Refusal>> {
        if self.answered.load(Ordering::Acquire) < self.posted.load(Ordering::Acquire) {
            return None;
        }
        Some(self.refused.lock().ok().and_then(|mut g| g.take()))
    }

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
        if r.seq & POSTED != 0 {
            if let (Err(why), Ok(mut g)) = (r.result, self.refused.lock()) {
                g.get_or_insert(why);
            }
            self.answered.fetch_add(1, Ordering::AcqRel);
            return;
        }
        if r.seq == self.seq.load(Ordering::Acquire) {
            if let Ok(mut g) = self.got.lock() {
                *g = Some(r);
            }
        }
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
            ctrl: false,
            answer: true,
            seq: 77,
            off: 0x20_0040,
            value: u64::MAX,
            cond: 5,
        };
        let b = r.encode();
        assert_eq!(Request::decode(&b), Some(r));
        for (fetch, ctrl, answer) in [
            (false, false, true),
            (true, true, true),
            (false, true, true),
            (false, true, false),
        ] {
            let x = Request {
                fetch,
                ctrl,
                answer,
                ..r
            };
            assert_eq!(Request::decode(&x.encode()), Some(x));
        }
        assert_eq!(Request::decode(&b[..REQUEST_LEN - 1]), None);
        let mut bad = b;
        bad[0] = 2;
        assert_eq!(Request::decode(&bad), None, "other version");
        let mut bad = b;
        bad[3] = 8;
        assert_eq!(Request::decode(&bad), None, "unknown flag");
    }

    #[test]
    fn reply_round_trip_and_rejects() {
        for result in [
            Ok(0),
            Ok(u64::MAX),
            Err(Refusal::Outside),
            Err(Refusal::NotServing),
        ] {
            let r = Reply { seq: 9, result };
            assert_eq!(Reply::decode(&r.encode()), Some(r));
        }
        let mut b = Reply {
            seq: 1,
            result: Ok(2),
        }
        .encode();
        b[8] = 99;
        assert_eq!(Reply::decode(&b), None, "unknown status");
        assert_eq!(Reply::decode(&b[1..]), None);
    }

    #[test]
    fn awaited_settles_posted_requests() {
        let a = Awaited::default();
        assert_eq!(a.settle(), Some(None), "nothing posted: settled");
        a.posted.store(2, Ordering::Release);
        a.put(Reply {
            seq: POSTED | 1,
            result: Ok(0),
        });
        assert_eq!(a.settle(), None, "one answer of two");
        a.put(Reply {
            seq: POSTED | 2,
            result: Err(Refusal::Outside),
        });
        assert_eq!(a.settle(), Some(Some(Refusal::Outside)));
        assert_eq!(a.settle(), Some(None), "the refusal is reported once");
        a.seq.store(9, Ordering::Release);
        a.put(Reply {
            seq: 9,
            result: Ok(3),
        });
        assert_eq!(
            a.settle(),
            Some(None),
            "a fetching reply is not a posted one"
        );
        assert_eq!(a.take(9).map(|r| r.result), Some(Ok(3)));
    }

    #[test]
    fn awaited_takes_only_its_reply() {
        let a = Awaited::default();
        a.seq.store(5, Ordering::Release);
        a.put(Reply {
            seq: 4,
            result: Ok(1),
        });
        assert_eq!(
            a.take(5),
            None,
            "a late reply to a request given up on is dropped"
        );
        a.put(Reply {
            seq: 5,
            result: Ok(7),
        });
        assert_eq!(a.take(4), None);
        assert_eq!(
            a.take(5),
            Some(Reply {
                seq: 5,
                result: Ok(7)
            })
        );
        assert_eq!(a.take(5), None);
    }
}
