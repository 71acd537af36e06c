//! `shmem_[ctx_]longdouble_p` and `shmem_[ctx_]longdouble_g` (and their `pshmem_` twins): they
//! pass a `long double` by value, which Rust has no type for. On x86-64 (System V) a
//! `long double` argument travels in memory (the caller's stack, 16-byte aligned, just above
//! the return address) and a `long double` result in the x87 register `st(0)`. Each routine is
//! a naked shim that hands the value's address to a Rust function (`p`) or receives the value
//! in a stack slot from one and loads it into `st(0)` (`g`); the Rust functions move the
//! value as 16 raw bytes with the library's `putmem`/`getmem` path, naming the C routine in
//! errors.
//!
//! Other architectures (AArch64 passes `long double` in a vector register) do not have these
//! shims yet: there the four routines are not defined.

use std::ffi::{c_int, c_void};

use crate::ops;

/// `long double` as the library moves it: 16 bytes (10 significant on x86-64).
type Ld = u128;

/// `shmem_longdouble_p(dest, value, pe)`: the shims pass `&value`.
extern "C" fn p(dest: *mut Ld, pe: c_int, value: *const Ld) {
    // SAFETY: `value` points at the caller's argument slot (16 readable bytes) for this call.
    unsafe {
        ops::rma(
            "shmem_longdouble_p",
            ops::Way::Put,
            dest,
            value,
            1,
            pe,
            false,
        )
    }
}

/// `shmem_ctx_longdouble_p(ctx, dest, value, pe)`.
extern "C" fn ctx_p(ctx: *mut c_void, dest: *mut Ld, pe: c_int, value: *const Ld) {
    let call = "shmem_ctx_longdouble_p";
    ops::ctx(call, ctx);
    // SAFETY: as in `p`.
    unsafe { ops::rma(call, ops::Way::Put, dest, value, 1, pe, false) }
}

/// `shmem_longdouble_g(source, pe)`: the value goes to the shim's slot `out`.
extern "C" fn g(source: *const Ld, pe: c_int, out: *mut Ld) {
    // SAFETY: `out` is the shim's 16-byte aligned stack slot.
    unsafe { out.write(ops::g("shmem_longdouble_g", source, pe)) }
}

/// `shmem_ctx_longdouble_g(ctx, source, pe)`.
extern "C" fn ctx_g(ctx: *mut c_void, source: *const Ld, pe: c_int, out: *mut Ld) {
    let call = "shmem_ctx_longdouble_g";
    ops::ctx(call, ctx);
    // SAFETY: as in `g`.
    unsafe { out.write(ops::g(call, source, pe)) }
}

/// Defines the C routines `$name` and `p$name` as the same naked shim `$asm` (which reaches
/// the Rust function `f`).
macro_rules! shim {
    ($name:ident, $target:ident, $doc:literal, $($asm:literal),*) => {
        paste::paste! {
            #[doc = concat!("`", stringify!($name), "`: ", $doc,
                            " (a shim: the C prototype is in `shmem.h`).")]
            #[unsafe(naked)]
            #[no_mangle]
            pub extern "C" fn $name() {
                std::arch::naked_asm!($($asm),*, f = sym $target)
            }

            #[doc = concat!("`p", stringify!($name), "`: the profiling name of `",
                            stringify!($name), "`.")]
            #[unsafe(naked)]
            #[no_mangle]
            pub extern "C" fn [<p $name>]() {
                std::arch::naked_asm!($($asm),*, f = sym $target)
            }
        }
    };
}

// dest in rdi, pe in esi, the value at [rsp + 8]: its address becomes the third argument.
shim!(
    shmem_longdouble_p,
    p,
    "puts one long double",
    "lea rdx, [rsp + 8]",
    "jmp {f}"
);
// ctx in rdi, dest in rsi, pe in edx, the value at [rsp + 8]: its address is the fourth.
shim!(
    shmem_ctx_longdouble_p,
    ctx_p,
    "puts one long double on a context",
    "lea rcx, [rsp + 8]",
    "jmp {f}"
);
// A 16-byte aligned slot below the return address (rsp ≡ 8 mod 16 on entry, so after
// reserving 24 bytes rsp is aligned for the call), filled by `g`, then loaded into st(0).
shim!(
    shmem_longdouble_g,
    g,
    "gets one long double",
    "sub rsp, 24",
    "mov rdx, rsp",
    "call {f}",
    "fld tbyte ptr [rsp]",
    "add rsp, 24",
    "ret"
);
shim!(
    shmem_ctx_longdouble_g,
    ctx_g,
    "gets one long double on a context",
    "sub rsp, 24",
    "mov rcx, rsp",
    "call {f}",
    "fld tbyte ptr [rsp]",
    "add rsp, 24",
    "ret"
);
