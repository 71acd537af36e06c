//! Shared helpers of the integration tests: locating `rshmem-testpe` and `rshmemrun`, launching
//! jobs with a clean environment and a deadline, and checking what the PEs printed.

// Each test file uses a different subset of these helpers.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The PE program under test.
pub fn testpe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rshmem-testpe"))
}

/// The launcher: `rshmemrun` next to `rshmem-testpe` in the same target directory, built with
/// the same profile (once per test binary) if it is not there yet.
pub fn rshmemrun() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let pe = testpe();
        let dir = pe.parent().expect("rshmem-testpe has a parent directory");
        let run = dir.join("rshmemrun");
        if !run.is_file() {
            build_rshmemrun(dir);
        }
        assert!(
            run.is_file(),
            "{} is missing after building it",
            run.display()
        );
        run
    })
    .clone()
}

/// `cargo build -p rshmem-bootstrap --bin rshmemrun` into the profile directory `dir`.
fn build_rshmemrun(dir: &Path) {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "rshmem-bootstrap", "--bin", "rshmemrun"]);
    match dir.file_name().and_then(|s| s.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
    }
    // target/<profile>, or target/<triple>/<profile> when cross-compiling.
    if let Some(parent) = dir.parent() {
        if parent.join("CACHEDIR.TAG").exists() {
            cmd.arg("--target-dir").arg(parent);
        } else if let (Some(triple), Some(root)) = (parent.file_name(), parent.parent()) {
            cmd.arg("--target")
                .arg(triple)
                .arg("--target-dir")
                .arg(root);
        }
    }
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
    eprintln!("building rshmemrun: {cmd:?}");
    let status = cmd.status().expect("running cargo to build rshmemrun");
    assert!(status.success(), "building rshmemrun failed: {status}");
}

/// What a finished command did.
#[derive(Debug)]
pub struct Run {
    /// The command line, for messages.
    pub what: String,
    /// How it ended.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
    /// Wall time from start to exit.
    pub elapsed: Duration,
}

impl Run {
    /// Everything about the run, for assertion messages.
    pub fn report(&self) -> String {
        format!(
            "command: {}\nstatus: {}\nelapsed: {:?}\n--- stdout ---\n{}--- stderr ---\n{}--------------",
            self.what, self.status, self.elapsed, self.stdout, self.stderr
        )
    }

    /// Panics with the report unless `cond` holds.
    pub fn check(&self, cond: bool, what: &str) {
        assert!(cond, "{what}\n{}", self.report());
    }

    /// Checks that the job succeeded, that each of PEs `pes` printed `PE <pe>: ok <scenario>`
    /// exactly once, and that nobody printed a failure.
    pub fn assert_ok(&self, pes: impl IntoIterator<Item = usize>, scenario: &str) {
        self.check(self.status.success(), "the job failed");
        self.check(!self.stderr.contains(": FAIL "), "a PE reported a failure");
        for pe in pes {
            let line = format!("PE {pe}: ok {scenario}");
            let count = self.stdout.lines().filter(|l| l.trim_end() == line).count();
            self.check(
                count == 1,
                &format!("expected the line {line:?} exactly once, found it {count} times"),
            );
        }
    }

    /// Lines of stderr that start with `prefix`.
    pub fn stderr_lines(&self, prefix: &str) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }
}

/// Variables of the caller's environment that pass through to the jobs: they choose where the
/// heap lives (so the suite can run on the GPU backend too) and how much is logged.
const PASS_THROUGH: &[&str] = &[
    "RSHMEM_BACKEND",
    "RSHMEM_DEVICE",
    "RSHMEM_DEVICE_CHECKS",
    "RSHMEM_CACHE_DIR",
    "RSHMEM_LOG",
];

/// Removes the variables rshmem or its bootstrap read (except [`PASS_THROUGH`]), so that the
/// caller's environment (say, tests started under a launcher) cannot leak into a job.
pub fn clean_env(cmd: &mut Command) {
    for v in rshmem::config::all_env_vars() {
        if !PASS_THROUGH.contains(&v.name) {
            cmd.env_remove(v.name);
        }
    }
    // NVSHMEM's variables stand in for rshmem's, and other RSHMEM_ names draw a warning.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("NVSHMEM_")
            || (k.starts_with("RSHMEM_") && !PASS_THROUGH.contains(&k.as_ref()))
        {
            cmd.env_remove(k.as_ref());
        }
    }
}

