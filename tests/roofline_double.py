"""A roofline test double for ``diptych.sim.simulate``: obviously correct, engine-free.

time = max(FLOPs / peak, DRAM bytes / peak bytes per second) with DRAM bytes the op's
compulsory traffic (each operand in DRAM read once, the output written once if it goes to DRAM;
operands the residency plan keeps on chip cost nothing here); energy from the chip's
own table via :mod:`diptych.arch.energy`. It lets the workload and design-space tests check
aggregation (repeats, overlap, bounds, MFU, reports) independently of the engine. Shared by
``tests/workloads`` and ``tests/dse`` (``tests/`` is on ``sys.path`` through its conftest).
"""

from __future__ import annotations

from dataclasses import dataclass

from diptych.arch.energy import energy_j
from diptych.workloads.ops import Gemm


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
    compute_cycles: float = 0.0      # t_compute × clock: the unlimited-bandwidth schedule
    dram_bytes_per_s: float = 0.0    # achieved: compulsory bytes ÷ seconds


def roofline(op, chip) -> Stats:
    bw = chip.dram_bytes_per_s
    if isinstance(op, Gemm):
        # element bytes only, as the engine moves them: a block-scaled operand's scales are
        # loaded by its own op (sim/run/precision_ops.py)
        rd = ((op.a_bytes - op.a_scale_bytes if op.a_source == "dram" else 0.0)
              + (op.b_bytes - op.b_scale_bytes if op.b_source == "dram" else 0.0))
        wr = op.c_bytes - op.c_scale_bytes if op.c_dest == "dram" else 0.0
        peak = chip.peak_ops_per_s[op.compute_dtype]
        kind = "gemm"
        counts = {"macs": {op.compute_dtype: op.macs}}
    else:
        rd, wr = op.dram_read_bytes, op.dram_write_bytes
        peak = chip.vector_ops_per_s
        kind = "vector"
        counts = {"vector_ops": op.flops}
    t_c = op.flops / peak
    t_m = (rd + wr) / bw if rd + wr else 0.0
    s = max(t_c, t_m)
    e = energy_j(chip, dram_bytes=rd + wr, sram_bytes=2 * (rd + wr), seconds=s, **counts)
    return Stats(op.name, kind, s, op.flops, rd, wr, op.flops / (peak * s) if s else 0.0,
                 "compute" if t_c >= t_m else "memory", e, t_c * chip.clock_hz,
                 (rd + wr) / s if s else 0.0)
