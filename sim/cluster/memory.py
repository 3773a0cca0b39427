"""Memory per chip of a plan: training state sharded by ZeRO, activations in flight under the
pipeline schedule, KV cache for inference; whether it fits and the cheapest change that does.

Per pipeline device (the worst one is reported):

* **weights, gradients, optimizer state** of the device's layers (and the embedding on the
  first device, the head on the last), per rank after tensor and expert parallelism
  (:mod:`diptych.sim.cluster.params`). ZeRO shards them over the data-parallel ranks ``d =
  dp·cp`` (routed experts over their ``dp·cp/ep`` expert-data-parallel ranks), Rajbhandari
  et al. 2020: stage 1 the optimizer state, 2 also the gradients, 3 also the weights. With the
  default precision that is ZeRO's ``(2 + 2 + K)Ψ`` with ``K = 12`` (FP32 master + two FP32
  moments): ``16Ψ``, ``4Ψ + 12Ψ/d``, ``2Ψ + 14Ψ/d``, ``16Ψ/d``
  (:func:`diptych.workloads.memory.zero_state_bytes`). Stage 2 keeps one layer's gradients
  unsharded (the bucket being reduced); stage 3 keeps two layers' gathered weights (the one
  computing and the one prefetched) and one layer's gradients
  (:func:`~diptych.workloads.memory.zero_buffer_bytes`);
* **activations**: per layer, :func:`diptych.workloads.memory.layer_saved_bytes` of the
  plan's layer (sequence parallelism applied), less what selective recomputation drops, or
  with full recomputation only the layer input plus one whole layer (the one being
  recomputed); times the micro-batches in flight on the device
  (:func:`diptych.sim.cluster.schedule.in_flight_weight`: GPipe ``m``, 1F1B ``p − s``,
  interleaved its warm-up chunks);
* **KV cache** (inference): the replica's sequences × the KV bytes per token per layer per
  rank (KV heads ÷ tp) × the tokens each of the device's layers caches (÷ cp): the whole
  context for full attention, at most the window for a sliding layer or the chunk for a
  chunked one (:meth:`~diptych.workloads.config.LayerSpec.kv_tokens`, the rule of
  :func:`diptych.workloads.params.kv_cache_bytes`).

:func:`plan_memory` returns a :class:`ClusterMemory`; when it does not fit, ``advice`` names the
first change in :data:`ADVICE_ORDER` (cheapest in step time first) that fits.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

from ...workloads.config import ModelConfig
from ...workloads.graph import Workload
from ...workloads.program import Block
from ...workloads.memory import (MemoryReport, peak_working_bytes, zero_buffer_bytes,
                                 zero_state_bytes)
from ...workloads.params import kv_bytes_per_token_per_layer, state_bytes_per_layer
from ...workloads.moe import Routing
from ...workloads.precision import Precision
from .layers import LayerOps, layer_ops, layer_order
from .params import layer_params
from ..run.offload import tiered_parts
from .plan import Plan
from .schedule import in_flight_weight


@dataclass(frozen=True)
class ClusterMemory(MemoryReport):
    """Bytes per chip on the worst pipeline device (``breakdown``), every device's total
    (``per_stage``), against ``capacity_bytes``; ``advice``/``suggestion`` when it does not
    fit (:class:`~diptych.workloads.memory.MemoryReport`'s fields and rules)."""

    per_stage: tuple[float, ...] = ()
    worst_stage: int = 0

    def to_dict(self) -> dict:
        d = super().to_dict()
        del d["min_tp"]
        return {**d, "per_stage": list(self.per_stage), "worst_stage": self.worst_stage}


def chunk_layers(model: ModelConfig, layers_per_chunk: tuple[int, ...],
                 ops: dict[str, LayerOps]) -> list[list[str]]:
    """Layer kinds (:func:`~diptych.sim.cluster.layers.layer_ops` keys) of each model chunk
    (virtual stage), in pipeline order."""
    kinds = layer_order(model, ops)
    out, i = [], 0
    for n in layers_per_chunk:
        out.append(kinds[i:i + n])
        i += n
    return out


def device_chunks(plan: Plan, s: int) -> list[int]:
    """Virtual stages (model chunks) on pipeline device ``s``: ``c·pp + s``."""
    return [c * plan.pp + s for c in range(plan.virtual_stages)]


def _act_per_layer(lo: LayerOps, recompute: str) -> float:
    if recompute == "full":
        return lo.input_bytes
    if recompute == "selective":
        return lo.saved_bytes - lo.selective_bytes
    return lo.saved_bytes


def plan_memory(model: ModelConfig, plan: Plan, p: Precision, *, phase: str, seq: int,
                micro_batches: int, layers_per_chunk: tuple[int, ...], capacity_bytes: float,
                global_batch: int = 1, context: int = 0, attention: str = "fused",
                advise: bool = True, routing: Routing = Routing(),
                tier2_capacity_bytes: float = 0.0) -> ClusterMemory:
    """Memory per chip of ``plan`` (module docstring). ``seq``: training sequence or prompt
    length; ``context``: tokens of KV cache per sequence (inference). A training plan with an
    ``offload`` holds the offloaded parts in the chip's second tier of
    ``tier2_capacity_bytes`` (:mod:`diptych.sim.run.offload`) and ``capacity_bytes`` is the
    first tier's: it fits when each tier holds its parts."""
    train = phase == "train"
    # decode's working set: the ops of the last step (attending the whole ``context``)
    lo = layer_ops(model, p, phase=phase, tp=plan.tp, cp=plan.cp, ep=plan.ep,
                   micro_batch=plan.micro_batch, seq=seq,
                   context=max(context - 1, 0) if phase == "decode" else 0,
                   sequence_parallel=plan.sequence_parallel, attention=attention,
                   routing=routing)
    lp = layer_params(model, plan.tp, plan.ep, plan.pp)
    chunks = chunk_layers(model, layers_per_chunk, lo)
    d, de = plan.shards, plan.expert_shards
    last_vs = plan.chunks - 1
    totals, details = [], []
    for s in range(plan.pp):
        mine = device_chunks(plan, s)
        kinds = [k for c in mine for k in chunks[c]]
        nm = sum(1 for k in kinds if lo[k].moe)
        nd = len(kinds) - nm
        first, last = 0 in mine, last_vs in mine
        total, experts = lp.stage(nd, nm, first, last)
        if train:
            bd = zero_state_bytes(total - experts, plan.zero, d, p)
            for k, v in zero_state_bytes(experts, plan.zero, de, p).items():
                bd[k] += v
            ends = (["embedding"] if first else []) + (["head"] if last else [])
            biggest = max(lp.of(k, lo[k].moe)[0] for k in set(kinds) | set(ends))
            bd["zero_buffers"] = zero_buffer_bytes(biggest, plan.zero, p)
            weights = []
            for c in mine:
                wgt = sum(_act_per_layer(lo[k], plan.recompute) for k in chunks[c])
                if c == 0:
                    wgt += lo["embedding"].saved_bytes
                if c == last_vs:
                    wgt += lo["head"].saved_bytes
                weights.append(wgt)
            act = in_flight_weight(plan.schedule, plan.pp, micro_batches, plan.virtual_stages,
                                   s, weights)
            if plan.recompute == "full" and kinds:
                act += max(lo[k].saved_bytes for k in set(kinds))
            bd["activations"] = act
        else:
            bd = {"weights": total * p.w_bytes}
            if p.unquantized_weights:   # an inference recipe: only the linears' in FP8
                q = layer_params(model, plan.tp, plan.ep, plan.pp, linear=True).stage(
                    nd, nm, first, last)[0]
                bd["weights"] = q * p.w_bytes + (total - q) * p.uw_bytes
            per_layer = kv_bytes_per_token_per_layer(model, p.kv, plan.tp)
            # each layer caches what its kind needs: the context, a window, or a chunk
            specs = model.layer_specs()
            starts = (0, *itertools.accumulate(layers_per_chunk))
            cached = sum(specs[i].kv_tokens(context) for c in mine
                         for i in range(starts[c], starts[c + 1]))
            seqs = global_batch // plan.dp
            bd["kv_cache"] = seqs * cached / plan.cp * per_layer
            linear = sum(specs[i].has_state for c in mine
                         for i in range(starts[c], starts[c + 1]))
            if linear:     # each sequence's fixed state, once, in this stage's linear layers
                bd["state"] = seqs * linear * sum(state_bytes_per_layer(
                    model, plan.tp, p.activations).values())
            w = Workload(phase, tuple(Block.of_ops(k, 1, lo[k].forward) for k in lo), tokens=1,
                         batch=1)
            bd["activations"] = peak_working_bytes(w) + lo["embedding"].input_bytes
        totals.append(sum(bd.values()))
        details.append(bd)
    worst = max(range(plan.pp), key=lambda i: totals[i])
    tiers = (dict(tier2_parts=tiered_parts(plan.offload),
                  tier2_capacity_bytes=tier2_capacity_bytes) if train else {})
    rep = ClusterMemory(capacity_bytes, details[worst], per_stage=tuple(totals),
                        worst_stage=worst, **tiers)
    if rep.fits or not advise:
        return rep
    advice, sugg = _advise(model, plan, p, phase=phase, seq=seq, micro_batches=micro_batches,
                           layers_per_chunk=layers_per_chunk, capacity_bytes=capacity_bytes,
                           global_batch=global_batch, context=context, attention=attention,
                           routing=routing, tier2_capacity_bytes=tier2_capacity_bytes)
    gib = 2.0 ** 30
    head = (f"needs {rep.total_bytes / gib:.1f} GiB per chip (stage {worst}) but the chip has "
            f"{capacity_bytes / gib:.1f} GiB")
    if rep.tier2_parts:
        head = (f"needs {rep.tier1_bytes / gib:.1f} GiB per chip in the first tier and "
                f"{rep.tier2_bytes / gib:.1f} GiB in the second (stage {worst}; offload "
                f"{plan.offload}) but the chip has {capacity_bytes / gib:.1f} and "
                f"{tier2_capacity_bytes / gib:.1f} GiB")
    return dataclasses.replace(rep, advice=head + ("; " + advice if advice else
                                                   "; no change in the advice list fits, "
                                                   "alone or together (more chips?)"),
                               suggestion=sugg)


#: Changes the advice tries, cheapest in step time first: sharding the optimizer state and
#: gradients costs no extra communication volume (reduce-scatter + all-gather = all-reduce);
#: recomputation costs compute; a smaller micro-batch lengthens the pipeline less than deeper
#: model parallelism; ZeRO-3 re-gathers weights every micro-batch.
ADVICE_ORDER = ("zero1", "zero2", "selective", "micro_batch", "full", "zero3", "pp", "tp")


def _variants(plan: Plan, global_batch: int):
    for step in ADVICE_ORDER:
        if step.startswith("zero"):
            z = int(step[-1])
            if plan.zero < z:
                yield step, dataclasses.replace(plan, zero=z), f"ZeRO stage {z} (--zero {z})"
        elif step in ("selective", "full"):
            order = ("none", "selective", "full")
            if order.index(plan.recompute) < order.index(step):
                yield step, dataclasses.replace(plan, recompute=step), \
                    f"{step} activation recomputation (--recompute {step})"
        elif step == "micro_batch" and plan.micro_batch > 1:
            yield step, dataclasses.replace(plan, micro_batch=1), \
                "one sequence per micro-batch (--micro-batch 1)"
        elif step == "pp" and plan.dp % 2 == 0:
            yield step, dataclasses.replace(plan, pp=plan.pp * 2, dp=plan.dp // 2,
                                            layers_per_stage=None), \
                f"twice the pipeline stages (--pp {plan.pp * 2} --dp {plan.dp // 2})"
        elif step == "tp" and plan.dp % 2 == 0:
            yield step, dataclasses.replace(plan, tp=plan.tp * 2, dp=plan.dp // 2), \
                f"twice the tensor parallelism (--tp {plan.tp * 2} --dp {plan.dp // 2})"


def _advise(model, plan, p, *, phase, seq, micro_batches, layers_per_chunk, capacity_bytes,
            global_batch, context, attention, routing=Routing(),
            tier2_capacity_bytes: float = 0.0) -> tuple[str, dict | None]:
    """The first single change of :data:`ADVICE_ORDER` that fits; if none does, the changes
    applied one after another until the plan fits."""
    from .plan import check_plan

    def fitted(q: Plan) -> ClusterMemory | None:
        try:
            info = check_plan(q, model, chips=q.chips, batch=global_batch, seq_len=seq,
                              phase=phase)
        except ValueError:
            return None
        lpc = (layers_per_chunk if q.pp == plan.pp and q.layers_per_stage is None
               and plan.layers_per_stage is None else info["layers_per_chunk"])
        rep = plan_memory(model, q, p, phase=phase, seq=seq, micro_batches=info["micro_batches"],
                          layers_per_chunk=lpc, capacity_bytes=capacity_bytes,
                          global_batch=global_batch, context=context, attention=attention,
                          advise=False, routing=routing,
                          tier2_capacity_bytes=tier2_capacity_bytes)
        return rep

    def diff(q: Plan) -> dict:
        return {k: v for k, v in q.to_dict().items() if v != plan.to_dict()[k]}

    allowed = (lambda step: True) if phase == "train" else (lambda step: step in ("pp", "tp"))
    for step, q, text in _variants(plan, global_batch):
        rep = fitted(q) if allowed(step) else None
        if rep is not None and rep.fits:
            return f"fits with {text}: {rep.total_bytes / 2**30:.1f} GiB", diff(q)
    cur = plan
    for step in ADVICE_ORDER:
        if not allowed(step):
            continue
        for st, q, _ in _variants(cur, global_batch):
            if st != step:
                continue
            rep = fitted(q)
            if rep is None:
                continue
            cur = q
            if rep.fits:
                flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in diff(cur).items())
                return (f"no single change fits; together: {flags}: "
                        f"{rep.total_bytes / 2**30:.1f} GiB", diff(cur))
    return "", None


def require_sram_fit(mem: ClusterMemory, *, chip: str, model: str, plan: Plan,
                     precision: Precision, phase: str) -> None:
    """On a chip without DRAM (every tensor of a stage must live in its SRAM: there is
    nowhere to spill), raise ValueError when ``mem`` (:func:`plan_memory` against the chip's
    SRAM) does not fit: the worst stage's total and parts in MiB, the chip's SRAM, the fewest
    chips per replica the model's bytes need (the stages' sum × ``tp`` × ``cp`` ÷ the SRAM,
    and more than the plan's ``tp × cp × pp``: a lower bound), and the changes that
    help (more tensor-parallel ranks or pipeline stages, a narrower precision)."""
    if mem.fits:
        return
    mib = 2.0 ** 20
    parts = ", ".join(f"{k.replace('_', ' ')} {v / mib:,.1f}" for k, v in mem.breakdown.items()
                      if v > 0)
    ranks = plan.tp * plan.cp               # chips of one pipeline stage of a replica
    least = max(ranks * plan.pp + 1,
                math.ceil(sum(mem.per_stage) * ranks / mem.capacity_bytes))
    raise ValueError(
        f"{model} does not fit the SRAM of chip {chip!r} (no DRAM to spill to): pipeline stage "
        f"{mem.worst_stage} needs {mem.total_bytes / mib:,.1f} MiB per chip ({parts} MiB; "
        f"weights {precision.weights}" + (f", KV cache {precision.kv}" if phase != "train"
                                          else "") + ") against "
        f"{mem.capacity_bytes / mib:,.1f} MiB; a replica needs at least {least} chips: "
        f"use more chips (a larger --tp or more --pp stages)"
        + (", shard the training state (--zero 1-3)" if phase == "train" else "")
        + " or a narrower precision (--weights-dtype"
        + ("/--kv-dtype)" if phase != "train" else ")"))
