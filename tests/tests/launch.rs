//! Starting `rshmem-testpe` without `rshmemrun`: with no launcher variables it is a single PE;
//! malformed launcher or runtime variables make init fail with an error naming the variable.

mod common;

use common::direct;

/// Checks that the direct run failed in init with a message naming `var`.
fn fails_naming(env: &[(&str, &str)], var: &str) {
    let r = direct(&["rma"], env);
    r.check(r.status.code() == Some(1), "expected exit status 1");
    let lines = r.stderr_lines("PE ");
    r.check(
        lines
            .iter()
            .any(|l| l.contains(": FAIL rma: rshmem::init failed: ") && l.contains(var)),
        &format!("expected an init failure naming {var}"),
    );
    r.check(
        r.elapsed < std::time::Duration::from_secs(10),
        "init must fail at once",
    );
}

#[test]
fn no_launcher_is_a_single_pe() {
    for s in ["rma", "amo", "wait"] {
        direct(&[s], &[("RSHMEM_TIMEOUT", "30")]).assert_ok([0], s);
    }
}

#[test]
fn rank_not_a_number() {
    fails_naming(
        &[("RSHMEM_RANK", "abc"), ("RSHMEM_SIZE", "2")],
        "RSHMEM_RANK",
    );
}

#[test]
fn size_zero() {
    fails_naming(&[("RSHMEM_RANK", "0"), ("RSHMEM_SIZE", "0")], "RSHMEM_SIZE");
}

#[test]
fn size_not_a_number() {
    fails_naming(
        &[("RSHMEM_RANK", "0"), ("RSHMEM_SIZE", "-3")],
        "RSHMEM_SIZE",
    );
}

#[test]
fn rank_not_below_size() {
    fails_naming(&[("RSHMEM_RANK", "2"), ("RSHMEM_SIZE", "2")], "RSHMEM_RANK");
    fails_naming(&[("RSHMEM_RANK", "7"), ("RSHMEM_SIZE", "2")], "RSHMEM_RANK");
}

#[test]
fn rank_without_size() {
    fails_naming(&[("RSHMEM_RANK", "0")], "RSHMEM_SIZE");
}

#[test]
fn missing_bootstrap_address() {
    fails_naming(
        &[
            ("RSHMEM_RANK", "1"),
            ("RSHMEM_SIZE", "2"),
            (
                "RSHMEM_BOOTSTRAP_SECRET",
                "00112233445566778899aabbccddeeff",
            ),
        ],
        "RSHMEM_BOOTSTRAP_ADDR",
    );
}

#[test]
fn malformed_runtime_variables() {
    fails_naming(&[("RSHMEM_TIMEOUT", "soon")], "RSHMEM_TIMEOUT");
    fails_naming(&[("RSHMEM_HEAP_LIMIT", "lots")], "RSHMEM_HEAP_LIMIT");
    fails_naming(
        &[("RSHMEM_DEBUG_SYMMETRY", "maybe")],
        "RSHMEM_DEBUG_SYMMETRY",
    );
}

/// A heap limit whose slice size overflows the address arithmetic: a clean init error naming
/// the variable (it once panicked on an overflowing round-up).
#[test]
fn heap_limit_too_large() {
    fails_naming(
        &[("RSHMEM_HEAP_LIMIT", "18446744073709551615")],
        "RSHMEM_HEAP_LIMIT",
    );
}

/// A heap limit whose slices do not fit the address space (x86-64 user space is 128 TiB): the
/// failed reservation names the variable to lower.
#[test]
fn heap_limit_beyond_the_address_space() {
    fails_naming(&[("RSHMEM_HEAP_LIMIT", "200T")], "lower RSHMEM_HEAP_LIMIT");
}

#[test]
fn unknown_scenario() {
    let r = direct(&["no-such-scenario"], &[]);
    r.check(r.status.code() == Some(1), "expected exit status 1");
    r.check(
        r.stderr.contains("FAIL no-such-scenario: unknown scenario"),
        "expected the unknown-scenario message",
    );
}
