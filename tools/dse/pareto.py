"""Pareto fronts of sweep results over two metrics.

A point is on the front when no other point is at least as good on both axes and strictly better
on one. Each axis is minimised or maximised; :func:`default_sense` guesses from the name
(areas, times, energies and powers are minimised; throughputs, utilisation and efficiency are
maximised). :func:`pareto_front` is an O(n log n) sort-and-scan; :func:`pareto_front_naive` is the
O(n²) definition it is tested against.
"""

from __future__ import annotations

import math
from typing import Sequence

_MIN_HINTS = ("area", "_s", "seconds", "energy", "power", "latency", "ttft", "tpot", "_w",
              "bytes", "cost", "joule_per", "j_per", "usd")
_MAX_HINTS = ("per_s", "tokens_per", "mfu", "hfu", "throughput", "per_j", "utilization",
              "utilisation", "efficiency", "ops")


def default_sense(metric: str) -> str:
    """"max" or "min" for a metric name (throughput-like names are maximised)."""
    m = metric.lower()
    if any(h in m for h in _MAX_HINTS):
        return "max"
    if any(h in m for h in _MIN_HINTS):
        return "min"
    return "max"


def _key(v: float, sense: str) -> float:
    return v if sense == "min" else -v


def _check(xs, ys, sx, sy):
    if len(xs) != len(ys):
        raise ValueError(f"x and y must have the same length, not {len(xs)} and {len(ys)}")
    for s in (sx, sy):
        if s not in ("min", "max"):
            raise ValueError(f"sense must be 'min' or 'max', not {s!r}")


def pareto_front(xs: Sequence[float], ys: Sequence[float], sense_x: str = "min",
                 sense_y: str = "max") -> list[int]:
    """Indices of the non-dominated points, sorted by x from best to worst.

    NaN/None values are never on the front. Exact duplicates of a front point are all kept.
    """
    _check(xs, ys, sense_x, sense_y)
    idx = [i for i in range(len(xs)) if _finite(xs[i]) and _finite(ys[i])]
    # best x first; among equal x, best y first
    idx.sort(key=lambda i: (_key(xs[i], sense_x), _key(ys[i], sense_y)))
    front: list[int] = []
    best_y = math.inf
    last = None
    for i in idx:
        ky = _key(ys[i], sense_y)
        kx = _key(xs[i], sense_x)
        if ky < best_y:
            front.append(i)
            best_y = ky
            last = (kx, ky)
        elif last is not None and (kx, ky) == last:
            front.append(i)  # an exact duplicate of the previous front point
    return front


def pareto_front_naive(xs, ys, sense_x: str = "min", sense_y: str = "max") -> list[int]:
    """The definition, O(n²): indices of points no other point dominates, sorted like
    :func:`pareto_front`."""
    _check(xs, ys, sense_x, sense_y)
    ok = [i for i in range(len(xs)) if _finite(xs[i]) and _finite(ys[i])]
    out = []
    for i in ok:
        xi, yi = _key(xs[i], sense_x), _key(ys[i], sense_y)
        dominated = any(
            _key(xs[j], sense_x) <= xi and _key(ys[j], sense_y) <= yi
            and (_key(xs[j], sense_x) < xi or _key(ys[j], sense_y) < yi)
            for j in ok)
        if not dominated:
            out.append(i)
    out.sort(key=lambda i: (_key(xs[i], sense_x), _key(ys[i], sense_y)))
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _phase_split(name: str, phases: set[str]) -> tuple[str | None, str]:
    for p in sorted(phases, key=len, reverse=True):
        if name.startswith(p + "_"):
            return p, name[len(p) + 1:]
    return None, name


def parse_where(items: Sequence[str]) -> dict[str, str]:
    """``["batch=8", "model=llama-3-8b"]`` → a dict; a malformed item is a ValueError."""
    out = {}
    for it in items:
        key, sep, val = it.partition("=")
        if not sep or not key:
            raise ValueError(f"--where must be written KEY=VALUE, not {it!r}")
        out[key.strip()] = val.strip()
    return out


def select_xy(rows: list[dict], x: str, y: str, where: dict[str, str] | None = None):
    """Pair metric ``x`` with metric ``y`` over sweep rows.

    A metric is a column name (``area_mm2``, ``tokens_per_s``) or ``<phase>_<column>``
    (``decode_tokens_per_s``), which takes ``column`` from the rows of that phase. When x and y
    come from different phases, rows are matched on the chip and the other workload columns.
    Rows with an ``error`` are left out; ``where`` keeps rows whose column equals the value
    (compared as text). Returns ``(xs, ys, keys)``, keys naming each pair's chip and workload.
    """
    where = where or {}
    if not rows:
        raise ValueError("no rows to plot")
    columns = set().union(*(r.keys() for r in rows))
    for k in where:
        if k not in columns:
            raise ValueError(f"--where {k}: no such column (columns: {', '.join(sorted(columns))})")
    rows = [r for r in rows if not r.get("error")
            and all(str(r.get(k)) == v for k, v in where.items())]
    phases = {r["phase"] for r in rows if r.get("phase")}

    def resolve(name):
        if name in columns:
            return None, name
        phase, col = _phase_split(name, phases)
        if phase is None or col not in columns:
            raise ValueError(f"unknown metric {name!r}: expected a column "
                             f"({', '.join(sorted(columns))}) or <phase>_<column> with phase "
                             f"one of {', '.join(sorted(phases)) or '(none in the results)'}")
        return phase, col

    (px, cx), (py, cy) = resolve(x), resolve(y)
    skip = {"point_id", "phase", "error", "traceback", "eval_s"}
    param_cols = ["chip", "model", "batch", "prompt", "gen", "seq", "tp", "dp",
                  "weights_dtype", "act_dtype", "kv_dtype"]

    def key(r):
        return tuple((c, r.get(c)) for c in param_cols if c in columns and c not in skip)

    if px == py or px is None or py is None:
        phase = px or py
        sel = [r for r in rows if phase is None or r.get("phase") == phase]
        xs = [r.get(cx) for r in sel]
        ys = [r.get(cy) for r in sel]
        keys = [r.get("point_id") for r in sel]
    else:
        by_key = {key(r): r for r in rows if r.get("phase") == py}
        xs, ys, keys = [], [], []
        for r in rows:
            if r.get("phase") != px:
                continue
            other = by_key.get(key(r))
            if other is not None:
                xs.append(r.get(cx))
                ys.append(other.get(cy))
                keys.append(r.get("chip"))
    if not any(_finite(a) and _finite(b) for a, b in zip(xs, ys)):
        raise ValueError(f"no row has numeric values for both {x} and {y}"
                         + (f" with {where}" if where else ""))
    return xs, ys, keys
