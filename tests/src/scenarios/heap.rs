//! `heap`: the malloc family's semantics, heap growth, symmetric offsets over many
//! allocation cycles, and out-of-memory handling. The harness runs it with
//! `RSHMEM_HEAP_INITIAL=4M` (so 16 MiB allocations grow the heap) and `RSHMEM_HEAP_LIMIT=256M`
//! (so the heap can be filled to its limit). With other settings the growth blocks are half the
//! first chunk, and the heap is filled only under a limit of at most 1 GiB.
//!
//! `heap-huge` ([`huge`]): requests near `usize::MAX` must fail with an error, not panic or
//! succeed.

use std::ptr::null_mut;

use crate::check::{
    expect_buf, expect_contains, expect_eq, expect_err, fill, peek, poke, Context, Ctx, Fail, Kind,
    R,
};
use crate::ensure;
use crate::vals::{byte, mix, val};

pub fn run(c: &Ctx<'_>) -> R {
    zero_sizes(c)?;
    realloc_semantics(c)?;
    alignment(c)?;
    calloc_reuse(c)?;
    growth(c)?;
    cycles(c)?;
    released(c)?;
    oom(c)?;
    Ok(())
}

/// This process's resident shared memory (`RssShmem` of /proc/self/status), in bytes.
fn rss_shmem() -> R<usize> {
    let s = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| Fail(format!("reading /proc/self/status: {e}")))?;
    s.lines()
        .find_map(|l| l.strip_prefix("RssShmem:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map(|kb| kb << 10)
        .ok_or_else(|| Fail("no RssShmem line in /proc/self/status".into()))
}

/// Freeing a large allocation on the host heap returns its pages to the system: this PE's
/// resident shared memory drops by (nearly) its size, and a new allocation there reads zero.
fn released(c: &Ctx<'_>) -> R {
    let w = c.w;
    if w.transport(c.me).map(|t| t.name) != Some("shm") {
        crate::note!(
            "PE {}: note: not a host heap; freed pages are not released",
            c.me
        );
        return Ok(());
    }
    let size = 32usize << 20;
    let b = w.malloc_bytes(size).ctx("malloc_bytes of 32 MiB")?;
    let chunk = vec![0xC3u8; 1 << 20];
    for k in 0..size / chunk.len() {
        w.putmem(b.wrapping_add(k * chunk.len()), &chunk, c.me)
            .ctx("putmem into my copy")?;
    }
    let before = rss_shmem()?;
    w.free_bytes(b).ctx("free_bytes of 32 MiB")?;
    let after = rss_shmem()?;
    ensure!(
        after + (size * 3 / 4) <= before,
        "freeing 32 MiB (written) left resident shared memory at {after} bytes (was {before})"
    );
    // The same place again (first fit): its pages were dropped, so they read zero.
    let b2 = w.malloc_bytes(size).ctx("malloc_bytes of 32 MiB again")?;
    ensure!(
        b2 == b,
        "expected the new allocation at the freed place {b:?}, got {b2:?}"
    );
    let got = peek(w, b2.wrapping_add(size / 2), 64)?;
    ensure!(
        got.iter().all(|&x| x == 0),
        "freed and reallocated memory still holds old data: {got:02x?}"
    );
    w.free_bytes(b2).ctx("free_bytes")?;
    Ok(())
}

fn zero_sizes(c: &Ctx<'_>) -> R {
    let w = c.w;
    let b = w.malloc::<u32>(0).ctx("malloc::<u32>(0)")?;
    ensure!(
        b.is_empty() && b.as_ptr().is_null(),
        "malloc::<u32>(0): expected an empty handle with a null pointer, got {b:?}"
    );
    w.free(b).ctx("free of an empty handle")?;
    let b = w.calloc::<u8>(0).ctx("calloc::<u8>(0)")?;
    ensure!(
        b.is_empty() && b.as_ptr().is_null(),
        "calloc::<u8>(0): got {b:?}"
    );
    w.free(b).ctx("free")?;
    let b = w.align::<u16>(128, 0).ctx("align::<u16>(128, 0)")?;
    ensure!(
        b.is_empty() && b.as_ptr().is_null(),
        "align::<u16>(128, 0): got {b:?}"
    );
    w.free(b).ctx("free")?;
    let p = w.malloc_bytes(0).ctx("malloc_bytes(0)")?;
    ensure!(p.is_null(), "malloc_bytes(0): expected null, got {p:?}");
    let p = w.calloc_bytes(0, 8).ctx("calloc_bytes(0, 8)")?;
    ensure!(p.is_null(), "calloc_bytes(0, 8): expected null, got {p:?}");
    let p = w.calloc_bytes(8, 0).ctx("calloc_bytes(8, 0)")?;
    ensure!(p.is_null(), "calloc_bytes(8, 0): expected null, got {p:?}");
    let p = w.align_bytes(64, 0).ctx("align_bytes(64, 0)")?;
    ensure!(p.is_null(), "align_bytes(64, 0): expected null, got {p:?}");
    let p = w
        .realloc_bytes(null_mut(), 0)
        .ctx("realloc_bytes(null, 0)")?;
    ensure!(
        p.is_null(),
        "realloc_bytes(null, 0): expected null, got {p:?}"
    );
    w.free_bytes(null_mut()).ctx("free_bytes(null)")?;
    // An empty handle grows with realloc like malloc.
    let e = w.malloc::<u64>(0).ctx("malloc")?;
    let mut g = e;
    w.realloc(&mut g, 3).ctx("realloc of an empty handle")?;
    ensure!(
        g.len() == 3 && !g.as_ptr().is_null(),
        "realloc of an empty handle to 3: got {g:?}"
    );
    w.p(g.at(2), 5u64, c.succ())
        .ctx("p into the realloc'd handle")?;
    c.barrier("realloc of empty")?;
    expect_eq("p into realloc(empty, 3)", Some(5), g.read(2).ok())?;
    w.free(g).ctx("free")?;
    Ok(())
}

fn realloc_semantics(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    // realloc(null, n) is malloc.
    let p = w
        .realloc_bytes(null_mut(), 100)
        .ctx("realloc_bytes(null, 100)")?;
    ensure!(
        !p.is_null() && p as usize % 64 == 0,
        "realloc_bytes(null, 100): got {p:?}"
    );
    let data: Vec<u8> = (0..100).map(|i| byte(me, succ, i)).collect();
    w.putmem(p, &data, succ)
        .ctx("putmem into realloc_bytes(null, 100)")?;
    c.barrier("putmem")?;
    let got = peek(w, p, 100)?;
    expect_eq(
        "realloc_bytes(null, 100) used as malloc",
        (0..100).map(|i| byte(pred, me, i)).collect::<Vec<u8>>(),
        got,
    )?;
    // realloc(p, 0) is free.
    let q = w.realloc_bytes(p, 0).ctx("realloc_bytes(p, 0)")?;
    ensure!(q.is_null(), "realloc_bytes(p, 0): expected null, got {q:?}");
    expect_err(
        "putmem into memory released by realloc_bytes(p, 0)",
        w.putmem(p, &[1], succ),
        Kind::NotSymmetric,
        "putmem",
    )?;

    // Moving: a block right behind `a` stops it from growing in place.
    let a = w.malloc::<u32>(50).ctx("malloc")?;
    let blocker = w.malloc::<u8>(1).ctx("malloc")?;
    let vals: Vec<u32> = (0..50).map(|i| val(me, succ, i)).collect();
    w.put(a.as_ptr(), &vals, succ).ctx("put")?;
    c.barrier("filling a")?;
    let old = a.as_ptr() as usize;
    let mut a = a;
    w.realloc(&mut a, 5000).ctx("realloc to 5000 elements")?;
    ensure!(
        a.as_ptr() as usize != old,
        "realloc: expected the block to move (another allocation follows it), it stayed at {old:#x}"
    );
    ensure!(
        a.len() == 5000,
        "realloc: length {} instead of 5000",
        a.len()
    );
    for i in 0..50 {
        expect_eq(
            format_args!("realloc kept element {i} when moving"),
            Some(val::<u32>(pred, me, i)),
            a.read(i).ok(),
        )?;
    }
    // The new block is symmetric: the previous PE can write its last element.
    w.p(a.at(4999), val::<u32>(me, succ, 4999), succ)
        .ctx("p into the moved block")?;
    expect_err(
        "put into a's old place",
        w.p(old as *mut u32, 1, succ),
        Kind::NotSymmetric,
        "p",
    )?;
    c.barrier("p into the moved block")?;
    expect_eq(
        "remote write into the moved block",
        Some(val::<u32>(pred, me, 4999)),
        a.read(4999).ok(),
    )?;

    // Growing and shrinking, in place or not: contents up to the smaller size stay.
    let b = w.malloc::<u64>(8).ctx("malloc")?;
    fill(&b, |i| val(me, me, i))?;
    c.barrier("filling b")?;
    let mut b = b;
    w.realloc(&mut b, 16).ctx("realloc grow")?;
    for i in 0..8 {
        expect_eq(
            format_args!("realloc grow kept element {i}"),
            Some(val::<u64>(me, me, i)),
            b.read(i).ok(),
        )?;
    }
    w.p(b.at(15), 9u64, succ).ctx("p into the grown block")?;
    c.barrier("grow")?;
    w.realloc(&mut b, 4).ctx("realloc shrink")?;
    for i in 0..4 {
        expect_eq(
            format_args!("realloc shrink kept element {i}"),
            Some(val::<u64>(me, me, i)),
            b.read(i).ok(),
        )?;
    }
    expect_err(
        "p past the shrunk block",
        w.p(b.at(5), 1u64, succ),
        Kind::NotSymmetric,
        "p",
    )?;
    w.realloc(&mut b, 0).ctx("realloc to 0")?;
    ensure!(
        b.is_empty(),
        "realloc to 0 elements: expected an empty handle, got {b:?}"
    );
    w.free(b).ctx("free")?;
    w.free(blocker).ctx("free")?;
    w.free(a).ctx("free")?;
    Ok(())
}

fn alignment(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    let aligns = [
        1usize,
        2,
        8,
        64,
        128,
        4096,
        65536,
        1 << 20,
        4 << 20,
        64 << 20,
    ];
    let mut ps = Vec::new();
    for &a in &aligns {
        let p = w
            .align_bytes(a, 100)
            .ctx(format_args!("align_bytes({a}, 100)"))?;
        ensure!(
            !p.is_null() && p as usize % a == 0,
            "align_bytes({a}, 100) returned {p:?}, not {a}-byte aligned"
        );
        w.putmem(p.wrapping_add(99), &[byte(me, succ, a)], succ)
            .ctx("putmem into an aligned block")?;
        ps.push(p);
    }
    let t = w.align::<u16>(256, 3).ctx("align::<u16>(256, 3)")?;
    ensure!(
        t.as_ptr() as usize % 256 == 0,
        "align::<u16>(256, 3) returned {:?}",
        t.as_ptr()
    );
    let t2 = w.align::<u128>(8, 2).ctx("align::<u128>(8, 2)")?;
    ensure!(
        t2.as_ptr() as usize % std::mem::align_of::<u128>() == 0,
        "align::<u128>(8, 2) returned {:?}",
        t2.as_ptr()
    );
    c.barrier("aligned writes")?;
    for (&a, &p) in aligns.iter().zip(&ps) {
        let got = peek(w, p.wrapping_add(99), 1)?[0];
        expect_eq(
            format_args!("last byte of align_bytes({a}, 100) written by PE {pred}"),
            byte(pred, me, a),
            got,
        )?;
    }
    c.barrier("aligned checks")?;
    w.free(t2).ctx("free")?;
    w.free(t).ctx("free")?;
    for p in ps.into_iter().rev() {
        w.free_bytes(p).ctx("free_bytes")?;
    }
    Ok(())
}

fn calloc_reuse(c: &Ctx<'_>) -> R {
    let (w, me, succ) = (c.w, c.me, c.succ());
    const SIZE: usize = 4096;
    let x = w.malloc_bytes(SIZE).ctx("malloc_bytes")?;
    w.putmem(x, &[0xCD; SIZE], succ).ctx("putmem")?;
    c.barrier("dirtying")?;
    w.free_bytes(x).ctx("free_bytes")?;
    let y = w.calloc_bytes(SIZE, 1).ctx("calloc_bytes")?;
    if y != x {
        crate::note!("PE {me}: note: calloc_bytes did not reuse the freed block ({x:?} -> {y:?})");
    }
    let got = peek(w, y, SIZE)?;
    ensure!(
        got.iter().all(|&b| b == 0),
        "calloc_bytes on reused memory: byte {} is {:#04x}",
        got.iter().position(|&b| b != 0).unwrap_or(0),
        got.iter().find(|&&b| b != 0).copied().unwrap_or(0)
    );
    let z = w.malloc::<u64>(300).ctx("malloc")?;
    fill(&z, |i| val(me, me, i))?;
    c.barrier("filling z")?;
    w.free(z).ctx("free")?;
    let z = w.calloc::<u64>(300).ctx("calloc")?;
    expect_buf("calloc::<u64>(300) on reused memory", &z, |_| 0)?;
    c.barrier("calloc checks")?;
    w.free(z).ctx("free")?;
    w.free_bytes(y).ctx("free_bytes")?;
    Ok(())
}

fn growth(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    // Three blocks of 16 MiB (or of half the first chunk, if that is larger) outgrow the
    // first chunk (4 MiB under the harness).
    let big = (16usize << 20).max(w.config().heap_initial / 2);
    let mut bigs = Vec::new();
    for k in 0..3 {
        bigs.push(
            w.malloc_bytes(big)
                .ctx(format_args!("malloc_bytes of {big} bytes #{k}"))?,
        );
    }
    let offs = [0usize, big / 2 + 3, big - 1];
    for (k, &b) in bigs.iter().enumerate() {
        for &o in &offs {
            w.putmem(b.wrapping_add(o), &[byte(me, succ, k * big + o)], succ)
                .ctx("putmem into the grown heap")?;
        }
        let v = val::<u64>(me, succ, k);
        w.p(b.wrapping_add(big - 16).cast::<u64>(), v, succ)
            .ctx("p into the grown heap")?;
    }
    c.barrier("writes into the grown heap")?;
    for (k, &b) in bigs.iter().enumerate() {
        for &o in &offs {
            let got = peek(w, b.wrapping_add(o), 1)?[0];
            expect_eq(
                format_args!("big block {k}, byte {o}, written by PE {pred}"),
                byte(pred, me, k * big + o),
                got,
            )?;
        }
        let got = w.g(b.wrapping_add(big - 16).cast::<u64>(), me).ctx("g")?;
        expect_eq(
            format_args!("big block {k}: u64 written by PE {pred}"),
            val::<u64>(pred, me, k),
            got,
        )?;
        let mut back = [0u8; 1];
        w.getmem(&mut back, b.wrapping_add(big - 1), succ)
            .ctx("getmem from the grown heap")?;
        expect_eq(
            format_args!("getmem of block {k}'s last byte from PE {succ}"),
            byte(me, succ, k * big + big - 1),
            back[0],
        )?;
    }
    c.barrier("grown heap checks")?;
    for b in bigs.into_iter().rev() {
        w.free_bytes(b).ctx("free_bytes")?;
    }
    Ok(())
}

/// A deterministic generator: every PE makes the same sequence of calls.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        mix(self.0)
    }
}

