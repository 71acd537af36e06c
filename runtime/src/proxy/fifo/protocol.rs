//! The host side of the proxy ring's protocol, apart from the memory it runs on: which slot a
//! ticket uses, when a slot may be read, when it may be reused, and every atomic load and store
//! of the host with its ordering. [`super::Ring`] runs it on the ring's pinned host memory.
//!
//! Under `--cfg loom` (the model-checking build of loom-tests/, which includes this file by
//! path) the atomics are loom's, and loom-tests runs this code against a model of the device's
//! half (`device-lib/include/rshmem/proxy.cuh`) in every interleaving.

use std::collections::VecDeque;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Offsets of the control block's words.
pub mod ctrl {
    /// u64: slots of tickets below it may be reused.
    pub const CONSUMED: usize = 0;
    /// u64: requests with tickets below it have been executed.
    pub const COMPLETED: usize = 64;
    /// u64: 0, or the failure code of the first failed request.
    pub const ERROR: usize = 128;
    /// u64: the PE the failed request targeted.
    pub const ERROR_PE: usize = 136;
    /// u64: the ticket of the failed request.
    pub const ERROR_TICKET: usize = 144;
}

/// The memory one ring runs on: its slots' handshake words, its control block, and the copying
/// of a request out of its slot and of a reply into it.
pub trait Memory {
    /// A request as copied out of its slot.
    type Request;
    /// What a fetching request hands back to the device in its slot.
    type Reply;

    /// Slot `slot`'s `seq` word: ticket + 1 once the device published the request.
    fn seq(&self, slot: usize) -> &AtomicU64;
    /// Slot `slot`'s `done` word: ticket + 1 once the host wrote a fetching request's reply.
    fn done(&self, slot: usize) -> &AtomicU64;
    /// Slot `slot`'s `ack` word: ticket + 1 once the device read that reply.
    fn ack(&self, slot: usize) -> &AtomicU64;
    /// The control block's word at byte offset `off` (one of [`ctrl`]).
    fn ctrl(&self, off: usize) -> &AtomicU64;

    /// Copies the request of ticket `ticket` out of slot `slot`.
    ///
    /// # Safety
    /// Only after an acquire load of the slot's `seq` saw `ticket + 1`, and before the slot is
    /// released (`consumed` passes `ticket`).
    unsafe fn read(&self, slot: usize, ticket: u64) -> Self::Request;
    /// Writes `reply` into slot `slot` (not its `done` word).
    ///
    /// # Safety
    /// Only for the fetching request the slot holds, before `done` is stored.
    unsafe fn write_reply(&self, slot: usize, reply: Self::Reply);
    /// The ticket of a request [`Memory::read`] returned.
    fn ticket(r: &Self::Request) -> u64;
    /// True if the device waits for a reply in the request's slot.
    fn fetching(r: &Self::Request) -> bool;
}

/// The consumer (host) side of one ring.
pub struct Consumer<M> {
    mem: M,
    mask: u64,
    /// The next ticket to read.
    tail: u64,
    /// Fetching requests whose slots wait for the device's acknowledgement, in ticket order.
    unacked: VecDeque<u64>,
    /// The last value stored in `consumed`.
    consumed: u64,
}

impl<M: Memory> Consumer<M> {
    /// A consumer of a ring of `slots` slots (a power of two) in `mem`, with every word zero.
    pub fn new(mem: M, slots: usize) -> Self {
        debug_assert!(slots.is_power_of_two());
        Consumer {
            mem,
            mask: slots as u64 - 1,
            tail: 0,
            unacked: VecDeque::new(),
            consumed: 0,
        }
    }

    fn slot(&self, t: u64) -> usize {
        (t & self.mask) as usize
    }

    /// Takes the next published request, if any.
    pub fn poll(&mut self) -> Option<M::Request> {
        let t = self.tail;
        let s = self.slot(t);
        if self.mem.seq(s).load(Ordering::Acquire) != t + 1 {
            return None;
        }
        // SAFETY: the acquire load above saw ticket t published; the slot is released only by
        // `reap`, after `tail` has passed t.
        let r = unsafe { self.mem.read(s, t) };
        if M::fetching(&r) {
            self.unacked.push_back(t);
        }
        self.tail = t + 1;
        Some(r)
    }

    /// Hands a fetching request's reply to the device (nothing for other requests).
    pub fn finish(&mut self, r: &M::Request, reply: M::Reply) {
        if !M::fetching(r) {
            return;
        }
        let t = M::ticket(r);
        let s = self.slot(t);
        // SAFETY: a fetching request keeps its slot until the device acknowledges the reply,
        // which it does only after `done` below.
        unsafe { self.mem.write_reply(s, reply) };
        self.mem.done(s).store(t + 1, Ordering::Release);
    }

    /// Publishes that every request up to and including `ticket` has been executed.
    pub fn complete(&self, ticket: u64) {
        self.mem
            .ctrl(ctrl::COMPLETED)
            .store(ticket + 1, Ordering::Release);
    }

    /// Frees the slots the device no longer needs: everything read so far, up to the first
    /// fetching request whose reply the device has not acknowledged.
    pub fn reap(&mut self) {
        while let Some(&t) = self.unacked.front() {
            if self.mem.ack(self.slot(t)).load(Ordering::Acquire) != t + 1 {
                break;
            }
            self.unacked.pop_front();
        }
        let c = self.unacked.front().copied().unwrap_or(self.tail);
        if c != self.consumed {
            self.consumed = c;
            self.mem.ctrl(ctrl::CONSUMED).store(c, Ordering::Release);
        }
    }

    /// Records the first failure (`code`, non-zero) for the device; later ones are ignored.
    pub fn fail(&self, code: u64, pe: i32, ticket: u64) {
        if self.mem.ctrl(ctrl::ERROR).load(Ordering::Acquire) != 0 {
            return;
        }
        self.mem
            .ctrl(ctrl::ERROR_PE)
            .store(pe as i64 as u64, Ordering::Relaxed);
        self.mem
            .ctrl(ctrl::ERROR_TICKET)
            .store(ticket, Ordering::Relaxed);
        self.mem.ctrl(ctrl::ERROR).store(code, Ordering::Release);
    }

    /// The failure code recorded so far (0: none).
    #[cfg(any(test, loom))]
    pub fn failure(&self) -> u64 {
        self.mem.ctrl(ctrl::ERROR).load(Ordering::Acquire)
    }
}
