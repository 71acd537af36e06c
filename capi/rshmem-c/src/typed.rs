//! The host twins of the device library's typed and byte calls: RMA, signals, atomics,
//! point-to-point waits and tests, and the host collectives. Each family is a generic body
//! (the argument conversion and the call into [`rt::World`]) and a macro that defines the C
//! entry points of every type in its table (`types.rs`), naming them with `paste`
//! (`[<rshmem_ $n _put>]` is `rshmem_int_put` for `int`). Every failure ends the job naming the
//! C call (these calls have the device library's signatures, which return no status).
//!
//! The local buffer of an RMA call (the source of a put, the destination of a get) may be host
//! memory or, on the GPU backend, GPU memory (symmetric or `cudaMalloc`'d): host code cannot
//! touch the latter, so those calls go through the copy engine (`stream::host_rma_device`).

#![allow(clippy::too_many_arguments)]

use std::ffi::{c_int, c_void};

use rt::{AmoInt, ReduceOp, ReduceType, RmaType};

use crate::memory::pe;
use capi_core::{host_put_signal, host_rma, Way};

use crate::stream::{check_signal, device_buffer, host_rma_device, Rma};
use capi_core::args::{world_set, Set, SetArgs};
use capi_core::nonneg;

use crate::{cmp_of, invalid, sigop_of, with, CResult, ABI};

// ------------------------------------------------------------------------------------------
// RMA
// ------------------------------------------------------------------------------------------

/// `put`, `put_nbi`, `putmem`, `putmem_nbi` and `get`, `get_nbi`, `getmem`, `getmem_nbi`.
///
/// # Safety
/// The local buffer valid for `r.n` reads (put) or writes (get) (`nbi`: and left alone until
/// the next quiet).
unsafe fn rma<T: RmaType>(call: &'static str, r: Rma<T>, nbi: bool) {
    with(call, |rt| {
        let pe = pe(rt, r.p)?;
        if device_buffer(rt, r.local.cast()) {
            return host_rma_device(call, rt, r, nbi);
        }
        // SAFETY: the caller's contract (host memory: device memory was routed above).
        unsafe { host_rma(&rt.world, r.way, r.local, r.remote, r.n, pe, nbi) }
    })
}

/// `put_signal`, `put_signal_nbi`, `putmem_signal`, `putmem_signal_nbi`: the put `r` (a
/// `Way::Put`), then the signal (sig, value, op) on the same PE.
///
/// # Safety
/// `r.local` valid for `r.n` reads.
unsafe fn put_signal<T: RmaType>(
    call: &'static str,
    r: Rma<T>,
    (sig, signal, op): (*mut u64, u64, c_int),
    nbi: bool,
) {
    with(call, |rt| {
        let pe = pe(rt, r.p)?;
        let op = sigop_of(op)?;
        if device_buffer(rt, r.local.cast()) {
            // The data is complete before the signal is sent.
            check_signal(rt, sig, pe)?;
            host_rma_device(call, rt, r, false)?;
            return Ok(rt.world.signal_op(sig, signal, op, pe)?);
        }
        let dest = r.remote.cast_mut();
        // SAFETY: the caller's contract (host memory: device memory was routed above).
        unsafe { host_put_signal(&rt.world, dest, r.local, r.n, (sig, signal, op), pe, nbi) }
    })
}

