"""Floorplans: every die to scale, its interfaces on its edges, its cores as tiles.

:func:`floorplan` lays out each die of a chip (:func:`diptych.arch.geometry.dies`: the outline,
and the DRAM PHYs, link SerDes and die-to-die PHYs placed on its edges) as rectangles:

* **edge bands**: every interface is a rectangle on its edge (its shoreline × its area ÷
  shoreline); the rest of each band beside them is peripheral "other" logic (pads, PCIe,
  control) as far as the overhead area goes, whitespace beyond (a derived outline grows by that
  whitespace, see :func:`diptych.arch.geometry.layout_deficit`);
* **interior**: the tensor cores as a grid of equal tiles (each tile its arrays, scratchpad and
  vector unit; spare cores hatched) in two halves around a middle strip that holds the shared
  buffer, the remaining overhead, any interface that found no edge (drawn with a red border:
  the design is infeasible) and whitespace;
* **package**: compute dies side by side, IO dies above them, DRAM stacks' footprints beside
  their PHYs.

Every rectangle's area is its part of a modelled block; the rectangles of a die never overlap
and tile its outline exactly, whitespace included. Placement inside the interior is
schematic (a slicing layout), not physical design; the edges are what the geometry model
checks. :func:`draw_floorplans` draws chips side by side at one scale.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from ...arch.area import AREA_BLOCKS, area_breakdown_mm2, core_area_mm2, die_area_mm2
from ...arch.geometry import DieGeometry, band_depths, dies
from ...arch.tables import EDGES
from .plots import text as literal

#: A fixed colour per block, so that every floorplan and report reads the same way.
BLOCK_COLORS: dict[str, str] = {
    "arrays": "#4c72b0", "sram": "#55a868", "vector": "#8172b2", "dram_phy": "#c44e52",
    "interconnect": "#dd8452", "overhead": "#937860", "d2d": "#da8bc3",
    "spare_cores": "#8c8c8c", "shared_buffer": "#2e7d4f", "whitespace": "#ffffff",
    "hbm_stack": "#e6e6e6",
}

BLOCK_LABELS: dict[str, str] = {
    "arrays": "MAC arrays", "sram": "SRAM", "vector": "vector units", "dram_phy": "DRAM PHY+ctrl",
    "interconnect": "link SerDes", "overhead": "other", "d2d": "die-to-die PHY",
    "spare_cores": "spare cores", "shared_buffer": "shared buffer", "whitespace": "whitespace",
    "hbm_stack": "DRAM stack",
}

#: Rectangle blocks that count toward an area-model block other than their own name.
AREA_BLOCK_OF = {"shared_buffer": "sram"}


@dataclass(frozen=True)
class Rect:
    """One rectangle of a floorplan; mm, origin at the package's lower left.

    ``block`` is an area-model block (:data:`~diptych.arch.area.AREA_BLOCKS`),
    ``shared_buffer`` (part of ``sram``), ``whitespace`` or ``hbm_stack`` (a DRAM stack's
    footprint beside the die, not part of it). ``core`` is the tile index of core parts;
    ``edge`` the die edge of an interface; ``note`` says why a rectangle is special
    (``"no edge"``: an interface that does not fit on the die's edges; ``"unused PHY site"``).
    """

    block: str
    x_mm: float
    y_mm: float
    w_mm: float
    h_mm: float
    die: str = "die"
    core: int | None = None
    edge: str | None = None
    note: str = ""

    @property
    def area_mm2(self) -> float:
        return self.w_mm * self.h_mm


@dataclass(frozen=True)
class DiePlan:
    """One die placed in the package: its geometry, offset and rectangles."""

    geometry: DieGeometry
    x_mm: float
    y_mm: float
    rects: tuple[Rect, ...]

    @property
    def name(self) -> str:
        return self.geometry.name


@dataclass(frozen=True)
class Floorplan:
    """All dies of a chip, placed; ``stacks`` are the DRAM stacks' footprints beside them."""

    chip: str
    dies: tuple[DiePlan, ...]
    stacks: tuple[Rect, ...]
    width_mm: float
    height_mm: float

    @property
    def rects(self) -> list[Rect]:
        return [r for d in self.dies for r in d.rects]

    @property
    def violations(self):
        return [v for d in self.dies for v in d.geometry.violations]

    def block_areas(self) -> dict[str, float]:
        """mm² per area-model block over every die (shared buffer counted as SRAM), plus
        ``whitespace``; equal to the chip's area breakdown."""
        out: dict[str, float] = {}
        for r in self.rects:
            b = AREA_BLOCK_OF.get(r.block, r.block)
            out[b] = out.get(b, 0.0) + r.area_mm2
        return out

    @property
    def area_mm2(self) -> float:
        return sum(d.geometry.width_mm * d.geometry.height_mm for d in self.dies)


# ---- tiling helpers ---------------------------------------------------------------------------


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
    """Slicing layout: ``items`` (key, area) tile the rectangle exactly (areas must sum to
    w × h); the run is split in two of nearly equal area, cut across the longer side."""
    if not items:
        return
    if len(items) == 1:
        out.append((items[0][0], x, y, w, h))
        return
    i = _split(items)
    left, right = items[:i], items[i:]
    frac = sum(a for _, a in left) / sum(a for _, a in items)
    if w >= h:
        _slice(left, x, y, w * frac, h, out)
        _slice(right, x + w * frac, y, w * (1 - frac), h, out)
    else:
        _slice(left, x, y, w, h * frac, out)
        _slice(right, x, y + h * frac, w, h * (1 - frac), out)


def grid_cells(k: int, x: float, y: float, w: float, h: float) -> list[tuple]:
    """``k`` equal-area cells tiling the rectangle exactly: rows of (nearly) equal counts, row
    heights ∝ counts, the row count that makes cells most nearly square. Row-major from the
    bottom."""
    if k <= 0:
        return []
    best, best_rows = math.inf, 1
    for rows in range(1, k + 1):
        cols = math.ceil(k / rows)
        cw, ch = w / cols, h / rows
        score = abs(math.log(cw / ch)) if cw > 0 and ch > 0 else math.inf
        if score < best - 1e-12:
            best, best_rows = score, rows
    counts = [k // best_rows + (1 if i < k % best_rows else 0) for i in range(best_rows)]
    cells, yy = [], y
    for c in counts:
        rh = h * c / k
        for j in range(c):
            cells.append((x + w * j / c, yy, w / c, rh))
        yy += rh
    return cells


# ---- one die ------------------------------------------------------------------------------------


def _slot_rect(s, w: float, h: float) -> tuple[float, float, float, float]:
    if s.edge == "south":
        return s.start_mm, 0.0, s.length_mm, s.depth_mm
    if s.edge == "north":
        return s.start_mm, h - s.depth_mm, s.length_mm, s.depth_mm
    if s.edge == "west":
        return 0.0, s.start_mm, s.depth_mm, s.length_mm
    return w - s.depth_mm, s.start_mm, s.depth_mm, s.length_mm


def _band_fillers(g: DieGeometry, d: dict) -> list[tuple[str, float, float, float, float]]:
    """The parts of the edge bands that no interface occupies: (edge, x, y, w, h). The long
    edges' bands span the whole width, the short edges' bands the height between them."""
    w, h = g.width_mm, g.height_mm
    rects = []
    for e in EDGES:
        depth = d[e]
        if depth <= 0:
            continue
        lo, hi = (0.0, w) if e in ("south", "north") else (d["south"], h - d["north"])
        pieces = []  # (start along the edge, length, offset from the edge, thickness)
        pos = lo
        for s in sorted((s for s in g.slots if s.edge == e), key=lambda s: s.start_mm):
            if s.start_mm > pos + 1e-12:
                pieces.append((pos, s.start_mm - pos, 0.0, depth))
            if s.depth_mm < depth - 1e-12:
                pieces.append((s.start_mm, s.length_mm, s.depth_mm, depth - s.depth_mm))
            pos = s.start_mm + s.length_mm
        if hi > pos + 1e-12:
            pieces.append((pos, hi - pos, 0.0, depth))
        for a, length, off, thick in pieces:
            if e == "south":
                rects.append((e, a, off, length, thick))
            elif e == "north":
                rects.append((e, a, h - off - thick, length, thick))
            elif e == "west":
                rects.append((e, off, a, thick, length))
            else:
                rects.append((e, w - off - thick, a, thick, length))
    return rects


def _layout_die(chip, g: DieGeometry) -> list[Rect]:
    """Rectangles of one die in its own coordinates (see the module docstring)."""
    w, h = g.width_mm, g.height_mm
    b = g.blocks
    d = band_depths(g.slots)
    rects: list[Rect] = []
    phys = [s for s in g.slots if s.kind == "dram_phy"]
    populated = {id(s) for s in phys[:g.stacks]}
    budget = b.get("overhead", 0.0)
    for s in g.slots:
        x, y, sw, sh = _slot_rect(s, w, h)
        if s.kind == "dram_phy" and id(s) not in populated:
            blk = "overhead" if budget >= sw * sh - 1e-9 else "whitespace"
            budget -= sw * sh if blk == "overhead" else 0.0
            rects.append(Rect(blk, x, y, sw, sh, g.name, edge=s.edge, note="unused PHY site"))
            continue
        # a second memory tier's PHY is DRAM PHY area (the dram_phy block holds it)
        rects.append(Rect("dram_phy" if s.kind == "dram2_phy" else s.kind, x, y, sw, sh,
                          g.name, edge=s.edge))
    fillers = _band_fillers(g, d)
    total = sum(fw * fh for _, _, _, fw, fh in fillers)
    frac = 1.0 if total <= budget + 1e-9 else max(0.0, budget) / total
    for e, x, y, fw, fh in fillers:
        if frac >= 1.0:
            rects.append(Rect("overhead", x, y, fw, fh, g.name, edge=e))
            continue
        along_x = fw >= fh
        cut = (fw if along_x else fh) * frac
        if cut > 1e-12:
            rects.append(Rect("overhead", x, y, cut if along_x else fw, fh if along_x else cut,
                              g.name, edge=e))
        rects.append(Rect("whitespace", x + (cut if along_x else 0), y + (0 if along_x else cut),
                          fw - cut if along_x else fw, fh if along_x else fh - cut, g.name,
                          edge=e))
    used_overhead = min(total, max(0.0, budget))
    ovh_left = max(0.0, budget - used_overhead)
    # interior
    x0, y0 = d["west"], d["south"]
    iw, ih = w - d["west"] - d["east"], h - d["south"] - d["north"]
    placed = {k: sum(r.area_mm2 for r in rects if r.block == k and not r.note)
              for k in ("dram_phy", "interconnect", "d2d")}
    unplaced = [(k, b.get(k, 0.0) - placed[k]) for k in placed
                if b.get(k, 0.0) - placed[k] > 1e-6]
    tile = core_area_mm2(chip) if g.cores else 0.0
    n_tiles = g.cores + g.spare_cores
    sb = 0.0
    if chip.shared_buffer is not None and g.kind != "io":
        pkg = getattr(chip, "package", None)
        sb = chip.shared_buffer.capacity_mib * chip.area.mm2_per_mib_sram / (
            pkg.compute_dies if pkg is not None else 1)
    strip_items = [("shared_buffer", sb), ("overhead", ovh_left)] + unplaced
    strip_items = [(k, a) for k, a in strip_items if a > 1e-9]
    content = n_tiles * tile + sum(a for _, a in strip_items)
    interior = iw * ih
    scale = 1.0
    if content > interior * (1 + 1e-9):  # a stated outline too small: drawn scaled, flagged
        scale = interior / content
    else:
        strip_items.append(("whitespace", interior - content))
    strip_items = [(k, a * (scale if k != "whitespace" else 1.0)) for k, a in strip_items
                   if a > 1e-9]
    tile *= scale
    strip_area = sum(a for _, a in strip_items)
    cells: list[tuple] = []
    if n_tiles == 0:
        strip = (x0, y0, iw, ih)
    elif n_tiles == 1 or iw <= 0 or ih <= 0:
        sw = iw * strip_area / interior if interior > 0 else 0.0
        cells = [(x0, y0, iw - sw, ih)]
        strip = (x0 + iw - sw, y0, sw, ih)
    else:
        n_bot = n_tiles // 2
        n_top = n_tiles - n_bot
        hb = n_bot * tile / iw
        hs = strip_area / iw
        cells = (grid_cells(n_bot, x0, y0, iw, hb)
                 + grid_cells(n_top, x0, y0 + hb + hs, iw, ih - hb - hs))
        strip = (x0, y0 + hb, iw, hs)
    out: list = []
    _slice(strip_items, *strip, out)
    for k, x, y, sw_, sh_ in out:
        note = "no edge" if k in placed else ""
        rects.append(Rect(k, x, y, sw_, sh_, g.name, note=note))
    a_core = chip.core.arrays * chip.core.array.pes * _pe(chip) * scale
    s_core = ((chip.core.scratchpad.capacity_mib + chip.core.scratchpad.accumulator_mib)
              * chip.area.mm2_per_mib_sram * scale)
    for i, (x, y, cw, ch) in enumerate(cells):
        if i >= g.cores:
            rects.append(Rect("spare_cores", x, y, cw, ch, g.name, core=i))
            continue
        rects.extend(_tile(chip, g.name, i, x, y, cw, ch, a_core, s_core))
    return rects


def _pe(chip) -> float:
    from ...arch.area import pe_area_mm2
    return pe_area_mm2(chip)


def _tile(chip, die: str, i: int, x, y, w, h, a_core, s_core) -> list[Rect]:
    """One core tile: its arrays (a grid), then scratchpad and vector unit."""
    total = w * h
    out = []
    fa = a_core / total
    if w >= h:
        aw = w * fa
        arr = (x, y, aw, h)
        rest = (x + aw, y, w - aw, h)
    else:
        ah = h * fa
        arr = (x, y, w, ah)
        rest = (x, y + ah, w, h - ah)
    for (ax, ay, aw_, ah_) in grid_cells(chip.core.arrays, *arr):
        out.append(Rect("arrays", ax, ay, aw_, ah_, die, core=i))
    rx, ry, rw, rh = rest
    other = rw * rh
    fs = s_core / other if other > 0 else 0.0
    if rw >= rh:
        out.append(Rect("sram", rx, ry, rw * fs, rh, die, core=i))
        out.append(Rect("vector", rx + rw * fs, ry, rw * (1 - fs), rh, die, core=i))
    else:
        out.append(Rect("sram", rx, ry, rw, rh * fs, die, core=i))
        out.append(Rect("vector", rx, ry + rh * fs, rw, rh * (1 - fs), die, core=i))
    return [r for r in out if r.area_mm2 > 1e-12]


# ---- the package --------------------------------------------------------------------------------

GAP_MM = 1.0        # drawn gap between dies
STACK_GAP_MM = 0.5  # drawn gap between a PHY's edge and its stack


def _shift(r: Rect, dx: float, dy: float) -> Rect:
    return Rect(r.block, r.x_mm + dx, r.y_mm + dy, r.w_mm, r.h_mm, r.die, r.core, r.edge, r.note)


def _stacks(chip, g: DieGeometry, dx: float, dy: float) -> list[Rect]:
    """Footprints of the DRAM stacks beside their PHY sites. Where the PHYs are closer than a
    stack is wide, the stacks of that edge are spread (they overhang the die's ends, as on
    real interposers)."""
    if chip.dram is None or not chip.dram.kind.startswith("hbm"):
        return []
    cost = getattr(chip, "cost", None)
    side = math.sqrt(cost.hbm_footprint_mm2 if cost is not None else 121.0)
    out = []
    w, h = g.width_mm, g.height_mm
    phys = [s for s in g.slots if s.kind == "dram_phy"]
    for e in EDGES:
        on = [(i, s) for i, s in enumerate(phys) if s.edge == e]
        if not on:
            continue
        mids = [s.start_mm + s.length_mm / 2 for _, s in on]
        pitch = side + STACK_GAP_MM
        if len(mids) > 1 and min(b - a for a, b in zip(mids, mids[1:])) < pitch:
            centre = sum(mids) / len(mids)
            mids = [centre + (j - (len(mids) - 1) / 2) * pitch for j in range(len(mids))]
        for (i, s), mid in zip(on, mids):
            if e == "south":
                x, y = mid - side / 2, -STACK_GAP_MM - side
            elif e == "north":
                x, y = mid - side / 2, h + STACK_GAP_MM
            elif e == "west":
                x, y = -STACK_GAP_MM - side, mid - side / 2
            else:
                x, y = w + STACK_GAP_MM, mid - side / 2
            note = "" if i < g.stacks else "unused PHY site"
            out.append(Rect("hbm_stack", x + dx, y + dy, side, side, g.name, edge=e, note=note))
    return out


def floorplan(chip) -> Floorplan:
    """The floorplan of ``chip``: every die laid out and placed (see the module docstring)."""
    if not die_area_mm2(chip) > 0:
        raise ValueError(f"chip {chip.name!r}: the modelled die area is 0 mm² (every area "
                         "coefficient is 0): there is no floorplan to draw")
    geos = dies(chip)
    compute = [g for g in geos if g.kind != "io"]
    io = [g for g in geos if g.kind == "io"]
    placed: list[tuple[DieGeometry, float, float]] = []
    x = 0.0
    for g in compute:
        placed.append((g, x, 0.0))
        x += g.width_mm + GAP_MM
    row_w = x - GAP_MM
    if io:
        top = max(g.height_mm for g in compute) + GAP_MM
        io_w = sum(g.width_mm for g in io) + GAP_MM * (len(io) - 1)
        x = (row_w - io_w) / 2
        for g in io:
            placed.append((g, x, top))
            x += g.width_mm + GAP_MM
    plans, stacks = [], []
    for g, dx, dy in placed:
        rects = tuple(_shift(r, dx, dy) for r in _layout_die(chip, g))
        plans.append(DiePlan(g, dx, dy, rects))
        stacks.extend(_stacks(chip, g, dx, dy))
    xs = [p.x_mm for p in plans] + [s.x_mm for s in stacks]
    ys = [p.y_mm for p in plans] + [s.y_mm for s in stacks]
    x1 = [p.x_mm + p.geometry.width_mm for p in plans] + [s.x_mm + s.w_mm for s in stacks]
    y1 = [p.y_mm + p.geometry.height_mm for p in plans] + [s.y_mm + s.h_mm for s in stacks]
    ox, oy = min(xs), min(ys)
    plans = [DiePlan(p.geometry, p.x_mm - ox, p.y_mm - oy,
                     tuple(_shift(r, -ox, -oy) for r in p.rects)) for p in plans]
    stacks = [_shift(s, -ox, -oy) for s in stacks]
    return Floorplan(chip.name, tuple(plans), tuple(stacks), max(x1) - ox, max(y1) - oy)


def summary_lines(chip, plan: Floorplan | None = None) -> list[str]:
    """One line per block (mm², share) of the whole chip, largest first."""
    parts = area_breakdown_mm2(chip)
    total = sum(parts.values())
    return [f"{BLOCK_LABELS.get(k, k)} {v:.0f} mm² ({v / total:.0%})"
            for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v > 0]


def describe(chip, plan: Floorplan | None = None) -> str:
    """A one-paragraph text summary of a chip's floorplan (for the CLI)."""
    plan = plan or floorplan(chip)
    ds = plan.dies
    shapes = ", ".join(f"{d.name} {d.geometry.width_mm:.1f} × {d.geometry.height_mm:.1f} mm"
                       for d in ds)
    ws = sum(d.geometry.whitespace_mm2 for d in ds)
    extra = f" + {ws:.0f} mm² whitespace" if ws > 0.5 else ""
    return (f"{chip.name}: {die_area_mm2(chip):.0f} mm²{extra} ({shapes}): "
            + ", ".join(summary_lines(chip, plan)))


# ---- drawing ------------------------------------------------------------------------------------


def draw_floorplans(chips, *, fig=None):
    """A matplotlib Figure with one axes per chip, side by side, all at the same scale (mm).

    Each rectangle is a patch whose ``get_label()`` is its block; each die's outline is an
    unfilled patch labelled ``die:<name>``; DRAM stacks are dashed outlines. The title gives
    the chip's area, outline and cost; a text box lists every block's mm² and share; every
    geometry violation is printed in red under the die.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    from ...arch.cost import chip_cost

    chips = list(chips)
    if not chips:
        raise ValueError("chips must name at least one chip, not an empty list")
    plans = [floorplan(c) for c in chips]
    limit = max(max(p.width_mm, p.height_mm) for p in plans) * 1.04
    for c in chips:
        if c.area_budget_mm2:
            limit = max(limit, math.sqrt(c.area_budget_mm2) * 1.04)
    n = len(chips)
    if fig is None:
        fig = Figure(figsize=(5.6 * n, 7.6), layout="constrained")
    grid = fig.subplots(2, n, squeeze=False, gridspec_kw={"height_ratios": [4.2, 1.3]})
    axes, notes_axes = grid[0], grid[1]
    used: set[str] = set()
    for ax, nax, chip, plan in zip(axes, notes_axes, chips, plans):
        pad_x = (limit - plan.width_mm) / 2
        pad_y = (limit - plan.height_mm) / 2
        for s in plan.stacks:
            ax.add_patch(Rectangle((s.x_mm + pad_x, s.y_mm + pad_y), s.w_mm, s.h_mm,
                                   label="hbm_stack", facecolor=BLOCK_COLORS["hbm_stack"],
                                   edgecolor="#777777", linestyle="--", linewidth=0.8))
            if min(s.w_mm, s.h_mm) > 0.06 * limit:
                ax.text(s.x_mm + pad_x + s.w_mm / 2, s.y_mm + pad_y + s.h_mm / 2,
                        "unused" if s.note else chip.dram.kind.upper(), ha="center",
                        va="center", fontsize=6, color="#555555")
            used.add("hbm_stack")
        for d in plan.dies:
            for r in d.rects:
                fine = r.core is not None
                ax.add_patch(Rectangle(
                    (r.x_mm + pad_x, r.y_mm + pad_y), r.w_mm, r.h_mm, label=r.block,
                    facecolor=BLOCK_COLORS.get(r.block, "#cccccc"),
                    edgecolor=("red" if r.note == "no edge" else
                               "#bbbbbb" if r.block == "whitespace" else "white"),
                    linewidth=1.2 if r.note == "no edge" else (0.25 if fine else 0.6),
                    hatch="///" if r.block in ("spare_cores", "whitespace") else None))
                used.add(r.block)
            g = d.geometry
            ax.add_patch(Rectangle((d.x_mm + pad_x, d.y_mm + pad_y), g.width_mm, g.height_mm,
                                   fill=False, edgecolor="red" if g.violations else "black",
                                   linewidth=1.4, label=f"die:{g.name}"))
            _label_tiles(ax, d, pad_x, pad_y, limit)
            if len(plan.dies) > 1:
                ax.text(d.x_mm + pad_x + 0.4, d.y_mm + pad_y + g.height_mm - 0.4,
                        f"{g.name}: {g.width_mm:.1f} × {g.height_mm:.1f} mm", ha="left",
                        va="top", fontsize=6.5,
                        bbox={"facecolor": "white", "alpha": 0.8, "pad": 1, "linewidth": 0})
        if chip.area_budget_mm2 and len(plan.dies) == 1:
            g = plan.dies[0].geometry
            r = math.sqrt(chip.area_budget_mm2 / (g.width_mm * g.height_mm))
            d0 = plan.dies[0]
            ax.add_patch(Rectangle((d0.x_mm + pad_x, d0.y_mm + pad_y), g.width_mm * r,
                                   g.height_mm * r, fill=False, linestyle="--",
                                   edgecolor="black", linewidth=1.0, label="area budget"))
        ax.set_xlim(0, limit)
        ax.set_ylim(0, limit)
        ax.set_aspect("equal")
        ax.set_xlabel("mm")
        ax.set_ylabel("mm")
        ax.set_title(_title(chip, plan, chip_cost(chip)), fontsize=9)
        nax.set_axis_off()
        nax.text(0.0, 1.0, "\n".join(summary_lines(chip, plan)), transform=nax.transAxes,
                 va="top", ha="left", fontsize=7, family="monospace")
        bad = [textwrap.fill("✗ " + v.message, 62) for v in plan.violations]
        if bad:
            nax.text(0.42, 1.0, "\n".join(bad), transform=nax.transAxes, va="top", ha="left",
                     fontsize=6.5, color="#b00000")
    order = [b for b in AREA_BLOCKS if b in used] + [b for b in BLOCK_COLORS
                                                     if b in used and b not in AREA_BLOCKS]
    fig.legend(handles=[Patch(facecolor=BLOCK_COLORS[b], edgecolor="#777777",
                              label=BLOCK_LABELS[b]) for b in order],
               loc="outside upper center", ncol=min(len(order), 6), fontsize=8)
    return fig


def _title(chip, plan: Floorplan, cost) -> str:
    ds = plan.dies
    if len(ds) == 1:
        g = ds[0].geometry
        shape = f"{g.width_mm:.1f} × {g.height_mm:.1f} mm"
    else:
        shape = f"{len(ds)} dies"
    ws = sum(d.geometry.whitespace_mm2 for d in ds)
    extra = f" + {ws:.0f} whitespace" if ws > 0.5 else ""
    budget = f", budget {chip.area_budget_mm2:.0f}" if chip.area_budget_mm2 else ""
    line = f"{literal(chip.name)}: {die_area_mm2(chip):.0f} mm²{extra} ({shape}){budget}"
    if cost is not None:  # "\$": a literal dollar, not matplotlib mathtext
        # the dies' share as the text prints it (after the assembly yield), each die's yield
        # named (issue 23 item 8: the title said $425 where the text said $434)
        line += (f"\n\\${cost.total_usd:,.0f} per chip (dies "
                 f"\\${cost.breakdown()['dies']:,.0f}; die yield "
                 + ", ".join(f"{literal(d.name)} {d.yield_:.0%}" for d in cost.dies[:3]) + ")")
    if plan.violations:
        line += "\nINFEASIBLE: see below"
    return line


def _label_tiles(ax, d: DiePlan, pad_x: float, pad_y: float, limit: float) -> None:
    """Name the cores on tiles large enough to read, and the interfaces on the edges."""
    tiles: dict[int, list] = {}
    for r in d.rects:
        if r.core is not None:
            tiles.setdefault(r.core, []).append(r)
    for i, rs in tiles.items():
        x0 = min(r.x_mm for r in rs)
        y0 = min(r.y_mm for r in rs)
        x1 = max(r.x_mm + r.w_mm for r in rs)
        y1 = max(r.y_mm + r.h_mm for r in rs)
        if min(x1 - x0, y1 - y0) >= 0.07 * limit:
            spare = rs[0].block == "spare_cores"
            ax.text(x0 + pad_x + (x1 - x0) / 2, y0 + pad_y + (y1 - y0) / 2,
                    "spare" if spare else f"core {i}", ha="center", va="center", fontsize=6,
                    color="white")
    for r in d.rects:
        if r.block == "shared_buffer" and r.w_mm >= 0.15 * limit and r.h_mm >= 0.025 * limit:
            ax.text(r.x_mm + pad_x + r.w_mm / 2, r.y_mm + pad_y + r.h_mm / 2,
                    f"shared buffer {r.area_mm2:.0f} mm²", ha="center", va="center",
                    fontsize=6, color="white")
        if r.note == "no edge" and r.w_mm >= 0.15 * limit and r.h_mm >= 0.02 * limit:
            ax.text(r.x_mm + pad_x + r.w_mm / 2, r.y_mm + pad_y + r.h_mm / 2,
                    f"{BLOCK_LABELS[r.block]}: no edge", ha="center", va="center",
                    fontsize=6, color="white")


def save_figure(fig, path) -> None:
    """Save ``fig`` as .svg, .png or .pdf (by suffix); other suffixes are a ValueError."""
    from pathlib import Path

    path = Path(path)
    if path.suffix.lower() not in (".svg", ".png", ".pdf"):
        raise ValueError(f"output file must end in .svg, .png or .pdf, not {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    from ...arch.atomic import atomic_write
    fmt = path.suffix.lower()[1:]
    atomic_write(path, lambda fh: fig.savefig(fh, dpi=150, format=fmt))
