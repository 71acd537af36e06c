//! `errors`: every bad argument gives the right error variant, a message that starts with the
//! call's name, and writes nothing: the poisoned targets (on this PE and the next) are checked
//! after a barrier following every group.

use rshmem::{Cmp, SignalOp, SymBuf};

use crate::check::{
    expect_buf, expect_contains, expect_err, expect_slice, fill, peek, poke, Context, Ctx, Kind, R,
};
use crate::ensure;
use crate::vals::{val, Val};

/// Elements of `tgt`: 56 bytes, so the rest of its 64-byte block is padding.
const LEN: usize = 7;
const RAW: usize = 40;

struct Targets<'w> {
    tgt: SymBuf<'w, u64>,
    tgt8: SymBuf<'w, u64>,
    next: SymBuf<'w, u64>,
    sig: SymBuf<'w, u64>,
    small: SymBuf<'w, u32>,
    raw: *mut u8,
}

impl Targets<'_> {
    /// Checks that this PE's copies still hold the poison.
    fn verify(&self, c: &Ctx<'_>, step: &str) -> R {
        c.barrier(step)?;
        let what = format!("after {step}");
        for (name, b) in [
            ("tgt", &self.tgt),
            ("tgt8", &self.tgt8),
            ("next", &self.next),
            ("sig", &self.sig),
        ] {
            expect_buf(format_args!("{what}: {name} must be unchanged"), b, |_| {
                u64::poison()
            })?;
        }
        expect_buf(
            format_args!("{what}: small must be unchanged"),
            &self.small,
            |_| u32::poison(),
        )?;
        let got = peek(c.w, self.raw, RAW)?;
        ensure!(
            got.iter().all(|&b| b == 0xA5),
            "{what}: raw bytes changed: {got:02x?}"
        );
        c.barrier(step)
    }
}

pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    let t = Targets {
        tgt: w.malloc::<u64>(LEN).ctx("malloc")?,
        tgt8: w.malloc::<u64>(8).ctx("malloc")?,
        next: w.malloc::<u64>(8).ctx("malloc")?,
        sig: w.malloc::<u64>(2).ctx("malloc")?,
        small: w.malloc::<u32>(4).ctx("malloc")?,
        raw: w.malloc_bytes(RAW).ctx("malloc_bytes")?,
    };
    ensure!(
        t.tgt8.at(8) == t.next.as_ptr(),
        "layout: expected `next` right after `tgt8` (for the straddling-range checks)"
    );
    for b in [&t.tgt, &t.tgt8, &t.next, &t.sig] {
        fill(b, |_| u64::poison())?;
    }
    fill(&t.small, |_| u32::poison())?;
    poke(w, t.raw, 0xA5, RAW)?;
    t.verify(c, "poisoning")?;

    for pe in [c.n, c.n + 1, usize::MAX] {
        bad_pe(c, &t, pe)?;
        t.verify(c, &format!("calls to PE {pe}"))?;
    }
    for pe in [c.me, c.succ()] {
        non_heap(c, &t, pe)?;
        t.verify(c, "calls with non-symmetric addresses")?;
        past_end(c, &t, pe)?;
        t.verify(c, "ranges past the end")?;
        freed(c, pe)?;
        t.verify(c, "calls on freed memory")?;
        misaligned(c, &t, pe)?;
        t.verify(c, "misaligned atomics and signals")?;
        strides(c, &t, pe)?;
        t.verify(c, "bad strides")?;
    }
    collectives(c, &t)?;
    t.verify(c, "bad collective calls")?;
    local(c, &t)?;
    t.verify(c, "bad local calls")?;

    w.free_bytes(t.raw).ctx("free_bytes")?;
    w.free(t.small).ctx("free")?;
    w.free(t.sig).ctx("free")?;
    w.free(t.next).ctx("free")?;
    w.free(t.tgt8).ctx("free")?;
    w.free(t.tgt).ctx("free")?;
    Ok(())
}

fn src() -> Vec<u64> {
    (0..8).map(|i| val(77, 77, i)).collect()
}

