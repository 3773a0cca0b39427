"""Die geometry: outlines, the reticle, and the die edges ("beachfront") that I/O must sit on.

A die is a rectangle ``width_mm`` × ``height_mm`` (stated in the chip's ``[die]`` table, or
derived from its modelled area within ``max_aspect_ratio``). Its four edges are named by the
compass: ``south`` and ``north`` are the long edges (length = the long side), ``west`` and
``east`` the short ones. Interfaces that must sit on an edge each take a length of it:

* an HBM PHY takes ``mm_edge_per_hbm_phy`` of one of the ``hbm_edges`` longest free edges
  (the stack beside it on the interposer is about as wide as the PHY's shoreline);
* a chip-to-chip link SerDes takes ``mm_edge_per_link``, on any edge;
* a die-to-die (D2D) interface of a chiplet package takes its bandwidth ÷ the D2D shoreline
  density (:mod:`diptych.arch.package`) on the edge that faces its neighbour.

``corner_keepout_mm`` at both ends of every edge stays free. :func:`check` returns every
violation (reticle exceeded, PHYs or SerDes that do not fit on the edges), each with a message
that says by how much; a design with violations cannot be built as described, but it is still
a valid description: sweeps record it as infeasible rather than failing (``feasible = false``).

Inputs that cannot describe any die (a non-positive dimension, width without height, a stated
outline smaller than the modelled blocks) are rejected when the chip is loaded
(:func:`validate_chip`).

Defaults (used when a chip has no ``[die]`` table) and their sources:

* reticle 26 × 33 mm = 858 mm² [P: the exposure field of ASML DUV/EUV scanners; e.g. the
  GA100/GH100 press coverage: "reticle limit ... 26 x 33 mm, 858 mm²"];
* ``mm_edge_per_hbm_phy`` = 10 mm [D]: H100 (814 mm²) hosts 6 HBM3 sites, 3 on each long
  edge of a die no longer than the 33 mm reticle, so ≤ (33 − 2 × 0.5) / 3 = 10.7 mm per site;
  an HBM3 stack is an 11 × 11 mm package (JEDEC) that may overhang the die's corners;
  LLMCompass (ISCA'24 Table II) puts the 1024-bit PHY at 10.45 mm², i.e. ~1 mm deep;
* ``hbm_edges`` = 2: every HBM accelerator with public package photos (A100, H100, B200,
  MI250X, TPU v4/v5p, Gaudi 3) places stacks on two opposite edges of each compute die;
* ``mm_edge_per_link`` = 1.2 mm [assumption]: a link here is an NVLink4-class 2-lane ×
  100 Gb/s port per direction; 112G PAM4 quad macros are ~2-3 mm of shoreline (IP vendor
  briefs), i.e. ~0.6 mm per lane;
* ``max_aspect_ratio`` = 2 [assumption]: physical designers avoid slimmer dies (clock and
  power grids, package stress); the reticle itself is 1.27;
* ``corner_keepout_mm`` = 0.5 mm [assumption].
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .schema import fail
from .tables import DEFAULT_DIE, EDGES, LONG_EDGES, DieSpec

if TYPE_CHECKING:  # pragma: no cover
    from .chip import Chip


def die_spec(chip: "Chip") -> DieSpec:
    """The chip's ``[die]`` table, or the defaults of :class:`DieSpec`."""
    return getattr(chip, "die", None) or DEFAULT_DIE



# ---- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """One reason a design cannot be built as described; ``excess`` is by how much (``unit``)."""

    kind: str          # "reticle", "hbm_edge", "tier_edge", "link_edge", "d2d_edge"
    die: str
    message: str
    excess: float
    unit: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class EdgeSlot:
    """One interface on a die edge: ``start_mm`` along the edge (from its west/south end),
    ``length_mm`` of shoreline, ``depth_mm`` into the die (its area ÷ its length)."""

    kind: str          # "dram_phy", "dram2_phy" (a second memory tier's), "interconnect", "d2d"
    index: int
    edge: str
    start_mm: float
    length_mm: float
    depth_mm: float


