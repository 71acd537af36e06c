//! Transports: how bytes reach a PE's copy of a symmetric object.
//!
//! * [`shm`] — CPU load/store into memory shared by the host's processes (host heap).
//! * [`p2p`] — GPU heap: the copy engine (`cuMemcpy*Async` on rshmem's stream) for host-issued
//!   puts and gets to any GPU of the host, and small kernels for host-issued atomics.
//!
//! * [`tcp`] — PEs that share no memory with this one (other hosts, or every other PE under
//!   `RSHMEM_DISABLE_P2P=1`): requests applied by a service thread on the target (CPU backend).
//!
//! The host API ([`crate::World`]) checks arguments and translates addresses into a
//! [`crate::world::Target`]: a load/store address handled by the transport of the heap, or a
//! (PE, offset) handled by [`tcp::Net`].

pub mod p2p;
pub mod shm;
pub mod tcp;

use crate::error::Result;

/// An atomic operation on a 4- or 8-byte word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AmoOp {
    /// Read.
    Fetch = 0,
    /// Write.
    Set = 1,
    /// Exchange.
    Swap = 2,
    /// Compare and swap with `cond`.
    CompareSwap = 3,
    /// Wrapping add.
    FetchAdd = 4,
    /// Bitwise and.
    FetchAnd = 5,
    /// Bitwise or.
    FetchOr = 6,
    /// Bitwise xor.
    FetchXor = 7,
}

/// The transport of a heap.
#[derive(Debug)]
pub enum Transport {
    /// Host shared memory.
    Shm,
    /// GPU memory over NVLink/PCIe.
    P2p(p2p::P2p),
}

impl Transport {
    /// Copies `n` bytes from local host memory `src` to the (translated, checked) address `dst`.
    #[inline]
    pub fn put(&self, call: &'static str, dst: usize, src: *const u8, n: usize) -> Result<()> {
        match self {
            // SAFETY: the caller checked `dst..dst+n` against a live allocation of a mapped heap
            // and `src` is a live slice of n bytes.
            Transport::Shm => unsafe { shm::put(dst, src, n) },
            Transport::P2p(p) => p.put(call, dst, src, n),
        }
        .map(|_| ())
    }

    /// Copies `n` bytes from the (translated, checked) address `src` into local host memory.
    #[inline]
    pub fn get(&self, call: &'static str, dst: *mut u8, src: usize, n: usize) -> Result<()> {
        match self {
            // SAFETY: as in `put`, for the source; `dst` is a live exclusive slice of n bytes.
            Transport::Shm => unsafe { shm::get(dst, src, n) },
            Transport::P2p(p) => p.get(call, dst, src, n),
        }
        .map(|_| ())
    }

    /// Copies `n` bytes between two (translated, checked) heap addresses.
    pub fn copy(&self, call: &'static str, dst: usize, src: usize, n: usize) -> Result<()> {
        match self {
            // SAFETY: both ranges were checked against live allocations of a mapped heap.
            Transport::Shm => unsafe { shm::put(dst, src as *const u8, n) },
            Transport::P2p(p) => p.copy(call, dst, src, n),
        }
        .map(|_| ())
    }

    /// Sets `n` bytes at a (translated, checked) heap address to zero.
    pub fn zero(&self, call: &'static str, dst: usize, n: usize) -> Result<()> {
        match self {
            Transport::Shm => {
                // SAFETY: the range was checked against a live allocation of a mapped heap.
                unsafe { std::ptr::write_bytes(dst as *mut u8, 0, n) };
                Ok(())
            }
            Transport::P2p(p) => p.zero(call, dst, n),
        }
    }

    /// Applies `op` to the aligned word of `size` (4 or 8) bytes at `addr`; returns the old value.
    #[inline]
    pub fn amo(
        &self,
        call: &'static str,
        op: AmoOp,
        addr: usize,
        size: usize,
        value: u64,
        cond: u64,
    ) -> Result<u64> {
        match self {
            // SAFETY: the caller checked alignment and that the word is in a live allocation.
            Transport::Shm => Ok(unsafe { shm::amo(op, addr, size, value, cond) }),
            Transport::P2p(p) => p.amo(call, op, addr, size, value, cond),
        }
    }

    /// Reads the aligned word of `size` bytes at `addr` with acquire semantics (for waits).
    #[inline]
    pub fn load(&self, call: &'static str, addr: usize, size: usize) -> Result<u64> {
        self.amo(call, AmoOp::Fetch, addr, size, 0, 0)
    }

    /// True if loads of heap words are cheap (waits may spin on them).
    pub fn cheap_loads(&self) -> bool {
        matches!(self, Transport::Shm)
    }

    /// Completes every operation this PE issued.
    #[inline]
    pub fn quiet(&self, call: &'static str) -> Result<()> {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        match self {
            Transport::Shm => Ok(()),
            Transport::P2p(p) => p.quiet(call),
        }
    }
}
