//! `gpucoll`: the GPU team collectives. For the world team, a strided split (even PEs) and the
//! rows and columns of a 2-D split, and sizes from 1 element to past the bandwidth thresholds
//! (several blocks; and for alltoall, fcollect and broadcast on the world team, 2.4 MB per PE,
//! the pipelined broadcast), every `*_on_stream` collective (alltoall,
//! fcollect, broadcast from the first and last team PE, reduce with every operator on i32 and
//! sum/min/max on f32 and f64, half sum and bfloat16 max (inputs that need rounding, equal to
//! the host's per-step rounding), in place too, and reducescatter; at up to 1000
//! elements every other half and bfloat16 operator); then at 7 and 1000 elements
//! every operator on i8, u16, u32, i64 and u64 and the rest of the float operators, and
//! alltoalls_on_stream and collect_on_stream (uneven counts) on every team and size is checked against results
//! computed here from every PE's known inputs; bytes past the result stay poisoned. Then a user
//! kernel calls the device library's block-, warp- and thread-scope collectives on a team
//! handle, and argument errors are checked. On the CPU backend it checks that the calls answer
//! `Unsupported` and says so.

use rshmem::cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use rshmem::{And, Error, Max, Min, Or, Prod, ReduceOp, ReduceType, Sum, SymBuf, Team, World, Xor};

use crate::check::{expect_eq, expect_err, Context, Ctx, Kind, R};
use crate::ensure;

/// Elements per PE tested: one, a few, more than one vector per thread, and (i32/f32) past the
/// multi-block and pipelined-broadcast thresholds.
const SIZES: &[usize] = &[1, 7, 1000, 70_001];
const POISON: i32 = -0x5A5A_5A5B;
/// Elements per PE of the extra alltoall / fcollect / broadcast round on the world team: past
/// the pipelined-broadcast threshold (2 MiB per PE).
const BIG: usize = 600_000;

fn fail(s: String) -> crate::check::Fail {
    crate::check::Fail(s)
}

fn sync(s: &CudaStream) -> R {
    s.synchronize()
        .map_err(|e| fail(format!("stream synchronize: {e:?}")))
}

/// Input element `i` of world PE `pe` (small, so float sums and products are exact).
fn input(pe: usize, i: usize, salt: usize) -> i32 {
    let x = (pe as u64 * 0x9E37_79B9 + i as u64 * 0x85EB_CA6B + salt as u64 * 0xC2B2_AE35)
        .wrapping_mul(0x2545_F491_4F6C_DD1D);
    ((x >> 40) % 7) as i32 - 3
}

/// Element types of the reductions, with conversions from the small integer inputs.
trait El: ReduceType + PartialEq + std::fmt::Debug {
    fn of(v: i32) -> Self;
}
impl El for f32 {
    fn of(v: i32) -> Self {
        v as f32
    }
}
impl El for f64 {
    fn of(v: i32) -> Self {
        v as f64
    }
}
// The 16-bit floats: the small integers times 1 + one unit in the last place at 1 (2^-10 for
// half, 2^-7 for bfloat16), so that sums and products need rounding: the device's results must
// equal the host's per-step rounding (`half_op`) exactly.
impl El for rshmem::F16 {
    fn of(v: i32) -> Self {
        rshmem::F16::from_f32(v as f32 * (1.0 + 1.0 / 1024.0))
    }
}
impl El for rshmem::BF16 {
    fn of(v: i32) -> Self {
        rshmem::BF16::from_f32(v as f32 * (1.0 + 1.0 / 128.0))
    }
}

/// Reference of a 16-bit float reduction step: `f` on the exact f32 values, rounded to
/// nearest-even to 16 bits (the semantics docs/collectives.md gives).
fn half_op<T: El>(
    to: fn(T) -> f32,
    from: fn(f32) -> T,
    f: fn(f32, f32) -> f32,
) -> impl Fn(T, T) -> T {
    move |a, b| from(f(to(a), to(b)))
}

