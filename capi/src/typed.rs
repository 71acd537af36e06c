//! The typed OpenSHMEM entry points (`shmem_int_put`, `shmem_ctx_long_atomic_fetch_add`,
//! `shmem_double_sum_reduce`, `shmem_put64`, …), written once per family as `macro_rules!` and
//! expanded over OpenSHMEM 1.5's type tables at compile time.
//!
//! Reading guide: the type tables (`elem!`, `capi_core::c_elem!`, and the `shmem_*_types!`
//! lists of `capi/core/src/types.rs`) are shared with librshmem; then comes one
//! section per family; each family macro names the C routines it defines in its doc comment
//! (`shmem_TYPENAME_put`, …) and builds the names with `paste` (`[<$t _put>]` is
//! `int_put` for `int`). Every routine is defined by `entry!`, which exports the real
//! implementation as `pshmem_NAME` and `shmem_NAME` as a thin forwarder to it (the OpenSHMEM
//! profiling interface, see `docs/capi.md`). `capi/gen.py` has the same tables and writes the
//! C prototypes into `include/shmem.h` and `include/pshmem.h`; the `c_programs` test
//! `header_declares_exactly_the_exported_routines` fails when the two disagree.

#![allow(clippy::too_many_arguments, unused_unsafe)]

use std::ffi::{c_int, c_long, c_void};

use crate::coll;
use crate::ops::{self, Amo};

// ------------------------------------------------------------------------------------------
// The entry point macro
// ------------------------------------------------------------------------------------------

/// Defines the C routine `$name` and its profiling twin `p$name`.
///
/// `pshmem_NAME` holds the implementation: it binds `$call` to the routine's name (`"NAME"`,
/// used in error messages), runs the optional statements in `[...]` (the context check) and
/// then `$body`. `shmem_NAME` forwards to it, so a tool that defines `shmem_NAME` and calls
/// `pshmem_NAME` sees every call. `ctx NAME` adds a leading `ctx: shmem_ctx_t` argument that is
/// checked with [`ops::ctx`] before the body runs.
macro_rules! entry {
    (ctx $name:ident, $doc:expr, ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?,
     $call:ident => $body:expr) => {
        entry!(@def $name, $doc, (ctx: *mut c_void $(, $arg: $ty)*) $(-> $ret)?, $call,
               [ops::ctx($call, ctx);], $body);
    };
    ($name:ident, $doc:expr, ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?,
     $call:ident => $body:expr) => {
        entry!(@def $name, $doc, ($($arg: $ty),*) $(-> $ret)?, $call, [], $body);
    };
    (@def $name:ident, $doc:expr, ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?, $call:ident,
     [$($pre:expr;)*], $body:expr) => {
        paste::paste! {
            #[doc = concat!("`p", stringify!($name), "`: ", $doc, " (the implementation of `",
                            stringify!($name), "`).")]
            ///
            /// # Safety
            /// Pointer arguments valid as OpenSHMEM 1.5 requires.
            #[no_mangle]
            pub unsafe extern "C" fn [<p $name>]($($arg: $ty),*) $(-> $ret)? {
                let $call = stringify!($name);
                $($pre;)*
                // SAFETY: the caller passes pointers valid as OpenSHMEM requires.
                unsafe { $body }
            }

            #[doc = concat!("`", stringify!($name), "`: ", $doc, "; forwards to `p",
                            stringify!($name), "`.")]
            ///
            /// # Safety
            /// Pointer arguments valid as OpenSHMEM 1.5 requires.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the same contract as the profiling twin's.
                unsafe { [<p $name>]($($arg),*) }
            }
        }
    };
}

/// `entry!` for `shmem_$s` and its context form `shmem_ctx_$s`.
macro_rules! entry_and_ctx {
    ($s:ident, $($rest:tt)*) => {
        paste::paste! {
            entry!([<shmem_ $s>], $($rest)*);
            entry!(ctx [<shmem_ctx_ $s>], $($rest)*);
        }
    };
}

// ------------------------------------------------------------------------------------------
// Type tables (OpenSHMEM 1.5 Tables 5-8, 10-11); the C types are in capi/gen.py's `RMA`.
// ------------------------------------------------------------------------------------------

// The element type of each TYPENAME is `capi_core::c_elem!(TYPENAME)`; the lists are
// `capi_core::shmem_*_types!` (both in capi/core/src/types.rs, shared with librshmem).
use capi_core::c_elem as elem;
use capi_core::each_type as each;

