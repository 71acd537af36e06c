//! Hardening of the TCP transport (run with `RSHMEM_DISABLE_P2P=1` on the CPU backend, so every
//! other PE is reached over TCP):
//!
//! * `tcp-stop` (2+ PEs, `RSHMEM_TIMEOUT=5`): PE 1 stops itself with SIGSTOP; PE 0 keeps
//!   putting 1 MiB to it (over TCP, or over UCX in `tests/tests/ucx.rs`). The put that can no longer move must fail with `Timeout` naming PE 1
//!   and `putmem` within about `RSHMEM_TIMEOUT`; PE 0 prints it and exits 3 (the job cannot go
//!   on), so that the launcher stops the others (PE 1 stays stopped until it is killed).
//! * `tcp-idle` (`RSHMEM_TIMEOUT=20`): every TCP listener the PE opens gets [`IDLE`] connections
//!   that never say anything and [`HOSTILE`] that send garbage, all of them queued *before*
//!   the listener's address is even advertised, so they reach the accept loop ahead of every
//!   real peer (see [`listen`]). Init must still complete promptly (the test bounds the job's
//!   time), and the listener must have been bound to loopback, the address the one-host job
//!   advertises, not to every interface. Then a ring of puts checks the mesh works. The
//!   bootstrap's link listener (each PE's, for its links to PEs `me ± 2^k`) is crowded the same
//!   way and must not delay init either. After init the transport's listener must still be
//!   open (PEs connect at first use) and refuse a connection that sends garbage, without an
//!   answer, while a silent one stays connected through the ring of puts.
//! * `tcp-lazy` (8+ PEs): connections are made at first use (see [`lazy`]).
//!
//! What a target refuses (requests outside its live allocations or the runtime's own flag
//! accesses) cannot be produced through the host API, which checks ranges on the issuing side
//! and the symmetry of every heap call; it is tested with crafted requests by the unit tests of
//! the runtime's `transport::tcp`.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rshmem::Error;

use crate::check::{Context, Ctx, Fail, R};
use crate::{ensure, note};

/// Idle connections opened to each listener.
pub const IDLE: usize = 10;
/// Connections that send garbage instead of the job token.
pub const HOSTILE: usize = 2;

static CROWD: AtomicBool = AtomicBool::new(false);
static LISTENED: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());
static HELD: Mutex<Vec<TcpStream>> = Mutex::new(Vec::new());

/// Turns on the crowding of TCP listeners by [`listen`] (called before init by `tcp-idle`).
pub fn crowd_listeners() {
    CROWD.store(true, Ordering::Release);
}

/// This program's `listen(2)`: every `listen` call of the process (the Rust standard library's
/// `TcpListener::bind` included) resolves to this definition in the executable before the C
/// library's. It makes the system call and, once [`crowd_listeners`] was called, connects
/// [`IDLE`] silent and [`HOSTILE`] garbage-sending clients to every new TCP listener before
/// returning: they are in the listener's queue before its owner can advertise the address.
#[no_mangle]
pub extern "C" fn listen(fd: libc::c_int, backlog: libc::c_int) -> libc::c_int {
    // SAFETY: the listen system call with the caller's own arguments, as the C library makes it.
    let r = unsafe { libc::syscall(libc::SYS_listen, fd, backlog) } as libc::c_int;
    if r == 0 && CROWD.load(Ordering::Acquire) {
        crowd(fd);
    }
    r
}

fn crowd(fd: libc::c_int) {
    use std::os::fd::FromRawFd;
    // SAFETY: `fd` is the caller's open socket; ManuallyDrop keeps this view from closing it.
    let view = std::mem::ManuallyDrop::new(unsafe { std::net::TcpListener::from_raw_fd(fd) });
    // Fails for the node's Unix sockets: only TCP listeners are crowded.
    let Ok(addr) = view.local_addr() else {
        return;
    };
    if let Ok(mut l) = LISTENED.lock() {
        l.push(addr);
    }
    let mut held = Vec::new();
    for i in 0..IDLE + HOSTILE {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            if i >= IDLE {
                let _ = s.write_all(&[0x5a; 64]);
            }
            held.push(s);
        }
    }
    if let Ok(mut h) = HELD.lock() {
        h.extend(held);
    }
}

