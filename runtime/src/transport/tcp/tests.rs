//! Unit tests of the TCP transport's target-side checks, time bounds and set-up.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rshmem_bootstrap::SingletonBootstrap;

use super::service::{Region, Service};
use super::wire::{self, Reject, Rejection, REJ, REP};
use super::*;
use crate::heap::internal::{
    BARRIER_FLAGS, CHECK_WORDS, FLAG_STRIDE, PROXY_BARRIER_FLAGS, TEAM_AREA_START,
};
use crate::heap::{Backing, Heap};
use crate::node::{Liveness, Node};

/// A one-PE node with a user heap (one 4 KiB allocation) and a control heap.
struct Fixture {
    boot: SingletonBootstrap,
    _node: Node,
    live: Arc<Liveness>,
    heap: Arc<Heap>,
    ctrl: Heap,
    /// Offset of the allocation in the user heap.
    obj: usize,
    /// Symmetric regions: index 0 registered without memory, index 1 is `region`.
    regions: Arc<crate::transport::RegionTargets>,
    region: Box<[u64; 512]>,
    /// The doorbell the service rings.
    bell: Arc<crate::wait::Doorbell>,
}

fn fixture() -> Fixture {
    let boot = SingletonBootstrap::new();
    let node = Node::establish(&boot, "tcp-unit-test", Some(Duration::from_secs(10))).unwrap();
    let live = Arc::new(Liveness::new(1));
    let ctrl = Heap::create(&boot, &node, &live, Backing::Host, 0, 0, "ctrl", true).unwrap();
    let heap = Arc::new(
        Heap::create(
            &boot,
            &node,
            &live,
            Backing::Host,
            64 << 20,
            4 << 20,
            "heap",
            true,
        )
        .unwrap(),
    );
    let obj = heap.alloc(&node, &live, "malloc", 4096, 64).unwrap();
    let region = Box::new([0u64; 512]);
    let regions = Arc::new(crate::transport::RegionTargets::default());
    assert_eq!(regions.add(None), 0);
    assert_eq!(regions.add(Some((region.as_ptr() as usize, 4096))), 1);
    Fixture {
        boot,
        _node: node,
        live,
        heap,
        ctrl,
        obj,
        regions,
        region,
        bell: Arc::default(),
    }
}

/// A service for requests from PE `from` of a job of `n` PEs in which this PE is PE `me`,
/// over a fresh loopback connection; the issuing end.
fn serve(
    f: &Fixture,
    from: usize,
    me: usize,
    n: usize,
    timeout: Option<Duration>,
) -> (TcpStream, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    let svc = Service {
        from,
        me,
        n,
        regions: [
            Region::user(&f.heap, None),
            Region::ctrl(&f.ctrl),
            Region::regions(&f.regions),
        ],
        spin: Arc::new(AtomicU64::new(0)),
        bell: f.bell.clone(),
        stop: Arc::new(AtomicBool::new(false)),
        live: f.live.clone(),
        timeout,
    };
    let t = std::thread::spawn(move || svc.run(s));
    (c, t)
}

#[allow(clippy::too_many_arguments)]
fn req(
    op: u8,
    heap: HeapId,
    size: u8,
    amo: u8,
    call: u16,
    off: usize,
    len: usize,
    value: u64,
) -> [u8; wire::REQ] {
    wire::req(
        op, heap as u8, size, amo, call, off as u64, len as u64, value, 0,
    )
}

/// Sends a put of `data` to offset `off` of `heap`, issued by call number `call`.
fn send_put(c: &mut TcpStream, heap: HeapId, call: u16, off: usize, data: &[u8]) {
    c.write_all(&req(wire::OP_PUT, heap, 0, 0, call, off, data.len(), 0))
        .unwrap();
    c.write_all(data).unwrap();
}