@dataclass(frozen=True)
class DieGeometry:
    """A die's outline, the interfaces on its edges and what does not fit.

    ``width_mm`` ≥ ``height_mm`` (long side along x). ``demand_mm`` and ``usable_mm`` are the
    die's total edge demand and its usable perimeter (edges minus corner keep-outs).
    """

    name: str
    kind: str                       # "monolithic", "compute", "io"
    width_mm: float
    height_mm: float
    area_mm2: float                 # modelled blocks of this die
    blocks: dict[str, float]
    slots: tuple[EdgeSlot, ...]
    violations: tuple[Violation, ...]
    demand_mm: float
    usable_mm: float
    stated: bool = False
    cores: int = 0                  # enabled tensor cores on this die
    spare_cores: int = 0
    hbm_phys: int = 0               # PHY sites on the edges
    stacks: int = 0                 # of which populated
    tier_phys: int = 0              # PHYs of a second memory tier ([dram2] packages)
    links: int = 0
    d2d: dict[str, float] = field(default_factory=dict)   # edge -> shoreline mm

    @property
    def outline_mm2(self) -> float:
        return self.width_mm * self.height_mm

    @property
    def whitespace_mm2(self) -> float:
        """Outline area the modelled blocks do not fill: a stated outline larger than them, or
        what a derived outline grew by for the interface bands (:func:`layout_deficit`)."""
        return max(0.0, self.outline_mm2 - self.area_mm2)

    def edge_length(self, edge: str) -> float:
        return self.width_mm if edge in LONG_EDGES else self.height_mm


# ---- edge assignment ------------------------------------------------------------------------


def edge_length(w: float, h: float, edge: str) -> float:
    return w if edge in LONG_EDGES else h


def assign_edges(w: float, h: float, spec: DieSpec, *, hbm_phys: int, links: int,
                 d2d: dict[str, float], phy_depth_mm: float = 0.0, link_depth_mm: float = 0.0,
                 d2d_depth_mm: float = 0.0, blocked: tuple[str, ...] = (), tier_phys: int = 0,
                 tier_mm: float = 0.0, tier_depth_mm: float = 0.0
                 ) -> tuple[list[EdgeSlot], dict[str, float]]:
    """Place interfaces on the edges of a ``w`` × ``h`` die (w ≥ h).

    D2D interfaces take their stated edges; HBM PHYs go, one at a time, to the eligible edge
    (the ``hbm_edges`` longest edges without a D2D interface) with the most free length; a
    second memory tier's ``tier_phys`` PHYs (``tier_mm`` of edge each) then go, one at a time,
    to the open edge with the most free length; links go to the edge with the most free
    length, edges without HBM PHYs first. Returns the slots and the shortfalls ``{"hbm": PHYs
    not placed, "tier": tier PHYs not placed, "tier_mm": their edge, "links": links not
    placed, "d2d": mm missing}``. ``blocked`` edges (facing a neighbouring die) take no PHYs
    and no links.
    Slots on an edge are spread evenly over its usable length (links split around PHYs, D2D
    in the middle), so they never overlap and never enter the corners: the long edges own the
    corners (``corner_keepout_mm`` at each end); a short edge also leaves the deepest interface
    band of the long edges free at each end (:func:`usable_lengths`).
    """
    depths = [phy_depth_mm if hbm_phys else 0.0, link_depth_mm if links else 0.0,
              d2d_depth_mm if any(d2d.values()) else 0.0,
              tier_depth_mm if tier_phys else 0.0]
    usable = usable_lengths(w, h, spec, depths)
    free = dict(usable)
    items: dict[str, list[tuple[str, float, float]]] = {e: [] for e in EDGES}
    short = {"hbm": 0, "tier": 0, "tier_mm": 0.0, "links": 0, "d2d": 0.0}
    for e, mm in d2d.items():
        if mm <= 0:
            continue
        take = min(mm, free[e])  # what does not fit is short (and drawn inside the die)
        short["d2d"] += mm - take
        if take > 0:
            items[e].append(("d2d", take, d2d_depth_mm))
        free[e] -= take
    eligible = [e for e in EDGES if not d2d.get(e) and e not in blocked]
    eligible.sort(key=lambda e: -edge_length(w, h, e))  # stable: south, north first on ties
    eligible = eligible[:spec.hbm_edges]
    # HBM PHYs on the eligible edges, then the second tier's on any open edge: one at a time,
    # each to the edge with the most free length
    for key, kind, n, length, depth, edges in (
            ("hbm", "dram_phy", hbm_phys, spec.mm_edge_per_hbm_phy, phy_depth_mm, eligible),
            ("tier", "dram2_phy", tier_phys, tier_mm, tier_depth_mm,
             [e for e in EDGES if e not in blocked])):
        for _ in range(n):
            best = max(edges, key=lambda e: free[e], default=None)
            if best is None or free[best] < length - 1e-9:
                short[key] += 1
                continue
            items[best].append((kind, length, depth))
            free[best] -= length
    short["tier_mm"] = short["tier"] * tier_mm
    sl = spec.mm_edge_per_link
    if links and sl > 0:
        hbm_edges = {e for e in EDGES if any(i[0] == "dram_phy" for i in items[e])}
        open_ = [e for e in EDGES if e not in blocked]
        for _ in range(links):
            best = max(open_, key=lambda e: (free[e] >= sl - 1e-9, e not in hbm_edges, free[e]),
                       default=None)
            if best is None or free[best] < sl - 1e-9:
                short["links"] += 1
                continue
            items[best].append(("interconnect", sl, link_depth_mm))
            free[best] -= sl
    slots: list[EdgeSlot] = []
    counters = {"dram_phy": 0, "dram2_phy": 0, "interconnect": 0, "d2d": 0}
    for e in EDGES:
        its = _order(items[e])
        total = sum(i[1] for i in its)
        gap = max(0.0, usable[e] - total) / (len(its) + 1) if its else 0.0
        pos = _corner(spec, e, depths) + gap
        for kind, length, depth in its:
            slots.append(EdgeSlot(kind, counters[kind], e, pos, length, depth))
            counters[kind] += 1
            pos += length + gap
    return slots, short


