//! `rshmemrun`: starts the PEs of an rshmem program on this host.
//!
//! ```text
//! rshmemrun -n N [--timeout SECS] [--tag-output] [--grace SECS] PROGRAM [ARGS...]
//! rshmemrun -np N ...   (mpirun's spelling)
//! ```
//!
//! Each PE gets `RSHMEM_RANK`, `RSHMEM_SIZE`, `RSHMEM_LOCAL_RANK`, `RSHMEM_LOCAL_SIZE`,
//! `RSHMEM_BOOTSTRAP_ADDR`, `RSHMEM_BOOTSTRAP_SECRET` and `RSHMEM_LAUNCHER=rshmemrun`; rank 0
//! also inherits the already-listening rendezvous socket (`RSHMEM_BOOTSTRAP_LISTEN_FD`), so the
//! other ranks can connect before it even starts. When a PE fails, the others are stopped
//! (SIGTERM, then SIGKILL after the grace period) and the launcher exits non-zero.
//!
//! Before stopping the PEs (a failure or `--timeout`), and on `SIGUSR1`, rshmemrun asks each
//! PE for a hang report (`SIGUSR1` to the PE; the reports come back over the pipe passed in
//! `RSHMEM_HANG_REPORT_FD`) and prints them as one table: PE, state, call, PE waited on, for
//! how long, detail.

use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `eprintln!` with one `write(2)` per line (the line is formatted first), so that the
/// launcher's lines never interleave with the PEs' output on the same terminal or pipe.
macro_rules! say {
    ($($arg:tt)+) => {{
        let mut line = format!($($arg)+);
        line.push('\n');
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }};
}

use clap::Parser;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use rshmem_bootstrap::UniqueId;

/// Exit status when --timeout expires (as coreutils' `timeout`).
const EXIT_TIMEOUT: i32 = 124;
/// How long rshmemrun waits, after the first PE failed, for others to fail too before it
/// decides which failure was first (see `supervise`).
const SETTLE: Duration = Duration::from_millis(200);
/// How long rshmemrun waits, after the first failure, for a PE that the failed PEs reported
/// gone (they only reacted to it) to end by itself before it names one of them.
const SETTLE_MAX: Duration = Duration::from_secs(3);
/// How long rshmemrun waits for the PEs' hang reports after asking for them.
const REPORT_WAIT: Duration = Duration::from_millis(1500);
/// Exit status for usage errors.
const EXIT_USAGE: i32 = 2;
/// Exit status when PROGRAM cannot be executed / found (as shells do).
const EXIT_NOEXEC: i32 = 126;
const EXIT_NOTFOUND: i32 = 127;

/// Start N PEs of an rshmem program on this host.
#[derive(Parser, Debug)]
#[command(
    name = "rshmemrun",
    version,
    after_help = "Each PE gets RSHMEM_RANK, RSHMEM_SIZE, RSHMEM_LOCAL_RANK, RSHMEM_LOCAL_SIZE, \
RSHMEM_BOOTSTRAP_ADDR, RSHMEM_BOOTSTRAP_SECRET and RSHMEM_LAUNCHER=rshmemrun.\n\
If a PE exits non-zero or is killed by a signal, the other PEs get SIGTERM, then SIGKILL after \
--grace seconds, and rshmemrun exits with the status of the PE that failed first (128+signal \
for a signal). -np N is accepted for -n N; a PROGRAM not on PATH is looked for in the current \
directory. The job secret reaches the PEs in their environment, never on a command line. \
SIGINT/SIGTERM/SIGHUP sent to rshmemrun are forwarded to the PEs. Before stopping the PEs \
(--timeout, or a PE failed), and whenever rshmemrun receives SIGUSR1, it asks every running PE \
for a hang report (SIGUSR1: what it is blocked in, on which PE, for how long) and prints them \
as one table. Exit status 124: --timeout expired."
)]
struct Cli {
    /// Number of PEs to start (at least 1).
    #[arg(short = 'n', long = "np", value_name = "N")]
    n: usize,

    /// Stop all PEs after SECS seconds and exit 124 [env: RSHMEM_RUN_TIMEOUT].
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,

    /// Prefix every line the PEs print with "[PE n] ".
    #[arg(long)]
    tag_output: bool,

    /// Pin each PE to one CPU: `core` binds PE r to the r-th CPU (modulo their number) of
    /// those rshmemrun may run on; `none` (default) leaves placement to the kernel. Pinning
    /// keeps spinning PEs from sharing a core with each other (Open MPI's oshrun pins by default).
    #[arg(long = "bind-to", value_name = "core|none", default_value = "none", value_parser = ["core", "none"])]
    bind_to: String,

