#!/usr/bin/env python3
"""Writes capi/include/nvshmem/rshmem_nvshmem_map.h: the name map of the NVSHMEM source
compatibility headers (capi/include/nvshmem/nvshmem.h includes it).

Every NVSHMEM call rshmem has becomes a macro naming the rshmem call (`nvshmem_int_p` ->
`rshmem_int_p`, `nvshmemx_int_put_block` -> `rshmem_int_put_block`, `nvshmemx_barrier_all_on_stream`
-> `rshmemx_barrier_all_on_stream`), so a call keeps the host/device qualifiers of the rshmem call
it names. A few calls need code: the host forms of the blocking team collectives (NVSHMEM has them
on both sides, rshmem's host library has only the stream-ordered ones), and the 16-bit float RMA
and data-movement collectives (moved as 16-bit words). Every NVSHMEM call rshmem does not have and
that this file knows of is a compile-time error naming the call (see nvshmem.h).

Host calls are mapped only when capi/include/rshmem.h declares the rshmem call; the others become
"not supported" errors, so the map never names a host call the library lacks.

    python3 capi/gen_nvshmem.py           # rewrite the header
    python3 capi/gen_nvshmem.py --check   # exit 1 if the header is not up to date
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "include", "nvshmem", "rshmem_nvshmem_map.h")
# A test that references every mapped name on the side(s) where it exists (capi/tests/nvshmem).
TEST_OUT = os.path.join(HERE, "tests", "nvshmem", "all_names.cu")
RSHMEM_H = os.path.join(HERE, "include", "rshmem.h")
# --rshmem-h PATH: read the host API from another rshmem.h (for testing the map).
if "--rshmem-h" in sys.argv:
    RSHMEM_H = sys.argv[sys.argv.index("--rshmem-h") + 1]

# The device library's include folder: rshmem/type_lists.h, the type tables that rshmem.h and
# the device library share, is read below and found there by the preprocessor.
DEVICE_INC = os.path.join(os.path.dirname(HERE), "device-lib", "include")
TYPE_LISTS_H = os.path.join(DEVICE_INC, "rshmem", "type_lists.h")


def type_lists():
    """The X(name, C type) lists of rshmem/type_lists.h, by list name (RMA, AMO, ...); an alias
    (`#define RSHMEM_FOR_A_TYPES(X) RSHMEM_FOR_B_TYPES(X)`) gets B's list."""
    try:
        text = open(TYPE_LISTS_H).read().replace("\\\n", " ")
    except OSError as e:
        raise SystemExit(f"gen_nvshmem.py: cannot read {TYPE_LISTS_H}: {e}")
    lists = {}
    for name, body in re.findall(r"#define RSHMEM_FOR_(\w+)_TYPES\(X\)(.*)", text):
        alias = re.fullmatch(r"\s*RSHMEM_FOR_(\w+)_TYPES\(X\)\s*", body)
        if alias:
            lists[name] = lists[alias.group(1)]
        else:
            lists[name] = [(n, t.strip()) for n, t in re.findall(r"X\((\w+),([^)]*)\)", body)]
    for need in ("RMA", "AMO", "AMO_FLOAT", "AMO_BITWISE", "WAIT", "REDUCE_INT", "REDUCE_FLOAT"):
        if not lists.get(need):
            raise SystemExit(f"gen_nvshmem.py: {TYPE_LISTS_H} has no RSHMEM_FOR_{need}_TYPES list")
    return lists


LISTS = type_lists()
RMA = LISTS["RMA"]
RT = dict(RMA)
AMO_STD = [n for n, _ in LISTS["AMO"]]
AMO_EXT = AMO_STD + [n for n, _ in LISTS["AMO_FLOAT"]]
AMO_BIT = [n for n, _ in LISTS["AMO_BITWISE"]]
WAIT = [n for n, _ in LISTS["WAIT"]]
RED_INT = [n for n, _ in LISTS["REDUCE_INT"]]
RED_FLOAT = [n for n, _ in LISTS["REDUCE_FLOAT"]]
ARITH_OPS = ["sum", "prod", "min", "max"]
BIT_OPS = ["and", "or", "xor"]
# NVSHMEM's 16-bit float types: (name, C type). rshmem moves them as uint16_t words.
HALF = [("half", "half"), ("bfloat16", "__nv_bfloat16")]
# Scopes: (suffix, NVSHMEM prefix of the device call).
SCOPES = [("", "nvshmem_"), ("_warp", "nvshmemx_"), ("_block", "nvshmemx_")]