/// The RMA entry points on bytes (`mem`: `u8` elements counted in bytes) and typed ones
/// (`$n`, `$t`): `put`, `put_nbi`, `get`, `get_nbi`, `put_signal`, `put_signal_nbi`, and for
/// the typed ones `p` and `g`.
macro_rules! rma_entries {
    (mem) => {
        rma_entries!(@rma [rshmem_putmem rshmem_putmem_nbi rshmem_getmem rshmem_getmem_nbi]
                     [rshmem_putmem_signal rshmem_putmem_signal_nbi], c_void, u8, nbytes);
    };
    ($n:ident, $t:ty) => {
        paste::paste! {
            rma_entries!(@rma [[<rshmem_ $n _put>] [<rshmem_ $n _put_nbi>] [<rshmem_ $n _get>]
                               [<rshmem_ $n _get_nbi>]]
                         [[<rshmem_ $n _put_signal>] [<rshmem_ $n _put_signal_nbi>]], $t, $t, nelems);

            #[doc = concat!("`rshmem_", stringify!($n), "_p`: **one-sided** store of one element.")]
            #[no_mangle]
            pub extern "C" fn [<rshmem_ $n _p>](dest: *mut $t, value: $t, p: c_int) {
                let call = concat!("rshmem_", stringify!($n), "_p");
                with(call, |rt| Ok(rt.world.p(dest, value, pe(rt, p)?)?))
            }

            #[doc = concat!("`rshmem_", stringify!($n), "_g`: **one-sided** load of one element.")]
            #[no_mangle]
            pub extern "C" fn [<rshmem_ $n _g>](src: *const $t, p: c_int) -> $t {
                let call = concat!("rshmem_", stringify!($n), "_g");
                with(call, |rt| Ok(rt.world.g(src, pe(rt, p)?)?))
            }
        }
    };
    (@rma [$put:ident $put_nbi:ident $get:ident $get_nbi:ident] [$ps:ident $ps_nbi:ident],
     $p:ty, $t:ty, $count:ident) => {
        rma_entries!(@one $put, $p, $t, $count, Put, false);
        rma_entries!(@one $put_nbi, $p, $t, $count, Put, true);
        rma_entries!(@one $get, $p, $t, $count, Get, false);
        rma_entries!(@one $get_nbi, $p, $t, $count, Get, true);
        rma_entries!(@signal $ps, $p, $t, $count, false);
        rma_entries!(@signal $ps_nbi, $p, $t, $count, true);
    };
    (@one $name:ident, $p:ty, $t:ty, $count:ident, $way:ident, $nbi:expr) => {
        #[doc = concat!("`", stringify!($name), "`: **one-sided** (`_nbi`: non-blocking).")]
        ///
        /// # Safety
        /// The local buffer (`src` of a put, `dest` of a get) is valid for the count.
        #[no_mangle]
        pub unsafe extern "C" fn $name(dest: *mut $p, src: *const $p, $count: usize, pe: c_int) {
            let r = Rma::<$t>::new(Way::$way, dest.cast(), src.cast(), $count, pe);
            // SAFETY: the caller's contract.
            unsafe { rma(stringify!($name), r, $nbi) }
        }
    };
    (@signal $name:ident, $p:ty, $t:ty, $count:ident, $nbi:expr) => {
        #[doc = concat!("`", stringify!($name), "`: **one-sided**.")]
        ///
        /// # Safety
        /// `src` is valid for the count.
        #[no_mangle]
        pub unsafe extern "C" fn $name(dest: *mut $p, src: *const $p, $count: usize,
                                       sig: *mut u64, signal: u64, op: c_int, pe: c_int) {
            let r = Rma::<$t>::new(Way::Put, dest.cast(), src.cast(), $count, pe);
            // SAFETY: the caller's contract.
            unsafe { put_signal(stringify!($name), r, (sig, signal, op), $nbi) }
        }
    };
}
rma_entries!(mem);
capi_core::rshmem_rma_types!(rma_entries);

/// `rshmem_signal_op`: **one-sided**.
#[no_mangle]
pub extern "C" fn rshmem_signal_op(sig: *mut u64, signal: u64, op: c_int, p: c_int) {
    with("rshmem_signal_op", |rt| {
        let (op, pe) = (sigop_of(op)?, pe(rt, p)?);
        Ok(rt.world.signal_op(sig, signal, op, pe)?)
    })
}

/// `rshmem_signal_fetch`: **local**.
#[no_mangle]
pub extern "C" fn rshmem_signal_fetch(sig: *const u64) -> u64 {
    with("rshmem_signal_fetch", |rt| {
        Ok(rt.world.signal_fetch(sig)?)
    })
}

/// `rshmem_signal_wait_until`: **local**, blocking.
#[no_mangle]
pub extern "C" fn rshmem_signal_wait_until(sig: *const u64, cmp: c_int, value: u64) -> u64 {
    with("rshmem_signal_wait_until", |rt| {
        Ok(rt.world.signal_wait_until(sig, cmp_of(cmp)?, value)?)
    })
}

// ------------------------------------------------------------------------------------------
// Atomics
// ------------------------------------------------------------------------------------------

/// One atomic entry point `rshmem_<n>_atomic_<op>(args…, pe)`: **one-sided**, the runtime's
/// `atomic_<op>(args…, pe)`.
macro_rules! amo_entry {
    ($n:ident, $op:ident, ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
        paste::paste! {
            #[doc = concat!("`rshmem_", stringify!($n), "_atomic_", stringify!($op), "`: **one-sided**.")]
            #[no_mangle]
            pub extern "C" fn [<rshmem_ $n _atomic_ $op>]($($arg: $ty,)* p: c_int) $(-> $ret)? {
                with(concat!("rshmem_", stringify!($n), "_atomic_", stringify!($op)),
                     |rt| Ok(rt.world.[<atomic_ $op>]($($arg,)* pe(rt, p)?)?))
            }
        }
    };
}

