"""rshmem: symmetric-memory PGAS from Python.

Arrays and tensors on rshmem's symmetric heap (NumPy on the CPU backend, torch/CuPy on the GPU
backend, all zero-copy), one-sided puts, gets, atomics and signals, teams and collectives, and
CUDA kernels that call the device library, compiled at run time, and expert-parallel MoE
dispatch/combine on torch tensors (:class:`rshmem.ep.Buffer`). A thin layer over the Rust
runtime crate (``rshmem._rshmem``): every check and message of the runtime is the one raised here
as :class:`rshmem.Error`. Reference: docs/python.md.

Glossary: a *PE* is one process of the job; *symmetric* memory is allocated by every PE together
(:func:`empty`, :func:`zeros`) and has a copy on every PE; *one-sided* calls involve only the
calling PE; *collective* calls must be made by every PE (of the team) in the same order.
"""

from ._rshmem import Error
from ._core import (
    TEAM_NODE,
    TEAM_SHARED,
    TEAM_WORLD,
    Kernel,
    Team,
    alltoall,
    atomic_add,
    atomic_and,
    atomic_compare_swap,
    atomic_fetch,
    atomic_fetch_add,
    atomic_fetch_and,
    atomic_fetch_inc,
    atomic_fetch_or,
    atomic_fetch_xor,
    atomic_inc,
    atomic_or,
    atomic_set,
    atomic_swap,
    atomic_xor,
    backend,
    barrier,
    barrier_all,
    broadcast,
    device,
    empty,
    fcollect,
    fence,
    finalize,
    free,
    g,
    get,
    get_nbi,
    get_unique_id,
    init,
    is_initialized,
    my_pe,
    n_pes,
    p,
    peer_tensor,
    put,
    put_nbi,
    put_signal,
    put_signal_nbi,
    quiet,
    reduce,
    reducescatter,
    signal_fetch,
    signal_op,
    signal_wait_until,
    sync,
    sync_all,
    team_split_strided,
    wait_until,
    zeros,
)
from . import ep

__all__ = [name for name in dir() if not name.startswith("_")]
__version__ = "0.1.0"
