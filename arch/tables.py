"""The optional physical tables of a chip record: ``[die]``, ``[package]``, ``[noc]``, ``[cost]``
and ``[power]`` (docs/floorplan.md).

Each is a frozen dataclass whose fields carry their units, ranges and docs, checked when the
chip is loaded, with ``_validate`` hooks for checks among a table's own fields. What the
tables mean for a whole chip (die outlines and edges, chiplet contents, NoC loads, cost and
yield, the TDP-sustainable clock) is computed from a loaded chip by the derived views above
the record: :mod:`~diptych.arch.geometry`, :mod:`~diptych.arch.package`,
:mod:`~diptych.arch.noc`, :mod:`~diptych.arch.cost`, :mod:`~diptych.arch.power`, whose
docstrings give the defaults' sources. Checks that need more than one table run after loading
(:mod:`diptych.arch.validate`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .bounds import AREA_MM2, CLOCK_GHZ, PJ_PER_IO_BIT
from .nodes import NODE_NAMES, NODES
from .schema import bound, f, fail

#: Edges of a die, long ones first. South/north run along x (the long side), west/east along y.
EDGES: tuple[str, ...] = ("south", "north", "west", "east")
LONG_EDGES = ("south", "north")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# ---- [die] (defaults and sources: diptych.arch.geometry) --------------------------------------
DIE_SIDE_MM = bound(0.1, 1000.0, "mm: a die under 0.1 mm on a side holds no pad ring, 1 m is "
                    "above a 450 mm wafer")
RETICLE_MM = bound(1.0, 1000.0, "mm: no lithography field is under 1 mm; today's is 26 x 33 mm")


@dataclass(frozen=True, kw_only=True)
class DieSpec:
    """The ``[die]`` table: outline constraints and edge ("beachfront") coefficients."""

    width_mm: float | None = f(default=None,
                               doc="stated die width in mm (with height_mm; absent = derived "
                                   "from the modelled area)", **DIE_SIDE_MM)
    height_mm: float | None = f(default=None, doc="stated die height in mm (with width_mm)",
                                **DIE_SIDE_MM)
    max_aspect_ratio: float = f(default=2.0,
                                doc="largest long ÷ short side of a derived outline",
                                **bound(1.0, 10.0, "1 = square; 10 is a sliver no package "
                                        "or reticle takes"))
    mm_edge_per_hbm_phy: float = f(default=10.0, doc="mm of die edge per DRAM stack PHY",
                                   **bound(0.1, 100.0, "mm: an HBM PHY takes ~6-11 mm of edge; "
                                           "0.1 mm holds no PHY"))
    hbm_sites: int = f(default=0, min=0, max=64,
                       doc="DRAM PHY sites on the die, incl. unpopulated ones "
                           "(0 = dram.stacks; at most 64)")
    hbm_edges: int = f(default=2, min=1, max=4,
                       doc="edges that may host DRAM PHYs, longest first (1..4)")
    mm_edge_per_link: float = f(default=1.2,
                                doc="mm of die edge per chip-to-chip link SerDes",
                                **bound(0.01, 100.0, "mm: 0 = not modelled; a SerDes lane takes "
                                        "~0.1-0.5 mm of edge", zero=True))
    corner_keepout_mm: float = f(default=0.5,
                                 doc="free length at both ends of every edge in mm",
                                 **bound(0.001, 100.0, "mm: 0 = none; 1 µm is below any "
                                         "keep-out rule", zero=True))
    spare_cores: int = f(default=0, min=0, max=1_000_000,
                         doc="extra tensor cores on the die, fused off for yield (their area "
                             "counts; 0..1000000)")
    reticle_width_mm: float = f(default=26.0, doc="reticle short side in mm", **RETICLE_MM)
    reticle_height_mm: float = f(default=33.0, doc="reticle long side in mm", **RETICLE_MM)

    def _validate(self, source, path):
        if (self.width_mm is None) != (self.height_mm is None):
            given = "width_mm" if self.width_mm is not None else "height_mm"
            other = "height_mm" if given == "width_mm" else "width_mm"
            fail(source, f"{_join(path, other)}", None,
                 f"a number > 0 too ({given} is given: state both sides or neither)")
        if self.reticle_height_mm < self.reticle_width_mm:
            fail(source, _join(path, "reticle_height_mm"), self.reticle_height_mm,
                 f"the long side, at least reticle_width_mm ({self.reticle_width_mm:g})")

    @property
    def reticle_mm2(self) -> float:
        return self.reticle_width_mm * self.reticle_height_mm


DEFAULT_DIE = DieSpec()


# ---- [package] (diptych.arch.package) ---------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Package:
    """The ``[package]`` table: how the chip is split into dies and how they are joined."""

    compute_dies: int = f(default=1, min=1, max=64, doc="compute dies (integer 1..64)")
    io_dies: int = f(default=0, min=0, max=64, doc="IO/memory dies hosting the DRAM PHYs "
                                                    "and SerDes (integer 0..64)")
    d2d_gb_per_s: float = f(default=0.0,
                            doc="bandwidth of one D2D interface per direction in GB/s (0 = "
                                "none: one die)",
                            **bound(1.0, 1e6, "GB/s: 0 = one die; 1 GB/s is below any D2D "
                                    "interface, one UCIe-S module carries 8-32 GB/s; 1 PB/s "
                                    "is 100x NV-HBI's", zero=True))
    d2d_gb_per_s_per_mm: float = f(default=658.0,
                                   doc="D2D bandwidth per direction per mm of die edge",
                                   **bound(1.0, 1e5, "GB/s per mm: D2D PHYs carry ~28 for "
                                           "UCIe-S to ~660 for UCIe-A; 1 is below any"))
    d2d_mm2_per_mm: float = f(default=1.0, doc="D2D PHY area per mm of edge",
                              **bound(0.01, 100.0, "mm² per mm: 0 = not modelled; a PHY under "
                                      "10 µm deep holds no bump", zero=True))
    d2d_pj_per_bit: float = f(default=0.3, doc="energy per bit crossing one D2D interface in pJ",
                              **PJ_PER_IO_BIT, zero_ok=True)
    d2d_latency_ns: float = f(default=2.0, doc="latency of one D2D crossing in ns",
                              **bound(0.01, 1e6, "ns: 0 = ideal; 10 ps is under one D2D clock",
                                      zero=True))
    io_die_overhead_mm2: float = f(default=0.0, doc="fixed logic per IO die in mm²",
                                   **AREA_MM2, zero_ok=True)

    def _validate(self, source, path):
        if self.dies > 1 and self.d2d_gb_per_s <= 0:
            fail(source, f"{path}.d2d_gb_per_s", self.d2d_gb_per_s,
                 f"a bandwidth > 0: {self.dies} dies must be joined by D2D links")

    @property
    def dies(self) -> int:
        return self.compute_dies + self.io_dies

    @property
    def d2d_edge_mm(self) -> float:
        """Shoreline of one D2D interface on each of its two dies, in mm."""
        return self.d2d_gb_per_s / self.d2d_gb_per_s_per_mm

    def interfaces(self) -> int:
        """D2D interfaces: neighbours in a row, or one per compute die to the IO dies."""
        if self.dies == 1:
            return 0
        return self.compute_dies if self.io_dies else self.compute_dies - 1


# ---- [noc] (diptych.arch.noc) -----------------------------------------------------------
TOPOLOGIES = ("mesh", "crossbar")


@dataclass(frozen=True, kw_only=True)
class Noc:
    """The ``[noc]`` table."""

    topology: str = f(default="mesh", choices=TOPOLOGIES, doc="mesh or crossbar")
    link_bytes_per_cycle: float = f(doc="bytes per core cycle per link (mesh) or per port "
                                        "(crossbar), per direction",
                                    **bound(0.125, 1e6, "bytes per cycle: one bit per cycle is a "
                                            "single wire, 1 MB per cycle above any link"))
    hop_latency_cycles: float = f(default=2.0, doc="cycles per router hop",
                                  **bound(0.01, 1e4, "cycles: 0 = ideal; under 0.01 cycle no "
                                          "router forwards a flit", zero=True))
    pj_per_bit_per_mm: float = f(default=0.1, doc="wire energy in pJ per bit per mm",
                                 **bound(0.001, 1000.0, "pJ: 0 = not modelled; on-chip wires "
                                         "take ~0.1 pJ/bit/mm, 1 fJ is 100x below", zero=True))
    pj_per_bit_per_hop: float = f(default=0.05,
                                  doc="router energy in pJ per bit per router traversed",
                                  **bound(0.001, 1000.0, "pJ: 0 = not modelled; a router takes "
                                          "~0.05 pJ/bit, 1 fJ is 50x below", zero=True))
    controllers_per_stack: int = f(default=1, min=1, max=64,
                                   doc="memory controllers per DRAM stack (integer >= 1)")


# ---- [cost] (diptych.arch.cost) ---------------------------------------------------------
YIELD_MODELS = ("poisson", "murphy", "seeds", "negative_binomial", "bose_einstein")


@dataclass(frozen=True, kw_only=True)
class CostTable:
    """The ``[cost]`` table: node, yield model, packaging, memory and deployment figures."""

    node: str = f(choices=NODE_NAMES, doc="process node of the compute dies")
    io_node: str | None = f(default=None, choices=NODE_NAMES,
                            doc="process node of IO dies (absent = node)")
    wafer_usd: float | None = f(default=None,
                                doc="price of one processed wafer in USD (absent = node's)",
                                **bound(10.0, 1e7, "USD: $10 is below a bare wafer, ~$100 at "
                                        "300 mm; a processed 2 nm one is ~$30,000"))
    defect_density_per_cm2: float | None = f(default=None,
                                             doc="killer defects per cm² (absent = node's)",
                                             **bound(1e-4, 100.0, "per cm²: 0 = perfect; "
                                                     "mature nodes reach ~0.05", zero=True))
    yield_model: str = f(default="negative_binomial", choices=YIELD_MODELS, doc="yield model")
    clustering_alpha: float = f(default=3.0,
                                doc="negative-binomial clustering α, or Bose-Einstein N",
                                **bound(0.01, 1000.0, "published fits lie in ~0.3-10; 1000 is "
                                        "Poisson in all but name"))
    wafer_diameter_mm: float = f(default=300.0, doc="wafer diameter in mm",
                                 **bound(25.0, 1000.0, "mm: 1-inch, 25 mm wafers are the "
                                         "smallest ever processed, 450 mm the largest planned"))
    edge_exclusion_mm: float = f(default=3.0, doc="unusable wafer rim in mm",
                                 **bound(0.01, 100.0, "mm: 0 = none; 10 µm is below any rim "
                                         "rule, ~2-3 mm", zero=True))
    scribe_mm: float = f(default=0.1, doc="scribe lane between dies in mm",
                         **bound(0.001, 10.0, "mm: 0 = none; 1 µm is below any dicing "
                                 "lane, ~50-100 µm", zero=True))
    dram_usd_per_gb: float = f(default=15.0, doc="DRAM price in USD per GB",
                               **bound(0.01, 1e5, "USD: 0 = free; 1 cent per GB is 100x "
                                       "below the cheapest DRAM ever sold", zero=True))
    hbm_footprint_mm2: float = f(default=121.0,
                                 doc="interposer area per DRAM stack site in mm² (HBM3: 11 × "
                                     "11 mm)",
                                 **bound(1.0, 1e4, "mm²: 0 = not modelled; no DRAM package is "
                                         "under 1 mm²", zero=True))
    interposer_usd_per_mm2: float = f(default=0.37, doc="interposer + packaging cost per mm²",
                                      **bound(1e-4, 1e4, "USD: 0 = free; 0.01 cent per mm² is "
                                              "below an organic substrate", zero=True))
    interposer_margin: float = f(default=0.3,
                                 doc="interposer area added around dies and stacks (fraction)",
                                 **bound(0.001, 10.0, "fraction: 0 = none; 0.1 % is below any "
                                         "keep-out", zero=True))
    assembly_test_usd: float = f(default=920.0,
                                 doc="assembly and final test per package in USD",
                                 **bound(0.01, 1e7, "USD: 0 = free; a cent is below any "
                                         "package's test", zero=True))
    assembly_yield: float = f(default=0.98, doc="fraction of assembled packages that work",
                              **bound(0.01, 1.0, "fraction: a line shipping under 1 % of its "
                                      "packages is not in production"))
    utilisation: float = f(default=0.6,
                           doc="fraction of its life the chip serves at the simulated speed",
                           **bound(0.001, 1.0, "fraction: 0.1 % is under 9 hours a year"))
    usd_per_kwh: float = f(default=0.08, doc="electricity price in USD per kWh",
                           **bound(0.001, 100.0, "USD: 0 = free; a tenth of a cent is below "
                                   "any grid price", zero=True))
    pue: float = f(default=1.0, doc="power usage effectiveness",
                   **bound(1.0, 5.0, "1 = every watt reaches the chips; 5 is above any "
                           "data centre surveyed"))
    lifetime_years: float = f(default=4.0, doc="depreciation lifetime in years",
                              **bound(0.1, 50.0, "years: 5 weeks is shorter than any "
                                      "depreciation schedule"))

    def wafer_price(self, io: bool = False) -> float:
        if self.wafer_usd is not None and not (io and self.io_node):
            return self.wafer_usd
        return NODES[(self.io_node or self.node) if io else self.node].wafer_usd

    def d0(self, io: bool = False) -> float:
        if self.defect_density_per_cm2 is not None and not (io and self.io_node):
            return self.defect_density_per_cm2
        return NODES[(self.io_node or self.node) if io else self.node].defect_density_per_cm2


# ---- [power] (diptych.arch.power) -------------------------------------------------------
LEAK_FRACTION = bound(0.001, 1.0, "fraction: 0 = none; 0.1 % is below any gated or shared "
                      "leakage", zero=True)


@dataclass(frozen=True, kw_only=True)
class PowerTable:
    """The ``[power]`` table: the core V/f curve and the gating of idle arrays."""

    v_min: float = f(default=0.65, doc="core voltage floor in V",
                     **bound(0.1, 2.0, "V: no CMOS logic switches below ~0.1 V, subthreshold "
                             "designs run at 0.2-0.4 V; 2 V is above any core rail"))
    f_at_v_min_ghz: float = f(default=1.0, doc="highest clock at the voltage floor in GHz",
                              **CLOCK_GHZ, zero_ok=True)
    volts_per_ghz: float = f(default=0.25, doc="voltage slope above the floor in V per GHz",
                             **bound(0.001, 5.0, "V per GHz: 0 = flat; 1 mV per GHz is below "
                                     "any measured curve, ~0.1-0.5", zero=True))
    gated_leakage_fraction: float = f(default=1.0,
                                      doc="leakage left in an idle, power-gated array (1 = no "
                                          "gating)",
                                      **LEAK_FRACTION)
    arrays_leakage_share: float | None = f(default=None,
                                           doc="arrays' share of static power (absent = their "
                                               "share of the die area)",
                                           **LEAK_FRACTION)
    min_clock_ghz: float = f(default=0.1, doc="lowest clock the part can run at in GHz",
                             **CLOCK_GHZ)

    def volts(self, clock_ghz: float) -> float:
        """Core voltage at ``clock_ghz``."""
        return self.v_min + self.volts_per_ghz * max(0.0, clock_ghz - self.f_at_v_min_ghz)


DEFAULT_POWER = PowerTable()
