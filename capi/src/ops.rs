//! Generic bodies of the typed C entry points: argument conversion and the calls into
//! [`rshmem::World`], which resolves every symmetric address (heap or the program's data
//! segment, a symmetric region of the runtime).
//!
//! Every function takes the C call's name for error messages; pointer arguments are what the C
//! program passed, valid as OpenSHMEM 1.5 requires.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rshmem::{AmoBitwise, AmoInt, AmoType, Cmp, RmaType, SignalOp};

use capi_core::args::{world_set, SetInputs};
pub use capi_core::args::{Set, SetArgs};
pub use capi_core::Way;
use capi_core::{host_put_signal, host_rma};

use crate::{msg, with, CResult, Rt, ABI};

/// Validates a C PE number and returns the world PE: within a `shmem_ctx_*` call on a team's
/// context, `pe` is a number in that team (see `ctx.rs`).
#[inline]
pub fn pe_of(rt: &Rt, pe: c_int) -> CResult<usize> {
    crate::ctx::world_pe(rt, pe)
}

/// Checks a context handle (`SHMEM_CTX_INVALID`, unknown and destroyed handles are errors) and
/// selects it for the operation the calling `shmem_ctx_*` entry point runs next.
#[inline]
pub fn ctx(call: &'static str, ctx: *mut c_void) {
    crate::ctx::select(call, ctx)
}

/// Converts a C comparison constant.
pub fn cmp_of(cmp: c_int) -> CResult<Cmp> {
    ABI.cmp_of(cmp)
}

/// Converts a C signal operation.
pub fn sigop_of(op: c_int) -> CResult<SignalOp> {
    ABI.sigop_of(op)
}

/// A local buffer of `n` elements as a slice.
///
/// # Safety
/// `p` must be valid for reads of `n` elements (when `n > 0`) for `'a`.
unsafe fn src_slice<'a, T>(p: *const T, n: usize) -> CResult<&'a [T]> {
    // SAFETY: the caller's contract.
    unsafe { capi_core::src_slice("the source buffer", p, n) }
}

/// A local buffer of `n` elements as a mutable slice.
///
/// # Safety
/// `p` must be valid for writes of `n` elements (when `n > 0`) for `'a`.
unsafe fn dst_slice<'a, T>(p: *mut T, n: usize) -> CResult<&'a mut [T]> {
    // SAFETY: the caller's contract.
    unsafe { capi_core::dst_slice("the destination buffer", p, n) }
}

/// `shmem_TYPE_put`, `putmem`, `putSIZE` (`Way::Put`) and `shmem_TYPE_get`, `getmem`,
/// `getSIZE` (`Way::Get`), and with `nbi` their `_nbi` forms: those may read the source, or
/// fill the destination, until the next quiet (OpenSHMEM's rule), so over UCX they are only
/// posted.
///
/// # Safety
/// The local buffer (`src` of a put, `dest` of a get) valid for `n` reads or writes (`nbi`:
/// and left alone until the next quiet returns).
pub unsafe fn rma<T: RmaType>(
    call: &'static str,
    way: Way,
    dest: *mut T,
    src: *const T,
    n: usize,
    pe: c_int,
    nbi: bool,
) {
    let (local, remote) = match way {
        Way::Put => (src, dest.cast_const()),
        Way::Get => (dest.cast_const(), src),
    };
    on_pe(call, pe, |rt, pe| {
        // SAFETY: the caller's contract.
        unsafe { host_rma(&rt.world, way, local, remote, n, pe, nbi) }
    })
}

/// `shmem_TYPE_p`.
///
/// # Safety
/// `dest` is a symmetric address (checked) or garbage the checks reject.
pub unsafe fn p<T: RmaType>(call: &'static str, dest: *mut T, v: T, pe: c_int) {
    // SAFETY: one local element.
    unsafe { rma(call, Way::Put, dest, &v, 1, pe, false) }
}

/// `shmem_TYPE_g`.
///
/// # Safety
/// As [`p`].
pub unsafe fn g<T: RmaType + Default>(call: &'static str, src: *const T, pe: c_int) -> T {
    let mut v = T::default();
    // SAFETY: one local element.
    unsafe { rma(call, Way::Get, &mut v, src, 1, pe, false) };
    v
}

