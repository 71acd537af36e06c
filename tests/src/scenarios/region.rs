//! `region [remote]`: symmetric regions ([`rshmem::World::register_region`]). Every PE moves
//! two pages of its own anonymous memory onto shared memory, registers them with three objects,
//! and then uses addresses inside them like heap addresses: put/get/p/g, iput, atomics,
//! put_signal + signal_wait_until, wait_until, and the team collectives (fcollect, broadcast,
//! reduce, alltoall) with both buffers in the region. Errors: a range past an object's end, a
//! range past the region's end, an address in no object, a PE out of range, and the copy of a
//! PE that registered no memory for a second region (the last PE): each names the call (and
//! the PE), and nothing is written.
//!
//! With `remote` (run it on several hosts, e.g. the network-namespace job, whose hosts differ in
//! `RSHMEM_NODE_ID`): first, the copies of the PEs of other hosts are accessible but not
//! load/store addresses (`ptr` is None) while those of this host's PEs are both, and a
//! put to each PE of another host comes back through a get; then everything above runs with
//! those PEs reached through the remote transport (TCP or UCX). `RSHMEM_DISABLE_P2P=1` does not
//! split a machine for regions: run without `remote` there, every copy is mapped.

use std::ffi::c_void;

use rshmem::{Cmp, RegionLayout, RegionMemory, RegionObject, SignalOp, Sum, World};

use crate::check::{expect_contains, expect_err, Context, Ctx, Kind, R};
use crate::ensure;

/// Elements of object `a` (u64), at the region's start.
const A: usize = 64;
/// Offsets of the other objects (bytes from the region's start).
const SIG: usize = 1024;
const CNT: usize = 1032;
const SRC: usize = 2048;
const DST: usize = 4096;
/// Elements of `src` and of each block of `dst` (8 PEs × 8).
const BLK: usize = 8;
const TAIL: usize = 2 * PAGE - 8;
const PAGE: usize = 4096;

/// Two fresh pages of anonymous private memory.
fn pages(n: usize) -> R<*mut u8> {
    // SAFETY: a fresh private anonymous mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            n * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    ensure!(p != libc::MAP_FAILED, "mmap of {n} pages failed");
    Ok(p.cast())
}

fn obj(base: *mut u8, off: usize, len: usize, name: &str) -> RegionObject {
    RegionObject {
        start: base as usize + off,
        end: base as usize + off + len,
        name: name.into(),
    }
}

/// Reads word `i` of this PE's memory at `p` (volatile: peers write it).
fn rd(p: *mut u8, off: usize) -> u64 {
    // SAFETY: `off` is inside the two mapped pages, 8-byte aligned.
    unsafe { p.add(off).cast::<u64>().read_volatile() }
}

fn val(from: usize, to: usize, i: usize) -> u64 {
    ((from as u64 + 1) << 40) | ((to as u64 + 1) << 20) | i as u64
}

pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    let remote = c.args.first().is_some_and(|a| a == "remote");
    let base = pages(2)?;
    // SAFETY: fresh pages nobody else knows of.
    let mem = unsafe { RegionMemory::share_in_place(base, 2 * PAGE) }.ctx("share_in_place")?;
    let layout = RegionLayout {
        name: "test region".into(),
        objects: Some(vec![
            obj(base, 0, A * 8, "a"),
            obj(base, SIG, 8, "sig"),
            obj(base, CNT, 8, "cnt"),
            obj(base, SRC, BLK * 8, "src"),
            obj(base, DST, 8 * BLK * 8, "dst"),
            obj(base, TAIL, 8, "tail"),
        ]),
        refused: vec![],
    };
    let reg = w.register_region(Some(&mem), layout);
    if let Err(rshmem::Error::Unsupported { .. }) = &reg {
        if w.gpu().is_some() {
            crate::note!(
                "PE {}: region: GPU backend, only the Unsupported answer was checked",
                c.me
            );
            return Ok(());
        }
    }
    reg.ctx("register_region")?;
    let at = |off: usize| (base as usize + off) as *mut u64;
    if remote {
        remote_peers(c, base, &at)?;
    }
    let (me, n) = (c.me, c.n);

    // put / p / get / g.
    for pe in 0..n {
        w.put(at(8 * me), &[val(me, pe, 0)], pe)
            .ctx("put into the region")?;
    }
    c.barrier("put")?;
    for j in 0..n {
        let got = rd(base, 8 * j);
        ensure!(
            got == val(j, me, 0),
            "a[{j}] after put: expected {:#x}, got {got:#x}",
            val(j, me, 0)
        );
    }
    for pe in 0..n {
        let got = w.g(at(8 * pe) as *const u64, pe).ctx("g")?;
        ensure!(got == val(pe, pe, 0), "g a[{pe}] on PE {pe}: got {got:#x}");
        let mut v = [0u64; 2];
        w.get(&mut v, at(0), pe).ctx("get")?;
        ensure!(
            v[0] == val(0, pe, 0),
            "get a[0] on PE {pe}: got {:#x}",
            v[0]
        );
    }
    c.barrier("get")?;

    // iput: every PE writes elements 32 + 2k of a on its successor.
    let src: Vec<u64> = (0..8).map(|k| val(me, c.succ(), k)).collect();
    w.iput(at(8 * 32), &src, 2, 2, 4, c.succ()).ctx("iput")?;
    c.barrier("iput")?;
    for k in 0..4 {
        let got = rd(base, 8 * (32 + 2 * k));
        let want = val(c.pred(), me, 2 * k);
        ensure!(
            got == want,
            "a[{}] after iput: expected {want:#x}, got {got:#x}",
            32 + 2 * k
        );
    }

    // Atomics: every PE adds its number + 1 to cnt on every PE.
    for pe in 0..n {
        w.atomic_fetch_add(at(CNT), me as u64 + 1, pe)
            .ctx("atomic_fetch_add")?;
    }
    c.barrier("atomic_fetch_add")?;
    let want = (n * (n + 1) / 2) as u64;
    ensure!(
        rd(base, CNT) == want,
        "cnt after atomics: expected {want}, got {}",
        rd(base, CNT)
    );
    let old = w
        .atomic_compare_swap(at(CNT), want, 7, me)
        .ctx("atomic_compare_swap")?;
    ensure!(
        old == want && rd(base, CNT) == 7,
        "compare_swap on cnt: old {old}"
    );
    c.barrier("compare_swap")?;

    // put_signal into the successor's region; wait on my own signal word.
    let data: Vec<u64> = (0..BLK).map(|k| val(me, c.succ(), k)).collect();
    w.put_signal(at(SRC), &data, at(SIG), 1, SignalOp::Add, c.succ())
        .ctx("put_signal")?;
    w.signal_wait_until(at(SIG) as *const u64, Cmp::Ge, 1)
        .ctx("signal_wait_until")?;
    for k in 0..BLK {
        let got = rd(base, SRC + 8 * k);
        ensure!(
            got == val(c.pred(), me, k),
            "src[{k}] after put_signal: got {got:#x}"
        );
    }
    c.barrier("put_signal")?;
    w.atomic_set(at(SIG), 0, c.succ()).ctx("atomic_set")?;
    c.barrier("atomic_set")?;
    w.p(at(SIG), 5, c.succ()).ctx("p")?;
    w.wait_until(at(SIG) as *const u64, Cmp::Eq, 5)
        .ctx("wait_until")?;
    c.barrier("wait_until")?;

    // Team collectives on region buffers.
    let team = w.team_world();
    for k in 0..BLK {
        w.p(at(SRC + 8 * k), val(me, me, k), me).ctx("p")?;
    }
    w.fcollect(&team, at(DST), at(SRC) as *const u64, BLK)
        .ctx("fcollect on the region")?;
    for j in 0..n {
        for k in 0..BLK {
            let got = rd(base, DST + 8 * (j * BLK + k));
            ensure!(got == val(j, j, k), "fcollect dst[{j}][{k}]: got {got:#x}");
        }
    }
    let root = n - 1;
    w.broadcast(&team, at(DST), at(SRC) as *const u64, BLK, root)
        .ctx("broadcast")?;
    for k in 0..BLK {
        let got = rd(base, DST + 8 * k);
        ensure!(
            got == val(root, root, k),
            "broadcast dst[{k}]: got {got:#x}"
        );
    }
    for k in 0..BLK {
        w.p(at(SRC + 8 * k), (me * 10 + k) as u64, me).ctx("p")?;
    }
    w.reduce(&team, at(DST), at(SRC) as *const u64, BLK, Sum)
        .ctx("reduce")?;
    for k in 0..BLK {
        let want: u64 = (0..n).map(|j| (j * 10 + k) as u64).sum();
        let got = rd(base, DST + 8 * k);
        ensure!(
            got == want,
            "sum_reduce dst[{k}]: expected {want}, got {got}"
        );
    }
    // alltoall: block j of my a (8·n ≤ 64 elements) goes to block me of PE j's dst.
    for j in 0..n {
        w.p(at(8 * j), val(me, j, 0), me).ctx("p")?;
    }
    w.alltoall(&team, at(DST), at(0) as *const u64, 1)
        .ctx("alltoall")?;
    for j in 0..n {
        let got = rd(base, DST + 8 * j);
        ensure!(got == val(j, me, 0), "alltoall dst[{j}]: got {got:#x}");
    }
    // Mapped: every PE of this machine (under RSHMEM_DISABLE_P2P too); with `remote`, PEs of
    // other hosts are reached through the remote transport instead.
    let mapped = !remote || w.node_pes().contains(&c.succ());
    ensure!(
        w.ptr(at(0), c.succ()).is_some() == mapped,
        "ptr of a region address on PE {} is {:?} (expected a mapping: {mapped})",
        c.succ(),
        w.ptr(at(0), c.succ())
    );

    errors(c, base, &at)?;
    second_region(c)
}

