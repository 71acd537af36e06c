//! `die-finalize` (2+ PEs, `RSHMEM_TIMEOUT=60`): the last PE takes part in finalize's first
//! barrier (through `World::finalize_first_barrier_for_tests`) and exits with status 0 before the
//! second. Every other PE's finalize must fail with [`rshmem::Error::PeerLost`] naming it
//! within seconds, not wait out the timeout (finalize once stopped watching its peers between
//! its two barriers).
//!
//! `die [DIR]` (2+ PEs, run with `RSHMEM_TIMEOUT=60`): the last PE exits with status 0 right
//! after init and one allocation, without finalize. Every other PE's barrier_all, sync_all,
//! malloc and (after a put to it) quiet must fail
//! with [`rshmem::Error::PeerLost`] naming it, quickly (well before the timeout). They print
//! the errors and exit 0 without finalize.
//!
//! A survivor that left early would be a second gone PE, which a slower survivor might report
//! instead; so with DIR the survivors first wait for each other: each creates `DIR/pe<me>` and
//! leaves once all `n - 1` files exist. (Without DIR they wait one second.)

use std::time::{Duration, Instant};

use rshmem::{Error, World};

use crate::check::{expect_contains, expect_err, Ctx, Fail, Kind, R};
use crate::ensure;

pub fn run(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let dead = n - 1;
    let buf = w
        .malloc::<u64>(1)
        .map_err(|e| Fail(format!("malloc: {e}")))?;
    // The last PE leaves only once every survivor is out of the allocation's barrier (a PE
    // seen gone fails every wait still in progress, even one its stores would complete).
    let dir = c.args.first().map(std::path::Path::new);
    if me == dead {
        match dir {
            Some(d) => marked(d, "alloc", n - 1)?,
            None => std::thread::sleep(Duration::from_secs(1)),
        }
        std::process::exit(0);
    }
    if let Some(d) = dir {
        std::fs::write(d.join(format!("alloc{me}")), b"")
            .map_err(|e| Fail(format!("creating a marker file in {}: {e}", d.display())))?;
    }
    let timeout = w.config().timeout;
    ensure!(
        timeout == Some(Duration::from_secs(60)),
        "run the die scenario with RSHMEM_TIMEOUT=60 (timeout is {timeout:?})"
    );
    let check = |call: &str, r: rshmem::Result<()>, start: Instant| -> R {
        let el = start.elapsed();
        let e = expect_err(
            format_args!("{call} with PE {dead} gone"),
            r,
            Kind::PeerLost,
            call,
        )?;
        let Error::PeerLost { me: m, pe, .. } = &e else {
            return Err(Fail(format!("{call}: not PeerLost: {e}")));
        };
        ensure!(
            *m == me && *pe == dead,
            "{call}: PeerLost names PEs {m} and {pe}, expected {me} and {dead}: {e}"
        );
        expect_contains(
            call,
            &e.to_string(),
            &[&format!("{call} on PE {me}"), &format!("PE {dead} is gone")],
        )?;
        ensure!(
            el < Duration::from_secs(10),
            "{call}: PeerLost came after {el:?}"
        );
        crate::note!(
            "PE {me}: {call} failed as expected after {} ms: {e}",
            el.as_millis()
        );
        Ok(())
    };
    let start = Instant::now();
    check("barrier_all", w.barrier_all(), start)?;
    let start = Instant::now();
    check("sync_all", w.sync_all(), start)?;
    let start = Instant::now();
    check("malloc", w.malloc::<u64>(4).map(drop), start)?;
    // A put to the gone PE may be accepted (on shared memory it lands in memory nobody reads),
    // but quiet must not report it complete.
    let _ = w.p(buf.as_ptr(), 1, dead);
    let start = Instant::now();
    check("quiet", w.quiet(), start)?;
    match dir {
        Some(dir) => meet(dir, me, n - 1),
        None => {
            std::thread::sleep(Duration::from_secs(1));
            Ok(())
        }
    }
}

/// Creates `dir/pe<me>` and waits until `count` such files exist.
fn meet(dir: &std::path::Path, me: usize, count: usize) -> R {
    std::fs::write(dir.join(format!("pe{me}")), b"").map_err(|e| {
        Fail(format!(
            "creating the marker file in {}: {e}",
            dir.display()
        ))
    })?;
    marked(dir, "pe", count)
}

/// Waits until `count` files whose names start with `prefix` exist in `dir`.
fn marked(dir: &std::path::Path, prefix: &str, count: usize) -> R {
    crate::check::poll_until(
        "waiting for the other PEs' marker files",
        Duration::from_secs(20),
        || {
            let n = std::fs::read_dir(dir)
                .map_err(|e| Fail(format!("reading {}: {e}", dir.display())))?
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(prefix))
                })
                .count();
            if n < count {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok((n >= count).then_some(()))
        },
    )
}

/// The `die-finalize` scenario (it ends the World itself).
pub fn finalize(world: World) -> R {
    let (me, n) = (world.my_pe(), world.n_pes());
    let dead = n - 1;
    let timeout = world.config().timeout;
    ensure!(
        timeout == Some(Duration::from_secs(60)),
        "run the die-finalize scenario with RSHMEM_TIMEOUT=60 (timeout is {timeout:?})"
    );
    if me == dead {
        // Makes the survivors' first finalize barrier with them (a barrier_all would not pair
        // with it: the barriers' flags carry the kind of call), then leaves before the second.
        let code = i32::from(world.finalize_first_barrier_for_tests().is_err());
        std::process::exit(code);
    }
    let start = Instant::now();
    let r = world.finalize();
    let el = start.elapsed();
    let e = expect_err(
        format_args!("finalize with PE {dead} gone before its last barrier"),
        r,
        Kind::PeerLost,
        "finalize",
    )?;
    let Error::PeerLost { me: m, pe, .. } = &e else {
        return Err(Fail(format!("finalize: not PeerLost: {e}")));
    };
    ensure!(
        *m == me && *pe == dead,
        "finalize: PeerLost names PEs {m} and {pe}, expected {me} and {dead}: {e}"
    );
    ensure!(
        el < Duration::from_secs(10),
        "finalize: PeerLost came after {el:?}"
    );
    crate::note!(
        "PE {me}: finalize failed as expected after {} ms: {e}",
        el.as_millis()
    );
    Ok(())
}
