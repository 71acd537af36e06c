//! Signals: a put that raises a flag on the target once its data is there.
//!
//! A signal word is a symmetric, 8-byte-aligned `u64`. [`World::put_signal`] is **one-sided**:
//! the data is delivered before the signal update becomes visible (release), so a PE that sees
//! the signal with [`World::signal_wait_until`] (acquire) also sees the data. Signal updates
//! are atomic with respect to each other.

use std::sync::atomic::{fence, Ordering};

use crate::error::{Error, Result};
use crate::types::{Bits, Cmp, RmaType, SignalOp};
use crate::world::World;

impl World {
    fn sig_addr(&self, call: &'static str, sig: *const u64, pe: usize) -> Result<usize> {
        if (sig as usize) % 8 != 0 {
            return Err(Error::invalid(call, format!("signal address {sig:p} is not 8-byte aligned")));
        }
        self.remote(call, sig as usize, 8, pe)
    }

    /// **One-sided.** Puts `src` into `dest` on PE `pe`, then updates the signal `sig` on PE `pe`
    /// with `op`/`signal`; the update is visible only after the data. Like `shmem_put_signal`.
    /// Both addresses are checked before anything is written.
    pub fn put_signal<T: RmaType>(&self, dest: *mut T, src: &[T], sig: *mut u64, signal: u64, op: SignalOp, pe: usize) -> Result<()> {
        self.put_signal_impl("put_signal", dest, src, sig, signal, op, pe)
    }

    /// **One-sided.** Non-blocking [`put_signal`](World::put_signal); completed by
    /// [`World::quiet`]. Like `shmem_put_signal_nbi`.
    pub fn put_signal_nbi<T: RmaType>(&self, dest: *mut T, src: &[T], sig: *mut u64, signal: u64, op: SignalOp, pe: usize) -> Result<()> {
        self.put_signal_impl("put_signal_nbi", dest, src, sig, signal, op, pe)
    }

    #[allow(clippy::too_many_arguments)]
    fn put_signal_impl<T: RmaType>(
        &self,
        call: &'static str,
        dest: *mut T,
        src: &[T],
        sig: *mut u64,
        signal: u64,
        op: SignalOp,
        pe: usize,
    ) -> Result<()> {
        let bytes = std::mem::size_of_val(src);
        let s = self.sig_addr(call, sig, pe)?;
        let d = if bytes > 0 { Some(self.remote(call, dest as usize, bytes, pe)?) } else { None };
        if let Some(d) = d {
            // SAFETY: `remote` checked the range and translated it into PE pe's mapped copy.
            unsafe { std::ptr::copy(src.as_ptr().cast::<u8>(), d as *mut u8, bytes) };
        }
        fence(Ordering::Release);
        // SAFETY: `sig_addr` checked alignment and that the word lies in a live allocation.
        unsafe { apply_signal(s, signal, op) };
        Ok(())
    }

    /// **One-sided.** Updates the signal `sig` on PE `pe` without data (NVSHMEM's `signal_op`);
    /// ordered after earlier puts to `pe` only with a [`World::fence`] in between.
    pub fn signal_op(&self, sig: *mut u64, signal: u64, op: SignalOp, pe: usize) -> Result<()> {
        let s = self.sig_addr("signal_op", sig, pe)?;
        // SAFETY: as in put_signal.
        unsafe { apply_signal(s, signal, op) };
        Ok(())
    }

    /// **Local.** Atomically reads this PE's signal word. Like `shmem_signal_fetch`.
    pub fn signal_fetch(&self, sig: *const u64) -> Result<u64> {
        let s = self.sig_addr("signal_fetch", sig, self.me)?;
        // SAFETY: as in put_signal.
        Ok(unsafe { u64::load(s, Ordering::Acquire) })
    }

    /// **Local, blocking.** Waits until this PE's signal word satisfies `cmp value` and returns
    /// it (acquire: data put before the signal is visible). Bounded by `RSHMEM_TIMEOUT`. Like
    /// `shmem_signal_wait_until`.
    pub fn signal_wait_until(&self, sig: *const u64, cmp: Cmp, value: u64) -> Result<u64> {
        let call = "signal_wait_until";
        let s = self.sig_addr(call, sig, self.me)?;
        let load = || {
            // SAFETY: as in put_signal.
            unsafe { u64::load(s, Ordering::Acquire) }
        };
        self.wait.wait(
            &self.live,
            call,
            None,
            || {
                let v = load();
                cmp.holds(v, value).then_some(v)
            },
            || format!("signal at {sig:p} to become {} {value} (it is {})", cmp.symbol(), load()),
        )
    }
}

/// # Safety
/// `addr` must be an aligned, mapped u64.
#[inline]
unsafe fn apply_signal(addr: usize, signal: u64, op: SignalOp) {
    match op {
        // SAFETY: forwarded from the caller.
        SignalOp::Set => unsafe { u64::store(addr, signal, Ordering::Release) },
        // SAFETY: forwarded from the caller.
        SignalOp::Add => unsafe {
            u64::fetch_add(addr, signal);
        },
    }
}
