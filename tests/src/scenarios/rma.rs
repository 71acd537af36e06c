//! `rma`: put/get/p/g for every RMA type to and from every PE (self included), putmem/getmem
//! with odd sizes and offsets, every `_nbi` form completed by quiet (the deferred ones too),
//! strided iput/iget, and the ordering fence gives puts to one PE.

use std::time::Duration;

use crate::check::{
    expect_buf, expect_eq, expect_slice, expect_val, fill, peek, poke, poll_until, Context, Ctx,
    Fail, R,
};
use crate::vals::{byte, val, val_r, Val};
use crate::{each_rma_type, ensure};

/// Elements each source PE writes into each target.
const SEG: usize = 9;
/// A segment plus one guard element that nobody writes.
const STRIDE: usize = SEG + 1;

pub fn run(c: &Ctx<'_>) -> R {
    each_rma_type!(typed(c));
    bytes(c)?;
    nbi::<u32>(c)?;
    nbi::<f64>(c)?;
    nbi::<i8>(c)?;
    deferred::<u32>(c)?;
    deferred::<u8>(c)?;
    strided::<u16>(c)?;
    strided::<i64>(c)?;
    strided::<f32>(c)?;
    strided::<u128>(c)?;
    fence_order(c)?;
    pointers(c)?;
    Ok(())
}

/// ptr / addr_accessible / pe_accessible: every PE's copy is reachable, and `ptr` is Some
/// exactly for the PEs of this node (all of them unless they run on several hosts or under
/// `RSHMEM_DISABLE_P2P=1`); on the CPU backend a store through `ptr(pe)` is what PE `pe` then
/// reads; bad PEs and addresses give None/false.
fn pointers(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let buf = w.calloc::<u64>(4).ctx("calloc")?;
    let outside = [0u64; 4];
    for pe in 0..n {
        crate::ensure!(w.pe_accessible(pe), "pe_accessible({pe}) is false");
        crate::ensure!(
            w.addr_accessible(buf.at(3), pe),
            "addr_accessible(buf[3], {pe}) is false"
        );
        let local = w.node_pes().contains(&pe);
        crate::ensure!(
            buf.ptr(pe).is_some() == local,
            "ptr(buf, {pe}) is {:?} but PE {pe} is {}on this node",
            buf.ptr(pe),
            if local { "" } else { "not " }
        );
    }
    crate::ensure!(!w.pe_accessible(n), "pe_accessible({n}) is true");
    crate::ensure!(
        w.ptr(buf.as_ptr(), n).is_none(),
        "ptr(buf, n_pes) is not None"
    );
    crate::ensure!(
        !w.addr_accessible(outside.as_ptr(), 0),
        "a stack address is accessible"
    );
    crate::ensure!(
        !w.addr_accessible(buf.at(4), 0),
        "one past the end is accessible"
    );
    // Stores go to succ when it is on this node; every PE takes part in the barrier.
    if w.gpu().is_none() {
        if w.node_pes().contains(&c.succ()) {
            let p = buf
                .ptr(c.succ())
                .ok_or_else(|| crate::check::Fail("ptr(succ) is None".into()))?;
            // SAFETY: ptr() returned succ's copy of a live 4-element u64 allocation mapped in
            // this process (CPU backend); index 1 is written only by this PE.
            unsafe { p.add(1).write_volatile(0x5EED_0000 + me as u64) };
        }
        c.barrier("ptr stores")?;
        if w.node_pes().contains(&c.pred()) {
            crate::check::expect_eq(
                "value stored through ptr by pred",
                Some(0x5EED_0000 + c.pred() as u64),
                buf.read(1).ok(),
            )?;
        }
    }
    c.barrier("pointers end")?;
    w.free(buf).ctx("free")
}

/// What element `idx` of PE `t`'s buffer holds after every PE `s` wrote segment `s` of it:
/// segments `[s·STRIDE, s·STRIDE+SEG)` hold `val(s, t, idx)`, the guards between them poison.
fn expected<T: Val>(t: usize, idx: usize) -> T {
    let (s, off) = (idx / STRIDE, idx % STRIDE);
    if off < SEG {
        val(s, t, idx)
    } else {
        T::poison()
    }
}

