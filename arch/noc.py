"""The on-chip network between tensor cores, the shared buffer and the DRAM controllers.

An optional ``[noc]`` table describes a ``mesh`` (one router per core tile, links between
neighbours, dimension-ordered X-then-Y routing) or a ``crossbar`` (every controller port
reaches every core port in one hop). Memory controllers (``controllers_per_stack`` per DRAM
stack) attach to the routers along the die edges that carry the DRAM PHYs; on a chiplet
compute die, the D2D interfaces are further sources for the DRAM bytes of remote stacks, each
attached through as many router ports as its bandwidth needs (D2D GB/s ÷ link GB/s, rounded
up; at most :data:`MAX_D2D_PORTS_PER_ROUTER` per router along the edge), spread along its
edge.

:func:`noc_report` answers, per compute die, in closed form or by tracing every flow:

* the bisection bandwidth (per direction) of the core network;
* the mean hop count (routers traversed) and wire distance between cores and controllers;
* the DRAM bandwidth the cores can pull through it: every controller's bytes spread
  uniformly over every core (addresses are interleaved), each flow routed on its path; the
  most loaded link or port caps the total (a chip with many cores and few controllers sees
  the controllers' ports saturate);
* the energy per byte moved: wire pJ/bit/mm × distance + router pJ/bit × routers.

Coefficients and sources (docs/floorplan.md):

* wire energy ~0.1 pJ/bit/mm on chip at 14 nm [S: Dally, Turakhia & Han, CACM 2020, via
  reference.md 3b] (it barely scales with the node);
* router energy and hop latency (2 cycles) [assumption: a 2-stage router as in published
  mesh NoCs, e.g. Intel's Xeon mesh, ARM CMN];
* link width: a design choice of each chip (bytes per core clock per direction).

The engine charges them (:mod:`diptych.sim.fabric`, docs/floorplan.md §7): the DRAM cap,
the mean latency on every DRAM descriptor, the energy per byte, the bisection on the shared
buffer.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .tables import Noc

if TYPE_CHECKING:  # pragma: no cover
    from .chip import Chip

#: Router ports one router along a die edge gives a D2D interface, at most [assumption: a
#: mesh router has five ports (four neighbours and the local one); an edge router's spare
#: ones and a wider local port give a few]. A D2D interface wider than its routers' ports can
#: carry is capped by them: the NoC's DRAM cap then names a D2D port as the bottleneck.
MAX_D2D_PORTS_PER_ROUTER = 4


@dataclass(frozen=True)
class Source:
    """Where DRAM bytes enter the network: a controller (or D2D port) at router ``at``
    (row, col), carrying ``share`` of the die's DRAM bytes, at ``x_mm``, ``y_mm`` on the die."""

    kind: str
    at: tuple[int, int]
    share: float
    x_mm: float
    y_mm: float


@dataclass(frozen=True)
class NocReport:
    """What :func:`noc_report` finds for one compute die (see the module docstring).

    ``dram_cap_bytes_per_s`` is for the whole chip (every compute die together);
    ``bottleneck`` names the link or port that sets it.
    """

    topology: str
    rows: int
    cols: int
    sources: int
    bisection_bytes_per_s: float
    mean_hops: float
    mean_mm: float
    dram_cap_bytes_per_s: float
    pj_per_byte: float
    latency_ns: float
    bottleneck: str


def grid_shape(n: int, width_mm: float, height_mm: float) -> tuple[int, int]:
    """(rows, cols) of the most nearly square tiles that hold ``n`` cores on a
    ``width_mm`` × ``height_mm`` region (rows × cols ≥ n, the fewest empty places)."""
    if n < 1:
        raise ValueError(f"n must be a positive integer, not {n!r}")
    best, best_rc = math.inf, (1, n)
    for rows in range(1, n + 1):
        cols = math.ceil(n / rows)
        tw, th = width_mm / cols, height_mm / rows
        waste = rows * cols - n
        score = abs(math.log(tw / th)) + 0.5 * waste / n
        if score < best - 1e-12:
            best, best_rc = score, (rows, cols)
    return best_rc


