"""Deployment search (``diptych serve-plan``): each chip design deployed at its best under
SLOs at a target load (issue 24 item 3; docs/serving.md, "Deployment search").

A :class:`SearchSpace` names the designs (chip presets or TOML paths), the most chips a
deployment may use, the tensor-parallel degrees, the batch-token limits and whether prompts are
chunked into decode steps. :func:`candidates` enumerates every :class:`Plan` the space holds:

* **colocated**, per design and replica layout (:func:`layouts`: a TP degree ``t`` that holds
  the model, :func:`~.deployment.fit_tp`, and at most ``chips``; for a mixture-of-experts
  model also every expert-parallel degree ``e`` that divides its expert slots (its experts
  plus each ``R`` of ``redundant_experts``: EPLB's copies of the hottest experts, :mod:`.ep`),
  with data-parallel or tensor-parallel attention, whose ranks hold the model, the copies'
  weights included): 1 to
  ``chips // g`` replicas of ``g`` chips (``t``, or ``e``);
* **disaggregated**, per ordered pair of designs (the same one twice included), per layout
  of each pool and per pair of pool sizes (each a multiple of its replica's chips, at least
  one replica each, together at most ``chips``): prefill on one pool, decode on the other,
  the KV cache crossing the chips' links (:func:`~.deployment.kv_transfer`);

each with every batch-token limit and prompt policy. :func:`search` serves the same request
stream (``load``, the same seed) on each plan with shared step timers, and keeps for each:
whether it meets the SLOs (MLPerf's rule: p99 TTFT and p99 TPOT within them), its goodput per
chip, output tokens per joule and dollars per million output tokens (each pool's chips'
capital cost over their service life and the energy, :func:`usd_per_mtok`; None when a
chip has no ``[cost]`` table). Among the plans meeting the SLOs:

* the **best** plan minimises $/Mtok (goodput per chip breaks ties, and ranks alone when a
  plan has no price), overall and per design (colocated on it, or disaggregated with both
  pools on it);
* the **Pareto front** is every plan no other plan beats on all three of $/Mtok (lower),
  tokens/J and goodput per chip (higher) while strictly beating it on one.

When no plan meets the SLOs, :func:`search` raises ValueError naming the constraint that binds
(the SLO the plan closest to meeting both misses, by how much; or that no design holds the
model on the chips given). Per design, :func:`per_design` states its best plan and what binds
it (:func:`tightest`), or why none of its plans meets the SLOs.

The plans run in tiers of their chip count, fewest first; a plan whose price floor
(:mod:`.search_prune`: its chips' cost alone at the stream's highest possible throughput)
exceeds the best price its design has reached is skipped, as it cannot be a best plan
(``prune=False`` runs every plan, for the complete Pareto front). A tier's plans run here or on
a caller's executor (``mapper``: the sweep's process pool or Dask, from tools/), one
:class:`Batch` per plan shape; the rows are the same either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ...arch import load_chip
from ...arch.runtime import IDEAL, RuntimeProfile, load_runtime
from ...workloads import load_model
from ...workloads.lower import valid_tp_degrees
from ..run.scenario import Scenario
from .config import ServeConfig
from .deployment import Deployment, Pool, fit_tp
from .ep import ATTENTION_LAYOUTS, DEFAULT_SKEW, EpSpec, ep_replica
from .kv import kv_budget
from .requests import Load
from .serve import SETUP_KEYS, StepTimerCache, serve
from .search_prune import capex_usd_per_s, skip_reason, stream_span, usd_floor
from .step_time import make_replica

#: Most candidates one search may evaluate (each is a serving run); a larger space exits 2
#: naming its size (narrow --tp, --max-batched-tokens or --chips).
MAX_CANDIDATES = 5000


@dataclass(frozen=True)
class SearchSpace:
    """What :func:`candidates` enumerates (module docstring); ``chips``: the most a plan
    uses (pool sizes are searched below it). ``tp``: the degrees tried
    (None: every degree of the model that holds it and fits ``chips``);
    ``max_batched_tokens`` and ``chunked_prefill``: the engine settings tried;
    ``disaggregated``: also prefill/decode pools; ``precision``: ``diptych run``'s precision
    keywords (``weights_dtype``, ``act_dtype``, ``kv_dtype``) for every replica.
    ``ep``: the expert-parallel degrees tried on a mixture-of-experts model (None: every
    degree from 2 to ``chips`` that divides its experts; ``()``: none), each with every
    attention layout of ``ep_attention`` (``"dp"``, ``"tp"``: :mod:`.ep`) and the experts'
    popularity skew ``moe_skew`` (a coefficient of variation, as ``serve --moe-skew``).
    ``redundant_experts``: the redundant expert slots tried on every expert-parallel layout
    (``serve --redundant-experts``; 0: none), each with the EP degrees that divide the experts
    plus it; a value above 0 needs a mixture-of-experts model and expert parallelism."""

    designs: tuple[str, ...]
    chips: int
    tp: tuple[int, ...] | None = None
    max_batched_tokens: tuple[int, ...] = (2048, 8192)
    chunked_prefill: tuple[bool, ...] = (True, False)
    disaggregated: bool = True
    precision: tuple[tuple[str, str], ...] = ()
    ep: tuple[int, ...] | None = None
    ep_attention: tuple[str, ...] = ATTENTION_LAYOUTS
    moe_skew: float = DEFAULT_SKEW
    redundant_experts: tuple[int, ...] = (0,)

    def __post_init__(self):
        if not self.designs:
            raise ValueError("a deployment search needs at least one chip design (--chip)")
        if isinstance(self.chips, bool) or not isinstance(self.chips, int) or self.chips < 1:
            raise ValueError(f"chips must be a positive integer, not {self.chips!r}")
        for name, vals in (("tp", self.tp or (1,)),
                           ("max_batched_tokens", self.max_batched_tokens)):
            if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                               for v in vals):
                raise ValueError(f"{name} must be positive integers, not {vals!r}")
        if not self.chunked_prefill or any(not isinstance(v, bool)
                                           for v in self.chunked_prefill):
            raise ValueError(f"chunked_prefill must be True/False values, not "
                             f"{self.chunked_prefill!r}")
        if self.ep is not None and any(isinstance(v, bool) or not isinstance(v, int) or v < 2
                                       for v in self.ep):
            raise ValueError(f"ep must be expert-parallel degrees of at least 2, not "
                             f"{self.ep!r}")
        if not self.ep_attention or any(a not in ATTENTION_LAYOUTS for a in self.ep_attention):
            raise ValueError(f"ep_attention must be among {', '.join(ATTENTION_LAYOUTS)}, not "
                             f"{self.ep_attention!r}")
        EpSpec(2, skew=self.moe_skew)           # the skew's bounds, named as serve names them
        if not self.redundant_experts or any(isinstance(v, bool) or not isinstance(v, int)
                                             or v < 0 for v in self.redundant_experts):
            raise ValueError(f"redundant_experts must be non-negative integers, not "
                             f"{self.redundant_experts!r}")
        extra = [r for r in self.redundant_experts if r]
        if extra and self.ep == ():
            raise ValueError(f"--redundant-experts {extra[0]} replicates experts over "
                             f"expert-parallel ranks; drop --no-ep or give 0")


#: A pool of a plan: ``(role, design, tp, chips, ep, attention, redundant)``: ``chips`` chips
#: of ``design`` in replicas of ``tp`` tensor-parallel chips (``ep == 1``, attention "tp",
#: ``redundant`` 0), or of ``ep`` expert-parallel chips with ``attention`` "dp" (``tp`` 1) or
#: "tp" (``tp == ep``) holding the experts and ``redundant`` copies of the hottest (EPLB).
Role = tuple[str, str, int, int, int, str, int]


def group_chips(role: Role) -> int:
    """The chips of one replica of ``role``: its EP degree, else its TP degree."""
    return role[4] if role[4] > 1 else role[2]


def layout_words(role: Role) -> str:
    """A pool's parallelism in words: ``tp 2``, ``ep 8, dp attention``, ``ep 8, dp
    attention, 32 redundant experts``."""
    if role[4] == 1:
        return f"tp {role[2]}"
    red = f", {role[6]} redundant experts" if role[6] else ""
    return f"ep {role[4]}, {role[5]} attention{red}"


@dataclass(frozen=True)
class Plan:
    """One deployment of a search: ``roles`` is ``(("mixed", design, tp, chips, ep,
    attention, redundant),)`` or ``(("prefill", ...), ("decode", ...))`` (:data:`Role`); the engine
    settings beside it (``max_batched_tokens``: one data-parallel attention rank's, as
    ``serve`` takes it)."""

    roles: tuple[Role, ...]
    max_batched_tokens: int
    chunked_prefill: bool
    #: with chunked prefill: whether a prompt may be split to fill a step, or joins one only
    #: whole (the runtime's policy, :func:`splits_prompts`; ``ServeConfig.split_prompts``)
    split_prompts: bool = True

    @property
    def disaggregated(self) -> bool:
        return self.roles[0][0] != "mixed"

    @property
    def design(self) -> str:
        """The design (or pair) this plan deploys: ``chip``, or ``prefill A + decode B``;
        a disaggregated plan on one chip is that chip's too (:func:`best_per_design`)."""
        if not self.disaggregated:
            return self.roles[0][1]
        return f"prefill {self.roles[0][1]} + decode {self.roles[1][1]}"

    @property
    def chips(self) -> int:
        return sum(r[3] for r in self.roles)

    def describe(self) -> str:
        pools = ", ".join(f"{r[0]} {r[3] // group_chips(r)} x {r[1]} ({layout_words(r)})"
                          for r in self.roles)
        how = ("whole prompts batched into" if self.chunked_prefill and not self.split_prompts
               else "prompts chunked into" if self.chunked_prefill else "prompts apart from")
        return f"{pools}; max {self.max_batched_tokens} tokens per step, {how} decode steps"

    def to_dict(self) -> dict:
        return {"design": self.design, "disaggregated": self.disaggregated,
                "pools": [{"role": r[0], "chip": r[1], "tp": r[2], "chips": r[3],
                           "replicas": r[3] // group_chips(r), "ep": r[4], "attention": r[5],
                           "redundant_experts": r[6]}
                          for r in self.roles],
                "chips": self.chips, "max_batched_tokens": self.max_batched_tokens,
                "chunked_prefill": self.chunked_prefill,
                "split_prompts": self.split_prompts if self.chunked_prefill else None,
                "plan": self.describe()}