/// Every one-sided call with PE `pe` out of range: InvalidArgument naming the call and the PE.
fn bad_pe(c: &Ctx<'_>, t: &Targets<'_>, pe: usize) -> R {
    let w = c.w;
    let s = src();
    let p = t.tgt.as_ptr();
    let b = t.raw;
    let sig = t.sig.as_ptr();
    let pe_text = format!("PE {pe} is out of range");
    let check = |call: &str, e: rshmem::Result<()>| -> R {
        let e = expect_err(format_args!("{call} to PE {pe}"), e, Kind::Invalid, call)?;
        expect_contains(
            format_args!("{call} to PE {pe}"),
            &e.to_string(),
            &[&pe_text],
        )
    };
    check("put", w.put(p, &s[..3], pe))?;
    check("put", w.put(p, &[], pe))?;
    check("put_nbi", w.put_nbi(p, &s[..3], pe))?;
    check("p", w.p(p, s[0], pe))?;
    check("putmem", w.putmem(b, &[1, 2, 3], pe))?;
    check("putmem_nbi", w.putmem_nbi(b, &[1, 2, 3], pe))?;
    // SAFETY: `s` outlives the quiet at the end of the scenario (and nothing is posted).
    check("put_nbi", unsafe {
        w.put_nbi_deferred(p, s.as_ptr(), 3, pe)
    })?;
    check("iput", w.iput(p, &s, 2, 1, 3, pe))?;
    let mut d = vec![u64::poison(); 3];
    check("get", w.get(&mut d, p, pe))?;
    check("get_nbi", w.get_nbi(&mut d, p, pe))?;
    // SAFETY: as above, for `d`.
    check("get_nbi", unsafe {
        w.get_nbi_deferred(d.as_mut_ptr(), p, 3, pe)
    })?;
    check("iget", w.iget(&mut d, p, 1, 2, 3, pe))?;
    expect_slice(
        format_args!("local buffer after gets from PE {pe}"),
        &d,
        |_| u64::poison(),
    )?;
    let mut db = [0xA5u8; 5];
    check("getmem", w.getmem(&mut db, b, pe))?;
    check("getmem_nbi", w.getmem_nbi(&mut db, b, pe))?;
    ensure!(
        db == [0xA5; 5],
        "getmem from PE {pe} changed the local buffer: {db:?}"
    );
    check("g", w.g(p, pe).map(drop))?;
    check("atomic_fetch", w.atomic_fetch(p, pe).map(drop))?;
    check("atomic_set", w.atomic_set(p, 1u64, pe))?;
    check("atomic_swap", w.atomic_swap(p, 1u64, pe).map(drop))?;
    check(
        "atomic_compare_swap",
        w.atomic_compare_swap(p, u64::poison(), 1, pe).map(drop),
    )?;
    check(
        "atomic_fetch_add",
        w.atomic_fetch_add(p, 1u64, pe).map(drop),
    )?;
    check("atomic_add", w.atomic_add(p, 1u64, pe))?;
    check("atomic_fetch_inc", w.atomic_fetch_inc(p, pe).map(drop))?;
    check("atomic_inc", w.atomic_inc(p, pe))?;
    check(
        "atomic_fetch_and",
        w.atomic_fetch_and(p, 0u64, pe).map(drop),
    )?;
    check("atomic_fetch_or", w.atomic_fetch_or(p, 1u64, pe).map(drop))?;
    check(
        "atomic_fetch_xor",
        w.atomic_fetch_xor(p, 1u64, pe).map(drop),
    )?;
    check("atomic_and", w.atomic_and(p, 0u64, pe))?;
    check("atomic_or", w.atomic_or(p, 1u64, pe))?;
    check("atomic_xor", w.atomic_xor(p, 1u64, pe))?;
    check(
        "atomic_fetch",
        w.atomic_fetch(t.small.as_ptr(), pe).map(drop),
    )?;
    check(
        "atomic_set",
        w.atomic_set(t.small.as_ptr().cast::<f32>(), 1.5f32, pe),
    )?;
    check(
        "put_signal",
        w.put_signal(p, &s[..2], sig, 1, SignalOp::Set, pe),
    )?;
    check(
        "put_signal",
        w.put_signal(p, &[], sig, 1, SignalOp::Add, pe),
    )?;
    check(
        "put_signal_nbi",
        w.put_signal_nbi(p, &s[..2], sig, 1, SignalOp::Add, pe),
    )?;
    check("signal_op", w.signal_op(sig, 1, SignalOp::Set, pe))?;
    Ok(())
}