def edge_shortfall(w: float, h: float, spec: DieSpec, *, hbm_phys: int, links: int,
                   d2d: dict[str, float], phy_depth_mm: float = 0.0, link_depth_mm: float = 0.0,
                   d2d_depth_mm: float = 0.0, blocked: tuple[str, ...] = (), tier_phys: int = 0,
                   tier_mm: float = 0.0, tier_depth_mm: float = 0.0) -> dict:
    """The shortfalls of :func:`assign_edges` (``{"hbm", "tier", "tier_mm", "links", "d2d"}``,
    the same numbers:
    the same greedy placement, in the same order and arithmetic) without building the slots:
    what :func:`choose_outline`'s search over outlines needs, several times faster.
    ``tests/arch/test_geometry_speed.py`` compares the two on random dies."""
    depths = [phy_depth_mm if hbm_phys else 0.0, link_depth_mm if links else 0.0,
              d2d_depth_mm if any(d2d.values()) else 0.0,
              tier_depth_mm if tier_phys else 0.0]
    usable = usable_lengths(w, h, spec, depths)
    free = dict(usable)
    short_d2d = 0.0
    for e, mm in d2d.items():
        if mm <= 0:
            continue
        take = min(mm, free[e])
        short_d2d += mm - take
        free[e] -= take
    eligible = [e for e in EDGES if not d2d.get(e) and e not in blocked]
    if w < h:  # (with w >= h, EDGES is already longest first: the stable sort keeps it)
        eligible.sort(key=lambda e: -edge_length(w, h, e))  # as assign_edges
    eligible = eligible[:spec.hbm_edges]
    hbm_edges: set = set()
    short_hbm = _take(eligible, free, hbm_phys, spec.mm_edge_per_hbm_phy, hbm_edges)
    short_tier = _take([e for e in EDGES if e not in blocked], free, tier_phys, tier_mm, set())
    short_links = 0
    sl = spec.mm_edge_per_link
    if links and sl > 0:
        open_ = [(e, e not in hbm_edges) for e in EDGES if e not in blocked]
        for _ in range(links):
            # max() of (fits, no PHYs, free length): the first of equal ones
            best, b_fit, b_nophy, b_free = None, False, False, 0.0
            for e, nophy in open_:
                fe = free[e]
                fit = fe >= sl - 1e-9
                if best is None or fit > b_fit or (fit == b_fit and (
                        nophy > b_nophy or (nophy == b_nophy and fe > b_free))):
                    best, b_fit, b_nophy, b_free = e, fit, nophy, fe
            if best is None or free[best] < sl - 1e-9:
                short_links += 1
                continue
            free[best] -= sl
    return {"hbm": short_hbm, "tier": short_tier, "tier_mm": short_tier * tier_mm,
            "links": short_links, "d2d": short_d2d}