/// Runs `f` with the runtime and PE `pe` checked ([`pe_of`]): the start of every one-sided call;
/// any error ends the job naming `call`.
fn on_pe<R>(call: &'static str, pe: c_int, f: impl FnOnce(&Rt, usize) -> CResult<R>) -> R {
    with(call, |rt| f(rt, pe_of(rt, pe)?))
}

fn stride(s: isize) -> CResult<usize> {
    if s < 1 {
        return msg(format!("stride {s} is not positive"));
    }
    Ok(s as usize)
}

/// What a strided transfer moves: `n` single elements (`iput`/`iget`) or `nblocks` blocks of
/// `bsize` elements (`ibput`/`ibget`, 1.6).
#[derive(Clone, Copy)]
pub enum Shape {
    /// `n` elements, one per stride.
    Elems(usize),
    /// `nblocks` blocks of `bsize` contiguous elements, one block per stride.
    Blocks {
        /// Elements per block.
        bsize: usize,
        /// How many blocks.
        nblocks: usize,
    },
}

/// The strided and blocked transfers; strides count elements.
///
/// `Shape::Elems(n)`: `shmem_TYPE_iput`, `shmem_iputSIZE` (`Way::Put`) and `shmem_TYPE_iget`,
/// `shmem_igetSIZE` (`Way::Get`): element `i` of the target is `dest[i·dst]`, of the source
/// `src[i·sst]`.
///
/// `Shape::Blocks`: `shmem_TYPE_ibput`, `shmem_ibputSIZE` (`Way::Put`): block `b` (`bsize`
/// elements) of the target starts at `dest[b·dst]`, of the source at `src[b·sst]`, for
/// `b < nblocks`; strides are at least `bsize`. Each block is one contiguous put; returns when
/// the source may be reused (like `shmem_put`). `shmem_TYPE_ibget`, `shmem_ibgetSIZE`
/// (`Way::Get`): the same, from PE `pe`'s `src` into the local `dest`; returns when the data is
/// in `dest`.
///
/// # Safety
/// The local buffer (`src` with `sst` of a put, `dest` with `dst` of a get) valid for
/// `(n-1)·stride+1` elements, or `(nblocks-1)·stride+bsize`.
pub unsafe fn strided<T: RmaType>(
    call: &'static str,
    way: Way,
    dest: *mut T,
    src: *const T,
    (dst, sst): (isize, isize),
    shape: Shape,
    pe: c_int,
) {
    on_pe(call, pe, |rt, pe| {
        let (dst, sst) = (stride(dst)?, stride(sst)?);
        match shape {
            Shape::Elems(n) => {
                if n == 0 {
                    return Ok(());
                }
                let local = if way == Way::Put { sst } else { dst };
                let Some(span) = (n - 1).checked_mul(local).and_then(|x| x.checked_add(1)) else {
                    return msg("stride × nelems overflows");
                };
                match way {
                    Way::Put => {
                        // SAFETY: the caller's contract.
                        let s = unsafe { src_slice(src, span) }?;
                        Ok(rt.world.iput(dest, s, dst, sst, n, pe)?)
                    }
                    Way::Get => {
                        // SAFETY: the caller's contract.
                        let d = unsafe { dst_slice(dest, span) }?;
                        Ok(rt.world.iget(d, src, dst, sst, n, pe)?)
                    }
                }
            }
            Shape::Blocks { bsize, nblocks } => {
                if bsize == 0 || nblocks == 0 {
                    return Ok(());
                }
                let dspan = blocked_span::<T>("dst", dst, bsize, nblocks)?;
                let sspan = blocked_span::<T>("sst", sst, bsize, nblocks)?;
                let w = &rt.world;
                match way {
                    Way::Put => {
                        // SAFETY: the caller's contract (checked for NULL and alignment here).
                        let s = unsafe { src_slice(src, sspan) }?;
                        for b in 0..nblocks {
                            // `b·dst` lies inside the extent checked above; the runtime
                            // checks the target.
                            w.put(dest.wrapping_add(b * dst), &s[b * sst..b * sst + bsize], pe)?;
                        }
                    }
                    Way::Get => {
                        // SAFETY: the caller's contract (checked for NULL and alignment here).
                        let d = unsafe { dst_slice(dest, dspan) }?;
                        for b in 0..nblocks {
                            // `b·sst` lies inside the extent checked above; the runtime
                            // checks the source.
                            w.get(
                                &mut d[b * dst..b * dst + bsize],
                                src.wrapping_add(b * sst),
                                pe,
                            )?;
                        }
                    }
                }
                Ok(())
            }
        }
    })
}

