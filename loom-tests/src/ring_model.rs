//! The proxy ring (runtime/src/proxy/fifo/protocol.rs, the host's side, included by path) under
//! loom, against a model of the device's side (device-lib/include/rshmem/proxy.cuh) written
//! here. The slot's request words, its reply and the effects of executing a request are loom
//! cells: loom fails a test when a read of one is not ordered after its write (a request read
//! before it is complete, a reply read before it is written) or a write is not ordered after
//! the last read (a slot reused while the host, or the device, still reads it).
//!
//! The device model does what proxy.cuh does, step for step, with the memory order each PTX
//! access has in the C++ model (CUDA's memory model follows it):
//!
//! | proxy.cuh                                          | model                                |
//! |----------------------------------------------------|--------------------------------------|
//! | `*(volatile u64*)hint` (proxy_reserve)             | `hint.load(Relaxed)`                 |
//! | `atomicAdd(head, 1)`                               | `head.fetch_add(1, Relaxed)`         |
//! | fast path: `fence_acq_rel_gpu()`                   | `fence(Acquire)`                     |
//! | slow path: `ld_acquire_sys(consumed)`              | `consumed.load(Acquire)`             |
//! | `fence_acq_rel_gpu(); atomicMax(hint, c)`          | `fence(Release); hint.fetch_max(c, Relaxed)` |
//! | `r->opword = ...` ... `r->data[i] = ...`           | write of the slot's body cell        |
//! | `st_release_sys(&r->seq, t + 1)`                   | `seq.store(t + 1, Release)`          |
//! | `ld_acquire_sys(&r->done)` (proxy_fetch)           | `done.load(Acquire)`                 |
//! | `ld_relaxed_sys(&r->result)`, `&r->data[i]`        | read of the slot's result cell       |
//! | `st_release_sys(&r->ack, t + 1)`                   | `ack.store(t + 1, Release)`          |
//! | `ld_acquire_sys(completed)` (proxy_wait)           | `completed.load(Acquire)`            |
//! | proxy_fail: `ld_acquire_sys(error)`, then `ld_relaxed_sys` of `error_pe`, `error_ticket` | the same orders |
//!
//! Each `fence.acq_rel` is modelled by the half the protocol needs (acquire after the hint
//! load, release before `atomicMax`): the model is then weaker than the device, so a pass holds
//! for the device too, and loom's acquire fence (which synchronizes with every release store the
//! thread's history has seen, more than C++ promises) cannot hide a missing host ordering.
//!
//! Waits spin with `thread::yield_now()`, and the host's with its `reap` in between, as the
//! service thread does. The tests keep loom's state space small: rings of one or two slots, at
//! most four requests, and a preemption bound (0 to 3, per test) on top of the switches the
//! waits make; the test with three threads lets only waits switch threads (bound 0).
//!
//! The host model is the service thread's loop (runtime/src/proxy/service.rs `run`): poll; for a
//! request, execute it, `finish`, `complete`, `reap`; with none, `reap`.

use crate::ring_protocol::{ctrl, Consumer, Memory};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// `flags` of a fetching request (the device waits for a reply in the slot).
const FETCH: u64 = 1;

/// A request as the host copies it out of its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Req {
    ticket: u64,
    flags: u64,
    value: u64,
}

/// One slot: the handshake words, the request the device writes, the reply the host writes.
struct SlotMem {
    seq: AtomicU64,
    done: AtomicU64,
    ack: AtomicU64,
    /// (flags, value): the request's words between `seq` and the handshake words.
    body: UnsafeCell<(u64, u64)>,
    /// The reply of a fetching request (`result`, or inline `data`).
    result: UnsafeCell<u64>,
}

/// The ring's memory: slots and control block (host memory), head and free hint (device).
struct RingMem {
    slots: Vec<SlotMem>,
    consumed: AtomicU64,
    completed: AtomicU64,
    error: AtomicU64,
    error_pe: AtomicU64,
    error_ticket: AtomicU64,
    head: AtomicU64,
    hint: AtomicU64,
    /// What executing a request writes where the device reads it after `completed` passed it
    /// (the destination of a get, the source buffer a put releases): one word per ticket.
    effects: Vec<UnsafeCell<u64>>,
}

#[derive(Clone)]
struct Mem(Arc<RingMem>);

impl Mem {
    fn new(slots: usize, tickets: usize) -> Mem {
        let z = AtomicU64::new;
        Mem(Arc::new(RingMem {
            slots: (0..slots)
                .map(|_| SlotMem {
                    seq: z(0),
                    done: z(0),
                    ack: z(0),
                    body: UnsafeCell::new((0, 0)),
                    result: UnsafeCell::new(0),
                })
                .collect(),
            consumed: z(0),
            completed: z(0),
            error: z(0),
            error_pe: z(0),
            error_ticket: z(0),
            head: z(0),
            hint: z(0),
            effects: (0..tickets).map(|_| UnsafeCell::new(0)).collect(),
        }))
    }

    fn n(&self) -> u64 {
        self.0.slots.len() as u64
    }

    fn slot(&self, t: u64) -> &SlotMem {
        &self.0.slots[(t % self.n()) as usize]
    }

