"""Per-chip physical-design columns of sweep rows: geometry, cost, NoC and D2D figures.

``feasible`` is False (with ``infeasible_reason``) when the die cannot be built as described:
a die over the reticle, or PHYs and SerDes that do not fit on its edges
(:func:`diptych.arch.geometry.check`). Such points are still simulated; filter them with
``diptych pareto ... --where feasible=True``.
"""

from __future__ import annotations

from typing import Any

from ...arch.cost import cost_columns
from ...arch.geometry import geometry_columns
from ...arch.noc import noc_columns
from ...arch.package import d2d_report


def physical_columns(chip) -> dict[str, Any]:
    """Scalar columns for one chip (see the module docstring)."""
    cols = geometry_columns(chip)
    cols.update(cost_columns(chip))
    cols.update(noc_columns(chip))
    rep = d2d_report(chip)
    cols["d2d_dram_cap_bytes_per_s"] = (rep.dram_cap_bytes_per_s if rep.interfaces else None)
    return cols


def cost_summary(chip, run: dict) -> dict[str, Any]:
    """``cost_usd`` (one packaged chip) and ``usd_per_mtok`` of a run dict (None without a
    ``[cost]`` table): the per-chip figures of ``compare --json``."""
    from ...arch.cost import cost_metrics

    m = cost_metrics(chip, run)
    return {"cost_usd": m["cost_usd"], "usd_per_mtok": m["usd_per_mtok"]}


def geometry_warnings(chip) -> list[str]:
    """Every geometry violation of ``chip``, prefixed with its name."""
    from ...arch.geometry import check

    return [f"{chip.name}: {v.message}" for v in check(chip)]


def provenance(command: str | None = None) -> dict[str, str]:
    """What produced a report: diptych's version, the command line and the UTC date."""
    import datetime
    import shlex
    import sys

    from .. import __version__

    cmd = command if command is not None else " ".join(
        ["diptych"] + [shlex.quote(a) for a in sys.argv[1:]])
    return {"diptych_version": __version__, "command": cmd,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%d %H:%M:%S UTC")}