/// Integer element types: every operator, with wrapping reference arithmetic.
trait IntEl: El + rshmem::BitwiseReduceType + Ord {
    fn wadd(self, b: Self) -> Self;
    fn wmul(self, b: Self) -> Self;
    fn band(self, b: Self) -> Self;
    fn bor(self, b: Self) -> Self;
    fn bxor(self, b: Self) -> Self;
}
macro_rules! int_el {
    ($($t:ty),*) => {$(
        impl El for $t {
            fn of(v: i32) -> Self { v as $t }
        }
        impl IntEl for $t {
            fn wadd(self, b: Self) -> Self { self.wrapping_add(b) }
            fn wmul(self, b: Self) -> Self { self.wrapping_mul(b) }
            fn band(self, b: Self) -> Self { self & b }
            fn bor(self, b: Self) -> Self { self | b }
            fn bxor(self, b: Self) -> Self { self ^ b }
        }
    )*};
}
int_el!(i8, u16, i32, u32, i64, u64);

/// alltoalls_on_stream (dest stride 2, source stride 3; the elements between the strided ones
/// keep their poison) and collect_on_stream (team PE i contributes m + i elements) on every team
/// and size.
fn strided_and_collect(c: &Ctx<'_>, s: &CudaStream, ts: &[(String, Team)]) -> R {
    let w = c.w;
    let max = SIZES.iter().copied().max().unwrap_or(1);
    let n = c.n;
    let src = w.malloc::<i32>(3 * n * max + n * n).ctx("malloc")?;
    let dst = w.malloc::<i32>(2 * n * max + n * n + 16).ctx("malloc")?;
    for (name, t) in ts {
        let (tn, me) = (t.n_pes(), t.my_pe());
        let wp = |j: usize| t.members()[j];
        for &m in SIZES {
            // alltoalls
            let slen = 3 * (tn * m - 1) + 1;
            let dlen = 2 * (tn * m - 1) + 1;
            src.copy_from_slice(&(0..slen).map(|i| input(wp(me), i, 60)).collect::<Vec<_>>())
                .ctx("fill")?;
            dst.copy_from_slice(&vec![POISON; dlen + 8]).ctx("poison")?;
            w.team_sync(t).ctx("team_sync")?;
            w.alltoalls_on_stream(t, dst.as_ptr(), src.as_ptr(), 2, 3, m, s)
                .ctx("alltoalls_on_stream")?;
            sync(s)?;
            let got = dst.to_vec().ctx("read")?;
            let want: Vec<i32> = (0..dlen + 8)
                .map(|x| {
                    if x % 2 == 0 && x / 2 < tn * m {
                        let i = x / 2; // element i of my dest: block i / m from that PE
                        let (j, k) = (i / m, i % m);
                        input(wp(j), (me * m + k) * 3, 60)
                    } else {
                        POISON
                    }
                })
                .collect();
            expect_eq(
                format!("alltoalls_on_stream on team {name} with {m} elements per PE"),
                want,
                got[..dlen + 8].to_vec(),
            )?;
            w.team_sync(t).ctx("team_sync")?;
            // collect
            let mine = m + me;
            let total: usize = (0..tn).map(|j| m + j).sum();
            src.copy_from_slice(&(0..mine).map(|i| input(wp(me), i, 61)).collect::<Vec<_>>())
                .ctx("fill")?;
            dst.copy_from_slice(&vec![POISON; total + 8])
                .ctx("poison")?;
            w.team_sync(t).ctx("team_sync")?;
            w.collect_on_stream(t, dst.as_ptr(), src.as_ptr(), mine, s)
                .ctx("collect_on_stream")?;
            sync(s)?;
            let got = dst.to_vec().ctx("read")?;
            let mut want = Vec::with_capacity(total + 8);
            for j in 0..tn {
                want.extend((0..m + j).map(|i| input(wp(j), i, 61)));
            }
            want.extend([POISON; 8]);
            expect_eq(
                format!("collect_on_stream on team {name} with {m}+i elements on team PE i"),
                want,
                got[..total + 8].to_vec(),
            )?;
            w.team_sync(t).ctx("team_sync")?;
        }
    }
    w.free(dst).ctx("free")?;
    w.free(src).ctx("free")
}

