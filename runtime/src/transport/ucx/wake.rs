//! When the PE's own calls must wake the UCX progress thread: the handshake between the
//! thread's sleep on the worker's event fd and a thread of the PE that starts using the worker.
//!
//! While the progress thread sleeps on the worker's events, the kernel wakes it on every packet
//! that reaches the worker, even when a thread of this PE that progresses the worker has
//! already taken it; on a PE bound to one core each such wake-up preempts that thread
//! (measured across two network namespaces: a stream of blocking 8-byte puts that began while
//! the progress thread slept there ran at half rate, one wake-up per put). So a thread that
//! starts using the worker wakes the progress thread ([`EventSleep::caller_arrived`]), which
//! then naps instead. It is a Dekker-style handshake: the caller records its arrival and then
//! reads the flag, the progress thread raises the flag and then reads the arrival, each with a
//! SeqCst fence between its store and its load, so at least one of them sees the other's store
//! (checked under loom by loom-tests/, which includes this file; loom models SeqCst fences, not
//! SeqCst loads and stores, which is why the fences).

// Under `--cfg loom` the atomics are loom's, so loom explores every interleaving.
#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, Ordering};

/// Whether the progress thread sleeps on the worker's events.
#[derive(Debug)]
pub(crate) struct EventSleep {
    /// Raised by the progress thread before it sleeps on the worker's events; lowered when
    /// that sleep ends, or by the one caller told to wake it.
    on_events: AtomicBool,
}

impl EventSleep {
    pub(crate) fn new() -> Self {
        EventSleep {
            on_events: AtomicBool::new(false),
        }
    }

    /// A thread of this PE starts using the worker, having recorded that first (where the
    /// progress thread's `in_use` reads it). True: the progress thread sleeps on the worker's
    /// events and this caller must wake it (one caller per sleep is told so).
    pub(crate) fn caller_arrived(&self) -> bool {
        fence(Ordering::SeqCst);
        self.on_events.load(Ordering::Relaxed) && self.on_events.swap(false, Ordering::AcqRel)
    }

    /// The progress thread is about to sleep on the worker's events: raises the flag, then
    /// checks `in_use` (whether a thread of this PE uses the worker) once more. False: it must
    /// not sleep there (the flag is lowered again).
    pub(crate) fn sleep_on_events(&self, in_use: impl Fn() -> bool) -> bool {
        self.on_events.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if in_use() {
            self.on_events.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The progress thread's sleep on the worker's events ended.
    pub(crate) fn woke(&self) {
        self.on_events.store(false, Ordering::Relaxed);
    }
}