def shortfall_scan(spec: DieSpec, *, hbm_phys: int, links: int, d2d: dict[str, float],
                   phy_depth_mm: float = 0.0, link_depth_mm: float = 0.0,
                   d2d_depth_mm: float = 0.0, blocked: tuple[str, ...] = (),
                   tier_phys: int = 0, tier_mm: float = 0.0, tier_depth_mm: float = 0.0):
    """``miss(w, h)``: ``_shortfall_mm(edge_shortfall(w, h, spec, ...), spec)`` for one die's
    interfaces, what :func:`_outline`'s scan over aspect ratios asks at every ratio (issue
    27: ~400 k calls for a 500-chip sweep). Everything that does not depend on the outline
    (the corner, the D2D takes, the eligible edges, the links' edge order) is worked out once;
    edges are list indices instead of dict keys; a placement loop stops at the first
    interface that finds no edge (nothing changes after it, so every later one is short
    too). The same greedy placement in the same order and float arithmetic, so the same
    number: ``tests/arch/test_geometry_speed.py`` compares it with :func:`edge_shortfall`."""
    k = spec.corner_keepout_mm
    corner = max([k, phy_depth_mm if hbm_phys else 0.0, link_depth_mm if links else 0.0,
                  d2d_depth_mm if any(d2d.values()) else 0.0,
                  tier_depth_mm if tier_phys else 0.0])
    idx = {e: i for i, e in enumerate(EDGES)}
    is_long = [e in LONG_EDGES for e in EDGES]
    takes = [(idx[e], mm) for e, mm in d2d.items() if not mm <= 0]
    eligible = [idx[e] for e in EDGES if not d2d.get(e) and e not in blocked]
    hbm_edges_n = spec.hbm_edges
    long_first = eligible[:hbm_edges_n]          # w >= h: EDGES is already longest first
    open_edges = [idx[e] for e in EDGES if e not in blocked]
    per_phy, per_link = spec.mm_edge_per_hbm_phy, spec.mm_edge_per_link
    sl = per_link
    place_links = bool(links and sl > 0)
    need_phy, need_tier, need_link = per_phy - 1e-9, tier_mm - 1e-9, sl - 1e-9

    def take(edges, free, n, need, length, used):
        for j in range(n):
            best = -1
            for e in edges:
                if best < 0 or free[e] > free[best]:
                    best = e
            if best < 0 or free[best] < need:
                return n - j         # nothing changes from here: every later one is short
            used.append(best)
            free[best] -= length
        return 0

    def miss(w: float, h: float) -> float:
        long_ = max(0.0, w - 2 * k)
        short_ = max(0.0, h - 2 * corner)
        free = [long_ if lg else short_ for lg in is_long]
        short_d2d = 0.0
        for e, mm in takes:
            take_mm = min(mm, free[e])
            short_d2d += mm - take_mm
            free[e] -= take_mm
        if w < h:
            el = sorted(eligible, key=lambda e: -(w if is_long[e] else h))[:hbm_edges_n]
        else:
            el = long_first
        used: list[int] = []
        short_hbm = take(el, free, hbm_phys, need_phy, per_phy, used)
        short_tier = take(open_edges, free, tier_phys, need_tier, tier_mm, [])
        short_links = 0
        if place_links:
            open_ = [(e, e not in used) for e in open_edges]
            for j in range(links):
                best, b_fit, b_nophy, b_free = -1, False, False, 0.0
                for e, nophy in open_:
                    fe = free[e]
                    fit = fe >= need_link
                    if best < 0 or fit > b_fit or (fit == b_fit and (
                            nophy > b_nophy or (nophy == b_nophy and fe > b_free))):
                        best, b_fit, b_nophy, b_free = e, fit, nophy, fe
                if best < 0 or free[best] < need_link:
                    short_links = links - j
                    break
                free[best] -= sl
        return (short_hbm * per_phy + short_links * per_link + short_d2d
                + short_tier * tier_mm)

    return miss


def _take(edges, free: dict, n: int, length: float, used: set) -> int:
    """Place ``n`` interfaces of ``length`` mm one at a time on the edge of ``edges`` with the
    most ``free`` length (the first of equal ones, as ``max()``), updating ``free`` and adding
    each edge used to ``used``; returns how many found no edge."""
    short = 0
    for _ in range(n):
        best = None
        for e in edges:
            if best is None or free[e] > free[best]:
                best = e
        if best is None or free[best] < length - 1e-9:
            short += 1
            continue
        used.add(best)
        free[best] -= length
    return short


def usable_lengths(w: float, h: float, spec: DieSpec, depths) -> dict[str, float]:
    """Usable length of each edge: long edges less the corner keep-outs; short edges less the
    keep-outs or the deepest interface (which may sit on a long edge's corner), whichever is
    more, at each end."""
    k = spec.corner_keepout_mm
    corner = max([k, *depths])
    return {e: max(0.0, (w - 2 * k) if e in LONG_EDGES else (h - 2 * corner)) for e in EDGES}


def _corner(spec: DieSpec, e: str, depths) -> float:
    return spec.corner_keepout_mm if e in LONG_EDGES else max([spec.corner_keepout_mm, *depths])


def _order(items):
    """D2D in the middle of its edge; links split around the PHYs."""
    d2d = [i for i in items if i[0] == "d2d"]
    phys = [i for i in items if i[0] in ("dram_phy", "dram2_phy")]
    links = [i for i in items if i[0] == "interconnect"]
    half = len(links) // 2
    return links[:half] + phys + d2d + links[half:]


# ---- outlines -------------------------------------------------------------------------------


def _dims(area: float, r: float) -> tuple[float, float]:
    return math.sqrt(area * r), math.sqrt(area / r)


def _shortfall_mm(short: dict, spec: DieSpec) -> float:
    return (short["hbm"] * spec.mm_edge_per_hbm_phy + short["links"] * spec.mm_edge_per_link
            + short["d2d"] + short.get("tier_mm", 0.0))


