#!/usr/bin/env python3
"""Generates capi/src/gen.rs (the typed extern "C" entry points) and capi/include/shmem.h.

Run from anywhere: `python3 capi/gen.py && cargo fmt --all`. Both outputs are checked in.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# (name, C type, Rust type) — OpenSHMEM 1.5 Table 5 (standard RMA types).
RMA = [
    ("float", "float", "f32"), ("double", "double", "f64"), ("longdouble", "long double", "u128"),
    ("char", "char", "i8"), ("schar", "signed char", "i8"), ("short", "short", "i16"),
    ("int", "int", "i32"), ("long", "long", "i64"), ("longlong", "long long", "i64"),
    ("uchar", "unsigned char", "u8"), ("ushort", "unsigned short", "u16"),
    ("uint", "unsigned int", "u32"), ("ulong", "unsigned long", "u64"),
    ("ulonglong", "unsigned long long", "u64"), ("int8", "int8_t", "i8"),
    ("int16", "int16_t", "i16"), ("int32", "int32_t", "i32"), ("int64", "int64_t", "i64"),
    ("uint8", "uint8_t", "u8"), ("uint16", "uint16_t", "u16"), ("uint32", "uint32_t", "u32"),
    ("uint64", "uint64_t", "u64"), ("size", "size_t", "usize"), ("ptrdiff", "ptrdiff_t", "isize"),
]
# Base C types for _Generic (typedefs alias these).
GENERIC_RMA = ["float", "double", "longdouble", "char", "schar", "short", "int", "long", "longlong",
               "uchar", "ushort", "uint", "ulong", "ulonglong"]
SIZES = [(8, "u8"), (16, "u16"), (32, "u32"), (64, "u64"), (128, "u128")]
RT = {n: (c, r) for n, c, r in RMA}
AMO_STD = ["int", "long", "longlong", "uint", "ulong", "ulonglong", "int32", "int64", "uint32",
           "uint64", "size", "ptrdiff"]
AMO_EXT = AMO_STD + ["float", "double"]
AMO_BIT = ["uint", "ulong", "ulonglong", "int32", "int64", "uint32", "uint64"]
GENERIC_AMO_STD = ["int", "long", "longlong", "uint", "ulong", "ulonglong"]
GENERIC_AMO_EXT = GENERIC_AMO_STD + ["float", "double"]
GENERIC_AMO_BIT = ["uint", "ulong", "ulonglong", "int32", "int64"]
WAIT = ["short", "int", "long", "longlong", "ushort", "uint", "ulong", "ulonglong", "int32",
        "int64", "uint32", "uint64", "size", "ptrdiff"]
GENERIC_WAIT = ["short", "int", "long", "longlong", "ushort", "uint", "ulong", "ulonglong"]

rs = []   # Rust items
h = []    # C prototypes


def fn(cname, rparams, cparams, ret_r, ret_c, body, doc, ctx=True):
    """One entry point and, with ctx, its shmem_ctx_ twin."""
    for with_ctx in ([False, True] if ctx else [False]):
        name = cname if not with_ctx else cname.replace("shmem_", "shmem_ctx_", 1)
        rp = (["ctx: *mut c_void"] if with_ctx else []) + rparams
        cp = (["shmem_ctx_t ctx"] if with_ctx else []) + cparams
        pre = f'    ops::ctx("{name}", ctx);\n' if with_ctx else ""
        r = f" -> {ret_r}" if ret_r else ""
        b = body.replace("CALL", f'"{name}"')
        rs.append(f"""/// `{name}`: {doc}
