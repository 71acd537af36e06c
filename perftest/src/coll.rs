//! The collective sweeps behind `bcast_latency`, `fcollect_latency`, `alltoall_latency`,
//! `reduction_latency` and `reducescatter_latency` (NVSHMEM's names), on the host collectives
//! of the world team.
//!
//! The size of a point is bytes *per PE*, as in NVSHMEM's collective perftests: the broadcast
//! message, each PE's fcollect block, each PE-to-PE alltoall block, the reduced array, and
//! each PE's block of the reduce-scatter result (so its source holds `n_pes × size` bytes).
//!
//! For each size, every PE:
//! 1. writes its `source` (values that depend on the PE, the index and the point) and poisons
//!    its `dest` (puts to itself, so the GPU heap works too), barrier;
//! 2. makes one call and checks every element of its `dest` against the result computed here
//!    from the known inputs of all PEs (reductions in team order with reference operators that
//!    do not come from the runtime), so a broken collective fails the program;
//! 3. barrier, then `warmup` untimed calls and `reps` timed blocks of `iters` back-to-back
//!    calls, each PE timing its own loop;
//! 4. gathers the per-rep times on PE 0; a rep's value is the mean over the PEs (as OSU's
//!    OpenSHMEM collective benchmarks report), the row the median over the reps.
//!
//! Iterations scale with the size: `(64 MiB / size)` clamped to 10..=2000 per rep, so a run of
//! the whole sweep stays in the tens of seconds even with more PEs than cores.

use std::fmt;

use rshmem::{ReduceOp, ReduceType, RmaType, SymBuf, Team, World};

use crate::{
    check, seed_for, time_reps, Bench, BenchError, Counts, Report, Result, Row, Samples, Stat,
    LOCAL_ALIGN,
};

/// Bytes a rep aims to move per PE; `iters` is this over the size, within the bounds below.
const COLL_BUDGET: usize = 64 << 20;
const COLL_MIN_ITERS: usize = 10;
const COLL_MAX_ITERS: usize = 2000;

/// Root of the broadcasts (team PE 0, as in NVSHMEM's `bcast_latency`).
pub const ROOT: usize = 0;

/// Which collective a sweep measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coll {
    /// `broadcast` of `size` bytes from [`ROOT`].
    Bcast,
    /// `fcollect` of a `size`-byte block per PE.
    Fcollect,
    /// `alltoall` of a `size`-byte block per pair of PEs.
    Alltoall,
    /// `reduce` of `size` bytes.
    Reduce,
    /// `reducescatter` leaving `size` bytes on each PE.
    ReduceScatter,
}

impl Coll {
    /// Elements of `source` per PE for blocks of `k` elements on `n` PEs.
    pub fn src_len(self, n: usize, k: usize) -> usize {
        match self {
            Coll::Bcast | Coll::Fcollect | Coll::Reduce => k,
            Coll::Alltoall | Coll::ReduceScatter => n * k,
        }
    }

    /// Elements of `dest` per PE for blocks of `k` elements on `n` PEs.
    pub fn dst_len(self, n: usize, k: usize) -> usize {
        match self {
            Coll::Bcast | Coll::Reduce | Coll::ReduceScatter => k,
            Coll::Fcollect | Coll::Alltoall => n * k,
        }
    }
}

/// Element types of the sweeps, with the data they carry and reference reductions.
pub trait Elem: RmaType + PartialEq + fmt::Debug {
    /// Name in the output (NVSHMEM's C type names: `int`, `long`, `float`, `double`, ...).
    const NAME: &'static str;
    /// Source element of `pe` at `idx` for point `seed`. Integers take the whole hash (sums and
    /// products wrap identically everywhere); floats are small whole numbers, so sums over any
    /// number of PEs are exact.
    fn gen(seed: u64, pe: usize, idx: usize) -> Self;
    /// What `dest` is filled with before the call.
    fn poison() -> Self;
    /// Reference sum (wrapping for integers).
    fn r_sum(a: Self, b: Self) -> Self;
    /// Reference minimum.
    fn r_min(a: Self, b: Self) -> Self;
    /// Reference maximum.
    fn r_max(a: Self, b: Self) -> Self;
}

/// Integer element types, with reference bitwise reductions.
pub trait IntElem: Elem {
    /// Reference bitwise and.
    fn r_and(a: Self, b: Self) -> Self;
    /// Reference bitwise or.
    fn r_or(a: Self, b: Self) -> Self;
    /// Reference bitwise exclusive or.
    fn r_xor(a: Self, b: Self) -> Self;
}

