"""The package on the CPU backend: NumPy arrays on the shared-memory symmetric heap."""

import os
import subprocess
import sys

import numpy as np
import pytest

import rshmem
from rshmem import _rshmem

pytestmark = pytest.mark.usefixtures("cpu")


def me_n():
    return rshmem.my_pe(), rshmem.n_pes()


def test_zero_copy_the_array_is_the_heap():
    x = rshmem.zeros((3, 4), "int32")
    ptr = x.ctypes.data
    assert isinstance(x, np.ndarray) and x.shape == (3, 4) and x.dtype == np.int32
    assert _rshmem.heap_contains(ptr, x.nbytes)
    # The array's memory is the allocation itself: its base exports the heap address.
    assert x.base.__array_interface__["data"][0] == ptr
    x[1, 2] = 0x01020304
    raw = _rshmem.read_bytes(ptr + (1 * 4 + 2) * 4, 4)
    assert raw == (0x01020304).to_bytes(4, "little")
    rshmem.free(x)


def test_empty_and_zeros_shapes_dtypes():
    for dt in ("int8", "uint16", "int64", "float32", "float64", np.float16, np.dtype("uint64")):
        a = rshmem.zeros(5, dt)
        assert a.dtype == np.dtype(dt) and (a == 0).all()
        rshmem.free(a)
    e = rshmem.empty((0,), "float32")
    assert e.size == 0
    rshmem.free(e)


def test_ring_put_and_get():
    me, n = me_n()
    x = rshmem.zeros(8, "float64")
    rshmem.put(x, np.arange(8, dtype=np.float64) + 100 * me, (me + 1) % n)
    rshmem.barrier_all()
    prev = (me + n - 1) % n
    assert (x == np.arange(8) + 100 * prev).all()
    out = np.zeros(8)
    rshmem.get(out, x, (me + 1) % n)
    assert (out == np.arange(8) + 100 * me).all()
    rshmem.barrier_all()
    rshmem.free(x)


def test_put_nbi_and_get_nbi_complete_at_quiet():
    me, n = me_n()
    x = rshmem.zeros(1024, "int32")
    rshmem.put_nbi(x, np.full(1024, me, dtype=np.int32), (me + 1) % n)
    rshmem.quiet()
    rshmem.barrier_all()
    assert (x == (me + n - 1) % n).all()
    out = np.zeros(1024, dtype=np.int32)
    rshmem.get_nbi(out, x, (me + 1) % n)
    rshmem.quiet()
    assert (out == me).all()
    rshmem.barrier_all()
    rshmem.free(x)


def test_p_and_g():
    me, n = me_n()
    x = rshmem.zeros(n, "int64")
    for pe in range(n):
        rshmem.p(x, 1000 + me, pe, index=me)
    rshmem.barrier_all()
    assert list(x) == [1000 + i for i in range(n)]
    assert rshmem.g(x, (me + 1) % n, index=me) == 1000 + me
    rshmem.barrier_all()
    rshmem.free(x)


def test_atomics():
    me, n = me_n()
    c = rshmem.zeros(4, "uint64")
    rshmem.barrier_all()
    old = rshmem.atomic_fetch_add(c, 1, 0)
    assert 0 <= old < n
    rshmem.atomic_add(c, 2, 0, index=1)
    rshmem.atomic_inc(c, 0, index=2)
    rshmem.atomic_or(c, 1 << me, 0, index=3)
    rshmem.barrier_all()
    if me == 0:
        assert list(c) == [n, 2 * n, n, (1 << n) - 1]
    assert rshmem.atomic_fetch(c, 0) == n
    rshmem.barrier_all()
    # Exactly one PE wins the compare-and-swap.
    lock = rshmem.zeros(1, "int32")
    won = rshmem.atomic_compare_swap(lock, 0, me + 1, 0) == 0
    won_all = rshmem.zeros(n, "int32")
    rshmem.p(won_all, int(won), 0, index=me)
    rshmem.barrier_all()
    if me == 0:
        assert won_all.sum() == 1 and lock[0] in range(1, n + 1)
    f = rshmem.zeros(1, "float64")
    rshmem.atomic_set(f, 2.5, me)
    assert rshmem.atomic_swap(f, 4.0, me) == 2.5
    with pytest.raises(rshmem.Error, match="not supported"):
        rshmem.atomic_fetch_add(f, 1.0, me)
    rshmem.barrier_all()
    for a in (c, lock, won_all, f):
        rshmem.free(a)


