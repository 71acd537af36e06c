//! Socket reads and writes of the TCP transport, every blocking one bounded.
//!
//! Connections between PEs are blocking sockets whose kernel send and receive timeouts
//! (`SO_SNDTIMEO`, `SO_RCVTIMEO`) are set to `RSHMEM_TIMEOUT`: a `send` to a peer that takes no
//! bytes (stopped, overloaded, cut off by a network partition) or a `recv` that gets none fails
//! with `WouldBlock` after that long instead of blocking forever. The bound is on progress: a
//! transfer that keeps moving is never cut off, one that stalls for `RSHMEM_TIMEOUT` is.

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Sets the kernel send and receive timeouts of `s` (None: block without limit).
pub fn set_timeouts(s: &TcpStream, t: Option<Duration>) -> std::io::Result<()> {
    let t = t.filter(|d| !d.is_zero());
    s.set_read_timeout(t)?;
    s.set_write_timeout(t)
}

/// True for the errors a socket timeout produces.
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Writes all of `buf` (bounded by the socket's send timeout per stalled `send`).
pub fn send_all(mut s: &TcpStream, buf: &[u8]) -> std::io::Result<()> {
    s.write_all(buf)
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
/// `spin`, then blocks (bounded by the receive timeout).
pub fn recv_spin(s: &TcpStream, buf: &mut [u8], spin: Duration) -> std::io::Result<usize> {
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
            }
            std::hint::spin_loop();
        }
    }
    recv_some(s, buf, false)
}

/// Fills `out` from `s` (spinning up to `spin` whenever it has to wait). A stall longer than
/// the receive timeout fails with `WouldBlock`; the end of the stream with `UnexpectedEof`.
pub fn recv_exact(s: &TcpStream, out: &mut [u8], spin: Duration) -> std::io::Result<()> {
    let mut done = 0;
    while done < out.len() {
        match recv_spin(s, &mut out[done..], spin)? {
            0 => return Err(ErrorKind::UnexpectedEof.into()),
            k => done += k,
        }
    }
    Ok(())
}

/// Time left until `deadline` (None: no deadline), at least 1 ms so that a socket timeout is
/// never zero (which would mean "no timeout").
pub fn left(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| {
        d.saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    })
}
