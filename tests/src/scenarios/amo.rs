//! `amo`: every atomic on every AMO type, with all PEs hitting one counter at once.
//!
//! * fetch_add/add (positive and negative addends) → exact sums;
//! * fetch_inc tickets → all distinct and contiguous; inc → exact count;
//! * compare_swap election → exactly one winner; a failing compare_swap changes nothing;
//! * set/fetch/swap on every AMO type, floats included (bit-exact, special values too);
//! * fetch_and/or/xor and and/or/xor with per-PE bits on u32/u64/i32/i64.

use crate::check::{expect_buf, expect_eq, expect_val, fill, Context, Ctx, R};
use crate::vals::{val, Amo, Bitw, Int};
use crate::{each_int_type, ensure};

/// Rounds of each arithmetic atomic per PE.
const ROUNDS: usize = 16;

pub fn run(c: &Ctx<'_>) -> R {
    each_int_type!(arith(c));
    contention::<i32>(c)?;
    contention::<u64>(c)?;
    each_int_type!(election(c));
    each_int_type!(set_fetch_swap(c));
    set_fetch_swap::<f32>(c)?;
    set_fetch_swap::<f64>(c)?;
    float_specials(c)?;
    bitwise::<u32>(c)?;
    bitwise::<u64>(c)?;
    bitwise::<i32>(c)?;
    bitwise::<i64>(c)?;
    Ok(())
}

/// A per-type root PE, so different types hit different PEs.
fn root_for<T: crate::vals::Val>(n: usize) -> usize {
    (T::TAG as usize * 5 + 3) % n
}

fn arith<T: Int>(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let name = T::NAME;
    let root = root_for::<T>(n);
    // [0] fetch_add, [1] add, [2] fetch_inc, [3] inc, [4] fetch_add of negative values
    let ctr = w.calloc::<T>(5).ctx("calloc")?;
    let tickets = w.calloc::<T>(n * ROUNDS).ctx("calloc")?;
    let olds = w.calloc::<T>(n * ROUNDS).ctx("calloc")?;
    c.barrier("calloc counters")?;
    let add = me as i64 + 1;
    let mut my_tickets = Vec::with_capacity(ROUNDS);
    let mut my_olds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        my_olds.push(
            w.atomic_fetch_add(ctr.at(0), T::of(add), root)
                .ctx(format_args!("atomic_fetch_add<{name}>"))?,
        );
        w.atomic_add(ctr.at(1), T::of(2 * add), root)
            .ctx(format_args!("atomic_add<{name}>"))?;
        my_tickets.push(
            w.atomic_fetch_inc(ctr.at(2), root)
                .ctx(format_args!("atomic_fetch_inc<{name}>"))?,
        );
        w.atomic_inc(ctr.at(3), root)
            .ctx(format_args!("atomic_inc<{name}>"))?;
        w.atomic_fetch_add(ctr.at(4), T::of(-add), root)
            .ctx(format_args!("atomic_fetch_add<{name}> negative"))?;
    }
    // Tickets of one PE increase.
    for win in my_tickets.windows(2) {
        ensure!(
            win[0].partial_cmp(&win[1]) == Some(std::cmp::Ordering::Less),
            "fetch_inc<{name}>: my tickets are not increasing: {my_tickets:?}"
        );
    }
    w.put(tickets.at(me * ROUNDS), &my_tickets, root)
        .ctx("put tickets")?;
    w.put(olds.at(me * ROUNDS), &my_olds, root)
        .ctx("put olds")?;
    c.barrier("atomic arithmetic")?;

    let tri = (n * (n + 1) / 2) as i64;
    let total = ROUNDS as i64 * tri;
    let expect = [
        T::of(total),
        T::of(2 * total),
        T::of((n * ROUNDS) as i64),
        T::of((n * ROUNDS) as i64),
        T::of(-total),
    ];
    // Every PE reads the counters atomically from the root.
    for (k, &e) in expect.iter().enumerate() {
        let got = w.atomic_fetch(ctr.at(k), root).ctx("atomic_fetch")?;
        expect_val(
            format_args!("counter {k} on PE {root} after {ROUNDS} rounds of {n} PEs"),
            e,
            got,
        )?;
    }
    if me == root {
        let mut all: Vec<i128> = tickets
            .to_vec()
            .ctx("SymBuf::to_vec")?
            .iter()
            .map(|&t| t.bits() as i128)
            .collect();
        all.sort_unstable();
        let want: Vec<i128> = (0..(n * ROUNDS) as i128).collect();
        expect_eq(
            format_args!("fetch_inc<{name}> tickets of all PEs, sorted"),
            want,
            all,
        )?;
        // fetch_add returns distinct old values (each add is positive).
        let mut o: Vec<u128> = olds
            .to_vec()
            .ctx("SymBuf::to_vec")?
            .iter()
            .map(|&t| t.bits())
            .collect();
        o.sort_unstable();
        o.dedup();
        expect_eq(
            format_args!("fetch_add<{name}>: distinct old values"),
            n * ROUNDS,
            o.len(),
        )?;
    }
    c.barrier("counter checks")?;
    w.free(olds).ctx("free")?;
    w.free(tickets).ctx("free")?;
    w.free(ctr).ctx("free")?;
    Ok(())
}

