"""Measure, on a real Hopper GPU, the GEMMs diptych's system rows run (issue 21: component
calibration), with the power and SM clock each one holds, and the sustained power of a large
BF16 and FP8 GEMM. Not part of the package or CI: it needs CUDA and PyTorch.

    python benchmarks/gpu/measure_gemms.py --shapes benchmarks/gpu/shapes.json --out DIR

Each GEMM ``C[m×n] = A[m×k] · B[k×n]`` runs as the stacks behind the rows run it: BF16
through ``torch.matmul`` (cuBLAS/cuBLASLt, as Transformer Engine's BF16 GEMMs); FP8 through
``torch._scaled_mm`` (cuBLASLt, per-tensor scales, E4M3 × E4M3, BF16 out, the ``TN`` layout
Hopper's FP8 tensor cores need), with ``use_fast_accum`` on for forward GEMMs and off for the
gradients, as Transformer Engine sets ``use_split_accumulator`` (False for fprop, True for
dgrad/wgrad). Inputs are random normal (FP8: scaled so the largest value sits near E4M3's
448, as delayed scaling does), because zeros or constants draw less power. Each shape runs
back to back for ``--seconds`` after a warm-up, timed with CUDA events; power comes from the
driver's energy counter over the same window, the SM clock from NVML samples every 10 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

import torch

try:
    import pynvml
except ImportError:          # pragma: no cover
    pynvml = None


class Sampler(threading.Thread):
    """NVML samples (t, power W, SM MHz, throttle reasons) every ``period_s``."""

    def __init__(self, handle, period_s=0.01):
        super().__init__(daemon=True)
        self.h, self.period, self.samples, self.stop = handle, period_s, [], False

    def run(self):
        while not self.stop:
            t = time.time()
            try:
                p = pynvml.nvmlDeviceGetPowerUsage(self.h) / 1e3
                c = pynvml.nvmlDeviceGetClockInfo(self.h, pynvml.NVML_CLOCK_SM)
                r = REASONS(self.h) if REASONS else 0
                tc = pynvml.nvmlDeviceGetTemperature(self.h, pynvml.NVML_TEMPERATURE_GPU)
                self.samples.append((t, p, c, r, tc))
            except Exception:   # pragma: no cover
                pass
            time.sleep(self.period)

    def window(self, t0, t1):
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return {}
        reasons = 0
        for x in s:
            reasons |= x[3]
        return dict(power_w_mean=statistics.fmean(x[1] for x in s),
                    sm_mhz_mean=statistics.fmean(x[2] for x in s),
                    sm_mhz_min=min(x[2] for x in s), sm_mhz_max=max(x[2] for x in s),
                    temp_c_max=max(x[4] for x in s), throttle_reasons=reasons, samples=len(s))


#: the clock-event (throttle) reasons call: renamed in newer NVML bindings
REASONS = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
           or getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)) if pynvml else None


def start_sampler(period_s=0.01):
    """(NVML handle, a running :class:`Sampler`), or (None, None) where NVML cannot be read."""
    if not pynvml:
        return None, None
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None, None
    sampler = Sampler(h, period_s)
    sampler.start()
    return h, sampler


def energy_j(h):
    """The driver's energy counter in joules (NaN where it cannot be read)."""
    try:
        return pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3
    except Exception:
        return float("nan")


def make(m, n, k, dtype, kind, dev):
    a = torch.randn(m, k, device=dev)
    b = torch.randn(n, k, device=dev)           # B stored as [n, k]: the TN layout
    if dtype == "bf16":
        a, bt = a.to(torch.bfloat16), b.to(torch.bfloat16).t()
        return lambda: torch.matmul(a, bt)
    f8 = torch.float8_e4m3fn
    a8, b8 = (a * 80).to(f8), (b * 80).to(f8).t()
    one = torch.tensor(1.0 / 80, device=dev)
    fast = kind == "fprop"
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast)