def choose_outline(area: float, spec: DieSpec, *, hbm_phys: int, links: int,
                   d2d: dict[str, float], blocked: tuple[str, ...] = (), tier_phys: int = 0,
                   tier_mm: float = 0.0, **depths: float) -> tuple[float, float]:
    """Width and height (w ≥ h) of a die of at least ``area`` mm² whose outline is not stated.

    The most nearly square outline within ``max_aspect_ratio`` and the reticle whose edges
    hold every interface. When no outline of ``area`` does, the smallest larger one within the
    reticle that does (an I/O-limited die: the difference is whitespace); when not even a
    reticle-sized die does, the outline of ``area`` that leaves the least edge demand unplaced.
    ``depths`` are the interfaces' ``phy_depth_mm``, ``link_depth_mm``, ``d2d_depth_mm`` and
    ``tier_depth_mm`` (they shorten the short edges); ``tier_phys`` PHYs of ``tier_mm`` each:
    a second memory tier's (:func:`assign_edges`).
    """
    io = dict(hbm_phys=hbm_phys, links=links, d2d=d2d, blocked=blocked, tier_phys=tier_phys,
              tier_mm=tier_mm)
    w, h, ok = _outline(area, spec, 200, fits_only=True, **io, **depths)
    if ok:
        return w, h
    if area >= spec.reticle_mm2 or not _reticle_fits(
            spec, hbm_phys, links, tuple(d2d.items()), blocked, tuple(sorted(depths.items())),
            tier_phys, tier_mm):
        return _outline(area, spec, 200, **io, **depths)[:2]   # the least shortfall
    lo, hi = area, spec.reticle_mm2
    while hi - lo > 1e-3 * area:
        mid = 0.5 * (lo + hi)
        if _outline(mid, spec, 60, fits_only=True, **io, **depths)[2]:
            hi = mid
        else:
            lo = mid
    return _outline(hi, spec, 60, **io, **depths)[:2]


def _phys_cannot_fit(area: float, lo: float, hi: float, spec: DieSpec, hbm_phys: int,
                     d2d: dict[str, float], blocked: tuple[str, ...]) -> bool:
    """True when no outline of ``area`` with aspect ratio in ``[lo, hi]`` can hold the
    ``hbm_phys`` PHY sites (a sufficient condition for :func:`edge_shortfall` to report a
    shortfall at every ratio): each eligible edge (w ≥ h, so the same edges at every ratio)
    takes at most ``⌊(an upper bound of its usable length + 1e-6) / mm_edge_per_hbm_phy⌋``
    of them (a PHY needs ``free ≥ s − 1e-9``, so ``j`` PHYs need ``j·s ≤ length + 1e-9``);
    the bound is the longest side over the ratios less the corner keep-outs only."""
    if hbm_phys <= 0:
        return False
    k = spec.corner_keepout_mm      # (a short edge loses at least this at each end)
    w_max = math.sqrt(area * hi) * (1 + 1e-12)      # the longest side over the ratios
    h_max = math.sqrt(area / lo) * (1 + 1e-12)      # the longest short side
    s = spec.mm_edge_per_hbm_phy
    eligible = [e for e in EDGES if not d2d.get(e) and e not in blocked][:spec.hbm_edges]
    room = 0
    for e in eligible:
        length = max(0.0, (w_max if e in LONG_EDGES else h_max) - 2 * k)
        room += math.floor((length + 1e-6) / s)
    return hbm_phys > room


@functools.lru_cache(maxsize=256)
def _reticle_fits(spec: DieSpec, hbm_phys: int, links: int, d2d: tuple, blocked: tuple,
                  depths: tuple, tier_phys: int = 0, tier_mm: float = 0.0) -> bool:
    """Whether a reticle-sized die holds every interface (:func:`choose_outline`'s probe; the
    same for every die of a sweep that shares its I/O)."""
    return _outline(spec.reticle_mm2, spec, 60, fits_only=True, hbm_phys=hbm_phys,
                    links=links, d2d=dict(d2d), blocked=blocked, tier_phys=tier_phys,
                    tier_mm=tier_mm, **dict(depths))[2]


