//! Socket reads and writes of the TCP transport, every blocking one bounded.
//!
//! Each send or receive of a whole unit (a request, a frame's payload, a reply) gets a deadline
//! (`RSHMEM_TIMEOUT` from its start, or none when the timeout is disabled): the data moves with
//! non-blocking calls, and whenever the kernel cannot take or give more, the thread waits in
//! `poll` until the deadline at most. A peer that stops taking or sending bytes (stopped,
//! overloaded, cut off by a network partition) — or trickles them too slowly — makes the
//! operation fail with `TimedOut` at its deadline instead of blocking forever. The one unbounded
//! wait is a service thread's wait for the next request (a connection may idle).

use std::io::ErrorKind;
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

/// The deadline of an operation starting now that may take `timeout` (None: no limit).
#[inline]
pub fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now() + t)
}

/// Waits until `s` is ready for `ev` or `deadline` passes (`TimedOut`).
fn wait(s: &TcpStream, ev: PollFlags, deadline: Option<Instant>) -> std::io::Result<()> {
    loop {
        let t = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ErrorKind::TimedOut.into());
                }
                PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(s.as_fd(), ev)];
        match nix::poll::poll(&mut fds, t) {
            Ok(0) => {}
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// True for the errors a deadline produces.
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Writes all of `buf` by `deadline` (else `TimedOut`; the stream is then cut mid-unit).
pub fn send_all(s: &TcpStream, buf: &[u8], deadline: Option<Instant>) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        // SAFETY: rest is a live readable slice; the fd is the open socket. MSG_NOSIGNAL: a
        // closed peer is an EPIPE error, not a SIGPIPE.
        let r = unsafe {
            libc::send(
                s.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r >= 0 {
            done += r as usize;
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            ErrorKind::WouldBlock => wait(s, PollFlags::POLLOUT, deadline)?,
            ErrorKind::Interrupted => {}
            _ => return Err(e),
        }
    }
    Ok(())
}

/// One `recv` into `buf`: `Ok(0)` at end of stream. With `nowait`, `WouldBlock` when nothing
/// is there; otherwise it blocks (bounded by the socket's receive timeout, if any).
pub fn recv_some(s: &TcpStream, buf: &mut [u8], nowait: bool) -> std::io::Result<usize> {
    let flags = if nowait { libc::MSG_DONTWAIT } else { 0 };
    loop {
        // SAFETY: buf is a live writable slice of buf.len() bytes; the fd is the open socket.
        let r = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives at least one byte into `buf` (`Ok(0)`: end of stream): busy-polls for up to
/// `spin`, then waits until `deadline` (`TimedOut`), or without limit when there is none.
pub fn recv_spin(
    s: &TcpStream,
    buf: &mut [u8],
    spin: Duration,
    deadline: Option<Instant>,
) -> std::io::Result<usize> {
    if !spin.is_zero() {
        let mut t0: Option<Instant> = None;
        let mut polls = 0u32;
        loop {
            match recv_some(s, buf, true) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                r => return r,
            }
            polls = polls.wrapping_add(1);
            if polls % 64 == 0 {
                let t = *t0.get_or_insert_with(Instant::now);
                if t.elapsed() >= spin {
                    break;
                }
                // Let a thread that shares this core (the PE itself) run between polls.
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    }
    if deadline.is_none() {
        return recv_some(s, buf, false);
    }
    loop {
        match recv_some(s, buf, true) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait(s, PollFlags::POLLIN, deadline)?,
            r => return r,
        }
    }
}

/// Fills `out` from `s` by `deadline` (spinning up to `spin` whenever it has to wait): else
/// `TimedOut`; the end of the stream is `UnexpectedEof`.
pub fn recv_exact(
    s: &TcpStream,
    out: &mut [u8],
    spin: Duration,
    deadline: Option<Instant>,
) -> std::io::Result<()> {
    let mut done = 0;
    while done < out.len() {
        match recv_spin(s, &mut out[done..], spin, deadline)? {
            0 => return Err(ErrorKind::UnexpectedEof.into()),
            k => done += k,
        }
    }
    Ok(())
}

/// Time left until `deadline` (None: no deadline), at least 1 ms.
pub fn left(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| {
        d.saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    })
}