    /// Seconds between SIGTERM and SIGKILL when stopping PEs.
    #[arg(long, value_name = "SECS", default_value_t = 3.0)]
    grace: f64,

    /// The program to run, followed by its own arguments (passed through untouched).
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        value_name = "PROGRAM [ARGS]"
    )]
    command: Vec<OsString>,
}

/// A reason to exit early: the message (without the `rshmemrun: ` prefix) and the status.
struct Fail {
    code: i32,
    msg: String,
}

impl Fail {
    fn new(code: i32, msg: impl Into<String>) -> Self {
        Fail {
            code,
            msg: msg.into(),
        }
    }
}

/// rshmemrun's options that take a separate value.
const VALUE_OPTIONS: [&str; 6] = ["-n", "--np", "-np", "--timeout", "--bind-to", "--grace"];

/// Accepts mpirun's and oshrun's single-dash `-np N` (clap would read it as `-n p`): rewrites
/// `-np` to `--np` among rshmemrun's own options, never in the program's arguments.
fn mpirun_style_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut args = args.into_iter();
    // The launcher's own name.
    out.extend(args.next());
    let mut takes_value = false;
    for a in args.by_ref() {
        if takes_value {
            takes_value = false;
            out.push(a);
            continue;
        }
        let bytes = a.as_bytes();
        if bytes == b"--" || !bytes.starts_with(b"-") {
            // The program: everything from here on is its own.
            out.push(a);
            break;
        }
        if bytes == b"-np" {
            out.push(OsString::from("--np"));
            takes_value = true;
            continue;
        }
        if let Some(v) = bytes.strip_prefix(b"-np=") {
            let mut o = OsString::from("--np=");
            o.push(OsStr::from_bytes(v));
            out.push(o);
            continue;
        }
        takes_value = VALUE_OPTIONS.iter().any(|o| o.as_bytes() == bytes);
        out.push(a);
    }
    out.extend(args);
    out
}

fn main() {
    let code = match run(Cli::parse_from(mpirun_style_args(std::env::args_os()))) {
        Ok(code) => code,
        Err(f) => {
            say!("rshmemrun: {}", f.msg);
            f.code
        }
    };
    let _ = io::stdout().flush();
    std::process::exit(code);
}

/// Parses a number of seconds: finite, and positive (or zero when `allow_zero`).
fn seconds(what: &str, v: f64, allow_zero: bool) -> Result<Duration, Fail> {
    let ok = v.is_finite() && (v > 0.0 || (allow_zero && v == 0.0));
    if !ok {
        let need = if allow_zero {
            "zero or more"
        } else {
            "more than zero"
        };
        return Err(Fail::new(
            EXIT_USAGE,
            format!("{what} must be {need} seconds, got {v}"),
        ));
    }
    Duration::try_from_secs_f64(v)
        .map_err(|_| Fail::new(EXIT_USAGE, format!("{what} of {v} seconds is out of range")))
}

fn is_executable(p: &Path) -> bool {
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Checks that PROGRAM can be run, so that a typo gets a clear message instead of N failures,
/// and returns what to execute: PROGRAM itself, or `./PROGRAM` when a name without a slash is
/// not on PATH but is an executable in the current directory (as mpirun does).
fn check_program(prog: &OsStr) -> Result<OsString, Fail> {
    let shown = prog.to_string_lossy();
    if prog.is_empty() {
        return Err(Fail::new(EXIT_USAGE, "PROGRAM is empty"));
    }
    if prog.as_bytes().contains(&b'/') {
        let p = Path::new(prog);
        if !p.exists() {
            return Err(Fail::new(
                EXIT_NOTFOUND,
                format!("PROGRAM '{shown}' not found: no such file"),
            ));
        }
        if !is_executable(p) {
            return Err(Fail::new(
                EXIT_NOEXEC,
                format!("PROGRAM '{shown}' is not an executable file"),
            ));
        }
        return Ok(prog.to_owned());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        if is_executable(&dir.join(prog)) {
            return Ok(prog.to_owned());
        }
    }
    let here = Path::new(".").join(prog);
    if is_executable(&here) {
        return Ok(here.into_os_string());
    }
    Err(Fail::new(
        EXIT_NOTFOUND,
        format!(
            "PROGRAM '{shown}' not found in PATH nor as an executable in the current directory"
        ),
    ))
}

/// One started PE.
struct Pe {
    rank: usize,
    child: Child,
    pid: i32,
    status: Option<ExitStatus>,
    /// When it was found failed (from the launch), if it failed.
    failed_at: Option<Duration>,
}

fn signal_name(sig: i32) -> String {
    Signal::try_from(sig).map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_owned())
}