def _outline(area: float, spec: DieSpec, n: int, *, hbm_phys: int, links: int,
             d2d: dict[str, float], blocked: tuple[str, ...] = (), fits_only: bool = False,
             tier_phys: int = 0, tier_mm: float = 0.0,
             **depths: float) -> tuple[float, float, bool]:
    """The first outline of ``area`` (aspect ratios from the squarest up, in ``n`` steps)
    whose edges hold every interface, else the one with the least shortfall; and whether
    it holds them. ``fits_only``: only the first outline and whether it holds them matter
    (when none does the outline returned is arbitrary), so the scan is skipped when the
    PHY sites alone cannot fit at any of the ratios (:func:`_phys_cannot_fit`)."""
    rw, rh = spec.reticle_width_mm, spec.reticle_height_mm
    lo, hi = 1.0, spec.max_aspect_ratio
    if area <= spec.reticle_mm2 * (1 + 1e-12):
        lo_ret, hi_ret = max(1.0, area / rw**2), rh**2 / area
        if lo_ret <= hi and lo_ret <= hi_ret:
            lo, hi = lo_ret, min(hi, hi_ret)
    if fits_only and _phys_cannot_fit(area, lo, hi, spec, hbm_phys, d2d, blocked):
        return (*_dims(area, lo), False)
    best, best_r = math.inf, lo
    shortfall = shortfall_scan(spec, hbm_phys=hbm_phys, links=links, d2d=d2d, blocked=blocked,
                               tier_phys=tier_phys, tier_mm=tier_mm, **depths)
    for i in range(n + 1):
        r = lo + (hi - lo) * i / n if hi > lo else lo
        w, h = _dims(area, r)
        miss = shortfall(w, h)
        if miss <= 1e-9:
            return w, h, True
        if miss < best - 1e-9:
            best, best_r = miss, r
        if hi <= lo:
            break
    return (*_dims(area, best_r), False)


def band_depths(slots) -> dict[str, float]:
    """Depth of the interface band along each edge: its deepest slot (0 without slots)."""
    return {e: max((s.depth_mm for s in slots if s.edge == e), default=0.0) for e in EDGES}


def band_area(w: float, h: float, slots) -> float:
    """Area of the four interface bands: the long edges' bands span the whole width, the short
    edges' bands the height between them."""
    d = band_depths(slots)
    return w * (d["south"] + d["north"]) + (h - d["south"] - d["north"]) * (d["west"] + d["east"])


def placed_io_mm2(slots, stacks: int) -> float:
    """Area of the interfaces placed on the edges: link and D2D slots and the first ``stacks``
    DRAM PHY slots (further PHY sites are unpopulated: their area is overhead)."""
    phys = [s for s in slots if s.kind == "dram_phy"][:stacks]
    return sum(s.length_mm * s.depth_mm for s in slots if s.kind != "dram_phy") \
        + sum(s.length_mm * s.depth_mm for s in phys)


def layout_deficit(w: float, h: float, slots, blocks: dict[str, float], stacks: int) -> float:
    """mm² by which the blocks overflow the interior once the edge bands are laid out.

    The band area beside the interfaces holds overhead (pads, PCIe, control); what the
    overhead cannot fill is whitespace, and the die must grow by as much for the cores and
    buffers to fit (0 when the bands are filled)."""
    placed = placed_io_mm2(slots, stacks)
    fillers = band_area(w, h, slots) - placed
    interior = w * h - band_area(w, h, slots)
    content = sum(blocks.values()) - placed - min(fillers, blocks.get("overhead", 0.0))
    return content - interior