def reduce_ops(t):
    return ARITH_OPS + (BIT_OPS if t in RED_INT else [])


def host_declared():
    """Names rshmem.h declares (None when it is not there: then every host call is mapped).
    The typed calls are declared by macros, so the header is run through the C preprocessor."""
    if not os.path.exists(RSHMEM_H):
        return None
    text = open(RSHMEM_H).read()
    names = set(re.findall(r"\b(rshmemx?_[A-Za-z0-9_]+)\s*\(", text))
    try:
        pre = subprocess.run([os.environ.get("CC", "cc"), "-E", "-P", "-x", "c",
                              "-I", DEVICE_INC, RSHMEM_H],
                             check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"gen_nvshmem.py: cannot preprocess {RSHMEM_H}: {e}")
    names |= set(re.findall(r"\b(rshmemx?_[A-Za-z0-9_]+)\s*\(", pre))
    return names


class Map:
    def __init__(self):
        self.lines = []
        self.seen = set()
        self.unsupported = []  # (nvshmem name, reason)
        self.host = host_declared()
        self.side = "dev"  # where the names defined now exist: dev (maybe host too), host
        self.refs = []  # (nvshmem name, side) of every mapped name

    def name(self, nv):
        if nv in self.seen:
            raise SystemExit(f"gen_nvshmem.py: {nv} twice")
        self.seen.add(nv)

    def define(self, nv, rs):
        self.name(nv)
        self.lines.append(f"#define {nv} {rs}")
        self.refs.append((nv, self.side))

    def host_define(self, nv, rs, why=None):
        """A host-only call: mapped when rshmem.h declares rs, else unsupported. A stream-ordered
        _nbi call rshmem lacks maps to its blocking form when rshmem has that: it completes in
        stream order, earlier than the _nbi form must (as the device library's _nbi calls do)."""
        blocking = rs.replace("_nbi_on_stream", "_on_stream")
        if self.host is None or rs in self.host:
            self.define(nv, rs)
        elif blocking != rs and blocking in self.host:
            self.define(nv, blocking)
        else:
            self.unsupport(nv, why or f"rshmem's host library has no {rs}")

    def host16(self, nv, rs, params, args):
        """A host-only call on 16-bit floats: `nv(params)` calls rshmem's `rs(args)` on the
        16-bit patterns; unsupported when rshmem.h does not declare `rs`."""
        if self.host is not None and rs not in self.host:
            self.unsupport(nv, f"rshmem's host library has no {rs}")
            return
        self.name(nv)
        self.raw(f"RSHMEM_COMPAT_HOST16(int, {nv}, ({params}), {rs}({args}))")

    def unsupport(self, nv, why):
        self.name(nv)
        self.unsupported.append((nv, why))

    def raw(self, text):
        self.lines.append(text)
        found = re.match(r"RSHMEM_COMPAT_(COLL|TWIN16|DEV16|HOST16)\((?:[a-z]+, )?(nvshmemx?_\w+)", text)
        if found:
            side = {"COLL": "hd", "TWIN16": "hd", "DEV16": "dev", "HOST16": "host"}[found.group(1)]
            self.refs.append((found.group(2), side))


