"""Mixture-of-experts routing statistics for a batch of tokens.

With ``E`` experts, top-``k`` routing and ``T`` tokens routed independently and uniformly
(a balanced router, which load-balancing losses aim for), one expert is missed by one token with
probability ``1 − k/E``, so the expected number of distinct experts touched is
``E · (1 − (1 − k/E)^T)``. Only those experts' weights are read; the ``T·k`` token-expert pairs
are spread over them evenly.

With expert parallelism the step waits for the busiest rank (the combine all-to-all is a
barrier): :class:`Routing` says how skewed the experts' popularity is and whether a capacity
factor drops or pads, and :func:`rank_load_factor` gives the busiest rank's load over the
mean, from the sampling noise of a balanced router and the popularity skew
(docs/workloads.md, "Mixture of experts").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache


def expected_experts_touched(experts: int, top_k: int, tokens: int) -> float:
    """``E · (1 − (1 − k/E)^T)``: expected distinct experts used by ``tokens`` tokens."""
    for name, v in (("experts", experts), ("top_k", top_k), ("tokens", tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, not {v!r}")
    if top_k > experts:
        raise ValueError(f"top_k ({top_k}) must be at most experts ({experts})")
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def expert_load(experts: int, top_k: int, tokens: int) -> list[tuple[int, int]]:
    """How the ``T·k`` token-expert pairs fall on the experts, as integer groups.

    Returns ``[(n_experts, tokens_each), ...]``: the expected number of touched experts
    rounded to the nearest integer and clamped to ``[k, min(E, T·k)]`` (a token always uses k
    distinct experts), with the pairs spread as evenly as integers allow (``r`` experts get
    ``q + 1`` tokens and the rest ``q``), so the groups hold exactly ``T·k`` pairs.
    """
    e = expected_experts_touched(experts, top_k, tokens)
    touched = max(top_k, min(experts, tokens * top_k, round(e)))
    q, r = divmod(tokens * top_k, touched)
    return [(n, t) for n, t in ((r, q + 1), (touched - r, q)) if n and t]


# --- the busiest rank: routing skew, sampling and the capacity factor ---------------------

#: Largest popularity skew accepted (a coefficient of variation; 10 already sends most of a
#: step's tokens to a handful of experts).
MAX_SKEW = 10.0
#: How a framework runs the router and the token permutation (:attr:`Routing.dispatcher`).
#: ``fused``: the router's top-k one kernel and the permute and unpermute one gather each, the
#: host never waiting (DeepSeek's, Transformer Engine's fused permutation; diptych's lowering
#: before this choice existed). ``megatron``: Megatron-Core 0.9-0.11's PyTorch code
#: (:data:`MEGATRON_DISPATCH`).
DISPATCHERS = ("fused", "megatron")

#: Megatron-Core's router and token dispatcher as PyTorch runs them, per MoE layer and
#: micro-batch, beyond the router GEMM, the top-k and the two gathers a fused dispatch runs:
#: ``kernels`` more launches forward, ``bwd_kernels`` backward, ``host_syncs`` host
#: synchronisations forward (workloads/host_work.py), and the unpermute's unfused kernels
#: (:data:`UNFUSED_UNPERMUTE`). [S] the code, NVIDIA/Megatron-LM core_v0.10.0
#: megatron/core/transformer/moe/router.py ``TopKRouter`` (``aux_loss_load_balancing``,
#: ``apply_load_balancing_loss``), moe_utils.py (``topk_softmax_with_capacity``,
#: ``switch_load_balancing_loss_func``, ``save_to_aux_losses_tracker``, ``permute``:
#: ``token_indices.masked_select(routing_map)``, ``unpermute``:
#: ``probs.T.contiguous().masked_select(routing_map.T.contiguous())``, the product by the
#: probabilities, ``torch.zeros``, ``scatter_add_``); a ``masked_select`` sizes its output from
#: the mask, so the host reads the count back and waits: two synchronisations a forward.
#: [C] the counts from torch.profiler on a GH100 (H200, PyTorch 2.11;
#: benchmarks/gpu/measure_moe_dispatch.py, results in benchmarks/gpu/h200-2026-12-04/
#: moe_dispatch.json), Grok-1's shard (1,024 tokens × 6,144, 8 experts top-2, capacity 256
#: padded, aux loss): the layer's forward launches 63 kernels against 13 with the same GEMMs
#: and one gather and one index-add (+50, of which the router GEMM and the top-k are 2 launches
#: diptych lowers already: 48), the backward 62 against 35 (+27, less the router's two
#: gradient GEMMs and the top-k's backward: 24). The path measured is the drop-and-pad one
#: (``moe_pad_expert_input_to_capacity``); the dropless one adds a stream synchronisation
#: (``cuda_sync_point``, token_dispatcher.py ``preprocess``) and other small kernels
#: [assumption: the same counts].
MEGATRON_DISPATCH = {"kernels": 48, "bwd_kernels": 24, "host_syncs": 2}

#: Bytes per element of the unpermuted rows that Megatron-Core's unfused unpermute moves
#: beyond one fused weighted gather (reads, writes), in units of the activations' bytes:
#: the product by the probabilities reads the rows and writes their product (``+1, +1``) and
#: ``torch.zeros`` writes the output before ``scatter_add_`` (``+t/rows`` written, counted
#: by the caller) [S: moe_utils.py ``unpermute``, core_v0.10.0]. The backward follows the
#: general rule (workloads/train.py ``vector_backward_bytes``).
UNFUSED_UNPERMUTE = (1.0, 1.0)

#: Largest capacity factor accepted (``E/k`` is the most any expert can receive; 64 covers
#: every published recipe, which use 1.0–2.0).
MAX_CAPACITY_FACTOR = 64.0


@dataclass(frozen=True)
class Routing:
    """How a step's token-expert pairs fall on the experts, beyond their mean.

    ``skew``: the coefficient of variation of the experts' popularity over one routing
    (standard deviation ÷ mean of the expected tokens per expert; 0: every expert equally
    likely, what load-balancing losses aim for and what DeepSeek's published kernel traces
    and Megatron-Core's ``--moe-router-force-load-balancing`` benchmarks simulate).
    ``capacity_factor``: None for dropless routing (Megatron-Core's default,
    ``--moe-expert-capacity-factor`` unset), else each expert takes at most
    ``capacity_factor × T·k/E`` of a rank's ``T`` tokens and drops the rest
    (Switch/GShard-style; ``--moe-expert-capacity-factor``). ``pad``: every expert is padded
    to its capacity (``--moe-pad-expert-input-to-capacity``: static shapes, the expert GEMMs
    run ``capacity_factor × T·k`` rows whatever the routing). ``dispatcher``: how the
    framework runs the router and the permutation, one of :data:`DISPATCHERS` (``fused``,
    the default; ``megatron``: Megatron-Core's PyTorch code, its extra kernels and host
    synchronisations, :data:`MEGATRON_DISPATCH`)."""

    skew: float = 0.0
    capacity_factor: float | None = None
    pad: bool = False
    dispatcher: str = "fused"

    def __post_init__(self):
        s = self.skew
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s <= MAX_SKEW:
            raise ValueError(f"moe skew (--moe-skew) must be a number in [0, {MAX_SKEW:g}] "
                             f"(the experts' popularity coefficient of variation), not {s!r}")
        c = self.capacity_factor
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float))
                              or not 0 < c <= MAX_CAPACITY_FACTOR):
            raise ValueError(f"moe capacity factor (--moe-capacity-factor) must be a number in "
                             f"(0, {MAX_CAPACITY_FACTOR:g}] or None (dropless), not {c!r}")
        if not isinstance(self.pad, bool):
            raise ValueError(f"moe pad (--moe-pad) must be True or False, not {self.pad!r}")
        if self.pad and c is None:
            raise ValueError("moe pad (--moe-pad) needs a capacity factor: padding fills each "
                             "expert to its capacity (--moe-capacity-factor)")
        if self.dispatcher not in DISPATCHERS:
            raise ValueError(f"moe dispatcher (--moe-dispatcher) must be one of "
                             f"{', '.join(DISPATCHERS)}, not {self.dispatcher!r}")

    @property
    def balanced(self) -> bool:
        """True for no skew, dropless (whatever the dispatcher)."""
        return self.skew == 0 and self.capacity_factor is None

    @property
    def default(self) -> bool:
        """True for the default routing: balanced, the fused dispatcher."""
        return self.balanced and self.dispatcher == "fused"

    def describe(self) -> str:
        cap = ("dropless" if self.capacity_factor is None else
               f"capacity factor {self.capacity_factor:g}" + (", padded" if self.pad else ""))
        return f"skew {self.skew:g}, {cap}, {self.dispatcher} dispatcher"


@lru_cache(maxsize=None)
def expected_max_normal(n: int) -> float:
    """``E[max]`` of ``n`` independent standard normal variables (0 for ``n = 1``), by
    quadrature of ``∫ x · n φ(x) Φ(x)^(n−1) dx`` (1/√π for two, 1.4236 for eight)."""
    if n <= 1:
        return 0.0
    h, s = 0.005, 0.0
    for i in range(-2400, 2401):
        x = i * h
        phi = math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        s += x * n * phi * (0.5 * (1 + math.erf(x / math.sqrt(2)))) ** (n - 1)
    return s * h


def rank_load_cv(r: Routing, experts: int, top_k: int, tokens: int, ep: int) -> float:
    """The coefficient of variation of one expert-parallel rank's token-expert pairs.

    Each of the ``ep`` ranks holds ``g = E/ep`` experts and receives, from the ``ep·T``
    tokens of the step (``tokens`` = T per rank), the pairs routed to them. Two independent
    parts add in variance, both × ``(1 − 1/ep)`` (the ranks' shares sum to one):

    * sampling: a token's k distinct experts fall on a rank as a hypergeometric draw, so a
      rank's count has variance ``ep·T·k·(1/ep)(1−1/ep)(E−k)/(E−1)`` about its mean ``T·k``:
      CV² ``(E−k) / ((E−1)·T·k)``;
    * popularity: a rank's expected share is the sum of its ``g`` experts' popularities,
      each of coefficient of variation ``skew``: CV² ``skew² / g``."""
    g = experts / ep
    sampling = (experts - top_k) / ((experts - 1) * tokens * top_k) if experts > 1 else 0.0
    return math.sqrt((1 - 1 / ep) * (sampling + r.skew ** 2 / g))


def skew_from_max_violation(max_violation: float, experts: int) -> float:
    """The popularity ``skew`` whose busiest expert carries ``1 + max_violation`` times the
    mean load over a batch large enough that sampling noise vanishes: the inverse of
    :func:`rank_load_factor` at one expert per rank (``ep = E``, ``T → ∞``), where a rank's
    CV is ``skew·√(1 − 1/E)``, so ``skew = max_violation / (E[max of E normals]·√(1 − 1/E))``.
    ``max_violation`` is Wang et al.'s ``MaxVio = (max_i Load_i − mean) / mean`` (arXiv
    2408.15664, Eq. 4); ``MaxVio_global`` (a whole validation set) is that batch."""
    if isinstance(max_violation, bool) or not isinstance(max_violation, (int, float)) \
            or not 0 <= max_violation < math.inf:
        raise ValueError(f"max_violation must be a finite non-negative number, not "
                         f"{max_violation!r}")
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 2:
        raise ValueError(f"experts must be an integer of at least 2, not {experts!r}")
    return max_violation / (expected_max_normal(experts) * math.sqrt(1 - 1 / experts))


#: The measured load spread of an auxiliary-loss-balanced router. [S] Wang et al. 2024,
#: "Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts" (arXiv 2408.15664),
#: Table 2: the auxiliary-loss baseline (coefficient α = 0.001, sigmoid gate; DeepSeekMoE 1B,
#: 64 routed experts top-6 plus 2 shared, 100B tokens) ends at ``MaxVio_global`` 0.72 (3B,
#: 200B tokens: 0.52; softmax gate, Table 6: 0.937), read as quoted by
#: bzhng-development/summary-of-some-paper-in-cuda@dae082b (the paper's own copy was not
#: reachable here). Per training batch (their Fig. 3, ``MaxVio_batch``) it is larger, as
#: :func:`rank_load_factor` adds the batch's sampling noise to this popularity skew.
AUX_LOSS_MAX_VIOLATION = 0.72
#: The routed experts of that measurement (top-6 of 64).
AUX_LOSS_EXPERTS = 64
#: Their popularity skew (:func:`skew_from_max_violation`): 0.72 / (2.3437·0.9922) = 0.310.
#: [assumption, not a default] a router of other experts, top-k, gate or coefficient has its
#: own (Grok-1's NeMo recipe uses α = 0.01, Mixtral's config 0.02; the source's Figure 2: a
#: larger α balances more tightly); diptych runs 0 unless ``--moe-skew`` (a number, or
#: ``aux-loss`` for this one) says otherwise (docs/workloads.md, "Mixture of experts").
AUX_LOSS_SKEW = skew_from_max_violation(AUX_LOSS_MAX_VIOLATION, AUX_LOSS_EXPERTS)


def rank_load_factor(r: Routing, experts: int, top_k: int, tokens: int, ep: int) -> float:
    """The busiest expert-parallel rank's token-expert pairs ÷ the mean ``T·k``.

    Dropless: ``1 + cv · E[max of ep standard normals]`` (:func:`rank_load_cv`,
    :func:`expected_max_normal`; normal in the count), at most what one rank can receive
    (``ep · min(k, E/ep) / k``: every token's pairs that land on its experts). A capacity
    factor caps it (each of the rank's experts takes at most ``capacity_factor`` × its mean
    from each source rank); padding fixes it at the capacity factor. ``ep = 1``: 1 (the
    one rank takes every pair), or the capacity factor when padded."""
    c = r.capacity_factor
    if r.pad:
        return float(c)
    if ep == 1:
        return 1.0
    f = 1.0 + rank_load_cv(r, experts, top_k, tokens, ep) * expected_max_normal(ep)
    f = min(f, ep * min(top_k, experts / ep) / top_k)
    return f if c is None else min(f, c)


def dropped_fraction(r: Routing, experts: int, top_k: int, tokens: int) -> float:
    """The expected fraction of token-expert pairs a capacity factor drops (0 dropless).

    Per expert and source rank the count ``X`` has mean ``μ = T·k/E`` (capacity: ``C·μ``)
    and variance ``μ(1 − k/E)`` from sampling (each token picks the expert with probability
    ``k/E``) plus ``(skew·μ)²`` from popularity; in units of ``μ`` it is taken as normal,
    ``N(1, cv²)``, and the fraction over the capacity is ``E[(X − C)⁺] = cv·φ(d) − (C −
    1)(1 − Φ(d))`` with ``d = (C − 1)/cv``."""
    c = r.capacity_factor
    if c is None:
        return 0.0
    mu = tokens * top_k / experts
    var = ((1 - top_k / experts) / mu if experts > 1 else 0.0) + r.skew ** 2
    cv = math.sqrt(var)
    if cv == 0:
        return max(0.0, 1.0 - c)
    d = (c - 1) / cv
    phi = math.exp(-0.5 * d * d) / math.sqrt(2 * math.pi)
    tail = 0.5 * (1 - math.erf(d / math.sqrt(2)))
    return min(1.0, max(0.0, cv * phi - (c - 1) * tail))
