"""Expert-parallel dispatch and combine from Python (rshmem.ep.Buffer).

CPU backend: the handle is refused with the runtime's message, the configuration checks, the
buffer sizes, the host routing check and the Python-side argument checks. GPU backend (skipped
without one): dispatch + combine on torch tensors against the reference semantics of docs/moe.md
computed here on the host (every expert's rows, every row's source and data, every combined
element: fp32 exactly, bf16 within the rounding of the partial sums), uneven routing with an
empty expert, T = 0 on a PE, k = 1 and k = 8, the low-latency mode, fp8 tokens with per-block
scales (bytes and scales of every row, the bf16 combine also against the unquantized sum), side
streams, errors.
Every PE runs every test (the handles and their calls are collective)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import rshmem
from rshmem import ep


def me_n():
    return rshmem.my_pe(), rshmem.n_pes()


def dev():
    """This PE's CUDA device, named explicitly."""
    return f"cuda:{rshmem.device()}"


def n_experts():
    """8 experts per PE (16 on one PE, so that k = 8 distinct experts avoiding the empty one
    exist)."""
    n = rshmem.n_pes()
    return 8 * n if n >= 2 else 16


def optional_torch():
    """torch when installed (the CPU-backend tests then also pass torch CPU tensors)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def layout():
    """(me, n, e_all, lx): this PE, the number of PEs, the experts, the experts per PE."""
    me, n = me_n()
    e_all = n_experts()
    return me, n, e_all, e_all // n


def raises(needles, fn, *args, **kw):
    """Calls fn; it must raise rshmem.Error whose message holds every needle."""
    with pytest.raises(rshmem.Error) as e:
        fn(*args, **kw)
    msg = str(e.value)
    for s in needles:
        assert s in msg, f"{s!r} not in {msg!r}"
    return msg


# ---------------------------------------------------------------------------------------------
# CPU backend (and checks that need no GPU)
# ---------------------------------------------------------------------------------------------

def test_buffer_refused_on_the_cpu_backend_with_the_runtime_message(cpu):
    raises(["ep_new", "needs the GPU backend"], ep.Buffer, n_experts(), 64, 2, 16, "float32")
    raises(["ep_new", "needs the GPU backend"], ep.Buffer, n_experts(), 64, 2, 16, "bfloat16",
           low_latency=True)


def test_configuration_errors_name_the_field():
    # The configuration is checked before the backend: the same errors on CPU and GPU.
    _, n = me_n()
    e = n_experts()
    raises(["ep_new: num_experts"], ep.Buffer, 1025 * n, 64, 2, 16, "float32")
    if n > 1:
        raises(["ep_new: num_experts", f"multiple of the {n} PEs"], ep.Buffer, n + 1, 64, 2, 16,
               "float32")
    raises(["ep_new: topk"], ep.Buffer, e, 64, 0, 16, "float32")
    raises(["ep_new: topk"], ep.Buffer, e, 64, 33, 16, "float32")
    raises(["ep_new: hidden", "16 bytes"], ep.Buffer, e, 100, 2, 16, "bfloat16")
    raises(["ep_new: hidden"], ep.Buffer, e, 0, 2, 16, "float32")
    raises(["ep_new: num_sms"], ep.Buffer, e, 64, 2, 16, "float32", num_sms=0)
    raises(["ep_new: max_tokens", "256"], ep.Buffer, e, 64, 2, 257, "float32",
           low_latency=True)
    raises(["rshmem.ep.Buffer: dtype: float16", "float32, bfloat16 or float8_e4m3fn"], ep.Buffer,
           e, 64, 2, 16, "float16")
    # fp8: one scale per 128 elements, so hidden must be a multiple of 128.
    raises(["ep_new: hidden: 64 is not a multiple of 128"], ep.Buffer, e, 64, 2, 16,
           "float8_e4m3fn")
    raises(["ep_new: hidden: 200 is not a multiple of 128"], ep.sizes, e, 200, 2, 16,
           "float8_e4m3fn")
    raises(["rshmem.ep.Buffer: dtype: int64"], ep.Buffer, e, 64, 2, 16, np.int64)
    raises(["rshmem.ep.Buffer: num_experts: -8 is negative"], ep.Buffer, -8, 64, 2, 16)
    raises(["rshmem.ep.Buffer: hidden: '64' is not an integer"], ep.Buffer, e, "64", 2, 16)
    raises(["rshmem.ep.Buffer: topk: 2.0 is not an integer"], ep.Buffer, e, 64, 2.0, 16)
    raises(["rshmem.ep.Buffer: max_recv_rows: -1 is negative"], ep.Buffer, e, 64, 2, 16,
           max_recv_rows=-1)


def test_sizes_follow_the_runtime_layout():
    _, n = me_n()
    e, h, k, m = n_experts(), 256, 4, 32
    lx = e // n
    s = ep.sizes(e, h, k, m, "bfloat16")
    assert s["local_experts"] == lx and s["row_bytes"] == 2 * h
    assert s["max_rows"] == n * m * min(k, lx)  # the worst case by default
    assert s["symmetric_bytes"] >= 2 * n * m * 2 * h  # staging + combine receive rows
    assert ep.sizes(e, h, k, m, "float32")["row_bytes"] == 4 * h
    assert ep.sizes(e, h, k, m, "bfloat16", max_recv_rows=10)["max_rows"] == 10
    ll = ep.sizes(e, h, k, m, "bfloat16", low_latency=True)
    # The low-latency output [E][M] rows + (token, slot) pairs and the [M][k] receive rows.
    assert ll["symmetric_bytes"] - s["symmetric_bytes"] >= e * m * (2 * h + 8) + m * k * 2 * h
    assert s["comb_row_bytes"] == 2 * h and s["scale_words"] == 0
    f8 = ep.sizes(e, h, k, m, "float8_e4m3fn")
    # fp8 rows of h bytes with h/128 float32 scales; the combine in bf16.
    assert (f8["row_bytes"], f8["comb_row_bytes"], f8["scale_words"]) == (h, 2 * h, h // 128)
    assert f8["max_rows"] == s["max_rows"]
    assert s["symmetric_bytes"] - f8["symmetric_bytes"] == n * m * (2 * h - h - 4 * (h // 128))
    assert ep.sizes(e, h, k, m, ep.FP8)["scale_words"] == h // 128
    assert ep.sizes(64, h, k, m, "bfloat16", n_pes=8)["local_experts"] == 8
    raises(["ep_new: num_experts"], ep.sizes, 12, h, k, m, n_pes=8)
    raises(["ep_new: n_pes"], ep.sizes, 64, h, k, m, n_pes=33)


def test_check_routing_names_the_first_bad_entry():
    ok = np.array([[0, 3], [-1, 7]], dtype=np.int64)
    ep.check_routing(ok, 8)
    raises(["ep_dispatch: topk_idx[1][1] = 8 is out of range", "0..8"], ep.check_routing,
           np.array([[0, 3], [-1, 8]], dtype=np.int64), 8)
    raises(["topk_idx[0][1] = -2"], ep.check_routing, np.array([[0, -2]], dtype=np.int64), 8)
    raises(["topk_idx: dtype int32; expected int64"], ep.check_routing,
           np.zeros((2, 2), np.int32), 8)
    raises(["topk_idx: shape (4,)"], ep.check_routing, np.zeros(4, np.int64), 8)
    raises(["topk_idx is not C-contiguous"], ep.check_routing,
           np.zeros((4, 4), np.int64)[:, ::2], 8)
    ep.check_routing(np.zeros((0, 4), np.int64), 8)
    torch = optional_torch()
    if torch is not None:
        raises(["topk_idx[2][0] = 9"], ep.check_routing,
               torch.tensor([[1], [2], [9]], dtype=torch.int64), 9)


class _NoNative:
    """Stands in for the native handle: any use of it fails the test (the Python checks must
    raise before the native call)."""

    def __getattr__(self, name):
        raise AssertionError(f"the native {name} was reached: the argument checks let it pass")


def _unmade(dtype="float32", hidden=64, topk=2, max_tokens=16, low_latency=False):
    """A Buffer object with a configuration but no runtime handle (the CPU backend cannot make
    one), to run the Python-side argument checks, which come before any native call."""
    b = ep.Buffer.__new__(ep.Buffer)
    _, n = me_n()
    b._h = _NoNative()
    b.num_experts, b.hidden, b.topk, b.max_tokens = n_experts(), hidden, topk, max_tokens
    b.dtype, b.low_latency, b.n_pes = dtype, low_latency, n
    b.combine_dtype = "bfloat16" if dtype == ep.FP8 else dtype
    b.num_local_experts = b.num_experts // n
    b.max_rows = n * max_tokens * min(topk, b.num_local_experts)
    b._t, b._rows, b._ll_t = 4, None, 4
    b._out = b._ll_out = None
    return b


def test_argument_checks_name_the_argument(cpu):
    b = _unmade()
    x = np.zeros((4, 64), np.float32)
    idx = np.zeros((4, 2), np.int64)
    w = np.ones((4, 2), np.float32)
    d = "rshmem.ep.Buffer.dispatch"
    raises([d, "x: shape (4, 63); expected [num_tokens, 64] (hidden 64)"], b.dispatch,
           np.zeros((4, 63), np.float32), idx, w)
    raises([d, "x: shape (256,)"], b.dispatch, np.zeros(256, np.float32), idx, w)
    raises([d, "x: dtype float64; expected float32"], b.dispatch, x.astype(np.float64), idx, w)
    raises([d, "x is not C-contiguous"], b.dispatch, np.zeros((4, 128), np.float32)[:, ::2],
           idx, w)
    raises([d, "x must be a NumPy array, torch tensor or CuPy array, not list"], b.dispatch,
           [[0.0] * 64] * 4, idx, w)
    raises([d, "topk_idx: dtype int32; expected int64"], b.dispatch, x, idx.astype(np.int32), w)
    raises([d, "topk_idx: shape (4, 3)", "(topk 2)"], b.dispatch, x,
           np.zeros((4, 3), np.int64), w)
    raises([d, "topk_idx: 3 rows, but x has 4 tokens"], b.dispatch, x, idx[:3], w)
    raises([d, "topk_weights: dtype float64; expected float32"], b.dispatch, x, idx,
           w.astype(np.float64))
    raises([d, "topk_weights: 5 rows, but x has 4 tokens"], b.dispatch, x, idx,
           np.ones((5, 2), np.float32))
    # Everything right but in host memory.
    raises([d, "x is in host memory"], b.dispatch, x, idx, w)
    c = "rshmem.ep.Buffer.combine"
    raises([c, "y: shape (4, 32)"], b.combine, np.zeros((4, 32), np.float32))
    raises([c, "y: 4 rows, fewer than"], b.combine, x)
    raises([c, "out: dtype int32; expected float32"], b.combine,
           out=np.zeros((4, 64), np.int32))
    raises([c, "out: 3 rows, fewer than the 4 tokens"], b.combine,
           out=np.zeros((3, 64), np.float32))
    raises([c, "out is in host memory"], b.combine, out=x)
    raises([c, "out is read-only"], b.combine, out=np.broadcast_to(x, x.shape))
    ll = "rshmem.ep.Buffer.ll_dispatch"
    raises([ll, "topk_idx: shape (4, 1)"], b.ll_dispatch, x, np.zeros((4, 1), np.int64))
    raises([ll, "x is in host memory"], b.ll_dispatch, x, idx)
    lc = "rshmem.ep.Buffer.ll_combine"
    raises([lc, "y: shape (4, 64)", "the low-latency output's layout"], b.ll_combine, x, w)
    raises([lc, "topk_weights: 3 rows, but the last low-latency dispatch had 4 tokens"],
           b.ll_combine, None, w[:3])
    raises([lc, "topk_weights is in host memory"], b.ll_combine, None, w)
    raises(["rshmem.ep.Buffer.check_routing: topk_idx: shape (4, 3)"], b.check_routing,
           np.zeros((4, 3), np.int64))
    raises(["topk_idx[0][1] = 99"], b.check_routing, np.array([[0, 99]], np.int64))
    bf = _unmade("bfloat16")
    raises([d, "x: dtype float32; expected bfloat16"], bf.dispatch, x, idx, w)
    torch = optional_torch()
    if torch is not None:
        xt = torch.zeros((4, 64), dtype=torch.bfloat16)
        raises([d, "x is in host memory (torch)"], bf.dispatch, xt, torch.zeros((4, 2),
               dtype=torch.int64), torch.ones((4, 2)))
        raises([d, "topk_weights: dtype bfloat16; expected float32"], bf.dispatch, xt,
               torch.zeros((4, 2), dtype=torch.int64), torch.ones((4, 2), dtype=torch.bfloat16))
        raises([d, "x is not contiguous"], bf.dispatch, xt.t(), idx, w)


def test_fp8_argument_checks_name_the_argument(cpu):
    b = _unmade(ep.FP8, hidden=256)
    idx = np.zeros((4, 2), np.int64)
    w = np.ones((4, 2), np.float32)
    xs = np.ones((4, 2), np.float32)
    d, ll = "rshmem.ep.Buffer.dispatch", "rshmem.ep.Buffer.ll_dispatch"
    for call, fn, args in ((d, b.dispatch, (idx, w)), (ll, b.ll_dispatch, (idx,))):
        raises([call, "x: a float8_e4m3fn buffer takes the pair (x, x_scales)", "[num_tokens, 2]"],
               fn, np.zeros((4, 256), np.uint8), *args)
        raises([call, "x: a float8_e4m3fn buffer takes the pair"], fn,
               (np.zeros((4, 256), np.uint8),), *args)
        raises([call, "x: dtype uint8; expected float8_e4m3fn"], fn,
               (np.zeros((4, 256), np.uint8), xs), *args)
    raises([d, "x: shape (4, 128); expected [num_tokens, 256]"], b.dispatch,
           (np.zeros((4, 128), np.uint8), xs), idx, w)
    torch = optional_torch()
    if torch is not None and hasattr(torch, "float8_e4m3fn"):
        x8 = torch.zeros((4, 256), dtype=torch.float8_e4m3fn)
        xt = torch.ones((4, 2))
        it, wt = torch.zeros((4, 2), dtype=torch.int64), torch.ones((4, 2))
        raises([d, "x_scales: dtype float64; expected float32"], b.dispatch,
               (x8, xt.double()), it, wt)
        raises([d, "x_scales: shape (4, 3); expected [num_tokens, 2] (hidden / 128 2)"],
               b.dispatch, (x8, torch.ones((4, 3))), it, wt)
        raises([d, "x_scales: 3 rows, but x has 4 tokens"], b.dispatch,
               (x8, torch.ones((3, 2))), it, wt)
        raises([d, "x is not contiguous"], b.dispatch,
               (torch.zeros((256, 4), dtype=torch.float8_e4m3fn).t(), xt), it, wt)
        raises([d, "topk_idx: 3 rows, but x has 4 tokens"], b.dispatch, (x8, xt), it[:3], wt)
        raises([d, "x_scales is not contiguous"], b.dispatch,
               (x8, torch.ones((2, 4)).t()), it, wt)
        # Everything right but in host memory (the torch fp8 tensor passed the dtype check).
        raises([d, "x is in host memory (torch)"], b.dispatch, (x8, xt), it, wt)
        raises([ll, "x is in host memory (torch)"], b.ll_dispatch, (x8, xt), it)
        # A torch fp8 tensor on a bf16 buffer: named as such.
        bf = _unmade("bfloat16", hidden=256)
        raises([d, "x: dtype float8_e4m3fn; expected bfloat16"], bf.dispatch, x8, it, wt)
        raises([d, "x: a (tokens, scales) pair is for float8_e4m3fn buffers"], bf.dispatch,
               (x8, xt), it, wt)
        yb = torch.zeros((b.max_rows, 256), dtype=torch.bfloat16)
        raises(["rshmem.ep.Buffer.combine: y: dtype float8_e4m3fn; expected bfloat16"],
               b.combine, yb.to(torch.float8_e4m3fn))
        raises(["rshmem.ep.Buffer.combine: out: dtype float32; expected bfloat16"], b.combine,
               yb, out=torch.zeros((4, 256)))
        raises(["rshmem.ep.Buffer.combine: y is in host memory"], b.combine, yb)
    # The combine of an fp8 buffer is bf16 and never in place.
    c, lc = "rshmem.ep.Buffer.combine", "rshmem.ep.Buffer.ll_combine"
    raises([c, "y: the dispatch output of a float8_e4m3fn buffer holds fp8 rows"], b.combine)
    raises([c, "y: dtype float32; expected bfloat16"], b.combine,
           np.zeros((b.max_rows, 256), np.float32))
    raises([lc, "y: the low-latency output of a float8_e4m3fn buffer"], b.ll_combine, None, w)
    raises([lc, "y: dtype float32; expected bfloat16"], b.ll_combine,
           np.zeros((b.num_local_experts, b.n_pes, b.max_tokens, 256), np.float32), w)


def test_freed_buffer_object_says_so(cpu):
    b = _unmade()
    b._h = None
    raises(["rshmem.ep.Buffer.dispatch: the buffer was freed"], b.dispatch, None, None, None)
    raises(["rshmem.ep.Buffer.free: the buffer was freed"], b.free)


# ---------------------------------------------------------------------------------------------
# GPU backend
# ---------------------------------------------------------------------------------------------

EMPTY, HOT = 1, 0  # no PE routes to expert 1; expert 0 takes slot 0 of 3 tokens in 4


def x_of(torch, s, t_n, h):
    """PE s's tokens [t_n, h], float32 values m/4 with |m| ≤ 8 (exact in bf16)."""
    t = torch.arange(t_n, dtype=torch.int64)[:, None]
    j = torch.arange(h, dtype=torch.int64)[None, :]
    return (((s * 131 + t * 17 + j * 7) % 17) - 8).to(torch.float32) / 4


