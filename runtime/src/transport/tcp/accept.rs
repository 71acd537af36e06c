//! Accepting the TCP transport's incoming connections at init.
//!
//! One thread multiplexes the listener and every connection that has not finished its hello
//! with `poll`: a connection that sends nothing, sends too little, or sends something other
//! than the job's token delays nobody — it is closed when its own hello deadline
//! ([`HELLO_LIMIT`], or the overall deadline if sooner) passes, when it proves to be a stranger,
//! or when every expected PE has arrived. The overall deadline (`RSHMEM_TIMEOUT` from the
//! start of the transport's set-up) is checked on every wake-up, at least every
//! [`TICK`], whatever arrives.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use super::sock;
use super::wire;
use crate::error::{Error, Result};

/// Most time a connection may take to present its hello.
pub const HELLO_LIMIT: Duration = Duration::from_secs(5);
/// Longest sleep of the loop (it also watches the abort flag).
const TICK: Duration = Duration::from_millis(100);
/// Most connections waiting for their hello at once; the oldest is closed to make room.
const MAX_PENDING: usize = 256;

/// A connection that has not finished its hello.
struct Pending {
    s: TcpStream,
    from: SocketAddr,
    buf: Vec<u8>,
    got: usize,
    until: Instant,
}

/// What to accept.
pub(super) struct Accept<'a> {
    pub me: usize,
    pub token: &'a [u8],
    /// `expected[pe]`: PE `pe` connects to this PE.
    pub expected: &'a [bool],
    /// When the whole set-up must be done (None: no limit).
    pub deadline: Option<Instant>,
    /// `RSHMEM_TIMEOUT`, for the error.
    pub timeout: Option<Duration>,
    /// Set by the connecting side when it failed: stop and return `Ok(None)`.
    pub abort: &'a AtomicBool,
    /// Per-connection hello limit (normally [`HELLO_LIMIT`]).
    pub hello_limit: Duration,
}

/// The outcome of reading from a pending connection.
enum Step {
    Wait,
    Drop(String),
    Hello(usize),
}

