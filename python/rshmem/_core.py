"""The Python half of rshmem: start-up, arrays on the symmetric heap, and the calls on them.

Everything here turns framework objects (NumPy arrays, torch tensors, CuPy arrays, streams)
into addresses, byte counts and dtype names, checks what only Python can see (shape, dtype,
device, contiguity), and calls the native module, which calls the runtime.
"""

import os
import struct
import sys
import warnings

from . import _rshmem
from ._rshmem import Error

# ---------------------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------------------

# name: (itemsize, DLPack type code, NumPy typestr or None)
_DTYPES = {
    "bool": (1, 6, "|b1"),
    "int8": (1, 0, "|i1"),
    "int16": (2, 0, "<i2"),
    "int32": (4, 0, "<i4"),
    "int64": (8, 0, "<i8"),
    "uint8": (1, 1, "|u1"),
    "uint16": (2, 1, "<u2"),
    "uint32": (4, 1, "<u4"),
    "uint64": (8, 1, "<u8"),
    "float16": (2, 2, "<f2"),
    "bfloat16": (2, 4, None),
    "float32": (4, 2, "<f4"),
    "float64": (8, 2, "<f8"),
    "complex64": (8, 5, "<c8"),
    "complex128": (16, 5, "<c16"),
}
_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "long": "int64",
            "int": "int32", "short": "int16", "uint": "uint32", "cfloat": "complex64",
            "cdouble": "complex128"}


def _dtype_name(dtype, call="rshmem"):
    """The canonical name of a dtype given as a string, NumPy dtype/type or torch dtype."""
    if isinstance(dtype, str):
        name = dtype
    else:
        name = str(dtype)
        if name.startswith("torch."):
            name = name[len("torch."):]
        else:
            try:
                import numpy as np
                name = np.dtype(dtype).name
            except Exception:
                pass
    if name.startswith("torch."):
        name = name[len("torch."):]
    name = _ALIASES.get(name, name)
    if name not in _DTYPES:
        raise Error(f"{call}: dtype {dtype!r} is not supported (supported: {', '.join(_DTYPES)})")
    return name


# torch or NumPy dtype object -> canonical name, filled as dtypes are met: a dict lookup on the
# hot path instead of building the dtype's string (several µs for a NumPy dtype).
_DTYPE_NAMES = {}


def _cached_dtype_name(dt, call):
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _dtype_name(dt, call)
        _DTYPE_NAMES[dt] = name
    return name


class _Started:
    """What the hot paths read instead of asking the native module each call: set by init,
    cleared by finalize."""
    __slots__ = ("gpu", "device")

    def __init__(self):
        self.gpu, self.device = False, None


_STATE = _Started()


# ---------------------------------------------------------------------------------------------
# Start-up
# ---------------------------------------------------------------------------------------------

class _Session:
    """What init returns: a context manager that finalizes on exit."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if _rshmem.is_initialized():
            finalize()
        return False

    def __repr__(self):
        if not _rshmem.is_initialized():
            return "<rshmem session (finalized)>"
        return f"<rshmem session: PE {my_pe()} of {n_pes()}, {backend()} backend>"


def _torch():
    """The torch module when the program imported it (never imported here on our own)."""
    return sys.modules.get("torch")


def _torch_dist_initialized():
    t = _torch()
    if t is None:
        return False
    try:
        import torch.distributed as dist
        return dist.is_available() and dist.is_initialized()
    except Exception:
        return False


def _uid_from_process_group(pg):
    """(rank, nranks, uid) of a torch.distributed process group: rank 0 of the group makes the
    unique id and broadcasts it with the group (as NVSHMEM4Py does)."""
    import torch.distributed as dist
    if not dist.is_initialized():
        raise Error("rshmem.init: process_group was given but torch.distributed is not "
                    "initialized (call torch.distributed.init_process_group first)")
    rank = dist.get_rank(pg)
    n = dist.get_world_size(pg)
    if rank < 0:
        raise Error("rshmem.init: this process is not a member of process_group")
    obj = [get_unique_id() if rank == 0 else None]
    src = dist.get_global_rank(pg, 0) if pg is not None else 0
    dist.broadcast_object_list(obj, src=src, group=pg)
    return rank, n, obj[0]


def _store_timeout(env):
    """The torchrun store's timeout: RSHMEM_TIMEOUT seconds (default 300; 0 waits a year)."""
    from datetime import timedelta
    try:
        seconds = float(env.get("RSHMEM_TIMEOUT", "300"))
    except ValueError:
        raise Error("RSHMEM_TIMEOUT={!r}: expected a number of seconds >= 0".format(
            env.get("RSHMEM_TIMEOUT")))
    if seconds < 0:
        raise Error("RSHMEM_TIMEOUT={!r}: expected a number of seconds >= 0".format(
            env.get("RSHMEM_TIMEOUT")))
    return timedelta(seconds=seconds if seconds > 0 else 365 * 86400)


