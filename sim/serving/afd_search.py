"""The attention:FFN ratio search (``diptych serve-plan-afd``; docs/serving.md,
"Attention–FFN disaggregation", "The ratio search").

For two designs X and Y (or one design twice) and a chip budget, :func:`candidates`
enumerates every AFD plan (:class:`AfdPlan`) of both role assignments — X on the attention
pool and Y on the FFN pool, then the reverse:

* the attention pool's size ``n`` (``"tp"``: one tensor-parallel group, ``n`` a degree that
  splits the model; ``"dp"``: ``n ≥ 2`` one-chip data-parallel ranks);
* the FFN pool's size ``m`` (a MoE model's experts expert-parallel over it, so ``m`` divides
  the experts; a dense model's MLPs tensor-parallel, so ``m`` a degree that splits it);
* ``n + m`` at most the budget, every micro-batch count ``k`` of the space.

:func:`afd_search` serves the same request stream on every plan (one seed, shared step timers)
and keeps each plan's row as the deployment search keeps it
(:func:`~.search.measured`: the SLO verdict at p99, goodput per chip, tokens/J, $/Mtok with both
pools' chips priced). It ranks with the deployment search's own order and front
(:func:`~.search._key`: $/Mtok, then goodput per chip; :func:`~.search.pareto`), and reports
per assignment the best plan by that order and the best by goodput per chip, with what binds
it (:func:`~.search.tightest`). When no plan meets the SLOs it raises ValueError naming the
binding constraint (:func:`~.search.binding`: the SLO the closest plan misses and by how much,
or why no plan could be built — a pool too small to hold its part, say).

Every plan is evaluated (no pruning: the spaces are small, tens of plans); each attention
replica's grid and each FFN pool's token axis are shared by every plan that uses them
(:meth:`~.serve.StepTimerCache.get_afd`), so a plan differing only in ``k`` re-simulates
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ...arch import load_chip
from ...arch.runtime import IDEAL, load_runtime
from ...workloads import load_model
from ...workloads.lower import valid_tp_degrees
from .afd import AfdSpec
from .config import ServeConfig
from .deployment import afd_deployment
from .requests import Load
from .search import _key, binding, measured, pareto, tightest
from .serve import StepTimerCache, serve

#: Most plans one ratio search may evaluate (each a serving run); a larger space exits 2.
MAX_AFD_CANDIDATES = 2000

LAYOUTS = ("tp", "dp")


@dataclass(frozen=True)
class AfdSearchSpace:
    """What :func:`candidates` enumerates (module docstring): ``designs`` (one or two chip
    presets or TOML paths; two: both role assignments), ``chips`` the most chips ``n + m`` a
    plan uses, ``attention_chips``/``ffn_chips`` the pool sizes tried (None: every size the
    model and the budget allow), ``microbatches`` the ``k`` tried, ``attention_layouts``
    ``"tp"`` and/or ``"dp"``, ``precision`` ``diptych run``'s precision keywords."""

    designs: tuple[str, ...]
    chips: int
    attention_chips: tuple[int, ...] | None = None
    ffn_chips: tuple[int, ...] | None = None
    microbatches: tuple[int, ...] = (1, 2, 4)
    attention_layouts: tuple[str, ...] = ("tp",)
    precision: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if not 1 <= len(self.designs) <= 2:
            raise ValueError(f"the ratio search puts one or two designs (--chip) in the "
                             f"attention and FFN roles, not {len(self.designs)}")
        if isinstance(self.chips, bool) or not isinstance(self.chips, int) or self.chips < 2:
            raise ValueError(f"--chips must be an integer of at least 2 (one chip per pool), "
                             f"not {self.chips!r}")
        for flag, vals in (("--attention-chips", self.attention_chips or (1,)),
                           ("--ffn-chips", self.ffn_chips or (1,)),
                           ("--afd-microbatches", self.microbatches)):
            if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                               for v in vals):
                raise ValueError(f"{flag} must be positive integers, not {vals!r}")
        if not self.attention_layouts or any(v not in LAYOUTS for v in self.attention_layouts):
            raise ValueError(f"--afd-attention must be tp and/or dp, not "
                             f"{self.attention_layouts!r}")