/// Addresses outside the symmetric heap: a stack array, a Vec, null; and the deferred `_nbi`
/// forms' own checks of the local buffer (null, misaligned).
fn non_heap(c: &Ctx<'_>, t: &Targets<'_>, pe: usize) -> R {
    let w = c.w;
    let s = src();
    let local = |call: &str, what: &str, e: rshmem::Result<()>, text: &str| -> R {
        let what = format!("{call} with {what} on PE {pe}");
        let e = expect_err(&what, e, Kind::Invalid, call)?;
        expect_contains(&what, &e.to_string(), &[text])
    };
    let odd = s.as_ptr().cast::<u8>().wrapping_add(1).cast::<u64>();
    // SAFETY: the calls are refused before they read or write anything.
    unsafe {
        let p = t.tgt.as_ptr();
        let null = std::ptr::null_mut::<u64>();
        local(
            "put_nbi",
            "a null source",
            w.put_nbi_deferred(p, null, 2, pe),
            "null",
        )?;
        local(
            "put_nbi",
            "a misaligned source",
            w.put_nbi_deferred(p, odd, 2, pe),
            "misaligned",
        )?;
        local(
            "get_nbi",
            "a null destination",
            w.get_nbi_deferred(null, p, 2, pe),
            "null",
        )?;
        local(
            "get_nbi",
            "a misaligned destination",
            w.get_nbi_deferred(odd.cast_mut(), p, 2, pe),
            "misaligned",
        )?;
    }
    let mut stack = [u64::poison(); 8];
    let mut heap_vec = vec![u64::poison(); 8];
    let addrs: [(&str, *mut u64); 3] = [
        ("a stack array", stack.as_mut_ptr()),
        ("a Vec", heap_vec.as_mut_ptr()),
        ("null", std::ptr::null_mut()),
    ];
    for (name, a) in addrs {
        let shown = format!("{:#x}", a as usize);
        let check = |call: &str, e: rshmem::Result<()>| -> R {
            let what = format!("{call} with {name} ({shown}) on PE {pe}");
            let e = expect_err(&what, e, Kind::NotSymmetric, call)?;
            expect_contains(&what, &e.to_string(), &[&shown])
        };
        let ab = a.cast::<u8>();
        check("put", w.put(a, &s[..2], pe))?;
        check("put_nbi", w.put_nbi(a, &s[..2], pe))?;
        check("p", w.p(a, 5u64, pe))?;
        check("putmem", w.putmem(ab, &[1, 2], pe))?;
        check("putmem_nbi", w.putmem_nbi(ab, &[1, 2], pe))?;
        // SAFETY: `s` outlives the scenario's next quiet (and nothing is posted).
        check("put_nbi", unsafe {
            w.put_nbi_deferred(a, s.as_ptr(), 2, pe)
        })?;
        check("iput", w.iput(a, &s, 2, 2, 2, pe))?;
        let mut d = vec![u64::poison(); 2];
        check("get", w.get(&mut d, a, pe))?;
        check("get_nbi", w.get_nbi(&mut d, a, pe))?;
        // SAFETY: `d` outlives the scenario's next quiet (and nothing is posted).
        check("get_nbi", unsafe {
            w.get_nbi_deferred(d.as_mut_ptr(), a, 2, pe)
        })?;
        check("iget", w.iget(&mut d, a, 1, 1, 2, pe))?;
        expect_slice(
            format_args!("local buffer after gets from {name}"),
            &d,
            |_| u64::poison(),
        )?;
        let mut db = [0xA5u8; 2];
        check("getmem", w.getmem(&mut db, ab, pe))?;
        check("getmem_nbi", w.getmem_nbi(&mut db, ab, pe))?;
        ensure!(
            db == [0xA5; 2],
            "getmem from {name} changed the local buffer"
        );
        check("g", w.g(a, pe).map(drop))?;
        check("atomic_fetch", w.atomic_fetch(a, pe).map(drop))?;
        check("atomic_set", w.atomic_set(a, 5u64, pe))?;
        check(
            "atomic_fetch_add",
            w.atomic_fetch_add(a, 5u64, pe).map(drop),
        )?;
        check(
            "atomic_compare_swap",
            w.atomic_compare_swap(a, u64::poison(), 5, pe).map(drop),
        )?;
        check("atomic_or", w.atomic_or(a, 5u64, pe))?;
        // A bad data address with a good signal, and the other way round: neither is written.
        check(
            "put_signal",
            w.put_signal(a, &s[..2], t.sig.as_ptr(), 9, SignalOp::Set, pe),
        )?;
        let e = w.put_signal(t.tgt.as_ptr(), &s[..2], a, 9, SignalOp::Set, pe);
        check("put_signal", e)?;
        check(
            "put_signal_nbi",
            w.put_signal_nbi(t.tgt.as_ptr(), &s[..2], a, 9, SignalOp::Add, pe),
        )?;
        check("signal_op", w.signal_op(a, 9, SignalOp::Add, pe))?;
        if pe == c.me {
            // The local calls.
            check("signal_fetch", w.signal_fetch(a).map(drop))?;
            check(
                "signal_wait_until",
                w.signal_wait_until(a, Cmp::Eq, 0).map(drop),
            )?;
            check("wait_until", w.wait_until(a, Cmp::Eq, 0u64))?;
            check("test", w.test(a, Cmp::Eq, 0u64).map(drop))?;
            check(
                "wait_until_all",
                w.wait_until_all(a, 2, None, Cmp::Eq, 0u64),
            )?;
            check(
                "wait_until_any_vector",
                w.wait_until_any_vector(a, None, Cmp::Eq, &[0u64, 0])
                    .map(drop),
            )?;
            check(
                "test_some",
                w.test_some(a, 2, None, Cmp::Eq, 0u64).map(drop),
            )?;
        }
    }
    expect_slice("the stack array", &stack, |_| u64::poison())?;
    expect_slice("the Vec", &heap_vec, |_| u64::poison())?;
    Ok(())
}

