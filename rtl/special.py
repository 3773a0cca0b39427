"""Directed special-value steps for every PE datapath and mode: signed zeros in every operand
position, subnormals in and out, infinities, NaNs, overflow and the INT8 wrap-around.

One list of vectors serves every user, so what the unit tests check is what the bench runs:
the fast tier drives each datapath's combinational MAC and the dot4 unit with them
(``tests/rtl/test_rtl_special_values.py``), :func:`diptych.rtl.bench.special_plan` lays them out
as the directed ``special`` plan that the cocotb bench runs on Verilator and amaranth.sim
(dot4 arrays included), and the dot4 unit's scoreboard adds them to its standard set. No
expected result is stored here: every user computes it with the golden model
(:mod:`diptych.rtl.numerics_ref`, :mod:`diptych.rtl.dot_ref`).

A vector is one PE step, ``result = step(acc, a[0:n], b[0:n])``, in a mode at ``n`` MACs per step
(1: the ``int8``/``bf16``/``fp8`` datapaths and the BF16 mode of ``multi``/``fused``; 2: the 8-bit
modes of ``multi``/``fused``; 4: the ``dot4`` datapath, its unit and its arrays). A lane a vector does not use holds the
*neutral* product, A = −0 (INT8: 0) times B = +1: its product −0 leaves every sum unchanged
under every accumulation rule (``x + (−0) = x``, also for ``x = ±0``), so each vector means the
same at any rate. Elements are int8 values (INT8) or bit patterns (bf16, FP8); ``acc`` is int32 or
FP32 bits.

The classes (:data:`CLASSES`; :func:`classes` says which a mode has):

* ``zero``: ±0 in A, in B and in the accumulator, in every lane, against ±1 (and the format's
  maximum; every sign combination of zero products and a zero accumulator (the sum is −0 only
  when every term is −0); exact cancellation (+0 whatever the operands' signs). INT8: zeros in
  every position against −128, 127, −1 and accumulators at both ends of the range.
* ``subnormal-in``: subnormal A and B in every lane (FP8 keeps their values; bf16 reads them as
  zero of their sign) and subnormal accumulators (read as zero of their sign).
* ``subnormal-out`` (bf16 only): products and sums below 2⁻¹²⁶ flush to zero of their sign. In
  the FP8 modes no product or sum can land there (products are at least 2⁻³²; a sum of an FP32
  accumulator and FP8 products is 0 or at least 2⁻⁵⁵ in magnitude): unreachable, not tested.
* ``inf``: ±Inf in every position (bf16, E5M2, the accumulator) against finite values, zeros
  (Inf × 0 is NaN) and Infs of either sign; E4M3 has no Inf, its S.1111.000 (256) stands in every
  position instead.
* ``nan``: NaNs (quiet, signalling, negative with a payload; E4M3's S.1111.111) in every position:
  the canonical NaN comes out.
* ``overflow``: no datapath saturates (INT8 wraps, FP32 accumulation overflows to ±Inf, FP8 is an
  input format only, so E4M3's saturating conversion never happens in a PE); the class holds the
  format maxima (E4M3 448, E5M2 57344, bf16 and FP32 max) in every position, bf16 products that
  overflow, FP32 sums that pass FLT_MAX or tie into overflow, and FLT_MAX absorbing products
  (the dot4 rule rounds toward zero, so its sums stop at FLT_MAX).
* ``wrap`` (INT8 only): −128·−128 in every lane and int32 sums that wrap at both ends.
"""

from __future__ import annotations

from itertools import product
from typing import NamedTuple

from .numerics_ref import mode_formats

__all__ = ["CLASSES", "SpecialCase", "special_cases", "classes", "values", "neutral"]

CLASSES = ("zero", "subnormal-in", "subnormal-out", "inf", "nan", "overflow", "wrap")


class SpecialCase(NamedTuple):
    """One directed step: its class, a readable name, ``n`` A and B elements, the accumulator."""

    cls: str
    name: str
    a: tuple[int, ...]
    b: tuple[int, ...]
    acc: int


_NAN_FP32 = (0x7FC00000, 0xFFC00001, 0x7F800001)

