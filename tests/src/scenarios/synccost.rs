//! `sync-cost [remote]` — barriers, team syncs and team splits cost O(log n) rounds and
//! messages, counted (not timed) through `World::comm_counters`: each `barrier_all` runs
//! ⌈log2 n⌉ dissemination rounds; a team split runs a bounded number of syncs of the parent
//! (at most 4⌈log2 n⌉ rounds: the free-slot AND rides with the flags of one of them); an
//! `fcollect` of one word gets it from every member and is correct. With `remote` (every
//! other PE over rshmem's TCP transport: `RSHMEM_DISABLE_P2P=1`), a barrier sends exactly
//! one flag per round and waits for no reply (no flush for flag stores), a split sends no
//! request that waits for a reply (reading every member's free-slot bitmap cost n × 54 round
//! trips per PE before), and an `fcollect` one round trip per remote member.

use crate::check::{expect_slice, Context, Ctx, R};
use crate::ensure;

/// ⌈log2 n⌉ (0 for n = 1).
fn rounds(n: usize) -> u64 {
    u64::from(usize::BITS - n.saturating_sub(1).leading_zeros())
}

/// Runs the checks.
pub fn run(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let remote = c.args.first().is_some_and(|a| a == "remote");
    let log = rounds(n);
    let buf = w.malloc::<u64>(n).ctx("malloc")?;
    let src = w.malloc::<u64>(1).ctx("malloc")?;
    // SAFETY: my own copy of a live one-element allocation.
    unsafe { src.as_ptr().write(1000 + me as u64) };
    c.barrier("malloc")?;

    const K: u64 = 40;
    let a = w.comm_counters();
    for _ in 0..K {
        w.barrier_all().ctx("barrier_all")?;
    }
    let b = w.comm_counters();
    let per = (b.sync_rounds - a.sync_rounds) as f64 / K as f64;
    ensure!(
        b.sync_rounds - a.sync_rounds == K * log,
        "{K} barrier_all on {n} PEs ran {} dissemination rounds, expected {} (⌈log2 {n}⌉ = {log} each)",
        b.sync_rounds - a.sync_rounds,
        K * log
    );
    if remote {
        ensure!(
            b.tcp_one_way - a.tcp_one_way == K * log,
            "{K} barrier_all on {n} PEs sent {} one-way TCP requests, expected one flag per round ({})",
            b.tcp_one_way - a.tcp_one_way,
            K * log
        );
        ensure!(
            b.tcp_round_trips == a.tcp_round_trips,
            "{K} barrier_all with nothing outstanding made {} TCP round trips (flushes of flag stores?)",
            b.tcp_round_trips - a.tcp_round_trips
        );
    }

    let world = w.team_world();
    let a = w.comm_counters();
    let even = w
        .team_split_strided(&world, 0, 2, n.div_ceil(2))
        .ctx("team_split_strided")?;
    let b = w.comm_counters();
    ensure!(
        b.sync_rounds - a.sync_rounds <= 4 * log,
        "team_split_strided on {n} PEs ran {} dissemination rounds (more than 4 × ⌈log2 {n}⌉)",
        b.sync_rounds - a.sync_rounds
    );
    if remote {
        ensure!(
            b.tcp_round_trips == a.tcp_round_trips,
            "team_split_strided on {n} PEs made {} TCP round trips, expected none",
            b.tcp_round_trips - a.tcp_round_trips
        );
        ensure!(
            b.tcp_one_way - a.tcp_one_way <= 8 * log,
            "team_split_strided on {n} PEs sent {} one-way TCP requests (more than 8 × ⌈log2 {n}⌉)",
            b.tcp_one_way - a.tcp_one_way
        );
    }
    if let Some(t) = &even {
        let a = w.comm_counters();
        for _ in 0..K {
            w.team_sync(t).ctx("team_sync")?;
        }
        let b = w.comm_counters();
        let tl = rounds(t.n_pes());
        ensure!(
            b.sync_rounds - a.sync_rounds == K * tl,
            "{K} team_sync on {} PEs ran {} rounds, expected {}",
            t.n_pes(),
            b.sync_rounds - a.sync_rounds,
            K * tl
        );
        w.team_destroy(t.clone()).ctx("team_destroy")?;
    }

    let a = w.comm_counters();
    w.fcollect(&world, buf.as_ptr(), src.as_ptr(), 1)
        .ctx("fcollect")?;
    let b = w.comm_counters();
    // SAFETY: my own copy of a live n-element allocation, written only by the fcollect above.
    let got = unsafe { std::slice::from_raw_parts(buf.as_ptr(), n) };
    expect_slice("fcollect of one word", got, |i| 1000 + i as u64)?;
    if remote {
        ensure!(
            b.tcp_round_trips - a.tcp_round_trips == (n - 1) as u64,
            "fcollect of one word on {n} PEs made {} TCP round trips, expected one per remote member ({})",
            b.tcp_round_trips - a.tcp_round_trips,
            n - 1
        );
    }
    if me == 0 {
        crate::note!("PE 0: {n} PEs: {per} rounds per barrier_all (remote: {remote})");
    }
    Ok(())
}
