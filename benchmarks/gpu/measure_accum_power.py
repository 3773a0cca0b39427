"""Measure, on a real Hopper GPU (issue 21 components; needs CUDA and PyTorch):

1. **FP8 fast accumulation on and off** on the same shapes (``torch._scaled_mm``'s
   ``use_fast_accum``, i.e. cuBLASLt's ``CUBLASLT_MATMUL_DESC_FAST_ACCUM``, what Transformer
   Engine's ``use_split_accumulator`` turns off for dgrad and wgrad): the two settings
   alternate in short windows on each shape so both see the same clock, and each window
   records its mean SM clock, so the time per clock is compared too.
2. **Burst against sustained**: a GEMM right after the GPU has idled (the first ~50 ms run
   before the power controller lowers the clock) and the same GEMM after seconds of load.
3. **HBM streaming power**: a device-to-device copy of 4 GiB, back to back, its bandwidth,
   board power and clock.

    python benchmarks/gpu/measure_accum_power.py --shapes benchmarks/gpu/shapes.json --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from measure_gemms import make, start_sampler, time_fn


def windows(fns, seconds, sampler, rounds=2):
    """Each of ``fns`` (name -> callable) run for ``seconds`` per window, alternating, for
    ``rounds`` rounds; per name the GPU seconds per call and the mean SM clock of its
    windows."""
    acc = {k: [0.0, 0, []] for k in fns}
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    est = {}
    for k, fn in fns.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        s.record()
        for _ in range(3):
            fn()
        e.record()
        torch.cuda.synchronize()
        est[k] = s.elapsed_time(e) / 3e3
    for _ in range(rounds):
        for k, fn in fns.items():
            n = max(8, int(seconds / max(est[k], 1e-6)))
            t0 = time.time()
            done = 0
            while done < n:
                c = min(128, n - done)
                s.record()
                for _ in range(c):
                    fn()
                e.record()
                torch.cuda.synchronize()
                acc[k][0] += s.elapsed_time(e) / 1e3
                acc[k][1] += c
                done += c
            t1 = time.time()
            if sampler:
                w = sampler.window(t0 + 0.1 * (t1 - t0), t1)
                if w:
                    acc[k][2].append(w["sm_mhz_mean"])
    return {k: dict(seconds_per_iter=v[0] / v[1], iters=v[1],
                    sm_mhz_mean=(sum(v[2]) / len(v[2]) if v[2] else None))
            for k, v in acc.items()}


def burst(fn, n, sampler, h, idle_s=2.0):
    """``n`` calls right after ``idle_s`` of idling: GPU seconds per call, clock samples."""
    torch.cuda.synchronize()
    time.sleep(idle_s)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    t1 = time.time()
    out = dict(iters=n, seconds_per_iter=s.elapsed_time(e) / 1e3 / n, wall_s=t1 - t0)
    if sampler:
        out["clocks"] = [x[2] for x in sampler.samples if t0 <= x[0] <= t1]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=0.15)
    args = ap.parse_args()
    dev = torch.device("cuda")
    h, sampler = start_sampler(0.005)
    os.makedirs(args.out, exist_ok=True)
    res = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__)
    # 2. burst against sustained, first (the GPU idle before)
    bs = []
    for m, n, k, dt, iters in ((8192, 8192, 8192, "bf16", 20), (8192, 8192, 8192, "fp8", 40),
                               (4096, 14336, 8192, "bf16", 40), (4096, 14336, 8192, "fp8", 80)):
        fn = make(m, n, k, dt, "fprop", dev)
        fn()
        b = burst(fn, iters, sampler, h)
        sus = time_fn(fn, 3.0, sampler, h)
        r = dict(m=m, n=n, k=k, dtype=dt, burst=b, sustained=sus,
                 burst_tflops=2 * m * n * k / b["seconds_per_iter"] / 1e12,
                 sustained_tflops=2 * m * n * k / sus["seconds_per_iter"] / 1e12)
        bs.append(r)
        print("burst", json.dumps({x: r[x] for x in ("m", "n", "k", "dtype", "burst_tflops",
                                                      "sustained_tflops")}),
              b.get("clocks", [])[:12], sus.get("sm_mhz_mean"), flush=True)
        del fn
    res["burst"] = bs
    # 3. HBM streaming power
    src = torch.randint(0, 256, (2 ** 32,), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    r = time_fn(lambda: dst.copy_(src), 4.0, sampler, h)
    r["tb_per_s_read_plus_write"] = 2 * src.numel() / r["seconds_per_iter"] / 1e12
    res["hbm_copy_4gib"] = r
    print("copy", json.dumps(r), flush=True)
    src = dst = None
    torch.cuda.empty_cache()
    # 1. fast accumulation on and off
    shapes = json.load(open(args.shapes))
    seen, acc = set(), []
    for sh in shapes:
        key = (sh["m"], sh["n"], sh["k"])
        if sh["dtype"] != "fp8" or key in seen:
            continue
        seen.add(key)
        fns = {"fast": make(*key, "fp8", "fprop", dev), "split": make(*key, "fp8", "dgrad", dev)}
        try:
            w = windows(fns, args.seconds, sampler)
        except Exception as ex:
            w = dict(error=repr(ex))
        w.update(m=key[0], n=key[1], k=key[2])
        if "fast" in w:
            w["split_over_fast"] = w["split"]["seconds_per_iter"] / w["fast"]["seconds_per_iter"]
        acc.append(w)
        print("acc", json.dumps(w), flush=True)
        del fns
        torch.cuda.empty_cache()
    res["fast_accum"] = acc
    json.dump(res, open(os.path.join(args.out, "accum_power.json"), "w"), indent=1)
    if sampler:
        sampler.stop = True


if __name__ == "__main__":
    main()
