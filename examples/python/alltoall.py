"""All-to-all from Python: rshmem.alltoall on symmetric torch tensors against
torch.distributed.all_to_all_single (NCCL), checked for equal results and timed per size.

Run on a machine with one GPU per PE:
    torchrun --nproc-per-node 4 examples/python/alltoall.py [--sizes 8,1024,...] [--iters 50]
rshmem joins through torch.distributed's process group (rank 0 makes the unique id and
broadcasts it), so torchrun needs nothing else. Prints one line per size on rank 0 and a JSON
line per size for scripts ("bytes_per_pe", "rshmem_us", "nccl_us").
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

import rshmem


def timed(fn, iters, stream):
    for _ in range(3):
        fn()
    stream.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(iters):
        fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(str(8 << (2 * i)) for i in range(12)),
                    help="bytes per PE (per destination block), comma separated")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rshmem.init(process_group=dist.group.WORLD)
    me, n = rshmem.my_pe(), rshmem.n_pes()
    stream = torch.cuda.current_stream()
    for nbytes in (int(s) for s in args.sizes.split(",")):
        k = max(nbytes // 4, 1)  # float32 elements per destination
        src = rshmem.empty(n * k, torch.float32)
        dst = rshmem.zeros(n * k, torch.float32)
        src.copy_(torch.arange(n * k, device="cuda", dtype=torch.float32) + 1e6 * me)
        ref = torch.empty_like(src)
        rshmem.alltoall(rshmem.TEAM_WORLD, dst, src)
        dist.all_to_all_single(ref, src)
        torch.cuda.synchronize()
        if not torch.equal(dst, ref):
            raise SystemExit(f"PE {me}: rshmem.alltoall differs from all_to_all_single at "
                             f"{nbytes} B per PE")
        t_r = timed(lambda: rshmem.alltoall(rshmem.TEAM_WORLD, dst, src), args.iters, stream)
        t_n = timed(lambda: dist.all_to_all_single(ref, src), args.iters, stream)
        if me == 0:
            print(f"{4 * k:>10} B per PE  rshmem.alltoall {t_r:9.2f} us   "
                  f"all_to_all_single (NCCL) {t_n:9.2f} us   ratio {t_n / t_r:5.2f}", flush=True)
            print(json.dumps({"bytes_per_pe": 4 * k, "pes": n, "rshmem_us": round(t_r, 3),
                              "nccl_us": round(t_n, 3)}), flush=True)
        rshmem.barrier_all()
        torch.cuda.synchronize()
        rshmem.free(src)
        rshmem.free(dst)
    rshmem.finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