/// Ranges that run past their allocation by one element (or byte), into padding or into the
/// next allocation.
fn past_end(c: &Ctx<'_>, t: &Targets<'_>, pe: usize) -> R {
    let w = c.w;
    let s = src();
    let check = |what: &str, call: &str, e: rshmem::Result<()>| -> R {
        let what = format!("{what} on PE {pe}");
        expect_err(&what, e, Kind::NotSymmetric, call).map(drop)
    };
    let tgt = &t.tgt;
    check(
        "put of 3 elements at LEN-2",
        "put",
        w.put(tgt.at(LEN - 2), &s[..3], pe),
    )?;
    check(
        "put_nbi of 3 elements at LEN-2",
        "put_nbi",
        w.put_nbi(tgt.at(LEN - 2), &s[..3], pe),
    )?;
    check(
        "deferred put_nbi of 3 elements at LEN-2",
        "put_nbi",
        // SAFETY: `s` outlives the scenario's next quiet (and nothing is posted).
        unsafe { w.put_nbi_deferred(tgt.at(LEN - 2), s.as_ptr(), 3, pe) },
    )?;
    check(
        "put of LEN+1 elements",
        "put",
        w.put(tgt.as_ptr(), &s[..LEN + 1], pe),
    )?;
    check("p at LEN", "p", w.p(tgt.at(LEN), 1u64, pe))?;
    check(
        "putmem one byte past",
        "putmem",
        w.putmem(
            tgt.as_ptr().cast::<u8>().wrapping_add(LEN * 8 - 3),
            &[1, 2, 3, 4],
            pe,
        ),
    )?;
    check(
        "putmem one byte past raw",
        "putmem",
        w.putmem(t.raw.wrapping_add(RAW - 1), &[1, 2], pe),
    )?;
    check(
        "iput spanning 9 of 7 elements",
        "iput",
        w.iput(tgt.as_ptr(), &s, 4, 1, 3, pe),
    )?;
    let mut d = vec![u64::poison(); 9];
    check(
        "get of 3 elements at LEN-2",
        "get",
        w.get(&mut d[..3], tgt.at(LEN - 2), pe),
    )?;
    check(
        "get_nbi of 3 elements at LEN-2",
        "get_nbi",
        w.get_nbi(&mut d[..3], tgt.at(LEN - 2), pe),
    )?;
    check(
        "deferred get_nbi of 3 elements at LEN-2",
        "get_nbi",
        // SAFETY: `d` outlives the scenario's next quiet (and nothing is posted).
        unsafe { w.get_nbi_deferred(d.as_mut_ptr(), tgt.at(LEN - 2), 3, pe) },
    )?;
    check(
        "iget spanning 9 of 7 elements",
        "iget",
        w.iget(&mut d, tgt.as_ptr(), 1, 4, 3, pe),
    )?;
    expect_slice("local buffer after failed gets", &d, |_| u64::poison())?;
    check("g at LEN", "g", w.g(tgt.at(LEN), pe).map(drop))?;
    check(
        "atomic_fetch_add at LEN",
        "atomic_fetch_add",
        w.atomic_fetch_add(tgt.at(LEN), 1u64, pe).map(drop),
    )?;
    check(
        "atomic_set at LEN",
        "atomic_set",
        w.atomic_set(tgt.at(LEN), 1u64, pe),
    )?;
    // Straddling into the allocation that follows.
    check(
        "put straddling into the next allocation",
        "put",
        w.put(t.tgt8.at(6), &s[..3], pe),
    )?;
    check(
        "putmem straddling into the next allocation",
        "putmem",
        w.putmem(t.tgt8.at(7).cast::<u8>(), &[0; 9], pe),
    )?;
    check(
        "put_signal with data past the end",
        "put_signal",
        w.put_signal(
            tgt.at(LEN - 1),
            &s[..2],
            t.sig.as_ptr(),
            1,
            SignalOp::Set,
            pe,
        ),
    )?;
    check(
        "signal_op at the end",
        "signal_op",
        w.signal_op(t.sig.at(2), 1, SignalOp::Set, pe),
    )?;
    if pe == c.me {
        check(
            "wait_until_all past the end",
            "wait_until_all",
            w.wait_until_all(tgt.at(LEN - 2), 3, None, Cmp::Eq, 0u64),
        )?;
        check(
            "test_any past the end",
            "test_any",
            w.test_any(tgt.at(LEN - 1), 2, None, Cmp::Eq, 0u64)
                .map(drop),
        )?;
        check(
            "wait_until at LEN",
            "wait_until",
            w.wait_until(tgt.at(LEN), Cmp::Eq, 0u64),
        )?;
    }
    Ok(())
}

