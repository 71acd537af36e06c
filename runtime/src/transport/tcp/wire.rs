//! The bytes of the TCP transport: the handshake, request and reply headers, and the codes a
//! target gives for a request it rejected.
//!
//! Every multi-byte field is little-endian. A connection opens with a hello (job token, the
//! sender's PE, [`VERSION`]) answered by an [`ACK`]; then the connecting PE sends requests
//! (a [`REQ`]-byte header, the payload of a put behind it) and the accepting PE answers gets,
//! fetching atomics and flushes with a [`REP`]-byte reply.

use super::super::{Amo, AmoOp, RemoteAddr};

/// Version of this protocol, checked in the handshake (PEs of one job must speak the same).
pub const VERSION: u32 = 3;
/// Largest payload of one request or reply.
pub const FRAME: usize = 1 << 20;
/// Bytes of a request header.
pub const REQ: usize = 40;
/// Bytes of a reply header.
pub const REP: usize = 16;
/// Bytes of the rejection details behind a flush reply that counts rejections.
pub const REJ: usize = 24;
/// Bytes of the handshake's answer.
pub const ACK: usize = 8;
const ACK_MAGIC: [u8; 4] = *b"RSHT";
/// Handshake answers.
pub const ACK_OK: u8 = 0;
/// The hello carried another protocol version.
pub const ACK_VERSION: u8 = 1;

/// Request opcodes.
pub const OP_PUT: u8 = 1;
/// A get: answered with a reply header and the data.
pub const OP_GET: u8 = 2;
/// A fetching atomic: answered with the old value.
pub const OP_AMO: u8 = 3;
/// Completes everything before it; answered with the number of rejected requests.
pub const OP_FLUSH: u8 = 4;
/// An 8-byte release store (barrier and team flags).
pub const OP_STORE: u8 = 5;
/// An atomic whose old value nobody wants (signals, non-fetching device atomics): no reply,
/// rejections counted like a bad put.
pub const OP_AMO_NF: u8 = 6;
/// The sender is leaving because it saw PE `value` gone (sent on each of its connections
/// before it closes them): the target blames that PE, not the sender, when the connection
/// then ends. No reply.
pub const OP_GONE: u8 = 7;

/// Why a target rejected a request (the status of a reply, the reason of a rejection record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reject {
    /// Outside the target's heap (below the user heap or past its mapped end), or outside
    /// every symmetric region it registered.
    Outside = 1,
    /// Inside the heap but not inside one live allocation of the target.
    Unallocated = 2,
    /// A misaligned atomic or store.
    Misaligned = 3,
    /// An operation or offset of the runtime's control area that the runtime never issues.
    Control = 4,
    /// An unknown heap, operation or operand size.
    Malformed = 5,
    /// The target's GPU copy or atomic failed.
    Device = 6,
}

impl Reject {
    /// The code on the wire back to a reason; unknown codes read as [`Reject::Malformed`].
    pub fn from_code(c: u32) -> Reject {
        match c {
            1 => Reject::Outside,
            2 => Reject::Unallocated,
            3 => Reject::Misaligned,
            4 => Reject::Control,
            6 => Reject::Device,
            _ => Reject::Malformed,
        }
    }

    /// What the issuing PE is told.
    pub fn describe(self) -> &'static str {
        match self {
            Reject::Outside => "the range lies outside it",
            Reject::Unallocated => "the range is not inside one live allocation there",
            Reject::Misaligned => "the word is misaligned",
            Reject::Control => "the runtime never makes this access to its internal control area",
            Reject::Malformed => "the request is malformed (unknown heap, operation or size)",
            Reject::Device => "its GPU copy or atomic failed",
        }
    }

    /// True for rejections of the address range (the target's allocations differ from ours).
    pub fn is_range(self) -> bool {
        matches!(self, Reject::Outside | Reject::Unallocated)
    }
}

/// A request header. `call` is the issuing connection's number for the rshmem call that made
/// the request (echoed in rejection records, see [`Rejection`]).
#[allow(clippy::too_many_arguments)]
pub fn req(
    op: u8,
    heap: u8,
    size: u8,
    amo: u8,
    call: u16,
    off: u64,
    len: u64,
    value: u64,
    cond: u64,
) -> [u8; REQ] {
    let mut h = [0u8; REQ];
    h[0] = op;
    h[1] = heap;
    h[2] = size;
    h[3] = amo;
    h[4..6].copy_from_slice(&call.to_le_bytes());
    h[8..16].copy_from_slice(&off.to_le_bytes());
    h[16..24].copy_from_slice(&len.to_le_bytes());
    h[24..32].copy_from_slice(&value.to_le_bytes());
    h[32..40].copy_from_slice(&cond.to_le_bytes());
    h
}

/// The header of an atomic request (`op` is [`OP_AMO`] or [`OP_AMO_NF`]) of `a` on `at`.
pub fn amo_req(op: u8, at: RemoteAddr, a: Amo, call: u16) -> [u8; REQ] {
    let size = a.size as u64;
    let (heap, off) = (at.heap as u8, at.off as u64);
    req(
        op, heap, size as u8, a.op as u8, call, off, size, a.value, a.cond,
    )
}

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(w)
}