/// Every operator on the integer type `T` (its own buffers), for every team and two sizes.
fn int_type_round<T: IntEl>(c: &Ctx<'_>, s: &CudaStream, ts: &[(String, Team)]) -> R {
    let w = c.w;
    let cap = 1000 * c.n + 8;
    let src = w.malloc::<T>(cap).ctx("malloc")?;
    let dst = w.malloc::<T>(cap).ctx("malloc")?;
    for (name, t) in ts {
        for m in [7, 1000] {
            let b = Bufs {
                c,
                s,
                team: t,
                name,
                m,
            };
            b.reduces::<T>(&src, &dst, 5)?;
        }
    }
    w.free(dst).ctx("free")?;
    w.free(src).ctx("free")
}

/// The teams tested (those this PE is in), with names.
fn teams(w: &World) -> Result<Vec<(String, Team)>, Error> {
    let world = w.team_world();
    let n = w.n_pes();
    let mut v = vec![("world".to_string(), world.clone())];
    if let Some(t) = w.team_split_strided(&world, 0, 2, n.div_ceil(2))? {
        v.push(("even".to_string(), t));
    }
    if n >= 4 {
        let (x, y) = w.team_split_2d(&world, 2)?;
        v.push(("2d-row".to_string(), x));
        v.push(("2d-col".to_string(), y));
    }
    Ok(v)
}

pub fn run(c: &Ctx<'_>) -> R {
    let w = c.w;
    let Some(gpu) = w.gpu() else {
        crate::note!(
            "PE {}: gpucoll: CPU backend, nothing to check (the stream collectives need a CUDA stream)",
            c.me
        );
        return Ok(());
    };
    let stream = gpu
        .ctx
        .new_stream()
        .map_err(|e| fail(format!("new_stream: {e:?}")))?;
    let max = SIZES.iter().copied().max().unwrap_or(1).max(BIG);
    let cap = max * c.n;
    let src = w.malloc::<i32>(cap).ctx("malloc src")?;
    let dst = w.malloc::<i32>(cap + 8).ctx("malloc dst")?;
    let fsrc = w.malloc::<f32>(cap).ctx("malloc fsrc")?;
    let fdst = w.malloc::<f32>(cap + 8).ctx("malloc fdst")?;
    let dsrc = w.malloc::<f64>(cap).ctx("malloc dsrc")?;
    let ddst = w.malloc::<f64>(cap + 8).ctx("malloc ddst")?;
    let hsrc = w.malloc::<rshmem::F16>(cap).ctx("malloc hsrc")?;
    let hdst = w.malloc::<rshmem::F16>(cap + 8).ctx("malloc hdst")?;
    let bsrc = w.malloc::<rshmem::BF16>(cap).ctx("malloc bsrc")?;
    let bdst = w.malloc::<rshmem::BF16>(cap + 8).ctx("malloc bdst")?;
    let ts = teams(w).ctx("team splits")?;
    for (name, t) in &ts {
        for &m in SIZES {
            let ctx = Bufs {
                c,
                s: &stream,
                team: t,
                name,
                m,
            };
            ctx.bytes_colls(&src, &dst)?;
            ctx.reduces::<i32>(&src, &dst, 0)?;
            ctx.reduce_one::<f32, Sum>(&fsrc, &fdst, 1, |a, b| a + b)?;
            ctx.reduce_one::<f64, Min>(&dsrc, &ddst, 2, |a, b| if b < a { b } else { a })?;
            ctx.reduce_one::<f64, Max>(&dsrc, &ddst, 3, |a, b| if b > a { b } else { a })?;
            if m <= 1000 {
                ctx.reduce_one::<f32, Prod>(&fsrc, &fdst, 4, |a, b| a * b)?;
                ctx.reduce_one::<f32, Min>(&fsrc, &fdst, 4, |a, b| if b < a { b } else { a })?;
                ctx.reduce_one::<f32, Max>(&fsrc, &fdst, 4, |a, b| if b > a { b } else { a })?;
                ctx.reduce_one::<f64, Sum>(&dsrc, &ddst, 4, |a, b| a + b)?;
                ctx.reduce_one::<f64, Prod>(&dsrc, &ddst, 4, |a, b| a * b)?;
            }
            ctx.halves(&hsrc, &hdst, &bsrc, &bdst, m <= 1000)?;
        }
    }
    strided_and_collect(c, &stream, &ts)?;
    int_type_round::<i8>(c, &stream, &ts)?;
    int_type_round::<u16>(c, &stream, &ts)?;
    int_type_round::<u32>(c, &stream, &ts)?;
    int_type_round::<i64>(c, &stream, &ts)?;
    int_type_round::<u64>(c, &stream, &ts)?;
    Bufs {
        c,
        s: &stream,
        team: &w.team_world(),
        name: "world",
        m: BIG,
    }
    .bytes_colls(&src, &dst)?;
    device_api(c, &stream, &src, &dst)?;
    errors(c, &stream, &src, &dst)?;
    for (_, t) in ts.into_iter().skip(1) {
        w.team_destroy(t).ctx("team_destroy")?;
    }
    c.barrier("gpucoll end")?;
    w.free(bdst).ctx("free")?;
    w.free(bsrc).ctx("free")?;
    w.free(hdst).ctx("free")?;
    w.free(hsrc).ctx("free")?;
    w.free(ddst).ctx("free")?;
    w.free(dsrc).ctx("free")?;
    w.free(fdst).ctx("free")?;
    w.free(fsrc).ctx("free")?;
    w.free(dst).ctx("free")?;
    w.free(src).ctx("free")
}