/// Addresses of an allocation that was freed, after they were used successfully (so any
/// cached lookup of that allocation must be dropped by free).
fn freed(c: &Ctx<'_>, pe: usize) -> R {
    let w = c.w;
    let f = w.malloc::<u64>(4).ctx("malloc")?;
    let fp = f.as_ptr();
    w.p(f.at(3), 1u64, pe).ctx("p before free")?;
    w.g(fp, pe).ctx("g before free")?;
    w.atomic_fetch(f.at(1), pe)
        .ctx("atomic_fetch before free")?;
    w.free(f).ctx("free")?;
    let check = |call: &str, e: rshmem::Result<()>| -> R {
        let what = format!("{call} on freed memory of PE {pe}");
        let e = expect_err(&what, e, Kind::NotSymmetric, call)?;
        expect_contains(&what, &e.to_string(), &["not inside a live allocation"])
    };
    check("p", w.p(fp.wrapping_add(3), 2u64, pe))?;
    check("g", w.g(fp, pe).map(drop))?;
    check("put", w.put(fp, &[1, 2], pe))?;
    let mut d = [0u64; 2];
    check("get", w.get(&mut d, fp, pe))?;
    check(
        "atomic_fetch",
        w.atomic_fetch(fp.wrapping_add(1), pe).map(drop),
    )?;
    check("atomic_inc", w.atomic_inc(fp, pe))?;
    check("signal_op", w.signal_op(fp, 1, SignalOp::Add, pe))?;
    if pe == c.me {
        check("wait_until", w.wait_until(fp, Cmp::Eq, 0u64))?;
        check("signal_fetch", w.signal_fetch(fp).map(drop))?;
    }
    Ok(())
}