def w_of(torch, s, t_n, k):
    """PE s's routing weights [t_n, k]: r/8, r in 1..8."""
    t = torch.arange(t_n, dtype=torch.int64)[:, None]
    j = torch.arange(k, dtype=torch.int64)[None, :]
    return (((t * 3 + j * 5 + s) % 8) + 1).to(torch.float32) / 8


def scale(e):
    """The stand-in expert e multiplies by 1, 1.5, 2 or 2.5 (exact in bf16 on these tokens)."""
    return 1.0 + (e % 4) * 0.5


def idx_of(torch, s, t_n, k, e_all, seed, distinct):
    """PE s's routing [t_n, k] int64: random experts (all distinct per token when `distinct`,
    else repeats allowed), expert EMPTY never, HOT in slot 0 of 3 tokens in 4, some -1 slots,
    token 2 with no expert at all."""
    g = torch.Generator().manual_seed(seed * 1009 + s)
    if distinct:
        rows = []
        others = torch.tensor([e for e in range(e_all) if e != EMPTY], dtype=torch.int64)
        for t in range(t_n):
            r = others[torch.randperm(len(others), generator=g)[:k]]
            if t % 4 != 3 and HOT not in r.tolist():
                r[0] = HOT
            rows.append(r)
        idx = torch.stack(rows) if rows else torch.zeros((0, k), dtype=torch.int64)
    else:
        idx = torch.randint(0, e_all, (t_n, k), generator=g, dtype=torch.int64)
        idx[idx == EMPTY] = -1
        for t in range(t_n):
            if t % 4 != 3:
                idx[t, 0] = HOT
    for t in range(t_n):
        for j in range(k):
            if (t + j) % 5 == 4:
                idx[t, j] = -1
    if t_n > 2:
        idx[2, :] = -1
    return idx