#[inline]
fn mix(seed: u64, pe: usize, idx: usize) -> u64 {
    // splitmix64 of the three inputs.
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add((pe as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9))
        .wrapping_add((idx as u64).wrapping_mul(0x94d0_49bb_1331_11eb))
        .wrapping_add(0x2545_f491_4f6c_dd1d);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

macro_rules! int_elem {
    ($($t:ty => $name:literal),*) => {$(
        impl Elem for $t {
            const NAME: &'static str = $name;
            #[inline]
            fn gen(seed: u64, pe: usize, idx: usize) -> Self {
                mix(seed, pe, idx) as $t
            }
            fn poison() -> Self {
                0x5a5a_5a5a_5a5a_5a5a_u64 as $t
            }
            #[inline]
            fn r_sum(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            #[inline]
            fn r_min(a: Self, b: Self) -> Self { std::cmp::min(a, b) }
            #[inline]
            fn r_max(a: Self, b: Self) -> Self { std::cmp::max(a, b) }
        }
        impl IntElem for $t {
            #[inline]
            fn r_and(a: Self, b: Self) -> Self { a & b }
            #[inline]
            fn r_or(a: Self, b: Self) -> Self { a | b }
            #[inline]
            fn r_xor(a: Self, b: Self) -> Self { a ^ b }
        }
    )*};
}
int_elem!(i32 => "int", i64 => "long", u64 => "uint64");

macro_rules! float_elem {
    ($($t:ty => $name:literal),*) => {$(
        impl Elem for $t {
            const NAME: &'static str = $name;
            #[inline]
            fn gen(seed: u64, pe: usize, idx: usize) -> Self {
                (mix(seed, pe, idx) % 64) as $t - 32.0
            }
            fn poison() -> Self {
                -1.0e30
            }
            #[inline]
            fn r_sum(a: Self, b: Self) -> Self { a + b }
            #[inline]
            fn r_min(a: Self, b: Self) -> Self { a.min(b) }
            #[inline]
            fn r_max(a: Self, b: Self) -> Self { a.max(b) }
        }
    )*};
}
float_elem!(f32 => "float", f64 => "double");

/// The call under test: `(world, team, dest, source, nelems)`.
pub type CallFn<T> = dyn Fn(&World, &Team, *mut T, *const T, usize) -> rshmem::Result<()>;

/// One collective with its element type: what to call and how to check it.
pub struct Collective<'f, T: Elem> {
    /// Which collective (decides the buffer extents and the expected result).
    pub coll: Coll,
    /// The row label in the op column (`None` for programs without one).
    pub label: Option<&'f str>,
    /// The call.
    pub call: &'f CallFn<T>,
    /// The reference operator of a reduction (ignored by the others).
    pub reference: fn(T, T) -> T,
}

/// A reduction `op` of `T` with its reference operator `f`, labelled `TYPE-OP` like
/// NVSHMEM's `reduction_latency` rows (`int-sum`, `float-max`, ...).
pub fn reduction<T: Elem + ReduceType, O: ReduceOp<T> + 'static>(
    coll: Coll,
    op: O,
) -> impl Fn(&World, &Team, *mut T, *const T, usize) -> rshmem::Result<()> {
    move |w: &World, t: &Team, d: *mut T, s: *const T, k: usize| match coll {
        Coll::ReduceScatter => w.reducescatter(t, d, s, k, op),
        _ => w.reduce(t, d, s, k, op),
    }
}

/// The plain data-movement call of `coll` (broadcast from [`ROOT`], fcollect, alltoall).
pub fn movement<T: Elem>(
    coll: Coll,
) -> impl Fn(&World, &Team, *mut T, *const T, usize) -> rshmem::Result<()> {
    move |w: &World, t: &Team, d: *mut T, s: *const T, k: usize| match coll {
        Coll::Bcast => w.broadcast(t, d, s, k, ROOT),
        Coll::Fcollect => w.fcollect(t, d, s, k),
        Coll::Alltoall => w.alltoall(t, d, s, k),
        Coll::Reduce | Coll::ReduceScatter => Err(rshmem::Error::InvalidArgument {
            call: "perftest",
            reason: "a reduction needs an operator: use `reduction`".into(),
        }),
    }
}

/// Symmetric buffers (page-aligned bytes, reinterpreted per element type) big enough for
/// every point of the sweep, and the per-PE timing area.
#[derive(Debug)]
pub struct CollSweep<'w> {
    src: SymBuf<'w, u8>,
    dst: SymBuf<'w, u8>,
    times: SymBuf<'w, f64>,
    report: Report,
    row_done: bool,
}

