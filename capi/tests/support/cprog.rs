//! What the C-program tests of both C libraries share (`capi/tests/c_programs.rs`, libshmem;
//! `capi/rshmem-c/tests/c_api.rs`, librshmem; each includes this file with `#[path]`):
//! building a library and `rshmemrun` into the profile directory the test binary was built for,
//! running a program under `rshmemrun`, the checks of what it printed, and the two sides of the
//! header-versus-library checks (what a library exports, what a preprocessed header declares).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Defines one `#[test]` for each C program that must pass: `test_name => "program";` (doc
/// comments before a name stay on its test) calls `passes("program")` of the including file.
macro_rules! passing_programs {
    ($($(#[$doc:meta])* $test:ident => $prog:literal;)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $test() {
                passes($prog);
            }
        )*
    };
}

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
    ran(Command::new(dir.join("rshmemrun"))
        .args(["-n", &n.to_string(), "--timeout", "120"])
        .args(cmd)
        .env("RSHMEM_TIMEOUT", "60")
        .envs(env.iter().copied()))
}

/// Runs `cmd` to its end: how it ended and what it printed.
pub fn ran(cmd: &mut Command) -> Ran {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {:?}: {e}", cmd.get_program()));
    Ran {
        ok: status.success(),
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// Runs `cmd` (a compiler, say) and returns what it wrote to stdout; panics naming `what` with
/// what it wrote to stderr when it fails.
pub fn stdout_of(cmd: &mut Command, what: &str) -> Vec<u8> {
    let r = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: running {:?}: {e}", cmd.get_program()));
    assert!(
        r.status.success(),
        "{what} failed ({}):\n{}",
        r.status,
        String::from_utf8_lossy(&r.stderr)
    );
    r.stdout
}

/// `timeout 120 mpirun --oversubscribe -np <n>` (`--allow-run-as-root` as root) with Open MPI's
/// single-copy mechanism off and `RSHMEM_TIMEOUT=60`; the program and its arguments go after.
pub fn mpirun(n: usize) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["120", "mpirun", "--oversubscribe", "-np", &n.to_string()]);
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        cmd.arg("--allow-run-as-root");
    }
    cmd.env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("RSHMEM_TIMEOUT", "60");
    cmd
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

/// Runs the `global_exit` test program (`bin`) with 2 and 4 PEs under `dir`'s `rshmemrun`:
/// every job must end with its global exit's status 3, not by the job timeout, and no PE may go
/// past the call (`NOT REACHED`).
pub fn expect_global_exit(dir: &Path, bin: &Path) {
    for n in [2, 4] {
        let r = run(dir, &[bin.to_str().expect("UTF-8 path")], n, &[]);
        assert_eq!(
            r.code,
            Some(3),
            "global_exit on {n} PEs:\n{}\n{}",
            r.stdout,
            r.stderr
        );
        assert!(
            !r.stdout.contains("NOT REACHED"),
            "global_exit on {n} PEs: a PE went on:\n{}",
            r.stdout
        );
    }
}

/// The overflowing typed transfers both `extent` test programs make: (the program's argument,
/// which is also the call's name after the library's prefix, the element count, the element
/// size); `count × element size` wraps in each.
const EXTENT_CASES: [(&str, &str, usize); 4] = [
    ("long_put", "2305843009213693953", 8),
    ("long_get", "2305843009213693953", 8),
    ("int_put", "4611686018427387904", 4),
    ("long_put_nbi", "2305843009213693953", 8),
];

/// Runs the `extent` test program (`bin`) with 2 PEs under `dir`'s `rshmemrun` once for each of
/// [`EXTENT_CASES`] (calls named `<prefix><argument>`) and of `more` (the program's argument, the
/// call, the element count, the element size): each job must end naming the call and the
/// overflowing `count × element size`.
pub fn expect_extent_overflow_aborts(
    dir: &Path,
    bin: &Path,
    prefix: &str,
    more: &[(&str, &str, &str, usize)],
) {
    let bin = bin.to_str().expect("UTF-8 path");
    let common = EXTENT_CASES
        .iter()
        .map(|&(arg, elems, size)| (arg, format!("{prefix}{arg}"), elems, size));
    let more = more
        .iter()
        .map(|&(arg, call, elems, size)| (arg, call.to_string(), elems, size));
    for (arg, call, elems, size) in common.chain(more) {
        let r = run(dir, &[bin, arg], 2, &[]);
        expect_abort(
            &format!("extent {arg}"),
            &r,
            2,
            &call,
            &format!("transfer extent of {elems} elements of {size} bytes overflows"),
        );
    }
}

/// The defined dynamic text symbols of the library `lib` (`nm -D --defined-only`).
pub fn exported_functions(lib: &Path) -> BTreeSet<String> {
    let out = stdout_of(
        Command::new("nm").args(["-D", "--defined-only"]).arg(lib),
        &format!("nm -D {}", lib.display()),
    );
    String::from_utf8_lossy(&out)
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
