//! `shmem_p_latency`: ping-pong of single-element `p` between PE 0 and PE 1. PE 0 p's a
//! sequence number into PE 1's `ping` and waits (`wait_until`) for it to come back in its own
//! `pong`; PE 1 waits for `ping` and p's the number back. One-way latency = round trip / 2.
//!
//! Run: `target/release/rshmemrun -n 2 target/release/shmem_p_latency [--iters N] [--json]`

use std::process::ExitCode;

use rshmem::{Cmp, World};
use rshmem_perftest::{check, run, time_reps, Bench, Kind, Report, Result, Row, Spec, Stat, Word};

const SPEC: Spec = Spec {
    name: "shmem_p_latency",
    about: "p ping-pong between PE 0 and PE 1 (p, then wait_until on the answer); one-way latency = round trip / 2",
    kind: Kind::Fixed { iters: 20_000 },
    min_pes: 2,
};

/// Waits until this PE's `var` reaches `seq` and checks that it holds exactly `seq`.
#[inline]
fn await_seq<T: Word>(w: &World, var: &rshmem::SymBuf<'_, T>, seq: T, who: &str) -> Result<()> {
    w.wait_until(var.as_ptr(), Cmp::Ge, seq)?;
    let got = var.read(0).ok();
    check(got == Some(seq), || {
        format!("{who} holds {got:?}, expected {seq:?}")
    })
}

fn pingpong<T: Word>(b: &Bench<'_>, report: &Report) -> Result<()> {
    let w = b.world;
    let ping = w.calloc::<T>(1)?;
    let pong = w.calloc::<T>(1)?;
    let counts = b.fixed_counts();
    let samples = match b.me() {
        0 => Some(time_reps(counts, |k| {
            let seq = T::from_u64(k + 1);
            w.p(ping.as_ptr(), seq, 1)?;
            await_seq(w, &pong, seq, "pong on PE 0")
        })?),
        1 => {
            time_reps(counts, |k| {
                let seq = T::from_u64(k + 1);
                await_seq(w, &ping, seq, "ping on PE 1")?;
                w.p(pong.as_ptr(), seq, 0)?;
                Ok(())
            })?;
            None
        }
        _ => None,
    };
    b.barrier()?;
    w.free(pong)?;
    w.free(ping)?;
    if let Some(s) = samples {
        report.row(Row {
            op: Some(T::NAME),
            size: std::mem::size_of::<T>(),
            stat: Stat::latency_us(&s, 0.5),
            iters: s.iters,
        });
    }
    Ok(())
}

fn main() -> ExitCode {
    run(SPEC, |b| {
        let report = b.report("us", true);
        report.header(SPEC.about);
        pingpong::<u32>(b, &report)?;
        pingpong::<u64>(b, &report)
    })
}