/// Every PE writes its segment of every PE's buffer with put (start and middle) and p (last
/// element), then reads segments back with get and g.
fn typed<T: Val>(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let name = T::NAME;
    // No trailing guard: the last element of the allocation belongs to PE n-1's segment.
    let len = n * STRIDE - 1;
    let buf = w.malloc::<T>(len).ctx(format_args!("malloc::<{name}>"))?;
    fill(&buf, |_| T::poison())?;
    c.barrier("poisoning")?;

    for t in 0..n {
        let base = me * STRIDE;
        let vals: Vec<T> = (0..SEG).map(|i| val(me, t, base + i)).collect();
        let h = SEG / 2;
        w.put(buf.at(base), &vals[..h], t)
            .ctx(format_args!("put<{name}> to PE {t}"))?;
        w.put(buf.at(base + h), &vals[h..SEG - 1], t)
            .ctx(format_args!("put<{name}> to PE {t} mid"))?;
        w.p(buf.at(base + SEG - 1), vals[SEG - 1], t)
            .ctx(format_args!("p<{name}> to PE {t}"))?;
        // Zero-length transfers are fine and write nothing.
        w.put(buf.at(base), &[], t).ctx("put of nothing")?;
    }
    c.barrier("put/p")?;
    expect_buf(format_args!("put/p: my buffer"), &buf, |i| {
        expected::<T>(me, i)
    })?;

    for t in 0..n {
        // A whole segment written by PE s on PE t, into a local buffer with guards around it.
        let s = (t + 1) % n;
        let mut dst = vec![T::poison(); SEG + 2];
        w.get(&mut dst[1..SEG + 1], buf.at(s * STRIDE), t)
            .ctx(format_args!("get<{name}> from PE {t}"))?;
        expect_slice(
            format_args!("get of PE {s}'s segment from PE {t}"),
            &dst,
            |i| {
                if i == 0 || i == SEG + 1 {
                    T::poison()
                } else {
                    val(s, t, s * STRIDE + i - 1)
                }
            },
        )?;
        // The whole allocation.
        let mut all = vec![T::poison(); len];
        w.get(&mut all, buf.as_ptr(), t)
            .ctx(format_args!("get<{name}> all from PE {t}"))?;
        expect_slice(format_args!("get of all of PE {t}'s buffer"), &all, |i| {
            expected::<T>(t, i)
        })?;
        // First, middle and last element with g.
        for idx in [0, len / 2, len - 1] {
            let got = w
                .g(buf.at(idx), t)
                .ctx(format_args!("g<{name}> from PE {t}"))?;
            expect_val(
                format_args!("g of element {idx} from PE {t}"),
                expected::<T>(t, idx),
                got,
            )?;
        }
    }
    c.barrier("get/g")?;
    w.free(buf).ctx("free")?;
    Ok(())
}

/// putmem/getmem at odd offsets and lengths, the last one ending at the allocation's end.
fn bytes(c: &Ctx<'_>) -> R {
    let (w, me) = (c.w, c.me);
    let (succ, pred) = (c.succ(), c.pred());
    const SIZE: usize = 1021;
    let ranges = [
        (0usize, 1usize),
        (1, 3),
        (7, 7),
        (64, 13),
        (300, 255),
        (SIZE - 17, 17),
    ];
    let p = w.malloc_bytes(SIZE).ctx("malloc_bytes")?;
    poke(w, p, 0xA5, SIZE)?;
    c.barrier("poisoning bytes")?;
    for &(o, l) in &ranges {
        let data: Vec<u8> = (o..o + l).map(|i| byte(me, succ, i)).collect();
        w.putmem(p.wrapping_add(o), &data, succ)
            .ctx(format_args!("putmem of {l} bytes at {o}"))?;
    }
    w.putmem(p, &[], succ).ctx("putmem of 0 bytes")?;
    c.barrier("putmem")?;
    let mine = peek(w, p, SIZE)?;
    for (i, &b) in mine.iter().enumerate() {
        let written = ranges.iter().any(|&(o, l)| (o..o + l).contains(&i));
        let want = if written { byte(pred, c.me, i) } else { 0xA5 };
        ensure!(
            b == want,
            "putmem from PE {pred}: byte {i} of {SIZE}: expected {want:#04x}, got {b:#04x}"
        );
    }
    for &(o, l) in &ranges {
        let mut got = vec![0u8; l + 2];
        w.getmem(&mut got[1..l + 1], p.wrapping_add(o), succ)
            .ctx("getmem")?;
        let want: Vec<u8> = std::iter::once(0)
            .chain((o..o + l).map(|i| byte(me, succ, i)))
            .chain(std::iter::once(0))
            .collect();
        expect_eq(
            format_args!("getmem of {l} bytes at {o} from PE {succ}"),
            want,
            got,
        )?;
    }
    w.getmem(&mut [], p, succ).ctx("getmem of 0 bytes")?;
    c.barrier("getmem")?;
    w.free_bytes(p).ctx("free_bytes")?;
    Ok(())
}