#: Named values of each element format (and ``fp32``, the accumulator): bit patterns, int8 values.
_VALUES = {
    "int8": {"+0": 0, "+1": 1, "-1": -1, "+max": 127, "-max": -128},
    "int32": {"+0": 0, "+1": 1, "-1": 0xFFFFFFFF, "+max": 0x7FFFFFFF, "-max": 0x80000000},
    "bf16": {"+0": 0x0000, "-0": 0x8000, "+sub": 0x0001, "-sub": 0x807F, "+min": 0x0080,
             "-min": 0x8080, "+1": 0x3F80, "-1": 0xBF80, "+max": 0x7F7F, "-max": 0xFF7F,
             "+inf": 0x7F80, "-inf": 0xFF80, "nan": (0x7FC0, 0xFFC1, 0x7F81)},
    "e4m3": {"+0": 0x00, "-0": 0x80, "+sub": 0x01, "-sub": 0x87, "+min": 0x08, "-min": 0x88,
             "+1": 0x38, "-1": 0xB8, "+max": 0x7E, "-max": 0xFE, "256": 0x78, "-256": 0xF8,
             "nan": (0x7F, 0xFF)},
    "e5m2": {"+0": 0x00, "-0": 0x80, "+sub": 0x01, "-sub": 0x83, "+min": 0x04, "-min": 0x84,
             "+1": 0x3C, "-1": 0xBC, "+max": 0x7B, "-max": 0xFB, "+inf": 0x7C, "-inf": 0xFC,
             "nan": (0x7D, 0xFE, 0xFF)},
    "fp32": {"+0": 0, "-0": 0x80000000, "+sub": 0x00000001, "-sub": 0x807FFFFF,
             "+min": 0x00800000, "-min": 0x80800000, "+1": 0x3F800000, "-1": 0xBF800000,
             "+max": 0x7F7FFFFF, "-max": 0xFF7FFFFF, "+inf": 0x7F800000, "-inf": 0xFF800000,
             "nan": _NAN_FP32},
}


def values(fmt: str) -> dict:
    """The named special values of ``fmt`` (``int8``, ``int32``, ``bf16``, ``e4m3``, ``e5m2``,
    ``fp32``): ``"+0"``, ``"-0"``, ``"+sub"``, ``"+max"``, ``"+inf"``, ``"nan"`` (a tuple) …"""
    if fmt not in _VALUES:
        raise ValueError(f"fmt must be one of {', '.join(_VALUES)}, not {fmt!r}")
    return dict(_VALUES[fmt])


def neutral(mode: str) -> tuple[int, int]:
    """(A, B) elements of the neutral product of ``mode``: −0 × +1 (INT8: 0 × 1)."""
    fa, fb = mode_formats(mode)
    return _VALUES[fa].get("-0", 0), _VALUES[fb]["+1"]


def classes(mode: str) -> tuple[str, ...]:
    """The classes :func:`special_cases` produces for ``mode``."""
    if mode_formats(mode)[0] == "int8":
        return ("zero", "wrap")
    fp = ("zero", "subnormal-in", "inf", "nan", "overflow")
    return fp[:2] + ("subnormal-out",) + fp[2:] if mode == "bf16" else fp


def special_cases(mode: str, n: int = 1) -> tuple[SpecialCase, ...]:
    """The directed steps of ``mode`` at ``n`` (1, 2 or 4) MACs per step, classes in the order of
    :data:`CLASSES`, without duplicates (the first name of a step wins)."""
    if isinstance(n, bool) or n not in (1, 2, 4):
        raise ValueError(f"n must be 1, 2 or 4 MACs per step, not {n!r}")
    fa, fb = mode_formats(mode)
    build = _int8_cases if fa == "int8" else _fp_cases
    seen, out = set(), []
    for c in build(mode, n):
        key = (c.a, c.b, c.acc)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return tuple(out)


class _Maker:
    """Builds the steps of one mode: lanes not given hold the neutral product."""

    def __init__(self, mode: str, n: int):
        self.n = n
        fa, fb = mode_formats(mode)
        self.A, self.B = _VALUES[fa], _VALUES[fb]
        self.C = _VALUES["int32" if fa == "int8" else "fp32"]
        self.na, self.nb = neutral(mode)
        self.out: list[SpecialCase] = []

    def __call__(self, cls: str, name: str, acc, *lanes):
        """``lanes``: (lane, A element, B element); ``acc``: a name of ``C`` or bits. Names are
        looked up in the lane's format; an int is taken as it is."""
        a, b = [self.na] * self.n, [self.nb] * self.n
        for lane, x, y in lanes:
            a[lane] = self.A[x] if isinstance(x, str) else x
            b[lane] = self.B[y] if isinstance(y, str) else y
        acc = self.C[acc] if isinstance(acc, str) else acc
        self.out.append(SpecialCase(cls, name, tuple(a), tuple(b), acc))


