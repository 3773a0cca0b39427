"""Cost per die, per chip and per token.

An optional ``[cost]`` table names the process node (:mod:`diptych.arch.nodes`) and the
packaging, memory and deployment figures. The model:

* **dies per wafer** (gross): the standard formula with edge loss,
  ``π (d/2)² / A − π d / √(2 A)``, with ``d`` the wafer diameter less twice the edge
  exclusion and ``A`` the die outline plus one scribe lane per side
  (:func:`dies_per_wafer`; :func:`dies_per_wafer_exact` counts whole dies on a grid and is the
  slow reference it is tested against);
* **yield** from the defect density D0 and the die area A (:func:`die_yield`): Poisson
  ``e^{-AD}``, Murphy ``((1 − e^{-AD}) / AD)²``, Seeds ``1 / (1 + AD)``, negative binomial
  ``(1 + AD/α)^{-α}`` with clustering α (default, α = 3), or Bose-Einstein
  ``(1 + AD)^{-N}`` (Hennessy & Patterson, 5th/6th ed., N = process complexity);
* **harvesting**: with ``[die] spare_cores`` = s, a die is good when the non-core logic is
  good and at most s of its n + s cores have a defect (cores treated as independent, each with
  the yield of its own area) (:func:`harvest_yield`);
* **cost of a good die** = wafer price ÷ (dies per wafer × yield);
* **cost per chip** = (Σ good dies + DRAM GB × $/GB + interposer mm² × $/mm² + assembly and
  test) ÷ assembly yield. The interposer covers the dies and the DRAM stacks' footprints with a
  margin (HBM or multi-die packages; a single die with DDR gets none).
* **per token**: the chip's price amortised over its lifetime at the stated utilisation, plus
  the energy per token (from the simulation) and the idle energy of the unused time (static
  power) at the stated electricity price and PUE: ``usd_per_mtok``; ``tokens_per_s_per_usd``.

Sources of the defaults (docs/floorplan.md has the table): DRAM $15/GB [S: Silicon Analysts
cost bridge, from Epoch AI / Raymond James estimates: B200's 192 GB of HBM3e ~$2,900 (≈$15/GB),
H100's 80 GB of HBM3 ~$1,400 (≈$17.5/GB)]; interposer $0.37/mm² [D: the same source puts
H100's CoWoS-S packaging at ~$750; this model's H100 interposer is ~2,000 mm²]; assembly and
test $920 per package [S: same source, H100]; assembly yield 0.98, α = 3, scribe 0.1 mm, edge
exclusion 3 mm [assumption; calculators use 2-5 mm]; electricity $0.08/kWh [S: US industrial
average, EIA 2023], lifetime 4 years [assumption: typical accelerator depreciation 4-6
years], utilisation 0.6 [assumption].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from .tables import YIELD_MODELS

if TYPE_CHECKING:  # pragma: no cover
    from .chip import Chip

SECONDS_PER_YEAR = 365.25 * 86400

# ---- dies per wafer ---------------------------------------------------------------------------


def _pos(name: str, v: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or math.isinf(v):
        raise ValueError(f"{name} must be a positive number, not {v!r}")
    return float(v)


def dies_per_wafer(die_mm2: float, wafer_diameter_mm: float = 300.0) -> float:
    """Gross dies per wafer: ``π (d/2)² / A − π d / √(2 A)`` (not rounded; >= 0).

    ``die_mm2`` includes the scribe lanes; ``wafer_diameter_mm`` is the usable diameter.
    """
    a = _pos("die_mm2", die_mm2)
    d = _pos("wafer_diameter_mm", wafer_diameter_mm)
    return max(0.0, math.pi * (d / 2) ** 2 / a - math.pi * d / math.sqrt(2 * a))


def dies_per_wafer_exact(width_mm: float, height_mm: float,
                         wafer_diameter_mm: float = 300.0) -> int:
    """Whole ``width_mm`` × ``height_mm`` dies on a rectangular grid inside a circle of
    ``wafer_diameter_mm``: the best of four grid offsets (centred on a die, or on a die corner,
    in each direction). Slow and obviously correct; :func:`dies_per_wafer` is tested against it.
    """
    w, h = _pos("width_mm", width_mm), _pos("height_mm", height_mm)
    r = _pos("wafer_diameter_mm", wafer_diameter_mm) / 2
    best = 0
    for ox in (0.0, w / 2):
        for oy in (0.0, h / 2):
            count = 0
            nx, ny = int(r / w) + 2, int(r / h) + 2
            for i in range(-nx, nx + 1):
                x0, x1 = i * w - ox, (i + 1) * w - ox
                xf = max(abs(x0), abs(x1))
                for j in range(-ny, ny + 1):
                    y0, y1 = j * h - oy, (j + 1) * h - oy
                    yf = max(abs(y0), abs(y1))
                    if xf * xf + yf * yf <= r * r:
                        count += 1
            best = max(best, count)
    return best


# ---- yield ----------------------------------------------------------------------------------


def die_yield(area_mm2: float, defects_per_cm2: float, model: str = "negative_binomial",
              alpha: float = 3.0) -> float:
    """Fraction of dies of ``area_mm2`` without a killer defect (see the module docstring)."""
    a = _pos("area_mm2", area_mm2) / 100.0
    if isinstance(defects_per_cm2, bool) or not isinstance(defects_per_cm2, (int, float)) \
            or defects_per_cm2 < 0:
        raise ValueError(f"defects_per_cm2 must be a non-negative number, not "
                         f"{defects_per_cm2!r}")
    ad = a * defects_per_cm2
    if model == "poisson":
        return math.exp(-ad)
    if model == "murphy":
        return 1.0 if ad == 0 else ((1 - math.exp(-ad)) / ad) ** 2
    if model == "seeds":
        return 1.0 / (1.0 + ad)
    if model == "negative_binomial":
        return (1.0 + ad / _pos("alpha", alpha)) ** -alpha
    if model == "bose_einstein":
        return (1.0 + ad) ** -_pos("alpha", alpha)
    raise ValueError(f"yield model must be one of {', '.join(YIELD_MODELS)}, not {model!r}")


def harvest_yield(core_mm2: float, cores: int, spares: int, other_mm2: float,
                  defects_per_cm2: float, model: str = "negative_binomial",
                  alpha: float = 3.0) -> float:
    """Yield of a die with ``cores + spares`` cores of ``core_mm2`` each, good when its
    ``other_mm2`` of non-redundant logic is good and at most ``spares`` cores are bad."""
    if spares == 0 or core_mm2 <= 0:
        return die_yield(core_mm2 * cores + other_mm2, defects_per_cm2, model, alpha)
    yc = die_yield(core_mm2, defects_per_cm2, model, alpha)
    n = cores + spares
    ok = sum(math.comb(n, k) * (1 - yc) ** k * yc ** (n - k) for k in range(spares + 1))
    rest = die_yield(other_mm2, defects_per_cm2, model, alpha) if other_mm2 > 0 else 1.0
    return ok * rest


# ---- cost of a chip -------------------------------------------------------------------------


@dataclass(frozen=True)
class DieCost:
    """One die: its outline, gross dies per wafer, yield and the cost of a good one."""

    name: str
    kind: str
    node: str
    area_mm2: float
    dies_per_wafer: float
    yield_: float
    usd: float


@dataclass(frozen=True)
class ChipCost:
    """Cost of one packaged chip, by part (USD)."""

    dies: tuple[DieCost, ...]
    dram_usd: float
    interposer_mm2: float
    interposer_usd: float
    assembly_test_usd: float
    assembly_yield: float

    @property
    def die_usd(self) -> float:
        return sum(d.usd for d in self.dies)

    @property
    def total_usd(self) -> float:
        return (self.die_usd + self.dram_usd + self.interposer_usd
                + self.assembly_test_usd) / self.assembly_yield

    def breakdown(self) -> dict[str, float]:
        """Parts of :attr:`total_usd`, each divided by the assembly yield (they sum to it)."""
        y = self.assembly_yield
        return {"dies": self.die_usd / y, "dram": self.dram_usd / y,
                "interposer": self.interposer_usd / y, "assembly_test": self.assembly_test_usd / y}


def chip_cost(chip: "Chip") -> ChipCost | None:
    """The cost of ``chip`` (None without a ``[cost]`` table)."""
    c = getattr(chip, "cost", None)
    if c is None:
        return None
    from .geometry import dies
    from .area import core_area_mm2

    usable = c.wafer_diameter_mm - 2 * c.edge_exclusion_mm
    if usable <= 0:
        raise ValueError(f"cost.edge_exclusion_mm ({c.edge_exclusion_mm:g}) leaves no usable "
                         f"wafer of {c.wafer_diameter_mm:g} mm")
    out = []
    core = core_area_mm2(chip)
    for g in dies(chip):
        io = g.kind == "io"
        outline = g.width_mm * g.height_mm
        dpw = dies_per_wafer((g.width_mm + c.scribe_mm) * (g.height_mm + c.scribe_mm), usable)
        if g.cores and g.spare_cores:
            y = harvest_yield(core, g.cores, g.spare_cores,
                              outline - core * (g.cores + g.spare_cores), c.d0(io),
                              c.yield_model, c.clustering_alpha)
        else:
            y = die_yield(outline, c.d0(io), c.yield_model, c.clustering_alpha)
        if dpw < 1:
            raise ValueError(f"die {g.name!r} ({outline:.0f} mm²) does not fit a "
                             f"{c.wafer_diameter_mm:g} mm wafer")
        node = (c.io_node or c.node) if io else c.node
        out.append(DieCost(g.name, g.kind, node, outline, dpw, y, c.wafer_price(io) / (dpw * y)))
    ds = dies(chip)
    sites = sum(g.hbm_phys for g in ds)
    hbm = chip.dram is not None and chip.dram.kind.startswith("hbm")
    if hbm or len(ds) > 1:
        footprint = sum(g.width_mm * g.height_mm for g in ds) + (sites * c.hbm_footprint_mm2
                                                                  if hbm else 0.0)
        interposer = footprint * (1 + c.interposer_margin)
    else:
        interposer = 0.0
    gib = chip.dram.capacity_gib if chip.dram is not None else 0.0
    # the second (and third) tier at its own price (``usd_per_gb``, capacity counted as the
    # first's; a memory ``shared_by`` several chips, one chip's share)
    tier = sum((t.capacity_gib if t.shared_by == 1 else t.capacity_gib_per_chip) * t.usd_per_gb
               for _, t in chip.memory_tiers)
    return ChipCost(dies=tuple(out), dram_usd=gib * c.dram_usd_per_gb + tier,
                    interposer_mm2=interposer,
                    interposer_usd=interposer * c.interposer_usd_per_mm2,
                    assembly_test_usd=c.assembly_test_usd, assembly_yield=c.assembly_yield)


# ---- cost per token ------------------------------------------------------------------------


def token_economics(chip: "Chip", tokens_per_s_per_chip: float | None,
                    energy_j_per_token: float | None) -> dict[str, float | None]:
    """Dollars per million tokens and tokens/s per dollar of one chip (see module docstring).

    ``energy_j_per_token`` is the run's energy per token (all its chips); the idle time
    ((1 − utilisation) of the life) draws the chip's static power. Every value is None without a
    ``[cost]`` table or without a throughput.
    """
    keys = ("cost_usd", "usd_per_mtok", "tokens_per_s_per_usd", "capex_usd_per_mtok",
            "energy_usd_per_mtok")
    cc = chip_cost(chip)
    if cc is None:
        return dict.fromkeys(keys)
    total = cc.total_usd
    if not tokens_per_s_per_chip or tokens_per_s_per_chip <= 0:
        return {**dict.fromkeys(keys), "cost_usd": total}
    c = chip.cost
    tps = tokens_per_s_per_chip
    capex = total / (tps * c.utilisation * c.lifetime_years * SECONDS_PER_YEAR)
    idle_j = chip.energy.static_w * (1 - c.utilisation) / c.utilisation / tps
    joules = (energy_j_per_token or 0.0) + idle_j
    energy = joules * c.pue / 3.6e6 * c.usd_per_kwh
    return {"cost_usd": total, "usd_per_mtok": 1e6 * (capex + energy),
            "tokens_per_s_per_usd": tps / total, "capex_usd_per_mtok": 1e6 * capex,
            "energy_usd_per_mtok": 1e6 * energy}


def cost_metrics(chip: "Chip", result: Mapping[str, Any]) -> dict[str, float | None]:
    """:func:`token_economics` of a run result dict (``tokens_per_s``, ``chips``,
    ``energy_j_per_token``; e.g. ``RunResult.to_dict()``)."""
    tps = result.get("tokens_per_s")
    chips = result.get("chips") or 1
    return token_economics(chip, None if tps is None else tps / chips,
                           result.get("energy_j_per_token"))


def cost_columns(chip: "Chip") -> dict[str, float | None]:
    """Per-chip sweep columns: package cost and the largest die's cost, yield and count."""
    cc = chip_cost(chip)
    if cc is None:
        return {"cost_usd": None, "die_cost_usd": None, "die_yield": None,
                "dies_per_wafer": None}
    big = max(cc.dies, key=lambda d: d.area_mm2)
    return {"cost_usd": cc.total_usd, "die_cost_usd": cc.die_usd, "die_yield": big.yield_,
            "dies_per_wafer": big.dies_per_wafer}
