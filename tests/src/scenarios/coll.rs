//! `coll`: teams and host collectives. Team queries, translation and the predefined teams;
//! strided splits (even PEs, the world reversed, a split of a split) and 2-D splits (rows and
//! columns); then, for every element type (all integer widths, signed and unsigned, `f32`,
//! `f64`, and the 16-bit floats `F16` and `BF16`), every team and sizes 0, 1, 3 and 7, every collective (broadcast from two roots,
//! fcollect, collect with uneven counts, alltoall, alltoalls with strides, every reduction
//! operator, in place too, and reducescatter), checked against results computed here from the
//! known inputs of every PE, with the bytes past the result still poisoned. Then large blocks
//! (thousands of elements, more than the runtime's 16 KiB reduction chunk, not a whole number
//! of cache lines) for `i32` and `f64` on the world, the reversed world and a 2-D column
//! team: every collective again, with the elements just past the result checked. Last, misuse
//! errors (naming the call; a bad collect on one PE fails every member instead of hanging) and
//! recycling of team slots.

use std::cell::Cell;

use rshmem::{
    And, BitwiseReduceType, Max, Min, Or, Prod, ReduceOp, ReduceType, Sum, SymBuf, Team, Xor,
};

use crate::check::{expect_eq, expect_err, expect_slice, fill, Context, Ctx, Kind, R};
use crate::ensure;
use crate::vals::{seed, val_r, Val};

/// Largest block size tested.
const M: usize = 7;
/// Block sizes tested.
const SIZES: &[usize] = &[0, 1, 3, M];
/// Strides of alltoalls.
const DST: usize = 2;
const SST: usize = 3;
/// Large block size: thousands of elements, past the runtime's 16 KiB reduction chunk (in
/// bytes for `i32` and `f64`, so in every reducescatter block and in a member's slice of a
/// `f64` reduce with up to 2 PEs), and not a multiple of a 64-byte line.
const BIG: &[usize] = &[5003];
/// Teams of the large blocks: the world, a strided split (negative stride) and a 2-D split.
const BIG_TEAMS: &[&str] = &["world", "reversed", "columns of 2"];
/// Elements past the result (and past the input) that the large-block checks cover.
const GUARD: usize = 64;

/// A reduction element type with independent reference operators.
trait RT: Val + ReduceType {
    /// Reduction input of world PE `pe` at `idx` (small for floats, so every result is exact).
    fn rin(pe: usize, idx: usize, salt: u64) -> Self;
    fn r_add(a: Self, b: Self) -> Self;
    fn r_mul(a: Self, b: Self) -> Self;
    fn r_min(a: Self, b: Self) -> Self;
    fn r_max(a: Self, b: Self) -> Self;
}

/// Integer reduction types with bitwise reference operators.
trait BT: RT + BitwiseReduceType {
    fn r_and(a: Self, b: Self) -> Self;
    fn r_or(a: Self, b: Self) -> Self;
    fn r_xor(a: Self, b: Self) -> Self;
}

macro_rules! int_rt {
    ($($t:ty),*) => {$(
        impl RT for $t {
            fn rin(pe: usize, idx: usize, salt: u64) -> Self { val_r(pe, 1, idx, salt) }
            fn r_add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn r_mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn r_min(a: Self, b: Self) -> Self { std::cmp::min(a, b) }
            fn r_max(a: Self, b: Self) -> Self { std::cmp::max(a, b) }
        }
        impl BT for $t {
            fn r_and(a: Self, b: Self) -> Self { a & b }
            fn r_or(a: Self, b: Self) -> Self { a | b }
            fn r_xor(a: Self, b: Self) -> Self { a ^ b }
        }
    )*};
}
int_rt!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

macro_rules! float_rt {
    ($($t:ty),*) => {$(
        impl RT for $t {
            fn rin(pe: usize, idx: usize, salt: u64) -> Self {
                let s = seed(77, pe, 0, idx, salt);
                let m = (s % 3 + 1) as $t;
                if s & 8 == 0 { m } else { -m }
            }
            fn r_add(a: Self, b: Self) -> Self { a + b }
            fn r_mul(a: Self, b: Self) -> Self { a * b }
            fn r_min(a: Self, b: Self) -> Self { a.min(b) }
            fn r_max(a: Self, b: Self) -> Self { a.max(b) }
        }
    )*};
}
float_rt!(f32, f64);

