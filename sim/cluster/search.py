"""Search the parallel layouts of a training run and rank those that fit by step time.

Candidates: every tensor-parallel degree that splits the model and stays inside a scale-up
domain (``max_tp``), context-parallel degrees that split the sequence, pipeline depths up to
the layer count, the data-parallel degree that fills the chips, expert-parallel degrees that
divide the experts and ``dp·cp`` (MoE models), ZeRO 0–3, GPipe / 1F1B / interleaved 1F1B
(``v`` in ``virtual_stages``), micro-batches of ``micro_batches`` sequences, and the three
recomputation modes. Invalid combinations are skipped (:func:`~.plan.check_plan`).

Two passes, because the engine takes seconds per new layer shape: every candidate's memory is
computed (no simulation) and those that fit are timed with the roofline estimate
(:mod:`diptych.sim.cluster.estimate`) and the closed-form pipeline; the best ``refine`` of
them are then simulated with the engine and the event-level pipeline, and ranked by that
time. Per-layer simulations are memoised across plans (:func:`~.timing.layer_times`), so the
engine runs once per distinct (tp, cp, ep, micro-batch) among the refined plans.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from ...arch.chip import Chip
from ...arch.cluster import Cluster, load_cluster
from ...arch.loader import load_chip
from ..limits import MAX_REFINE
from ..support import check_supported
from ...workloads.config import ModelConfig
from ...workloads.lower import valid_tp_degrees
from ...workloads.registry import load_model
from ..api import OpTimer
from ..run.node import default_precision, dropout_of
from ..run.offload import OFFLOADS, check_offload, offload_capacity_bytes
from ..run.scenario import Scenario
from .estimate import roofline_simulate
from .memory import plan_memory
from .plan import RECOMPUTE, SCHEDULES, Plan, check_plan, check_positive
from .step import ClusterResult, simulate_cluster_step


@dataclass
class SearchResult:
    """Ranked plans (engine-timed, best first), and what the search looked at."""

    plans: list[ClusterResult]
    candidates: int
    fitting: int
    screened: list[tuple[float, Plan]] = field(default_factory=list, repr=False)

    def to_dict(self, top: int | None = None) -> dict:
        rows = []
        for r in self.plans[:top]:
            rows.append({"tp": r.plan.tp, "pp": r.plan.pp, "dp": r.plan.dp, "ep": r.plan.ep,
                         "cp": r.plan.cp, "zero": r.plan.zero, "schedule": r.plan.schedule,
                         "virtual_stages": r.plan.virtual_stages,
                         "micro_batch": r.plan.micro_batch, "recompute": r.plan.recompute,
                         "seconds": r.seconds, "mfu": r.mfu, "hfu": r.hfu,
                         "tokens_per_s": r.tokens_per_s,
                         "bubble_fraction": r.bubble_fraction,
                         "exposed_comm_s": dict(r.exposed_comm_s),
                         "memory_bytes_per_chip": r.memory_bytes_per_chip, "fits": r.fits,
                         "memory_breakdown": dict(r.memory.breakdown),
                         "comm": r.comm, "execution": r.info.get("execution"),
                         "offload": r.plan.offload,
                         **({"offload_report": r.info["offload"]} if "offload" in r.info
                            else {})})
        return {"plans": rows, "candidates": self.candidates, "fitting": self.fitting,
                "refined": len(self.plans)}


def _check_space(**space) -> None:
    """Raise ValueError naming the first narrowing value outside its domain."""
    domains = {"schedules": SCHEDULES, "recompute": RECOMPUTE, "zero": (0, 1, 2, 3),
               "offload": OFFLOADS}
    for name, values in space.items():
        if values is None:
            continue
        if len(values) == 0:
            raise ValueError(f"{name} must name at least one value")
        for v in values:
            if name in domains:
                if v not in domains[name]:
                    raise ValueError(f"{name} must be among "
                                     f"{', '.join(map(str, domains[name]))}, not {v!r}")
            elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be positive integers, not {v!r}")


def _describe(space: dict) -> str:
    return ", ".join(f"{k} {','.join(map(str, v)) if isinstance(v, tuple) else v}"
                     for k, v in space.items())


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def candidate_plans(model: ModelConfig, chips: int, batch: int, seq: int, *,
                    max_tp: int, max_cp: int = 16, max_pp: int = 64, max_ep: int = 64,
                    micro_batches: tuple[int, ...] = (1, 2, 4),
                    virtual_stages: tuple[int, ...] = (2, 4),
                    zero: tuple[int, ...] = (0, 1, 2, 3),
                    recompute: tuple[str, ...] = RECOMPUTE,
                    schedules: tuple[str, ...] = SCHEDULES,
                    tp: tuple[int, ...] | None = None, pp: tuple[int, ...] | None = None,
                    cp: tuple[int, ...] | None = None, ep: tuple[int, ...] | None = None,
                    offload: tuple[str, ...] = ("none",),
                    sequence_parallel: bool = True) -> list[Plan]:
    """Every plan the search considers that passes :func:`check_plan` (module docstring).

    The keyword arguments narrow the space: ``micro_batches``, ``virtual_stages``, ``zero``,
    ``recompute``, ``schedules`` and ``offload`` (:data:`~diptych.sim.run.offload.OFFLOADS`)
    are the values tried; ``tp``/``pp``/``cp``/``ep``, when
    given, are the only degrees tried (each still subject to the divisibility rules). A
    pipeline of one stage always runs as ``1f1b`` (the schedules coincide there), so it is
    kept whatever ``schedules`` says. ``sequence_parallel``: every plan's (Megatron-Core's
    sequence parallelism where ``tp > 1``; nothing at ``tp = 1``). Raises ValueError naming
    a value outside its domain."""
    _check_space(micro_batches=micro_batches, virtual_stages=virtual_stages, zero=zero,
                 recompute=recompute, schedules=schedules, tp=tp, pp=pp, cp=cp, ep=ep,
                 offload=offload)
    out = []
    tps = [t for t in valid_tp_degrees(model, max_tp) if chips % t == 0
           and (tp is None or t in tp)]
    for t in tps:
        for c in _divisors(chips // t, max_cp):
            if (seq % (2 * c) and c > 1) or (cp is not None and c not in cp):
                continue
            for p in _divisors(chips // (t * c), min(max_pp, model.layers)):
                if pp is not None and p not in pp:
                    continue
                dp = chips // (t * c * p)
                eps = [1]
                if model.is_moe:
                    eps = [e for e in _divisors(model.experts, max_ep) if (dp * c) % e == 0]
                if ep is not None:
                    eps = [e for e in eps if e in ep]
                scheds = [("1f1b", 1)]
                if p > 1:
                    scheds = [(sch, 1) for sch in ("1f1b", "gpipe") if sch in schedules]
                    if "interleaved" in schedules:
                        scheds += [("interleaved", v) for v in virtual_stages]
                for e, (sch, v), mb, z, rc, off in itertools.product(
                        eps, scheds, micro_batches, zero, recompute, offload):
                    if batch % (dp * mb):
                        continue
                    plan = Plan(tp=t, pp=p, dp=dp, cp=c, ep=e, zero=z, schedule=sch,
                                virtual_stages=v, micro_batch=mb, recompute=rc, offload=off,
                                sequence_parallel=sequence_parallel)
                    try:
                        check_plan(plan, model, chips=chips, batch=batch, seq_len=seq)
                    except ValueError:
                        continue
                    out.append(plan)
    return out


def search_plans(model: "ModelConfig | str", chip: "Chip | str", cluster: "Cluster | str",
                 scenario: Scenario, *, refine: int = 8, max_tp: int | None = None,
                 simulate: OpTimer | None = None, screen_simulate: OpTimer | None = None,
                 progress: Callable[[int, int, str], None] | None = None,
                 **space) -> SearchResult:
    """Rank the training plans of ``model`` on ``scenario.parallelism.chips`` chips of
    ``cluster`` that fit (module docstring). From the training ``scenario``: the global
    ``batch`` and ``seq``, the precision pinned by its dtypes (default: training's,
    :func:`~diptych.sim.run.node.default_precision`), ``attention`` and ``execution`` (how
    the refined plans' layers are timed, :mod:`~diptych.sim.cluster.timing`, "Execution";
    the screen always sums its roofline estimates). ``refine``: plans timed with
    ``simulate`` (default: the engine) and the event-level pipeline; ``screen_simulate``:
    the first pass's op timer (default: the roofline estimate); ``progress(done, total,
    stage)`` is called as work proceeds (stage ``memory``, ``screen`` or ``refine``; the
    callback of :func:`diptych.tools.progress.progress_display`); other keyword arguments
    narrow the space (see :func:`candidate_plans`); on a chip with a second memory tier
    (``[dram2]``) the search tries every ``offload`` unless narrowed, and each plan's
    memory holds its offloaded state there. Every plan runs sequence parallelism (where
    ``tp > 1``) unless ``scenario.sequence_parallel`` is False.

    Raises ValueError naming the value for a scenario that is not a training one, a
    missing or non-positive ``chips``, a missing ``seq``, a non-positive ``refine``, more
    chips than the cluster has, a chip without DRAM, or no valid plan."""
    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a Scenario, not {type(scenario).__name__}")
    if scenario.phase != "train":
        raise ValueError(f"the plan search ranks training plans: scenario.phase must be "
                         f"'train', not {scenario.phase!r}")
    chips, batch, seq = scenario.parallelism.chips, scenario.batch, scenario.seq
    for name, v in (("chips", chips), ("batch", batch), ("seq", seq), ("refine", refine)):
        check_positive(name, v)
    if refine > MAX_REFINE:
        raise ValueError(f"refine must be at most {MAX_REFINE} plans (sim/limits.py), not "
                         f"{refine:,}")
    weights_dtype, act_dtype, kv_dtype = (scenario.weights_dtype, scenario.act_dtype,
                                          scenario.kv_dtype)
    recipe = scenario.recipe
    model = load_model(model)
    chip = load_chip(chip)
    cluster = load_cluster(cluster)
    chip.require_dram("the plan search (memory per chip and the per-op engine)")
    if chips > cluster.chips:
        raise ValueError(f"chips ({chips}) exceeds the cluster's {cluster.chips} chips "
                         f"({cluster.name})")
    p = default_precision(chip, "train", weights_dtype, act_dtype, kv_dtype, recipe,
                          scenario.cross_entropy, **dropout_of(scenario))
    check_supported(chip, p)
    base = Scenario(phase="train", batch=batch, seq=seq, weights_dtype=weights_dtype,
                    act_dtype=act_dtype, kv_dtype=kv_dtype, recipe=recipe,
                    attention=scenario.attention, cross_entropy=scenario.cross_entropy,
                    execution=scenario.execution, **dropout_of(scenario))
    screen_scenario = dataclasses.replace(base, execution="sum")
    limit = max_tp or min(cluster.scale_up.chips, 64)
    given = dict(space)
    if "offload" not in space:
        space = {**space, "offload": OFFLOADS if chip.dram2 is not None else ("none",)}
    for off in space["offload"]:
        check_offload(off, chip=chip)
    plans = candidate_plans(model, chips, batch, seq, max_tp=limit,
                            sequence_parallel=scenario.sequence_parallel is not False, **space)
    if not plans:
        raise ValueError(f"no parallel plan splits {model.name} over {chips} chips with batch "
                         f"{batch} and seq {seq} (tp up to {limit}"
                         + (f"; narrowed to {_describe(given)}" if given else "") + ")")
    screen = screen_simulate or roofline_simulate
    cap = chip.dram.capacity_bytes
    tier2 = offload_capacity_bytes(chip) if chip.dram2 is not None else 0.0
    fitting = []
    for i, q in enumerate(plans):
        if progress and i % 64 == 0:
            progress(i, len(plans), "memory")
        info = check_plan(q, model, chips=chips, batch=batch, seq_len=seq)
        mem = plan_memory(model, q, p, phase="train", seq=seq,
                          micro_batches=info["micro_batches"],
                          layers_per_chunk=info["layers_per_chunk"], capacity_bytes=cap,
                          attention=scenario.attention, advise=False,
                          routing=scenario.routing,
                          tier2_capacity_bytes=tier2 if q.offload != "none" else 0.0)
        if mem.fits:
            fitting.append(q)
    if progress:
        progress(len(plans), len(plans), "memory")
    scored = []
    for i, q in enumerate(fitting):
        if progress and i % 32 == 0:
            progress(i, len(fitting), "screen")
        r = simulate_cluster_step(model, chip, cluster, q, screen_scenario, golden=False,
                                  simulate=screen)
        scored.append((r.seconds, q))
    if progress:
        progress(len(fitting), len(fitting), "screen")
    scored.sort(key=lambda x: x[0])
    best = []
    # (on an issue/one_queue stack the golden run plays interleaved and 1F1B finalists alike
    # in Megatron's issue order, step._pipeline; GPipe ones, which Megatron-Core does not
    # run, keep the data-flow model; docs/cluster.md "Pipeline schedules")
    for i, (_, q) in enumerate(scored[:refine]):
        if progress:
            progress(i, min(refine, len(scored)), "refine")
        best.append(simulate_cluster_step(model, chip, cluster, q, base, golden=True,
                                          simulate=simulate))
    if progress:
        progress(len(best), len(best), "refine")
    best.sort(key=lambda r: r.seconds)
    return SearchResult(plans=best, candidates=len(plans), fitting=len(fitting),
                        screened=scored)