fn cycles(c: &Ctx<'_>) -> R {
    let (w, me, n, succ, pred) = (c.w, c.me, c.n, c.succ(), c.pred());
    const OPS: usize = 300;
    let anchor = w.malloc_bytes(64).ctx("malloc_bytes")?;
    let off = |p: *mut u8| (p as usize).wrapping_sub(anchor as usize) as u64;
    let mut rng = Lcg(0x5EED);
    let mut live: Vec<(*mut u8, usize)> = Vec::new();
    let mut log = Vec::with_capacity(OPS);
    for op in 0..OPS {
        let r = rng.next();
        let what = r % 8;
        if what >= 4 && !live.is_empty() {
            let k = (rng.next() % live.len() as u64) as usize;
            if what == 7 {
                let size = 1 + (rng.next() % 30000) as usize;
                let p = w
                    .realloc_bytes(live[k].0, size)
                    .ctx(format_args!("op {op}: realloc_bytes"))?;
                live[k] = (p, size);
                log.push(off(p));
            } else {
                let (p, _) = live.swap_remove(k);
                w.free_bytes(p).ctx(format_args!("op {op}: free_bytes"))?;
                log.push(u64::MAX - k as u64);
            }
        } else {
            let size = 1 + (rng.next() % 20000) as usize;
            let p = match rng.next() % 3 {
                0 => w
                    .malloc_bytes(size)
                    .ctx(format_args!("op {op}: malloc_bytes({size})"))?,
                1 => w
                    .calloc_bytes(size, 1)
                    .ctx(format_args!("op {op}: calloc_bytes({size}, 1)"))?,
                _ => {
                    let a = 1usize << (rng.next() % 13);
                    w.align_bytes(a, size)
                        .ctx(format_args!("op {op}: align_bytes({a}, {size})"))?
                }
            };
            live.push((p, size));
            log.push(off(p));
        }
    }
    // Allgather of every PE's offsets by puts.
    let logs = w.malloc::<u64>(n * OPS).ctx("malloc")?;
    for t in 0..n {
        w.put(logs.at(me * OPS), &log, t).ctx("put of my offsets")?;
    }
    // Every live block is usable remotely at its last byte.
    for (k, &(p, size)) in live.iter().enumerate() {
        w.putmem(p.wrapping_add(size - 1), &[byte(me, succ, k)], succ)
            .ctx("putmem into a cycled block")?;
    }
    c.barrier("offset allgather")?;
    let all = logs.to_vec().ctx("SymBuf::to_vec")?;
    for s in 0..n {
        let theirs = &all[s * OPS..(s + 1) * OPS];
        if let Some(i) = (0..OPS).find(|&i| theirs[i] != log[i]) {
            return Err(Fail(format!(
                "allocation cycles: operation {i} gave offset {:#x} on PE {s} but {:#x} on me (PE {me}); allocation is not symmetric",
                theirs[i], log[i]
            )));
        }
    }
    for (k, &(p, size)) in live.iter().enumerate() {
        let got = peek(w, p.wrapping_add(size - 1), 1)?[0];
        expect_eq(
            format_args!("last byte of cycled block {k} written by PE {pred}"),
            byte(pred, me, k),
            got,
        )?;
    }
    c.barrier("cycle checks")?;
    w.free(logs).ctx("free")?;
    for (p, _) in live.into_iter().rev() {
        w.free_bytes(p).ctx("free_bytes")?;
    }
    w.free_bytes(anchor).ctx("free_bytes")?;
    Ok(())
}