/// Every PE hammers one counter with fetch_add/inc and another with a compare_swap loop; a
/// lost update shows as a short count.
fn contention<T: Int>(c: &Ctx<'_>) -> R {
    const HAMMER: usize = 3000;
    const CAS_EVERY: usize = 4;
    let (w, n) = (c.w, c.n);
    let name = T::NAME;
    let root = n / 2;
    let ctr = w.calloc::<T>(2).ctx("calloc")?;
    c.barrier("calloc")?;
    for k in 0..HAMMER {
        if k % 2 == 0 {
            w.atomic_fetch_add(ctr.at(0), T::of(1), root)
                .ctx("atomic_fetch_add")?;
        } else {
            w.atomic_inc(ctr.at(0), root).ctx("atomic_inc")?;
        }
        if k % CAS_EVERY == 0 {
            let mut cur = w.atomic_fetch(ctr.at(1), root).ctx("atomic_fetch")?;
            loop {
                let next = T::of(cur.bits() as i64 + 1);
                let seen = w
                    .atomic_compare_swap(ctr.at(1), cur, next, root)
                    .ctx("atomic_compare_swap")?;
                if seen == cur {
                    break;
                }
                cur = seen;
            }
        }
    }
    c.barrier("hammering")?;
    let got = w.atomic_fetch(ctr.at(0), root).ctx("atomic_fetch")?;
    expect_val(
        format_args!("{n} PEs x {HAMMER} fetch_add/inc<{name}> on PE {root}"),
        T::of((n * HAMMER) as i64),
        got,
    )?;
    let got = w.atomic_fetch(ctr.at(1), root).ctx("atomic_fetch")?;
    expect_val(
        format_args!(
            "{n} PEs x {} compare_swap increments<{name}> on PE {root}",
            HAMMER / CAS_EVERY
        ),
        T::of((n * HAMMER / CAS_EVERY) as i64),
        got,
    )?;
    c.barrier("hammer checks")?;
    w.free(ctr).ctx("free")?;
    Ok(())
}

fn election<T: Int>(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let name = T::NAME;
    let root = (root_for::<T>(n) + 1) % n;
    let var = w.calloc::<T>(1).ctx("calloc")?;
    let olds = w.calloc::<T>(n).ctx("calloc")?;
    fill(&olds, |_| T::of(-99))?;
    c.barrier("calloc election")?;
    let mine = T::of(me as i64 + 1);
    let old = w
        .atomic_compare_swap(var.as_ptr(), T::of(0), mine, root)
        .ctx(format_args!("atomic_compare_swap<{name}>"))?;
    w.p(olds.at(me), old, root).ctx("p")?;
    c.barrier("election")?;
    let now = w.atomic_fetch(var.as_ptr(), root).ctx("atomic_fetch")?;
    if old == T::of(0) {
        expect_val(
            format_args!("compare_swap<{name}>: I won, the variable"),
            mine,
            now,
        )?;
    } else {
        expect_val(
            format_args!("compare_swap<{name}>: I lost, the old value is the winner's"),
            now,
            old,
        )?;
    }
    if me == root {
        let got = olds.to_vec().ctx("SymBuf::to_vec")?;
        let winners: Vec<usize> = (0..n).filter(|&p| got[p] == T::of(0)).collect();
        ensure!(
            winners.len() == 1,
            "compare_swap<{name}>: expected exactly one winner, got {winners:?} (olds {got:?})"
        );
        let winner = winners[0];
        expect_val(
            format_args!("compare_swap<{name}>: variable = winner PE {winner} + 1"),
            T::of(winner as i64 + 1),
            now,
        )?;
        for (p, &o) in got.iter().enumerate() {
            if p != winner {
                expect_val(
                    format_args!("compare_swap<{name}>: PE {p} lost and saw"),
                    now,
                    o,
                )?;
            }
        }
    }
    // A compare_swap whose condition fails returns the value and changes nothing.
    let seen = w
        .atomic_compare_swap(var.as_ptr(), T::of(-7), T::of(12345), root)
        .ctx("atomic_compare_swap")?;
    expect_val(
        format_args!("failing compare_swap<{name}> returns the current value"),
        now,
        seen,
    )?;
    c.barrier("failing compare_swap")?;
    let after = w.atomic_fetch(var.as_ptr(), root).ctx("atomic_fetch")?;
    expect_val(
        format_args!("failing compare_swap<{name}> left the variable"),
        now,
        after,
    )?;
    c.barrier("election checks")?;
    w.free(olds).ctx("free")?;
    w.free(var).ctx("free")?;
    Ok(())
}