def die_geometry(name: str, kind: str, blocks: dict[str, float], spec: DieSpec, *,
                 hbm_phys: int, links: int, d2d: dict[str, float], blocked: tuple[str, ...] = (),
                 stacks: int | None = None,
                 cores: int = 0, spare_cores: int = 0, stated: tuple[float, float] | None = None,
                 mm2_per_hbm_phy: float = 0.0, mm2_per_link: float = 0.0,
                 d2d_mm2_per_mm: float = 0.0, tier_phys: int = 0, tier_mm: float = 0.0,
                 tier_mm2: float = 0.0,
                 tier_label: str = "the second memory tier ([dram2])") -> DieGeometry:
    """Outline, edge slots and violations of one die whose blocks are ``blocks`` (mm²).

    A derived outline grows beyond the blocks' area when the interface bands leave more room
    beside the interfaces than the overhead fills (:func:`layout_deficit`); the difference is
    the die's whitespace. A stated outline that the blocks overflow is a ``layout`` violation.
    ``tier_phys`` PHYs of a second memory tier take ``tier_mm`` of edge and ``tier_mm2`` each;
    ``tier_label`` names them in a violation (a third tier's PHYs may be among them).
    """
    area = sum(blocks.values())
    stacks = hbm_phys if stacks is None else stacks
    s = spec.mm_edge_per_hbm_phy
    depths = dict(phy_depth_mm=mm2_per_hbm_phy / s if s else 0.0,
                  link_depth_mm=(mm2_per_link / spec.mm_edge_per_link
                                 if spec.mm_edge_per_link else 0.0),
                  d2d_depth_mm=d2d_mm2_per_mm,
                  tier_depth_mm=tier_mm2 / tier_mm if tier_mm else 0.0)
    io = dict(hbm_phys=hbm_phys, links=links, d2d=d2d, blocked=blocked,
              tier_phys=tier_phys if tier_mm else 0, tier_mm=tier_mm)
    grow = 0.0
    for _ in range(50):
        if stated is not None:
            w, h = max(stated), min(stated)
        else:
            w, h = choose_outline(area + grow, spec, **io, **depths)
        slots, short = assign_edges(w, h, spec, **io, **depths)
        deficit = layout_deficit(w, h, slots, blocks, stacks)
        if stated is not None or deficit <= 0:
            break
        grow += deficit * 1.001 + 1e-9 * area  # overshoot a little: the blocks must fit
    usable = sum(usable_lengths(w, h, spec, [depths["phy_depth_mm"] if hbm_phys else 0.0,
                                             depths["link_depth_mm"] if links else 0.0,
                                             d2d_mm2_per_mm if d2d else 0.0,
                                             depths["tier_depth_mm"] if io["tier_phys"]
                                             else 0.0]).values())
    demand = (hbm_phys * s + links * spec.mm_edge_per_link + sum(d2d.values())
              + io["tier_phys"] * tier_mm)
    v: list[Violation] = []
    rw, rh = spec.reticle_width_mm, spec.reticle_height_mm
    label = "the die" if kind == "monolithic" else f"die {name!r}"
    outline = w * h
    ws = f" ({area:.1f} mm² of blocks + {outline - area:.1f} mm² whitespace)" \
        if outline > area * (1 + 1e-6) else ""
    if outline > spec.reticle_mm2 * (1 + 1e-9):
        hint = ("; split it into chiplets ([package] compute_dies)" if kind == "monolithic"
                else "; use more dies")
        v.append(Violation("reticle", name,
                           f"{label}: {outline:.1f} mm²{ws} exceeds the {rw:g} × {rh:g} mm "
                           f"reticle ({spec.reticle_mm2:.0f} mm²) by "
                           f"{outline - spec.reticle_mm2:.1f} mm²" + hint,
                           outline - spec.reticle_mm2, "mm2"))
    elif w > rh + 1e-9 or h > rw + 1e-9:
        over = max(w - rh, h - rw)
        why = "stated" if stated is not None else f"at aspect ratio ≤ {spec.max_aspect_ratio:g}"
        v.append(Violation("reticle", name,
                           f"{label}: outline {w:.1f} × {h:.1f} mm ({why}) does not fit the "
                           f"{rw:g} × {rh:g} mm reticle: {over:.1f} mm too long",
                           over, "mm"))
    if short["hbm"]:
        placed = hbm_phys - short["hbm"]
        n_e = min(spec.hbm_edges, 4)
        v.append(Violation(
            "hbm_edge", name,
            f"{label}: {hbm_phys} DRAM PHYs need {hbm_phys * s:.1f} mm of die edge ({s:g} mm "
            f"each) on at most {n_e} edge(s); a {w:.1f} × {h:.1f} mm outline holds {placed}: "
            f"short by {short['hbm']} PHY(s), {short['hbm'] * s:.1f} mm of edge (fewer stacks, "
            f"a longer die, or chiplets)", short["hbm"] * s, "mm"))
    if short["tier"]:
        v.append(Violation(
            "tier_edge", name,
            f"{label}: {io['tier_phys']} PHYs of {tier_label} need "
            f"{io['tier_phys'] * tier_mm:.1f} mm of die edge ({tier_mm:g} mm each); a "
            f"{w:.1f} × {h:.1f} mm outline holds {io['tier_phys'] - short['tier']} beside the "
            f"HBM PHYs: short by {short['tier']} PHY(s), {short['tier_mm']:.1f} mm of edge "
            f"(fewer packages or link ports, fewer HBM stacks, or a longer die)", short["tier_mm"],
            "mm"))
    if short["links"]:
        sl = spec.mm_edge_per_link
        v.append(Violation(
            "link_edge", name,
            f"{label}: {links} link SerDes need {links * sl:.1f} mm of die edge ({sl:g} mm each); "
            f"{links - short['links']} fit beside the other interfaces: short by "
            f"{short['links'] * sl:.1f} mm", short["links"] * sl, "mm"))
    if short["d2d"] > 1e-9:
        v.append(Violation(
            "d2d_edge", name,
            f"{label}: the die-to-die interface needs {sum(d2d.values()):.1f} mm of edge; its "
            f"edge offers {sum(d2d.values()) - short['d2d']:.1f} mm: short by "
            f"{short['d2d']:.1f} mm (less D2D bandwidth or a denser D2D PHY)",
            short["d2d"], "mm"))
    if stated is not None and deficit > 1e-6 * max(1.0, area):
        v.append(Violation(
            "layout", name,
            f"{label}: the blocks need {deficit:.1f} mm² more than the stated {w:g} × {h:g} mm "
            f"outline leaves inside its interface bands", deficit, "mm2"))
    return DieGeometry(name=name, kind=kind, width_mm=w, height_mm=h, area_mm2=area,
                       blocks=dict(blocks), slots=tuple(slots), violations=tuple(v),
                       demand_mm=demand, usable_mm=usable, stated=stated is not None,
                       cores=cores, spare_cores=spare_cores, hbm_phys=hbm_phys, links=links,
                       d2d={e: mm for e, mm in d2d.items() if mm > 0}, stacks=stacks,
                       tier_phys=io["tier_phys"])


