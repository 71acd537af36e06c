//! The environment warnings of init: an unknown `RSHMEM_*` name (with the closest known one) and
//! the `NVSHMEM_*` variables rshmem ignores are named once per job (by PE 0), not once per PE;
//! NVSHMEM variables with an equivalent are honoured.

mod common;

use common::{direct, job};

/// Lines of the job's stderr containing `what`.
fn count(stderr: &str, what: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains(what))
        .map(str::to_string)
        .collect()
}

#[test]
fn warnings_are_printed_once_per_job() {
    let r = job(3, "rma")
        .env("RSHMEM_BAKCEND", "cpu")
        .env("NVSHMEM_NVTX", "on")
        .env("NVSHMEM_CUMEM_GRANULARITY", "1G")
        .env("NVSHMEM_DISABLE_NVLS", "1")
        .run();
    r.assert_ok(0..3, "rma");
    let typo = count(&r.stderr, "RSHMEM_BAKCEND");
    r.check(
        typo.len() == 1,
        &format!("one line naming RSHMEM_BAKCEND, got {typo:?}"),
    );
    r.check(
        typo[0].starts_with("rshmem PE 0: warning: ")
            && typo[0].contains("did you mean RSHMEM_BACKEND?"),
        &format!("PE 0's warning with the closest name: {typo:?}"),
    );
    let nv = count(&r.stderr, "NVSHMEM_");
    r.check(
        nv.len() == 1,
        &format!("one line naming the NVSHMEM variables, got {nv:?}"),
    );
    r.check(
        nv[0].contains("NVSHMEM_NVTX")
            && nv[0].contains("NVSHMEM_CUMEM_GRANULARITY")
            && !nv[0].contains("NVSHMEM_DISABLE_NVLS"),
        &format!("names the two without an equivalent only: {nv:?}"),
    );
}

#[test]
fn clean_environment_prints_nothing() {
    let r = job(2, "rma").env("NVSHMEM_DISABLE_NVLS", "1").run();
    r.assert_ok(0..2, "rma");
    let w = count(&r.stderr, "warning:");
    r.check(w.is_empty(), &format!("no warnings expected: {w:?}"));
}

#[test]
fn nvshmem_equivalent_is_honoured_and_rshmem_wins() {
    // A malformed NVSHMEM value of a mapped variable fails init naming it ...
    let r = direct(&["rma"], &[("NVSHMEM_SYMMETRIC_SIZE", "lots")]);
    r.check(r.status.code() == Some(1), "expected exit status 1");
    r.check(
        r.stderr.contains("NVSHMEM_SYMMETRIC_SIZE=\"lots\""),
        "expected an init failure naming NVSHMEM_SYMMETRIC_SIZE",
    );
    // ... unless the RSHMEM_ variable it stands for is set (that one wins).
    let r = direct(
        &["rma"],
        &[
            ("NVSHMEM_SYMMETRIC_SIZE", "lots"),
            ("RSHMEM_HEAP_INITIAL", "8M"),
        ],
    );
    r.assert_ok([0], "rma");
    r.check(
        r.stderr
            .contains("NVSHMEM_SYMMETRIC_SIZE by RSHMEM_HEAP_INITIAL"),
        "the override is noted",
    );
    // NVSHMEM_INFO prints the version and where values come from.
    let r = direct(
        &["rma"],
        &[("NVSHMEM_INFO", "1"), ("NVSHMEM_SYMMETRIC_SIZE", "8m")],
    );
    r.assert_ok([0], "rma");
    r.check(
        r.stderr
            .contains("RSHMEM_HEAP_INITIAL=8388608 (from NVSHMEM_SYMMETRIC_SIZE)"),
        "NVSHMEM_INFO lists the value NVSHMEM_SYMMETRIC_SIZE gave",
    );
}

#[test]
fn failing_init_still_names_the_typo() {
    // The misspelled name is why init fails here: the warning comes with the error.
    let r = direct(
        &["rma"],
        &[("RSHMEM_TIMEOUT", "soon"), ("RSHMEM_HEAP_LIMT", "1G")],
    );
    r.check(r.status.code() == Some(1), "expected exit status 1");
    let typo = count(&r.stderr, "RSHMEM_HEAP_LIMT");
    r.check(
        typo.len() == 1 && typo[0].contains("did you mean RSHMEM_HEAP_LIMIT?"),
        &format!("one warning with the closest name: {typo:?}"),
    );
}
