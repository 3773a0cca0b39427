"""JSON output that is always valid JSON (RFC 8259): no ``NaN`` or ``Infinity`` tokens.

Every ``--json`` output and JSON file diptych writes goes through :func:`dumps`. A non-finite
float means the quantity is absent or undefined (a rate over zero seconds, a ratio to nothing),
so it becomes ``null``; numpy scalars become Python numbers.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None (dicts, lists, tuples walked)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if not isinstance(obj, (str, int, bool, type(None))) and hasattr(obj, "item"):
        try:
            return finite(obj.item())  # numpy scalar
        except (TypeError, ValueError):
            return obj
    return obj


def dumps(obj: Any, *, indent: int | None = 2, **kw) -> str:
    """``json.dumps`` of :func:`finite` ``(obj)`` with ``allow_nan=False``."""
    return json.dumps(finite(obj), indent=indent, allow_nan=False, **kw)
