"""What a serving run measured: latency distributions, throughput, goodput, energy, KV use.

Definitions (as serving benchmarks such as vLLM's ``benchmark_serving.py`` use them):

* TTFT = first token time − arrival; TPOT = (last token time − first token time) ÷
  (output tokens − 1), over requests with at least two output tokens; e2e = last token time −
  arrival; ITL = every gap between consecutive token emissions of a request (a speculative
  step emits several tokens at once: one gap).
* ``duration_s`` = last completion − first arrival; throughputs divide by it.
* goodput = requests meeting both SLOs (TTFT ≤ ``slo_ttft_s`` and TPOT ≤ ``slo_tpot_s``; a
  one-token request has no TPOT and is judged on TTFT) ÷ duration; ``slo_attainment`` their
  fraction; ``meets_slo`` is MLPerf's rule: p99 TTFT and p99 TPOT within the SLOs.
* energy = every chip's step energy + static power while idle + KV-transfer link energy;
  tokens per joule = output tokens ÷ energy.
* KV occupancy: blocks in use ÷ blocks (peak; mean over the run, time-weighted).
* queue: per step, requests waiting (or swapped out) and running; ``mean_in_system`` is the
  time average of their sum (sampled at step starts, zero while idle).
* steady state (an open-loop run): by Little's law the system holds ``λ·W`` requests at
  steady state (``λ`` the arrival rate, ``W`` the mean end-to-end latency); starting empty,
  it holds about ``λ·t`` after ``t`` seconds until the first requests leave, so it *fills*
  for one ``W`` after the first arrival. ``fill_fraction`` is the share of the requests
  that arrived within that time, while the batch was still filling: about ``λ·W / n``. A run
  with more than :data:`FILL_LIMIT` of them is too short a stream to reach steady state
  (its latencies, and so an SLO verdict, come mostly from a half-empty system, and its
  duration is mostly fill and drain, so its goodput falls short of the offered load).
"""

from __future__ import annotations

import numpy as np

PCTS = (50, 90, 99)
#: Most of a run's requests that may arrive while the system fills (module docstring) for it
#: to count as having reached steady state: then the fill and the drain (one ``W`` each)
#: take about a fifth of the run, and goodput is within ~10 % of the offered load.
FILL_LIMIT = 0.10


def stats(x) -> dict:
    """``{"mean", "p50", "p90", "p99"}`` of ``x`` (None for each when empty)."""
    a = np.asarray(x, dtype=float)
    if a.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p = np.percentile(a, PCTS)
    return {"mean": float(a.mean()), "p50": float(p[0]), "p90": float(p[1]),
            "p99": float(p[2])}


def request_metrics(reqs, slo_ttft_s: float, slo_tpot_s: float) -> dict:
    """Per-request latencies and SLO attainment of completed requests ``reqs``."""
    arr = np.array([r.arrival for r in reqs])
    first = np.array([r.first_t for r in reqs])
    fin = np.array([r.finish_t for r in reqs])
    out = np.array([r.output for r in reqs])
    ttft = first - arr
    e2e = fin - arr
    multi = out > 1
    tpot = np.zeros(len(reqs))
    tpot[multi] = (fin[multi] - first[multi]) / (out[multi] - 1)
    ok = (ttft <= slo_ttft_s) & (~multi | (tpot <= slo_tpot_s))
    return {"ttft": ttft, "tpot": tpot[multi], "e2e": e2e, "ok": ok, "out": out,
            "arrival": arr, "prompt": np.array([r.prompt for r in reqs]),
            "first_arrival": float(arr.min()), "last_finish": float(fin.max())}


def fill_fraction(arrival_s, fill_s: float) -> float:
    """The fraction of requests (arrival times ``arrival_s``, s) that arrived within
    ``fill_s`` seconds (the mean end-to-end latency) of the first: while the system was still
    filling (module docstring)."""
    a = np.asarray(arrival_s, dtype=float)
    if a.size == 0:
        return 0.0
    return float(np.count_nonzero(a < a.min() + fill_s)) / a.size


def queue_series(instances, limit: int = 400) -> dict:
    """Waiting and running requests over time (all instances summed), at most ``limit``
    points (evenly subsampled)."""
    ts = np.concatenate([np.frombuffer(i.rec_t, dtype=float) for i in instances]) \
        if instances else np.zeros(0)
    if ts.size == 0:
        return {"t_s": [], "waiting": [], "running": []}
    w = np.concatenate([np.asarray(i.rec_wait) for i in instances])
    r = np.concatenate([np.asarray(i.rec_run) for i in instances])
    order = np.argsort(ts, kind="stable")
    ts, w, r = ts[order], w[order], r[order]
    if len(instances) > 1:      # a sum over instances: carry each one's last value forward
        idx = np.concatenate([np.full(len(i.rec_t), k) for k, i in enumerate(instances)])[order]
        lastw = np.zeros(len(instances))
        lastr = np.zeros(len(instances))
        sw, sr = np.empty(len(ts)), np.empty(len(ts))
        for j, k in enumerate(idx):
            lastw[k], lastr[k] = w[j], r[j]
            sw[j], sr[j] = lastw.sum(), lastr.sum()
        w, r = sw, sr
    step = max(1, len(ts) // limit)
    return {"t_s": ts[::step].tolist(), "waiting": w[::step].tolist(),
            "running": r[::step].tolist()}


def mean_in_system(instances, duration_s: float) -> float:
    """Time average of requests waiting + running, each instance's state held over its
    step (module docstring)."""
    if duration_s <= 0:
        return 0.0
    tot = 0.0
    for i in instances:
        dt = np.frombuffer(i.rec_dt, dtype=float)
        n = np.asarray(i.rec_wait) + np.asarray(i.rec_run)
        tot += float((dt * n).sum())
    return tot / duration_s