/// `fetch`, `set`, `swap` of every atomic type.
macro_rules! amo_ext_entries {
    ($n:ident, $t:ty) => {
        amo_entry!($n, fetch, (source: *const $t) -> $t);
        amo_entry!($n, set, (dest: *mut $t, value: $t));
        amo_entry!($n, swap, (dest: *mut $t, value: $t) -> $t);
    };
}

/// `compare_swap`, `fetch_inc`, `inc`, `fetch_add`, `add` (plus the ext calls) of the integer
/// atomic types.
macro_rules! amo_std_entries {
    ($n:ident, $t:ty) => {
        amo_ext_entries!($n, $t);
        amo_entry!($n, compare_swap, (dest: *mut $t, cond: $t, value: $t) -> $t);
        amo_entry!($n, fetch_inc, (dest: *mut $t) -> $t);
        amo_entry!($n, inc, (dest: *mut $t));
        amo_entry!($n, fetch_add, (dest: *mut $t, value: $t) -> $t);
        amo_entry!($n, add, (dest: *mut $t, value: $t));
    };
}

/// `fetch_and`, `and`, `fetch_or`, `or`, `fetch_xor`, `xor` of the bitwise types.
macro_rules! amo_bit_entries {
    ($n:ident, $t:ty) => {
        amo_entry!($n, fetch_and, (dest: *mut $t, value: $t) -> $t);
        amo_entry!($n, and, (dest: *mut $t, value: $t));
        amo_entry!($n, fetch_or, (dest: *mut $t, value: $t) -> $t);
        amo_entry!($n, or, (dest: *mut $t, value: $t));
        amo_entry!($n, fetch_xor, (dest: *mut $t, value: $t) -> $t);
        amo_entry!($n, xor, (dest: *mut $t, value: $t));
    };
}
capi_core::rshmem_amo_types!(amo_std_entries);
capi_core::rshmem_amo_float_types!(amo_ext_entries);
capi_core::rshmem_amo_bitwise_types!(amo_bit_entries);

// ------------------------------------------------------------------------------------------
// Point-to-point waits and tests
// ------------------------------------------------------------------------------------------

/// A set wait (`block`) or test: 1/0 for `All`, an index or `SIZE_MAX` for `Any`, a count
/// for `Some` (indices written).
///
/// # Safety
/// Non-NULL pointers of `a` valid for `a.n` elements.
unsafe fn wait_set<T: AmoInt>(call: &'static str, a: SetArgs<T>, set: Set, block: bool) -> usize {
    with(call, |rt| {
        // SAFETY: the caller's contract.
        let inputs = unsafe { ABI.set_inputs(&a) }?;
        let hits = world_set(&rt.world, &a, &inputs, set, block)?;
        // SAFETY: the caller's contract.
        unsafe { ABI.set_answer(&a, set, hits) }
    })
}

/// Checks that a vector form got its values.
fn need_values<T>(call: &'static str, values: *const T, n: usize) {
    if values.is_null() && n > 0 {
        with(call, |_| -> CResult<()> { invalid("cmp_values is NULL") });
    }
}