/// A decoded request header.
#[derive(Debug, Clone, Copy)]
pub struct Req {
    pub op: u8,
    pub heap: u8,
    pub size: u8,
    pub amo: u8,
    pub call: u16,
    pub off: u64,
    pub len: u64,
    pub value: u64,
    pub cond: u64,
}

impl Req {
    pub fn decode(h: &[u8; REQ]) -> Req {
        Req {
            op: h[0],
            heap: h[1],
            size: h[2],
            amo: h[3],
            call: u16::from_le_bytes([h[4], h[5]]),
            off: word(h, 8),
            len: word(h, 16),
            value: word(h, 24),
            cond: word(h, 32),
        }
    }
}

/// A reply header: `status` 0 (done) or a [`Reject`] code, and a value.
pub fn rep(status: u32, value: u64) -> [u8; REP] {
    let mut r = [0u8; REP];
    r[..4].copy_from_slice(&status.to_le_bytes());
    r[8..16].copy_from_slice(&value.to_le_bytes());
    r
}

/// Decodes a reply header: (status, value).
pub fn decode_rep(r: &[u8; REP]) -> (u32, u64) {
    (u32::from_le_bytes([r[0], r[1], r[2], r[3]]), word(r, 8))
}

/// The first request a target rejected since the last flush, sent behind a flush reply that
/// counts rejections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    pub call: u16,
    pub op: u8,
    pub heap: u8,
    pub why: Reject,
    pub off: u64,
    pub len: u64,
}

impl Rejection {
    pub fn encode(&self) -> [u8; REJ] {
        let mut b = [0u8; REJ];
        b[0..2].copy_from_slice(&self.call.to_le_bytes());
        b[2] = self.op;
        b[3] = self.why as u8;
        b[4] = self.heap;
        b[8..16].copy_from_slice(&self.off.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; REJ]) -> Rejection {
        Rejection {
            call: u16::from_le_bytes([b[0], b[1]]),
            op: b[2],
            why: Reject::from_code(u32::from(b[3])),
            heap: b[4],
            off: word(b, 8),
            len: word(b, 16),
        }
    }
}

/// The name of a request kind, for messages.
pub fn op_name(op: u8) -> &'static str {
    match op {
        OP_PUT => "put",
        OP_GET => "get",
        OP_AMO => "atomic",
        OP_AMO_NF => "atomic",
        OP_STORE => "flag store",
        OP_FLUSH => "flush",
        _ => "request",
    }
}

/// The hello a connecting PE sends: job token, its PE number, protocol version.
pub fn hello(token: &[u8], me: usize, version: u32) -> Vec<u8> {
    let mut h = token.to_vec();
    h.extend_from_slice(&(me as u32).to_le_bytes());
    h.extend_from_slice(&version.to_le_bytes());
    h
}

/// Bytes of a hello for a job token of `token_len` bytes.
pub fn hello_len(token_len: usize) -> usize {
    token_len + 8
}

/// Splits a complete hello: None if the token is not the job's; else (PE, version).
pub fn parse_hello(token: &[u8], h: &[u8]) -> Option<(usize, u32)> {
    if h.len() != hello_len(token.len()) || h[..token.len()] != *token {
        return None;
    }
    let t = token.len();
    let pe = u32::from_le_bytes([h[t], h[t + 1], h[t + 2], h[t + 3]]) as usize;
    let v = u32::from_le_bytes([h[t + 4], h[t + 5], h[t + 6], h[t + 7]]);
    Some((pe, v))
}

/// The handshake's answer with `status` ([`ACK_OK`] or [`ACK_VERSION`]).
pub fn ack(status: u8) -> [u8; ACK] {
    let mut a = [0u8; ACK];
    a[..4].copy_from_slice(&ACK_MAGIC);
    a[4] = status;
    a
}

/// The status of an answer, None if it is not one.
pub fn parse_ack(a: &[u8; ACK]) -> Option<u8> {
    (a[..4] == ACK_MAGIC).then_some(a[4])
}

/// The atomic of a request's `amo` byte.
pub fn amo_op(v: u8) -> Option<AmoOp> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let h = req(OP_AMO, 1, 8, 4, 513, 0x1234, 8, u64::MAX, 7);
        let r = Req::decode(&h);
        assert_eq!(
            (r.op, r.heap, r.size, r.amo, r.call, r.off, r.len, r.value, r.cond),
            (OP_AMO, 1, 8, 4, 513, 0x1234, 8, u64::MAX, 7)
        );
        assert_eq!(decode_rep(&rep(2, 99)), (2, 99));
        let j = Rejection {
            call: 3,
            op: OP_PUT,
            heap: 0,
            why: Reject::Unallocated,
            off: 1 << 40,
            len: 5,
        };
        assert_eq!(Rejection::decode(&j.encode()), j);
        let t = [9u8; 16];
        assert_eq!(parse_hello(&t, &hello(&t, 5, VERSION)), Some((5, VERSION)));
        assert_eq!(parse_hello(&[8u8; 16], &hello(&t, 5, VERSION)), None);
        assert_eq!(parse_ack(&ack(ACK_VERSION)), Some(ACK_VERSION));
        assert_eq!(parse_ack(&[0; ACK]), None);
        for a in 0..8 {
            assert_eq!(amo_op(a).map(|o| o as u8), Some(a));
        }
    }
}
