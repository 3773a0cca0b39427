"""arch: typed, frozen, validated descriptions of accelerator chips."""

from .chip import (DATAFLOWS, AreaTable, Chip, Dma, Dram, DtypeTable, EnergyTable,
                   Interconnect, Scratchpad, SharedBuffer, SystolicArray, TensorCore, VectorUnit)
from .chip import TENSOR_KINDS, Overheads, ResidencyPolicy
from .tables import CostTable, DieSpec, Noc, Package, PowerTable
from .dtypes import DTYPE_BYTES, DTYPES, check_dtype, dtype_bytes
from .loader import chip_from_dict, load_chip, load_chip_file, preset_names
from .schema import ConfigError, to_dict

__all__ = [
    "AreaTable", "Chip", "ConfigError", "CostTable", "DATAFLOWS", "DTYPES", "DTYPE_BYTES",
    "DieSpec", "Dma", "Dram", "Noc", "Package", "PowerTable",
    "DtypeTable", "EnergyTable", "Interconnect", "Scratchpad", "SharedBuffer", "SystolicArray", "TensorCore",
    "VectorUnit", "check_dtype", "chip_from_dict", "dtype_bytes", "load_chip", "load_chip_file",
    "preset_names", "to_dict", "TENSOR_KINDS", "Overheads", "ResidencyPolicy",
]