///
/// # Safety
/// Pointer arguments valid as OpenSHMEM 1.5 requires.
#[no_mangle]
pub unsafe extern "C" fn {name}({", ".join(rp)}){r} {{
{pre}    // SAFETY: the caller passes pointers valid as OpenSHMEM requires.
    unsafe {{ {b} }}
}}
""")
        h.append(f"{ret_c or 'void'} {name}({', '.join(cp)});")


def rma(pfx, t, ct, doc_t):
    P = f"shmem_{pfx}"
    for op, f in [("put", "put"), ("get", "get"), ("put_nbi", "put"), ("get_nbi", "get")]:
        dq = "" if f == "put" else "const "
        fn(f"{P}_{op}" if pfx else f"shmem_{op}",
           [f"dest: *mut {t}", f"source: *const {t}", "nelems: usize", "pe: c_int"],
           [f"{ct} *dest", f"const {ct} *source", "size_t nelems", "int pe"], None, None,
           f"ops::{f}(CALL, dest, source, nelems, pe)", f"{op} of {doc_t}")
    for op in ["iput", "iget"]:
        fn(f"{P}_{op}",
           [f"dest: *mut {t}", f"source: *const {t}", "dst: isize", "sst: isize", "nelems: usize", "pe: c_int"],
           [f"{ct} *dest", f"const {ct} *source", "ptrdiff_t dst", "ptrdiff_t sst", "size_t nelems", "int pe"],
           None, None, f"ops::{op}(CALL, dest, source, dst, sst, nelems, pe)", f"strided {op} of {doc_t}")


for n, ct, t in RMA:
    rma(n, t, ct, ct)
    if n != "longdouble":
        fn(f"shmem_{n}_p", [f"dest: *mut {t}", f"value: {t}", "pe: c_int"],
           [f"{ct} *dest", f"{ct} value", "int pe"], None, None, "ops::p(CALL, dest, value, pe)", f"put one {ct}")
        fn(f"shmem_{n}_g", [f"source: *const {t}", "pe: c_int"], [f"const {ct} *source", "int pe"], t, ct,
           "ops::g(CALL, source, pe)", f"get one {ct}")
    for op in ["put_signal", "put_signal_nbi"]:
        fn(f"shmem_{n}_{op}",
           [f"dest: *mut {t}", f"source: *const {t}", "nelems: usize", "sig_addr: *mut u64", "signal: u64", "sig_op: c_int", "pe: c_int"],
           [f"{ct} *dest", f"const {ct} *source", "size_t nelems", "uint64_t *sig_addr", "uint64_t signal", "int sig_op", "int pe"],
           None, None, "ops::put_signal(CALL, dest, source, nelems, sig_addr, signal, sig_op, pe)", f"{op} of {ct}")

for bits, t in SIZES:
    for op, f in [("put", "put"), ("get", "get"), ("put_nbi", "put"), ("get_nbi", "get")]:
        base = op.split("_")[0] + str(bits) + ("_nbi" if "nbi" in op else "")
        fn(f"shmem_{base}", ["dest: *mut c_void", "source: *const c_void", "nelems: usize", "pe: c_int"],
           ["void *dest", "const void *source", "size_t nelems", "int pe"], None, None,
           f"ops::{f}::<{t}>(CALL, dest.cast(), source.cast(), nelems, pe)", f"{op} of {bits}-bit elements")
    for op in ["iput", "iget"]:
        fn(f"shmem_{op}{bits}", ["dest: *mut c_void", "source: *const c_void", "dst: isize", "sst: isize", "nelems: usize", "pe: c_int"],
           ["void *dest", "const void *source", "ptrdiff_t dst", "ptrdiff_t sst", "size_t nelems", "int pe"], None, None,
           f"ops::{op}::<{t}>(CALL, dest.cast(), source.cast(), dst, sst, nelems, pe)", f"strided {op} of {bits}-bit elements")
    for op in ["put_signal", "put_signal_nbi"]:
        fn(f"shmem_put{bits}_{op[4:]}",
           ["dest: *mut c_void", "source: *const c_void", "nelems: usize", "sig_addr: *mut u64", "signal: u64", "sig_op: c_int", "pe: c_int"],
           ["void *dest", "const void *source", "size_t nelems", "uint64_t *sig_addr", "uint64_t signal", "int sig_op", "int pe"],
           None, None, f"ops::put_signal::<{t}>(CALL, dest.cast(), source.cast(), nelems, sig_addr, signal, sig_op, pe)", f"{op} of {bits}-bit elements")
for op, f in [("putmem", "put"), ("getmem", "get"), ("putmem_nbi", "put"), ("getmem_nbi", "get")]:
    fn(f"shmem_{op}", ["dest: *mut c_void", "source: *const c_void", "nelems: usize", "pe: c_int"],
       ["void *dest", "const void *source", "size_t nelems", "int pe"], None, None,
       f"ops::{f}::<u8>(CALL, dest.cast(), source.cast(), nelems, pe)", f"{op} (bytes)")
for op in ["putmem_signal", "putmem_signal_nbi"]:
    fn(f"shmem_{op}",
       ["dest: *mut c_void", "source: *const c_void", "nelems: usize", "sig_addr: *mut u64", "signal: u64", "sig_op: c_int", "pe: c_int"],
       ["void *dest", "const void *source", "size_t nelems", "uint64_t *sig_addr", "uint64_t signal", "int sig_op", "int pe"],
       None, None, "ops::put_signal::<u8>(CALL, dest.cast(), source.cast(), nelems, sig_addr, signal, sig_op, pe)", f"{op} (bytes)")

# ---- atomics ----
def amo(n, name, kind, opexpr, args, fetch, nbi=False):
    ct, t = RT[n]
    rp = [f"dest: *mut {t}"]
    cp = [f"{ct} *dest"]
    if nbi:
        rp = [f"fetch: *mut {t}"] + rp
        cp = [f"{ct} *fetch"] + cp
    for a in args:
        rp.append(f"{a}: {t}")
        cp.append(f"{ct} {a}")
    rp.append("pe: c_int")
    cp.append("int pe")
    val = "value" if "value" in args else f"<{t}>::default()"
    if opexpr == "Add1":
        opexpr, val = "Add", "1 as _"
    call = f"ops::{kind}(CALL, dest, ops::Op::{opexpr}, {val}, pe)"
    if nbi:
        body = f"ops::store_fetch(CALL, fetch, {call})"
        fn(name, rp, cp, None, None, body, f"non-blocking fetching atomic on {ct}")
    elif fetch:
        fn(name, rp, cp, t, ct, call, f"fetching atomic on {ct}")
    else:
        fn(name, rp, cp, None, None, f"{{ {call}; }}", f"atomic on {ct}")


for n in AMO_EXT:
    amo(n, f"shmem_{n}_atomic_fetch", "amo_ext", "Fetch", [], True)
    amo(n, f"shmem_{n}_atomic_set", "amo_ext", "Set", ["value"], False)
    amo(n, f"shmem_{n}_atomic_swap", "amo_ext", "Swap", ["value"], True)
    amo(n, f"shmem_{n}_atomic_fetch_nbi", "amo_ext", "Fetch", [], True, True)
    amo(n, f"shmem_{n}_atomic_swap_nbi", "amo_ext", "Swap", ["value"], True, True)
for n in AMO_STD:
    amo(n, f"shmem_{n}_atomic_compare_swap", "amo_int", "Cswap(cond.bits())", ["cond", "value"], True)
    amo(n, f"shmem_{n}_atomic_compare_swap_nbi", "amo_int", "Cswap(cond.bits())", ["cond", "value"], True, True)
    amo(n, f"shmem_{n}_atomic_fetch_inc", "amo_int", "Add1", [], True)
    amo(n, f"shmem_{n}_atomic_fetch_inc_nbi", "amo_int", "Add1", [], True, True)
    amo(n, f"shmem_{n}_atomic_inc", "amo_int", "Add1", [], False)
    amo(n, f"shmem_{n}_atomic_fetch_add", "amo_int", "Add", ["value"], True)
    amo(n, f"shmem_{n}_atomic_fetch_add_nbi", "amo_int", "Add", ["value"], True, True)
    amo(n, f"shmem_{n}_atomic_add", "amo_int", "Add", ["value"], False)
for n in AMO_BIT:
    for o in ["and", "or", "xor"]:
        O = o.capitalize()
        amo(n, f"shmem_{n}_atomic_fetch_{o}", "amo_bit", O, ["value"], True)
        amo(n, f"shmem_{n}_atomic_fetch_{o}_nbi", "amo_bit", O, ["value"], True, True)
        amo(n, f"shmem_{n}_atomic_{o}", "amo_bit", O, ["value"], False)
# Deprecated names (1.4), no ctx forms.
DEP = []
for n in ["int", "long", "longlong"]:
    DEP += [(n, "finc", "fetch_inc"), (n, "inc", "inc"), (n, "fadd", "fetch_add"), (n, "add", "add"),
            (n, "cswap", "compare_swap")]
for n in ["int", "long", "longlong", "float", "double"]:
    DEP += [(n, "swap", "swap"), (n, "fetch", "fetch"), (n, "set", "set")]
_save = fn


def fn_noctx(*a, **k):
    k["ctx"] = False
    _save(*a, **k)


fn = fn_noctx
for n, old, new in DEP:
    kind = {"finc": ("amo_int", "Add1", [], True), "inc": ("amo_int", "Add1", [], False),
            "fadd": ("amo_int", "Add", ["value"], True), "add": ("amo_int", "Add", ["value"], False),
            "cswap": ("amo_int", "Cswap(cond.bits())", ["cond", "value"], True),
            "swap": ("amo_ext", "Swap", ["value"], True), "fetch": ("amo_ext", "Fetch", [], True),
            "set": ("amo_ext", "Set", ["value"], False)}[old]
    amo(n, f"shmem_{n}_{old}", *kind)

# ---- wait / test ----
for n in WAIT:
    ct, t = RT[n]
    def sa(ivars="ivars", nel="1", status="std::ptr::null()", value="value", values="std::ptr::null()", idx="std::ptr::null_mut()"):
        def fld(k, v):
            return k if k == v else f"{k}: {v}"
        return (f"ops::SetArgs {{ {fld('ivars', ivars)}, n: {nel}, {fld('status', status)}, cmp, {fld('value', value)}, "
                f"{fld('values', values)}, {fld('indices', idx)} }}")
    fn(f"shmem_{n}_wait_until", ["ivar: *mut " + t, "cmp: c_int", f"value: {t}"], [f"{ct} *ivar", "int cmp", f"{ct} value"],
       None, None, f"{{ ops::wait_set(CALL, {sa('ivar')}, ops::Set::All, true); }}", f"wait on a {ct}")
    fn(f"shmem_{n}_wait", ["ivar: *mut " + t, f"value: {t}"], [f"{ct} *ivar", f"{ct} cmp_value"],
       None, None, f"{{ let cmp = 1; ops::wait_set(CALL, {sa('ivar')}, ops::Set::All, true); }}", f"deprecated wait for a {ct} to change")
    fn(f"shmem_{n}_test", ["ivar: *mut " + t, "cmp: c_int", f"value: {t}"], [f"{ct} *ivar", "int cmp", f"{ct} value"],
       "c_int", "int", f"ops::wait_set(CALL, {sa('ivar')}, ops::Set::All, false) as c_int", f"test a {ct}")
    for s, S in [("all", "All"), ("any", "Any"), ("some", "Some")]:
        for vec in [False, True]:
            for blk, verb in [(True, "wait_until"), (False, "test")]:
                name = f"shmem_{n}_{verb}_{s}" + ("_vector" if vec else "")
                rp = [f"ivars: *mut {t}", "nelems: usize"]
                cp = [f"{ct} *ivars", "size_t nelems"]
                if s == "some":
                    rp.append("indices: *mut usize")
                    cp.append("size_t *indices")
                rp += ["status: *const c_int", "cmp: c_int"]
                cp += ["const int *status", "int cmp"]
                if vec:
                    rp.append(f"values: *const {t}")
                    cp.append(f"{ct} *cmp_values")
                else:
                    rp.append(f"value: {t}")
                    cp.append(f"{ct} cmp_value")
                args = sa("ivars", "nelems", "status", "value" if not vec else f"<{t}>::default()",
                          "values" if vec else "std::ptr::null()", "indices" if s == "some" else "std::ptr::null_mut()")
                r = ops = f"ops::wait_set(CALL, {args}, ops::Set::{S}, {str(blk).lower()})"
                if s == "all" and blk:
                    fn(name, rp, cp, None, None, f"{{ {r}; }}", f"{verb}_{s} on {ct}s")
                elif s == "all":
                    fn(name, rp, cp, "c_int", "int", f"{r} as c_int", f"{verb}_{s} on {ct}s")
                else:
                    fn(name, rp, cp, "usize", "size_t", r, f"{verb}_{s} on {ct}s")
fn = _save

# ---- teams' collectives (1.5) and the deprecated active-set forms ----
RED_BIT = ["uchar", "ushort", "uint", "ulong", "ulonglong", "int8", "int16", "int32", "int64", "uint8",
           "uint16", "uint32", "uint64", "size"]
RED_ARITH = ["char", "schar", "short", "int", "long", "longlong", "ptrdiff", "uchar", "ushort", "uint",
             "ulong", "ulonglong", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
             "uint64", "size", "float", "double"]
RED_OPS = [("and", "And", RED_BIT), ("or", "Or", RED_BIT), ("xor", "Xor", RED_BIT),
           ("max", "Max", RED_ARITH), ("min", "Min", RED_ARITH), ("sum", "Sum", RED_ARITH),
           ("prod", "Prod", RED_ARITH)]
TO_ALL = {"and": ["short", "int", "long", "longlong"], "or": ["short", "int", "long", "longlong"],
          "xor": ["short", "int", "long", "longlong"]}
for o in ["max", "min", "sum", "prod"]:
    TO_ALL[o] = ["short", "int", "long", "longlong", "float", "double"]
TEAM_R, TEAM_C = "team: *mut c_void", "shmem_team_t team"
SET_R = ["start: c_int", "log_stride: c_int", "size: c_int", "psync: *mut c_long"]
SET_C = ["int PE_start", "int logPE_stride", "int PE_size", "long *pSync"]


def colls(P, t, ct, doc_t, mem=""):
    fn(f"{P}broadcast{mem}",
       [TEAM_R, f"dest: *mut {t}", f"source: *const {t}", "nelems: usize", "root: c_int"],
       [TEAM_C, f"{ct} *dest", f"const {ct} *source", "size_t nelems", "int PE_root"], "c_int", "int",
       "coll::broadcast(CALL, team, dest, source, nelems, root)", f"broadcast of {doc_t}", ctx=False)
    for op in ["collect", "fcollect", "alltoall"]:
        body = {"collect": "coll::collect(CALL, team, dest, source, nelems)",
                "fcollect": "coll::fcollect(CALL, team, dest, source, nelems)",
                "alltoall": "coll::alltoalls(CALL, team, dest, source, 1, 1, nelems)"}[op]
        fn(f"{P}{op}{mem}",
           [TEAM_R, f"dest: *mut {t}", f"source: *const {t}", "nelems: usize"],
           [TEAM_C, f"{ct} *dest", f"const {ct} *source", "size_t nelems"], "c_int", "int", body,
           f"{op} of {doc_t}", ctx=False)
    fn(f"{P}alltoalls{mem}",
       [TEAM_R, f"dest: *mut {t}", f"source: *const {t}", "dst: isize", "sst: isize", "nelems: usize"],
       [TEAM_C, f"{ct} *dest", f"const {ct} *source", "ptrdiff_t dst", "ptrdiff_t sst", "size_t nelems"],
       "c_int", "int", "coll::alltoalls(CALL, team, dest, source, dst, sst, nelems)",
       f"strided alltoall of {doc_t}", ctx=False)


for n, ct, t in RMA:
    colls(f"shmem_{n}_", t, ct, ct)
colls("shmem_", "u8", "void", "bytes", "mem")
for o, O, types in RED_OPS:
    for n in types:
        ct, t = RT[n]
        fn(f"shmem_{n}_{o}_reduce", [TEAM_R, f"dest: *mut {t}", f"source: *const {t}", "nreduce: usize"],
           [TEAM_C, f"{ct} *dest", f"const {ct} *source", "size_t nreduce"], "c_int", "int",
           f"coll::reduce::<{t}, rshmem::{O}>(CALL, team, dest, source, nreduce)", f"{o} reduction of {ct}", ctx=False)
    for n in TO_ALL[o]:
        ct, t = RT[n]
        fn(f"shmem_{n}_{o}_to_all", [f"dest: *mut {t}", f"source: *const {t}", "nreduce: c_int"] + SET_R[:3] + [f"_pwrk: *mut {t}", SET_R[3]],
           [f"{ct} *dest", f"const {ct} *source", "int nreduce"] + SET_C[:3] + [f"{ct} *pWrk", "long *pSync"], None, None,
           f"coll::reduce_set::<{t}, rshmem::{O}>(CALL, dest, source, nreduce, start, log_stride, size, psync)",
           f"deprecated active-set {o} reduction of {ct}", ctx=False)
for bits, t in [(32, "u32"), (64, "u64")]:
    fn(f"shmem_broadcast{bits}", ["dest: *mut c_void", "source: *const c_void", "nelems: usize", "root: c_int"] + SET_R,
       ["void *dest", "const void *source", "size_t nelems", "int PE_root"] + SET_C, None, None,
       f"coll::broadcast_set::<{t}>(CALL, dest.cast(), source.cast(), nelems, root, start, log_stride, size, psync)",
       f"deprecated active-set broadcast of {bits}-bit elements", ctx=False)
    for op, fixed in [("collect", "false"), ("fcollect", "true")]:
        fn(f"shmem_{op}{bits}", ["dest: *mut c_void", "source: *const c_void", "nelems: usize"] + SET_R,
           ["void *dest", "const void *source", "size_t nelems"] + SET_C, None, None,
           f"coll::collect_set::<{t}>(CALL, {fixed}, dest.cast(), source.cast(), nelems, start, log_stride, size, psync)",
           f"deprecated active-set {op} of {bits}-bit elements", ctx=False)
    fn(f"shmem_alltoall{bits}", ["dest: *mut c_void", "source: *const c_void", "nelems: usize"] + SET_R,
       ["void *dest", "const void *source", "size_t nelems"] + SET_C, None, None,
       f"coll::alltoalls_set::<{t}>(CALL, dest.cast(), source.cast(), 1, 1, nelems, start, log_stride, size, psync)",
       f"deprecated active-set alltoall of {bits}-bit elements", ctx=False)
    fn(f"shmem_alltoalls{bits}", ["dest: *mut c_void", "source: *const c_void", "dst: isize", "sst: isize", "nelems: usize"] + SET_R,
       ["void *dest", "const void *source", "ptrdiff_t dst", "ptrdiff_t sst", "size_t nelems"] + SET_C, None, None,
       f"coll::alltoalls_set::<{t}>(CALL, dest.cast(), source.cast(), dst, sst, nelems, start, log_stride, size, psync)",
       f"deprecated active-set strided alltoall of {bits}-bit elements", ctx=False)

RS_HEAD = """//! Generated by `capi/gen.py`: the typed OpenSHMEM entry points. Do not edit by hand.

