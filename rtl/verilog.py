"""Verilog for a :class:`~diptych.rtl.array.SystolicArray` (Amaranth's builtin Yosys backend)."""

from __future__ import annotations

from pathlib import Path

from amaranth.back import verilog

from .array import SystolicArray

__all__ = ["array_verilog", "write_array_verilog", "toplevel_name"]


def toplevel_name(rows: int, cols: int, dtype: str, dataflow: str) -> str:
    """Module name of the generated top level, e.g. ``systolic_int8_os_8x8``."""
    return f"systolic_{dtype}_{dataflow}_{rows}x{cols}"


def array_verilog(rows: int, cols: int, dtype: str, dataflow: str) -> str:
    """Verilog text of the array; ports ``clk``, ``rst`` (synchronous) and the signature's."""
    dut = SystolicArray(rows, cols, dtype, dataflow)
    return verilog.convert(dut, name=toplevel_name(rows, cols, dtype, dataflow),
                           emit_src=False)


def write_array_verilog(path, rows: int, cols: int, dtype: str, dataflow: str) -> Path:
    """Write the array's Verilog to ``path`` and return it as a Path."""
    path = Path(path)
    text = array_verilog(rows, cols, dtype, dataflow)
    path.write_text(text)
    return path
