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
  model of a one-domain cluster, :mod:`diptych.sim.cluster.collectives`). When the ranks hold
  unequal tokens (a prefill chunk mixed into decodes lands on one rank) the step is **split**
  (:class:`ExpertPart`, :class:`LockstepTimer`): the busiest rank's attention, dense layers,
  router, permutes and all-to-alls run over its own tokens (it sends them all), while its
  experts' grouped GEMMs see the union's pairs, ``⌈T/ep⌉`` tokens' worth (the all-to-all
  spreads every rank's pairs over the experts): the busiest rank's step minus its experts'
  GEMMs at its own tokens plus them at the mean rank's.
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
from collections.abc import Callable
from dataclasses import dataclass, replace
from statistics import NormalDist

from ...workloads.config import ModelConfig
from ...workloads.graph import Workload
from ...workloads.moe import MAX_SKEW, Routing
from ...workloads.program import Block
from ...workloads.serving_step import Experts, Step
from .. import energy_parts as EP
from ..run.summed import block_costs, combine_energy_parts, combine_parts
from .step_time import Replica, StepCost, StepTimer

#: How attention is laid out beside expert parallelism (module docstring).
ATTENTION_LAYOUTS = ("dp", "tp")

#: The default popularity skew: 0, a balanced router (what DeepSeek-V3's bias-based balancing
#: aims for; Wang et al.'s bias-balanced router measured MaxVio_global 0.04, skew 0.02).
#: [assumption: the one measured auxiliary-loss router, ``moe.AUX_LOSS_SKEW`` (0.31, 64
#: experts top-6, α = 0.001), is not the router of the presets; docs/workloads.md "Mixture of
#: experts".] Give ``--moe-skew`` (a number, or ``aux-loss``).
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


#: Tokens up to which :class:`ExpertPart` simulates every count; above, its vertices are
#: ``⌊EXACT_TOKENS · 2^(i/8)⌋`` (9 % apart) and a count between two is interpolated linearly.
EXACT_TOKENS = 64


def _expert_op(name: str) -> bool:
    """Whether a frame op (its precision ops, ``name.dequant``, with it) is one of the routed
    experts' grouped GEMMs or their activation: the work that runs on the pairs the
    all-to-all brings (not the permutes, which sort the rank's own tokens' pairs)."""
    base = name.split(".")[0]
    return base.startswith("experts_") and base not in ("experts_permute", "experts_combine")


class ExpertPart:
    """The routed experts' grouped GEMMs (and their activation) of one rank's step at ``T``
    tokens: the frame of ``replica`` (:meth:`~.step_time.Replica.frame_workload`) at ``T``
    tokens with every other op left out, its ops timed alone and summed (``simulate``: the
    replica's engine; no launch costs, which do not depend on ``T``). :meth:`cost` is exact at
    ``T ≤`` :data:`EXACT_TOKENS` and at the vertices above it, linear between two vertices
    (``exact``: every count simulated). ``simulations``: counts simulated."""

    def __init__(self, replica: Replica, simulate: Callable | None = None, *,
                 exact: bool = False):
        self.replica = replica
        self._simulate = replica.timer(simulate)
        self.exact = exact
        self._memo: dict[int, StepCost] = {}
        self.simulations = 0

    def _at(self, tokens: int) -> StepCost:
        got = self._memo.get(tokens)
        if got is None:
            r = self.replica
            w = r.frame_workload(tokens, 1)
            blocks = tuple(Block.of_ops(b.name, b.repeat, ops) for b in w.blocks
                           if (ops := tuple(op for op in b.ops if _expert_op(op.name))))
            if not blocks:
                got = StepCost(0.0, 0.0, ())
            else:
                bc = block_costs(Workload(w.phase, blocks, tokens=w.tokens, batch=w.batch),
                                 r.chip, self._simulate, fixed_costs=False,
                                 collective_time=r.collective_time)
                sec, e = combine_parts(bc, {}, {}, overlap=False)
                got = StepCost(sec, e, EP.as_vector(combine_energy_parts(bc, {})))
            self._memo[tokens] = got
            self.simulations += 1
        return got

    def cost(self, tokens: int) -> StepCost:
        """The experts' time and energy per chip at ``tokens`` tokens of the rank."""
        if self.exact or tokens <= EXACT_TOKENS:
            return self._at(tokens)
        i = math.floor(8 * math.log2(tokens / EXACT_TOKENS))
        lo = math.floor(EXACT_TOKENS * 2 ** (i / 8))
        while lo > tokens:                 # floating point at an exact vertex
            i -= 1
            lo = math.floor(EXACT_TOKENS * 2 ** (i / 8))
        hi = math.floor(EXACT_TOKENS * 2 ** ((i + 1) / 8))
        while hi <= lo:
            i += 1
            hi = math.floor(EXACT_TOKENS * 2 ** ((i + 1) / 8))
        a = self._at(lo)
        if tokens == lo:
            return a
        b = self._at(hi)
        f = (tokens - lo) / (hi - lo)
        parts = (tuple(x + f * (y - x) for x, y in zip(a.parts, b.parts))
                 if a.parts and b.parts else ())
        return StepCost(a.seconds + f * (b.seconds - a.seconds),
                        a.energy_j + f * (b.energy_j - a.energy_j), parts)


def split_cost(busiest: StepCost, own: StepCost, mean: StepCost) -> StepCost:
    """The busiest rank's step cost ``busiest`` with its experts' part at its own tokens
    (``own``) replaced by the part at the mean rank's (``mean``): the frame split."""
    parts = (tuple(b - o + m for b, o, m in zip(busiest.parts, own.parts, mean.parts))
             if busiest.parts and own.parts and mean.parts else busiest.parts)
    return StepCost(busiest.seconds - own.seconds + mean.seconds,
                    busiest.energy_j - own.energy_j + mean.energy_j, parts)


class LockstepTimer:
    """A step of ``replica.dp`` lockstep data-parallel ranks timed as its busiest rank's
    (:func:`rank_step`) on ``inner``, the rank's own step timer (grid or direct: its pieces
    cached and interpolated as for any replica), split when the ranks are unequal
    (``experts``, an :class:`ExpertPart` of the rank's replica; module docstring): the
    experts' GEMMs at the mean rank's tokens, ``⌈T/ranks⌉``, instead of the busiest rank's.
    ``experts`` None: no split (the busiest rank's own pairs, an upper bound). Energy per
    chip is the busiest rank's (an upper bound for the others, which wait at the
    all-to-alls)."""

    def __init__(self, inner: StepTimer, ranks: int, experts: ExpertPart | None = None):
        self.inner = inner
        self.ranks = ranks
        self.experts = experts

    @property
    def replica(self) -> Replica:
        return self.inner.replica

    @property
    def simulations(self) -> int:
        return self.inner.simulations + (self.experts.simulations if self.experts else 0)

    def cost(self, step: Step) -> StepCost:
        share = rank_step(step, self.ranks)
        c = self.inner.cost(share)
        mean = -(-step.tokens // self.ranks)
        if self.experts is None or share.tokens == mean:
            return c
        return split_cost(c, self.experts.cost(share.tokens), self.experts.cost(mean))


__all__ = ["ATTENTION_LAYOUTS", "DEFAULT_SKEW", "EXACT_TOKENS", "EpSpec", "ExpertPart",
           "LockstepTimer", "ep_replica", "eplb_skew", "rank_step", "split_cost"]