// 16-bit floats: inputs ±0.5, ±1 and ±2, so that every sum (at most 2 per PE) and product (a
// power of two) of up to 8 PEs is exact in half and bfloat16 and the references, computed in
// f64, need no rounding.
macro_rules! half_rt {
    ($($t:ident),*) => {$(
        impl RT for rshmem::$t {
            fn rin(pe: usize, idx: usize, salt: u64) -> Self {
                let s = seed(78, pe, 0, idx, salt);
                let m = [0.5f32, 1.0, 2.0][(s % 3) as usize];
                rshmem::$t::from_f32(if s & 8 == 0 { m } else { -m })
            }
            fn r_add(a: Self, b: Self) -> Self { exact::<rshmem::$t>(a.to_f32() as f64 + b.to_f32() as f64) }
            fn r_mul(a: Self, b: Self) -> Self { exact::<rshmem::$t>(a.to_f32() as f64 * b.to_f32() as f64) }
            fn r_min(a: Self, b: Self) -> Self { if b.to_f32() < a.to_f32() { b } else { a } }
            fn r_max(a: Self, b: Self) -> Self { if b.to_f32() > a.to_f32() { b } else { a } }
        }
        impl HalfRt for rshmem::$t {
            fn of_f32(v: f32) -> Self { rshmem::$t::from_f32(v) }
            fn to_f64(self) -> f64 { self.to_f32() as f64 }
        }
        impl BT2 for rshmem::$t {
            fn bitwise(_: &Ctx<'_>, _: &Bufs<'_, Self>, _: &Team, _: usize, _: u64, _: &str) -> R {
                Ok(())
            }
            fn big_bitwise(_: &Ctx<'_>, _: &Bufs<'_, Self>, _: &Team, _: usize, _: u64, _: &str) -> R {
                Ok(())
            }
        }
    )*};
}
half_rt!(F16, BF16);

/// Conversions of the 16-bit float references.
trait HalfRt: Copy {
    fn of_f32(v: f32) -> Self;
    fn to_f64(self) -> f64;
}

/// `v` as a 16-bit float, which must hold it exactly (the inputs above make every result so).
fn exact<T: HalfRt>(v: f64) -> T {
    let h = T::of_f32(v as f32);
    assert_eq!(h.to_f64(), v, "reference value {v} is not exact in 16 bits");
    h
}

/// The symmetric buffers of one element type. `win` elements past what a call reads or writes
/// are filled and checked (`cap` or more: all of them); `dirty` is how far `dst` may hold
/// results of earlier calls.
struct Bufs<'w, T: Val> {
    src: SymBuf<'w, T>,
    dst: SymBuf<'w, T>,
    cap: usize,
    win: usize,
    dirty: Cell<usize>,
}

impl<T: Val> Bufs<'_, T> {
    /// Elements filled and checked for a call using `len` of them.
    fn lim(&self, len: usize) -> usize {
        len.saturating_add(self.win).min(self.cap)
    }
}

pub fn run(c: &Ctx<'_>) -> R {
    let start = c.w.comm_counters();
    let teams = make_teams(c)?;
    let salt = &mut 0u64;

    suite::<i8>(c, &teams, salt, true)?;
    suite::<i16>(c, &teams, salt, true)?;
    suite::<i32>(c, &teams, salt, true)?;
    suite::<i64>(c, &teams, salt, true)?;
    suite::<i128>(c, &teams, salt, true)?;
    suite::<isize>(c, &teams, salt, true)?;
    suite::<u8>(c, &teams, salt, true)?;
    suite::<u16>(c, &teams, salt, true)?;
    suite::<u32>(c, &teams, salt, true)?;
    suite::<u64>(c, &teams, salt, true)?;
    suite::<u128>(c, &teams, salt, true)?;
    suite::<usize>(c, &teams, salt, true)?;
    suite::<f32>(c, &teams, salt, false)?;
    suite::<f64>(c, &teams, salt, false)?;
    suite::<rshmem::F16>(c, &teams, salt, false)?;
    suite::<rshmem::BF16>(c, &teams, salt, false)?;
    big::<i32>(c, &teams, salt, BIG, true)?;
    big::<f64>(c, &teams, salt, BIG, false)?;
    misuse(c, &teams)?;
    for (_, t) in teams
        .into_iter()
        .skip(3)
        .flat_map(|(n, t)| t.map(|t| (n, t)))
    {
        c.w.team_destroy(t).ctx("team_destroy")?;
    }
    recycle(c)?;
    if c.me == 0 {
        // What the whole scenario cost this PE (recorded in docs/bench/collectives-tcp.md).
        let end = c.w.comm_counters();
        crate::note!(
            "PE 0: coll on {} PEs: {} sync rounds, {} TCP round trips, {} one-way TCP requests",
            c.n,
            end.sync_rounds - start.sync_rounds,
            end.tcp_round_trips - start.tcp_round_trips,
            end.tcp_one_way - start.tcp_one_way
        );
    }
    Ok(())
}

