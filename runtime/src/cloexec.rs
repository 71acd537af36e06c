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

/// The `int` socket option `opt` (at `SOL_SOCKET`) of descriptor `fd`; None when the call fails
/// (for instance, `fd` is not a socket).
fn socket_int(fd: i32, opt: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes (one int) into `v`; a descriptor that is
    // not a socket fails.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

/// Makes every TCP listening socket that appeared since `before` refuse new connections: the
/// listeners that libraries opened during init (UCX's TCP transport listens on every interface
/// for the whole job, without the job's secret) are needed only while the PEs connect, which
/// init has finished. Each gets a socket filter that drops every packet, so a connection
/// attempt to it never completes (closing it behind the library's back could reuse its number
/// under the library's feet). Returns how many were closed to newcomers.
pub(crate) fn shut_new_listeners(before: &BTreeSet<i32>) -> usize {
    let mut shut = 0;
    for fd in open_fds() {
        if fd <= 2 || before.contains(&fd) {
            continue;
        }
        let listening = || socket_int(fd, libc::SO_ACCEPTCONN).is_some_and(|v| v != 0);
        let inet = || {
            matches!(
                socket_int(fd, libc::SO_DOMAIN),
                Some(libc::AF_INET | libc::AF_INET6)
            )
        };
        if !(listening() && inet()) {
            continue;
        }
        // One classic BPF instruction: return 0 (drop the packet).
        let mut drop_all = [libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        }];
        let prog = libc::sock_fprog {
            len: 1,
            filter: drop_all.as_mut_ptr(),
        };
        // SAFETY: attaches a valid one-instruction filter program to a listening socket; the
        // kernel copies the program.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&prog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if r == 0 {
            shut += 1;
        }
    }
    shut
}
