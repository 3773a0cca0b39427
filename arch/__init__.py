"""arch: typed, frozen, validated descriptions of accelerator chips.

The names below load on first use (PEP 562), so that importing one light module of the
package (``diptych.arch.dtypes``, for ``diptych models show``) does not build the chip's
records and the loader too (issue 27, start-up).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - what the lazy names are, for readers and checkers
    from .chip import (DATAFLOWS, TENSOR_KINDS, AreaTable, Chip, Dma, Dram, DtypeTable,
                       EnergyTable, Interconnect, Overheads, ResidencyPolicy, Scratchpad,
                       SharedBuffer, SystolicArray, TensorCore, VectorUnit)
    from .dtypes import DTYPE_BYTES, DTYPES, check_dtype, dtype_bytes
    from .loader import chip_from_dict, load_chip, load_chip_file, preset_names
    from .schema import ConfigError, to_dict
    from .tables import CostTable, DieSpec, Noc, Package, PowerTable

#: Public name → the submodule that defines it.
_HOME = {
    **dict.fromkeys(("DATAFLOWS", "TENSOR_KINDS", "AreaTable", "Chip", "Dma", "Dram",
                     "DtypeTable", "EnergyTable", "Interconnect", "Overheads",
                     "ResidencyPolicy", "Scratchpad", "SharedBuffer", "SystolicArray",
                     "TensorCore", "VectorUnit"), "chip"),
    **dict.fromkeys(("CostTable", "DieSpec", "Noc", "Package", "PowerTable"), "tables"),
    **dict.fromkeys(("DTYPE_BYTES", "DTYPES", "check_dtype", "dtype_bytes"), "dtypes"),
    **dict.fromkeys(("chip_from_dict", "load_chip", "load_chip_file", "preset_names"),
                    "loader"),
    **dict.fromkeys(("ConfigError", "to_dict"), "schema"),
}

__all__ = [
    "AreaTable", "Chip", "ConfigError", "CostTable", "DATAFLOWS", "DTYPES", "DTYPE_BYTES",
    "DieSpec", "Dma", "Dram", "Noc", "Package", "PowerTable",
    "DtypeTable", "EnergyTable", "Interconnect", "Scratchpad", "SharedBuffer", "SystolicArray",
    "TensorCore", "VectorUnit", "check_dtype", "chip_from_dict", "dtype_bytes", "load_chip",
    "load_chip_file", "preset_names", "to_dict", "TENSOR_KINDS", "Overheads", "ResidencyPolicy",
]
assert sorted(__all__) == sorted(_HOME)


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value      # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