def test_put_signal_and_wait():
    me, n = me_n()
    data = rshmem.zeros(256, "float32")
    sig = rshmem.zeros(1, "uint64")
    rshmem.put_signal(data, np.full(256, me + 0.5, dtype=np.float32), sig, 7, (me + 1) % n)
    assert rshmem.signal_wait_until(sig, "eq", 7) == 7
    assert (data == (me + n - 1) % n + 0.5).all()
    assert rshmem.signal_fetch(sig) == 7
    rshmem.barrier_all()
    # add: every PE adds 1 to PE 0's signal.
    rshmem.signal_op(sig, 1, 0, op="add")
    if me == 0:
        assert rshmem.signal_wait_until(sig, "ge", 7 + n) == 7 + n
    rshmem.barrier_all()
    rshmem.free(data)
    rshmem.free(sig)


def test_wait_until_and_fence():
    me, n = me_n()
    flag = rshmem.zeros(2, "int32")
    rshmem.p(flag, 5, (me + 1) % n, index=0)
    rshmem.fence()
    rshmem.p(flag, 6, (me + 1) % n, index=1)
    rshmem.wait_until(flag, "eq", 6, index=1)
    assert flag[0] == 5
    rshmem.barrier_all()
    rshmem.free(flag)


def test_sync_all_and_barrier_team():
    rshmem.sync_all()
    rshmem.barrier(rshmem.TEAM_WORLD)
    rshmem.sync(rshmem.TEAM_WORLD)
    assert rshmem.TEAM_WORLD.n_pes() == rshmem.n_pes()
    assert rshmem.TEAM_WORLD.my_pe() == rshmem.my_pe()


