"""Die-area model: a sum of blocks, each a count times a technology coefficient.

* arrays: every PE is sized by its most expensive precision mode,
  ``max_d(macs_per_pe_per_cycle[d] × mm2_per_mac[d])``; narrower modes reuse (bit-slice) that
  datapath, as multi-precision MAC units do;
* SRAM: scratchpad + accumulator MiB of every core, plus the chip-level shared buffer (L2,
  CMEM) when there is one, × mm² per MiB;
* vector units: lanes × mm² per lane;
* DRAM PHY + controller per stack (PHYs do not shrink with the node; none on an all-SRAM
  chip);
* interconnect SerDes per link; plus a fixed overhead (control, NoC, PCIe, pads), and the fixed
  logic of any IO dies of a chiplet package;
* ``d2d``: die-to-die PHYs of a chiplet package (:mod:`diptych.arch.package`; 0 when
  monolithic);
* ``spare_cores``: tensor cores fused off for yield (``[die] spare_cores``; 0 when none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .chip import Chip


#: The blocks of :func:`area_breakdown_mm2`, in floorplan order.
AREA_BLOCKS: tuple[str, ...] = ("arrays", "sram", "vector", "dram_phy", "interconnect", "overhead",
                                 "d2d", "spare_cores")


def pe_area_mm2(chip: "Chip") -> float:
    """Area of one PE: the largest of macs_per_pe_per_cycle × mm²/MAC over supported dtypes."""
    macs = chip.core.array.macs_per_pe_per_cycle
    per_mac = chip.area.mm2_per_mac
    return max(macs[d] * per_mac[d] for d in chip.core.array.dtypes)


def area_breakdown_mm2(chip: "Chip") -> dict[str, float]:
    """Die area by block in mm²; the blocks sum to :func:`die_area_mm2`."""
    a = chip.area
    sp = chip.core.scratchpad
    pkg = getattr(chip, "package", None)
    die = getattr(chip, "die", None)
    spares = die.spare_cores if die is not None else 0
    return {
        "arrays": chip.arrays * chip.core.array.pes * pe_area_mm2(chip),
        "sram": (chip.tensor_cores * (sp.capacity_mib + sp.accumulator_mib)
                 + (chip.shared_buffer.capacity_mib if chip.shared_buffer else 0.0))
                * a.mm2_per_mib_sram,
        "vector": chip.tensor_cores * chip.core.vector.lanes * a.mm2_per_vector_lane,
        "dram_phy": (chip.dram.stacks if chip.dram is not None else 0) * a.mm2_per_hbm_phy
                    + sum(t.phys * t.mm2_per_phy for _, t in chip.memory_tiers),
        "interconnect": chip.interconnect.links * a.mm2_per_link,
        "overhead": a.fixed_overhead_mm2
                    + (pkg.io_dies * pkg.io_die_overhead_mm2 if pkg is not None else 0.0),
        "d2d": d2d_area_mm2(chip),
        "spare_cores": spares * core_area_mm2(chip) if spares else 0.0,
    }


def die_area_mm2(chip: "Chip") -> float:
    """The modelled die area in mm²: the sum of :func:`area_breakdown_mm2`."""
    return sum(area_breakdown_mm2(chip).values())


def core_area_mm2(chip: "Chip") -> float:
    """Area of one tensor core: its arrays, scratchpad (+ accumulators) and vector lanes."""
    sp = chip.core.scratchpad
    a = chip.area
    return (chip.core.arrays * chip.core.array.pes * pe_area_mm2(chip)
            + (sp.capacity_mib + sp.accumulator_mib) * a.mm2_per_mib_sram
            + chip.core.vector.lanes * a.mm2_per_vector_lane)


def d2d_area_mm2(chip: "Chip") -> float:
    """D2D PHY area of the whole package: every interface on both of its dies."""
    pkg = getattr(chip, "package", None)
    if pkg is None:
        return 0.0
    return 2 * pkg.interfaces() * pkg.d2d_edge_mm * pkg.d2d_mm2_per_mm


def area_shares(chip: "Chip") -> dict[str, float]:
    """Each block's fraction of the die (they sum to 1)."""
    parts = area_breakdown_mm2(chip)
    total = sum(parts.values())
    return {k: v / total for k, v in parts.items()}


def mac_area_ratio(chip: "Chip", numerator: str, denominator: str) -> float:
    """Area of one ``numerator`` MAC over one ``denominator`` MAC in the chip's area table.

    E.g. ``mac_area_ratio(chip, "int8", "bf16")``, the figure cross-checked against the Yosys
    cell areas of ``diptych rtl area``.
    """
    table = chip.area.mm2_per_mac
    for d in (numerator, denominator):
        if table[d] <= 0:
            raise ValueError(f"area.mm2_per_mac.{d} must be > 0 for a ratio, not {table[d]!r}")
    return table[numerator] / table[denominator]