/// Each PE sets its own slot on the next PE, fetches it back, swaps a new value in.
fn set_fetch_swap<T: Amo>(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    let name = T::NAME;
    let slots = w.malloc::<T>(c.n).ctx("malloc")?;
    fill(&slots, |_| T::poison())?;
    c.barrier("poisoning slots")?;
    w.atomic_set(slots.at(me), val(me, succ, 0), succ)
        .ctx(format_args!("atomic_set<{name}>"))?;
    c.barrier("atomic_set")?;
    let slot_value = |s: usize, k: usize| {
        if s == pred {
            val::<T>(pred, me, k)
        } else {
            T::poison()
        }
    };
    expect_buf(
        format_args!("atomic_set<{name}> from PE {pred}"),
        &slots,
        |s| slot_value(s, 0),
    )?;
    let got = w
        .atomic_fetch(slots.at(me), succ)
        .ctx(format_args!("atomic_fetch<{name}>"))?;
    expect_val(
        format_args!("atomic_fetch<{name}> of my slot on PE {succ}"),
        val(me, succ, 0),
        got,
    )?;
    let own = w
        .atomic_fetch(slots.at(pred), me)
        .ctx(format_args!("atomic_fetch<{name}> self"))?;
    expect_val(
        format_args!("atomic_fetch<{name}> of PE {pred}'s slot on me"),
        val(pred, me, 0),
        own,
    )?;
    c.barrier("atomic_fetch")?;
    let old = w
        .atomic_swap(slots.at(me), val(me, succ, 1), succ)
        .ctx(format_args!("atomic_swap<{name}>"))?;
    expect_val(
        format_args!("atomic_swap<{name}> old value"),
        val(me, succ, 0),
        old,
    )?;
    c.barrier("atomic_swap")?;
    expect_buf(
        format_args!("atomic_swap<{name}> from PE {pred}"),
        &slots,
        |s| slot_value(s, 1),
    )?;
    c.barrier("swap checks")?;
    w.free(slots).ctx("free")?;
    Ok(())
}

/// Floats move bit-exactly: -0.0, infinities, a NaN with payload, a subnormal.
fn float_specials(c: &Ctx<'_>) -> R {
    let (w, me, succ, pred) = (c.w, c.me, c.succ(), c.pred());
    let f32s = [
        -0.0f32,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7FC1_2345),
        f32::from_bits(1),
    ];
    let f64s = [
        -0.0f64,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::from_bits(0x7FF8_0000_DEAD_BEEF),
        f64::from_bits(3),
    ];
    let a = w.calloc::<f32>(f32s.len()).ctx("calloc")?;
    let b = w.calloc::<f64>(f64s.len()).ctx("calloc")?;
    c.barrier("calloc floats")?;
    for (i, (&x, &y)) in f32s.iter().zip(&f64s).enumerate() {
        w.atomic_set(a.at(i), x, succ).ctx("atomic_set<f32>")?;
        let old = w.atomic_swap(b.at(i), y, succ).ctx("atomic_swap<f64>")?;
        expect_val("atomic_swap<f64> of a zeroed slot", 0.0f64, old)?;
    }
    c.barrier("float specials")?;
    for (i, (&x, &y)) in f32s.iter().zip(&f64s).enumerate() {
        let gx = w.atomic_fetch(a.at(i), me).ctx("atomic_fetch<f32>")?;
        expect_val(format_args!("special f32 {i} from PE {pred}"), x, gx)?;
        let gy = w.atomic_fetch(b.at(i), pred).ctx("atomic_fetch<f64>")?;
        expect_val(format_args!("special f64 {i} on PE {pred}"), y, gy)?;
    }
    c.barrier("float special checks")?;
    w.free(b).ctx("free")?;
    w.free(a).ctx("free")?;
    Ok(())
}