def splits_prompts(design: str, cfg: ServeConfig) -> bool:
    """Whether ``cfg`` with chunked prefill splits a prompt to fill a step on ``design``
    (``cfg.split_prompts`` when set, else its runtime's policy: ``cfg.runtime``, else the
    serving runtime the chip names; :meth:`ServeConfig.resolved`), or lets it join a step
    only whole (TensorRT-LLM's in-flight batching without context chunking)."""
    if cfg.split_prompts is not None:
        return cfg.split_prompts
    rt = cfg.runtime if cfg.runtime is not None else chip_runtime(design)
    return rt.split_prompts is not False


def chip_runtime(design: str) -> RuntimeProfile:
    """The serving runtime ``design``'s chip names (``[overheads] serving_runtime``; ideal
    where it names none)."""
    chip = load_chip(design)
    return load_runtime(chip.overheads.serving_runtime if chip.overheads else IDEAL.name)


def _degrees(design: str, model, space: SearchSpace, cfg: ServeConfig) -> list[int]:
    """The TP degrees of ``space`` at which ``design`` holds ``model`` (ascending); [] when
    none does within ``space.chips``."""
    prec = dict(space.precision)
    try:
        least = fit_tp(design, model, cfg, precision=prec)
    except ValueError:
        return []
    tps = space.tp or tuple(valid_tp_degrees(model, space.chips))
    return sorted(t for t in set(tps) if least <= t <= space.chips)