/// Gets 16 bytes at offset `off` of `heap`; the get (`what`) must be answered without a
/// refusal.
fn get16(c: &mut TcpStream, heap: HeapId, off: usize, what: &str) -> [u8; 16] {
    c.write_all(&req(wire::OP_GET, heap, 0, 0, 0, off, 16, 0))
        .unwrap();
    assert_eq!(reply(c).0, 0, "{what}");
    let mut got = [0u8; 16];
    sock::recv_exact(c, &mut got, Duration::ZERO, None).unwrap();
    got
}

fn reply(c: &TcpStream) -> (u32, u64) {
    let mut r = [0u8; REP];
    sock::recv_exact(c, &mut r, Duration::ZERO, None).unwrap();
    wire::decode_rep(&r)
}

fn word(base: usize, off: usize) -> u64 {
    // SAFETY: the tests only read mapped words of the fixture's heaps.
    unsafe { std::ptr::read_volatile((base + off) as *const u64) }
}

/// Every write the service applies rings the PE's doorbell (a napping wait wakes on it); a
/// refused write and a get do not.
#[test]
fn service_rings_the_doorbell_after_each_write() {
    let f = fixture();
    let (mut c, t) = serve(&f, 0, 0, 1, Some(Duration::from_secs(10)));
    let flush = |c: &mut TcpStream| {
        c.write_all(&req(wire::OP_FLUSH, HeapId::User, 0, 0, 0, 0, 0, 0))
            .unwrap();
        reply(c)
    };
    let rung = f.bell.seq();
    send_put(&mut c, HeapId::User, 1, f.obj, &[7u8; 64]);
    assert_eq!(flush(&mut c), (0, 0));
    assert_eq!(f.bell.seq(), rung.wrapping_add(1), "a put rings once");
    c.write_all(&req(
        wire::OP_STORE,
        HeapId::User,
        8,
        0,
        2,
        f.obj + 64,
        8,
        5,
    ))
    .unwrap();
    c.write_all(&req(
        wire::OP_AMO_NF,
        HeapId::User,
        8,
        crate::wire::AmoOp::FetchAdd.code(),
        3,
        f.obj + 72,
        8,
        1,
    ))
    .unwrap();
    assert_eq!(flush(&mut c), (0, 0));
    assert_eq!(
        f.bell.seq(),
        rung.wrapping_add(3),
        "a store and an atomic ring once each"
    );
    let _ = get16(&mut c, HeapId::User, f.obj, "a get");
    send_put(&mut c, HeapId::User, 4, 1 << 40, &[1u8; 8]);
    assert_eq!(
        flush(&mut c).1,
        1,
        "the put far outside the heap is refused"
    );
    let mut j = [0u8; REJ];
    sock::recv_exact(&c, &mut j, Duration::ZERO, None).unwrap();
    assert_eq!(
        f.bell.seq(),
        rung.wrapping_add(3),
        "a get and a refused put do not ring"
    );
    drop(c);
    t.join().unwrap();
    assert_eq!(
        f.bell.seq(),
        rung.wrapping_add(4),
        "the connection's end rings"
    );
}

