//! Global exit for the C libraries (`shmem_global_exit` in libshmem, `rshmem_global_exit` in
//! librshmem): every PE of the host exits with the caller's status.
//!
//! At init each PE installs a handler for a real-time signal ([`install`], before it meets the
//! other PEs); the library then records the process ids of the host's PEs ([`set_pids`]).
//! [`tell_others`] sends the signal with `sigqueue` (the status as the signal's value) to the
//! other PEs, and the caller then exits itself. A PE receiving it ends at once with that status
//! (`_exit`: buffered output of that PE is lost). PEs of other hosts see this PE gone
//! (`Error::PeerLost`) at their next wait on it, or are stopped by the launcher.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

static PIDS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

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
        let status = (*info).si_value().sival_ptr as usize as c_int;
        libc::_exit(status)
    }
}

/// Records the PEs' process ids (at init, after [`install`]).
pub fn set_pids(pids: Vec<libc::pid_t>) {
    if let Ok(mut g) = PIDS.lock() {
        *g = pids;
    }
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
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let pids = PIDS.lock().map(|g| g.clone()).unwrap_or_default();
    for pid in pids.into_iter().filter(|&p| p > 0 && p != me) {
        let v = libc::sigval {
            sival_ptr: status as usize as *mut c_void,
        };
        // SAFETY: sigqueue to a PE of this job with a plain integer payload.
        unsafe { libc::sigqueue(pid, signo(), v) };
    }
}
