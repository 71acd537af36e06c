"""Expert-parallel Mixture-of-Experts dispatch and combine on torch tensors.

:class:`Buffer` is the runtime's ``rshmem::ep::Ep`` handle (docs/moe.md): made collectively for
one MoE layer shape, it sends every token to the PEs that hold its top-k experts
(:meth:`Buffer.dispatch`), lays the received tokens out per local expert, and brings the expert
outputs back, weighted and summed, in the tokens' original order (:meth:`Buffer.combine`); the
low-latency pair (:meth:`Buffer.ll_dispatch`, :meth:`Buffer.ll_combine`) trades bandwidth for
one fewer synchronization. Every exchange is a set of kernels on the caller's stream (the
current torch stream by default), with device-initiated NVLink stores; nothing waits on the
host. The outputs are views of the handle's own GPU buffers (no copy), valid until the next
dispatch of the same kind.

The name follows DeepEP's ``deep_ep.Buffer`` (a handle per layer shape, ``dispatch``/``combine``
and a low-latency pair); the arguments and outputs are rshmem's own (docs/python.md says how
they map).
"""

import collections
import operator

from . import _core, _rshmem
from ._rshmem import Error

__all__ = ["Buffer", "Dispatched", "LowLatencyDispatched", "FP8", "FP8_BLOCK", "check_routing",
           "sizes"]

#: What :meth:`Buffer.dispatch` returns: ``x`` the dispatch output ``[max_rows, hidden]``
#: (local expert ``l``'s rows are ``offsets[l]:offsets[l + 1]``), ``offsets`` ``[L + 1]``
#: int64, ``src`` ``[max_rows, 2]`` int32 (source PE, source token of each row). CUDA tensors,
#: views of the handle's buffers. On a float8_e4m3fn buffer ``x`` is the pair ``(x, scales)``:
#: ``[max_rows, hidden]`` float8_e4m3fn and ``[max_rows, hidden // 128]`` float32, the same rows.
Dispatched = collections.namedtuple("Dispatched", "x offsets src")

#: What :meth:`Buffer.ll_dispatch` returns: ``x`` ``[L, n_pes, max_tokens, hidden]`` (rows
#: ``0 .. count[l, s]`` of block ``(l, s)`` are valid), ``count`` ``[L, n_pes]`` int32, ``src``
#: ``[L, n_pes, max_tokens, 2]`` int32 (source token, slot of each row). On a float8_e4m3fn
#: buffer ``x`` is the pair ``(x, scales)``, scales ``[L, n_pes, max_tokens, hidden // 128]``.
LowLatencyDispatched = collections.namedtuple("LowLatencyDispatched", "x count src")

#: The fp8 dtype of the tokens (torch's ``float8_e4m3fn``), and the elements per scale.
FP8 = "float8_e4m3fn"
FP8_BLOCK = 128


def _int(call, name, v, optional=False):
    """``v`` as a non-negative int (None passes when ``optional``)."""
    if v is None and optional:
        return None
    if isinstance(v, bool):
        raise Error(f"{call}: {name}: {v!r} is not an integer")
    try:
        i = operator.index(v)
    except TypeError:
        raise Error(f"{call}: {name}: {v!r} is not an integer") from None
    if i < 0:
        raise Error(f"{call}: {name}: {i} is negative")
    return i


def _is_fp8(dtype):
    """Whether ``dtype`` (a string or a torch dtype) names float8_e4m3fn."""
    return str(dtype) in (FP8, "torch." + FP8)


def _dtype(call, dtype):
    if _is_fp8(dtype):
        return FP8
    name = _core._dtype_name(dtype, call)
    if name not in ("float32", "bfloat16"):
        raise Error(f"{call}: dtype: {name}; the expert-parallel kernels take float32, "
                    "bfloat16 or float8_e4m3fn")
    return name