/// Requests to the symmetric regions reach the ranges this PE registered and nothing else: a
/// region registered without memory, a range running past a region's end, an index never
/// registered are refused; puts, gets and atomics inside one are applied.
#[test]
fn service_reaches_registered_regions_only() {
    let f = fixture();
    let (mut c, t) = serve(&f, 1, 0, 2, Some(Duration::from_secs(10)));
    let at = |index: usize, off: usize| crate::transport::RemoteAddr::region(0, index, off).off;
    let put =
        |c: &mut TcpStream, off: usize, data: &[u8]| send_put(c, HeapId::Region, 3, off, data);
    put(&mut c, at(1, 8), &[0x22; 8]); // good
    put(&mut c, at(0, 8), &[0xAA; 8]); // registered without memory
    put(&mut c, at(1, 4090), &[0xAA; 8]); // runs past the region
    put(&mut c, at(2, 0), &[0xAA; 8]); // never registered
    c.write_all(&req(wire::OP_AMO, HeapId::Region, 8, 4, 0, at(1, 16), 8, 3))
        .unwrap();
    assert_eq!(reply(&c), (0, 0), "fetch_add in a region");
    c.write_all(&req(wire::OP_AMO, HeapId::Region, 8, 4, 0, at(1, 4), 8, 3))
        .unwrap();
    assert_eq!(reply(&c).0, Reject::Misaligned as u32, "misaligned atomic");
    let got = get16(&mut c, HeapId::Region, at(1, 8), "get from a region");
    assert_eq!(&got[..8], &[0x22; 8]);
    assert_eq!(u64::from_le_bytes(got[8..].try_into().unwrap()), 3);
    c.write_all(&req(
        wire::OP_GET,
        HeapId::Region,
        0,
        0,
        0,
        at(1, 4088),
        16,
        0,
    ))
    .unwrap();
    assert_eq!(reply(&c).0, Reject::Outside as u32, "get past the region");
    c.write_all(&req(wire::OP_FLUSH, HeapId::User, 0, 0, 0, 0, 0, 0))
        .unwrap();
    assert_eq!(reply(&c), (0, 3), "three puts refused");
    let mut j = [0u8; REJ];
    sock::recv_exact(&c, &mut j, Duration::ZERO, None).unwrap();
    let j = Rejection::decode(&j);
    assert_eq!(
        (j.heap, j.why, j.off),
        (HeapId::Region as u8, Reject::Outside, at(0, 8) as u64)
    );
    drop(c);
    t.join().unwrap();
    assert_eq!(f.region[1], u64::from_le_bytes([0x22; 8]));
    assert_eq!(f.region[2], 3);
    assert!(
        f.region[3..].iter().all(|&w| w == 0) && f.region[0] == 0,
        "a refused request wrote the region"
    );
}

