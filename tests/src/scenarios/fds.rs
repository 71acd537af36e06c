//! `fds`: every descriptor the runtime opened is close-on-exec, so a program that starts others
//! (`system()`, `fork` + `exec`) hands them none of rshmem's sockets, pipes or memfds. The
//! descriptors without `FD_CLOEXEC` that the process had before init (inherited from whoever
//! started it) are left out; after init, a barrier, a put to every PE and a heap allocation
//! (which open the connections and heap chunks), no other descriptor above 2 may lack it.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use crate::check::{Ctx, R};
use crate::ensure;

static BEFORE: OnceLock<BTreeSet<i32>> = OnceLock::new();

/// The open descriptors above 2 without `FD_CLOEXEC`, with what each is (`/proc/self/fd`).
fn inheritable() -> Vec<(i32, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if fd <= 2 {
            continue;
        }
        // SAFETY: F_GETFD only reads the descriptor's flags; a descriptor closed meanwhile
        // (read_dir's own) gives -1.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
            let what = std::fs::read_link(e.path())
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            out.push((fd, what));
        }
    }
    out
}

/// Records the descriptors without close-on-exec before init (called by `main`).
pub fn before_init() {
    let _ = BEFORE.set(inheritable().into_iter().map(|(fd, _)| fd).collect());
}

/// The scenario.
pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    let (me, n) = (w.my_pe(), w.n_pes());
    let buf = w.malloc::<u64>(1 << 16)?;
    w.barrier_all()?;
    for pe in 0..n {
        w.p(buf.as_ptr(), me as u64, pe)?;
        let _ = w.g(buf.as_ptr(), pe)?;
    }
    w.quiet()?;
    w.barrier_all()?;
    let before = BEFORE.get().cloned().unwrap_or_default();
    let leaks: Vec<String> = inheritable()
        .into_iter()
        .filter(|(fd, _)| !before.contains(fd))
        .map(|(fd, what)| format!("{fd} -> {what}"))
        .collect();
    ensure!(
        leaks.is_empty(),
        "descriptors opened by init without FD_CLOEXEC (a child process would inherit them): {}",
        leaks.join(", ")
    );
    w.free(buf)?;
    w.barrier_all()?;
    Ok(())
}
