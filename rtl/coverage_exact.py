"""Rounding classes of a block-scaled plan's outputs, from their exact values (issue 26 item 6).

For the block-scaled datapaths (``mx``, ``mxdot4``, ``mxint8``, ``fp4dot8``) every FP32 output
is a rounding of an exact value the plan fixes: the sum of the tile's products, each times its
two block scales (E8M0; NVFP4's E4M3) and MXINT8's 2^-6 per element, plus the top-edge partial
sum (WS). This module
re-derives that value from the plan's **lanes alone** (elements decoded by
:func:`diptych.rtl.minifloat.decode`, INT8 codes as two's complement; E8M0 scales
``2^(code − 127)``, E4M3 ones by the minifloat decoder),
independently of the golden model, and counts per finite output:

* ``inexact_out``: the output differs from the exact value (some step rounded or truncated);
* ``tie_out``: the exact value is a normal FP32 magnitude exactly half-way between two adjacent
  FP32 values (24 significant bits plus a half: round-to-nearest-even decides on the ``mx`` PE,
  the others must truncate);
* ``subnormal_exact``: the exact value is nonzero and below 2^-126 (the datapaths flush it: the
  output is a zero);
* ``saturated_out``: the output is ±0x7F7FFFFF (the largest finite FP32) and the exact value
  lies beyond it (the round-toward-zero datapaths saturate; ``mx`` overflows to Inf instead,
  ``inf_out``).

Outputs that are NaN or Inf, or whose tile has a NaN scale, NaN/Inf element or NaN/Inf partial
sum in their row or column, are not classed (their exact value is not a number).
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from functools import lru_cache

import numpy as np

from .datapath import FP4_MODES, MX_MODES
from .minifloat import FORMATS, decode
from .plan import Plan, unpack

__all__ = ["EXACT_CLASSES", "exact_counts"]

EXACT_CLASSES = ("inexact_out", "tie_out", "subnormal_exact", "saturated_out")

_GROUP = 4
_FP32_MAX = Fraction(2**24 - 1) * Fraction(2) ** 104
_MIN_NORMAL = Fraction(2) ** -126


@lru_cache(maxsize=None)
def _decoder(mode: str):
    """(A's, B's element decoder: code → Fraction or None for NaN/Inf; the scale decoder: code
    → Fraction or None for NaN; elements per lane; bits per element) of ``mode``."""
    if mode == "mxint8":
        def dec(code):
            return Fraction(((code & 0xFF) ^ 0x80) - 0x80, 64)
        return dec, dec, _e8m0, _GROUP, 8
    if mode in FP4_MODES:                  # fp4dot8: eight E2M1 codes, E8M0 or E4M3 scales
        elem, scale, _ = FP4_MODES[mode]
        e2m1 = _table("e2m1")
        return e2m1, e2m1, (_e8m0 if scale == "e8m0" else _table("e4m3")), 8, 4
    out = [_table(fmt) for fmt in MX_MODES[mode]]
    return out[0], out[1], _e8m0, _GROUP, 8


@lru_cache(maxsize=None)
def _table(fmt: str):
    """code → Fraction or None (NaN/Inf) of the minifloat ``fmt``."""
    table = decode(fmt, np.arange(256, dtype=np.uint8) & ((1 << _bits(fmt)) - 1))
    return [None if not np.isfinite(v) else Fraction(float(v)) for v in table].__getitem__


def _e8m0(code: int):
    """An E8M0 scale: ``2^(code − 127)``, None for the NaN code 0xFF."""
    return None if code == 0xFF else Fraction(2) ** (code - 127)


def _bits(fmt: str) -> int:
    return FORMATS[fmt].bits


def _lane(word: int, dec):
    """(elements or None for a NaN/Inf element, scale or None for NaN) of one 40-bit lane;
    ``dec`` is :func:`_decoder`'s tuple."""
    da, sdec, group, bits = dec
    els = [da(e) for e in unpack(word & ((1 << 32) - 1), bits, group)]
    return (None if any(e is None for e in els) else els, sdec(word >> 32))


def _dot(x, y):
    """The unscaled dot of two lanes, and their scales' product (None: not a number)."""
    if x[0] is None or y[0] is None:
        return None, None
    return (sum(p * q for p, q in zip(x[0], y[0])),
            None if x[1] is None or y[1] is None else x[1] * y[1])