def device_calls(m):
    m.raw("// ---- PE queries, ordering, barriers, teams (device; host too where rshmem has a twin)")
    for n in ["my_pe", "n_pes", "ptr", "fence", "quiet", "barrier_all", "sync_all", "barrier",
              "team_sync", "team_my_pe", "team_n_pes", "team_translate_pe", "signal_fetch",
              "signal_wait_until"]:
        m.define("nvshmem_" + n, "rshmem_" + n)
    m.define("nvshmem_sync", "rshmem_team_sync")
    m.define("nvshmemx_signal_op", "rshmem_signal_op")
    for sfx in ["_warp", "_block"]:
        for n in ["barrier_all", "sync_all", "barrier", "team_sync"]:
            m.define("nvshmemx_" + n + sfx, "rshmem_" + n + sfx)
        m.define("nvshmemx_sync" + sfx, "rshmem_team_sync" + sfx)

    m.raw("")
    m.raw("// ---- RMA and signals")
    for sfx, pre in SCOPES:
        for n in ["putmem", "getmem", "putmem_nbi", "getmem_nbi", "putmem_signal",
                  "putmem_signal_nbi"]:
            m.define(pre + n + sfx, "rshmem_" + n + sfx)
    for t, _ in RMA:
        m.define(f"nvshmem_{t}_p", f"rshmem_{t}_p")
        m.define(f"nvshmem_{t}_g", f"rshmem_{t}_g")
        for sfx, pre in SCOPES:
            for op in ["put", "get", "put_nbi", "get_nbi", "put_signal", "put_signal_nbi"]:
                m.define(f"{pre}{t}_{op}{sfx}", f"rshmem_{t}_{op}{sfx}")

    m.raw("")
    m.raw("// ---- Atomics")
    for t in AMO_EXT:
        for op in ["fetch", "set", "swap"]:
            m.define(f"nvshmem_{t}_atomic_{op}", f"rshmem_{t}_atomic_{op}")
    for t in AMO_STD:
        for op in ["compare_swap", "fetch_inc", "inc", "fetch_add", "add"]:
            m.define(f"nvshmem_{t}_atomic_{op}", f"rshmem_{t}_atomic_{op}")
    for t in AMO_BIT:
        for op in ["fetch_and", "and", "fetch_or", "or", "fetch_xor", "xor"]:
            m.define(f"nvshmem_{t}_atomic_{op}", f"rshmem_{t}_atomic_{op}")

    m.raw("")
    m.raw("// ---- Point-to-point synchronization")
    for t in WAIT:
        for op in ["wait_until", "wait_until_all", "wait_until_any", "wait_until_some",
                   "wait_until_all_vector", "wait_until_any_vector", "wait_until_some_vector",
                   "test", "test_all", "test_any", "test_some", "test_all_vector",
                   "test_any_vector", "test_some_vector"]:
            m.define(f"nvshmem_{t}_{op}", f"rshmem_{t}_{op}")

    m.raw("")
    m.raw("// ---- Team collectives in warp and block scope (device only)")
    for sfx, pre in SCOPES[1:]:
        for n in ["alltoallmem", "fcollectmem", "broadcastmem", "collectmem"]:
            m.define(pre + n + sfx, "rshmem_" + n + sfx)
        for t, _ in RMA:
            for op in ["alltoall", "fcollect", "collect", "broadcast"]:
                m.define(f"{pre}{t}_{op}{sfx}", f"rshmem_{t}_{op}{sfx}")
            for op in reduce_ops(t) if t in RED_INT + RED_FLOAT else []:
                for c in ["reduce", "reducescatter"]:
                    m.define(f"{pre}{t}_{op}_{c}{sfx}", f"rshmem_{t}_{op}_{c}{sfx}")


def root_param(op):
    """The trailing root parameter and argument of collective `op`: (", int root", ", root")
    for a broadcast, empty strings otherwise."""
    return (", int root", ", root") if op.startswith("broadcast") else ("", "")


def thread_coll(m, nv, rs_dev, rs_host, params, args):
    """One thread-scope team collective `nv` (see hd_collectives): the device call `rs_dev` in
    kernels; in host code the host library's `rs_dev`, else its stream call `rs_host` on the
    default stream and a synchronization, else none (a host call is a compile-time error)."""
    m.name(nv)
    if m.host is None or rs_dev in m.host:
        # The host library's blocking collective of the same name.
        host = f"RSHMEM_COMPAT_HOST_ENTRY({rs_dev})({args})"
    elif rs_host in m.host:
        host = f'rshmem_compat_sync("{nv}", {rs_host}({args}, (cudaStream_t)0))'
    else:
        # No host form: device only (a host call is a compile-time error naming it).
        m.raw(f"RSHMEM_COMPAT_DEV16(int, {nv}, ({params}), {rs_dev}({args}))")
        return
    m.raw(f"RSHMEM_COMPAT_COLL({nv}, ({params}), {rs_dev}({args}), {host})")


