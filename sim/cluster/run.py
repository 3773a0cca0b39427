"""A parallel plan's step on a cluster: the cluster layer's entry point for one scenario.

:func:`run_cluster_step` is what ``diptych run --cluster`` (and the facade's ``run`` given a
``cluster`` or a ``plan``) calls: it builds the :class:`~diptych.sim.cluster.plan.Plan` from
the scenario's degrees (when no plan is given), places it on the cluster (when none is given:
one scale-up domain of the plan's chips on the chip's own links,
:func:`~diptych.sim.cluster.topology.single_domain`) and returns
:func:`~diptych.sim.cluster.step.simulate_cluster_step`'s
:class:`~diptych.sim.cluster.step.ClusterResult`. A one-node run is
:func:`diptych.sim.run.run_workload`'s; the caller chooses.

Defaults of a plan built here: the training micro-batch is ``diptych run``'s
(:func:`~diptych.workloads.train.default_micro_batch`, ~8k tokens); an inference replica's
batch is split into ``pp`` micro-batches when it divides (so that the stages overlap), else
into single sequences. ``overlap=False`` turns every overlap knob off (tensor-, context-,
expert- and data-parallel communication all exposed). A training plan runs Megatron-Core's
sequence parallelism as the scenario says (:func:`~diptych.sim.run.scenario.sequence_parallel_on`:
by default on at ``tp > 1``, as a one-node ``run_workload`` does).
"""

from __future__ import annotations

import dataclasses
import warnings as _warnings
from typing import TYPE_CHECKING

from ...arch import load_chip
from ...workloads.registry import load_model
from ...workloads.train import default_micro_batch
from ..api import OpTimer
from ..run.node import resolve_parallelism
from ..run.scenario import Scenario, sequence_parallel_on
from ..run.variant import Variant
from ..run.waterfall import waterfall as efficiency_waterfall
from .power import limit_step_power

if TYPE_CHECKING:  # pragma: no cover
    from ...arch.chip import Chip
    from ...arch.cluster import Cluster
    from ...workloads.config import ModelConfig
    from .plan import Plan
    from .step import ClusterResult

def default_inference_micro_batch(replica_batch: int, pp: int) -> int:
    """Sequences per micro-batch of an inference replica: ``batch / pp`` when ``pp``
    divides the replica's batch (the pipeline's stages then all work), else 1."""
    return replica_batch // pp if replica_batch % pp == 0 else 1