    // ---- The device (proxy.cuh) ----

    /// proxy_reserve + proxy_push_args: takes a ticket, waits for its slot, writes the request
    /// and publishes it.
    fn push(&self, flags: u64, value: u64) -> u64 {
        let r = &self.0;
        let free_below = r.hint.load(Ordering::Relaxed) + self.n();
        let t = r.head.fetch_add(1, Ordering::Relaxed);
        if t < free_below {
            fence(Ordering::Acquire);
        } else {
            loop {
                let c = r.consumed.load(Ordering::Acquire);
                if t < c + self.n() {
                    fence(Ordering::Release);
                    r.hint.fetch_max(c, Ordering::Relaxed);
                    break;
                }
                thread::yield_now();
            }
        }
        let s = self.slot(t);
        // SAFETY: loom checks that this write is ordered after every read of the cell.
        s.body.with_mut(|p| unsafe { *p = (flags, value) });
        s.seq.store(t + 1, Ordering::Release);
        t
    }

    /// proxy_fetch: waits for the reply of fetching request `t`, reads it, acknowledges it.
    fn fetch(&self, t: u64) -> u64 {
        let s = self.slot(t);
        while s.done.load(Ordering::Acquire) != t + 1 {
            thread::yield_now();
        }
        // SAFETY: loom checks that this read is ordered after the host's write.
        let v = s.result.with(|p| unsafe { *p });
        s.ack.store(t + 1, Ordering::Release);
        v
    }

    /// proxy_wait: waits until the host has executed request `t`.
    fn wait(&self, t: u64) {
        while self.0.completed.load(Ordering::Acquire) <= t {
            thread::yield_now();
        }
    }

    /// What executing request `t` left for the device (read after `wait(t)`).
    fn effect(&self, t: u64) -> u64 {
        // SAFETY: loom checks that this read is ordered after the host's write.
        self.0.effects[t as usize].with(|p| unsafe { *p })
    }

    /// proxy_fail's reads once a poll saw the error word non-zero: (error, pe, ticket).
    fn failure(&self) -> Option<(u64, u64, u64)> {
        let r = &self.0;
        let e = r.error.load(Ordering::Acquire);
        (e != 0).then(|| {
            (
                e,
                r.error_pe.load(Ordering::Relaxed),
                r.error_ticket.load(Ordering::Relaxed),
            )
        })
    }
}

impl Memory for Mem {
    type Request = Req;
    type Reply = u64;

    fn seq(&self, slot: usize) -> &AtomicU64 {
        &self.0.slots[slot].seq
    }

    fn done(&self, slot: usize) -> &AtomicU64 {
        &self.0.slots[slot].done
    }

    fn ack(&self, slot: usize) -> &AtomicU64 {
        &self.0.slots[slot].ack
    }

    fn ctrl(&self, off: usize) -> &AtomicU64 {
        let r = &self.0;
        match off {
            ctrl::CONSUMED => &r.consumed,
            ctrl::COMPLETED => &r.completed,
            ctrl::ERROR => &r.error,
            ctrl::ERROR_PE => &r.error_pe,
            ctrl::ERROR_TICKET => &r.error_ticket,
            _ => panic!("no control word at {off}"),
        }
    }

    unsafe fn read(&self, slot: usize, ticket: u64) -> Req {
        // SAFETY: loom checks that this read is ordered after the device's write.
        let (flags, value) = self.0.slots[slot].body.with(|p| unsafe { *p });
        Req {
            ticket,
            flags,
            value,
        }
    }

    unsafe fn write_reply(&self, slot: usize, reply: u64) {
        // SAFETY: loom checks that this write is ordered after the device's last read.
        self.0.slots[slot]
            .result
            .with_mut(|p| unsafe { *p = reply });
    }

    fn ticket(r: &Req) -> u64 {
        r.ticket
    }

    fn fetching(r: &Req) -> bool {
        r.flags & FETCH != 0
    }
}

/// The reply the host model gives request `r` (and the effect it leaves).
fn reply_of(r: &Req) -> u64 {
    r.value * 10 + 1
}

/// The service thread (service.rs `run`) until it has executed `n` more requests; returns them
/// in the order it read them. Executing a request writes its effect word.
fn serve(host: &mut Consumer<Mem>, mem: &Mem, n: usize) -> Vec<Req> {
    let mut got = Vec::new();
    while got.len() < n {
        match host.poll() {
            Some(r) => {
                // SAFETY: loom checks that the device reads it only after `complete`.
                mem.0.effects[r.ticket as usize].with_mut(|p| unsafe { *p = reply_of(&r) });
                host.finish(&r, reply_of(&r));
                host.complete(r.ticket);
                host.reap();
                got.push(r);
            }
            None => {
                host.reap();
                thread::yield_now();
            }
        }
    }
    got
}

/// `serve` on a new host until `n` requests are executed; with every push done, no further
/// request shows up (nothing is read twice).
fn serve_all(mem: &Mem, n: usize, device: thread::JoinHandle<()>) -> Vec<Req> {
    let mut host = Consumer::new(mem.clone(), mem.0.slots.len());
    let got = serve(&mut host, mem, n);
    device.join().unwrap();
    assert_eq!(host.poll(), None, "a request was read twice");
    got
}

fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    // The waits spin (as the device's and the host's do); each round is a branch.
    b.max_branches = 10_000;
    b.check(f);
}

/// One producer pushes three requests through two slots (the third reuses the first slot):
/// the host reads each once, in ticket order, with the words the device wrote, and never
/// before they were written; the device never overwrites a slot the host is still reading.
#[test]
fn every_request_arrives_once_in_order_across_wraparound() {
    model(3, || {
        let mem = Mem::new(2, 3);
        let dev = mem.clone();
        let device = thread::spawn(move || {
            for v in 0..3 {
                assert_eq!(dev.push(0, 100 + v), v);
            }
        });
        let got = serve_all(&mem, 3, device);
        let want: Vec<Req> = (0..3)
            .map(|t| Req {
                ticket: t,
                flags: 0,
                value: 100 + t,
            })
            .collect();
        assert_eq!(got, want);
    });
}

/// Two producers meet a ring of two slots that holds two published requests; the one that
/// gets the third ticket passes the full ring by the slow path and raises the free hint, the
/// other (fourth ticket) may then take the fast path on the hint alone while the host is still
/// reading. No slot is written while the host reads it, and every request arrives exactly once.
#[test]
fn producers_sharing_the_free_hint_never_overwrite_a_slot_in_use() {
    model(1, || {
        let mem = Mem::new(2, 4);
        // The ring is full when the producers start.
        assert_eq!((mem.push(0, 0), mem.push(0, 1)), (0, 1));
        let producers: Vec<_> = [2, 3]
            .into_iter()
            .map(|v| {
                let d = mem.clone();
                thread::spawn(move || d.push(0, v))
            })
            .collect();
        // The host reads the two requests already there (no waiting) and frees their slots;
        // the producers' requests are read after they are done (the model stays small).
        let mut host = Consumer::new(mem.clone(), 2);
        let mut got = serve(&mut host, &mem, 2);
        let mut tickets: Vec<u64> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        got.extend(serve(&mut host, &mem, 2));
        assert_eq!(host.poll(), None, "a request was read twice");
        tickets.sort_unstable();
        assert_eq!(tickets, vec![2, 3]);
        for (t, r) in got.iter().enumerate() {
            assert_eq!(r.ticket, t as u64);
        }
        let mut values: Vec<u64> = got.iter().map(|r| r.value).collect();
        values.sort_unstable();
        assert_eq!(values, vec![0, 1, 2, 3], "a request lost or read twice");
    });
}

/// Fetching requests in a ring of one slot. The first is pushed and answered before the
/// threads start; one device thread reads its reply and acknowledges it while another pushes a
/// second fetching request and waits for its own reply. The first request keeps the slot until
/// its reply was read: each thread gets its own request's reply, the second request never
/// overwrites the slot before that, and the host never writes the second reply over the first
/// while it is being read.
#[test]
fn a_fetching_request_keeps_its_slot_until_the_device_read_the_reply() {
    model(0, || {
        let mem = Mem::new(1, 2);
        let mut host = Consumer::new(mem.clone(), 1);
        let first = mem.push(FETCH, 5);
        let r = host.poll().expect("the first request");
        host.finish(&r, reply_of(&r));
        host.complete(r.ticket);
        let a = mem.clone();
        let reader = thread::spawn(move || assert_eq!(a.fetch(first), 51, "first reply"));
        let b = mem.clone();
        let second = thread::spawn(move || {
            let t = b.push(FETCH, 7);
            assert_eq!(b.fetch(t), 71, "second reply");
        });
        serve(&mut host, &mem, 1);
        reader.join().unwrap();
        second.join().unwrap();
        host.reap();
        assert_eq!(host.poll(), None, "a request was read twice");
    });
}

/// Once `completed` passes a request, the device sees everything executing it did.
#[test]
fn completion_publishes_what_the_request_did() {
    model(3, || {
        let mem = Mem::new(2, 2);
        let dev = mem.clone();
        let device = thread::spawn(move || {
            for v in 0..2 {
                let t = dev.push(0, v);
                dev.wait(t);
                assert_eq!(dev.effect(t), v * 10 + 1, "effect of request {t}");
            }
        });
        serve_all(&mem, 2, device);
    });
}

/// A device that sees the error word sees the failed request's PE and ticket with it, and only
/// the first failure is kept.
#[test]
fn a_failure_is_seen_with_its_pe_and_ticket() {
    model(3, || {
        let mem = Mem::new(1, 0);
        let host = Consumer::new(mem.clone(), 1);
        let dev = mem.clone();
        let device = thread::spawn(move || {
            if let Some(f) = dev.failure() {
                assert_eq!(f, (3, 5, 17), "error word with the wrong details");
            }
        });
        host.fail(3, 5, 17);
        host.fail(4, 6, 18);
        device.join().unwrap();
        assert_eq!(host.failure(), 3);
        assert_eq!(mem.failure(), Some((3, 5, 17)));
    });
}