struct Bufs<'a, 'w> {
    c: &'a Ctx<'w>,
    s: &'a CudaStream,
    team: &'a Team,
    name: &'a str,
    m: usize,
}

impl Bufs<'_, '_> {
    fn what(&self, coll: &str) -> String {
        format!(
            "{coll} on team {} with {} elements per PE",
            self.name, self.m
        )
    }

    /// Fills src with `f(i)` over `len` elements and poisons dst; syncs the team.
    fn prepare<T: El>(
        &self,
        src: &SymBuf<'_, T>,
        dst: &SymBuf<'_, T>,
        len: usize,
        f: impl Fn(usize) -> T,
    ) -> R {
        src.copy_from_slice(&(0..len).map(f).collect::<Vec<_>>())
            .ctx("fill src")?;
        dst.copy_from_slice(&vec![T::of(POISON); len + 8])
            .ctx("poison dst")?;
        self.c.w.team_sync(self.team).ctx("team_sync")
    }

    /// Checks dst[..want.len()] == want and the 8 elements after it still poisoned.
    fn check<T: El>(&self, what: &str, dst: &SymBuf<'_, T>, want: Vec<T>) -> R {
        sync(self.s)?;
        let got = dst.to_vec().ctx("read dst")?;
        let k = want.len();
        expect_eq(self.what(what), want, got[..k].to_vec())?;
        ensure!(
            got[k..k + 8].iter().all(|&v| v == T::of(POISON)),
            "{}: the bytes after the result were written",
            self.what(what)
        );
        // Nobody refills its buffers before everyone has checked.
        self.c.w.team_sync(self.team).ctx("team_sync")
    }

    fn bytes_colls(&self, src: &SymBuf<'_, i32>, dst: &SymBuf<'_, i32>) -> R {
        let w = self.c.w;
        let t = self.team;
        let (n, me, m) = (t.n_pes(), t.my_pe(), self.m);
        let wp = |j: usize| t.members()[j];
        // alltoall: my block j = input(me, j*m + k).
        self.prepare(src, dst, n * m, |i| input(wp(me), i, 10))?;
        w.alltoall_on_stream(t, dst.as_ptr(), src.as_ptr(), m, self.s)
            .ctx("alltoall_on_stream")?;
        let want = (0..n * m)
            .map(|i| input(wp(i / m), me * m + i % m, 10))
            .collect();
        self.check("alltoall_on_stream", dst, want)?;
        // fcollect.
        self.prepare(src, dst, n * m, |i| input(wp(me), i, 11))?;
        w.fcollect_on_stream(t, dst.as_ptr(), src.as_ptr(), m, self.s)
            .ctx("fcollect_on_stream")?;
        let want = (0..n * m).map(|i| input(wp(i / m), i % m, 11)).collect();
        self.check("fcollect_on_stream", dst, want)?;
        // broadcast from the first and the last team PE.
        for root in [0, n - 1] {
            self.prepare(src, dst, m, |i| input(wp(me), i, 12 + root))?;
            w.broadcast_on_stream(t, dst.as_ptr(), src.as_ptr(), m, root, self.s)
                .ctx("broadcast_on_stream")?;
            let want = (0..m).map(|i| input(wp(root), i, 12 + root)).collect();
            self.check(&format!("broadcast_on_stream root {root}"), dst, want)?;
        }
        Ok(())
    }

