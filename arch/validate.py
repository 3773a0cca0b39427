"""Checks of a loaded chip that need more than one of its tables.

The record (:mod:`diptych.arch.chip`, :mod:`diptych.arch.tables`) checks each field and the
fields of one table against each other while it is built; what needs the derived physical
views (the package's split of cores and stacks, a stated die outline against the modelled
blocks, the area budget against the modelled die) runs here, after the record exists, when a
chip is loaded (:func:`diptych.arch.loader.chip_from_dict`). Errors are
:class:`~diptych.arch.schema.ConfigError` s naming the file, the key, the value and what was
expected.
"""

from __future__ import annotations

from . import geometry, package
from .area import die_area_mm2
from .chip import Chip
from .schema import fail


def validate_chip(chip: Chip, source: str | None = None) -> Chip:
    """Raise ConfigError if ``chip``'s tables contradict each other; return it otherwise."""
    package.validate_chip(chip, source)
    geometry.validate_chip(chip, source)
    if chip.area_budget_mm2:
        area = die_area_mm2(chip)
        if area > chip.area_budget_mm2 * (1 + 1e-9):
            fail(source, "area_budget_mm2", chip.area_budget_mm2,
                 f"at least the modelled die area ({area:.1f} mm²)")
    return chip