macro_rules! wait_entries {
    ($n:ident, $t:ty) => {
        paste::paste! {
            #[doc = concat!("`rshmem_", stringify!($n), "_wait_until`: **local**, blocking.")]
            #[no_mangle]
            pub extern "C" fn [<rshmem_ $n _wait_until>](ivar: *const $t, cmp: c_int, value: $t) {
                with(concat!("rshmem_", stringify!($n), "_wait_until"),
                     |rt| Ok(rt.world.wait_until(ivar, cmp_of(cmp)?, value)?))
            }
            #[doc = concat!("`rshmem_", stringify!($n), "_test`: **local**.")]
            #[no_mangle]
            pub extern "C" fn [<rshmem_ $n _test>](ivar: *const $t, cmp: c_int, value: $t) -> c_int {
                with(concat!("rshmem_", stringify!($n), "_test"),
                     |rt| Ok(rt.world.test(ivar, cmp_of(cmp)?, value)? as c_int))
            }
        }
        wait_entries!(@sets $n, $t, wait_until, true, void);
        wait_entries!(@sets $n, $t, test, false, int);
    };
    // The set forms `<pre>_{all,any,some}` and their `_vector` forms: waits (`block`) or tests;
    // `all` returns `$all` (nothing for waits, 1/0 for tests).
    (@sets $n:ident, $t:ty, $pre:ident, $block:expr, $all:ident) => {
        paste::paste! {
            wait_entries!(@set $n, $t, [<$pre _all>], All, $block, $all);
            wait_entries!(@set $n, $t, [<$pre _any>], Any, $block, size);
            wait_entries!(@some $n, $t, [<$pre _some>], $block);
            wait_entries!(@vec $n, $t, [<$pre _all_vector>], All, $block, $all);
            wait_entries!(@vec $n, $t, [<$pre _any_vector>], Any, $block, size);
            wait_entries!(@somevec $n, $t, [<$pre _some_vector>], $block);
        }
    };
    (@ret void, $e:expr) => { { let _ = $e; } };
    (@ret size, $e:expr) => { $e };
    (@ret int, $e:expr) => { $e as c_int };
    (@rty void) => { () };
    (@rty size) => { usize };
    (@rty int) => { c_int };
    (@set $n:ident, $t:ty, $f:ident, $set:ident, $block:expr, $r:ident) => {
        paste::paste! {
            #[doc = concat!("`rshmem_", stringify!($n), "_", stringify!($f), "`: **local**.")]
            ///
            /// # Safety
            /// `ivars` (and `status` unless NULL) valid for `nelems` elements.
            #[no_mangle]
            pub unsafe extern "C" fn [<rshmem_ $n _ $f>](ivars: *const $t, nelems: usize, status: *const c_int,
                    cmp: c_int, value: $t) -> wait_entries!(@rty $r) {
                let a = SetArgs { ivars, n: nelems, indices: std::ptr::null_mut(), status, cmp, value,
                                  values: std::ptr::null() };
                // SAFETY: the caller's contract.
                wait_entries!(@ret $r, unsafe { wait_set(concat!("rshmem_", stringify!($n), "_", stringify!($f)), a, Set::$set, $block) })
            }
        }
    };
    (@some $n:ident, $t:ty, $f:ident, $block:expr) => {
        paste::paste! {
            #[doc = concat!("`rshmem_", stringify!($n), "_", stringify!($f), "`: **local**.")]
            ///
            /// # Safety
            /// `ivars`, `indices` (and `status` unless NULL) valid for `nelems` elements.
            #[no_mangle]
            pub unsafe extern "C" fn [<rshmem_ $n _ $f>](ivars: *const $t, nelems: usize, indices: *mut usize,
                    status: *const c_int, cmp: c_int, value: $t) -> usize {
                let a = SetArgs { ivars, n: nelems, indices, status, cmp, value, values: std::ptr::null() };
                // SAFETY: the caller's contract.
                unsafe { wait_set(concat!("rshmem_", stringify!($n), "_", stringify!($f)), a, Set::Some, $block) }
            }
        }
    };
    (@vec $n:ident, $t:ty, $f:ident, $set:ident, $block:expr, $r:ident) => {
        paste::paste! {
            #[doc = concat!("`rshmem_", stringify!($n), "_", stringify!($f), "`: **local**.")]
            ///
            /// # Safety
            /// `ivars`, `cmp_values` (and `status` unless NULL) valid for `nelems` elements.
            #[no_mangle]
            pub unsafe extern "C" fn [<rshmem_ $n _ $f>](ivars: *const $t, nelems: usize, status: *const c_int,
                    cmp: c_int, cmp_values: *const $t) -> wait_entries!(@rty $r) {
                let call = concat!("rshmem_", stringify!($n), "_", stringify!($f));
                need_values(call, cmp_values, nelems);
                let a = SetArgs { ivars, n: nelems, indices: std::ptr::null_mut(), status, cmp,
                                  value: <$t>::default(), values: cmp_values };
                // SAFETY: the caller's contract.
                wait_entries!(@ret $r, unsafe { wait_set(call, a, Set::$set, $block) })
            }
        }
    };
    (@somevec $n:ident, $t:ty, $f:ident, $block:expr) => {
        paste::paste! {
            #[doc = concat!("`rshmem_", stringify!($n), "_", stringify!($f), "`: **local**.")]
            ///
            /// # Safety
            /// `ivars`, `indices`, `cmp_values` (and `status` unless NULL) valid for `nelems`
            /// elements.
            #[no_mangle]
            pub unsafe extern "C" fn [<rshmem_ $n _ $f>](ivars: *const $t, nelems: usize, indices: *mut usize,
                    status: *const c_int, cmp: c_int, cmp_values: *const $t) -> usize {
                let call = concat!("rshmem_", stringify!($n), "_", stringify!($f));
                need_values(call, cmp_values, nelems);
                let a = SetArgs { ivars, n: nelems, indices, status, cmp, value: <$t>::default(),
                                  values: cmp_values };
                // SAFETY: the caller's contract.
                unsafe { wait_set(call, a, Set::Some, $block) }
            }
        }
    };
}
capi_core::rshmem_amo_types!(wait_entries);