/// The extent, in elements, of `nblocks` blocks of `bsize` elements `stride` apart
/// (`(nblocks - 1)·stride + bsize`), after checking the stride against the block size; `what`
/// names the stride (`dst`, `sst`) in errors. `nblocks` and `bsize` are not zero.
fn blocked_span<T>(what: &str, stride: usize, bsize: usize, nblocks: usize) -> CResult<usize> {
    if stride < bsize {
        return msg(format!(
            "{what} {stride} is less than bsize {bsize}: the blocks would overlap"
        ));
    }
    (nblocks - 1)
        .checked_mul(stride)
        .and_then(|x| x.checked_add(bsize))
        .filter(|&x| x.checked_mul(std::mem::size_of::<T>()).is_some())
        .map_or_else(
            || {
                msg(format!(
                    "{what} {stride} × nblocks {nblocks} overflows the address space"
                ))
            },
            Ok,
        )
}

/// Element types of the atomics, as bits (the data-segment path).
pub trait Amo: AmoType + Default {
    /// Zero-extended bits.
    fn bits(self) -> u64;
    /// From (truncated) bits.
    fn of_bits(b: u64) -> Self;
}

macro_rules! amo_ints {
    ($($t:ty => $u:ty),*) => {$(
        impl Amo for $t {
            fn bits(self) -> u64 { self as $u as u64 }
            fn of_bits(b: u64) -> Self { b as $u as $t }
        }
    )*};
}
amo_ints!(i32 => u32, u32 => u32, i64 => u64, u64 => u64, isize => u64, usize => u64);
impl Amo for f32 {
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn of_bits(b: u64) -> Self {
        f32::from_bits(b as u32)
    }
}
impl Amo for f64 {
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn of_bits(b: u64) -> Self {
        f64::from_bits(b)
    }
}

/// An atomic operation on a word.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Read.
    Fetch,
    /// Store.
    Set,
    /// Exchange.
    Swap,
    /// Compare-and-swap with this expected value.
    Cswap(u64),
    /// Wrapping add.
    Add,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise xor.
    Xor,
}

/// Atomics of every AMO type (fetch, set, swap).
pub fn amo_ext<T: Amo>(call: &'static str, dest: *mut T, op: Op, v: T, pe: c_int) -> T {
    on_pe(call, pe, |rt, pe| {
        let w = &rt.world;
        Ok(match op {
            Op::Fetch => w.atomic_fetch(dest, pe)?,
            Op::Set => {
                w.atomic_set(dest, v, pe)?;
                T::default()
            }
            _ => w.atomic_swap(dest, v, pe)?,
        })
    })
}

/// Arithmetic atomics (compare_swap, add, inc).
pub fn amo_int<T: Amo + AmoInt>(call: &'static str, dest: *mut T, op: Op, v: T, pe: c_int) -> T {
    on_pe(call, pe, |rt, pe| {
        let w = &rt.world;
        Ok(match op {
            Op::Cswap(c) => w.atomic_compare_swap(dest, T::of_bits(c), v, pe)?,
            _ => w.atomic_fetch_add(dest, v, pe)?,
        })
    })
}

/// Bitwise atomics.
pub fn amo_bit<T: Amo + AmoBitwise>(
    call: &'static str,
    dest: *mut T,
    op: Op,
    v: T,
    pe: c_int,
) -> T {
    on_pe(call, pe, |rt, pe| {
        let w = &rt.world;
        Ok(match op {
            Op::And => w.atomic_fetch_and(dest, v, pe)?,
            Op::Or => w.atomic_fetch_or(dest, v, pe)?,
            _ => w.atomic_fetch_xor(dest, v, pe)?,
        })
    })
}

/// Stores a fetched value for the `_nbi` fetching atomics.
///
/// # Safety
/// `fetch` valid for one write.
pub unsafe fn store_fetch<T>(call: &'static str, fetch: *mut T, v: T) {
    if fetch.is_null() || (fetch as usize) % std::mem::align_of::<T>() != 0 {
        crate::fatal(call, "the fetch address is NULL or misaligned");
    }
    // SAFETY: non-null, aligned, valid by the caller's contract.
    unsafe { fetch.write(v) };
}

