//! A build without the `mpi` feature under `mpirun` with nothing set: `from_env` finds MPI at
//! run time (this test binary does not link it), carries the TCP rendezvous id over
//! `MPI_COMM_WORLD` and the ranks meet through the TCP bootstrap. Skipped when no `mpirun` is
//! in PATH. The test re-runs this test binary on 4 ranks, each running `mpi_rt_child`.
#![cfg(not(feature = "mpi"))]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rshmem_bootstrap::{from_env, Launcher};

/// Set (to `ok` or `nolib`) in the ranks started by `bootstrap_under_mpirun_with_nothing_set`.
const CHILD: &str = "RSHMEM_MPI_RT_TEST_CHILD";
const NP: usize = 4;

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// One rank of the job (does nothing unless started by the test below).
#[test]
fn mpi_rt_child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let r = from_env(Some(Duration::from_secs(30)));
    if mode == "nolib" {
        let e = r.err().expect("no MPI library: from_env must fail");
        println!("mpi-rt-child nolib error: {e}");
        return;
    }
    let (info, boot) = r.unwrap();
    assert_eq!(info.launcher, Launcher::OpenMpi);
    assert_eq!((info.rank, info.size), (boot.rank(), NP));
    assert_eq!(
        boot.timeout(),
        Some(Duration::from_secs(30)),
        "the TCP bootstrap"
    );
    let me = boot.rank();
    let all = boot.allgather(&[me as u8; 3]).unwrap();
    for (r, got) in all.iter().enumerate() {
        assert_eq!(got, &vec![r as u8; 3], "allgather from rank {r}");
    }
    assert_eq!(boot.broadcast(3, b"from 3").unwrap(), b"from 3");
    boot.barrier().unwrap();
    println!("mpi-rt-child ok rank {me}");
}

#[test]
fn bootstrap_under_mpirun_with_nothing_set() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let Some(mpirun) = find_in_path("mpirun") else {
        eprintln!("bootstrap_under_mpirun_with_nothing_set: skipped, no mpirun in PATH");
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let run = |mode: &str, extra: &[(&str, &str)]| {
        let mut cmd = Command::new("timeout");
        cmd.arg("120")
            .arg(&mpirun)
            .args(["--allow-run-as-root", "--oversubscribe", "-np"])
            .arg(NP.to_string());
        for (k, _) in extra {
            cmd.args(["-x", k]);
        }
        cmd.arg(&exe)
            .args(["--exact", "mpi_rt_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, mode)
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .envs(extra.iter().copied());
        for (k, _) in std::env::vars() {
            if k.starts_with("RSHMEM_") && !extra.iter().any(|(e, _)| *e == k) {
                cmd.env_remove(k);
            }
        }
        cmd.output().expect("running mpirun")
    };
    let out = run("ok", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mpirun failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for r in 0..NP {
        assert!(
            stdout.contains(&format!("mpi-rt-child ok rank {r}\n")),
            "rank {r} did not finish:\n{stdout}\n{stderr}"
        );
    }
    // A named MPI library that does not open: every rank says so.
    let out = run("nolib", &[("RSHMEM_MPI_LIB", "/nonexistent/libmpi.so")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout
            .matches("RSHMEM_MPI_LIB=/nonexistent/libmpi.so: cannot open it")
            .count(),
        NP,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