// ------------------------------------------------------------------------------------------
// RMA: typed, sized and mem forms, each with its shmem_ctx_ form
// ------------------------------------------------------------------------------------------

/// `shmem_TYPENAME_{put,get,put_nbi,get_nbi,iput,iget,ibput,ibget,p,g,put_signal,put_signal_nbi}`
/// and their `shmem_ctx_` forms (`longdouble`'s `p`/`g` pass a `long double` by value, which
/// Rust cannot: they are in `longdouble.rs`).
macro_rules! rma {
    (() $t:ident) => {
        paste::paste! {
            rma!(@block [<$t _put>], $t, put Put, false);
            rma!(@block [<$t _get>], $t, get Get, false);
            rma!(@block [<$t _put_nbi>], $t, put Put, true);
            rma!(@block [<$t _get_nbi>], $t, get Get, true);
            rma!(@strided [<$t _iput>], $t, iput Put);
            rma!(@strided [<$t _iget>], $t, iget Get);
            rma!(@blocked [<$t _ibput>], $t, ibput Put);
            rma!(@blocked [<$t _ibget>], $t, ibget Get);
            rma!(@pg $t);
            rma!(@signal [<$t _put_signal>], $t);
            rma!(@signal [<$t _put_signal_nbi>], $t);
        }
    };
    (@block $s:ident, $t:ident, $f:ident $way:ident, $nbi:expr) => {
        entry_and_ctx!($s, concat!(stringify!($f), " of ", stringify!($t)),
            (dest: *mut elem!($t), source: *const elem!($t), nelems: usize, pe: c_int),
            call => ops::rma(call, ops::Way::$way, dest, source, nelems, pe, $nbi));
    };
    (@strided $s:ident, $t:ident, $f:ident $way:ident) => {
        entry_and_ctx!($s, concat!("strided ", stringify!($f), " of ", stringify!($t)),
            (dest: *mut elem!($t), source: *const elem!($t), dst: isize, sst: isize,
             nelems: usize, pe: c_int),
            call => ops::strided(call, ops::Way::$way, dest, source, (dst, sst),
                ops::Shape::Elems(nelems), pe));
    };
    (@blocked $s:ident, $t:ident, $f:ident $way:ident) => {
        entry_and_ctx!($s, concat!("blocked strided ", stringify!($f), " of ", stringify!($t)),
            (dest: *mut elem!($t), source: *const elem!($t), dst: isize, sst: isize,
             bsize: usize, nblocks: usize, pe: c_int),
            call => ops::strided(call, ops::Way::$way, dest, source, (dst, sst),
                ops::Shape::Blocks { bsize, nblocks }, pe));
    };
    (@pg longdouble) => {};
    (@pg $t:ident) => {
        paste::paste! {
            entry_and_ctx!([<$t _p>], concat!("put one ", stringify!($t)),
                (dest: *mut elem!($t), value: elem!($t), pe: c_int),
                call => ops::p(call, dest, value, pe));
            entry_and_ctx!([<$t _g>], concat!("get one ", stringify!($t)),
                (source: *const elem!($t), pe: c_int) -> elem!($t),
                call => ops::g(call, source, pe));
        }
    };
    (@signal $s:ident, $t:ident) => {
        entry_and_ctx!($s, concat!("put with signal of ", stringify!($t)),
            (dest: *mut elem!($t), source: *const elem!($t), nelems: usize,
             sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int),
            call => ops::put_signal(call, dest, source, nelems, sig_addr, signal, sig_op, pe));
    };
}
capi_core::shmem_rma_types!(rma());

/// The untyped forms of `shmem_{put,get,put_nbi,get_nbi}` and `shmem_put_signal{,_nbi}`:
/// elements of `$e`, named `shmem_{put,get}BITS…` (`sized!`) or `shmem_{put,get}mem…`
/// (`$n` = `mem`), each with its `shmem_ctx_` form.
macro_rules! untyped_rma {
    ($n:tt, $e:ty) => {
        paste::paste! {
            untyped_rma!(@block [<put $n>], $e, put Put, false);
            untyped_rma!(@block [<get $n>], $e, get Get, false);
            untyped_rma!(@block [<put $n _nbi>], $e, put Put, true);
            untyped_rma!(@block [<get $n _nbi>], $e, get Get, true);
            untyped_rma!(@signal [<put $n _signal>], $e);
            untyped_rma!(@signal [<put $n _signal_nbi>], $e);
        }
    };
    (@block $s:ident, $e:ty, $f:ident $way:ident, $nbi:expr) => {
        entry_and_ctx!($s, concat!(stringify!($f), " of ", stringify!($e), " elements"),
            (dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int),
            call => ops::rma::<$e>(call, ops::Way::$way, dest.cast(), source.cast(), nelems, pe, $nbi));
    };
    (@signal $s:ident, $e:ty) => {
        entry_and_ctx!($s, concat!("put with signal of ", stringify!($e), " elements"),
            (dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64,
             signal: u64, sig_op: c_int, pe: c_int),
            call => ops::put_signal::<$e>(call, dest.cast(), source.cast(), nelems, sig_addr,
                                          signal, sig_op, pe));
    };
}

