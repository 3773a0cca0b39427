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

from .nodes import NODE_NAMES, NODES
from .schema import f, fail

#: Edges of a die, long ones first. South/north run along x (the long side), west/east along y.
EDGES: tuple[str, ...] = ("south", "north", "west", "east")
LONG_EDGES = ("south", "north")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# ---- [die] (defaults and sources: diptych.arch.geometry) --------------------------------------
@dataclass(frozen=True, kw_only=True)
class DieSpec:
    """The ``[die]`` table: outline constraints and edge ("beachfront") coefficients."""

    width_mm: float | None = f(default=None, gt=0.0, max=1000.0,
                               doc="stated die width in mm (> 0; with height_mm; absent = "
                                   "derived from the modelled area)")
    height_mm: float | None = f(default=None, gt=0.0, max=1000.0,
                                doc="stated die height in mm (> 0; with width_mm)")
    max_aspect_ratio: float = f(default=2.0, min=1.0, max=10.0,
                                doc="largest long ÷ short side of a derived outline (1..10)")
    mm_edge_per_hbm_phy: float = f(default=10.0, gt=0.0, max=100.0,
                                   doc="mm of die edge per DRAM stack PHY (> 0)")
    hbm_sites: int = f(default=0, min=0, max=64,
                       doc="DRAM PHY sites on the die, incl. unpopulated ones "
                           "(0 = dram.stacks; at most 64)")
    hbm_edges: int = f(default=2, min=1, max=4,
                       doc="edges that may host DRAM PHYs, longest first (1..4)")
    mm_edge_per_link: float = f(default=1.2, min=0.0, max=100.0,
                                doc="mm of die edge per chip-to-chip link SerDes (>= 0)")
    corner_keepout_mm: float = f(default=0.5, min=0.0, max=100.0,
                                 doc="free length at both ends of every edge in mm (>= 0)")
    spare_cores: int = f(default=0, min=0, max=1_000_000,
                         doc="extra tensor cores on the die, fused off for yield (their area "
                             "counts; 0..1000000)")
    reticle_width_mm: float = f(default=26.0, gt=0.0, max=1000.0,
                                doc="reticle short side in mm (0 < x <= 1000)")
    reticle_height_mm: float = f(default=33.0, gt=0.0, max=1000.0,
                                 doc="reticle long side in mm (0 < x <= 1000)")

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
    d2d_gb_per_s: float = f(default=0.0, min=0.0, max=1e6,
                            doc="bandwidth of one D2D interface per direction in GB/s "
                                "(0 <= x <= 1e6)")
    d2d_gb_per_s_per_mm: float = f(default=658.0, gt=0.0, max=1e5,
                                   doc="D2D bandwidth per direction per mm of die edge "
                                       "(0 < x <= 1e5)")
    d2d_mm2_per_mm: float = f(default=1.0, min=0.0, max=100.0,
                              doc="D2D PHY area per mm of edge (0 <= x <= 100)")
    d2d_pj_per_bit: float = f(default=0.3, min=0.0, max=1000.0,
                              doc="energy per bit crossing one D2D interface in pJ "
                                  "(0 <= x <= 1000)")
    d2d_latency_ns: float = f(default=2.0, min=0.0, max=1e6,
                              doc="latency of one D2D crossing in ns (0 <= x <= 1e6)")
    io_die_overhead_mm2: float = f(default=0.0, min=0.0, max=1e5,
                                   doc="fixed logic per IO die in mm² (0 <= x <= 100000)")

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
    link_bytes_per_cycle: float = f(gt=0.0, max=1e6,
                                    doc="bytes per core cycle per link (mesh) or per port "
                                        "(crossbar), per direction (0 < x <= 1e6)")
    hop_latency_cycles: float = f(default=2.0, min=0.0, max=1e4,
                                  doc="cycles per router hop (0 <= x <= 10000)")
    pj_per_bit_per_mm: float = f(default=0.1, min=0.0, max=1000.0,
                                 doc="wire energy in pJ per bit per mm (0 <= x <= 1000)")
    pj_per_bit_per_hop: float = f(default=0.05, min=0.0, max=1000.0,
                                  doc="router energy in pJ per bit per router traversed "
                                      "(0 <= x <= 1000)")
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
    wafer_usd: float | None = f(default=None, gt=0.0, max=1e7,
                                doc="price of one processed wafer in USD (absent = node's)")
    defect_density_per_cm2: float | None = f(default=None, min=0.0, max=100.0,
                                             doc="killer defects per cm² (absent = node's)")
    yield_model: str = f(default="negative_binomial", choices=YIELD_MODELS, doc="yield model")
    clustering_alpha: float = f(default=3.0, gt=0.0, max=1000.0,
                                doc="negative-binomial clustering α, or Bose-Einstein N (> 0)")
    wafer_diameter_mm: float = f(default=300.0, gt=0.0, max=1000.0, doc="wafer diameter")
    edge_exclusion_mm: float = f(default=3.0, min=0.0, max=100.0, doc="unusable wafer rim")
    scribe_mm: float = f(default=0.1, min=0.0, max=10.0, doc="scribe lane between dies in mm")
    dram_usd_per_gb: float = f(default=15.0, min=0.0, max=1e5,
                               doc="DRAM price in USD per GB (0 <= x <= 1e5)")
    hbm_footprint_mm2: float = f(default=121.0, min=0.0, max=1e4,
                                 doc="interposer area per DRAM stack site (HBM3: 11 × 11 mm)")
    interposer_usd_per_mm2: float = f(default=0.37, min=0.0, max=1e4,
                                      doc="interposer + packaging cost per mm² (>= 0)")
    interposer_margin: float = f(default=0.3, min=0.0, max=10.0,
                                 doc="interposer area added around dies and stacks (fraction)")
    assembly_test_usd: float = f(default=920.0, min=0.0, max=1e7,
                                 doc="assembly and final test per package in USD (>= 0)")
    assembly_yield: float = f(default=0.98, gt=0.0, max=1.0,
                              doc="fraction of assembled packages that work (0 < x <= 1)")
    utilisation: float = f(default=0.6, gt=0.0, max=1.0,
                           doc="fraction of its life the chip serves at the simulated speed")
    usd_per_kwh: float = f(default=0.08, min=0.0, max=100.0,
                           doc="electricity price in USD per kWh (0 <= x <= 100)")
    pue: float = f(default=1.0, min=1.0, max=5.0, doc="power usage effectiveness (>= 1)")
    lifetime_years: float = f(default=4.0, gt=0.0, max=50.0, doc="depreciation lifetime")

    def wafer_price(self, io: bool = False) -> float:
        if self.wafer_usd is not None and not (io and self.io_node):
            return self.wafer_usd
        return NODES[(self.io_node or self.node) if io else self.node].wafer_usd

    def d0(self, io: bool = False) -> float:
        if self.defect_density_per_cm2 is not None and not (io and self.io_node):
            return self.defect_density_per_cm2
        return NODES[(self.io_node or self.node) if io else self.node].defect_density_per_cm2


