"""One training step (or one inference pass) of a model on a cluster under a plan.

:func:`simulate_cluster_step` composes the layers below it:

1. **per-layer compute** of one micro-batch on one rank, simulated
   (:func:`diptych.sim.cluster.timing.layer_times`, memoised across plans);
2. **communication inside a layer**, on the topology (:mod:`diptych.sim.cluster.collectives`,
   groups placed by :mod:`diptych.sim.cluster.topology`): the layer's tensor-parallel
   collectives (their backward mirrors, and again under full recomputation), hidden behind
   the layer's compute with ``overlap_tp`` (``max(0, comm − compute)`` exposed; by default
   in training only: in prefill and decode each all-reduce is on the dependency chain,
   :meth:`~.plan.Plan.tp_overlapped`); ring
   attention's K/V exchange (an all-gather of the ``cp`` chunks forward, all-gather +
   reduce-scatter of dK/dV backward) behind the attention compute with ``overlap_cp``; the
   expert all-to-alls (dispatch and combine, each way), exposed unless ``overlap_ep``; under
   ZeRO-3 the per-layer weight all-gather (forward and backward) and gradient reduce-scatter,
   prefetched behind the layer's compute with ``overlap_dp``;
3. **the pipeline** over devices and micro-batches (:mod:`diptych.sim.cluster.schedule`): the
   event-level simulation (``golden=True``) or its closed form, with the activation send
   between stages (``micro_batch × seq/cp × hidden`` activations, ÷ tp with sequence
   parallelism) on the link between the two stages' ranks; an interleaved or 1F1B schedule on
   a chip whose kernels run in issue order (``kernel_order`` ``issue`` or ``one_queue``: a
   Megatron-Core stack) is played in Megatron-Core's own issue order, its sends meeting
   their peers' receives (:mod:`diptych.sim.cluster.megatron_p2p`);
4. **after the last backward**, per device: the gradient reduction (all-reduce under ZeRO-0,
   reduce-scatter under ZeRO-1/2; routed experts over their expert-data-parallel group),
   bucketed per layer and started as each layer's last backward finishes (``overlap_dp``),
   then (tied embeddings over more than one stage) the first and last stage's all-reduce of
   the embedding's gradient, then AdamW over the rank's shard (timed with the lowering's own
   AdamW op), then ZeRO-1/2's all-gather of the updated weights, hidden behind the next
   step's first forward with ``overlap_dp``. The step ends when the slowest device is done.

**Communication beside compute** (a chip's ``[comm_kernels]``, :mod:`diptych.sim.run.
interference`): every collective of items 2-4 that runs beside compute (ring attention's
exchange, ZeRO's collectives, the expert all-to-alls when overlapped, the gradient buckets,
the parameter all-gather, each pipeline send and receive) holds its channels' cores and
takes DRAM bandwidth while it runs, and the compute beside it is slowed so: the exposed time
of its kind (the pipeline's: the chunk's time) carries it. Without the table, ``max(comm,
compute)`` as above.

**Offload** (``plan.offload``, :mod:`diptych.sim.run.offload`; a chip with ``[dram2]``): with
``optimizer`` the AdamW update reads and writes the master copy and moments in the second tier
(its share of the update's bytes timed on the tier, as a one-node run's tiered op); with
``params`` each layer's weights also live there and are prefetched one layer ahead into the
first tier (ZeRO-Infinity's parameter prefetch): a layer's forward takes the slower of its
compute and its weights' stream at the tier's rate (twice in backward under full
recomputation); the first layer's fetch and the weights' write into the first tier are not
charged, nor is the fetch's energy (``info.offload`` reports it). ``info.offload`` says which
tensors live where and what the slowest device's tier moved.

Reported: ``seconds``, tokens/s, MFU (model FLOPs of the unsplit graph, no recomputation) and
HFU (what the chips execute), the pipeline bubble fraction, exposed communication by kind
(``tp``, ``cp``, ``ep``, ``pp``, ``dp``) on the slowest device, and memory per chip
(:mod:`diptych.sim.cluster.memory`). Inference (``prefill``/``decode``) runs the same layers
forward only, micro-batches streaming through the stages; decode is one representative step
of ``gen``, each layer kind at its own mean keys over the steps.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ...arch.chip import Chip
from ...arch.cluster import Cluster, load_cluster
from ...arch.loader import load_chip
from ...arch.power import TDP_TOLERANCE
from ..support import check_supported
from ...workloads.config import ModelConfig
from ...workloads.graph import Workload
from ...workloads.program import Block
from ...workloads.precision import Precision
from ...workloads.lower import decode_mean, prefill
from ...workloads.params import params_per_chip
from ...workloads.registry import load_model
from ..api import OpTimer
from ..run.node import scenario_precision
from ..run.offload import (OFFLOAD_KINDS, check_offload, offload_capacity_bytes,
                           optimizer_tier_bytes, optimizer_tier_share, param_fetch_seconds,
                           third_tier_share, tier_report)
from ..run.placed import tier2_chip, tier3_chip
from ..run.scenario import Scenario
from ..run.summed import simulate_workload
from ..run.stack import chip_kernel_order, scenario_chip, stack_info
from ..run.variant import Variant, variant_chip, variant_cluster, variant_timer
from ...workloads.recipe import amax_collectives, quantized, weight_cast_op
from ...workloads.train import (ADAMW_CHUNK, adamw_op, grad_norm_op, grad_zero_op,
                               train_step)
from .collectives import CommCost, collective
from .. import energy_parts as EP
from .energy import busy_power_w, step_energy, step_energy_parts
from .layers import forward_workload
from .megatron_p2p import simulate_megatron_pipeline
from .memory import (ClusterMemory, chunk_layers, device_chunks, plan_memory,
                     require_sram_fit)
from .params import layer_params
from .plan import Plan, check_positive, check_plan
from .schedule import PipelineRun, fast_pipeline_seconds, simulate_pipeline
from .timing import LayerTime, TpLinks, layer_times, resident
from ..run.tp_overlap import OverlapCost, costs as overlap_costs, gather_share
from ..protocols import sent_bytes
from ..run.interference import (PIPELINE_PEERS, beside_s, collectives_factor,
                                group_slowdown, held_cores, tax_s, two_streams)
from .topology import GroupShape, Network, bind, group_ranks, group_shape, stage_peer

COMM_KINDS = ("tp", "cp", "ep", "pp", "dp")


@dataclass(frozen=True)
class LayerStep:
    """One copy of a layer kind for one micro-batch on one rank, communication included:
    compute seconds and FLOPs, each collective (``(comm kind, group kind, collective,
    bytes per rank, seconds)``), and the part of each kind's communication left exposed, for
    the forward and the backward pass (backward includes recomputation)."""

    fwd_compute: float
    bwd_compute: float
    colls_fwd: tuple[tuple[str, str, str, float, float], ...]
    colls_bwd: tuple[tuple[str, str, str, float, float], ...]
    exposed_fwd: dict[str, float]
    exposed_bwd: dict[str, float]
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0

    @staticmethod
    def _by_kind(colls) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, _, _, _, secs in colls:
            out[kind] = out.get(kind, 0.0) + secs
        return out

    @property
    def comm_fwd(self) -> dict[str, float]:
        return self._by_kind(self.colls_fwd)

    @property
    def comm_bwd(self) -> dict[str, float]:
        return self._by_kind(self.colls_bwd)

    @property
    def fwd(self) -> float:
        return self.fwd_compute + sum(self.exposed_fwd.values())

    @property
    def bwd(self) -> float:
        return self.bwd_compute + sum(self.exposed_bwd.values())


@dataclass
class ClusterResult:
    """A simulated cluster step (see the module docstring); ``to_dict`` is the JSON form."""

    phase: str
    model: str
    chip: str
    cluster: str
    plan: Plan
    chips: int
    batch: int
    seq: int
    micro_batches: int
    seconds: float
    tokens_per_s: float
    mfu: float
    hfu: float
    flops: float
    hardware_flops: float
    bubble_fraction: float
    exposed_comm_s: dict[str, float]
    comm: dict[str, dict]
    memory: ClusterMemory
    stage_seconds: list[dict]
    timing: str
    energy_j: float = 0.0                  # the whole cluster's step (sim/cluster/energy.py)
    #: ``energy_j`` by part of the step: compute, optimizer, link, idle_static
    energy_breakdown: dict[str, float] = field(default_factory=dict)
    #: ``energy_j`` by component (mac, vector, sram, dram, noc, d2d, link, static; J, the
    #: whole cluster; sums to it): :mod:`diptych.sim.energy_parts`
    energy_breakdown_j: dict[str, float] = field(default_factory=dict)
    energy_j_per_token: float | None = None
    power_w_per_chip: float | None = None
    tdp_w: float | None = None
    economics: dict[str, Any] = field(default_factory=dict)   # cost_metrics, with a [cost]
    layers: dict[str, LayerStep] = field(default_factory=dict, repr=False)
    pipeline: PipelineRun | None = field(default=None, repr=False)
    layout: dict[str, Any] = field(default_factory=dict, repr=False)
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    precision: dict[str, Any] = field(default_factory=dict)   # Precision.to_dict()
    #: the efficiency waterfall (:mod:`diptych.sim.run.waterfall`) when it was asked for
    waterfall: dict | None = None

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def memory_bytes_per_chip(self) -> float:
        return self.memory.total_bytes

    def to_dict(self) -> dict:
        return {"phase": self.phase, "model": self.model, "chip": self.chip,
                "cluster": self.cluster, "chips": self.chips, "batch": self.batch,
                "seq": self.seq, **self.plan.to_dict(),
                "plan_text": self.plan.describe(self.phase == "train"),
                "precision": dict(self.precision),
                "micro_batches": self.micro_batches,
                "seconds": self.seconds, "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_chip": self.tokens_per_s / self.chips,
                "mfu": self.mfu, "hfu": self.hfu, "flops": self.flops,
                "hardware_flops": self.hardware_flops,
                "bubble_fraction": self.bubble_fraction,
                "exposed_comm_s": dict(self.exposed_comm_s), "comm": self.comm,
                "fits": self.fits, "memory_bytes_per_chip": self.memory_bytes_per_chip,
                "memory": self.memory.to_dict(), "stage_seconds": self.stage_seconds,
                "timing": self.timing, **self.latency(),
                "energy_j": self.energy_j, "energy_breakdown": dict(self.energy_breakdown),
                "energy_breakdown_j": dict(self.energy_breakdown_j),
                "energy_j_per_token": self.energy_j_per_token,
                "tokens_per_j": 1.0 / self.energy_j_per_token if self.energy_j_per_token
                else None,
                "power_w": self.power_w_per_chip, "tdp_w": self.tdp_w,
                "exceeds_tdp": (None if self.power_w_per_chip is None or self.tdp_w is None
                                else self.power_w_per_chip > self.tdp_w),
                **{k: self.economics.get(k) for k in ("cost_usd", "usd_per_mtok",
                                                        "tokens_per_s_per_usd")},
                "waterfall": self.waterfall,
                "warnings": list(self.warnings), "info": dict(self.info)}

    def latency(self) -> dict[str, float | None]:
        """``ttft_s`` (prefill: the step), ``tpot_s`` and ``tokens_per_s_per_user`` (decode:
        the mean step of the generation), as ``diptych run`` reports them; None in
        training."""
        if self.phase == "prefill":
            return {"ttft_s": self.seconds, "tpot_s": None,
                    "tokens_per_s_per_user": self.seq / self.seconds}
        if self.phase == "decode":
            return {"ttft_s": None, "tpot_s": self.seconds,
                    "tokens_per_s_per_user": 1.0 / self.seconds}
        return {"ttft_s": None, "tpot_s": None, "tokens_per_s_per_user": None}


def _exposed(comm: float, hide: float, overlap: bool) -> float:
    return max(0.0, comm - hide) if overlap else comm


def _beside(chip: Chip, comm: "_Comm", kind: str, comm_s: float, hide: float, overlap: bool,
            colls, groups: list) -> float:
    """Exposed seconds of a layer's ``kind`` collectives (``comm_s`` in all, ``colls`` the
    layer's list) hidden behind ``hide`` seconds of its compute: :func:`_exposed`, plus, on a
    chip with a ``[comm_kernels]`` table, what they take from that compute while they run
    (:mod:`diptych.sim.run.interference`: the cores they hold, the DRAM bandwidth they
    stream; ``groups``, the compute's :class:`~diptych.sim.run.interference.Loads`; ring
    attention's exchange beside their attention ops only). The tensor-parallel collectives
    keep their own rules (tp_overlap.py)."""
    if not overlap or chip.comm_kernels is None or kind == "tp":
        return _exposed(comm_s, hide, overlap)
    beside = [g.attention() for g in groups] if kind == "cp" else groups
    f = collectives_factor(chip, [comm.brief(g, c, b, s) for k, g, c, b, s in colls
                                  if k == kind], beside)
    return beside_s(hide, comm_s, f) - hide


#: The label prefix of the collectives a chip's [tp_overlap] stack overlaps (tp_overlap.py).
_LAPPED = "tp overlapped "


def _tp_overlapped(t: LayerTime, plan: Plan, comm: "_Comm", fwd: list, bwd: list,
                   train: bool, chip: Chip, p: Precision | None = None
                   ) -> dict[str, OverlapCost]:
    """The all-reduces of layer ``t`` that the chip's ``[tp_overlap]`` stack overlaps with
    their sub-block's GEMMs (training with ``overlap_tp``), by collective name, each with its
    cost (:func:`~diptych.sim.run.tp_overlap.sub_block_overlap`; with the run's userbuffers
    off, Megatron's NCCL path, :func:`~diptych.sim.run.tp_overlap.nccl_sub_block`). Their
    reduce-scatter and all-gathers
    (forward: one each; backward: the output gradient's and the saved input's all-gather,
    the input gradient's reduce-scatter) are added to ``fwd``/``bwd`` (the layer's
    collectives beside the others, for their link energy and the trace) and to the log.
    Under ``p``'s FP8 recipe (delayed scaling) the all-gathers move FP8 tensors
    (:func:`~diptych.sim.run.tp_overlap.gather_share`)."""
    if not (train and t.tp_gemms and chip.tp_overlap is not None
            and plan.tp_overlapped(train)):
        return {}
    pair = {}
    names = {c.name for c in t.ops.tp}
    for c in t.ops.tp:
        sub = c.name.removesuffix("_all_reduce")
        if sub not in t.tp_gemms:
            continue
        g = (gather_share(t.ops.forward, names, sub, p, plan.sequence_parallel)
             if p is not None else 1.0)
        ag = comm("tp", "all_gather", c.bytes * g, f"{_LAPPED}{sub} all-gather")
        rs = comm("tp", "reduce_scatter", c.bytes, f"{_LAPPED}{sub} reduce-scatter")
        pair[sub] = (ag, rs)
        gather, scatter = ("tp", "tp", "all_gather", c.bytes * g, ag), \
            ("tp", "tp", "reduce_scatter", c.bytes, rs)
        fwd += [x for x in (gather, scatter) if x[4] > 0]
        bwd += [x for x in (gather, gather, scatter) if x[4] > 0]
    cost = overlap_costs({s: t.tp_gemms[s] for s in pair}, chip, plan.tp, pair)
    return {f"{sub}_all_reduce": c for sub, c in cost.items()}


@lru_cache(maxsize=4096)
def _group_shapes(layout: Plan, net: Network) -> dict[str, GroupShape]:
    """Where each group of a layout sits (memoised: plans that differ only in ZeRO stage,
    schedule, micro-batch or recomputation share their groups)."""
    shapes = {k: group_shape(group_ranks(layout, k), net)
              for k in ("tp", "cp", "dp", "ep", "edp", "zs", "zr", "ezs", "amax")}
    shapes["pp"] = group_shape([0, stage_peer(layout)] if layout.pp > 1 else [0], net)
    # the embedding group: rank 0 and its peer on the last stage (tied embeddings)
    shapes["emb"] = group_shape([0, (layout.pp - 1) * stage_peer(layout)] if layout.pp > 1
                                else [0], net)
    return shapes


class _Comm:
    """Collective costs of one plan on one network, by group kind, memoised per call
    (``free``: every collective 0 s, a waterfall step)."""

    def __init__(self, plan: Plan, net: Network, free: bool = False):
        self.net, self.free = net, free
        self.shapes = _group_shapes(Plan(tp=plan.tp, pp=plan.pp, dp=plan.dp, ep=plan.ep,
                                         cp=plan.cp, zero_shards=plan.zero_shards,
                                         order=plan.order), net)
        self.log: dict[str, dict] = {}
        self._memo: dict[tuple, CommCost] = {}

    def __call__(self, group: str, kind: str, nbytes: float, label: str) -> float:
        if self.free:
            return 0.0
        key = (group, kind, nbytes)
        c = self._memo.get(key)
        if c is None:
            c = self._memo[key] = collective(kind, nbytes, self.shapes[group], self.net)
        if c.seconds > 0 and label not in self.log:
            self.log[label] = {**c.to_dict(), "group_kind": group}
        return c.seconds

    def brief(self, group: str, kind: str, nbytes: float, seconds: float
              ) -> tuple[str, float, float, bool]:
        """A collective of ``seconds`` as :func:`~diptych.sim.run.interference.
        collectives_factor` takes it: (kind, bytes a member sends, seconds, whether its
        group crosses the network)."""
        shape = self.shapes[group]
        return kind, sent_bytes(kind, nbytes, shape.n), seconds, shape.n_dom > 1


def _rank_params(lp, kind: str, moe: bool, plan: Plan) -> float:
    """Parameters of one copy of layer ``kind`` a rank holds (after tensor and expert
    parallelism; a ZeRO-3 rank its shard)."""
    total, e = lp.of(kind, moe)
    if plan.zero >= 3:
        return (total - e) / plan.shards + e / plan.expert_shards
    return total


def _layer_steps(lt: dict[str, LayerTime], plan: Plan, comm: _Comm, lp, w_bytes: float,
                 g_bytes: float, train: bool, chip: Chip, share3: float = 0.0,
                 p: Precision | None = None) -> dict[str, LayerStep]:
    out = {}
    for kind, t in lt.items():
        ops = t.ops
        fwd: list[tuple[str, str, str, float, float]] = []
        bwd: list[tuple[str, str, str, float, float]] = []

        def add(lst, ck, group, coll, nbytes, label):
            secs = comm(group, coll, nbytes, label)
            if secs > 0:
                lst.append((ck, group, coll, nbytes, secs))

        lap_fwd: list[tuple[str, str, str, float, float]] = []
        lap_bwd: list[tuple[str, str, str, float, float]] = []
        lapped = _tp_overlapped(t, plan, comm, lap_fwd, lap_bwd, train, chip, p)
        for c in ops.tp:
            if c.name in lapped:
                continue
            add(fwd, "tp", "tp", c.kind, c.bytes, f"tp {c.name}")
            if train:
                add(bwd, "tp", "tp", c.kind, c.bytes, f"tp {c.name}")
                if plan.recompute == "full":
                    add(bwd, "tp", "tp", c.kind, c.bytes, f"tp {c.name}")
        if train:        # the backward's own: the output layer's (workloads/lower.py _head)
            for c in ops.tp_bwd:
                add(bwd, "tp", "tp", c.kind, c.bytes, f"tp {c.name}")
        if ops.cp_kv_bytes:
            kv = plan.cp * ops.cp_kv_bytes
            add(fwd, "cp", "cp", "all_gather", kv, "cp kv all-gather")
            if train:
                add(bwd, "cp", "cp", "all_gather", kv, "cp kv all-gather")
                add(bwd, "cp", "cp", "reduce_scatter", kv, "cp dkv reduce-scatter")
        if ops.a2a_bytes:
            for lst in (fwd, bwd) if train else (fwd,):
                for what in ("dispatch", "combine"):
                    add(lst, "ep", "ep", "all_to_all", ops.a2a_bytes, f"ep all-to-all {what}")
        if train and plan.zero >= 3:
            total, e = lp.of(kind, ops.moe)
            for lst in (fwd, bwd):
                add(lst, "dp", "zs", "all_gather", (total - e) * w_bytes,
                    f"zero3 all-gather {kind}")
                add(lst, "dp", "ezs", "all_gather", e * w_bytes, "zero3 all-gather experts")
            add(bwd, "dp", "zs", "reduce_scatter", (total - e) * g_bytes,
                f"zero3 reduce-scatter {kind}")
            add(bwd, "dp", "ezs", "reduce_scatter", e * g_bytes, "zero3 reduce-scatter experts")
            add(bwd, "dp", "zr", "all_reduce", _replica_params(total, e, plan) * g_bytes,
                f"zero3 replica all-reduce {kind}")
        bwd_compute = t.bwd_s
        if plan.recompute == "full":
            bwd_compute += t.fwd_s
        elif plan.recompute == "selective":
            bwd_compute += t.selective_s
        fwd_compute = t.fwd_s
        if train and "weight" in OFFLOAD_KINDS[plan.offload]:
            # weights in the second tier, prefetched one layer ahead (module docstring)
            fetch = param_fetch_seconds(chip, _rank_params(lp, kind, ops.moe, plan) * w_bytes,
                                        share3)
            fwd_compute = max(fwd_compute, fetch)
            bwd_compute = max(bwd_compute, fetch * (2 if plan.recompute == "full" else 1))
        # what each kind's communication hides behind (module docstring)
        overlap = {"tp": plan.tp_overlapped(train), "cp": plan.overlap_cp,
                   "ep": plan.overlap_ep, "dp": plan.overlap_dp}
        step = LayerStep(fwd_compute, bwd_compute if train else 0.0, tuple(fwd), tuple(bwd), {},
                         {}, t.fwd_flops, t.bwd_flops if train else 0.0)
        hide_f = {"cp": t.attn_fwd_s}
        hide_b = {"cp": t.attn_bwd_s}
        bwd_loads = [t.bwd_loads] + ([t.fwd_loads] if plan.recompute == "full" else [])
        ef = {k: _beside(chip, comm, k, v, hide_f.get(k, fwd_compute), overlap[k],
                         step.colls_fwd, [t.fwd_loads]) for k, v in step.comm_fwd.items()}
        eb = {k: _beside(chip, comm, k, v, hide_b.get(k, bwd_compute), overlap[k],
                         step.colls_bwd, bwd_loads) for k, v in step.comm_bwd.items()}
        if t.tp_exposed_fwd_s is not None and "tp" in ef:   # scheduled: what the program
            ef["tp"] = t.tp_exposed_fwd_s                    # left exposed (timing.py)
        if t.tp_exposed_bwd_s is not None and "tp" in eb:
            eb["tp"] = t.tp_exposed_bwd_s + (t.tp_exposed_fwd_s if plan.recompute == "full"
                                             else 0.0)
        if lapped:       # the overlapped stack's cost instead of the chain's (tp_overlap.py)
            full = plan.recompute == "full"
            lf = sum(x.fwd_s for x in lapped.values())
            lb = sum(x.bwd_s for x in lapped.values()) + (lf if full else 0.0)
            if t.tp_exposed_fwd_s is not None:   # scheduled: what the others left exposed
                kf = t.tp_exposed_fwd_s - t.tp_lapped_fwd_s
                kb = (t.tp_exposed_bwd_s or 0.0) - t.tp_lapped_bwd_s + (kf if full else 0.0)
            else:                                # summed: the others' rule, as above
                kf, kb = ef.get("tp", 0.0), eb.get("tp", 0.0)
            ef["tp"], eb["tp"] = max(0.0, kf) + lf, max(0.0, kb) + lb
        out[kind] = LayerStep(step.fwd_compute, step.bwd_compute,
                              step.colls_fwd + tuple(lap_fwd), step.colls_bwd + tuple(lap_bwd),
                              ef, eb, step.fwd_flops, step.bwd_flops)
    return out


@lru_cache(maxsize=256)
def _model_flops(model: ModelConfig, phase: str, batch: int, seq: int, context: int, gen: int,
                 p, attention: str) -> float:
    """Model FLOPs of the phase for the whole batch, from the unsplit lowering (no
    recomputation), as ``diptych run`` counts them; decode: the representative step of
    ``gen`` after ``context`` (:func:`~diptych.workloads.lower.decode_mean`)."""
    if phase == "train":
        return train_step(model, 1, seq, precision=p, micro_batch=1,
                          attention=attention).flops(recompute=False) * batch
    if phase == "prefill":
        return prefill(model, 1, seq, precision=p, attention=attention).flops() * batch
    return decode_mean(model, 1, context, gen, precision=p,
                       attention=attention).flops() * batch


def _replica_params(total: float, experts: float, plan: Plan) -> float:
    """Parameters of one rank's ZeRO shard of a layer that hybrid sharding all-reduces
    between replicas: the dense part ÷ the shard group, the routed experts ÷ their (``ep``
    times smaller) expert shard group."""
    return (total - experts) / plan.shards + experts / plan.expert_shards


@lru_cache(maxsize=256)
def _per_param(model, chip, p, simulate, what: str = "adamw", offload: str = "none",
               share3: float = 0.0) -> tuple[float, float, dict[str, float]]:
    """(seconds, joules, joules by component) per parameter of the lowering's op ``what`` run
    once per step: its
    AdamW update (``"adamw"``), the gradient norm (``"grad_norm"``) or the gradient buffer's
    zeroing (``"grad_zero"``) (:func:`~diptych.workloads.train.grad_norm_op`,
    :func:`~diptych.workloads.train.grad_zero_op`) or an FP8 recipe's weight cast (``"cast"``,
    :func:`~diptych.workloads.recipe.weight_cast_op`), one chunk of
    :data:`~diptych.workloads.train.ADAMW_CHUNK` parameters (or the whole model if smaller)
    simulated. With an ``offload``, the update's share of bytes in the second tier
    (:func:`~diptych.sim.run.offload.optimizer_tier_share`) is timed on the tier
    (:func:`~diptych.sim.run.placed.tier2_chip`), ``(1 − s)·t₁ + s·t₂`` as a one-node run's
    :class:`~diptych.sim.run.placed.Tiered` op (the cast is left on the first tier); a share
    ``share3`` of the offloaded state in the third tier
    (:func:`~diptych.sim.run.offload.third_tier_share`) moves that share of the tier's bytes
    to :func:`~diptych.sim.run.placed.tier3_chip`: ``(1 − s)·t₁ + s(1 − s₃)·t₂ + s·s₃·t₃``."""
    n = min(ADAMW_CHUNK, max(1, math.ceil(params_per_chip(model, 1))))
    op = {"adamw": adamw_op, "grad_norm": grad_norm_op, "grad_zero": grad_zero_op}[what](n, p) \
        if what != "cast" else weight_cast_op("fp8_weight_cast", n, p)
    if not chip.has_dram:             # the optimizer state lives in SRAM too
        op = resident(op)
    w = Workload("train", (Block.of_ops("optimizer", 1, (op,), "optimizer"),), tokens=1, batch=1)
    t = simulate_workload(w, chip, simulate=simulate)
    secs, joules, parts = t["seconds"], t["energy_j"], t["energy_breakdown_j"]
    share = optimizer_tier_share(p, offload) if what == "adamw" else 0.0
    if share and share3:
        u = simulate_workload(w, tier2_chip(chip), simulate=simulate)
        v = simulate_workload(w, tier3_chip(chip), simulate=simulate)
        s2, s3 = share * (1 - share3), share * share3
        secs = (1 - share) * secs + s2 * u["seconds"] + s3 * v["seconds"]
        joules = (1 - share) * joules + s2 * u["energy_j"] + s3 * v["energy_j"]
        parts = EP.summed(((parts, 1 - share), (u["energy_breakdown_j"], s2),
                           (v["energy_breakdown_j"], s3)))
    elif share:
        u = simulate_workload(w, tier2_chip(chip), simulate=simulate)
        secs = (1 - share) * secs + share * u["seconds"]
        joules = (1 - share) * joules + share * u["energy_j"]
        parts = EP.summed(((parts, 1 - share), (u["energy_breakdown_j"], share)))
    return (secs / op.elements, joules / op.elements, EP.scaled(parts, 1.0 / op.elements))


def _chunk_kinds(chunks, vs: int, last: int) -> list[str]:
    """Layer kinds of chunk ``vs`` of the pipeline (``last``: the last chunk's index): its
    layers, the embedding on the first chunk and the head on the last."""
    return list(chunks[vs]) + (["embedding"] if vs == 0 else []) \
        + (["head"] if vs == last else [])


def _stage_kinds(plan: Plan, chunks, s: int) -> list[str]:
    """Layer kinds of pipeline device ``s``'s chunks (embedding and head included)."""
    return [k for c in device_chunks(plan, s) for k in _chunk_kinds(chunks, c, plan.chunks - 1)]


def _energy(chip, plan: Plan, lt, steps, chunks, comm: "_Comm", m: int, train: bool,
            act_bytes: float, seconds: float, opt_s, opt_j, opt_parts,
            step_colls) -> tuple[dict[str, float], list[float], dict[str, float]]:
    """The cluster step's joules by part (:func:`~.energy.step_energy`), each stage's
    power while busy (:func:`~.energy.busy_power_w`) and the joules by component
    (:func:`~.energy.step_energy_parts`)."""
    extra = {"full": "fwd_energy_j", "selective": "selective_energy_j"}.get(plan.recompute)
    extra_parts = {"full": "fwd_energy_parts",
                   "selective": "selective_energy_parts"}.get(plan.recompute)
    stages = []
    last = plan.chunks - 1
    for s in range(plan.pp):
        kinds = _stage_kinds(plan, chunks, s)
        comp = sum(lt[k].fwd_energy_j + (lt[k].bwd_energy_j
                                         + (getattr(lt[k], extra) if extra else 0.0)
                                         if train else 0.0) for k in kinds)
        comp_parts = EP.zero()               # the same joules by component
        for k in kinds:
            EP.add(comp_parts, lt[k].fwd_energy_parts)
            if train:
                EP.add(comp_parts, lt[k].bwd_energy_parts)
                if extra_parts:
                    EP.add(comp_parts, getattr(lt[k], extra_parts))
        busy = sum(steps[k].fwd_compute + steps[k].bwd_compute for k in kinds)
        colls = [(coll, nbytes, comm.shapes[group].n) for k in kinds
                 for _, group, coll, nbytes, _ in steps[k].colls_fwd + steps[k].colls_bwd]
        if plan.pp > 1:   # activations to the next chunk, their gradients back
            mine = device_chunks(plan, s)
            sends = sum(c != last for c in mine) + (sum(c != 0 for c in mine) if train else 0)
            colls += [("send", act_bytes, 2)] * sends
        stages.append({"compute_j": comp, "busy_s": busy, "colls_per_mb": colls,
                       "colls_per_step": step_colls[s], "optimizer_j": opt_j[s],
                       "optimizer_s": opt_s[s], "compute_parts": comp_parts,
                       "optimizer_parts": opt_parts[s]})
    kw = dict(ranks_per_stage=plan.chips // plan.pp, micro_batches=m, seconds=seconds,
              stages=stages)
    return (step_energy(chip, **kw), busy_power_w(stages, m), step_energy_parts(chip, **kw))


def _power_and_cost(chip, chips: int, seconds: float, energy_j: float,
                    tokens: float) -> dict[str, Any]:
    """Tokens/J inputs, the average power per chip against the TDP, and the chip's cost
    metrics (None without a ``[cost]`` table) of a step."""
    from ...arch.cost import cost_metrics
    from ...arch.energy import power_check

    per_token = energy_j / tokens if tokens else None
    pc = power_check(chip, energy_j / chips, seconds) if seconds > 0 else None
    econ = (cost_metrics(chip, {"tokens_per_s": tokens / seconds, "chips": chips,
                                "energy_j_per_token": per_token})
            if chip.cost is not None and seconds > 0 else {})
    return {"energy_j_per_token": per_token,
            "power_w_per_chip": pc.power_w if pc else None,
            "economics": econ}


def _bucket_tail(buckets: list[tuple[float, float, float]], overlap: bool) -> float:
    """Exposed time of per-layer gradient buckets ``(layer backward s, bucket comm s,
    slowdown factor)`` in backward order, each starting when its layer's backward is done
    (back to back, ending at 0) and after the previous bucket: the time past the last layer's
    backward. A factor above 1 (a chip's ``[comm_kernels]``): the backward takes that much
    longer while a bucket runs beside it (:func:`~diptych.sim.run.interference.two_streams`)."""
    total_comm = sum(c for _, c, _ in buckets)
    if not overlap or total_comm <= 0.0:     # (nothing to reduce: no rounding residue)
        return total_comm
    if any(f != 1.0 for _, _, f in buckets):
        return max(0.0, two_streams(buckets) - sum(b for b, _, _ in buckets))
    t = -sum(b for b, _, _ in buckets)
    end = t
    for b, c, _ in buckets:
        t += b
        end = max(end, t) + c
    return max(0.0, end)


def simulate_cluster_step(model: "ModelConfig | str", chip: "Chip | str",
                          cluster: "Cluster | str", plan: Plan, scenario: Scenario, *,
                          golden: bool = True, simulate: OpTimer | None = None,
                          variant: Variant | None = None) -> ClusterResult:
    """Simulate one step of ``scenario`` for ``model`` on ``plan.chips`` chips of ``cluster``
    (module docstring). From the scenario: ``batch``, the global batch in sequences;
    ``seq``, the training sequence length (train) — for inference ``prompt`` (prefill: the
    prompt; decode: context before generation) and ``gen`` (decode: generated tokens,
    default 1; one representative step, each layer kind attending its mean keys over the
    ``gen`` steps, :func:`~diptych.workloads.lower.decode_mean`); the dtypes and
    ``attention``; ``execution``: how each layer kind is timed
    (:mod:`~diptych.sim.cluster.timing`, "Execution"): ``"schedule"`` (its program's list
    schedule, as ``diptych run``: residency, fusion, launches, the tensor-parallel
    collectives exposed as the schedule leaves them) or ``"sum"`` (its ops summed, the
    tensor-parallel collectives hidden by the ``overlap_tp`` rule). The plan carries the
    degrees, micro-batch, recomputation and overlap. ``golden``: event-level pipeline
    simulation (else the closed form); ``simulate`` replaces the engine (an
    :class:`~diptych.sim.api.OpTimer`; tests use a roofline double); ``variant`` leaves
    mechanisms out (:class:`~diptych.sim.run.variant.Variant`: ``--ideal``, the waterfall).

    Raises ValueError naming the field and value for a non-positive ``batch``, ``seq``,
    ``prompt`` or ``gen``, a plan that does not fit the model, batch or cluster
    (:func:`~.plan.check_plan`), a precision the chip cannot compute
    (:func:`~diptych.sim.support.check_supported`), or, on a chip without DRAM (an
    all-SRAM chip: every tensor of a stage resident, layers timed so,
    :mod:`~diptych.sim.cluster.timing`), a stage that does not fit its SRAM
    (:func:`~.memory.require_sram_fit`)."""
    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a Scenario, not {type(scenario).__name__}")
    v = variant or Variant()
    st = _setup(load_model(model), variant_chip(scenario_chip(load_chip(chip), scenario), v),
                variant_cluster(load_cluster(cluster), v), plan, scenario, golden,
                variant_timer(simulate, v), v.free_comm)
    pipe = _pipeline(st)
    tail = _after_pipeline(st, pipe)
    return _result(st, pipe, tail)


@dataclass
class _Setup:
    """What the phases of one cluster step share: the inputs, the lengths the phase runs at,
    the precision, the memory report, the placed collectives (``comm``), each layer kind's
    time (``lt``) and per-layer step (``steps``), and the layer kinds of every chunk."""

    model: ModelConfig
    chip: Chip
    cluster: Cluster
    plan: Plan
    scenario: Scenario
    golden: bool
    simulate: OpTimer | None
    train: bool
    length: int
    context: int
    gen: int
    micro_batches: int
    layers_per_chunk: list
    precision: Any
    compute_dtype: str
    mem: ClusterMemory
    comm: "_Comm"
    lt: dict
    lp: Any
    steps: dict
    chunks: list
    share3: float = 0.0     # the offloaded state's share in the third tier (run/offload.py)

    @property
    def last_chunk(self) -> int:
        return self.plan.chunks - 1


def _lengths(sc: Scenario) -> tuple[int, int, int, int]:
    """(length, context, kv_tokens, gen) of a step: the sequence a micro-batch carries, the
    decode context, the tokens the KV cache reaches, the generated tokens. ValueError naming
    a missing or non-positive one."""
    phase, seq, prompt = sc.phase, sc.seq, sc.prompt
    check_positive("batch", sc.batch)
    context = kv_tokens = 0
    gen = 1 if sc.gen is None else sc.gen
    if phase == "train":
        if seq is None:
            raise ValueError("train needs seq (sequence length in tokens)")
        check_positive("seq", seq)
        return seq, context, kv_tokens, gen
    if prompt is None:
        raise ValueError(f"{phase} needs prompt (prompt length in tokens)")
    check_positive("prompt", prompt)
    if phase == "prefill":
        return prompt, context, prompt, gen
    check_positive("gen", gen)
    return 1, prompt, prompt + gen, gen        # the cache at the last step


def _setup(model: ModelConfig, chip: Chip, cluster: Cluster, plan: Plan, sc: Scenario,
           golden: bool, simulate: OpTimer | None, free_comm: bool = False) -> _Setup:
    """Phase 1: check the plan and the precision, the memory per chip, and every layer
    kind's time and per-layer step (compute and its collectives) of one micro-batch."""
    phase, attention, execution = sc.phase, sc.attention, sc.execution
    length, context, kv_tokens, gen = _lengths(sc)
    info = check_plan(plan, model, chips=plan.chips, batch=sc.batch, seq_len=length,
                      phase=phase, cluster_chips=cluster.chips)
    m, lpc = info["micro_batches"], info["layers_per_chunk"]
    net = bind(cluster, chip)
    p = scenario_precision(chip, sc)
    comp = check_supported(chip, p)
    # memory per chip against DRAM, or an all-SRAM chip's SRAM (where the stage must fit: the
    # layer times below hold every tensor resident, sim/cluster/timing.py)
    check_offload(plan.offload, chip=chip, phase=phase)
    mem = plan_memory(model, plan, p, phase=phase, seq=length, micro_batches=m,
                      layers_per_chunk=lpc, capacity_bytes=chip.memory_bytes,
                      global_batch=sc.batch, context=kv_tokens, attention=attention,
                      advise=chip.has_dram, routing=sc.routing,
                      tier2_capacity_bytes=offload_capacity_bytes(chip)
                      if plan.offload != "none" else 0.0)
    # the offloaded state's share in a third tier, when the second cannot hold it
    share3 = third_tier_share(chip, mem.tier2_bytes) if plan.offload != "none" else 0.0
    if not chip.has_dram:
        require_sram_fit(mem, chip=chip.name, model=model.name, plan=plan, precision=p,
                         phase=phase)
    comm = _Comm(plan, net, free_comm)
    train = phase == "train"
    lt = layer_times(model, chip, p, phase=phase, tp=plan.tp, cp=plan.cp, ep=plan.ep,
                     micro_batch=plan.micro_batch, seq=length, context=context, gen=gen,
                     sequence_parallel=plan.sequence_parallel, attention=attention,
                     simulate=simulate, execution=execution,
                     tp_links=TpLinks(comm.shapes["tp"], net, free_comm)
                     if execution == "schedule" else None, routing=sc.routing)
    lp = layer_params(model, plan.tp, plan.ep, plan.pp)
    steps = _layer_steps(lt, plan, comm, lp, p.w_bytes, p.g_bytes, train, chip, share3, p)
    chunks = chunk_layers(model, lpc, {k: t.ops for k, t in lt.items()})
    return _Setup(model, chip, cluster, plan, sc, golden, simulate, train, length, context,
                  gen, m, lpc, p, comp, mem, comm, lt, lp, steps, chunks, share3)


@dataclass
class _Pipe:
    """Phase 2's result: per device and chunk the forward and backward times of one
    micro-batch, the activation send, when each device finishes and how busy it was, the
    exposed pipeline sends, the event-level run (or None) and the schedule's name."""

    fwd: list
    bwd: list
    act: float
    send: float
    t_pipe: float
    finish: list
    busy: list
    pp_exposed: float
    run: PipelineRun | None
    sched: str
    pp_tax: list = field(default_factory=list)   # per device: its sends' share of its chunks


def _pipeline(st: _Setup) -> _Pipe:
    """Phase 2: the pipeline over devices and micro-batches (event level or closed form).

    On an ``issue``/``one_queue`` stack an interleaved or 1F1B plan is played in
    Megatron-Core's issue order (sends meet their peers' receives, waiting kernels hold
    cores; 1F1B's calls batched, as Megatron-LM sets ``batch_p2p_comm`` without
    interleaving); a GPipe plan keeps the data-flow simulation, where a send costs its
    sender nothing (docs/cluster.md, "Pipeline schedules")."""
    plan, steps, chunks, last_vs, m = st.plan, st.steps, st.chunks, st.last_chunk, \
        st.micro_batches

    P, v = plan.pp, plan.virtual_stages
    tokens_mb = plan.micro_batch * (1 if st.scenario.phase == "decode"
                                    else st.length // plan.cp)
    act = tokens_mb * st.model.hidden_size * st.precision.a_bytes
    if plan.sequence_parallel and plan.tp > 1:
        act /= plan.tp
    send = st.comm("pp", "send", act, "pp send") if P > 1 else 0.0
    sent = [st.comm.brief("pp", "send", act, send)] if send > 0 else []
    taxed = [0.0] * P          # per device: what its sends take from its chunks (all runs)
    factors: dict[tuple, float] = {}           # per chunk's layer kinds and pass

    def chunk_time(vs: int, fwd: bool) -> float:
        kinds = _chunk_kinds(chunks, vs, last_vs)
        t = sum(steps[k].fwd if fwd else steps[k].bwd for k in kinds)
        if sent and st.chip.comm_kernels is not None:
            # the pipeline's send and receive beside the chunk (sim/run/interference.py)
            key = (tuple(kinds), fwd)
            f = factors.get(key)
            if f is None:
                f = factors[key] = collectives_factor(
                    st.chip, sent, [st.lt[k].fwd_loads if fwd else st.lt[k].bwd_loads
                                    for k in kinds])
            extra = tax_s(t, send, f)
            taxed[vs % P] += extra * m if (fwd or st.train) else 0.0
            t += extra
        return t

    fwd = [[chunk_time(c * P + s, True) for c in range(v)] for s in range(P)]
    bwd = [[chunk_time(c * P + s, False) for c in range(v)] for s in range(P)]
    sched = plan.schedule if st.train else "gpipe"
    run = None
    if not st.train:                    # forward only: a flow shop of identical jobs
        per = [sum(f) for f in fwd]
        t_pipe = sum(per) + (m - 1) * max(per) + (P - 1) * send
        finish = [t_pipe] * P
        busy = [m * x for x in per]
        pp_exposed = (P - 1) * send
        if st.golden:                   # the event-level run, for traces (same F timings)
            run = simulate_pipeline(fwd, [[0.0] * v for _ in range(P)], m, schedule="gpipe",
                                    send_s=send)
    elif st.golden:
        order = chip_kernel_order(st.chip)
        if sched in ("interleaved", "1f1b") and P > 1 and order in ("issue", "one_queue"):
            # a Megatron-Core stack: its issue order, the sends' rendezvous, one queue or not;
            # 1F1B's calls batched: Megatron-LM sets batch_p2p_comm = not overlap_p2p_comm
            # and overlap_p2p_comm False without interleaving [S: Megatron-LM core_r0.9.0
            # (1afee592) megatron/training/arguments.py L286-289, L671]
            mega = dict(one_queue=order == "one_queue", schedule=sched, batched=True)
            # held cores only beside the interleaved schedule's waiting kernels: 1F1B waits
            # on every call at once, so its compute never runs beside one (megatron_p2p)
            held = _hold_factor(st) if sent and sched == "interleaved" else None
            run = simulate_megatron_pipeline(fwd, bwd, m, send_s=send, **mega, hold_f=held)
            # pp's exposed time against the same issue order with free sends (and no held
            # cores), so it counts only the transfers and the waits they cause
            no_send = (lambda: simulate_megatron_pipeline(fwd, bwd, m, send_s=0.0,
                                                          **mega).seconds)
        else:
            run = simulate_pipeline(fwd, bwd, m, schedule=sched, send_s=send)
            no_send = (lambda: simulate_pipeline(fwd, bwd, m, schedule=sched).seconds)
        t_pipe, finish, busy = run.seconds, list(run.finish_s), list(run.busy_s)
        pp_exposed = t_pipe - no_send() if send else 0.0
    else:
        F, B = [sum(x) for x in fwd], [sum(x) for x in bwd]
        t_pipe = fast_pipeline_seconds(F, B, m, v, send, sched)
        finish, acc = [], 0.0
        for s in range(P):
            finish.append(t_pipe - acc)
            acc += bwd[s][0] + send
        busy = [m * (F[s] + B[s]) for s in range(P)]
        pp_exposed = 2 * (P - 1) * send
    return _Pipe(fwd, bwd, act, send, t_pipe, finish, busy, pp_exposed, run, sched, taxed)


def _hold_factor(st: _Setup):
    """``hold_f`` of :func:`~.megatron_p2p.simulate_megatron_pipeline`: how many times
    longer a chunk's compute takes beside ``n`` p2p kernels of its rank waiting for their
    peers, each holding its channels' cores and moving no data (``interference.
    group_slowdown`` with no DRAM share); None on a chip without ``[comm_kernels]``."""
    table = st.chip.comm_kernels
    if table is None:
        return None
    P = st.plan.pp
    memo: dict[tuple, float] = {}

    def f(kind: str, s: int, c: int, n: int) -> float:
        vs = c * P + s
        key = (vs, kind, min(n, PIPELINE_PEERS))
        if key not in memo:
            loads = [st.lt[k].fwd_loads if kind == "F" else st.lt[k].bwd_loads
                     for k in _chunk_kinds(st.chunks, vs, st.last_chunk)]
            memo[key] = group_slowdown(loads, held_cores(table, "send", False, key[2]),
                                       st.chip.tensor_cores, 0.0)
        return memo[key]
    return f


@dataclass
class _Tail:
    """Phase 3's result, per device: the exposed gradient reduction, the optimizer's time and
    energy, the exposed ZeRO-1/2 parameter all-gather, the end of the step, and the
    collectives run once per step (for energy)."""

    tails: list
    opt_s: list
    opt_j: list
    ag_s: list
    ends: list
    step_colls: list
    opt_parts: list
    emb_s: list                # the tied embedding's gradient sync, waited
    tier2_bytes: list = field(default_factory=list)   # what each device's second tier moves


def _after_pipeline(st: _Setup, pipe: _Pipe) -> _Tail:
    """Phase 3: after the pipeline, per device: gradient reduction, optimizer, ZeRO-1/2
    parameter all-gather (training only)."""
    plan, p, comm, steps, lt, lp = st.plan, st.precision, st.comm, st.steps, st.lt, st.lp
    P = plan.pp
    step_colls: list[list[tuple[str, float, int]]] = [[] for _ in range(P)]  # once per step

    bucket: list[tuple[str, str, float, float]] = []   # the collectives logged since cleared

    def logged(s: int, group: str, kind: str, nbytes: float, label: str) -> float:
        """``comm`` of a collective stage ``s`` runs once per step, remembered for energy
        (and in ``bucket``, for what it takes from the compute beside it)."""
        step_colls[s].append((kind, nbytes, comm.shapes[group].n))
        secs = comm(group, kind, nbytes, label)
        if secs > 0:
            bucket.append((group, kind, nbytes, secs))
        return secs
    tails, opt_s, ag_s, opt_j, opt_parts, tier2 = [], [], [], [], [], []
    none = (0.0, 0.0, EP.zero())
    sec_per_param, j_per_param, parts_per_param = (
        _per_param(st.model, st.chip, p, st.simulate, "adamw", plan.offload, st.share3)
        if st.train else none)
    cast_s, cast_j, cast_parts = (_per_param(st.model, st.chip, p, st.simulate, "cast")
                                  if st.train and p.quantized else none)
    # the gradient norm over the rank's shard and the zeroing of its whole gradient buffer
    norm_s, norm_j, norm_parts = (_per_param(st.model, st.chip, p, st.simulate, "grad_norm")
                                  if st.train else none)
    zero_s, zero_j, zero_parts = (_per_param(st.model, st.chip, p, st.simulate, "grad_zero")
                                  if st.train else none)
    linear = layer_params(st.model, plan.tp, plan.ep, plan.pp, linear=True)
    for s in range(P):
        mine = device_chunks(plan, s)
        kinds = [k for c in reversed(mine) for k in reversed(st.chunks[c])]
        if st.last_chunk in mine:
            kinds = ["head"] + kinds
        if 0 in mine:
            kinds = kinds + ["embedding"]
        if not st.train:
            tails.append(0.0)
            opt_s.append(0.0)
            opt_j.append(0.0)
            opt_parts.append(EP.zero())
            ag_s.append(0.0)
            tier2.append(0.0)
            continue
        buckets = []
        factors: dict[str, float] = {}
        dense_params = expert_params = linear_params = 0.0
        fp8_gemms = 0
        for k in kinds:
            total, e = lp.of(k, lt[k].ops.moe)
            dense_params += total - e
            expert_params += e
            linear_params += linear.of(k, lt[k].ops.moe)[0]
            fp8_gemms += sum(1 for o in lt[k].ops.forward if quantized(o))
            if plan.zero >= 3:
                continue
            bucket.clear()
            if plan.zero == 0:
                c = (logged(s, "dp", "all_reduce", (total - e) * p.g_bytes,
                            f"dp grad all_reduce {k}")
                     + logged(s, "edp", "all_reduce", e * p.g_bytes,
                              "dp grad all_reduce experts"))
            else:
                c = (logged(s, "zs", "reduce_scatter", (total - e) * p.g_bytes,
                            f"dp grad reduce_scatter {k}")
                     + logged(s, "ezs", "reduce_scatter", e * p.g_bytes,
                              "dp grad reduce_scatter experts")
                     + logged(s, "zr", "all_reduce", _replica_params(total, e, plan) * p.g_bytes,
                              f"dp grad replica all_reduce {k}"))
            if k not in factors:            # the same collectives for every copy of a kind
                factors[k] = collectives_factor(st.chip, [comm.brief(*x) for x in bucket],
                                                [lt[k].bwd_loads])
            buckets.append((steps[k].bwd, c, factors[k]))
        tails.append(_bucket_tail(buckets, plan.overlap_dp))
        if plan.zero >= 1:                # the optimizer updates this rank's shard only
            local = dense_params / plan.shards + expert_params / plan.expert_shards
        else:
            local = dense_params + expert_params
        # an FP8 recipe's per-step part: the weights' FP8 copies, and the delayed recipe's
        # amax all-reduces, one per autocast exit (each micro-batch's forward of each model
        # chunk) and one in its backward (workloads/train.py, recipe_blocks), each over
        # the chunk's amaxes
        runs = st.micro_batches * len(mine)
        amax = amax_collectives(p, math.ceil(5 * fp8_gemms / len(mine)), comm.shapes["amax"].n)
        amax_s = sum(logged(s, "amax", "all_reduce", c.bytes, f"{c.name} (fp8 recipe)")
                     for c in amax)
        if amax:                                   # each run's, for the step's energy
            step_colls[s].extend(step_colls[s][-len(amax):] * (runs - 1))
        recipe_s = linear_params * cast_s + runs * amax_s
        fetched = 0.0               # weights in the tier: read in every forward and backward
        if "weight" in OFFLOAD_KINDS[plan.offload]:
            passes = 3 if plan.recompute == "full" else 2
            fetched = passes * st.micro_batches * p.w_bytes * sum(
                _rank_params(lp, k, lt[k].ops.moe, plan) for k in kinds)
        tier2.append(optimizer_tier_bytes(local, p, plan.offload) + fetched)
        own = dense_params + expert_params
        opt_s.append(local * (sec_per_param + norm_s) + own * zero_s + recipe_s)
        opt_j.append(local * (j_per_param + norm_j) + own * zero_j + linear_params * cast_j)
        opt_parts.append(EP.summed(((parts_per_param, local), (norm_parts, local),
                                    (zero_parts, own), (cast_parts, linear_params))))
        if plan.zero in (1, 2):
            bucket.clear()
            ag = (logged(s, "zs", "all_gather", dense_params * p.w_bytes, "dp param all-gather")
                  + logged(s, "ezs", "all_gather", expert_params * p.w_bytes,
                           "dp param all-gather experts"))
            # hidden behind the next step's first forward, slowing it (interference.py)
            first = sum(pipe.fwd[s])
            f = collectives_factor(st.chip, [comm.brief(*x) for x in bucket],
                                   [lt[k].fwd_loads for k in kinds])
            ag_s.append(beside_s(first, ag, f) - first if plan.overlap_dp and f > 1.0
                        else _exposed(ag, first, plan.overlap_dp))
        else:
            ag_s.append(0.0)
    emb = _tied_embedding_sync(st, pipe, tails, logged, step_colls)
    ends = [pipe.finish[s] + tails[s] + emb[s] + opt_s[s] + ag_s[s] for s in range(P)]
    return _Tail(tails, opt_s, opt_j, ag_s, ends, step_colls, opt_parts, emb, tier2)


#: The tied embedding's gradient all-reduce as the step's communication log names it.
TIED_EMBEDDING_LABEL = "pp tied embedding grad all_reduce"


def _tied_embedding_sync(st: _Setup, pipe: _Pipe, tails, logged, step_colls) -> list[float]:
    """Per device, what the all-reduce of a tied word embedding's gradient adds before its
    optimizer step (0 elsewhere): with tied embeddings and more than one stage the first
    stage's embedding and the last stage's head copy are kept in sync by an all-reduce of
    their gradient (``vocab × hidden ÷ tp`` at the gradient's bytes) over the embedding group,
    those two ranks, after the data-parallel gradient sync and before the optimizer; both
    wait for the later of the two [S: Megatron-LM core_r0.9.0 (1afee592)
    ``megatron/core/distributed/finalize_model_grads.py``: ``finish_grad_sync`` L111-112,
    then ``_allreduce_word_embedding_grads`` L13-36, a blocking ``all_reduce`` on
    ``get_embedding_group()``; NeMo v2.0.0 (e938df3) ``megatron_gpt_model.py`` without
    Megatron-Core's distributed optimizer: ``_finish_bucket_grad_sync`` then
    ``allreduce_first_last_embeddings``, L898-932, L1068-1100, the same all-reduce]."""
    plan, m = st.plan, st.model
    P = plan.pp
    emb = [0.0] * P
    if not (st.train and P > 1 and m.tie_word_embeddings):
        return emb
    nbytes = m.vocab_size * m.hidden_size / plan.tp * st.precision.g_bytes
    ar = logged(0, "emb", "all_reduce", nbytes, TIED_EMBEDDING_LABEL)
    step_colls[P - 1].append(("all_reduce", nbytes, st.comm.shapes["emb"].n))   # its peer
    ready = max(pipe.finish[s] + tails[s] for s in (0, P - 1))
    for s in (0, P - 1):
        emb[s] = ready + ar - (pipe.finish[s] + tails[s])
    return emb


def _exposed_on(st: _Setup, pipe: _Pipe, tail: _Tail, worst: int) -> dict[str, float]:
    """Exposed communication by kind on device ``worst`` (the slowest)."""
    exposed = {k: 0.0 for k in COMM_KINDS}
    m = st.micro_batches
    for k in _stage_kinds(st.plan, st.chunks, worst):
        for kk, x in st.steps[k].exposed_fwd.items():
            exposed[kk] += x * m
        for kk, x in st.steps[k].exposed_bwd.items():
            exposed[kk] += x * m
    exposed["pp"] += max(0.0, pipe.pp_exposed) + (pipe.pp_tax[worst] if pipe.pp_tax else 0.0)
    exposed["dp"] += tail.tails[worst] + tail.ag_s[worst]
    exposed["pp"] += tail.emb_s[worst]
    return exposed


def _hardware_flops(st: _Setup) -> float:
    """FLOPs every chip executes in the step (recomputation included)."""
    plan, lt = st.plan, st.lt
    hw = 0.0
    for s in range(plan.pp):
        for k in _stage_kinds(plan, st.chunks, s):
            x = lt[k].fwd_flops + lt[k].bwd_flops
            if plan.recompute == "full":
                x += lt[k].fwd_flops
            hw += x
    return hw * st.micro_batches * plan.tp * plan.dp * plan.cp


def _result(st: _Setup, pipe: _Pipe, tail: _Tail) -> ClusterResult:
    """Phase 4: the step's end, exposed communication, FLOPs, energy, power and the result."""
    model, chip, plan, sc = st.model, st.chip, st.plan, st.scenario
    phase, batch, length, m = sc.phase, sc.batch, st.length, st.micro_batches
    P = plan.pp
    ends = tail.ends
    worst = max(range(P), key=lambda s: ends[s])
    seconds = ends[worst]
    exposed = _exposed_on(st, pipe, tail, worst)
    bubble = 1.0 - max(pipe.busy) / pipe.t_pipe if pipe.t_pipe else 0.0
    flops = _model_flops(model, phase, batch, length, st.context, st.gen, st.precision,
                         sc.attention)
    hw = _hardware_flops(st)
    peak = chip.peak_ops_per_s[st.compute_dtype] * plan.chips
    tokens = batch * (length if phase != "decode" else 1)
    energy, busy_w, parts = _energy(chip, plan, st.lt, st.steps, st.chunks, st.comm, m,
                                    st.train, pipe.act, seconds, tail.opt_s, tail.opt_j,
                                    tail.opt_parts, tail.step_colls)
    energy_j = sum(energy.values())
    pwr = _power_and_cost(chip, plan.chips, seconds, energy_j, tokens)
    hottest = max(busy_w, default=0.0)
    hot = [] if hottest <= chip.tdp_w * (1 + TDP_TOLERANCE) else [
        f"{chip.name}: {hottest:.0f} W per chip while its ops run exceeds its "
        f"{chip.tdp_w:.0f} W TDP: not sustainable at {chip.clock_ghz:g} GHz"]
    stage_seconds = [{"stage": s, "forward_s": sum(pipe.fwd[s]), "backward_s": sum(pipe.bwd[s]),
                      "finish_s": pipe.finish[s], "grad_reduce_exposed_s": tail.tails[s],
                      "optimizer_s": tail.opt_s[s],
                      "param_all_gather_exposed_s": tail.ag_s[s],
                      "end_s": ends[s], "busy_power_w": busy_w[s]} for s in range(P)]
    return ClusterResult(
        phase=phase, model=model.name, chip=chip.name, cluster=st.cluster.name, plan=plan,
        chips=plan.chips, batch=batch, seq=length, micro_batches=m, seconds=seconds,
        tokens_per_s=tokens / seconds, mfu=flops / (peak * seconds),
        hfu=hw / (peak * seconds), flops=flops, hardware_flops=hw, bubble_fraction=bubble,
        exposed_comm_s=exposed, comm=st.comm.log, memory=st.mem, stage_seconds=stage_seconds,
        energy_j=energy_j, energy_breakdown=energy, energy_breakdown_j=parts,
        tdp_w=chip.tdp_w, warnings=hot, **pwr,
        precision=st.precision.to_dict(),
        timing="engine" if st.simulate is None else getattr(st.simulate, "timing", "custom"),
        layers=st.steps, pipeline=pipe.run,
        layout={"fwd": pipe.fwd, "bwd": pipe.bwd, "send_s": pipe.send, "chunks": st.chunks,
                "finish": pipe.finish, "tails": tail.tails, "optimizer": tail.opt_s,
                "embedding_sync": tail.emb_s,
                "param_ag": tail.ag_s, "pipeline_s": pipe.t_pipe},
        info={**_info(st, pipe), **({"offload": tier_report(
            chip, plan.offload, st.mem.breakdown, tail.tier2_bytes[worst], st.share3)}
            if plan.offload != "none" else {})})


def _info(st: _Setup, pipe: _Pipe) -> dict:
    """The result's ``info``: the schedule, the decode step's keys, the groups' shapes."""
    plan, sc = st.plan, st.scenario
    decode = None
    if sc.phase == "decode":
        w = forward_workload(st.model, st.precision, phase="decode", tp=plan.tp, cp=1,
                             ep=plan.ep, micro_batch=plan.micro_batch, seq=1,
                             context=st.context, gen=st.gen, attention=sc.attention,
                             routing=sc.routing)
        decode = {"prompt": st.context, "gen": st.gen,
                  "keys_per_query_by_block": w.info["keys_per_query_by_block"]}
    return {"schedule": pipe.sched, "pipeline_s": pipe.t_pipe, "send_s": pipe.send,
            "execution": sc.execution,
            "compute_dtype": st.compute_dtype,
            "stack": stack_info(sc, plan.sequence_parallel and plan.tp > 1, st.chip),
            "decode": decode,
            "layers_per_chunk": list(st.layers_per_chunk),
            "golden_pipeline": bool(st.golden or not st.train),
            "groups": {k: {"ranks": s.n, "per_domain": s.n_local, "domains": s.n_dom}
                       for k, s in st.comm.shapes.items()
                       if (k != "amax" or st.precision.quantized)   # an FP8 recipe's only
                       and (k != "emb" or TIED_EMBEDDING_LABEL in st.comm.log)},
            "identical_layers_simulated_once": True,
            # the stack's comm-GEMM overlap of the layers' TP all-reduces (tp_overlap.py)
            "tp_overlap": (dataclasses.asdict(st.chip.tp_overlap) if any(
                k.startswith(_LAPPED) for k in st.comm.log) else None)}