fn oom(c: &Ctx<'_>) -> R {
    let (w, me, n, succ, pred) = (c.w, c.me, c.n, c.succ(), c.pred());
    let limit = w
        .config()
        .heap_limit
        .ok_or_else(|| Fail("config() names no heap limit in effect".into()))?;
    let keep = w.malloc::<u64>(16).ctx("malloc")?;
    let vals: Vec<u64> = (0..16).map(|i| val(me, succ, i)).collect();
    w.put(keep.as_ptr(), &vals, succ).ctx("put")?;
    let r = w.malloc_bytes(100).ctx("malloc_bytes")?;
    poke(w, r, 0x3C, 100)?;
    c.barrier("oom setup")?;

    let oom_msg = |what: &str, res: rshmem::Result<*mut u8>, call: &str| -> R {
        let e = expect_err(what, res, Kind::Oom, call)?;
        expect_contains(
            what,
            &e.to_string(),
            &["RSHMEM_HEAP_LIMIT", "out of symmetric memory"],
        )
    };
    oom_msg(
        "malloc_bytes(limit + 1)",
        w.malloc_bytes(limit + 1),
        "malloc",
    )?;
    oom_msg("calloc_bytes(limit, 2)", w.calloc_bytes(limit, 2), "calloc")?;
    oom_msg(
        "align_bytes(4096, limit)",
        w.align_bytes(4096, limit),
        "align",
    )?;
    oom_msg(
        "realloc_bytes(r, limit + 1)",
        w.realloc_bytes(r, limit + 1),
        "realloc",
    )?;
    expect_err(
        "malloc::<u64>(limit / 8 + 1)",
        w.malloc::<u64>(limit / 8 + 1),
        Kind::Oom,
        "malloc",
    )?;
    let got = peek(w, r, 100)?;
    ensure!(
        got.iter().all(|&b| b == 0x3C),
        "a failed realloc_bytes changed the block's contents"
    );

    // Fill the heap with 16 MiB blocks until it is full: every PE stops at the same count.
    // Only under a small limit (the harness sets 256 MiB): the blocks are real GPU memory on
    // the GPU backend.
    const BIG: usize = 16 << 20;
    if limit > 1 << 30 {
        crate::note!("PE {me}: note: RSHMEM_HEAP_LIMIT is {limit}; not filling the heap up to it");
        c.barrier("oom checks")?;
        w.free_bytes(r).ctx("free_bytes")?;
        w.free(keep).ctx("free")?;
        return Ok(());
    }
    let mut bigs = Vec::new();
    loop {
        match w.malloc_bytes(BIG) {
            Ok(p) => bigs.push(p),
            Err(e) => {
                let e = expect_err(
                    "malloc_bytes(16 MiB) at the limit",
                    Err::<(), _>(e),
                    Kind::Oom,
                    "malloc",
                )?;
                expect_contains(
                    "malloc_bytes(16 MiB) at the limit",
                    &e.to_string(),
                    &["RSHMEM_HEAP_LIMIT"],
                )?;
                break;
            }
        }
        ensure!(
            bigs.len() * BIG <= limit,
            "allocated {} blocks of 16 MiB with a limit of {limit} bytes",
            bigs.len()
        );
    }
    ensure!(
        !bigs.is_empty(),
        "not even one 16 MiB block fits under a limit of {limit}"
    );
    let counts = w.calloc::<u64>(n).ctx("calloc")?;
    for t in 0..n {
        w.p(counts.at(me), bigs.len() as u64, t).ctx("p")?;
    }
    // The last block is usable.
    let last = *bigs.last().unwrap_or(&null_mut());
    w.putmem(last.wrapping_add(BIG - 1), &[0x77], succ)
        .ctx("putmem into the last block")?;
    c.barrier("filling the heap")?;
    expect_buf("16 MiB blocks that fit, per PE", &counts, |_| {
        bigs.len() as u64
    })?;
    expect_eq(
        "byte written into the last block",
        0x77,
        peek(w, last.wrapping_add(BIG - 1), 1)?[0],
    )?;
    w.free(counts).ctx("free")?;
    for p in bigs.into_iter().rev() {
        w.free_bytes(p).ctx("free_bytes")?;
    }
    // After the failures everything works again.
    let p = w
        .malloc_bytes(BIG)
        .ctx("malloc_bytes(16 MiB) after out-of-memory errors")?;
    w.putmem(p.wrapping_add(BIG - 1), &[0x78], succ)
        .ctx("putmem")?;
    c.barrier("after oom")?;
    expect_eq(
        "byte written after out-of-memory errors",
        0x78,
        peek(w, p.wrapping_add(BIG - 1), 1)?[0],
    )?;
    expect_buf(
        "data allocated before the out-of-memory errors",
        &keep,
        |i| val(pred, me, i),
    )?;
    c.barrier("after oom checks")?;
    w.free_bytes(p).ctx("free_bytes")?;
    w.free_bytes(r).ctx("free_bytes")?;
    w.free(keep).ctx("free")?;
    Ok(())
}