/// put_nbi, get_nbi, putmem_nbi, getmem_nbi, completed by quiet.
fn nbi<T: Val>(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    const LEN: usize = 21;
    let buf = w.malloc::<T>(LEN).ctx("malloc")?;
    let raw = w.malloc_bytes(LEN).ctx("malloc_bytes")?;
    fill(&buf, |_| T::poison())?;
    poke(w, raw, 0xA5, LEN)?;
    c.barrier("poisoning for nbi")?;
    // Elements 0..10 with put_nbi, 10 with nothing (stays poison), 11..21 in two put_nbi calls.
    let vals: Vec<T> = (0..LEN).map(|i| val_r(me, succ, i, 7)).collect();
    w.put_nbi(buf.as_ptr(), &vals[..10], succ).ctx("put_nbi")?;
    w.put_nbi(buf.at(11), &vals[11..15], succ).ctx("put_nbi")?;
    w.put_nbi(buf.at(15), &vals[15..], succ).ctx("put_nbi")?;
    let bytes: Vec<u8> = (0..LEN).map(|i| byte(me, succ, i + 1000)).collect();
    w.putmem_nbi(raw.wrapping_add(1), &bytes[1..LEN - 1], succ)
        .ctx("putmem_nbi")?;
    w.quiet().ctx("quiet")?;
    c.barrier("put_nbi")?;
    let expect = |i: usize| {
        if i == 10 {
            T::poison()
        } else {
            val_r(pred, me, i, 7)
        }
    };
    expect_buf("put_nbi", &buf, expect)?;
    let got = peek(w, raw, LEN)?;
    for (i, &b) in got.iter().enumerate() {
        let want = if i == 0 || i == LEN - 1 {
            0xA5
        } else {
            byte(pred, me, i + 1000)
        };
        ensure!(
            b == want,
            "putmem_nbi from PE {pred}: byte {i}: expected {want:#04x}, got {b:#04x}"
        );
    }
    let mut g = vec![T::poison(); LEN];
    w.get_nbi(&mut g[2..], buf.at(2), succ).ctx("get_nbi")?;
    let mut gb = vec![0u8; LEN];
    w.getmem_nbi(&mut gb, raw, succ).ctx("getmem_nbi")?;
    w.quiet().ctx("quiet")?;
    expect_slice("get_nbi", &g, |i| {
        if i < 2 || i == 10 {
            T::poison()
        } else {
            val_r(me, succ, i, 7)
        }
    })?;
    let want: Vec<u8> = (0..LEN)
        .map(|i| {
            if i == 0 || i == LEN - 1 {
                0xA5
            } else {
                byte(me, succ, i + 1000)
            }
        })
        .collect();
    expect_eq("getmem_nbi", want, gb)?;
    c.barrier("get_nbi")?;
    w.free_bytes(raw).ctx("free_bytes")?;
    w.free(buf).ctx("free")?;
    Ok(())
}

