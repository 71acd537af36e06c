//! Another local user can neither learn a job's secret nor take one of its ranks.
//!
//! Needs root (it creates the user `rshmem-other` and runs processes as it), so the test is
//! ignored by default; CI, which runs as root, runs it with
//! `cargo test -p rshmem-bootstrap --test second_user -- --ignored`.
//! It also needs Open MPI's `mpirun` for the `mpirun` cases.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rshmem_bootstrap::{Bootstrap, Error, TcpBootstrap, UniqueId};

const OTHER_USER: &str = "rshmem-other";

/// The other user's (uid, gid), creating the user if needed.
fn other_user() -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, OTHER_USER]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let st = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(OTHER_USER)
            .status()
            .expect("running useradd");
        assert!(st.success(), "useradd {OTHER_USER} failed: {st}");
    }
    let (uid, gid) = (id("-u").unwrap(), id("-g").unwrap());
    assert_ne!(uid, 0);
    (uid, gid)
}

/// A directory every user can enter, holding a copy of this test binary every user can run
/// (the build tree usually is private to root).
fn shared_dir(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("rshmem-second-user-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join("second_user_test");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, exe)
}

/// What the other user could do, as reported by `intruder_entry`.
#[derive(Debug)]
struct Intrusion {
    /// Processes whose command line holds the secret.
    cmdline_hits: usize,
    /// Processes whose environment it could read and that hold the secret.
    environ_hits: usize,
    /// Whether the secret file could be read (None: no file given).
    file_read: Option<bool>,
    /// The outcome of claiming rank 1 without the secret (None: not tried).
    claim: Option<String>,
    raw: String,
}

/// Runs `intruder_entry` of this binary as the other user.
fn intrude(exe: &Path, secret: &str, file: Option<&Path>, claim_at: Option<&str>) -> Intrusion {
    let (uid, gid) = other_user();
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid",
        &uid.to_string(),
        "--regid",
        &gid.to_string(),
        "--clear-groups",
        "--",
    ])
    .arg(exe)
    .args([
        "--exact",
        "intruder_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env_clear()
    .env("PATH", "/usr/bin:/bin")
    .env("INTRUDER_LOOK_FOR", secret);
    if let Some(f) = file {
        cmd.env("INTRUDER_FILE", f);
    }
    if let Some(a) = claim_at {
        cmd.env("INTRUDER_CLAIM_AT", a);
    }
    let out = cmd.output().expect("running setpriv");
    let raw = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "intruder failed: {raw}");
    let field = |key: &str| -> Option<String> {
        raw.lines()
            .find_map(|l| l.find(&format!("INTRUDER {key}=")).map(|i| &l[i..]))
            .map(|l| l[format!("INTRUDER {key}=").len()..].to_owned())
    };
    Intrusion {
        cmdline_hits: field("cmdline").and_then(|v| v.parse().ok()).expect(&raw),
        environ_hits: field("environ").and_then(|v| v.parse().ok()).expect(&raw),
        file_read: field("file").map(|v| v == "read"),
        claim: field("claim"),
        raw,
    }
}

/// Not a test of its own: what the other user does (run by `intrude` as that user).
#[test]
fn intruder_entry() {
    let Some(secret) = std::env::var_os("INTRUDER_LOOK_FOR") else {
        return;
    };
    let secret = secret.to_string_lossy().into_owned();
    let (mut cmdline, mut environ) = (0, 0);
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let p = entry.path();
        // Every process but this one (whose environment holds what it looks for).
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        let holds = |what: &str| {
            std::fs::read(p.join(what)).is_ok_and(|b| String::from_utf8_lossy(&b).contains(&secret))
        };
        cmdline += usize::from(holds("cmdline"));
        environ += usize::from(holds("environ"));
    }
    println!("INTRUDER cmdline={cmdline}");
    println!("INTRUDER environ={environ}");
    if let Some(f) = std::env::var_os("INTRUDER_FILE") {
        let mut s = String::new();
        let read = std::fs::File::open(&f).and_then(|mut h| h.read_to_string(&mut s));
        println!(
            "INTRUDER file={}",
            if read.is_ok() { "read" } else { "denied" }
        );
    }
    if let Some(addr) = std::env::var_os("INTRUDER_CLAIM_AT") {
        // Without the secret: a guess.
        let uid = UniqueId::new(addr.to_string_lossy().into_owned()).unwrap();
        let r = TcpBootstrap::new(1, 2, &uid, Some(Duration::from_secs(10)), None);
        let outcome = match r {
            Ok(_) => "joined".to_owned(),
            Err(Error::Refused(m)) => format!("refused: {m}"),
            Err(e) => format!("error: {e}"),
        };
        println!("INTRUDER claim={outcome}");
    }
}