@dataclass(frozen=True)
class AfdPlan:
    """One AFD deployment of the search: the attention pool ``n`` × ``attention_chip`` in
    ``layout``, the FFN pool ``m`` × ``ffn_chip``, ``k`` micro-batches."""

    attention_chip: str
    ffn_chip: str
    n: int
    m: int
    k: int
    layout: str = "tp"

    @property
    def chips(self) -> int:
        return self.n + self.m

    @property
    def assignment(self) -> str:
        """The role assignment this plan belongs to: ``attention X + FFN Y``."""
        return f"attention {self.attention_chip} + FFN {self.ffn_chip}"

    def spec(self) -> AfdSpec:
        return AfdSpec(self.n, self.m, self.k, attention_layout=self.layout)

    def describe(self) -> str:
        return (f"{self.n}:{self.m}: attention {self.n} x {self.attention_chip} "
                f"({self.layout} {self.n}), FFN {self.m} x {self.ffn_chip}, {self.k} "
                f"micro-batch{'es' if self.k != 1 else ''}")

    def to_dict(self) -> dict:
        """The row's plan fields; ``pools`` as :meth:`~.search.Plan.to_dict` states them."""
        return {"design": self.assignment, "assignment": self.assignment,
                "ratio": f"{self.n}:{self.m}", "attention_chips": self.n,
                "ffn_chips": self.m, "microbatches": self.k, "attention_layout": self.layout,
                "pools": [{"role": "attention", "chip": self.attention_chip, "chips": self.n,
                           "tp": self.n if self.layout == "tp" else 1,
                           "dp": self.n if self.layout == "dp" else 1},
                          {"role": "ffn", "chip": self.ffn_chip, "chips": self.m}],
                "chips": self.chips, "plan": self.describe()}