class Case:
    def __init__(self, name, dtype, k, h, tokens, m=32, distinct=False):
        self.name, self.dtype, self.k, self.h, self.m = name, dtype, k, h, m
        self.tokens, self.distinct = tokens, distinct

    def t_of(self, s):
        return self.tokens[s % len(self.tokens)]

    def routing(self, torch, seed):
        """Every PE's (x, idx, w) on the host, in float32/int64."""
        _, n = me_n()
        e_all = n_experts()
        return [(x_of(torch, s, self.t_of(s), self.h),
                 idx_of(torch, s, self.t_of(s), self.k, e_all, seed, self.distinct),
                 w_of(torch, s, self.t_of(s), self.k)) for s in range(n)]


def upload(torch, case, x, idx, w):
    dt = getattr(torch, case.dtype)
    return x.to(dt).to(dev()), idx.to(dev()), w.to(dev())


def expected_rows(routing, e_all, me):
    """For each local expert of PE me, the (source PE, token) of every row it receives, sources
    in PE order (one row per slot that names the expert)."""
    n = len(routing)
    lx = e_all // n
    rows = [[] for _ in range(lx)]
    for s, (_, idx, _) in enumerate(routing):
        for t in range(idx.shape[0]):
            for e in idx[t].tolist():
                if e >= 0 and e // lx == me:
                    rows[e % lx].append((s, t))
    return rows


