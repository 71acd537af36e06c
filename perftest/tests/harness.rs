//! The perftest harness as a user meets it: `--help` and bad options without a job, JSON rows
//! with the run's description, and a reader that closes stdout early (`| head`), on the CPU
//! backend through `rshmemrun`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `rshmemrun` from the same target directory, built there if missing.
fn rshmemrun() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_bcast_latency"))
        .parent()
        .expect("target dir")
        .to_path_buf();
    let run = dir.join("rshmemrun");
    if !run.is_file() {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "rshmem-bootstrap", "--bin", "rshmemrun"]);
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        assert!(cmd.status().expect("cargo build").success());
    }
    run
}

fn job(n: usize, bin: &str, args: &[&str]) -> Command {
    let mut c = Command::new(rshmemrun());
    c.args(["-n", &n.to_string(), "--timeout", "120"])
        .arg(bin)
        .args(args)
        .env("RSHMEM_BACKEND", "cpu")
        .env("RSHMEM_TIMEOUT", "60");
    c
}

#[test]
fn help_and_bad_options_need_no_job() {
    // Under a 2-PE launcher, --help is printed once and nothing is initialized.
    let out = job(2, env!("CARGO_BIN_EXE_gpu_perftest"), &["--help"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout.matches("Usage: rshmemrun").count(), 1, "{stdout}");
    assert!(
        stdout.contains("-b, --min-size") && stdout.contains("--quick"),
        "{stdout}"
    );
    // Alone (no launcher), too: no "needs at least 2 PEs".
    let out = Command::new(env!("CARGO_BIN_EXE_gpu_perftest"))
        .arg("-h")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("needs at least"));
    // An unknown option is clap's error, exit status 2.
    let out = Command::new(env!("CARGO_BIN_EXE_shmem_put_bw"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--bogus'"));
}

#[test]
fn json_rows_describe_the_run() {
    let out = job(
        2,
        env!("CARGO_BIN_EXE_shmem_put_latency"),
        &["--json", "-b", "8", "-e", "32", "-n", "50", "-r", "2"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    assert_eq!(rows.len(), 3);
    for (r, size) in rows.iter().zip([8, 16, 32]) {
        assert_eq!(r["bench"], "shmem_put_latency");
        assert_eq!(r["size"], size);
        assert_eq!(r["unit"], "us");
        assert!(r["value"].as_f64().is_some_and(|v| v > 0.0), "{r}");
        assert_eq!(
            (r["iters"].as_u64(), r["reps"].as_u64(), r["pes"].as_u64()),
            (Some(50), Some(2), Some(2))
        );
        assert_eq!(r["backend"], "cpu");
        assert_eq!(r["transport"], "shm");
        assert_eq!(r["rshmem_version"], env!("CARGO_PKG_VERSION"));
        assert!(r["commit"].is_string() && r["host"].is_string() && r["device"].is_string());
        assert_eq!(r["options"]["max"], 32);
        assert_eq!(r["options"]["iters"], 50);
    }
}

#[test]
fn closed_stdout_ends_the_job_cleanly() {
    // The reader takes one row and closes the pipe. The sweep up to 16 MiB per PE would run
    // for a long time; the PEs agree to stop at the next point and finalize: exit 0 and no
    // PE reports a lost peer.
    let mut child = job(2, env!("CARGO_BIN_EXE_bcast_latency"), &["--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is gone now (dropped).
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(first.starts_with("{\"bench\":\"bcast_latency\""), "{first}");
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(
        !stderr.contains("gone") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
