//! `symmetry`: PE 0 makes a different allocation call than the others (size, kind, alignment,
//! freed address) and passes a different root to `broadcast`. Every PE must get
//! [`rshmem::Error::AsymmetricCall`], the call must have no effect, and the job goes on.
//!
//! With `RSHMEM_DEBUG_SYMMETRY=1` the heap calls are compared through the bootstrap and the
//! error names both groups of PEs and both calls; without it the comparison rides on the
//! call's own barrier and the error names two PEs that differ (PE 0 and another) and this PE's
//! call. Broadcast roots are compared in every mode.

use crate::check::{
    expect_buf, expect_contains, expect_eq, expect_err, fill, Context, Ctx, Kind, R,
};

pub fn run(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let debug = w.config().debug_symmetry;
    let others: Vec<String> = (1..n).map(|p| p.to_string()).collect();
    let others = others.join(",");
    // `mine`: this PE's call; `theirs`: the other side's, as the error shows them.
    let check = |what: &str, r: rshmem::Result<*mut u8>, call: &str, zero: &str, rest: &str| -> R {
        if n == 1 {
            // Alone, every call matches itself.
            let p = r.ctx(what)?;
            return w.free_bytes(p).ctx("free_bytes");
        }
        let e = expect_err(what, r, Kind::Asymmetric, call)?;
        let msg = e.to_string();
        if debug {
            expect_contains(
                what,
                &msg,
                &[
                    "PE 0 called #",
                    zero,
                    &format!("PE {others} called #"),
                    rest,
                ],
            )?;
        } else {
            expect_contains(
                what,
                &msg,
                &[
                    "PEs 0 and ",
                    "made different calls here (this PE: #",
                    if me == 0 { zero } else { rest },
                    "RSHMEM_DEBUG_SYMMETRY=1",
                ],
            )?;
        }
        if me == 0 {
            crate::note!("PE 0: {what}: {e}");
        }
        Ok(())
    };
    let pick = |a: &str, b: &str| {
        if me == 0 {
            a.to_string()
        } else {
            b.to_string()
        }
    };

    let r = w.malloc_bytes(if me == 0 { 64 } else { 128 });
    check(
        "malloc of 64 vs 128 bytes",
        r,
        "malloc",
        "malloc(64 bytes)",
        "malloc(128 bytes)",
    )?;
    // Typed allocations are shown in elements of the type, not bytes and alignment.
    let r = w
        .calloc::<u64>(if me == 0 { 8 } else { 16 })
        .map(|b| b.as_ptr().cast::<u8>());
    check(
        "calloc::<u64> of 8 vs 16",
        r,
        "calloc",
        "calloc::<u64>(8)",
        "calloc::<u64>(16)",
    )?;
    let r = if me == 0 {
        w.calloc_bytes(1, 256)
    } else {
        w.malloc_bytes(256)
    };
    check(
        "calloc vs malloc",
        r,
        &pick("calloc", "malloc"),
        "calloc(1 × 256 bytes)",
        "malloc(256 bytes)",
    )?;
    let r = w.align_bytes(if me == 0 { 128 } else { 4096 }, 100);
    check(
        "align 128 vs 4096",
        r,
        "align",
        "align(alignment 128, 100 bytes)",
        "align(alignment 4096, 100 bytes)",
    )?;
    // free of different allocations.
    let a = w.malloc_bytes(64).ctx("malloc_bytes")?;
    let b = w.malloc_bytes(64).ctx("malloc_bytes")?;
    let r = w.free_bytes(if me == 0 { a } else { b });
    if n == 1 {
        r.ctx("free")?;
        w.free_bytes(b).ctx("free_bytes")?;
    } else {
        let e = expect_err("free of different allocations", r, Kind::Asymmetric, "free")?;
        let want: &[&str] = if debug {
            &["PE 0 called #", &format!("PE {others} called #"), "free("]
        } else {
            &[
                "PEs 0 and ",
                "made different calls here (this PE: #",
                "free(",
            ]
        };
        expect_contains("free of different allocations", &e.to_string(), want)?;
        w.free_bytes(b).ctx("free_bytes")?;
        w.free_bytes(a).ctx("free_bytes")?;
    }

    // Broadcast with different roots: an error on every PE, nothing moved.
    let team = w.team_world();
    let src = w.malloc::<u64>(4).ctx("malloc")?;
    let dst = w.malloc::<u64>(4).ctx("malloc")?;
    fill(&src, |i| (me * 100 + i) as u64)?;
    fill(&dst, |_| 0xBAD)?;
    c.barrier("broadcast buffers")?;
    let root = usize::from(me != 0 && n > 1);
    let r = w.broadcast(&team, dst.as_ptr(), src.as_ptr(), 4, root);
    if n == 1 {
        r.ctx("broadcast")?;
    } else {
        let e = expect_err(
            "broadcast with different roots",
            r,
            Kind::Asymmetric,
            "broadcast",
        )?;
        expect_contains(
            "broadcast with different roots",
            &e.to_string(),
            &[
                "PEs 0 and ",
                &format!("(this PE: broadcast on team world with root {root}, nelems 4"),
            ],
        )?;
        if me == 0 {
            crate::note!("PE 0: broadcast with different roots: {e}");
        }
        c.barrier("after the mismatched broadcast")?;
        expect_buf("dest after a mismatched broadcast", &dst, |_| 0xBAD)?;
    }
    w.broadcast(&team, dst.as_ptr(), src.as_ptr(), 4, 0)
        .ctx("broadcast from root 0")?;
    expect_buf("dest after a broadcast from root 0", &dst, |i| i as u64)?;
    w.free(dst).ctx("free")?;
    w.free(src).ctx("free")?;

    // Matching calls still work afterwards.
    let buf = w.calloc::<u64>(n).ctx("calloc after mismatches")?;
    for t in 0..n {
        w.p(buf.at(me), me as u64 + 10, t).ctx("p")?;
    }
    c.barrier("after mismatches")?;
    expect_eq(
        "allgather after mismatches",
        (0..n as u64).map(|p| p + 10).collect::<Vec<_>>(),
        buf.to_vec().ctx("SymBuf::to_vec")?,
    )?;
    w.free(buf).ctx("free")?;
    Ok(())
}