# ---- [power] (diptych.arch.power) -------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PowerTable:
    """The ``[power]`` table: the core V/f curve and the gating of idle arrays."""

    v_min: float = f(default=0.65, gt=0.0, max=2.0, doc="core voltage floor in V (0 < x <= 2)")
    f_at_v_min_ghz: float = f(default=1.0, min=0.0, max=10.0,
                              doc="highest clock at the voltage floor in GHz (>= 0)")
    volts_per_ghz: float = f(default=0.25, min=0.0, max=5.0,
                             doc="voltage slope above the floor in V per GHz (>= 0)")
    gated_leakage_fraction: float = f(default=1.0, min=0.0, max=1.0,
                                      doc="leakage left in an idle, power-gated array (0..1; "
                                          "1 = no gating)")
    arrays_leakage_share: float | None = f(default=None, min=0.0, max=1.0,
                                           doc="arrays' share of static power (absent = their "
                                               "share of the die area)")
    min_clock_ghz: float = f(default=0.1, gt=0.0, max=10.0,
                             doc="lowest clock the part can run at in GHz (> 0)")

    def volts(self, clock_ghz: float) -> float:
        """Core voltage at ``clock_ghz``."""
        return self.v_min + self.volts_per_ghz * max(0.0, clock_ghz - self.f_at_v_min_ghz)


DEFAULT_POWER = PowerTable()