def hd_collectives(m):
    """Thread-scope team collectives: NVSHMEM has them in kernels and in host code. The device
    call in kernels; in host code the host library's blocking collective of the same name (or,
    where the library has none, its stream-ordered call on the default stream followed by a
    synchronization of that stream)."""
    m.raw("")
    m.raw("// ---- Team collectives in thread scope: the device call in kernels, the host")
    m.raw("//      library's blocking collective in host code.")

    for n in ["alltoallmem", "fcollectmem", "broadcastmem"]:
        extra, extra_a = root_param(n)
        thread_coll(m, f"nvshmem_{n}", f"rshmem_{n}", f"rshmemx_{n}_on_stream",
            f"rshmem_team_t team, void *dest, const void *source, size_t nbytes{extra}",
            f"team, dest, source, nbytes{extra_a}")
    for t, ct in RMA:
        for op in ["alltoall", "fcollect", "broadcast"]:
            extra, extra_a = root_param(op)
            thread_coll(m, f"nvshmem_{t}_{op}", f"rshmem_{t}_{op}", f"rshmemx_{t}_{op}_on_stream",
                f"rshmem_team_t team, {ct} *dest, const {ct} *source, size_t nelems{extra}",
                f"team, dest, source, nelems{extra_a}")
        if t in RED_INT + RED_FLOAT:
            for op in reduce_ops(t):
                for c in ["reduce", "reducescatter"]:
                    thread_coll(m, f"nvshmem_{t}_{op}_{c}", f"rshmem_{t}_{op}_{c}",
                        f"rshmemx_{t}_{op}_{c}_on_stream",
                        f"rshmem_team_t team, {ct} *dest, const {ct} *source, size_t nreduce",
                        "team, dest, source, nreduce")


def host_calls(m):
    m.side = "host"
    m.raw("")
    m.raw("// ---- Host-only: set-up, memory, collective launch")
    for n in ["init", "finalize", "malloc", "calloc", "align", "free", "team_split_strided",
              "team_split_2d", "team_destroy", "team_get_config", "global_exit",
              "info_get_version", "info_get_name"]:
        m.host_define("nvshmem_" + n, "rshmem_" + n)
    # (nvshmemx_set_attr_mpi_comm_args is an inline function of nvshmem.h.)
    for n in ["init_attr", "get_uniqueid", "set_attr_uniqueid_args", "init_status",
              "vendor_get_version_info"]:
        m.host_define("nvshmemx_" + n, "rshmem_" + n)
    for n in ["collective_launch", "collective_launch_query_gridsize"]:
        m.host_define("nvshmemx_" + n, "rshmemx_" + n)

    # User buffer registration and modules the program loads itself (issue 29: compathost).
    m.raw("")
    m.raw("// ---- Host-only: user buffers and CUDA modules the program loads itself")
    for n in ["buffer_register", "buffer_unregister", "buffer_unregister_all",
              "buffer_register_symmetric", "buffer_unregister_symmetric",
              "cumodule_init", "cumodule_finalize"]:
        m.host_define("nvshmemx_" + n, "rshmemx_" + n)

    m.raw("")
    m.raw("// ---- Host-only: stream-ordered calls")
    for n in ["barrier_all", "sync_all", "barrier", "team_sync", "quiet", "putmem", "getmem",
              "putmem_nbi", "getmem_nbi", "putmem_signal", "putmem_signal_nbi", "signal_op",
              "signal_wait_until", "alltoallmem", "fcollectmem", "broadcastmem", "collectmem"]:
        m.host_define(f"nvshmemx_{n}_on_stream", f"rshmemx_{n}_on_stream")
    m.host_define("nvshmemx_sync_on_stream", "rshmemx_team_sync_on_stream")
    for t, _ in RMA:
        for op in ["p", "g", "put", "get", "put_nbi", "get_nbi", "put_signal", "put_signal_nbi",
                   "alltoall", "fcollect", "collect", "broadcast"]:
            m.host_define(f"nvshmemx_{t}_{op}_on_stream", f"rshmemx_{t}_{op}_on_stream")
        if t in RED_INT + RED_FLOAT:
            for op in reduce_ops(t):
                for c in ["reduce", "reducescatter"]:
                    m.host_define(f"nvshmemx_{t}_{op}_{c}_on_stream",
                                  f"rshmemx_{t}_{op}_{c}_on_stream")
    for t in WAIT:
        for op in ["wait_until", "wait_until_all", "wait_until_any", "wait_until_some"]:
            m.host_define(f"nvshmemx_{t}_{op}_on_stream", f"rshmemx_{t}_{op}_on_stream")