def build_plan(s: Scenario, **fields):
    """A :class:`~diptych.sim.cluster.plan.Plan` from scenario ``s``'s degrees (see
    :func:`~diptych.sim.run.node.resolve_parallelism`), micro-batch (default: module
    docstring), recomputation, overlap and (training) sequence parallelism, and ``fields``
    (``zero``, ``zero_shards``, ``schedule``, ``virtual_stages``). Raises ValueError naming
    the flag or field."""
    from .plan import Plan

    par = s.parallelism
    t, d = resolve_parallelism(s.phase, par, cluster=True)
    if s.batch % d:
        raise ValueError(f"--batch ({s.batch}) must be divisible by dp ({d}): the global batch "
                         f"is split evenly over the data-parallel replicas")
    seq = _length(s)
    micro_batch = s.micro_batch
    if micro_batch is None:
        micro_batch = (default_micro_batch(s.batch // d, seq) if s.phase == "train" and seq
                       else default_inference_micro_batch(s.batch // d, par.pp or 1))
    off = {} if s.overlap else dict(overlap_tp=False, overlap_dp=False, overlap_cp=False,
                                    overlap_ep=False)
    # training: the scenario's sequence parallelism (default on at tp > 1); inference lowers
    # none, whatever the plan's field says (sim/cluster/layers.py)
    sp = {"sequence_parallel": sequence_parallel_on(s, t)} if s.phase == "train" else {}
    return Plan(tp=t, pp=par.pp or 1, dp=d, cp=par.cp or 1, ep=par.ep or 1,
                micro_batch=micro_batch, recompute=s.recompute, **off, **sp,
                **{"offload": s.offload, **fields})


def _length(s: Scenario) -> int | None:
    """The sequence length of a training scenario (``seq``, or ``prompt``); None otherwise."""
    if s.phase != "train":
        return None
    return s.seq if s.seq is not None else s.prompt


def run_cluster_step(chip: "Chip | str", model: "ModelConfig | str", scenario: Scenario, *,
                     cluster: "Cluster | str | None" = None, plan: "Plan | None" = None,
                     simulate: OpTimer | None = None, variant: "Variant | None" = None,
                     waterfall: bool = False) -> "ClusterResult":
    """The step of ``plan`` (or of the plan ``scenario``'s degrees give) on ``cluster`` (a
    :class:`~diptych.arch.cluster.Cluster`, preset name or path; or one domain of the plan's
    chips): see the module docstring. ``scenario``'s ``execution`` says how each layer kind is
    timed (:mod:`diptych.sim.cluster.timing`). On a chip with a ``[power]`` table whose
    stages draw more than its TDP while they run, the step is re-run at the clock the
    hottest one sustains (:mod:`diptych.sim.cluster.power`; ``scenario.power_limit=False``
    skips that). ``variant`` leaves mechanisms out (``--ideal``,
    :class:`~diptych.sim.run.variant.Variant`); ``waterfall`` adds the efficiency waterfall
    (:mod:`diptych.sim.run.waterfall`; the step re-run four times, with a pipeline-bubble
    step). Raises ValueError naming the flag or field for a plan that does not split the
    model, the batch or the cluster, or degrees that disagree with the plan given."""
    from ...arch.cluster import load_cluster
    from .step import simulate_cluster_step
    from .topology import single_domain

    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a Scenario, not {type(scenario).__name__}")
    chip = load_chip(chip)
    model = load_model(model)
    s = scenario
    if s.phase == "train" and s.seq is None:
        s = dataclasses.replace(s, seq=s.prompt)
    if plan is None:
        plan = build_plan(s)
    else:
        par = s.parallelism
        for name, v, want in (("chips", par.chips, plan.chips), ("tp", par.tp, plan.tp),
                              ("dp", par.dp, plan.dp), ("micro_batch", s.micro_batch,
                                                        plan.micro_batch),
                              ("sequence_parallel", s.sequence_parallel,
                               plan.sequence_parallel)):
            if v is not None and v != want:
                raise ValueError(f"{name} ({v}) disagrees with the plan's {name} ({want}): "
                                 f"give the parallel layout once, in the plan")
        if s.offload not in ("none", plan.offload):
            raise ValueError(f"offload ({s.offload}) disagrees with the plan's offload "
                             f"({plan.offload}): give it once, in the plan")
    where = load_cluster(cluster) if cluster is not None else single_domain(chip, plan.chips)
    nominal = simulate_cluster_step(model, chip, where, plan, s, simulate=simulate,
                                    variant=variant)
    if variant is not None and not variant.is_default:
        nominal.info["variant"] = dataclasses.asdict(variant)
    res = nominal
    if s.power_limit and not (variant and variant.no_power_limit):
        res = limit_step_power(
            nominal, chip, lambda c: simulate_cluster_step(model, c, where, plan, s,
                                                           simulate=simulate, variant=variant))
    if waterfall:
        wf = efficiency_waterfall(
            res, lambda u: simulate_cluster_step(model, chip, where, plan, s,
                                                 simulate=simulate, variant=u), variant,
            unlimited=nominal)
        res = dataclasses.replace(res, waterfall=wf.to_dict())
    context = s.context
    if context and context > model.max_position_embeddings:
        msg = (f"context of {context} tokens exceeds {model.name}'s max_position_embeddings "
               f"({model.max_position_embeddings})")
        res.warnings.append(msg)
        _warnings.warn(msg, stacklevel=2)
    if cluster is None:
        res.info["cluster_default"] = True
    return res