def _add(total, value):
    return None if total is None or value is None else total + value


def _fp32(bits: int):
    e, f, s = (bits >> 23) & 0xFF, bits & 0x7FFFFF, bits >> 31
    if e == 0xFF:
        return None
    v = Fraction(f, 2**23) * Fraction(2) ** -126 if e == 0 else \
        (1 + Fraction(f, 2**23)) * Fraction(2) ** (e - 127)
    return -v if s else v


def _classes(exact, word: int) -> list[str]:
    got = _fp32(word)
    if exact is None or got is None:
        return []
    out = []
    a = abs(exact)
    if got != exact:
        out.append("inexact_out")
    if _MIN_NORMAL <= a <= _FP32_MAX:
        e = a.numerator.bit_length() - a.denominator.bit_length()   # floor(log2 a) or + 1
        e = e - 1 if a < Fraction(2) ** e else e
        units = a / Fraction(2) ** (e - 23)
        if units.denominator == 2:
            out.append("tie_out")
    elif 0 < a < _MIN_NORMAL:
        out.append("subnormal_exact")
    if (word & 0x7FFFFFFF) == 0x7F7FFFFF and a > _FP32_MAX:
        out.append("saturated_out")
    return out


def exact_counts(plan: Plan, tiles, rows_per_tile) -> Counter:
    """The classes of :data:`EXACT_CLASSES` over ``plan``'s FP32 outputs: ``tiles`` the issue
    stretches of each tile (``diptych.rtl.coverage``'s grouping), ``rows_per_tile[t]`` the
    expected output words of tile t in the order of ``plan.predicted[t]``."""
    c = Counter(dict.fromkeys(EXACT_CLASSES, 0))
    loads = sorted(cy for cy, v in plan.inputs.items() if v.get("w_load"))
    for t, tile in enumerate(tiles):
        da, db, sdec, group, bits = _decoder(plan.modes[t])
        da, db = (da, sdec, group, bits), (db, sdec, group, bits)
        R, C, lane = plan.rows, plan.cols, plan.lane_bits
        if plan.dataflow == "os":
            # an mx block's scales are in its closing step's lanes only (random bits before)
            closes = plan.block_port
            acc = [[Fraction(0)] * C for _ in range(R)]
            blk = [[Fraction(0)] * C for _ in range(R)]
            for first, last, v in tile:
                a = [_lane(x, da) for x in unpack(v["a_data"], lane, R)]
                b = [_lane(x, db) for x in unpack(v["b_data"], lane, C)]
                close = v.get("in_block_last") or v.get("in_last")
                for i in range(R):
                    for j in range(C):
                        d, scale = _dot(a[i], b[j])
                        if not closes:
                            acc[i][j] = _add(acc[i][j], None if scale is None
                                             else d * scale * (last - first + 1))
                            continue
                        blk[i][j] = _add(blk[i][j], None if d is None
                                         else d * (last - first + 1))
                        if close:
                            acc[i][j] = _add(acc[i][j], None if scale is None or blk[i][j]
                                             is None else blk[i][j] * scale)
                            blk[i][j] = Fraction(0)
            exact = acc                                  # output i is row i of C
        else:
            first_row = tile[0][0]
            mine = [cy for cy in loads if cy < first_row][-R:]
            w = {R - 1 - r: unpack(plan.inputs[cy]["w_data"], lane, C) for r, cy in enumerate(mine)}
            exact = []
            for first, last, v in tile:
                for _ in range(first, last + 1):
                    a = [_lane(x, da) for x in unpack(v["a_data"], lane, R)]
                    row = []
                    for j, p in enumerate(unpack(v["psum_data"], 32, C)):
                        s = _fp32(p)
                        if s is not None and (p >> 23) & 0xFF == 0:
                            s = Fraction(0)                # a subnormal partial sum reads as 0
                        for i in range(R):
                            d, scale = _dot(a[i], _lane(w[i][j], db))
                            s = _add(s, None if scale is None else d * scale)
                        row.append(s)
                    exact.append(row)
        for i, words in enumerate(rows_per_tile[t]):
            for j, word in enumerate(words):
                for k in _classes(exact[i][j], word):
                    c[k] += 1
    return c