def half_calls(m):
    m.side = "dev"
    """16-bit floats: the RMA calls and the data-movement collectives move them as uint16_t
    words (bit for bit); their reductions are not supported."""
    m.raw("")
    m.raw("// ---- 16-bit floats (half, bfloat16): RMA and data movement as uint16_t words")
    m.raw("#if RSHMEM_COMPAT_HAVE_FP16")
    for t, ct in HALF:
        # Device (and twin) calls.
        m.name(f"nvshmem_{t}_p")
        m.raw(f"RSHMEM_COMPAT_TWIN16(void, nvshmem_{t}_p, ({ct} *dest, {ct} value, int pe), "
              f"rshmem_uint16_p((uint16_t *)dest, rshmem_compat_bits(value), pe))")
        m.name(f"nvshmem_{t}_g")
        m.raw(f"RSHMEM_COMPAT_TWIN16({ct}, nvshmem_{t}_g, (const {ct} *src, int pe), "
              f"rshmem_compat_from_bits<{ct}>(rshmem_uint16_g((const uint16_t *)src, pe)))")
        for sfx, pre in SCOPES:
            q = "RSHMEM_COMPAT_TWIN16" if sfx == "" else "RSHMEM_COMPAT_DEV16"
            for op in ["put", "get", "put_nbi", "get_nbi"]:
                nv = f"{pre}{t}_{op}{sfx}"
                m.name(nv)
                m.raw(f"{q}(void, {nv}, ({ct} *dest, const {ct} *src, size_t nelems, int pe), "
                      f"rshmem_uint16_{op}{sfx}((uint16_t *)dest, (const uint16_t *)src, nelems, "
                      f"pe))")
            for op in ["put_signal", "put_signal_nbi"]:
                nv = f"{pre}{t}_{op}{sfx}"
                m.name(nv)
                m.raw(f"{q}(void, {nv}, ({ct} *dest, const {ct} *src, size_t nelems, "
                      f"uint64_t *sig_addr, uint64_t signal, int sig_op, int pe), "
                      f"rshmem_uint16_{op}{sfx}((uint16_t *)dest, (const uint16_t *)src, nelems, "
                      f"sig_addr, signal, sig_op, pe))")
            if sfx:
                for op in ["alltoall", "fcollect", "broadcast"]:
                    nv = f"{pre}{t}_{op}{sfx}"
                    extra, extra_a = root_param(op)
                    m.name(nv)
                    m.raw(f"RSHMEM_COMPAT_DEV16(int, {nv}, (rshmem_team_t team, {ct} *dest, "
                          f"const {ct} *source, size_t nelems{extra}), rshmem_uint16_{op}{sfx}("
                          f"team, (uint16_t *)dest, (const uint16_t *)source, nelems{extra_a}))")
        # Thread-scope collectives: device call, or host stream call + sync.
        for op in ["alltoall", "fcollect", "broadcast"]:
            nv = f"nvshmem_{t}_{op}"
            extra, extra_a = root_param(op)
            thread_coll(m, nv, f"rshmem_uint16_{op}", f"rshmemx_uint16_{op}_on_stream",
                        f"rshmem_team_t team, {ct} *dest, const {ct} *source, size_t nelems{extra}",
                        f"team, (uint16_t *)dest, (const uint16_t *)source, nelems{extra_a}")
        # Host stream-ordered calls.
        for op in ["put", "get", "put_nbi", "get_nbi"]:
            nv = f"nvshmemx_{t}_{op}_on_stream"
            rs = f"rshmemx_uint16_{op}_on_stream"
            if m.host is not None and rs not in m.host and op.endswith("_nbi"):
                rs = rs.replace("_nbi_on_stream", "_on_stream")  # see Map.host_define
            m.host16(nv, rs, f"{ct} *dest, const {ct} *src, size_t nelems, int pe, cudaStream_t stream",
                     "(uint16_t *)dest, (const uint16_t *)src, nelems, pe, stream")
        for op in ["alltoall", "fcollect", "broadcast"]:
            nv = f"nvshmemx_{t}_{op}_on_stream"
            rs = f"rshmemx_uint16_{op}_on_stream"
            extra, extra_a = root_param(op)
            m.host16(nv, rs, f"rshmem_team_t team, {ct} *dest, const {ct} *source, size_t nelems{extra}, "
                     "cudaStream_t stream",
                     f"team, (uint16_t *)dest, (const uint16_t *)source, nelems{extra_a}, stream")
        # Reductions (sum, prod, min, max): the device library's on the device (on __half /
        # __nv_bfloat16); the host library's, which take the 16-bit patterns, on the host.
        for op in ARITH_OPS:
            for c in ["reduce", "reducescatter"]:
                for sfx, pre in SCOPES[1:]:
                    m.define(f"{pre}{t}_{op}_{c}{sfx}", f"rshmem_{t}_{op}_{c}{sfx}")
                nv = f"nvshmem_{t}_{op}_{c}"
                rs = f"rshmem_{t}_{op}_{c}"
                params = f"rshmem_team_t team, {ct} *dest, const {ct} *source, size_t nreduce"
                args = "team, dest, source, nreduce"
                bits = "team, (uint16_t *)dest, (const uint16_t *)source, nreduce"
                m.name(nv)
                if m.host is None or rs in m.host:
                    host = f"RSHMEM_COMPAT_HOST_ENTRY({rs})({bits})"
                    m.raw(f"RSHMEM_COMPAT_COLL({nv}, ({params}), {rs}({args}), {host})")
                else:
                    # No host form: device only (a host call is a compile-time error).
                    m.raw(f"RSHMEM_COMPAT_DEV16(int, {nv}, ({params}), {rs}({args}))")
                nv = f"nvshmemx_{t}_{op}_{c}_on_stream"
                rs = f"rshmemx_{t}_{op}_{c}_on_stream"
                m.host16(nv, rs, f"{params}, cudaStream_t stream", f"{bits}, stream")
    m.raw("#endif  // RSHMEM_COMPAT_HAVE_FP16")