def dies(chip: "Chip") -> list[DieGeometry]:
    """Every die of ``chip`` (one for a monolithic chip) with its outline and violations."""
    return list(_dies(chip))


@functools.lru_cache(maxsize=1024)   # a sweep's chips, inherited by its workers (noc.py)
def _dies(chip: "Chip") -> tuple[DieGeometry, ...]:
    from .package import die_contents, tier_phys

    spec = die_spec(chip)
    stated = (spec.width_mm, spec.height_mm) if spec.width_mm is not None else None
    a = chip.area
    pkg = getattr(chip, "package", None)
    _, tier_mm, tier_mm2 = tier_phys(chip)
    t3 = getattr(chip, "dram3", None)
    label = "the second memory tier ([dram2])"
    if t3 is not None and t3.phys and t3.mm_edge_per_phy:
        # each tier's PHYs and the key that sizes them, so the message says what to change
        label = ("the second and third memory tiers ([dram2], [dram3]: "
                 + ", ".join(f"{t.phys} × {n}.mm_edge_per_phy = {t.mm_edge_per_phy:g} mm"
                             for n, t in (("dram2", chip.dram2), ("dram3", t3)))
                 + ")")
    out = []
    for dc in die_contents(chip):
        out.append(die_geometry(
            dc.name, dc.kind, dc.blocks, spec, hbm_phys=dc.hbm_phys, links=dc.links,
            d2d=dc.d2d_edges, blocked=dc.blocked, stacks=dc.stacks, cores=dc.cores,
            spare_cores=dc.spare_cores,
            stated=stated if dc.kind != "io" else None, mm2_per_hbm_phy=a.mm2_per_hbm_phy,
            mm2_per_link=a.mm2_per_link,
            d2d_mm2_per_mm=pkg.d2d_mm2_per_mm if pkg is not None else 0.0,
            tier_phys=dc.tier_phys, tier_mm=tier_mm, tier_mm2=tier_mm2,
            tier_label=label))
    return tuple(out)


def check(chip: "Chip") -> list[Violation]:
    """Every geometry violation of ``chip`` (empty when it can be built as described)."""
    return [v for d in dies(chip) for v in d.violations]


def geometry_columns(chip: "Chip") -> dict:
    """Scalar columns for sweep rows: feasibility, the reason, and the largest die's outline."""
    ds = dies(chip)
    v = [x for d in ds for x in d.violations]
    big = max(ds, key=lambda d: d.area_mm2)
    return {
        "feasible": not v,
        "infeasible_reason": "; ".join(x.message for x in v) or None,
        "dies": len(ds),
        "die_width_mm": big.width_mm,
        "die_height_mm": big.height_mm,
        "largest_die_mm2": big.area_mm2,
        "edge_demand_mm": sum(d.demand_mm for d in ds),
        "edge_usable_mm": sum(d.usable_mm for d in ds),
    }


def validate_chip(chip: "Chip", source: str | None) -> None:
    """Load-time checks that need the whole chip: a stated outline must hold the blocks, and
    ``hbm_sites`` must cover the stacks. Raises :class:`~diptych.arch.schema.ConfigError`."""
    spec = getattr(chip, "die", None)
    if spec is None:
        return
    from .package import stacks

    if spec.hbm_sites and spec.hbm_sites < stacks(chip):
        fail(source, "die.hbm_sites", spec.hbm_sites,
             f"at least dram.stacks ({stacks(chip)}), or 0 for as many as the stacks")
    if spec.width_mm is None:
        return
    from .package import die_contents

    stated = spec.width_mm * spec.height_mm
    for dc in die_contents(chip):
        if dc.kind == "io":
            continue
        need = sum(dc.blocks.values())
        if stated < need * (1 - 1e-6):
            fail(source, "die.width_mm", spec.width_mm,
                 f"an outline that holds the blocks: {spec.width_mm:g} × {spec.height_mm:g} mm "
                 f"= {stated:.2f} mm² is {need - stated:.2f} mm² smaller than the modelled "
                 f"{dc.kind} die ({need:.2f} mm²)")