impl Accept<'_> {
    /// Accepts until every expected PE presented a valid hello (answered with an ack), then
    /// closes everything else. `(pe, stream)` in PE order; `Ok(None)` if aborted.
    pub fn run(&self, l: &TcpListener) -> Result<Option<Vec<(usize, TcpStream)>>> {
        let call = "init";
        l.set_nonblocking(true)
            .map_err(|e| Error::os(call, "TCP transport listener", e))?;
        let want = self.expected.iter().filter(|e| **e).count();
        let mut got: Vec<Option<TcpStream>> = self.expected.iter().map(|_| None).collect();
        let mut count = 0;
        let mut pending: VecDeque<Pending> = VecDeque::new();
        let hlen = wire::hello_len(self.token.len());
        while count < want {
            if self.abort.load(Ordering::Acquire) {
                return Ok(None);
            }
            let now = Instant::now();
            if self.deadline.is_some_and(|d| now >= d) {
                return Err(self.timed_out(&got));
            }
            pending.retain(|p| {
                let keep = p.until > now;
                if !keep {
                    tracing::warn!(target: "rshmem::tcp", "closing a TCP connection from {} that sent no valid hello within {:?}", p.from, self.hello_limit);
                }
                keep
            });
            let mut wake = now + TICK;
            if let Some(d) = self.deadline {
                wake = wake.min(d);
            }
            if let Some(u) = pending.iter().map(|p| p.until).min() {
                wake = wake.min(u);
            }
            let ms = wake
                .saturating_duration_since(now)
                .as_millis()
                .clamp(1, TICK.as_millis());
            let ready: Vec<bool> = {
                let mut fds = Vec::with_capacity(1 + pending.len());
                fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
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
                if !ready.get(i + 1).copied().unwrap_or(false) {
                    continue;
                }
                let step = self.read_hello(&mut pending[i], hlen, &got);
                match step {
                    Step::Wait => {}
                    Step::Drop(why) => {
                        if let Some(p) = pending.remove(i) {
                            tracing::warn!(target: "rshmem::tcp", "refused a TCP connection from {}: {why}", p.from);
                        }
                    }
                    Step::Hello(pe) => {
                        if let Some(p) = pending.remove(i) {
                            if sock::send_all(
                                &p.s,
                                &wire::ack(wire::ACK_OK),
                                Some(Instant::now() + Duration::from_secs(1)),
                            )
                            .is_ok()
                            {
                                got[pe] = Some(p.s);
                                count += 1;
                            }
                        }
                    }
                }
            }
            if ready.first().copied().unwrap_or(false) {
                loop {
                    match l.accept() {
                        Ok((s, from)) => {
                            if s.set_nonblocking(true).is_err() {
                                continue;
                            }
                            if pending.len() >= MAX_PENDING {
                                if let Some(old) = pending.pop_front() {
                                    tracing::warn!(target: "rshmem::tcp", "too many TCP connections without a hello: closing the one from {}", old.from);
                                }
                            }
                            let until = Instant::now() + self.hello_limit;
                            pending.push_back(Pending {
                                s,
                                from,
                                buf: vec![0; hlen],
                                got: 0,
                                until: self.deadline.map_or(until, |d| until.min(d)),
                            });
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) if is_transient(&e) => {
                            tracing::warn!(target: "rshmem::tcp", "accepting a TCP connection: {e}");
                            break;
                        }
                        Err(e) => {
                            return Err(Error::os(call, "accepting TCP transport connections", e))
                        }
                    }
                }
            }
        }
        Ok(Some(
            got.into_iter()
                .enumerate()
                .filter_map(|(p, s)| s.map(|s| (p, s)))
                .collect(),
        ))
    }

    /// Reads what a pending connection sent; judges the hello once complete.
    fn read_hello(&self, p: &mut Pending, hlen: usize, got: &[Option<TcpStream>]) -> Step {
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
        if got[pe].is_some() {
            return Step::Drop(format!("PE {pe} is already connected"));
        }
        Step::Hello(pe)
    }

    fn timed_out(&self, got: &[Option<TcpStream>]) -> Error {
        let missing: Vec<usize> = (0..self.expected.len())
            .filter(|&p| self.expected[p] && got[p].is_none())
            .collect();
        let list: Vec<String> = missing.iter().map(|p| p.to_string()).collect();
        Error::Timeout {
            call: "init",
            me: self.me,
            pe: missing.first().copied(),
            what: format!(
                "PE(s) {} to connect to this PE's TCP transport and present the job token",
                list.join(", ")
            ),
            waited: self.timeout.unwrap_or_default(),
        }
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

    /// PE 0 accepting the `expected` PEs, with a deadline and timeout `within` from now.
    fn as_pe0<'a>(
        token: &'a [u8],
        expected: &'a [bool],
        abort: &'a AtomicBool,
        within: Duration,
        hello_limit: Duration,
    ) -> Accept<'a> {
        Accept {
            me: 0,
            token,
            expected,
            deadline: Some(Instant::now() + within),
            timeout: Some(within),
            abort,
            hello_limit,
        }
    }

    /// Ten idle connections and two with a wrong token reach the listener before the one
    /// expected peer: the peer is accepted at once (not after 5 s per idle connection), the
    /// strangers get nothing.
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
        let abort = AtomicBool::new(false);
        let expected = [false, true];
        let a = as_pe0(
            &token,
            &expected,
            &abort,
            Duration::from_secs(60),
            Duration::from_secs(30),
        );
        let t0 = Instant::now();
        let got = a.run(&l).unwrap().unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "accepting took {:?}",
            t0.elapsed()
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 1);
        let mut ack = [0u8; wire::ACK];
        sock::recv_exact(&good, &mut ack, Duration::ZERO, None).unwrap();
        assert_eq!(wire::parse_ack(&ack), Some(wire::ACK_OK));
        // The stranger was closed without an answer.
        let mut b = [0u8; 1];
        bad.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(std::io::Read::read(&mut bad, &mut b).unwrap_or(0), 0);
        drop(idle);
    }

    /// The overall deadline holds while idle connections keep arriving: a missing peer is a
    /// timeout naming it.
    #[test]
    fn deadline_names_the_missing_pe() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let token = [7u8; 16];
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let pest = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s2.load(Ordering::Acquire) {
                if let Ok(s) = TcpStream::connect(at) {
                    held.push(s);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let abort = AtomicBool::new(false);
        let expected = [false, true, true];
        let a = as_pe0(
            &token,
            &expected,
            &abort,
            Duration::from_secs(1),
            HELLO_LIMIT,
        );
        let t0 = Instant::now();
        let e = a.run(&l).unwrap_err();
        stop.store(true, Ordering::Release);
        pest.join().unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "took {:?}",
            t0.elapsed()
        );
        let msg = e.to_string();
        assert!(matches!(e, Error::Timeout { pe: Some(1), .. }), "{msg}");
        assert!(msg.contains("PE(s) 1, 2 to connect"), "{msg}");
    }
}
