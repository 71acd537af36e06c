//! Signals: a put that raises a flag on the target once its data is there.
//!
//! A signal word is a symmetric, 8-byte-aligned `u64`. [`World::put_signal`] is **one-sided**:
//! the data is delivered before the signal update becomes visible (release), so a PE that sees
//! the signal with [`World::signal_wait_until`] (acquire) also sees the data. Signal updates
//! are atomic with respect to each other.

use std::sync::atomic::{fence, Ordering};

use crate::error::Result;
use crate::transport::{Amo, AmoOp};
use crate::types::{Bits, Cmp, RmaType, SignalOp};
use crate::world::{Target, World};

impl World {
    /// Checks a signal word (8-byte aligned, inside a live allocation, PE reachable by
    /// load/store) and returns PE `pe`'s copy.
    pub(crate) fn sig_addr(&self, call: &'static str, sig: *const u64, pe: usize) -> Result<usize> {
        Self::sig_aligned(call, sig)?;
        self.remote(call, sig as usize, 8, pe)
    }

    /// Checks a signal word (8-byte aligned, inside a live allocation, PE `pe` a valid target)
    /// and returns its target on PE `pe`.
    pub(crate) fn sig_target(
        &self,
        call: &'static str,
        sig: *const u64,
        pe: usize,
    ) -> Result<Target> {
        Self::sig_aligned(call, sig)?;
        self.target(call, sig as usize, 8, pe)
    }

    fn sig_aligned(call: &'static str, sig: *const u64) -> Result<()> {
        Self::check_aligned(call, "signal address", sig, 8)
    }

    calls! {
        [T: RmaType]
        (dest: *mut T, src: &[T], sig: *mut u64, signal: u64, op: SignalOp, pe: usize)
            -> Result<()>;

        /// **One-sided.** Puts `src` into `dest` on PE `pe`, then updates the signal `sig` on PE
        /// `pe` with `op`/`signal`; the update is visible only after the data. Like
        /// `shmem_put_signal`. Both addresses are checked before anything is written.
        put_signal => put_signal_impl(dest, src, sig, signal, op, pe);

        /// **One-sided.** Non-blocking [`put_signal`](World::put_signal); completed by
        /// [`World::quiet`]. Like `shmem_put_signal_nbi`.
        put_signal_nbi => put_signal_impl(dest, src, sig, signal, op, pe);
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
        let s = self.sig_target(call, sig, pe)?;
        let d = if bytes > 0 {
            Some(self.target(call, dest as usize, bytes, pe)?)
        } else {
            None
        };
        if let Some(d) = d {
            self.put_to(call, d, src.as_ptr().cast(), bytes)?;
        }
        // Release: on host memory a fence; on the GPU heap the signal kernel runs after the copy
        // on the same stream; over TCP the target applies the signal after the data (one
        // connection, applied in order).
        fence(Ordering::Release);
        self.apply_signal(call, s, signal, op)
    }

    /// **One-sided.** Updates the signal `sig` on PE `pe` without data (NVSHMEM's `signal_op`);
    /// ordered after earlier puts to `pe` only with a [`World::fence`] in between.
    pub fn signal_op(&self, sig: *mut u64, signal: u64, op: SignalOp, pe: usize) -> Result<()> {
        let s = self.sig_target("signal_op", sig, pe)?;
        self.apply_signal("signal_op", s, signal, op)
    }

    /// **Local.** Atomically reads this PE's signal word. Like `shmem_signal_fetch`.
    pub fn signal_fetch(&self, sig: *const u64) -> Result<u64> {
        let s = self.sig_addr("signal_fetch", sig, self.me)?;
        self.xport.load("signal_fetch", s, 8)
    }

    /// **Local, blocking.** Waits until this PE's signal word satisfies `cmp value` and returns
    /// it (acquire: data put before the signal is visible). Bounded by `RSHMEM_TIMEOUT`. Like
    /// `shmem_signal_wait_until`.
    pub fn signal_wait_until(&self, sig: *const u64, cmp: Cmp, value: u64) -> Result<u64> {
        let call = "signal_wait_until";
        let s = self.sig_addr(call, sig, self.me)?;
        let load = || -> Result<u64> {
            if self.xport.cheap_loads() {
                // SAFETY: `sig_addr` checked alignment and that the word lies in a live
                // allocation of this PE's host heap.
                return Ok(unsafe { u64::load(s, Ordering::Acquire) });
            }
            self.xport.load(call, s, 8)
        };
        self.wait
            .wait(
                &self.live,
                call,
                None,
                || match load() {
                    Ok(v) => cmp.holds(v, value).then_some(Ok(v)),
                    Err(e) => Some(Err(e)),
                },
                || {
                    format!(
                        "signal at {sig:p} to become {} {value} (it is {})",
                        cmp.symbol(),
                        shown(load())
                    )
                },
            )
            .and_then(|r| r)
    }

    #[inline]
    fn apply_signal(&self, call: &'static str, t: Target, signal: u64, op: SignalOp) -> Result<()> {
        let op = match op {
            SignalOp::Set => AmoOp::Set,
            SignalOp::Add => AmoOp::FetchAdd,
        };
        self.amo_nf_at(call, t, Amo::new(op, 8, signal, 0))
    }
}

/// A value for an error message: the value, or why it could not be read.
pub(crate) fn shown<T: std::fmt::Debug>(v: Result<T>) -> String {
    match v {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("unreadable: {e}"),
    }
}