/// `put_nbi_deferred` / `get_nbi_deferred` (the C ABI's `_nbi` forms, which may touch the
/// local buffer until quiet): many transfers of several sizes in flight at once, to succ,
/// completed only by quiet, then every element checked on both ends.
fn deferred<T: Val>(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    // Pieces of 1, 2, 4, ... 4096 elements, each issued as its own transfer, back to back.
    let pieces: Vec<(usize, usize)> = (0..13)
        .scan(0, |at, k| {
            let len = 1usize << k;
            let piece = (*at, len);
            *at += len + 1; // one guard element between pieces
            Some(piece)
        })
        .collect();
    let len = pieces.last().map(|&(at, n)| at + n + 1).unwrap_or(0);
    let buf = w.malloc::<T>(len).ctx("malloc")?;
    fill(&buf, |_| T::poison())?;
    c.barrier("poisoning for deferred nbi")?;
    let vals: Vec<T> = (0..len).map(|i| val_r(me, succ, i, 11)).collect();
    for &(at, n) in &pieces {
        // SAFETY: `vals` is neither written nor dropped before the quiet below.
        unsafe { w.put_nbi_deferred(buf.at(at), vals[at..].as_ptr(), n, succ) }
            .ctx("put_nbi_deferred")?;
    }
    w.quiet().ctx("quiet")?;
    c.barrier("deferred put_nbi")?;
    let inside = |i: usize| pieces.iter().any(|&(at, n)| (at..at + n).contains(&i));
    expect_buf("put_nbi_deferred", &buf, |i| {
        if inside(i) {
            val_r(pred, me, i, 11)
        } else {
            T::poison()
        }
    })?;
    let mut got = vec![T::poison(); len];
    for &(at, n) in &pieces {
        // SAFETY: `got` is neither read nor dropped before the quiet below.
        unsafe { w.get_nbi_deferred(got[at..].as_mut_ptr(), buf.at(at), n, succ) }
            .ctx("get_nbi_deferred")?;
    }
    w.quiet().ctx("quiet")?;
    expect_slice("get_nbi_deferred", &got, |i| {
        if inside(i) {
            val_r(me, succ, i, 11)
        } else {
            T::poison()
        }
    })?;
    c.barrier("deferred get_nbi")?;
    w.free(buf).ctx("free")
}

/// iput with target stride 3 and source stride 2 starting at element 1; iget with target
/// stride 2 and source stride 3.
fn strided<T: Val>(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    const K: usize = 5;
    const LEN: usize = 1 + 3 * (K - 1) + 1 + 2;
    let buf = w.malloc::<T>(LEN).ctx("malloc")?;
    fill(&buf, |_| T::poison())?;
    c.barrier("poisoning for iput")?;
    let src: Vec<T> = (0..2 * K - 1).map(|j| val(me, succ, 1000 + j)).collect();
    w.iput(buf.at(1), &src, 3, 2, K, succ)
        .ctx("iput(dst 3, sst 2)")?;
    w.iput(buf.at(0), &src, 1, 1, 0, succ)
        .ctx("iput of 0 elements")?;
    c.barrier("iput")?;
    let hit = |idx: usize| idx >= 1 && (idx - 1) % 3 == 0 && (idx - 1) / 3 < K;
    expect_buf(format_args!("iput from PE {pred}"), &buf, |idx| {
        if hit(idx) {
            val(pred, me, 1000 + 2 * ((idx - 1) / 3))
        } else {
            T::poison()
        }
    })?;
    let mut dst = vec![T::poison(); 2 * (K - 1) + 2];
    w.iget(&mut dst, buf.at(1), 2, 3, K, succ)
        .ctx("iget(dst 2, sst 3)")?;
    expect_slice(format_args!("iget from PE {succ}"), &dst, |i| {
        if i % 2 == 0 && i / 2 < K {
            val(me, succ, 1000 + i)
        } else {
            T::poison()
        }
    })?;
    // Unit strides behave like put.
    c.barrier("iget")?;
    let unit: Vec<T> = (0..3).map(|j| val(me, succ, 2000 + j)).collect();
    w.iput(buf.at(LEN - 3), &unit, 1, 1, 3, succ)
        .ctx("iput(1, 1)")?;
    c.barrier("unit iput")?;
    for j in 0..3 {
        let got = buf.read(LEN - 3 + j).unwrap_or(T::poison());
        expect_val(
            format_args!("iput(1, 1) element {}", LEN - 3 + j),
            val(pred, me, 2000 + j),
            got,
        )?;
    }
    c.barrier("unit iput check")?;
    w.free(buf).ctx("free")?;
    Ok(())
}

