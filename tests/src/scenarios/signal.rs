//! `signal`: put_signal with Set and Add (a gather to PE 0 over several rounds, and a ring),
//! put_signal_nbi, data and signal in one allocation, signal_op, signal_fetch, and
//! signal_wait_until with every comparison, the writes arriving from a remote PE while the
//! target waits.

use std::time::Duration;

use rshmem::{Cmp, SignalOp};

use crate::check::{after_delay, expect_buf, expect_eq, expect_slice, fill, Context, Ctx, R};
use crate::vals::{val_r, Val};

/// Rounds of the gather.
const ROUNDS: u64 = 8;

pub fn run(c: &Ctx<'_>) -> R {
    gather::<i16>(c, false)?;
    gather::<u128>(c, true)?;
    ring::<f64>(c, false)?;
    ring::<u8>(c, true)?;
    same_allocation(c)?;
    signal_ops(c)?;
    wait_cmps(c)?;
    Ok(())
}

/// Every PE but 0 sends its slice to PE 0 with put_signal(Add 1), ROUNDS times; PE 0 waits for
/// the count to reach `(r+1)·(n−1)`, checks every slice, then lets the senders go on.
fn gather<T: Val>(c: &Ctx<'_>, nbi: bool) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    const SEG: usize = 7;
    let call = if nbi { "put_signal_nbi" } else { "put_signal" };
    let data = w.malloc::<T>(n * SEG).ctx("malloc")?;
    let sig = w.calloc::<u64>(1).ctx("calloc")?;
    let go = w.calloc::<u64>(1).ctx("calloc")?;
    fill(&data, |_| T::poison())?;
    c.barrier("gather setup")?;
    for r in 0..ROUNDS {
        if me != 0 {
            w.signal_wait_until(go.as_ptr(), Cmp::Ge, r)
                .ctx("signal_wait_until(go)")?;
            let slice: Vec<T> = (0..SEG).map(|i| val_r(me, 0, i, r)).collect();
            if nbi {
                w.put_signal_nbi(data.at(me * SEG), &slice, sig.as_ptr(), 1, SignalOp::Add, 0)
                    .ctx(call)?;
                w.quiet().ctx("quiet")?;
            } else {
                w.put_signal(data.at(me * SEG), &slice, sig.as_ptr(), 1, SignalOp::Add, 0)
                    .ctx(call)?;
            }
        } else {
            let want = (r + 1) * (n as u64 - 1);
            let got = w
                .signal_wait_until(sig.as_ptr(), Cmp::Eq, want)
                .ctx(format_args!("signal_wait_until round {r}"))?;
            expect_eq(
                format_args!("{call}(Add) round {r}: signal_wait_until's value"),
                want,
                got,
            )?;
            expect_eq(
                "signal_fetch",
                want,
                w.signal_fetch(sig.as_ptr()).ctx("signal_fetch")?,
            )?;
            expect_buf(format_args!("{call} gather round {r}"), &data, |i| {
                let (s, k) = (i / SEG, i % SEG);
                if s == 0 {
                    T::poison()
                } else {
                    val_r(s, 0, k, r)
                }
            })?;
            for t in 1..n {
                w.signal_op(go.as_ptr(), r + 1, SignalOp::Set, t)
                    .ctx("signal_op(go)")?;
            }
        }
    }
    c.barrier("gather")?;
    w.free(go).ctx("free")?;
    w.free(sig).ctx("free")?;
    w.free(data).ctx("free")?;
    Ok(())
}

/// Each PE sends a slice to the next with put_signal(Set) to a value naming it and the round.
fn ring<T: Val>(c: &Ctx<'_>, nbi: bool) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    const LEN: usize = 13;
    let call = if nbi { "put_signal_nbi" } else { "put_signal" };
    let data = w.malloc::<T>(LEN).ctx("malloc")?;
    let sig = w.calloc::<u64>(1).ctx("calloc")?;
    for r in 0..3u64 {
        fill(&data, |_| T::poison())?;
        c.barrier("ring setup")?;
        let slice: Vec<T> = (0..LEN - 1).map(|i| val_r(me, succ, i, r)).collect();
        let tag = |p: usize| ((p as u64 + 1) << 32) | (r + 100);
        if nbi {
            w.put_signal_nbi(
                data.at(1),
                &slice,
                sig.as_ptr(),
                tag(me),
                SignalOp::Set,
                succ,
            )
            .ctx(call)?;
        } else {
            w.put_signal(
                data.at(1),
                &slice,
                sig.as_ptr(),
                tag(me),
                SignalOp::Set,
                succ,
            )
            .ctx(call)?;
        }
        let got = w
            .signal_wait_until(sig.as_ptr(), Cmp::Eq, tag(pred))
            .ctx("signal_wait_until")?;
        expect_eq(
            format_args!("{call}(Set) ring round {r}: signal"),
            tag(pred),
            got,
        )?;
        expect_buf(
            format_args!("{call}(Set) ring round {r} from PE {pred}"),
            &data,
            |i| {
                if i == 0 {
                    T::poison()
                } else {
                    val_r(pred, me, i - 1, r)
                }
            },
        )?;
        w.quiet().ctx("quiet")?;
    }
    c.barrier("ring")?;
    w.free(sig).ctx("free")?;
    w.free(data).ctx("free")?;
    Ok(())
}

