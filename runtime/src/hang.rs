//! Hang reports: what this PE is blocked in, on request.
//!
//! Every blocking wait of the runtime goes through [`crate::wait::WaitPolicy::wait`]; once a
//! wait leaves its spinning phase (it is then a slow wait, tens of microseconds or more) it
//! registers a [`Waiting`] record (call name, PE waited on, start time) in this process's
//! registry and removes it when it returns. Nothing is registered on the fast path.
//!
//! A report is asked for with `SIGUSR1`. The signal handler only writes one byte to a pipe
//! (async-signal-safe); a watcher thread reads it, asks every registered wait to describe
//! itself (the waiting thread checks an atomic counter on each turn of its slow loop and
//! writes its own description: address, expected value, barrier number, ...), gives them a
//! moment, and writes the report: one line per wait, or one line saying that the PE is not
//! blocked in rshmem. The report goes to stderr, or, when the request comes from `rshmemrun`
//! (the parent process) and `RSHMEM_HANG_REPORT_DIR` is set, to the file `pe<N>` in that folder,
//! which rshmemrun merges with the other PEs' into one table. A wait that times out
//! (`RSHMEM_TIMEOUT`), or ends because a peer is gone, writes its line there too, so the
//! table also shows the PEs that gave up.
//!
//! The handler is installed at init only when `SIGUSR1` still has its default action (a
//! program's own handler is left alone; then no report is made).
//!
//! Each line of a report file has five tab-separated fields: state (`blocked`, `timed-out`,
//! `peer-lost`, `running`), call, PE waited on (`-` for none), seconds waited, detail.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// Bumped once per report request (by the watcher thread).
static REQUEST: AtomicU64 = AtomicU64::new(0);
/// This PE's number (`usize::MAX` before init).
static ME: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Write end of the request pipe (-1 until installed); the signal handler writes to it.
static PIPE_W: AtomicI32 = AtomicI32::new(-1);
/// Pid of the process that sent the last request (from the handler's siginfo).
static SENDER: AtomicI32 = AtomicI32::new(0);
/// Ids of wait records.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The slow waits of this process now in progress.
static WAITS: Mutex<Vec<Record>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

/// How long the watcher gives waiting threads to describe themselves.
const ANSWER_WITHIN: Duration = Duration::from_millis(300);

struct Record {
    id: u64,
    call: &'static str,
    pe: Option<usize>,
    since: Instant,
    /// The request number the description answers (0: none yet).
    answered: u64,
    what: String,
}

/// A registered slow wait; removed from the registry on drop.
pub(crate) struct Waiting {
    id: u64,
    seen: u64,
}

impl Waiting {
    /// Registers a wait of `call` on `pe` that began at `since`.
    #[cold]
    pub(crate) fn enter(call: &'static str, pe: Option<usize>, since: Instant) -> Waiting {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut w = WAITS.lock().unwrap_or_else(|e| e.into_inner());
        w.push(Record {
            id,
            call,
            pe,
            since,
            answered: 0,
            what: String::new(),
        });
        Waiting {
            id,
            seen: REQUEST.load(Ordering::Acquire),
        }
    }

    /// Called on each turn of the slow loop: when a report was asked for since the last
    /// turn, stores `describe()` for it.
    #[inline]
    pub(crate) fn poll(&mut self, describe: &dyn Fn() -> String) {
        let req = REQUEST.load(Ordering::Acquire);
        if req != self.seen {
            self.seen = req;
            let what = describe();
            let mut w = WAITS.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(r) = w.iter_mut().find(|r| r.id == self.id) {
                r.what = what;
                r.answered = req;
            }
        }
    }