/// `shmem_{put,get}BITS{,_nbi}`, `shmem_{iput,iget,ibput,ibget}BITS`,
/// `shmem_putBITS_signal{,_nbi}` and their `shmem_ctx_` forms.
macro_rules! sized {
    ($bits:tt, $e:ty) => {
        untyped_rma!($bits, $e);
        paste::paste! {
            sized!(@strided [<iput $bits>], $e, iput Put);
            sized!(@strided [<iget $bits>], $e, iget Get);
            sized!(@blocked [<ibput $bits>], $e, ibput Put);
            sized!(@blocked [<ibget $bits>], $e, ibget Get);
        }
    };
    (@blocked $s:ident, $e:ty, $f:ident $way:ident) => {
        entry_and_ctx!($s,
            concat!("blocked strided ", stringify!($f), " of ", stringify!($e), " elements"),
            (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, bsize: usize,
             nblocks: usize, pe: c_int),
            call => ops::strided::<$e>(call, ops::Way::$way, dest.cast(), source.cast(), (dst, sst),
                ops::Shape::Blocks { bsize, nblocks }, pe));
    };
    (@strided $s:ident, $e:ty, $f:ident $way:ident) => {
        entry_and_ctx!($s, concat!("strided ", stringify!($f), " of ", stringify!($e), " elements"),
            (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize,
             pe: c_int),
            call => ops::strided::<$e>(call, ops::Way::$way, dest.cast(), source.cast(), (dst, sst),
                ops::Shape::Elems(nelems), pe));
    };
}
sized!(8, u8);
sized!(16, u16);
sized!(32, u32);
sized!(64, u64);
sized!(128, u128);
// shmem_putmem, shmem_getmem, shmem_putmem_nbi, shmem_getmem_nbi, shmem_putmem_signal{,_nbi}.
untyped_rma!(mem, u8);

// ------------------------------------------------------------------------------------------
// Atomics
// ------------------------------------------------------------------------------------------

/// One atomic routine `shmem_$s` (and, unless `noctx`, `shmem_ctx_$s`) on elements of `$t`:
/// `ops::$kind` (`amo_ext`, `amo_int`, `amo_bit`: which types it accepts) runs the operation
/// `$op` with the operand `$val`; the C arguments between `dest` and `pe` are the ones named in
/// the last `(...)`, all of type `$t`. `fetch` returns the old value, `nbi` stores it through a
/// leading `fetch` pointer, `void` returns nothing.
macro_rules! amo {
    ($ctx:ident $s:ident, $t:ident, $how:ident, $kind:ident,
     $op:expr, $val:expr, ($($a:ident)*)) => {
        amo!(@$how $ctx $s, $t, $kind, $op, $val, ($($a)*));
    };
    (@fetch $ctx:ident $s:ident, $t:ident, $kind:ident, $op:expr, $val:expr, ($($a:ident)*)) => {
        amo!(@$ctx $s, concat!("fetching atomic on ", stringify!($t)),
            (dest: *mut elem!($t), $($a: elem!($t),)* pe: c_int) -> elem!($t),
            call => ops::$kind(call, dest, $op, $val, pe));
    };
    (@nbi $ctx:ident $s:ident, $t:ident, $kind:ident, $op:expr, $val:expr, ($($a:ident)*)) => {
        amo!(@$ctx $s, concat!("non-blocking fetching atomic on ", stringify!($t)),
            (fetch: *mut elem!($t), dest: *mut elem!($t), $($a: elem!($t),)* pe: c_int),
            call => ops::store_fetch(call, fetch, ops::$kind(call, dest, $op, $val, pe)));
    };
    (@void $ctx:ident $s:ident, $t:ident, $kind:ident, $op:expr, $val:expr, ($($a:ident)*)) => {
        amo!(@$ctx $s, concat!("atomic on ", stringify!($t)),
            (dest: *mut elem!($t), $($a: elem!($t),)* pe: c_int),
            call => paste::paste! { ops::[<$kind _post>](call, dest, $op, $val, pe) });
    };
    (@ctx $s:ident, $($rest:tt)*) => {
        entry_and_ctx!($s, $($rest)*);
    };
    (@noctx $s:ident, $($rest:tt)*) => {
        paste::paste! { entry!([<shmem_ $s>], $($rest)*); }
    };
}