def time_fn(fn, seconds, sampler, h):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(3):
        fn()
    e.record()
    torch.cuda.synchronize()
    est = s.elapsed_time(e) / 3 / 1e3
    iters = max(10, int(seconds / max(est, 1e-6)))
    # chunks of at most 128 launches, each timed by its own events and synchronised, so the
    # launch queue never fills while the GIL is held (the NVML sampler thread keeps running)
    t0, e0 = time.time(), energy_j(h)
    gpu_s, done = 0.0, 0
    while done < iters:
        c = min(128, iters - done)
        s.record()
        for _ in range(c):
            fn()
        e.record()
        torch.cuda.synchronize()
        gpu_s += s.elapsed_time(e) / 1e3
        done += c
    t1, e1 = time.time(), energy_j(h)
    out = dict(iters=iters, seconds_per_iter=gpu_s / iters,
               energy_power_w=(e1 - e0) / (t1 - t0))
    if sampler:
        out.update(sampler.window(t0 + 0.2 * (t1 - t0), t1))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=0.4)
    ap.add_argument("--sustain", type=float, default=8.0)
    args = ap.parse_args()
    dev = torch.device("cuda")
    meta = dict(torch=torch.__version__, cuda=torch.version.cuda,
                device=torch.cuda.get_device_name(0),
                sms=torch.cuda.get_device_properties(0).multi_processor_count,
                started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    h, sampler = start_sampler()
    if h is not None:
        meta.update(driver=str(pynvml.nvmlSystemGetDriverVersion()),
                    power_limit_w=pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3,
                    max_sm_mhz=pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                    max_mem_mhz=pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM))
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    # idle
    torch.cuda.synchronize()
    time.sleep(1.5)
    t = time.time()
    e0 = energy_j(h)
    time.sleep(2.0)
    meta["idle"] = dict(energy_power_w=(energy_j(h) - e0) / (time.time() - t),
                        **(sampler.window(t, time.time()) if sampler else {}))
    print("meta", json.dumps(meta), flush=True)
    shapes = json.load(open(args.shapes))
    # heat up as a training step would, then the shapes back to back
    big = make(8192, 8192, 8192, "bf16", "fprop", dev)
    time_fn(big, 3.0, sampler, h)
    res = []
    for i, sh in enumerate(shapes):
        fn = make(sh["m"], sh["n"], sh["k"], sh["dtype"], sh["kind"], dev)
        try:
            r = time_fn(fn, args.seconds, sampler, h)
        except Exception as ex:     # record and go on
            r = dict(error=repr(ex))
        r.update({x: sh[x] for x in ("m", "n", "k", "dtype", "kind")})
        if "seconds_per_iter" in r:
            r["tflops"] = 2 * sh["m"] * sh["n"] * sh["k"] / r["seconds_per_iter"] / 1e12
        res.append(r)
        print(i, json.dumps(r), flush=True)
        del fn
        torch.cuda.empty_cache()
    json.dump(dict(meta=meta, gemms=res), open(os.path.join(args.out, "gemms.json"), "w"),
              indent=1)
    # sustained: a large GEMM of each precision for --sustain seconds, its time series
    sus = {}
    for dt in ("bf16", "fp8"):
        fn = make(8192, 8192, 8192, dt, "fprop", dev)
        torch.cuda.synchronize()
        time.sleep(1.0)
        t0 = time.time()
        n0 = len(sampler.samples) if sampler else 0
        r = time_fn(fn, args.sustain, sampler, h)
        r["series"] = [(round(x[0] - t0, 3), x[1], x[2], x[3], x[4])
                       for x in (sampler.samples[n0:] if sampler else [])]
        r["tflops"] = 2 * 8192 ** 3 / r["seconds_per_iter"] / 1e12
        sus[dt] = r
        print("sustain", dt, {k: v for k, v in r.items() if k != "series"}, flush=True)
    json.dump(sus, open(os.path.join(args.out, "sustain.json"), "w"))
    if sampler:
        sampler.stop = True


if __name__ == "__main__":
    main()
