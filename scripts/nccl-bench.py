#!/usr/bin/env python3
"""NCCL's collectives through PyTorch, timed like gpu_perftest --coll (stream time per
collective, back to back, CUDA events, best of 3), for the comparison in docs/bench/gpu.md.

    torchrun --nproc_per_node 4 scripts/nccl-bench.py            # or python3 -m torch.distributed.run

Sizes are bytes per rank (alltoall/all_gather: the block each rank sends to each rank; the
reductions and broadcast: the vector), float32 elements.
"""
import os

import torch
import torch.distributed as dist

SIZES = [8, 1 << 20, 16 << 20]


def timed(fn, iters):
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    best = float("inf")
    fn()
    torch.cuda.synchronize()
    for _ in range(3):
        dist.barrier()
        torch.cuda.synchronize()
        s.record()
        for _ in range(iters):
            fn()
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e) * 1e3 / iters)
    return best


def main():
    rank = int(os.environ["RANK"])
    n = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    for size in SIZES:
        m = max(size // 4, 1)
        iters = 2000 if size <= 65536 else (500 if size <= 1 << 20 else 100)
        src = torch.ones(m * n, device="cuda")
        dst = torch.empty(m * n, device="cuda")
        vec = torch.ones(m, device="cuda")
        out = torch.empty(m, device="cuda")
        rows = {
            "all_to_all": lambda: dist.all_to_all_single(dst, src),
            "all_gather": lambda: dist.all_gather_into_tensor(dst, vec),
            "broadcast": lambda: dist.broadcast(vec, 0),
            "all_reduce": lambda: dist.all_reduce(vec),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(out, src),
        }
        for name, fn in rows.items():
            us = timed(fn, iters)
            if rank == 0:
                print(f'{{"bench":"nccl_{name}","size":{m * 4},"value":{us:.3f},"unit":"us",'
                      f'"note":"{n} ranks, torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}"}}',
                      flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