/// Bad ranges and PEs give errors naming the call; nothing is written.
fn errors(c: &Ctx<'_>, base: *mut u8, at: &dyn Fn(usize) -> *mut u64) -> R {
    let w = c.w;
    c.barrier("before the errors")?;
    let before: Vec<u64> = (0..2 * PAGE / 8).map(|i| rd(base, 8 * i)).collect();
    let big = vec![0xEEu64; A + 1];
    let e = expect_err(
        "put past a's end",
        w.put(at(0), &big, c.succ()),
        Kind::NotSymmetric,
        "put",
    )?;
    expect_contains(
        "put past a's end",
        &e.to_string(),
        &["runs past the end of the symmetric variable `a`"],
    )?;
    let e = expect_err(
        "get past the region's end",
        w.get(&mut [0u64; 2], at(TAIL), c.succ()),
        Kind::NotSymmetric,
        "get",
    )?;
    expect_contains(
        "get past the region's end",
        &e.to_string(),
        &["runs past the end of the symmetric region `test region`"],
    )?;
    let e = expect_err(
        "atomic in no object",
        w.atomic_fetch_add(at(PAGE + 512), 1u64, c.succ()),
        Kind::NotSymmetric,
        "atomic_fetch_add",
    )?;
    expect_contains("atomic in no object", &e.to_string(), &["in no object"])?;
    let e = expect_err(
        "p to a PE out of range",
        w.p(at(0), 1u64, c.n),
        Kind::Invalid,
        "p",
    )?;
    expect_contains("p to a PE out of range", &e.to_string(), &["out of range"])?;
    let e = expect_err(
        "fcollect past dst's end",
        w.fcollect(
            &w.team_world(),
            at(DST + 8 * BLK * 8 - 8),
            at(SRC) as *const u64,
            BLK,
        ),
        Kind::NotSymmetric,
        "fcollect",
    )?;
    expect_contains(
        "fcollect past dst's end",
        &e.to_string(),
        &["dest", "`dst`"],
    )?;
    c.barrier("errors")?;
    for (i, b) in before.iter().enumerate() {
        let got = rd(base, 8 * i);
        ensure!(
            got == *b,
            "word {i} of the region changed by a failed call: {b:#x} -> {got:#x}"
        );
    }
    Ok(())
}