/// `shmem_TYPENAME_atomic_{fetch,set,swap,fetch_nbi,swap_nbi}` (+ ctx) for the extended AMO
/// types.
macro_rules! amo_ext {
    (() $t:ident) => {
        paste::paste! {
            amo!(ctx [<$t _atomic_fetch>], $t, fetch, amo_ext,
                 ops::Op::Fetch, <elem!($t)>::default(), ());
            amo!(ctx [<$t _atomic_set>], $t, void, amo_ext,
                 ops::Op::Set, value, (value));
            amo!(ctx [<$t _atomic_swap>], $t, fetch, amo_ext,
                 ops::Op::Swap, value, (value));
            amo!(ctx [<$t _atomic_fetch_nbi>], $t, nbi, amo_ext,
                 ops::Op::Fetch, <elem!($t)>::default(), ());
            amo!(ctx [<$t _atomic_swap_nbi>], $t, nbi, amo_ext,
                 ops::Op::Swap, value, (value));
        }
    };
}
capi_core::shmem_amo_ext_types!(amo_ext());

/// `shmem_TYPENAME_atomic_{compare_swap,fetch_inc,inc,fetch_add,add}` and the `_nbi` forms
/// of the fetching ones (+ ctx) for the standard AMO types.
macro_rules! amo_std {
    (() $t:ident) => {
        paste::paste! {
            amo!(ctx [<$t _atomic_compare_swap>], $t, fetch, amo_int,
                 ops::Op::Cswap(cond.bits()), value, (cond value));
            amo!(ctx [<$t _atomic_compare_swap_nbi>], $t, nbi, amo_int,
                 ops::Op::Cswap(cond.bits()), value, (cond value));
            amo!(ctx [<$t _atomic_fetch_inc>], $t, fetch, amo_int,
                 ops::Op::Add, 1 as _, ());
            amo!(ctx [<$t _atomic_fetch_inc_nbi>], $t, nbi, amo_int,
                 ops::Op::Add, 1 as _, ());
            amo!(ctx [<$t _atomic_inc>], $t, void, amo_int,
                 ops::Op::Add, 1 as _, ());
            amo!(ctx [<$t _atomic_fetch_add>], $t, fetch, amo_int,
                 ops::Op::Add, value, (value));
            amo!(ctx [<$t _atomic_fetch_add_nbi>], $t, nbi, amo_int,
                 ops::Op::Add, value, (value));
            amo!(ctx [<$t _atomic_add>], $t, void, amo_int,
                 ops::Op::Add, value, (value));
        }
    };
}
capi_core::shmem_amo_std_types!(amo_std());

/// `shmem_TYPENAME_atomic_{fetch_,}{and,or,xor}` and `shmem_TYPENAME_atomic_fetch_OP_nbi`
/// (+ ctx) for the bitwise AMO types.
macro_rules! amo_bit {
    (() $t:ident) => {
        amo_bit!(@op $t, and, And);
        amo_bit!(@op $t, or, Or);
        amo_bit!(@op $t, xor, Xor);
    };
    (@op $t:ident, $o:ident, $O:ident) => {
        paste::paste! {
            amo!(ctx [<$t _atomic_fetch_ $o>], $t, fetch, amo_bit,
                 ops::Op::$O, value, (value));
            amo!(ctx [<$t _atomic_fetch_ $o _nbi>], $t, nbi, amo_bit,
                 ops::Op::$O, value, (value));
            amo!(ctx [<$t _atomic_ $o>], $t, void, amo_bit,
                 ops::Op::$O, value, (value));
        }
    };
}
capi_core::shmem_amo_bit_types!(amo_bit());

