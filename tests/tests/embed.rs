//! Embedding: processes started with no launcher variables at all join one job through
//! `Builder::rank/size/unique_id`, as a framework that already knows its ranks would.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{run_cmd, testpe, Run};

/// A unique id for a free loopback port (bound and released just before the job starts).
fn fresh_id() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    let port = l.local_addr().expect("local address").port();
    drop(l);
    rshmem::UniqueId::new(format!("127.0.0.1:{port}"))
        .expect("making a unique id")
        .to_string()
}

/// `rshmem-testpe embed RANK SIZE ID` with every variable rshmem or a launcher reads removed.
fn pe(rank: usize, size: usize, id: &str) -> Command {
    let mut cmd = Command::new(testpe());
    cmd.arg("embed")
        .arg(rank.to_string())
        .arg(size.to_string())
        .arg(id);
    for v in rshmem::config::all_env_vars() {
        if v.name != "RSHMEM_BACKEND" && v.name != "RSHMEM_LOG" {
            cmd.env_remove(v.name);
        }
    }
    for v in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ] {
        cmd.env_remove(v);
    }
    cmd
}

fn job(size: usize) -> Vec<Run> {
    let id = fresh_id();
    let handles: Vec<_> = (0..size)
        .map(|r| {
            let cmd = pe(r, size, &id);
            std::thread::spawn(move || run_cmd(cmd, Duration::from_secs(60)))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("a PE thread panicked"))
        .collect()
}

#[test]
fn builder_joins_without_launcher_3pes() {
    for (rank, r) in job(3).iter().enumerate() {
        r.check(r.status.success(), &format!("PE {rank} failed"));
        let line = format!("PE {rank}: ok embed");
        r.check(
            r.stdout.lines().any(|l| l.trim_end() == line),
            &format!("PE {rank} did not print {line:?}"),
        );
    }
}

#[test]
fn builder_single_pe_needs_no_rendezvous() {
    let mut cmd = pe(0, 1, "127.0.0.1:1#00000000000000000000000000000000");
    // Size 1 with an id is fine too: the id is not used.
    cmd.env("RSHMEM_BACKEND", "cpu");
    let r = run_cmd(cmd, Duration::from_secs(60));
    r.check(r.status.success(), "a 1-PE job through Builder failed");
}

#[test]
fn builder_rank_out_of_range_names_the_setting() {
    let r = run_cmd(pe(3, 2, &fresh_id()), Duration::from_secs(60));
    r.check(!r.status.success(), "rank 3 of 2 was accepted");
    r.check(
        r.stderr.contains("rank 3 is out of range for size 2"),
        "the error does not name the rank and size",
    );
}

#[test]
fn builder_values_win_over_the_environment() {
    // Launcher variables that would make each process something else (or fail: torchrun's
    // RANK/WORLD_SIZE without MASTER_ADDR), and a backend the builder overrides (gpu would
    // fail on a machine without GPUs; the builder asks for cpu).
    let id = fresh_id();
    let handles: Vec<_> = (0..2)
        .map(|r| {
            let mut cmd = pe(r, 2, &id);
            cmd.arg("cpu")
                .env("RANK", "5")
                .env("WORLD_SIZE", "9")
                .env("RSHMEM_RANK", "0")
                .env("RSHMEM_SIZE", "1")
                .env("RSHMEM_BACKEND", "gpu");
            std::thread::spawn(move || run_cmd(cmd, Duration::from_secs(60)))
        })
        .collect();
    for (rank, h) in handles.into_iter().enumerate() {
        let r = h.join().expect("a PE thread panicked");
        r.check(r.status.success(), &format!("PE {rank} failed"));
        r.check(
            r.stdout.contains(&format!("PE {rank}: ok embed")),
            &format!("PE {rank} did not pass"),
        );
    }
}
