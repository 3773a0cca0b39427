"""Simulated compute time of each layer kind for one micro-batch on one rank, memoised.

The ops come from :func:`diptych.sim.cluster.layers.layer_ops`; they are timed with the
library's own :func:`diptych.sim.run.summed.simulate_workload` (so fused attention, the
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

**Execution** (``execution``, as ``diptych run --execution``): ``"sum"`` (above: each op alone,
times added; the cluster step hides the tensor-parallel collectives behind the layer's compute
by its overlap rule) or ``"schedule"`` (the default of ``run``, :func:`layer_times` with
``execution="schedule"``): each layer kind is timed as the makespan of its own program, by
the same :func:`~diptych.sim.run.scheduled.schedule_workload` that times ``diptych run``
(residency, fusion into GEMM epilogues, the list schedule over arrays, vector unit, DMA and
links, each op's and each collective's launch): the **forward** as a program of the layer's
forward block (one repeat), the **backward** as the time the layer's backward block adds to
that program (the forward-and-backward pair minus the forward alone: the backward reads the
forward's saved tensors by name, so it is scheduled beside its forward). The layer's
tensor-parallel collectives are nodes of those programs, timed on the cluster's topology
(:class:`TpLinks`: the plan's tensor-parallel group), so what they expose is what the
schedule leaves exposed (``tp_exposed_fwd_s``/``tp_exposed_bwd_s``: the seconds each holds
up the program alone, :func:`~diptych.sim.run.scheduled._exposed`); ``fwd_s``/``bwd_s`` are
the makespans less that exposure (compute and fixed costs). The context- and
expert-parallel collectives of the block cost their launch only here (0 s on the links):
the cluster step times them on the topology with its ring-attention and all-to-all overlap
rules, as under ``"sum"`` (their launches count as the layer's compute). The step-sync fixed cost is the cluster step's, not a layer's (not
counted here). Selective recomputation's re-run ops are timed summed in both executions.

**Precision** (docs/precision.md): in both executions every GEMM of a layer kind — forward,
and the backward's data- and weight-gradient GEMMs, which carry the dtypes
:func:`~diptych.workloads.train.backward_ops` gives them — brings the ops the chip runs beside
it for its precision (:func:`~diptych.sim.run.precision_ops.with_precision_ops`: the block scales'
stream, the vector unit's rescale, the weights' dequantisation), as ``diptych run`` adds them
to its workload; ops that need none (BF16, FP8, INT8 on their own rates) leave the timing bit
for bit as without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from ...arch.chip import Chip
from .. import energy_parts as EP
from ..api import all_resident
from ...workloads.ops import Gemm, Op, VectorOp
from ...workloads.config import ModelConfig
from ...workloads.fused_attention import FusedAttention, on_chip
from ...workloads.graph import Workload
from ...workloads.program import Block
from ...workloads.moe import Routing
from ...workloads.precision import Precision
from ..run.scheduled import schedule_workload
from ..run.precision_ops import with_precision_ops
from ..run.node import _default_simulate
from ..run.summed import simulate_workload
from ...workloads.train import _backward_block
from .collectives import collective
from .layers import LayerOps, forward_workload, layer_ops
from ..run.interference import Loads, OpLoad
from ..run.tp_overlap import SubBlockGemms
from ..run.tp_overlap import gemm_mapping
from ..run.tp_overlap import overlap_gemms as run_overlap_gemms
from .topology import GroupShape, Network

_ATTN_OPS = ("attn_scores", "softmax", "attn_pv")


@dataclass(frozen=True)
class LayerTime:
    """Compute seconds of one copy of a layer kind (one micro-batch, one rank) and its
    hardware FLOPs: forward, backward, their attention parts (what ring attention's KV
    exchange can hide behind), and the forward ops selective recomputation re-runs; the
    energy (J, one rank) of each, as ``diptych run`` counts it, and the same by component
    (``*_energy_parts``, :mod:`diptych.sim.energy_parts`)."""

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
    tp_exposed_fwd_s: float | None = None    # execution="schedule": see the module docstring
    tp_exposed_bwd_s: float | None = None
    # the GEMMs of each sub-block whose all-reduce the chip's [tp_overlap] stack overlaps
    # (training), by sub-block ("attn", "mlp"): :func:`overlap_gemms`; and the part of
    # tp_exposed_*_s those all-reduces hold (sim/run/tp_overlap.py replaces it)
    tp_gemms: Mapping[str, SubBlockGemms] = field(default_factory=dict, compare=False)
    tp_lapped_fwd_s: float = 0.0
    tp_lapped_bwd_s: float = 0.0
    fwd_energy_parts: Mapping[str, float] = field(default_factory=EP.zero, compare=False)
    bwd_energy_parts: Mapping[str, float] = field(default_factory=EP.zero, compare=False)
    selective_energy_parts: Mapping[str, float] = field(default_factory=EP.zero,
                                                        compare=False)
    # the forward's and the backward's compute ops as a collective beside them sees them
    # (sim/run/interference.py); empty on a chip without a [comm_kernels] table
    fwd_loads: Loads = field(default_factory=Loads, compare=False)
    bwd_loads: Loads = field(default_factory=Loads, compare=False)


@dataclass(frozen=True)
class TpLinks:
    """A collective's seconds in a scheduled layer program (``collective_time`` of
    :func:`~diptych.sim.run.scheduled.schedule_workload`): a tensor-parallel one (tagged
    ``tp``) on the topology, over the plan's tensor-parallel group ``shape`` of ``net``
    (:func:`~.collectives.collective`, as the cluster step times it); any other 0 s (the
    cluster step times context- and expert-parallel collectives itself). ``free``: every
    collective 0 s (a waterfall step, :class:`~diptych.sim.run.variant.Variant`)."""

    shape: GroupShape
    net: Network
    free: bool = False

    def __call__(self, op) -> float:
        if self.free or "tp" not in op.tags:
            return 0.0
        return collective(op.kind, op.bytes, self.shape, self.net).seconds


def resident(op: Op) -> Op:
    """``op`` with every operand resident on chip (module docstring, "All-SRAM chips"): a
    GEMM's A, B and C in the scratchpads with its own bytes held there, a vector op's reads
    and writes in the scratchpads, fused attention's whole traffic at the scratchpad
    bandwidth (its parts are timed on chip by :func:`~diptych.sim.run.attention.fused_stats`).
    Other ops are returned unchanged."""
    if isinstance(op, Gemm):
        return all_resident(op)
    if isinstance(op, FusedAttention):
        return dataclasses.replace(op, scratchpad_bytes=op.read_bytes + op.write_bytes,
                                   shared_buffer_bytes=0.0)
    if isinstance(op, VectorOp):
        return on_chip(op)
    return op


def _sum(ops, chip, simulate, stage, records: list | None = None
         ) -> tuple[float, float, float, float, dict]:
    """(seconds, attention seconds, GEMM FLOPs, energy, energy by component) of ops run in
    sequence (on a chip without DRAM, with every operand resident: :func:`resident`); their
    per-op records appended to ``records`` if given."""
    if not ops:
        return 0.0, 0.0, 0.0, 0.0, EP.zero()
    def one(ops) -> Workload:
        return Workload("train", (Block.of_ops("x", 1, tuple(ops), stage),), tokens=1, batch=1)

    w = with_precision_ops(one(ops), chip)
    if not chip.has_dram:
        w = one(resident(op) for op in w.blocks[0].ops)
    t = simulate_workload(w, chip, simulate=simulate)
    if records is not None:
        records.extend(t["layers"])
    attn = sum(r["seconds"] for r in t["layers"]
               if r["kind"] == "attention" or r["op"].split(".")[0] in _ATTN_OPS)
    return t["seconds"], attn, w.flops(), t["energy_j"], t["energy_breakdown_j"]


def _attention_s(records) -> float:
    return sum(r["seconds"] * r["repeat"] for r in records
               if r["kind"] == "attention" or r["op"].split(".")[0] in _ATTN_OPS)


def _scheduled(block: Block, w: Workload, p: Precision, chip, simulate, links: TpLinks
               ) -> tuple[dict, dict | None]:
    """The schedules of one layer kind's program (module docstring, "Execution"): the
    forward block alone, and (training) the forward-and-backward pair."""
    b1 = dataclasses.replace(block, repeat=1)
    info = {"micro_batches": 1, "dp": 1, "steps": 1}

    def sched(blocks):
        return schedule_workload(with_precision_ops(Workload(
            w.phase, blocks, tokens=w.tokens, batch=w.batch, info=info), chip), chip,
            simulate=simulate, collective_time=links)
    return sched((b1,)), (sched((b1, _backward_block(b1, p))) if w.phase == "train"
                          else None)


def _split(r: dict, tp_names: frozenset, stage: str | None = None
           ) -> tuple[float, float, float, float, dict]:
    """(makespan less the step sync, exposed seconds of the tensor-parallel collectives —
    the ops named ``tp_names`` —, attention seconds, compute energy, the same by component)
    of a layer schedule ``r``; the exposure, attention and energy of ``stage``'s records
    only if given. (The launches of the other collectives, which take 0 s on the links
    here, count as the layer's compute.)"""
    recs = [x for x in r["layers"] if stage is None or x["stage"] == stage]
    compute = [x for x in recs if x["bound"] != "communication"]
    energy = sum(x["energy_j"] * x["repeat"] for x in compute)
    return (r["seconds"] - r["step_sync_s"],
            sum(x["exposed_total_s"] for x in recs if x["op"] in tp_names),
            _attention_s(recs), energy,
            EP.summed((x["energy_breakdown_j"], x["repeat"]) for x in compute))


def overlap_gemms(ops: LayerOps, chip: Chip, simulate, tp: int = 1
                  ) -> dict[str, SubBlockGemms]:
    """:func:`~diptych.sim.run.tp_overlap.overlap_gemms` of a layer kind on a
    tensor-parallel group of ``tp`` (each GEMM timed alone as ``execution="sum"`` times it,
    :func:`_sum`)."""
    return run_overlap_gemms(ops.forward, ops.backward, {c.name for c in ops.tp}, chip,
                             lambda op, on: _sum((op,), on, simulate, "forward")[0],
                             gemm_mapping(simulate), tp)


def _loads(records, ops, chip: Chip, simulate) -> Loads:
    """The compute records of a layer pass (summed or scheduled) as
    :func:`~diptych.sim.run.interference.group_slowdown` needs them: seconds (all repeats),
    the engine's mapping of each GEMM among ``ops`` (by name), DRAM-bound, launch- or
    latency-bound, attention or not."""
    mapping = gemm_mapping(simulate)
    gemms = {o.name: o for o in ops if isinstance(o, Gemm)}

    def load(r) -> OpLoad:
        attention = r["kind"] == "attention" or r["op"].split(".")[0] in _ATTN_OPS
        gemm = gemms.get(r["op"])
        # a latency-bound vector op waits on its launch, not on cores; attention's and a
        # GEMM's tiles run on the cores whatever their roof
        return OpLoad(r["seconds"] * r["repeat"], mapping(gemm, chip) if gemm else None,
                      r["bound"] == "memory", attention,
                      r["bound"] == "latency" and not attention and gemm is None)
    return Loads(load(r) for r in records if r["bound"] != "communication")


def op_loads(ops, chip: Chip, simulate) -> Loads:
    """:func:`_loads` of ``ops`` each timed alone as :func:`_sum` times them."""
    records: list = []
    _sum(ops, chip, simulate, "forward", records)
    return _loads(records, ops, chip, simulate)


def _flops(ops) -> float:
    return Workload("train", (Block.of_ops("x", 1, tuple(ops)),), tokens=1, batch=1).flops() \
        if ops else 0.0


@lru_cache(maxsize=4096)
def layer_times(m: ModelConfig, chip: Chip, p: Precision, *, phase: str, tp: int, cp: int,
                ep: int, micro_batch: int, seq: int, context: int = 0, gen: int = 1,
                sequence_parallel: bool = True, attention: str = "fused",
                simulate: Callable | None = None, execution: str = "sum",
                tp_links: TpLinks | None = None, routing: Routing = Routing()
                ) -> dict[str, LayerTime]:
    """:class:`LayerTime` of each layer kind (:func:`~.layers.layer_ops` keys: the lowering's
    layer blocks, ``embedding``, ``head``); ``context``/``gen``: decode's cache before the
    first of ``gen`` steps. ``execution``: ``"sum"`` or ``"schedule"`` (module docstring,
    "Execution"; the latter needs ``tp_links``, the plan's tensor-parallel group on the
    topology)."""
    if execution not in ("sum", "schedule"):
        raise ValueError(f"execution must be sum or schedule, not {execution!r}")
    if execution == "schedule" and tp_links is None:
        raise ValueError("execution='schedule' needs tp_links (the tensor-parallel group on "
                         "the topology)")
    lo = layer_ops(m, p, phase=phase, tp=tp, cp=cp, ep=ep, micro_batch=micro_batch, seq=seq,
                   context=context, gen=gen, sequence_parallel=sequence_parallel,
                   attention=attention, routing=routing)
    blocks = {}
    if execution == "schedule":
        w = forward_workload(m, p, phase=phase, tp=tp, cp=cp, ep=ep, micro_batch=micro_batch,
                             seq=seq, context=context, gen=gen, attention=attention,
                             routing=routing, sequence_parallel=sequence_parallel)
        blocks = {b.name: b for b in w.blocks}
        sim = simulate or _default_simulate()
    out = {}
    for kind, ops in lo.items():
        tpg = overlap_gemms(ops, chip, simulate, tp) if tp > 1 and phase == "train" else {}
        sel, _, _, se, sp = _sum(ops.selective_ops, chip, simulate, "recompute")
        loaded = chip.comm_kernels is not None and chip.has_dram    # (interference.py)
        rec_f: list | None = [] if loaded else None
        rec_b: list | None = [] if loaded else None
        if execution == "sum":
            f, fa, ff, fe, fp = _sum(ops.forward, chip, simulate, "forward", rec_f)
            b, ba, bf, be, bp = _sum(ops.backward, chip, simulate, "backward", rec_b)
            tpf = tpb = None
            lapf = lapb = 0.0
        else:
            ff, bf = _flops(ops.forward), _flops(ops.backward)
            rf, rp = _scheduled(blocks[kind], w, p, chip, sim, tp_links)
            names = frozenset([n for c in ops.tp for n in (c.name, f"{c.name}.bwd")]
                              + [c.name for c in ops.tp_bwd])
            # the collectives an overlapping stack would take off the chain: their exposure
            lapped = frozenset(n for sub in tpg for n in (f"{sub}_all_reduce",
                                                          f"{sub}_all_reduce.bwd"))
            f, tpf, fa, fe, fp = _split(rf, names)
            f -= tpf
            if loaded:
                rec_f.extend(rf["layers"])
            lapf = _split(rf, lapped)[1] if lapped else 0.0
            b, ba, be, tpb, bp = 0.0, 0.0, 0.0, None, EP.zero()
            lapb = 0.0
            if rp is not None:
                pair, tpb, ba, be, bp = _split(rp, names, "backward")
                if loaded:
                    rec_b.extend(x for x in rp["layers"] if x["stage"] == "backward")
                b = max(0.0, pair - (f + tpf) - tpb)
                lapb = _split(rp, lapped, "backward")[1] if lapped else 0.0
        loads = {}
        if loaded:
            sim_ = simulate if execution == "sum" else sim
            loads = dict(fwd_loads=_loads(rec_f, ops.forward, chip, sim_),
                         bwd_loads=_loads(rec_b, ops.backward, chip, sim_))
        out[kind] = LayerTime(ops=ops, fwd_s=f, bwd_s=b, attn_fwd_s=fa, attn_bwd_s=ba,
                              selective_s=sel, fwd_flops=ff, bwd_flops=bf, energy_j=fe + be,
                              fwd_energy_j=fe, bwd_energy_j=be, selective_energy_j=se,
                              tp_exposed_fwd_s=tpf, tp_exposed_bwd_s=tpb, tp_gemms=tpg,
                              tp_lapped_fwd_s=lapf, tp_lapped_bwd_s=lapb,
                              fwd_energy_parts=fp, bwd_energy_parts=bp,
                              selective_energy_parts=sp, **loads)
    return out