/// The signal is element 0 of the u64 buffer the data goes to (elements 1..).
fn same_allocation(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    let buf = w.calloc::<u64>(9).ctx("calloc")?;
    c.barrier("calloc")?;
    let data: Vec<u64> = (0..8).map(|i| val_r(me, succ, i, 55)).collect();
    w.put_signal(buf.at(1), &data, buf.as_ptr(), 3, SignalOp::Add, succ)
        .ctx("put_signal")?;
    w.put_signal(buf.at(1), &[], buf.as_ptr(), 4, SignalOp::Add, succ)
        .ctx("put_signal of no data")?;
    let got = w
        .signal_wait_until(buf.as_ptr(), Cmp::Eq, 7)
        .ctx("signal_wait_until")?;
    expect_eq("put_signal into the data's own allocation: signal", 7, got)?;
    let mine = buf.to_vec().ctx("SymBuf::to_vec")?;
    expect_slice(
        "put_signal into the data's own allocation: data",
        &mine[1..],
        |i| val_r(pred, me, i, 55),
    )?;
    c.barrier("same allocation")?;
    w.free(buf).ctx("free")?;
    Ok(())
}

/// signal_op(Add) from every PE to the last one, signal_op(Set) around the ring, signal_fetch.
fn signal_ops(c: &Ctx<'_>) -> R {
    let (w, me, n, succ, pred) = (c.w, c.me, c.n, c.succ(), c.pred());
    let s = w.calloc::<u64>(2).ctx("calloc")?;
    expect_eq(
        "signal_fetch of a fresh signal",
        0,
        w.signal_fetch(s.as_ptr()).ctx("signal_fetch")?,
    )?;
    c.barrier("calloc")?;
    w.signal_op(s.at(0), me as u64 + 1, SignalOp::Add, n - 1)
        .ctx("signal_op(Add)")?;
    w.signal_op(s.at(1), 0xABC0 + me as u64, SignalOp::Set, succ)
        .ctx("signal_op(Set)")?;
    if me == n - 1 {
        let want = (n * (n + 1) / 2) as u64;
        let got = w
            .signal_wait_until(s.at(0), Cmp::Eq, want)
            .ctx("signal_wait_until")?;
        expect_eq("signal_op(Add) from every PE", want, got)?;
    }
    let got = w
        .signal_wait_until(s.at(1), Cmp::Eq, 0xABC0 + pred as u64)
        .ctx("signal_wait_until")?;
    expect_eq(
        format_args!("signal_op(Set) from PE {pred}"),
        0xABC0 + pred as u64,
        got,
    )?;
    expect_eq(
        "signal_fetch after signal_op(Set)",
        0xABC0 + pred as u64,
        w.signal_fetch(s.at(1)).ctx("signal_fetch")?,
    )?;
    c.barrier("signal_op")?;
    w.free(s).ctx("free")?;
    Ok(())
}

/// signal_wait_until with each comparison. Each step's condition is false on the previous value
/// and true on the new one, which a helper thread of the previous PE writes after a delay.
fn wait_cmps(c: &Ctx<'_>) -> R {
    let (w, succ) = (c.w, c.succ());
    let sig = w.calloc::<u64>(1).ctx("calloc")?;
    sig.write(0, 100).ctx("write")?;
    c.barrier("signal_wait_until setup")?;
    let steps: [(Cmp, u64, u64); 8] = [
        (Cmp::Eq, 7, 7),
        (Cmp::Ne, 7, 1000),
        (Cmp::Gt, 1000, 1001),
        (Cmp::Ge, 2000, 2000),
        (Cmp::Lt, 2000, 5),
        (Cmp::Le, 4, 4),
        // Unsigned: u64::MAX is greater than 2^63.
        (Cmp::Gt, 1 << 63, u64::MAX),
        (Cmp::Lt, 10, 3),
    ];
    for (k, &(cmp, value, new)) in steps.iter().enumerate() {
        let writer = || -> R {
            if k == steps.len() - 1 {
                // The last step arrives through put_signal(Add): MAX + 4 wraps to 3.
                w.put_signal(sig.as_ptr(), &[], sig.as_ptr(), 4, SignalOp::Add, succ)
                    .ctx("put_signal(Add)")
            } else {
                w.signal_op(sig.as_ptr(), new, SignalOp::Set, succ)
                    .ctx("signal_op(Set)")
            }
        };
        let waiter = || -> R {
            let got = w
                .signal_wait_until(sig.as_ptr(), cmp, value)
                .ctx(format_args!("signal_wait_until({cmp:?}, {value})"))?;
            expect_eq(
                format_args!("signal_wait_until({cmp:?}, {value}) returned"),
                new,
                got,
            )?;
            // Already satisfied: returns at once with the value.
            let again = w
                .signal_wait_until(sig.as_ptr(), cmp, value)
                .ctx("signal_wait_until again")?;
            expect_eq("signal_wait_until on a satisfied signal", new, again)
        };
        after_delay(Duration::from_millis(3), writer, waiter)?;
        c.barrier("signal_wait_until step")?;
    }
    w.free(sig).ctx("free")?;
    Ok(())
}
