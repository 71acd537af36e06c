//! Global exit for the C libraries (`shmem_global_exit` in libshmem, `rshmem_global_exit` in
//! librshmem): every PE of the host exits with the caller's status.
//!
//! At init each PE installs a handler for a real-time signal ([`install`], before it meets the
//! other PEs); the library then records the process ids of the host's PEs ([`set_pids`]).
//! [`tell_others`] sends the signal with `sigqueue` (the status as the signal's value) to the
//! other PEs, and the caller then exits itself. A PE receiving it passes it on to every other PE
//! of the host and then ends at once with that status (`_exit`: buffered output of that PE is
//! lost). PEs of other hosts see this PE gone (`Error::PeerLost`) at their next wait on it, or
//! are stopped by the launcher.
//!
//! Passing the signal on makes it reach every PE of the host before any of them exits, so a PE
//! that sees another PE leave already has the exit request pending; the C libraries' error path
//! takes it ([`honour_pending`], [`await_pending`]) and ends with the caller's status instead of
//! reporting the PE that left. Without it, a PE that the sender had not signalled yet could see
//! the first receiver gone and fail the job with status 1.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The host's PEs' process ids: set once per init, read by the signal handler (a plain load; the
/// list is never freed, so a handler never sees it go away).
static PIDS: AtomicPtr<Vec<libc::pid_t>> = AtomicPtr::new(std::ptr::null_mut());

/// Set by the handler before it passes the request on: `EXITING_FLAG | status` (another thread of
/// this PE that fails meanwhile ends with the same status instead of racing it with its own).
static EXITING: AtomicU64 = AtomicU64::new(0);
const EXITING_FLAG: u64 = 1 << 32;

fn signo() -> c_int {
    libc::SIGRTMAX() - 3
}

extern "C" fn on_signal(_sig: c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    if info.is_null() {
        return;
    }
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; reading si_code and
    // si_value and calling _exit are async-signal-safe.
    unsafe {
        if (*info).si_code != libc::SI_QUEUE {
            return;
        }
        leave(status_of(&*info))
    }
}

/// The status a global-exit signal carries.
fn status_of(info: &libc::siginfo_t) -> c_int {
    // SAFETY: the exit signal is always queued with an integer in sival_ptr.
    unsafe { info.si_value().sival_ptr as usize as c_int }
}

/// Marks this PE as leaving with `status`, passes the request on, and exits. Async-signal-safe.
fn leave(status: c_int) -> ! {
    EXITING.store(EXITING_FLAG | u64::from(status as u32), Ordering::SeqCst);
    send_to_others(status);
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(status) }
}

/// Records the PEs' process ids (at init, after [`install`]). A list set by an earlier init is
/// left allocated (a handler may be reading it).
pub fn set_pids(pids: Vec<libc::pid_t>) {
    PIDS.store(Box::into_raw(Box::new(pids)), Ordering::Release);
}

/// Installs the handler (at init, before this PE meets the others, so that it is in place on
/// every PE before any PE can return from init).
pub fn install() {
    // SAFETY: a zeroed sigaction with a valid SA_SIGINFO handler and an empty mask.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(signo(), &sa, std::ptr::null_mut());
    }
}

/// Sends the exit request with `status` to every other PE.
pub fn tell_others(status: c_int) {
    send_to_others(status);
}

/// Queues the exit signal with `status` to every PE of the host but this one. Async-signal-safe
/// (getpid, an atomic load, sigqueue): the handler calls it.
fn send_to_others(status: c_int) {
    let list = PIDS.load(Ordering::Acquire);
    if list.is_null() {
        return;
    }
    // SAFETY: a non-null PIDS points to a leaked Vec that is never freed or changed.
    let pids: &[libc::pid_t] = unsafe { &*list };
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    for &pid in pids.iter().filter(|&&p| p > 0 && p != me) {
        let v = libc::sigval {
            sival_ptr: status as usize as *mut c_void,
        };
        // SAFETY: sigqueue to a PE of this job with a plain integer payload.
        unsafe { libc::sigqueue(pid, signo(), v) };
    }
}

/// Ends the process with the status of a global exit that another PE asked for and that is
/// pending here (queued but not yet handled, blocked by the program, or being handled by another
/// thread); returns at once when there is none. The C libraries call it before they report an
/// error, so a PE that fails because a peer left on a global exit ends with the exit's status.
pub fn honour_pending() {
    let e = EXITING.load(Ordering::SeqCst);
    if e & EXITING_FLAG != 0 {
        leave(e as u32 as c_int);
    }
    // SAFETY: a sigset holding only the exit signal; sigtimedwait with a zero timeout only takes
    // a signal already pending (it never waits).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signo());
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if libc::sigtimedwait(&set, &mut info, &zero) == signo() && info.si_code == libc::SI_QUEUE {
            leave(status_of(&info));
        }
    }
}

/// [`honour_pending`], watching for up to `within` (a thread of this PE may have taken the
/// signal from the queue and not yet reached the handler). The C libraries call it when a call
/// failed because a peer is gone, the one failure a global exit of another PE causes.
pub fn await_pending(within: Duration) {
    let end = Instant::now() + within;
    loop {
        honour_pending();
        if Instant::now() >= end {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