def expected_out(torch, case, routing, me, e_all):
    """out[t] = Σ over the valid slots of w · round(x · scale(e)), in float64 on the host, and
    the magnitude Σ |w · y| per element (the bf16 tolerance's base)."""
    x, idx, w = routing[me]
    dt = getattr(torch, case.dtype)
    want = torch.zeros(x.shape, dtype=torch.float64)
    mag = torch.zeros(x.shape, dtype=torch.float64)
    xr = x.to(dt).to(torch.float64)
    for t in range(x.shape[0]):
        for j, e in enumerate(idx[t].tolist()):
            if e < 0:
                continue
            y = (xr[t] * scale(e)).to(dt).to(torch.float64)
            want[t] += float(w[t, j]) * y
            mag[t] += (float(w[t, j]) * y).abs()
    return want, mag


class Fails(list):
    """Failures collected while the collective calls go on: a PE that stopped at its first
    failed assert would leave the others waiting in the next exchange. The test asserts once,
    after its last collective call."""

    def check(self, ok, what):
        if not ok:
            self.append(what() if callable(what) else what)
        return ok

    def call(self, what, fn, *args, **kw):
        """A local call that may raise (check): recorded, not raised."""
        try:
            return fn(*args, **kw)
        except rshmem.Error as e:
            self.append(f"{what}: {e}")
            return None

    def done(self):
        assert not self, f"PE {rshmem.my_pe()}: {len(self)} failures: " + "; ".join(self[:6])


def check_out(torch, f, case, got, want, mag, what):
    g = got.to(torch.float64).cpu()
    if not f.check(g.shape == want.shape, f"{what}: out shape {tuple(g.shape)}"):
        return
    if case.dtype == "float32":
        bad = (g != want).nonzero()
        f.check(bad.shape[0] == 0, lambda: (
            f"{what}: {bad.shape[0]} elements differ; first out{tuple(bad[0].tolist())} = "
            f"{float(g[tuple(bad[0])])}, want {float(want[tuple(bad[0])])}"))
    else:
        err = (g - want).abs()
        ok = err <= mag / 64
        f.check(bool(ok.all()), lambda: (
            f"{what}: {int((~ok).sum())} elements beyond the bf16 tolerance; worst error "
            f"{float(err.max())}"))


