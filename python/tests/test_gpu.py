"""The package on the GPU backend with torch: tensors on the GPU symmetric heap, calls ordered on
torch streams, peer tensors, and kernels compiled from Python. Skipped (never passed) without a
GPU backend. Launch: `rshmemrun -n 2 python -m pytest python/tests` on a machine with GPUs."""

import pytest

import rshmem
from rshmem import _rshmem


def me_n():
    return rshmem.my_pe(), rshmem.n_pes()


def test_tensor_zero_copy(gpu):
    torch = gpu
    t = rshmem.zeros((4, 8), torch.bfloat16)
    assert isinstance(t, torch.Tensor) and t.is_cuda and t.dtype == torch.bfloat16
    assert t.device.index == rshmem.device() and t.shape == (4, 8)
    assert _rshmem.heap_contains(t.data_ptr(), t.numel() * t.element_size())
    assert t.data_ptr() in rshmem._core._ALLOCS
    assert (t == 0).all().item()
    rshmem.free(t)


def test_put_is_ordered_on_the_torch_stream(gpu):
    torch = gpu
    me, n = me_n()
    s = torch.cuda.Stream()
    src = rshmem.zeros(1 << 20, torch.float32)
    dst = rshmem.zeros(1 << 20, torch.float32)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # the fill below runs long after the host returns
        src.fill_(me + 1)
        rshmem.put(dst, src, (me + 1) % n, stream=s)
        rshmem.barrier_all(stream=s)
        got = dst.clone()
    s.synchronize()
    assert (got == (me + n - 1) % n + 1).all().item()
    rshmem.free(src)
    rshmem.free(dst)


def test_put_from_a_plain_torch_tensor_and_get_into_one(gpu):
    torch = gpu
    me, n = me_n()
    dst = rshmem.zeros(1000, torch.int32)
    plain = torch.arange(1000, dtype=torch.int32, device="cuda") + 1000 * me
    rshmem.put(dst, plain, (me + 1) % n)  # default: the current stream
    rshmem.barrier_all()
    torch.cuda.synchronize()
    assert (dst.cpu() == torch.arange(1000, dtype=torch.int32) + 1000 * ((me + n - 1) % n)).all()
    back = torch.zeros(1000, dtype=torch.int32, device="cuda")
    rshmem.get(back, dst, (me + 1) % n)
    torch.cuda.synchronize()
    assert (back.cpu() == torch.arange(1000, dtype=torch.int32) + 1000 * me).all()
    rshmem.barrier_all()
    torch.cuda.synchronize()
    rshmem.free(dst)


def test_p_g_and_signals_on_the_stream(gpu):
    torch = gpu
    me, n = me_n()
    x = rshmem.zeros(n, torch.int64)
    sig = rshmem.zeros(1, torch.uint64)
    rshmem.p(x, 7 + me, (me + 1) % n, index=me)
    rshmem.signal_op(sig, 1, (me + 1) % n, op="add")
    rshmem.signal_wait_until(sig, "ge", 1)
    rshmem.barrier_all()
    torch.cuda.synchronize()
    prev = (me + n - 1) % n
    assert x[prev].item() == 7 + prev
    assert rshmem.g(x, (me + 1) % n, index=me) == 7 + me
    rshmem.barrier_all()
    torch.cuda.synchronize()
    rshmem.free(x)
    rshmem.free(sig)


def test_peer_tensor(gpu):
    torch = gpu
    me, n = me_n()
    x = rshmem.zeros(256, torch.float32)
    nxt = (me + 1) % n
    try:
        peer = rshmem.peer_tensor(x, nxt)
    except rshmem.Error as e:
        pytest.skip(f"peer not reachable by load/store here: {e}")
    assert peer.is_cuda and peer.shape == x.shape
    # Another PE's copy has its own address; on 1 PE the "next" PE is this one.
    assert (peer.data_ptr() != x.data_ptr()) == (n > 1)
    peer.fill_(me + 0.25)
    rshmem.barrier_all()
    torch.cuda.synchronize()
    assert (x == (me + n - 1) % n + 0.25).all().item()
    rshmem.free(x)


