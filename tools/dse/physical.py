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


def source_commit() -> str | None:
    """The git commit diptych's sources were run from (with ``+dirty`` when they differ from
    it), or None outside a git checkout or without git: what tells two reports of the same
    version apart (issue 23 item 8)."""
    import subprocess
    from pathlib import Path

    here = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def provenance(command: str | None = None) -> dict[str, str]:
    """What produced a report: diptych's version, the git commit of its sources (when run from
    a checkout), the command line and the UTC date."""
    import datetime
    import shlex
    import sys

    from .. import __version__

    cmd = command if command is not None else " ".join(
        ["diptych"] + [shlex.quote(a) for a in sys.argv[1:]])
    commit = source_commit()
    return {"diptych_version": __version__, "source_commit": commit or "",
            "made_by": f"diptych {__version__}" + (f" ({commit})" if commit else ""),
            "command": cmd,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%d %H:%M:%S UTC")}