/// The deprecated (1.4) `shmem_TYPENAME_{finc,inc,fadd,add,cswap}` for int, long, longlong
/// and `shmem_TYPENAME_{swap,fetch,set}` also for float, double; no ctx forms.
macro_rules! amo_deprecated {
    ((int) $t:ident) => {
        paste::paste! {
            amo!(noctx [<$t _finc>], $t, fetch, amo_int,
                 ops::Op::Add, 1 as _, ());
            amo!(noctx [<$t _inc>], $t, void, amo_int,
                 ops::Op::Add, 1 as _, ());
            amo!(noctx [<$t _fadd>], $t, fetch, amo_int,
                 ops::Op::Add, value, (value));
            amo!(noctx [<$t _add>], $t, void, amo_int,
                 ops::Op::Add, value, (value));
            amo!(noctx [<$t _cswap>], $t, fetch, amo_int,
                 ops::Op::Cswap(cond.bits()), value, (cond value));
        }
    };
    ((ext) $t:ident) => {
        paste::paste! {
            amo!(noctx [<$t _swap>], $t, fetch, amo_ext,
                 ops::Op::Swap, value, (value));
            amo!(noctx [<$t _fetch>], $t, fetch, amo_ext,
                 ops::Op::Fetch, <elem!($t)>::default(), ());
            amo!(noctx [<$t _set>], $t, void, amo_ext,
                 ops::Op::Set, value, (value));
        }
    };
}
each!(amo_deprecated(int): int long longlong);
each!(amo_deprecated(ext): int long longlong float double);

// ------------------------------------------------------------------------------------------
// Point-to-point synchronization (no ctx forms)
// ------------------------------------------------------------------------------------------

/// `shmem_TYPENAME_{wait_until,wait,test}` and
/// `shmem_TYPENAME_{wait_until,test}_{all,any,some}{,_vector}` for the wait types.
macro_rules! wait {
    (() $t:ident) => {
        paste::paste! {
            entry!([<shmem_ $t _wait_until>], concat!("wait on a ", stringify!($t)),
                (ivar: *mut elem!($t), cmp: c_int, value: elem!($t)),
                call => {
                    ops::wait_set(call, wait!(@one ivar, cmp, value), ops::Set::All, true);
                });
            entry!([<shmem_ $t _wait>],
                concat!("deprecated wait for a ", stringify!($t), " to change"),
                (ivar: *mut elem!($t), value: elem!($t)),
                call => {
                    let cmp = 1;
                    ops::wait_set(call, wait!(@one ivar, cmp, value), ops::Set::All, true);
                });
            entry!([<shmem_ $t _test>], concat!("test a ", stringify!($t)),
                (ivar: *mut elem!($t), cmp: c_int, value: elem!($t)) -> c_int,
                call => ops::wait_set(call, wait!(@one ivar, cmp, value), ops::Set::All, false)
                    as c_int);
            wait!(@set $t, all, All);
            wait!(@set $t, any, Any);
            wait!(@set $t, some, Some);
        }
    };
    // The arguments of a single-variable wait.
    (@one $ivar:ident, $cmp:ident, $value:ident) => {
        ops::SetArgs {
            ivars: $ivar,
            n: 1,
            status: std::ptr::null(),
            $cmp,
            $value,
            values: std::ptr::null(),
            indices: std::ptr::null_mut(),
        }
    };
    // The four routines of one set kind (`all`, `any`, `some`): scalar and `_vector`
    // comparison values, blocking (`wait_until`) and not (`test`).
    (@set $t:ident, $s:ident, $S:ident) => {
        paste::paste! {
            wait!(@$s [<shmem_ $t _wait_until_ $s>], $t, $S, true,
                  value: elem!($t), value, std::ptr::null());
            wait!(@$s [<shmem_ $t _wait_until_ $s _vector>], $t, $S, true,
                  values: *const elem!($t), <elem!($t)>::default(), values);
            wait!(@$s [<shmem_ $t _test_ $s>], $t, $S, false,
                  value: elem!($t), value, std::ptr::null());
            wait!(@$s [<shmem_ $t _test_ $s _vector>], $t, $S, false,
                  values: *const elem!($t), <elem!($t)>::default(), values);
        }
    };
    // `_all` waits return nothing, `_all` tests an int, `_any` and `_some` a size_t; `_some`
    // takes the `indices` array.
    (@all $name:ident, $t:ident, $S:ident, true, $v:ident: $vty:ty, $value:expr, $values:expr) => {
        entry!($name, concat!("wait until all of the ", stringify!($t), "s compare true"),
            (ivars: *mut elem!($t), nelems: usize, status: *const c_int, cmp: c_int, $v: $vty),
            call => {
                ops::wait_set(call, ops::SetArgs { ivars, n: nelems, status, cmp, value: $value,
                    values: $values, indices: std::ptr::null_mut() }, ops::Set::$S, true);
            });
    };
    (@all $name:ident, $t:ident, $S:ident, false, $v:ident: $vty:ty, $value:expr, $values:expr) => {
        entry!($name, concat!("test whether all of the ", stringify!($t), "s compare true"),
            (ivars: *mut elem!($t), nelems: usize, status: *const c_int, cmp: c_int, $v: $vty)
                -> c_int,
            call => ops::wait_set(call, ops::SetArgs { ivars, n: nelems, status, cmp,
                value: $value, values: $values, indices: std::ptr::null_mut() }, ops::Set::$S,
                false) as c_int);
    };
    (@any $name:ident, $t:ident, $S:ident, $block:ident,
     $v:ident: $vty:ty, $value:expr, $values:expr) => {
        entry!($name, concat!("wait or test for any of the ", stringify!($t), "s"),
            (ivars: *mut elem!($t), nelems: usize, status: *const c_int, cmp: c_int, $v: $vty)
                -> usize,
            call => ops::wait_set(call, ops::SetArgs { ivars, n: nelems, status, cmp,
                value: $value, values: $values, indices: std::ptr::null_mut() }, ops::Set::$S,
                $block));
    };
    (@some $name:ident, $t:ident, $S:ident, $block:ident,
     $v:ident: $vty:ty, $value:expr, $values:expr) => {
        entry!($name, concat!("wait or test for some of the ", stringify!($t), "s"),
            (ivars: *mut elem!($t), nelems: usize, indices: *mut usize, status: *const c_int,
             cmp: c_int, $v: $vty) -> usize,
            call => ops::wait_set(call, ops::SetArgs { ivars, n: nelems, status, cmp,
                value: $value, values: $values, indices }, ops::Set::$S, $block));
    };
}
capi_core::shmem_wait_types!(wait());