/// A writer thread puts K elements to the next PE, each followed by fence and a flag update;
/// the target watches the flag and every element the flag covers must already be there.
fn fence_order(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    const K: usize = 64;
    let data = w.calloc::<u64>(K).ctx("calloc")?;
    let flag = w.calloc::<u64>(1).ctx("calloc")?;
    c.barrier("calloc for fence")?;
    let writer = || -> R {
        for k in 0..K {
            w.p(data.at(k), val(me, succ, k), succ).ctx("p")?;
            w.fence();
            w.atomic_set(flag.as_ptr(), k as u64 + 1, succ)
                .ctx("atomic_set")?;
        }
        Ok(())
    };
    let reader = || -> R {
        let mut seen = 0usize;
        poll_until(
            "fence: waiting for all flags",
            Duration::from_secs(30),
            || {
                let f = w.atomic_fetch(flag.as_ptr(), me).ctx("atomic_fetch")? as usize;
                ensure!(f <= K && f >= seen, "fence: flag went from {seen} to {f}");
                for k in seen..f {
                    let got = data.read(k).map_err(|e| Fail(format!("unreadable: {e}")))?;
                    expect_val(
                        format_args!("fence: element {k} from PE {pred} once the flag said {f}"),
                        val(pred, me, k),
                        got,
                    )?;
                }
                seen = f;
                Ok((f == K).then_some(()))
            },
        )
    };
    crate::check::after_delay(Duration::ZERO, writer, reader)?;
    c.barrier("fence")?;
    w.free(flag).ctx("free")?;
    w.free(data).ctx("free")?;
    Ok(())
}

/// `tcp-big`: a 128 MiB get from succ and a 128 MiB put to succ, both chunked by the transport
/// when succ is remote; every byte is checked.
pub fn big(c: &Ctx<'_>) -> R {
    const LEN: usize = 128 << 20;
    const BLOCK: usize = 4096;
    let (w, me) = (c.w, c.me);
    // A 4 KiB pattern of the PE, each block stamped with its number (fast in debug builds).
    let pattern = |pe: usize| -> Vec<u8> {
        let tpl: Vec<u8> = (0..BLOCK).map(|i| (i * 131 + pe * 7 + 1) as u8).collect();
        let mut v = vec![0u8; LEN];
        for (k, b) in v.chunks_exact_mut(BLOCK).enumerate() {
            b.copy_from_slice(&tpl);
            b[..8].copy_from_slice(&((k as u64) << 8 | pe as u64).to_le_bytes());
        }
        v
    };
    let first_diff = |a: &[u8], b: &[u8]| (0..a.len()).find(|&i| a[i] != b[i]).unwrap_or(0);
    let buf = w.malloc::<u8>(LEN).ctx("malloc")?;
    let mine = pattern(me);
    buf.copy_from_slice(&mine).ctx("copy_from_slice")?;
    c.barrier("fill")?;
    let mut got = vec![0u8; LEN];
    w.getmem(&mut got, buf.as_ptr(), c.succ()).ctx("getmem")?;
    let want = pattern(c.succ());
    if got != want {
        return Err(crate::check::Fail(format!(
            "getmem of {LEN} bytes from PE {}: first wrong byte at {}",
            c.succ(),
            first_diff(&got, &want)
        )));
    }
    drop((got, want));
    c.barrier("get")?;
    w.putmem(buf.as_ptr(), &mine, c.succ()).ctx("putmem")?;
    w.quiet().ctx("quiet")?;
    c.barrier("put")?;
    let now = buf.to_vec().ctx("to_vec")?;
    let want = pattern(c.pred());
    if now != want {
        return Err(crate::check::Fail(format!(
            "putmem of {LEN} bytes from PE {}: first wrong byte at {}",
            c.pred(),
            first_diff(&now, &want)
        )));
    }
    c.barrier("check")?;
    w.free(buf).ctx("free")
}