impl<'w> CollSweep<'w> {
    /// **Collective.** Allocates buffers for the largest point of any of `colls` and prints
    /// the header; `ops` adds the op column.
    pub fn new(b: &Bench<'w>, colls: &[Coll], ops: bool) -> Result<Self> {
        let n = b.world.n_pes();
        let max = b.opts.max;
        let src_bytes = colls.iter().map(|c| c.src_len(n, max)).max().unwrap_or(0);
        let dst_bytes = colls.iter().map(|c| c.dst_len(n, max)).max().unwrap_or(0);
        let src = b.world.align::<u8>(LOCAL_ALIGN, src_bytes)?;
        let dst = b.world.align::<u8>(LOCAL_ALIGN, dst_bytes)?;
        let times = b.world.calloc::<f64>(n * b.opts.reps.max(1))?;
        let report = b.report("us", ops);
        report.header(b.spec.about);
        Ok(CollSweep {
            src,
            dst,
            times,
            report,
            row_done: false,
        })
    }

    /// **Collective.** Releases the buffers.
    pub fn free(self, b: &Bench<'w>) -> Result<()> {
        b.world.free(self.times)?;
        b.world.free(self.dst)?;
        b.world.free(self.src)?;
        Ok(())
    }

    /// **Collective.** Runs the size sweep of `c`, one row per size. `salt` separates the
    /// data of different programs' rows (any number; the same on every PE).
    pub fn run<T: Elem>(&mut self, b: &Bench<'_>, c: &Collective<'_, T>, salt: u64) -> Result<()> {
        if !b.opts.ops_selected(c.label) {
            return Ok(());
        }
        let esize = std::mem::size_of::<T>();
        let sizes = b.opts.sizes();
        for (idx, &size) in sizes.iter().enumerate() {
            if !b.keep_going()? {
                break;
            }
            let label = c.label.map(|l| format!("{l}, ")).unwrap_or_default();
            b.progress(&format!(
                "{label}size {size} B ({} of {})",
                idx + 1,
                sizes.len()
            ));
            if size % esize != 0 {
                return Err(BenchError::Refused(format!(
                    "size {size} is not a multiple of the {esize}-byte {} element",
                    T::NAME
                )));
            }
            let seed = (salt << 16) ^ u64::from(seed_for(idx));
            self.point(b, c, size / esize, seed)?;
        }
        self.row_done = true;
        Ok(())
    }

    /// True once a sweep printed rows (a `--ops` filter may leave every sweep out).
    pub fn ran(&self) -> bool {
        self.row_done
    }

    fn point<T: Elem>(
        &mut self,
        b: &Bench<'_>,
        c: &Collective<'_, T>,
        k: usize,
        seed: u64,
    ) -> Result<()> {
        let (w, me, n) = (b.world, b.me(), b.world.n_pes());
        let team = w.team_world();
        let src = self.src.as_ptr().cast::<T>();
        let dst = self.dst.as_ptr().cast::<T>();
        let (sl, dl) = (c.coll.src_len(n, k), c.coll.dst_len(n, k));

        // 1. Inputs and poison, then one checked call.
        let input: Vec<T> = (0..sl).map(|i| T::gen(seed, me, i)).collect();
        w.put(src, &input, me)?;
        w.put(dst, &vec![T::poison(); dl], me)?;
        w.quiet()?;
        w.barrier_all()?;
        (c.call)(w, &team, dst, src, k)?;
        let mut got = vec![T::poison(); dl];
        w.get(&mut got, dst, me)?;
        verify(c, &got, seed, me, n, k)?;
        w.barrier_all()?;

        // 2. Timed calls, every PE.
        let counts = coll_counts(b, k * std::mem::size_of::<T>());
        let s = time_reps(counts, |_| Ok((c.call)(w, &team, dst, src, k)?))?;

        // 3. Per-rep means over the PEs, on PE 0.
        let reps = counts.reps;
        w.put(self.times.at(me * reps), &s.per_op, 0)?;
        w.barrier_all()?;
        if me == 0 {
            let all = self.times.to_vec()?;
            let mean: Vec<f64> = (0..reps)
                .map(|r| (0..n).map(|pe| all[pe * reps + r]).sum::<f64>() / n as f64)
                .collect();
            let s = Samples {
                per_op: mean,
                iters: counts.iters,
            };
            self.report.row(Row {
                op: c.label,
                size: k * std::mem::size_of::<T>(),
                stat: Stat::latency_us(&s, 1.0),
                iters: s.iters,
            });
        }
        w.barrier_all()?;
        Ok(())
    }
}

