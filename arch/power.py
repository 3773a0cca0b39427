"""Power as a limit: the clock a chip can sustain within its TDP, and power-gated idle arrays.

An optional ``[power]`` table gives the voltage/frequency curve of the core domain (the arrays,
scratchpads and vector units; DRAM, links and leakage are on other rails or do not scale with
the core voltage) and how well idle arrays are power-gated:

* ``V(f) = v_min`` for ``f ≤ f_at_v_min_ghz`` and
  ``v_min + volts_per_ghz × (f − f_at_v_min_ghz)`` above (voltage linear in frequency above a
  floor, the usual shape of published DVFS curves);
* dynamic core energy per operation ∝ V², so the core power of a compute-bound run at clock f'
  instead of f is ``P_core × (f'/f) × (V(f')/V(f))²``; DRAM and link power scale with the run's
  pace (f'/f) at constant energy per bit; static power stays.

:func:`sustained_clock` solves ``P(f') = TDP`` for f' (bisection on a monotone function); a
wrapper in :mod:`diptych.sim.run.power_limit` re-runs the phase at that clock (which changes
the time of compute-bound ops and barely that of memory-bound ones) until the average power
is within the TDP, and scales the core energy by (V(f')/V(f))².

Idle arrays: with ``gated_leakage_fraction`` g < 1, an array idle for a fraction (1 − u) of an
op (u its utilisation) leaks only g of its share of the static power; the arrays' share of the
static power is ``arrays_leakage_share`` (default: their share of the die area, leakage ∝
area). :func:`gated_static_savings_j` gives the energy saved.

Defaults [assumption, docs/floorplan.md]: ``v_min`` 0.65 V up to 1.0 GHz, 0.25 V/GHz above
(7-4 nm accelerators run ~0.65-0.9 V between ~1 and ~2 GHz; no vendor publishes its curve);
``gated_leakage_fraction`` 1.0 (no gating; power gating typically removes ~90 % of a block's
leakage, i.e. 0.1, at a wake-up cost not modelled here).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from .area import area_breakdown_mm2
from .tables import DEFAULT_POWER, PowerTable

if TYPE_CHECKING:  # pragma: no cover
    from .chip import Chip


def power_table(chip: "Chip") -> PowerTable:
    return getattr(chip, "power", None) or DEFAULT_POWER


@dataclass(frozen=True)
class PowerSplit:
    """A run's average power (one chip) by domain, in W."""

    core_w: float      # MACs, SRAM, vector: scales with V² and pace
    io_w: float        # DRAM and links: scales with pace
    static_w: float

    @property
    def total_w(self) -> float:
        return self.core_w + self.io_w + self.static_w


#: Power above the TDP by at most this fraction counts as within it (every power limit:
#: one node, a cluster step, a serving step).
TDP_TOLERANCE = 1e-3


def core_energy_scale(chip: "Chip", clock_ghz: float) -> float:
    """``(V(clock)/V(chip.clock))²``: what the core's energy per event (MACs, SRAM, vector
    ops) becomes at ``clock_ghz`` on the chip's V/f curve."""
    t = power_table(chip)
    return (t.volts(clock_ghz) / t.volts(chip.clock_ghz)) ** 2


def power_at(chip: "Chip", split: PowerSplit, clock_ghz: float) -> float:
    """Average power at ``clock_ghz`` of a compute-bound run measured as ``split`` at the
    chip's clock (see the module docstring)."""
    pace = clock_ghz / chip.clock_ghz
    return (split.core_w * core_energy_scale(chip, clock_ghz) + split.io_w) * pace \
        + split.static_w


