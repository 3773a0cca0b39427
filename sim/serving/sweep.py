"""Throughput–latency curves: the same request stream at a list of arrival rates.

:func:`qps_sweep` runs :func:`~.serve.serve` at ``points`` evenly spaced rates from ``lo`` to
``hi`` (the same seed, so each point sees the same lengths and the same arrival pattern
scaled in time), sharing the step-time oracles, and reports each point and the highest rate
whose run meets the SLOs (MLPerf's rule: p99 TTFT and p99 TPOT within them; see
:mod:`.metrics`) *and* sustains the load: its goodput within :data:`GOODPUT_TOLERANCE` of
the offered rate. A point that meets the SLOs with less goodput has not shown that it
carries its load (its stream was too short: the fill and the drain dominate, or a queue was
still building), so it is reported, warned about and never named the highest load. When the
top of the sweep is that highest load the limit lies above the sweep: the result says so
(``max_qps_is_lower_bound``; "≥ X (top of the sweep)"). A point meeting the SLOs whose
stream never reached steady state (more than :data:`~.metrics.FILL_LIMIT` of its requests
arrived while the system was filling) is warned about too. :func:`plot_sweep` draws the
curve with matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ...arch.atomic import atomic_write
from ..limits import MAX_SWEEP_POINTS
from .config import ServeConfig
from .metrics import FILL_LIMIT
from .requests import check_rate
from .serve import SETUP_KEYS, Deployment, Load, StepTimerCache, serve

#: Per-point fields of a sweep (and of ``diptych serve --sweep-qps --json``); the energy
#: by component in all and per output token as a run's (sim/energy_parts.py); then
#: ``sustained`` (goodput within :data:`GOODPUT_TOLERANCE` of ``qps``), ``requests``,
#: ``arrival_rps``
#: (the rate the requests were drawn at: requests ÷ last arrival) and ``fill_fraction`` (the
#: share of the requests that arrived while the system filled).
POINT_KEYS = ("qps", "tokens_per_s", "tokens_per_s_per_chip", "goodput_rps",
              "slo_attainment", "meets_slo", "tokens_per_j", "kv_peak_fraction", "preemptions",
              "energy_j", "energy_breakdown_j", "energy_breakdown_j_per_token")

#: How far below its offered load (a fraction of it) a point's goodput may fall and the point
#: still count as meeting the SLOs. A run in steady state loses ~FILL_LIMIT to its drain
#: (:mod:`.metrics`), and up to a couple of percent to requests outside the SLOs that p99
#: allows; the Poisson draw of n requests moves the rate they really arrive at by
#: ~1/sqrt(n) (3 % at the default 1,000: 10 % is three of those).
GOODPUT_TOLERANCE = 0.10


def parse_sweep(text: str) -> tuple[float, float, int]:
    """``LO:HI:N`` → (lo, hi, n): 1 <= n <= :data:`~diptych.sim.limits.MAX_SWEEP_POINTS`
    rates from lo to hi (within :data:`~diptych.sim.limits.QPS_RANGE`, lo <= hi)."""
    parts = str(text).split(":")
    if len(parts) != 3:
        raise ValueError(f"--sweep-qps expects LO:HI:N (e.g. 1:20:10), not {text!r}")
    try:
        lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise ValueError(f"--sweep-qps expects numbers LO:HI:N, not {text!r}") from None
    if not (lo > 0 and hi > 0):
        raise ValueError(f"--sweep-qps rates must be positive, not {text!r}")
    if hi < lo:
        raise ValueError(f"--sweep-qps HI ({hi:g}) must be >= LO ({lo:g})")
    if n < 1 or (n == 1 and hi != lo):
        raise ValueError(f"--sweep-qps N must be a positive integer (1 only when LO == HI), "
                         f"not {parts[2]!r}")
    if n > MAX_SWEEP_POINTS:
        raise ValueError(f"--sweep-qps N must be at most {MAX_SWEEP_POINTS} rates "
                         f"(sim/limits.py; each is a whole run), not {n:,}")
    for name, v in (("LO", lo), ("HI", hi)):
        check_rate(f"--sweep-qps {name}", v)
    return lo, hi, n


def sweep_rates(lo: float, hi: float, n: int) -> list[float]:
    return [lo] if n == 1 else [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def qps_sweep(dep: Deployment, load: Load, lo: float, hi: float, n: int,
              cfg: ServeConfig | None = None, *, oracles: StepTimerCache | None = None,
              progress: Callable[[int, int, float], None] | None = None) -> dict:
    """Run ``load`` (its ``qps`` replaced) at ``n`` rates from ``lo`` to ``hi``; return
    ``{"points": [...], "max_qps_meeting_slo": rate or None, "max_qps_is_lower_bound": bool,
    "goodput_tolerance": GOODPUT_TOLERANCE, "warnings": [str], "info": {setup},
    "results": [ServeResult]}`` (module docstring; ``info``: the runs' setup,
    :data:`~.serve.SETUP_KEYS`)."""
    if load.qps is None:
        raise ValueError("a QPS sweep needs an open-loop load (--qps), not --concurrency or "
                         "--trace")
    oracles = oracles or StepTimerCache()
    rates = sweep_rates(lo, hi, n)
    results = []
    for k, q in enumerate(rates):
        if progress is not None:
            progress(k, n, q)
        results.append(serve(dep, replace(load, qps=q), cfg, oracles=oracles))
    if progress is not None:
        progress(n, n, rates[-1])
    points = []
    for q, r in zip(rates, results):
        d = r.to_dict()
        p = {"qps": q, **{k: d[k] for k in POINT_KEYS[1:]}}
        p["sustained"] = d["goodput_rps"] >= (1.0 - GOODPUT_TOLERANCE) * q
        p["requests"] = d["requests"]
        p["arrival_rps"] = d["info"]["arrival_rps"]
        p["fill_fraction"] = d["info"]["fill_fraction"]
        for m in ("ttft_s", "tpot_s", "e2e_s"):
            p[m] = d[m]
        points.append(p)
    ok = [p["qps"] for p in points if p["meets_slo"] and p["sustained"]]
    best = max(ok) if ok else None
    return {"points": points, "max_qps_meeting_slo": best,
            "max_qps_is_lower_bound": best is not None and best == rates[-1],
            "goodput_tolerance": GOODPUT_TOLERANCE, "warnings": sweep_warnings(points),
            "info": {k: results[0].info[k] for k in SETUP_KEYS}, "results": results}


def _rates(pts: list[dict]) -> str:
    return ", ".join(f"{p['qps']:g}" for p in pts) + " req/s"


def sweep_warnings(points: list[dict]) -> list[str]:
    """What makes a sweep's verdicts doubtful, in words: points meeting the SLOs whose goodput
    falls short of their offered load (not counted; why: the requests drawn arrived slower
    than the rate, or the run is mostly fill and drain), and points meeting them whose
    stream never reached steady state (:mod:`.metrics`)."""
    out = []
    short = [p for p in points if p["meets_slo"] and not p["sustained"]]
    slow = [p for p in short if p["arrival_rps"] < (1.0 - GOODPUT_TOLERANCE) * p["qps"]]
    for group, why in (
            (slow, "the requests drawn ({n}) arrived at only {arr} req/s (n Poisson arrivals "
                   "stray from their rate by ~1/√n: {stray}; send more, or another --seed)"),
            ([p for p in short if p not in slow], "most of the run is filling and draining, "
                                                  "or a queue is still building")):
        if group:
            gp = ", ".join(f"{p['goodput_rps']:.3g}" for p in group)
            arr = ", ".join(f"{p['arrival_rps']:.3g}" for p in group)
            n = ", ".join(f"{p['requests']}" for p in group)
            stray = ", ".join(f"{100 / math.sqrt(p['requests']):.0f} %" for p in group)
            out.append(f"at {_rates(group)} the SLOs are met but goodput ({gp} req/s) is more "
                       f"than {100 * GOODPUT_TOLERANCE:.0f} % below the offered load, so "
                       f"{'it does' if len(group) == 1 else 'they do'} not count as meeting "
                       f"them: " + why.format(arr=arr, n=n, stray=stray))
    filling = [p for p in points if p["meets_slo"] and p["fill_fraction"] > FILL_LIMIT]
    if filling:
        pct = ", ".join(f"{100 * p['fill_fraction']:.0f} %" for p in filling)
        out.append(f"the request stream is too short to reach steady state at "
                   f"{_rates(filling)}: {pct} of the requests arrived while the system was "
                   f"still filling (within one mean end-to-end latency of the first arrival;"
                   f" at most {100 * FILL_LIMIT:.0f} % for steady state); send more requests "
                   f"(--requests or --duration)")
    return out


def max_qps_text(sweep: dict) -> str:
    """The highest load meeting the SLOs in words: ``"12 req/s"``, ``"≥ 30 req/s (top of the
    sweep)"`` when the sweep's top still meets them (the limit is above it), or ``"none of
    the points"``."""
    best = sweep["max_qps_meeting_slo"]
    if best is None:
        return "none of the points"
    if sweep.get("max_qps_is_lower_bound"):
        return f"≥ {best:g} req/s (top of the sweep; raise HI to find the limit)"
    return f"{best:g} req/s"