/// Every team this test uses, in the same order on every PE (`None` where this PE is not a
/// member): world, shared, node, even PEs, the world reversed, every 4th PE (a split of the
/// even team), rows and columns of width 2 and rows and columns of width 3.
fn make_teams(c: &Ctx<'_>) -> R<Vec<(String, Option<Team>)>> {
    let (w, me, n) = (c.w, c.me, c.n);
    let world = w.team_world();
    expect_eq("team_world my_pe", me, world.my_pe())?;
    expect_eq("team_world n_pes", n, world.n_pes())?;
    let shared = w.team_shared();
    let node = w.team_node();
    expect_eq("team_shared members", w.node_pes(), shared.members())?;
    expect_eq("team_node members", w.node_pes(), node.members())?;
    expect_eq("team_node n_pes", w.node_pes().len(), node.n_pes())?;
    expect_eq(
        "get_config of world",
        rshmem::TeamConfig::default(),
        world.get_config(),
    )?;

    let even = w
        .team_split_strided(&world, 0, 2, n.div_ceil(2))
        .ctx("team_split_strided(even)")?;
    expect_eq("even team membership", me % 2 == 0, even.is_some())?;
    if let Some(t) = &even {
        expect_eq("even my_pe", me / 2, t.my_pe())?;
        expect_eq("even n_pes", n.div_ceil(2), t.n_pes())?;
        expect_eq(
            "translate even -> world",
            Some(me),
            w.team_translate_pe(t, t.my_pe(), &world),
        )?;
        expect_eq("translate out of range", None, t.translate_pe(n, &world))?;
    }
    for p in 0..n {
        let want = (p % 2 == 0).then_some(p / 2);
        let got = match &even {
            Some(t) => w.team_translate_pe(&world, p, t),
            None => want,
        };
        expect_eq(format_args!("translate world {p} -> even"), want, got)?;
    }
    let cfg = rshmem::TeamConfig { num_contexts: 3 };
    let rev = w
        .team_split_strided_with(&world, n - 1, -1, n, cfg)
        .ctx("team_split_strided(reversed)")?
        .ok_or_else(|| crate::check::Fail("reversed team: every PE is a member".into()))?;
    expect_eq("reversed my_pe", n - 1 - me, rev.my_pe())?;
    expect_eq("reversed get_config", cfg, rev.get_config())?;
    let quarter = match &even {
        Some(t) => {
            let q = w
                .team_split_strided(t, 0, 2, t.n_pes().div_ceil(2))
                .ctx("team_split_strided(quarter)")?;
            expect_eq("quarter membership", me % 4 == 0, q.is_some())?;
            q
        }
        None => None,
    };
    let mut v = vec![
        ("world".to_string(), Some(world)),
        ("shared".to_string(), Some(shared)),
        ("node".to_string(), Some(node)),
        ("even".to_string(), even),
        ("reversed".to_string(), Some(rev)),
        ("quarter".to_string(), quarter),
    ];
    for x in [2usize, 3] {
        let (row, col) = w
            .team_split_2d(&w.team_world(), x)
            .ctx(format_args!("team_split_2d({x})"))?;
        let xr = x.min(n);
        expect_eq("2d row my_pe", me % xr, row.my_pe())?;
        expect_eq("2d col my_pe", me / xr, col.my_pe())?;
        let row_n = ((me / xr + 1) * xr).min(n) - (me / xr) * xr;
        expect_eq("2d row n_pes", row_n, row.n_pes())?;
        expect_eq("2d col n_pes", (n - me % xr).div_ceil(xr), col.n_pes())?;
        expect_eq(
            "2d col -> row translate of myself",
            Some(row.my_pe()),
            col.translate_pe(col.my_pe(), &row),
        )?;
        v.push((format!("rows of {x}"), Some(row)));
        v.push((format!("columns of {x}"), Some(col)));
    }
    Ok(v)
}

