//! `sync-cost [remote]` — barriers, team syncs and team splits cost O(log n) rounds and
//! messages, counted (not timed) through `World::comm_counters`: each `barrier_all` runs
//! ⌈log2 n⌉ dissemination rounds; a team split runs a bounded number of syncs of the parent
//! (at most 4⌈log2 n⌉ rounds: the free-slot AND rides with the flags of one of them); an
//! `fcollect`, a `broadcast`, a `collect` and a sum `reduce` of one word each are correct.
//! With `remote` (every other PE over rshmem's TCP transport: `RSHMEM_DISABLE_P2P=1`), a
//! barrier sends exactly one flag per round and waits for no reply (no flush for flag stores),
//! a split sends no request that waits for a reply (reading every member's free-slot bitmap
//! cost n × 54 round trips per PE before), and each of those collectives sends O(log n)
//! requests per PE (the push engines): at most 2⌈log2 n⌉ + 2 round trips and 8⌈log2 n⌉ + 4
//! one-way requests (the pulls of every member's block cost n − 1 round trips before).

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

    // Every count is noted (PE 0) and checked at the end, so that a failure shows them all.
    let mut over = Vec::new();
    let mut cost = |what: &str, a: rshmem::CommCounters, b: rshmem::CommCounters| {
        if !remote {
            return;
        }
        let (rt, ow) = (
            b.tcp_round_trips - a.tcp_round_trips,
            b.tcp_one_way - a.tcp_one_way,
        );
        if me == 0 {
            crate::note!("PE 0: {what} on {n} PEs: {rt} round trips, {ow} one-way requests");
        }
        if rt > 2 * log + 2 || ow > 8 * log + 4 {
            over.push(format!("{what}: {rt} round trips, {ow} one-way"));
        }
    };
    let a = w.comm_counters();
    w.fcollect(&world, buf.as_ptr(), src.as_ptr(), 1)
        .ctx("fcollect")?;
    let b = w.comm_counters();
    // SAFETY: my own copy of a live n-element allocation, written only by the fcollect above.
    let got = unsafe { std::slice::from_raw_parts(buf.as_ptr(), n) }.to_vec();
    expect_slice("fcollect of one word", &got, |i| 1000 + i as u64)?;
    cost("fcollect of one word", a, b);

    let root = n / 2;
    let a = w.comm_counters();
    w.broadcast(&world, buf.as_ptr(), src.as_ptr(), 1, root)
        .ctx("broadcast")?;
    let b = w.comm_counters();
    // SAFETY: as above.
    let got = unsafe { buf.as_ptr().read() };
    ensure!(
        got == 1000 + root as u64,
        "broadcast of one word from PE {root} gave {got}"
    );
    cost("broadcast of one word", a, b);

    let a = w.comm_counters();
    w.reduce(&world, buf.as_ptr(), src.as_ptr(), 1, rshmem::Sum)
        .ctx("sum_reduce")?;
    let b = w.comm_counters();
    // SAFETY: as above.
    let got = unsafe { buf.as_ptr().read() };
    let want: u64 = (0..n as u64).map(|i| 1000 + i).sum();
    ensure!(
        got == want,
        "sum_reduce of one word gave {got}, expected {want}"
    );
    cost("sum_reduce of one word", a, b);

    // PE i contributes i % 2 words (every other PE none).
    let k = me % 2;
    let a = w.comm_counters();
    w.collect(&world, buf.as_ptr(), src.as_ptr(), k)
        .ctx("collect")?;
    let b = w.comm_counters();
    let odd = n / 2;
    // SAFETY: as above (`odd` <= n words).
    let got = unsafe { std::slice::from_raw_parts(buf.as_ptr(), odd) }.to_vec();
    expect_slice("collect of the odd PEs' words", &got, |i| {
        1000 + 2 * i as u64 + 1
    })?;
    cost("collect of one word per odd PE", a, b);
    ensure!(
        over.is_empty(),
        "on {n} PEs these collectives sent more than O(log n) TCP requests (at most {} round trips and {} one-way): {}",
        2 * log + 2,
        8 * log + 4,
        over.join("; ")
    );

    if me == 0 {
        crate::note!("PE 0: {n} PEs: {per} rounds per barrier_all (remote: {remote})");
    }
    Ok(())
}