/// A service thread applies what lies inside a live allocation and refuses (never applies)
/// the rest: the runtime's internal area, unallocated and past-the-allocation ranges,
/// misaligned atomics, unknown heaps; on the control heap everything but the runtime's own
/// flag accesses. The next flush names the first refused request's call and range.
#[test]
fn service_checks_every_request() {
    let f = fixture();
    let user = f.heap.my_base();
    let ctrl = f.ctrl.my_base();
    let obj = f.obj;
    let past = obj + 8192; // mapped, not allocated
    assert!(past + 64 < f.heap.mapped());
    // This PE is PE 0 of 4; the connection is PE 3's (it raises PE 0's round-0 barrier flag).
    let (mut c, t) = serve(&f, 3, 0, 4, Some(Duration::from_secs(10)));
    let put = send_put;
    put(&mut c, HeapId::User, 7, 8, &[0xAA; 8]); // the user heap's internal area
    put(&mut c, HeapId::User, 8, past, &[0xAA; 8]); // mapped but unallocated
    put(&mut c, HeapId::User, 8, obj + 4090, &[0xAA; 8]); // runs past the allocation
    put(&mut c, HeapId::Ctrl, 8, TEAM_AREA_START, &[0xAA; 8]); // a put into the control heap
    put(&mut c, HeapId::User, 8, obj, &[0x11; 8]); // good
    let store = |c: &mut TcpStream, off: usize, v: u64| {
        c.write_all(&req(wire::OP_STORE, HeapId::Ctrl, 8, 0, 9, off, 8, v))
            .unwrap();
    };
    store(&mut c, BARRIER_FLAGS + FLAG_STRIDE, 5); // round 1: PE 2's flag to raise, not PE 3's
    store(&mut c, BARRIER_FLAGS + 8, 5); // not a flag slot
    store(&mut c, BARRIER_FLAGS, 6); // round 0 from PE 3: good
    store(&mut c, CHECK_WORDS + 24, 8); // round 0's last check word: good
    store(&mut c, CHECK_WORDS + 32, 9); // past round 0's check words
    store(&mut c, CHECK_WORDS + FLAG_STRIDE, 9); // round 1's check word: PE 2's to write
    store(&mut c, TEAM_AREA_START + 16, 7); // team flag: good
    store(&mut c, PROXY_BARRIER_FLAGS, 11); // the proxy barrier's round 0 from PE 3: good
    store(&mut c, PROXY_BARRIER_FLAGS + FLAG_STRIDE, 12); // its round 1: PE 2's to raise
    c.write_all(&req(wire::OP_GET, HeapId::User, 0, 0, 0, past, 8, 0))
        .unwrap();
    assert_eq!(reply(&c).0, Reject::Unallocated as u32, "unallocated get");
    c.write_all(&req(
        wire::OP_GET,
        HeapId::User,
        0,
        0,
        0,
        usize::MAX - 4,
        8,
        0,
    ))
    .unwrap();
    assert_eq!(reply(&c).0, Reject::Outside as u32, "overflowing get");
    c.write_all(&req(wire::OP_AMO, HeapId::User, 8, 4, 0, obj + 4, 8, 1))
        .unwrap();
    assert_eq!(reply(&c).0, Reject::Misaligned as u32, "misaligned atomic");
    let mut h = req(wire::OP_AMO, HeapId::User, 8, 4, 0, obj + 8, 8, 1);
    h[1] = 9;
    c.write_all(&h).unwrap();
    assert_eq!(reply(&c).0, Reject::Malformed as u32, "unknown heap");
    c.write_all(&req(
        wire::OP_AMO,
        HeapId::Ctrl,
        8,
        4,
        0,
        TEAM_AREA_START + 16,
        8,
        1,
    ))
    .unwrap();
    assert_eq!(
        reply(&c).0,
        Reject::Control as u32,
        "fetch_add on the control heap"
    );
    c.write_all(&req(
        wire::OP_AMO,
        HeapId::Ctrl,
        8,
        0,
        0,
        TEAM_AREA_START + 16,
        8,
        0,
    ))
    .unwrap();
    assert_eq!(reply(&c), (0, 7), "reading a team word");
    c.write_all(&req(wire::OP_AMO, HeapId::User, 8, 4, 0, obj + 8, 8, 5))
        .unwrap();
    assert_eq!(reply(&c), (0, 0), "good fetch_add");
    let got = get16(&mut c, HeapId::User, obj, "good get");
    assert_eq!(&got[..8], &[0x11; 8]);
    assert_eq!(u64::from_le_bytes(got[8..].try_into().unwrap()), 5);
    c.write_all(&req(wire::OP_AMO_NF, HeapId::User, 8, 4, 0, past, 8, 1))
        .unwrap(); // unallocated
    c.write_all(&req(
        wire::OP_AMO_NF,
        HeapId::User,
        8,
        4,
        0,
        obj + 16,
        8,
        10,
    ))
    .unwrap(); // good
    c.write_all(&req(wire::OP_FLUSH, HeapId::User, 0, 0, 0, 0, 0, 0))
        .unwrap();
    assert_eq!(reply(&c), (0, 10), "ten puts, stores and atomics refused");
    let mut j = [0u8; REJ];
    sock::recv_exact(&c, &mut j, Duration::ZERO, None).unwrap();
    assert_eq!(
        Rejection::decode(&j),
        Rejection {
            call: 7,
            op: wire::OP_PUT,
            heap: HeapId::User as u8,
            why: Reject::Outside,
            off: 8,
            len: 8
        },
        "the first refused request"
    );
    c.write_all(&req(wire::OP_FLUSH, HeapId::User, 0, 0, 0, 0, 0, 0))
        .unwrap();
    assert_eq!(reply(&c), (0, 0), "the count restarts after a flush");
    drop(c);
    t.join().unwrap();
    assert_eq!(word(user, 8), 0, "the internal area was written");
    assert_eq!(word(user, past), 0, "unallocated memory was written");
    assert_eq!(word(user, obj + 4096), 0, "past the allocation was written");
    assert_eq!(
        word(ctrl, TEAM_AREA_START),
        0,
        "a put reached the control heap"
    );
    assert_eq!(
        word(ctrl, BARRIER_FLAGS + FLAG_STRIDE),
        0,
        "a flag raised by the wrong PE"
    );
    assert_eq!(
        word(ctrl, BARRIER_FLAGS + 8),
        0,
        "a store between flag slots"
    );
    assert_eq!(word(ctrl, BARRIER_FLAGS), 6, "the good barrier flag");
    assert_eq!(
        word(ctrl, PROXY_BARRIER_FLAGS),
        11,
        "the proxy barrier's flag (device barriers through the proxy)"
    );
    assert_eq!(
        word(ctrl, PROXY_BARRIER_FLAGS + FLAG_STRIDE),
        0,
        "a proxy barrier flag raised by the wrong PE"
    );
    assert_eq!(word(ctrl, CHECK_WORDS + 24), 8, "the good check word");
    assert_eq!(
        word(ctrl, CHECK_WORDS + 32),
        0,
        "a store past the check words"
    );
    assert_eq!(
        word(ctrl, CHECK_WORDS + FLAG_STRIDE),
        0,
        "a check word of the wrong PE"
    );
    assert_eq!(word(ctrl, TEAM_AREA_START + 16), 7, "the good team flag");
    assert_eq!(word(user, obj + 16), 10, "the good non-fetching atomic");
    // A closed connection outside finalize reports its PE.
    assert_eq!(f.live.failed().map(|(p, _)| p), Some(3));
}