/// Atomics and signals on misaligned addresses: InvalidArgument, nothing written.
fn misaligned(c: &Ctx<'_>, t: &Targets<'_>, pe: usize) -> R {
    let w = c.w;
    let s = src();
    let check = |what: &str, call: &str, e: rshmem::Result<()>, bytes: usize| -> R {
        let what = format!("{what} on PE {pe}");
        let e = expect_err(&what, e, Kind::Invalid, call)?;
        expect_contains(&what, &e.to_string(), &[&format!("{bytes}-byte aligned")])
    };
    let m8 = t.tgt.as_ptr().cast::<u8>().wrapping_add(1).cast::<u64>();
    check(
        "atomic_fetch at byte 1 of a u64 buffer",
        "atomic_fetch",
        w.atomic_fetch(m8, pe).map(drop),
        8,
    )?;
    check(
        "atomic_set at byte 1",
        "atomic_set",
        w.atomic_set(m8, 1u64, pe),
        8,
    )?;
    check(
        "atomic_swap at byte 1",
        "atomic_swap",
        w.atomic_swap(m8, 1u64, pe).map(drop),
        8,
    )?;
    check(
        "atomic_compare_swap at byte 1",
        "atomic_compare_swap",
        w.atomic_compare_swap(m8, 0, 1u64, pe).map(drop),
        8,
    )?;
    check(
        "atomic_fetch_add at byte 1",
        "atomic_fetch_add",
        w.atomic_fetch_add(m8, 1u64, pe).map(drop),
        8,
    )?;
    check(
        "atomic_add at byte 1",
        "atomic_add",
        w.atomic_add(m8, 1u64, pe),
        8,
    )?;
    check(
        "atomic_inc at byte 1",
        "atomic_inc",
        w.atomic_inc(m8, pe),
        8,
    )?;
    check(
        "atomic_fetch_inc at byte 1",
        "atomic_fetch_inc",
        w.atomic_fetch_inc(m8, pe).map(drop),
        8,
    )?;
    check(
        "atomic_and at byte 1",
        "atomic_and",
        w.atomic_and(m8, 0u64, pe),
        8,
    )?;
    check(
        "atomic_fetch_or at byte 1",
        "atomic_fetch_or",
        w.atomic_fetch_or(m8, 1u64, pe).map(drop),
        8,
    )?;
    check(
        "atomic_xor at byte 1",
        "atomic_xor",
        w.atomic_xor(m8, 1u64, pe),
        8,
    )?;
    let m4 = t.small.as_ptr().cast::<u8>().wrapping_add(2).cast::<u32>();
    check(
        "atomic_fetch_add at byte 2 of a u32 buffer",
        "atomic_fetch_add",
        w.atomic_fetch_add(m4, 1u32, pe).map(drop),
        4,
    )?;
    let mf = t.tgt.as_ptr().cast::<u8>().wrapping_add(4).cast::<f64>();
    check(
        "atomic_set::<f64> at byte 4",
        "atomic_set",
        w.atomic_set(mf, 1.0f64, pe),
        8,
    )?;
    let ms = t.sig.as_ptr().cast::<u8>().wrapping_add(4).cast::<u64>();
    check(
        "put_signal with a misaligned signal",
        "put_signal",
        w.put_signal(t.tgt.as_ptr(), &s[..3], ms, 1, SignalOp::Set, pe),
        8,
    )?;
    check(
        "put_signal_nbi with a misaligned signal",
        "put_signal_nbi",
        w.put_signal_nbi(t.tgt.as_ptr(), &s[..3], ms, 1, SignalOp::Add, pe),
        8,
    )?;
    check(
        "signal_op with a misaligned signal",
        "signal_op",
        w.signal_op(ms, 1, SignalOp::Add, pe),
        8,
    )?;
    if pe == c.me {
        check(
            "signal_fetch misaligned",
            "signal_fetch",
            w.signal_fetch(ms).map(drop),
            8,
        )?;
        check(
            "signal_wait_until misaligned",
            "signal_wait_until",
            w.signal_wait_until(ms, Cmp::Eq, 0).map(drop),
            8,
        )?;
        check(
            "wait_until misaligned",
            "wait_until",
            w.wait_until(m8, Cmp::Eq, 0u64),
            8,
        )?;
        check(
            "test misaligned",
            "test",
            w.test(m4, Cmp::Eq, 0u32).map(drop),
            4,
        )?;
        check(
            "wait_until_any misaligned",
            "wait_until_any",
            w.wait_until_any(m8, 2, None, Cmp::Eq, 0u64).map(drop),
            8,
        )?;
    }
    Ok(())
}

