//! What the C-program tests of both C libraries share (`capi/tests/c_programs.rs`, libshmem;
//! `capi/rshmem-c/tests/c_api.rs`, librshmem; each includes this file with `#[path]`):
//! building a library and `rshmemrun` into the profile directory the test binary was built for,
//! running a program under `rshmemrun`, the checks of what it printed, and the two sides of the
//! header-versus-library checks (what a library exports, what a preprocessed header declares).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>`: where the test binary, the libraries and `rshmemrun` live.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary is in target/<profile>/deps")
        .to_path_buf()
}

/// Builds the libraries of `package` (with `features`, if any) and `rshmemrun` into the profile
/// directory, with the profile and target directory of this test binary; returns the directory
/// after checking that `lib` (a file name) is in it.
pub fn build(workspace: &Path, package: &str, features: Option<&str>, lib: &str) -> PathBuf {
    let dir = profile_dir();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args([
        "build",
        "-p",
        package,
        "-p",
        "rshmem-bootstrap",
        "--lib",
        "--bin",
        "rshmemrun",
    ]);
    if let Some(f) = features {
        cmd.args(["--features", f]);
    }
    match dir.file_name().and_then(|s| s.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(p) => {
            cmd.args(["--profile", p]);
        }
    }
    if let Some(parent) = dir.parent() {
        if parent.join("CACHEDIR.TAG").exists() {
            cmd.arg("--target-dir").arg(parent);
        }
    }
    let st = cmd
        .current_dir(workspace)
        .status()
        .expect("running cargo build");
    assert!(st.success(), "building {lib} and rshmemrun failed: {st}");
    assert!(dir.join(lib).is_file(), "no {lib} in {}", dir.display());
    dir
}

/// How a job ended and what it printed.
pub struct Ran {
    pub ok: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` (program and arguments) with `n` PEs under `dir`'s `rshmemrun` (job timeout
/// 120 s, `RSHMEM_TIMEOUT=60`) with the environment `env` added.
pub fn run(dir: &Path, cmd: &[&str], n: usize, env: &[(&str, &str)]) -> Ran {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(dir.join("rshmemrun"))
        .args(["-n", &n.to_string(), "--timeout", "120"])
        .args(cmd)
        .env("RSHMEM_TIMEOUT", "60")
        .envs(env.iter().copied())
        .output()
        .expect("running rshmemrun");
    Ran {
        ok: status.success(),
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// Expects the job `what` on `n` PEs to have succeeded with `OK <name> PE <p>` from every PE.
pub fn expect_ok(what: &str, name: &str, r: &Ran, n: usize) {
    assert!(
        r.ok,
        "{what} on {n} PEs exited with {:?}\nstdout:\n{}\nstderr:\n{}",
        r.code, r.stdout, r.stderr
    );
    for pe in 0..n {
        let line = format!("OK {name} PE {pe}");
        assert!(
            r.stdout.lines().any(|l| l == line),
            "{what} on {n} PEs: no `{line}` in\n{}\nstderr:\n{}",
            r.stdout,
            r.stderr
        );
    }
}

/// Expects the job `name` on `n` PEs to have failed, not by the job timeout, with stderr naming
/// `call` (`<call>: `) and containing `cause`, and no PE past the failing call (`NOT REACHED`).
pub fn expect_abort(name: &str, r: &Ran, n: usize, call: &str, cause: &str) {
    assert!(!r.ok, "{name} on {n} PEs should fail:\n{}", r.stdout);
    assert_ne!(r.code, Some(124), "{name} on {n} PEs hung:\n{}", r.stderr);
    assert!(
        r.stderr.contains(&format!("{call}: ")) && r.stderr.contains(cause),
        "{name} on {n} PEs: stderr does not name {call} and `{cause}`:\n{}",
        r.stderr
    );
    assert!(
        !r.stdout.contains("NOT REACHED"),
        "{name} on {n} PEs: a PE went on:\n{}",
        r.stdout
    );
}

/// The defined dynamic text symbols of the library `lib` (`nm -D --defined-only`).
pub fn exported_functions(lib: &Path) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("running nm (binutils)");
    assert!(out.status.success(), "nm -D {} failed", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "T", name] => Some(name.to_string()),
            _ => None,
        })
        .collect()
}

/// The functions a preprocessed C header (`cc -E -P` output) declares, inline functions and
/// macros aside: the names before the `(` of each top-level declaration (the bodies of inline
/// functions and structs end a statement; typedefs and statics are skipped).
pub fn declared_functions(preprocessed: &[u8]) -> BTreeSet<String> {
    let mut top = String::new();
    let mut depth = 0usize;
    for c in String::from_utf8_lossy(preprocessed).chars() {
        match c {
            '{' => {
                if depth == 0 {
                    top.push(';');
                }
                depth += 1;
            }
            '}' => depth = depth.saturating_sub(1),
            c if depth == 0 => top.push(c),
            _ => {}
        }
    }
    top.split(';')
        .map(str::trim)
        .filter(|st| !st.starts_with("typedef") && !st.starts_with("static"))
        .filter_map(|st| {
            let head = st[..st.find('(')?].trim_end();
            head.rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .filter(|n| !n.is_empty())
                .map(str::to_string)
        })
        .collect()
}

/// `mpicc --showme:<what>` split into words, or `None` without Open MPI's mpicc.
pub fn mpicc_flags(what: &str) -> Option<Vec<String>> {
    let out = Command::new("mpicc")
        .arg(format!("--showme:{what}"))
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    })
}