/// A put whose payload stops arriving halfway ends the connection after the timeout (and
/// reports the PE lost) instead of stalling it forever.
#[test]
fn truncated_frame_ends_the_connection() {
    let f = fixture();
    let (mut c, t) = serve(&f, 1, 0, 2, Some(Duration::from_millis(500)));
    c.write_all(&req(wire::OP_PUT, HeapId::User, 0, 0, 0, f.obj, 100, 0))
        .unwrap();
    c.write_all(&[1u8; 10]).unwrap();
    let t0 = Instant::now();
    while f.live.failed().is_none() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (pe, why) = f
        .live
        .failed()
        .expect("the stalled connection was never given up");
    assert_eq!(pe, 1);
    assert!(why.contains("halfway"), "{why}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    t.join().unwrap();
    assert_eq!(
        word(f.heap.my_base(), f.obj),
        0,
        "a truncated put was applied"
    );
    drop(c);
}

/// A connection that is merely idle between requests stays up past the timeout.
#[test]
fn idle_connection_stays_up() {
    let f = fixture();
    let (mut c, t) = serve(&f, 1, 0, 2, Some(Duration::from_millis(200)));
    std::thread::sleep(Duration::from_millis(700));
    c.write_all(&req(wire::OP_AMO, HeapId::User, 8, 4, 0, f.obj, 8, 3))
        .unwrap();
    assert_eq!(reply(&c), (0, 0));
    assert!(f.live.failed().is_none());
    drop(c);
    t.join().unwrap();
}

/// PE 0's connection to PE `pe` at `sa` with timeout `t`, which must fail with an error naming
/// the call and the address: that error, and how long the attempt took.
fn connect_fails(call: &'static str, pe: usize, sa: SocketAddr, t: Duration) -> (Error, Duration) {
    let abort = AtomicBool::new(false);
    let t0 = Instant::now();
    let e = connect_peer(
        call,
        0,
        pe,
        sa,
        &[0; 16],
        Some(Instant::now() + t),
        Some(t),
        &abort,
    )
    .unwrap_err();
    let took = t0.elapsed();
    let msg = e.to_string();
    assert!(msg.contains(call), "{msg}");
    assert!(msg.contains(&sa.to_string()), "{msg}");
    (e, took)
}

/// A refused connection (the peer's listener is closed: it left) is `PeerLost` naming the PE
/// and its address at once, not a wait until the deadline.
#[test]
fn refused_connection_is_peer_lost_at_once() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let sa = (Ipv4Addr::LOCALHOST, port).into();
    let (e, took) = connect_fails("putmem", 1, sa, Duration::from_secs(30));
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(matches!(e, Error::PeerLost { pe: 1, .. }), "{e}");
    assert!(e.to_string().contains("refused"), "{e}");
}

