"""Small floating-point element formats (FP8, FP6, FP4) and the E8M0 scale, in NumPy.

The formats of the OCP 8-bit Floating Point Specification (OFP8) v1.0 (2023) and of the OCP
Microscaling Formats (MX) Specification v1.0 (2023, §5.3):

======  ====  ====  ====  =========  ==========  ================================================
name    exp   man   bias  max        min normal  specials
======  ====  ====  ====  =========  ==========  ================================================
e4m3    4     3     7     448        2^-6        no Inf; NaN only S.1111.111 (OFP8 §4.1)
e5m2    5     2     15    57344      2^-14       IEEE-like: S.11111.00 = ±Inf, S.11111.xx NaN
e3m2    3     2     3     28         2^-2        none (MX §5.3.2: no Inf, no NaN)
e2m3    2     3     1     7.5        2^0         none
e2m1    2     1     1     6          2^0         none (MX §5.3.3)
======  ====  ====  ====  =========  ==========  ================================================

All have subnormals (exponent field 0: ``0.m × 2^(1 − bias)``) and signed zeros. Every value of
every format is exactly representable in float64 and in float32, which is what makes the NumPy
statements below exact.

* :func:`decode` — bit patterns → float64 values (NaN and ±Inf where the format has them);
* :func:`encode` — float64 values → bit patterns, round to nearest, ties to even, then either
  saturating (``saturate=True``: anything beyond the largest finite value becomes ±max, which
  is what OFP8 §5 calls the saturating conversion and what the MX conversion does with
  elements, MX §6.3) or IEEE overflow (``saturate=False``: beyond max + ½ ulp becomes ±Inf for
  E5M2 and NaN for E4M3, which has no Inf). NaN encodes as the format's NaN (E4M3 0x7F, E5M2
  0x7E) and as +0 in formats without one (FP6/FP4 never carry NaN; MX puts it in the scale).
* :func:`e8m0_decode` / E8M0: the MX scale, ``2^(code − 127)`` for codes 0…254, NaN for 0xFF
  (MX §5.4.1: no sign, no zero, no Inf).

Rounding is done on the table of representable values (sorted magnitudes; the midpoint between
two neighbours decides, a tie goes to the even code), not with bit arithmetic, so that it is
independent of the exact oracle in the tests, which rounds with ``fractions.Fraction``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["MiniFloat", "FORMATS", "get_format", "decode", "encode", "e8m0_decode",
           "E8M0_NAN"]

#: The E8M0 code for NaN (MX §5.4.1).
E8M0_NAN = 0xFF


@dataclass(frozen=True)
class MiniFloat:
    """A sign-exponent-mantissa format of ``1 + exp_bits + man_bits`` bits.

    ``specials`` is ``"ieee"`` (all-ones exponent: Inf with a zero mantissa, NaN otherwise),
    ``"e4m3"`` (no Inf; only S.1111.111 is NaN) or ``"none"`` (every code is a finite value).
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    specials: str

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value."""
        return 1 - self.bias

    @cached_property
    def table(self) -> np.ndarray:
        """float64 value of every code (``2**bits`` entries, NaN/Inf where the format has them)."""
        codes = np.arange(1 << self.bits, dtype=np.int64)
        sign = codes >> (self.bits - 1)
        e = (codes >> self.man_bits) & ((1 << self.exp_bits) - 1)
        m = codes & ((1 << self.man_bits) - 1)
        mag = np.where(e == 0, m * 2.0 ** (self.emin - self.man_bits),
                       (m + (1 << self.man_bits)) * 2.0 ** (e - self.bias - self.man_bits))
        top = e == (1 << self.exp_bits) - 1
        if self.specials == "ieee":
            mag = np.where(top & (m == 0), np.inf, np.where(top, np.nan, mag))
        elif self.specials == "e4m3":
            mag = np.where(top & (m == (1 << self.man_bits) - 1), np.nan, mag)
        return np.where(sign == 1, -mag, mag)

    @cached_property
    def max_value(self) -> float:
        """The largest finite value."""
        t = self.table
        return float(np.max(t[np.isfinite(t)]))

    @cached_property
    def emax(self) -> int:
        """Exponent of the largest normal value (MX §6.3 ``emax_elem``)."""
        return int(np.floor(np.log2(self.max_value)))

    @cached_property
    def nan_code(self) -> int | None:
        return {"ieee": (1 << (self.bits - 1)) - 2, "e4m3": (1 << (self.bits - 1)) - 1}.get(
            self.specials)

    @cached_property
    def _positive(self) -> tuple[np.ndarray, np.ndarray]:
        """Sorted finite non-negative values and their codes (+0 first, max last)."""
        half = 1 << (self.bits - 1)
        vals = self.table[:half]
        ok = np.isfinite(vals)
        codes = np.arange(half)[ok]
        order = np.argsort(vals[ok], kind="stable")
        return vals[ok][order], codes[order]


FORMATS: dict[str, MiniFloat] = {f.name: f for f in (
    MiniFloat("e4m3", 4, 3, 7, "e4m3"),
    MiniFloat("e5m2", 5, 2, 15, "ieee"),
    MiniFloat("e3m2", 3, 2, 3, "none"),
    MiniFloat("e2m3", 2, 3, 1, "none"),
    MiniFloat("e2m1", 2, 1, 1, "none"),
)}


def get_format(name: str) -> MiniFloat:
    """The :class:`MiniFloat` called ``name``; ValueError naming the value otherwise."""
    if name not in FORMATS:
        raise ValueError(f"element format must be one of {', '.join(FORMATS)}, not {name!r}")
    return FORMATS[name]


def _codes(fmt: MiniFloat, bits) -> np.ndarray:
    b = np.asarray(bits)
    if b.dtype.kind not in "ui" or (b.size and (b.min() < 0 or b.max() >= 1 << fmt.bits)):
        raise ValueError(f"{fmt.name} bit patterns must be integers in 0 .. {(1 << fmt.bits) - 1}")
    return b.astype(np.int64)


def decode(fmt: str | MiniFloat, bits) -> np.ndarray:
    """Bit patterns of ``fmt`` → exact float64 values."""
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    return f.table[_codes(f, bits)]


def encode(fmt: str | MiniFloat, x, saturate: bool = True) -> np.ndarray:
    """float64 values → ``fmt`` bit patterns (uint8), round to nearest even (see module doc)."""
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    x = np.asarray(x, dtype=np.float64)
    vals, codes = f._positive
    ax = np.abs(x)
    sign = np.signbit(x).astype(np.int64) << (f.bits - 1)
    # neighbours lo ≤ |x| ≤ hi on the value table, extended past max by max + ulp with code
    # max + 1 (standing for overflow; its parity decides the tie at max + ½ ulp, as IEEE
    # rounding with an unbounded exponent does: E5M2 overflows there, E4M3 stays at 448)
    ulp = vals[-1] - vals[-2]
    ext_vals = np.append(vals, vals[-1] + ulp)
    ext_codes = np.append(codes, codes[-1] + 1)
    with np.errstate(invalid="ignore"):
        hi_i = np.clip(np.searchsorted(ext_vals, np.where(np.isnan(ax), 0.0, ax), side="left"),
                       0, len(ext_vals) - 1)
    lo_i = np.maximum(hi_i - 1, 0)
    mid = (ext_vals[lo_i] + ext_vals[hi_i]) / 2          # exact: small values, one binade apart
    hi_even = (ext_codes[hi_i] & 1) == 0
    up = (ax > mid) | ((ax == mid) & hi_even) | (hi_i == lo_i)
    idx = np.where(up, hi_i, lo_i)
    overflow = (idx == len(vals)) | (ax > ext_vals[-1])
    code = ext_codes[np.minimum(idx, len(vals) - 1)]
    if not saturate:
        if f.specials == "ieee":
            code = np.where(overflow, (1 << (f.bits - 1)) - (1 << f.man_bits), code)   # Inf
        elif f.specials == "e4m3":
            code = np.where(overflow, f.nan_code, code)
    out = code | sign
    if f.nan_code is not None:
        out = np.where(np.isnan(x), f.nan_code, out)
    else:
        out = np.where(np.isnan(x), 0, out)
    return out.astype(np.uint8)


def e8m0_decode(codes) -> np.ndarray:
    """E8M0 scale codes → float64 ``2^(code − 127)`` (NaN for 0xFF)."""
    c = np.asarray(codes)
    if c.dtype.kind not in "ui" or (c.size and (c.min() < 0 or c.max() > 0xFF)):
        raise ValueError("E8M0 codes must be integers in 0 .. 255")
    c = c.astype(np.int64)
    return np.where(c == E8M0_NAN, np.nan, np.ldexp(1.0, c - 127))