#![allow(clippy::missing_safety_doc, clippy::too_many_arguments, unused_unsafe)]

use std::ffi::{c_int, c_long, c_void};

use crate::coll;
use crate::ops::{self, Amo};

"""
with open(os.path.join(HERE, "src", "gen.rs"), "w") as f:
    f.write(RS_HEAD + "\n".join(rs))

# ---------------------------------------------------------------- header
def generic(macro, cases, pick, nargs, ctx=True, first=1):
    """_Generic over argument `first` (1-based, without ctx), dispatching on arg count for ctx."""
    def body(prefix, argn):
        alias = {"int32": "int", "int64": "long", "int8": "signed char", "int16": "short",
                 "complexf": "float _Complex", "complexd": "double _Complex"}
        sel = ", \\\n    ".join(f"{alias[n] if n in alias else RT[n][0]}: {pick(prefix, n)}" for n in cases)
        return sel
    out = []
    a = ", ".join(f"a{i}" for i in range(1, nargs + 1))
    out.append(f"#define shmemi_{macro}_n({a}) _Generic(*(a{first}), \\\n    {body('shmem_', first)})({a})")
    if ctx:
        out.append(f"#define shmemi_{macro}_c(c, {a}) _Generic(*(a{first}), \\\n    {body('shmem_ctx_', first)})(c, {a})")
        sel = ", ".join(f"_{i}" for i in range(1, nargs + 2))
        out.append(f"#define shmemi_{macro}_sel({sel}, NAME, ...) NAME")
        out.append(f"#define shmem_{macro}(...) shmemi_{macro}_sel(__VA_ARGS__, shmemi_{macro}_c, shmemi_{macro}_n, 0)(__VA_ARGS__)")
    else:
        out.append(f"#define shmem_{macro}(...) shmemi_{macro}_n(__VA_ARGS__)")
    return "\n".join(out)


G = []
for op in ["put", "get", "put_nbi", "get_nbi", "p", "g", "iput", "iget", "put_signal", "put_signal_nbi"]:
    nargs = {"put": 4, "get": 4, "put_nbi": 4, "get_nbi": 4, "p": 3, "g": 2, "iput": 6, "iget": 6,
             "put_signal": 7, "put_signal_nbi": 7}[op]
    G.append(generic(op, GENERIC_RMA, lambda p, n, op=op: f"{p}{n}_{op}", nargs))
for op, cases, nargs in [("atomic_fetch", GENERIC_AMO_EXT, 2), ("atomic_set", GENERIC_AMO_EXT, 3),
                         ("atomic_swap", GENERIC_AMO_EXT, 3), ("atomic_compare_swap", GENERIC_AMO_STD, 4),
                         ("atomic_fetch_inc", GENERIC_AMO_STD, 2), ("atomic_inc", GENERIC_AMO_STD, 2),
                         ("atomic_fetch_add", GENERIC_AMO_STD, 3), ("atomic_add", GENERIC_AMO_STD, 3),
                         ("atomic_fetch_and", GENERIC_AMO_BIT, 3), ("atomic_fetch_or", GENERIC_AMO_BIT, 3),
                         ("atomic_fetch_xor", GENERIC_AMO_BIT, 3), ("atomic_and", GENERIC_AMO_BIT, 3),
                         ("atomic_or", GENERIC_AMO_BIT, 3), ("atomic_xor", GENERIC_AMO_BIT, 3)]:
    G.append(generic(op, cases, lambda p, n, op=op: f"{p}{n}_{op}", nargs))
for op, cases, nargs in [("atomic_fetch_nbi", GENERIC_AMO_EXT, 3), ("atomic_swap_nbi", GENERIC_AMO_EXT, 4),
                         ("atomic_compare_swap_nbi", GENERIC_AMO_STD, 5), ("atomic_fetch_inc_nbi", GENERIC_AMO_STD, 3),
                         ("atomic_fetch_add_nbi", GENERIC_AMO_STD, 4), ("atomic_fetch_and_nbi", GENERIC_AMO_BIT, 4),
                         ("atomic_fetch_or_nbi", GENERIC_AMO_BIT, 4), ("atomic_fetch_xor_nbi", GENERIC_AMO_BIT, 4)]:
    G.append(generic(op, cases, lambda p, n, op=op: f"{p}{n}_{op}", nargs, first=2))
for op, nargs in [("wait_until", 3), ("test", 3), ("wait_until_all", 5), ("wait_until_any", 5), ("wait_until_some", 6),
                  ("test_all", 5), ("test_any", 5), ("test_some", 6), ("wait_until_all_vector", 5),
                  ("wait_until_any_vector", 5), ("wait_until_some_vector", 6), ("test_all_vector", 5),
                  ("test_any_vector", 5), ("test_some_vector", 6), ("wait", 2)]:
    G.append(generic(op, GENERIC_WAIT, lambda p, n, op=op: f"{p}{n}_{op}", nargs, ctx=False))
# Deprecated untyped generics (1.4, C11).
for old, new, nargs, cases in [("finc", "atomic_fetch_inc", 2, GENERIC_AMO_STD[:3]), ("fadd", "atomic_fetch_add", 3, GENERIC_AMO_STD[:3]),
                               ("cswap", "atomic_compare_swap", 4, GENERIC_AMO_STD[:3]), ("swap", "atomic_swap", 3, GENERIC_AMO_STD[:3] + ["float", "double"]),
                               ("inc", "atomic_inc", 2, GENERIC_AMO_STD[:3]), ("add", "atomic_add", 3, GENERIC_AMO_STD[:3]),
                               ("fetch", "atomic_fetch", 2, GENERIC_AMO_STD[:3] + ["float", "double"]),
                               ("set", "atomic_set", 3, GENERIC_AMO_STD[:3] + ["float", "double"])]:
    G.append(generic(old, cases, lambda p, n, old=old: f"{p}{n}_{old}", nargs, ctx=False))

GENERIC_COLL = GENERIC_RMA
for op, nargs in [("broadcast", 5), ("collect", 4), ("fcollect", 4), ("alltoall", 4), ("alltoalls", 6)]:
    G.append(generic(op, GENERIC_COLL, lambda p, n, op=op: f"{p}{n}_{op}", nargs, ctx=False, first=2))
GENERIC_RED_BIT = ["uchar", "ushort", "uint", "ulong", "ulonglong", "int8", "int16", "int32", "int64"]
GENERIC_RED_ARITH = ["char", "schar", "short", "int", "long", "longlong", "uchar", "ushort", "uint", "ulong",
                     "ulonglong", "float", "double", "longdouble"]
for o, _, _ in RED_OPS:
    cases = GENERIC_RED_BIT if o in ("and", "or", "xor") else GENERIC_RED_ARITH
    if o in ("sum", "prod"):
        cases = cases + ["complexf", "complexd"]
    G.append(generic(f"{o}_reduce", cases, lambda p, n, o=o: f"{p}{n}_{o}_reduce", 4, ctx=False, first=2))

LD = """/* long double cannot cross the Rust ABI by value: p/g are inline over putmem/getmem. */
static inline void shmem_longdouble_p(long double *dest, long double value, int pe) {
    shmem_putmem(dest, &value, sizeof value, pe);
}
static inline long double shmem_longdouble_g(const long double *source, int pe) {
    long double v;
    shmem_getmem(&v, source, sizeof v, pe);
    return v;
}
static inline void shmem_ctx_longdouble_p(shmem_ctx_t ctx, long double *dest, long double value, int pe) {
    shmem_ctx_putmem(ctx, dest, &value, sizeof value, pe);
}
static inline long double shmem_ctx_longdouble_g(shmem_ctx_t ctx, const long double *source, int pe) {
    long double v;
    shmem_ctx_getmem(ctx, &v, source, sizeof v, pe);
    return v;
}
"""

# long double and complex reductions: inline in the header, arithmetic in C.
CB = """/* long double and complex reductions: the arithmetic is done by these inline combine
 * functions; the library runs the collective. */
