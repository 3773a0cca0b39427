"""A roofline stand-in for the engine, for the plan search's first pass.

``seconds = max(FLOPs ÷ peak, compulsory DRAM bytes ÷ peak bandwidth)`` per op (each operand
read once, the output written once). It is optimistic for every op, but it ranks plans by what
separates them — bubbles, communication, recomputation, memory — in microseconds per plan;
:func:`diptych.sim.cluster.search.search_plans` then times the best candidates with the engine.
The returned record has the fields :func:`diptych.sim.run.summed.simulate_workload` and
:func:`diptych.sim.run.attention.fused_stats` read.
"""

from __future__ import annotations

from types import SimpleNamespace

from ...workloads.ops import Gemm


def roofline_simulate(op, chip) -> SimpleNamespace:
    """Roofline time of one Gemm or VectorOp on ``chip`` (module docstring); energy is not
    estimated (0)."""
    if isinstance(op, Gemm):
        # element bytes, as the engine moves them: a block-scaled operand's scales are the
        # GEMM's ``.scales`` op (sim/run/precision_ops.py, charged beside it by the layer timing)
        reads = op.a_element_bytes + op.b_element_bytes
        writes = op.c_element_bytes
        peak, kind = chip.peak_ops_per_s[op.compute_dtype], "gemm"
    else:
        reads, writes = op.read_bytes, op.write_bytes
        peak, kind = chip.vector_ops_per_s, "vector"
    t_compute = op.flops / peak
    t_memory = (reads + writes) / chip.dram_bytes_per_s
    seconds = max(t_compute, t_memory)
    return SimpleNamespace(
        name=op.name, kind=kind, seconds=seconds, flops=op.flops, energy_j=0.0,
        dram_read_bytes=reads, dram_write_bytes=writes,
        utilization=op.flops / (peak * seconds) if seconds else 0.0,
        bound="compute" if t_compute >= t_memory else "memory",
        compute_cycles=t_compute * chip.clock_hz,
        dram_bytes_per_s=(reads + writes) / seconds if seconds else 0.0)


roofline_simulate.timing = "roofline"