def sizes(num_experts, hidden, topk, max_tokens, dtype="bfloat16", *, n_pes=None,
          max_recv_rows=None, num_sms=None, low_latency=False):
    """**Local.** The buffer sizes of a :class:`Buffer` of this shape on ``n_pes`` PEs (default:
    the job's), as the runtime computes them (``EpConfig::sizes``, which also checks the shape):
    a dict of ``local_experts``, ``row_bytes`` (dispatched rows), ``comb_row_bytes`` (combine
    rows: bf16 for float8_e4m3fn), ``scale_words`` (float32 scales per row: ``hidden // 128``
    for float8_e4m3fn, else 0), ``max_rows``, ``symmetric_bytes``, ``local_bytes`` (per PE).
    Needs no GPU."""
    call = "rshmem.ep.sizes"
    if n_pes is None:
        n_pes = _rshmem.n_pes()
    return _rshmem.ep_sizes(_int(call, "n_pes", n_pes), _int(call, "num_experts", num_experts),
                            _int(call, "hidden", hidden), _int(call, "topk", topk),
                            _int(call, "max_tokens", max_tokens), _dtype(call, dtype),
                            _int(call, "max_recv_rows", max_recv_rows, True),
                            _int(call, "num_sms", num_sms, True), bool(low_latency))


def check_routing(topk_idx, num_experts):
    """**Local.** The runtime's host check of routing indices: every entry of ``topk_idx``
    (``[T, k]`` int64; ``-1`` = no expert) must lie in ``-1 .. num_experts``. Raises
    :class:`Error` naming the first bad entry. A CUDA tensor is copied to the host first (which
    waits for the current stream). The kernels check the indices too (skipped and reported by
    :meth:`Buffer.check`); this finds them before the dispatch."""
    call = "rshmem.ep.check_routing"
    if hasattr(topk_idx, "is_cuda") and topk_idx.is_cuda:
        topk_idx = topk_idx.cpu()
    v = _core._view(topk_idx, call, "topk_idx")
    if v.dtype != "int64":
        raise Error(f"{call}: topk_idx: dtype {v.dtype}; expected int64")
    if len(v.shape) != 2:
        raise Error(f"{call}: topk_idx: shape {tuple(v.shape)}; expected [num_tokens, topk]")
    t, k = int(v.shape[0]), int(v.shape[1])
    _rshmem.ep_check_routing(v.ptr, t, k, _int(call, "num_experts", num_experts))


