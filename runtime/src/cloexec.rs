//! Close-on-exec for every descriptor init opens, its libraries' included.
//!
//! rshmem's own descriptors are opened close-on-exec (`O_CLOEXEC`, `MFD_CLOEXEC`, the standard
//! library's sockets). The libraries init loads and starts do not all do so: UCX 1.13 leaves its
//! epoll sets, pipes, timerfd and sockets inheritable. A program that starts others
//! (`system()`, `fork` + `exec`) would hand them these, and a child holding a PE's socket keeps
//! the connection open after the PE dies. So init notes the descriptors that exist when it starts
//! and, when it ends, sets `FD_CLOEXEC` on every descriptor that appeared meanwhile. (One that
//! another thread of the program opened during init gets the flag too.)

use std::collections::BTreeSet;

/// The open descriptors of this process (`/proc/self/fd`), less the one that listing used
/// (closed when it ends, its number is free for the next descriptor opened).
pub(crate) fn open_fds() -> BTreeSet<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return BTreeSet::new();
    };
    let listed: BTreeSet<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .collect();
    listed
        .into_iter()
        // SAFETY: F_GETFD only reads the descriptor's flags; a closed one gives EBADF.
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
        .collect()
}

/// Sets `FD_CLOEXEC` on every open descriptor above 2 that is not in `before`; returns how
/// many lacked it.
pub(crate) fn mark_new(before: &BTreeSet<i32>) -> usize {
    let mut marked = 0;
    for fd in open_fds() {
        if fd <= 2 || before.contains(&fd) {
            continue;
        }
        // SAFETY: F_GETFD/F_SETFD only read and set the descriptor's close-on-exec flag; a
        // descriptor closed meanwhile (read_dir's own) makes them fail with EBADF.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
            // SAFETY: as above.
            unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
            marked += 1;
        }
    }
    marked
}