def sustained_clock(chip: "Chip", energy_j: float, seconds: float, *,
                    split: PowerSplit | None = None) -> float:
    """The highest clock (GHz, ≤ ``chip.clock_ghz``) at which a run of ``energy_j`` per chip
    over ``seconds`` stays within ``chip.tdp_w``, assuming its time scales with 1/clock.

    Without ``split`` the energy is taken as all core energy above the chip's static power.
    Raises ValueError when even ``min_clock_ghz`` exceeds the TDP (the static power alone
    does, for instance).
    """
    for n, v in (("energy_j", energy_j), ("seconds", seconds)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise ValueError(f"{n} must be a non-negative number, not {v!r}")
    if seconds <= 0:
        raise ValueError("seconds must be > 0 to compute a power, not 0")
    if split is None:
        static = min(chip.energy.static_w, energy_j / seconds)
        split = PowerSplit(energy_j / seconds - static, 0.0, static)
    tdp = chip.tdp_w
    f_hi = chip.clock_ghz
    if power_at(chip, split, f_hi) <= tdp:
        return f_hi
    f_lo = min(power_table(chip).min_clock_ghz, f_hi)
    if power_at(chip, split, f_lo) > tdp:
        raise ValueError(f"chip {chip.name!r}: {power_at(chip, split, f_lo):.0f} W even at "
                         f"{f_lo:g} GHz exceeds its {tdp:g} W TDP (static {split.static_w:.0f} W)")
    for _ in range(60):
        mid = 0.5 * (f_lo + f_hi)
        if power_at(chip, split, mid) > tdp:
            f_hi = mid
        else:
            f_lo = mid
    return f_lo


def chip_at_clock(chip: "Chip", clock_ghz: float) -> "Chip":
    """``chip`` run at ``clock_ghz`` (≤ its clock): the core domain's energies per event (MACs,
    the fused attention kernels' extra energy per MAC, SRAM bytes, vector ops) scaled by
    ``(V(clock)/V(chip.clock))²`` and no ``[power]`` table (the chip a power-limited step
    re-runs on). DRAM, link and static figures stay; so does
    a ``[noc]`` table's energy per byte [assumption: a small share, slightly overstating the
    power of the slowed chip]. Raises ValueError for a clock above the chip's or not > 0."""
    if not 0.0 < clock_ghz <= chip.clock_ghz * (1 + 1e-12):
        raise ValueError(f"clock_ghz must be > 0 and <= the chip's {chip.clock_ghz:g} GHz, "
                         f"not {clock_ghz!r}")
    v2 = core_energy_scale(chip, clock_ghz)
    e = chip.energy
    macs = dataclasses.replace(e.pj_per_mac, **{d: v * v2 for d, v in e.pj_per_mac.items()})
    energy = dataclasses.replace(e, pj_per_mac=macs, pj_per_sram_byte=e.pj_per_sram_byte * v2,
                                 pj_per_vector_op=e.pj_per_vector_op * v2)
    kernels = {k: dataclasses.replace(a, pj_per_mac=a.pj_per_mac * v2)
               for k in ("attention", "attention_fa2")
               if (a := getattr(chip, k, None)) is not None and a.pj_per_mac}
    return dataclasses.replace(chip, clock_ghz=clock_ghz, power=None, energy=energy, **kernels)


def arrays_leakage_share(chip: "Chip") -> float:
    t = power_table(chip)
    if t.arrays_leakage_share is not None:
        return t.arrays_leakage_share
    parts = area_breakdown_mm2(chip)
    return parts["arrays"] / sum(parts.values())


def gated_static_savings_j(chip: "Chip", ops: Iterable[Mapping]) -> float:
    """Static energy (J, one chip) saved by power-gating idle arrays over ``ops``: records with
    ``seconds``, ``utilization`` (None: not an array op, arrays fully idle) and ``repeat``."""
    g = power_table(chip).gated_leakage_fraction
    if g >= 1.0:
        return 0.0
    watts = chip.energy.static_w * arrays_leakage_share(chip) * (1.0 - g)
    saved = 0.0
    for op in ops:
        u = op.get("utilization")
        u = 0.0 if u is None else min(1.0, max(0.0, u))
        saved += watts * (1.0 - u) * op.get("seconds", 0.0) * op.get("repeat", 1)
    return saved
