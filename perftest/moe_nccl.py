#!/usr/bin/env python3
"""The expert-parallel MoE exchange through PyTorch + NCCL, the way MoE layers without custom
kernels do it, timed like rshmem's moe_bench for the comparison in docs/moe.md:

    torchrun --nproc_per_node 4 perftest/moe_nccl.py [--tokens 128,512,4096,8192] [--json]

dispatch: the destination ranks of every token from its top-k experts (E experts, E/n per
rank); the tokens permuted into per-destination order, each token once per destination rank;
counts by all_to_all_single, a host sync (.tolist()) for the split sizes; the tokens, their
expert indices and weights by all_to_all_single; on the receiver, the (token, local expert)
pairs sorted by expert and the rows gathered into per-expert contiguous order (permute).
combine: the expert outputs (identity expert: the permuted rows themselves) weighted and summed
per received token in fp32 (unpermute, index_add_), cast back, all_to_all_single back, summed
per source token in fp32 (index_add_), cast to the dtype.

Timing: per iteration every rank synchronizes, meets the others in a barrier, then times one
dispatch (or combine) from its start to the end of torch.cuda.synchronize() on the host clock;
a rank's value is the median over --iters iterations after --warmup; the row reports the
slowest rank's median. nvlink_mb: bytes of token rows this rank sends to other ranks in
dispatch (the same count rshmem's moe_bench reports); sent_mb adds its own rows.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", default="128,512,4096,8192")
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", action="store_true")
    return p.parse_args()


class Layer:
    """One rank's inputs and the state dispatch hands to combine."""

    def __init__(self, x, idx, w, n, experts):
        self.x, self.idx, self.w, self.n = x, idx, w, n
        self.L = experts // n


def dispatch(s):
    n, L = s.n, s.L
    T, k = s.idx.shape
    dev = s.x.device
    dest = s.idx // L                                                # [T, k]
    mask = torch.zeros(T, n, dtype=torch.bool, device=dev)
    mask.scatter_(1, dest, torch.ones_like(dest, dtype=torch.bool))  # token -> destination ranks
    sel = mask.t().nonzero()                                         # (rank, token), rank-major
    s.send_tok = sel[:, 1]
    send_counts = mask.sum(0)                                        # [n]
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    s.send_splits = send_counts.tolist()                             # host sync
    s.recv_splits = recv_counts.tolist()
    R = sum(s.recv_splits)
    send_x = s.x.index_select(0, s.send_tok)
    # Each row carries the token's experts as local indices on its destination (-1 elsewhere).
    dst_rank = sel[:, 0:1]
    loc = s.idx.index_select(0, s.send_tok)
    loc = torch.where(loc // L == dst_rank, loc % L, torch.full_like(loc, -1))
    send_w = s.w.index_select(0, s.send_tok)
    recv_x = torch.empty(R, s.x.shape[1], dtype=s.x.dtype, device=dev)
    recv_loc = torch.empty(R, k, dtype=loc.dtype, device=dev)
    recv_w = torch.empty(R, k, dtype=send_w.dtype, device=dev)
    dist.all_to_all_single(recv_x, send_x, s.recv_splits, s.send_splits)
    dist.all_to_all_single(recv_loc, loc, s.recv_splits, s.send_splits)
    dist.all_to_all_single(recv_w, send_w, s.recv_splits, s.send_splits)
    # Permute: (received token, local expert) pairs sorted by expert, rows gathered.
    tok, slot = (recv_loc >= 0).nonzero(as_tuple=True)
    e = recv_loc[tok, slot]
    order = torch.argsort(e, stable=True)
    s.row_tok = tok[order]
    s.row_w = recv_w[tok, slot][order]
    s.expert_x = recv_x.index_select(0, s.row_tok)                  # per-expert contiguous
    s.expert_counts = torch.bincount(e, minlength=L)
    s.R = R


def combine(s):
    y = s.expert_x                                                   # identity expert
    part = torch.zeros(s.R, y.shape[1], dtype=torch.float32, device=y.device)
    part.index_add_(0, s.row_tok, y.float() * s.row_w[:, None])      # unpermute + weights
    part = part.to(y.dtype)
    back = torch.empty(len(s.send_tok), y.shape[1], dtype=y.dtype, device=y.device)
    dist.all_to_all_single(back, part, s.send_splits, s.recv_splits)
    out = torch.zeros(s.x.shape, dtype=torch.float32, device=y.device)
    out.index_add_(0, s.send_tok, back.float())
    s.out = out.to(s.x.dtype)


def nccl_version():
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)