    fn reduces<T: IntEl>(&self, src: &SymBuf<'_, T>, dst: &SymBuf<'_, T>, salt: usize) -> R {
        self.reduce_one::<T, Sum>(src, dst, salt, |a, b| a.wadd(b))?;
        self.reduce_one::<T, Prod>(src, dst, salt, |a, b| a.wmul(b))?;
        self.reduce_one::<T, Min>(src, dst, salt, |a, b| a.min(b))?;
        self.reduce_one::<T, Max>(src, dst, salt, |a, b| a.max(b))?;
        self.reduce_one::<T, And>(src, dst, salt, |a, b| a.band(b))?;
        self.reduce_one::<T, Or>(src, dst, salt, |a, b| a.bor(b))?;
        self.reduce_one::<T, Xor>(src, dst, salt, |a, b| a.bxor(b))
    }

    /// The 16-bit float reductions: half sum and bfloat16 max at every size; with `all`, every
    /// other operator of both types too.
    fn halves(
        &self,
        hsrc: &SymBuf<'_, rshmem::F16>,
        hdst: &SymBuf<'_, rshmem::F16>,
        bsrc: &SymBuf<'_, rshmem::BF16>,
        bdst: &SymBuf<'_, rshmem::BF16>,
        all: bool,
    ) -> R {
        use rshmem::{BF16, F16};
        let (hto, hfrom) = (
            F16::to_f32 as fn(F16) -> f32,
            F16::from_f32 as fn(f32) -> F16,
        );
        let (bto, bfrom) = (
            BF16::to_f32 as fn(BF16) -> f32,
            BF16::from_f32 as fn(f32) -> BF16,
        );
        let add: fn(f32, f32) -> f32 = |a, b| a + b;
        let mul: fn(f32, f32) -> f32 = |a, b| a * b;
        let min: fn(f32, f32) -> f32 = |a, b| if b < a { b } else { a };
        let max: fn(f32, f32) -> f32 = |a, b| if b > a { b } else { a };
        self.reduce_one::<F16, Sum>(hsrc, hdst, 5, half_op(hto, hfrom, add))?;
        self.reduce_one::<BF16, Max>(bsrc, bdst, 6, half_op(bto, bfrom, max))?;
        if all {
            self.reduce_one::<F16, Prod>(hsrc, hdst, 7, half_op(hto, hfrom, mul))?;
            self.reduce_one::<F16, Min>(hsrc, hdst, 8, half_op(hto, hfrom, min))?;
            self.reduce_one::<F16, Max>(hsrc, hdst, 9, half_op(hto, hfrom, max))?;
            self.reduce_one::<BF16, Sum>(bsrc, bdst, 10, half_op(bto, bfrom, add))?;
            self.reduce_one::<BF16, Prod>(bsrc, bdst, 11, half_op(bto, bfrom, mul))?;
            self.reduce_one::<BF16, Min>(bsrc, bdst, 12, half_op(bto, bfrom, min))?;
        }
        Ok(())
    }

