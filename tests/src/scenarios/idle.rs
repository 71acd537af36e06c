//! `idle` — one-sided operations complete while the target PE is not calling rshmem, and an
//! idle PE costs no CPU: PE 1 sleeps outside rshmem for 1.5 s while PE 0 (after 0.2 s) does an
//! atomic, a put and a get on it, each of which must finish within 1 s (before PE 1 wakes:
//! the target's transport progresses on its own). PE 1's process must use under 0.3 s of CPU
//! time during its sleep (no thread of the runtime spins while nothing is in flight). Needs 2+
//! PEs; the others only take part in the barriers.

use std::time::{Duration, Instant};

use crate::check::{Context, Ctx, R};
use crate::ensure;

/// User plus system CPU time of this process.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Runs the checks.
pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    let cell = w.calloc::<u64>(4).ctx("calloc")?;
    c.barrier("calloc")?;
    if c.me == 1 {
        let t0 = cpu_time();
        std::thread::sleep(Duration::from_millis(1500));
        let used = cpu_time() - t0;
        ensure!(
            used < Duration::from_millis(300),
            "PE 1 used {used:?} of CPU while sleeping 1.5 s outside rshmem (a busy thread?)"
        );
    } else if c.me == 0 {
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        let old = w
            .atomic_fetch_add(cell.at(0), 5u64, 1)
            .ctx("atomic_fetch_add")?;
        ensure!(
            old == 0,
            "atomic_fetch_add on sleeping PE 1: old value {old}, expected 0"
        );
        w.putmem(cell.at(1).cast(), &7u64.to_le_bytes(), 1)
            .ctx("putmem")?;
        w.quiet().ctx("quiet")?;
        let mut got = [0u8; 8];
        w.getmem(&mut got, cell.at(1).cast(), 1).ctx("getmem")?;
        ensure!(
            u64::from_le_bytes(got) == 7,
            "get after put on sleeping PE 1: {got:?}"
        );
        let took = t.elapsed();
        ensure!(
            took < Duration::from_secs(1),
            "an atomic, put, quiet and get on PE 1 while it sleeps outside rshmem took {took:?} (does its transport progress on its own?)"
        );
    }
    c.barrier("idle")?;
    if c.me == 1 {
        let v: u64 = w.atomic_fetch(cell.at(0), 1).ctx("atomic_fetch")?;
        ensure!(v == 5, "PE 1's cell after PE 0's atomic: {v}, expected 5");
    }
    c.barrier("check")?;
    w.free(cell).ctx("free")
}
