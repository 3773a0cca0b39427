"""Run a model phase on a chip: lower, simulate each distinct op once, scale, sum.

:func:`run_workload` is the library entry point behind ``diptych run``. Every op of a block is
simulated once (the engine memoises identical ops) and multiplied by the block's ``repeat``, so
identical transformer layers cost one simulation (a fused attention record is timed from its
parts' simulations, see :mod:`diptych.workloads.fused`). Timing per block: the compute ops run in
sequence; with ``overlap`` the block's tensor-parallel collectives hide behind its compute
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
that same interval summed over all chips.

Given a ``cluster`` or a ``plan``, :func:`run_workload` runs a parallel plan's step on a
cluster instead (:mod:`diptych.sim.cluster.run`, docs/cluster.md).
"""

from __future__ import annotations

import dataclasses
import warnings as _warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...arch import Chip, load_chip
from ..limits import check_ops, check_sizes
from ..support import check_supported, wider
from ...workloads.config import ModelConfig
from ...workloads.graph import Workload
from ...workloads.lower import decode_mean, prefill
from ...workloads.memory import MemoryReport, inference_memory, train_memory
from ...workloads.precision import Precision
from .precision_ops import with_precision_ops
from .summed import simulate_workload
from ...workloads.registry import load_model
from ...workloads.train import train_step

if TYPE_CHECKING:  # pragma: no cover
    from ...arch.cluster import Cluster
    from ..cluster import ClusterResult, Plan

PHASES = ("prefill", "decode", "train")
EXECUTIONS = ("sum", "schedule")


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
        return d


def default_precision(chip: Chip, phase: str, weights_dtype=None, act_dtype=None,
                      kv_dtype=None) -> Precision:
    """Inference: the chip's default dtype for weights and activations, KV as activations.
    Training: BF16 (FP16 if the chip lacks BF16) with FP32 master copy and moments."""
    if phase == "train":
        base = next((d for d in ("bf16", "fp16") if chip.supports(d)), None)
        if base is None and act_dtype is None:
            raise ValueError(f"chip {chip.name!r} supports neither bf16 nor fp16 "
                             f"({', '.join(chip.dtypes)}); pass --act-dtype for training")
        a = act_dtype or base
        w = weights_dtype or a
        return Precision(weights=w, activations=a, kv=kv_dtype or a, grads=a)
    a = act_dtype or chip.default_dtype
    w = weights_dtype or a
    return Precision(weights=w, activations=a, kv=kv_dtype or a)


def _default_simulate():
    from .. import simulate
    return simulate