def _int8_cases(mode: str, n: int) -> list[SpecialCase]:
    mk = _Maker(mode, n)
    for acc, lane, x in product(("+0", "-1", "-max"), range(n), ("+max", "-max", "-1")):
        mk("zero", f"0 × {x} in lane {lane}, acc {acc}", acc, (lane, "+0", x))
        mk("zero", f"{x} × 0 in lane {lane}, acc {acc}", acc, (lane, x, "+0"))
    mk("zero", "products cancel the accumulator", 16384 * n,
       *[(lane, "-max", "-max") for lane in range(n)])
    mk("zero", "products cancel each other", "+0",
       *[(lane, "+max" if lane % 2 else "-max", "+1") for lane in range(n)])
    for lane in range(n):
        mk("wrap", f"−128·−128 in lane {lane}", "+0", (lane, "-max", "-max"))
        mk("wrap", f"−128·127 in lane {lane} from −2³¹: wraps", "-max",
           (lane, "-max", "+max"))
    mk("wrap", "−128·−128 in every lane", "+0", *[(la, "-max", "-max") for la in range(n)])
    mk("wrap", "2³¹ − 1 + 1 wraps to −2³¹", "+max", (0, "+1", "+1"))
    mk("wrap", "−2³¹ − 1 wraps to 2³¹ − 1", "-max", (0, "-1", "+1"))
    mk("wrap", "2³¹ − 16384 + 16384 wraps to −2³¹", 2**31 - 16384, (0, "-max", "-max"))
    mk("wrap", "every lane's −128·−128 past 2³¹ − 1", 2**31 - 1,
       *[(la, "-max", "-max") for la in range(n)])
    return mk.out


def _lanes(n: int) -> tuple[int, ...]:
    """The lanes the per-lane loops visit: every lane of a 1- or 2-MAC step; the first and the
    last of the dot4 unit's four (its lanes are one design four times; the zero-sign loop still
    puts zeros in every lane)."""
    return tuple(range(n)) if n <= 2 else (0, n - 1)


