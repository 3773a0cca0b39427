"""Expert-parallel MoE serving: a replica of ``ep`` chips whose routed experts are split over
them (docs/serving.md, "Expert parallelism").

Two layouts, as deployed MoE engines run them:

* **data-parallel attention** (``attention="dp"``; DeepSeek's inference system, SGLang's
  ``--enable-dp-attention``, vLLM's ``--data-parallel-size`` with ``--enable-expert-parallel``):
  every chip is an attention rank of its own (its own requests and KV cache, the dense
  weights replicated, tensor-parallel degree 1) and an expert-parallel rank holding
  ``(E + R) / ep`` experts. The ranks run in lockstep: every MoE layer's dispatch and combine
  all-to-alls join them, so a step lasts as long as its **busiest rank's** step
  (:func:`rank_step`: the decode sequences dealt round-robin, the prefill chunks longest first
  to the rank with the fewest tokens, as a per-rank scheduler filling its own token budget
  would hold them; the busiest is the one with the most tokens). That rank's step is lowered
  with ``ep`` (:class:`~diptych.workloads.serving_step.Experts`): its experts receive the
  busiest expert rank's pairs of ``ep`` ranks' tokens at its token count
  (:func:`~diptych.workloads.lower.expert_groups`: ``T·k`` × the load factor of the routing
  skew and the router's sampling noise), between the two all-to-alls of ``T·k·d`` activations
  on the pool's links (:func:`~diptych.sim.run.links.collective_seconds`, the ring/direct
  model of a one-domain cluster, :mod:`diptych.sim.cluster.collectives`). Exact when the ranks
  hold equal tokens; with unequal ranks the busiest rank's experts are charged its own tokens'
  pairs (an upper bound: the experts' pairs are the mean rank's).
* **tensor-parallel attention** (``attention="tp"``; vLLM's ``--tensor-parallel-size N
  --enable-expert-parallel``): attention, dense layers and shared experts split ÷ ep as in a
  TP replica, every chip an expert-parallel rank holding whole experts; each routes the pairs
  of its ``⌈T/ep⌉`` sequence-parallel tokens, and the MoE output's all-reduce (already in the
  layer) sums the ranks' slices.

Expert load: the experts' popularity has a coefficient of variation ``skew``
(:class:`~diptych.workloads.moe.Routing`, the same knob as ``diptych run --moe-skew``), and
``R`` **redundant experts** replicate the hottest ones as DeepSeek's EPLB does
(``eplb.replicate_experts``: each extra slot goes to the expert of the highest load per copy),
so each copy takes an equal share of its expert's load: :func:`eplb_skew` is the slots'
coefficient of variation after replication, for log-normal popularities. The slots are
placed on the ranks at random in the load model (:func:`~diptych.workloads.moe.rank_load_cv`);
EPLB's balanced packing of slots onto ranks is not credited (conservative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist

from ...workloads.config import ModelConfig
from ...workloads.moe import MAX_SKEW, Routing
from ...workloads.serving_step import Experts, Step
from .step_time import Replica, StepCost, StepTimer

#: How attention is laid out beside expert parallelism (module docstring).
ATTENTION_LAYOUTS = ("dp", "tp")

#: The default popularity skew: 0, a balanced router (what DeepSeek-V3's bias-based balancing
#: aims for). [assumption: no public measurement of a trained router's per-expert load spread
#: was found; docs/workloads.md "Mixture of experts" says so too.] Give ``--moe-skew``.
DEFAULT_SKEW = 0.0


@dataclass(frozen=True)
class EpSpec:
    """An expert-parallel layout: ``ep`` chips, attention ``"dp"`` or ``"tp"``,
    ``redundant_experts`` extra expert slots (EPLB), the experts' popularity ``skew`` (a
    coefficient of variation, :class:`~diptych.workloads.moe.Routing`)."""

    ep: int
    attention: str = "dp"
    redundant_experts: int = 0
    skew: float = DEFAULT_SKEW

    def __post_init__(self):
        if isinstance(self.ep, bool) or not isinstance(self.ep, int) or self.ep < 1:
            raise ValueError(f"--ep must be a positive integer, not {self.ep!r}")
        if self.attention not in ATTENTION_LAYOUTS:
            raise ValueError(f"--ep-attention must be one of {', '.join(ATTENTION_LAYOUTS)}, "
                             f"not {self.attention!r}")
        r = self.redundant_experts
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(f"--redundant-experts must be a non-negative integer, not {r!r}")
        Routing(skew=self.skew)        # the skew's bounds, named as run names them

    def check(self, m: ModelConfig, tp: int | None = None) -> None:
        """ValueError naming the value unless ``m`` can be served so (``tp``: the
        tensor-parallel degree asked for, None when left to the layout)."""
        if self.ep == 1:
            if self.redundant_experts:
                raise ValueError(f"--redundant-experts {self.redundant_experts} replicates "
                                 f"experts over expert-parallel ranks; give --ep > 1")
            if self.skew:
                raise ValueError(f"--moe-skew {self.skew:g} sets the busiest expert-parallel "
                                 f"rank's load; without expert parallelism (--ep 1) it "
                                 f"changes nothing: give --ep > 1")
            return
        if not m.is_moe:
            raise ValueError(f"--ep {self.ep} needs a mixture-of-experts model; {m.name} is "
                             f"dense (no experts to split)")
        slots = m.experts + self.redundant_experts
        if slots % self.ep:
            extra = (f" + {self.redundant_experts} redundant = {slots}"
                     if self.redundant_experts else "")
            raise ValueError(f"--ep {self.ep} must divide the expert slots of {m.name} "
                             f"({m.experts} experts{extra}): each rank holds an equal share")
        want = 1 if self.attention == "dp" else self.ep
        why = ("each chip its own attention rank" if want == 1 else
               "attention split over the ep chips")
        if tp is not None and tp != want:
            raise ValueError(f"--tp {tp} with --ep {self.ep} --ep-attention "
                             f"{self.attention}: the layout sets the tensor-parallel degree "
                             f"({want}: {why}); drop --tp")

    @property
    def tp(self) -> int:
        """The tensor-parallel degree of the layout's lowering."""
        return self.ep if self.attention == "tp" and self.ep > 1 else 1

    def describe(self) -> str:
        red = f", {self.redundant_experts} redundant experts" if self.redundant_experts else ""
        return f"ep {self.ep}, attention {self.attention}, skew {self.skew:g}{red}"