/// Requests whose size overflows any rounding must fail with an error on every PE.
pub fn huge(c: &Ctx<'_>) -> R {
    let w = c.w;
    let check = |what: &str, r: rshmem::Result<*mut u8>| -> R {
        match r {
            Err(e) if matches!(crate::check::kind_of(&e), Some(Kind::Oom | Kind::Invalid)) => {
                Ok(())
            }
            Err(e) => Err(Fail(format!(
                "{what}: expected OutOfMemory or InvalidArgument, got {e}"
            ))),
            Ok(p) => Err(Fail(format!(
                "{what}: expected an error, got the allocation {p:?}"
            ))),
        }
    };
    check("malloc_bytes(usize::MAX)", w.malloc_bytes(usize::MAX))?;
    check(
        "malloc_bytes(usize::MAX - 63)",
        w.malloc_bytes(usize::MAX - 63),
    )?;
    check(
        "malloc_bytes(usize::MAX / 2 + 1)",
        w.malloc_bytes(usize::MAX / 2 + 1),
    )?;
    check(
        "calloc_bytes(usize::MAX / 2, 2)",
        w.calloc_bytes(usize::MAX / 2, 2),
    )?;
    check(
        "align_bytes(1 << 63, 1 << 62)",
        w.align_bytes(1 << 63, 1 << 62),
    )?;
    check(
        "align_bytes(4096, usize::MAX - 4000)",
        w.align_bytes(4096, usize::MAX - 4000),
    )?;
    let r = w
        .malloc::<u64>(usize::MAX / 8)
        .map(|b| b.as_ptr().cast::<u8>());
    check("malloc::<u64>(usize::MAX / 8)", r)?;
    // The heap still works.
    let b = w.malloc::<u64>(4).ctx("malloc after huge requests")?;
    w.p(b.at(3), 42u64, c.succ()).ctx("p")?;
    c.barrier("after huge requests")?;
    expect_eq("p after huge requests", Some(42), b.read(3).ok())?;
    w.free(b).ctx("free")?;
    Ok(())
}
