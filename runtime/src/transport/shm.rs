//! The shared-memory transport: plain loads, stores and CPU atomics on the peer's mapping.

use std::sync::atomic::Ordering;

use super::{Amo, AmoOp, Caps, Kind, TransportOps};
use crate::error::Result;
use crate::types::Bits;

/// What the shared-memory transport can do: everything, by CPU loads, stores and atomics.
pub const CAPS: Caps = Caps::LOAD_STORE
    .union(Caps::RMA)
    .union(Caps::AMO)
    .union(Caps::ORDERED);

/// The shared-memory transport: the target's slice of the heap is mapped in this process, so
/// every operation is a `memcpy` or a CPU atomic on the translated address, complete on return.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shm;

impl TransportOps for Shm {
    type Addr = usize;

    fn kind(&self) -> Kind {
        Kind::new("shm", CAPS)
    }

    #[inline]
    fn put(&self, _call: &'static str, dst: usize, src: *const u8, n: usize) -> Result<()> {
        // SAFETY: the caller checked `dst..dst+n` against a live allocation of a mapped heap
        // and `src` is a live slice of n bytes.
        unsafe { put(dst, src, n) }
    }

    #[inline]
    fn get(&self, _call: &'static str, dst: *mut u8, src: usize, n: usize) -> Result<()> {
        // SAFETY: as in `put`, for the source; `dst` is a live exclusive slice of n bytes.
        unsafe { get(dst, src, n) }
    }

    #[inline]
    fn amo(&self, _call: &'static str, at: usize, a: Amo) -> Result<u64> {
        // SAFETY: the caller checked alignment and that the word is in a live allocation.
        Ok(unsafe { amo(at, a) })
    }

    #[inline]
    fn fence(&self, _call: &'static str) -> Result<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    #[inline]
    fn quiet(&self, _call: &'static str) -> Result<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }
}

/// # Safety
/// `dst..dst+n` must be mapped writable and `src..src+n` readable.
#[inline]
pub unsafe fn put(dst: usize, src: *const u8, n: usize) -> Result<()> {
    // SAFETY: forwarded; `copy` tolerates overlap (a put to myself from my own heap).
    unsafe { std::ptr::copy(src, dst as *mut u8, n) };
    Ok(())
}

/// # Safety
/// `src..src+n` must be mapped readable and `dst..dst+n` writable.
#[inline]
pub unsafe fn get(dst: *mut u8, src: usize, n: usize) -> Result<()> {
    // SAFETY: forwarded.
    unsafe { std::ptr::copy(src as *const u8, dst, n) };
    Ok(())
}

/// Applies `a` to the word at `addr` with CPU atomics; returns the old value.
///
/// # Safety
/// `addr` must be a mapped word of `a.size` (4 or 8) bytes, aligned to its size.
#[inline]
pub unsafe fn amo(addr: usize, a: Amo) -> u64 {
    // SAFETY: forwarded to the typed helpers.
    unsafe {
        if a.size == 4 {
            word::<u32>(a.op, addr, a.value as u32, a.cond as u32) as u64
        } else {
            word::<u64>(a.op, addr, a.value, a.cond)
        }
    }
}

#[inline(always)]
unsafe fn word<B: Bits>(op: AmoOp, addr: usize, v: B, cond: B) -> B {
    // SAFETY: the caller guarantees an aligned, mapped word.
    unsafe {
        match op {
            AmoOp::Fetch => B::load(addr, Ordering::Acquire),
            AmoOp::Set => {
                // The old value of a set is never used: a plain release store.
                B::store(addr, v, Ordering::Release);
                v
            }
            AmoOp::Swap => B::swap(addr, v),
            AmoOp::CompareSwap => B::cas(addr, cond, v),
            AmoOp::FetchAdd => B::fetch_add(addr, v),
            AmoOp::FetchAnd => B::fetch_and(addr, v),
            AmoOp::FetchOr => B::fetch_or(addr, v),
            AmoOp::FetchXor => B::fetch_xor(addr, v),
        }
    }
}