def expected_ll_pairs(routing, me, lx, lo, s):
    """The rows of low-latency block (lo, s) on PE me: the (token, slot) pairs of PE s's routing
    that name local expert lo of PE me, sorted."""
    _, sidx, _ = routing[s]
    return sorted((t, j) for t in range(sidx.shape[0])
                  for j, e in enumerate(sidx[t].tolist())
                  if e >= 0 and e == me * lx + lo)


def check_dispatch_output(torch, f, buf, case, routing, me, seed):
    """The dispatch output against the reference: rows per expert, sources, data."""
    e_all = n_experts()
    what = f"{case.name} seed {seed}"
    exp = expected_rows(routing, e_all, me)
    counts = buf.recv_counts()
    if not f.check(counts == [len(r) for r in exp],
                   f"{what}: rows per expert {counts}, want {[len(r) for r in exp]}"):
        return
    if me == 0:
        f.check(counts[EMPTY] == 0, f"{what}: the expert nobody routes to got rows")
    offs = buf.output.offsets.cpu().tolist()
    f.check(offs == [sum(counts[:i]) for i in range(len(counts) + 1)],
            f"{what}: offsets {offs} against counts {counts}")
    src = buf.output.src.cpu()
    xs = buf.output.x[:offs[-1]].to(torch.float32).cpu()
    for lx, rows in enumerate(exp):
        got = [tuple(p) for p in src[offs[lx]:offs[lx + 1]].tolist()]
        f.check([s for s, _ in got] == sorted(s for s, _ in got),
                f"{what}: expert {lx}: sources not in PE order")
        if not f.check(sorted(got) == sorted(rows),
                       f"{what}: expert {lx}: wrong (source PE, token) pairs"):
            continue
        for i, (s, t) in enumerate(got):
            want = routing[s][0][t].to(getattr(torch, case.dtype)).to(torch.float32)
            f.check(torch.equal(xs[offs[lx] + i], want),
                    f"{what}: expert {lx} row {i}: not the data of PE {s} token {t}")


