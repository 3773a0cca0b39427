"""A tiny closed-form evaluator for testing the sweep machinery without the engine.

Not a performance model: time = max(compute, weight traffic) for a fixed 8e9-parameter toy, so
that rows depend on the chip and workload in an obvious way. ``batch == 13`` raises, to test
failure recording; ``FAKE_EVAL_DELAY_S`` slows each point down, to test killing a sweep.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
import time

PARAMS = 8e9


def toy_eval(chip, workload):
    delay = float(os.environ.get("FAKE_EVAL_DELAY_S", "0"))
    if delay:
        time.sleep(delay)
    batch = workload.get("batch", 1)
    if batch == 13:
        raise RuntimeError("unlucky batch 13")
    tokens = batch * (workload.get("prompt", 2048) if workload["phase"] == "prefill" else 1)
    flops = 2 * PARAMS * tokens
    peak = chip.peak_ops_per_s[chip.default_dtype]
    seconds = max(flops / peak, PARAMS * 2 / chip.dram_bytes_per_s)
    energy = 0.5 * chip.tdp_w * seconds
    return {"seconds": seconds, "tokens_per_s": tokens / seconds, "energy_j": energy,
            "power_w": energy / seconds, "bound": "compute" if flops / peak > seconds / 2
            else "memory", "fits": True}


# ---- a roofline double for diptych.sim.simulate, to run the real workloads without the engine


@dataclass(frozen=True)
class Stats:
    name: str
    kind: str
    seconds: float
    flops: float
    dram_read_bytes: float
    dram_write_bytes: float
    utilization: float
    bound: str
    energy_j: float


def roofline(op, chip) -> Stats:
    """time = max(compute at peak, compulsory DRAM traffic at peak bandwidth); energy from the
    chip's own table via diptych.arch.energy."""
    from diptych.arch.energy import energy_j
    from diptych.sim.ops import Gemm

    bw = chip.dram_bytes_per_s
    if isinstance(op, Gemm):
        rd, wr = op.a_bytes + op.b_bytes, op.c_bytes
        peak = chip.peak_ops_per_s[op.compute_dtype]
        t_c = op.flops / peak
        kind = "gemm"
        counts = {"macs": {op.compute_dtype: op.macs}}
    else:
        rd, wr = op.read_bytes, op.write_bytes
        peak = chip.vector_ops_per_s
        t_c = op.flops / peak
        kind = "vector"
        counts = {"vector_ops": op.flops}
    t_m = (rd + wr) / bw
    s = max(t_c, t_m)
    e = energy_j(chip, dram_bytes=rd + wr, sram_bytes=2 * (rd + wr), seconds=s, **counts)
    return Stats(op.name, kind, s, op.flops, rd, wr, op.flops / (peak * s) if s else 0.0,
                 "compute" if t_c >= t_m else "memory", e)


def roofline_eval(chip, workload):
    """The default sweep evaluator with the engine replaced by :func:`roofline`."""
    from diptych.tools.dse.evaluate import result_metrics, run_phase

    return result_metrics(chip, run_phase(chip, workload, simulate=roofline))


def roofline_run(chip, model, **kw):
    """``run_workload`` with the engine replaced by :func:`roofline` (for compare tests)."""
    from diptych.workloads import run_workload

    return run_workload(chip, model, simulate=roofline, **kw)