/// Starts `n` PEs of `rshmem-testpe ARGS` without a launcher (each PE gets its rank, the job's
/// size and a fresh unique id through the environment, then `env`), waits for each at most
/// `limit` and returns each PE's run. Nothing stops the survivors when a PE dies: they must
/// leave on their own.
pub fn unlaunched(n: usize, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Vec<Run> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let id = rshmem::UniqueId::new(format!("127.0.0.1:{port}")).expect("a unique id");
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let mut cmd = Command::new(testpe());
            cmd.args(args);
            clean_env(&mut cmd);
            cmd.env("RSHMEM_RANK", rank.to_string())
                .env("RSHMEM_SIZE", n.to_string())
                .env("RSHMEM_BOOTSTRAP_ADDR", id.addr())
                .env("RSHMEM_BOOTSTRAP_SECRET", id.secret_hex());
            for (k, v) in env {
                cmd.env(k, v);
            }
            std::thread::spawn(move || run_cmd(cmd, limit))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("a PE thread panicked"))
        .collect()
}

/// Runs `cmd` to completion, killing it after `limit`.
pub fn run_cmd(mut cmd: Command, limit: Duration) -> Run {
    let what = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut killed = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for the child") {
            break st;
        }
        if start.elapsed() > limit && !killed {
            // rshmemrun's PEs die with it (PR_SET_PDEATHSIG).
            let _ = child.kill();
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    let run = Run {
        what,
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
        elapsed,
    };
    run.check(
        !killed,
        &format!("killed after {limit:?}: the launcher's own --timeout did not stop it"),
    );
    run
}

/// A job of `rshmem-testpe` under `rshmemrun`.
pub struct Job {
    n: usize,
    /// The PE program (None: `rshmem-testpe`).
    program: Option<PathBuf>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    timeout: u32,
    no_core: bool,
}

/// A job of `n` PEs running `scenario`, with `RSHMEM_TIMEOUT=30` and `--timeout 60`.
pub fn job(n: usize, scenario: &str) -> Job {
    Job {
        n,
        program: None,
        args: vec![scenario.to_string()],
        env: vec![("RSHMEM_TIMEOUT".into(), "30".into())],
        timeout: 60,
        no_core: false,
    }
}

impl Job {
    /// Sets an environment variable of the PEs.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.retain(|(name, _)| name != k);
        self.env.push((k.into(), v.into()));
        self
    }

    /// Appends an argument of the scenario.
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    /// Runs `program` (without arguments) instead of `rshmem-testpe SCENARIO`.
    pub fn program(mut self, program: &Path) -> Self {
        self.program = Some(program.to_path_buf());
        self.args.clear();
        self
    }

    /// The launcher's `--timeout`.
    pub fn timeout(mut self, secs: u32) -> Self {
        self.timeout = secs;
        self
    }

    /// Runs the launcher under `ulimit -c 0`, for PEs that abort on purpose.
    pub fn no_core_dumps(mut self) -> Self {
        self.no_core = true;
        self
    }

    /// Runs the job; the test harness kills it 30 s after the launcher's own timeout.
    pub fn run(self) -> Run {
        let mut cmd = if self.no_core {
            let mut c = Command::new("sh");
            c.args(["-c", "ulimit -c 0; exec \"$@\"", "sh"])
                .arg(rshmemrun());
            c
        } else {
            Command::new(rshmemrun())
        };
        cmd.arg("-n")
            .arg(self.n.to_string())
            .arg("--timeout")
            .arg(self.timeout.to_string());
        cmd.arg(self.program.unwrap_or_else(testpe))
            .args(&self.args);
        clean_env(&mut cmd);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        run_cmd(cmd, Duration::from_secs(u64::from(self.timeout) + 30))
    }
}

/// Runs `rshmem-testpe` directly (no launcher) with only `env` set among rshmem's variables.
pub fn direct(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(testpe());
    cmd.args(args);
    clean_env(&mut cmd);
    cmd.envs(env.iter().copied());
    run_cmd(cmd, Duration::from_secs(60))
}

/// Runs `scenario` on `n` PEs with extra variables and checks that every PE passed.
pub fn scenario(n: usize, name: &str, env: &[(&str, &str)]) -> Run {
    let mut j = job(n, name);
    for (k, v) in env {
        j = j.env(k, v);
    }
    let r = j.run();
    r.assert_ok(0..n, name);
    r
}

/// A fresh directory under the system's temp directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `rshmem-tests-<pid>-<n>-<nanos>`.
    pub fn new() -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let p =
            std::env::temp_dir().join(format!("rshmem-tests-{}-{n}-{nanos}", std::process::id()));
        std::fs::create_dir(&p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
        TempDir(p)
    }

    /// The directory, as a string argument.
    pub fn arg(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