def test_team_split_strided_and_collectives_in_it():
    me, n = me_n()
    evens = rshmem.team_split_strided(rshmem.TEAM_WORLD, 0, 2, (n + 1) // 2)
    if me % 2:
        assert evens is None
    else:
        assert evens.my_pe() == me // 2 and evens.n_pes() == (n + 1) // 2
        assert evens.translate_pe(evens.my_pe(), rshmem.TEAM_WORLD) == me
        assert rshmem.my_pe(evens) == me // 2
    # Allocation is collective over all PEs: everyone allocates, the team members reduce.
    d = rshmem.zeros(3, "int32")
    s = rshmem.empty(3, "int32")
    s[:] = me
    if evens is not None:
        rshmem.reduce(evens, d, s, "sum")
        assert (d == sum(range(0, n, 2))).all()
        rshmem.barrier(evens)
        evens.destroy()
    rshmem.barrier_all()
    rshmem.free(d)
    rshmem.free(s)


def test_alltoall():
    me, n = me_n()
    k = 3
    src = rshmem.empty(n * k, "int64")
    dst = rshmem.zeros(n * k, "int64")
    for j in range(n):
        src[j * k:(j + 1) * k] = [100 * me + 10 * j + i for i in range(k)]
    rshmem.alltoall(rshmem.TEAM_WORLD, dst, src)
    for i in range(n):
        assert list(dst[i * k:(i + 1) * k]) == [100 * i + 10 * me + t for t in range(k)]
    rshmem.free(src)
    rshmem.free(dst)


def test_broadcast_and_fcollect():
    me, n = me_n()
    src = rshmem.empty(4, "float32")
    src[:] = me + 1
    dst = rshmem.zeros(4, "float32")
    root = n - 1
    rshmem.broadcast(rshmem.TEAM_WORLD, dst, src, root)
    assert (dst == root + 1).all()
    all_ = rshmem.zeros(4 * n, "float32")
    rshmem.fcollect(rshmem.TEAM_WORLD, all_, src)
    assert list(all_) == [float(i + 1) for i in range(n) for _ in range(4)]
    for a in (src, dst, all_):
        rshmem.free(a)


@pytest.mark.parametrize("dtype,op,expect", [
    ("float64", "sum", lambda v: sum(v)),
    ("float32", "max", max),
    ("int32", "min", min),
    ("int64", "prod", lambda v: __import__("math").prod(v)),
    ("uint32", "xor", lambda v: __import__("functools").reduce(lambda a, b: a ^ b, v)),
    ("int16", "or", lambda v: __import__("functools").reduce(lambda a, b: a | b, v)),
])
def test_reduce(dtype, op, expect):
    me, n = me_n()
    vals = [i + 1 for i in range(n)]
    src = rshmem.empty(5, dtype)
    src[:] = me + 1
    dst = rshmem.zeros(5, dtype)
    rshmem.reduce(rshmem.TEAM_WORLD, dst, src, op)
    assert (dst == expect(vals)).all()
    # In place.
    rshmem.reduce(rshmem.TEAM_WORLD, src, src, "max")
    assert (src == n).all()
    rshmem.free(src)
    rshmem.free(dst)


def test_reducescatter():
    me, n = me_n()
    src = rshmem.empty(2 * n, "int32")
    src[:] = np.arange(2 * n) + me
    dst = rshmem.zeros(2, "int32")
    rshmem.reducescatter(rshmem.TEAM_WORLD, dst, src, "sum")
    base = sum(range(n))
    assert list(dst) == [n * (2 * me) + base, n * (2 * me + 1) + base]
    rshmem.free(src)
    rshmem.free(dst)


def test_peer_tensor_loads_and_stores_into_the_peer_copy():
    me, n = me_n()
    x = rshmem.zeros(4, "int32")
    nxt = (me + 1) % n
    peer = rshmem.peer_tensor(x, nxt)
    assert isinstance(peer, np.ndarray) and peer.shape == x.shape
    peer[:] = me + 10
    rshmem.barrier_all()
    assert (x == (me + n - 1) % n + 10).all()
    assert rshmem.peer_tensor(x, me).ctypes.data == x.ctypes.data
    rshmem.barrier_all()
    rshmem.free(x)


def test_errors_name_the_call_and_the_cause():
    me, n = me_n()
    x = rshmem.zeros(4, "int32")
    local = np.zeros(4, dtype=np.int32)
    with pytest.raises(rshmem.Error, match=r"rshmem.put: dst .* not on the symmetric heap"):
        rshmem.put(local, x, 0)
    with pytest.raises(rshmem.Error, match="out of range"):
        rshmem.put(x, local, n)
    with pytest.raises(rshmem.Error, match="dst is int32 but src is float64"):
        rshmem.put(x, np.zeros(4), 0)
    with pytest.raises(rshmem.Error, match="src has 8 elements but dst only 4"):
        rshmem.put(x, np.zeros(8, dtype=np.int32), 0)
    with pytest.raises(rshmem.Error, match="not C-contiguous"):
        rshmem.put(x[::2], local[:2], 0)
    with pytest.raises(rshmem.Error, match="index 4 is out of range"):
        rshmem.p(x, 1, 0, index=4)
    with pytest.raises(rshmem.Error, match="sig must be a uint64 array"):
        rshmem.signal_fetch(x)
    with pytest.raises(rshmem.Error, match="same size, a multiple"):
        rshmem.alltoall(rshmem.TEAM_WORLD, x, rshmem.peer_tensor(x, me)[:3])
    with pytest.raises(rshmem.Error, match="needs the GPU backend"):
        rshmem.put(x, local, 0, stream=0)
    with pytest.raises(rshmem.Error, match="kernels need the GPU backend"):
        rshmem.Kernel('extern "C" __global__ void k() {}', "k")
    with pytest.raises(rshmem.Error, match="comparison"):
        rshmem.wait_until(x, "almost", 1)
    with pytest.raises(rshmem.Error, match="dtype"):
        rshmem.zeros(2, "float8")
    with pytest.raises(rshmem.Error, match="not one returned by rshmem.empty/zeros"):
        rshmem.free(x[1:])
    with pytest.raises(rshmem.Error, match="NumPy array, torch tensor or CuPy array"):
        rshmem.put(x, [1, 2, 3, 4], 0)
    with pytest.raises(rshmem.Error, match="already initialized"):
        rshmem.init()
    rshmem.barrier_all()
    rshmem.free(x)
    with pytest.raises(rshmem.Error, match="already freed"):
        rshmem.free(x)


CHILD = r"""
import os, sys
import numpy as np
import rshmem
rank = int(sys.argv[1])
with rshmem.init(uid=os.environ["TEST_UID"], rank=rank, nranks=2, backend="cpu"):
    x = rshmem.zeros(1, "int32")
    rshmem.p(x, 40 + rank, 1 - rank)
    rshmem.barrier_all()
    print(f"{rshmem.my_pe()}: received message {x[0]}", flush=True)
    rshmem.free(x)
"""


def test_start_from_a_unique_id_in_child_processes():
    """Two fresh processes start a job of their own from a unique id (only PE 0 runs it)."""
    if rshmem.my_pe() != 0:
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSHMEM_", "OMPI_", "PMI"))}
    env["TEST_UID"] = rshmem.get_unique_id()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(r)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=60) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, err
        assert out.strip() == f"{r}: received message {40 + 1 - r}"


