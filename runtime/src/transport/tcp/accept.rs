//! Accepting the TCP transport's incoming connections, for the whole life of the PE.
//!
//! PEs connect at first use (see the module docs of [`super`]), so the listener stays open
//! until the transport is dropped. One thread of its own ([`Accept::run`]) multiplexes the
//! listener, a wake-up descriptor and every connection that has not finished its hello with
//! `poll`; the PE never waits for it. A connection that sends nothing, sends too little, or
//! sends something other than the job's token delays nobody — it is closed when its own hello
//! deadline ([`HELLO_LIMIT`], or `RSHMEM_TIMEOUT` if shorter) passes, as soon as it proves to
//! be a stranger, or when the transport is dropped; every refusal is logged (target
//! `rshmem::tcp`, level warn). At most [`MAX_PENDING`] connections wait for their hello at
//! once (the oldest is closed to make room), so a flood of idle connections cannot exhaust
//! the PE's descriptors either. A PE is accepted once: a second hello naming it is refused.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use super::sock;
use super::wire;
use crate::error::{Error, Result};

/// Most time a connection may take to present its hello.
pub const HELLO_LIMIT: Duration = Duration::from_secs(5);
/// Longest sleep of the loop (it also watches the stop flag).
const TICK: Duration = Duration::from_millis(500);
/// Most connections waiting for their hello at once; the oldest is closed to make room.
pub const MAX_PENDING: usize = 256;

/// A connection that has not finished its hello.
struct Pending {
    s: TcpStream,
    from: SocketAddr,
    buf: Vec<u8>,
    got: usize,
    until: Instant,
}

/// Wakes the accept loop (an eventfd it polls beside the listener).
pub(super) struct Wake(OwnedFd);

impl Wake {
    /// A fresh, unsignalled wake-up descriptor.
    pub fn new() -> Result<Wake> {
        // SAFETY: eventfd takes no pointers; the returned descriptor (checked below) is ours.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::os(
                "init",
                "creating the TCP accept loop's wake-up descriptor",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the loop look at its stop flag now.
    pub fn ring(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to our eventfd.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }
}

/// What to accept.
pub(super) struct Accept<'a> {
    pub me: usize,
    pub token: &'a [u8],
    /// `expected[pe]`: PE `pe` may connect to this PE.
    pub expected: &'a [bool],
    /// Raised when the transport is dropped: the loop returns.
    pub stop: &'a AtomicBool,
    /// Rung with `stop`.
    pub wake: &'a Wake,
    /// Per-connection hello limit (normally [`HELLO_LIMIT`], at most `RSHMEM_TIMEOUT`).
    pub hello_limit: Duration,
}

/// The outcome of reading from a pending connection.
enum Step {
    Wait,
    Drop(String),
    Hello(usize),
}

