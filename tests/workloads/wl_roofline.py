"""A roofline test double for ``diptych.sim.simulate``: obviously correct, engine-free.

time = max(MACs / peak MACs per second, DRAM bytes / peak bytes per second) with DRAM bytes
the op's compulsory traffic (each operand read once, the output written once). It lets the
workload tests check aggregation (repeats, overlap, bounds, MFU) independently of the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from diptych.sim.ops import Gemm


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
        rd, wr = op.a_bytes + op.b_bytes, op.c_bytes
        peak = chip.peak_ops_per_s[op.compute_dtype]
        t_c = op.flops / peak
        kind = "gemm"
    else:
        rd, wr = op.read_bytes, op.write_bytes
        t_c = op.flops / chip.vector_ops_per_s
        peak = chip.vector_ops_per_s
        kind = "vector"
    t_m = (rd + wr) / bw
    s = max(t_c, t_m)
    return Stats(op.name, kind, s, op.flops, rd, wr, op.flops / (peak * s) if s else 0.0,
                 "compute" if t_c >= t_m else "memory", (rd + wr) * 8 * 5e-12 + op.flops * 1e-12,
                 t_c * chip.clock_hz, (rd + wr) / s if s else 0.0)
