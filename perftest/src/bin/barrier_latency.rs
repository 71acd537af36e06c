//! `barrier_latency`: every PE runs `barrier_all` (and then `sync_all`) in a loop. Each PE times
//! its own loop; the value of a rep is the mean over the PEs (as OSU's `osu_oshm_barrier`
//! reports), and the row is the median over the reps.
//!
//! Before timing, 100 checked rounds test the barrier itself: in each round every PE `p`s the
//! round number into its slot on every PE, calls `barrier_all`, and checks that all slots hold
//! the round (two slot sets used alternately, so a fast PE cannot overwrite a round that a slow
//! PE is still checking).
//!
//! Run: `target/release/rshmemrun -n 2 target/release/barrier_latency [--iters N] [--json]`

use std::process::ExitCode;

use rshmem_perftest::{check, run, time_reps, Bench, Kind, Result, Row, Spec, Stat};

const SPEC: Spec = Spec {
    name: "barrier_latency",
    about: "barrier_all / sync_all on all PEs, back to back; value = mean over PEs of the time per call",
    kind: Kind::Fixed { iters: 20_000 },
    min_pes: 1,
};

/// Rounds of the correctness check.
const CHECK_ROUNDS: u64 = 100;

fn check_barrier(b: &Bench<'_>) -> Result<()> {
    let (w, me, n) = (b.world, b.me(), b.world.n_pes());
    let slots = w.calloc::<u64>(2 * n)?;
    for round in 1..=CHECK_ROUNDS {
        let base = (round as usize % 2) * n;
        for pe in 0..n {
            w.p(slots.at(base + me), round, pe)?;
        }
        w.barrier_all()?;
        for pe in 0..n {
            let got = slots.read(base + pe).ok();
            check(got == Some(round), || {
                format!("after barrier_all #{round}, PE {me} sees {got:?} in PE {pe}'s slot, expected {round}")
            })?;
        }
    }
    w.barrier_all()?;
    w.free(slots)?;
    Ok(())
}

fn main() -> ExitCode {
    run(SPEC, |b| {
        let (w, me, n) = (b.world, b.me(), b.world.n_pes());
        check_barrier(b)?;
        let report = b.report("us", true);
        report.header(SPEC.about);
        let counts = b.fixed_counts();
        // Every PE's per-rep times, gathered on PE 0.
        let times = w.calloc::<f64>(n * counts.reps)?;
        for op in ["barrier_all", "sync_all"] {
            w.barrier_all()?;
            let s = if op == "barrier_all" {
                time_reps(counts, |_| Ok(w.barrier_all()?))?
            } else {
                time_reps(counts, |_| Ok(w.sync_all()?))?
            };
            w.put(times.at(me * counts.reps), &s.per_op, 0)?;
            w.barrier_all()?;
            if me == 0 {
                let all = times.to_vec()?;
                let mean: Vec<f64> = (0..counts.reps)
                    .map(|r| (0..n).map(|pe| all[pe * counts.reps + r]).sum::<f64>() / n as f64)
                    .collect();
                let s = rshmem_perftest::Samples {
                    per_op: mean,
                    iters: counts.iters,
                };
                report.row(Row {
                    op: Some(op),
                    size: 0,
                    stat: Stat::latency_us(&s, 1.0),
                    iters: s.iters,
                });
            }
        }
        w.barrier_all()?;
        w.free(times)?;
        Ok(())
    })
}