def timed(fn, s, iters, warmup):
    vals = []
    for it in range(warmup + iters):
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(s)
        torch.cuda.synchronize()
        if it >= warmup:
            vals.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(vals)


def main():
    a = parse()
    rank = int(os.environ["RANK"])
    n = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    es = 2 if a.dtype == "bf16" else 4
    if rank == 0 and not a.json:
        print(f"# moe_nccl: {n} ranks, E {a.experts}, k {a.topk}, H {a.hidden} {a.dtype}; "
              f"us: slowest rank's median of {a.iters} after {a.warmup} warm-ups (host clock)")
        print(f"{'T':>6} {'dispatch_us':>11} {'combine_us':>10} {'nvlinkMB':>9} "
              f"{'disp_GB/s':>10} {'comb_GB/s':>10} {'tokens/s':>12} {'check':>6}")
    for T in [int(t) for t in a.tokens.split(",")]:
        g = torch.Generator(device="cuda").manual_seed(1000 + rank)
        x = (torch.randn(T, a.hidden, device="cuda", generator=g)).to(dtype)
        idx = torch.rand(T, a.experts, device="cuda", generator=g).topk(a.topk, dim=1).indices
        w = torch.rand(T, a.topk, device="cuda", generator=g)
        s = Layer(x, idx, w, n, a.experts)
        dus = timed(dispatch, s, a.iters, a.warmup)
        cus = timed(combine, s, a.iters, a.warmup)
        # Identity expert: out[t] = sum_j w_j x_t (within bf16 rounding of the partial sums).
        want = x.float() * w.sum(1, keepdim=True)
        err = (s.out.float() - want).abs().max().item() if T else 0.0
        tol = (x.float().abs() * w.sum(1, keepdim=True)).max().item() / 64 if T else 0.0
        ok = err <= tol + 1e-6
        sent = torch.tensor(s.send_splits, dtype=torch.float64)
        remote_mb = (sent.sum() - sent[rank]).item() * a.hidden * es / 1e6
        all_mb = sent.sum().item() * a.hidden * es / 1e6
        v = torch.tensor([dus, cus, 0.0 if ok else 1.0], dtype=torch.float64, device="cuda")
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        m = torch.tensor([remote_mb, all_mb], dtype=torch.float64, device="cuda")
        dist.all_reduce(m, op=dist.ReduceOp.SUM)
        dmax, cmax, bad = v.tolist()
        rmb, amb = (m / n).tolist()
        if rank == 0:
            row = {
                "bench": "moe_nccl", "dtype": a.dtype, "tokens": T, "hidden": a.hidden,
                "topk": a.topk, "experts": a.experts, "pes": n, "iters": a.iters,
                "warmup": a.warmup, "dispatch_us": round(dmax, 3), "combine_us": round(cmax, 3),
                "total_us": round(dmax + cmax, 3), "sent_mb": round(amb, 3),
                "nvlink_mb": round(rmb, 3),
                "dispatch_nvlink_gbps": round(rmb * 1e6 / (dmax * 1e-6) / 1e9, 3),
                "combine_nvlink_gbps": round(rmb * 1e6 / (cmax * 1e-6) / 1e9, 3),
                "tokens_per_s": round(T / ((dmax + cmax) * 1e-6), 1),
                "check": "ok" if bad == 0 else "FAIL",
                "torch": torch.__version__, "nccl": nccl_version(),
                "device": torch.cuda.get_device_name(),
            }
            if a.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"{T:>6} {dmax:>11.1f} {cmax:>10.1f} {rmb:>9.1f} {rmb * 1e3 / dmax:>10.1f} "
                      f"{rmb * 1e3 / cmax:>10.1f} {T / ((dmax + cmax) * 1e-6):>12.0f} "
                      f"{row['check']:>6}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
