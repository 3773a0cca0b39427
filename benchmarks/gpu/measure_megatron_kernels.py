"""Time Megatron-Core's own elementwise fusions and the gap between dependent kernels on a real
GPU, at the per-GPU shapes of diptych's system rows (issue 21: component calibration).
Needs CUDA and PyTorch (>= 2.2, whose ``torch.compile`` is Megatron-Core's ``jit_fuser``).

    python benchmarks/gpu/measure_megatron_kernels.py --out DIR

The functions are Megatron-Core's, restated op for op from core_v0.10.0 (the same source at
core_r0.9.0 and core_r0.11.0): ``megatron/core/fusions/fused_bias_swiglu.py`` (``swiglu``,
``swiglu_back``), ``fused_bias_geglu.py`` (``geglu``, ``geglu_back``), ``fused_bias_gelu.py``
(``bias_gelu``, ``bias_gelu_back``) and ``fused_bias_dropout.py``
(``bias_dropout_add_fused_train``), each compiled as ``megatron/core/jit.py`` compiles it
(``jit_fuser = torch.compile`` from torch 2.2). Each case is compiled on a code object of
its own, for its one shape (static), as each rank of a run sees one shape (a second shape
through one code object recompiles it with dynamic shapes, a slower kernel). Timing: in
``--rounds`` rounds over all cases, each case queues 20 calls, each behind a 256 MiB read that
flushes L2 (clean lines: nothing dirty left to write back), with no synchronisation between
them, and takes the Triton kernels' own device time from torch.profiler (what the GPU
spends, not the host); the median of the rounds, with NVML's SM clock over each window.
Round 0 also times one call by CUDA events, the compiled and the eager function (host
included). The backward functions get a dense gradient, as training passes.

``copy`` is a device-to-device clone of 1 GiB (bytes read + written over time): the rate
diptych's vector unit streams at, against which each kernel's fraction is taken with
diptych's own byte count of the op (each case's bytes).

``launch`` (:func:`launch_gap`): dependent one-element kernels queued behind GEMMs,
(time − GEMMs' time) per kernel, eager and replayed from a CUDA graph; at this script's 2,000
the launch queue fills and the host sets the pace (measure_cross_entropy.py runs 200).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
import types

import torch
import torch.nn.functional as F

from measure_gemms import start_sampler

# --- Megatron-Core core_v0.10.0, megatron/core/fusions/* (restated) -----------------------


def swiglu(y):
    y_1, y_2 = torch.chunk(y, 2, -1)
    return F.silu(y_1) * y_2


def swiglu_back(g, y):
    y_1, y_2 = torch.chunk(y, 2, -1)
    return torch.cat(
        (g * torch.sigmoid(y_1) * (1 + y_1 * (1 - torch.sigmoid(y_1))) * y_2, g * F.silu(y_1)), -1)


def geglu(y):
    y_1, y_2 = torch.chunk(y, 2, -1)
    return (y_1 * 0.5 * (1.0 + torch.tanh(0.79788456 * y_1 * (1 + 0.044715 * y_1 * y_1)))) * y_2


def geglu_back(g, y):
    y_1, y_2 = torch.chunk(y, 2, -1)
    tanh_out = torch.tanh(0.79788456 * y_1 * (1 + 0.044715 * y_1 * y_1))
    ff = 0.5 * y_1 * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * y_1 * y_1)) + 0.5 * (
        1 + tanh_out)
    return torch.cat(((g * y_2) * ff, g * (y_1 * 0.5 * (1.0 + tanh_out))), -1)


def bias_gelu(bias, y):
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def bias_gelu_back(g, bias, y):
    x = bias + y
    tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (
        1 + tanh_out)
    return ff * g


def bias_dropout_add_train(x, bias, residual, prob: float):
    x = x + bias
    out = torch.nn.functional.dropout(x, p=prob, training=True)
    return residual + out


# --- cases: (name, function, args maker, diptych's bytes read + written) ---------------------
# Shapes per GPU from diptych's lowering of the system rows (benchmarks/validate_system.py):
# tokens x ffn per rank. diptych's bytes: a gated forward reads 2 halves and writes 1 (BF16),
# its backward reads the gradient and 2 halves and writes 2; GeLU reads 1 (the bias is
# negligible) and writes 1, its backward reads 2 and writes 1; the bias-dropout-add reads x
# and the residual and writes 1 (its backward is not timed here: autograd's).

def _gated(t, f, dev):
    y = torch.randn(t, 2 * f, device=dev, dtype=torch.bfloat16)
    g = torch.randn(t, f, device=dev, dtype=torch.bfloat16)
    return y, g


def cases(dev):
    out = []
    for name, t, f in (("swiglu llama-3.1-8b CP2 (4096 x 14336)", 4096, 14336),
                       ("swiglu llama-3.1-70b TP4 CP2 (4096 x 7168)", 4096, 7168),
                       ("swiglu Liger's shape (8192 x 14336)", 8192, 14336)):
        out.append((name + " fwd", swiglu, lambda t=t, f=f: (_gated(t, f, dev)[0],), t * f * 6))
        out.append((name + " bwd", swiglu_back,
                    lambda t=t, f=f: tuple(reversed(_gated(t, f, dev))), t * f * 10))
    for name, t, f in (("geglu grok-1 expert (8192 x 8192)", 8192, 8192),):
        out.append((name + " fwd", geglu, lambda t=t, f=f: (_gated(t, f, dev)[0],), t * f * 6))
        out.append((name + " bwd", geglu_back,
                    lambda t=t, f=f: tuple(reversed(_gated(t, f, dev))), t * f * 10))
    t, f = 2048, 12288

    def gelu_args():
        return (torch.randn(f, device=dev, dtype=torch.bfloat16),
                torch.randn(t, f, device=dev, dtype=torch.bfloat16))

    out.append(("bias_gelu gpt3-175b TP4 (2048 x 12288) fwd", bias_gelu, gelu_args, t * f * 4))
    out.append(("bias_gelu gpt3-175b TP4 (2048 x 12288) bwd", bias_gelu_back,
                lambda: (torch.randn(t, f, device=dev, dtype=torch.bfloat16),) + gelu_args(),
                t * f * 6))
    for t in (512, 2048):           # GPT-3's sequence-parallel shard (2,048 / TP 4), and whole
        out.append((f"bias_dropout_add gpt3-175b ({t} x 12288, p 0.1) fwd",
                    bias_dropout_add_train, lambda t=t: cases_bda(dev, t), t * 12288 * 7))
    return out


def cases_bda(dev, t=2048, h=12288):
    """GPT-3's bias-dropout-add arguments (x, bias, residual, p) at TP 4's 2,048 tokens."""
    return (torch.randn(t, 1, h, device=dev, dtype=torch.bfloat16),
            torch.randn(h, device=dev, dtype=torch.bfloat16),
            torch.randn(t, 1, h, device=dev, dtype=torch.bfloat16), 0.1)


def time_call(fn, args, reps, flush):
    """Median and best seconds of ``fn(*args)`` over ``reps`` calls, each after reading
    ``flush`` (L2 left holding clean lines of another buffer: none of the call's data and
    nothing dirty to write back), CUDA events around the call (host included)."""
    ts = []
    sink = torch.empty((), device=flush.device)
    for _ in range(reps):
        torch.sum(flush, 0, out=sink)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(*args)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts), min(ts)


def copy_rate(reps, flush):
    x = torch.empty(2 ** 30 // 2, device="cuda", dtype=torch.bfloat16).normal_()
    med, _ = time_call(lambda a: a.clone(), (x,), reps, flush)
    return 2 * x.numel() * 2 / med


def launch_gap(n=2000, gemms=16, warm=3, runs=5):
    """``n`` dependent one-element kernels (``x.add_(1)``) queued behind ``gemms`` 8192³
    GEMMs, eager and replayed from a CUDA graph: (time − the GEMMs' time) / n, the median of
    ``runs``. With the launch queue never full (``n`` a few hundred) it is the device's own gap
    between dependent kernels; at ``n`` 2,000 the queue fills and the host sets the pace."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    x = torch.zeros(1, device="cuda")

    def head():
        for _ in range(gemms):
            torch.mm(a, a)

    def run(tail):
        for _ in range(warm):
            head()
            tail()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        head()
        tail()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / 1e3

    def eager():
        for _ in range(n):
            x.add_(1)

    base = statistics.median(run(lambda: None) for _ in range(runs))
    with_eager = statistics.median(run(eager) for _ in range(runs))
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        eager()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        eager()
    with_graph = statistics.median(run(g.replay) for _ in range(runs))
    return {"kernels": n, "gemms_s": base, "eager_per_kernel_us": (with_eager - base) / n * 1e6,
            "graph_per_kernel_us": (with_graph - base) / n * 1e6}


def own_code(fn, name):
    """``fn`` with a fresh copy of its code object (same behaviour, its own dynamo cache)."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{abs(hash(name))}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__,
                              fn.__closure__)


def smi():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.mem,power.draw",
                               "--format=csv"], capture_output=True, text=True).stdout
    except OSError:
        return ""


def queued_seconds(fn, flush, calls=20, sampler=None):
    """(device seconds per call of the Triton kernels ``fn`` launches, kernels per call, the
    NVML window): ``calls`` × (read ``flush``; ``fn()``) queued with no synchronisation in
    between, the kernels' own device time from torch.profiler (the flush's reduction and any
    host time left out)."""
    from torch.profiler import ProfilerActivity, profile
    sink = torch.empty((), device=flush.device)
    fn()
    torch.cuda.synchronize()
    t0 = time.time()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            torch.sum(flush, 0, out=sink)
            fn()
        torch.cuda.synchronize()
    t1 = time.time()
    ev = [e for e in prof.events() if e.device_type.name == "CUDA" and "triton" in e.name]
    win = sampler.window(t0, t1) if sampler else {}
    return sum(e.device_time for e in ev) / 1e6 / calls, len(ev) / calls, win


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    flush = torch.empty(2 ** 28 // 4, device="cuda")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "smi": smi()}
    _, sampler = start_sampler()
    res["copy_Bps"] = copy_rate(args.reps, flush)
    print(f"copy {res['copy_Bps'] / 1e12:.3f} TB/s", flush=True)
    compiled = []
    for name, fn, make, nbytes in cases("cuda"):
        # a code object of its own per case: dynamo caches compiled code per code object, and
        # a second shape through the same one recompiles it with dynamic shapes (a slower
        # kernel than the static one each rank of a run compiles for its single shape)
        fn = own_code(fn, name)
        cfn = torch.compile(fn)
        cfn(*make())
        torch.cuda.synchronize()
        compiled.append((name, fn, cfn, make, nbytes))
    per_round = {c[0]: [] for c in compiled}
    extra = {}
    for r in range(args.rounds):            # rounds over all cases: drift hits each alike
        for name, fn, cfn, make, nbytes in compiled:
            a = make()                      # fresh tensors each round
            sec, nk, win = queued_seconds(lambda a=a: cfn(*a), flush, sampler=sampler)
            per_round[name].append(sec)
            extra.setdefault(name, []).append((nk, win))
            if r == 0:
                extra[name].append((time_call(cfn, a, args.reps, flush)[0],
                                    time_call(fn, a, max(5, args.reps // 3), flush)[0]))
            del a
            torch.cuda.empty_cache()
    rows = []
    for name, fn, cfn, make, nbytes in compiled:
        med = statistics.median(per_round[name])
        rate = nbytes / med
        (nk, _), (events_s, eag) = extra[name][0], extra[name][1]
        wins = [w for n_, w in [extra[name][0]] + extra[name][2:]]
        rows.append({"name": name, "seconds": med, "rounds_s": per_round[name],
                     "kernels_per_call": nk, "nvml": wins, "events_one_call_s": events_s,
                     "eager_events_s": eag, "diptych_bytes": nbytes, "Bps": rate,
                     "fraction_of_copy": rate / res["copy_Bps"]})
        mhz = [w.get("sm_mhz_mean", float("nan")) for w in wins]
        print(f"{name:58s} {med * 1e6:9.1f} us  {rate / 1e12:6.3f} TB/s  "
              f"{rate / res['copy_Bps']:.3f} of copy  (rounds "
              f"{', '.join(f'{t * 1e6:.1f}' for t in per_round[name])} us at SM "
              f"{', '.join(f'{m:.0f}' for m in mhz)} MHz; {nk:.0f} kernels; one call "
              f"timed by events {events_s * 1e6:.1f}, eager {eag * 1e6:.1f} us)", flush=True)
    del compiled
    # the bias-dropout-add's forward and backward through autograd (its compiled backward:
    # AOTAutograd's): the kernels' device time; diptych's bytes 7 (forward: x and the
    # residual read, the sum and the bool mask written) + 5 (the dropout's backward: the
    # gradient and the mask read, the gradient written) per element
    for t in (512, 2048):
        cbda = torch.compile(own_code(bias_dropout_add_train, f"bda fwd+bwd {t}"))
        x, b, r_, p = (a.requires_grad_() if hasattr(a, "requires_grad_") else a
                       for a in cases_bda("cuda", t))
        g = torch.randn_like(x)

        def fwd_bwd():
            x.grad = b.grad = r_.grad = None   # no accumulation: in a model x is no leaf
            cbda(x, b, r_, p).backward(g)

        secs = [queued_seconds(fwd_bwd, flush, sampler=sampler) for _ in range(args.rounds)]
        sec = statistics.median(s_[0] for s_ in secs)
        nk = secs[0][1]
        nbytes = x.numel() * 12
        rows.append({"name": f"bias_dropout_add gpt3-175b ({t} x 12288, p 0.1) fwd+bwd",
                     "seconds": sec, "rounds_s": [s_[0] for s_ in secs], "kernels_per_call": nk,
                     "nvml": [s_[2] for s_ in secs], "diptych_bytes": nbytes,
                     "Bps": nbytes / sec, "fraction_of_copy": nbytes / sec / res["copy_Bps"]})
        print(f"{rows[-1]['name']:58s} {sec * 1e6:9.1f} us  {nbytes / sec / 1e12:6.3f} TB/s  "
              f"{rows[-1]['fraction_of_copy']:.3f} of copy (rounds "
              f"{', '.join(f'{s_[0] * 1e6:.1f}' for s_ in secs)} us; {nk:.0f} kernels)",
              flush=True)
    res["kernels"] = rows
    res["launch"] = launch_gap()
    print("launch", res["launch"], flush=True)
    res["smi_after"] = smi()
    with open(os.path.join(args.out, "megatron_kernels.json"), "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