class Buffer:
    """**Collective.** An expert-parallel handle for one MoE layer shape (every PE passes the
    same values): ``num_experts`` (E, a multiple of the PEs, at most 1024; expert ``e`` lives on
    PE ``e // L`` as local expert ``e % L``, ``L = E / n_pes``), ``hidden`` (H elements per token;
    a row must be a multiple of 16 bytes, and H a multiple of 128 for fp8), ``topk`` (k, 1..32),
    ``max_tokens`` (most tokens a PE passes to one dispatch; at most 256 with ``low_latency``),
    ``dtype`` ("float32", "bfloat16" or "float8_e4m3fn", or the torch dtypes; float8_e4m3fn
    tokens travel with one float32 scale per 128 elements and are combined in bf16, see
    :meth:`dispatch`), ``max_recv_rows`` (rows of the dispatch output per PE;
    default the worst case ``n_pes × max_tokens × min(k, L)``), ``num_sms`` (blocks per kernel;
    default the GPU's SMs divided among the PEs sharing it), ``low_latency`` (also allocate the
    low-latency mode's buffers).

    Needs the GPU backend with every PE on this host; on the CPU backend it raises
    :class:`rshmem.Error` with the runtime's message. Free it with :meth:`free` (collective) or
    use it as a context manager; ``rshmem.finalize`` frees the handles left live (with a
    ``ResourceWarning``).

    Every call of a handle is collective (every PE makes the same sequence of dispatch/combine
    calls) and stream-ordered on ``stream`` (a ``torch.cuda.Stream``, a CuPy stream or a
    ``CUstream`` handle; default: the current torch stream); the calls of one handle must be
    ordered (one stream, or streams ordered by events).
    """

    def __init__(self, num_experts, hidden, topk, max_tokens, dtype="bfloat16", *,
                 max_recv_rows=None, num_sms=None, low_latency=False):
        call = "rshmem.ep.Buffer"
        self._h = None
        self.num_experts = _int(call, "num_experts", num_experts)
        self.hidden = _int(call, "hidden", hidden)
        self.topk = _int(call, "topk", topk)
        self.max_tokens = _int(call, "max_tokens", max_tokens)
        #: "float32", "bfloat16" or "float8_e4m3fn".
        self.dtype = _dtype(call, dtype)
        #: The dtype of the combine's ``y`` and ``out``: "bfloat16" for float8_e4m3fn.
        self.combine_dtype = "bfloat16" if self.dtype == FP8 else self.dtype
        fp8 = self.dtype == FP8
        max_recv_rows = _int(call, "max_recv_rows", max_recv_rows, True)
        num_sms = _int(call, "num_sms", num_sms, True)
        if num_sms is not None and num_sms >= 1 << 32:
            raise Error(f"{call}: num_sms: {num_sms} is too large")
        self.low_latency = bool(low_latency)
        self._h = _rshmem.ep_new(self.num_experts, self.hidden, self.topk, self.max_tokens,
                                 self.dtype, max_recv_rows, num_sms, self.low_latency)
        #: Rows of the dispatch output; experts on this PE (L); blocks per kernel; whether the
        #: low-latency exchange goes once per (token, PE) (the same on every PE).
        self.max_rows, self.num_local_experts, self.num_sms, self.ll_per_pe = self._h.info()
        self.n_pes = _rshmem.n_pes()
        xa, oa, sa = self._h.output()
        scales = self._h.scales_output() if fp8 else None
        x = self._view(xa, (self.max_rows, self.hidden), self.dtype)
        if fp8:
            x = (x, self._view(scales[0], (self.max_rows, scales[2]), "float32"))
        self._out = Dispatched(
            x,
            self._view(oa, (self.num_local_experts + 1,), "int64"),
            self._view(sa, (self.max_rows, 2), "int32"))
        self._ll_out = None
        if self.low_latency:
            xa, ca, sa = self._h.ll_output()
            blocks = (self.num_local_experts, self.n_pes, self.max_tokens)
            x = self._view(xa, blocks + (self.hidden,), self.dtype)
            if fp8:
                x = (x, self._view(scales[1], blocks + (scales[2],), "float32"))
            self._ll_out = LowLatencyDispatched(
                x,
                self._view(ca, blocks[:2], "int32"),
                self._view(sa, blocks + (2,), "int32"))
        self._t = None      # tokens of the last dispatch (this PE)
        self._rows = None   # rows it received, once read on the host (recv_counts)
        self._ll_t = None   # tokens of the last low-latency dispatch

    @staticmethod
    def _view(addr, shape, dtype):
        # No owner: the memory belongs to the handle in the runtime state until free/finalize
        # (a reference to the Buffer from its own views would only make a cycle).
        if dtype == FP8:
            # Bytes, seen as float8_e4m3fn by torch (same element size; DLPack has no fp8
            # code every torch reads).
            if not _core._importable("torch"):
                raise Error("rshmem.ep.Buffer: float8_e4m3fn views need torch (not importable; "
                            "rshmem.finalize frees the handle)")
            import torch
            return _core._wrap(_core._Memory(addr, shape, "uint8"), "torch").view(
                torch.float8_e4m3fn)
        return _core._wrap(_core._Memory(addr, shape, dtype), None)

    def __repr__(self):
        state = "live" if self._h is not None and self._h.live() else "freed"
        return (f"<rshmem.ep.Buffer E={self.num_experts} H={self.hidden} k={self.topk} "
                f"max_tokens={self.max_tokens} {self.dtype}"
                f"{' low_latency' if self.low_latency else ''} ({state})>")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._h is not None and _rshmem.is_initialized() and self._h.live():
            self.free()
        return False

    # -- helpers ------------------------------------------------------------------------------

    def _live(self, call):
        if self._h is None:
            raise Error(f"{call}: the buffer was freed")
        if not _rshmem.is_initialized():
            raise Error(f"{call}: rshmem is not initialized (rshmem.finalize freed this buffer)")
        return self._h

    def _tensor(self, call, what, a, dtype, cols, cols_name, rows=None, writable=False):
        """The view of a 2-D ``[rows, cols]`` tensor argument, checked: contiguity, shape,
        dtype (the device is checked by ``_on_gpu``, after every argument's shape)."""
        if isinstance(a, tuple) and what == "x":
            raise Error(f"{call}: x: a (tokens, scales) pair is for float8_e4m3fn buffers; this "
                        f"one is {self.dtype}")
        v = self._any_view(call, what, a, writable)
        shape = tuple(int(d) for d in v.shape)
        if len(shape) != 2 or shape[1] != cols:
            raise Error(f"{call}: {what}: shape {shape}; expected [num_tokens, {cols}] "
                        f"({cols_name} {cols})")
        if v.dtype != dtype:
            raise Error(f"{call}: {what}: dtype {v.dtype}; expected {dtype}")
        if rows is not None and shape[0] != rows:
            raise Error(f"{call}: {what}: {shape[0]} rows, but x has {rows} tokens")
        return v

    @staticmethod
    def _any_view(call, what, a, writable=False):
        """``_core._view``, also of a torch float8_e4m3fn tensor (viewed as its bytes, its dtype
        named float8_e4m3fn)."""
        if _is_fp8(getattr(a, "dtype", None)) and hasattr(a, "data_ptr"):
            import torch
            v = _core._view(a.view(torch.uint8), call, what, writable)
            v.dtype, v.obj = FP8, a
            return v
        return _core._view(a, call, what, writable)

    def _fp8_x(self, call, x, rows_of=None):
        """The ``(x, x_scales)`` pair of an fp8 dispatch, checked: views of x ``[T, hidden]``
        float8_e4m3fn and x_scales ``[T, hidden // 128]`` float32."""
        if not (isinstance(x, tuple) and len(x) == 2):
            raise Error(f"{call}: x: a float8_e4m3fn buffer takes the pair (x, x_scales): x "
                        f"[num_tokens, {self.hidden}] float8_e4m3fn and x_scales [num_tokens, "
                        f"{self.hidden // FP8_BLOCK}] float32 (one scale per {FP8_BLOCK} "
                        "elements)")
        xv = self._any_view(call, "x", x[0])
        shape = tuple(int(d) for d in xv.shape)
        if len(shape) != 2 or shape[1] != self.hidden:
            raise Error(f"{call}: x: shape {shape}; expected [num_tokens, {self.hidden}] "
                        f"(hidden {self.hidden})")
        if xv.dtype != FP8:
            raise Error(f"{call}: x: dtype {xv.dtype}; expected {FP8}")
        t = shape[0]
        sv = self._tensor(call, "x_scales", x[1], "float32", self.hidden // FP8_BLOCK,
                          "hidden / 128", rows=t)
        return xv, sv, t

    @staticmethod
    def _on_gpu(call, views):
        for v in views:
            if not v.cuda:
                raise Error(f"{call}: {v.what} is in host memory ({v.kind}); pass a CUDA tensor "
                            f"on cuda:{_core._STATE.device}")

    def _stream(self, call, stream, views):
        s = _core._stream_handle(stream, views, call)
        if s is None:
            raise Error(f"{call}: no stream: pass stream= (a torch.cuda.Stream or a CUstream "
                        "handle)")
        return s

    @staticmethod
    def _own_out(out, stream):
        """Ties a tensor this call allocated to the side stream it is written on."""
        if stream is not None and hasattr(stream, "cuda_stream") and hasattr(out,
                                                                              "record_stream"):
            out.record_stream(stream)

    def _empty(self, rows):
        import torch
        return torch.empty((rows, self.hidden), dtype=getattr(torch, self.combine_dtype),
                           device=f"cuda:{_core._STATE.device}")

    def _not_in_place(self, call, what):
        if self.dtype == FP8:
            raise Error(f"{call}: y: the {what} of a float8_e4m3fn buffer holds fp8 rows, and "
                        "its combine takes the expert outputs in bfloat16: pass them as y (no "
                        "combine in place)")

    # -- normal mode ----------------------------------------------------------------------------

    def dispatch(self, x, topk_idx, topk_weights, *, stream=None):
        """**Collective, stream-ordered.** Sends every token (row of ``x``, ``[T, hidden]`` of
        the handle's dtype, ``T ≤ max_tokens``, ``T = 0`` is fine) to the PEs of its experts
        (``topk_idx`` ``[T, k]`` int64, ``-1`` = none; ``topk_weights`` ``[T, k]`` float32), once
        per destination PE. Returns :class:`Dispatched` ``(x, offsets, src)``: views of the
        handle's output, valid after the kernels ran (stream order) until the next dispatch.
        The inputs must stay unchanged until the kernels ran. Expert indices outside
        ``-1 .. E`` are skipped and reported by :meth:`check`.

        On a float8_e4m3fn buffer ``x`` is the pair ``(x, x_scales)`` (as DeepEP takes it):
        ``x`` ``[T, hidden]`` float8_e4m3fn and ``x_scales`` ``[T, hidden // 128]`` float32, the
        scale of each 128-element block of each token; the output's ``x`` is the pair of the
        received rows and their scales, unchanged, in the same row order."""
        call = "rshmem.ep.Buffer.dispatch"
        h = self._live(call)
        if self.dtype == FP8:
            xv, sv, t = self._fp8_x(call, x)
        else:
            xv, sv = self._tensor(call, "x", x, self.dtype, self.hidden, "hidden"), None
            t = int(xv.shape[0])
        iv = self._tensor(call, "topk_idx", topk_idx, "int64", self.topk, "topk", rows=t)
        wv = self._tensor(call, "topk_weights", topk_weights, "float32", self.topk, "topk",
                          rows=t)
        views = [xv] + ([sv] if sv is not None else []) + [iv, wv]
        self._on_gpu(call, views)
        s = self._stream(call, stream, views)
        if sv is not None:
            h.dispatch_fp8(xv.ptr, sv.ptr, iv.ptr, wv.ptr, t, s)
        else:
            h.dispatch(xv.ptr, iv.ptr, wv.ptr, t, s)
        self._t, self._rows = t, None
        return self._out

    @property
    def output(self):
        """The dispatch output :class:`Dispatched` (the same views :meth:`dispatch` returns)."""
        self._live("rshmem.ep.Buffer.output")
        return self._out

    def recv_counts(self, *, stream=None):
        """**Local.** Waits for ``stream`` (default: the current torch stream) and returns the
        number of rows each local expert received in the last dispatch (a list of L ints, like
        DeepEP's ``num_recv_tokens_per_expert_list``). Afterwards :meth:`combine` also accepts
        a ``y`` of just those rows."""
        call = "rshmem.ep.Buffer.recv_counts"
        h = self._live(call)
        offs = h.read_offsets(self._stream(call, stream, []))
        self._rows = int(offs[-1])
        return [int(offs[i + 1] - offs[i]) for i in range(self.num_local_experts)]

    def per_expert(self, *, stream=None):
        """**Local.** :meth:`recv_counts`, then the dispatch output split per local expert: a
        list of L views ``[rows_l, hidden]`` (an expert that received nothing gets ``[0,
        hidden]``); on a float8_e4m3fn buffer, L pairs ``(x, scales)`` of views."""
        counts = self.recv_counts(stream=stream)
        views, at = [], 0
        for c in counts:
            if self.dtype == FP8:
                views.append((self._out.x[0][at:at + c], self._out.x[1][at:at + c]))
            else:
                views.append(self._out.x[at:at + c])
            at += c
        return views

    def combine(self, y=None, *, out=None, stream=None):
        """**Collective, stream-ordered.** Brings the expert outputs back: ``y`` holds them in
        the layout of the dispatch output (``[max_rows, hidden]``, e.g. ``torch.empty_like``
        of it, or only the received rows once :meth:`recv_counts`/:meth:`per_expert` read
        them); ``None``: they were written in place into the dispatch output. Returns ``out``
        (``[T, hidden]`` of the last dispatch's T tokens, allocated when not given; a given
        ``out`` may have more rows, the first T are written and returned):
        ``out[t] = Σ_j topk_weights[t, j] · y(row of token t at expert topk_idx[t, j])``, summed
        in fp32 and rounded to the dtype; zeros for a token with no expert. On a float8_e4m3fn
        buffer ``y`` and ``out`` are bfloat16 (:attr:`combine_dtype`) and ``y`` is required."""
        call = "rshmem.ep.Buffer.combine"
        h = self._live(call)
        views, ya = [], 0
        if y is None:
            self._not_in_place(call, "dispatch output")
        else:
            yv = self._tensor(call, "y", y, self.combine_dtype, self.hidden, "hidden")
            need = self.max_rows if self._rows is None else self._rows
            if yv.shape[0] < need:
                why = ("the dispatch output's max_rows (recv_counts() reads how many were "
                       "received)" if self._rows is None else
                       "the rows the last dispatch received")
                raise Error(f"{call}: y: {yv.shape[0]} rows, fewer than {need}: {why}")
            # A y of no rows receives nothing; 0 would mean "in place", which reads nothing
            # either.
            ya = yv.ptr
            views.append(yv)
        return self._finish(call, out, stream, views, self._t,
                            lambda s, o: h.combine(ya, o, s))

    def _finish(self, call, out, stream, views, t, launch):
        """Checks or allocates ``out`` for ``t`` tokens, runs ``launch(stream, out address)``,
        returns the written rows of ``out``."""
        if out is not None:
            ov = self._tensor(call, "out", out, self.combine_dtype, self.hidden, "hidden",
                              writable=True)
            if t is not None and ov.shape[0] < t:
                raise Error(f"{call}: out: {ov.shape[0]} rows, fewer than the {t} tokens of the "
                            "last dispatch")
            views.append(ov)
        self._on_gpu(call, views)
        s = self._stream(call, stream, views)
        if t is None:  # no dispatch yet: the runtime says so
            launch(s, 0)
            raise Error(f"{call}: no dispatch on this handle yet")
        if out is None:
            out = self._empty(t)
            self._own_out(out, stream)
            ov = _core._view(out, call, "out")
        launch(s, ov.ptr)
        return out if out.shape[0] == t else out[:t]

    # -- low-latency mode -----------------------------------------------------------------------

    def ll_dispatch(self, x, topk_idx, *, stream=None):
        """**Collective, stream-ordered.** Low-latency dispatch (handle made with
        ``low_latency=True``): every (token, expert) pair is stored straight into its expert's
        block on the expert's PE, no count exchange first. ``x`` ``[T, hidden]`` (the pair
        ``(x, x_scales)`` on a float8_e4m3fn buffer, as :meth:`dispatch`), ``topk_idx``
        ``[T, k]`` int64 (the weights go to :meth:`ll_combine`). Returns
        :class:`LowLatencyDispatched` ``(x, count, src)``: views valid until any PE's next
        low-latency dispatch (after this PE's :meth:`ll_combine` when they alternate)."""
        call = "rshmem.ep.Buffer.ll_dispatch"
        h = self._live(call)
        if self.dtype == FP8:
            xv, sv, t = self._fp8_x(call, x)
        else:
            xv, sv = self._tensor(call, "x", x, self.dtype, self.hidden, "hidden"), None
            t = int(xv.shape[0])
        iv = self._tensor(call, "topk_idx", topk_idx, "int64", self.topk, "topk", rows=t)
        views = [xv] + ([sv] if sv is not None else []) + [iv]
        self._on_gpu(call, views)
        s = self._stream(call, stream, views)
        if sv is not None:
            h.ll_dispatch_fp8(xv.ptr, sv.ptr, iv.ptr, t, s)
        else:
            h.ll_dispatch(xv.ptr, iv.ptr, t, s)
        self._ll_t = t
        return self._ll_out

    @property
    def ll_output(self):
        """The low-latency output :class:`LowLatencyDispatched` (None without
        ``low_latency``)."""
        self._live("rshmem.ep.Buffer.ll_output")
        return self._ll_out

    def ll_combine(self, y, topk_weights, *, out=None, stream=None):
        """**Collective, stream-ordered.** Low-latency combine: ``y`` the expert outputs in the
        low-latency output's layout (``[L, n_pes, max_tokens, hidden]``, or ``None``: written in
        place into it), ``topk_weights`` ``[T, k]`` float32 of the last low-latency dispatch's
        T tokens. Returns ``out`` ``[T, hidden]`` (allocated when not given):
        ``out[t] = Σ_j topk_weights[t, j] · y(t, j)`` over the slots that were sent: in slot
        order (fp32 fused multiply-adds), rounded once; when :attr:`ll_per_pe`, each expert PE
        sums its slots of the token that way, rounded once to the combine dtype, and this PE adds
        those partial rows in the order of each PE's first slot, rounded once. On a
        float8_e4m3fn buffer ``y`` and ``out`` are bfloat16 and ``y`` is required."""
        call = "rshmem.ep.Buffer.ll_combine"
        h = self._live(call)
        views, ya = [], 0
        if y is None:
            self._not_in_place(call, "low-latency output")
        else:
            yv = self._any_view(call, "y", y)
            need = self.num_local_experts * self.n_pes * self.max_tokens
            shape = tuple(int(d) for d in yv.shape)
            if not shape or shape[-1] != self.hidden or yv.nelems < need * self.hidden:
                raise Error(f"{call}: y: shape {shape}; expected [{self.num_local_experts}, "
                            f"{self.n_pes}, {self.max_tokens}, {self.hidden}] (the low-latency "
                            "output's layout)")
            if yv.dtype != self.combine_dtype:
                raise Error(f"{call}: y: dtype {yv.dtype}; expected {self.combine_dtype}")
            ya = yv.ptr
            views.append(yv)
        t = self._ll_t
        wv = self._tensor(call, "topk_weights", topk_weights, "float32", self.topk, "topk")
        if t is not None and wv.shape[0] != t:
            raise Error(f"{call}: topk_weights: {wv.shape[0]} rows, but the last low-latency "
                        f"dispatch had {t} tokens")
        views.append(wv)
        return self._finish(call, out, stream, views, t,
                            lambda s, o: h.ll_combine(ya, wv.ptr, o, s))

    # -- checks, release ------------------------------------------------------------------------

    def check(self, *, stream=None):
        """**Local.** Waits for ``stream`` (default: the current torch stream) and raises
        :class:`Error` for what the kernels found wrong since the last check: an expert index
        outside ``-1 .. E`` (that entry was skipped; the exchange completed), or more rows than
        ``max_recv_rows`` (dropped). Clears it."""
        call = "rshmem.ep.Buffer.check"
        self._live(call).check(self._stream(call, stream, []))

    def check_routing(self, topk_idx):
        """**Local.** :func:`check_routing` with this handle's number of experts (and k)."""
        call = "rshmem.ep.Buffer.check_routing"
        v = _core._view(topk_idx, call, "topk_idx")
        if len(v.shape) != 2 or int(v.shape[1]) != self.topk:
            raise Error(f"{call}: topk_idx: shape {tuple(v.shape)}; expected [num_tokens, "
                        f"{self.topk}] (topk {self.topk})")
        check_routing(topk_idx, self.num_experts)

    def free(self):
        """**Collective.** Releases the handle (waits for this PE's GPU work first). The views
        it returned must not be used afterwards."""
        h = self._live("rshmem.ep.Buffer.free")
        self._h = None
        self._out = self._ll_out = None
        h.free()
