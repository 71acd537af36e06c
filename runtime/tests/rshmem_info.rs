//! `rshmem-info` as a user runs it: the built binary, its exit codes and what it reports.

use std::process::{Command, Output};

fn info(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rshmem-info"));
    cmd.args(args);
    // A clean slate: no RSHMEM_* or launcher variables of the calling shell.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("RSHMEM_")
            || k.starts_with("NVSHMEM_")
            || k.starts_with("OMPI_")
            || k.starts_with("PMIX_")
            || k.starts_with("SLURM_")
            || k.starts_with("PMI_")
            || ["RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"].contains(&k.as_str())
        {
            cmd.env_remove(&k);
        }
    }
    cmd.envs(env.iter().copied());
    match cmd.output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run rshmem-info: {e}"),
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn help_exits_zero_and_probes_nothing() {
    // With a malformed variable and a missing UCX library in the environment: `--help` must not
    // look at either (no report, no probe), only print the usage.
    let o = info(
        &["--help"],
        &[
            ("RSHMEM_TIMEOUT", "abc"),
            ("RSHMEM_UCX_LIB", "/nonexistent/libucp.so"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = stdout(&o);
    assert!(out.contains("Usage: rshmem-info"), "{out}");
    assert!(out.contains("--json"), "{out}");
    for reported in ["INVALID", "ucx:", "transports:", "features:"] {
        assert!(
            !out.contains(reported),
            "--help printed {reported:?}: {out}"
        );
    }
    assert!(o.stderr.is_empty(), "{o:?}");
}

#[test]
fn version_prints_the_crate_version() {
    let o = info(&["--version"], &[]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(
        stdout(&o).trim(),
        format!("rshmem-info {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unknown_flag_is_rejected_with_exit_2() {
    let o = info(&["--no-such-flag"], &[]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--no-such-flag"), "{err}");
    assert!(o.stdout.is_empty(), "{o:?}");
}

#[test]
fn malformed_variable_is_flagged_invalid_with_its_parse_error() {
    let o = info(&[], &[("RSHMEM_TIMEOUT", "abc")]);
    assert_eq!(o.status.code(), Some(1), "a malformed value exits 1: {o:?}");
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("RSHMEM_TIMEOUT"))
        .unwrap_or_else(|| panic!("no RSHMEM_TIMEOUT line: {out}"));
    assert!(line.contains("INVALID"), "{line}");
    assert!(line.contains("RSHMEM_TIMEOUT=\"abc\""), "{line}");
    assert!(line.contains("expected a number of seconds"), "{line}");
    assert!(
        out.contains("1 environment variable(s) are malformed"),
        "{out}"
    );

    // A valid value is shown, not flagged.
    let o = info(&[], &[("RSHMEM_TIMEOUT", "12.5")]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = stdout(&o);
    assert!(!out.contains("INVALID"), "{out}");
    assert!(out.contains("(set: 12.5)"), "{out}");
}

#[test]
fn malformed_variable_in_json() {
    let o = info(
        &["--json"],
        &[("RSHMEM_TIMEOUT", "abc"), ("RSHMEM_HEAP_LIMIT", "8G")],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v: serde_json::Value = match serde_json::from_slice(&o.stdout) {
        Ok(v) => v,
        Err(e) => panic!("--json is not JSON ({e}): {}", stdout(&o)),
    };
    let var = |name: &str| {
        v["env"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing from {v}"))
    };
    let t = var("RSHMEM_TIMEOUT");
    assert_eq!(t["value"], "abc");
    let err = t["invalid"].as_str().unwrap_or_default();
    assert!(err.contains("RSHMEM_TIMEOUT=\"abc\""), "{t}");
    let h = var("RSHMEM_HEAP_LIMIT");
    assert_eq!(h["value"], "8G");
    assert!(h["invalid"].is_null(), "{h}");
    assert_eq!(v["features"]["mpi"], cfg!(feature = "mpi"));
    assert_eq!(v["features"]["verbs"], cfg!(feature = "verbs"));
}

#[test]
fn malformed_launcher_variable_is_flagged() {
    let o = info(&[], &[("RSHMEM_RANK", "x"), ("RSHMEM_SIZE", "2")]);
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("RSHMEM_RANK "))
        .unwrap_or_else(|| panic!("no RSHMEM_RANK line: {out}"));
    assert!(line.contains("INVALID") && line.contains("\"x\""), "{line}");
    assert!(out.contains("launcher: rshmemrun -- INVALID"), "{out}");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
}

#[test]
fn nvshmem_variables_are_shown_with_what_rshmem_does() {
    let o = info(
        &[],
        &[
            ("NVSHMEM_SYMMETRIC_SIZE", "1.5G"),
            ("NVSHMEM_NVTX", "on"),
            ("NVSHMEM_DISABLE_NVLS", "1"),
            ("NVSHMEM_DISABLE_P2P", "1"),
            ("RSHMEM_DISABLE_P2P", "0"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let out = stdout(&o);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line: {out}"))
            .to_string()
    };
    assert!(line("NVSHMEM_SYMMETRIC_SIZE ").contains("RSHMEM_HEAP_INITIAL=1610612736"));
    assert!(line("NVSHMEM_NVTX ").contains("ignored: no rshmem equivalent"));
    assert!(line("NVSHMEM_DISABLE_NVLS ").contains("nothing to do"));
    assert!(line("NVSHMEM_DISABLE_P2P ").contains("overridden by RSHMEM_DISABLE_P2P"));
    assert!(line("RSHMEM_HEAP_INITIAL ").contains("(from NVSHMEM_SYMMETRIC_SIZE=1.5G"));
    // Both sets in JSON too.
    let o = info(&["--json"], &[("NVSHMEM_SYMMETRIC_SIZE", "lots")]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a malformed NVSHMEM value exits 1: {o:?}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let nv = &v["nvshmem"][0];
    assert_eq!(nv["name"], "NVSHMEM_SYMMETRIC_SIZE");
    assert_eq!(nv["rshmem"], "RSHMEM_HEAP_INITIAL");
    assert!(
        nv["invalid"].as_str().unwrap_or_default().contains("size"),
        "{nv}"
    );
    assert!(stdout(&info(&[], &[])).contains("NVSHMEM variables: none set"));
}

/// `NVSHMEM_DEBUG` has two entries (to `RSHMEM_LOG` and to `RSHMEM_INFO`): one row, the one
/// whose entry does something with the value.
#[test]
fn nvshmem_debug_is_one_row_naming_what_its_value_sets() {
    for (value, says) in [
        ("VERSION", "RSHMEM_INFO=1"),
        ("WARN", "RSHMEM_LOG=warn"),
        ("LOUD", "INVALID"),
    ] {
        let o = info(&[], &[("NVSHMEM_DEBUG", value)]);
        let out = stdout(&o);
        let rows: Vec<&str> = out
            .lines()
            .filter(|l| l.trim_start().starts_with("NVSHMEM_DEBUG "))
            .collect();
        assert_eq!(rows.len(), 1, "NVSHMEM_DEBUG={value}: {out}");
        assert!(rows[0].contains(says), "NVSHMEM_DEBUG={value}: {}", rows[0]);
    }
}

#[test]
fn unknown_rshmem_name_is_shown_with_the_closest_known_one() {
    let o = info(&[], &[("RSHMEM_BAKCEND", "cpu")]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "an unknown name is a warning: {o:?}"
    );
    let out = stdout(&o);
    assert!(
        out.contains("RSHMEM_BAKCEND -- did you mean RSHMEM_BACKEND?"),
        "{out}"
    );
    let o = info(&["--json"], &[("RSHMEM_BAKCEND", "cpu")]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["unknown"][0]["did_you_mean"], "RSHMEM_BACKEND", "{v}");
}

#[test]
fn launcher_is_named() {
    let out = stdout(&info(&[], &[]));
    assert!(out.contains("launcher: singleton (rank 0 of 1)"), "{out}");
    let out = stdout(&info(
        &[],
        &[
            ("RSHMEM_LAUNCHER", "slurm"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
        ],
    ));
    assert!(out.contains("launcher: slurm (rank 0 of 1)"), "{out}");
}

#[test]
fn features_line_matches_the_build() {
    let out = stdout(&info(&[], &[]));
    let yes = |b: bool| if b { "yes" } else { "no" };
    let want = format!(
        "features: mpi: {}, verbs: {}",
        yes(cfg!(feature = "mpi")),
        yes(cfg!(feature = "verbs"))
    );
    assert!(out.lines().any(|l| l == want), "want {want:?} in {out}");
}

#[test]
fn transports_follow_what_is_compiled_in_and_found() {
    let out = stdout(&info(&[], &[]));
    let line = out
        .lines()
        .find(|l| l.starts_with("transports: "))
        .unwrap_or_else(|| panic!("no transports line: {out}"));
    let names: Vec<&str> = line["transports: ".len()..].split(", ").collect();
    assert!(names.contains(&"shm") && names.contains(&"tcp"), "{line}");
    assert_eq!(names.contains(&"verbs"), cfg!(feature = "verbs"), "{line}");
    assert_eq!(
        names.contains(&"p2p"),
        rshmem::cuda::driver_present(),
        "{line}"
    );
    assert_eq!(
        names.contains(&"ucx"),
        rshmem::probe_ucx(None).is_ok(),
        "{line}"
    );
    // A UCX that cannot be loaded is not offered.
    let out = stdout(&info(&[], &[("RSHMEM_UCX_LIB", "/nonexistent/libucp.so")]));
    assert!(out.contains("ucx: not available"), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("transports: "))
        .unwrap_or_default();
    assert!(!line.contains("ucx"), "{line}");
}

/// `rshmem-info --paths --json` run from `exe`, parsed.
fn paths_json(exe: &std::path::Path) -> serde_json::Value {
    let o = match Command::new(exe).args(["--paths", "--json"]).output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run {}: {e}", exe.display()),
    };
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    match serde_json::from_slice(&o.stdout) {
        Ok(v) => v,
        Err(e) => panic!("--paths --json is not JSON ({e}): {}", stdout(&o)),
    }
}

/// Whether `--paths` reports the file `name` as found, and at which path.
fn file<'a>(v: &'a serde_json::Value, name: &str) -> (bool, &'a str) {
    let Some(f) = v["files"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["name"] == name))
    else {
        panic!("--paths lists no {name}: {v}")
    };
    (
        f["found"].as_bool().unwrap_or(false),
        f["path"].as_str().unwrap_or(""),
    )
}

#[test]
fn paths_in_the_build_tree_name_the_checkout() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .expect("the workspace root");
    let v = paths_json(std::path::Path::new(env!("CARGO_BIN_EXE_rshmem-info")));
    assert_eq!(v["layout"], "build-tree", "{v}");
    assert_eq!(v["prefix"].as_str(), root.to_str(), "{v}");
    let inc = root.join("capi").join("include");
    assert_eq!(v["include_dir"].as_str(), inc.to_str(), "{v}");
    let (found, path) = file(&v, "shmem.h");
    assert!(found, "{v}");
    assert_eq!(path, inc.join("shmem.h").to_str().unwrap_or_default());
    let (found, _) = file(&v, "rshmem/rshmem.cuh");
    assert!(found, "{v}");
    // The libraries are looked for next to this binary (target/PROFILE).
    let exe_dir = std::path::Path::new(env!("CARGO_BIN_EXE_rshmem-info"))
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .expect("rshmem-info's directory");
    assert_eq!(v["lib_dir"].as_str(), exe_dir.to_str(), "{v}");
    assert!(v.get("cmake_dir").is_none(), "{v}");
    // The whole report carries the same object.
    let o = info(&["--json"], &[]);
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert_eq!(all["paths"]["layout"], "build-tree", "{all}");
    let text = stdout(&info(&[], &[]));
    assert!(
        text.contains(&format!("paths: build-tree at {}", root.display())),
        "{text}"
    );
}

#[test]
fn paths_in_an_installed_prefix_are_found_from_the_executable() {
    // PREFIX/bin/rshmem-info (a hard link to the built binary: its own path, not the build
    // tree's) next to PREFIX/include/rshmem/rshmem.cuh; only some of the files are there.
    let prefix = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("rshmem-info-prefix");
    let _ = std::fs::remove_dir_all(&prefix);
    for d in ["bin", "include/rshmem", "lib/cmake/rshmem", "lib/pkgconfig"] {
        std::fs::create_dir_all(prefix.join(d)).expect("creating the test prefix");
    }
    for f in [
        "include/rshmem.h",
        "include/rshmem/rshmem.cuh",
        "lib/librshmem.so",
        "lib/cmake/rshmem/rshmemConfig.cmake",
    ] {
        std::fs::write(prefix.join(f), "").expect("writing a test file");
    }
    let exe = prefix.join("bin").join("rshmem-info");
    std::fs::hard_link(env!("CARGO_BIN_EXE_rshmem-info"), &exe)
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_rshmem-info"), &exe).map(|_| ()))
        .expect("placing rshmem-info in the test prefix");
    let prefix = prefix.canonicalize().expect("canonical prefix");
    let v = paths_json(&exe);
    assert_eq!(v["layout"], "installed", "{v}");
    assert_eq!(v["prefix"].as_str(), prefix.to_str(), "{v}");
    let at = |p: &str| prefix.join(p).to_str().unwrap_or_default().to_string();
    assert_eq!(
        v["include_dir"].as_str(),
        Some(at("include").as_str()),
        "{v}"
    );
    assert_eq!(v["nvshmem_include_dir"], at("include/nvshmem"), "{v}");
    assert_eq!(v["lib_dir"], at("lib"), "{v}");
    assert_eq!(v["cmake_dir"], at("lib/cmake/rshmem"), "{v}");
    assert_eq!(v["pkgconfig_dir"], at("lib/pkgconfig"), "{v}");
    assert_eq!(
        file(&v, "librshmem.so"),
        (true, at("lib/librshmem.so").as_str())
    );
    assert!(file(&v, "rshmemConfig.cmake").0, "{v}");
    assert_eq!(
        file(&v, "libshmem.a"),
        (false, at("lib/libshmem.a").as_str())
    );
    let note = v["note"].as_str().unwrap_or("");
    assert!(
        note.contains("libshmem.a") && note.contains("rshmem.pc"),
        "{v}"
    );
    assert!(!note.contains("librshmem.so"), "{v}");
    let _ = std::fs::remove_dir_all(&prefix);
}

/// With a UCX found, the report says which UCX transports it will use (`UCX_TLS` and the
/// resources under it) and whether it can carry GPU heaps (Debian's UCX cannot: the line names
/// the fix).
#[test]
fn ucx_tls_and_cuda_support_are_reported() {
    let Ok(p) = rshmem::probe_ucx(None) else {
        eprintln!("SKIPPED: no UCX here");
        return;
    };
    let out = stdout(&info(&[], &[("UCX_TLS", "tcp")]));
    assert!(out.contains("  UCX_TLS: tcp\n"), "{out}");
    let res = out
        .lines()
        .find_map(|l| l.strip_prefix("  resources it will use: "))
        .unwrap_or_else(|| panic!("no resources line: {out}"));
    assert!(res.split(", ").all(|r| r.starts_with("tcp/")), "{res}");
    let cuda = out
        .lines()
        .find_map(|l| l.strip_prefix("  CUDA support (GPU heaps): "))
        .unwrap_or_else(|| panic!("no CUDA line: {out}"));
    // UCX_TLS=tcp leaves cuda_copy out whatever the build.
    assert!(
        cuda.starts_with("no") || cuda.starts_with("module installed, not usable"),
        "{cuda}"
    );
    assert!(cuda.contains("cuda_copy"), "{cuda}");
    if !p.cuda() && p.cuda_module == Some(false) {
        assert!(
            cuda.contains("libucx-cu13") && cuda.contains("RSHMEM_UCX_LIB"),
            "{cuda}"
        );
    }
    if std::env::var_os("UCX_TLS").is_none() {
        let out = stdout(&info(&[], &[]));
        assert!(out.contains("  UCX_TLS: unset"), "{out}");
    }
}
