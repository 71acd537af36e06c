//! The type tables of both C libraries' typed calls, as `macro_rules!` exported at the crate
//! root: one map from C TYPENAME to Rust element type ([`c_elem!`](crate::c_elem)), and per
//! family the list of TYPENAMEs each ABI defines it for.
//!
//! - OpenSHMEM 1.5 Tables 5-8, 10-11 (`libshmem`, `shmem_TYPENAME_*`): `shmem_*_types!`, which
//!   expand `$m!($args TYPENAME)` (the element type is `c_elem!(TYPENAME)`). `capi/gen.py` has
//!   the same tables and writes the C prototypes; the `c_programs` test
//!   `header_declares_exactly_the_exported_routines` fails when they disagree.
//! - rshmem's lists (`librshmem`, `rshmem_TYPENAME_*`), the `RSHMEM_FOR_*` lists of
//!   `device-lib/include/rshmem/type_lists.h`: `rshmem_*_types!`, which expand
//!   `$m!(TYPENAME, RustType)`; the `c_api` test `header_declares_exactly_the_exported_calls`
//!   fails when they and the header disagree.

/// The Rust element type of a C TYPENAME (the same width and signedness as the C type on LP64
/// Linux; `long double` is moved as 16 raw bytes; `half` and `bfloat16` are the 16-bit
/// patterns of CUDA's `__half` / `__nv_bfloat16`, rshmem's `F16` / `BF16`).
#[macro_export]
macro_rules! c_elem {
    (float) => {
        f32
    };
    (double) => {
        f64
    };
    (longdouble) => {
        u128
    };
    (char) => {
        std::ffi::c_char
    };
    (schar) => {
        i8
    };
    (short) => {
        std::ffi::c_short
    };
    (int) => {
        std::ffi::c_int
    };
    (long) => {
        std::ffi::c_long
    };
    (longlong) => {
        std::ffi::c_longlong
    };
    (uchar) => {
        u8
    };
    (ushort) => {
        std::ffi::c_ushort
    };
    (uint) => {
        std::ffi::c_uint
    };
    (ulong) => {
        std::ffi::c_ulong
    };
    (ulonglong) => {
        std::ffi::c_ulonglong
    };
    (int8) => {
        i8
    };
    (int16) => {
        i16
    };
    (int32) => {
        i32
    };
    (int64) => {
        i64
    };
    (uint8) => {
        u8
    };
    (uint16) => {
        u16
    };
    (uint32) => {
        u32
    };
    (uint64) => {
        u64
    };
    (size) => {
        usize
    };
    (ptrdiff) => {
        isize
    };
    (half) => {
        $crate::rt::F16
    };
    (bfloat16) => {
        $crate::rt::BF16
    };
}

/// `$m!($args TYPENAME)` for each TYPENAME listed after the colon (OpenSHMEM's form).
#[macro_export]
macro_rules! each_type {
    ($m:ident $args:tt: $($t:ident)*) => {
        $($m!($args $t);)*
    };
}

/// `$m!(TYPENAME, element type)` for each TYPENAME listed after the colon (rshmem's form).
#[macro_export]
macro_rules! each_typed {
    ($m:ident: $($t:ident)*) => {
        $($m!($t, $crate::c_elem!($t));)*
    };
}

/// The whole-job calls every C library exports, as `#[no_mangle] extern "C"` functions with the
/// names given: my_pe and n_pes (**local**), fence and quiet (**one-sided**), barrier_all and
/// sync_all (**collective**), each through the calling library's `with` (its runtime holder:
/// any error, such as a call before init, ends the job naming the call).
#[macro_export]
macro_rules! world_entries {
    (my_pe: $my_pe:ident, n_pes: $n_pes:ident, fence: $fence:ident, quiet: $quiet:ident,
     barrier_all: $barrier_all:ident, sync_all: $sync_all:ident) => {
        #[doc = concat!("`", stringify!($my_pe), "`: **local**; this PE's number.")]
        #[no_mangle]
        pub extern "C" fn $my_pe() -> ::std::ffi::c_int {
            with(stringify!($my_pe), |rt| Ok(rt.world.my_pe() as ::std::ffi::c_int))
        }
        #[doc = concat!("`", stringify!($n_pes), "`: **local**; the number of PEs.")]
        #[no_mangle]
        pub extern "C" fn $n_pes() -> ::std::ffi::c_int {
            with(stringify!($n_pes), |rt| Ok(rt.world.n_pes() as ::std::ffi::c_int))
        }
        #[doc = concat!("`", stringify!($fence), "`: **one-sided**; orders this PE's puts, AMOs and stores to each PE.")]
        #[no_mangle]
        pub extern "C" fn $fence() {
            with(stringify!($fence), |rt| {
                rt.world.fence();
                Ok(())
            })
        }
        #[doc = concat!("`", stringify!($quiet), "`: **one-sided**; completes this PE's puts, AMOs and stores.")]
        #[no_mangle]
        pub extern "C" fn $quiet() {
            with(stringify!($quiet), |rt| Ok(rt.world.quiet()?))
        }
        #[doc = concat!("`", stringify!($barrier_all), "`: **collective**; quiet, then a barrier of all PEs.")]
        #[no_mangle]
        pub extern "C" fn $barrier_all() {
            with(stringify!($barrier_all), |rt| Ok(rt.world.barrier_all()?))
        }
        #[doc = concat!("`", stringify!($sync_all), "`: **collective**; a barrier of all PEs without quiet.")]
        #[no_mangle]
        pub extern "C" fn $sync_all() {
            with(stringify!($sync_all), |rt| Ok(rt.world.sync_all()?))
        }
    };
}