fn bitwise<T: Bitw>(c: &Ctx<'_>) -> R {
    let (w, me, n) = (c.w, c.me, c.n);
    let name = T::NAME;
    let root = root_for::<T>(n);
    let hi = T::BITS - 16;
    let bit = |p: usize| (1u64 << p) | (1u64 << (p as u32 + hi));
    let bit8 = |p: usize| 1u64 << (p + 8);
    let ones = T::from_mask(u64::MAX).mask();
    let pattern = T::from_mask(0x0F0F_0F0F_0F0F_0F0F).mask();
    // [0] fetch_or, [1] fetch_and, [2] fetch_xor (twice), [3] or, [4] and, [5] xor
    let v = w.malloc::<T>(6).ctx("malloc")?;
    let init = [0, ones, 0, 0, ones, pattern];
    fill(&v, |i| T::from_mask(init[i]))?;
    c.barrier("bitwise init")?;
    let m = T::from_mask(bit(me));
    let not_m = T::from_mask(!bit(me));
    let old = w
        .atomic_fetch_or(v.at(0), m, root)
        .ctx(format_args!("atomic_fetch_or<{name}>"))?;
    ensure!(
        old.mask() & bit(me) == 0,
        "fetch_or<{name}>: my bits were already set before I set them: {:#x}",
        old.mask()
    );
    let old = w
        .atomic_fetch_and(v.at(1), not_m, root)
        .ctx(format_args!("atomic_fetch_and<{name}>"))?;
    ensure!(
        old.mask() & bit(me) == bit(me),
        "fetch_and<{name}>: my bits were already clear: {:#x}",
        old.mask()
    );
    let old = w
        .atomic_fetch_xor(v.at(2), m, root)
        .ctx(format_args!("atomic_fetch_xor<{name}>"))?;
    ensure!(
        old.mask() & bit(me) == 0,
        "fetch_xor<{name}>: my bits were already set: {:#x}",
        old.mask()
    );
    let old = w
        .atomic_fetch_xor(v.at(2), T::from_mask(bit8(me)), root)
        .ctx("atomic_fetch_xor")?;
    ensure!(
        old.mask() & bit(me) == bit(me),
        "fetch_xor<{name}>: my first xor is gone: {:#x}",
        old.mask()
    );
    w.atomic_or(v.at(3), m, root)
        .ctx(format_args!("atomic_or<{name}>"))?;
    w.atomic_and(v.at(4), not_m, root)
        .ctx(format_args!("atomic_and<{name}>"))?;
    w.atomic_xor(v.at(5), m, root)
        .ctx(format_args!("atomic_xor<{name}>"))?;
    c.barrier("bitwise")?;
    let all: u64 = (0..n).map(bit).fold(0, |a, b| a | b);
    let all8: u64 = (0..n).map(bit8).fold(0, |a, b| a | b);
    let want = [
        all,
        ones & !all,
        all | all8,
        all,
        ones & !all,
        pattern ^ all,
    ];
    for (k, &e) in want.iter().enumerate() {
        let got = w.atomic_fetch(v.at(k), root).ctx("atomic_fetch")?;
        ensure!(
            got.mask() == e,
            "bitwise<{name}> variable {k} on PE {root}: expected {e:#x}, got {:#x}",
            got.mask()
        );
    }
    c.barrier("bitwise checks")?;
    w.free(v).ctx("free")?;
    Ok(())
}

/// `amo-names`: the error of every atomic names that atomic (not the call it is built on), for
/// a bad PE, a misaligned address and an address outside the heap.
pub fn names(c: &Ctx<'_>) -> R {
    use crate::check::{expect_err, Kind};
    let w = c.w;
    let buf = w.calloc::<u64>(2).ctx("calloc")?;
    c.barrier("calloc")?;
    let bad = c.n;
    let mis = buf.as_ptr().cast::<u8>().wrapping_add(1).cast::<u64>();
    let mut outside = [0u64; 2];
    let out = outside.as_mut_ptr();
    for (what, p, pe, kind) in [
        ("to a PE out of range", buf.as_ptr(), bad, Kind::Invalid),
        ("on a misaligned address", mis, c.me, Kind::Invalid),
        ("on a stack address", out, c.me, Kind::NotSymmetric),
    ] {
        let check = |call: &str, r: rshmem::Result<()>| {
            expect_err(format_args!("{call} {what}"), r, kind, call).map(drop)
        };
        check("atomic_fetch", w.atomic_fetch(p, pe).map(drop))?;
        check("atomic_set", w.atomic_set(p, 1u64, pe))?;
        check("atomic_swap", w.atomic_swap(p, 1u64, pe).map(drop))?;
        check(
            "atomic_compare_swap",
            w.atomic_compare_swap(p, 0, 1u64, pe).map(drop),
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
            w.atomic_fetch_and(p, 1u64, pe).map(drop),
        )?;
        check("atomic_fetch_or", w.atomic_fetch_or(p, 1u64, pe).map(drop))?;
        check(
            "atomic_fetch_xor",
            w.atomic_fetch_xor(p, 1u64, pe).map(drop),
        )?;
        check("atomic_and", w.atomic_and(p, 1u64, pe))?;
        check("atomic_or", w.atomic_or(p, 1u64, pe))?;
        check("atomic_xor", w.atomic_xor(p, 1u64, pe))?;
    }
    c.barrier("atomic names")?;
    w.free(buf).ctx("free")?;
    Ok(())
}
