//! Every example is also a multi-PE test: each runs through `rshmemrun` with 1, 2, 3, 4 and 8 PEs
//! (even counts for bidir_put_signal) and its output is checked line by line. Without GPUs they
//! exercise the CPU backend; on a GPU machine `scripts/gpu-check` runs the same binaries.

use std::path::PathBuf;
use std::process::Command;

fn bin(name: &str) -> PathBuf {
    match name {
        "ring_shift" => PathBuf::from(env!("CARGO_BIN_EXE_ring_shift")),
        "ring_bcast" => PathBuf::from(env!("CARGO_BIN_EXE_ring_bcast")),
        "device_put" => PathBuf::from(env!("CARGO_BIN_EXE_device_put")),
        "bidir_put_signal" => PathBuf::from(env!("CARGO_BIN_EXE_bidir_put_signal")),
        "moe_dispatch" => PathBuf::from(env!("CARGO_BIN_EXE_moe_dispatch")),
        "hello_pgas" => PathBuf::from(env!("CARGO_BIN_EXE_hello_pgas")),
        other => panic!("unknown example {other}"),
    }
}

/// `rshmemrun` from the same target directory, built there if missing.
fn rshmemrun() -> PathBuf {
    let dir = bin("ring_shift")
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
        let st = cmd.status().expect("running cargo build for rshmemrun");
        assert!(st.success(), "building rshmemrun failed");
    }
    run
}

/// Runs `example` on `n` PEs (CPU backend) and returns its stdout lines.
fn run(example: &str, n: usize, args: &[&str]) -> Vec<String> {
    let out = Command::new(rshmemrun())
        .args(["-n", &n.to_string(), "--timeout", "120"])
        .arg(bin(example))
        .args(args)
        .env("RSHMEM_BACKEND", "cpu")
        .env("RSHMEM_TIMEOUT", "60")
        .output()
        .expect("starting rshmemrun");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{example} on {n} PEs failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout.lines().map(str::to_string).collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// The README's "Use rshmem in your own Rust project": its program is `hello_pgas.rs`, byte
/// for byte, which runs and prints what the README says; the crate and the tools are where it
/// says they are.
#[test]
fn readme_project_section_is_hello_pgas_and_runs() {
    let readme = include_str!("../../README.md");
    let marker = "<!-- hello_pgas.rs: keep identical to examples/hello_pgas.rs -->\n```rust\n";
    let start = readme.find(marker).expect("the README's hello_pgas block") + marker.len();
    let len = readme[start..].find("```\n").expect("the end of the block");
    assert_eq!(
        &readme[start..start + len],
        include_str!("../hello_pgas.rs"),
        "README.md's program differs from examples/hello_pgas.rs: copy one into the other"
    );
    assert!(readme.contains("rshmem = { path = \"/path/to/rshmem/runtime\" }"));
    let manifest = |dir: &str| {
        std::fs::read_to_string(format!(
            "{}/../{dir}/Cargo.toml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("reading a crate manifest")
    };
    assert!(manifest("runtime").contains("name = \"rshmem\""));
    assert!(
        manifest("runtime").contains("name = \"rshmem-info\"") || {
            let bins = format!(
                "{}/../runtime/src/bin/rshmem-info.rs",
                env!("CARGO_MANIFEST_DIR")
            );
            std::path::Path::new(&bins).is_file()
        }
    );
    assert!(manifest("bootstrap").contains("name = \"rshmem-bootstrap\""));
    assert!(manifest("bootstrap").contains("name = \"rshmemrun\""));
    for n in [1, 2, 4] {
        let got = sorted(run("hello_pgas", n, &[]));
        let want = sorted(
            (0..n)
                .map(|pe| format!("PE {pe} of {n} got {}", (pe + n - 1) % n))
                .collect(),
        );
        assert_eq!(got, want, "hello_pgas on {n} PEs");
    }
}

#[test]
fn ring_shift_prints_the_expected_lines() {
    for n in [1, 2, 3, 4, 8] {
        let got = sorted(run("ring_shift", n, &[]));
        let want = sorted(
            (0..n)
                .map(|pe| format!("{pe}: received message {}", (pe + n - 1) % n))
                .collect(),
        );
        assert_eq!(got, want, "ring_shift on {n} PEs");
    }
}

#[test]
fn ring_bcast_matches_on_every_pe() {
    for n in [1, 2, 3, 4, 8] {
        let got = sorted(run("ring_bcast", n, &["10007"]));
        let want = sorted(
            (0..n)
                .map(|pe| format!("{pe}: data matched (10007 elements from PE 0)"))
                .collect(),
        );
        assert_eq!(got, want, "ring_bcast on {n} PEs");
    }
}

#[test]
fn device_put_falls_back_to_the_host_api_and_matches() {
    for n in [1, 2, 3, 4] {
        let got = run("device_put", n, &["4099"]);
        assert_eq!(got.len(), 3 * n, "device_put on {n} PEs printed {got:?}");
        for pe in 0..n {
            for round in 1..=3 {
                let want = format!(
                    "{pe}: round {round}: 4099 bytes from PE {} matched (host (no GPU) put_signal)",
                    (pe + n - 1) % n
                );
                assert!(got.contains(&want), "missing {want:?} in {got:?}");
            }
        }
    }
}

#[test]
fn bidir_put_signal_matches_in_pairs() {
    for n in [2, 4] {
        let got = run("bidir_put_signal", n, &[]);
        for pe in 0..n {
            for size in [1usize << 10, 1 << 20, 128 << 20] {
                let want = format!("{pe}: {size} bytes from PE {} matched", pe ^ 1);
                assert!(got.contains(&want), "missing {want:?} in {got:?}");
            }
        }
    }
}

#[test]
fn bidir_put_signal_refuses_an_odd_pe_count() {
    let out = Command::new(rshmemrun())
        .args(["-n", "3", "--timeout", "60"])
        .arg(bin("bidir_put_signal"))
        .env("RSHMEM_BACKEND", "cpu")
        .output()
        .expect("starting rshmemrun");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("needs an even number of PEs, got 3"),
        "{stderr}"
    );
}

/// On the CPU backend moe_dispatch runs only its host-side argument checks (every bad
/// configuration named, the handle refused with the reason) and says that nothing was
/// dispatched; the GPU checks run in scripts/moe-gpu-check.
#[test]
fn moe_dispatch_says_it_needs_the_gpu() {
    let out = run("moe_dispatch", 2, &[]);
    for pe in 0..2 {
        assert!(
            out.iter().any(|l| l
                == &format!("PE {pe}: moe_dispatch: no GPU backend: only the host-side argument checks ran (0 failures); nothing was dispatched")),
            "{out:?}"
        );
    }
    for what in [
        "num_experts",
        "topk: 0",
        "hidden: 7",
        "num_sms: 0",
        "topk_idx[1][0]",
        "needs the GPU backend",
    ] {
        assert!(
            out.iter().any(|l| l.contains(what)),
            "no line names {what}: {out:?}"
        );
    }
    assert!(!out.iter().any(|l| l.contains("PASSED")), "{out:?}");
}