def resolve_parallelism(phase: str, chips: int | None, tp: int | None, dp: int | None, *,
                        pp: int | None = None, cp: int | None = None, ep: int | None = None,
                        cluster: bool = False) -> tuple[int, int]:
    """(tp, dp) from the optional --chips/--tp/--dp (and --pp/--cp/--ep).

    Without a cluster (``cluster=False`` and no ``pp``/``cp``/``ep`` above 1): chips = tp × dp
    for training, and inference has no data parallelism (chips = tp). On a cluster (a
    parallel plan): chips = tp × pp × dp × cp in every phase (inference's ``dp`` are
    independent replicas, which expert parallelism is carved from); ``dp`` defaults to what
    fills ``chips``. Raises ValueError naming the flags."""
    for n, v in (("chips", chips), ("tp", tp), ("dp", dp), ("pp", pp), ("cp", cp), ("ep", ep)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{n} must be a positive integer, not {v!r}")
    plan = cluster or any(v not in (None, 1) for v in (pp, cp, ep))
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


def lower_workload(model: ModelConfig, phase: str, *, batch: int, prompt: int | None,
                   gen: int | None, seq: int | None, precision: Precision, tp: int, dp: int,
                   recompute: bool = False, micro_batch: int | None = None,
                   attention: str = "fused") -> tuple[Workload, int]:
    """The per-chip workload of a phase and the context length its memory must hold."""
    if phase == "prefill":
        if prompt is None:
            raise ValueError("prefill needs --prompt (prompt length in tokens)")
        return prefill(model, batch, prompt, precision=precision, tp=tp,
                       attention=attention), prompt
    if phase == "decode":
        if prompt is None:
            raise ValueError("decode needs --prompt (context before generation)")
        g = 1 if gen is None else gen
        return decode_mean(model, batch, prompt, g, precision=precision, tp=tp,
                           attention=attention), prompt + g
    if phase == "train":
        s = seq if seq is not None else prompt
        if s is None:
            raise ValueError("train needs --seq (sequence length in tokens)")
        return train_step(model, batch, s, precision=precision, tp=tp, dp=dp,
                          recompute=recompute, micro_batch=micro_batch, attention=attention), s
    raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")


def _bound(t: dict) -> str:
    parts = {"compute": t["compute_seconds"], "memory": t["memory_bound_seconds"],
             "communication": t["communication_seconds"]}
    return max(parts, key=parts.get)


def run_workload(chip: "Chip | str", model: "ModelConfig | str", *, phase: str, batch: int,
                 prompt: int | None = None, gen: int | None = None, seq: int | None = None,
                 tp: int | None = None, dp: int | None = None, chips: int | None = None,
                 weights_dtype: str | None = None, act_dtype: str | None = None,
                 kv_dtype: str | None = None, overlap: bool = True,
                 recompute: "bool | str" = False, micro_batch: int | None = None,
                 attention: str = "fused", execution: str | None = None,
                 fusion: bool = True,
                 simulate: Callable | None = None, power_limit: bool = True,
                 cluster: "Cluster | str | None" = None, plan: "Plan | None" = None
                 ) -> "RunResult | ClusterResult":
    """Lower ``phase`` of ``model`` for ``chip`` and simulate it (see module docstring).

    ``batch`` is the number of sequences (global batch for training, split over ``dp``);
    ``prompt`` the prompt (prefill) or context before generation (decode); ``gen`` the number
    of generated tokens (decode, default 1); ``seq`` the training sequence length;
    ``micro_batch`` sequences per training micro-batch (default: see
    :func:`diptych.workloads.train.default_micro_batch`); ``attention`` "fused" (default,
    FlashAttention-style, see :mod:`diptych.workloads.fused`) or "unfused".
    ``execution``: "schedule" (a list schedule of the program with the residency plan and the
    chip's fixed costs, see :mod:`diptych.sim.run.scheduled`) or "sum" (every op timed alone
    with its operands in DRAM, times added: see the module docstring); None:
    :func:`default_execution` (the schedule; on a cluster step it times each layer kind,
    :mod:`diptych.sim.cluster.timing`); ``fusion`` (schedule only): fuse elementwise and
    norm ops into GEMMs where the chip allows it.
    ``simulate`` replaces :func:`diptych.sim.simulate` (tests use a roofline double).
    For a chip with a ``[power]`` table the run is reported at the clock it can sustain within
    its TDP, with idle arrays power-gated (:mod:`diptych.sim.run.power_limit`;
    ``power_limit=False`` skips that). With a ``[cost]`` table the result carries
    ``cost_usd``, ``usd_per_mtok`` and ``tokens_per_s_per_usd``.

    ``cluster`` (a :class:`~diptych.arch.cluster.Cluster`, preset name or path) or ``plan``
    (a :class:`~diptych.sim.cluster.plan.Plan`): the step of a parallel plan on a cluster,
    :func:`diptych.sim.cluster.simulate_cluster_step`'s
    :class:`~diptych.sim.cluster.step.ClusterResult` (pipeline, ZeRO, expert and context
    parallelism over the cluster's topology; see
    :func:`diptych.sim.cluster.run.run_on_cluster` for the defaults: without a plan the
    degrees ``tp``/``dp``/``chips`` make one, without a cluster the plan's chips form one
    scale-up domain on the chip's own links). ``recompute``: ``"none"``, ``"selective"``
    (a plan only), ``"full"``, or a bool (True = full). A cluster run has no power limit
    or cost figures; its layers are timed by ``execution`` (each layer kind's scheduled
    program, or its ops summed).
    """
    from ..cluster.run import recompute_mode

    if execution is None:
        execution = default_execution()
    if execution not in EXECUTIONS:
        raise ValueError(f"execution must be one of {', '.join(EXECUTIONS)}, not "
                         f"{execution!r}")
    chip = load_chip(chip)
    if cluster is None and plan is None and execution == "sum" and not chip.has_dram:
        raise ValueError(f"chip {chip.name!r} has no DRAM (an all-SRAM chip): "
                         f"execution='sum' reads every operand from DRAM; use "
                         f"execution='schedule' (the residency plan keeps every tensor on chip)")
    model = load_model(model)
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
    check_sizes(batch=batch, micro_batch=micro_batch, prompt=prompt, gen=gen, seq=seq)
    mode = recompute_mode(recompute)
    if cluster is not None or plan is not None:
        from ..cluster.run import run_on_cluster
        return run_on_cluster(chip, model, cluster=cluster, plan=plan, phase=phase,
                              batch=batch, prompt=prompt, gen=gen, seq=seq, tp=tp, dp=dp,
                              chips=chips, weights_dtype=weights_dtype, act_dtype=act_dtype,
                              kv_dtype=kv_dtype, overlap=overlap, recompute=mode,
                              micro_batch=micro_batch, attention=attention,
                              simulate=simulate, execution=execution)
    if mode == "selective":
        raise ValueError("recompute 'selective' needs a parallel plan: pass plan= or "
                         "cluster= (on the command line: --cluster, or any of --pp, --cp, "
                         "--ep, --zero, which run on one domain of the chip's links)")
    recompute = mode == "full"
    tp, dp = resolve_parallelism(phase, chips, tp, dp)
    n_chips = tp * dp
    p = default_precision(chip, phase, weights_dtype, act_dtype, kv_dtype)
    comp_dtype = check_supported(chip, p)
    w, context = lower_workload(model, phase, batch=batch, prompt=prompt, gen=gen, seq=seq,
                                precision=p, tp=tp, dp=dp, recompute=recompute,
                                micro_batch=micro_batch, attention=attention)
    w = with_precision_ops(w, chip)    # block scales and dequantisation (sim/run/precision_ops.py)
    check_ops((op for b in w.blocks for op in b.ops), chip)  # refuse before simulating any
    warns = []
    if context > model.max_position_embeddings:
        msg = (f"context of {context} tokens exceeds {model.name}'s max_position_embeddings "
               f"({model.max_position_embeddings})")
        warns.append(msg)
        _warnings.warn(msg, stacklevel=2)
    cap = chip.memory_bytes   # DRAM, or an all-SRAM chip's SRAM
    if phase == "train":
        mem: MemoryReport = train_memory(model, p, tp, w, cap, recompute)
    else:
        narrow = tuple(d for d in ("fp8", "int8", "int4")
                       if d == "int4" or chip.supports(wider(p.activations, d)))
        mem = inference_memory(model, p, tp, batch, context, w, cap, narrow)

    if execution == "schedule":
        from .scheduled import schedule_workload
        from ...workloads.train import dp_buckets
        t = schedule_workload(w, chip, simulate=simulate or _default_simulate(), fusion=fusion,
                              dp_buckets=dp_buckets(model, p, tp) if dp > 1 else None)
    else:
        t = simulate_workload(w, chip, overlap=overlap, simulate=simulate)
    secs = t["seconds"]
    # model FLOPs: the unsplit graph of the whole (global) batch, without recomputation
    # (neither --recompute's nor fused attention backward's recomputed scores)
    ref, _ = lower_workload(model, phase, batch=batch, prompt=prompt, gen=gen, seq=seq,
                            precision=p, tp=1, dp=1, recompute=False, attention=attention)
    # (the unsplit graph's default micro-batching may differ; FLOPs do not depend on it)
    model_flops = ref.flops(recompute=False)
    hw_flops = w.flops() * n_chips
    peak = chip.peak_ops_per_s[comp_dtype] * n_chips
    energy = t["energy_j"] * n_chips
    if phase == "prefill":
        tokens = batch * prompt
        ttft, tpot = secs, None
        tps, tps_user = tokens / secs, prompt / secs
    elif phase == "decode":
        tokens = batch
        ttft, tpot = None, secs
        tps, tps_user = batch / secs, 1.0 / secs
    else:
        tokens = batch * w.info["seq_len"]
        ttft = tpot = tps_user = None
        tps = tokens / secs
    info = dict(w.info)
    info.update(prompt=prompt, gen=gen, seq=seq, overlap=overlap, recompute=recompute,
                attention=attention,
                compute_dtype=comp_dtype, simulated_ops=w.op_count(),
                vector_ops=w.vector_ops * n_chips, collective_bytes=w.collective_bytes,
                identical_layers_simulated_once=True)
    res = RunResult(
        phase=phase, chip=chip.name, model=model.name, batch=batch, chips=n_chips, tp=tp, dp=dp,
        seconds=secs, flops=model_flops, hardware_flops=hw_flops,
        dram_bytes=t["dram_bytes"] * n_chips, mfu=model_flops / (peak * secs),
        hfu=hw_flops / (peak * secs), ttft_s=ttft, tpot_s=tpot, tokens_per_s=tps,
        tokens_per_s_per_user=tps_user, energy_j=energy, energy_j_per_token=energy / tokens,
        fits=mem.fits, memory_bytes=mem.total_bytes, memory_breakdown=dict(mem.breakdown),
        bound=_bound(t), layers=t["layers"],
        dram_bw_utilization=_bw_share(t["dram_bytes"], secs, chip),
        compute_seconds=t["compute_seconds"], memory_bound_seconds=t["memory_bound_seconds"],
        communication_seconds=t["communication_seconds"],
        precision={"weights": p.weights, "activations": p.activations, "kv": p.kv,
                   "accumulation": p.accumulation, "grads": p.grads, "master": p.master,
                   "moments": p.moments},
        memory=mem.to_dict(), info=info, warnings=warns, execution=execution,
        fixed_costs_s=t.get("fixed_costs_s"), utilization=t.get("utilization", {}),
        schedule={k: t[k] for k in ("pieces", "launch_s", "step_sync_s", "stream_bytes_per_s",
                                    "fused") if k in t},
        timeline=t.get("timeline", []))
    if power_limit and chip.power is not None:
        from .power_limit import apply_power_limit
        again = dict(phase=phase, batch=batch, prompt=prompt, gen=gen, seq=seq, tp=tp, dp=dp,
                     weights_dtype=weights_dtype, act_dtype=act_dtype, kv_dtype=kv_dtype,
                     overlap=overlap, recompute=recompute, micro_batch=micro_batch,
                     attention=attention, execution=execution, fusion=fusion,
                     simulate=simulate, power_limit=False)
        res = apply_power_limit(res, chip, lambda c: run_workload(c, model, **again))
    if chip.cost is not None:
        from ...arch.cost import cost_metrics
        econ = cost_metrics(chip, res.to_dict())
        res = dataclasses.replace(res, cost_usd=econ["cost_usd"],
                                  usd_per_mtok=econ["usd_per_mtok"],
                                  tokens_per_s_per_usd=econ["tokens_per_s_per_usd"])
    return res


def run_curve(chip, model, *, batches: list[int], progress: Callable | None = None,
              **kwargs) -> dict:
    """Run one batch size after another (the batching curve) and mark where decode turns
    compute-bound: the smallest batch whose run is compute-bound (None if none is).
    ``progress(done, total, label)`` is told before each batch and once at the end."""
    if not batches:
        raise ValueError("batches must list at least one batch size")
    tell = progress or (lambda *_: None)
    results = []
    for i, b in enumerate(batches):
        tell(i, len(batches), f"batch {b}")
        results.append(run_workload(chip, model, batch=b, **kwargs))
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

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def default_execution() -> str:
    """The execution a run gets when none is given: "schedule" (issue 9: the program's list
    schedule with residency, fusion and fixed costs) on every chip; a cluster step composes
    its layer kinds' scheduled programs over its pipeline (:mod:`diptych.sim.cluster.timing`);
    serving steps are timed the same way (:class:`diptych.sim.serving.oracle.Replica`)."""
    return "schedule"


def run_topology(chip: "Chip | str", path, *, dtype: str | None = None,
                 simulate: Callable | None = None, execution: str | None = None,
                 fusion: bool = True) -> TopologyResult:
    """Simulate the GEMMs of a SCALE-Sim topology CSV or GEMM list in sequence on ``chip``
    (``dtype`` defaults to the chip's default precision). ``execution``: "schedule" (a chain
    program, each GEMM reading its predecessor's output, with the residency plan and fixed
    costs) or "sum" (each GEMM alone from DRAM, times added); None: :func:`default_execution`."""
    from ...workloads.graph import Block
    from ...workloads.topology import load_topology

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
    w = Workload("topology", (Block("topology", 1, tuple(ops)),), tokens=1, batch=1)
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
                          dram_bw_utilization=_bw_share(t["dram_bytes"], secs, chip))


def _bw_share(dram_bytes: float, secs: float, chip) -> float:
    """Achieved share of the DRAM pin bandwidth (0 on a chip without DRAM)."""
    return dram_bytes / (secs * chip.dram_bytes_per_s) if chip.has_dram else 0.0
