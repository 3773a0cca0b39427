"""``run_workload`` on a cluster: a parallel plan's step through the cluster layer.

:func:`run_on_cluster` is what :func:`diptych.sim.run.node.run_workload` delegates to when it
is given a ``cluster`` or a ``plan``: it builds the :class:`~diptych.sim.cluster.plan.Plan`
(when only the degrees are given), places it on the cluster (when only the plan is given: one
scale-up domain of the plan's chips on the chip's own links,
:func:`~diptych.sim.cluster.topology.single_domain`) and returns
:func:`~diptych.sim.cluster.step.simulate_cluster_step`'s
:class:`~diptych.sim.cluster.step.ClusterResult`.

Defaults of a plan built here: the training micro-batch is ``diptych run``'s
(:func:`~diptych.workloads.train.default_micro_batch`, ~8k tokens); an inference replica's
batch is split into ``pp`` micro-batches when it divides (so that the stages overlap), else
into single sequences. ``overlap=False`` turns every overlap knob off (tensor-, context-,
expert- and data-parallel communication all exposed).
"""

from __future__ import annotations

import warnings as _warnings
from collections.abc import Callable

from ...arch.chip import Chip
from ...workloads.config import ModelConfig
from ..run.node import resolve_parallelism
from ...workloads.train import default_micro_batch

RECOMPUTE_MODES = ("none", "selective", "full")


def recompute_mode(recompute) -> str:
    """``none``, ``selective`` or ``full`` from a mode or a bool (True: full, the old
    ``--recompute`` flag); raises ValueError naming ``recompute`` otherwise."""
    if recompute is True:
        return "full"
    if recompute is False or recompute is None:
        return "none"
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)} (or a bool: "
                         f"True = full), not {recompute!r}")
    return recompute


def default_inference_micro_batch(replica_batch: int, pp: int) -> int:
    """Sequences per micro-batch of an inference replica: ``batch / pp`` when ``pp``
    divides the replica's batch (the pipeline's stages then all work), else 1."""
    return replica_batch // pp if replica_batch % pp == 0 else 1


def build_plan(phase: str, *, batch: int, seq: int | None, chips: int | None, tp: int | None,
               dp: int | None, pp: int | None = None, cp: int | None = None,
               ep: int | None = None, micro_batch: int | None = None, recompute="none",
               overlap: bool = True, **fields):
    """A :class:`~diptych.sim.cluster.plan.Plan` from the command's degrees (see
    :func:`~diptych.sim.run.node.resolve_parallelism`), micro-batch (default: module
    docstring) and ``fields`` (``zero``, ``zero_shards``, ``schedule``, ``virtual_stages``).
    Raises ValueError naming the flag or field."""
    from .plan import Plan

    t, d = resolve_parallelism(phase, chips, tp, dp, pp=pp, cp=cp, ep=ep, cluster=True)
    if batch % d:
        raise ValueError(f"--batch ({batch}) must be divisible by dp ({d}): the global batch "
                         f"is split evenly over the data-parallel replicas")
    if micro_batch is None:
        micro_batch = (default_micro_batch(batch // d, seq) if phase == "train" and seq
                       else default_inference_micro_batch(batch // d, pp or 1))
    off = {} if overlap else dict(overlap_tp=False, overlap_dp=False, overlap_cp=False,
                                  overlap_ep=False)
    return Plan(tp=t, pp=pp or 1, dp=d, cp=cp or 1, ep=ep or 1, micro_batch=micro_batch,
                recompute=recompute_mode(recompute), **off, **fields)


def run_on_cluster(chip: Chip, model: ModelConfig, *, cluster, plan, phase: str, batch: int,
                   prompt: int | None, gen: int | None, seq: int | None, tp: int | None,
                   dp: int | None, chips: int | None, weights_dtype: str | None,
                   act_dtype: str | None, kv_dtype: str | None, overlap: bool, recompute,
                   micro_batch: int | None, attention: str,
                   simulate: Callable | None = None, execution: str = "schedule"):
    """The step of ``plan`` (or of the plan the degrees give) on ``cluster`` (or on one
    domain of the plan's chips): see the module docstring. ``prompt``/``gen``/``seq`` as in
    :func:`~diptych.sim.run.node.run_workload` (training takes ``seq``, or ``prompt`` as
    its length); ``execution``: how each layer kind is timed (:mod:`diptych.sim.cluster.timing`).
    Raises ValueError naming the flag or field for a plan that does not split
    the model, the batch or the cluster."""
    from ...arch.cluster import load_cluster
    from .step import simulate_cluster_step
    from .topology import single_domain

    if phase == "train" and seq is None:
        seq = prompt
    if plan is None:
        plan = build_plan(phase, batch=batch, seq=seq, chips=chips, tp=tp, dp=dp,
                          micro_batch=micro_batch, recompute=recompute, overlap=overlap)
    else:
        for name, v, want in (("chips", chips, plan.chips), ("tp", tp, plan.tp),
                              ("dp", dp, plan.dp), ("micro_batch", micro_batch,
                                                    plan.micro_batch)):
            if v is not None and v != want:
                raise ValueError(f"{name} ({v}) disagrees with the plan's {name} ({want}): "
                                 f"give the parallel layout once, in the plan")
    where = load_cluster(cluster) if cluster is not None else single_domain(chip, plan.chips)
    res = simulate_cluster_step(model, chip, where, plan, batch=batch, seq=seq, phase=phase,
                                prompt=prompt, gen=gen, weights_dtype=weights_dtype,
                                act_dtype=act_dtype, kv_dtype=kv_dtype, attention=attention,
                                simulate=simulate, execution=execution)
    context = (prompt + (1 if gen is None else gen) if phase == "decode"
               else prompt if phase == "prefill" else seq)
    if context and context > model.max_position_embeddings:
        msg = (f"context of {context} tokens exceeds {model.name}'s max_position_embeddings "
               f"({model.max_position_embeddings})")
        res.warnings.append(msg)
        _warnings.warn(msg, stacklevel=3)
    if cluster is None:
        res.info["cluster_default"] = True
    return res