/// A peer whose listener takes the connection but never answers the hello (stopped, or not
/// rshmem) is a timeout naming it, at the deadline (not at once, nor long after it).
#[test]
fn silent_listener_is_a_timeout() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let sa = l.local_addr().unwrap();
    let t = Duration::from_millis(400);
    let (e, took) = connect_fails("getmem", 3, sa, t);
    assert!(took >= t / 2 && took < Duration::from_secs(3), "{took:?}");
    assert!(matches!(e, Error::Timeout { pe: Some(3), .. }), "{e}");
    drop(l);
}

/// The transport of a job of one PE over a fixture.
fn one_pe_net(f: &Fixture, timeout: Duration) -> Net {
    Net::establish(
        &f.boot,
        &[None],
        &[9; 16],
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(timeout),
        f.live.clone(),
        [
            Region::user(&f.heap, None),
            Region::ctrl(&f.ctrl),
            Region::regions(&f.regions),
        ],
    )
    .unwrap()
}

/// After init the listener stays open (connections are made at first use), and what reaches
/// it without the job's token is refused and logged without disturbing the PE: a wrong token,
/// a valid token claiming a PE that does not reach this one over TCP, a connection that never
/// says anything (closed at its hello limit). Nothing is served, no peer is reported lost, and
/// dropping the transport ends its accept loop promptly.
#[test]
fn open_listener_refuses_strangers_after_init() {
    let f = fixture();
    let net = one_pe_net(&f, Duration::from_millis(600));
    let at = net.listened();
    assert_eq!(net.connections(), (0, 0));
    let closed = |mut s: TcpStream, what: &str| {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 8];
        let t0 = Instant::now();
        let got = std::io::Read::read(&mut s, &mut b).unwrap_or(0);
        assert_eq!(got, 0, "{what}: answered {:?}", &b[..got]);
        t0.elapsed()
    };
    let mut wrong = TcpStream::connect(at).expect("the listener must stay open after init");
    wrong
        .write_all(&wire::hello(&[8; 16], 1, wire::VERSION))
        .unwrap();
    closed(wrong, "a wrong token");
    let mut me_again = TcpStream::connect(at).unwrap();
    me_again
        .write_all(&wire::hello(&[9; 16], 0, wire::VERSION))
        .unwrap();
    closed(me_again, "the right token claiming PE 0 (this PE)");
    let silent = TcpStream::connect(at).unwrap();
    let waited = closed(silent, "a silent connection");
    assert!(
        waited < Duration::from_secs(3),
        "a silent connection must be closed at the hello limit (RSHMEM_TIMEOUT here), took {waited:?}"
    );
    assert_eq!(net.connections(), (0, 0));
    assert!(f.live.failed().is_none());
    let t0 = Instant::now();
    drop(net);
    assert!(
        t0.elapsed() < Duration::from_millis(300),
        "dropping the transport took {:?}",
        t0.elapsed()
    );
    assert!(
        TcpStream::connect(at).is_err(),
        "the listener must close with the transport"
    );
}

/// The listener binds the advertised address only (here loopback), never every interface.
#[test]
fn listener_binds_the_advertised_address() {
    let f = fixture();
    let net = Net::establish(
        &f.boot,
        &[Some(0)],
        &[0; 16],
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(Duration::from_secs(5)),
        f.live.clone(),
        [
            Region::user(&f.heap, None),
            Region::ctrl(&f.ctrl),
            Region::regions(&f.regions),
        ],
    )
    .unwrap();
    assert_eq!(net.listened().ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert!(!net.listened().ip().is_unspecified());
    let a = pick_address(None, Some(&format!("127.0.0.1:{}", 1))).unwrap();
    assert!(a.is_loopback(), "{a}");
}
