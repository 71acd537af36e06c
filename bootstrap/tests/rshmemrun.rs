//! Runs the built `rshmemrun` binary.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const RSHMEMRUN: &str = env!("CARGO_BIN_EXE_rshmemrun");

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

fn drain(mut r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    })
}

/// Waits for `child`, killing it (and failing the test) if it takes longer than `limit`.
fn wait_bounded(child: &mut Child, limit: Duration) -> ExitStatus {
    let until = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rshmemrun did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

fn rshmemrun_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let start = Instant::now();
    let mut cmd = Command::new(RSHMEMRUN);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.env_remove("RSHMEM_RUN_TIMEOUT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn rshmemrun");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let status = wait_bounded(&mut child, Duration::from_secs(60));
    let elapsed = start.elapsed();
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed,
    }
}

fn rshmemrun(args: &[&str]) -> Run {
    rshmemrun_with(args, &[])
}

#[test]
fn all_pes_succeed_and_see_their_environment() {
    let script = r#"echo "rank=$RSHMEM_RANK size=$RSHMEM_SIZE local=$RSHMEM_LOCAL_RANK/$RSHMEM_LOCAL_SIZE launcher=$RSHMEM_LAUNCHER addr=$RSHMEM_BOOTSTRAP_ADDR secret=$RSHMEM_BOOTSTRAP_SECRET fd=${RSHMEM_BOOTSTRAP_LISTEN_FD:-none}""#;
    let r = rshmemrun(&["-n", "4", "sh", "-c", script]);
    assert!(r.status.success(), "{:?} {}", r.status, r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", r.stdout);
    let mut ranks = BTreeSet::new();
    let mut addrs = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for line in &lines {
        // Output is passed through unchanged: no prefixes.
        assert!(line.starts_with("rank="), "{line}");
        let field = |k: &str| {
            line.split(' ')
                .find_map(|f| f.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("{k} missing in {line}"))
                .to_owned()
        };
        let rank: usize = field("rank").parse().unwrap();
        ranks.insert(rank);
        assert_eq!(field("size"), "4");
        assert_eq!(field("local"), format!("{rank}/4"));
        assert_eq!(field("launcher"), "rshmemrun");
        let addr = field("addr");
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        addrs.insert(addr);
        let secret = field("secret");
        assert_eq!(secret.len(), 32);
        assert!(secret
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        secrets.insert(secret);
        let fd = field("fd");
        if rank == 0 {
            assert!(fd.parse::<i32>().is_ok_and(|fd| fd > 2), "rank 0 fd={fd}");
        } else {
            assert_eq!(fd, "none", "rank {rank} must not inherit the listener");
        }
    }
    assert_eq!(ranks, (0..4).collect());
    assert_eq!(addrs.len(), 1);
    assert_eq!(secrets.len(), 1);
}

#[test]
fn failing_pe_stops_the_others() {
    let r = rshmemrun(&[
        "-n",
        "3",
        "sh",
        "-c",
        r#"if [ "$RSHMEM_RANK" = 2 ]; then exit 3; fi; sleep 60"#,
    ]);
    assert_eq!(r.status.code(), Some(3), "{}", r.stderr);
    assert!(r.stderr.contains("rshmemrun: PE 2 (pid "), "{}", r.stderr);
    assert!(r.stderr.contains("exited with status 3"), "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(10), "took {:?}", r.elapsed);
}

#[test]
fn pes_ignoring_sigterm_are_killed_after_the_grace_period() {
    // Rank 0 fails only once rank 1 has set up its SIGTERM-ignoring trap.
    let flag = std::env::temp_dir().join(format!("rshmemrun-test-trap-{}", std::process::id()));
    let _ = std::fs::remove_file(&flag);
    let r = rshmemrun_with(
        &[
            "-n",
            "2",
            "--grace",
            "1",
            "sh",
            "-c",
            r#"trap '' TERM
               if [ "$RSHMEM_RANK" = 0 ]; then
                   while [ ! -e "$FLAG" ]; do sleep 0.02; done
                   exit 5
               fi
               touch "$FLAG"; sleep 60; sleep 60"#,
        ],
        &[("FLAG", flag.to_str().unwrap())],
    );
    let _ = std::fs::remove_file(&flag);
    assert_eq!(r.status.code(), Some(5), "{}", r.stderr);
    assert!(r.stderr.contains("PE 0 (pid "), "{}", r.stderr);
    assert!(
        r.elapsed >= Duration::from_millis(900),
        "SIGKILL came before the grace period"
    );
    assert!(r.elapsed < Duration::from_secs(10), "took {:?}", r.elapsed);
}

#[test]
fn pe_killed_by_a_signal_is_named() {
    let r = rshmemrun(&[
        "-n",
        "2",
        "sh",
        "-c",
        r#"if [ "$RSHMEM_RANK" = 1 ]; then kill -SEGV $$; fi; sleep 60"#,
    ]);
    assert_eq!(r.status.code(), Some(128 + 11), "{}", r.stderr);
    assert!(r.stderr.contains("PE 1 (pid "), "{}", r.stderr);
    assert!(
        r.stderr.contains("killed by signal SIGSEGV"),
        "{}",
        r.stderr
    );
    assert!(r.elapsed < Duration::from_secs(10), "took {:?}", r.elapsed);
}

#[test]
fn timeout_kills_everything_and_exits_124() {
    let r = rshmemrun(&[
        "-n",
        "2",
        "--timeout",
        "1",
        "--grace",
        "1",
        "sh",
        "-c",
        "sleep 60",
    ]);
    assert_eq!(r.status.code(), Some(124), "{}", r.stderr);
    assert!(r.stderr.contains("timed out after 1s"), "{}", r.stderr);
    assert!(
        r.stderr.contains("0 (pid ") && r.stderr.contains("1 (pid "),
        "{}",
        r.stderr
    );
    assert!(r.elapsed >= Duration::from_millis(900) && r.elapsed < Duration::from_secs(10));

    // Only rank 1 is still running when the time is up.
    let r = rshmemrun_with(
        &[
            "-n",
            "2",
            "sh",
            "-c",
            r#"if [ "$RSHMEM_RANK" = 1 ]; then sleep 60; fi"#,
        ],
        &[("RSHMEM_RUN_TIMEOUT", "1")],
    );
    assert_eq!(r.status.code(), Some(124), "{}", r.stderr);
    assert!(r.stderr.contains("still running: 1 (pid "), "{}", r.stderr);
    assert!(!r.stderr.contains("0 (pid "), "{}", r.stderr);

    let r = rshmemrun_with(&["-n", "1", "true"], &[("RSHMEM_RUN_TIMEOUT", "soon")]);
    assert!(!r.status.success());
    assert!(r.stderr.contains("RSHMEM_RUN_TIMEOUT"), "{}", r.stderr);
}

#[test]
fn usage_errors() {
    let r = rshmemrun(&["-n", "0", "true"]);
    assert!(!r.status.success());
    assert!(r.stderr.contains("-n must be at least 1"), "{}", r.stderr);

    let r = rshmemrun(&["-n", "2", "no-such-program-xyz", "arg"]);
    assert_eq!(r.status.code(), Some(127));
    assert!(
        r.stderr.contains("'no-such-program-xyz' not found"),
        "{}",
        r.stderr
    );

    let r = rshmemrun(&["-n", "2", "./no/such/file"]);
    assert_eq!(r.status.code(), Some(127));
    assert!(
        r.stderr.contains("'./no/such/file' not found"),
        "{}",
        r.stderr
    );

    let r = rshmemrun(&["-n", "2", "/"]);
    assert_eq!(r.status.code(), Some(126));
    assert!(r.stderr.contains("not an executable"), "{}", r.stderr);

    let r = rshmemrun(&["-n", "2"]);
    assert!(!r.status.success());
    let r = rshmemrun(&["-n", "2", "--timeout", "-1", "true"]);
    assert!(!r.status.success());
    let r = rshmemrun(&["-n", "2", "--bogus", "true"]);
    assert!(!r.status.success());
    assert!(r.stderr.contains("--bogus"), "{}", r.stderr);
}

#[test]
fn program_flags_pass_through() {
    let r = rshmemrun(&[
        "-n",
        "1",
        "sh",
        "-c",
        r#"printf '%s\n' "$*""#,
        "sh",
        "-n",
        "--timeout",
        "5",
        "--",
    ]);
    assert!(r.status.success(), "{}", r.stderr);
    assert_eq!(r.stdout, "-n --timeout 5 --\n");
}

#[test]
fn tag_output_prefixes_lines() {
    let r = rshmemrun(&[
        "-n",
        "2",
        "--tag-output",
        "sh",
        "-c",
        r#"echo "hello $RSHMEM_RANK"; echo "oops" >&2; printf "no newline""#,
    ]);
    assert!(r.status.success(), "{}", r.stderr);
    let mut out: Vec<&str> = r.stdout.lines().collect();
    out.sort_unstable();
    assert_eq!(
        out,
        [
            "[PE 0] hello 0",
            "[PE 0] no newline",
            "[PE 1] hello 1",
            "[PE 1] no newline"
        ]
    );
    let mut err: Vec<&str> = r.stderr.lines().collect();
    err.sort_unstable();
    assert_eq!(err, ["[PE 0] oops", "[PE 1] oops"]);

    // Without the flag nothing is added.
    let r = rshmemrun(&["-n", "2", "sh", "-c", "echo plain"]);
    assert_eq!(r.stdout, "plain\nplain\n");
}

#[test]
fn sigterm_to_the_launcher_is_forwarded() {
    let mut child = Command::new(RSHMEMRUN)
        .args([
            "-n",
            "2",
            "sh",
            "-c",
            r#"trap 'echo "got-term $RSHMEM_RANK"; exit 7' TERM; echo ready; while :; do sleep 0.05; done"#,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = drain(child.stderr.take().unwrap());
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..2 {
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(20));
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let err = err.join().unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{err}");
    assert!(err.contains("received SIGTERM"), "{err}");
    assert!(
        rest.contains("got-term 0") && rest.contains("got-term 1"),
        "{rest}"
    );
}

#[test]
fn pes_die_with_a_killed_launcher() {
    let mut child = Command::new(RSHMEMRUN)
        .args(["-n", "2", "sh", "-c", "echo $$; exec sleep 60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut pids = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        pids.push(line.trim().parse::<i32>().unwrap());
    }
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    for pid in pids {
        loop {
            // Gone, or a zombie waiting for its new parent to reap it.
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let alive = state
                .rsplit_once(')')
                .is_some_and(|(_, s)| !s.trim_start().starts_with('Z'));
            if !alive {
                break;
            }
            assert!(Instant::now() < until, "PE pid {pid} outlived its launcher");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Not a test of its own: the body of each PE in `bootstrap_over_rshmemrun`, which runs this
/// test binary under rshmemrun with `RSHMEM_TEST_PE=1`.
#[test]
fn pe_child_entry() {
    if std::env::var_os("RSHMEM_TEST_PE").is_none() {
        return;
    }
    let (info, boot) = rshmem_bootstrap::from_env(Some(Duration::from_secs(20))).unwrap();
    let (rank, size) = (info.rank, info.size);
    assert_eq!((boot.rank(), boot.size()), (rank, size));
    let all = boot.allgather(format!("pe{rank}").as_bytes()).unwrap();
    let want: Vec<Vec<u8>> = (0..size).map(|r| format!("pe{r}").into_bytes()).collect();
    assert_eq!(all, want);
    let to_each: Vec<Vec<u8>> = (0..size).map(|d| vec![rank as u8, d as u8]).collect();
    let got = boot.alltoall(&to_each).unwrap();
    assert_eq!(
        got,
        (0..size)
            .map(|s| vec![s as u8, rank as u8])
            .collect::<Vec<_>>()
    );
    boot.barrier().unwrap();
    if let Some(victim) = std::env::var("RSHMEM_TEST_PE_KILL")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        // One PE is SIGKILLed; the others lose it in the next barrier and exit with status 1.
        if rank == victim {
            // SAFETY: kill sends a signal to this very process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        let e = boot.barrier().unwrap_err();
        eprintln!("PE {rank}: {e}");
        std::process::exit(1);
    }
    println!(
        "PE-RESULT rank={rank} size={size} launcher={} inherited={}",
        info.launcher,
        info.listen_fd.is_some()
    );
}

#[test]
fn bootstrap_over_rshmemrun() {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    for n in [1usize, 4] {
        let r = rshmemrun_with(
            &[
                "-n",
                &n.to_string(),
                exe,
                "--exact",
                "pe_child_entry",
                "--nocapture",
                "--test-threads=1",
            ],
            &[("RSHMEM_TEST_PE", "1")],
        );
        assert!(
            r.status.success(),
            "n={n}: {:?}\n{}\n{}",
            r.status,
            r.stdout,
            r.stderr
        );
        // The child harness prints "test pe_child_entry ... " before the line.
        let mut results: Vec<&str> = r
            .stdout
            .lines()
            .filter_map(|l| l.find("PE-RESULT").map(|i| &l[i..]))
            .collect();
        results.sort_unstable();
        let want: Vec<String> = (0..n)
            .map(|rank| {
                format!(
                    "PE-RESULT rank={rank} size={n} launcher=rshmemrun inherited={}",
                    rank == 0 && n > 1
                )
            })
            .collect();
        assert_eq!(results, want, "n={n}\n{}", r.stderr);
    }
}

#[test]
fn bind_to_core_pins_each_pe_to_one_cpu() {
    let r = rshmemrun(&[
        "-n",
        "3",
        "--bind-to",
        "core",
        "sh",
        "-c",
        "echo $RSHMEM_RANK $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)",
    ]);
    assert!(r.status.success(), "{}", r.stderr);
    let mut cpus = vec![String::new(); 3];
    for line in r.stdout.lines() {
        let mut it = line.split_whitespace();
        let rank: usize = it.next().and_then(|s| s.parse().ok()).expect("rank");
        cpus[rank] = it.next().unwrap_or_default().to_string();
    }
    for c in &cpus {
        assert!(
            c.parse::<usize>().is_ok(),
            "a PE is not pinned to a single CPU: {cpus:?}"
        );
    }
    let n_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n_cpus >= 2 {
        assert_ne!(cpus[0], cpus[1], "PEs 0 and 1 share a CPU: {cpus:?}");
    }
    let bad = rshmemrun(&["-n", "1", "--bind-to", "socket", "true"]);
    assert_eq!(bad.status.code(), Some(2), "{}", bad.stderr);
}

/// A fresh directory for one test's files.
fn scratch_dir(tag: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("rshmemrun-test-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Waits (bounded) until `path` exists.
fn wait_for_file(path: &std::path::Path) {
    let until = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < until, "{} never appeared", path.display());
        thread::sleep(Duration::from_millis(5));
    }
}

/// Waits (bounded) until process `pid` has exited (is a zombie, or gone).
fn wait_until_dead(pid: i32) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return,
            // The state follows the parenthesised command name.
            Ok(stat)
                if stat
                    .rsplit_once(") ")
                    .is_some_and(|(_, r)| r.starts_with('Z')) =>
            {
                return
            }
            Ok(_) => {}
        }
        assert!(Instant::now() < until, "pid {pid} did not exit");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Runs 3 PEs where PE `first` fails first (`first_how`: a shell command such as `kill -KILL $$`
/// or `exit 3`) and the other two fail afterwards (`then_how`) — all while rshmemrun is
/// stopped, so that it finds all three dead at once. Returns the run.
fn failures_in_order(first: usize, first_how: &str, then_how: &str) -> Run {
    let dir = scratch_dir("order");
    let d = dir.to_str().unwrap();
    let script = format!(
        r#"echo $$ > {d}/pid.$RSHMEM_RANK
if [ "$RSHMEM_RANK" = {first} ]; then
  while [ ! -e {d}/go1 ]; do sleep 0.01; done; {first_how}
else
  while [ ! -e {d}/go2 ]; do sleep 0.01; done; {then_how}
fi"#
    );
    let start = Instant::now();
    let mut child = Command::new(RSHMEMRUN)
        .args(["-n", "3", "sh", "-c", &script])
        .env_remove("RSHMEM_RUN_TIMEOUT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let pid_of = |r: usize| -> i32 {
        let f = dir.join(format!("pid.{r}"));
        wait_for_file(&f);
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(p) = std::fs::read_to_string(&f).unwrap().trim().parse() {
                return p;
            }
            assert!(Instant::now() < until);
            thread::sleep(Duration::from_millis(5));
        }
    };
    let pids: Vec<i32> = (0..3).map(pid_of).collect();
    let launcher = child.id() as i32;
    // SAFETY: kill only sends a signal to the rshmemrun this test started.
    assert_eq!(unsafe { libc::kill(launcher, libc::SIGSTOP) }, 0);
    std::fs::write(dir.join("go1"), "").unwrap();
    wait_until_dead(pids[first]);
    std::fs::write(dir.join("go2"), "").unwrap();
    for (r, &p) in pids.iter().enumerate() {
        if r != first {
            wait_until_dead(p);
        }
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(launcher, libc::SIGCONT) }, 0);
    let status = wait_bounded(&mut child, Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(&dir);
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed: start.elapsed(),
    }
}

#[test]
fn exit_status_is_that_of_the_pe_that_failed_first() {
    // The tester's case: a PE is SIGKILLed and the others then exit with status 1 (they lost
    // it). rshmemrun once took the lowest rank among the PEs it found dead: status 1.
    for _ in 0..3 {
        let r = failures_in_order(2, "kill -KILL $$", "exit 1");
        assert_eq!(r.status.code(), Some(137), "{}", r.stderr);
        let first = r.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains("PE 2 (pid ") && first.contains("SIGKILL"),
            "the first message must name PE 2:\n{}",
            r.stderr
        );
        assert!(r.stderr.contains("PE 2 failed first"), "{}", r.stderr);
    }
    // Among non-zero exits, the first one is reported, not the lowest rank: PE 1 exits with
    // 3, then PEs 0 and 2 with 1.
    for _ in 0..3 {
        let r = failures_in_order(1, "exit 3", "exit 1");
        assert_eq!(r.status.code(), Some(3), "{}", r.stderr);
        assert!(r.stderr.contains("PE 1 failed first"), "{}", r.stderr);
    }
    // Among deaths by signal too: PE 2 is killed with SIGTERM first, then PEs 0 and 1 with
    // SIGKILL.
    let r = failures_in_order(2, "kill -TERM $$", "kill -KILL $$");
    assert_eq!(r.status.code(), Some(128 + 15), "{}", r.stderr);
    assert!(r.stderr.contains("PE 2 failed first"), "{}", r.stderr);
}

#[test]
fn np_is_a_synonym_of_n() {
    for args in [
        &["-np", "3"][..],
        &["-np=3"][..],
        &["--np", "3"][..],
        &["--timeout", "30", "-np", "3"][..],
    ] {
        let mut all = args.to_vec();
        all.extend(["sh", "-c", "echo size=$RSHMEM_SIZE"]);
        let r = rshmemrun(&all);
        assert!(r.status.success(), "{args:?}: {}", r.stderr);
        assert_eq!(
            r.stdout.matches("size=3").count(),
            3,
            "{args:?}: {}",
            r.stdout
        );
    }
    // The program's own -np is left alone.
    let r = rshmemrun(&["-n", "1", "sh", "-c", "echo \"$@\"", "x", "-np", "7"]);
    assert!(r.status.success(), "{}", r.stderr);
    assert_eq!(r.stdout.trim(), "-np 7");
}

#[test]
fn program_in_the_current_directory_is_found_like_mpirun_does() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("cwd");
    let prog = dir.join("rshmem-cwd-prog");
    std::fs::write(&prog, "#!/bin/sh\necho here=$RSHMEM_RANK\n").unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run_in = |name: &str| {
        let out = Command::new(RSHMEMRUN)
            .args(["-n", "2", name])
            .current_dir(&dir)
            .env_remove("RSHMEM_RUN_TIMEOUT")
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (st, out, err) = run_in("rshmem-cwd-prog");
    assert!(st.success(), "{err}");
    assert_eq!(out.matches("here=").count(), 2, "{out}");
    // A name found nowhere: 127, saying where it looked.
    let (st, _, err) = run_in("rshmem-no-such-prog");
    assert_eq!(st.code(), Some(127), "{err}");
    assert!(err.contains("not found in PATH nor"), "{err}");
    // Not executable: not found either (as mpirun: it only takes executables).
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (st, _, _) = run_in("rshmem-cwd-prog");
    assert_eq!(st.code(), Some(127));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn killed_pe_is_reported_not_the_pes_it_took_down() {
    // The tester's case with real PEs: PE 3 is SIGKILLed, the others notice at once (their
    // bootstrap connection breaks) and exit with status 1, racing rshmemrun's reaping.
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    for round in 0..8 {
        let r = rshmemrun_with(
            &[
                "-n",
                "4",
                exe,
                "--exact",
                "pe_child_entry",
                "--nocapture",
                "--test-threads=1",
            ],
            &[("RSHMEM_TEST_PE", "1"), ("RSHMEM_TEST_PE_KILL", "3")],
        );
        assert_eq!(r.status.code(), Some(137), "round {round}:\n{}", r.stderr);
        assert!(
            r.stderr.contains("PE 3 failed first"),
            "round {round}:\n{}",
            r.stderr
        );
    }
}
