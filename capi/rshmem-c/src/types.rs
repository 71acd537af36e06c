//! The type tables of the typed calls, the same as the `RSHMEM_FOR_*` lists of
//! device-lib/include/rshmem/type_lists.h (which rshmem.h and the device library include):
//! `$m!(TYPENAME, RustType)` per entry. The `header_declares_exactly_the_
//! exported_calls` test fails when this file and the header disagree.

/// RMA types: p, g, put, get, put_signal, alltoall, fcollect, broadcast, their stream forms.
macro_rules! rma_types {
    ($m:ident) => {
        $m!(char, std::ffi::c_char);
        $m!(schar, i8);
        $m!(short, std::ffi::c_short);
        $m!(int, std::ffi::c_int);
        $m!(long, std::ffi::c_long);
        $m!(longlong, std::ffi::c_longlong);
        $m!(uchar, u8);
        $m!(ushort, std::ffi::c_ushort);
        $m!(uint, std::ffi::c_uint);
        $m!(ulong, std::ffi::c_ulong);
        $m!(ulonglong, std::ffi::c_ulonglong);
        $m!(int8, i8);
        $m!(int16, i16);
        $m!(int32, i32);
        $m!(int64, i64);
        $m!(uint8, u8);
        $m!(uint16, u16);
        $m!(uint32, u32);
        $m!(uint64, u64);
        $m!(size, usize);
        $m!(ptrdiff, isize);
        $m!(float, f32);
        $m!(double, f64);
    };
}

/// 16-bit float reduction types (sum, prod, min, max): in C their 16-bit patterns (`uint16_t`,
/// the layout of CUDA's `__half` / `__nv_bfloat16`), here rshmem's `F16` / `BF16` (the same
/// 16 bits, `repr(transparent)`).
macro_rules! reduce_half_types {
    ($m:ident) => {
        $m!(half, rt::F16);
        $m!(bfloat16, rt::BF16);
    };
}

/// Integer atomic types (and the wait/test types).
macro_rules! amo_types {
    ($m:ident) => {
        $m!(int, std::ffi::c_int);
        $m!(long, std::ffi::c_long);
        $m!(longlong, std::ffi::c_longlong);
        $m!(uint, std::ffi::c_uint);
        $m!(ulong, std::ffi::c_ulong);
        $m!(ulonglong, std::ffi::c_ulonglong);
        $m!(int32, i32);
        $m!(int64, i64);
        $m!(uint32, u32);
        $m!(uint64, u64);
        $m!(size, usize);
        $m!(ptrdiff, isize);
    };
}

/// Floating-point atomic types (fetch, set, swap).
macro_rules! amo_float_types {
    ($m:ident) => {
        $m!(float, f32);
        $m!(double, f64);
    };
}

/// Bitwise atomic types.
macro_rules! amo_bitwise_types {
    ($m:ident) => {
        $m!(uint, std::ffi::c_uint);
        $m!(ulong, std::ffi::c_ulong);
        $m!(ulonglong, std::ffi::c_ulonglong);
        $m!(int32, i32);
        $m!(int64, i64);
        $m!(uint32, u32);
        $m!(uint64, u64);
    };
}

/// Reduction types with every operator (integers).
macro_rules! reduce_int_types {
    ($m:ident) => {
        $m!(char, std::ffi::c_char);
        $m!(schar, i8);
        $m!(short, std::ffi::c_short);
        $m!(int, std::ffi::c_int);
        $m!(long, std::ffi::c_long);
        $m!(longlong, std::ffi::c_longlong);
        $m!(ptrdiff, isize);
        $m!(uchar, u8);
        $m!(ushort, std::ffi::c_ushort);
        $m!(uint, std::ffi::c_uint);
        $m!(ulong, std::ffi::c_ulong);
        $m!(ulonglong, std::ffi::c_ulonglong);
        $m!(int8, i8);
        $m!(int16, i16);
        $m!(int32, i32);
        $m!(int64, i64);
        $m!(uint8, u8);
        $m!(uint16, u16);
        $m!(uint32, u32);
        $m!(uint64, u64);
        $m!(size, usize);
    };
}

/// Reduction types with sum, prod, min, max only (floats).
macro_rules! reduce_float_types {
    ($m:ident) => {
        $m!(float, f32);
        $m!(double, f64);
    };
}
