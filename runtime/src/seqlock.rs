//! A sequence lock: many readers that never write shared memory, and writers serialized by a
//! mutex. `seq` is odd while a write is under way; a reader that saw it odd, or saw it change
//! while reading, discards what it read. The protected data must itself be atomics (read and
//! written with `Relaxed`), so a reader racing a writer reads stale or mixed words, never
//! undefined behaviour; the sequence check throws such a read away.

// Under `--cfg loom` (the model-checking build of loom-tests/, which includes this file) the
// atomics and the mutex are loom's, so loom explores every interleaving of the protocol.
#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::Mutex;

pub(crate) struct SeqLock {
    seq: AtomicU64,
    /// Serializes writers (readers never take it).
    write: Mutex<()>,
}

impl SeqLock {
    pub(crate) fn new() -> Self {
        SeqLock {
            seq: AtomicU64::new(0),
            write: Mutex::new(()),
        }
    }

    /// Runs `f`, which reads the protected atomics with `Relaxed` loads. `None` if `f` gives
    /// `None` (the second sequence check is then skipped) or a write overlapped the read.
    #[inline]
    pub(crate) fn read<T>(&self, f: impl FnOnce() -> Option<T>) -> Option<T> {
        let seq = self.seq.load(Ordering::Acquire);
        let v = f()?;
        // The words read above were stable if the sequence number did not move meanwhile.
        fence(Ordering::Acquire);
        (seq & 1 == 0 && self.seq.load(Ordering::Relaxed) == seq).then_some(v)
    }

    /// Runs `f`, which stores the protected atomics with `Relaxed` stores, inside the write
    /// protocol. `wait`: block for the writer lock, else give up (returning false) when another
    /// thread holds it.
    pub(crate) fn write(&self, wait: bool, f: impl FnOnce()) -> bool {
        let _g = if wait {
            self.write.lock().unwrap_or_else(|e| e.into_inner())
        } else {
            match self.write.try_lock() {
                Ok(g) => g,
                Err(_) => return false,
            }
        };
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        f();
        self.seq.store(seq + 2, Ordering::Release);
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// One writer keeps two words equal; readers racing it never accept a torn pair.
    #[test]
    fn reader_never_accepts_torn_pair() {
        let lock = SeqLock::new();
        let w = [AtomicUsize::new(0), AtomicUsize::new(0)];
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..200_000 {
                    lock.write(true, || {
                        w[0].store(i, Ordering::Relaxed);
                        w[1].store(i, Ordering::Relaxed);
                    });
                }
                done.store(true, Ordering::Release);
            });
            for _ in 0..2 {
                s.spawn(|| {
                    while !done.load(Ordering::Acquire) {
                        let r = lock.read(|| {
                            Some((w[0].load(Ordering::Relaxed), w[1].load(Ordering::Relaxed)))
                        });
                        if let Some((a, b)) = r {
                            assert_eq!(a, b, "torn read accepted");
                        }
                    }
                });
            }
        });
    }
}