def assignments(designs: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(attention design, FFN design)`` of each assignment: X→attention first, then the
    reverse; one design (or the same twice): one assignment."""
    x, y = designs[0], designs[-1]
    return [(x, y)] if x == y else [(x, y), (y, x)]


def _sizes(model, space: AfdSearchSpace) -> tuple[dict[str, list[int]], list[int]]:
    """The attention pool sizes per layout and the FFN pool sizes (module docstring)."""
    top = space.chips - 1
    tp = valid_tp_degrees(model, top)
    att = {"tp": tp, "dp": list(range(2, top + 1))}
    if space.attention_chips is not None:
        att = {k: [n for n in v if n in space.attention_chips] for k, v in att.items()}
    if model.is_moe:
        ffn = [m for m in range(1, top + 1) if model.experts % m == 0]
    else:
        ffn = tp
    if space.ffn_chips is not None:
        ffn = [m for m in ffn if m in space.ffn_chips]
    return att, ffn


def candidates(model, space: AfdSearchSpace) -> list[AfdPlan]:
    """Every plan of ``space`` for ``model`` (module docstring), in a fixed order:
    assignment, layout, ``n``, ``m``, ``k``."""
    m_ = load_model(model)
    att, ffn = _sizes(m_, space)
    out = [AfdPlan(a, f, n, m, k, lay)
           for a, f in assignments(space.designs)
           for lay in space.attention_layouts for n in att[lay]
           for m in ffn if n + m <= space.chips
           for k in dict.fromkeys(space.microbatches)]
    if len(out) > MAX_AFD_CANDIDATES:
        raise ValueError(f"the ratio search holds {len(out):,} plans, more than "
                         f"{MAX_AFD_CANDIDATES:,} (sim/serving/afd_search.py): narrow --chips, "
                         f"--attention-chips, --ffn-chips or --afd-microbatches")
    return out


def evaluate(plan: AfdPlan, model, space: AfdSearchSpace, load: Load, cfg: ServeConfig,
             oracles: StepTimerCache) -> dict:
    """One plan served: its :meth:`AfdPlan.to_dict` and what the run measured
    (:func:`~.search.measured`), or ``error`` when it cannot be built or run (a pool that
    cannot hold its part, a prompt that does not fit the KV cache)."""
    row = plan.to_dict()
    try:
        dep = afd_deployment(plan.attention_chip, plan.ffn_chip, model, plan.spec(),
                             **dict(space.precision))
        r = serve(dep, load, cfg, oracles=oracles)
    except ValueError as exc:
        return {**row, "error": str(exc), "meets_slo": False}
    a = r.info["afd"]
    return {**row, **measured(r, dep, cfg), "mean_step_s": a["mean_step_s"],
            "attention_utilisation": a["attention"]["utilisation"],
            "ffn_utilisation": a["ffn"]["utilisation"],
            "link_hidden_fraction": a["link_hidden_fraction"], "tpot_p50_s": r.tpot_s["p50"],
            "precision": {p["role"]: p["precision"]["weights"] for p in r.info["pools"]}}


def _by_goodput(row: dict) -> tuple:
    """Goodput per chip first (higher), then :func:`~.search._key`."""
    return (-row["goodput_rps_per_chip"], *_key(row))


def search_runtime(designs: tuple[str, ...], cfg: ServeConfig) -> ServeConfig:
    """``cfg`` with its serving runtime fixed for every plan: ``cfg.runtime``, else the first
    design's (``[overheads] serving_runtime``), so that both assignments differ only in the
    hardware."""
    if cfg.runtime is not None:
        return cfg
    c = load_chip(designs[0])
    return replace(cfg, runtime=load_runtime(c.overheads.serving_runtime)
                   if c.overheads else IDEAL)


def afd_search(model, space: AfdSearchSpace, load: Load, cfg: ServeConfig | None = None, *,
               oracles: StepTimerCache | None = None,
               progress: Callable[[int, int, dict], None] | None = None,
               require_slo: bool = True) -> dict:
    """Evaluate every plan of ``space`` on ``load`` (module docstring). Returns ``{"model",
    "space", "load", "slo", "runtime", "candidates", "evaluated": [rows], "meeting_slo",
    "best", "per_assignment": {assignment: {"best", "best_goodput", "binding"}}, "pareto"}``.
    ``best`` minimises :func:`~.search._key` over the plans meeting the SLOs; so does an
    assignment's ``best``, and ``best_goodput`` maximises goodput per chip. No plan meeting
    the SLOs: ValueError naming what binds (with ``require_slo`` False: ``best`` None, each
    assignment's ``binding`` says why)."""
    cfg = search_runtime(space.designs, cfg or ServeConfig())
    m = load_model(model)
    for d in space.designs:
        load_chip(d)                # an unknown design exits before any run
    plans = candidates(m, space)
    if not plans:
        raise ValueError(f"no AFD plan fits {space.chips} chips: {m.name} needs an attention "
                         f"pool size among {_sizes(m, space)[0]} and an FFN pool size among "
                         f"{_sizes(m, space)[1]} (--chips, --attention-chips, --ffn-chips)")
    oracles = oracles or StepTimerCache()
    rows = []
    for i, p in enumerate(plans):
        rows.append(evaluate(p, m, space, load, cfg, oracles))
        if progress is not None:
            progress(i + 1, len(plans), rows[-1])
    ok = [r for r in rows if r["meets_slo"]]
    if not ok and require_slo:
        raise ValueError(binding(rows, space.designs))
    per = {}
    for att, ffn in assignments(space.designs):
        name = f"attention {att} + FFN {ffn}"
        mine = [r for r in rows if r["assignment"] == name]
        good = [r for r in mine if r["meets_slo"]]
        if good:
            b = min(good, key=_key)
            per[name] = {"best": b, "best_goodput": min(good, key=_by_goodput),
                         "binding": tightest(b, space.chips)}
        else:
            per[name] = {"best": None, "best_goodput": None,
                         "binding": binding(mine, [att, ffn])}
    return {"model": m.name,
            "space": {"designs": list(space.designs), "chips": space.chips,
                      "microbatches": list(space.microbatches),
                      "attention_layouts": list(space.attention_layouts)},
            "load": {"qps": load.qps, "concurrency": load.concurrency,
                     "requests": load.requests},
            "slo": {"ttft_s": cfg.slo_ttft_s, "tpot_s": cfg.slo_tpot_s},
            "runtime": cfg.runtime.name, "candidates": len(plans), "evaluated": rows,
            "meeting_slo": len(ok), "best": min(ok, key=_key) if ok else None,
            "per_assignment": per, "pareto": pareto(ok)}


__all__ = ["AfdPlan", "AfdSearchSpace", "MAX_AFD_CANDIDATES", "afd_search", "assignments",
           "candidates", "evaluate", "search_runtime"]