// The deprecated untyped C forms on a `long` (C11 programs get the generic macros of the same
// names; C99 and C++ programs these functions).
entry!(shmem_wait_until, "deprecated wait on a long",
(ivar: *mut c_long, cmp: c_int, value: c_long),
call => {
    ops::wait_set(call, wait!(@one ivar, cmp, value), ops::Set::All, true);
});
entry!(shmem_wait, "deprecated wait for a long to change",
(ivar: *mut c_long, value: c_long),
call => {
    let cmp = 1;
    ops::wait_set(call, wait!(@one ivar, cmp, value), ops::Set::All, true);
});

// ------------------------------------------------------------------------------------------
// Collectives over a team (1.5) and the deprecated active-set forms (1.4); no ctx forms
// ------------------------------------------------------------------------------------------

/// `shmem_TYPENAME_{broadcast,collect,fcollect,alltoall,alltoalls}` for the RMA types, and
/// with `$prefix` = `shmem_`, `$mem` = `mem`: `shmem_{broadcast,…,alltoalls}mem` on bytes.
macro_rules! team_colls {
    (() $t:ident) => {
        paste::paste! { team_colls!([<shmem_ $t _>], elem!($t), []); }
    };
    ($p:ident, $e:ty, [$($mem:ident)?]) => {
        paste::paste! {
            entry!([<$p broadcast $($mem)?>], concat!("broadcast of ", stringify!($e)),
                (team: *mut c_void, dest: *mut $e, source: *const $e, nelems: usize, root: c_int)
                    -> c_int,
                call => coll::broadcast(call, team, dest, source, nelems, root));
            entry!([<$p collect $($mem)?>], concat!("collect of ", stringify!($e)),
                (team: *mut c_void, dest: *mut $e, source: *const $e, nelems: usize) -> c_int,
                call => coll::on_team(call, team, |rt, t| {
                    Ok(rt.world.collect(t, dest, source, nelems)?)
                }));
            entry!([<$p fcollect $($mem)?>], concat!("fcollect of ", stringify!($e)),
                (team: *mut c_void, dest: *mut $e, source: *const $e, nelems: usize) -> c_int,
                call => coll::on_team(call, team, |rt, t| {
                    Ok(rt.world.fcollect(t, dest, source, nelems)?)
                }));
            entry!([<$p alltoall $($mem)?>], concat!("alltoall of ", stringify!($e)),
                (team: *mut c_void, dest: *mut $e, source: *const $e, nelems: usize) -> c_int,
                call => coll::alltoalls(call, team, dest, source, 1, 1, nelems));
            entry!([<$p alltoalls $($mem)?>], concat!("strided alltoall of ", stringify!($e)),
                (team: *mut c_void, dest: *mut $e, source: *const $e, dst: isize, sst: isize,
                 nelems: usize) -> c_int,
                call => coll::alltoalls(call, team, dest, source, dst, sst, nelems));
        }
    };
}
capi_core::shmem_rma_types!(team_colls());
team_colls!(shmem_, u8, [mem]);

