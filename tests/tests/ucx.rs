//! The functional scenarios over the UCX transport (`RSHMEM_REMOTE_TRANSPORT=ucx`), UCX itself
//! restricted to TCP (`UCX_TLS=tcp`, so RMA and atomics are emulated by UCX and need the
//! target's progress thread): `RSHMEM_DISABLE_P2P=1` makes every PE its own node, so every
//! other PE is reached through UCX. Also: the ring examples through `rshmemrun`, one-sided
//! operations on a PE that sleeps outside rshmem, the capability bits, and a forced UCX that
//! cannot be loaded failing cleanly at init on every PE.
//!
//! When libucp cannot be loaded on this machine every test here says `SKIPPED` and passes
//! (CI installs Debian's `libucx-dev`, so they run there).

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Every PE its own node, on the CPU backend, every pair over UCX on TCP. A UCX that emulates
/// RMA over TCP (1.13 here) is accepted (`RSHMEM_UCX_EMULATED_RMA=1`): these tests kill no PE
/// in the middle of a put stream.
const UCX: &[(&str, &str)] = &[
    ("RSHMEM_DISABLE_P2P", "1"),
    ("RSHMEM_BACKEND", "cpu"),
    ("RSHMEM_REMOTE_TRANSPORT", "ucx"),
    ("UCX_TLS", "tcp"),
    ("RSHMEM_UCX_EMULATED_RMA", "1"),
];

/// True (after saying so) when UCX cannot be loaded here.
fn skip() -> bool {
    match rshmem::probe_ucx(None) {
        Ok(_) => false,
        Err(e) => {
            eprintln!("SKIPPED: UCX is not available here: {e}");
            true
        }
    }
}

/// Runs `scenario` on `n` PEs with [`UCX`] plus `extra`; `secs` bounds the launcher.
fn run(n: usize, scenario: &str, extra: &[(&str, &str)], secs: u32) {
    let mut j = common::job(n, scenario).timeout(secs);
    for (k, v) in UCX.iter().chain(extra) {
        j = j.env(k, v);
    }
    if scenario == "transports" {
        j = j.arg("ucx");
    }
    j.run().assert_ok(0..n, scenario);
}

/// One test per scenario and PE count.
macro_rules! ucx {
    ($scenario:literal, $extra:expr, $secs:literal, $($name:ident = $n:literal),* $(,)?) => {$(
        #[test]
        fn $name() {
            if skip() {
                return;
            }
            run($n, $scenario, $extra, $secs);
        }
    )*};
}

const NONE: &[(&str, &str)] = &[];
const HEAP: &[(&str, &str)] = &[("RSHMEM_HEAP_INITIAL", "4M"), ("RSHMEM_HEAP_LIMIT", "256M")];
const SYMMETRY: &[(&str, &str)] = &[("RSHMEM_DEBUG_SYMMETRY", "1")];
const BIG: &[(&str, &str)] = &[("RSHMEM_HEAP_INITIAL", "4M"), ("RSHMEM_HEAP_LIMIT", "512M")];