def ep_degrees(m, space: SearchSpace, redundant: int = 0) -> list[int]:
    """The expert-parallel degrees ``space`` tries on ``m`` with ``redundant`` redundant
    experts (ascending): ``space.ep`` or every degree from 2 to ``space.chips`` that divides
    the expert slots (experts + ``redundant``); [] for a dense model. ValueError naming the
    value when an explicit degree does not divide the slots, the model is dense and
    ``redundant`` or a degree is given, or no degree divides the slots of ``redundant``."""
    for e in space.ep or ():
        EpSpec(e, redundant_experts=redundant, skew=space.moe_skew).check(m)
        if e > space.chips:
            raise ValueError(f"--ep {e} is larger than --chips ({space.chips}): an "
                             f"expert-parallel replica takes {e} chips")
    if not m.is_moe:
        if redundant:
            raise ValueError(f"--redundant-experts {redundant} needs a mixture-of-experts "
                             f"model; {m.name} is dense (no experts to replicate)")
        return []
    if space.ep is not None:
        return sorted(set(space.ep))
    slots = m.experts + redundant
    out = [e for e in range(2, space.chips + 1) if slots % e == 0]
    if redundant and not out:
        raise ValueError(f"--redundant-experts {redundant}: no expert-parallel degree from 2 "
                         f"to --chips ({space.chips}) divides the expert slots of {m.name} "
                         f"({m.experts} experts + {redundant} redundant = {slots}): each "
                         f"rank holds an equal share")
    return out