/// `shmem_TYPENAME_OP_reduce` (1.5, over a team) and, for `$to_all`, the deprecated
/// active-set `shmem_TYPENAME_OP_to_all` (1.4); `$O` is rshmem's operator.
macro_rules! reduce {
    (($o:ident, $O:ident) $t:ident) => {
        paste::paste! {
            entry!([<shmem_ $t _ $o _reduce>],
                concat!(stringify!($o), " reduction of ", stringify!($t)),
                (team: *mut c_void, dest: *mut elem!($t), source: *const elem!($t),
                 nreduce: usize) -> c_int,
                call => coll::on_team(call, team, |rt, t| {
                    Ok(rt.world.reduce(t, dest, source, nreduce, rshmem::$O::default())?)
                }));
        }
    };
    ((to_all $o:ident, $O:ident) $t:ident) => {
        paste::paste! {
            entry!([<shmem_ $t _ $o _to_all>],
                concat!("deprecated active-set ", stringify!($o), " reduction of ", stringify!($t)),
                (dest: *mut elem!($t), source: *const elem!($t), nreduce: c_int, start: c_int,
                 log_stride: c_int, size: c_int, _pwrk: *mut elem!($t), psync: *mut c_long),
                call => coll::reduce_set::<elem!($t), rshmem::$O>(call, dest, source, nreduce,
                    coll::SetSpec { start, log_stride, size, psync }));
        }
    };
}
capi_core::shmem_red_bit_types!(reduce(and, And));
capi_core::shmem_red_bit_types!(reduce(or, Or));
capi_core::shmem_red_bit_types!(reduce(xor, Xor));
capi_core::shmem_red_arith_types!(reduce(max, Max));
capi_core::shmem_red_arith_types!(reduce(min, Min));
capi_core::shmem_red_arith_types!(reduce(sum, Sum));
capi_core::shmem_red_arith_types!(reduce(prod, Prod));
each!(reduce(to_all and, And): short int long longlong);
each!(reduce(to_all or, Or): short int long longlong);
each!(reduce(to_all xor, Xor): short int long longlong);
each!(reduce(to_all max, Max): short int long longlong float double);
each!(reduce(to_all min, Min): short int long longlong float double);
each!(reduce(to_all sum, Sum): short int long longlong float double);
each!(reduce(to_all prod, Prod): short int long longlong float double);

/// The deprecated active-set `shmem_broadcastBITS`, `shmem_{collect,fcollect}BITS`,
/// `shmem_alltoallBITS`, `shmem_alltoallsBITS` (1.4).
macro_rules! active_set {
    ($bits:tt, $e:ty) => {
        paste::paste! {
            entry!([<shmem_broadcast $bits>],
                concat!("deprecated active-set broadcast of ", stringify!($e), " elements"),
                (dest: *mut c_void, source: *const c_void, nelems: usize, root: c_int,
                 start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long),
                call => coll::broadcast_set::<$e>(call, dest.cast(), source.cast(), nelems, root,
                    coll::SetSpec { start, log_stride, size, psync }));
            active_set!(@collect [<shmem_collect $bits>], $e, false);
            active_set!(@collect [<shmem_fcollect $bits>], $e, true);
            entry!([<shmem_alltoall $bits>],
                concat!("deprecated active-set alltoall of ", stringify!($e), " elements"),
                (dest: *mut c_void, source: *const c_void, nelems: usize, start: c_int,
                 log_stride: c_int, size: c_int, psync: *mut c_long),
                call => coll::alltoalls_set::<$e>(call, dest.cast(), source.cast(), 1, 1, nelems,
                    coll::SetSpec { start, log_stride, size, psync }));
            entry!([<shmem_alltoalls $bits>],
                concat!("deprecated active-set strided alltoall of ", stringify!($e), " elements"),
                (dest: *mut c_void, source: *const c_void, dst: isize, sst: isize,
                 nelems: usize, start: c_int, log_stride: c_int, size: c_int, psync: *mut c_long),
                call => coll::alltoalls_set::<$e>(call, dest.cast(), source.cast(), dst, sst,
                    nelems, coll::SetSpec { start, log_stride, size, psync }));
        }
    };
    (@collect $name:ident, $e:ty, $fixed:expr) => {
        entry!($name,
            concat!("deprecated active-set collect of ", stringify!($e), " elements"),
            (dest: *mut c_void, source: *const c_void, nelems: usize, start: c_int,
             log_stride: c_int, size: c_int, psync: *mut c_long),
            call => coll::collect_set::<$e>(call, $fixed, dest.cast(), source.cast(), nelems,
                coll::SetSpec { start, log_stride, size, psync }));
    };
}
active_set!(32, u32);
active_set!(64, u64);