impl Accept<'_> {
    /// Accepts until `stop`: every connection that presents a valid hello from an expected PE
    /// not seen before is answered with an ack and handed to `peer` (blocking, with
    /// `TCP_NODELAY`); everything else is closed. An error only if the listener itself fails.
    pub fn run(&self, l: &TcpListener, mut peer: impl FnMut(usize, TcpStream)) -> Result<()> {
        let call = "the TCP accept loop";
        l.set_nonblocking(true)
            .map_err(|e| Error::os(call, "TCP transport listener", e))?;
        let mut seen: Vec<bool> = self.expected.iter().map(|_| false).collect();
        let mut pending: VecDeque<Pending> = VecDeque::new();
        let hlen = wire::hello_len(self.token.len());
        loop {
            if self.stop.load(Ordering::Acquire) {
                return Ok(());
            }
            let now = Instant::now();
            pending.retain(|p| {
                let keep = p.until > now;
                if !keep {
                    tracing::warn!(target: "rshmem::tcp", "PE {}: closing a TCP connection from {} that sent no valid hello within {:?}", self.me, p.from, self.hello_limit);
                }
                keep
            });
            let mut wake = now + TICK;
            if let Some(u) = pending.iter().map(|p| p.until).min() {
                wake = wake.min(u);
            }
            let ms = wake
                .saturating_duration_since(now)
                .as_millis()
                .clamp(1, TICK.as_millis());
            let ready: Vec<bool> = {
                let mut fds = Vec::with_capacity(2 + pending.len());
                fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
                fds.push(PollFd::new(self.wake.0.as_fd(), PollFlags::POLLIN));
                for p in &pending {
                    fds.push(PollFd::new(p.s.as_fd(), PollFlags::POLLIN));
                }
                match nix::poll::poll(
                    &mut fds,
                    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
                ) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => {
                        return Err(Error::os(
                            call,
                            "waiting for TCP transport connections",
                            std::io::Error::from(e),
                        ))
                    }
                }
                fds.iter()
                    .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                    .collect()
            };
            // Hellos first (indices shift when one leaves), newest to oldest.
            for i in (0..pending.len()).rev() {
                if !ready.get(i + 2).copied().unwrap_or(false) {
                    continue;
                }
                let step = self.read_hello(&mut pending[i], hlen, &seen);
                match step {
                    Step::Wait => {}
                    Step::Drop(why) => {
                        if let Some(p) = pending.remove(i) {
                            tracing::warn!(target: "rshmem::tcp", "PE {}: refused a TCP connection from {}: {why}", self.me, p.from);
                        }
                    }
                    Step::Hello(pe) => {
                        let Some(p) = pending.remove(i) else { continue };
                        let ok = sock::send_all(
                            &p.s,
                            &wire::ack(wire::ACK_OK),
                            Some(Instant::now() + Duration::from_secs(1)),
                        )
                        .and_then(|()| p.s.set_nonblocking(false))
                        .and_then(|()| p.s.set_nodelay(true));
                        match ok {
                            Ok(()) => {
                                seen[pe] = true;
                                peer(pe, p.s);
                            }
                            Err(e) => {
                                tracing::warn!(target: "rshmem::tcp", "PE {}: answering the TCP hello of PE {pe} from {}: {e}", self.me, p.from);
                            }
                        }
                    }
                }
            }
            if ready.first().copied().unwrap_or(false) {
                self.accept_all(l, &mut pending, hlen)?;
            }
        }
    }

    /// Takes every connection waiting on the listener into `pending`.
    fn accept_all(
        &self,
        l: &TcpListener,
        pending: &mut VecDeque<Pending>,
        hlen: usize,
    ) -> Result<()> {
        loop {
            match l.accept() {
                Ok((s, from)) => {
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if pending.len() >= MAX_PENDING {
                        if let Some(old) = pending.pop_front() {
                            tracing::warn!(target: "rshmem::tcp", "PE {}: too many TCP connections without a hello: closing the one from {}", self.me, old.from);
                        }
                    }
                    pending.push_back(Pending {
                        s,
                        from,
                        buf: vec![0; hlen],
                        got: 0,
                        until: Instant::now() + self.hello_limit,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if is_transient(&e) => {
                    tracing::warn!(target: "rshmem::tcp", "PE {}: accepting a TCP connection: {e}", self.me);
                    return Ok(());
                }
                Err(e) => {
                    return Err(Error::os(
                        "the TCP accept loop",
                        "accepting TCP transport connections",
                        e,
                    ))
                }
            }
        }
    }

    /// Reads what a pending connection sent; judges the hello once complete.
    fn read_hello(&self, p: &mut Pending, hlen: usize, seen: &[bool]) -> Step {
        match sock::recv_some(&p.s, &mut p.buf[p.got..], true) {
            Ok(0) => return Step::Drop("it closed before its hello was complete".into()),
            Ok(k) => p.got += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Step::Wait,
            Err(e) => return Step::Drop(format!("reading its hello: {e}")),
        }
        let t = self.token.len().min(p.got);
        if p.buf[..t] != self.token[..t] {
            return Step::Drop("it did not present the job token".into());
        }
        if p.got < hlen {
            return Step::Wait;
        }
        let Some((pe, version)) = wire::parse_hello(self.token, &p.buf) else {
            return Step::Drop("it did not present the job token".into());
        };
        if version != wire::VERSION {
            let _ = sock::send_all(
                &p.s,
                &wire::ack(wire::ACK_VERSION),
                Some(Instant::now() + Duration::from_secs(1)),
            );
            return Step::Drop(format!(
                "PE {pe} speaks version {version} of the TCP transport protocol, this PE {}",
                wire::VERSION
            ));
        }
        if !self.expected.get(pe).copied().unwrap_or(false) {
            return Step::Drop(format!(
                "it claims to be PE {pe}, which does not connect to this PE over TCP"
            ));
        }
        if seen.get(pe).copied().unwrap_or(false) {
            return Step::Drop(format!("PE {pe} is already connected"));
        }
        Step::Hello(pe)
    }
}

/// Accept errors that concern one connection or a passing shortage, not the listener.
fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNABORTED
                | libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EPROTO
                | libc::EPERM
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::mpsc;

    /// What [`start`] returns: the stop flag, the wake-up, the handed-over PEs, the thread.
    type Running = (
        std::sync::Arc<AtomicBool>,
        std::sync::Arc<Wake>,
        mpsc::Receiver<(usize, TcpStream)>,
        std::thread::JoinHandle<Result<()>>,
    );

    /// Runs an accept loop for PE 0 of a job of `expected.len()` PEs on `l` in a thread; the
    /// PEs it hands over arrive on the channel. Stop it with the returned flag and wake-up.
    fn start(
        l: TcpListener,
        token: [u8; 16],
        expected: Vec<bool>,
        hello_limit: Duration,
    ) -> Running {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let wake = std::sync::Arc::new(Wake::new().unwrap());
        let (tx, rx) = mpsc::channel();
        let (s2, w2) = (stop.clone(), wake.clone());
        let t = std::thread::spawn(move || {
            let a = Accept {
                me: 0,
                token: &token,
                expected: &expected,
                stop: &s2,
                wake: &w2,
                hello_limit,
            };
            a.run(&l, |pe, s| {
                let _ = tx.send((pe, s));
            })
        });
        (stop, wake, rx, t)
    }

    /// Ten idle connections and two with a wrong token reach the listener before the one
    /// expected peer: the peer is accepted at once (not after 5 s per idle connection), the
    /// strangers get nothing, and a second hello naming the same PE is refused.
    #[test]
    fn idle_and_hostile_connections_delay_nobody() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let token = [7u8; 16];
        let idle: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(at).unwrap()).collect();
        let mut bad = TcpStream::connect(at).unwrap();
        bad.write_all(&wire::hello(&[8u8; 16], 1, wire::VERSION))
            .unwrap();
        let mut half = TcpStream::connect(at).unwrap();
        half.write_all(&token[..5]).unwrap();
        let mut good = TcpStream::connect(at).unwrap();
        good.write_all(&wire::hello(&token, 1, wire::VERSION))
            .unwrap();
        let t0 = Instant::now();
        let (stop, wake, rx, t) = start(l, token, vec![false, true], Duration::from_secs(30));
        let (pe, _s) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "accepting took {:?}",
            t0.elapsed()
        );
        assert_eq!(pe, 1);
        let mut ack = [0u8; wire::ACK];
        sock::recv_exact(&good, &mut ack, Duration::ZERO, None).unwrap();
        assert_eq!(wire::parse_ack(&ack), Some(wire::ACK_OK));
        // The stranger was closed without an answer.
        let mut b = [0u8; 1];
        bad.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(std::io::Read::read(&mut bad, &mut b).unwrap_or(0), 0);
        // PE 1 again: refused, nothing handed over.
        let mut again = TcpStream::connect(at).unwrap();
        again
            .write_all(&wire::hello(&token, 1, wire::VERSION))
            .unwrap();
        again
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(std::io::Read::read(&mut again, &mut b).unwrap_or(0), 0);
        assert!(rx.try_recv().is_err());
        stop.store(true, Ordering::Release);
        wake.ring();
        let t1 = Instant::now();
        t.join().unwrap().unwrap();
        assert!(
            t1.elapsed() < Duration::from_millis(400),
            "stopping took {:?}",
            t1.elapsed()
        );
        drop(idle);
    }

    /// A connection that never completes its hello is closed at its hello limit, and the
    /// loop keeps accepting (the listener stays open for the life of the PE).
    #[test]
    fn silent_connection_is_closed_at_the_hello_limit() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let token = [7u8; 16];
        let (stop, wake, rx, t) = start(
            l,
            token,
            vec![false, true, true],
            Duration::from_millis(300),
        );
        let mut silent = TcpStream::connect(at).unwrap();
        silent.write_all(&token[..3]).unwrap();
        silent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let t0 = Instant::now();
        let mut b = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut silent, &mut b).unwrap_or(0), 0);
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(3),
            "closed after {took:?}"
        );
        let mut good = TcpStream::connect(at).unwrap();
        good.write_all(&wire::hello(&token, 2, wire::VERSION))
            .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap().0, 2);
        stop.store(true, Ordering::Release);
        wake.ring();
        t.join().unwrap().unwrap();
    }
}