// ------------------------------------------------------------------------------------------
// Host collectives
// ------------------------------------------------------------------------------------------

/// A host collective over the team named by `h`: 0, or the job ends naming `call`.
fn coll(
    call: &'static str,
    h: i32,
    f: impl FnOnce(&rt::World, &rt::Team) -> rt::Result<()>,
) -> c_int {
    with(call, |rt| {
        let t = crate::team::team(rt, h)?;
        f(&rt.world, &t)?;
        Ok(0)
    })
}

/// `rshmem_TYPENAME_{alltoall,fcollect,broadcast}` for the RMA types and, on bytes,
/// `rshmem_{alltoall,fcollect,broadcast}mem` (`nelems` counts bytes there).
macro_rules! coll_entries {
    ($n:ident, $t:ty) => {
        paste::paste! {
            coll_entries!(@fns [<rshmem_ $n _alltoall>], [<rshmem_ $n _fcollect>],
                          [<rshmem_ $n _broadcast>], $t);
        }
    };
    (@fns $alltoall:ident, $fcollect:ident, $broadcast:ident, $t:ty) => {
        coll_entries!(@one $alltoall, $t, alltoall);
        coll_entries!(@one $fcollect, $t, fcollect);
        #[doc = concat!("`", stringify!($broadcast), "`: **collective over the team**.")]
        #[no_mangle]
        pub extern "C" fn $broadcast(
            team: i32,
            dest: *mut $t,
            source: *const $t,
            nelems: usize,
            root: c_int,
        ) -> c_int {
            with(stringify!($broadcast), |rt| {
                let root = nonneg("root", root.into())?;
                let t = crate::team::team(rt, team)?;
                rt.world.broadcast(&t, dest, source, nelems, root)?;
                Ok(0)
            })
        }
    };
    (@one $name:ident, $t:ty, $method:ident) => {
        #[doc = concat!("`", stringify!($name), "`: **collective over the team**.")]
        #[no_mangle]
        pub extern "C" fn $name(team: i32, dest: *mut $t, source: *const $t, nelems: usize) -> c_int {
            coll(stringify!($name), team, |w, t| w.$method(t, dest, source, nelems))
        }
    };
}
capi_core::rshmem_rma_types!(coll_entries);
coll_entries!(@fns rshmem_alltoallmem, rshmem_fcollectmem, rshmem_broadcastmem, u8);

/// `reduce` or `reduce_scatter` with `O`.
fn reduce<T: ReduceType, O: ReduceOp<T> + Default>(
    call: &'static str,
    team: i32,
    dest: *mut T,
    source: *const T,
    n: usize,
    scatter: bool,
) -> c_int {
    coll(call, team, |w, t| {
        if scatter {
            w.reducescatter(t, dest, source, n, O::default())
        } else {
            w.reduce(t, dest, source, n, O::default())
        }
    })
}

macro_rules! reduce_entries {
    ($n:ident, $t:ty, $op:ident, $O:ident) => {
        paste::paste! {
            #[doc = concat!("`rshmem_", stringify!($n), "_", stringify!($op), "_reduce`: **collective over the team**.")]
            #[no_mangle]
            pub extern "C" fn [<rshmem_ $n _ $op _reduce>](team: i32, dest: *mut $t, source: *const $t, nreduce: usize) -> c_int {
                reduce::<$t, rt::$O>(concat!("rshmem_", stringify!($n), "_", stringify!($op), "_reduce"),
                                     team, dest, source, nreduce, false)
            }
            #[doc = concat!("`rshmem_", stringify!($n), "_", stringify!($op), "_reducescatter`: **collective over the team**.")]
            #[no_mangle]
            pub extern "C" fn [<rshmem_ $n _ $op _reducescatter>](team: i32, dest: *mut $t, source: *const $t, nreduce: usize) -> c_int {
                reduce::<$t, rt::$O>(concat!("rshmem_", stringify!($n), "_", stringify!($op), "_reducescatter"),
                                     team, dest, source, nreduce, true)
            }
        }
    };
}
capi_core::rshmem_reductions!(reduce_entries);
