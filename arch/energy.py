"""Energy and power model: event counts times the chip's per-event energies, plus leakage.

The engine counts events (MACs by precision, scratchpad bytes, DRAM bytes, link bytes, vector
ops) and the elapsed time; this module turns them into joules using the chip's
:class:`~diptych.arch.chip.EnergyTable`:

* ``mac``:    Σ_dtype MACs[dtype] × ``pj_per_mac[dtype]``
* ``sram``:   scratchpad bytes read + written × ``pj_per_sram_byte``
* ``dram``:   DRAM bytes × 8 × ``pj_per_dram_bit`` (device + PHY + controller)
* ``link``:   bytes sent over chip-to-chip links × 8 × ``pj_per_link_bit``
* ``vector``: vector-unit ops × ``pj_per_vector_op``
* ``static``: ``static_w`` × seconds (leakage and idle clocking for the whole run)
* ``noc``:    bytes on the on-chip network (DRAM and shared-buffer bytes) × the NoC's pJ/byte
  (:func:`~diptych.arch.noc.noc_report`), for a chip with a ``[noc]`` table
* ``d2d``:    DRAM bytes × the D2D pJ per DRAM byte (:func:`~diptych.arch.package.d2d_report`),
  for a multi-die ``[package]``

(``noc`` and ``d2d`` only when ``noc_bytes`` is given, and only for a chip with the table.)

Power is energy ÷ time, checked against the chip's ``tdp_w``: a run whose average power
exceeds the TDP could not sustain that speed on a real part, and is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from .dtypes import DTYPES

if TYPE_CHECKING:  # pragma: no cover
    from .chip import Chip

PJ = 1e-12

#: The blocks of :func:`energy_breakdown_j`, in order.
ENERGY_BLOCKS: tuple[str, ...] = ("mac", "sram", "dram", "link", "vector", "static")


def _count(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value < 0:
        raise ValueError(f"{name} must be a non-negative number, not {value!r}")
    return float(value)


def energy_breakdown_j(chip: "Chip", *, macs: Mapping[str, float] | None = None,
                       sram_bytes: float = 0.0, dram_bytes: float = 0.0,
                       link_bytes: float = 0.0, vector_ops: float = 0.0,
                       seconds: float = 0.0, noc_bytes: float | None = None) -> dict[str, float]:
    """Energy in joules by block (:data:`ENERGY_BLOCKS`, then ``noc`` and ``d2d`` where they
    apply: see the module docstring); the values sum to the total.

    ``macs`` maps a dtype name to a MAC count in that precision; MACs in a dtype the chip's
    arrays do not support are rejected (they cannot have happened).
    """
    e = chip.energy
    mac_pj = 0.0
    for dtype, n in (macs or {}).items():
        if dtype not in DTYPES:
            raise ValueError(f"macs key must be one of {', '.join(DTYPES)}, not {dtype!r}")
        n = _count(f"macs[{dtype!r}]", n)
        if n and not chip.supports(dtype):
            raise ValueError(f"macs[{dtype!r}]: chip {chip.name!r} has no {dtype} datapath "
                             f"(supported: {', '.join(chip.dtypes)})")
        mac_pj += n * e.pj_per_mac[dtype]
    out = {
        "mac": mac_pj * PJ,
        "sram": _count("sram_bytes", sram_bytes) * e.pj_per_sram_byte * PJ,
        "dram": _count("dram_bytes", dram_bytes) * 8.0 * e.pj_per_dram_bit * PJ,
        "link": _count("link_bytes", link_bytes) * 8.0 * e.pj_per_link_bit * PJ,
        "vector": _count("vector_ops", vector_ops) * e.pj_per_vector_op * PJ,
        "static": _count("seconds", seconds) * e.static_w,
    }
    if noc_bytes is not None:
        from .noc import noc_report
        from .package import d2d_report
        noc = noc_report(chip) if chip.has_dram else None
        if noc is not None:
            out["noc"] = _count("noc_bytes", noc_bytes) * noc.pj_per_byte * PJ
        pkg = getattr(chip, "package", None)
        if pkg is not None and pkg.dies > 1 and chip.has_dram:
            out["d2d"] = float(dram_bytes) * d2d_report(chip).pj_per_dram_byte * PJ
    return out


def energy_j(chip: "Chip", **counts) -> float:
    """Total energy in joules: the sum of :func:`energy_breakdown_j`."""
    return sum(energy_breakdown_j(chip, **counts).values())


@dataclass(frozen=True)
class PowerCheck:
    """Average power of a run against the chip's TDP."""

    energy_j: float
    seconds: float
    power_w: float
    tdp_w: float

    @property
    def exceeds_tdp(self) -> bool:
        return self.power_w > self.tdp_w

    @property
    def tdp_fraction(self) -> float:
        return self.power_w / self.tdp_w

    def describe(self) -> str:
        flag = " EXCEEDS TDP" if self.exceeds_tdp else ""
        return f"{self.power_w:.0f} W of {self.tdp_w:.0f} W TDP ({self.tdp_fraction:.0%}){flag}"


def power_check(chip: "Chip", energy_j: float, seconds: float) -> PowerCheck:
    """Average power = ``energy_j`` ÷ ``seconds`` (W), compared with ``chip.tdp_w``."""
    energy_j = _count("energy_j", energy_j)
    seconds = _count("seconds", seconds)
    if seconds == 0:
        raise ValueError("seconds must be > 0 to compute a power, not 0")
    return PowerCheck(energy_j=energy_j, seconds=seconds, power_w=energy_j / seconds,
                      tdp_w=chip.tdp_w)
