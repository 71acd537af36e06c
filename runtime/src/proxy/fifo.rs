//! The proxy's request ring: fixed-size requests in host memory mapped into the GPU's address
//! space, written by device threads and read by the host service thread. The device half is
//! `device-lib/include/rshmem/proxy.cuh`; the layout below is asserted on both sides.
//!
//! Protocol (tickets are 64-bit and never wrap in practice):
//!
//! * A device thread takes ticket `t` with an atomic add on the ring's head (a word of its own
//!   GPU's internal area, [`HEAD`]), waits until slot `t mod slots` is free (`t < consumed +
//!   slots`, read from the control block; a device-memory copy of the last value seen,
//!   [`FREE_HINT`], spares the PCIe read while the ring is far from full), writes the request
//!   and publishes it with a release store of `seq = t + 1` at system scope.
//! * The host reads slot `tail mod slots` once its `seq` is `tail + 1` (acquire), copies the
//!   request out and executes it; requests execute one at a time in ticket order.
//! * `completed` (control block): every request with a ticket below it has been executed.
//!   `consumed`: every slot of a ticket below it may be reused. A fetching request (an atomic
//!   that returns a value, an inline get) keeps its slot until the device has read the result:
//!   the host writes the result and `done = t + 1` into the slot, the device reads them and
//!   stores `ack = t + 1`; `consumed` never passes an unacknowledged fetching request.
//! * `error` (control block): non-zero once the host failed a request (lost peer, timeout, bad
//!   request, CUDA error); `completed` then stops, and device waits trap with a message.
//!
//! The host's steps and their memory orderings are [`protocol::Consumer`], which this file runs
//! on the ring's memory and `loom-tests/` model-checks against the device's steps.

mod protocol;

use std::sync::atomic::AtomicU64;

pub use protocol::ctrl;
use protocol::{Consumer, Memory};

/// Bytes of one request slot.
pub const SLOT: usize = 128;
/// Bytes of the control block (four cache lines).
pub const CTRL_BYTES: usize = 256;
/// Bytes of data a request carries inline (small puts, small gets, non-global buffers).
pub const INLINE: usize = 32;
/// Requests in the ring (a power of two).
pub const DEFAULT_SLOTS: usize = 1024;

/// Offset of the ring head (u64 ticket counter) in this PE's GPU slice (internal area).
pub const HEAD: usize = 0x2000;
/// Offset of the device-side copy of `consumed` (u64) in this PE's GPU slice.
pub const FREE_HINT: usize = 0x2040;

/// Request operations (`op`).
pub mod op {
    /// Copy `nbytes` from local memory (or the inline data) to `remote` on `pe`.
    pub const PUT: u8 = crate::wire::ProxyOp::Put.code();
    /// Copy `nbytes` from `remote` on `pe` to local memory (or the inline result).
    pub const GET: u8 = crate::wire::ProxyOp::Get.code();
    /// Atomic `amo` (an `AmoOp` code) of `size` bytes on `remote` on `pe`.
    pub const AMO: u8 = crate::wire::ProxyOp::Amo.code();
    /// Signal update (`amo`: 0 set, 1 add) of the u64 at `remote` on `pe`.
    pub const SIGNAL: u8 = crate::wire::ProxyOp::Signal.code();
    /// Complete every earlier request (remote completion of puts).
    pub const QUIET: u8 = crate::wire::ProxyOp::Quiet.code();
    /// Complete every earlier request, then a barrier over all PEs.
    pub const BARRIER: u8 = crate::wire::ProxyOp::Barrier.code();
    /// Nothing (measures the ring's round trip).
    pub const NOP: u8 = crate::wire::ProxyOp::Nop.code();
}

/// `flags`: the payload (put) or the result (get) is in the slot's inline data.
pub const FLAG_INLINE: u8 = 1;
/// `flags`: the device waits for `done` and acknowledges the result.
pub const FLAG_FETCH: u8 = 2;

