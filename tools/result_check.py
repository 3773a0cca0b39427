"""The last check before a result is shown (issue 22 item 2, docs/limits.md): no time, energy,
power or rate that is non-finite or negative reaches the user.

Chips, profiles and loads are bounded when they are loaded, so such a value can only come from
a bug; :func:`check_result` turns it into diptych's one-line internal error (exit 1) naming
the metric, instead of a ``null`` in the JSON or a nonsense table with exit 0.
"""

from __future__ import annotations

import math
from typing import Any

#: A metric is a number whose key (or whose parent's key: ``ttft_s/p99``) names a time,
#: energy, power or rate by its unit suffix.
SUFFIXES = ("_s", "seconds", "_j", "_w", "_per_s", "_per_j", "_per_token", "cycles", "flops")
#: Subtrees that are not results: settings echoed back, bookkeeping, per-op detail.
SKIP = frozenset({"config", "info", "slo", "plan", "layout", "requests", "steps", "timeline",
                  "waterfall", "layers", "schedule", "residency", "pipeline", "warnings",
                  "settings", "memory"})


class ImpossibleResult(RuntimeError):
    """A result with a non-finite or negative time, energy, power or rate (a bug)."""


def _is_metric(key: str) -> bool:
    return key.endswith(SUFFIXES)


def _walk(obj: Any, path: str, metric: bool, bad: list[str]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            k = str(k)
            if k in SKIP:
                continue
            _walk(v, f"{path}/{k}" if path else k, metric or _is_metric(k), bad)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _walk(v, f"{path}[{i}]", metric, bad)
    elif metric and isinstance(obj, float | int) and not isinstance(obj, bool):
        if not math.isfinite(obj) or obj < 0:
            bad.append(f"{path} = {obj!r}")


def check_result(d: dict, what: str) -> dict:
    """``d`` (a result's ``to_dict()``) unchanged, or :class:`ImpossibleResult` naming every
    metric (module docstring) of it that is NaN, infinite or negative. ``what`` names the
    result (``run``, ``serve``...). None (an absent metric) passes."""
    bad: list[str] = []
    _walk(d, "", False, bad)
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise ImpossibleResult(f"{what} produced an impossible result: {shown} (a time, "
                               f"energy, power or rate must be finite and >= 0)")
    return d
