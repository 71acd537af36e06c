//! `symmetry` (run with `RSHMEM_DEBUG_SYMMETRY=1`): PE 0 makes a different allocation call
//! than the others (size, kind, alignment, freed address). Every PE must get
//! [`rshmem::Error::AsymmetricCall`] naming the PEs and both calls, and the job goes on.

use crate::check::{expect_contains, expect_eq, expect_err, Context, Ctx, Kind, R};
use crate::ensure;

pub fn run(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    ensure!(
        w.config().debug_symmetry,
        "run the symmetry scenario with RSHMEM_DEBUG_SYMMETRY=1"
    );
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
        expect_contains(
            what,
            &e.to_string(),
            &[
                "PE 0 called #",
                zero,
                &format!("PE {others} called #"),
                rest,
            ],
        )?;
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
        "malloc(64, 64)",
        "malloc(128, 64)",
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
        "calloc(256, 64)",
        "malloc(256, 64)",
    )?;
    let r = w.align_bytes(if me == 0 { 128 } else { 4096 }, 100);
    check(
        "align 128 vs 4096",
        r,
        "align",
        "align(100, 128)",
        "align(100, 4096)",
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
        expect_contains(
            "free of different allocations",
            &e.to_string(),
            &["PE 0 called #", &format!("PE {others} called #"), "free("],
        )?;
        w.free_bytes(b).ctx("free_bytes")?;
        w.free_bytes(a).ctx("free_bytes")?;
    }

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