/// Sends `sig` to the PE's process group (the PE and anything it started), or to the PE
/// alone if the group is gone.
fn signal_pe(pid: i32, sig: Signal) {
    if kill(Pid::from_raw(-pid), sig) == Err(Errno::ESRCH) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// Status a PE's termination maps to: its exit code, or 128 + signal.
fn status_code(st: ExitStatus) -> i32 {
    match (st.code(), st.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    }
}

fn describe_failure(pe: &Pe, st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("PE {} (pid {}) exited with status {c}", pe.rank, pe.pid),
        (None, Some(s)) => format!(
            "PE {} (pid {}) was killed by signal {}{}",
            pe.rank,
            pe.pid,
            signal_name(s),
            if st.core_dumped() {
                " (core dumped)"
            } else {
                ""
            }
        ),
        (None, None) => format!("PE {} (pid {}) ended abnormally ({st})", pe.rank, pe.pid),
    }
}

/// Copies `from` to `to` line by line, each prefixed with `[PE rank] `.
fn tag_lines(rank: usize, from: impl Read, mut to: impl FnMut(&[u8])) {
    let mut reader = BufReader::new(from);
    let prefix = format!("[PE {rank}] ");
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {
                let mut out = Vec::with_capacity(prefix.len() + line.len() + 1);
                out.extend_from_slice(prefix.as_bytes());
                out.extend_from_slice(&line);
                if !line.ends_with(b"\n") {
                    out.push(b'\n');
                }
                to(&out);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

fn spawn_tagger(
    rank: usize,
    from: impl Read + Send + 'static,
    stderr: bool,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("tag-pe{rank}"))
        .spawn(move || {
            tag_lines(rank, from, |buf| {
                // Whole lines under the lock, so PEs' lines never interleave. Write errors (a
                // closed terminal) are ignored: keep draining so the PE does not block.
                if stderr {
                    let _ = io::stderr().lock().write_all(buf);
                } else {
                    let mut out = io::stdout().lock();
                    let _ = out.write_all(buf).and_then(|()| out.flush());
                }
            })
        })
}

/// Duplicates `fd` to a descriptor number of at least 3 (never a stdio slot), close-on-exec.
fn dup_above_stdio(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC only creates a new descriptor; an invalid `fd` yields EBADF.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` was just returned by fcntl, is open, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

struct Launch {
    n: usize,
    command: Vec<OsString>,
    tag_output: bool,
    /// CPUs to pin PEs to, round robin (empty: no pinning).
    cpus: Vec<usize>,
    uid: Option<UniqueId>,
    listen_fd: Option<RawFd>,
    /// Write end of the pipe the PEs send their hang reports to (RSHMEM_HANG_REPORT_FD).
    report_fd: Option<RawFd>,
}

/// Starts PE `rank`.
fn spawn_pe(l: &Launch, rank: usize, launcher_pid: i32, stdin_ok: bool) -> io::Result<Child> {
    let mut cmd = Command::new(&l.command[0]);
    cmd.args(&l.command[1..])
        .env("RSHMEM_RANK", rank.to_string())
        .env("RSHMEM_SIZE", l.n.to_string())
        .env("RSHMEM_LOCAL_RANK", rank.to_string())
        .env("RSHMEM_LOCAL_SIZE", l.n.to_string())
        .env("RSHMEM_LAUNCHER", "rshmemrun")
        .env_remove("RSHMEM_BOOTSTRAP_LISTEN_FD");
    match &l.uid {
        Some(uid) => {
            // In the environment, which only this user (and root) can read: never in the
            // command line, which every user can see.
            cmd.env("RSHMEM_BOOTSTRAP_ADDR", uid.addr())
                .env("RSHMEM_BOOTSTRAP_SECRET", uid.secret_hex());
        }
        None => {
            cmd.env_remove("RSHMEM_BOOTSTRAP_ADDR")
                .env_remove("RSHMEM_BOOTSTRAP_SECRET");
        }
    }
    match l.report_fd {
        Some(fd) => cmd.env("RSHMEM_HANG_REPORT_FD", fd.to_string()),
        None => cmd.env_remove("RSHMEM_HANG_REPORT_FD"),
    };
    // The job's own secret replaces any the caller's environment names.
    cmd.env_remove("RSHMEM_BOOTSTRAP_SECRET_FILE");
    let inherit_fd = if rank == 0 { l.listen_fd } else { None };
    if let Some(fd) = inherit_fd {
        cmd.env("RSHMEM_BOOTSTRAP_LISTEN_FD", fd.to_string());
    }
    // Only rank 0 reads our stdin, and only when it is not a terminal (the PEs run in their
    // own process groups, where reading the terminal would stop them).
    cmd.stdin(if rank == 0 && stdin_ok {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    if l.tag_output {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    let keep_fd: RawFd = inherit_fd.unwrap_or(-1);
    let report_fd: RawFd = l.report_fd.unwrap_or(-1);
    // The CPU set is built here, before fork, so the child only makes a system call.
    let pin: Option<libc::cpu_set_t> = (!l.cpus.is_empty()).then(|| {
        // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: CPU_SET writes one bit inside `set`; the index comes from sched_getaffinity.
        unsafe { libc::CPU_SET(l.cpus[rank % l.cpus.len()], &mut set) };
        set
    });
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (sigprocmask, prctl, getppid, setpgid, fcntl); it
    // allocates nothing and touches no locks.
    unsafe {
        cmd.pre_exec(move || {
            let mut none = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(none.as_mut_ptr());
            libc::sigprocmask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut());
            // Die with the launcher, even if it is SIGKILLed.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != launcher_pid {
                // The launcher died before prctl took effect.
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            // Own process group, so stopping a PE also stops whatever it started.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(set) = &pin {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Rank 0 alone keeps the rendezvous socket across exec.
            if keep_fd >= 0 && libc::fcntl(keep_fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Every PE keeps the hang-report pipe across exec.
            if report_fd >= 0 && libc::fcntl(report_fd, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

fn run(cli: Cli) -> Result<i32, Fail> {
    if cli.n == 0 {
        return Err(Fail::new(EXIT_USAGE, "-n must be at least 1 (got 0)"));
    }
    let timeout = match cli.timeout {
        Some(t) => Some(seconds("--timeout", t, false)?),
        None => match std::env::var("RSHMEM_RUN_TIMEOUT") {
            Ok(v) if !v.trim().is_empty() => {
                let t: f64 = v.trim().parse().map_err(|_| {
                    Fail::new(
                        EXIT_USAGE,
                        format!("RSHMEM_RUN_TIMEOUT={v:?} is not a number of seconds"),
                    )
                })?;
                Some(seconds("RSHMEM_RUN_TIMEOUT", t, false)?)
            }
            _ => None,
        },
    };
    let grace = seconds("--grace", cli.grace, true)?;
    let mut cli = cli;
    cli.command[0] = check_program(&cli.command[0])?;

    // Signals are taken through a signalfd; block them first (threads inherit the mask; the
    // PEs get an empty mask back in pre_exec).
    let mut sigs = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        sigs.add(s);
    }
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&sigs), None)
        .map_err(|e| Fail::new(1, format!("blocking signals: {e}")))?;
    let sigfd = SignalFd::with_flags(&sigs, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| Fail::new(1, format!("creating a signalfd: {e}")))?;

    // The rendezvous: bound before any PE starts, handed to rank 0.
    let mut listen_owned: Option<OwnedFd> = None;
    let mut uid = None;
    if cli.n > 1 {
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Fail::new(1, format!("binding the rendezvous socket: {e}")))?;
        let addr = l
            .local_addr()
            .map_err(|e| Fail::new(1, format!("rendezvous socket: {e}")))?;
        let fd = dup_above_stdio(l.as_raw_fd())
            .map_err(|e| Fail::new(1, format!("rendezvous socket: {e}")))?;
        drop(l);
        uid = Some(UniqueId::new(addr.to_string()).map_err(|e| Fail::new(1, e.to_string()))?);
        listen_owned = Some(fd);
    }
    let cpus = if cli.bind_to == "core" {
        allowed_cpus()
    } else {
        Vec::new()
    };
    let mut reports = match Reports::new(cli.n) {
        Ok(r) => Some(r),
        Err(e) => {
            say!("rshmemrun: no hang reports: cannot create their pipe: {e}");
            None
        }
    };
    let launch = Launch {
        n: cli.n,
        command: cli.command,
        tag_output: cli.tag_output,
        cpus,
        uid,
        listen_fd: listen_owned.as_ref().map(AsRawFd::as_raw_fd),
        report_fd: reports.as_ref().map(|r| r.w.as_raw_fd()),
    };

    let launcher_pid = std::process::id() as i32;
    let stdin_ok = !io::stdin().is_terminal();
    let mut pes: Vec<Pe> = Vec::with_capacity(launch.n);
    let mut taggers = Vec::new();
    for rank in 0..launch.n {
        match spawn_pe(&launch, rank, launcher_pid, stdin_ok) {
            Ok(mut child) => {
                if launch.tag_output {
                    let spawned = [
                        child.stdout.take().map(|o| spawn_tagger(rank, o, false)),
                        child.stderr.take().map(|e| spawn_tagger(rank, e, true)),
                    ];
                    for h in spawned.into_iter().flatten() {
                        match h {
                            Ok(h) => taggers.push(h),
                            Err(e) => say!("rshmemrun: cannot start output thread: {e}"),
                        }
                    }
                }
                let pid = child.id() as i32;
                pes.push(Pe {
                    rank,
                    child,
                    pid,
                    status: None,
                    failed_at: None,
                });
            }
            Err(e) => {
                let prog = launch.command[0].to_string_lossy().into_owned();
                for pe in &pes {
                    signal_pe(pe.pid, Signal::SIGKILL);
                }
                for pe in &mut pes {
                    let _ = pe.child.wait();
                }
                let code = if e.kind() == io::ErrorKind::NotFound {
                    EXIT_NOTFOUND
                } else {
                    EXIT_NOEXEC
                };
                return Err(Fail::new(
                    code,
                    format!("cannot start PE {rank} ('{prog}'): {e}"),
                ));
            }
        }
    }
    // Rank 0 has its copy of the rendezvous socket now.
    drop(listen_owned);

    let code = supervise(&mut pes, &sigfd, timeout, grace, reports.as_mut());
    finish_taggers(taggers);
    Ok(code)
}

/// Waits for the PEs, stopping them all when one fails, on --timeout, or on a signal.
/// Returns the launcher's exit status.
///
/// The status is that of the PE that failed first. A PE killed by a signal closes its
/// connections a moment before the kernel reports it dead, so the PEs that notice and exit
/// with an error can be reported first; rshmemrun therefore waits up to [`SETTLE`] after the
/// first failure for more, and then counts a death by signal before a non-zero exit. Within
/// each kind, the order is that of the SIGCHLD notifications read from the signalfd: a
/// SIGCHLD that arrives while one is pending is merged into it by the kernel, which keeps the
/// *first* child's siginfo, so each notification names the earliest exit since the previous
/// read, however late rshmemrun gets to run. PEs found ended without a notification of their
/// own come after those with one, then by rank.
fn supervise(
    pes: &mut [Pe],
    sigfd: &SignalFd,
    timeout: Option<Duration>,
    grace: Duration,
    mut reports: Option<&mut Reports>,
) -> i32 {
    let start = Instant::now();
    let run_deadline = timeout.and_then(|t| start.checked_add(t));
    let mut exit_code: Option<i32> = None;
    let mut stopping = false;
    let mut kill_at: Option<Instant> = None;
    // PIDs in the order their SIGCHLD notifications were read.
    let mut exit_order: Vec<i32> = Vec::new();
    // Failed PEs (rank, pid, status) not yet reported, and until when to wait for more.
    let mut failures: Vec<(usize, i32, ExitStatus)> = Vec::new();
    let mut settle_until: Option<Instant> = None;
    let mut first_failure: Option<Instant> = None;

    let stop = |pes: &[Pe], sig: Signal| {
        // Every group, including those of PEs that already exited: their children may linger.
        for pe in pes {
            signal_pe(pe.pid, sig);
        }
    };

    loop {
        // Signals first, so that every exit reaped below that has a notification has it here.
        while let Ok(Some(info)) = sigfd.read_signal() {
            let signo = info.ssi_signo as i32;
            let Ok(sig) = Signal::try_from(signo) else {
                continue;
            };
            if sig == Signal::SIGCHLD {
                exit_order.push(info.ssi_pid as i32);
                continue;
            }
            if sig == Signal::SIGUSR1 {
                if let Some(r) = reports.as_deref_mut() {
                    hang_report(pes, r, "asked for with SIGUSR1");
                }
                continue;
            }
            if stopping {
                // A second interrupt: no more grace.
                stop(pes, Signal::SIGKILL);
                kill_at = None;
                continue;
            }
            say!("rshmemrun: received {}, stopping the PEs", sig.as_str());
            exit_code = Some(128 + signo);
            stopping = true;
            stop(pes, sig);
            kill_at = Instant::now().checked_add(grace);
        }

        // Reap whatever has exited.
        for pe in pes.iter_mut().filter(|p| p.status.is_none()) {
            match pe.child.try_wait() {
                Ok(Some(st)) => {
                    pe.status = Some(st);
                    if !st.success() && !stopping {
                        failures.push((pe.rank, pe.pid, st));
                        pe.failed_at = Some(start.elapsed());
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    say!("rshmemrun: waiting for PE {}: {e}", pe.rank);
                    pe.status = Some(ExitStatus::from_raw(1 << 8));
                }
            }
        }
        let all_ended = pes.iter().all(|p| p.status.is_some());
        if !failures.is_empty() && !stopping {
            let first_at = *first_failure.get_or_insert_with(Instant::now);
            let mut settle = *settle_until.get_or_insert_with(|| first_at + SETTLE);
            // PEs that reported a peer gone before they failed reacted to it: while every
            // failure so far is such a reaction and a PE they name still runs, wait (up to
            // SETTLE_MAX) for that PE's own end, so that it is the one blamed.
            if let Some(r) = reports.as_deref_mut() {
                r.drain();
            }
            let lost: Vec<Option<usize>> = reports
                .as_deref()
                .map_or_else(Vec::new, |r| r.saw_lost.clone());
            let saw_lost = |rank: usize| lost.get(rank).copied().flatten();
            let only_reactions = failures
                .iter()
                .all(|&(rank, _, _)| saw_lost(rank).is_some());
            let named_running = failures.iter().any(|&(rank, _, _)| {
                saw_lost(rank)
                    .and_then(|x| pes.iter().find(|p| p.rank == x))
                    .is_some_and(|p| p.status.is_none())
            });
            if only_reactions && named_running {
                settle = settle.max(first_at + SETTLE_MAX);
                settle_until = Some(settle);
            }
            if all_ended || Instant::now() >= settle {
                // The PE that failed of its own accord first: not one that saw another gone
                // before it failed; then deaths by signal; then by the order of the exits.
                failures.sort_by_key(|&(rank, pid, st)| {
                    (
                        saw_lost(rank).is_some(),
                        st.signal().is_none(),
                        exit_order
                            .iter()
                            .position(|&p| p == pid)
                            .unwrap_or(usize::MAX),
                        rank,
                    )
                });
                for &(rank, _, st) in &failures {
                    if let Some(pe) = pes.iter().find(|p| p.rank == rank) {
                        let seen = saw_lost(rank)
                            .map(|x| format!(" after it saw PE {x} gone"))
                            .unwrap_or_default();
                        say!("rshmemrun: {}{seen}", describe_failure(pe, st));
                    }
                }
                exit_code = Some(status_code(failures[0].2));
                let left = pes.iter().filter(|p| p.status.is_none()).count();
                if let Some(r) = reports.as_deref_mut() {
                    // Ask the PEs still running; show what the ended ones recorded.
                    if left > 0 || r.lines.iter().any(|l| !l.is_empty()) {
                        hang_report(pes, r, &format!("PE {} failed", failures[0].0));
                    }
                }
                let first = failures[0];
                let when = pes
                    .iter()
                    .find(|p| p.rank == first.0)
                    .and_then(|p| p.failed_at)
                    .map(|t| format!(" at {:.2} s", t.as_secs_f64()))
                    .unwrap_or_default();
                let how = match (first.2.code(), first.2.signal()) {
                    (Some(c), _) => format!("status {c}"),
                    (None, Some(sig)) => format!("signal {}", signal_name(sig)),
                    _ => format!("{}", first.2),
                };
                if left > 0 {
                    say!(
                        "rshmemrun: PE {} failed first ({how}{when}); stopping the remaining {left} PE(s)",
                        first.0
                    );
                } else if failures.len() > 1 {
                    say!("rshmemrun: PE {} failed first ({how}{when})", first.0);
                }
                failures.clear();
                stopping = true;
                stop(pes, Signal::SIGTERM);
                kill_at = Instant::now().checked_add(grace);
            }
        } else if !failures.is_empty() {
            // Stopping for another reason (a signal, --timeout) while settling: report them.
            for (rank, _, st) in failures.drain(..) {
                if let Some(pe) = pes.iter().find(|p| p.rank == rank) {
                    say!("rshmemrun: {}", describe_failure(pe, st));
                }
            }
        }

        let running: Vec<&Pe> = pes.iter().filter(|p| p.status.is_none()).collect();
        if running.is_empty() {
            if stopping {
                // Nothing may outlive a failed job.
                stop(pes, Signal::SIGKILL);
            }
            break;
        }

        let now = Instant::now();
        if !stopping && run_deadline.is_some_and(|d| now >= d) {
            let list: Vec<String> = running
                .iter()
                .map(|p| format!("{} (pid {})", p.rank, p.pid))
                .collect();
            say!(
                "rshmemrun: timed out after {}s; PE(s) still running: {}",
                timeout.map_or(0.0, |t| t.as_secs_f64()),
                list.join(", ")
            );
            if let Some(r) = reports.as_deref_mut() {
                hang_report(
                    pes,
                    r,
                    &format!(
                        "--timeout {}s expired",
                        timeout.map_or(0.0, |t| t.as_secs_f64())
                    ),
                );
            }
            exit_code = Some(EXIT_TIMEOUT);
            stopping = true;
            stop(pes, Signal::SIGTERM);
            kill_at = now.checked_add(grace);
            continue;
        }
        if kill_at.is_some_and(|k| now >= k) {
            stop(pes, Signal::SIGKILL);
            kill_at = None;
        }

        // Sleep until a signal (SIGCHLD included) or the next deadline.
        let settling = if stopping { None } else { settle_until };
        let wake = [
            if stopping { None } else { run_deadline },
            kill_at,
            settling,
        ]
        .into_iter()
        .flatten()
        .min();
        let poll_timeout = match wake {
            None => PollTimeout::NONE,
            Some(w) => {
                let ms = w
                    .saturating_duration_since(Instant::now())
                    .as_nanos()
                    .div_ceil(1_000_000);
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(
            std::os::fd::AsFd::as_fd(sigfd),
            PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, poll_timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                // Cannot wait for signals: fall back to polling.
                say!("rshmemrun: poll: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    match exit_code {
        Some(c) => c,
        None if pes.iter().all(|p| p.status.is_some_and(|s| s.success())) => 0,
        None => 1,
    }
}

/// The pipe the PEs send their hang reports to, and what they sent so far (see the runtime's
/// `hang` module: lines `pe<N>\t<state>\t<call>\t<PE waited on>\t<seconds>\t<detail>`, a
/// report ends with `pe<N>\tend`, and `pe<N>\tarmed` says that PE N answers SIGUSR1).
struct Reports {
    r: OwnedFd,
    w: OwnedFd,
    buf: Vec<u8>,
    armed: Vec<bool>,
    /// Per PE: its report lines (state onwards) since it was last asked.
    lines: Vec<Vec<String>>,
    /// Per PE: its last report ended.
    done: Vec<bool>,
    /// Per PE: the first PE it reported gone (`lost <pe>`), if any: its own failure, if it
    /// fails, only reacts to that one.
    saw_lost: Vec<Option<usize>>,
}

impl Reports {
    fn new(n: usize) -> io::Result<Self> {
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(io::Error::from)?;
        // Above stdio, so that no PE confuses it with one of its standard streams.
        let w = dup_above_stdio(w.as_raw_fd())?;
        // SAFETY: F_SETFL on a pipe fd this function owns: the PEs' writes never block.
        unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        Ok(Reports {
            r,
            w,
            buf: Vec::new(),
            armed: vec![false; n],
            lines: vec![Vec::new(); n],
            done: vec![false; n],
            saw_lost: vec![None; n],
        })
    }

    /// Reads whatever the PEs sent.
    fn drain(&mut self) {
        let mut chunk = [0u8; 8192];
        while let Ok(k) = nix::unistd::read(&self.r, &mut chunk) {
            if k == 0 {
                break;
            }
            self.buf.extend_from_slice(&chunk[..k]);
        }
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line[..nl]).into_owned();
            let Some((pe, rest)) = line.split_once('\t') else {
                continue;
            };
            let Some(rank) = pe
                .strip_prefix("pe")
                .and_then(|r| r.parse::<usize>().ok())
                .filter(|&r| r < self.armed.len())
            else {
                continue;
            };
            if let Some(x) = rest.strip_prefix("lost ") {
                if let Ok(x) = x.trim().parse::<usize>() {
                    if x < self.saw_lost.len() && x != rank {
                        self.saw_lost[rank].get_or_insert(x);
                    }
                }
                continue;
            }
            match rest {
                "armed" => self.armed[rank] = true,
                "end" => self.done[rank] = true,
                _ => self.lines[rank].push(rest.to_owned()),
            }
        }
    }
}

/// True when process `pid` is stopped (state `T` or `t` in `/proc/<pid>/stat`).
fn is_stopped(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain spaces.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|st| st == "T" || st == "t")
}

/// One row of the hang table, from a line of a PE's report file (see the runtime's `hang`
/// module: state, call, PE waited on, seconds, detail, tab-separated).
fn report_row(rank: usize, line: &str) -> [String; 6] {
    let mut f = line.splitn(5, '\t').map(str::to_owned);
    let mut next = || f.next().unwrap_or_default();
    let (state, call, on, secs, what) = (next(), next(), next(), next(), next());
    let on = if on == "-" || on.is_empty() {
        "-".to_string()
    } else {
        format!("PE {on}")
    };
    let secs = if secs.is_empty() {
        "-".into()
    } else {
        format!("{secs} s")
    };
    [rank.to_string(), state, call, on, secs, what]
}

/// Asks every running PE that answers SIGUSR1 for its hang report, waits up to
/// [`REPORT_WAIT`] for them, and prints all PEs' reports (the PEs that already ended too: the
/// wait that timed out, or how they ended) as one table on stderr.
fn hang_report(pes: &mut [Pe], rep: &mut Reports, why: &str) {
    rep.drain();
    let mut asked = Vec::new();
    let mut stopped = Vec::new();
    for pe in pes.iter().filter(|p| p.status.is_none()) {
        if is_stopped(pe.pid) {
            // A stopped process cannot answer until it is continued: do not wait for it.
            stopped.push(pe.rank);
            continue;
        }
        if rep.armed[pe.rank] {
            rep.lines[pe.rank].clear();
            rep.done[pe.rank] = false;
            // The PE itself, not its group: only the PE has the handler.
            if kill(Pid::from_raw(pe.pid), Signal::SIGUSR1).is_ok() {
                asked.push(pe.rank);
            }
        }
    }
    let until = Instant::now() + REPORT_WAIT;
    while Instant::now() < until && !asked.iter().all(|&r| rep.done[r]) {
        std::thread::sleep(Duration::from_millis(10));
        rep.drain();
    }
    let mut rows: Vec<[String; 6]> = Vec::new();
    for pe in pes.iter_mut() {
        if pe.status.is_none() {
            if let Ok(Some(st)) = pe.child.try_wait() {
                pe.status = Some(st);
            }
        }
        let lines = &rep.lines[pe.rank];
        for l in lines {
            rows.push(report_row(pe.rank, l));
        }
        let ended = pe.status.map(|st| match (st.code(), st.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(s)) => format!("killed by {}", signal_name(s)),
            _ => "ended".to_string(),
        });
        match (lines.is_empty(), ended) {
            (_, Some(how)) => rows.push([
                pe.rank.to_string(),
                "ended".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                how,
            ]),
            (true, None) if stopped.contains(&pe.rank) => rows.push([
                pe.rank.to_string(),
                "stopped".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "the process is stopped (SIGSTOP, a debugger, or job control)".into(),
            ]),
            (true, None) => rows.push([
                pe.rank.to_string(),
                "no report".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                if asked.contains(&pe.rank) {
                    format!("did not answer within {}s", REPORT_WAIT.as_secs_f64())
                } else {
                    "does not answer SIGUSR1 (still starting, or the program handles SIGUSR1)"
                        .into()
                },
            ]),
            (false, None) => {}
        }
    }
    let head = ["PE", "STATE", "CALL", "WAITING ON", "FOR", "DETAIL"].map(String::from);
    let mut w = [0usize; 5];
    for r in std::iter::once(&head).chain(rows.iter()) {
        for (i, c) in r.iter().take(5).enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = format!("rshmemrun: hang report ({why}):\n");
    for r in std::iter::once(&head).chain(rows.iter()) {
        out.push_str(&format!(
            "  {:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:<w4$}  {}\n",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4]
        ));
    }
    let _ = io::stderr().lock().write_all(out.as_bytes());
}

/// Lets the output threads print what the PEs wrote last; gives up after a moment if a
/// leftover grandchild keeps a pipe open.
fn finish_taggers(taggers: Vec<JoinHandle<()>>) {
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until && !taggers.iter().all(JoinHandle::is_finished) {
        std::thread::sleep(Duration::from_millis(5));
    }
    for t in taggers.into_iter().filter(JoinHandle::is_finished) {
        let _ = t.join();
    }
}

/// The CPUs this process may run on (its affinity mask), ascending.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer and size for the calling process's mask.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads one bit inside `set`.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}