def _uid_from_torchrun_store():
    """(rank, nranks, uid) through the store of the torchrun agent (no process group yet)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        return None
    rank, n = int(env["RANK"]), int(env["WORLD_SIZE"])
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), n, is_master=False,
                          timeout=_store_timeout(env))
    key = "rshmem/uid/{}/{}".format(env.get("TORCHELASTIC_RESTART_COUNT", "0"),
                                    env.get("TORCHELASTIC_RUN_ID", ""))
    if rank == 0:
        store.set(key, get_unique_id())
    uid = store.get(key).decode()
    return rank, n, uid


def _uid_from_mpi(comm):
    """(rank, nranks, uid) of an mpi4py communicator: rank 0 makes the id and broadcasts it."""
    rank, n = comm.Get_rank(), comm.Get_size()
    uid = comm.bcast(get_unique_id() if rank == 0 else None, root=0)
    return rank, n, uid


def _under_torchrun():
    env = os.environ
    return ("TORCHELASTIC_RUN_ID" in env or "TORCHELASTIC_RESTART_COUNT" in env) \
        and "RANK" in env and "WORLD_SIZE" in env


def _has_secret():
    return bool(os.environ.get("RSHMEM_BOOTSTRAP_SECRET") or
                os.environ.get("RSHMEM_BOOTSTRAP_SECRET_FILE"))


def init(*, device=None, uid=None, rank=None, nranks=None, process_group=None, mpi_comm=None,
         backend=None):
    """**Collective.** Starts rshmem on every PE of the job; returns a context manager that
    finalizes on exit (``with rshmem.init(): ...``).

    How the PEs meet, first match wins:

    * ``uid``, ``rank``, ``nranks``: a unique id from :func:`get_unique_id` on rank 0 that the
      program passed to every rank itself.
    * ``process_group`` (a ``torch.distributed`` group), or the default group when
      ``torch.distributed`` is initialized: rank 0 of the group makes the id and broadcasts it.
    * ``mpi_comm`` (an mpi4py communicator), or ``MPI.COMM_WORLD`` under ``mpirun`` when mpi4py is
      installed and ``RSHMEM_BOOTSTRAP_ADDR`` is not set.
    * under ``torchrun`` with no process group and no ``RSHMEM_BOOTSTRAP_SECRET``: the torchrun
      agent's store (needs torch).
    * otherwise the launcher's variables, as for Rust programs: ``rshmemrun``, ``mpirun`` with
      ``RSHMEM_BOOTSTRAP_ADDR``/``RSHMEM_BOOTSTRAP_SECRET``, torchrun with a secret, one process
      alone.

    ``device``: the CUDA device ordinal (default: the current torch device when torch has
    initialized CUDA, else the runtime's choice by local rank). ``backend``: "cpu", "gpu" or
    "auto" (default: ``RSHMEM_BACKEND``, else auto).
    """
    if (rank is None) != (nranks is None):
        raise Error("rshmem.init: give rank and nranks together")
    if uid is not None:
        if rank is None:
            raise Error("rshmem.init: uid needs rank and nranks (this process's rank and the job "
                        "size)")
    elif rank is not None:
        if nranks != 1:
            raise Error("rshmem.init: rank and nranks need uid for a job of more than one PE "
                        "(make it with rshmem.get_unique_id() on rank 0)")
    elif process_group is not None or _torch_dist_initialized():
        rank, nranks, uid = _uid_from_process_group(process_group)
    elif mpi_comm is not None:
        rank, nranks, uid = _uid_from_mpi(mpi_comm)
    elif "OMPI_COMM_WORLD_SIZE" in os.environ and not os.environ.get("RSHMEM_BOOTSTRAP_ADDR") \
            and not os.environ.get("RSHMEM_RANK"):
        try:
            from mpi4py import MPI
        except ImportError:
            MPI = None
        if MPI is not None:
            rank, nranks, uid = _uid_from_mpi(MPI.COMM_WORLD)
    elif _under_torchrun() and not _has_secret() and not os.environ.get("RSHMEM_RANK"):
        got = _uid_from_torchrun_store()
        if got is not None:
            rank, nranks, uid = got
    if nranks == 1:
        uid = None
        rank, nranks = 0, 1
    wants_cpu = backend == "cpu" or (backend is None and
                                     os.environ.get("RSHMEM_BACKEND", "").lower() == "cpu")
    t = _torch()
    if device is None and not wants_cpu and t is not None and not os.environ.get("RSHMEM_DEVICE"):
        try:
            if t.cuda.is_available() and t.cuda.is_initialized():
                device = t.cuda.current_device()
        except Exception:
            pass
    if device is not None and not isinstance(device, int):
        device = _device_ordinal(device)
    _rshmem.init(rank=rank, nranks=nranks, uid=uid, device=device, backend=backend)
    _STATE.gpu = _rshmem.backend() == "gpu"
    _STATE.device = _rshmem.device()
    _register_torch()
    if _STATE.gpu and t is not None:
        # The program's torch calls use rshmem's device from now on.
        t.cuda.set_device(_STATE.device)
    return _Session()


def _device_ordinal(dev):
    s = str(dev)
    if s.startswith("cuda:"):
        return int(s[5:])
    if hasattr(dev, "index") and dev.index is not None:
        return int(dev.index)
    raise Error(f"rshmem.init: device {dev!r}: give a CUDA ordinal (int) or 'cuda:N'")


def finalize():
    """**Collective.** Stops rshmem. Arrays still allocated are released with the heap: using
    them afterwards is invalid (free them first; a warning names how many were left).
    Expert-parallel handles (:class:`rshmem.ep.Buffer`) still live are freed first, in the
    order they were made (collective, as their ``free``), with a warning."""
    live = [a for a in _ALLOCS.values() if not a.freed]
    if live:
        warnings.warn(f"rshmem.finalize: {len(live)} symmetric allocation(s) were not freed; "
                      "arrays on them must not be used after finalize", ResourceWarning,
                      stacklevel=2)
    if _rshmem.backend() == "gpu" and _torch() is not None:
        _torch().cuda.synchronize()
    for a in live:
        a.freed = True
    _ALLOCS.clear()
    _STATE.gpu, _STATE.device = False, None
    handles = _rshmem.finalize()
    if handles:
        warnings.warn(f"rshmem.finalize: freed {handles} expert-parallel handle(s) "
                      "(rshmem.ep.Buffer) that were still live; their views must not be used",
                      ResourceWarning, stacklevel=2)


is_initialized = _rshmem.is_initialized


def get_unique_id():
    """**Local**, before init. A fresh unique id (a string: rank 0's address and a job secret)
    for :func:`init` ``(uid=..., rank=..., nranks=...)``; make it on rank 0 and pass it to the
    other ranks through the program's own channel. It carries the job's secret: do not print it
    or pass it on a command line."""
    return _rshmem.get_unique_id()


def my_pe(team=None):
    """This PE's number (in ``team``, default: all PEs)."""
    if team is None:
        return _rshmem.my_pe()
    return team.my_pe()


def n_pes(team=None):
    """The number of PEs (of ``team``, default: all PEs)."""
    if team is None:
        return _rshmem.n_pes()
    return team.n_pes()


def backend():
    """"gpu" when the symmetric heap is GPU memory, else "cpu"."""
    return _rshmem.backend()


def device():
    """This PE's CUDA device ordinal (None on the CPU backend)."""
    return _rshmem.device()


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------

class _Memory:
    """A C-contiguous piece of the symmetric heap (this PE's or, for a peer view, a peer's)
    exported with ``__array_interface__`` / ``__cuda_array_interface__`` / ``__dlpack__``."""

    def __init__(self, addr, shape, dtype, owner=None):
        self.addr = addr
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.gpu = _rshmem.backend() == "gpu"
        self.dev = _rshmem.device() if self.gpu else None
        self.owner = owner
        self.freed = False

    @property
    def nbytes(self):
        n = _DTYPES[self.dtype][0]
        for d in self.shape:
            n *= d
        return n

    @property
    def __array_interface__(self):
        if self.gpu:
            raise AttributeError("GPU memory has no __array_interface__")
        typestr = _DTYPES[self.dtype][2]
        if typestr is None:
            raise Error(f"rshmem: NumPy has no {self.dtype}: use array='torch'")
        return {"shape": self.shape, "typestr": typestr, "data": (self.addr, False),
                "version": 3}

    @property
    def __cuda_array_interface__(self):
        if not self.gpu:
            raise AttributeError("host memory has no __cuda_array_interface__")
        typestr = _DTYPES[self.dtype][2]
        if typestr is None:
            raise AttributeError(f"{self.dtype} has no __cuda_array_interface__ typestr")
        return {"shape": self.shape, "typestr": typestr, "data": (self.addr, False),
                "version": 3, "strides": None, "stream": None}

    def __dlpack_device__(self):
        return (2, self.dev) if self.gpu else (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("rshmem: symmetric memory is exported without a copy (copy=True)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"rshmem: memory is on DLPack device {self.__dlpack_device__()}, "
                              f"not {tuple(dl_device)}")
        versioned = max_version is not None and max_version[0] >= 1
        code = _DTYPES[self.dtype][1]
        bits = 8 * _DTYPES[self.dtype][0]
        dt, di = self.__dlpack_device__()
        return _rshmem.dlpack_capsule(self, self.addr, list(self.shape), code, bits, dt, di,
                                      versioned, False)


# Live allocations by address (what free() takes back).
_ALLOCS = {}


def _wrap(mem, array):
    """``mem`` as the requested kind of array, viewing it without a copy."""
    if array is None:
        if mem.gpu:
            array = "torch" if _torch() is not None or _importable("torch") else "cupy"
        else:
            array = "numpy"
    if array == "numpy":
        if mem.gpu:
            raise Error("rshmem: the heap is GPU memory: NumPy cannot view it (use array='torch' "
                        "or 'cupy')")
        import numpy as np
        return np.asarray(mem)
    if array == "torch":
        import torch
        return torch.from_dlpack(mem)
    if array == "cupy":
        import cupy
        return cupy.from_dlpack(mem)
    raise Error(f"rshmem: array={array!r}: use 'numpy', 'torch' or 'cupy'")


def _importable(name):
    import importlib.util
    return importlib.util.find_spec(name) is not None


def _shape(shape):
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise Error(f"rshmem.empty: negative dimension in shape {shape}")
    return shape


def _alloc(call, shape, dtype, device, array, zero):
    shape = _shape(shape)
    dtype = _dtype_name(dtype, call)
    gpu = _rshmem.backend() == "gpu"
    if device is not None:
        d = str(device)
        if gpu and not (d == "cuda" or d == f"cuda:{_rshmem.device()}" or d == str(_rshmem.device())):
            raise Error(f"{call}: device={device!r} but this PE's symmetric heap is on cuda:"
                        f"{_rshmem.device()}")
        if not gpu and d != "cpu":
            raise Error(f"{call}: device={device!r} but this PE runs on the CPU backend (the "
                        "heap is host memory): use device='cpu' or leave it out")
    n = _DTYPES[dtype][0]
    for d in shape:
        n *= d
    addr = _rshmem.malloc(n, zero)
    mem = _Memory(addr, shape, dtype)
    _ALLOCS[addr] = mem
    return _wrap(mem, array)


def empty(shape, dtype="float32", *, device=None, array=None):
    """**Collective.** An uninitialized array of ``shape`` and ``dtype`` on the symmetric heap:
    a NumPy array on the CPU backend, a torch tensor (or CuPy array) on the GPU backend;
    ``array`` ("numpy", "torch", "cupy") picks the kind. Its data pointer is the heap address
    (no copy, ever). Free it with :func:`free` (collective)."""
    return _alloc("rshmem.empty", shape, dtype, device, array, False)


def zeros(shape, dtype="float32", *, device=None, array=None):
    """**Collective.** Like :func:`empty`, zero-filled on every PE before any PE returns."""
    return _alloc("rshmem.zeros", shape, dtype, device, array, True)


def free(arr):
    """**Collective.** Releases an array returned by :func:`empty`/:func:`zeros` on every PE.
    The array (and views of it) must not be used afterwards."""
    a = _view(arr, "rshmem.free", "arr")
    mem = _ALLOCS.get(a.ptr)
    if mem is None or mem.freed:
        raise Error("rshmem.free: the array is not one returned by rshmem.empty/zeros (a view "
                    "that starts elsewhere, another array, or already freed)")
    _rshmem.free(mem.addr)
    mem.freed = True
    del _ALLOCS[mem.addr]


def peer_tensor(arr, pe):
    """PE ``pe``'s copy of the symmetric ``arr``, as an array of the same kind that this PE
    reads and writes by load/store (same host: shared memory on the CPU backend, NVLink/PCIe
    peer mappings on the GPU). Raises :class:`Error` when that copy is reachable only through
    the proxy or the network."""
    a = _view(arr, "rshmem.peer_tensor", "arr")
    _need_symmetric("rshmem.peer_tensor", "arr", a)
    addr = _rshmem.peer_addr(a.ptr, int(pe))
    if addr is None:
        raise Error(f"rshmem.peer_tensor: PE {pe}'s copy is not reachable by load/store from PE "
                    f"{my_pe()} (another host, or peer access off): use get/put instead")
    mem = _Memory(addr, a.shape, a.dtype, owner=arr)
    return _wrap(mem, a.kind)


# ---------------------------------------------------------------------------------------------
# Arrays in, addresses out
# ---------------------------------------------------------------------------------------------

class _View:
    __slots__ = ("ptr", "nbytes", "shape", "dtype", "cuda", "kind", "obj", "what")

    @property
    def nelems(self):
        return self.nbytes // _DTYPES[self.dtype][0]


def _view(x, call, what, writable=False):
    """Address, size, dtype and device of a C-contiguous array/tensor ``x``."""
    v = _View()
    v.obj = x
    v.what = what
    mod = type(x).__module__ or ""
    if mod.startswith("torch") and hasattr(x, "data_ptr"):
        # Plain attribute reads and C methods only (no torch.device objects, no dtype strings).
        # put, get and alltoall on two torch tensors read them natively instead, once torch is
        # registered here (_register_torch).
        _register_torch()
        if not x.is_contiguous():
            raise Error(f"{call}: {what} is not contiguous (call .contiguous() first)")
        v.ptr, v.shape, v.nbytes = x.data_ptr(), x.shape, x.nbytes
        v.dtype = _cached_dtype_name(x.dtype, call)
        v.cuda = x.is_cuda
        v.kind = "torch"
        if v.cuda and x.get_device() != _STATE.device and _STATE.gpu:
            raise Error(f"{call}: {what} is on {x.device} but this PE's GPU is cuda:"
                        f"{_STATE.device}")
        return v
    if hasattr(x, "__cuda_array_interface__"):
        cai = x.__cuda_array_interface__
        v.ptr, v.shape = int(cai["data"][0]), tuple(cai["shape"])
        if writable and cai["data"][1]:
            raise Error(f"{call}: {what} is read-only")
        dt = _typestr_name(cai["typestr"], call)
        v.dtype = dt
        n = _DTYPES[dt][0]
        for d in v.shape:
            n *= d
        v.nbytes = n
        if cai.get("strides") is not None and not _c_contiguous(v.shape, cai["strides"], n):
            raise Error(f"{call}: {what} is not C-contiguous")
        v.cuda = True
        v.kind = "cupy"
        return v
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None and (isinstance(x, np.ndarray) or hasattr(x, "__array_interface__")):
        a = np.asarray(x)
        if not a.flags.c_contiguous:
            raise Error(f"{call}: {what} is not C-contiguous (np.ascontiguousarray first)")
        if writable and not a.flags.writeable:
            raise Error(f"{call}: {what} is read-only")
        v.ptr, v.shape, v.nbytes = a.ctypes.data, a.shape, a.nbytes
        v.dtype = _cached_dtype_name(a.dtype, call)
        v.cuda = False
        v.kind = "numpy"
        return v
    raise Error(f"{call}: {what} must be a NumPy array, torch tensor or CuPy array, not "
                f"{type(x).__name__}")


_TORCH_REGISTERED = False


def _register_torch():
    """Hands torch (when the program imported it) to the native fast path of put, get and
    alltoall on two tensors, once per process."""
    global _TORCH_REGISTERED
    t = sys.modules.get("torch")
    if _TORCH_REGISTERED or t is None:
        return
    supported = {}  # torch dtype -> canonical name, for every dtype rshmem moves
    for name in _DTYPES:
        dt = getattr(t, name, None)
        if isinstance(dt, t.dtype):
            supported[dt] = name
    _rshmem.register_torch(t.Tensor, supported,
                           getattr(t._C, "_cuda_getCurrentRawStream", None))
    _TORCH_REGISTERED = True


def _typestr_name(ts, call):
    for k, (_, _, t) in _DTYPES.items():
        if t is not None and t[1:] == ts[1:]:
            return k
    raise Error(f"{call}: array type {ts!r} is not supported")


def _c_contiguous(shape, strides, nbytes):
    expect = nbytes
    for d, s in zip(shape, strides):
        if d > 1:
            expect //= d
            if s != expect:
                return False
        else:
            expect //= max(d, 1)
    return True


def _need_symmetric(call, what, v):
    if not _rshmem.heap_contains(v.ptr, v.nbytes):
        raise Error(f"{call}: {what} ({v.kind} array at {v.ptr:#x}, {v.nbytes} bytes) is not on "
                    "the symmetric heap: allocate it with rshmem.empty/zeros")


def _same(call, a, b, what_a, what_b):
    if a.dtype != b.dtype:
        raise Error(f"{call}: {what_a} is {a.dtype} but {what_b} is {b.dtype}")


def _elem(call, v, index):
    """Address of element ``index`` of ``v``."""
    index = int(index)
    if not 0 <= index < v.nelems:
        raise Error(f"{call}: index {index} is out of range for {v.nelems} elements")
    return v.ptr + index * _DTYPES[v.dtype][0]


def _stream_handle(stream, views, call):
    """The CUstream to order the call on, or None for the host form. On the GPU backend calls
    on CUDA arrays are stream-ordered: on ``stream`` or the current torch/CuPy stream."""
    if stream is not None:
        h = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream: the common case first
        if h is not None:
            return int(h)
        if isinstance(stream, int):
            return stream
        if hasattr(stream, "__cuda_stream__"):
            return int(stream.__cuda_stream__()[1])
        if hasattr(stream, "ptr"):  # cupy.cuda.Stream
            return int(stream.ptr)
        raise Error(f"{call}: stream {stream!r}: give a torch.cuda.Stream, a CuPy stream or a "
                    "CUstream handle (int)")
    if not _STATE.gpu:
        for v in views:
            if v.cuda:
                raise Error(f"{call}: a {v.kind} array in GPU memory, but this PE runs on the "
                            "CPU backend (its heap is host memory): pass host arrays")
        return None
    kinds = {v.kind for v in views if v.cuda}
    if views and not kinds:
        return None
    return _current_stream(kinds)


def _current_stream(kinds=()):
    t = _torch()
    if t is not None and ("torch" in kinds or not kinds):
        raw = getattr(t._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return int(raw(_STATE.device))
        return int(t.cuda.current_stream(_STATE.device).cuda_stream)
    cp = sys.modules.get("cupy")
    if cp is not None:
        return int(cp.cuda.get_current_stream().ptr)
    return None


# ---------------------------------------------------------------------------------------------
# RMA
# ---------------------------------------------------------------------------------------------

def _put(call, dst, src, pe, stream, nbi):
    d = _view(dst, call, "dst")
    s = _view(src, call, "src")
    _same(call, d, s, "dst", "src")
    if s.nbytes > d.nbytes:
        raise Error(f"{call}: src has {s.nelems} elements but dst only {d.nelems}")
    _need_symmetric(call, "dst", d)
    _rshmem.put(d.ptr, s.ptr, s.nbytes, int(pe), nbi, _stream_handle(stream, [d, s], call))


def put(dst, src, pe, *, stream=None):
    """**One-sided.** Copies ``src`` (this PE, any array) into the symmetric ``dst`` on PE
    ``pe``: complete (src reusable) on return; on the GPU backend ordered on ``stream``
    (default: the current stream)."""
    if not _rshmem.rma_tensors(False, dst, src, pe, False, stream):
        _put("rshmem.put", dst, src, pe, stream, False)


def put_nbi(dst, src, pe, *, stream=None):
    """**One-sided.** Non-blocking :func:`put`: ``src`` may be reused after :func:`quiet`."""
    if not _rshmem.rma_tensors(False, dst, src, pe, True, stream):
        _put("rshmem.put_nbi", dst, src, pe, stream, True)


def _get(call, dst, src, pe, stream, nbi):
    d = _view(dst, call, "dst", writable=True)
    s = _view(src, call, "src")
    _same(call, d, s, "dst", "src")
    if d.nbytes > s.nbytes:
        raise Error(f"{call}: dst has {d.nelems} elements but src only {s.nelems}")
    _need_symmetric(call, "src", s)
    _rshmem.get(d.ptr, s.ptr, d.nbytes, int(pe), nbi, _stream_handle(stream, [d, s], call))


def get(dst, src, pe, *, stream=None):
    """**One-sided.** Copies the symmetric ``src`` on PE ``pe`` into ``dst`` (this PE)."""
    if not _rshmem.rma_tensors(True, dst, src, pe, False, stream):
        _get("rshmem.get", dst, src, pe, stream, False)


def get_nbi(dst, src, pe, *, stream=None):
    """**One-sided.** Non-blocking :func:`get`: ``dst`` holds the data after :func:`quiet`."""
    if not _rshmem.rma_tensors(True, dst, src, pe, True, stream):
        _get("rshmem.get_nbi", dst, src, pe, stream, True)


def p(dst, value, pe, *, index=0, stream=None):
    """**One-sided.** Writes ``value`` into element ``index`` of the symmetric ``dst`` on PE
    ``pe``."""
    d = _view(dst, "rshmem.p", "dst")
    _need_symmetric("rshmem.p", "dst", d)
    _rshmem.p(_elem("rshmem.p", d, index), d.dtype, value, int(pe),
              _stream_handle(stream, [d], "rshmem.p"))


def g(src, pe, *, index=0, stream=None):
    """**One-sided.** Reads element ``index`` of the symmetric ``src`` on PE ``pe``."""
    s = _view(src, "rshmem.g", "src")
    _need_symmetric("rshmem.g", "src", s)
    return _rshmem.g(_elem("rshmem.g", s, index), s.dtype, int(pe),
                     _stream_handle(stream, [s], "rshmem.g"))


# ---------------------------------------------------------------------------------------------
# Atomics (host calls: they act when called, not stream-ordered)
# ---------------------------------------------------------------------------------------------

def _amo(op, dst, pe, index, value=None, cond=None):
    call = f"rshmem.atomic_{op}"
    d = _view(dst, call, "dst")
    _need_symmetric(call, "dst", d)
    return _rshmem.atomic(op, _elem(call, d, index), d.dtype, int(pe), value, cond)


def atomic_fetch(dst, pe, *, index=0):
    """**One-sided.** Atomically reads element ``index`` of ``dst`` on PE ``pe``."""
    return _amo("fetch", dst, pe, index)


def atomic_set(dst, value, pe, *, index=0):
    """**One-sided.** Atomically writes ``value``."""
    _amo("set", dst, pe, index, value)


def atomic_swap(dst, value, pe, *, index=0):
    """**One-sided.** Atomically replaces the element with ``value``; returns the old value."""
    return _amo("swap", dst, pe, index, value)


def atomic_compare_swap(dst, cond, value, pe, *, index=0):
    """**One-sided.** Replaces the element with ``value`` if it equals ``cond``; returns the old
    value either way (integers)."""
    return _amo("compare_swap", dst, pe, index, value, cond)


def atomic_fetch_inc(dst, pe, *, index=0):
    """**One-sided.** Increments the element; returns the old value."""
    return _amo("fetch_inc", dst, pe, index)


def atomic_inc(dst, pe, *, index=0):
    """**One-sided.** Increments the element."""
    _amo("inc", dst, pe, index)


def atomic_fetch_add(dst, value, pe, *, index=0):
    """**One-sided.** Adds ``value``; returns the old value."""
    return _amo("fetch_add", dst, pe, index, value)


def atomic_add(dst, value, pe, *, index=0):
    """**One-sided.** Adds ``value``."""
    _amo("add", dst, pe, index, value)


def atomic_fetch_and(dst, value, pe, *, index=0):
    """**One-sided.** Bitwise AND; returns the old value."""
    return _amo("fetch_and", dst, pe, index, value)


def atomic_and(dst, value, pe, *, index=0):
    """**One-sided.** Bitwise AND."""
    _amo("and", dst, pe, index, value)


def atomic_fetch_or(dst, value, pe, *, index=0):
    """**One-sided.** Bitwise OR; returns the old value."""
    return _amo("fetch_or", dst, pe, index, value)


def atomic_or(dst, value, pe, *, index=0):
    """**One-sided.** Bitwise OR."""
    _amo("or", dst, pe, index, value)


def atomic_fetch_xor(dst, value, pe, *, index=0):
    """**One-sided.** Bitwise XOR; returns the old value."""
    return _amo("fetch_xor", dst, pe, index, value)


def atomic_xor(dst, value, pe, *, index=0):
    """**One-sided.** Bitwise XOR."""
    _amo("xor", dst, pe, index, value)


# ---------------------------------------------------------------------------------------------
# Signals, ordering, synchronization
# ---------------------------------------------------------------------------------------------

def _sig(call, sig, index):
    s = _view(sig, call, "sig")
    if s.dtype not in ("uint64", "int64"):
        raise Error(f"{call}: sig must be a uint64 array (signals are 64-bit words), not "
                    f"{s.dtype}")
    _need_symmetric(call, "sig", s)
    return s, _elem(call, s, index)


def _put_signal(call, dst, src, sig, signal, pe, op, sig_index, stream, nbi):
    d = _view(dst, call, "dst")
    s = _view(src, call, "src")
    _same(call, d, s, "dst", "src")
    if s.nbytes > d.nbytes:
        raise Error(f"{call}: src has {s.nelems} elements but dst only {d.nelems}")
    _need_symmetric(call, "dst", d)
    sv, sa = _sig(call, sig, sig_index)
    _rshmem.put_signal(d.ptr, s.ptr, s.nbytes, sa, int(signal), op, int(pe), nbi,
                       _stream_handle(stream, [d, s, sv], call))


def put_signal(dst, src, sig, signal, pe, *, op="set", sig_index=0, stream=None):
    """**One-sided.** :func:`put`, then updates the signal word ``sig[sig_index]`` on PE ``pe``
    with ``op`` ("set" or "add") and ``signal``; the update is visible only after the data."""
    _put_signal("rshmem.put_signal", dst, src, sig, signal, pe, op, sig_index, stream, False)


def put_signal_nbi(dst, src, sig, signal, pe, *, op="set", sig_index=0, stream=None):
    """**One-sided.** Non-blocking :func:`put_signal` (``src`` reusable after :func:`quiet`)."""
    _put_signal("rshmem.put_signal_nbi", dst, src, sig, signal, pe, op, sig_index, stream, True)


def signal_op(sig, signal, pe, *, op="set", index=0, stream=None):
    """**One-sided.** Updates the signal word ``sig[index]`` on PE ``pe`` without data."""
    sv, sa = _sig("rshmem.signal_op", sig, index)
    _rshmem.signal_op(sa, int(signal), op, int(pe), _stream_handle(stream, [sv],
                                                                   "rshmem.signal_op"))


def signal_wait_until(sig, cmp, value, *, index=0, stream=None):
    """**Local.** Waits until this PE's ``sig[index]`` satisfies ``cmp`` ("eq", "ne", "gt",
    "ge", "lt", "le") ``value``; returns the value. On the GPU backend the stream waits
    instead (returns None)."""
    sv, sa = _sig("rshmem.signal_wait_until", sig, index)
    return _rshmem.signal_wait_until(sa, cmp, int(value),
                                     _stream_handle(stream, [sv], "rshmem.signal_wait_until"))


def signal_fetch(sig, *, index=0):
    """**Local.** This PE's ``sig[index]``, read atomically."""
    _, sa = _sig("rshmem.signal_fetch", sig, index)
    return _rshmem.signal_fetch(sa)


def wait_until(ivar, cmp, value, *, index=0):
    """**Local.** Waits until this PE's integer ``ivar[index]`` satisfies ``cmp value``."""
    v = _view(ivar, "rshmem.wait_until", "ivar")
    _need_symmetric("rshmem.wait_until", "ivar", v)
    _rshmem.wait_until(_elem("rshmem.wait_until", v, index), v.dtype, cmp, value)


def fence():
    """**One-sided.** Orders this PE's earlier puts, atomics and signals to each PE before its
    later ones."""
    _rshmem.fence()


def _sync_stream(stream, call):
    if stream is not None:
        return _stream_handle(stream, [], call)
    if _STATE.gpu:
        return _current_stream()
    return None


def quiet(*, stream=None):
    """**One-sided.** Completes this PE's outstanding puts, gets, atomics and signals (on the
    GPU backend: work after it on ``stream`` starts once they are complete)."""
    h = getattr(stream, "cuda_stream", None)  # a torch stream: the common case first
    _rshmem.quiet(h if h is not None else _sync_stream(stream, "rshmem.quiet"))


def barrier_all(*, stream=None):
    """**Collective.** Completes outstanding operations and waits for every PE."""
    _rshmem.barrier(0, False, _sync_stream(stream, "rshmem.barrier_all"))


def sync_all(*, stream=None):
    """**Collective.** Waits for every PE (no completion of outstanding operations)."""
    _rshmem.barrier(0, True, _sync_stream(stream, "rshmem.sync_all"))


def barrier(team, *, stream=None):
    """**Collective over the team.** :func:`barrier_all` for the team's PEs."""
    _rshmem.barrier(_team(team)._h, False, _sync_stream(stream, "rshmem.barrier"))


def sync(team, *, stream=None):
    """**Collective over the team.** :func:`sync_all` for the team's PEs."""
    _rshmem.barrier(_team(team)._h, True, _sync_stream(stream, "rshmem.sync"))


# ---------------------------------------------------------------------------------------------
# Teams
# ---------------------------------------------------------------------------------------------

class Team:
    """An ordered set of PEs with its own numbering (``TEAM_WORLD``, ``TEAM_SHARED``,
    ``TEAM_NODE``, and teams made by :func:`team_split_strided`)."""

    __slots__ = ("_h",)

    def __init__(self, handle):
        self._h = handle

    def my_pe(self):
        """This PE's number in the team."""
        return _rshmem.team_info(self._h)[0]

    def n_pes(self):
        """The number of PEs in the team."""
        return _rshmem.team_info(self._h)[1]

    def translate_pe(self, pe, dest):
        """The number in team ``dest`` of this team's PE ``pe`` (None if not a member)."""
        return _rshmem.team_translate_pe(self._h, int(pe), _team(dest)._h)

    def split_strided(self, start, stride, size):
        """See :func:`team_split_strided`."""
        return team_split_strided(self, start, stride, size)

    def destroy(self):
        """**Collective over the team.** Releases a team made by a split."""
        _rshmem.team_destroy(self._h)

    def __eq__(self, other):
        return isinstance(other, Team) and other._h == self._h

    def __hash__(self):
        return hash(self._h)

    def __repr__(self):
        names = {0: "TEAM_WORLD", 1: "TEAM_SHARED", 2: "TEAM_NODE"}
        return f"<rshmem.Team {names.get(self._h, self._h)}>"


TEAM_WORLD = Team(0)
TEAM_SHARED = Team(1)
TEAM_NODE = Team(2)


def _team(team):
    if team is None:
        return TEAM_WORLD
    if not isinstance(team, Team):
        raise Error(f"rshmem: team must be an rshmem.Team, not {type(team).__name__}")
    return team


def team_split_strided(parent, start, stride, size):
    """**Collective over the parent.** The team of parent PEs ``start``, ``start+stride``, ...
    (``size`` of them), numbered in that order; None on parent PEs not in it."""
    h = _rshmem.team_split_strided(_team(parent)._h, int(start), int(stride), int(size))
    return None if h is None else Team(h)


# ---------------------------------------------------------------------------------------------
# Collectives
# ---------------------------------------------------------------------------------------------

def _coll_views(call, dst, src):
    d = _view(dst, call, "dst", writable=True)
    s = _view(src, call, "src")
    _same(call, d, s, "dst", "src")
    _need_symmetric(call, "dst", d)
    _need_symmetric(call, "src", s)
    return d, s


def alltoall(team, dst, src, *, stream=None):
    """**Collective over the team.** Block ``j`` of ``src`` (``src.size / n`` elements) on team
    PE ``i`` goes to block ``i`` of ``dst`` on team PE ``j``; both symmetric, same size."""
    call = "rshmem.alltoall"
    t = _team(team)
    n = t.n_pes()
    if _rshmem.alltoall_tensors(t._h, n, dst, src, stream):
        return
    d, s = _coll_views(call, dst, src)
    if s.nbytes != d.nbytes or s.nbytes % n:
        raise Error(f"{call}: dst and src must have the same size, a multiple of the team's "
                    f"{n} PEs (dst {d.nelems}, src {s.nelems} elements)")
    _rshmem.collective("alltoall", t._h, d.ptr, s.ptr, s.nbytes // n, 0,
                       _stream_handle(stream, [d, s], call))


def fcollect(team, dst, src, *, stream=None):
    """**Collective over the team.** Concatenates every member's ``src`` in team order into
    every member's ``dst`` (``n_pes`` times the size of ``src``)."""
    call = "rshmem.fcollect"
    t = _team(team)
    d, s = _coll_views(call, dst, src)
    n = t.n_pes()
    if d.nbytes != n * s.nbytes:
        raise Error(f"{call}: dst must hold {n} x src ({n * s.nelems} elements), it holds "
                    f"{d.nelems}")
    _rshmem.collective("fcollect", t._h, d.ptr, s.ptr, s.nbytes, 0,
                       _stream_handle(stream, [d, s], call))


def broadcast(team, dst, src, root=0, *, stream=None):
    """**Collective over the team.** Copies ``src`` of team PE ``root`` into every member's
    ``dst`` (same size)."""
    call = "rshmem.broadcast"
    t = _team(team)
    d, s = _coll_views(call, dst, src)
    if d.nbytes != s.nbytes:
        raise Error(f"{call}: dst ({d.nelems} elements) and src ({s.nelems}) differ in size")
    _rshmem.collective("broadcast", t._h, d.ptr, s.ptr, s.nbytes, int(root),
                       _stream_handle(stream, [d, s], call))


def reduce(team, dst, src, op="sum", *, stream=None):
    """**Collective over the team.** Element-wise ``op`` ("sum", "prod", "min", "max"; integers
    also "and", "or", "xor") of every member's ``src`` into every member's ``dst`` (an
    all-reduce; same size; may be the same array)."""
    call = "rshmem.reduce"
    t = _team(team)
    d, s = _coll_views(call, dst, src)
    if d.nbytes != s.nbytes:
        raise Error(f"{call}: dst ({d.nelems} elements) and src ({s.nelems}) differ in size")
    _rshmem.reduce(t._h, d.ptr, s.ptr, s.nelems, s.dtype, op, False,
                   _stream_handle(stream, [d, s], call))


def reducescatter(team, dst, src, op="sum", *, stream=None):
    """**Collective over the team.** Reduces every member's ``src`` (``n_pes`` blocks) with
    ``op`` and leaves block ``i`` of the result in ``dst`` of team PE ``i``."""
    call = "rshmem.reducescatter"
    t = _team(team)
    d, s = _coll_views(call, dst, src)
    n = t.n_pes()
    if s.nbytes != n * d.nbytes:
        raise Error(f"{call}: src must hold {n} x dst ({n * d.nelems} elements), it holds "
                    f"{s.nelems}")
    _rshmem.reduce(t._h, d.ptr, s.ptr, d.nelems, s.dtype, op, True,
                   _stream_handle(stream, [d, s], call))


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------

class Kernel:
    """A CUDA C++ kernel compiled at run time with the runtime's NVRTC path: ``source`` may
    ``#include "rshmem/rshmem.cuh"`` (the device library: device puts, signals, barriers, ...);
    ``name`` is an ``extern "C" __global__`` function of it. GPU backend only.

    ``kernel(grid, block, *args, shared_mem=0, stream=None)`` launches it on ``stream``
    (default: the current torch/CuPy stream). Arguments: arrays/tensors pass their data
    pointer; Python ints and floats are packed to the parameter's size (int: 1/2/4/8 bytes,
    float: 4 = float, 8 = double); NumPy scalars and ``bytes`` pass their bytes as they are.
    """

    def __init__(self, source, name, options=()):
        self.name = name
        self._mod = _rshmem.load_module(source, [str(o) for o in options])
        self._sizes = self._mod.param_sizes(name)

    @property
    def param_sizes(self):
        """The byte size of each kernel parameter."""
        return list(self._sizes)

    def __call__(self, grid, block, *args, shared_mem=0, stream=None):
        call = f"rshmem.Kernel({self.name})"
        if len(args) != len(self._sizes):
            raise Error(f"{call}: the kernel takes {len(self._sizes)} arguments, "
                        f"{len(args)} given")
        packed = [_pack(call, i, a, s) for i, (a, s) in enumerate(zip(args, self._sizes))]
        h = _stream_handle(stream, [], call) if stream is not None else _current_stream()
        self._mod.launch(self.name, _dim3(grid), _dim3(block), packed, int(shared_mem),
                         0 if h is None else h)


def _dim3(d):
    if isinstance(d, int):
        return (d, 1, 1)
    d = tuple(int(x) for x in d) + (1, 1, 1)
    return d[:3]


def _pack(call, i, a, size):
    if isinstance(a, bytes):
        return a
    if isinstance(a, bool):
        a = int(a)
    if isinstance(a, int):
        if size not in (1, 2, 4, 8):
            raise Error(f"{call}: parameter {i} is {size} bytes, not an integer")
        signed = a < 0
        try:
            return a.to_bytes(size, "little", signed=signed)
        except OverflowError:
            raise Error(f"{call}: argument {i} ({a}) does not fit the {size}-byte parameter")
    if isinstance(a, float):
        fmt = {2: "<e", 4: "<f", 8: "<d"}.get(size)
        if fmt is None:
            raise Error(f"{call}: parameter {i} is {size} bytes, not a float")
        return struct.pack(fmt, a)
    if hasattr(a, "dtype") and hasattr(a, "tobytes") and getattr(a, "ndim", 1) == 0 \
            and type(a).__module__.startswith("numpy"):
        b = a.tobytes()
        if len(b) != size:
            raise Error(f"{call}: argument {i} is {len(b)} bytes, the parameter {size}")
        return b
    v = _view(a, call, f"argument {i}")
    if size != 8:
        raise Error(f"{call}: argument {i} is an array (a pointer) but parameter {i} is {size} "
                    "bytes")
    return struct.pack("<Q", v.ptr)