/// `finalize-mismatch` (2+ PEs): PE 0 calls finalize while every other PE calls barrier_all
/// (twice, as finalize has two barriers). Their barriers pair up, but the calls differ: every
/// PE must get `AsymmetricCall` naming both calls, or (a PE still in an earlier barrier round)
/// `PeerLost` naming another PE, which left after it found the mismatch; none a success
/// (barrier_all used to return Ok, and finalize too).
pub fn finalize_mismatch(world: rshmem::World) -> R {
    let me = world.my_pe();
    let world_size = world.n_pes();
    let (r, call) = if me == 0 {
        (world.finalize(), "finalize")
    } else {
        let r = world.barrier_all();
        // Leave the world unfinalized: the job cannot go on.
        std::mem::forget(world);
        (r, "barrier_all")
    };
    match r {
        Err(e @ rshmem::Error::AsymmetricCall { .. }) => {
            let msg = e.to_string();
            crate::ensure!(
                msg.starts_with(&format!("{call}: ")) && msg.contains("finalize") && msg.contains("barrier_all"),
                "the error must name this PE's call and the other: {msg}"
            );
            crate::note!("PE {me}: {call} failed as expected: {msg}");
            Ok(())
        }
        // A PE still waiting in its own barrier round may see another PE exit (after that PE
        // found the mismatch and failed) before the round that would show it the mismatch: PE 2
        // of 4 waits for PE 0 in round 1 while PE 3 has already failed and left. The job still
        // fails on this PE, naming the PE that left (never itself); never a success.
        Err(e @ rshmem::Error::PeerLost { .. })
            if (0..world_size).any(|p| p != me && e.to_string().contains(&format!("PE {p} is gone"))) =>
        {
            crate::note!("PE {me}: {call} failed when another PE left after the mismatch: {e}");
            Ok(())
        }
        other => Err(crate::check::Fail(format!(
            "{call} with PE 0 in finalize and the others in barrier_all: expected AsymmetricCall, got {other:?}"
        ))),
    }
}

/// `heap-mismatch` (3+ PEs, all on one host, with the host barrier: `RSHMEM_HOST_BARRIER=1`): PE 0 calls `malloc` (a heap call, whose barrier
/// carries an argument check) while every other PE calls `barrier_all`. In the host barrier
/// both kinds of call meet: every PE must get `AsymmetricCall` naming its call and the other,
/// none a success and none a hang (in a dissemination barrier the two pair up, and the
/// barrier_all PEs returned Ok).
pub fn heap_mismatch(c: &Ctx<'_>) -> R {
    let (w, me) = (c.w, c.me);
    let (r, mine, other) = if me == 0 {
        (w.malloc::<u64>(4).map(drop), "malloc", "barrier_all")
    } else {
        (w.barrier_all(), "barrier_all", "heap call")
    };
    match r {
        Err(e @ rshmem::Error::AsymmetricCall { .. }) => {
            let msg = e.to_string();
            crate::ensure!(
                msg.starts_with(&format!("{mine}: ")) && msg.contains(other),
                "the error must name this PE's call and the other: {msg}"
            );
            crate::note!("PE {me}: {mine} failed as expected: {msg}");
            Ok(())
        }
        other => Err(crate::check::Fail(format!(
            "{mine} with PE 0 in malloc and the others in barrier_all: expected AsymmetricCall, got {other:?}"
        ))),
    }
}