def _ep_fits(design: str, model, spec: EpSpec, space: SearchSpace, cfg: ServeConfig) -> bool:
    """Whether a rank of ``spec`` on ``design`` holds its weights, the activations, the
    reserve and one step's tokens of KV cache (the rule of :func:`~.deployment.fit_tp`), and
    the layout can be lowered (TP attention: the heads divide over ``ep``)."""
    try:
        base = make_replica(design, model, Scenario.of(phase="decode", tp=spec.tp,
                                                       **dict(space.precision)))
        r = ep_replica(base, spec)
        b = kv_budget(r, block_tokens=cfg.kv_block_tokens,
                      max_batched_tokens=cfg.max_batched_tokens,
                      reserve_fraction=cfg.kv_reserve_fraction)
    except ValueError:
        return False
    return b.tokens >= cfg.max_batched_tokens


def layouts(design: str, model, space: SearchSpace, cfg: ServeConfig
            ) -> list[tuple[int, int, str, int]]:
    """The replica layouts ``(tp, ep, attention, redundant)`` of ``space`` at which ``design``
    holds ``model``: every TP degree (:func:`_degrees`, ``ep`` 1, ``redundant`` 0), then per
    redundant-expert count of ``space`` every expert-parallel degree (:func:`ep_degrees`)
    with each attention layout whose ranks hold it, the copies' weights included
    (:func:`_ep_fits`)."""
    m = load_model(model)
    out = [(t, 1, "tp", 0) for t in _degrees(design, m, space, cfg)]
    for red in sorted(set(space.redundant_experts)):
        for e in ep_degrees(m, space, red):
            for att in space.ep_attention:
                spec = EpSpec(e, att, red, skew=space.moe_skew)
                if _ep_fits(design, m, spec, space, cfg):
                    out.append((spec.tp, e, att, red))
    return out