// ------------------------------------------------------------------------------------------
// Scans (1.6): shmem_TYPENAME_sum_inscan / _exscan over a team; no ctx forms
// ------------------------------------------------------------------------------------------

/// `shmem_TYPENAME_sum_inscan` and `shmem_TYPENAME_sum_exscan` for the arithmetic reduction
/// types (`longdouble` and complex: `reduce_c!`).
macro_rules! scan {
    (() $t:ident) => {
        paste::paste! {
            entry!([<shmem_ $t _sum_inscan>],
                concat!("inclusive prefix sum of ", stringify!($t)),
                (team: *mut c_void, dest: *mut elem!($t), source: *const elem!($t),
                 nelems: usize) -> c_int,
                call => coll::scan::<elem!($t)>(call, team, dest, source, nelems, false));
            entry!([<shmem_ $t _sum_exscan>],
                concat!("exclusive prefix sum of ", stringify!($t)),
                (team: *mut c_void, dest: *mut elem!($t), source: *const elem!($t),
                 nelems: usize) -> c_int,
                call => coll::scan::<elem!($t)>(call, team, dest, source, nelems, true));
        }
    };
}
capi_core::shmem_red_arith_types!(scan());

// ------------------------------------------------------------------------------------------
// long double and complex reductions and scans: the arithmetic is C's (src/combine.c)
// ------------------------------------------------------------------------------------------

/// `shmem_TYPENAME_OP_reduce`, `shmem_TYPENAME_OP_to_all` and, for `sum`,
/// `shmem_TYPENAME_sum_{in,ex}scan` of `long double` (`longdouble`) and the complex types
/// (`complexf`, `complexd`): element size `$size`, combined by `rshmemi_TYPENAME_OP` of
/// `combine.c`.
macro_rules! reduce_c {
    (($size:expr) $t:ident $o:ident) => {
        paste::paste! {
            entry!([<shmem_ $t _ $o _reduce>],
                concat!(stringify!($o), " reduction of ", stringify!($t)),
                (team: *mut c_void, dest: *mut c_void, source: *const c_void, nreduce: usize)
                    -> c_int,
                call => coll::reduce_c(call, team, dest, source, nreduce, $size,
                    crate::combine::[<rshmemi_ $t _ $o>]));
            entry!([<shmem_ $t _ $o _to_all>],
                concat!("deprecated active-set ", stringify!($o), " reduction of ", stringify!($t)),
                (dest: *mut c_void, source: *const c_void, nreduce: c_int, start: c_int,
                 log_stride: c_int, size: c_int, _pwrk: *mut c_void, psync: *mut c_long),
                call => coll::reduce_c_set(call, dest, source, nreduce, $size,
                    crate::combine::[<rshmemi_ $t _ $o>],
                    coll::SetSpec { start, log_stride, size, psync }));
        }
        reduce_c!(@scan $size, $t, $o);
    };
    (@scan $size:expr, $t:ident, sum) => {
        paste::paste! {
            entry!([<shmem_ $t _sum_inscan>],
                concat!("inclusive prefix sum of ", stringify!($t)),
                (team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize)
                    -> c_int,
                call => coll::scan_team(call, team, dest, source, nelems, $size, false,
                    &mut coll::c_combine(crate::combine::[<rshmemi_ $t _sum>], nelems)));
            entry!([<shmem_ $t _sum_exscan>],
                concat!("exclusive prefix sum of ", stringify!($t)),
                (team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize)
                    -> c_int,
                call => coll::scan_team(call, team, dest, source, nelems, $size, true,
                    &mut coll::c_combine(crate::combine::[<rshmemi_ $t _sum>], nelems)));
        }
    };
    (@scan $size:expr, $t:ident, $o:ident) => {};
}
reduce_c!((16) longdouble max);
reduce_c!((16) longdouble min);
reduce_c!((16) longdouble sum);
reduce_c!((16) longdouble prod);
reduce_c!((8) complexf sum);
reduce_c!((8) complexf prod);
reduce_c!((16) complexd sum);
reduce_c!((16) complexd prod);