/// Every collective for type `T` on every team and size; `bitwise` adds and/or/xor.
fn suite<T: RT + BT2>(
    c: &Ctx<'_>,
    teams: &[(String, Option<Team>)],
    salt: &mut u64,
    bitwise: bool,
) -> R {
    let b = alloc::<T>(c, M, SST, usize::MAX)?;
    for (name, t) in teams {
        for &k in SIZES {
            // The same salt sequence on every PE, member or not.
            *salt += 1;
            let Some(t) = t else { continue };
            let s = *salt;
            let what = format!("{name} team, nelems {k}");
            movement(c, &b, t, k, s, &what, true)?;
            red(c, &b, t, k, Sum, T::r_add, s, &what, false)?;
            red(c, &b, t, k, Sum, T::r_add, s, &what, true)?;
            red(c, &b, t, k, Prod, T::r_mul, s, &what, false)?;
            red(c, &b, t, k, Min, T::r_min, s, &what, false)?;
            red(c, &b, t, k, Max, T::r_max, s, &what, true)?;
            if bitwise {
                T::bitwise(c, &b, t, k, s, &what)?;
            }
            reducescatter(c, &b, t, k, s, &what)?;
        }
    }
    c.barrier("coll suite")?;
    c.w.free(b.src).ctx("free")?;
    c.w.free(b.dst).ctx("free")
}

/// Runs the bitwise reductions for integer types; nothing for floats (which cannot call them:
/// `And` is not a `ReduceOp<f32>`).
trait BT2: RT {
    fn bitwise(c: &Ctx<'_>, b: &Bufs<'_, Self>, t: &Team, k: usize, s: u64, what: &str) -> R;
    /// The bitwise reductions of the large blocks (xor, in place).
    fn big_bitwise(c: &Ctx<'_>, b: &Bufs<'_, Self>, t: &Team, k: usize, s: u64, what: &str) -> R;
}

macro_rules! bt2_int {
    ($($t:ty),*) => {$(
        impl BT2 for $t {
            fn bitwise(c: &Ctx<'_>, b: &Bufs<'_, Self>, t: &Team, k: usize, s: u64, what: &str) -> R {
                red(c, b, t, k, And, <$t as BT>::r_and, s, what, false)?;
                red(c, b, t, k, Or, <$t as BT>::r_or, s, what, true)?;
                red(c, b, t, k, Xor, <$t as BT>::r_xor, s, what, false)
            }
            fn big_bitwise(c: &Ctx<'_>, b: &Bufs<'_, Self>, t: &Team, k: usize, s: u64, what: &str) -> R {
                red(c, b, t, k, Xor, <$t as BT>::r_xor, s, what, true)
            }
        }
    )*};
}
bt2_int!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

impl BT2 for f32 {
    fn bitwise(_: &Ctx<'_>, _: &Bufs<'_, Self>, _: &Team, _: usize, _: u64, _: &str) -> R {
        Ok(())
    }
    fn big_bitwise(_: &Ctx<'_>, _: &Bufs<'_, Self>, _: &Team, _: usize, _: u64, _: &str) -> R {
        Ok(())
    }
}
impl BT2 for f64 {
    fn bitwise(_: &Ctx<'_>, _: &Bufs<'_, Self>, _: &Team, _: usize, _: u64, _: &str) -> R {
        Ok(())
    }
    fn big_bitwise(_: &Ctx<'_>, _: &Bufs<'_, Self>, _: &Team, _: usize, _: u64, _: &str) -> R {
        Ok(())
    }
}

/// Large blocks (`sizes`) on the teams of [`BIG_TEAMS`]: every collective but the strided
/// alltoalls (element by element whatever the size), sum in and out of place, max, min
/// (floats) or xor (integers), in place, and reducescatter.
fn big<T: RT + BT2>(
    c: &Ctx<'_>,
    teams: &[(String, Option<Team>)],
    salt: &mut u64,
    sizes: &[usize],
    bitwise: bool,
) -> R {
    let kmax = sizes.iter().copied().max().unwrap_or(0);
    let b = alloc::<T>(c, kmax, 1, GUARD)?;
    for (name, t) in teams
        .iter()
        .filter(|(n, _)| BIG_TEAMS.contains(&n.as_str()))
    {
        for &k in sizes {
            // The same salt sequence on every PE, member or not.
            *salt += 1;
            let Some(t) = t else { continue };
            let s = *salt;
            let what = format!("{name} team, large nelems {k}");
            movement(c, &b, t, k, s, &what, false)?;
            red(c, &b, t, k, Sum, T::r_add, s, &what, false)?;
            red(c, &b, t, k, Sum, T::r_add, s, &what, true)?;
            red(c, &b, t, k, Max, T::r_max, s, &what, false)?;
            if bitwise {
                T::big_bitwise(c, &b, t, k, s, &what)?;
            } else {
                red(c, &b, t, k, Min, T::r_min, s, &what, true)?;
            }
            reducescatter(c, &b, t, k, s, &what)?;
        }
    }
    c.barrier("coll big")?;
    c.w.free(b.src).ctx("free")?;
    c.w.free(b.dst).ctx("free")
}

