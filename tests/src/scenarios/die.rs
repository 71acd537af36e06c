//! `die [DIR]` (2+ PEs, run with `RSHMEM_TIMEOUT=60`): the last PE exits with status 0 right
//! after init, without finalize. Every other PE's barrier_all, sync_all and malloc must fail
//! with [`rshmem::Error::PeerLost`] naming it, quickly (well before the timeout). They print
//! the errors and exit 0 without finalize.
//!
//! A survivor that left early would be a second gone PE, which a slower survivor might report
//! instead; so with DIR the survivors first wait for each other: each creates `DIR/pe<me>` and
//! leaves once all `n - 1` files exist. (Without DIR they wait one second.)

use std::time::{Duration, Instant};

use rshmem::Error;

use crate::check::{expect_contains, expect_err, Ctx, Fail, Kind, R};
use crate::ensure;

pub fn run(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let dead = n - 1;
    if me == dead {
        std::process::exit(0);
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
    match c.args.first() {
        Some(dir) => meet(std::path::Path::new(dir), me, n - 1),
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
    crate::check::poll_until(
        "waiting for the other survivors' marker files",
        Duration::from_secs(20),
        || {
            let n = std::fs::read_dir(dir)
                .map_err(|e| Fail(format!("reading {}: {e}", dir.display())))?
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("pe"))
                })
                .count();
            if n < count {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok((n >= count).then_some(()))
        },
    )
}
