//! Transport selection (`RSHMEM_REMOTE_TRANSPORT`) and `World::transport`'s capability bits.
//! No machine that runs these tests has an RDMA device, so forcing verbs must fail cleanly at
//! init on every PE (naming the cause: no device, no libibverbs, or a build without the `verbs`
//! feature), and `auto` must fall back to TCP.

mod common;

use std::time::Duration;

/// Every PE its own node, on the CPU backend.
const REMOTE: &[(&str, &str)] = &[("RSHMEM_DISABLE_P2P", "1"), ("RSHMEM_BACKEND", "cpu")];

fn job(n: usize, scenario: &str, env: &[(&str, &str)]) -> common::Run {
    let mut j = common::job(n, scenario).env("RSHMEM_BACKEND", "cpu");
    for (k, v) in env {
        j = j.env(k, v);
    }
    j.run()
}

#[test]
fn verbs_forced_without_a_device_fails_cleanly_at_init() {
    for n in [2, 3] {
        let env: Vec<_> = REMOTE
            .iter()
            .copied()
            .chain([("RSHMEM_REMOTE_TRANSPORT", "verbs")])
            .collect();
        let r = job(n, "rma", &env);
        r.check(!r.status.success(), "the job should fail");
        r.check(
            r.elapsed < Duration::from_secs(25),
            "every PE should fail at once, not wait for the others",
        );
        r.check(!r.stderr.contains("panicked"), "a PE panicked");
        r.check(
            r.status.code() == Some(1),
            "PEs should exit with status 1 (no signal)",
        );
        // rshmemrun stops the others after the first failure: every PE that reported, reported
        // a clean init error naming the cause.
        let fails: Vec<&str> = r.stderr.lines().filter(|l| l.contains(": FAIL ")).collect();
        r.check(!fails.is_empty(), "some PE should report its init error");
        for l in fails {
            r.check(
                l.contains("FAIL rma: rshmem::init failed: init: unsupported:")
                    && (l.contains("built without the `verbs` cargo feature")
                        || l.contains("ibv_get_device_list found no RDMA device")
                        || l.contains("libibverbs (libibverbs.so.1) is not installed")
                        || l.contains("no RDMA device has an active port")
                        || l.contains("could not open an RDMA device")),
                &format!("a clean init error naming why verbs is unavailable: {l}"),
            );
        }
    }
}

#[test]
fn auto_falls_back_to_tcp_and_reports_caps() {
    for (choice, n) in [("auto", 2), ("auto", 3), ("tcp", 3)] {
        let env: Vec<_> = REMOTE
            .iter()
            .copied()
            .chain([("RSHMEM_REMOTE_TRANSPORT", choice)])
            .collect();
        job(n, "transports", &env).assert_ok(0..n, "transports");
    }
    // Default setting (auto) without the variable.
    job(2, "transports", REMOTE).assert_ok(0..2, "transports");
}

#[test]
fn local_pes_use_load_store_even_with_verbs_forced() {
    // One host: nothing is remote, so no device is needed.
    job(3, "transports", &[("RSHMEM_REMOTE_TRANSPORT", "verbs")]).assert_ok(0..3, "transports");
}

#[test]
fn bad_or_mixed_settings_are_init_errors() {
    let env: Vec<_> = REMOTE
        .iter()
        .copied()
        .chain([("RSHMEM_REMOTE_TRANSPORT", "pigeon")])
        .collect();
    let r = job(2, "rma", &env);
    r.check(!r.status.success(), "the job should fail");
    r.check(
        r.stderr
            .contains("RSHMEM_REMOTE_TRANSPORT=\"pigeon\" is malformed"),
        "the error should name the variable",
    );
}