/// `tcp-idle`.
pub fn idle(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let listened = LISTENED.lock().map(|l| l.clone()).unwrap_or_default();
    let crowded = HELD.lock().map(|h| h.len()).unwrap_or(0);
    if n > 1 {
        // The bootstrap's link listener (every PE links to PEs me ± 2^k), then the transport's.
        ensure!(
            listened.len() == 2,
            "expected two TCP listeners during init (the bootstrap's links, the transport's), saw {listened:?}"
        );
        ensure!(
            crowded == 2 * (IDLE + HOSTILE),
            "only {crowded} of {} crowding connections were made",
            2 * (IDLE + HOSTILE)
        );
    }
    for a in &listened {
        ensure!(
            a.ip().is_loopback(),
            "a TCP listener of init was bound to {a}: a one-host job must bind loopback, not every interface"
        );
    }
    note!(
        "PE {me}: init took {:?} with {crowded} crowding connections on {listened:?}",
        w.init_time()
    );
    // After init the transport's listener stays open (connections are made at first use):
    // a stranger that reaches it now is refused without an answer, and one that says nothing
    // stays connected through the ring of puts below without delaying it.
    let mut silent = None;
    if n > 1 {
        let at = listened[1];
        let mut bad = TcpStream::connect_timeout(&at, Duration::from_secs(2)).map_err(|e| {
            Fail(format!(
                "the TCP transport's listener {at} must stay open after init: {e}"
            ))
        })?;
        bad.write_all(&[0x5a; 64])
            .map_err(|e| Fail(format!("writing garbage to {at}: {e}")))?;
        bad.set_read_timeout(Some(Duration::from_secs(10))).ok();
        let mut b = [0u8; 8];
        let got = std::io::Read::read(&mut bad, &mut b).unwrap_or(0);
        ensure!(
            got == 0,
            "a connection with garbage instead of the job token was answered: {:?}",
            &b[..got]
        );
        silent = TcpStream::connect_timeout(&at, Duration::from_secs(2)).ok();
        ensure!(
            silent.is_some(),
            "a second connection to {at} after init failed"
        );
    }
    let buf = w.calloc::<u64>(1).ctx("calloc")?;
    c.barrier("calloc")?;
    let right = (me + 1) % n;
    w.p(buf.as_ptr(), 1000 + me as u64, right).ctx("p")?;
    c.barrier("p")?;
    let got = buf.read(0).unwrap_or(0);
    let want = 1000 + ((me + n - 1) % n) as u64;
    ensure!(got == want, "ring value: expected {want}, got {got}");
    w.free(buf).ctx("free")?;
    drop(silent);
    Ok(())
}

/// `tcp-stop`.
pub fn stop(c: &Ctx<'_>) -> R {
    let (w, me) = (c.w, c.me);
    let t = w
        .config()
        .timeout
        .ok_or_else(|| Fail("run tcp-stop with RSHMEM_TIMEOUT set (it is disabled)".into()))?;
    let n = 1 << 20;
    let buf = w.malloc_bytes(n).ctx("malloc")?;
    c.barrier("malloc")?;
    if me == 1 {
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP)
            .map_err(|e| Fail(format!("raise(SIGSTOP): {e}")))?;
        return Err(Fail(
            "PE 1 was continued after SIGSTOP; nobody should".into(),
        ));
    }
    if me != 0 {
        // Waits on PE 1 too; the launcher stops this PE once PE 0 gives up.
        let r = w.barrier_all();
        std::thread::sleep(Duration::from_secs(60));
        return Err(Fail(format!(
            "not stopped 60 s after barrier_all returned {r:?}"
        )));
    }
    let src = vec![0x5au8; n];
    let t0 = Instant::now();
    let mut puts = 0u64;
    let e = loop {
        match w.putmem(buf, &src, 1) {
            Ok(()) => puts += 1,
            Err(e) => break e,
        }
        ensure!(
            t0.elapsed() < 4 * t + Duration::from_secs(30),
            "{puts} puts of 1 MiB to the stopped PE 1 went through in {:?}",
            t0.elapsed()
        );
    };
    let el = t0.elapsed();
    ensure!(
        matches!(
            e,
            Error::Timeout {
                pe: Some(1),
                me: 0,
                ..
            }
        ),
        "putmem to the stopped PE 1: expected Timeout naming PE 1, got {e:?}"
    );
    let msg = e.to_string();
    ensure!(
        msg.starts_with("putmem on PE 0")
            && (msg.contains("PE 1 to complete a put of 1048576 bytes over TCP")
                || msg.contains("PE 1 to complete a put over UCX")),
        "the error must name putmem, PE 1 and the put: {msg}"
    );
    ensure!(
        el < t + Duration::from_secs(3),
        "putmem failed only after {el:?} (RSHMEM_TIMEOUT is {t:?})"
    );
    note!("PE 0: putmem to the stopped PE 1 failed as expected after {el:?} ({puts} puts went through): {e}");
    // The job cannot go on; the launcher stops the others.
    std::process::exit(3);
}