CASES = [
    Case("fp32 k8, T=0 on PE 1", "float32", 8, 128, [24, 0, 17, 32]),
    Case("bf16 k8", "bfloat16", 8, 256, [32]),
    Case("bf16 k1, T=0 on PE 2", "bfloat16", 1, 256, [5, 32, 0, 9]),
    Case("fp32 k4, T=0 everywhere", "float32", 4, 64, [0]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_dispatch_combine_against_the_reference(gpu, case):
    torch = gpu
    me, n, e_all, lx = layout()
    f = Fails()
    with ep.Buffer(e_all, case.h, case.k, case.m, getattr(torch, case.dtype)) as buf:
        f.check(buf.num_local_experts == lx and buf.max_rows == n * case.m * min(case.k, lx),
                f"L {buf.num_local_experts}, max_rows {buf.max_rows}")
        for seed, how in ((1, "full"), (2, "rows"), (3, "in place")):
            what = f"{case.name} seed {seed} ({how})"
            routing = case.routing(torch, seed)
            x, idx, w = upload(torch, case, *routing[me])
            got = buf.dispatch(x, idx, w)
            # Views of the handle's own buffer (no copy), the same every call.
            f.check(got.x.data_ptr() == buf.output.x.data_ptr(), f"{what}: not the handle's x")
            f.check(got.x.shape == (buf.max_rows, case.h) and got.x.dtype == x.dtype,
                    f"{what}: x view {tuple(got.x.shape)} {got.x.dtype}")
            f.call(f"{what}: dispatch", buf.check)
            check_dispatch_output(torch, f, buf, case, routing, me, seed)
            experts = buf.per_expert()
            ys = [v * scale(me * lx + i) for i, v in enumerate(experts)]
            if how == "full":  # y in the dispatch output's layout, NaN beyond the rows
                y = torch.full_like(got.x, float("nan"))
                at = 0
                for v in ys:
                    y[at:at + v.shape[0]] = v
                    at += v.shape[0]
                out = buf.combine(y)
            elif how == "rows":  # only the received rows, into a larger out
                big = torch.full((case.m, case.h), float("nan"), dtype=x.dtype, device=dev())
                out = buf.combine(torch.cat(ys), out=big)
                # The storage, not data_ptr(): torch reports 0 for a view of no elements (T = 0).
                same = out.untyped_storage().data_ptr() == big.untyped_storage().data_ptr()
                f.check(same, f"{what}: out is not the given one")
            else:  # in place
                for v, yv in zip(experts, ys):
                    v.copy_(yv)
                out = buf.combine()
            f.check(out.shape == (x.shape[0], case.h) and out.dtype == x.dtype and out.is_cuda,
                    f"{what}: out {tuple(out.shape)} {out.dtype}")
            want, mag = expected_out(torch, case, routing, me, e_all)
            check_out(torch, f, case, out, want, mag, what)
            f.call(f"{what}: combine", buf.check)
        rshmem.barrier_all()
    f.done()


LL_CASES = [
    Case("ll fp32 k8, T=0 on PE 1", "float32", 8, 128, [24, 0, 17, 32], distinct=True),
    Case("ll bf16 k1", "bfloat16", 1, 256, [32], distinct=True),
    Case("ll bf16 k4", "bfloat16", 4, 64, [3, 20], distinct=True),
]


@pytest.mark.parametrize("case", LL_CASES, ids=lambda c: c.name)
def test_low_latency_against_the_reference(gpu, case):
    torch = gpu
    me, n, e_all, lx = layout()
    f = Fails()
    with ep.Buffer(e_all, case.h, case.k, case.m, case.dtype, low_latency=True) as buf:
        for seed, in_place in ((5, False), (6, True), (7, False)):
            what = f"{case.name} seed {seed}{' (in place)' if in_place else ''}"
            routing = case.routing(torch, seed)
            x, idx, w = upload(torch, case, *routing[me])
            got = buf.ll_dispatch(x, idx)
            f.check(got.x.shape == (lx, n, case.m, case.h) and got.count.shape == (lx, n),
                    f"{what}: views {tuple(got.x.shape)} {tuple(got.count.shape)}")
            f.call(f"{what}: dispatch", buf.check)
            count = got.count.cpu()
            src = got.src.cpu()
            xs = got.x.to(torch.float32).cpu()
            for lo in range(lx):
                for s in range(n):
                    want = expected_ll_pairs(routing, me, lx, lo, s)
                    c = int(count[lo, s])
                    if not f.check(c == len(want),
                                   f"{what}: block ({lo}, {s}): {c} rows, want {len(want)}"):
                        continue
                    pairs = [tuple(p) for p in src[lo, s, :c].tolist()]
                    if not f.check(sorted(pairs) == want,
                                   f"{what}: block ({lo}, {s}): wrong (token, slot) pairs"):
                        continue
                    for i, (t, _) in enumerate(pairs):
                        wx = routing[s][0][t].to(x.dtype).to(torch.float32)
                        f.check(torch.equal(xs[lo, s, i], wx),
                                f"{what}: block ({lo}, {s}) row {i}: not token {t}'s data")
            sc = torch.tensor([scale(me * lx + lo) for lo in range(lx)], dtype=torch.float32,
                              device=dev()).to(x.dtype).view(lx, 1, 1, 1)
            if in_place:
                got.x.mul_(sc)
                out = buf.ll_combine(None, w)
            else:
                out = buf.ll_combine(got.x * sc, w)
            want, mag = expected_out(torch, case, routing, me, e_all)
            check_out(torch, f, case, out, want, mag, what)
            f.call(f"{what}: combine", buf.check)
        rshmem.barrier_all()
    f.done()


def quantize_fp8(torch, x):
    """Per-block fp8 quantization of x [..., H] float32 as MoE layers do it: for each block of
    128 elements, scale = max(amax, 1e-4) / 448 and q = float8_e4m3fn(x / scale). Returns
    (q [..., H] float8_e4m3fn, scales [..., H / 128] float32)."""
    xb = x.unflatten(-1, (-1, ep.FP8_BLOCK))
    s = xb.abs().amax(dim=-1).clamp(min=1e-4) / 448
    return (xb / s.unsqueeze(-1)).to(torch.float8_e4m3fn).flatten(-2), s.contiguous()


def dequantize_fp8(torch, q, s):
    """q · scale per 128-element block, float32."""
    return (q.to(torch.float32).unflatten(-1, (-1, ep.FP8_BLOCK)) * s.unsqueeze(-1)).flatten(-2)


def fp8_round(torch, case, seed):
    """An fp8 round's inputs: every PE's routing of round seed and its tokens quantized
    ([(q, scales)] per PE), and this PE's on its device: (q, scales), idx, w."""
    me = rshmem.my_pe()
    routing = case.routing(torch, seed)
    quant = [quantize_fp8(torch, x) for x, _, _ in routing]
    q, sc = quant[me]
    _, idx, w = routing[me]
    return routing, quant, (q.to(dev()), sc.to(dev())), idx.to(dev()), w.to(dev())


def same_fp8_row(torch, quant, s, t, xb, sb):
    """Whether the bytes xb and the scales sb of a received row are PE s's token t, quantized."""
    return (torch.equal(xb, quant[s][0][t].view(torch.uint8))
            and torch.equal(sb, quant[s][1][t]))


def check_out_fp8(torch, f, case, got, routing, quant, me, what):
    """The bf16 combine output of an fp8 round: against the sum of the stand-in expert's bf16
    outputs on the source's quantized tokens (within 2^-6 of the magnitude, as for bf16), and
    against the unquantized sum within the fp8 error Σ|w · scale| · (|x|/16 + s/1024) (e4m3 keeps
    3 mantissa bits; s/1024 is half the subnormal step) plus the bf16 tolerance."""
    x, idx, w = routing[me]
    q, sc = quant[me]
    xq = dequantize_fp8(torch, q, sc).to(torch.float64)
    want = torch.zeros(x.shape, dtype=torch.float64)
    mag = torch.zeros(x.shape, dtype=torch.float64)
    exact = torch.zeros(x.shape, dtype=torch.float64)
    a = torch.zeros((x.shape[0], 1), dtype=torch.float64)
    for t in range(x.shape[0]):
        for j, e in enumerate(idx[t].tolist()):
            if e < 0:
                continue
            y = (xq[t] * scale(e)).to(torch.bfloat16).to(torch.float64)
            want[t] += float(w[t, j]) * y
            mag[t] += (float(w[t, j]) * y).abs()
            exact[t] += float(w[t, j]) * scale(e) * x[t].to(torch.float64)
            a[t] += abs(float(w[t, j]) * scale(e))
    g = got.to(torch.float64).cpu()
    if not f.check(g.shape == want.shape and got.dtype == torch.bfloat16,
                   f"{what}: out {tuple(g.shape)} {got.dtype}"):
        return
    err = (g - want).abs()
    ok = err <= mag / 64
    f.check(bool(ok.all()), lambda: (
        f"{what}: {int((~ok).sum())} elements beyond the bf16 tolerance of the reference; worst "
        f"error {float(err.max())}"))
    blk = sc.to(torch.float64).repeat_interleave(ep.FP8_BLOCK, dim=-1)
    tol = a * (x.to(torch.float64).abs() / 16 + blk / 1024) + mag / 64
    errq = (g - exact).abs()
    okq = errq <= tol
    f.check(bool(okq.all()), lambda: (
        f"{what}: {int((~okq).sum())} elements beyond the fp8 tolerance of the unquantized sum; "
        f"worst error {float(errq.max())}"))


FP8_CASES = [
    Case("fp8 k8", ep.FP8, 8, 256, [32]),
    Case("fp8 k1 H128, T=0 on PE 2", ep.FP8, 1, 128, [5, 32, 0, 9]),
]


@pytest.mark.parametrize("case", FP8_CASES, ids=lambda c: c.name)
def test_fp8_dispatch_combine_against_the_reference(gpu, case):
    torch = gpu
    me, n, e_all, lx = layout()
    f = Fails()
    with ep.Buffer(e_all, case.h, case.k, case.m, torch.float8_e4m3fn) as buf:
        f.check(buf.combine_dtype == "bfloat16", f"combine dtype {buf.combine_dtype}")
        for seed in (31, 32):
            what = f"{case.name} seed {seed}"
            routing, quant, xq, idx, w = fp8_round(torch, case, seed)
            got = buf.dispatch(xq, idx, w)
            gx, gs = got.x
            f.check(gx.dtype == torch.float8_e4m3fn and gx.shape == (buf.max_rows, case.h)
                    and gs.dtype == torch.float32
                    and gs.shape == (buf.max_rows, case.h // ep.FP8_BLOCK),
                    f"{what}: views {gx.dtype} {tuple(gx.shape)}, {gs.dtype} {tuple(gs.shape)}")
            f.call(f"{what}: dispatch", buf.check)
            exp = expected_rows(routing, e_all, me)
            counts = buf.recv_counts()
            # No early exit on a failure: the combine below is collective.
            f.check(counts == [len(r) for r in exp], f"{what}: rows per expert {counts}")
            offs = got.offsets.cpu().tolist()
            src = got.src.cpu()
            xb = gx[:offs[-1]].view(torch.uint8).cpu()
            sb = gs[:offs[-1]].cpu()
            for le, rows in enumerate(exp if counts == [len(r) for r in exp] else []):
                pairs = [tuple(p) for p in src[offs[le]:offs[le + 1]].tolist()]
                if not f.check(sorted(pairs) == sorted(rows),
                               f"{what}: expert {le}: wrong (source PE, token) pairs"):
                    continue
                for i, (s, t) in enumerate(pairs):
                    r = offs[le] + i
                    f.check(same_fp8_row(torch, quant, s, t, xb[r], sb[r]),
                            f"{what}: expert {le} row {i}: not the bytes and scales of PE {s} "
                            f"token {t}")
            parts = buf.per_expert()
            f.check(len(parts) == lx and all(isinstance(p, tuple) for p in parts),
                    f"{what}: per_expert gave {len(parts)} parts")
            ys = [(dequantize_fp8(torch, xq, xs) * scale(me * lx + i)).to(torch.bfloat16)
                  for i, (xq, xs) in enumerate(parts)]
            out = buf.combine(torch.cat(ys))
            check_out_fp8(torch, f, case, out, routing, quant, me, what)
            f.call(f"{what}: combine", buf.check)
        rshmem.barrier_all()
    f.done()


def test_fp8_low_latency_against_the_reference(gpu):
    torch = gpu
    me, n, e_all, lx = layout()
    case = Case("ll fp8 k4", ep.FP8, 4, 256, [3, 20], distinct=True)
    f = Fails()
    with ep.Buffer(e_all, case.h, case.k, case.m, ep.FP8, low_latency=True) as buf:
        for seed in (41, 42):
            what = f"{case.name} seed {seed}"
            routing, quant, xq, idx, w = fp8_round(torch, case, seed)
            got = buf.ll_dispatch(xq, idx)
            gx, gs = got.x
            f.check(gx.shape == (lx, n, case.m, case.h) and gx.dtype == torch.float8_e4m3fn
                    and gs.shape == (lx, n, case.m, case.h // ep.FP8_BLOCK),
                    f"{what}: views {tuple(gx.shape)} {tuple(gs.shape)}")
            f.call(f"{what}: dispatch", buf.check)
            count, src = got.count.cpu(), got.src.cpu()
            xb, sb = gx.view(torch.uint8).cpu(), gs.cpu()
            for lo in range(lx):
                for s in range(n):
                    want = expected_ll_pairs(routing, me, lx, lo, s)
                    c = int(count[lo, s])
                    pairs = [tuple(p) for p in src[lo, s, :c].tolist()]
                    if not f.check(sorted(pairs) == want,
                                   f"{what}: block ({lo}, {s}): {c} rows, wrong (token, slot)"):
                        continue
                    for i, (t, _) in enumerate(pairs):
                        f.check(same_fp8_row(torch, quant, s, t, xb[lo, s, i], sb[lo, s, i]),
                                f"{what}: block ({lo}, {s}) row {i}: not token {t}'s bytes and "
                                "scales")
            sc_e = torch.tensor([scale(me * lx + lo) for lo in range(lx)], dtype=torch.float32,
                                device=dev()).view(lx, 1, 1, 1)
            y = (dequantize_fp8(torch, gx, gs) * sc_e).to(torch.bfloat16)
            out = buf.ll_combine(y, w)
            check_out_fp8(torch, f, case, out, routing, quant, me, what)
            f.call(f"{what}: combine", buf.check)
        rshmem.barrier_all()
    f.done()


def test_calls_are_ordered_on_the_callers_stream(gpu):
    torch = gpu
    me, n, e_all, lx = layout()
    case = Case("side stream", "bfloat16", 4, 256, [32])
    routing = case.routing(torch, 11)
    s = torch.cuda.Stream(device=dev())
    f = Fails()
    with ep.Buffer(e_all, case.h, case.k, case.m, "bfloat16") as buf:
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)  # the work below runs long after the host returns
            x, idx, w = upload(torch, case, *routing[me])
            got = buf.dispatch(x, idx, w)  # the current stream: s
        counts = buf.recv_counts(stream=s)  # waits for s
        f.check(counts == [len(r) for r in expected_rows(routing, e_all, me)],
                f"rows per expert {counts}")
        at = 0
        with torch.cuda.stream(s):
            for i, c in enumerate(counts):
                got.x[at:at + c].mul_(scale(me * lx + i))
                at += c
        out = buf.combine(stream=s)  # the explicit form
        s.synchronize()
        want, mag = expected_out(torch, case, routing, me, e_all)
        check_out(torch, f, case, out, want, mag, "side stream")
        f.call("side stream", buf.check, stream=s)
        rshmem.barrier_all()
    f.done()


def test_errors_on_the_gpu(gpu):
    torch = gpu
    me, n = me_n()
    e_all = n_experts()
    h, k, m = 64, 4, 16
    buf = ep.Buffer(e_all, h, k, m, "float32")
    d = "rshmem.ep.Buffer.dispatch"
    x = torch.zeros((m, h), device=dev())
    idx = torch.zeros((m, k), dtype=torch.int64, device=dev())
    w = torch.ones((m, k), device=dev())
    # Every PE makes the same bad call: each is refused before anything is enqueued.
    raises(["ep_combine: no dispatch on this handle yet"], buf.combine)
    raises(["ep_ll_dispatch", "low_latency"], buf.ll_dispatch, x, idx)
    raises([d, "x is in host memory (torch)"], buf.dispatch, x.cpu(), idx, w)
    raises([d, "topk_idx is in host memory"], buf.dispatch, x, idx.cpu(), w)
    raises([d, "x: dtype bfloat16; expected float32"], buf.dispatch, x.bfloat16(), idx, w)
    raises([d, "topk_idx: dtype int32"], buf.dispatch, x, idx.int(), w)
    raises([d, "x is not contiguous"], buf.dispatch, torch.zeros((h, m), device=dev()).t(),
           idx, w)
    big = torch.zeros((m + 1, h), device=dev())
    raises(["ep_dispatch: num_tokens: 17 is more than the handle's max_tokens 16"],
           buf.dispatch, big, torch.zeros((m + 1, k), dtype=torch.int64, device=dev()),
           torch.ones((m + 1, k), device=dev()))
    # A row that does not start on 16 bytes (the kernels' vector stores): the runtime names x.
    flat = torch.zeros(m * h + 1, device=dev())
    raises(["ep_dispatch: x: address", "16-byte aligned"], buf.dispatch,
           flat[1:].view(m, h), idx, w)
    # An expert index out of range on PE 0: skipped, reported by check there, the exchange
    # completes on every PE.
    case = Case("bad index", "float32", k, h, [m])
    routing = case.routing(torch, 21)
    if me == 0:
        routing[0][1][3, 2] = e_all + 5
    x, idx, w = upload(torch, case, *routing[me])
    f = Fails()  # PE-local outcomes: asserted after the last collective call
    buf.dispatch(x, idx, w)
    buf.combine()
    if me == 0:
        want = f"ep_dispatch: topk_idx[3][2] = {e_all + 5} is out of range"
        try:
            buf.check()
            f.append("the out-of-range expert index was not reported")
        except rshmem.Error as e:
            f.check(want in str(e), f"check said {e!r}, not {want!r}")
    f.call("check after the report (cleared; nothing on the other PEs)", buf.check)
    rshmem.barrier_all()
    buf.free()
    raises(["rshmem.ep.Buffer.dispatch: the buffer was freed"], buf.dispatch, x, idx, w)
    # Too small a row capacity: reported where it overflowed, rows dropped, nothing hangs.
    with ep.Buffer(e_all, h, k, m, "float32", max_recv_rows=4) as small:
        routing = case.routing(torch, 22)
        x, idx, w = upload(torch, case, *routing[me])
        small.dispatch(x, idx, w)
        small.combine()
        rows = sum(len(r) for r in expected_rows(routing, e_all, me))
        if rows > 4:
            try:
                small.check()
                f.append(f"{rows} rows into a handle of 4: not reported")
            except rshmem.Error as e:
                f.check("max_recv_rows" in str(e) and "more than the 4" in str(e), str(e))
        else:
            f.call("small capacity", small.check)
        rshmem.barrier_all()
    f.done()


FINALIZE_CHILD = r"""
import warnings, torch, rshmem
rshmem.init()
b = rshmem.ep.Buffer(8, 64, 2, 8, "float32")
x = torch.ones((4, 64), device="cuda")
idx = torch.tensor([[0, 7], [1, -1], [3, 3], [-1, -1]], device="cuda")
w = torch.full((4, 2), 0.5, device="cuda")
b.dispatch(x, idx, w)
out = b.combine()
assert out.cpu().tolist()[0][0] == 1.0 and out.cpu().tolist()[3][0] == 0.0
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    rshmem.finalize()
assert any("freed 1 expert-parallel handle" in str(m.message) for m in ws), ws
for f in (lambda: b.dispatch(x, idx, w), b.combine, b.free):
    try:
        f()
        raise SystemExit("a call on a handle after finalize did not raise")
    except rshmem.Error as e:
        assert "not initialized" in str(e), e
rshmem.init()
try:
    b.combine()
    raise SystemExit("a handle of an earlier init answered")
except rshmem.Error as e:
    assert "was freed" in str(e), e
with rshmem.ep.Buffer(8, 64, 2, 8, "float32") as b2:
    b2.dispatch(x, idx, w)
    assert b2.combine().cpu()[2][0] == 1.0
rshmem.finalize()
print("finalize-ok")
"""


def test_finalize_frees_live_handles(gpu):
    """A one-PE job of its own (a child process, on PE 0 only): finalize with a live handle
    frees it with a warning; the handle's calls then raise, also after a new init."""
    if rshmem.my_pe() != 0:
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSHMEM_", "OMPI_", "PMI"))}
    env["RSHMEM_DEVICE"] = str(rshmem.device())
    p = subprocess.run([sys.executable, "-c", FINALIZE_CHILD], env=env, capture_output=True,
                       text=True, timeout=240)
    assert p.returncode == 0 and "finalize-ok" in p.stdout, p.stdout + p.stderr
