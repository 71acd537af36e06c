//! What the bootstrap alone costs per PE: start N copies under `rshmemrun` (or any launcher the
//! bootstrap reads) and each prints one line
//!
//! ```text
//! BOOT rank=<r> n=<N> rounds=<ceil(log2 N)> connect_ms=<joining the job>
//!      connect_cpu_ms=<CPU time of the process when joined, 10 ms ticks> barrier_us=<mean>
//!      allgather8_us=<mean allgather of 8 bytes> rss_kib=<VmRSS>
//! ```
//!
//! ```sh
//! cargo build --release -p rshmem-bootstrap --example bootstrap_scale
//! target/release/rshmemrun -n 256 target/release/examples/bootstrap_scale [ITERS]
//! ```
//!
//! `scripts/scale-test --boot` runs it for several N and sums the lines up.

use std::process::ExitCode;
use std::time::{Duration, Instant};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// User plus system CPU time of this process so far.
fn cpu_time() -> Duration {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let rest = &stat[stat.rfind(')')? + 1..];
            let mut f = rest.split_whitespace().skip(11);
            let utime: u64 = f.next()?.parse().ok()?;
            let stime: u64 = f.next()?.parse().ok()?;
            // Clock ticks: 100 per second on Linux (USER_HZ).
            Some(Duration::from_millis((utime + stime) * 10))
        })
        .unwrap_or_default()
}

fn main() -> ExitCode {
    let iters: u32 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 20,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("bootstrap_scale: ITERS must be a positive number");
            return ExitCode::from(2);
        }
    };
    let t0 = Instant::now();
    let (info, boot) = match rshmem_bootstrap::from_env(Some(Duration::from_secs(300))) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("bootstrap_scale: joining the job: {e}");
            return ExitCode::FAILURE;
        }
    };
    let connect = t0.elapsed();
    let connect_cpu = cpu_time();
    let run = || -> rshmem_bootstrap::Result<(Duration, Duration)> {
        boot.barrier()?;
        let t = Instant::now();
        for _ in 0..iters {
            boot.barrier()?;
        }
        let barrier = t.elapsed() / iters;
        let t = Instant::now();
        for i in 0..iters {
            let all = boot.allgather(&(u64::from(i) ^ info.rank as u64).to_le_bytes())?;
            if all.len() != boot.size() {
                return Err(rshmem_bootstrap::Error::Protocol("short allgather".into()));
            }
        }
        let allgather = t.elapsed() / iters;
        boot.barrier()?;
        Ok((barrier, allgather))
    };
    match run() {
        Ok((barrier, allgather)) => {
            let n = boot.size();
            let rounds = if n <= 1 {
                0
            } else {
                usize::BITS - (n - 1).leading_zeros()
            };
            println!(
                "BOOT rank={} n={n} rounds={rounds} connect_ms={:.3} connect_cpu_ms={} barrier_us={:.1} allgather8_us={:.1} rss_kib={}",
                boot.rank(),
                connect.as_secs_f64() * 1e3,
                connect_cpu.as_millis(),
                barrier.as_secs_f64() * 1e6,
                allgather.as_secs_f64() * 1e6,
                rss_kib()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bootstrap_scale: rank {}: {e}", boot.rank());
            ExitCode::FAILURE
        }
    }
}