// ------------------------------------------------------------------------------------------
// OpenSHMEM 1.5 (libshmem)
// ------------------------------------------------------------------------------------------

/// `$m!($args TYPENAME)` for the standard RMA types (Table 5).
#[macro_export]
macro_rules! shmem_rma_types {
    ($m:ident $args:tt) => {
        $crate::each_type!($m $args: float double longdouble char schar short int long
            longlong uchar ushort uint ulong ulonglong int8 int16 int32 int64 uint8 uint16 uint32
            uint64 size ptrdiff);
    };
}

/// `$m!($args TYPENAME)` for the standard AMO types (Table 6).
#[macro_export]
macro_rules! shmem_amo_std_types {
    ($m:ident $args:tt) => {
        $crate::each_type!($m $args: int long longlong uint ulong ulonglong int32 int64 uint32
            uint64 size ptrdiff);
    };
}

/// `$m!($args TYPENAME)` for the extended AMO types (Table 7).
#[macro_export]
macro_rules! shmem_amo_ext_types {
    ($m:ident $args:tt) => {
        $crate::shmem_amo_std_types!($m $args);
        $crate::each_type!($m $args: float double);
    };
}

/// `$m!($args TYPENAME)` for the bitwise AMO types (Table 8).
#[macro_export]
macro_rules! shmem_amo_bit_types {
    ($m:ident $args:tt) => {
        $crate::each_type!($m $args: uint ulong ulonglong int32 int64 uint32 uint64);
    };
}

/// `$m!($args TYPENAME)` for the point-to-point synchronization types (Table 11).
#[macro_export]
macro_rules! shmem_wait_types {
    ($m:ident $args:tt) => {
        $crate::each_type!($m $args: short int long longlong ushort uint ulong ulonglong int32
            int64 uint32 uint64 size ptrdiff);
    };
}

/// `$m!($args TYPENAME)` for the bitwise reduction types (Table 10, and/or/xor).
#[macro_export]
macro_rules! shmem_red_bit_types {
    ($m:ident $args:tt) => {
        $crate::each_type!($m $args: uchar ushort uint ulong ulonglong int8 int16 int32 int64
            uint8 uint16 uint32 uint64 size);
    };
}

/// `$m!($args TYPENAME)` for the arithmetic reduction types (Table 10, max/min/sum/prod;
/// `longdouble` and the complex types, whose arithmetic Rust does not have, are in libshmem's
/// `reduce_c!`).
#[macro_export]
macro_rules! shmem_red_arith_types {
    ($m:ident $args:tt) => {
        $crate::each_type!($m $args: char schar short int long longlong ptrdiff uchar ushort uint
            ulong ulonglong int8 int16 int32 int64 uint8 uint16 uint32 uint64 size float double);
    };
}

// ------------------------------------------------------------------------------------------
// rshmem (librshmem; the RSHMEM_FOR_* lists of rshmem/type_lists.h)
// ------------------------------------------------------------------------------------------

/// RMA types: p, g, put, get, put_signal, alltoall, fcollect, broadcast, their stream forms.
#[macro_export]
macro_rules! rshmem_rma_types {
    ($m:ident) => {
        $crate::each_typed!($m: char schar short int long longlong uchar ushort uint ulong
            ulonglong int8 int16 int32 int64 uint8 uint16 uint32 uint64 size ptrdiff float
            double);
    };
}

/// Integer atomic types (and the wait/test types).
#[macro_export]
macro_rules! rshmem_amo_types {
    ($m:ident) => {
        $crate::each_typed!($m: int long longlong uint ulong ulonglong int32 int64 uint32 uint64
            size ptrdiff);
    };
}

/// Floating-point atomic types (fetch, set, swap).
#[macro_export]
macro_rules! rshmem_amo_float_types {
    ($m:ident) => {
        $crate::each_typed!($m: float double);
    };
}

/// Bitwise atomic types.
#[macro_export]
macro_rules! rshmem_amo_bitwise_types {
    ($m:ident) => {
        $crate::each_typed!($m: uint ulong ulonglong int32 int64 uint32 uint64);
    };
}

/// `$m!(TYPENAME, element type, op, Op)` for every reduction rshmem defines: the integer
/// types with sum, prod, min, max, and, or, xor; the float and 16-bit float types with sum,
/// prod, min, max (`Op` names the runtime's operator type, `rshmem::Sum`, …).
#[macro_export]
macro_rules! rshmem_reductions {
    ($m:ident) => {
        $crate::rshmem_reductions!(@ops $m [sum Sum prod Prod min Min max Max and And or Or xor Xor]:
            char schar short int long longlong ptrdiff uchar ushort uint ulong ulonglong int8
            int16 int32 int64 uint8 uint16 uint32 uint64 size);
        $crate::rshmem_reductions!(@ops $m [sum Sum prod Prod min Min max Max]:
            float double half bfloat16);
    };
    (@ops $m:ident $ops:tt: $($t:ident)*) => {
        $($crate::rshmem_reductions!(@op $m $ops $t);)*
    };
    (@op $m:ident [$($op:ident $O:ident)*] $t:ident) => {
        $($m!($t, $crate::c_elem!($t), $op, $O);)*
    };
}