def maxloc_calls(m):
    """maxloc on double2 {value, location}: NVSHMEM has nvshmemx_double2_maxloc_reduce_block in
    kernels; the device library has it in every scope (and reducescatter). No host form."""
    m.side = "dev"
    m.raw("")
    m.raw("// ---- maxloc (double2 {value, location}), device only")
    for sfx, pre in SCOPES:
        for c in ["reduce", "reducescatter"]:
            m.define(f"{pre}double2_maxloc_{c}{sfx}", f"rshmem_double2_maxloc_{c}{sfx}")
    for c in ["reduce", "reducescatter"]:
        m.unsupport(f"nvshmemx_double2_maxloc_{c}_on_stream",
                    "maxloc exists in kernels only (as in NVSHMEM)")


def unsupported_calls(m):
    for n, why in [
        ("nvshmemx_culibrary_init", "use nvshmemx_cumodule_init with a module loaded by "
         "cuModuleLoad* (rshmem does not reach CUDA 12 library objects)"),
        ("nvshmemx_culibrary_finalize", "see nvshmemx_culibrary_init"),
        ("nvshmemx_mc_ptr", "rshmem does not use NVLink multicast"),
        ("nvshmemx_hostlib_init_attr", "rshmem has no separate host library"),
        ("nvshmemx_hostlib_finalize", "rshmem has no separate host library"),
        ("nvshmemx_init_init_attr_ver_only", "rshmem has no versioned init attributes"),
        ("nvshmemx_team_get_uniqueid", "rshmem makes teams only by splitting"),
        ("nvshmemx_team_init", "rshmem makes teams only by splitting"),
        ("nvshmem_init_thread", "rshmem has no thread levels"),
        ("nvshmem_query_thread", "rshmem has no thread levels"),
        ("nvshmemx_qp_create", "rshmem has no queue pairs"),
        ("nvshmemx_qp_fence", "rshmem has no queue pairs"),
        ("nvshmemx_qp_fence_warp", "rshmem has no queue pairs"),
        ("nvshmemx_qp_fence_block", "rshmem has no queue pairs"),
        ("nvshmemx_qp_quiet", "rshmem has no queue pairs"),
        ("nvshmemx_qp_quiet_warp", "rshmem has no queue pairs"),
        ("nvshmemx_qp_quiet_block", "rshmem has no queue pairs"),
        ("nvshmemx_qp_signal_op", "rshmem has no queue pairs"),
    ]:
        m.unsupport(n, why)