crate::wire::codes! {
    /// Codes of the control block's `error` word (0 while no request failed;
    /// `RSHMEM_PROXY_FAIL_*` in proxy.cuh): why the host proxy gave up, for the device's message.
    pub enum Failure: u64, "proxy failure" {
        /// The target PE exited or its connection failed.
        PeerLost = 1 => "RSHMEM_PROXY_FAIL_PEER_LOST",
        /// A wait of the host proxy timed out.
        Timeout = 2 => "RSHMEM_PROXY_FAIL_TIMEOUT",
        /// The request was malformed or the target rejected it.
        BadRequest = 3 => "RSHMEM_PROXY_FAIL_BAD_REQUEST",
        /// A CUDA call of the host proxy failed.
        Cuda = 4 => "RSHMEM_PROXY_FAIL_CUDA",
    }
}

/// What a request asks for: the words the device writes between `seq` and the handshake words
/// (the slot's bytes 8..56, `opword` and the four words after it in proxy.cuh).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Body {
    /// [`op`] code.
    pub op: u8,
    /// `AmoOp` code of an atomic, signal operation of a signal.
    pub amo: u8,
    /// Width of an atomic (4 or 8).
    pub size: u8,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Target PE.
    pub pe: i32,
    /// This PE's symmetric address of the target object.
    pub remote: u64,
    /// Local device address (put source, get destination); 0 when inline.
    pub local: u64,
    /// Bytes to move.
    pub nbytes: u64,
    /// Atomic operand, signal value.
    pub value: u64,
    /// Compare operand of compare-and-swap.
    pub cond: u64,
}

/// One slot as laid out in memory (mirrors `rshmem_proxy_req` in proxy.cuh).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Slot {
    /// Ticket + 1 once published (device, release).
    pub seq: u64,
    /// The request.
    pub body: Body,
    /// Reserved.
    pub spare: u64,
    /// Ticket + 1 once a fetching request finished (host, release).
    pub done: u64,
    /// Old value of a fetching atomic.
    pub result: u64,
    /// Ticket + 1 once the device read the result (device).
    pub ack: u64,
    /// Reserved.
    pub pad: u64,
    /// Inline payload or result.
    pub data: [u8; INLINE],
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Slot>() == SLOT);
    assert!(offset_of!(Slot, body.op) == 8);
    assert!(offset_of!(Slot, body.pe) == 12);
    assert!(offset_of!(Slot, body.remote) == 16);
    assert!(offset_of!(Slot, body.local) == 24);
    assert!(offset_of!(Slot, body.nbytes) == 32);
    assert!(offset_of!(Slot, body.value) == 40);
    assert!(offset_of!(Slot, body.cond) == 48);
    assert!(offset_of!(Slot, done) == 64);
    assert!(offset_of!(Slot, result) == 72);
    assert!(offset_of!(Slot, ack) == 80);
    assert!(offset_of!(Slot, data) == 96);
    // The ring head and hint lie between the device barrier flags and the next internal object.
    use crate::device::state::internal as di;
    assert!(di::BARRIER_FLAGS + 8 * di::MAX_LOCAL_PES <= HEAD);
    assert!(FREE_HINT + 64 <= 0x1_0000);
};

/// A request as the host copied it out of its slot: its ticket, its [`Body`] (whose fields it
/// dereferences to) and its inline data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Its ticket.
    pub ticket: u64,
    /// What it asks for.
    pub body: Body,
    /// Inline payload.
    pub data: [u8; INLINE],
}

impl std::ops::Deref for Request {
    type Target = Body;
    fn deref(&self) -> &Body {
        &self.body
    }
}

impl Request {
    /// True if the device waits for a result in the slot.
    pub fn fetching(&self) -> bool {
        self.flags & FLAG_FETCH != 0
    }

    /// True if the payload or result is inline.
    pub fn inline(&self) -> bool {
        self.flags & FLAG_INLINE != 0
    }
}

/// What a request produced for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to hand back.
    Done,
    /// An old value (atomics).
    Value(u64),
    /// Inline data (gets of at most [`INLINE`] bytes).
    Data([u8; INLINE]),
}

/// The ring's memory: its slots and control block in pinned host memory mapped into the GPU.
struct Pinned {
    slots: *mut Slot,
    ctrl: *mut u8,
}

