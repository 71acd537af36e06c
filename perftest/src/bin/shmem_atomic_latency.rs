//! `shmem_atomic_latency`: PE 0 runs one atomic operation at a time on a `u32` and a `u64`
//! counter of PE 1 (each op is complete when it returns, so fetching ops are a round trip).
//! The headline row is `fetch_add`; the others (`add`, `fetch_inc`, `inc`, `compare_swap`,
//! `swap`, `fetch`, `set`) use the same loop.
//!
//! Every returned value is checked against the expected sequence, and PE 1 checks the
//! counter's final value.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/shmem_atomic_latency [--iters N] [--json]`

use std::process::ExitCode;

use rshmem::SymBuf;
use rshmem_perftest::{
    check, run, time_reps, Bench, Kind, Report, Result, Row, Samples, Spec, Stat, Word,
};

const SPEC: Spec = Spec {
    name: "shmem_atomic_latency",
    about: "one atomic at a time from PE 0 on a counter of PE 1 (fetching ops are a round trip)",
    kind: Kind::Fixed { iters: 100_000 },
    min_pes: 2,
};

/// The operations measured, in output order.
const OPS: [&str; 8] = [
    "fetch_add",
    "add",
    "fetch_inc",
    "inc",
    "compare_swap",
    "swap",
    "fetch",
    "set",
];

/// Value `fetch` must read (PE 1 stores it before the `fetch` loop).
const FETCH_VALUE: u64 = 0x5a5a_1234;

/// Times `op` on PE 0 (`k` = number of earlier operations) and checks each returned value.
fn measure<T: Word>(b: &Bench<'_>, c: &SymBuf<'_, T>, op: &str) -> Result<Samples> {
    let (w, p) = (b.world, c.as_ptr());
    let counts = b.fixed_counts();
    let n = T::from_u64;
    // `bad` records the first operation whose result was wrong; checking it after the loop
    // keeps the timed loop free of error formatting.
    let mut bad: Option<(u64, T)> = None;
    let mut expect = |k: u64, got: T, want: T| -> Result<()> {
        if got != want && bad.is_none() {
            bad = Some((k, got));
        }
        Ok(())
    };
    let s = match op {
        "fetch_add" => time_reps(counts, |k| expect(k, w.atomic_fetch_add(p, n(1), 1)?, n(k)))?,
        "add" => time_reps(counts, |_| Ok(w.atomic_add(p, n(1), 1)?))?,
        "fetch_inc" => time_reps(counts, |k| expect(k, w.atomic_fetch_inc(p, 1)?, n(k)))?,
        "inc" => time_reps(counts, |_| Ok(w.atomic_inc(p, 1)?))?,
        "compare_swap" => time_reps(counts, |k| {
            expect(k, w.atomic_compare_swap(p, n(k), n(k + 1), 1)?, n(k))
        })?,
        "swap" => time_reps(counts, |k| expect(k, w.atomic_swap(p, n(k + 1), 1)?, n(k)))?,
        "fetch" => time_reps(counts, |k| expect(k, w.atomic_fetch(p, 1)?, n(FETCH_VALUE)))?,
        "set" => time_reps(counts, |k| Ok(w.atomic_set(p, n(k + 1), 1)?))?,
        _ => unreachable!("unknown op {op}"),
    };
    check(bad.is_none(), || {
        let (k, got) = bad.unwrap_or((0, n(0)));
        format!("{} {op} #{k} returned {got:?}", T::NAME)
    })?;
    Ok(s)
}

fn atomics<T: Word>(b: &Bench<'_>, report: &Report) -> Result<()> {
    let w = b.world;
    let counter = w.calloc::<T>(1)?;
    for op in OPS {
        let start = if op == "fetch" { FETCH_VALUE } else { 0 };
        if b.me() == 1 {
            counter.write(0, T::from_u64(start))?;
        }
        b.barrier()?;
        let samples = if b.me() == 0 {
            Some(measure(b, &counter, op)?)
        } else {
            None
        };
        b.barrier()?;
        if b.me() == 1 {
            let ops = b.fixed_counts().total() as u64;
            let want = T::from_u64(if op == "fetch" { FETCH_VALUE } else { ops });
            let got = counter.read(0).ok();
            check(got == Some(want), || {
                format!(
                    "{} counter after {ops} {op}: {got:?}, expected {want:?}",
                    T::NAME
                )
            })?;
        }
        b.barrier()?;
        if let Some(s) = samples {
            report.row(Row {
                op: Some(op),
                size: std::mem::size_of::<T>(),
                stat: Stat::latency_us(&s, 1.0),
                iters: s.iters,
            });
        }
    }
    w.free(counter)?;
    Ok(())
}

fn main() -> ExitCode {
    run(SPEC, |b| {
        let report = b.report("us", true);
        report.header(SPEC.about);
        atomics::<u64>(b, &report)?;
        atomics::<u32>(b, &report)
    })
}