/// Buffers for blocks of up to `m` elements on every team (the largest extent is alltoalls'
/// source, `stride` apart), checking `win` elements past each result.
fn alloc<'w, T: Val>(c: &Ctx<'w>, m: usize, stride: usize, win: usize) -> R<Bufs<'w, T>> {
    let cap = c.n * m * stride + 1;
    Ok(Bufs {
        src: c.w.malloc::<T>(cap).ctx("malloc")?,
        dst: c.w.malloc::<T>(cap).ctx("malloc")?,
        cap,
        win,
        dirty: Cell::new(cap),
    })
}

/// The first `len` elements of my copy of `buf`.
fn read<T: Val>(c: &Ctx<'_>, buf: &SymBuf<'_, T>, len: usize) -> R<Vec<T>> {
    let mut v = vec![T::poison(); len];
    c.w.get(&mut v, buf.as_ptr(), c.me).ctx("get from myself")?;
    Ok(v)
}

/// Fills my source with `f(index)` (what a call reading `src_len` elements sees, and the
/// window after) and my dest with poison (the window after `dst_len`, and whatever earlier
/// calls wrote): local writes; every collective starts with a team sync, so no member reads
/// them early.
fn prepare<T: Val>(
    c: &Ctx<'_>,
    b: &Bufs<'_, T>,
    src_len: usize,
    dst_len: usize,
    f: impl Fn(usize) -> T,
) -> R {
    let vals: Vec<T> = (0..b.lim(src_len)).map(f).collect();
    c.w.put(b.src.as_ptr(), &vals, c.me).ctx("put to myself")?;
    let dl = b.lim(dst_len);
    c.w.put(
        b.dst.as_ptr(),
        &vec![T::poison(); dl.max(b.dirty.get())],
        c.me,
    )
    .ctx("put to myself")?;
    b.dirty.set(dl);
    Ok(())
}

/// Checks my dest: `want(i)` for `i < len`, poison after (through the window).
fn check_dst<T: Val>(
    c: &Ctx<'_>,
    b: &Bufs<'_, T>,
    what: &str,
    len: usize,
    want: impl Fn(usize) -> T,
) -> R {
    let got = read(c, &b.dst, b.lim(len))?;
    expect_slice(what, &got, |i| if i < len { want(i) } else { T::poison() })
}