def core_positions(n: int, rows: int, cols: int) -> list[tuple[int, int]]:
    """Router (row, col) of each of ``n`` cores, filled row by row from the south."""
    return [(i // cols, i % cols) for i in range(n)]


def _sources(chip: "Chip", geom, rows: int, cols: int, noc: Noc) -> list[Source]:
    """Controllers at the populated PHY slots of ``geom`` (a compute or monolithic die),
    D2D ports at its D2D slots; shares of the die's DRAM bytes from :func:`d2d_report`."""
    from .package import d2d_report, die_contents

    w, h = geom.width_mm, geom.height_mm
    stacks = next(dc.stacks for dc in die_contents(chip) if dc.name == geom.name)
    phys = [s for s in geom.slots if s.kind == "dram_phy"][:stacks]
    d2d = [s for s in geom.slots if s.kind == "d2d"]
    pkg = getattr(chip, "package", None)
    remote = d2d_report(chip).crossing_fraction if pkg is not None else 0.0
    local = 1.0 - remote
    out = []
    n_ctrl = len(phys) * noc.controllers_per_stack
    for s in phys:
        for c in range(noc.controllers_per_stack):
            pos = s.start_mm + s.length_mm * (c + 0.5) / noc.controllers_per_stack
            out.append(_at(s.edge, pos, w, h, rows, cols, "controller", local / n_ctrl))
    if d2d:
        port = noc.link_bytes_per_cycle * chip.clock_hz
        need = max(1, math.ceil(pkg.d2d_gb_per_s * 1e9 / port - 1e-9))
        for s in d2d:
            # at most MAX_D2D_PORTS_PER_ROUTER per router along the edge: a router has no
            # more ports to give (a D2D of 5 TB/s on 1e-300-byte links asked for 10^303
            # ports: a loop that never ended)
            along = cols if s.edge in ("south", "north") else rows
            k = min(need, MAX_D2D_PORTS_PER_ROUTER * along)
            for c in range(k):
                pos = s.start_mm + s.length_mm * (c + 0.5) / k
                out.append(_at(s.edge, pos, w, h, rows, cols, "d2d", remote / len(d2d) / k))
    return [s for s in out if s.share > 0]


def _at(edge: str, pos: float, w: float, h: float, rows: int, cols: int, kind: str,
        share: float) -> Source:
    if edge in ("south", "north"):
        col = min(cols - 1, max(0, int(pos / w * cols)))
        row = 0 if edge == "south" else rows - 1
        x, y = pos, (0.0 if edge == "south" else h)
    else:
        row = min(rows - 1, max(0, int(pos / h * rows)))
        col = 0 if edge == "west" else cols - 1
        x, y = (0.0 if edge == "west" else w), pos
    return Source(kind, (row, col), share, x, y)


def xy_route(src: tuple[int, int], dst: tuple[int, int]) -> list[tuple[tuple[int, int],
                                                                     tuple[int, int]]]:
    """Directed links of the dimension-ordered route from ``src`` to ``dst``: along the row
    (x, columns) first, then along the column (y, rows)."""
    (r, c), (r2, c2) = src, dst
    links = []
    while c != c2:
        n = c + (1 if c2 > c else -1)
        links.append(((r, c), (r, n)))
        c = n
    while r != r2:
        n = r + (1 if r2 > r else -1)
        links.append(((r, c), (n, c)))
        r = n
    return links


def mesh_loads(sources: list[Source], cores: list[tuple[int, int]]) -> dict:
    """Load of every directed mesh link, as a fraction of the die's DRAM bytes, when each
    source's share is spread evenly over ``cores`` and routed X then Y. Also the injection
    port of each source (``("inject", i)``) and the ejection port of each core
    (``("eject", j)``)."""
    loads: dict = {}
    per_core = 1.0 / len(cores)
    for i, s in enumerate(sources):
        loads[("inject", i)] = loads.get(("inject", i), 0.0) + s.share
        for c in cores:
            for link in xy_route(s.at, c):
                loads[link] = loads.get(link, 0.0) + s.share * per_core
    for j in range(len(cores)):
        loads[("eject", j)] = sum(s.share for s in sources) * per_core
    return loads


def noc_report(chip: "Chip") -> NocReport | None:
    """The analytic NoC figures of ``chip`` (None without a ``[noc]`` table); see the module
    docstring. For a chiplet package, one compute die is analysed and the cap is for all.
    Memoised per chip (a chip-only derivation, asked once per energy breakdown: 40 times in
    one ``run``; issue 27): the same report as :func:`noc_report_ref`."""
    return _noc_report(chip)


def noc_report_ref(chip: "Chip") -> NocReport | None:
    """:func:`noc_report` computed afresh (the reference of the memoised one)."""
    noc = getattr(chip, "noc", None)
    if noc is None:
        return None
    from .geometry import dies

    geom = next(d for d in dies(chip) if d.kind in ("monolithic", "compute"))
    n_dies = sum(1 for d in dies(chip) if d.kind in ("monolithic", "compute"))
    n = geom.cores
    rows, cols = grid_shape(n, geom.width_mm, geom.height_mm)
    cores = core_positions(n, rows, cols)
    sources = _sources(chip, geom, rows, cols, noc)
    bw = noc.link_bytes_per_cycle * chip.clock_hz
    pitch_x, pitch_y = geom.width_mm / cols, geom.height_mm / rows
    if not sources:
        return NocReport(noc.topology, rows, cols, 0, 0.0, 0.0, 0.0, float("inf"), 0.0, 0.0,
                         "no DRAM on this die")
    hops = mm = 0.0
    for s in sources:
        for (r, c) in cores:
            cx, cy = (c + 0.5) * pitch_x, (r + 0.5) * pitch_y
            if noc.topology == "mesh":
                hops += s.share / n * (abs(s.at[0] - r) + abs(s.at[1] - c))
                mm += s.share / n * (abs(s.x_mm - cx) + abs(s.y_mm - cy))
            else:
                hops += s.share / n
                mm += s.share / n * math.hypot(s.x_mm - cx, s.y_mm - cy)
    total = sum(s.share for s in sources)
    hops, mm = hops / total, mm / total
    if noc.topology == "mesh":
        loads = mesh_loads(sources, cores)
        key = max(loads, key=loads.get)
        worst = loads[key] / total
        bisection = min(rows, cols) * bw if max(rows, cols) > 1 else float("inf")
        routers = hops + 1
        latency_cycles = routers * noc.hop_latency_cycles
    else:
        ports = {("inject", i): s.share for i, s in enumerate(sources)}
        ports[("eject", 0)] = total / n
        key = max(ports, key=ports.get)
        worst = ports[key] / total
        bisection = max(1, min(len(sources), n)) * bw / 2 if n > 1 else float("inf")
        routers = 1.0
        latency_cycles = noc.hop_latency_cycles
    cap = n_dies * bw / worst
    what = {"inject": "a memory-controller port", "eject": "a core port"}.get(key[0], None)
    bottleneck = what or f"mesh link {key[0]}->{key[1]}"
    pj = 8 * (noc.pj_per_bit_per_mm * mm + noc.pj_per_bit_per_hop * routers)
    return NocReport(noc.topology, rows, cols, len(sources), bisection, hops, mm, cap, pj,
                     latency_cycles / chip.clock_ghz, bottleneck)


#: (1024 chips: a sweep's parent fills it for every chip it builds, chip_columns, before it
#: forks the workers, which inherit it: a 500-chip sweep's workers then derive no report of
#: their own but the power limit's re-runs at another clock; with 256 they derived the first
#: 244 chips' again, ~1.4 ms each with their die outlines, issue 27)
_noc_report = functools.lru_cache(maxsize=1024)(noc_report_ref)


def noc_columns(chip: "Chip") -> dict:
    """Scalar sweep columns (None without a ``[noc]`` table)."""
    rep = noc_report(chip)
    if rep is None:
        return {"noc_dram_cap_bytes_per_s": None, "noc_mean_hops": None,
                "noc_pj_per_byte": None, "noc_bisection_bytes_per_s": None}
    return {"noc_dram_cap_bytes_per_s": rep.dram_cap_bytes_per_s,
            "noc_mean_hops": rep.mean_hops, "noc_pj_per_byte": rep.pj_per_byte,
            "noc_bisection_bytes_per_s": rep.bisection_bytes_per_s}