def render(m):
    device_calls(m)
    hd_collectives(m)
    host_calls(m)
    half_calls(m)
    maxloc_calls(m)
    unsupported_calls(m)
    out = [
        "// Generated by capi/gen_nvshmem.py -- do not edit; run `python3 capi/gen_nvshmem.py`.",
        "// The name map of the NVSHMEM compatibility headers: included by nvshmem.h, which",
        "// defines the RSHMEM_COMPAT_* macros used here. Reference: docs/nvshmem-porting.md.",
        "#pragma once",
        "",
    ]
    if m.host is None:
        out.append("// (generated without capi/include/rshmem.h: every host call is mapped)")
        out.append("")
    out += m.lines
    out.append("")
    out.append("// ---- Not supported: each is a compile-time error naming the call (nvshmem.h)")
    out.append("#if defined(__cplusplus)")
    for nv, why in m.unsupported:
        out.append(f'RSHMEM_COMPAT_UNSUPPORTED({nv}, "{why}")')
    out.append("#else")
    for nv, _ in m.unsupported:
        out.append(f"#define {nv}(...) {nv}_is_not_supported_by_rshmem")
    out.append("#endif")
    return "\n".join(out) + "\n"


def render_test(m):
    dev = [nv for nv, side in m.refs if side in ("dev", "hd")]
    host = [nv for nv, side in m.refs if side in ("host", "hd")]
    out = [
        "// Generated by capi/gen_nvshmem.py -- do not edit; run `python3 capi/gen_nvshmem.py`.",
        "// References every name the NVSHMEM map defines, in device code where it exists on the",
        "// device and in host code where it exists on the host: compiling this file checks that",
        "// each one names a declaration of rshmem.h or the device library (capi/tests/nvshmem/run",
        "// compiles it with nvcc, and its host part with a C++ compiler).",
        "#include <nvshmem.h>",
        "#include <nvshmemx.h>",
        "",
        "#if defined(__CUDACC__)",
        "__device__ void rshmem_compat_device_names(void) {",
    ]
    out += [f"    (void)&{nv};" for nv in dev]
    out += ["}", "#endif", "", "void rshmem_compat_host_names(void) {"]
    out += [f"    (void)&{nv};" for nv in host]
    out += ["}", ""]
    return "\n".join(out)


def main():
    m = Map()
    text = render(m)
    test = render_test(m)
    if "--check" in sys.argv[1:]:
        stale = [p for p, t in ((OUT, text), (TEST_OUT, test))
                 if not os.path.exists(p) or open(p).read() != t]
        for p in stale:
            print(f"{os.path.relpath(p)} is not up to date: run python3 capi/gen_nvshmem.py",
                  file=sys.stderr)
        sys.exit(1 if stale else 0)
    os.makedirs(os.path.dirname(TEST_OUT), exist_ok=True)
    for p, t in ((OUT, text), (TEST_OUT, test)):
        with open(p, "w") as f:
            f.write(t)


if __name__ == "__main__":
    main()
