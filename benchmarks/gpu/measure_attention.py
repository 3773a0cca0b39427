"""Measure causal attention forward and forward+backward through PyTorch's scaled-dot-product
attention on a real GPU (cuDNN and FlashAttention-2 backends), at the per-GPU shapes of
diptych's system rows (issue 21: component checks). Needs CUDA and PyTorch.

    python benchmarks/gpu/measure_attention.py --out DIR

FLOPs are counted as the kernels' papers count them for a causal mask: forward
``4·b·h·s²·d / 2``, backward 2.5× the forward (FlashAttention-2, Dao 2023, Sec. 4.1).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

#: (name, q heads, kv heads, sequence, head dim): per GPU at the rows' TP (no CP split)
CASES = [("llama-3-70b TP4", 16, 2, 8192, 128), ("llama-3-70b TP4 s4096", 16, 2, 4096, 128),
         ("llama-3-8b TP1", 32, 8, 8192, 128), ("gpt3-175b TP4", 24, 24, 2048, 128),
         ("grok-1 TP4", 12, 2, 8192, 128)]
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def bench(fn, seconds=0.3):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    n = max(5, int(seconds / max(s.elapsed_time(e) / 1e3, 1e-6)))
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3 / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--power", action="store_true",
                    help="instead: each case's forward + backward back to back for "
                         "--seconds with the board power (energy counter) and SM clock")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    if args.power:
        return power(args)
    os.makedirs(args.out, exist_ok=True)
    res = []
    for name, hq, hkv, s, d in CASES:
        q = torch.randn(1, hq, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        # GQA: K and V expanded to the query heads (as TE does before a kernel without GQA)
        k = torch.randn(1, hkv, s, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, hkv, s, d, device="cuda", dtype=torch.bfloat16)
        k = k.repeat_interleave(hq // hkv, 1).requires_grad_()
        v = v.repeat_interleave(hq // hkv, 1).requires_grad_()
        fwd_flops = 4 * hq * s * s * d / 2
        for bname, be in BACKENDS.items():
            r = dict(case=name, backend=bname, q_heads=hq, kv_heads=hkv, seq=s, head_dim=d)
            try:
                with sdpa_kernel(be):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    g = torch.randn_like(out)
                    r["fwd_s"] = bench(lambda: F.scaled_dot_product_attention(
                        q, k, v, is_causal=True))

                    def fb():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        o.backward(g)
                    r["fwd_bwd_s"] = bench(fb)
                r["bwd_s"] = r["fwd_bwd_s"] - r["fwd_s"]
                r["fwd_tflops"] = fwd_flops / r["fwd_s"] / 1e12
                r["bwd_tflops"] = 2.5 * fwd_flops / r["bwd_s"] / 1e12
            except Exception as ex:
                r["error"] = repr(ex)[:300]
            res.append(r)
            print(json.dumps(r), flush=True)
    json.dump(dict(torch=torch.__version__, cudnn=torch.backends.cudnn.version(),
                   device=torch.cuda.get_device_name(0), attention=res),
              open(os.path.join(args.out, "attention.json"), "w"), indent=1)


def power(args):
    """Sustained forward + backward of each case on each backend: time per call, board power
    and SM clock (the sampler and energy counter of measure_gemms.py)."""
    from measure_gemms import start_sampler, time_fn
    h, sampler = start_sampler(0.01)
    os.makedirs(args.out, exist_ok=True)
    res = []
    for name, hq, hkv, s, d in CASES:
        if "s4096" in name:
            continue
        q = torch.randn(1, hq, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, hq, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, hq, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(1, hq, s, d, device="cuda", dtype=torch.bfloat16)
        for bname, be in BACKENDS.items():
            def fb():
                with sdpa_kernel(be):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
            r = dict(case=name, backend=bname, q_heads=hq, seq=s, head_dim=d)
            try:
                r.update(time_fn(fb, args.seconds, sampler, h))
                r["fwd_bwd_tflops"] = 3.5 * 4 * hq * s * s * d / 2 / r["seconds_per_iter"] / 1e12
            except Exception as ex:
                r["error"] = repr(ex)[:300]
            res.append(r)
            print(json.dumps(r), flush=True)
    json.dump(dict(torch=torch.__version__, device=torch.cuda.get_device_name(0),
                   attention_power=res),
              open(os.path.join(args.out, "attention_power.json"), "w"), indent=1)
    if sampler:
        sampler.stop = True


if __name__ == "__main__":
    main()
