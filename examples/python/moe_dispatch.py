"""Expert-parallel MoE dispatch and combine from Python, on torch tensors.

Every PE routes its tokens to its top-k of E experts (8 per PE), sends them to the PEs that hold
those experts (rshmem.ep.Buffer.dispatch), runs a stand-in expert on what it received (expert e
multiplies by 1 + e / E), and brings the outputs back weighted (combine). Then the same with
the low-latency pair. Each PE checks its combined tokens against the same layer computed
locally (sum over the top-k of weight * scale(expert) * token) and prints one line; the job
ends with "moe_dispatch.py: OK on N PEs" from PE 0.

With --fp8 the tokens travel as float8_e4m3fn with one float32 scale per 128 elements
(scale = block amax / 448, as MoE layers quantize them): dispatch((x, scales), ...), the
stand-in expert dequantizes and writes bfloat16, the combine is bfloat16. The check then allows
the fp8 rounding too: 2^-4 of each element's magnitude (e4m3 keeps 3 mantissa bits) on top of
the bf16 tolerance.

Needs one GPU per PE (or PEs sharing GPUs under MPS), all on one host. On the CPU backend it
prints the runtime's refusal and exits 0 without dispatching anything.

Run:  rshmemrun -n 4 python examples/python/moe_dispatch.py [--fp8]
      torchrun --nproc-per-node 4 examples/python/moe_dispatch.py [--fp8]
"""

import sys

try:
    import torch  # before rshmem.init(), which then makes rshmem's GPU torch's current device
except ImportError:  # the CPU backend needs no torch
    torch = None

import rshmem


def say(text):
    sys.stdout.write(text + "\n")  # one write per line: the PEs share stdout
    sys.stdout.flush()


def layer(x, idx, w, e_all):
    """The MoE layer computed locally in fp32: out[t] = sum_j w[t, j] * scale(idx[t, j]) * x[t]."""
    scales = 1.0 + idx.clamp(min=0).to(torch.float32) / e_all
    coef = torch.where(idx >= 0, w * scales, torch.zeros_like(w)).sum(dim=1, keepdim=True)
    return coef * x.to(torch.float32)


def quantize(x):
    """Per 128-element block: scale = max(amax, 1e-4) / 448, q = float8_e4m3fn(x / scale)."""
    xb = x.float().unflatten(-1, (-1, 128))
    s = xb.abs().amax(dim=-1).clamp(min=1e-4) / 448
    return (xb / s.unsqueeze(-1)).to(torch.float8_e4m3fn).flatten(-2), s.contiguous()


def dequantize(q, s):
    return (q.float().unflatten(-1, (-1, 128)) * s.unsqueeze(-1)).flatten(-2)


def main():
    fp8 = "--fp8" in sys.argv[1:]
    with rshmem.init():
        me, n = rshmem.my_pe(), rshmem.n_pes()
        e_all, hidden, k, max_tokens = 8 * n, 1024, 4, 128
        if rshmem.backend() != "gpu":
            try:
                rshmem.ep.Buffer(e_all, hidden, k, max_tokens, "bfloat16")
            except rshmem.Error as e:
                say(f"{me}: {e}; nothing dispatched")
            return
        if torch is None:
            raise SystemExit("moe_dispatch.py: the GPU backend needs torch")
        lx = e_all // n
        t_n = max_tokens - 16 * (me % 4)  # the PEs pass different numbers of tokens
        g = torch.Generator(device="cuda").manual_seed(1234 + me)
        x = torch.randn((t_n, hidden), generator=g, device="cuda").to(torch.bfloat16)
        scores = torch.randn((t_n, e_all), generator=g, device="cuda")
        top, idx = scores.topk(k, dim=1)              # k distinct experts per token
        idx = idx.contiguous()
        w = torch.softmax(top, dim=1).contiguous()    # float32 routing weights
        want = layer(x, idx, w, e_all)
        tol = 2.0 ** -6 * want.abs().max().item() + 1e-3
        # fp8: each element also moves by up to 2^-4 of itself (measured as error / allowance).
        allow = want.abs() * (2.0 ** -4 if fp8 else 0.0) + tol
        dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
        xin = quantize(x) if fp8 else x                # the (x, scales) pair for fp8
        with rshmem.ep.Buffer(e_all, hidden, k, max_tokens, dtype, low_latency=True) as buf:
            # Normal mode: every token once per destination PE, per-expert contiguous output.
            buf.dispatch(xin, idx, w)
            experts = buf.per_expert()                # L views [rows_l, hidden] (host sync)
            if fp8:                                   # L (x, scales) pairs: dequantize, bf16
                experts = [dequantize(q, s).to(torch.bfloat16) for q, s in experts]
            ys = [v * (1.0 + (me * lx + i) / e_all) for i, v in enumerate(experts)]
            out = buf.combine(torch.cat(ys))          # [t_n, hidden], on the current stream
            buf.check()
            err = ((out.float() - want).abs() / allow).max().item() if t_n else 0.0
            rows = sum(v.shape[0] for v in experts)
            # Low-latency mode: every (token, expert) pair into its expert's block.
            got = buf.ll_dispatch(xin, idx)
            sc = torch.tensor([1.0 + (me * lx + i) / e_all for i in range(lx)],
                              device="cuda").to(torch.bfloat16).view(lx, 1, 1, 1)
            if fp8:                                   # y in the output's layout, bf16
                ll_out = buf.ll_combine((dequantize(*got.x) * sc).to(torch.bfloat16), w)
            else:
                got.x.mul_(sc)                        # the stand-in expert, in place
                ll_out = buf.ll_combine(None, w)
            buf.check()
            ll_err = ((ll_out.float() - want).abs() / allow).max().item() if t_n else 0.0
            ll_rows = int(got.count.sum().item())
        ok = err <= 1.0 and ll_err <= 1.0
        say(f"{me}: {'fp8, ' if fp8 else ''}{t_n} tokens; received {rows} expert rows (low "
            f"latency {ll_rows}); combine max error / tolerance {err:.3g}, low latency "
            f"{ll_err:.3g} (<= 1 passes; bf16 part {tol:.3g})"
            f"{'' if ok else ' FAILED'}")
        flag = rshmem.zeros(1, torch.int32)          # symmetric: 1 where this PE passed
        flag.fill_(1 if ok else 0)
        rshmem.reduce(rshmem.TEAM_WORLD, flag, flag, "min")  # in place, on the torch stream
        all_ok = int(flag.item()) == 1
        rshmem.free(flag)
        if me == 0:
            say(f"moe_dispatch.py: {'OK' if all_ok else 'FAILED'} on {n} PEs"
                f"{' (fp8)' if fp8 else ''}")
    if not all_ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
