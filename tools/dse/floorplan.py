"""Floorplans: each die drawn to scale as a square, blocks as rectangles of their modelled area.

The layout is a deterministic slicing floorplan: the blocks (in :data:`AREA_BLOCKS` order) are
split into two groups of nearly equal area, the die is cut across its longer side in that
proportion, and each half is laid out recursively. Every rectangle's area equals its block's
modelled area exactly, and the rectangles tile the die. Where blocks really sit on a die is a
physical-design question this model does not answer; the picture shows where the silicon went.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...arch.area import AREA_BLOCKS, area_breakdown_mm2

#: A fixed colour per block, so that every floorplan and report reads the same way.
BLOCK_COLORS: dict[str, str] = {
    "arrays": "#4c72b0", "sram": "#55a868", "vector": "#8172b2", "dram_phy": "#c44e52",
    "interconnect": "#dd8452", "overhead": "#937860",
}

BLOCK_LABELS: dict[str, str] = {
    "arrays": "MAC arrays", "sram": "SRAM", "vector": "vector units", "dram_phy": "DRAM PHY+ctrl",
    "interconnect": "link SerDes", "overhead": "other",
}


@dataclass(frozen=True)
class Rect:
    """One block of a floorplan; coordinates and sizes in mm, origin at the die's lower left."""

    block: str
    x_mm: float
    y_mm: float
    w_mm: float
    h_mm: float
    area_mm2: float
    share: float

    @property
    def label(self) -> str:
        return f"{BLOCK_LABELS.get(self.block, self.block)}\n{self.area_mm2:.0f} mm² ({self.share:.0%})"


def _split(items: list[tuple[str, float]]) -> int:
    """Index that splits ``items`` into two runs of most nearly equal total area (>= 1)."""
    total = sum(a for _, a in items)
    best, best_i, acc = math.inf, 1, 0.0
    for i in range(1, len(items)):
        acc += items[i - 1][1]
        gap = abs(total - 2 * acc)
        if gap < best:
            best, best_i = gap, i
    return best_i


def _slice(items, x, y, w, h, out):
    if len(items) == 1:
        out.append((items[0][0], x, y, w, h))
        return
    i = _split(items)
    left, right = items[:i], items[i:]
    frac = sum(a for _, a in left) / sum(a for _, a in items)
    if w >= h:  # cut with a vertical line
        _slice(left, x, y, w * frac, h, out)
        _slice(right, x + w * frac, y, w * (1 - frac), h, out)
    else:
        _slice(left, x, y, w, h * frac, out)
        _slice(right, x, y + h * frac, w, h * (1 - frac), out)


def floorplan(chip) -> list[Rect]:
    """The slicing floorplan of ``chip``: one :class:`Rect` per block of non-zero area, tiling a
    square die of side √(die area)."""
    parts = area_breakdown_mm2(chip)
    total = sum(parts.values())
    items = [(b, parts[b]) for b in AREA_BLOCKS if parts.get(b, 0) > 0]
    items += [(b, a) for b, a in parts.items() if b not in AREA_BLOCKS and a > 0]
    side = math.sqrt(total)
    raw: list = []
    _slice(items, 0.0, 0.0, side, side, raw)
    return [Rect(b, x, y, w, h, parts[b], parts[b] / total) for b, x, y, w, h in raw]


def draw_floorplans(chips, *, fig=None):
    """A matplotlib Figure with one axes per chip, side by side, all at the same scale (mm).

    A dashed square outlines the chip's area budget when it states one. Each axes is titled with the chip's name and die area; each block is a Rectangle patch
    whose ``get_label()`` is the block name, labelled with its area and share of the die.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    chips = list(chips)
    if not chips:
        raise ValueError("chips must name at least one chip, not an empty list")
    plans = [floorplan(c) for c in chips]
    sides = [math.sqrt(c.die_area_mm2) for c in chips]
    budgets = [math.sqrt(c.area_budget_mm2) for c in chips if c.area_budget_mm2]
    limit = max(sides + budgets) * 1.02
    n = len(chips)
    if fig is None:
        fig = Figure(figsize=(4.6 * n, 5.2), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, chip, plan, side in zip(axes, chips, plans, sides):
        for r in plan:
            ax.add_patch(Rectangle((r.x_mm, r.y_mm), r.w_mm, r.h_mm, label=r.block,
                                   facecolor=BLOCK_COLORS.get(r.block, "#cccccc"),
                                   edgecolor="white", linewidth=1.5))
            small = min(r.w_mm, r.h_mm) < 0.12 * side
            size = 6 if small else 8
            text = f"{r.area_mm2:.0f} mm²\n{r.share:.0%}" if small else r.label
            if min(r.w_mm, r.h_mm) >= 0.05 * side:
                ax.text(r.x_mm + r.w_mm / 2, r.y_mm + r.h_mm / 2, text, ha="center",
                        va="center", fontsize=size, color="white")
        if chip.area_budget_mm2:
            b = math.sqrt(chip.area_budget_mm2)
            ax.add_patch(Rectangle((0, 0), b, b, fill=False, linestyle="--", edgecolor="black",
                                   linewidth=1.0, label="area budget"))
        ax.set_xlim(0, limit)
        ax.set_ylim(0, limit)
        ax.set_aspect("equal")
        ax.set_xlabel("mm")
        ax.set_ylabel("mm")
        budget = f", budget {chip.area_budget_mm2:.0f}" if chip.area_budget_mm2 else ""
        ax.set_title(f"{chip.name}: {chip.die_area_mm2:.0f} mm²{budget}")
    blocks = [b for b in AREA_BLOCKS if any(r.block == b for p in plans for r in p)]
    fig.legend(handles=[Patch(color=BLOCK_COLORS[b], label=BLOCK_LABELS[b]) for b in blocks],
               loc="outside lower center", ncol=len(blocks), fontsize=8)
    return fig


def save_figure(fig, path) -> None:
    """Save ``fig`` as .svg, .png or .pdf (by suffix); other suffixes are a ValueError."""
    from pathlib import Path

    path = Path(path)
    if path.suffix.lower() not in (".svg", ".png", ".pdf"):
        raise ValueError(f"output file must end in .svg, .png or .pdf, not {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
