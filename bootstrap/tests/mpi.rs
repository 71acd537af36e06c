//! The MPI bootstrap under `mpirun` (built only with `--features mpi`; skipped when no `mpirun`
//! is in PATH). The test re-runs this test binary on 4 ranks, each running `mpi_child`.
#![cfg(feature = "mpi")]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rshmem_bootstrap::{from_env, Bootstrap, Launcher, MpiBootstrap};

/// Set (to `own` or `app`) in the ranks started by `collectives_under_mpirun`.
const CHILD: &str = "RSHMEM_MPI_TEST_CHILD";
const NP: usize = 4;

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs every collective and checks the results on this rank.
fn exercise(boot: &dyn Bootstrap) {
    let (me, n) = (boot.rank(), boot.size());
    assert_eq!(n, NP);
    assert_eq!(
        boot.timeout(),
        None,
        "MPI calls are not bounded by a timeout"
    );

    // Variable lengths, rank 0 contributes nothing.
    let mine = vec![me as u8; me * 3];
    let all = boot.allgather(&mine).unwrap();
    assert_eq!(all.len(), n);
    for (r, got) in all.iter().enumerate() {
        assert_eq!(got, &vec![r as u8; r * 3], "allgather from rank {r}");
    }

    let to_each: Vec<Vec<u8>> = (0..n)
        .map(|r| format!("{me}->{r};").repeat(r).into_bytes())
        .collect();
    let got = boot.alltoall(&to_each).unwrap();
    for (s, v) in got.iter().enumerate() {
        assert_eq!(
            v,
            &format!("{s}->{me};").repeat(me).into_bytes(),
            "from {s}"
        );
    }
    assert!(boot.alltoall(&[]).is_err(), "wrong number of buffers");

    let data = if me == 2 {
        b"hello from 2".to_vec()
    } else {
        vec![9; me]
    };
    assert_eq!(boot.broadcast(2, &data).unwrap(), b"hello from 2");
    assert_eq!(boot.broadcast(0, b"").unwrap(), b"");
    assert!(boot.broadcast(n, b"x").is_err(), "root out of range");

    boot.barrier().unwrap();
}

/// One rank of the job (does nothing unless started by `collectives_under_mpirun`).
#[test]
fn mpi_child() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    std::env::remove_var("RSHMEM_BOOTSTRAP_ADDR");
    let universe = match mode.as_str() {
        "own" => None,
        // The application initialized MPI first: the bootstrap must use it and leave it alive.
        "app" => Some(mpi::initialize().expect("MPI_Init")),
        other => panic!("unknown mode {other}"),
    };
    let (info, boot) = from_env(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(info.launcher, Launcher::OpenMpi);
    assert_eq!((info.rank, info.size), (boot.rank(), NP));
    assert!(info.uid.is_none(), "no TCP rendezvous under MPI");
    assert!(info.local_rank.is_some() && info.local_size.is_some());
    exercise(boot.as_ref());
    drop(boot);
    // Started again in the same process (rshmem init after finalize): MPI is set up once.
    let again = MpiBootstrap::new().unwrap();
    assert_eq!(again.initialized_mpi(), universe.is_none());
    exercise(&again);
    if let Some(u) = universe {
        use mpi::collective::CommunicatorCollectives;
        u.world().barrier(); // still usable: the bootstrap did not finalize it
    }
    println!("mpi-child {mode} ok rank {}", info.rank);
}

#[test]
fn collectives_under_mpirun() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let Some(mpirun) = find_in_path("mpirun") else {
        eprintln!("collectives_under_mpirun: skipped, no mpirun in PATH");
        return;
    };
    let exe = std::env::current_exe().unwrap();
    for mode in ["own", "app"] {
        let out = Command::new("timeout")
            .arg("120")
            .arg(&mpirun)
            .args(["--allow-run-as-root", "--oversubscribe", "-np"])
            .arg(NP.to_string())
            .arg(&exe)
            .args(["--exact", "mpi_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, mode)
            .env_remove("RSHMEM_BOOTSTRAP_ADDR")
            .env_remove("RSHMEM_BOOTSTRAP")
            .env_remove("RSHMEM_LAUNCHER")
            .output()
            .expect("running mpirun");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{mode}: mpirun failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        for r in 0..NP {
            assert!(
                stdout.contains(&format!("mpi-child {mode} ok rank {r}\n")),
                "{mode}: rank {r} did not finish:\n{stdout}\n{stderr}"
            );
        }
    }
}