/// The atomics that return nothing (`shmem_TYPE_atomic_set`): as [`amo_ext`].
pub fn amo_ext_post<T: Amo>(call: &'static str, dest: *mut T, op: Op, v: T, pe: c_int) {
    amo_ext(call, dest, op, v, pe);
}

/// The arithmetic atomics that return nothing (`add`, `inc`): the runtime may post them to a
/// PE of another host (complete at the next quiet).
pub fn amo_int_post<T: Amo + AmoInt>(call: &'static str, dest: *mut T, op: Op, v: T, pe: c_int) {
    if !matches!(op, Op::Add) {
        amo_int(call, dest, op, v, pe);
        return;
    }
    on_pe(call, pe, |rt, pe| Ok(rt.world.atomic_add(dest, v, pe)?));
}

/// The bitwise atomics that return nothing (`and`, `or`, `xor`): posted like
/// [`amo_int_post`].
pub fn amo_bit_post<T: Amo + AmoBitwise>(
    call: &'static str,
    dest: *mut T,
    op: Op,
    v: T,
    pe: c_int,
) {
    on_pe(call, pe, |rt, pe| {
        let w = &rt.world;
        match op {
            Op::And => w.atomic_and(dest, v, pe)?,
            Op::Or => w.atomic_or(dest, v, pe)?,
            _ => w.atomic_xor(dest, v, pe)?,
        }
        Ok(())
    });
}

// ---- signals ----

/// `shmem_put_signal` and its forms.
///
/// # Safety
/// `src` valid for `n` reads.
#[allow(clippy::too_many_arguments)]
pub unsafe fn put_signal<T: RmaType>(
    call: &'static str,
    dest: *mut T,
    src: *const T,
    n: usize,
    sig: *mut u64,
    signal: u64,
    op: c_int,
    pe: c_int,
) {
    on_pe(call, pe, |rt, pe| {
        let sig = (sig, signal, sigop_of(op)?);
        // SAFETY: the caller's contract.
        unsafe { host_put_signal(&rt.world, dest, src, n, sig, pe, false) }
    })
}

/// `shmem_signal_set/add`.
pub fn signal_op(call: &'static str, sig: *mut u64, v: u64, op: SignalOp, pe: c_int) {
    on_pe(call, pe, |rt, pe| Ok(rt.world.signal_op(sig, v, op, pe)?))
}

/// `shmem_signal_fetch`.
pub fn signal_fetch(call: &'static str, sig: *const u64) -> u64 {
    with(call, |rt| Ok(rt.world.signal_fetch(sig)?))
}

/// `shmem_signal_wait_until`.
pub fn signal_wait_until(call: &'static str, sig: *const u64, cmp: c_int, v: u64) -> u64 {
    with(call, |rt| {
        let cmp = cmp_of(cmp)?;
        Ok(rt.world.signal_wait_until(sig, cmp, v)?)
    })
}

// ---- point-to-point synchronization ----

/// Types of the wait/test calls.
pub trait Watch: RmaType + PartialOrd + Default {
    /// Atomic acquire load.
    ///
    /// # Safety
    /// `addr` aligned and valid.
    unsafe fn load(addr: usize) -> Self;
}

macro_rules! watch {
    ($($t:ty => $a:ty, $u:ty);*) => {$(
        impl Watch for $t {
            unsafe fn load(addr: usize) -> Self {
                // SAFETY: the caller's contract.
                unsafe { <$a>::from_ptr(addr as *mut $u) }.load(Ordering::Acquire) as $t
            }
        }
    )*};
}
watch!(i16 => AtomicU16, u16; u16 => AtomicU16, u16; i32 => AtomicU32, u32; u32 => AtomicU32, u32;
       i64 => AtomicU64, u64; u64 => AtomicU64, u64; isize => AtomicU64, u64; usize => AtomicU64, u64);

type Loader<'a, T> = Box<dyn Fn(usize) -> CResult<T> + 'a>;