/// Not a test of its own: one PE of the jobs started by `secret_stays_with_its_user`. Joins,
/// says so, and stays until the test is done looking.
#[test]
fn job_pe_entry() {
    let Some(dir) = std::env::var_os("SECOND_USER_JOB_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let (info, boot) = rshmem_bootstrap::from_env(Some(Duration::from_secs(60))).unwrap();
    let all = boot.allgather(&[info.rank as u8]).unwrap();
    assert_eq!(all.len(), info.size);
    // Which secret the job runs with, for the test to compare (owner-only, like the secret).
    let secret = info
        .uid
        .as_ref()
        .map(UniqueId::secret_hex)
        .unwrap_or_default();
    let tmp = dir.join(format!(".joined.{}", info.rank));
    std::fs::write(&tmp, secret).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, dir.join(format!("joined.{}", info.rank))).unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !dir.join("done").exists() && Instant::now() < until {
        thread::sleep(Duration::from_millis(20));
    }
    boot.barrier().unwrap();
}

/// Waits until both PEs of a job have joined (or the job ended: then fails with its output);
/// returns the secret the job runs with.
fn wait_joined(job: &mut Child, dir: &Path) -> String {
    let until = Instant::now() + Duration::from_secs(60);
    while !(dir.join("joined.0").exists() && dir.join("joined.1").exists()) {
        if let Ok(Some(st)) = job.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = job.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("the job ended before joining: {st}\n{err}");
        }
        assert!(Instant::now() < until, "the job did not start");
        thread::sleep(Duration::from_millis(20));
    }
    let used = std::fs::read_to_string(dir.join("joined.0")).unwrap();
    assert_eq!(used, std::fs::read_to_string(dir.join("joined.1")).unwrap());
    used
}

