"""Run a model phase on a chip: lower, simulate each distinct op once, scale, sum.

:func:`run_workload` is the library entry point behind ``diptych run``. Every op of a block is
simulated once (the engine memoises identical ops) and multiplied by the block's ``repeat``, so
identical transformer layers cost one simulation (a fused attention record is timed from its
parts' simulations, see :mod:`diptych.sim.run.attention`). Timing per block: the compute ops
run in sequence; with ``overlap`` the block's tensor-parallel collectives hide behind its compute
(``max(compute, comm)``, the collective-matmul / async-TP ideal), without it they add. The
data-parallel gradient all-reduce overlaps the whole backward pass when ``overlap`` is set.
That is ``execution="sum"`` (kept for comparison; the cluster step composes either, per layer kind);
``execution="schedule"`` (the default, and the only way on an all-SRAM chip) times the phase
as a list schedule of its program instead, with the residency plan honoured by the engine,
fusion and the chip's fixed costs (:mod:`diptych.sim.run.scheduled`, docs/program.md).

What ``seconds`` means per phase: prefill, the time to first token (TTFT); decode, the mean
time per output token (TPOT) over the ``gen`` steps: one step with each layer kind at its mean
keys over them (:func:`diptych.workloads.lower.decode_mean`; for full attention, the step at
the mean context prompt + (gen+1)/2); train, one optimizer step. ``energy_j`` is the energy of
that same interval summed over all chips; ``energy_breakdown_j`` the same joules by component
(MAC arrays, vector units, SRAM, DRAM, NoC, D2D, links, static: :mod:`diptych.sim.energy_parts`),
which sum to it.

A parallel plan's step on a cluster is :func:`diptych.sim.cluster.run.run_cluster_step`'s
(docs/cluster.md); what to run, in both, is one :class:`~diptych.sim.run.scenario.Scenario`.
"""

from __future__ import annotations

import dataclasses
import warnings as _warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ...arch import Chip, load_chip
from ...workloads.config import ModelConfig
from ...workloads.graph import Workload
from ...workloads.loss import DEFAULT as LOSS_DEFAULT
from ...workloads.dropout import FIELDS as DROPOUT_FIELDS
from ...workloads.lower import decode_mean, prefill
from ...workloads.memory import MemoryReport, inference_memory, train_memory
from ...workloads.hf import quantised_weights
from ...workloads.moe import Routing
from ...workloads.precision import (FP8_RECIPES, Precision, check_inference_recipe,
                                   recipe_for)
from ...workloads.registry import load_model
from ...workloads.program import Block
from ...workloads.train import train_step
from ...workloads.tp2d import check_2d, x_axis
from ..protocols import torus_slice
from ..api import OpTimer
from ..limits import check_ops
from .. import energy_parts as EP
from ..support import check_supported, wider
from ..regime import busiest_unit
from .precision_ops import with_precision_ops
from .scenario import (EXECUTIONS, Parallelism, Scenario, default_execution,
                       sequence_parallel_on)
from .links import collective_energy_j, collective_seconds
from .offload import (OFFLOAD_KINDS, check_offload, offload_capacity_bytes, split_tiers,
                      third_tier_share, tier_report, tiered_parts)
from .summed import simulate_workload
from .tp_overlap import gemm_mapping, one_node_overlap
from .stack import scenario_chip, stack_info
from .variant import Variant, collective_timer, variant_chip, variant_timer
from .waterfall import waterfall as efficiency_waterfall


