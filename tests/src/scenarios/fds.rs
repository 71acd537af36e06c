//! `fds`: every descriptor the runtime opened is close-on-exec, so a program that starts others
//! (`system()`, `fork` + `exec`) hands them none of rshmem's sockets, pipes or memfds. The
//! descriptors without `FD_CLOEXEC` that the process had before init (inherited from whoever
//! started it) are left out; after init, a barrier, a put to every PE and a heap allocation
//! (which open the connections and heap chunks), no other descriptor above 2 may lack it.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use crate::check::{Ctx, Fail, R};
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
    // Listeners opened during init (UCX's TCP transport listens on every interface) take no
    // new connection once init is done, except rshmem's own TCP transport's: its PEs connect at
    // first use, so it stays open, and it must close a connection that does not present the
    // job token without answering it.
    let mine = w.tcp_listener();
    if let Some(addr) = mine {
        refuses_stranger(addr)?;
    }
    let open: Vec<String> = listeners()
        .into_iter()
        .filter(|(fd, _)| !before.contains(fd))
        .filter(|(_, addr)| Some(*addr) != mine)
        .filter(|(_, addr)| {
            std::net::TcpStream::connect_timeout(addr, std::time::Duration::from_millis(300))
                .is_ok()
        })
        .map(|(fd, addr)| format!("{fd} ({addr})"))
        .collect();
    ensure!(
        open.is_empty(),
        "listening sockets opened by init still accept connections: {}",
        open.join(", ")
    );
    w.free(buf)?;
    w.barrier_all()?;
    Ok(())
}

/// rshmem's TCP transport listener at `addr` takes a connection, and closes it without a byte
/// of answer when what arrives is not a handshake with the job token.
fn refuses_stranger(addr: std::net::SocketAddr) -> R {
    use std::io::{Read, Write};
    use std::time::Duration;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| Fail(format!("rshmem's TCP listener {addr}: connect: {e}")))?;
    // Longer than the listener's handshake limit (at most 5 s), so a listener that neither
    // answers nor closes fails here.
    s.set_read_timeout(Some(Duration::from_secs(8)))
        .map_err(|e| Fail(format!("set_read_timeout: {e}")))?;
    let _ = s.write_all(&[0x5a; 64]);
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(()),
        Ok(n) => Err(Fail(format!(
            "rshmem's TCP listener {addr} answered {n} bytes to a connection without the job token"
        ))),
        Err(e) => Err(Fail(format!(
            "rshmem's TCP listener {addr} neither answered nor closed a connection without the job token: {e}"
        ))),
    }
}

/// This process's listening TCP sockets and the address to reach each.
fn listeners() -> Vec<(i32, std::net::SocketAddr)> {
    use std::os::fd::BorrowedFd;
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return out;
    };
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    for fd in fds {
        // SAFETY: F_GETFD only checks that the descriptor is open.
        if fd <= 2 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            continue;
        }
        // SAFETY: the descriptor is open (checked above) and stays open during this loop
        // (only borrowed for two queries).
        let b = unsafe { BorrowedFd::borrow_raw(fd) };
        let listening = nix::sys::socket::getsockopt(&b, nix::sys::socket::sockopt::AcceptConn)
            .unwrap_or(false);
        if !listening {
            continue;
        }
        // SAFETY: all-zero is a valid sockaddr_storage; getsockname writes at most `len` bytes.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: a valid buffer of `len` bytes for the socket's address.
        let r = unsafe {
            libc::getsockname(
                fd,
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        };
        if r != 0 {
            continue;
        }
        let addr = match i32::from(ss.ss_family) {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let a =
                    unsafe { &*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
                let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                let ip = if ip.is_unspecified() {
                    std::net::Ipv4Addr::LOCALHOST
                } else {
                    ip
                };
                std::net::SocketAddr::from((ip, u16::from_be(a.sin_port)))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let a = unsafe {
                    &*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
                };
                let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                let ip = if ip.is_unspecified() {
                    std::net::Ipv6Addr::LOCALHOST
                } else {
                    ip
                };
                std::net::SocketAddr::from((ip, u16::from_be(a.sin6_port)))
            }
            _ => continue,
        };
        out.push((fd, addr));
    }
    out
}