def plot_sweep(sweep: dict, path: str, title: str, slo: dict) -> None:
    """Throughput and p50/p99 TTFT and TPOT against offered load, SLOs dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = sweep["points"]
    q = [p["qps"] for p in pts]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    ax[0].plot(q, [p["tokens_per_s"] for p in pts], "o-", label="output tokens/s")
    ax[0].set_ylabel("output tokens/s")
    g = ax[0].twinx()
    g.plot(q, [p["goodput_rps"] for p in pts], "s--", color="tab:green",
           label="goodput (req/s meeting SLOs)")
    g.set_ylabel("goodput (requests/s meeting SLOs)")
    # one legend for both axes of the first panel (its two curves overlap at low load)
    lines = ax[0].get_lines() + g.get_lines()
    ax[0].legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="upper left")
    for i, (key, name) in enumerate((("ttft_s", "TTFT"), ("tpot_s", "TPOT")), start=1):
        for pc, st in (("p50", "o-"), ("p99", "^-")):
            ax[i].plot(q, [p[key][pc] for p in pts], st, label=f"{name} {pc}")
        ax[i].axhline(slo[key], color="red", ls="--", lw=1, label=f"SLO {slo[key]:g} s")
        ax[i].set_yscale("log")
        ax[i].set_ylabel(f"{name} (s)")
        ax[i].legend(fontsize=8)
    best = sweep["max_qps_meeting_slo"]
    for a in ax:
        a.set_xlabel("offered load (requests/s)")
        if best is not None:
            a.axvline(best, color="grey", ls=":", lw=1)
    fig.suptitle(title + (f" — highest load meeting the SLOs: {max_qps_text(sweep)}" if best
                          is not None else " — no load meets the SLOs"))
    fig.tight_layout()
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    try:
        atomic_write(path, lambda fh: fig.savefig(fh, dpi=120, format=fmt))
    finally:
        plt.close(fig)