    /// reduce (separate and in place) and reducescatter with `O`, against `f` in team order.
    fn reduce_one<T: El, O: ReduceOp<T> + Default>(
        &self,
        src: &SymBuf<'_, T>,
        dst: &SymBuf<'_, T>,
        salt: usize,
        f: impl Fn(T, T) -> T,
    ) -> R {
        let w = self.c.w;
        let t = self.team;
        let (n, me, m) = (t.n_pes(), t.my_pe(), self.m);
        let wp = |j: usize| t.members()[j];
        let v = |pe: usize, i: usize| T::of(input(pe, i, salt + 20));
        let red = |i: usize| (1..n).fold(v(wp(0), i), |a, j| f(a, v(wp(j), i)));
        let name = O::CALL;
        // reduce into dst.
        self.prepare(src, dst, m, |i| v(wp(me), i))?;
        w.reduce_on_stream(t, dst.as_ptr(), src.as_ptr(), m, O::default(), self.s)
            .ctx(name)?;
        self.check(&format!("{name}_on_stream"), dst, (0..m).map(red).collect())?;
        // in place: dst = src.
        self.prepare(dst, src, m, |i| v(wp(me), i))?;
        w.reduce_on_stream(t, dst.as_ptr(), dst.as_ptr(), m, O::default(), self.s)
            .ctx(name)?;
        sync(self.s)?;
        let got = dst.to_vec().ctx("read")?;
        expect_eq(
            self.what(&format!("{name}_on_stream in place")),
            (0..m).map(red).collect::<Vec<_>>(),
            got[..m].to_vec(),
        )?;
        w.team_sync(t).ctx("team_sync")?;
        // reducescatter: block me of the reduction of n*m elements.
        self.prepare(src, dst, n * m, |i| v(wp(me), i))?;
        w.reducescatter_on_stream(t, dst.as_ptr(), src.as_ptr(), m, O::default(), self.s)
            .ctx("reducescatter_on_stream")?;
        self.check(
            &format!("reducescatter_on_stream ({name})"),
            dst,
            (0..m).map(|i| red(me * m + i)).collect(),
        )
    }
}

const DEVICE_KERNEL: &str = r#"
#include "rshmem/rshmem.cuh"
#include "rshmem/coll.cuh"
// Block scope: alltoall + int sum reduce (m elements: the element-wise pushes); warp: fcollect;
// thread: broadcast from team PE 1 % n and an int sum reduce of 32 elements into red + 40 (the
// 16-byte pushes); then the team queries.
extern "C" __global__ void colls(int team, int* dest, const int* src, int* red, size_t m,
                                 int* info) {
    rshmem_int_alltoall_block(team, dest, src, m);
    rshmem_int_sum_reduce_block(team, red, src, m);
    if (threadIdx.x < 32) {
        rshmem_int_fcollect_warp(team, dest + rshmem_team_n_pes(team) * m, src, m);
        // collect with m elements from every PE into the third region (same as fcollect).
        rshmem_int_collect_warp(team, dest + 3 * rshmem_team_n_pes(team) * m, src, m);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int n = rshmem_team_n_pes(team);
        rshmem_int_broadcast(team, dest + 2 * n * m, src, m, 1 % n);
        rshmem_int_sum_reduce(team, red + 40, src, 32);
        info[0] = rshmem_team_my_pe(team);
        info[1] = n;
        info[2] = rshmem_team_translate_pe(team, n - 1, RSHMEM_TEAM_WORLD);
        rshmem_barrier(team);
    }
}
"#;