def test_collectives_on_the_stream(gpu):
    torch = gpu
    me, n = me_n()
    k = 1024
    src = rshmem.empty(n * k, torch.float32)
    dst = rshmem.zeros(n * k, torch.float32)
    src.copy_(torch.arange(n * k, dtype=torch.float32, device="cuda") + 1e6 * me)
    rshmem.alltoall(rshmem.TEAM_WORLD, dst, src)
    exp = torch.cat([torch.arange(me * k, (me + 1) * k, dtype=torch.float32) + 1e6 * i
                     for i in range(n)])
    assert torch.equal(dst.cpu(), exp)
    red = rshmem.zeros(n * k, torch.float32)
    rshmem.reduce(rshmem.TEAM_WORLD, red, src, "sum")
    assert torch.allclose(red.cpu(), torch.arange(n * k, dtype=torch.float32) * n
                          + 1e6 * sum(range(n)))
    b = rshmem.zeros(n * k, torch.float32)
    rshmem.broadcast(rshmem.TEAM_WORLD, b, src, 0)
    assert torch.equal(b.cpu(), torch.arange(n * k, dtype=torch.float32))
    fc = rshmem.zeros(n * n * k, torch.float32)
    rshmem.fcollect(rshmem.TEAM_WORLD, fc, src)
    assert torch.equal(fc.cpu()[me * n * k:(me + 1) * n * k], src.cpu())
    rs = rshmem.zeros(k, torch.float32)
    rshmem.reducescatter(rshmem.TEAM_WORLD, rs, src, "max")
    assert torch.equal(rs.cpu(), torch.arange(me * k, (me + 1) * k, dtype=torch.float32)
                       + 1e6 * (n - 1))
    rshmem.barrier_all()
    torch.cuda.synchronize()
    for a in (src, dst, red, b, fc, rs):
        rshmem.free(a)


KERNEL = r"""
#include "rshmem/rshmem.cuh"
extern "C" __global__ void put_sig(float *dst, const float *src, size_t nbytes, uint64_t *sig,
                                   int peer) {
    rshmem_putmem_signal_block(dst, src, nbytes, sig, 1, RSHMEM_SIGNAL_SET, peer);
}
"""


def test_kernel_device_put_and_signal(gpu):
    torch = gpu
    me, n = me_n()
    k = rshmem.Kernel(KERNEL, "put_sig")
    assert k.param_sizes == [8, 8, 8, 8, 4]
    src = rshmem.empty(4096, torch.float32)
    dst = rshmem.zeros(4096, torch.float32)
    sig = rshmem.zeros(1, torch.uint64)
    src.fill_(me + 3)
    rshmem.barrier_all()
    k(1, 256, dst, src, src.numel() * 4, sig, (me + 1) % n)
    rshmem.signal_wait_until(sig, "eq", 1)  # the stream waits for the peer's signal
    got = dst.clone()
    torch.cuda.synchronize()
    assert (got == (me + n - 1) % n + 3).all().item()
    with pytest.raises(rshmem.Error, match="takes 5 arguments"):
        k(1, 1, dst, src)
    rshmem.barrier_all()
    torch.cuda.synchronize()
    for a in (src, dst, sig):
        rshmem.free(a)


def test_gpu_errors(gpu):
    torch = gpu
    x = rshmem.zeros(4, torch.float32)
    with pytest.raises(rshmem.Error, match="not on the symmetric heap"):
        rshmem.put(torch.zeros(4, device="cuda"), x, 0)
    with pytest.raises(rshmem.Error, match="compil|error"):
        rshmem.Kernel("this is not CUDA", "k")
    rshmem.barrier_all()
    torch.cuda.synchronize()
    rshmem.free(x)