/// Ends a job started by a test: lets it finish, then checks its status.
fn finish(mut job: Child, dir: &Path) {
    std::fs::write(dir.join("done"), "").unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = job.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = job.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            assert!(st.success(), "job failed: {st}\n{err}");
            break;
        }
        if Instant::now() > until {
            let _ = job.kill();
            panic!("job did not finish");
        }
        thread::sleep(Duration::from_millis(20));
    }
    for f in ["joined.0", "joined.1", "done"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn random_secret() -> String {
    UniqueId::new("h:1").unwrap().secret_hex()
}

fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// mpirun as root with two PEs of this binary's `job_pe_entry`; `args` are the job's own
/// mpirun options (how the secret is passed), `env` the variables mpirun itself gets.
fn mpirun_job(exe: &Path, dir: &Path, args: &[String], env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .args(["-x", "SECOND_USER_JOB_DIR"])
        .args(args)
        .arg(exe)
        .args(["--exact", "job_pe_entry", "--nocapture", "--test-threads=1"])
        .env("SECOND_USER_JOB_DIR", dir)
        .env_remove("RSHMEM_BOOTSTRAP_SECRET")
        .env_remove("RSHMEM_BOOTSTRAP_SECRET_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn mpirun")
}

#[test]
#[ignore = "needs root: creates a second user and runs processes as it (CI runs it)"]
fn secret_stays_with_its_user() {
    let (dir, exe) = shared_dir("secret");
    let jobs = dir.join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();

    // rshmemrun: the secret travels in the PEs' environment only.
    let job = Command::new(env!("CARGO_BIN_EXE_rshmemrun"))
        .args(["-n", "2", "--timeout", "120"])
        .arg(&exe)
        .args(["--exact", "job_pe_entry", "--nocapture", "--test-threads=1"])
        .env("SECOND_USER_JOB_DIR", &jobs)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut job = job;
    let used = wait_joined(&mut job, &jobs);
    // The secret is in the PEs' environment: read it there (as root) to look for it.
    let secret = rshmemrun_secret(&exe).expect("no PE of the job found in /proc");
    assert_eq!(used, secret);
    let seen = intrude(&exe, &secret, None, None);
    assert_eq!(
        (seen.cmdline_hits, seen.environ_hits),
        (0, 0),
        "rshmemrun's secret is visible to another user: {}",
        seen.raw
    );
    finish(job, &jobs);

    if !have("mpirun") {
        eprintln!("mpirun not installed: the mpirun cases did not run");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // Control: the form the docs used to show puts the secret on mpirun's command line, where
    // the other user finds it. This proves the search works.
    let secret = random_secret();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut job = mpirun_job(
        &exe,
        &jobs,
        &[
            "-x".into(),
            format!("RSHMEM_BOOTSTRAP_ADDR={addr}"),
            "-x".into(),
            format!("RSHMEM_BOOTSTRAP_SECRET={secret}"),
        ],
        &[],
    );
    assert_eq!(wait_joined(&mut job, &jobs), secret);
    let seen = intrude(&exe, &secret, None, None);
    assert!(
        seen.cmdline_hits > 0,
        "control failed: the secret given as -x VAR=value was not found: {}",
        seen.raw
    );
    finish(job, &jobs);

    // `-x RSHMEM_BOOTSTRAP_SECRET` with the variable exported: not visible.
    let secret = random_secret();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut job = mpirun_job(
        &exe,
        &jobs,
        &[
            "-x".into(),
            format!("RSHMEM_BOOTSTRAP_ADDR={addr}"),
            "-x".into(),
            "RSHMEM_BOOTSTRAP_SECRET".into(),
        ],
        &[("RSHMEM_BOOTSTRAP_SECRET", &secret)],
    );
    assert_eq!(wait_joined(&mut job, &jobs), secret);
    let seen = intrude(&exe, &secret, None, None);
    assert_eq!(
        (seen.cmdline_hits, seen.environ_hits),
        (0, 0),
        "exported secret visible to another user: {}",
        seen.raw
    );
    finish(job, &jobs);

    // RSHMEM_BOOTSTRAP_SECRET_FILE: the path is public, the file is not.
    let secret = random_secret();
    let file = dir.join("job.secret");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut job = mpirun_job(
        &exe,
        &jobs,
        &[
            "-x".into(),
            format!("RSHMEM_BOOTSTRAP_ADDR={addr}"),
            "-x".into(),
            format!("RSHMEM_BOOTSTRAP_SECRET_FILE={}", file.display()),
        ],
        &[],
    );
    assert_eq!(
        wait_joined(&mut job, &jobs),
        secret,
        "the job did not run with the secret file's secret"
    );
    let seen = intrude(&exe, &secret, Some(&file), None);
    assert_eq!(
        (seen.cmdline_hits, seen.environ_hits, seen.file_read),
        (0, 0, Some(false)),
        "secret file readable by another user: {}",
        seen.raw
    );
    finish(job, &jobs);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The secret of the rshmemrun job running `exe`, read (as root) from a PE's environment.
fn rshmemrun_secret(exe: &Path) -> Option<String> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let p = entry.path();
        let Ok(cmd) = std::fs::read(p.join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmd).contains(&*exe.to_string_lossy()) {
            continue;
        }
        let Ok(env) = std::fs::read(p.join("environ")) else {
            continue;
        };
        for var in env.split(|&b| b == 0) {
            if let Some(v) = var.strip_prefix(b"RSHMEM_BOOTSTRAP_SECRET=") {
                return Some(String::from_utf8_lossy(v).into_owned());
            }
        }
    }
    None
}

#[test]
#[ignore = "needs root: creates a second user and runs processes as it (CI runs it)"]
fn rank_cannot_be_claimed_without_the_secret() {
    let (dir, exe) = shared_dir("claim");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let uid = UniqueId::new(addr.clone()).unwrap();
    let file = dir.join("job.secret");
    std::fs::write(&file, uid.secret_hex()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let timeout = Some(Duration::from_secs(60));
    let root = {
        let uid = uid.clone();
        thread::spawn(move || {
            let b = TcpBootstrap::new(0, 2, &uid, timeout, Some(listener))?;
            b.allgather(b"zero")
        })
    };
    // The other user looks everywhere for the secret, then claims rank 1 with a guess.
    let seen = intrude(&exe, &uid.secret_hex(), Some(&file), Some(&addr));
    assert_eq!(
        (seen.cmdline_hits, seen.environ_hits, seen.file_read),
        (0, 0, Some(false)),
        "{}",
        seen.raw
    );
    let claim = seen.claim.clone().unwrap_or_default();
    assert!(
        claim.starts_with("refused: ") && claim.contains("wrong job secret"),
        "the claim without the secret was not refused: {}",
        seen.raw
    );
    // Rank 1 is still free for the real PE.
    let one = thread::spawn(move || {
        let b = TcpBootstrap::new(1, 2, &uid, timeout, None)?;
        b.allgather(b"one")
    });
    let want = vec![b"zero".to_vec(), b"one".to_vec()];
    assert_eq!(root.join().unwrap().unwrap(), want);
    assert_eq!(one.join().unwrap().unwrap(), want);
    let _ = std::fs::remove_dir_all(&dir);
}