impl Pinned {
    /// Slot `s` (the consumer masks every index into the ring).
    fn slot(&self, s: usize) -> *mut Slot {
        // SAFETY: `s` is below the ring's slot count (see `Ring::new`).
        unsafe { self.slots.add(s) }
    }

    fn word(&self, p: *mut u64) -> &AtomicU64 {
        // SAFETY: every word of the ring and control block is an aligned u64 in memory that
        // outlives the ring (see `Ring::new`); AtomicU64 has u64's layout.
        unsafe { &*(p as *const AtomicU64) }
    }
}

impl Memory for Pinned {
    type Request = Request;
    type Reply = Outcome;

    fn seq(&self, s: usize) -> &AtomicU64 {
        // SAFETY: a live slot; addr_of_mut! makes no reference to the device-written memory.
        self.word(unsafe { std::ptr::addr_of_mut!((*self.slot(s)).seq) })
    }

    fn done(&self, s: usize) -> &AtomicU64 {
        // SAFETY: as in `seq`.
        self.word(unsafe { std::ptr::addr_of_mut!((*self.slot(s)).done) })
    }

    fn ack(&self, s: usize) -> &AtomicU64 {
        // SAFETY: as in `seq`.
        self.word(unsafe { std::ptr::addr_of_mut!((*self.slot(s)).ack) })
    }

    fn ctrl(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is one of the aligned control-block offsets, inside CTRL_BYTES.
        self.word(unsafe { self.ctrl.add(off) }.cast())
    }

    unsafe fn read(&self, s: usize, ticket: u64) -> Request {
        let p = self.slot(s);
        // SAFETY: the device wrote the slot before its release store of seq, which the caller
        // observed (see `Memory::read`); volatile reads because the device writes this memory.
        unsafe {
            Request {
                ticket,
                body: std::ptr::read_volatile(std::ptr::addr_of!((*p).body)),
                data: std::ptr::read_volatile(std::ptr::addr_of!((*p).data)),
            }
        }
    }

    unsafe fn write_reply(&self, s: usize, out: Outcome) {
        let p = self.slot(s);
        // SAFETY: the slot is the fetching request's until the device acknowledges (see
        // `Memory::write_reply`).
        unsafe {
            match out {
                Outcome::Value(v) => {
                    std::ptr::write_volatile(std::ptr::addr_of_mut!((*p).result), v)
                }
                Outcome::Data(d) => std::ptr::write_volatile(std::ptr::addr_of_mut!((*p).data), d),
                Outcome::Done => {}
            }
        }
    }

    fn ticket(r: &Request) -> u64 {
        r.ticket
    }

    fn fetching(r: &Request) -> bool {
        r.fetching()
    }
}

/// The host side of one ring.
pub struct Ring(Consumer<Pinned>);

// SAFETY: the ring memory is owned by the proxy for the ring's whole life and only this
// struct's owner (one thread) reads it on the host side.
unsafe impl Send for Ring {}

impl Ring {
    /// A ring over `n` slots at `slots` with its control block at `ctrl`.
    ///
    /// # Safety
    /// `slots` must point to `n * SLOT` zeroed bytes, `ctrl` to `CTRL_BYTES` zeroed bytes, both
    /// 64-byte aligned and alive (and not read by another host thread) while the ring is used;
    /// `n` must be a power of two.
    pub unsafe fn new(slots: *mut u8, ctrl: *mut u8, n: usize) -> Ring {
        let mem = Pinned {
            slots: slots.cast(),
            ctrl,
        };
        Ring(Consumer::new(mem, n))
    }

    /// Takes the next published request, if any.
    pub fn poll(&mut self) -> Option<Request> {
        self.0.poll()
    }

    /// Hands a fetching request's result to the device (no-op for other requests).
    pub fn finish(&mut self, r: &Request, out: Outcome) {
        self.0.finish(r, out)
    }

    /// Publishes that every request up to and including `ticket` has been executed.
    pub fn complete(&self, ticket: u64) {
        self.0.complete(ticket)
    }