/// A second region for which the last PE registers no memory: its copy is unreachable.
fn second_region(c: &Ctx<'_>) -> R {
    let w = c.w;
    let last = c.n - 1;
    let base = pages(1)?;
    // SAFETY: fresh pages nobody else knows of.
    let mem = unsafe { RegionMemory::share_in_place(base, PAGE) }.ctx("share_in_place")?;
    let layout = RegionLayout {
        name: "second".into(),
        objects: None,
        refused: vec![],
    };
    w.register_region((c.me != last).then_some(&mem), layout)
        .ctx("register_region (second)")?;
    let p = base.cast::<u64>();
    if c.me == last {
        // Not registered here: the address is not symmetric on this PE.
        expect_err(
            "put to an unregistered range",
            w.put(p, &[1], c.me),
            Kind::NotSymmetric,
            "put",
        )?;
    } else {
        let e = expect_err(
            "put to a PE without the region",
            w.put(p, &[1], last),
            Kind::Unsupported,
            "put",
        )?;
        expect_contains(
            "put to a PE without the region",
            &e.to_string(),
            &[
                &format!("PE {last}'s copy of the symmetric region `second` is not reachable"),
                "registered no memory",
            ],
        )?;
        w.p(p, c.me as u64 + 1, c.me)
            .ctx("p to my own copy of the second region")?;
        ensure!(
            rd(base, 0) == c.me as u64 + 1,
            "second region: p to myself did not land"
        );
        ensure!(
            w.ptr(p, last).is_none(),
            "ptr of the unreachable copy must be None"
        );
    }
    c.barrier("second region")
}

/// PEs on more than one host: the copies of the other hosts' PEs are accessible but no
/// load/store addresses, those of this host's are; a put to each PE of another host comes back through a get, and
/// the PEs of this host read this PE's `p` by load/store.
fn remote_peers(c: &Ctx<'_>, base: *mut u8, at: &dyn Fn(usize) -> *mut u64) -> R {
    let w: &World = c.w;
    let mates = w.node_pes();
    ensure!(
        mates.len() < c.n,
        "`region remote` needs PEs on more than one host (this host has all {} PEs)",
        c.n
    );
    for pe in (0..c.n).filter(|p| !mates.contains(p)) {
        ensure!(
            w.ptr(at(0), pe).is_none(),
            "PE {pe}'s copy (another host) must not be a load/store address"
        );
        ensure!(
            w.addr_accessible(at(0) as *const c_void, pe),
            "addr_accessible of PE {pe}'s copy (another host, reached remotely) must be true"
        );
        // a[48 + me]: one word per writer.
        let (i, v) = (48 + c.me, val(c.me, pe, 63));
        w.put(at(8 * i), &[v], pe)
            .ctx("put into the region of a PE of another host")?;
        w.quiet().ctx("quiet")?;
        let got = w
            .g(at(8 * i) as *const u64, pe)
            .ctx("g from the region of a PE of another host")?;
        ensure!(
            got == v,
            "a[{i}] on PE {pe} (another host): put {v:#x}, read back {got:#x}"
        );
    }
    w.p(at(0), 9, c.me).ctx("p to this PE")?;
    ensure!(rd(base, 0) == 9, "p to this PE did not land");
    c.barrier("remote")?;
    // The PEs of this host: reachable by load/store.
    for &pe in mates.iter().filter(|&&p| p != c.me) {
        let got = w
            .g(at(0) as *const u64, pe)
            .ctx("g from a PE of this host")?;
        ensure!(
            got == 9,
            "g of a[0] on PE {pe} (this host): expected 9, got {got}"
        );
        ensure!(
            w.addr_accessible(at(0) as *const c_void, pe),
            "addr_accessible of PE {pe}'s copy (this host) must be true"
        );
    }
    c.barrier("remote mates")
}
