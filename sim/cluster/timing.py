"""Simulated compute time of each layer kind for one micro-batch on one rank, memoised.

The ops come from :func:`diptych.sim.cluster.layers.layer_ops`; they are timed with the
library's own :func:`diptych.workloads.run.simulate_workload` (so fused attention, the
engine's memo of op shapes and the ``simulate`` test double all behave as in ``diptych
run``). Collectives are not in these ops: the cluster layer times them on the topology.
Results are memoised per (model, chip, precision, phase, tp, cp, ep, micro-batch, sequence or
decode context), so a plan search simulates each distinct layer shape once.

**All-SRAM chips** (no ``[dram]`` table, e.g. ``groq-lpu``): every tensor of a pipeline stage
(weights, KV cache, activations) lives in the chip's SRAM (the cluster step refuses a plan
whose stage does not fit, :func:`diptych.sim.cluster.step.simulate_cluster_step`), so each op
is timed with all its operands resident (:func:`resident`): a GEMM's A, B and C in the
scratchpads (``a_source``/``b_source``/``c_dest``, its own bytes as ``resident_bytes``, as
:func:`diptych.sim.api.on_chip_gemm` times one), a vector op's and fused attention's reads and
writes at the scratchpad bandwidth. No op touches DRAM. Chips with DRAM are timed as before
(every operand from DRAM), bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from ...arch.chip import Chip
from ...sim.ops import Gemm, Op, VectorOp
from ...workloads.config import ModelConfig
from ...workloads.fused import FusedAttention, on_chip
from ...workloads.graph import Block, Workload
from ...workloads.precision import Precision
from ...workloads.run import simulate_workload
from .layers import LayerOps, layer_ops

_ATTN_OPS = ("attn_scores", "softmax", "attn_pv")


@dataclass(frozen=True)
class LayerTime:
    """Compute seconds of one copy of a layer kind (one micro-batch, one rank) and its
    hardware FLOPs: forward, backward, their attention parts (what ring attention's KV
    exchange can hide behind), and the forward ops selective recomputation re-runs; the
    energy (J, one rank) of each, as ``diptych run`` counts it."""

    ops: LayerOps
    fwd_s: float
    bwd_s: float
    attn_fwd_s: float = 0.0
    attn_bwd_s: float = 0.0
    selective_s: float = 0.0
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    energy_j: float = 0.0          # forward + backward
    fwd_energy_j: float = 0.0
    bwd_energy_j: float = 0.0
    selective_energy_j: float = 0.0


def resident(op: Op) -> Op:
    """``op`` with every operand resident on chip (module docstring, "All-SRAM chips"): a
    GEMM's A, B and C in the scratchpads with its own bytes held there, a vector op's reads
    and writes in the scratchpads, fused attention's whole traffic at the scratchpad
    bandwidth (its parts are timed on chip by :func:`~diptych.workloads.fused.fused_stats`).
    Other ops are returned unchanged."""
    if isinstance(op, Gemm):
        return dataclasses.replace(on_chip(op),
                                   resident_bytes=int(op.a_bytes + op.b_bytes + op.c_bytes))
    if isinstance(op, FusedAttention):
        return dataclasses.replace(op, scratchpad_bytes=op.read_bytes + op.write_bytes,
                                   shared_buffer_bytes=0.0)
    if isinstance(op, VectorOp):
        return on_chip(op)
    return op


def _sum(ops, chip, simulate, stage) -> tuple[float, float, float, float]:
    """(seconds, attention seconds, GEMM FLOPs, energy) of ops run in sequence (on a chip
    without DRAM, with every operand resident: :func:`resident`)."""
    if not ops:
        return 0.0, 0.0, 0.0, 0.0
    if not chip.has_dram:
        ops = [resident(op) for op in ops]
    w = Workload("train", (Block("x", 1, tuple(ops), stage),), tokens=1, batch=1)
    t = simulate_workload(w, chip, simulate=simulate)
    attn = sum(r["seconds"] for r in t["layers"]
               if r["kind"] == "attention" or r["op"].split(".")[0] in _ATTN_OPS)
    return t["seconds"], attn, w.flops(), t["energy_j"]


@lru_cache(maxsize=4096)
def layer_times(m: ModelConfig, chip: Chip, p: Precision, *, phase: str, tp: int, cp: int,
                ep: int, micro_batch: int, seq: int, context: int = 0, gen: int = 1,
                sequence_parallel: bool = True, attention: str = "fused",
                simulate: Callable | None = None) -> dict[str, LayerTime]:
    """:class:`LayerTime` of each layer kind (:func:`~.layers.layer_ops` keys: the lowering's
    layer blocks, ``embedding``, ``head``); ``context``/``gen``: decode's cache before the
    first of ``gen`` steps."""
    lo = layer_ops(m, p, phase=phase, tp=tp, cp=cp, ep=ep, micro_batch=micro_batch, seq=seq,
                   context=context, gen=gen, sequence_parallel=sequence_parallel,
                   attention=attention)
    out = {}
    for kind, ops in lo.items():
        f, fa, ff, fe = _sum(ops.forward, chip, simulate, "forward")
        b, ba, bf, be = _sum(ops.backward, chip, simulate, "backward")
        sel, _, _, se = _sum(ops.selective_ops, chip, simulate, "recompute")
        out[kind] = LayerTime(ops=ops, fwd_s=f, bwd_s=b, attn_fwd_s=fa, attn_bwd_s=ba,
                              selective_s=sel, fwd_flops=ff, bwd_flops=bf, energy_j=fe + be,
                              fwd_energy_j=fe, bwd_energy_j=be, selective_energy_j=se)
    return out