/// Iterations of a point moving `size` bytes per PE.
pub fn coll_counts(b: &Bench<'_>, size: usize) -> Counts {
    let iters = b
        .opts
        .iters
        .unwrap_or_else(|| (COLL_BUDGET / size.max(1)).clamp(COLL_MIN_ITERS, COLL_MAX_ITERS));
    Counts {
        warmup: b.opts.warmup.unwrap_or((iters / 10).clamp(2, 100)),
        iters: iters.max(1),
        reps: b.opts.reps.max(1),
    }
}

/// Checks `got` (my `dest` after one call) against the result computed from every PE's input.
fn verify<T: Elem>(
    c: &Collective<'_, T>,
    got: &[T],
    seed: u64,
    me: usize,
    n: usize,
    k: usize,
) -> Result<()> {
    let fold = |idx: usize| {
        (1..n).fold(T::gen(seed, 0, idx), |a, pe| {
            (c.reference)(a, T::gen(seed, pe, idx))
        })
    };
    let want = |i: usize| -> T {
        match c.coll {
            Coll::Bcast => T::gen(seed, ROOT, i),
            Coll::Fcollect => T::gen(seed, i / k, i % k),
            Coll::Alltoall => T::gen(seed, i / k, me * k + i % k),
            Coll::Reduce => fold(i),
            Coll::ReduceScatter => fold(me * k + i),
        }
    };
    for (i, g) in got.iter().enumerate() {
        let w = want(i);
        check(*g == w, || {
            format!(
                "{:?}{} of {k} {} elements: PE {me} has {g:?} at index {i}, expected {w:?}",
                c.coll,
                c.label.map(|l| format!(" ({l})")).unwrap_or_default(),
                T::NAME
            )
        })?;
    }
    Ok(())
}

/// The rows of `reduction_latency` and `reducescatter_latency`: type and operator, as
/// NVSHMEM's `reduction_latency` labels them.
pub const REDUCTIONS: &[&str] = &[
    "int-sum",
    "int-max",
    "int-and",
    "long-sum",
    "float-sum",
    "float-min",
    "double-sum",
];

fn red_row<T: Elem + ReduceType, O: ReduceOp<T> + 'static>(
    b: &Bench<'_>,
    s: &mut CollSweep<'_>,
    coll: Coll,
    label: &str,
    op: O,
    reference: fn(T, T) -> T,
    salt: u64,
) -> Result<()> {
    let call = reduction::<T, O>(coll, op);
    let c = Collective {
        coll,
        label: Some(label),
        call: &call,
        reference,
    };
    s.run(b, &c, salt)
}

/// **Collective.** The body of `reduction_latency` (`coll` = [`Coll::Reduce`]) and
/// `reducescatter_latency` ([`Coll::ReduceScatter`]): every row of [`REDUCTIONS`] selected by
/// `--ops`, each a full size sweep.
pub fn run_reductions(b: &Bench<'_>, coll: Coll) -> Result<()> {
    use rshmem::{And, Max, Min, Sum};
    if let Some(bad) = b
        .opts
        .ops
        .iter()
        .find(|o| !REDUCTIONS.contains(&o.as_str()))
    {
        return Err(BenchError::Refused(format!(
            "--ops: unknown row {bad:?}; the rows are {}",
            REDUCTIONS.join(", ")
        )));
    }
    let mut s = CollSweep::new(b, &[coll], true)?;
    for (i, &label) in REDUCTIONS.iter().enumerate() {
        let salt = 100 + i as u64;
        match label {
            "int-sum" => red_row::<i32, _>(b, &mut s, coll, label, Sum, i32::r_sum, salt)?,
            "int-max" => red_row::<i32, _>(b, &mut s, coll, label, Max, i32::r_max, salt)?,
            "int-and" => red_row::<i32, _>(b, &mut s, coll, label, And, i32::r_and, salt)?,
            "long-sum" => red_row::<i64, _>(b, &mut s, coll, label, Sum, i64::r_sum, salt)?,
            "float-sum" => red_row::<f32, _>(b, &mut s, coll, label, Sum, f32::r_sum, salt)?,
            "float-min" => red_row::<f32, _>(b, &mut s, coll, label, Min, f32::r_min, salt)?,
            "double-sum" => red_row::<f64, _>(b, &mut s, coll, label, Sum, f64::r_sum, salt)?,
            _ => unreachable!("every row of REDUCTIONS has a case"),
        }
    }
    s.free(b)
}