ucx!(
    "rma",
    NONE,
    60,
    rma_ucx_2pes = 2,
    rma_ucx_3pes = 3,
    rma_ucx_4pes = 4
);
ucx!(
    "amo",
    NONE,
    60,
    amo_ucx_2pes = 2,
    amo_ucx_3pes = 3,
    amo_ucx_4pes = 4
);
ucx!(
    "signal",
    NONE,
    60,
    signal_ucx_2pes = 2,
    signal_ucx_3pes = 3,
    signal_ucx_4pes = 4
);
ucx!(
    "wait",
    NONE,
    60,
    wait_ucx_2pes = 2,
    wait_ucx_3pes = 3,
    wait_ucx_4pes = 4
);
ucx!(
    "heap",
    HEAP,
    60,
    heap_ucx_2pes = 2,
    heap_ucx_3pes = 3,
    heap_ucx_4pes = 4
);
ucx!(
    "errors",
    NONE,
    60,
    errors_ucx_2pes = 2,
    errors_ucx_3pes = 3,
    errors_ucx_4pes = 4
);
ucx!(
    "symmetry",
    SYMMETRY,
    60,
    symmetry_ucx_2pes = 2,
    symmetry_ucx_3pes = 3,
    symmetry_ucx_4pes = 4
);
ucx!(
    "stream",
    NONE,
    60,
    stream_ucx_2pes = 2,
    stream_ucx_3pes = 3,
    stream_ucx_4pes = 4
);
ucx!(
    "coll",
    NONE,
    600,
    coll_ucx_2pes = 2,
    coll_ucx_3pes = 3,
    coll_ucx_4pes = 4
);
ucx!(
    "transports",
    NONE,
    60,
    transports_ucx_2pes = 2,
    transports_ucx_3pes = 3,
    transports_ucx_4pes = 4
);
ucx!("idle", NONE, 60, idle_ucx_2pes = 2, idle_ucx_3pes = 3);
// Atomics and signals on the user heap applied by rshmem on the target (UCX active messages),
// the path every GPU heap takes over UCX, here on the CPU backend.
const TARGET_AMO: &[(&str, &str)] = &[("RSHMEM_UCX_TARGET_ATOMICS", "1")];
ucx!(
    "amo",
    TARGET_AMO,
    60,
    amo_ucx_target_atomics_2pes = 2,
    amo_ucx_target_atomics_3pes = 3,
    amo_ucx_target_atomics_4pes = 4
);
ucx!(
    "signal",
    TARGET_AMO,
    60,
    signal_ucx_target_atomics_2pes = 2,
    signal_ucx_target_atomics_3pes = 3
);
ucx!(
    "wait",
    TARGET_AMO,
    60,
    wait_ucx_target_atomics_2pes = 2,
    wait_ucx_target_atomics_3pes = 3
);
ucx!("errors", TARGET_AMO, 60, errors_ucx_target_atomics_2pes = 2);
const HEAP_TARGET_AMO: &[(&str, &str)] = &[
    ("RSHMEM_HEAP_INITIAL", "4M"),
    ("RSHMEM_HEAP_LIMIT", "256M"),
    ("RSHMEM_UCX_TARGET_ATOMICS", "1"),
];
ucx!(
    "heap",
    HEAP_TARGET_AMO,
    60,
    heap_ucx_target_atomics_2pes = 2
);
ucx!("idle", TARGET_AMO, 60, idle_ucx_target_atomics_2pes = 2);
// A 128 MiB get and put crossing the heap's chunks (each mapped and keyed separately).
ucx!("tcp-big", BIG, 120, big_transfer_ucx = 2);
// Endpoints without UCX's peer-failure handling (`RSHMEM_UCX_ERROR_MODE=none`, the `auto`
// choice for UCX 1.14-1.19 over TCP; those versions are not installed here).
const NO_PEER_ERRORS: &[(&str, &str)] = &[("RSHMEM_UCX_ERROR_MODE", "none")];
ucx!("rma", NO_PEER_ERRORS, 60, rma_ucx_no_peer_errors_3pes = 3);
ucx!("amo", NO_PEER_ERRORS, 60, amo_ucx_no_peer_errors_3pes = 3);
ucx!(
    "signal",
    NO_PEER_ERRORS,
    60,
    signal_ucx_no_peer_errors_2pes = 2
);
ucx!("coll", NO_PEER_ERRORS, 90, coll_ucx_no_peer_errors_3pes = 3);
const BIG_NO_PEER_ERRORS: &[(&str, &str)] = &[
    ("RSHMEM_HEAP_INITIAL", "4M"),
    ("RSHMEM_HEAP_LIMIT", "512M"),
    ("RSHMEM_UCX_ERROR_MODE", "none"),
];
ucx!(
    "tcp-big",
    BIG_NO_PEER_ERRORS,
    120,
    big_transfer_ucx_no_peer_errors = 2
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

#[test]
fn ring_shift_ucx() {
    if skip() {
        return;
    }
    for n in [2, 3, 4] {
        let mut cmd = Command::new(common::rshmemrun());
        cmd.args(["-n", &n.to_string(), "--timeout", "60"])
            .arg(example("ring_shift"))
            .env("RSHMEM_TIMEOUT", "30");
        for (k, v) in UCX {
            cmd.env(k, v);
        }
        let r = common::run_cmd(cmd, Duration::from_secs(90));
        r.check(r.status.success(), &format!("ring_shift on {n} PEs failed"));
        let mut got: Vec<String> = r.stdout.lines().map(str::to_string).collect();
        got.sort();
        let mut want: Vec<String> = (0..n)
            .map(|pe| format!("{pe}: received message {}", (pe + n - 1) % n))
            .collect();
        want.sort();
        assert_eq!(got, want, "ring_shift on {n} PEs over UCX");
    }
}

/// `RSHMEM_REMOTE_TRANSPORT=ucx` with a libucp that cannot be loaded: every PE fails at init
/// with an error naming the library, none panics or waits for the others. Runs everywhere
/// (it needs no UCX).
#[test]
fn ucx_forced_without_a_library_fails_cleanly_at_init() {
    for n in [2, 3] {
        let mut j = common::job(n, "rma");
        for (k, v) in UCX {
            j = j.env(k, v);
        }
        let r = j.env("RSHMEM_UCX_LIB", "/nonexistent/libucp.so.0").run();
        r.check(!r.status.success(), "the job should fail");
        r.check(
            r.elapsed < Duration::from_secs(25),
            "every PE should fail at once, not wait for the others",
        );
        r.check(!r.stderr.contains("panicked"), "a PE panicked");
        let fails: Vec<&str> = r.stderr.lines().filter(|l| l.contains(": FAIL ")).collect();
        r.check(!fails.is_empty(), "some PE should report its init error");
        for l in fails {
            r.check(
                l.contains("RSHMEM_REMOTE_TRANSPORT=ucx but UCX is unavailable")
                    && l.contains("/nonexistent/libucp.so.0"),
                &format!("a clean init error naming the library: {l}"),
            );
        }
    }
}

/// One host (no remote PE): forcing UCX needs nothing and changes nothing.
#[test]
fn local_pes_use_load_store_with_ucx_forced() {
    common::job(3, "transports")
        .env("RSHMEM_BACKEND", "cpu")
        .env("RSHMEM_REMOTE_TRANSPORT", "ucx")
        .env("RSHMEM_UCX_LIB", "/nonexistent/libucp.so.0")
        .run()
        .assert_ok(0..3, "transports");
}

/// UCX left to choose its own transports (`UCX_TLS=all`, UCX's default: on one host it may use
/// shared memory and CMA as well as TCP): RMA, atomics and signals still work.
#[test]
fn ucx_own_transport_choice() {
    if skip() {
        return;
    }
    for scenario in ["rma", "amo", "signal"] {
        let mut j = common::job(3, scenario);
        for (k, v) in UCX.iter().filter(|(k, _)| *k != "UCX_TLS") {
            j = j.env(k, v);
        }
        j = j.env("UCX_TLS", "all");
        j.run().assert_ok(0..3, scenario);
    }
}

/// Puts over UCX on TCP take UCX's zero-copy RMA lane, not its active-message emulation. With
/// peer-failure handling on, a UCX of 1.20 or newer opens that lane only when rendezvous is
/// off, which rshmem sets (`UCX_RNDV_THRESH=inf`) unless the user set it (then the user's value
/// wins, and puts are emulated); UCX 1.14-1.19 never open it, so `RSHMEM_UCX_ERROR_MODE=auto`
/// turns the handling off there (`peer` brings the emulation back). UCX 1.13 prints no protocol
/// tables: the test checks only where the rules apply.
#[test]
fn ucx_puts_take_the_rma_lane() {
    let Ok(p) = rshmem::probe_ucx(None) else {
        eprintln!("SKIPPED: UCX is not available here");
        return;
    };
    let v = (p.version.0, p.version.1);
    if v < (1, 14) {
        eprintln!("SKIPPED: UCX {:?} prints no protocol tables", p.version);
        return;
    }
    // The protocol UCX chose for host-to-host puts, from its UCX_PROTO_INFO tables.
    let put_protocols = |extra: &[(&str, &str)]| {
        let mut j = common::job(2, "rma").env("UCX_PROTO_INFO", "y");
        for (k, v) in UCX.iter().chain(extra) {
            j = j.env(k, v);
        }
        let r = j.run();
        // UCX prints its tables on stdout, between the scenario's lines.
        r.check(r.status.success(), "the rma scenario failed");
        let mut rows = Vec::new();
        let mut in_put = false;
        for line in r.stdout.lines() {
            if line.contains("remote memory write by ucp_put") {
                in_put = line.contains("from host memory to host");
            } else if line.contains("by ucp_") {
                in_put = false;
            } else if in_put && line.contains("tcp/") {
                rows.push(line.to_string());
            }
        }
        assert!(
            !rows.is_empty(),
            "no UCX protocol table for host puts:\n{}",
            r.report()
        );
        rows
    };
    let ours = put_protocols(&[]);
    assert!(
        ours.iter().all(|l| !l.contains("software emulation")),
        "puts are emulated with rshmem's UCX settings: {ours:#?}"
    );
    let (setting, why) = if v >= (1, 20) {
        (
            ("UCX_RNDV_THRESH", "auto"),
            "the user's UCX_RNDV_THRESH=auto wins",
        )
    } else {
        (
            ("RSHMEM_UCX_ERROR_MODE", "peer"),
            "peer-failure handling asked for",
        )
    };
    let emulated = put_protocols(&[setting]);
    assert!(
        emulated.iter().any(|l| l.contains("software emulation")),
        "UCX should emulate puts ({why}): {emulated:#?}"
    );
}

/// The last PE exits right after init: the others' barrier, sync and malloc fail with
/// `PeerLost` naming it (UCX reports its endpoint failed; the progress thread tells the job),
/// well before `RSHMEM_TIMEOUT`; with UCX's peer-failure handling and without it
/// (`RSHMEM_UCX_ERROR_MODE`: UCX calls the endpoint's error handler in both modes when the
/// connection closes).
#[test]
fn die_ucx() {
    if skip() {
        return;
    }
    for (n, mode) in [(2, "peer"), (3, "peer"), (2, "none"), (3, "none")] {
        let dir = common::TempDir::new();
        let mut j = common::job(n, "die")
            .arg(dir.arg())
            .env("RSHMEM_TIMEOUT", "60")
            .env("RSHMEM_UCX_ERROR_MODE", mode)
            .timeout(20);
        for (k, v) in UCX {
            j = j.env(k, v);
        }
        let r = j.run();
        r.assert_ok(0..n - 1, "die");
        let dead = n - 1;
        for pe in 0..dead {
            for call in ["barrier_all", "sync_all", "malloc"] {
                let prefix = format!("PE {pe}: {call} failed as expected after ");
                let lines = r.stderr_lines(&prefix);
                r.check(
                    lines.len() == 1
                        && lines[0].contains(&format!("{call} on PE {pe}: PE {dead} is gone")),
                    &format!("expected PE {pe}'s {call} to report PE {dead} gone"),
                );
            }
        }
        r.check(
            r.elapsed < Duration::from_secs(10),
            "PeerLost must come well before RSHMEM_TIMEOUT (60 s)",
        );
    }
}

/// Waits and a barrier run past `RSHMEM_TIMEOUT=1` over UCX and fail with `Timeout`.
#[test]
fn timeout_ucx() {
    if skip() {
        return;
    }
    let n = 3;
    let mut j = common::job(n, "timeout")
        .env("RSHMEM_TIMEOUT", "1")
        .timeout(30);
    for (k, v) in UCX {
        j = j.env(k, v);
    }
    let r = j.run();
    r.assert_ok(0..n, "timeout");
    r.check(
        r.elapsed < Duration::from_secs(15),
        "the timeout scenario took too long",
    );
}

/// Every descriptor init opened is close-on-exec over UCX too: UCX 1.13 opens its epoll sets,
/// pipes, timerfd and sockets inheritable, and init marks them.
#[test]
fn init_opens_only_close_on_exec_descriptors_ucx() {
    if skip() {
        return;
    }
    run(3, "fds", NONE, 60);
}

/// One `kill-stream` job of `n` PEs started without a launcher (so that nothing stops the
/// survivors): the last PE streams puts (`mixed`: and gets and atomics) to the others over UCX
/// on TCP and kills itself after `delay_ms`; returns each PE's run.
fn kill_job(n: usize, delay_ms: u64, mixed: bool, extra: &[(&str, &str)]) -> Vec<common::Run> {
    let delay = delay_ms.to_string();
    let mut args = vec!["kill-stream", delay.as_str()];
    if mixed {
        args.push("mixed");
    }
    let mut env = vec![("RSHMEM_TIMEOUT", "10")];
    env.extend(
        UCX.iter()
            .copied()
            .filter(|(k, _)| *k != "RSHMEM_UCX_EMULATED_RMA"),
    );
    env.extend(extra.iter().copied());
    common::unlaunched(n, &args, &env, Duration::from_secs(60))
}

/// A survivor never aborts inside UCX when a peer that was putting to it is killed: its
/// barrier fails with `PeerLost` naming the killed PE, and it exits 0. Run 8 times with 2 PEs
/// (UCX 1.13.1 aborted in 2 of 3 such runs, `ucp_request.inl: Fatal: unexpected error:
/// Endpoint timeout` in its put handler: 8 runs miss it with odds below 1 in 5000) and twice
/// with 3 PEs and gets and atomics mixed in. A UCX that would emulate RMA over TCP is refused
/// at init instead, on every PE, naming the cause (then only that is checked: CI runs this
/// test with UCX 1.13, which is refused, and 1.22, which runs the loop).
#[test]
fn ucx_survivors_of_a_killed_peer_never_abort() {
    if skip() {
        return;
    }
    let first = kill_job(2, 150, false, &[]);
    if first
        .iter()
        .all(|r| r.stderr.contains("software emulation over TCP"))
    {
        for r in &first {
            r.check(
                !r.status.success() && r.stderr.contains("RSHMEM_UCX_EMULATED_RMA=1"),
                "a UCX that emulates RMA must be refused at init, naming the way out",
            );
        }
        eprintln!("this UCX emulates RMA over TCP: refused at init (checked); no kill loop");
        return;
    }
    let runs = [
        (2, 150, false),
        (2, 90, false),
        (2, 230, false),
        (2, 310, false),
    ]
    .into_iter()
    .chain([(2, 120, false), (2, 270, false), (2, 190, false)])
    .chain([(3, 200, true), (3, 260, true)]);
    let mut all = vec![(2usize, first)];
    for (n, delay, mixed) in runs {
        all.push((n, kill_job(n, delay, mixed, &[])));
    }
    for (n, job) in &all {
        let dead = n - 1;
        for (pe, r) in job.iter().enumerate() {
            if pe == dead {
                r.check(
                    r.status.signal() == Some(9),
                    "the streaming PE must have killed itself",
                );
                continue;
            }
            r.check(
                !r.stderr.contains("Fatal:") && r.status.signal().is_none(),
                &format!("survivor PE {pe} aborted (inside UCX?)"),
            );
            r.check(
                r.status.success()
                    && r.stderr
                        .contains(&format!("PE {pe}: barrier_all failed as expected after"))
                    && r.stderr.contains(&format!("PE {dead} is gone")),
                &format!("survivor PE {pe} must report PE {dead} lost and exit 0"),
            );
        }
    }
}

/// A stopped peer over UCX: PE 1 stops itself (SIGSTOP) while PE 0 puts 1 MiB blocks to it;
/// PE 0's put times out after `RSHMEM_TIMEOUT=5` naming PE 1 ("waiting for PE 1 to complete a
/// put over UCX": UCX's waits named no PE), and the job ends within the timeout plus the
/// launcher's grace (no wait of one operation takes the limit twice).
#[test]
fn stopped_peer_ucx() {
    if skip() {
        return;
    }
    let mut j = common::job(2, "tcp-stop")
        .env("RSHMEM_TIMEOUT", "5")
        .timeout(60);
    for (k, v) in UCX {
        j = j.env(k, v);
    }
    let r = j.run();
    r.check(
        r.status.code() == Some(3),
        "rshmemrun must exit with PE 0's status 3 (its put to the stopped PE failed)",
    );
    let lines = r.stderr_lines("PE 0: putmem to the stopped PE 1 failed as expected after ");
    r.check(
        lines.len() == 1
            && lines[0].contains("timed out after 5s waiting for PE 1 to complete a put over UCX"),
        "PE 0 must report putmem timing out on PE 1",
    );
    r.check(
        r.elapsed < Duration::from_secs(16),
        "the job must end within RSHMEM_TIMEOUT + a few seconds",
    );
}