/// Zero strides and strides the local buffer cannot hold: InvalidArgument, nothing written.
fn strides(c: &Ctx<'_>, t: &Targets<'_>, pe: usize) -> R {
    let w = c.w;
    let s = src();
    let p = t.tgt.as_ptr();
    let check = |what: &str, call: &str, e: rshmem::Result<()>, part: &str| -> R {
        let what = format!("{what} on PE {pe}");
        let e = expect_err(&what, e, Kind::Invalid, call)?;
        expect_contains(&what, &e.to_string(), &[part])
    };
    check(
        "iput with target stride 0",
        "iput",
        w.iput(p, &s, 0, 1, 3, pe),
        "at least 1",
    )?;
    check(
        "iput with source stride 0",
        "iput",
        w.iput(p, &s, 1, 0, 3, pe),
        "at least 1",
    )?;
    let mut d = vec![u64::poison(); 8];
    check(
        "iget with target stride 0",
        "iget",
        w.iget(&mut d, p, 0, 1, 3, pe),
        "at least 1",
    )?;
    check(
        "iget with source stride 0",
        "iget",
        w.iget(&mut d, p, 1, 0, 3, pe),
        "at least 1",
    )?;
    check(
        "iput from a too short source",
        "iput",
        w.iput(p, &s[..4], 1, 2, 3, pe),
        "source",
    )?;
    check(
        "iget into a too short destination",
        "iget",
        w.iget(&mut d[..4], p, 2, 1, 3, pe),
        "destination",
    )?;
    check(
        "iput with overflowing strides",
        "iput",
        w.iput(p, &s, usize::MAX, 1, 3, pe),
        "overflows",
    )?;
    // Strides whose extent in bytes overflows although the extent in elements does not: a
    // wrapped byte count (2^60·2 + 1 elements of 8 bytes wraps to 8 bytes; 2^61 wraps to
    // offset 0) would pass the range check and let the element loop write elsewhere.
    for stride in [1usize << 60, 1 << 61, 1 << 62] {
        check(
            &format!("iput with target stride {stride:#x}"),
            "iput",
            w.iput(p, &s, stride, 1, 3, pe),
            "overflows",
        )?;
        check(
            &format!("iget with source stride {stride:#x}"),
            "iget",
            w.iget(&mut d, p, 1, stride, 3, pe),
            "overflows",
        )?;
    }
    expect_slice("local buffer after failed igets", &d, |_| u64::poison())?;
    Ok(())
}