/// broadcast (roots 0 and last), fcollect, collect, alltoall, and alltoalls if `strided`.
fn movement<T: Val>(
    c: &Ctx<'_>,
    b: &Bufs<'_, T>,
    t: &Team,
    k: usize,
    s: u64,
    what: &str,
    strided: bool,
) -> R {
    let w = c.w;
    let (tn, ti) = (t.n_pes(), t.my_pe());
    let m = |j: usize| t.members()[j];
    let input = |pe: usize, i: usize| val_r::<T>(pe, 0, i, s);

    for root in [0, tn - 1] {
        prepare(c, b, k, k, |i| input(c.me, i))?;
        w.broadcast(t, b.dst.as_ptr(), b.src.as_ptr(), k, root)
            .ctx(format_args!("broadcast {what} root {root}"))?;
        check_dst(c, b, &format!("broadcast {what} root {root}"), k, |i| {
            input(m(root), i)
        })?;
    }

    prepare(c, b, k, tn * k, |i| input(c.me, i))?;
    w.fcollect(t, b.dst.as_ptr(), b.src.as_ptr(), k)
        .ctx(format_args!("fcollect {what}"))?;
    check_dst(c, b, &format!("fcollect {what}"), tn * k, |i| {
        input(m(i / k), i % k)
    })?;

    // Uneven counts, some 0: member j contributes (k·(j+1) + j) % (max(k, M) + 1).
    let count = |j: usize| (k * (j + 1) + j) % (k.max(M) + 1);
    let starts: Vec<usize> = (0..=tn).map(|j| (0..j).map(count).sum()).collect();
    prepare(c, b, count(ti), starts[tn], |i| input(c.me, i))?;
    w.collect(t, b.dst.as_ptr(), b.src.as_ptr(), count(ti))
        .ctx(format_args!("collect {what}"))?;
    check_dst(c, b, &format!("collect {what}"), starts[tn], |i| {
        let j = starts.partition_point(|&st| st <= i) - 1;
        input(m(j), i - starts[j])
    })?;

    prepare(c, b, tn * k, tn * k, |i| input(c.me, i))?;
    w.alltoall(t, b.dst.as_ptr(), b.src.as_ptr(), k)
        .ctx(format_args!("alltoall {what}"))?;
    check_dst(c, b, &format!("alltoall {what}"), tn * k, |i| {
        let (j, e) = (i / k, i % k);
        input(m(j), ti * k + e)
    })?;
    if !strided {
        return Ok(());
    }

    let span = |stride: usize| {
        if tn * k == 0 {
            0
        } else {
            (tn * k - 1) * stride + 1
        }
    };
    let ext = span(DST);
    prepare(c, b, span(SST), ext, |i| input(c.me, i))?;
    w.alltoalls(t, b.dst.as_ptr(), b.src.as_ptr(), DST, SST, k)
        .ctx(format_args!("alltoalls {what}"))?;
    check_dst(c, b, &format!("alltoalls {what}"), ext, |i| {
        if i % DST != 0 {
            return T::poison();
        }
        let q = i / DST;
        let (j, e) = (q / k, q % k);
        input(m(j), (ti * k + e) * SST)
    })
}

/// One reduction, out of place or in place (dest = source), against the reference `f`
/// folded over the members in team order.
#[allow(clippy::too_many_arguments)]
fn red<T: RT, O: ReduceOp<T>>(
    c: &Ctx<'_>,
    b: &Bufs<'_, T>,
    t: &Team,
    k: usize,
    op: O,
    f: fn(T, T) -> T,
    s: u64,
    what: &str,
    in_place: bool,
) -> R {
    let w = c.w;
    let want = |i: usize| {
        let ms = t.members();
        ms[1..]
            .iter()
            .fold(T::rin(ms[0], i, s), |a, &p| f(a, T::rin(p, i, s)))
    };
    let label = format!(
        "{}{} {what}",
        O::CALL,
        if in_place { " in place" } else { "" }
    );
    prepare(c, b, k, if in_place { 0 } else { k }, |i| {
        T::rin(c.me, i, s)
    })?;
    if in_place {
        w.reduce(t, b.src.as_ptr(), b.src.as_ptr(), k, op)
            .ctx(&label)?;
        let got = read(c, &b.src, b.lim(k))?;
        expect_slice(&label, &got, |i| {
            if i < k {
                want(i)
            } else {
                T::rin(c.me, i, s)
            }
        })?;
        check_dst(c, b, &label, 0, |_| T::poison())
    } else {
        w.reduce(t, b.dst.as_ptr(), b.src.as_ptr(), k, op)
            .ctx(&label)?;
        check_dst(c, b, &label, k, want)
    }
}

fn reducescatter<T: RT>(c: &Ctx<'_>, b: &Bufs<'_, T>, t: &Team, k: usize, s: u64, what: &str) -> R {
    let ti = t.my_pe();
    let label = format!("reducescatter(sum) {what}");
    prepare(c, b, t.n_pes() * k, k, |i| T::rin(c.me, i, s))?;
    c.w.reducescatter(t, b.dst.as_ptr(), b.src.as_ptr(), k, Sum)
        .ctx(&label)?;
    let ms = t.members();
    check_dst(c, b, &label, k, |i| {
        let idx = ti * k + i;
        ms[1..].iter().fold(T::rin(ms[0], idx, s), |a, &p| {
            T::r_add(a, T::rin(p, idx, s))
        })
    })
}