def eplb_skew(skew: float, experts: int, redundant: int) -> float:
    """The expert slots' load coefficient of variation after ``redundant`` copies of the
    hottest experts (module docstring): popularities the ``E`` quantiles
    ``exp(σ·z_i − σ²/2)`` of a log-normal of coefficient of variation ``skew``
    (``σ² = ln(1 + skew²)``, ``z_i = Φ⁻¹((i + ½)/E)``); each extra slot to the expert of the
    highest load per copy (EPLB's ``replicate_experts``), a copy taking its expert's load ÷
    copies. Scaled so that no redundancy gives ``skew`` itself; never above it."""
    if skew == 0 or redundant == 0:
        return float(skew)
    s = math.sqrt(math.log1p(skew * skew))
    nd = NormalDist()
    pop = [math.exp(s * nd.inv_cdf((i + 0.5) / experts) - s * s / 2) for i in range(experts)]
    copies = [1] * experts
    for _ in range(redundant):
        j = max(range(experts), key=lambda i: (pop[i] / copies[i], -i))
        copies[j] += 1

    def cv(loads: list[float]) -> float:
        mu = sum(loads) / len(loads)
        return math.sqrt(sum((x - mu) ** 2 for x in loads) / len(loads)) / mu

    slots = [p / c for p, c in zip(pop, copies) for _ in range(c)]
    return min(skew, skew * cv(slots) / cv(pop))


def ep_replica(base: Replica, spec: EpSpec) -> Replica:
    """``base`` (a tensor-parallel replica at ``spec.tp``) laid out as ``spec`` says: the
    experts split over ``spec.ep`` ranks (``E + R`` slots, the redundant ones copies of the
    hottest), the routing's skew after EPLB (:func:`eplb_skew`), and under data-parallel
    attention ``ep`` lockstep ranks. ``spec.ep == 1``: ``base`` unchanged."""
    m = base.model
    spec.check(m)
    if spec.ep == 1:
        return base
    if base.tp != spec.tp:
        raise ValueError(f"the base replica's tp ({base.tp}) must be the layout's ({spec.tp})")
    slots = m.experts + spec.redundant_experts
    model = replace(m, experts=slots) if spec.redundant_experts else m
    routing = Routing(skew=min(MAX_SKEW, eplb_skew(spec.skew, m.experts,
                                                   spec.redundant_experts)))
    experts = Experts(ep=spec.ep, routing=routing, whole=spec.attention == "tp")
    return replace(base, model=model, experts=experts,
                   dp=spec.ep if spec.attention == "dp" else 1)


def rank_step(step: Step, ranks: int) -> Step:
    """The busiest of ``ranks`` data-parallel attention ranks' share of ``step`` (module
    docstring): rank ``i`` decodes ``⌊B/ranks⌋`` sequences, one more for ``i < B mod ranks``,
    holding their share of the keys (``⌈keys·b_i/B⌉``); the prefill chunks go, longest first,
    to the rank with the fewest tokens so far (ties: the lowest index); the busiest rank is
    the one with the most tokens (ties: the lowest index). ``ranks == 1``: ``step``."""
    if ranks == 1:
        return step
    b, q = step.decode_batch, step.decode_queries
    dec = [b // ranks + (1 if i < b % ranks else 0) for i in range(ranks)]
    tokens = [d * q for d in dec]
    chunks: list[list[tuple[int, int]]] = [[] for _ in range(ranks)]
    for c in sorted(step.prefill, key=lambda c: (-c[0], -c[1])):
        i = min(range(ranks), key=lambda j: (tokens[j], j))
        chunks[i].append(c)
        tokens[i] += c[0]
    i = max(range(ranks), key=lambda j: (tokens[j], -j))
    keys = max(dec[i] * q, -(-step.decode_keys * dec[i] // b)) if dec[i] else 0
    return Step(decode_batch=dec[i], decode_keys=keys, prefill=tuple(chunks[i]),
                decode_queries=q)


class LockstepTimer:
    """A step of ``replica.dp`` lockstep data-parallel ranks timed as its busiest rank's
    (:func:`rank_step`) on ``inner``, the rank's own step timer (grid or direct: its pieces
    cached and interpolated as for any replica). Energy per chip is the busiest rank's (an
    upper bound for the others, which wait at the all-to-alls)."""

    def __init__(self, inner: StepTimer, ranks: int):
        self.inner = inner
        self.ranks = ranks

    @property
    def replica(self) -> Replica:
        return self.inner.replica

    @property
    def simulations(self) -> int:
        return self.inner.simulations

    def cost(self, step: Step) -> StepCost:
        return self.inner.cost(rank_step(step, self.ranks))


__all__ = ["ATTENTION_LAYOUTS", "DEFAULT_SKEW", "EpSpec", "LockstepTimer", "ep_replica",
           "eplb_skew", "rank_step"]