/// `tcp-lazy` (8+ PEs, every other PE over TCP): connections are opened at first use. After
/// init a PE holds outgoing connections only to its barrier partners (`me ± 2^k`);
/// then [`THREADS`] threads put at once to PE `me + 3`, which is none of them (a fresh peer:
/// they race to open the one connection), each its own words, and quiet; after a barrier
/// every PE checks the words PE `me − 3` put, and that exactly one connection was added.
pub fn lazy(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    ensure!(n >= 8, "tcp-lazy needs 8 PEs or more");
    // The barrier partners both ways, PEs me ± 2^k.
    let mut distinct: Vec<usize> = std::iter::successors(Some(1usize), |d| Some(d * 2))
        .take_while(|&d| d < n)
        .flat_map(|d| [(me + d) % n, (me + n - d) % n])
        .filter(|&p| p != me)
        .collect();
    distinct.sort_unstable();
    distinct.dedup();
    let partners = distinct.clone();
    let at_init = w.comm_counters();
    ensure!(
        at_init.tcp_opened == distinct.len(),
        "after init PE {me} holds {} outgoing TCP transport connections; expected {} (its barrier partners {distinct:?})",
        at_init.tcp_opened,
        distinct.len()
    );
    ensure!(
        at_init.tcp_accepted <= distinct.len(),
        "after init PE {me} accepted {} TCP transport connections, more than its {} barrier partners",
        at_init.tcp_accepted,
        distinct.len()
    );
    let far = (me + 3) % n;
    ensure!(!partners.contains(&far), "PE {far} is a barrier partner");
    let buf = w.calloc::<u64>(THREADS * 64).ctx("calloc")?;
    c.barrier("calloc")?;
    let before = w.comm_counters().tcp_opened;
    let start = std::sync::Barrier::new(THREADS);
    std::thread::scope(|s| -> R {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (start, buf) = (&start, &buf);
                s.spawn(move || -> R {
                    let mine: Vec<u64> = (0..64)
                        .map(|i| ((me as u64) << 32) | ((t as u64) << 16) | i)
                        .collect();
                    start.wait();
                    w.put(buf.at(t * 64), &mine, far)
                        .ctx("put to a fresh peer")?;
                    w.quiet().ctx("quiet")
                })
            })
            .collect();
        for h in hs {
            h.join()
                .map_err(|_| Fail("a putting thread panicked".into()))??;
        }
        Ok(())
    })?;
    let added = w.comm_counters().tcp_opened - before;
    ensure!(
        added == 1,
        "{THREADS} threads putting to the fresh PE {far} at once opened {added} connections; expected 1"
    );
    c.barrier("the puts")?;
    let from = (me + n - 3) % n;
    for t in 0..THREADS {
        for i in 0..64 {
            let want = ((from as u64) << 32) | ((t as u64) << 16) | i as u64;
            let got = buf.read(t * 64 + i).ctx("read")?;
            ensure!(
                got == want,
                "word {i} of thread {t} of PE {from}: got {got:#x}, expected {want:#x}"
            );
        }
    }
    w.free(buf).ctx("free")?;
    Ok(())
}

/// Threads of `tcp-lazy` that put to the fresh peer at once.
pub const THREADS: usize = 4;