/// Misuse: every PE makes the same bad call (so none waits for another), except the uneven
/// collect, where only the last PE is wrong and every member must still fail.
fn misuse(c: &Ctx<'_>, teams: &[(String, Option<Team>)]) -> R {
    let w = c.w;
    let world = w.team_world();
    let n = c.n;
    let buf = w.malloc::<u64>(4 * n + 4).ctx("malloc")?;
    let small = w.malloc::<u64>(2).ctx("malloc")?;
    fill(&buf, |_| u64::poison())?;
    c.barrier("misuse setup")?;
    let mut local = vec![0u64; 4 * n];
    let p = buf.as_ptr();

    let e = expect_err(
        "broadcast to a non-symmetric dest",
        w.broadcast(&world, local.as_mut_ptr(), p, 2, 0),
        Kind::NotSymmetric,
        "broadcast",
    )?;
    crate::check::expect_contains("broadcast message", &e.to_string(), &["dest"])?;
    expect_err(
        "broadcast root out of range",
        w.broadcast(&world, p.wrapping_add(2 * n), p, 2, n),
        Kind::Invalid,
        "broadcast",
    )?;
    expect_err(
        "broadcast partial overlap",
        w.broadcast(&world, p.wrapping_add(1), p, 2, 0),
        Kind::Invalid,
        "broadcast",
    )?;
    expect_err(
        "fcollect overlap",
        w.fcollect(&world, p, p, 1),
        Kind::Invalid,
        "fcollect",
    )?;
    expect_err(
        "fcollect dest too small",
        w.fcollect(&world, small.as_ptr(), p, 4),
        Kind::NotSymmetric,
        "fcollect",
    )?;
    expect_err(
        "alltoall source not symmetric",
        w.alltoall(&world, p, local.as_ptr(), 1),
        Kind::NotSymmetric,
        "alltoall",
    )?;
    expect_err(
        "alltoalls stride 0",
        w.alltoalls(&world, p, p.wrapping_add(2 * n), 0, 1, 1),
        Kind::Invalid,
        "alltoalls",
    )?;
    expect_err(
        "sum_reduce partial overlap",
        w.reduce(&world, p.wrapping_add(1), p, 2, Sum),
        Kind::Invalid,
        "sum_reduce",
    )?;
    expect_err(
        "xor_reduce source runs past its allocation",
        w.reduce(&world, p, small.as_ptr(), 3, Xor),
        Kind::NotSymmetric,
        "xor_reduce",
    )?;
    expect_err(
        "reducescatter overflow",
        w.reducescatter(&world, p, small.as_ptr(), usize::MAX / 2, Max),
        Kind::Invalid,
        "reducescatter",
    )?;
    // One PE passes a bad source to collect: it gets its own error, the others a message
    // naming it; nobody hangs.
    let last = n - 1;
    let src: *const u64 = if c.me == last {
        local.as_ptr()
    } else {
        p.wrapping_add(3 * n)
    };
    let r = w.collect(&world, p, src, 1);
    if c.me == last {
        expect_err("collect, my bad source", r, Kind::NotSymmetric, "collect")?;
    } else {
        let e = expect_err(
            "collect, another PE's bad source",
            r,
            Kind::Invalid,
            "collect",
        )?;
        crate::check::expect_contains(
            "collect message",
            &e.to_string(),
            &[&format!("team PE {last}")],
        )?;
    }
    // Nothing was written.
    c.barrier("misuse")?;
    expect_slice(
        "buffer after the failed collectives",
        &buf.to_vec().ctx("to_vec")?,
        |_| u64::poison(),
    )?;
    local.clear();

    // Team calls.
    expect_err(
        "team_destroy(world)",
        w.team_destroy(world.clone()),
        Kind::Invalid,
        "team_destroy",
    )?;
    expect_err(
        "split size 0",
        w.team_split_strided(&world, 0, 1, 0),
        Kind::Invalid,
        "team_split_strided",
    )?;
    expect_err(
        "split past the parent",
        w.team_split_strided(&world, 0, 1, n + 1),
        Kind::Invalid,
        "team_split_strided",
    )?;
    expect_err(
        "split stride running out",
        w.team_split_strided(&world, n - 1, 1, 2),
        Kind::Invalid,
        "team_split_strided",
    )?;
    if n > 1 {
        expect_err(
            "split stride 0",
            w.team_split_strided(&world, 0, 0, 2),
            Kind::Invalid,
            "team_split_strided",
        )?;
    }
    expect_err(
        "split_2d xrange 0",
        w.team_split_2d(&world, 0),
        Kind::Invalid,
        "team_split_2d",
    )?;
    // A destroyed team (every clone of it) is refused.
    let t = w
        .team_split_strided(&world, 0, 1, n)
        .ctx("split")?
        .ok_or_else(|| crate::check::Fail("full split: every PE is a member".into()))?;
    let clone = t.clone();
    w.team_destroy(t).ctx("team_destroy")?;
    ensure!(
        clone.is_destroyed(),
        "clone of a destroyed team is not marked"
    );
    expect_err(
        "team_sync on a destroyed team",
        w.team_sync(&clone),
        Kind::Invalid,
        "team_sync",
    )?;
    expect_err(
        "broadcast on a destroyed team",
        w.broadcast(&clone, p, p.wrapping_add(2 * n), 1, 0),
        Kind::Invalid,
        "broadcast",
    )?;
    expect_eq(
        "translate with a destroyed team",
        None,
        clone.translate_pe(0, &world),
    )?;
    // Team barrier and sync on every team of the test.
    for t in teams.iter().filter_map(|(_, t)| t.as_ref()) {
        w.barrier(t).ctx("barrier")?;
        w.team_sync(t).ctx("team_sync")?;
    }
    c.barrier("misuse end")?;
    w.free(buf).ctx("free")?;
    w.free(small).ctx("free")
}