/// A user kernel calling the device collectives on the world team's handle, checked like the
/// stream forms.
fn device_api(c: &Ctx<'_>, s: &CudaStream, src: &SymBuf<'_, i32>, dst: &SymBuf<'_, i32>) -> R {
    let w = c.w;
    let t = w.team_world();
    let (n, me, m) = (t.n_pes(), t.my_pe(), 37usize);
    let wp = |j: usize| t.members()[j];
    src.copy_from_slice(&(0..n * m).map(|i| input(wp(me), i, 40)).collect::<Vec<_>>())
        .ctx("fill")?;
    dst.copy_from_slice(&vec![POISON; 4 * n * m + 8])
        .ctx("poison")?;
    let red = w.malloc::<i32>(72).ctx("malloc red")?;
    let info = w.calloc::<i32>(3).ctx("calloc info")?;
    w.barrier_all().ctx("barrier_all")?;
    let module = w.load_module(DEVICE_KERNEL).ctx("load_module")?;
    let f = module.function("colls").ctx("function")?;
    let (h, d, sp, r, mm, ip) = (
        t.device_handle(),
        dst.as_ptr() as u64,
        src.as_ptr() as u64,
        red.as_ptr() as u64,
        m as u64,
        info.as_ptr() as u64,
    );
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: colls(int, int*, const int*, int*, size_t, int*) with symmetric allocations large
    // enough for 3·n·m, n·m, 72 (m = 37 ≤ 40, then 32) and 3 ints.
    unsafe {
        s.launch_builder(&f)
            .arg(&h)
            .arg(&d)
            .arg(&sp)
            .arg(&r)
            .arg(&mm)
            .arg(&ip)
            .launch(cfg)
    }
    .map_err(|e| fail(format!("launch: {e:?}")))?;
    sync(s)?;
    let got = dst.to_vec().ctx("read")?;
    let a2a: Vec<i32> = (0..n * m)
        .map(|i| input(wp(i / m), me * m + i % m, 40))
        .collect();
    expect_eq(
        "device rshmem_int_alltoall_block",
        a2a,
        got[..n * m].to_vec(),
    )?;
    let fc: Vec<i32> = (0..n * m).map(|i| input(wp(i / m), i % m, 40)).collect();
    expect_eq(
        "device rshmem_int_fcollect_warp",
        fc.clone(),
        got[n * m..2 * n * m].to_vec(),
    )?;
    expect_eq(
        "device rshmem_int_collect_warp",
        fc,
        got[3 * n * m..4 * n * m].to_vec(),
    )?;
    let bc: Vec<i32> = (0..m).map(|i| input(wp(1 % n), i, 40)).collect();
    expect_eq(
        "device rshmem_int_broadcast",
        bc,
        got[2 * n * m..2 * n * m + m].to_vec(),
    )?;
    let sum: Vec<i32> = (0..m)
        .map(|i| (0..n).fold(0i32, |a, j| a.wrapping_add(input(wp(j), i, 40))))
        .collect();
    let red_got = red.to_vec().ctx("read")?;
    expect_eq(
        "device rshmem_int_sum_reduce_block",
        sum.clone(),
        red_got[..m].to_vec(),
    )?;
    expect_eq(
        "device rshmem_int_sum_reduce (32 elements, 16-byte pushes)",
        sum[..32].to_vec(),
        red_got[40..72].to_vec(),
    )?;
    expect_eq(
        "device team queries (my_pe, n_pes, translate of the last PE)",
        vec![me as i32, n as i32, wp(n - 1) as i32],
        info.to_vec().ctx("read")?,
    )?;
    w.barrier_all().ctx("barrier_all")?;
    w.free(info).ctx("free")?;
    w.free(red).ctx("free")
}

fn errors(c: &Ctx<'_>, s: &CudaStream, src: &SymBuf<'_, i32>, dst: &SymBuf<'_, i32>) -> R {
    let w = c.w;
    let t = w.team_world();
    let mut local = [0i32; 4];
    expect_err(
        "alltoall_on_stream with a private dest",
        w.alltoall_on_stream(&t, local.as_mut_ptr(), src.as_ptr(), 1, s),
        Kind::NotSymmetric,
        "alltoall_on_stream",
    )?;
    expect_err(
        "broadcast_on_stream with root = n_pes",
        w.broadcast_on_stream(&t, dst.as_ptr(), src.as_ptr(), 1, c.n, s),
        Kind::Invalid,
        "broadcast_on_stream",
    )?;
    expect_err(
        "fcollect_on_stream with overlapping dest and source",
        w.fcollect_on_stream(&t, dst.as_ptr(), dst.as_ptr(), 1, s),
        Kind::Invalid,
        "fcollect_on_stream",
    )?;
    expect_err(
        "reduce_on_stream past the end of the allocation",
        w.reduce_on_stream(&t, dst.as_ptr(), src.as_ptr(), usize::MAX / 8, Sum, s),
        Kind::NotSymmetric,
        "reduce_on_stream",
    )?;
    c.barrier("gpucoll errors end")
}
