//! The functional scenarios over the TCP transport: `RSHMEM_DISABLE_P2P=1` makes every PE its
//! own node, so every other PE is remote (puts, gets, atomics, signals, barriers and team flags
//! all go over TCP), on 2, 3 and 4 PEs; and the ring examples through `rshmemrun`. Failure
//! scenarios (timeout, die) over TCP are in `faults.rs`.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Every PE its own node, on the CPU backend (the GPU heap is not reachable over TCP).
const TCP: &[(&str, &str)] = &[("RSHMEM_DISABLE_P2P", "1"), ("RSHMEM_BACKEND", "cpu")];

/// One test per scenario and PE count, with [`TCP`] plus `extra`.
macro_rules! tcp {
    ($scenario:literal, $extra:expr, $($name:ident = $n:literal),* $(,)?) => {$(
        #[test]
        fn $name() {
            let env: Vec<(&str, &str)> = TCP.iter().chain($extra.iter()).copied().collect();
            // Collectives over TCP take longest (every type, 16-bit floats included, on every
            // team shape; the 2-, 3- and 4-PE jobs side by side with the rest of this file:
            // 83 s on a loaded 2-core machine, 169 s before team splits stopped reading every
            // member's bitmap): the launcher gets 240 s there, 60 s elsewhere.
            let mut j = common::job($n, $scenario).timeout(if $scenario == "coll" { 240 } else { 60 });
            for (k, v) in &env {
                j = j.env(k, v);
            }
            j.run().assert_ok(0..$n, $scenario);
        }
    )*};
}

const NONE: &[(&str, &str)] = &[];
const HEAP: &[(&str, &str)] = &[("RSHMEM_HEAP_INITIAL", "4M"), ("RSHMEM_HEAP_LIMIT", "256M")];
const SYMMETRY: &[(&str, &str)] = &[("RSHMEM_DEBUG_SYMMETRY", "1")];

tcp!(
    "rma",
    NONE,
    rma_tcp_2pes = 2,
    rma_tcp_3pes = 3,
    rma_tcp_4pes = 4
);
tcp!(
    "amo",
    NONE,
    amo_tcp_2pes = 2,
    amo_tcp_3pes = 3,
    amo_tcp_4pes = 4
);
tcp!(
    "signal",
    NONE,
    signal_tcp_2pes = 2,
    signal_tcp_3pes = 3,
    signal_tcp_4pes = 4
);
tcp!(
    "wait",
    NONE,
    wait_tcp_2pes = 2,
    wait_tcp_3pes = 3,
    wait_tcp_4pes = 4
);
tcp!(
    "heap",
    HEAP,
    heap_tcp_2pes = 2,
    heap_tcp_3pes = 3,
    heap_tcp_4pes = 4
);
tcp!(
    "errors",
    NONE,
    errors_tcp_2pes = 2,
    errors_tcp_3pes = 3,
    errors_tcp_4pes = 4
);
tcp!(
    "symmetry",
    SYMMETRY,
    symmetry_tcp_2pes = 2,
    symmetry_tcp_3pes = 3,
    symmetry_tcp_4pes = 4
);
tcp!(
    "stream",
    NONE,
    stream_tcp_2pes = 2,
    stream_tcp_3pes = 3,
    stream_tcp_4pes = 4
);
tcp!(
    "coll",
    NONE,
    coll_tcp_2pes = 2,
    coll_tcp_3pes = 3,
    coll_tcp_4pes = 4
);

/// An example program from the same target directory as `rshmem-testpe`, built if missing.
fn example(name: &str) -> PathBuf {
    let pe = common::testpe();
    let dir = pe.parent().expect("rshmem-testpe has a parent directory");
    let path = dir.join(name);
    if !path.is_file() {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "rshmem-examples", "--bin", name]);
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
        let st = cmd.status().expect("running cargo build for an example");
        assert!(st.success(), "building {name} failed");
    }
    path
}

fn run_example(name: &str, n: usize, args: &[&str]) -> Vec<String> {
    let mut cmd = Command::new(common::rshmemrun());
    cmd.args(["-n", &n.to_string(), "--timeout", "60"])
        .arg(example(name))
        .args(args)
        .env("RSHMEM_TIMEOUT", "30");
    for (k, v) in TCP {
        cmd.env(k, v);
    }
    let r = common::run_cmd(cmd, Duration::from_secs(90));
    r.check(r.status.success(), &format!("{name} on {n} PEs failed"));
    let mut lines: Vec<String> = r.stdout.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn ring_shift_tcp() {
    for n in [2, 3, 4] {
        let mut want: Vec<String> = (0..n)
            .map(|pe| format!("{pe}: received message {}", (pe + n - 1) % n))
            .collect();
        want.sort();
        assert_eq!(
            run_example("ring_shift", n, &[]),
            want,
            "ring_shift on {n} PEs"
        );
    }
}

#[test]
fn ring_bcast_tcp() {
    for n in [2, 3, 4] {
        let mut want: Vec<String> = (0..n)
            .map(|pe| format!("{pe}: data matched (10007 elements from PE 0)"))
            .collect();
        want.sort();
        assert_eq!(
            run_example("ring_bcast", n, &["10007"]),
            want,
            "ring_bcast on {n} PEs"
        );
    }
}

/// A 128 MiB get and put (chunked into frames) between two PEs over TCP.
#[test]
fn big_transfer_tcp() {
    let env: Vec<(&str, &str)> = TCP
        .iter()
        .copied()
        .chain([("RSHMEM_HEAP_INITIAL", "4M"), ("RSHMEM_HEAP_LIMIT", "512M")])
        .collect();
    common::scenario(2, "tcp-big", &env);
}

/// Barriers, team syncs, splits and collectives over TCP cost O(log n) rounds and messages,
/// counted, not timed (`sync-cost remote`: ⌈log2 n⌉ rounds and one-way flags per barrier and
/// no round trip, a split with no round trip, an fcollect, broadcast, collect and reduce with
/// O(log n) requests each). 32 PEs start and run it
/// in about 4 s on a loaded 2-core machine.
fn sync_cost_tcp(n: usize) {
    let mut j = common::job(n, "sync-cost").arg("remote").timeout(120);
    for (k, v) in TCP {
        j = j.env(k, v);
    }
    j.run().assert_ok(0..n, "sync-cost");
}

#[test]
fn sync_cost_tcp_5pes() {
    sync_cost_tcp(5);
}

#[test]
fn sync_cost_tcp_32pes() {
    sync_cost_tcp(32);
}

/// Every host collective, checked, on 32 PEs that each reach every other over TCP (issue 30,
/// item 10). Not timed: it must finish within the generous limit, and every PE checks every
/// result. Ignored in `cargo test` (a debug build of 32 PEs beside this file's other jobs may
/// outlast the limit on 2 cores); CI runs the same job on the release build after `cargo build
/// --release --workspace` (`.ci/run`, "collectives on 32 PEs over TCP"). Run it with
/// `cargo test --release -p rshmem-tests --test remote coll_tcp_32pes -- --ignored`.
/// Measured on the 2-core build machine, release build: 89 s with waits sleeping on the
/// doorbell (568 s before them, 670 s before the push engines, at load averages of 44–215 from
/// other jobs); see docs/bench/collectives-tcp.md.
#[test]
#[ignore = "32 PEs: CI runs it on the release build (.ci/run)"]
fn coll_tcp_32pes() {
    let mut j = common::job(32, "coll")
        .timeout(900)
        .env("RSHMEM_TIMEOUT", "120");
    for (k, v) in TCP {
        j = j.env(k, v);
    }
    j.run().assert_ok(0..32, "coll");
}