/// Polls `cond` until it holds, bounded by `RSHMEM_TIMEOUT`.
fn poll_mut(rt: &Rt, call: &str, cond: &mut dyn FnMut() -> CResult<bool>) -> CResult<()> {
    let t0 = Instant::now();
    let limit = rt.world.config().timeout;
    let mut spins = 0u32;
    loop {
        if cond()? {
            return Ok(());
        }
        spins = spins.saturating_add(1);
        if spins < 2000 {
            std::hint::spin_loop();
        } else if spins < 4000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        if spins % 1024 == 0 {
            if let Some(l) = limit {
                if t0.elapsed() > l {
                    return msg(format!(
                        "{call}: timed out after {:?} (RSHMEM_TIMEOUT) waiting on PE {}",
                        t0.elapsed(),
                        rt.world.my_pe()
                    ));
                }
            }
        }
    }
}

/// Runtime waits for the types that have them.
pub trait WorldWait: Watch {
    /// The wait/test through the World: (condition held, indices that hold); `None` (the
    /// default, the 16-bit types): poll here.
    fn world(
        _rt: &Rt,
        _a: &SetArgs<Self>,
        _i: &SetInputs<'_, Self>,
        _set: Set,
        _block: bool,
    ) -> Option<CResult<(bool, Vec<usize>)>> {
        None
    }
}

macro_rules! world_wait {
    ($($t:ty),*) => {$(
        impl WorldWait for $t {
            fn world(rt: &Rt, a: &SetArgs<Self>, i: &SetInputs<'_, Self>, set: Set,
                     block: bool) -> Option<CResult<(bool, Vec<usize>)>> {
                Some(world_set(&rt.world, a, i, set, block).map_err(Into::into))
            }
        }
    )*};
}
world_wait!(i32, u32, i64, u64, isize, usize);
impl WorldWait for i16 {}
impl WorldWait for u16 {}

/// A set wait/test (`n` elements; the single-variable forms are `n == 1`, `Set::All`).
/// Returns 1/0 for `All`, an index or `SIZE_MAX` for `Any`, a count for `Some` (indices written
/// to `a.indices`).
///
/// # Safety
/// The pointers in `a` valid for `a.n` elements where not NULL.
pub unsafe fn wait_set<T: WorldWait>(
    call: &'static str,
    a: SetArgs<T>,
    set: Set,
    block: bool,
) -> usize {
    with(call, |rt| {
        // SAFETY: the caller's contract.
        let i = unsafe { ABI.set_inputs(&a) }?;
        let via_world = if a.n == 0 {
            None
        } else {
            T::world(rt, &a, &i, set, block)
        };
        let answer = match via_world {
            Some(r) => r?,
            None => poll_set(rt, call, &a, &i, set, block)?,
        };
        // SAFETY: the caller's contract.
        unsafe { ABI.set_answer(&a, set, answer) }
    })
}

/// A set wait/test polled here (the types without runtime waits, and empty sets).
fn poll_set<T: Watch>(
    rt: &Rt,
    call: &str,
    a: &SetArgs<T>,
    i: &SetInputs<'_, T>,
    set: Set,
    block: bool,
) -> CResult<(bool, Vec<usize>)> {
    let me = rt.world.my_pe();
    let (cmp, status, values) = (i.cmp, i.status, i.values);
    let load: Loader<'_, T> = if a.n == 0 {
        Box::new(|_| Ok(T::default()))
    } else {
        // Heap variables of types without runtime waits: poll with g on this PE.
        let size = std::mem::size_of::<T>();
        let base = a.ivars as usize;
        Box::new(move |i| Ok(rt.world.g((base + i * size) as *const T, me)?))
    };
    let active: Vec<usize> = (0..a.n)
        .filter(|&i| status.is_none_or(|s| s[i] == 0))
        .collect();
    let val = |i: usize| values.map_or(a.value, |v| v[i]);
    let mut hits = Vec::new();
    let mut scan = || -> CResult<bool> {
        hits.clear();
        for &i in &active {
            if cmp.holds(load(i)?, val(i)) {
                hits.push(i);
            }
        }
        Ok(match set {
            Set::All => hits.len() == active.len(),
            _ => !hits.is_empty() || active.is_empty(),
        })
    };
    let ok = if block {
        poll_mut(rt, call, &mut scan)?;
        true
    } else {
        scan()?
    };
    if set == Set::Any {
        // The runtime's waits rotate the same way.
        hits = rshmem::pick_any(a.ivars as usize, a.n, &hits)
            .into_iter()
            .collect();
    }
    Ok((ok, hits))
}