/// Slots are recycled: many create/destroy cycles, and many teams alive at once, each used.
fn recycle(c: &Ctx<'_>) -> R {
    let w = c.w;
    let world = w.team_world();
    for i in 0..64 {
        let t = w
            .team_split_strided(&world, 0, 1, c.n)
            .ctx(format_args!("split #{i}"))?
            .ok_or_else(|| crate::check::Fail("full split".into()))?;
        w.team_sync(&t).ctx("team_sync")?;
        w.team_destroy(t).ctx("team_destroy")?;
    }
    let mut alive = Vec::new();
    for i in 0..48 {
        // Alternating halves and the whole world.
        let t = match i % 3 {
            0 => w.team_split_strided(&world, 0, 1, c.n),
            1 => w.team_split_strided(&world, 0, 1, c.n.div_ceil(2)),
            _ => w.team_split_strided(&world, c.n / 2, 1, c.n - c.n / 2),
        }
        .ctx(format_args!("alive split #{i}"))?;
        alive.push(t);
    }
    let one = w.malloc::<i64>(1).ctx("malloc")?;
    let out = w.malloc::<i64>(1).ctx("malloc")?;
    fill(&one, |_| 1)?;
    for t in alive.iter().rev().flatten() {
        w.reduce(t, out.as_ptr(), one.as_ptr(), 1, Sum)
            .ctx("sum_reduce on a live team")?;
        expect_eq(
            "sum of ones = team size",
            Some(t.n_pes() as i64),
            out.read(0).ok(),
        )?;
    }
    for t in alive.into_iter().flatten() {
        w.team_destroy(t).ctx("team_destroy")?;
    }
    if c.n <= 2 {
        exhaust(c)?;
    }
    c.barrier("recycle")?;
    w.free(one).ctx("free")?;
    w.free(out).ctx("free")
}

/// Teams until the slots run out (thousands): the error says so and names the call; after
/// destroying them, splits work again.
fn exhaust(c: &Ctx<'_>) -> R {
    let w = c.w;
    let world = w.team_world();
    let mut alive = Vec::new();
    let err = loop {
        match w.team_split_strided(&world, 0, 1, c.n) {
            Ok(t) => alive.push(t),
            Err(e) => break e,
        }
        ensure!(
            alive.len() <= 10_000,
            "no slot limit after 10000 live teams"
        );
    };
    ensure!(
        alive.len() >= 1000,
        "only {} teams fit before {err}",
        alive.len()
    );
    ensure!(
        matches!(
            &err,
            rshmem::Error::Unsupported {
                call: "team_split_strided",
                ..
            }
        ),
        "expected Unsupported from team_split_strided, got {err:?}"
    );
    crate::check::expect_contains(
        "slot limit message",
        &err.to_string(),
        &["destroy unused teams"],
    )?;
    let last = alive.pop().flatten();
    for t in alive.into_iter().flatten() {
        w.team_destroy(t).ctx("team_destroy")?;
    }
    if let Some(t) = last {
        w.barrier(&t).ctx("barrier on the last team")?;
        w.team_destroy(t).ctx("team_destroy")?;
    }
    let t = w
        .team_split_strided(&world, 0, 1, c.n)
        .ctx("split after freeing")?;
    if let Some(t) = t {
        w.team_destroy(t).ctx("team_destroy")?;
    }
    Ok(())
}
