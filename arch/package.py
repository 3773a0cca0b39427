"""Chiplet packages: compute dies and IO/memory dies joined by die-to-die (D2D) links.

An optional ``[package]`` table splits a chip over ``compute_dies`` identical compute dies
(the tensor cores, SRAM, vector units and fixed overhead divided evenly) and ``io_dies``
IO/memory dies:

* ``io_dies = 0`` (a B200-like package): every compute die carries its share of the DRAM
  stacks' PHYs and of the link SerDes; the compute dies sit in a row, neighbours joined by one
  D2D interface on their facing short edges (west/east), which host nothing else. DRAM
  addresses are interleaved over every stack, so a fraction (n − 1)/n of each die's DRAM
  traffic crosses D2D interfaces;
* ``io_dies > 0`` (an MI300-like split, drawn 2.5D): the DRAM PHYs and link SerDes move to the
  IO dies, which sit in a row north of the compute dies (at most one IO die per compute die);
  every compute die has one D2D interface (on its north edge) to an IO die, and all DRAM
  traffic crosses it. Edges that face a neighbour in a row host no PHYs or SerDes.

Each D2D interface carries ``d2d_gb_per_s`` per direction and takes
``d2d_gb_per_s / d2d_gb_per_s_per_mm`` mm of edge on both dies, ``d2d_mm2_per_mm`` mm² of PHY
per mm of edge. Coefficients (defaults) and sources:

* ``d2d_gb_per_s_per_mm`` = 658 [D]: UCIe 1.x advanced package (2.5D, 45 µm bumps, 32 GT/s)
  quotes 1317 GB/s per mm of shoreline counting both directions [P: UCIe 1.0 spec key
  metrics, as restated by D. Das Sharma, Hot Interconnects 2025]: 658 GB/s per direction;
* ``d2d_mm2_per_mm`` = 1.0 [D]: the same spec's area density 1.35 TB/s/mm² over its 1.317
  TB/s/mm shoreline density = a PHY ~0.98 mm deep;
* ``d2d_pj_per_bit`` = 0.3 [P]: UCIe 2.5D, 0.25 pJ/b at ≤ 16 GT/s, 0.3 above (same source);
* ``d2d_latency_ns`` = 2 [P]: UCIe "< 2 ns" TX-to-RX through adapter and PHY (same source).

For scale: NVIDIA's NV-HBI joins B200's two dies at 10 TB/s [S: reference.md 1a], i.e. ~7.6 mm
of each die's edge at this density.

This module gives the D2D interfaces' area, edges, the traffic that crosses them and the DRAM
bandwidth they cap (:func:`d2d_report`); the engine charges the cap, the latency and the
energy (:mod:`diptych.sim.fabric`, docs/floorplan.md §7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .area import area_breakdown_mm2
from .schema import fail

if TYPE_CHECKING:  # pragma: no cover
    from .chip import Chip


def validate_chip(chip: "Chip", source: str | None) -> None:
    """Cross-checks between ``[package]`` and the rest of the chip (ConfigError)."""
    pkg = getattr(chip, "package", None)
    if pkg is None:
        return
    n = pkg.compute_dies
    if pkg.io_dies > n:
        fail(source, "package.io_dies", pkg.io_dies,
             f"at most compute_dies ({n}): every IO die joins at least one compute die")
    if chip.tensor_cores % n:
        fail(source, "package.compute_dies", n,
             f"a divisor of tensor_cores ({chip.tensor_cores}): the cores split evenly")
    spare = _spares(chip)
    if spare % n:
        fail(source, "die.spare_cores", spare, f"a multiple of package.compute_dies ({n})")
    hosts = pkg.io_dies or n
    if stacks(chip) % hosts:
        what = "io_dies" if pkg.io_dies else "compute_dies"
        fail(source, f"package.{what}", hosts,
             f"a divisor of dram.stacks ({stacks(chip)}): each die hosts as many stacks")


def stacks(chip: "Chip") -> int:
    """DRAM stacks of ``chip`` (0 for an all-SRAM chip without a ``[dram]`` table)."""
    return chip.dram.stacks if chip.dram is not None else 0


def _spares(chip: "Chip") -> int:
    die = getattr(chip, "die", None)
    return die.spare_cores if die is not None else 0


@dataclass(frozen=True)
class DieContent:
    """What one die holds: blocks (mm², the keys of ``area_breakdown_mm2``), edge interfaces."""

    name: str
    kind: str                   # "monolithic", "compute", "io"
    blocks: dict[str, float]
    hbm_phys: int               # PHY sites on its edges (incl. unpopulated ones)
    stacks: int                 # populated DRAM stacks
    links: int
    d2d_edges: dict[str, float]  # edge -> mm of D2D shoreline
    cores: int = 0
    spare_cores: int = 0
    blocked: tuple[str, ...] = ()  # edges facing a neighbouring die: no PHYs or SerDes
    tier_phys: int = 0          # PHYs of the memory tiers beyond the first ([dram2], [dram3])


def tier_phys(chip: "Chip") -> tuple[int, float, float]:
    """(PHYs, mm of edge each, mm² each) the chip's memory tiers beyond the first put on the
    die edge: the second tier's; with a third whose PHYs take edge too, both tiers' PHYs at
    their mean length and area (the edge and area in all are exact; the packing places PHYs
    of one length, [assumption]: it keeps the edge assignment one greedy pass; a linked
    tier's PHYs are its ports, a PCIe host port of 0 mm takes none)."""
    t2 = getattr(chip, "dram2", None)
    t3 = getattr(chip, "dram3", None)
    if t2 is None:
        return 0, 0.0, 0.0
    if t3 is None or not (t3.phys and t3.mm_edge_per_phy):
        return t2.phys, t2.mm_edge_per_phy, t2.mm2_per_phy
    if not (t2.phys and t2.mm_edge_per_phy):
        return t3.phys, t3.mm_edge_per_phy, t3.mm2_per_phy
    n = t2.phys + t3.phys
    return (n, (t2.phys * t2.mm_edge_per_phy + t3.phys * t3.mm_edge_per_phy) / n,
            (t2.phys * t2.mm2_per_phy + t3.phys * t3.mm2_per_phy) / n)


def _split(total: int, parts: int, i: int) -> int:
    """Share of die ``i`` when ``total`` items are spread as evenly as possible."""
    return total // parts + (1 if i < total % parts else 0)


def die_contents(chip: "Chip") -> list[DieContent]:
    """The dies of ``chip``: one ``monolithic`` die, or the compute and IO dies of its package.

    The per-die blocks sum, over all dies, to :func:`~diptych.arch.area.area_breakdown_mm2`.
    """
    parts = area_breakdown_mm2(chip)
    die = getattr(chip, "die", None)
    n_stacks = stacks(chip)
    sites = (die.hbm_sites if die is not None and die.hbm_sites else n_stacks)
    pkg = getattr(chip, "package", None)
    links = chip.interconnect.links
    spare = _spares(chip)
    tier = tier_phys(chip)[0]
    if pkg is None or pkg.dies == 1:
        return [DieContent("die", "monolithic", dict(parts), sites, n_stacks, links, {},
                           chip.tensor_cores, spare, tier_phys=tier)]
    n, m = pkg.compute_dies, pkg.io_dies
    edge = pkg.d2d_edge_mm
    d2d_mm2 = edge * pkg.d2d_mm2_per_mm
    shared = ("arrays", "sram", "vector", "spare_cores")
    out = []
    io_overhead = m * pkg.io_die_overhead_mm2
    for i in range(n):
        b = {k: parts[k] / n for k in shared}
        b["overhead"] = (parts["overhead"] - io_overhead) / n
        if m:
            d2d = {"north": edge}
            b["dram_phy"] = b["interconnect"] = 0.0
            phys = here = lk = tp = 0
        else:
            d2d = {}
            if i > 0:
                d2d["west"] = edge
            if i < n - 1:
                d2d["east"] = edge
            here = n_stacks // n
            phys = sites // n
            lk = _split(links, n, i)
            tp = _split(tier, n, i)
            b["dram_phy"] = parts["dram_phy"] / n
            b["interconnect"] = lk * chip.area.mm2_per_link
        b["d2d"] = sum(d2d.values()) * pkg.d2d_mm2_per_mm
        out.append(DieContent(f"compute{i}", "compute", _ordered(b, parts), phys, here, lk,
                              d2d, chip.tensor_cores // n, spare // n, _facing(i, n), tp))
    for j in range(m):
        ifaces = sum(1 for i in range(n) if (i * m) // n == j)
        lk = _split(links, m, j)
        b = {k: 0.0 for k in parts}
        b["dram_phy"] = parts["dram_phy"] / m
        b["interconnect"] = lk * chip.area.mm2_per_link
        b["overhead"] = pkg.io_die_overhead_mm2
        b["d2d"] = ifaces * d2d_mm2
        out.append(DieContent(f"io{j}", "io", _ordered(b, parts), sites // m,
                              n_stacks // m, lk, {"south": ifaces * edge},
                              blocked=_facing(j, m), tier_phys=_split(tier, m, j)))
    return out


def _facing(i: int, n: int) -> tuple[str, ...]:
    """Edges of die ``i`` of a row of ``n`` that face its neighbours."""
    return tuple(e for e, ok in (("west", i > 0), ("east", i < n - 1)) if ok)


def _ordered(b: dict, parts: dict) -> dict:
    return {k: b.get(k, 0.0) for k in parts}


# ---- traffic across the D2D interfaces ---------------------------------------------------------


@dataclass(frozen=True)
class D2DReport:
    """DRAM traffic across the package's D2D interfaces (uniform interleaving over stacks).

    ``crossing_fraction``: share of DRAM bytes that cross at least one interface;
    ``mean_crossings``: interfaces crossed per DRAM byte, averaged over all bytes;
    ``dram_cap_bytes_per_s``: the total DRAM bandwidth the interfaces let the compute dies
    pull (per direction; ``inf`` for a single die); ``pj_per_dram_byte``: D2D energy added to
    each DRAM byte on average; ``latency_ns``: added latency of a crossing access.
    """

    interfaces: int
    crossing_fraction: float
    mean_crossings: float
    dram_cap_bytes_per_s: float
    pj_per_dram_byte: float
    latency_ns: float


def d2d_report(chip: "Chip") -> D2DReport:
    """Closed forms for the package's D2D traffic (docs/floorplan.md, "Chiplets").

    Row of n compute dies, DRAM interleaved over every die's stacks: a die's bytes go to die
    j with probability 1/n; the interface between dies i and i+1 carries, per direction,
    (i+1)(n−i−1)/n² of all DRAM bytes, the most at the middle; bytes cross |i − j|
    interfaces.
    With IO dies every byte crosses once and each compute die's interface carries 1/n.
    """
    pkg = getattr(chip, "package", None)
    if pkg is None or pkg.dies == 1:
        return D2DReport(0, 0.0, 0.0, float("inf"), 0.0, 0.0)
    n = pkg.compute_dies
    bw = pkg.d2d_gb_per_s * 1e9
    if pkg.io_dies:
        frac, crossings, worst = 1.0, 1.0, 1.0 / n
    else:
        frac = (n - 1) / n
        crossings = sum(abs(i - j) for i in range(n) for j in range(n)) / n**2
        worst = max((i + 1) * (n - i - 1) for i in range(n - 1)) / n**2
    return D2DReport(
        interfaces=pkg.interfaces(), crossing_fraction=frac, mean_crossings=crossings,
        dram_cap_bytes_per_s=bw / worst, pj_per_dram_byte=8 * pkg.d2d_pj_per_bit * crossings,
        latency_ns=pkg.d2d_latency_ns * (crossings / frac if frac else 0.0))