    /// The wait gave up after `waited` (`state`: `timed-out`, `peer-lost`): records it where
    /// the launcher's report is collected (nothing without `RSHMEM_HANG_REPORT_DIR`; the
    /// error itself reports it otherwise).
    #[cold]
    pub(crate) fn gave_up(&self, state: &str, waited: Duration, what: &str) {
        if let Some(dir) = report_dir() {
            let (call, pe) = {
                let w = WAITS.lock().unwrap_or_else(|e| e.into_inner());
                match w.iter().find(|r| r.id == self.id) {
                    Some(r) => (r.call, r.pe),
                    None => ("-", None),
                }
            };
            write_file(&dir, &line(state, call, pe, waited, what));
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut w = WAITS.lock().unwrap_or_else(|e| e.into_inner());
        w.retain(|r| r.id != self.id);
    }
}

fn report_dir() -> Option<String> {
    std::env::var("RSHMEM_HANG_REPORT_DIR")
        .ok()
        .filter(|d| !d.trim().is_empty())
}

fn line(state: &str, call: &str, pe: Option<usize>, waited: Duration, what: &str) -> String {
    let pe = pe.map_or_else(|| "-".to_string(), |p| p.to_string());
    let what = what.replace(['\t', '\n'], " ");
    format!(
        "{state}\t{call}\t{pe}\t{:.1}\t{what}\n",
        waited.as_secs_f64()
    )
}

/// Writes `text` to `<dir>/pe<N>` in one piece (through a temporary file and a rename, so a
/// reader never sees half of it).
fn write_file(dir: &str, text: &str) {
    let me = ME.load(Ordering::Relaxed);
    if me == usize::MAX {
        return;
    }
    let path = std::path::Path::new(dir).join(format!("pe{me}"));
    let tmp = std::path::Path::new(dir).join(format!(".pe{me}.{}", std::process::id()));
    let ok = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = ok {
        tracing::warn!(target: "rshmem::hang", "cannot write the hang report to {}: {e}", path.display());
    }
}

/// This process's report now: one line per registered wait (after giving each a moment to
/// describe itself), or one `running` line.
fn collect() -> String {
    let req = REQUEST.fetch_add(1, Ordering::AcqRel) + 1;
    let until = Instant::now() + ANSWER_WITHIN;
    loop {
        let all = WAITS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .all(|r| r.answered >= req);
        if all || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let w = WAITS.lock().unwrap_or_else(|e| e.into_inner());
    if w.is_empty() {
        return line(
            "running",
            "-",
            None,
            Duration::ZERO,
            "not blocked in an rshmem wait (computing, or blocked outside rshmem)",
        );
    }
    w.iter()
        .map(|r| {
            let what = if r.answered >= req {
                r.what.as_str()
            } else {
                "(the waiting thread did not describe itself in time)"
            };
            line("blocked", r.call, r.pe, r.since.elapsed(), what)
        })
        .collect()
}

/// Writes a report where it was asked for.
fn report() {
    let text = collect();
    let me = ME.load(Ordering::Relaxed);
    let from_parent = SENDER.load(Ordering::Relaxed) == nix::unistd::getppid().as_raw();
    match report_dir() {
        Some(dir) if from_parent => write_file(&dir, &text),
        _ => {
            let mut out = String::new();
            for l in text.lines() {
                let f: Vec<&str> = l.splitn(5, '\t').collect();
                if let [state, call, pe, secs, what] = f[..] {
                    let on = if pe == "-" {
                        "no PE in particular".to_string()
                    } else {
                        format!("PE {pe}")
                    };
                    out.push_str(&format!(
                        "rshmem hang report: PE {me} (pid {}): {state} in {call}, waiting on {on}, for {secs} s: {what}\n",
                        std::process::id()
                    ));
                }
            }
            let _ = std::io::stderr().lock().write_all(out.as_bytes());
        }
    }
}

extern "C" fn on_signal(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    if !info.is_null() {
        // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler; si_pid is
        // meaningful for signals sent by kill(), and reading it is a plain load.
        let pid = unsafe { (*info).si_pid() };
        SENDER.store(pid, Ordering::Relaxed);
    }
    let fd = PIPE_W.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = 1u8;
        // SAFETY: write(2) is async-signal-safe; `b` is a valid one-byte buffer; a full or
        // closed pipe only makes the call fail, which is fine (a report is pending anyway).
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// Records this PE's number and, once per process, installs the `SIGUSR1` handler and the
/// watcher thread (when `SIGUSR1` has its default action).
pub(crate) fn install(me: usize) {
    ME.store(me, Ordering::Relaxed);
    INSTALL.call_once(|| match install_once() {
        Ok(()) => {
            // Tells rshmemrun that this PE answers SIGUSR1 (before, the signal would kill it).
            if let Some(dir) = report_dir() {
                let path = std::path::Path::new(&dir).join(format!("armed-pe{me}"));
                if let Err(e) = std::fs::File::create(&path) {
                    tracing::warn!(target: "rshmem::hang", "cannot write {}: {e}", path.display());
                }
            }
        }
        Err(e) => tracing::debug!(target: "rshmem::hang", "no hang reports on SIGUSR1: {e}"),
    });
}

fn install_once() -> Result<(), String> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    // Query the current action without changing it (SIG_DFL set back at once if it was).
    let probe = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: installing SIG_DFL is always sound; the old action is restored below if it was
    // not the default.
    let old = unsafe { sigaction(Signal::SIGUSR1, &probe) }.map_err(|e| e.to_string())?;
    if !matches!(old.handler(), SigHandler::SigDfl) {
        // SAFETY: restores the program's own action exactly as it was.
        unsafe { sigaction(Signal::SIGUSR1, &old) }.map_err(|e| e.to_string())?;
        return Err("the program has its own SIGUSR1 action".into());
    }
    let (r, w): (OwnedFd, OwnedFd) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(|e| e.to_string())?;
    // The read end blocks (the watcher sleeps in read); only the write end stays non-blocking.
    let rfd = r.as_raw_fd();
    // SAFETY: F_SETFL on a pipe fd this function owns.
    unsafe { libc::fcntl(rfd, libc::F_SETFL, 0) };
    std::thread::Builder::new()
        .name("rshmem-hang".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match nix::unistd::read(&r, &mut buf) {
                    Ok(0) => return,
                    Ok(_) => report(),
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => return,
                }
            }
        })
        .map_err(|e| e.to_string())?;
    // The write end lives for the rest of the process (the handler may run at any time).
    PIPE_W.store(std::os::fd::IntoRawFd::into_raw_fd(w), Ordering::Relaxed);
    let act = SigAction::new(
        SigHandler::SigAction(on_signal),
        SaFlags::SA_RESTART | SaFlags::SA_SIGINFO,
        SigSet::empty(),
    );
    // SAFETY: the handler only loads/stores atomics and calls write(2), all async-signal-safe.
    unsafe { sigaction(Signal::SIGUSR1, &act) }.map_err(|e| e.to_string())?;
    Ok(())
}