def candidates(model, space: SearchSpace, cfg: ServeConfig | None = None) -> list[Plan]:
    """Every plan of ``space`` for ``model`` (module docstring), in a fixed order."""
    cfg = cfg or ServeConfig()
    m = load_model(model)
    n = space.chips
    lay = {d: layouts(d, m, space, cfg) for d in space.designs}

    def group(t: int, e: int) -> int:
        return e if e > 1 else t

    shapes: list[tuple] = []
    for d in space.designs:
        shapes += [(("mixed", d, t, r * group(t, e), e, a, x),) for t, e, a, x in lay[d]
                   for r in range(1, n // group(t, e) + 1)]
    if space.disaggregated:
        for a in space.designs:
            for b in space.designs:
                for ta, ea, aa, xa in lay[a]:
                    ga = group(ta, ea)
                    for tb, eb, ab, xb in lay[b]:
                        gb = group(tb, eb)
                        for n_a in range(ga, n - gb + 1, ga):
                            shapes += [(("prefill", a, ta, n_a, ea, aa, xa),
                                        ("decode", b, tb, n_b, eb, ab, xb))
                                       for n_b in range(gb, n - n_a + 1, gb)]
    # the prompt split as the runtime runs it (the prefill pool's chip's: a pair of chips
    # naming two runtimes cannot be built without --runtime)
    split = {d: splits_prompts(d, cfg) for d in space.designs}
    out = [Plan(s, k, c, split[s[0][1]]) for s in shapes for k in space.max_batched_tokens
           for c in space.chunked_prefill]
    if len(out) > MAX_CANDIDATES:
        raise ValueError(f"the search space holds {len(out):,} plans, more than "
                         f"{MAX_CANDIDATES:,} (sim/serving/search.py): narrow --tp, --ep, "
                         f"--redundant-experts, --max-batched-tokens or --chips")
    return out


def _deployment(plan: Plan, model, space: SearchSpace, replicas: dict) -> Deployment:
    prec = dict(space.precision)
    pools = []
    for role in plan.roles:
        _, design, tp, chips, ep, att, red = role
        key = (design, tp, ep, att, red)
        if key not in replicas:     # one replica object per layout: shared step timers
            r = make_replica(design, model, Scenario.of(phase="decode", tp=tp, **prec))
            if ep > 1:
                r = ep_replica(r, EpSpec(ep, att, red, skew=space.moe_skew))
            replicas[key] = r
        pools.append(Pool(replicas[key], chips // group_chips(role)))
    if plan.disaggregated:
        return Deployment(prefill=pools[0], decode=pools[1])
    return Deployment(pool=pools[0])


def usd_per_mtok(dep: Deployment, tokens_per_s: float, energy_j_per_token: float | None
                 ) -> float | None:
    """Dollars per million output tokens of ``dep`` serving ``tokens_per_s``: each pool's
    chips' cost spread over their service (:func:`~.search_prune.capex_usd_per_s`, as
    :func:`~diptych.arch.cost.token_economics` does for one chip) plus the energy per token
    at the decode (or only) pool's ``usd_per_kwh`` and ``pue``. None without a ``[cost]``
    table on every pool's chip, or without throughput."""
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    pools = [(p.replica.chip, p.chips) for p in dep.pools]
    afd = getattr(dep, "afd", None)
    if afd is not None:     # an AFD deployment's FFN pool, priced beside its attention pool
        pools.append((afd.ffn.chip, afd.ffn.chips))
    capex = capex_usd_per_s(pools)
    if capex is None:
        return None
    c = dep.pools[-1].replica.chip.cost
    energy = (energy_j_per_token or 0.0) * c.pue / 3.6e6 * c.usd_per_kwh
    return 1e6 * (capex / tokens_per_s + energy)


def evaluate(plan: Plan, model, space: SearchSpace, load: Load, cfg: ServeConfig,
             oracles: StepTimerCache, replicas: dict) -> dict:
    """One plan served: its :meth:`Plan.to_dict` and what the run measured (module
    docstring), or ``error`` when it cannot be built or run."""
    row = plan.to_dict()
    try:
        dep = _deployment(plan, model, space, replicas)
        c = replace(cfg, max_batched_tokens=plan.max_batched_tokens,
                    chunked_prefill=plan.chunked_prefill,
                    split_prompts=plan.split_prompts if plan.chunked_prefill else None)
        r = serve(dep, load, c, oracles=oracles)
    except ValueError as exc:
        return {**row, "error": str(exc), "meets_slo": False}
    return {**row, **measured(r, dep, c)}


def measured(r, dep: Deployment, cfg: ServeConfig) -> dict:
    """What a plan's row keeps of its serving result ``r`` on ``dep`` under ``cfg`` (module
    docstring): SLO verdict, p99 latencies and their ratios to the SLOs, goodput per chip,
    tokens/J, $/Mtok."""
    ttft, tpot = r.ttft_s.get("p99"), r.tpot_s.get("p99")
    ej = 1.0 / r.tokens_per_j if r.tokens_per_j else None      # J per output token
    return {"meets_slo": bool(r.meets_slo), "ttft_p99_s": ttft, "tpot_p99_s": tpot,
            "ttft_ratio": ttft / cfg.slo_ttft_s if ttft is not None else None,
            "tpot_ratio": tpot / cfg.slo_tpot_s if tpot is not None else None,
            "goodput_rps": r.goodput_rps, "goodput_rps_per_chip": r.goodput_rps / dep.chips,
            "tokens_per_s": r.tokens_per_s, "tokens_per_s_per_chip": r.tokens_per_s_per_chip,
            "tokens_per_j": r.tokens_per_j, "usd_per_mtok": usd_per_mtok(dep, r.tokens_per_s, ej),
            "fill_fraction": r.info.get("fill_fraction"), "warnings": list(r.warnings),
            # energy per output token by component (None when the step timer gives none)
            "energy_breakdown_j_per_token": dict(r.energy_breakdown_j_per_token) or None,
            # what every serving result states: scheduler, runtime, parallelism and
            # precision per pool (serve's info)
            "setup": {k: r.info[k] for k in SETUP_KEYS}}


def _key(row: dict) -> tuple:
    """Sort key of a plan meeting the SLOs: $/Mtok (priced plans first), then goodput per
    chip (higher first), then the plan's text (a fixed order)."""
    usd = row.get("usd_per_mtok")
    return (usd is None, usd if usd is not None else 0.0, -row["goodput_rps_per_chip"],
            row["plan"])


def dominates(a: dict, b: dict) -> bool:
    """Whether plan row ``a`` is at least as good as ``b`` on $/Mtok (lower; compared only
    when both are priced), tokens/J and goodput per chip (higher), and better on one."""
    pairs = [(-a["tokens_per_j"], -b["tokens_per_j"]),
             (-a["goodput_rps_per_chip"], -b["goodput_rps_per_chip"])]
    if a.get("usd_per_mtok") is not None and b.get("usd_per_mtok") is not None:
        pairs.append((a["usd_per_mtok"], b["usd_per_mtok"]))
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def pareto(rows: list[dict]) -> list[dict]:
    """The rows no other row dominates (:func:`dominates`), in :func:`_key` order."""
    return sorted((r for r in rows if not any(dominates(o, r) for o in rows if o is not r)),
                  key=_key)


def design_name(row: dict) -> str:
    """The design a row counts for: the chip's name when every pool is on it (colocated, or
    disaggregated on one chip), ``prefill A + decode B`` for a pair of two chips."""
    chips = {p["chip"] for p in row["pools"]}
    return next(iter(chips)) if len(chips) == 1 else row["design"]


def best_per_design(rows: Iterable[dict]) -> dict[str, dict]:
    """The best row (:func:`_key`) per design (:func:`design_name`)."""
    out: dict[str, dict] = {}
    for r in sorted(rows, key=_key):
        out.setdefault(design_name(r), r)
    return out


def tightest(row: dict, chips: int) -> str:
    """What binds a plan that meets the SLOs, in words: the SLO it is closer to (the larger
    of its p99 TTFT and TPOT ratios: the one a higher load breaks first), and that it uses
    the most chips the search allowed when it does (a larger deployment was not tried)."""
    tt, tp = row["ttft_ratio"], row["tpot_ratio"] or 0.0
    what, ratio = ("p99 TTFT", tt) if tt >= tp else ("p99 TPOT", tp)
    most = f"; uses the most chips allowed ({chips})" if row["chips"] == chips else ""
    return f"{what} at {100 * ratio:.0f} % of its SLO{most}"


def per_design(rows: list[dict], designs: Iterable[str], chips: int) -> dict[str, dict]:
    """Per design (:func:`design_name`; every design of the search, then the pairs):
    ``{"best": row or None, "binding": words}``: its best plan meeting the SLOs and what
    binds it (:func:`tightest`), or None and why none meets them (:func:`binding` over the
    design's own plans)."""
    groups: dict[str, list] = {d: [] for d in designs}
    for r in rows:
        groups.setdefault(design_name(r), []).append(r)
    out = {}
    for name, mine in groups.items():
        ok = sorted((r for r in mine if r["meets_slo"]), key=_key)
        if ok:
            out[name] = {"best": ok[0], "binding": tightest(ok[0], chips)}
        else:
            out[name] = {"best": None, "binding": binding(mine, [name])}
    return out


def binding(rows: list[dict], designs: Iterable[str]) -> str:
    """Why no row meets the SLOs, in words: the constraint of the row closest to meeting both
    (the larger of its TTFT and TPOT ratios, least), or that no plan could be built: why
    the plans that were tried failed, or that no design holds the model on the chips."""
    ran = [r for r in rows if r.get("ttft_ratio") is not None]
    if not ran:
        errs = sorted({r["error"] for r in rows if r.get("error")})
        if errs:
            more = f" (and {len(errs) - 1} other reasons)" if len(errs) > 1 else ""
            return f"no plan could be built: {errs[0]}{more}"
        return (f"no plan could be built: no design ({', '.join(designs)}) holds the model on "
                f"the chips given")
    close = min(ran, key=lambda r: max(r["ttft_ratio"], r["tpot_ratio"] or 0.0))
    tt, tp = close["ttft_ratio"], close["tpot_ratio"] or 0.0
    what = ("p99 TTFT" if tt >= tp else "p99 TPOT")
    val, slo = ((close["ttft_p99_s"], tt) if tt >= tp else (close["tpot_p99_s"], tp))
    return (f"no plan meets the SLOs: {what} binds; the closest plan ({close['plan']}) has "
            f"{what} {val:.3g} s, {slo:.2f}x its SLO")


@dataclass(frozen=True)
class Batch:
    """Plans evaluated together, on one process (:func:`evaluate_batch`): ``plans`` are
    ``(index in the search, plan)``, every plan of one shape (pools), so that they share
    their step timers. ``oracle``, ``simulate`` and ``grid`` make the step timers
    (:class:`~.serve.StepTimerCache`) of a process that has none given. Picklable, for the
    executor a caller maps batches on (:func:`search`'s ``mapper``)."""

    model: object
    space: SearchSpace
    load: Load
    cfg: ServeConfig
    plans: tuple[tuple[int, Plan], ...]
    oracle: str = "grid"
    simulate: Callable | None = None
    grid: object = None


#: The step timers of this process (a pool's worker) for the last ``(oracle, simulate,
#: grid)`` it was sent: kept between batches, so that a worker's later plans reuse the grid
#: vertices its earlier ones simulated (one entry: a long-lived worker does not accumulate
#: the grids of every search it served).
_PROCESS_ORACLES: dict = {}


def _process_oracles(batch: Batch) -> StepTimerCache:
    key = (batch.oracle, batch.simulate, batch.grid)
    got = _PROCESS_ORACLES.get(key)
    if got is None:
        _PROCESS_ORACLES.clear()
        got = _PROCESS_ORACLES[key] = StepTimerCache(batch.oracle, batch.simulate, batch.grid)
    return got


def evaluate_batch(batch: Batch, oracles: StepTimerCache | None = None
                   ) -> list[tuple[int, dict]]:
    """``(index, row)`` of every plan of ``batch`` (:func:`evaluate`), on ``oracles`` (None:
    this process's, :data:`_PROCESS_ORACLES`). A plan's row does not depend on which
    process evaluates it nor on what it evaluated before: the grid's cells depend on the
    query only (:mod:`.lazy_grid`) and a cached piece is read back bit for bit
    (:mod:`.piece_cache`); a test compares the pooled search with the serial one."""
    oracles = oracles if oracles is not None else _process_oracles(batch)
    replicas: dict = {}
    return [(i, evaluate(p, batch.model, batch.space, batch.load, batch.cfg, oracles,
                         replicas)) for i, p in batch.plans]


def batches(plans: list[tuple[int, Plan]], model, space: SearchSpace, load: Load,
            cfg: ServeConfig, oracles: StepTimerCache) -> list[Batch]:
    """``plans`` (``(index, plan)``) cut into :class:`Batch` es, one per shape (the plans
    that differ only in their engine settings), in the order of the shapes' first plans."""
    groups: dict[tuple, list] = {}
    for i, p in plans:
        groups.setdefault(p.roles, []).append((i, p))
    return [Batch(model, space, load, cfg, tuple(g), oracles.kind, oracles.simulate,
                  oracles.grid) for g in groups.values()]


#: ``mapper(fn, batches)``: yields ``fn(batch)`` for every batch, in any order (the
#: order results arrive in); :func:`search` reassembles the rows by their index.
Mapper = Callable[[Callable[[Batch], list], list[Batch]], Iterable[list]]


def search(model, space: SearchSpace, load: Load, cfg: ServeConfig | None = None, *,
           oracles: StepTimerCache | None = None,
           progress: Callable[[int, int, dict], None] | None = None,
           mapper: Mapper | None = None, require_slo: bool = True,
           prune: bool = True) -> dict:
    """Evaluate the plans of ``space`` on ``load`` (module docstring). Returns
    ``{"model", "space", "candidates", "run", "pruned", "evaluated": [rows], "meeting_slo",
    "best", "best_per_design": {name: row}, "per_design": {name: {"best", "binding"}}
    (:func:`per_design`), "pareto": [rows]}``.

    With ``prune`` the plans run in tiers of their chip count, fewest first, and before
    each tier a plan whose price floor (:mod:`.search_prune`) exceeds the best price its
    design has reached is not run: its row has ``pruned`` (why) and it cannot be a best plan;
    the Pareto front is then over the plans run. ``prune=False``: every plan runs, all in one
    tier (an executor gets them all at once).

    ``progress(i, n, row)`` after each plan (in the order they finish; a pruned one too).
    ``mapper`` runs each tier's :class:`Batch` es elsewhere (a process pool, Dask: ``diptych
    serve-plan --jobs/--scheduler``), each process on step timers of its own of
    ``oracles``' kind, engine and grid; None: here, one after another, on ``oracles``. The
    rows, and so the answer, are the same either way (pruning decides between tiers, on
    complete tiers). When no plan meets the SLOs: ValueError naming the binding constraint,
    or with ``require_slo`` False the result with ``best`` None (``per_design`` says what
    binds)."""
    cfg = cfg or ServeConfig()
    if load.qps is None:
        raise ValueError("a deployment search serves an open-loop target load (--qps)")
    m = load_model(model)
    for d in space.designs:
        load_chip(d)                # an unknown design exits before any run
    plans = candidates(m, space, cfg)
    if not plans:
        raise ValueError(binding([], space.designs) + f" ({space.chips} chips)")
    oracles = oracles or StepTimerCache()
    span = stream_span(load, m.max_position_embeddings, cfg.seed) if prune else None
    got: list[dict | None] = [None] * len(plans)
    best: dict[str, dict] = {}          # the cheapest priced row meeting the SLOs, per design
    done = 0

    def take(i: int, row: dict) -> None:
        nonlocal done
        got[i] = row
        done += 1
        if progress is not None:
            progress(done, len(plans), row)
        if row["meets_slo"] and row.get("usd_per_mtok") is not None:
            name = design_name(row)
            if name not in best or row["usd_per_mtok"] < best[name]["usd_per_mtok"]:
                best[name] = row

    # tiers only when pruning (a tier waits for the one before it); else one tier of all
    for n in sorted({p.chips for p in plans}) if prune else [None]:
        tier = []
        for i, p in enumerate(plans):
            if n is not None and p.chips != n:
                continue
            floor = usd_floor(p.roles, *span) if span is not None else None
            mine = best.get(design_name(p.to_dict()))
            if floor is not None and mine is not None and floor > mine["usd_per_mtok"]:
                take(i, {**p.to_dict(), "meets_slo": False,
                         "pruned": skip_reason(floor, mine)})
            else:
                tier.append((i, p))
        work = batches(tier, m, space, load, cfg, oracles)
        parts: Iterable[list] = ((evaluate_batch(b, oracles) for b in work) if mapper is None
                                 else mapper(evaluate_batch, work) if work else ())
        for part in parts:
            for i, row in part:
                take(i, row)
    rows: list[dict] = [r for r in got if r is not None]
    if len(rows) != len(plans):
        raise RuntimeError(f"the executor returned {len(rows)} of {len(plans)} plans")
    ok = [r for r in rows if r["meets_slo"]]
    if not ok and require_slo:
        raise ValueError(binding(rows, space.designs))
    ranked = sorted(ok, key=_key)
    pruned = sum(1 for r in rows if r.get("pruned"))
    return {"model": m.name,
            "space": {"designs": list(space.designs), "chips": space.chips,
                      "tp": list(space.tp) if space.tp else None,
                      "ep": list(space.ep) if space.ep is not None else None,
                      "ep_attention": list(space.ep_attention), "moe_skew": space.moe_skew,
                      "redundant_experts": list(space.redundant_experts),
                      "max_batched_tokens": list(space.max_batched_tokens),
                      "chunked_prefill": list(space.chunked_prefill),
                      "disaggregated": space.disaggregated,
                      # the precision keywords every plan ran with (None: each chip's default)
                      "precision": dict(space.precision) or None},
            "load": {"qps": load.qps, "requests": load.requests},
            "slo": {"ttft_s": cfg.slo_ttft_s, "tpot_s": cfg.slo_tpot_s},
            "candidates": len(plans), "run": len(plans) - pruned, "pruned": pruned,
            "evaluated": rows, "meeting_slo": len(ok),
            "best": ranked[0] if ranked else None, "best_per_design": best_per_design(ok),
            "per_design": per_design(rows, space.designs, space.chips),
            "pareto": pareto(ok)}