def test_unique_id_is_text_with_a_secret():
    uid = rshmem.get_unique_id()
    addr, secret = uid.rsplit("#", 1)
    assert ":" in addr and len(secret) == 32
    assert uid != rshmem.get_unique_id()


class _StandIn:
    """Stands in for torch.Tensor in the native tensor reader's CPU test (torch is not installed
    on CPU-only machines): the attributes and methods that reader uses, over a NumPy array."""

    def __init__(self, a, dtype):
        self.a, self.dtype = a, dtype
        self.is_cuda = False
        self.nbytes = a.nbytes

    def is_contiguous(self):
        return self.a.flags.c_contiguous

    def data_ptr(self):
        return self.a.ctypes.data

    def get_device(self):
        return -1


def test_native_tensor_reader_moves_plain_pairs_and_declines_the_rest():
    if "torch" in sys.modules:
        pytest.skip("torch is imported: the reader is registered for torch.Tensor")
    me, n = me_n()
    f32, i32 = object(), object()
    # First registration wins; later ones are refused.
    assert _rshmem.register_torch(_StandIn, {f32: "float32", i32: "int32"}, None)
    assert not _rshmem.register_torch(_StandIn, {}, None)
    x = rshmem.zeros(16, "float32")
    nxt, prev = (me + 1) % n, (me + n - 1) % n
    src = np.arange(16, dtype=np.float32) + 100 * me
    # The plain case is done natively: data on the next PE.
    assert _rshmem.rma_tensors(False, _StandIn(x, f32), _StandIn(src, f32), nxt, False, None)
    rshmem.barrier_all()
    assert (x == np.arange(16) + 100 * prev).all()
    out = np.zeros(16, dtype=np.float32)
    assert _rshmem.rma_tensors(True, _StandIn(out, f32), _StandIn(x, f32), nxt, False, None)
    assert (out == np.arange(16) + 100 * me).all()
    rshmem.barrier_all()
    # Everything else is declined (the checking path then raises), and nothing is written.
    before = x.copy()
    odd = np.zeros(32, dtype=np.float32)[::2]
    declined = [
        (_StandIn(x, f32), _StandIn(src.view(np.int32), i32), nxt),  # dtypes differ
        (_StandIn(x, f32), _StandIn(odd, f32), nxt),  # not contiguous
        (_StandIn(x[:8], f32), _StandIn(src, f32), nxt),  # src larger than dst
        (_StandIn(src, f32), _StandIn(src, f32), nxt),  # dst not symmetric
        (_StandIn(x, object()), _StandIn(src, f32), nxt),  # unsupported dtype
        (_StandIn(x, f32), _StandIn(src, f32), -1),  # PE not a PE number
        (x, src, nxt),  # not tensors
    ]
    for d, s, pe in declined:
        assert not _rshmem.rma_tensors(False, d, s, pe, False, None)
    rshmem.barrier_all()
    assert (x == before).all()
    # A PE out of range in a plain pair reaches the runtime, which names it.
    with pytest.raises(rshmem.Error, match="out of range"):
        _rshmem.rma_tensors(False, _StandIn(x, f32), _StandIn(src, f32), n, False, None)
    # alltoall: block j of src on PE i lands in block i of dst on PE j.
    a_src = rshmem.zeros(4 * n, "int32")
    a_dst = rshmem.zeros(4 * n, "int32")
    a_src[:] = np.arange(4 * n, dtype=np.int32) + 1000 * me
    rshmem.barrier_all()
    assert _rshmem.alltoall_tensors(0, n, _StandIn(a_dst, i32), _StandIn(a_src, i32), None)
    for j in range(n):
        assert (a_dst[4 * j:4 * j + 4] == np.arange(4 * me, 4 * me + 4) + 1000 * j).all()
    assert not _rshmem.alltoall_tensors(0, n, _StandIn(a_dst, i32), _StandIn(a_src[:2], i32),
                                        None)
    rshmem.barrier_all()
    for a in (x, a_src, a_dst):
        rshmem.free(a)
