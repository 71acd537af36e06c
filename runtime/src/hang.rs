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
//! (the parent process), to the pipe rshmemrun passed in `RSHMEM_HANG_REPORT_FD` (lines
//! `pe<N>\t...`, then `pe<N>\tend`), and rshmemrun merges the PEs' reports into one table.
//! At init a PE sends `pe<N>\tarmed` there: from then on SIGUSR1 no longer kills it. A wait that times out
//! (`RSHMEM_TIMEOUT`), or ends because a peer is gone, writes its line there too, so the
//! table also shows the PEs that gave up.
//!
//! The handler is installed at init only when `SIGUSR1` still has its default action (a
//! program's own handler is left alone; then no report is made).
//!
//! Each report line has five tab-separated fields: state (`blocked`, `timed-out`,
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
/// The launcher's report pipe (-1: none; reports go to stderr).
static REPORT_FD: AtomicI32 = AtomicI32::new(-1);
/// Longest line sent to the launcher's pipe.
const MAX_LINE: usize = 2000;
/// Ids of wait records.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The slow waits of this process now in progress.
static WAITS: Mutex<Vec<Record>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

/// How long the watcher gives waiting threads to describe themselves.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_millis(300);

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
        // `seen: 0`: a wait that starts while a report is being collected answers it at once.
        Waiting { id, seen: 0 }
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
        if REPORT_FD.load(Ordering::Relaxed) >= 0 {
            let (call, pe) = {
                let w = WAITS.lock().unwrap_or_else(|e| e.into_inner());
                match w.iter().find(|r| r.id == self.id) {
                    Some(r) => (r.call, r.pe),
                    None => ("-", None),
                }
            };
            send(&line(state, call, pe, waited, what));
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut w = WAITS.lock().unwrap_or_else(|e| e.into_inner());
        w.retain(|r| r.id != self.id);
    }
}

/// The launcher's report pipe (`RSHMEM_HANG_REPORT_FD`), checked once at install.
fn report_fd_from_env() -> Option<i32> {
    let v = std::env::var("RSHMEM_HANG_REPORT_FD").ok()?;
    let fd: i32 = v.trim().parse().ok().filter(|&fd| fd > 2)?;
    // SAFETY: F_GETFD only reads descriptor flags; an fd that is not open yields EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // Keep it out of the programs this PE starts.
    // SAFETY: as above, on an open fd; only sets its close-on-exec flag.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(fd)
}

/// Writes each line of `text` to the launcher's pipe as `pe<N>\t<line>`, one `write` per line
/// (at most [`MAX_LINE`] bytes, so each arrives whole: pipes keep writes up to 4 KiB whole).
/// The pipe is non-blocking: a full pipe drops the line rather than stall the PE.
fn send(text: &str) {
    let fd = REPORT_FD.load(Ordering::Relaxed);
    let me = ME.load(Ordering::Relaxed);
    if fd < 0 || me == usize::MAX {
        return;
    }
    for l in text.lines() {
        let mut out = format!("pe{me}\t{l}");
        if out.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
        }
        out.push('\n');
        // SAFETY: `out` is a valid buffer of out.len() bytes; `fd` is the pipe the launcher
        // passed (checked open at install); errors (full pipe, closed reader) are ignored.
        unsafe { libc::write(fd, out.as_ptr().cast(), out.len()) };
    }
}

/// This process's PE number once a world was initialized (kept after it is dropped, for the
/// messages of errors printed later), or None.
pub(crate) fn my_pe() -> Option<usize> {
    let me = ME.load(Ordering::Relaxed);
    (me != usize::MAX).then_some(me)
}

/// Tells the launcher (rshmemrun, through its report pipe) that this PE found PE `pe` gone, so
/// that if this PE fails next, the launcher knows it only reacted and blames `pe`. One line,
/// `pe<me>\tlost <pe>`; nothing without a launcher pipe.
pub(crate) fn tell_launcher_lost(pe: usize) {
    send(&format!("lost {pe}\n"));
}

fn line(state: &str, call: &str, pe: Option<usize>, waited: Duration, what: &str) -> String {
    let pe = pe.map_or_else(|| "-".to_string(), |p| p.to_string());
    let what = what.replace(['\t', '\n'], " ");
    format!(
        "{state}\t{call}\t{pe}\t{:.1}\t{what}\n",
        waited.as_secs_f64()
    )
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
    match REPORT_FD.load(Ordering::Relaxed) {
        fd if fd >= 0 && from_parent => send(&format!("{text}end\n")),
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
            send("armed\n");
        }
        Err(e) => tracing::debug!(target: "rshmem::hang", "no hang reports on SIGUSR1: {e}"),
    });
}

fn install_once() -> Result<(), String> {
    if let Some(fd) = report_fd_from_env() {
        REPORT_FD.store(fd, Ordering::Relaxed);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn a_blocked_wait_describes_itself_and_leaves_no_record_when_done() {
        let stop = Arc::new(AtomicBool::new(false));
        let registered = Arc::new(AtomicBool::new(false));
        let (s, r) = (stop.clone(), registered.clone());
        let t = std::thread::spawn(move || {
            let mut w = Waiting::enter("test_wait_call", Some(3), Instant::now());
            r.store(true, Ordering::Release);
            while !s.load(Ordering::Acquire) {
                w.poll(&|| "flag at 0x10 to become 1 (it is 0)".to_string());
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        while !registered.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let text = collect();
        let mine: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("test_wait_call"))
            .collect();
        assert_eq!(mine.len(), 1, "{text}");
        let f: Vec<&str> = mine[0].split('\t').collect();
        assert_eq!(f[0], "blocked");
        assert_eq!(f[2], "3");
        assert_eq!(f[4], "flag at 0x10 to become 1 (it is 0)");
        stop.store(true, Ordering::Release);
        t.join().expect("waiter");
        assert!(!collect().contains("test_wait_call"));
    }

    #[test]
    fn report_lines_have_five_fields_without_tabs_or_newlines_in_the_detail() {
        let l = line(
            "timed-out",
            "barrier_all",
            None,
            Duration::from_millis(2500),
            "a\tb\nc",
        );
        assert_eq!(l, "timed-out\tbarrier_all\t-\t2.5\ta b c\n");
    }
}