def _fp_cases(mode: str, n: int) -> list[SpecialCase]:
    mk = _Maker(mode, n)
    A, B = mk.A, mk.B
    lanes = _lanes(n)
    # ---- zero: every position, both signs, against ±1 and (1 or 2 lanes) the format's max
    partners = ("+1", "-1", "+max") if n <= 2 else ("+1", "-1")
    for acc, lane, z, p in product(("+0", "-0"), lanes, ("+0", "-0"), partners):
        mk("zero", f"{z} × {p} in lane {lane}, acc {acc}", acc, (lane, z, p))
        mk("zero", f"{p} × {z} in lane {lane}, acc {acc}", acc, (lane, p, z))
    # every sign combination of zero products, zeros in A in even lanes and in B in odd ones
    # (the other way round with a −0 accumulator), with a zero accumulator of either sign;
    # subnormal accumulators (zeros of their sign) with all-equal signs
    for acc, signs in [(acc, s) for acc in ("+0", "-0") for s in product((0, 1), repeat=n)] + \
            [(acc, (s,) * n) for acc in ("+sub", "-sub") for s in (0, 1)]:
        flip = acc.startswith("-")
        terms = []
        for lane, s in enumerate(signs):
            zero = "-0" if s else "+0"
            terms.append((lane, zero, "+1") if (lane % 2 == 0) != flip else (lane, "+1", zero))
        mk("zero", f"zero products of signs {signs}, acc {acc}", acc, *terms)
    for acc, x, y in (("+1", "-1", "+1"), ("-1", "+1", "+1"), ("-1", "-1", "-1")):
        mk("zero", f"acc {acc} cancelled by {x} × {y}", acc, (0, x, y))
    if n >= 2:
        mk("zero", "two products cancel, acc −0", "-0", (0, "+1", "+1"), (1, "-1", "+1"))
        mk("zero", "two products cancel, acc +0", "+0", (0, "+1", "-1"), (1, "+1", "+1"))
        mk("zero", "acc cancelled by lane 0, lane 1 −0", "+1", (0, "-1", "+1"), (1, "-0", "+1"))
        mk("zero", "acc cancelled by lane 0, lane 1 +0", "-1", (0, "+1", "+1"), (1, "+0", "+1"))
    # ---- subnormal inputs: A and B in every lane, and the accumulator
    for lane, s, p in product(lanes, ("+sub", "-sub"), partners):
        mk("subnormal-in", f"{s} × {p} in lane {lane}, acc −0", "-0", (lane, s, p))
        mk("subnormal-in", f"{p} × {s} in lane {lane}, acc −0", "-0", (lane, p, s))
    for lane, sa, sb in product(sorted({0, n - 1}), ("+sub", "-sub"), ("+sub", "-sub")):
        mk("subnormal-in", f"{sa} × {sb} in lane {lane}, acc −0", "-0", (lane, sa, sb))
    for acc, (x, y) in product(("+sub", "-sub"), (("+1", "+1"), ("-0", "+1"), ("+0", "+1"),
                                                   ("+sub", "+1"), ("-1", "+min"))):
        mk("subnormal-in", f"subnormal acc {acc} + {x} × {y}", acc, (0, x, y))
    # ---- subnormal results (bf16: products and sums below 2^-126 flush, sign kept)
    if mode == "bf16":
        for acc, sa, sb in product(("+0", "-0", "+min"), (0x1F80, 0x9F80), (0x2000, 0xA000)):
            mk("subnormal-out", f"product 2^-127 of signs {sa >> 15}{sb >> 15} flushes, "
               f"acc {acc}", acc, (0, sa, sb))
        mk("subnormal-out", "1.5·2^-126 − 2^-126 flushes to +0", 0x00C00000, (0, "-min", "+1"))
        mk("subnormal-out", "−1.5·2^-126 + 2^-126 flushes to −0", 0x80C00000,
           (0, "+min", "+1"))
        mk("subnormal-out", "2^-126 − (1 + 2^-7)·2^-126 flushes to −0", "+min",
           (0, 0x8081, "+1"))
    # ---- infinities (E4M3 has none: its S.1111.000 is 256)
    infs = [s for s in ("+inf", "-inf", "256", "-256") if s in A or s in B]
    for lane, i, p in product(lanes, infs, ("+1", "-1", "+0", "-0", "+sub")):
        if i in A:
            mk("inf", f"{i} × {p} in lane {lane}, acc +1", "+1", (lane, i, p))
        if i in B:
            mk("inf", f"{p} × {i} in lane {lane}, acc +1", "+1", (lane, p, i))
    for acc, (x, y) in product(("+inf", "-inf"), (("+1", "+1"), ("-0", "+1"), ("+max", "+max"),
                                                   ("+inf", "+1"), ("-inf", "+1"),
                                                   ("+1", "+inf"), ("+1", "-inf"))):
        if x in A and y in B:
            mk("inf", f"acc {acc} + {x} × {y}", acc, (0, x, y))
    if n >= 2:
        for x, y in product(("+inf", "-inf"), repeat=2):
            if x in A:
                mk("inf", f"{x} and {y} products", "+1", (0, x, "+1"), (n - 1, y, "+1"))
            if x in B:
                mk("inf", f"{x} and {y} products (in B)", "+1", (0, "+1", x), (n - 1, "+1", y))
        if "+inf" in A:
            mk("inf", "an Inf product and Inf × 0", "+1", (0, "+inf", "+1"), (1, "+inf", "+0"))
    # ---- NaNs in every position
    for lane, p in product(lanes, ("+1", "+0")):
        for nan in A["nan"]:
            mk("nan", f"NaN {nan:#x} × {p} in lane {lane}", "+1", (lane, nan, p))
        for nan in B["nan"]:
            mk("nan", f"{p} × NaN {nan:#x} in lane {lane}", "+1", (lane, p, nan))
    for nan, (x, y) in product(_NAN_FP32, (("+1", "+1"), ("-0", "+1"), ("+inf", "+1"))):
        if x in A:
            mk("nan", f"NaN acc {nan:#x} + {x} × {y}", nan, (0, x, y))
    # ---- overflow and format maxima
    for lane, x, y in product(lanes, ("+max", "-max"), ("+max", "-max")):
        mk("overflow", f"{x} × {y} in lane {lane}, acc +0", "+0", (lane, x, y))
    for acc, x in product(("+max", "-max"), ("+max", "-max")):
        mk("overflow", f"FLT_MAX-sized acc {acc} + {x} × +max", acc, (0, x, "+max"))
        mk("overflow", f"FLT_MAX-sized acc {acc} + {x} × +max in every lane", acc,
           *[(la, x, "+max") for la in range(n)])
    if mode == "bf16":                # 2^64 · 2^64 = 2^128; FLT_MAX + 1, ½ and ¼ ulp (2^104)
        mk("overflow", "2^64 · 2^64 overflows the product", "+0", (0, 0x5F80, 0x5F80))
        for acc, sign in (("+max", 0), ("-max", 0x8000)):
            for yb, what in ((0x5380, "one ulp"), (0x5300, "half an ulp, ties"),
                             (0x5280, "a quarter ulp")):
                mk("overflow", f"{acc} + {what}", acc, (0, 0x5F80 | sign, yb))
    return mk.out