typedef void (*shmemi_combine_t)(void *acc, const void *b, size_t n);
int shmemi_reduce_cb(const char *name, shmem_team_t team, void *dest, const void *source,
                     size_t nreduce, size_t size, shmemi_combine_t combine);
void shmemi_reduce_cb_set(const char *name, void *dest, const void *source, int nreduce,
                          size_t size, shmemi_combine_t combine, int PE_start, int logPE_stride,
                          int PE_size, long *pSync);
"""
CB_TYPES = [("longdouble", "long double", ["max", "min", "sum", "prod"]),
            ("complexf", "float _Complex", ["sum", "prod"]),
            ("complexd", "double _Complex", ["sum", "prod"])]
CB_EXPR = {"max": "b[i] > a[i] ? b[i] : a[i]", "min": "b[i] < a[i] ? b[i] : a[i]",
           "sum": "a[i] + b[i]", "prod": "a[i] * b[i]"}
CB += "#ifndef __cplusplus\n"
for n, ct, ops_ in CB_TYPES:
    for o in ops_:
        CB += (f"static inline void shmemi_{n}_{o}(void *acc, const void *bv, size_t n) {{\n"
               f"    {ct} *a = ({ct} *) acc;\n    const {ct} *b = (const {ct} *) bv;\n"
               f"    for (size_t i = 0; i < n; i++) a[i] = {CB_EXPR[o]};\n}}\n"
               f"static inline int shmem_{n}_{o}_reduce(shmem_team_t team, {ct} *dest, const {ct} *source, size_t nreduce) {{\n"
               f"    return shmemi_reduce_cb(\"shmem_{n}_{o}_reduce\", team, dest, source, nreduce, sizeof({ct}), shmemi_{n}_{o});\n}}\n"
               f"static inline void shmem_{n}_{o}_to_all({ct} *dest, const {ct} *source, int nreduce, int PE_start, int logPE_stride, int PE_size, {ct} *pWrk, long *pSync) {{\n"
               f"    (void) pWrk;\n"
               f"    shmemi_reduce_cb_set(\"shmem_{n}_{o}_to_all\", dest, source, nreduce, sizeof({ct}), shmemi_{n}_{o}, PE_start, logPE_stride, PE_size, pSync);\n}}\n")
CB += "#endif\n"
CB += """/* shmem_sync(team) (1.5) and the deprecated shmem_sync(PE_start, logPE_stride, PE_size, pSync)
 * by argument count. */
#define shmemi_sync_sel(_1, _2, _3, _4, NAME, ...) NAME
#define shmem_sync(...) shmemi_sync_sel(__VA_ARGS__, shmem_sync, 0, 0, shmem_team_sync, 0)(__VA_ARGS__)
"""

with open(os.path.join(HERE, "include", "shmem_head.h.in")) as f:
    head = f.read()
with open(os.path.join(HERE, "include", "shmem.h"), "w") as f:
    f.write(head.replace("@PROTOTYPES@", "\n".join(h) + "\n\n" + LD + "\n" + CB)
            .replace("@GENERICS@", "\n\n".join(G)))