/// Bad collective calls: every PE makes them, in the same order.
fn collectives(c: &Ctx<'_>, t: &Targets<'_>) -> R {
    let w = c.w;
    let not_start = t.tgt.as_ptr().cast::<u8>().wrapping_add(8);
    let e = expect_err(
        "free of an address inside an allocation",
        w.free_bytes(not_start),
        Kind::NotSymmetric,
        "free",
    )?;
    expect_contains(
        "free of an address inside an allocation",
        &e.to_string(),
        &["not the start"],
    )?;
    let mut stack = [0u8; 16];
    expect_err(
        "free of a stack address",
        w.free_bytes(stack.as_mut_ptr()),
        Kind::NotSymmetric,
        "free",
    )?;
    expect_err(
        "realloc of an address inside an allocation",
        w.realloc_bytes(not_start, 100),
        Kind::NotSymmetric,
        "realloc",
    )?;
    let d = w.malloc_bytes(64).ctx("malloc_bytes")?;
    w.free_bytes(d).ctx("free_bytes")?;
    expect_err("double free", w.free_bytes(d), Kind::NotSymmetric, "free")?;
    for a in [3usize, 0, 96, usize::MAX] {
        let e = expect_err(
            format_args!("align_bytes({a}, 64)"),
            w.align_bytes(a, 64),
            Kind::Invalid,
            "align",
        )?;
        expect_contains(
            format_args!("align_bytes({a}, 64)"),
            &e.to_string(),
            &["power of two"],
        )?;
    }
    expect_err(
        "align::<u64>(48, 2)",
        w.align::<u64>(48, 2),
        Kind::Invalid,
        "align",
    )?;
    expect_err(
        "calloc_bytes(usize::MAX, 2)",
        w.calloc_bytes(usize::MAX, 2),
        Kind::Invalid,
        "calloc",
    )?;
    expect_err(
        "malloc::<u64>(usize::MAX)",
        w.malloc::<u64>(usize::MAX),
        Kind::Invalid,
        "malloc",
    )?;
    expect_err(
        "calloc::<u32>(usize::MAX)",
        w.calloc::<u32>(usize::MAX),
        Kind::Invalid,
        "calloc",
    )?;
    expect_err(
        "align::<u64>(64, usize::MAX)",
        w.align::<u64>(64, usize::MAX),
        Kind::Invalid,
        "align",
    )?;
    // Collective state is still consistent: a real allocation works on every PE.
    let ok = w
        .calloc::<u64>(2)
        .ctx("calloc after bad collective calls")?;
    w.p(ok.at(1), 3u64, c.succ()).ctx("p")?;
    c.barrier("calloc after errors")?;
    ensure!(
        ok.read(1).ok() == Some(3),
        "allocation after bad collective calls: got {:?}",
        ok.to_vec().ctx("SymBuf::to_vec")?
    );
    w.free(ok).ctx("free")?;
    Ok(())
}

/// Local-only calls with bad arguments.
fn local(c: &Ctx<'_>, t: &Targets<'_>) -> R {
    let w = c.w;
    let p = t.tgt.as_ptr();
    let e = expect_err(
        "wait_until_all with a short status",
        w.wait_until_all(p, 3, Some(&[0, 0]), Cmp::Eq, 0u64),
        Kind::Invalid,
        "wait_until_all",
    )?;
    expect_contains(
        "wait_until_all with a short status",
        &e.to_string(),
        &["status"],
    )?;
    expect_err(
        "test_some with a short status",
        w.test_some(p, 3, Some(&[0]), Cmp::Eq, 0u64),
        Kind::Invalid,
        "test_some",
    )?;
    expect_err(
        "wait_until_some_vector with a short status",
        w.wait_until_some_vector(p, Some(&[0]), Cmp::Eq, &[0u64, 0]),
        Kind::Invalid,
        "wait_until_some_vector",
    )?;
    expect_err(
        "SymBuf::write past the end",
        t.tgt.write(LEN, 1),
        Kind::Invalid,
        "SymBuf::write",
    )?;
    expect_err(
        "SymBuf::copy_from_slice too long",
        t.tgt.copy_from_slice(&src()),
        Kind::Invalid,
        "SymBuf::copy_from_slice",
    )?;
    let e = expect_err(
        "SymBuf::read past the end",
        t.tgt.read(LEN),
        Kind::Invalid,
        "SymBuf::read",
    )?;
    expect_contains(
        "SymBuf::read past the end",
        &e.to_string(),
        &[&format!("index {LEN} out of range for length {LEN}")],
    )?;
    Ok(())
}