@dataclass
class RunResult:
    """Totals and per-op records of one run (one batch size). See the module docstring."""

    phase: str
    chip: str
    model: str
    batch: int
    chips: int
    tp: int
    dp: int
    seconds: float
    flops: float
    hardware_flops: float
    dram_bytes: float
    mfu: float
    hfu: float
    ttft_s: float | None
    tpot_s: float | None
    tokens_per_s: float
    tokens_per_s_per_user: float | None
    energy_j: float
    energy_j_per_token: float
    fits: bool
    memory_bytes: float
    memory_breakdown: dict[str, float]
    bound: str
    layers: list[dict]
    dram_bw_utilization: float = 0.0
    compute_seconds: float = 0.0
    memory_bound_seconds: float = 0.0
    communication_seconds: float = 0.0
    #: time in ops near neither roof (sim/regime.py: fill/drain, installs, quantisation)
    latency_bound_seconds: float = 0.0
    #: ``energy_j`` by component (J, all chips; sums to it): :mod:`diptych.sim.energy_parts`
    energy_breakdown_j: dict[str, float] = field(default_factory=dict)
    precision: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # one chip's economics (diptych.arch.cost.token_economics); None without a [cost] table
    cost_usd: float | None = None
    usd_per_mtok: float | None = None
    tokens_per_s_per_usd: float | None = None
    execution: str = "sum"
    fixed_costs_s: float | None = None
    utilization: dict[str, float] = field(default_factory=dict)
    schedule: dict[str, Any] = field(default_factory=dict)
    timeline: list = field(default_factory=list, repr=False)
    #: the efficiency waterfall (:mod:`diptych.sim.run.waterfall`) when it was asked for
    waterfall: dict | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict (the output of ``diptych run --json`` for one batch size)."""
        d = dict(self.__dict__)
        d.pop("timeline")
        d["dram_bytes_per_chip"] = self.dram_bytes / self.chips
        d["flops_per_chip"] = self.hardware_flops / self.chips
        d["energy_j_per_chip"] = self.energy_j / self.chips
        d["power_w_per_chip"] = self.energy_j / self.chips / self.seconds if self.seconds else None
        d["tokens_per_s_per_chip"] = self.tokens_per_s / self.chips
        d["memory_bytes_per_chip"] = self.memory_bytes
        d["busiest_unit"] = busiest_unit(self.utilization) if self.utilization else None
        return d


def dropout_of(s: Scenario) -> dict:
    """Scenario ``s``'s dropout probabilities as :func:`default_precision`'s keywords."""
    return {n: getattr(s, n) for n in DROPOUT_FIELDS}


def scenario_precision(chip: Chip, s: Scenario) -> Precision:
    """:func:`default_precision` for scenario ``s`` (its phase, dtypes, recipe, loss and
    dropout)."""
    return default_precision(chip, s.phase, s.weights_dtype, s.act_dtype, s.kv_dtype, s.recipe,
                             s.cross_entropy, **dropout_of(s))


def default_precision(chip: Chip, phase: str, weights_dtype=None, act_dtype=None,
                      kv_dtype=None, recipe: str | None = None,
                      cross_entropy: str = LOSS_DEFAULT, *, hidden_dropout: float = 0.0,
                      attention_dropout: float = 0.0) -> Precision:
    """Inference: the chip's default dtype for weights and activations, KV as activations.
    Training: BF16 (FP16 if the chip lacks BF16) with FP32 master copy and moments; FP8
    weights and activations (or a named ``recipe``) train with a recipe
    (:func:`~diptych.workloads.precision.recipe_for`): per-tensor FP8 linear layers over BF16
    storage, or MXFP8 storage; inference under a named ``recipe`` (an inference one,
    :data:`~diptych.workloads.precision.INFERENCE_RECIPES`) stores the linear layers' weights
    in FP8 and keeps the activations and the other weights in BF16 (FP16 without it), KV as
    the activations unless ``kv_dtype``; the loss runs as ``cross_entropy`` names
    (:data:`~diptych.workloads.loss.IMPLEMENTATIONS`), with the step's dropout probabilities
    (:mod:`~diptych.workloads.dropout`)."""
    if phase == "train":
        base = next((d for d in ("bf16", "fp16") if chip.supports(d)), None)
        r = recipe_for(weights_dtype, act_dtype, recipe)
        if r in FP8_RECIPES:
            if base is None:
                raise ValueError(f"recipe {r!r} keeps attention, norms and activations in "
                                 f"bf16 or fp16; chip {chip.name!r} supports neither "
                                 f"({', '.join(chip.dtypes)})")
            return Precision(weights=base, activations=base, kv=kv_dtype or base, grads=base,
                             linear="fp8", recipe=r, cross_entropy=cross_entropy,
                             hidden_dropout=hidden_dropout, attention_dropout=attention_dropout)
        if base is None and act_dtype is None and r is None:
            raise ValueError(f"chip {chip.name!r} supports neither bf16 nor fp16 "
                             f"({', '.join(chip.dtypes)}); pass --act-dtype for training")
        a = act_dtype or ("mxfp8" if r == "mxfp8" else base)
        w = weights_dtype or a
        return Precision(weights=w, activations=a, kv=kv_dtype or a, grads=a, recipe=r,
                         cross_entropy=cross_entropy, hidden_dropout=hidden_dropout,
                         attention_dropout=attention_dropout)
    if recipe is not None:
        check_inference_recipe(recipe, weights_dtype, act_dtype)
        a = act_dtype or next((d for d in ("bf16", "fp16") if chip.supports(d)), None)
        if a is None:
            raise ValueError(f"recipe {recipe!r} keeps the activations in bf16 or fp16; chip "
                             f"{chip.name!r} supports neither ({', '.join(chip.dtypes)})")
        return Precision(weights="fp8", activations=a, kv=kv_dtype or a, linear="fp8",
                         recipe=recipe, unquantized_weights=a)
    a = act_dtype or chip.default_dtype
    w = weights_dtype or a
    return Precision(weights=w, activations=a, kv=kv_dtype or a)


def _default_simulate():
    from .. import simulate
    return simulate


def resolve_parallelism(phase: str, par: Parallelism, *, cluster: bool = False
                        ) -> tuple[int, int]:
    """(tp, dp) from a scenario's degrees.

    Without a cluster (``cluster=False`` and no ``pp``/``cp``/``ep`` above 1): chips = tp × dp
    for training, and inference has no data parallelism (chips = tp). On a cluster (a
    parallel plan): chips = tp × pp × dp × cp in every phase (inference's ``dp`` are
    independent replicas, which expert parallelism is carved from); ``dp`` defaults to what
    fills ``chips``. Raises ValueError naming the flags."""
    chips, tp, dp, pp, cp, ep = (par.chips, par.tp, par.dp, par.pp, par.cp, par.ep)
    plan = cluster or par.plan_only
    if phase != "train" and not plan:
        if dp not in (None, 1):
            raise ValueError("dp applies to training only; for inference use --tp (replicas "
                             "of a served model are independent), or give --cluster to "
                             "place replicas (and expert parallelism) on a cluster")
        t = tp or chips or 1
        if chips is not None and chips != t:
            raise ValueError(f"--chips ({chips}) must equal --tp ({t}) for inference")
        return t, 1
    t = tp or 1
    replica = t * (pp or 1) * (cp or 1)        # chips of one data-parallel replica
    what, parts = ("tp × pp × cp", f"{t} × {pp or 1} × {cp or 1}") if plan else ("tp", f"{t}")
    if dp is None:
        if chips is not None and chips % replica:
            raise ValueError(f"--chips ({chips}) must be a multiple of "
                             + (f"{what} ({parts})" if plan else f"--tp ({t})"))
        d = chips // replica if chips else 1
    else:
        d = dp
    if chips is not None and chips != replica * d:
        raise ValueError(f"--chips ({chips}) must equal {what} × dp ({parts} × {d})")
    if ep not in (None, 1) and (d * (cp or 1)) % ep:
        raise ValueError(f"--ep ({ep}) must divide dp × cp ({d} × {cp or 1}): expert-parallel "
                         f"ranks are carved out of the data- and context-parallel ranks")
    return t, d


def tp_grid(chip: Chip, model: ModelConfig, s: Scenario, tp: int
            ) -> tuple[tuple[int, ...], int] | None:
    """The 2-D layout's grid (the torus slice holding the ``tp`` chips, the index of its X
    side; :mod:`~diptych.workloads.tp2d`) under ``s.tp_layout`` 2d, None under 1d.
    ValueError naming the value on a chip without a torus or a group of one."""
    if s.tp_layout == "1d":
        return None
    dims = chip.interconnect.torus_dims if chip.interconnect is not None else 0
    if not dims:
        raise ValueError(f"--tp-layout 2d splits the weights over the axes of a torus; chip "
                         f"{chip.name!r} has none (interconnect.torus_dims = {dims})")
    if tp < 4:
        raise ValueError(f"--tp-layout 2d needs an X x YZ grid of >= 2 x 2 chips; --tp is {tp}")
    check_2d(model, s.phase)
    shape = torus_slice(tp, dims)
    return shape, x_axis(model, shape)


def lower_workload(model: ModelConfig, s: Scenario, *, precision: Precision, tp: int,
                   dp: int, sequence_parallel: bool = False,
                   grid: tuple[tuple[int, ...], int] | None = None
                   ) -> tuple[Workload, int]:
    """The per-chip workload of ``s``'s phase and the context length its memory must hold;
    a training step under Megatron's ``sequence_parallel`` when asked (``tp > 1``);
    ``grid``: the 2-D layout's (:func:`tp_grid`), None for Megatron's 1-D layout.

    Memoised on what the lowering reads (the model, the scenario's phase, sizes, attention,
    routing, recomputation and micro-batch, the precision and the degrees): no chip enters
    it, so a sweep's chips, the power limit's re-runs at another clock and the model-FLOPs
    reference of :func:`_metrics` share one lowering per (model, phase, precision) instead
    of lowering every layer again (issue 27). The workload is immutable (its ``info`` is
    read, never written: every reader copies it)."""
    return _lowered(model, s.phase, s.batch, s.prompt, s.gen, s.seq, s.attention, s.routing,
                    s.recompute, s.micro_batch, precision, tp, dp, sequence_parallel, grid)


@lru_cache(maxsize=64)
def _lowered(model: ModelConfig, phase: str, batch: int, prompt: int | None, gen: int | None,
             seq: int | None, attention: str, routing: Routing, recompute: str,
             micro_batch: int | None, precision: Precision, tp: int, dp: int,
             sequence_parallel: bool, grid) -> tuple[Workload, int]:
    """:func:`lower_workload` of the scenario fields it reads (the memo's key)."""
    if phase == "prefill":
        if prompt is None:
            raise ValueError("prefill needs --prompt (prompt length in tokens)")
        return prefill(model, batch, prompt, precision=precision, tp=tp,
                       attention=attention, routing=routing, tp_grid=grid), prompt
    if phase == "decode":
        if prompt is None:
            raise ValueError("decode needs --prompt (context before generation)")
        g = 1 if gen is None else gen
        return decode_mean(model, batch, prompt, g, precision=precision, tp=tp,
                           attention=attention, routing=routing, tp_grid=grid), prompt + g
    seq = seq if seq is not None else prompt
    if seq is None:
        raise ValueError("train needs --seq (sequence length in tokens)")
    return train_step(model, batch, seq, precision=precision, tp=tp, dp=dp,
                      recompute=recompute == "full", micro_batch=micro_batch,
                      attention=attention, routing=routing,
                      sequence_parallel=sequence_parallel), seq


def _bound(t: dict) -> str:
    """The run's roofline regime (sim/regime.py): the one its ops spent the most time in,
    collectives by their exposed time; ties in the order compute, memory, communication,
    latency."""
    parts = {"compute": t["compute_seconds"], "memory": t["memory_bound_seconds"],
             "communication": t["communication_seconds"],
             "latency": t.get("latency_bound_seconds", 0.0)}
    return max(parts, key=parts.get)


@dataclass(frozen=True)
class _Setup:
    """What a run resolves from its scenario before lowering: the degrees, the precision and
    the dtype its MFU refers to, and whether it runs sequence parallelism."""

    tp: int
    dp: int
    precision: Precision
    compute_dtype: str
    sequence_parallel: bool = False

    @property
    def chips(self) -> int:
        return self.tp * self.dp


def _validate(chip: Chip, s: Scenario) -> _Setup:
    """The checks a one-node run adds to the scenario's own: DRAM for ``sum``, no selective
    recomputation, the degrees, a precision the chip computes."""
    if s.execution == "sum" and not chip.has_dram:
        raise ValueError(f"chip {chip.name!r} has no DRAM (an all-SRAM chip): "
                         f"execution='sum' reads every operand from DRAM; use "
                         f"execution='schedule' (the residency plan keeps every tensor on chip)")
    if s.recompute == "selective":
        raise ValueError("recompute 'selective' needs a parallel plan: pass plan= or "
                         "cluster= (on the command line: --cluster, or any of --pp, --cp, "
                         "--ep, --zero, which run on one domain of the chip's links)")
    check_offload(s.offload, chip=chip, phase=s.phase, execution=s.execution)
    tp, dp = resolve_parallelism(s.phase, s.parallelism)
    p = scenario_precision(chip, s)
    return _Setup(tp, dp, p, check_supported(chip, p), sequence_parallel_on(s, tp))


def _lower(chip: Chip, model: ModelConfig, s: Scenario, setup: _Setup
           ) -> tuple[Workload, MemoryReport, list[str]]:
    """The phase lowered for one chip with the chip's precision ops, its memory report and
    the warnings (a context beyond the model's window)."""
    p, tp = setup.precision, setup.tp
    w, context = lower_workload(model, s, precision=p, tp=tp, dp=setup.dp,
                                sequence_parallel=setup.sequence_parallel,
                                grid=tp_grid(chip, model, s, tp))
    w = with_precision_ops(w, chip)    # block scales and dequantisation (precision_ops.py)
    check_ops((op for b in w.blocks for op in b.ops), chip)  # refuse before simulating any
    warns = []
    q = quantised_weights(model)
    if q is not None and p.weights != q:
        msg = (f"{model.name}'s checkpoint ships {model.checkpoint_quant} weights "
               f"(quantization_config); this run models {p.weights} weights "
               f"(--weights-dtype {q} models the checkpoint)")
        warns.append(msg)
        _warnings.warn(msg, stacklevel=3)
    if context > model.max_position_embeddings:
        msg = (f"context of {context} tokens exceeds {model.name}'s max_position_embeddings "
               f"({model.max_position_embeddings})")
        warns.append(msg)
        _warnings.warn(msg, stacklevel=3)
    if model.vision_tower:
        msg = (f"{model.name} is multimodal (vision_config): its vision tower is not "
               f"simulated; parameters, FLOPs and memory are the text model's")
        warns.append(msg)
        _warnings.warn(msg, stacklevel=3)
    cap = chip.memory_bytes   # DRAM, or an all-SRAM chip's SRAM
    for _, tier in chip.memory_tiers:    # what the first tier cannot hold lives in the others
        cap += tier.capacity_bytes
    if s.phase == "train":
        mem: MemoryReport = train_memory(model, p, tp, w, cap, s.recompute == "full",
                                         sequence_parallel=setup.sequence_parallel)
    else:
        narrow = tuple(d for d in ("fp8", "int8", "int4")
                       if d == "int4" or chip.supports(wider(p.activations, d)))
        mem = inference_memory(model, p, tp, s.batch, context, w, cap, narrow)
    if s.offload != "none":
        mem = _offloaded_memory(chip, s, mem)
    elif chip.dram2 is not None and mem.total_bytes > chip.dram.capacity_bytes:
        _check_tiers(chip, s, mem.total_bytes)
    return w, mem, warns


def _offloaded_memory(chip: Chip, s: Scenario, mem: MemoryReport) -> MemoryReport:
    """A training step's memory with ``s.offload``'s state in the second tier, and what it
    cannot hold in a third (:class:`~diptych.workloads.memory.MemoryReport`'s ``tier2_parts``,
    their room :func:`~diptych.sim.run.offload.offload_capacity_bytes`): it fits when each
    tier holds its parts. What stays must fit the first tier, else ValueError: the planner
    would spill other state into the second, which a step's separately planned programs
    cannot share."""
    one, _ = split_tiers(mem.breakdown, s.offload)
    mem = dataclasses.replace(mem, capacity_bytes=chip.dram.capacity_bytes,
                              tier2_parts=tiered_parts(s.offload),
                              tier2_capacity_bytes=offload_capacity_bytes(chip),
                              min_tp=None, suggestion=None)
    if mem.tier1_bytes > mem.capacity_bytes:
        raise ValueError(f"with --offload {s.offload} the first tier of chip {chip.name!r} "
                         f"still holds {mem.tier1_bytes / 2**30:.1f} GiB ("
                         + ", ".join(f"{k} {v / 2**30:.1f}" for k, v in one.items() if v)
                         + f" GiB) against its {chip.dram.capacity_gib:g} GiB: "
                         + ("--offload params, " if s.offload == "optimizer" else "")
                         + "--recompute, a smaller --micro-batch or more chips")
    return dataclasses.replace(mem, advice="" if mem.fits else (
        f"the offloaded state ({mem.tier2_bytes / 2**30:.1f} GiB) exceeds the second tier's "
        f"{chip.dram2.capacity_gib:g} GiB"
        + (f" and the third's {chip.dram3.capacity_gib:g} GiB" if chip.dram3 is not None
           else "")))


def _share3(chip: Chip, s: Scenario, mem: MemoryReport) -> float:
    """The offloaded state's share in the chip's third tier (0 without an offload, a third
    tier, or when the second holds it: :func:`~diptych.sim.run.offload.third_tier_share`)."""
    return third_tier_share(chip, mem.tier2_bytes) if s.offload != "none" else 0.0


def _check_tiers(chip: Chip, s: Scenario, total: float) -> None:
    """A run whose footprint spills into the second DRAM tier needs the residency planner
    to place it (``execution="schedule"``) over one program (an inference phase: training's
    micro-batch and optimizer programs are planned apart, so a training step places state in
    the second tier only by kind, with ``offload``, :mod:`~diptych.sim.run.offload`).
    ValueError naming what to change."""
    spill = f"{total / 2**30:.1f} GiB exceed the first tier's {chip.dram.capacity_gib:g} GiB"
    if s.phase == "train":
        raise ValueError(f"{spill}: a training step on chip {chip.name!r} would spill into "
                         f"its second memory tier ([dram2]), which holds training state only "
                         f"as asked: --offload optimizer or --offload params (ZeRO-Offload-"
                         f"style, docs/chips.md), or fit the first tier (more chips, "
                         f"--recompute, a narrower precision)")
    if s.execution != "schedule":
        raise ValueError(f"{spill}: the second memory tier ([dram2]) of chip {chip.name!r} is "
                         f"placed by the residency planner, which --execution sum skips: use "
                         f"--execution schedule")


def _time(w: Workload, chip: Chip, model: ModelConfig, s: Scenario, setup: _Setup,
          simulate: OpTimer, collective_time=None, tier3_share: float = 0.0) -> dict:
    """The lowered phase timed as its program's list schedule or as the sum of its ops; in
    training on a chip whose stack overlaps tensor-parallel communication with the GEMMs
    (``[tp_overlap]``), each layer's all-reduces cost what that overlap costs instead
    (:func:`~diptych.sim.run.tp_overlap.one_node_overlap`). ``tier3_share``: the offloaded
    state's share in the third tier (:func:`~diptych.sim.run.offload.third_tier_share`)."""
    if s.execution == "schedule":
        from ...workloads.train import dp_buckets
        from .scheduled import schedule_workload
        buckets = dp_buckets(model, setup.precision, setup.tp) if setup.dp > 1 else None
        t = schedule_workload(w, chip, simulate=simulate, fusion=s.fusion,
                              dp_buckets=buckets, collective_time=collective_time,
                              tier2_kinds=OFFLOAD_KINDS[s.offload], tier3_share=tier3_share)
    else:
        t = simulate_workload(w, chip, overlap=s.overlap, simulate=simulate,
                              collective_time=collective_time)
    if setup.tp > 1 and chip.tp_overlap is not None:
        def alone(op, on) -> float:
            one = Workload(w.phase, (Block.of_ops("x", 1, (op,), "forward"),), tokens=1,
                           batch=1)
            return simulate_workload(with_precision_ops(one, on), on,
                                     simulate=simulate)["seconds"]

        delta, link_j = one_node_overlap(
            w, chip, t, overlap=s.overlap, scheduled=s.execution == "schedule", alone=alone,
            coll=collective_time or (lambda op: collective_seconds(op, chip)),
            coll_j=lambda op: collective_energy_j(op, chip), mapping=gemm_mapping(simulate),
            precision=setup.precision, sequence_parallel=setup.sequence_parallel)
        t = {**t, "seconds": t["seconds"] + delta,
             "communication_seconds": t["communication_seconds"] + delta,
             "energy_j": t["energy_j"] + link_j,
             "energy_breakdown_j": {**t["energy_breakdown_j"],
                                    "link": t["energy_breakdown_j"]["link"] + link_j}}
    return t


def memory_tiers_info(chip: Chip, t: dict, n_chips: int) -> dict:
    """A result's ``info.memory_tiers`` from a scheduled run ``t`` (per chip) on ``n_chips``:
    the state each DRAM tier holds (``bytes``, per chip) and by tensor kind (``kinds``: which
    tensors live in which tier), the bytes the second tier moved (``dram2_bytes_moved``, all
    chips) and per slower tier (``tiers``): ``bytes_moved`` (all chips), ``stream_s`` (those
    bytes of one chip at the tier's rate: pins, or the lower of pins and links), ``added_s``
    (what the tier's shares add to the ops' time over the same bytes in the first tier, per
    chip, before the schedule overlaps anything) and ``energy_j`` (its bytes' DRAM energy at
    its pJ/bit, all chips)."""
    out = {"bytes": dict(t["dram_tiers"]), "kinds": t["dram_tier_kinds"],
           "dram2_bytes_moved": t["dram2_bytes"] * n_chips}
    tiers = {}
    for name, tier in chip.memory_tiers:
        moved = t.get(f"{name}_bytes", 0.0)
        tiers[name] = {"kind": tier.kind, "attach": tier.attach,
                       "bytes_moved": moved * n_chips,
                       "stream_s": moved / tier.bytes_per_s,
                       "added_s": t["tier_added_s"].get(name, 0.0),
                       "energy_j": t["tier_energy_j"].get(name, 0.0) * n_chips}
    out["tiers"] = tiers
    return out


def _metrics(chip: Chip, model: ModelConfig, s: Scenario, setup: _Setup, w: Workload,
             mem: MemoryReport, warns: list[str], t: dict) -> RunResult:
    """Totals, rates, MFU and the per-op records of one timed run."""
    p, n_chips, batch, prompt = setup.precision, setup.chips, s.batch, s.prompt
    secs = t["seconds"]
    # model FLOPs: the unsplit graph of the whole (global) batch, without recomputation
    # (neither --recompute's nor fused attention backward's recomputed scores), every
    # token's k experts once (balanced routing: no padding, no drops)
    ref, _ = lower_workload(model, dataclasses.replace(s, recompute="none", micro_batch=None,
                                                       routing=Routing()),
                            precision=p, tp=1, dp=1)
    # (the unsplit graph's default micro-batching may differ; FLOPs do not depend on it)
    model_flops = ref.flops(recompute=False)
    hw_flops = w.flops() * n_chips
    peak = chip.peak_ops_per_s[setup.compute_dtype] * n_chips
    energy = t["energy_j"] * n_chips
    if s.phase == "prefill":
        tokens = batch * prompt
        ttft, tpot = secs, None
        tps, tps_user = tokens / secs, prompt / secs
    elif s.phase == "decode":
        tokens = batch
        ttft, tpot = None, secs
        tps, tps_user = batch / secs, 1.0 / secs
    else:
        tokens = batch * w.info["seq_len"]
        ttft = tpot = tps_user = None
        tps = tokens / secs
    info = dict(w.info)
    info.update(prompt=prompt, gen=s.gen, seq=s.seq, overlap=s.overlap,
                recompute=s.recompute == "full", attention=s.attention,
                compute_dtype=setup.compute_dtype, simulated_ops=w.op_count(),
                vector_ops=w.vector_ops * n_chips, collective_bytes=w.collective_bytes,
                identical_layers_simulated_once=True,
                stack=stack_info(s, setup.sequence_parallel, chip))
    if "dram_tiers" in t:      # where the state lives and what the slower tiers moved
        info["memory_tiers"] = memory_tiers_info(chip, t, n_chips)
    if s.offload != "none":    # per chip: which tensors live where, the tier's time and energy
        info["offload"] = tier_report(chip, s.offload, mem.breakdown, t.get("dram2_bytes", 0.0),
                                      _share3(chip, s, mem),
                                      (t["dram_tiers"].get("dram3", 0), t.get("dram3_bytes", 0.0))
                                      if "dram_tiers" in t else None)
    return RunResult(
        phase=s.phase, chip=chip.name, model=model.name, batch=batch, chips=n_chips,
        tp=setup.tp, dp=setup.dp, seconds=secs, flops=model_flops, hardware_flops=hw_flops,
        dram_bytes=t["dram_bytes"] * n_chips, mfu=model_flops / (peak * secs),
        hfu=hw_flops / (peak * secs), ttft_s=ttft, tpot_s=tpot, tokens_per_s=tps,
        tokens_per_s_per_user=tps_user, energy_j=energy, energy_j_per_token=energy / tokens,
        fits=mem.fits, memory_bytes=mem.total_bytes, memory_breakdown=dict(mem.breakdown),
        bound=_bound(t), layers=t["layers"],
        dram_bw_utilization=_bw_share(t["dram_bytes"], secs, chip),
        compute_seconds=t["compute_seconds"], memory_bound_seconds=t["memory_bound_seconds"],
        communication_seconds=t["communication_seconds"],
        latency_bound_seconds=t.get("latency_bound_seconds", 0.0),
        energy_breakdown_j=EP.scaled(t["energy_breakdown_j"], n_chips),
        precision=p.to_dict(),
        memory=mem.to_dict(), info=info, warnings=warns, execution=s.execution,
        fixed_costs_s=t.get("fixed_costs_s"), utilization=t.get("utilization", {}),
        schedule={k: t[k] for k in ("pieces", "launch_s", "step_sync_s", "stream_bytes_per_s",
                                    "fused") if k in t},
        timeline=t.get("timeline", []))


def _adjust(res: RunResult, chip: Chip, model: ModelConfig, s: Scenario,
            simulate: OpTimer | None, variant: Variant | None = None) -> RunResult:
    """The power limit (re-running the scenario at the clock the TDP sustains) and the cost
    figures of a chip with ``[power]`` / ``[cost]`` tables."""
    if s.power_limit and chip.power is not None:
        from .power_limit import apply_power_limit
        again = dataclasses.replace(s, power_limit=False)
        res = apply_power_limit(res, chip,
                                lambda c: run_workload(c, model, again, simulate=simulate,
                                                       variant=variant))
    if chip.cost is not None:
        from ...arch.cost import cost_metrics
        econ = cost_metrics(chip, res.to_dict())
        res = dataclasses.replace(res, cost_usd=econ["cost_usd"],
                                  usd_per_mtok=econ["usd_per_mtok"],
                                  tokens_per_s_per_usd=econ["tokens_per_s_per_usd"])
    return res


def run_workload(chip: "Chip | str", model: "ModelConfig | str", scenario: Scenario, *,
                 simulate: OpTimer | None = None, variant: Variant | None = None,
                 waterfall: bool = False) -> RunResult:
    """Lower ``scenario``'s phase of ``model`` for ``chip`` and simulate it (see the module
    docstring): validate → lower → time → metrics → adjustments.

    The scenario (:class:`~diptych.sim.run.scenario.Scenario`) holds the phase and its sizes,
    the precision, the degrees (``tp``; ``dp`` for training), the attention kernel, the
    execution (``schedule``: a list schedule of the program with the residency plan and the
    chip's fixed costs, :mod:`diptych.sim.run.scheduled`; ``sum``: every op timed alone
    with its operands in DRAM, times added, :mod:`diptych.sim.run.summed`) and the runtime
    knobs. ``simulate`` replaces :func:`diptych.sim.simulate` (an :class:`OpTimer`; tests use
    a roofline double). For a chip with a ``[power]`` table the run is reported at the clock
    it can sustain within its TDP, with idle arrays power-gated
    (:mod:`diptych.sim.run.power_limit`; ``power_limit=False`` skips that). With a
    ``[cost]`` table the result carries ``cost_usd``, ``usd_per_mtok`` and
    ``tokens_per_s_per_usd``. A parallel plan's step on a cluster is
    :func:`diptych.sim.cluster.run.run_cluster_step`'s. ``variant``
    (:class:`~diptych.sim.run.variant.Variant`) leaves mechanisms out (``--ideal``, the
    steps of the efficiency waterfall); ``waterfall``: add the efficiency waterfall, peak to
    MFU by mechanism (:mod:`diptych.sim.run.waterfall`; the scenario re-run four times,
    five when the power limit binds).
    """
    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a Scenario, not {type(scenario).__name__}")
    v = variant or Variant()
    if v.no_power_limit:
        scenario = dataclasses.replace(scenario, power_limit=False)
    chip0 = scenario_chip(load_chip(chip), scenario)
    chip = variant_chip(chip0, v)
    model = load_model(model)
    setup = _validate(chip, scenario)
    w, mem, warns = _lower(chip, model, scenario, setup)
    t = _time(w, chip, model, scenario, setup,
              variant_timer(simulate, v) or _default_simulate(), collective_timer(v),
              _share3(chip, scenario, mem))
    res = _metrics(chip, model, scenario, setup, w, mem, warns, t)
    if not v.is_default:
        res = dataclasses.replace(res, info={**res.info, "variant": dataclasses.asdict(v)})
    res = _adjust(res, chip, model, scenario, simulate, v)
    if waterfall:
        quiet = dataclasses.replace(scenario, power_limit=False)
        pl = res.info.get("power_limit")
        limited = pl is not None and pl["clock_ghz"] < pl["nominal_clock_ghz"]
        wf = efficiency_waterfall(
            res, lambda u: run_workload(chip0, model, quiet, simulate=simulate, variant=u), v,
            unlimited=None if limited else res)
        res = dataclasses.replace(res, waterfall=wf.to_dict())
    return res


def run_curve(chip, model, scenario: Scenario, *, batches: list[int],
              progress: Callable | None = None, simulate: OpTimer | None = None,
              variant: Variant | None = None, waterfall: bool = False) -> dict:
    """Run ``scenario`` at one batch size after another (the batching curve) and mark where
    decode turns compute-bound: the smallest batch whose run is compute-bound (None if none
    is). ``progress(done, total, label)`` is told before each batch and once at the end;
    ``variant`` and ``waterfall`` as :func:`run_workload` takes them, for every batch."""
    if not batches:
        raise ValueError("batches must list at least one batch size")
    tell = progress or (lambda *_: None)
    results = []
    for i, b in enumerate(batches):
        tell(i, len(batches), f"batch {b}")
        results.append(run_workload(chip, model, dataclasses.replace(scenario, batch=b),
                                    simulate=simulate, variant=variant, waterfall=waterfall))
    tell(len(batches), len(batches), "done")
    turn = next((r.batch for r in results if r.bound == "compute"), None)
    return {"results": results, "compute_bound_batch": turn}


@dataclass
class TopologyResult:
    """Totals and per-op records of a topology file (a list of GEMMs) on one chip."""

    chip: str
    source: str
    seconds: float
    flops: float
    dram_bytes: float
    mfu: float
    energy_j: float
    bound: str
    layers: list[dict]
    dram_bw_utilization: float = 0.0
    #: ``energy_j`` by component (J; sums to it): :mod:`diptych.sim.energy_parts`
    energy_breakdown_j: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def run_topology(chip: "Chip | str", path, *, dtype: str | None = None,
                 simulate: Callable | None = None, execution: str | None = None,
                 fusion: bool = True) -> TopologyResult:
    """Simulate the GEMMs of a SCALE-Sim topology CSV or GEMM list in sequence on ``chip``
    (``dtype`` defaults to the chip's default precision). ``execution``: "schedule" (a chain
    program, each GEMM reading its predecessor's output, with the residency plan and fixed
    costs) or "sum" (each GEMM alone from DRAM, times added); None: :func:`default_execution`."""
    from ...workloads.program import Block
    from ...workloads.scalesim import load_topology

    chip = load_chip(chip)
    if execution is None:
        execution = default_execution()
    if execution not in EXECUTIONS:
        raise ValueError(f"execution must be one of {', '.join(EXECUTIONS)}, not "
                         f"{execution!r}")
    if execution == "sum":
        chip.require_dram("execution='sum' (every operand from DRAM) in run_topology")
    dt = dtype or chip.default_dtype
    if not chip.supports(dt):
        raise ValueError(f"chip {chip.name!r} does not support {dt} (supports "
                         f"{', '.join(chip.dtypes)})")
    ops = load_topology(path, dtype=dt)
    check_ops(ops, chip)
    w = Workload("topology", (Block.of_ops("topology", 1, tuple(ops)),), tokens=1, batch=1)
    if execution == "schedule":
        from .scheduled import schedule_workload
        t = schedule_workload(w, chip, simulate=simulate or _default_simulate(), fusion=fusion)
    else:
        t = simulate_workload(w, chip, simulate=simulate)
    secs = t["seconds"]
    return TopologyResult(chip=chip.name, source=str(path), seconds=secs, flops=w.flops(),
                          dram_bytes=t["dram_bytes"],
                          mfu=w.flops() / (chip.peak_ops_per_s[dt] * secs), energy_j=t["energy_j"],
                          bound=_bound(t), layers=t["layers"],
                          dram_bw_utilization=_bw_share(t["dram_bytes"], secs, chip),
                          energy_breakdown_j=dict(t["energy_breakdown_j"]))


def _bw_share(dram_bytes: float, secs: float, chip) -> float:
    """Achieved share of the DRAM pin bandwidth (0 on a chip without DRAM)."""
    return dram_bytes / (secs * chip.dram_bytes_per_s) if chip.has_dram else 0.0
