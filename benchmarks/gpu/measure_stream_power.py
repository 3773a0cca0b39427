"""Measure board power and SM clock while a real Hopper GPU streams HBM (issue 21 item 1,
components; needs CUDA and PyTorch): a read-only reduction, a device-to-device copy, and the
weight-streaming products of decode (a BF16 matrix of 8 GiB times a vector, and times 64
columns), each back to back for a few seconds after the GPU has been loaded, with bandwidth
(bytes read + written over time), the energy counter's power and NVML's clock.

    python benchmarks/gpu/measure_stream_power.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from measure_gemms import start_sampler, time_fn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    dev = torch.device("cuda")
    h, sampler = start_sampler(0.01)
    os.makedirs(args.out, exist_ok=True)
    res = {}
    n = 2 ** 32                                   # elements of BF16: 8 GiB
    w = torch.randn(131072, 32768, device=dev, dtype=torch.bfloat16)
    x1 = torch.randn(32768, device=dev, dtype=torch.bfloat16)
    x64 = torch.randn(32768, 64, device=dev, dtype=torch.bfloat16)
    flat = w.view(-1)
    cases = {
        "read_sum_8gib": (lambda: flat.sum(dtype=torch.float32), 2 * n, 0),
        "gemv_b1_8gib": (lambda: torch.mv(w, x1), 2 * n, 0),
        "gemm_b64_8gib": (lambda: torch.matmul(w, x64), 2 * n, 131072 * 64 * 2),
    }
    for name, (fn, rd, wr) in cases.items():
        r = time_fn(fn, args.seconds, sampler, h)
        r["tb_per_s"] = (rd + wr) / r["seconds_per_iter"] / 1e12
        res[name] = r
        print(name, json.dumps(r), flush=True)
    x64 = None
    half = flat[: n // 2]
    dst = torch.empty_like(half)
    r = time_fn(lambda: dst.copy_(half), args.seconds, sampler, h)
    r["tb_per_s"] = 2 * 2 * (n // 2) / r["seconds_per_iter"] / 1e12
    res["copy_4gib"] = r
    print("copy_4gib", json.dumps(r), flush=True)
    json.dump(res, open(os.path.join(args.out, "stream_power.json"), "w"), indent=1)
    if sampler:
        sampler.stop = True


if __name__ == "__main__":
    main()
