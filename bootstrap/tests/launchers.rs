//! Jobs started the way other launchers start them: processes of this test binary given the
//! launcher's variables.

use std::process::{Command, Stdio};
use std::time::Duration;

/// Not a test of its own: one worker of the jobs below.
#[test]
fn worker_entry() {
    if std::env::var_os("LAUNCHERS_TEST_WORKER").is_none() {
        return;
    }
    match rshmem_bootstrap::from_env(Some(Duration::from_secs(30))) {
        Ok((info, boot)) => {
            let all = boot.allgather(&[info.rank as u8]).unwrap();
            println!(
                "WORKER rank={} size={} local={:?} launcher={} addr={} gathered={all:?}",
                info.rank,
                info.size,
                info.local_rank,
                info.launcher,
                info.uid.as_ref().map_or("", |u| u.addr())
            );
        }
        Err(e) => println!("WORKER error: {e}"),
    }
}

/// Runs `n` workers with `vars(rank)` and returns their outputs (the WORKER line of each).
fn run_workers(n: usize, vars: impl Fn(usize) -> Vec<(String, String)>) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|rank| {
            let mut cmd = Command::new(&exe);
            cmd.args(["--exact", "worker_entry", "--nocapture", "--test-threads=1"])
                .env("LAUNCHERS_TEST_WORKER", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for k in [
                "RSHMEM_RANK",
                "RSHMEM_SIZE",
                "RSHMEM_LAUNCHER",
                "RSHMEM_BOOTSTRAP_ADDR",
                "RSHMEM_BOOTSTRAP_SECRET",
                "RSHMEM_BOOTSTRAP_SECRET_FILE",
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "SLURM_PROCID",
                "PMI_RANK",
                "PMIX_RANK",
                "RANK",
                "WORLD_SIZE",
            ] {
                cmd.env_remove(k);
            }
            for (k, v) in vars(rank) {
                cmd.env(k, v);
            }
            cmd.spawn().unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines()
                .find_map(|l| l.find("WORKER ").map(|i| l[i..].to_owned()))
                .unwrap_or_else(|| {
                    format!(
                        "no WORKER line: {text}{}",
                        String::from_utf8_lossy(&out.stderr)
                    )
                })
        })
        .collect()
}

#[test]
fn torchrun_workers_meet_at_master_port_plus_one() {
    // A free port p + 1 (torch's own store would hold p).
    let next = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let master_port = (next - 1).to_string();
    let secret = rshmem_bootstrap::UniqueId::new("h:1").unwrap().secret_hex();
    let lines = run_workers(2, |rank| {
        [
            ("RANK", rank.to_string()),
            ("WORLD_SIZE", "2".into()),
            ("LOCAL_RANK", rank.to_string()),
            ("LOCAL_WORLD_SIZE", "2".into()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", master_port.clone()),
            ("TORCHELASTIC_RUN_ID", "test".into()),
            ("RSHMEM_BOOTSTRAP_SECRET", secret.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    });
    for (rank, l) in lines.iter().enumerate() {
        assert_eq!(
            l,
            &format!(
                "WORKER rank={rank} size=2 local=Some({rank}) launcher=torchrun \
                 addr=127.0.0.1:{next} gathered=[[0], [1]]"
            )
        );
    }
}

#[test]
fn unjoinable_launch_is_an_error_not_a_singleton() {
    // What torchrun workers once were (each a silent singleton), and another MPI's launch.
    for vars in [
        vec![("RANK", "1")],
        vec![("WORLD_SIZE", "4")],
        vec![("PMIX_RANK", "1")],
        vec![("MV2_COMM_WORLD_RANK", "0")],
    ] {
        let l = run_workers(1, |_| {
            vars.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        });
        assert!(
            l[0].starts_with("WORKER error: ") && l[0].contains(vars[0].0),
            "{vars:?}: {}",
            l[0]
        );
    }
}
