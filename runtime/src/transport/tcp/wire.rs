//! The bytes of the TCP transport: the handshake, request and reply headers, and the codes a
//! target gives for a request it rejected.
//!
//! Every multi-byte field is little-endian. A connection opens with a hello (job token, the
//! sender's PE, [`VERSION`]) answered by an [`ACK`]; then the connecting PE sends requests
//! (a [`REQ`]-byte header, the payload of a put behind it) and the accepting PE answers gets,
//! fetching atomics and flushes with a [`REP`]-byte reply.

use super::super::{Amo, RemoteAddr};
use crate::frame::{get, push, put};

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

crate::wire::code_enum! {
    /// Why a target rejected a request (the status of a reply, the reason of a rejection record).
    pub enum Reject: u8 {
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
}

impl Reject {
    /// The status on the wire back to a reason; unknown codes read as [`Reject::Malformed`].
    pub fn from_status(c: u32) -> Reject {
        u8::try_from(c)
            .ok()
            .and_then(Reject::from_code)
            .unwrap_or(Reject::Malformed)
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
    put(&mut h, 4, call);
    put(&mut h, 8, off);
    put(&mut h, 16, len);
    put(&mut h, 24, value);
    put(&mut h, 32, cond);
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
            call: get(h, 4),
            off: get(h, 8),
            len: get(h, 16),
            value: get(h, 24),
            cond: get(h, 32),
        }
    }
}

/// A reply header: `status` 0 (done) or a [`Reject`] code, and a value.
pub fn rep(status: u32, value: u64) -> [u8; REP] {
    let mut r = [0u8; REP];
    put(&mut r, 0, status);
    put(&mut r, 8, value);
    r
}

/// Decodes a reply header: (status, value).
pub fn decode_rep(r: &[u8; REP]) -> (u32, u64) {
    (get(r, 0), get(r, 8))
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
        put(&mut b, 0, self.call);
        b[2] = self.op;
        b[3] = self.why as u8;
        b[4] = self.heap;
        put(&mut b, 8, self.off);
        put(&mut b, 16, self.len);
        b
    }

    pub fn decode(b: &[u8; REJ]) -> Rejection {
        Rejection {
            call: get(b, 0),
            op: b[2],
            why: Reject::from_status(u32::from(b[3])),
            heap: b[4],
            off: get(b, 8),
            len: get(b, 16),
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
    push(&mut h, me as u32);
    push(&mut h, version);
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
    let pe = get::<u32>(h, t) as usize;
    let v = get(h, t + 4);
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
        for c in 0..=7 {
            assert_eq!(
                Reject::from_status(c).code(),
                if c == 0 || c == 7 { 5 } else { c as u8 }
            );
        }
        assert_eq!(Reject::from_status(256 + 1), Reject::Malformed);
    }
}