    /// Frees the slots the device no longer needs: everything read so far, up to the first
    /// fetching request whose result the device has not acknowledged.
    pub fn reap(&mut self) {
        self.0.reap()
    }

    /// Records the first failure for the device (later ones are ignored).
    pub fn fail(&self, f: Failure, pe: i32, ticket: u64) {
        self.0.fail(f as u64, pe, ticket)
    }

    /// The failure recorded so far, if any.
    #[cfg(test)]
    pub fn failure(&self) -> u64 {
        self.0.failure()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The ring protocol with a host thread playing the device: wraparound, a full ring,
    //! ordering of each producer's requests, fetching requests holding their slots.

    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::thread;

    /// Aligned zeroed memory for a ring of `n` slots and its control block.
    pub(crate) struct Mem {
        buf: Vec<Slot>,
        ctrl: Vec<Slot>,
        /// The device's head counter and free hint.
        head: AtomicU64,
        n: usize,
    }

    // SAFETY: the test "device" writes slots through raw pointers following the protocol.
    unsafe impl Sync for Mem {}
    // SAFETY: as above.
    unsafe impl Send for Mem {}

    impl Mem {
        pub(crate) fn new(n: usize) -> Arc<Mem> {
            // SAFETY: Slot is plain old data; all-zero is a valid value.
            let z = || unsafe { std::mem::zeroed::<Slot>() };
            Arc::new(Mem {
                buf: (0..n).map(|_| z()).collect(),
                ctrl: (0..CTRL_BYTES / SLOT).map(|_| z()).collect(),
                head: AtomicU64::new(0),
                n,
            })
        }

        pub(crate) fn ring(&self) -> Ring {
            // SAFETY: both buffers are zeroed, 64-byte aligned (Slot's alignment) and outlive
            // the ring in every test (the Arc is held by the test).
            unsafe {
                Ring::new(
                    self.buf.as_ptr() as *mut u8,
                    self.ctrl.as_ptr() as *mut u8,
                    self.n,
                )
            }
        }

        fn ctrl(&self, off: usize) -> u64 {
            // SAFETY: an aligned control word.
            unsafe { &*((self.ctrl.as_ptr() as *const u8).add(off) as *const AtomicU64) }
                .load(Ordering::Acquire)
        }

        /// The device's push: None if the ring is full and `block` is false.
        pub(crate) fn push(
            &self,
            op: u8,
            flags: u8,
            pe: i32,
            value: u64,
            block: bool,
        ) -> Option<u64> {
            let t = if block {
                self.head.fetch_add(1, Ordering::AcqRel)
            } else {
                let t = self.head.load(Ordering::Acquire);
                if t >= self.ctrl(ctrl::CONSUMED) + self.n as u64 {
                    return None;
                }
                self.head.fetch_add(1, Ordering::AcqRel)
            };
            while t >= self.ctrl(ctrl::CONSUMED) + self.n as u64 {
                std::hint::spin_loop();
            }
            let s = (self.buf.as_ptr() as *mut Slot).wrapping_add(t as usize % self.n);
            // SAFETY: the slot is free for ticket t (checked above) and only this producer
            // writes it until it publishes seq.
            unsafe {
                (*s).body.op = op;
                (*s).body.flags = flags;
                (*s).body.pe = pe;
                (*s).body.value = value;
                (*(std::ptr::addr_of_mut!((*s).seq) as *const AtomicU64))
                    .store(t + 1, Ordering::Release);
            }
            Some(t)
        }

        /// The device's wait for a fetching request's result, then its acknowledgement.
        pub(crate) fn fetch(&self, t: u64) -> u64 {
            let s = (self.buf.as_ptr() as *mut Slot).wrapping_add(t as usize % self.n);
            // SAFETY: the slot belongs to ticket t until we acknowledge.
            unsafe {
                let done = &*(std::ptr::addr_of_mut!((*s).done) as *const AtomicU64);
                while done.load(Ordering::Acquire) != t + 1 {
                    std::hint::spin_loop();
                }
                let v = std::ptr::read_volatile(std::ptr::addr_of!((*s).result));
                (*(std::ptr::addr_of_mut!((*s).ack) as *const AtomicU64))
                    .store(t + 1, Ordering::Release);
                v
            }
        }

        pub(crate) fn completed(&self) -> u64 {
            self.ctrl(ctrl::COMPLETED)
        }
    }

    #[test]
    fn wraps_around_in_order() {
        let m = Mem::new(8);
        let p = m.clone();
        let prod = thread::spawn(move || {
            for i in 0..1000u64 {
                p.push(op::NOP, 0, 0, i, true);
            }
        });
        let mut ring = m.ring();
        let mut next = 0u64;
        while next < 1000 {
            if let Some(r) = ring.poll() {
                assert_eq!((r.ticket, r.value), (next, next));
                ring.complete(r.ticket);
                next += 1;
            }
            ring.reap();
        }
        prod.join().unwrap();
        assert_eq!(m.completed(), 1000);
        assert!(ring.poll().is_none());
    }

    #[test]
    fn full_ring_blocks_until_the_host_reads() {
        let m = Mem::new(4);
        for i in 0..4 {
            assert_eq!(m.push(op::NOP, 0, 0, i, false), Some(i));
        }
        assert_eq!(
            m.push(op::NOP, 0, 0, 9, false),
            None,
            "a full ring took a request"
        );
        let mut ring = m.ring();
        let r = ring.poll().unwrap();
        assert_eq!(r.ticket, 0);
        assert_eq!(m.push(op::NOP, 0, 0, 9, false), None, "freed before reap");
        ring.reap();
        assert_eq!(m.push(op::NOP, 0, 0, 4, false), Some(4));
        for t in 1..5 {
            assert_eq!(ring.poll().unwrap().value, t);
        }
        assert!(ring.poll().is_none());
    }

    #[test]
    fn many_producers_keep_their_own_order() {
        let m = Mem::new(16);
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let m = m.clone();
                thread::spawn(move || {
                    for i in 0..500u64 {
                        m.push(op::PUT, 0, p, i, true);
                    }
                })
            })
            .collect();
        let mut ring = m.ring();
        let mut last = [None::<u64>; 4];
        let mut n = 0;
        while n < 2000 {
            if let Some(r) = ring.poll() {
                let p = r.pe as usize;
                assert_eq!(
                    r.value,
                    last[p].map_or(0, |v| v + 1),
                    "producer {p} out of order"
                );
                last[p] = Some(r.value);
                n += 1;
            }
            ring.reap();
        }
        for p in producers {
            p.join().unwrap();
        }
    }

    #[test]
    fn fetching_requests_hold_their_slot_until_acknowledged() {
        let m = Mem::new(2);
        let t0 = m.push(op::AMO, FLAG_FETCH, 1, 5, false).unwrap();
        let t1 = m.push(op::NOP, 0, 1, 6, false).unwrap();
        let mut ring = m.ring();
        let a = ring.poll().unwrap();
        ring.finish(&a, Outcome::Value(77));
        ring.complete(a.ticket);
        let b = ring.poll().unwrap();
        ring.complete(b.ticket);
        ring.reap();
        assert_eq!((a.ticket, b.ticket), (t0, t1));
        assert_eq!(
            m.push(op::NOP, 0, 0, 0, false),
            None,
            "slot of an unread result reused"
        );
        assert_eq!(m.fetch(t0), 77);
        ring.reap();
        assert_eq!(m.push(op::NOP, 0, 0, 0, false), Some(2));
        assert_eq!(m.push(op::NOP, 0, 0, 0, false), Some(3));
        assert_eq!(m.completed(), 2);
    }

    #[test]
    fn first_failure_is_kept() {
        let m = Mem::new(2);
        let ring = m.ring();
        assert_eq!(ring.failure(), 0);
        ring.fail(Failure::PeerLost, 3, 17);
        ring.fail(Failure::Cuda, 1, 18);
        assert_eq!(ring.failure(), Failure::PeerLost as u64);
        assert_eq!(m.ctrl(ctrl::ERROR_PE), 3);
        assert_eq!(m.ctrl(ctrl::ERROR_TICKET), 17);
    }
}
