"""Each chip design deployed at its best for ``diptych compare --serving`` (issue 24 item 3;
docs/serving.md, "compare --serving: each design at its best").

:class:`BestDeploySettings` is the bounded default search space of ``compare --serving``: up
to ``chips`` chips (default 4) per deployment, colocated on each design and disaggregated over
every ordered pair (the prefill:decode ratio: every pair of pool sizes within ``chips``), every
tensor-parallel degree that holds the model (and, on a mixture-of-experts model, every
expert-parallel degree dividing its experts with both attention layouts, as ``serve-plan``),
batch-token limits 2048 and 8192 (in this engine also the prefill chunk size: a chunked prompt
takes at most the step's token limit), prompts chunked into decode steps or apart; at the
target load ``qps`` (default 2 req/s, ``requests`` 200) of the serving study's request stream
and SLOs (:class:`~.study.ServingSettings`: lognormal prompts around 1024 and outputs around
256 tokens, p99 TTFT <= 2 s, TPOT <= 0.2 s). :func:`best_deployments` runs the deployment search
(:func:`~.search.search`) over it and ranks every plan meeting the SLOs as the search does
($ per million output tokens, goodput per chip breaking ties: the metric the report's table
"each design at its best" leads with), and states per design why its plan won (:func:`why`).

The fixed deployments the serving study (``compare --serving --no-search``) runs are in this
space (:func:`fixed_plans`: the fewest TP chips that hold the model, replicas filling
``ServingSettings.chips``, vLLM's 8192-token limit, the runtime's prompt policy; one prefill
chip with one decode chip of two designs), so the plan chosen is never worse on the ranking
than the fixed one, and :func:`why` states the fixed plan's row beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ...arch.cluster import load_cluster
from .config import ServeConfig
from .deployment import fit_tp
from .requests import Load, check_rate, check_request_count, parse_length
from .search import (Plan, SearchSpace, _key, binding, candidates, chip_runtime, design_name,
                     search, splits_prompts)
from .study import ServingSettings

#: The batch-token limits (= prefill chunk sizes) the default space tries: vLLM's defaults
#: for its OpenAI API server, 8192 on devices of >= 70 GiB (the fixed deployment's,
#: :mod:`.config`) and 2048 on smaller ones or A100 [S: vllm/engine/arg_utils.py
#: ``EngineArgs.get_batch_defaults``, ``UsageContext.OPENAI_API_SERVER``].
DEFAULT_LIMITS = (2048, 8192)


def check_cluster(chips: int, cluster: str) -> None:
    """ValueError naming the value unless ``chips`` (``--serving-chips``, the most chips a
    deployment's pools take together) is a positive integer within the cluster preset
    ``cluster`` (name or TOML path; its domains x scale-up chips)."""
    if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1:
        raise ValueError(f"--serving-chips must be a positive integer, not {chips!r}")
    c = load_cluster(cluster)
    if chips > c.chips:
        raise ValueError(f"--serving-chips {chips:,} is larger than the cluster preset "
                         f"{c.name} ({c.chips:,} chips: {c.domains:,} scale-up domain(s) of "
                         f"{c.scale_up.chips}); a deployment's pools must fit in it")


@dataclass(frozen=True)
class BestDeploySettings:
    """The default space of ``compare --serving`` (module docstring). ``chips``: the most a
    deployment uses (``--serving-chips``); ``qps``: the target load (req/s); ``requests``:
    requests per plan; ``cluster``: the cluster preset (name or TOML path) the deployments
    must fit in (its chips bound ``chips``); ``tp``/``ep``: as :class:`~.search.SearchSpace`
    (None: every degree that holds the model)."""

    chips: int = 4
    qps: float = 2.0
    requests: int = 200
    max_batched_tokens: tuple[int, ...] = DEFAULT_LIMITS
    chunked_prefill: tuple[bool, ...] = (True, False)
    disaggregated: bool = True
    tp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    cluster: str = "dgx-h100"
    stream: ServingSettings = field(default_factory=ServingSettings)

    def __post_init__(self):
        check_cluster(self.chips, self.cluster)
        check_rate("--serving-qps", self.qps)
        if isinstance(self.requests, bool) or not isinstance(self.requests, int) \
                or self.requests < 1:
            raise ValueError(f"--serving-requests must be a positive integer, not "
                             f"{self.requests!r}")
        check_request_count(self.requests, "--serving-requests")
        self.space(("h100",))           # the space's own checks (limits, policies, tp, ep)

    def load(self) -> Load:
        s = self.stream
        return Load(qps=self.qps, prompt=parse_length(s.prompt, "prompt"),
                    gen=parse_length(s.gen, "gen"), requests=self.requests)

    def config(self) -> ServeConfig:
        return self.stream.config()

    def space(self, designs) -> SearchSpace:
        return SearchSpace(designs=tuple(dict.fromkeys(designs)), chips=self.chips,
                           tp=self.tp, max_batched_tokens=self.max_batched_tokens,
                           chunked_prefill=self.chunked_prefill,
                           disaggregated=self.disaggregated, ep=self.ep)


def _runtime_chunked(design: str, cfg: ServeConfig) -> bool:
    """The prompt policy ``cfg`` resolves to on ``design``'s serving runtime."""
    return bool(cfg.resolved(chip_runtime(design)).chunked_prefill)


def fixed_plans(designs, model, s: BestDeploySettings) -> dict[str, Plan]:
    """The deployments the serving study runs (``compare --serving --no-search``,
    :func:`~.study.serving_study`) as plans of the search, by design name: each design
    colocated at :func:`~.deployment.fit_tp` on ``s.stream.chips`` chips, and each ordered
    pair of two designs with half the chips prefilling and half decoding; vLLM's
    ``max_batched_tokens`` (8192) and the runtime's prompt policy. A deployment the study
    cannot build (the model does not fit, the chips do not divide) is left out."""
    cfg = s.config()
    n, out = s.stream.chips, {}
    tps = {}
    for d in dict.fromkeys(designs):
        try:
            tps[d] = fit_tp(d, model, cfg)
        except ValueError:
            continue
        if n % tps[d] == 0:
            out[d] = Plan((("mixed", d, tps[d], n, 1, "tp", 0),), cfg.max_batched_tokens,
                          _runtime_chunked(d, cfg), splits_prompts(d, cfg))
    half = n // 2
    for a in tps:
        for b in tps:
            if a == b or n % 2 or half % tps[a] or half % tps[b]:
                continue
            p = Plan((("prefill", a, tps[a], half, 1, "tp", 0),
                      ("decode", b, tps[b], half, 1, "tp", 0)), cfg.max_batched_tokens,
                     _runtime_chunked(a, cfg), splits_prompts(a, cfg))
            out[p.design] = p
    return out


def _pct(r) -> str:
    return "-" if r is None else f"{100 * r:.0f} %"


def why(name: str, rows: list[dict], fixed: dict | None) -> str:
    """Why design ``name``'s plan won, in words: the cheapest (:func:`~.search._key`) of the
    N plans of the design meeting the SLOs, the runner-up's price, the fixed deployment's
    row (its price, that it misses an SLO, that it was skipped or refused), and the chosen
    plan's p99 TTFT and TPOT as shares of their SLOs."""
    mine = [r for r in rows if design_name(r) == name]
    ok = sorted((r for r in mine if r["meets_slo"]), key=_key)
    if not ok:
        return binding(mine, [name])
    b = ok[0]

    def price(r):
        u = r.get("usd_per_mtok")
        return (f"${u:.3f}/Mtok" if u is not None
                else f"{r['goodput_rps_per_chip']:.3g} req/s per chip")

    skipped = sum(1 for r in mine if r.get("pruned"))
    refused = sum(1 for r in mine if r.get("error"))
    text = (f"cheapest of {len(ok)} plans meeting the SLOs at {price(b)} ({len(mine)} plans: "
            f"{len(mine) - skipped - refused} served, {skipped} skipped by their price floor, "
            f"{refused} refused)")
    if len(ok) > 1:
        text += f"; next {price(ok[1])} ({ok[1]['plan']})"
    if fixed is not None and fixed["plan"] != b["plan"]:
        if fixed.get("pruned"):
            f = f"skipped ({fixed['pruned']})"
        elif fixed.get("error"):
            f = f"refused: {fixed['error']}"
        elif not fixed["meets_slo"]:
            f = (f"misses the SLOs (p99 TTFT {_pct(fixed['ttft_ratio'])}, TPOT "
                 f"{_pct(fixed['tpot_ratio'])} of them)")
        else:
            f = price(fixed)
        text += f"; the fixed deployment ({fixed['plan']}): {f}"
    elif fixed is not None:
        text += "; it is the fixed deployment"
    return (text + f"; p99 TTFT at {_pct(b['ttft_ratio'])} and TPOT at "
            f"{_pct(b['tpot_ratio'])} of the SLOs")


def best_deployments(designs, model, s: BestDeploySettings | None = None, *,
                     oracles=None, mapper=None,
                     progress: Callable[[int, int, dict], None] | None = None) -> dict:
    """:func:`~.search.search` over ``s.space(designs)`` at ``s.load()`` (module docstring),
    every design kept (``per_design``: ``best`` None and what binds when none of its plans
    meets the SLOs), plus per design ``why`` (:func:`why`) and ``fixed`` (the row of the
    study's fixed deployment, :func:`fixed_plans`; None when the study cannot build it), and
    ``fixed_plans`` (its plans, by design). ValueError naming the binding constraint when no
    plan of any design meets the SLOs (or none can be built)."""
    s = s or BestDeploySettings()
    space, cfg = s.space(designs), s.config()
    res = search(model, space, s.load(), cfg, oracles=oracles, mapper=mapper,
                 progress=progress, require_slo=False)
    if res["best"] is None:
        raise ValueError(f"{binding(res['evaluated'], space.designs)} at {s.qps:g} req/s on "
                         f"up to {s.chips} chips (--serving-qps, --serving-chips)")
    fixed = fixed_plans(designs, model, s)
    by_plan = {r["plan"]: r for r in res["evaluated"]}
    for name, d in res["per_design"].items():
        p = fixed.get(name)
        d["fixed"] = by_plan.get(p.describe()) if p is not None else None
        d["why"] = why(name, res["evaluated"], d["fixed"])
    res["fixed_plans"] = {k: p.to_dict() for k, p in fixed.items()}
    res["settings"] = {"chips": s.chips, "qps": s.qps, "requests": s.requests,
                       "cluster": s.cluster, "prompt": s.stream.prompt, "gen": s.stream.gen}
    return res


def plan_count(designs, model, s: BestDeploySettings | None = None) -> int:
    """How many plans the space of ``designs`` holds for ``model`` (before pruning)."""
    s = s or BestDeploySettings()
    return len(candidates(model, s.space(designs), s.config()))
