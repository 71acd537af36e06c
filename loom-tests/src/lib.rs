//! Model checking of rshmem's lock-free pieces with loom: the range-check cache's sequence lock
//! (`seqlock_model`) and the proxy ring's host protocol against a model of the device's side
//! (`ring_model`). The modules under test are the runtime's own source files, included by path,
//! so the model checks the code that ships.
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test -p rshmem-loom --release --target-dir target/loom
//! ```
//!
//! Without `--cfg loom` this crate is empty (a plain `cargo test` of the workspace skips it).

#[cfg(loom)]
#[path = "../../runtime/src/seqlock.rs"]
#[allow(dead_code, unreachable_pub)]
pub mod seqlock;

#[cfg(loom)]
#[path = "../../runtime/src/proxy/fifo/protocol.rs"]
#[allow(dead_code, unreachable_pub)]
pub mod ring_protocol;

#[cfg(all(loom, test))]
mod ring_model;

#[cfg(all(loom, test))]
mod seqlock_model {
    //! The range-check cache's sequence lock (runtime/src/seqlock.rs) under loom: in every
    //! interleaving of a writer and a reader, the reader never accepts a torn pair of words, and a
    //! read that does not overlap a write is accepted.

    use crate::seqlock::SeqLock;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;

    struct Shared {
        lock: SeqLock,
        w: [AtomicUsize; 2],
    }

    fn read_pair(s: &Shared) -> Option<(usize, usize)> {
        s.lock.read(|| {
            Some((
                s.w[0].load(Ordering::Relaxed),
                s.w[1].load(Ordering::Relaxed),
            ))
        })
    }

    #[test]
    fn reader_never_accepts_a_torn_pair() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let s = Arc::new(Shared {
                lock: SeqLock::new(),
                w: [AtomicUsize::new(0), AtomicUsize::new(0)],
            });
            let writer = {
                let s = s.clone();
                loom::thread::spawn(move || {
                    for i in 1..=2 {
                        s.lock.write(true, || {
                            s.w[0].store(i, Ordering::Relaxed);
                            s.w[1].store(i, Ordering::Relaxed);
                        });
                    }
                })
            };
            if let Some((a, b)) = read_pair(&s) {
                assert_eq!(a, b, "torn read accepted");
            }
            writer.join().unwrap();
            // With no write in flight a read is accepted and sees the last write.
            assert_eq!(read_pair(&s), Some((2, 2)));
        });
    }

    #[test]
    fn a_second_writer_that_will_not_wait_gives_up() {
        loom::model(|| {
            let s = Arc::new(Shared {
                lock: SeqLock::new(),
                w: [AtomicUsize::new(0), AtomicUsize::new(0)],
            });
            let t = {
                let s = s.clone();
                loom::thread::spawn(move || {
                    s.lock.write(false, || s.w[0].store(1, Ordering::Relaxed))
                })
            };
            let mine = s.lock.write(false, || s.w[1].store(1, Ordering::Relaxed));
            let theirs = t.join().unwrap();
            // At least one of two non-waiting writers gets through; whoever did left the lock even.
            assert!(mine || theirs);
            assert!(read_pair(&s).is_some());
        });
    }
}
