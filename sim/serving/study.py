"""The serving study behind ``diptych compare --serving``: what each chip serves under SLOs.

For a model and a set of chips, on the same number of chips (``settings.chips``) each:

* **colocated**, per chip: replicas of the fewest tensor-parallel chips that hold the model
  (:func:`~.serve.fit_tp`); the highest arrival rate whose run meets the SLOs (MLPerf's rule:
  p99 TTFT and p99 TPOT within them) and the tokens per joule at that load;
* **disaggregated**, for every ordered pair of distinct chips (prefill chip, decode chip):
  half the chips prefill, half decode, the KV cache crossing the chips' links; the same
  figures.

The highest rate is found by doubling from ``qps_start`` until the SLOs fail, then bisecting
to ``rel_tol`` (when ``max_doublings`` doublings all meet them, the rate found is a lower
bound: ``max_qps_is_lower_bound``, "≥" in the table); every run draws the same request stream
(same seed), scaled in time, for ``duration_s`` seconds of arrivals (so a faster rate sends
more requests and an overloaded server builds a queue, as in MLPerf's server scenario; a fixed
request count would arrive as one burst at high rates and hide the overload), from
``min_requests`` to ``max_requests``.
The result states the rate the stream really arrived at (``arrival_rps``: one draw of arrivals
scaled in time strays from the nominal rate by ~1/√n) and, when the run at the rate found did
not reach steady state (more than :data:`~.metrics.FILL_LIMIT` of its requests arrived while
the system filled, :mod:`.metrics`), says so in ``warnings``: its verdict then rests on a
half-empty system, and a longer ``duration_s`` would test the load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...arch import load_chip
from .config import ServeConfig
from .metrics import FILL_LIMIT
from ..run.scenario import Scenario
from .step_time import make_replica
from .requests import parse_length
from .serve import SETUP_KEYS, Deployment, Load, StepTimerCache, Pool, fit_tp, serve


@dataclass(frozen=True)
class ServingSettings:
    """The study's request stream, SLOs and search (defaults: vLLM benchmark-like random
    lengths around 1k prompt / 256 output tokens, MLPerf Llama-2-70B server SLOs)."""

    chips: int = 2
    prompt: str = "lognormal:mean=1024,sigma=0.5"
    gen: str = "lognormal:mean=256,sigma=0.5"
    duration_s: float = 60.0
    min_requests: int = 50
    max_requests: int = 20_000
    slo_ttft_s: float = 2.0
    slo_tpot_s: float = 0.2
    qps_start: float = 1.0
    rel_tol: float = 0.05
    max_doublings: int = 14
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.chips, bool) or not isinstance(self.chips, int) or self.chips < 1:
            raise ValueError(f"serving chips must be a positive integer, not {self.chips!r}")
        if not 0 < self.rel_tol < 1:
            raise ValueError(f"rel_tol must be in (0, 1), not {self.rel_tol!r}")
        if not self.qps_start > 0:
            raise ValueError(f"qps_start must be positive, not {self.qps_start!r}")

    def config(self) -> ServeConfig:
        return ServeConfig(slo_ttft_s=self.slo_ttft_s, slo_tpot_s=self.slo_tpot_s,
                           seed=self.seed)

    def load(self, qps: float) -> Load:
        """``duration_s`` of arrivals at ``qps`` (between ``min_requests`` and
        ``max_requests`` requests)."""
        p, g = parse_length(self.prompt, "prompt"), parse_length(self.gen, "gen")
        if qps * self.duration_s < self.min_requests:
            return Load(qps=qps, prompt=p, gen=g, requests=self.min_requests)
        return Load(qps=qps, prompt=p, gen=g, duration_s=self.duration_s,
                    requests=self.max_requests)


def max_qps(dep: Deployment, s: ServingSettings, oracles: StepTimerCache,
            say: Callable[[str], None] = lambda _: None) -> dict:
    """Highest arrival rate meeting the SLOs and the run at that rate (module docstring)."""
    cfg = s.config()

    def run(q):
        r = serve(dep, s.load(q), cfg, oracles=oracles)
        say(f"{dep.describe()}: {q:.3g} req/s -> "
            f"{'meets' if r.meets_slo else 'misses'} the SLOs")
        return r

    q = s.qps_start
    r = run(q)
    good = bad = None
    if r.meets_slo:
        good = (q, r)
        for _ in range(s.max_doublings):
            q *= 2
            r = run(q)
            if not r.meets_slo:
                bad = q
                break
            good = (q, r)
    else:
        bad = q
        for _ in range(s.max_doublings):
            q /= 2
            r = run(q)
            if r.meets_slo:
                good = (q, r)
                break
            bad = q
    # what every serving result states (scheduler, runtime, parallelism and precision per
    # pool): the runs' own info, the same at every load
    setup = {k: r.info[k] for k in SETUP_KEYS}
    if good is None:
        return {"setup": setup, "max_qps": None, "tokens_per_j": None, "tokens_per_s": None,
                "ttft_p99_s": None, "tpot_p99_s": None, "energy_j": None,
                "energy_breakdown_j": None,
                "energy_breakdown_j_per_token": None, "note": "no load meets the SLOs"}
    while bad is not None and (bad - good[0]) > s.rel_tol * good[0]:
        mid = (good[0] + bad) / 2
        r = run(mid)
        if r.meets_slo:
            good = (mid, r)
        else:
            bad = mid
    q, r = good
    fill = r.info["fill_fraction"]
    warns = [] if fill <= FILL_LIMIT else [
        f"the run at {q:.3g} req/s did not reach steady state: {100 * fill:.0f} % of its "
        f"requests arrived while the system filled (at most {100 * FILL_LIMIT:.0f} %), so its "
        f"verdict rests on a half-empty system; a longer duration_s would test the load"]
    return {"setup": setup, "max_qps": q, "max_qps_is_lower_bound": bad is None,
            "arrival_rps": r.info["arrival_rps"], "fill_fraction": fill, "warnings": warns,
            "tokens_per_j": r.tokens_per_j, "tokens_per_s": r.tokens_per_s,
            "tokens_per_s_per_chip": r.tokens_per_s_per_chip, "goodput_rps": r.goodput_rps,
            "ttft_p99_s": r.ttft_s["p99"], "tpot_p99_s": r.tpot_s["p99"],
            "kv_peak_fraction": r.kv_peak_fraction, "energy_j": r.energy_j,
            # the run at that load by component, in all and per output token (None when
            # its step timer gives no breakdown)
            "energy_breakdown_j": dict(r.energy_breakdown_j) or None,
            "energy_breakdown_j_per_token": dict(r.energy_breakdown_j_per_token) or None}


def _pool(chip, model, chips: int, cfg: ServeConfig) -> Pool:
    tp = fit_tp(chip, model, cfg)
    if chips % tp:
        raise ValueError(f"{model} needs {tp} {load_chip(chip).name} chips per replica; "
                         f"{chips} is not a multiple of it")
    return Pool(make_replica(chip, model, Scenario.of(phase="decode", tp=tp)), chips // tp)


def serving_study(chips, model: str, settings: ServingSettings | None = None, *,
                  simulate: Callable | None = None, oracle: str = "grid",
                  progress: Callable[[str], None] | None = None) -> dict:
    """The study of the module docstring as a JSON-ready dict::

        {"model", "settings", "colocated": {chip: {...}},
         "disaggregated": [{"prefill", "decode", ...}]}

    A configuration that cannot be built (the model does not fit its share of chips) has an
    ``error`` string instead of figures."""
    s = settings or ServingSettings()
    cfg = s.config()
    loaded = [load_chip(c) for c in chips]
    say = progress or (lambda _: None)
    oracles = StepTimerCache(oracle, simulate)      # shared: a chip's steps are timed once
    out: dict = {"model": str(model), "settings": dict(s.__dict__), "colocated": {},
                 "disaggregated": []}
    for c in loaded:
        try:
            pool = _pool(c, model, s.chips, cfg)
            dep = Deployment(pool=pool)
            res = max_qps(dep, s, oracles, say)
            out["colocated"][c.name] = {"chips": pool.chips, "tp": pool.replica.tp,
                                        "replicas": pool.replicas, **res}
        except ValueError as exc:
            out["colocated"][c.name] = {"chips": s.chips, "error": str(exc)}
    half = s.chips // 2
    for a in loaded:
        for b in loaded:
            if a.name == b.name:
                continue
            entry = {"prefill": a.name, "decode": b.name, "chips": s.chips}
            try:
                if half < 1 or s.chips % 2:
                    raise ValueError(f"disaggregation splits the chips in halves; {s.chips} "
                                     f"chips cannot be")
                dep = Deployment(prefill=_pool(a, model, half, cfg),
                                 decode=_pool(b, model, half, cfg))
                entry.update(max_qps(dep, s, oracles, say))
            except ValueError as exc:
                entry["error"] = str(exc)
            out["disaggregated"].append(entry)
    return out



def render_serving_table(study: dict):
    """A rich Table of :func:`serving_study`'s result (``diptych compare --serving``)."""
    from rich.table import Table

    s = study["settings"]
    t = Table("deployment", "chips", "max QPS at SLO", "QPS per chip", "tokens/s per chip",
              "tokens / J", "TTFT p99", "TPOT p99",
              title=f"{study['model']}: serving under SLOs (p99 TTFT ≤ {s['slo_ttft_s']:g} s, "
                    f"p99 TPOT ≤ {s['slo_tpot_s']:g} s)",
              caption=f"prompts {s['prompt']}, outputs {s['gen']}, {s['duration_s']:g} s of "
                      f"arrivals per load point (≥: every doubling met the SLOs)")

    def row(name, d):
        if d.get("error") or d.get("max_qps") is None:
            t.add_row(name, str(d.get("chips", "-")),
                      f"[red]{d.get('error') or d.get('note')}[/red]", "", "", "", "", "")
            return
        top = "≥ " if d.get("max_qps_is_lower_bound") else ""
        t.add_row(name, str(d["chips"]), f"{top}{d['max_qps']:.3g}",
                  f"{d['max_qps'] / d['chips']:.3g}", f"{d['tokens_per_s_per_chip']:.0f}",
                  f"{d['tokens_per_j']:.3g}", f"{d['ttft_p99_s'] * 1e3:.0f} ms",
                  f"{d['tpot_p99_s'] * 1e3:.1f} ms" if d["tpot_p99_s"] is not None else "-")

    for name, d in deployments(study):
        row(name, d)
    return t


def deployments(study: dict) -> list[tuple[str, dict]]:
    """:func:`serving_study`'s entries with a name each: ``chip (R x tp T)`` colocated,
    ``prefill A + decode B`` disaggregated (as :func:`render_serving_table` names them)."""
    out = [(f"{name} ({d['replicas']} x tp {d['tp']})" if "tp" in d else name, d)
           for name, d in study["colocated"].items()]
    return out + [(f"prefill {d['prefill']} + decode {d['decode']}", d)
                  for d in study["disaggregated"]]
