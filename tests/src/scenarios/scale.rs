//! `scale [BARRIERS]` — what one PE of a large job costs: prints one line per PE,
//!
//! ```text
//! SCALE pe=<me> n=<n> init_ms=<World::init_time> up_ms=<process age when init returned>
//!       barrier_us=<mean barrier_all> rss_kib=<VmRSS>
//!       sockets=<sockets held after init> tcp=<TCP sockets> unix=<Unix sockets> fds=<all fds>
//!       xout=<TCP transport connections opened at init> xin=<accepted at init>
//!       xout_b=<opened after the barriers> xin_b=<accepted after them>
//!       tcp_b=<TCP sockets after them>
//!       hmap=<local PEs whose heap is mapped here at init> cmap=<same, control heaps>
//!       cmap_b=<control heaps mapped after the barriers> hmap_r=<heaps mapped after the ring put>
//!       at_s=<wall-clock time of the line, seconds since the epoch>
//! ```
//!
//! (on one line), for `scripts/scale-test` and the scale suite to collect. `init_ms` is what
//! `World::init_time` reports (from after the bootstrap has joined the job); `up_ms` counts from
//! the process's start (exec, the bootstrap's rendezvous and links, init), 10 ms resolution. The sockets are
//! counted from `/proc/self/fd` right after init (before any one-sided operation could open a
//! connection lazily), the barrier is the mean of BARRIERS (default 20) `barrier_all` calls
//! after one warm-up call (and before an untimed one, which keeps the PEs that woke first from
//! delaying the clocks of the others), and the resident memory is read after them. Then every PE puts one
//! word to its successor on the ring and checks what its predecessor put (the PEs that
//! communicate go through the real code path).

use std::time::Instant;

use crate::check::{Context, Ctx, Fail, R};
use crate::ensure;

/// What socket `fd` is, when it is one: a TCP socket (IPv4 or IPv6, stream) or a Unix socket.
/// Asked of the socket itself (its address family and type), so the cost does not grow with the
/// host's sockets: reading `/proc/net/tcp` and `/proc/net/unix` instead (every socket of the
/// host, in every PE) made this count most of a 256-PE job's time.
fn socket_kind(fd: i32) -> Option<Sock> {
    use nix::sys::socket::{
        getsockname, getsockopt, sockopt, AddressFamily, SockType, SockaddrLike, SockaddrStorage,
    };
    let family = getsockname::<SockaddrStorage>(fd).ok()?.family()?;
    // SAFETY: `fd` is one of this process's descriptors listed in /proc/self/fd a moment ago;
    // the borrow lasts for this one call, and a descriptor closed meanwhile makes it fail.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let stream = getsockopt(&fd, sockopt::SockType).ok()? == SockType::Stream;
    match family {
        AddressFamily::Inet | AddressFamily::Inet6 if stream => Some(Sock::Tcp),
        AddressFamily::Unix => Some(Sock::Unix),
        _ => None,
    }
}

/// The sockets [`count_fds`] tells apart.
enum Sock {
    Tcp,
    Unix,
}

/// (all fds, sockets, TCP sockets, Unix sockets) open in this process.
pub fn count_fds() -> R<(usize, usize, usize, usize)> {
    let dir =
        std::fs::read_dir("/proc/self/fd").map_err(|e| Fail(format!("/proc/self/fd: {e}")))?;
    let (mut fds, mut sockets, mut n_tcp, mut n_unix) = (0, 0, 0, 0);
    for e in dir.flatten() {
        fds += 1;
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("socket:[") {
            continue;
        }
        sockets += 1;
        let fd = e.file_name().to_string_lossy().parse::<i32>().ok();
        match fd.and_then(socket_kind) {
            Some(Sock::Tcp) => n_tcp += 1,
            Some(Sock::Unix) => n_unix += 1,
            None => {}
        }
    }
    Ok((fds, sockets, n_tcp, n_unix))
}

/// Resident set size of this process in KiB.
pub fn rss_kib() -> R<u64> {
    let s = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| Fail(format!("/proc/self/status: {e}")))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Fail("no VmRSS line in /proc/self/status".into()))
}

/// How long this process has existed, from `/proc/self/stat` (start time, in clock ticks after
/// boot) and `/proc/uptime`: 10 ms resolution.
pub fn process_age() -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let start: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let up: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let age = up - start / hz.max(1) as f64;
    (age >= 0.0).then(|| std::time::Duration::from_secs_f64(age))
}

/// Runs the measurement.
pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    // Right after init: the process's age covers its start, the bootstrap and init.
    let age = process_age().unwrap_or_default();
    let (fds, sockets, tcp, unix) = count_fds()?;
    let at_init = w.comm_counters();
    let init = w.init_time();
    let rounds: u32 = match c.args.first() {
        Some(a) => a
            .parse()
            .map_err(|_| Fail(format!("scale: BARRIERS {a:?} is not a number")))?,
        None => 20,
    };
    c.barrier("init (warm-up)")?;
    let t = Instant::now();
    for _ in 0..rounds {
        c.barrier("a timed barrier")?;
    }
    let per = t.elapsed() / rounds.max(1);
    // Nothing else before every PE has read its clock: a PE that woke from the last timed
    // barrier and went on to count its descriptors kept the CPU from the PEs still to wake (up
    // to 128 to a core), and their clocks then counted that too (the PEs' means at 256 PEs
    // on 2 cores spread evenly from 1.1 to 3.2 ms, for barriers that took 1.1 ms).
    c.barrier("the timed barriers")?;
    let after = w.comm_counters();
    let (_, _, tcp_b, _) = count_fds()?;
    let rss = rss_kib()?;
    let cell = w.calloc::<u64>(1).ctx("calloc")?;
    w.p(cell.at(0), c.me as u64 + 1, c.succ())
        .ctx("p to the successor")?;
    c.barrier("the ring put")?;
    let ring = w.comm_counters();
    let got = cell.read(0).ctx("read")?;
    ensure!(
        got == c.pred() as u64 + 1,
        "the predecessor's put: got {got}, expected {}",
        c.pred() + 1
    );
    crate::check::say(
        false,
        &format!(
            "SCALE pe={} n={} init_ms={:.3} up_ms={:.0} barrier_us={:.1} rss_kib={rss} sockets={sockets} tcp={tcp} unix={unix} fds={fds} xout={} xin={} xout_b={} xin_b={} tcp_b={tcp_b} hmap={} cmap={} cmap_b={} hmap_r={} at_s={:.3}",
            c.me,
            c.n,
            init.as_secs_f64() * 1e3,
            age.as_secs_f64() * 1e3,
            per.as_secs_f64() * 1e6,
            at_init.tcp_opened,
            at_init.tcp_accepted,
            after.tcp_opened,
            after.tcp_accepted,
            at_init.heap_peers_mapped,
            at_init.ctrl_peers_mapped,
            after.ctrl_peers_mapped,
            ring.heap_peers_mapped,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        ),
    );
    Ok(())
}
