//! Hang reports: when a job hangs, every PE says what it is blocked in, and rshmemrun prints
//! them as one table (on --timeout, when a PE fails, and on SIGUSR1).

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{job, rshmemrun, testpe, Run};

/// The rows of the hang table(s) in `stderr`: the whitespace-separated fields of each indented
/// line that follows a `hang report` heading.
fn rows(stderr: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in stderr.lines() {
        if l.starts_with("rshmemrun: hang report") {
            inside = true;
            continue;
        }
        if inside && l.starts_with("  ") {
            out.push(l.split_whitespace().map(str::to_owned).collect());
        } else {
            inside = false;
        }
    }
    out
}

/// True when a row of PE `pe` has `state` and `call` and, when given, waits on PE `on`.
fn has_row(rows: &[Vec<String>], pe: usize, state: &str, call: &str, on: Option<usize>) -> bool {
    rows.iter().any(|r| {
        r.len() >= 4
            && r[0] == pe.to_string()
            && r[1] == state
            && r[2] == call
            && on.is_none_or(|p| r[3] == "PE" && r.get(4) == Some(&p.to_string()))
    })
}

#[test]
fn launcher_timeout_reports_what_every_pe_is_blocked_in() {
    // No RSHMEM_TIMEOUT: the PEs would wait forever; rshmemrun's --timeout stops them.
    let r = job(3, "hang").env("RSHMEM_TIMEOUT", "0").timeout(5).run();
    r.check(
        r.status.code() == Some(124),
        "expected exit status 124 (--timeout)",
    );
    r.check(
        r.stderr
            .contains("rshmemrun: hang report (--timeout 5s expired)"),
        "no hang report heading",
    );
    let t = rows(&r.stderr);
    r.check(
        has_row(&t, 1, "blocked", "signal_wait_until", None),
        "no row saying PE 1 is blocked in signal_wait_until",
    );
    r.check(
        has_row(&t, 0, "blocked", "barrier_all", Some(1)),
        "no row saying PE 0 is blocked in barrier_all waiting on PE 1",
    );
    r.check(
        has_row(&t, 2, "blocked", "barrier_all", None),
        "no row saying PE 2 is blocked in barrier_all",
    );
}

#[test]
fn wait_timeout_reports_every_pe_not_only_the_one_that_timed_out() {
    // PE 1 starts waiting a second late, so PE 0's barrier times out first.
    let r = job(2, "hang").arg("1000").env("RSHMEM_TIMEOUT", "2").run();
    r.check(!r.status.success(), "the job should fail");
    let t = rows(&r.stderr);
    r.check(
        has_row(&t, 0, "timed-out", "barrier_all", Some(1)),
        "no row saying PE 0's barrier_all timed out waiting on PE 1",
    );
    r.check(
        t.iter()
            .any(|row| row.len() > 2 && row[0] == "1" && row[2] == "signal_wait_until"),
        "no row naming PE 1's signal_wait_until",
    );
}

/// Runs the hang scenario under rshmemrun, sends SIGUSR1 to rshmemrun after 2 s and SIGTERM
/// after 4 s.
fn usr1_run() -> Run {
    let mut cmd = Command::new(rshmemrun());
    cmd.args(["-n", "2", "--timeout", "30"])
        .arg(testpe())
        .arg("hang")
        .env("RSHMEM_TIMEOUT", "0")
        .env_remove("RSHMEM_HANG_REPORT_FD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = std::time::Instant::now();
    let mut child = cmd.spawn().expect("starting rshmemrun");
    let pid = child.id().to_string();
    let mut err = child.stderr.take().expect("piped stderr");
    let t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    std::thread::sleep(Duration::from_secs(2));
    let _ = Command::new("kill").args(["-USR1", &pid]).status();
    std::thread::sleep(Duration::from_secs(2));
    let still = child.try_wait().expect("try_wait").is_none();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = child.wait().expect("waiting for rshmemrun");
    let stderr = t.join().unwrap_or_default();
    let r = Run {
        what: format!("{cmd:?}"),
        status,
        stdout: String::new(),
        stderr,
        elapsed: start.elapsed(),
    };
    r.check(
        still,
        "rshmemrun ended after SIGUSR1 (it should only report)",
    );
    r
}

#[test]
fn sigusr1_to_rshmemrun_prints_the_table_and_the_job_goes_on() {
    let r = usr1_run();
    r.check(
        r.stderr
            .contains("rshmemrun: hang report (asked for with SIGUSR1)"),
        "no report on SIGUSR1",
    );
    let t = rows(&r.stderr);
    r.check(
        has_row(&t, 1, "blocked", "signal_wait_until", None)
            && has_row(&t, 0, "blocked", "barrier_all", Some(1)),
        "the SIGUSR1 report does not show both PEs' waits",
    );
}

#[test]
fn sigusr1_to_a_pe_prints_its_report_on_stderr() {
    // Two PEs under rshmemrun; the PEs (found with pgrep) are signalled directly.
    let mut run = Command::new(rshmemrun());
    run.args(["-n", "2", "--timeout", "30"])
        .arg(testpe())
        .arg("hang")
        .env("RSHMEM_TIMEOUT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = run.spawn().expect("starting rshmemrun");
    let pid = child.id().to_string();
    let mut err = child.stderr.take().expect("piped stderr");
    let t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    std::thread::sleep(Duration::from_secs(2));
    let pes = Command::new("pgrep")
        .args(["-P", &pid])
        .output()
        .expect("pgrep");
    let pids: Vec<String> = String::from_utf8_lossy(&pes.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(pids.len(), 2, "expected 2 PEs under rshmemrun: {pids:?}");
    for p in &pids {
        let _ = Command::new("kill").args(["-USR1", p]).status();
    }
    std::thread::sleep(Duration::from_secs(1));
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let _ = child.wait();
    let stderr = t.join().unwrap_or_default();
    assert!(
        stderr.contains("rshmem hang report: PE 1 (pid")
            && stderr.contains("blocked in signal_wait_until")
            && stderr.contains("rshmem hang report: PE 0 (pid")
            && stderr.contains("blocked in barrier_all, waiting on PE 1"),
        "no per-PE report on stderr:\n{stderr}"
    );
}
