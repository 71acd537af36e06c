//! Model checking of rshmem's lock-free pieces with loom: the range-check cache's sequence lock
//! (`seqlock_model`), the proxy ring's host protocol against a model of the device's side
//! (`ring_model`), and the UCX progress thread's wake-up handshake (`wake_model`). The modules
//! under test are the runtime's own source files, included by path, so the model checks the
//! code that ships.
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

#[cfg(loom)]
#[path = "../../runtime/src/transport/ucx/wake.rs"]
#[allow(dead_code, unreachable_pub)]
pub mod wake;

#[cfg(all(loom, test))]
mod ring_model;

#[cfg(all(loom, test))]
mod wake_model {
    //! The UCX progress thread's wake-up handshake (runtime/src/transport/ucx/wake.rs) under
    //! loom: two threads of the PE arrive (each records its arrival, then asks whether to wake
    //! the progress thread) while the progress thread decides to sleep on the worker's events.
    //! In every interleaving, a progress thread that sleeps there is woken by one of them, and
    //! never by both.

    use crate::wake::EventSleep;
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    #[test]
    fn a_sleep_on_events_is_ended_by_exactly_one_arriving_caller() {
        loom::model(|| {
            // The handshake, and the callers' record of their arrival (`helped` in ucp.rs).
            let s = Arc::new((EventSleep::new(), AtomicBool::new(false)));
            let callers: Vec<_> = (0..2)
                .map(|_| {
                    let s = s.clone();
                    thread::spawn(move || {
                        s.1.store(true, Ordering::Relaxed);
                        s.0.caller_arrived()
                    })
                })
                .collect();
            let slept = s.0.sleep_on_events(|| s.1.load(Ordering::Relaxed));
            let kicks = callers
                .into_iter()
                .map(|c| c.join().unwrap())
                .filter(|&k| k)
                .count();
            assert!(
                !slept || kicks == 1,
                "the progress thread sleeps on events: {kicks} callers woke it"
            );
            assert!(kicks <= 1, "{kicks} callers woke the progress thread");
        });
    }

    #[test]
    fn a_sleep_that_ended_is_not_woken() {
        loom::model(|| {
            let s = EventSleep::new();
            assert!(s.sleep_on_events(|| false));
            s.woke();
            assert!(
                !s.caller_arrived(),
                "a caller woke a thread no longer asleep"
            );
        });
    }
}

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
