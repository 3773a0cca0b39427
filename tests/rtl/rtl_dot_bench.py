"""Scoreboard of the dot4 FP8 unit (diptych.rtl.dot) in amaranth.sim against the golden rule.

Shared by tests/rtl/test_rtl_dot.py and the mutation test (rtl_mutants.py): :func:`cases` is the
standard vector set (directed classes and random groups in every FP8 mode), :func:`run` drives a
``Dot4Fp8`` with it, :func:`mismatches` compares with :func:`diptych.rtl.dot_ref.dot4_bits`.
"""

from __future__ import annotations

import numpy as np
from amaranth.sim import Simulator

from diptych.rtl.datapath import MODE_CODES
from diptych.rtl.numerics_ref import mode_formats
from diptych.rtl.dot_ref import DOT_FRAC_BITS, dot4_bits
from diptych.rtl.minifloat import encode
from diptych.rtl.special import special_cases

FP8_MODES = ("e4m3", "e5m2", "e4m3xe5m2", "e5m2xe4m3")


def f32(v: float) -> int:
    return int(np.asarray(v, np.float32).view(np.uint32))


def f8(fmt: str, v: float) -> int:
    """FP8 code of ``v`` (which must be representable)."""
    return int(encode(fmt, np.float64(v)))


def directed() -> list[tuple[str, str, tuple, tuple, int]]:
    """(name, mode, a codes, b codes, acc bits): the classes the unit must get right."""
    e4, e5 = (lambda v: f8("e4m3", v)), (lambda v: f8("e5m2", v))
    one4, one5 = e4(1.0), e5(1.0)
    z = (0, 0, 0, 0)
    return [
        ("all zero", "e4m3", z, z, 0),
        ("all minus zero", "e4m3", (0x80,) * 4, z, 0x80000000),
        ("minus-zero products, +0 acc", "e4m3", (0x80,) * 4, z, 0),
        ("exact cancellation", "e4m3", (one4, e4(-1.0), e4(2.0), e4(-2.0)), (one4,) * 4, 0),
        ("product cancels the accumulator", "e4m3", (e4(-1.0), 0, 0, 0), (one4, 0, 0, 0),
         f32(1.0)),
        # the sum is what three products lose to a 26-bit window (a 25-bit one loses them all)
        ("cancellation leaves a tail", "e5m2", (e5(-1.0),) + (e5(1.75 * 2**-13),) * 3,
         (one5,) + (e5(2**-13),) * 3, f32(1.0)),
        ("products fall out of the window", "e5m2", (e5(-2**-15),) * 4, (e5(2**-15),) * 4,
         f32(1.0)),
        ("accumulator falls out of the window", "e4m3", (e4(448.0),) * 4, (e4(448.0),) * 4,
         f32(2**-12)),
        ("subnormal E4M3 inputs", "e4m3", (0x01, 0x07, 0x81, 0x04), (0x01, 0x38, 0x03, 0x07), 0),
        ("subnormal E5M2 inputs", "e5m2", (0x01, 0x03, 0x82, 0x01), (0x01, 0x3C, 0x03, 0x7B), 0),
        ("E4M3 max", "e4m3", (0x7E,) * 4, (0x7E,) * 4, 0),
        ("E4M3 max, negative", "e4m3", (0xFE,) * 4, (0x7E,) * 4, f32(-1e6)),
        ("E5M2 max", "e5m2", (0x7B,) * 4, (0x7B,) * 4, f32(3e38)),
        ("FP32 max accumulator absorbs the products", "e5m2", (0x7B,) * 4, (0x7B,) * 4, 0x7F7FFFFF),
        ("E5M2 Inf", "e5m2", (0x7C, 0, 0, 0), (one5, 0, 0, 0), f32(5.0)),
        ("E5M2 -Inf", "e5m2", (0xFC, one5, 0, 0), (one5, one5, 0, 0), 0),
        ("Inf x 0", "e5m2", (0x7C, 0, 0, 0), (0x00, 0, 0, 0), 0),
        ("Infs of both signs", "e5m2", (0x7C, 0xFC, 0, 0), (one5, one5, 0, 0), 0),
        ("Inf accumulator, opposite Inf product", "e5m2", (0xFC,) * 4, (one5,) * 4, 0x7F800000),
        ("Inf accumulator", "e4m3", (one4,) * 4, (one4,) * 4, 0xFF800000),
        ("E5M2 NaN", "e5m2", (0x7D, 0, 0, 0), (one5, 0, 0, 0), 0),
        ("E4M3 NaN", "e4m3", (0, 0, 0x7F, 0), (0, 0, one4, 0), 0),
        ("NaN accumulator", "e4m3", z, z, 0x7FC00001),
        ("subnormal accumulator reads as zero", "e4m3", (one4, 0, 0, 0), (one4, 0, 0, 0),
         0x00400000),
        ("mixed formats", "e4m3xe5m2", (e4(1.5), e4(-3.0), 0x01, 0x7E), (e5(1.25), e5(0.5),
                                                                         0x01, 0x7B), f32(7.0)),
        ("mixed formats, other way", "e5m2xe4m3", (e5(1.25), 0x7B, 0, 0), (e4(1.5), 0x7E, 0, 0),
         f32(-3.0)),
    ]


def random_cases(seed: int, n: int) -> list[tuple[str, tuple, tuple, int]]:
    """``n`` random groups: uniform codes in every mode; accumulators half uniform bits, half
    near the products' magnitudes (so alignment, truncation and cancellation all occur)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        mode = FP8_MODES[i % 4]
        a, b = rng.integers(0, 256, 4), rng.integers(0, 256, 4)
        if rng.random() < 0.5:
            acc = int(rng.integers(0, 2**32))
        else:
            acc = f32(rng.standard_normal() * 2.0 ** rng.integers(-30, 30))
        out.append((mode, tuple(int(x) for x in a), tuple(int(x) for x in b), acc))
    return out


def cases(seed: int = 5, n: int = 600) -> list[tuple[str, tuple, tuple, int]]:
    """The standard set: every directed case, then ``n`` random groups."""
    return [c[1:] for c in directed()] + random_cases(seed, n)


def special(modes=FP8_MODES) -> list[tuple[str, tuple, tuple, int]]:
    """The special-value steps (:mod:`diptych.rtl.special`) of ``modes`` (default: every FP8
    mode) at four products per step: signed zeros in every position, subnormals, Inf, NaN,
    format maxima."""
    return [(mode, c.a, c.b, c.acc) for mode in modes for c in special_cases(mode, 4)]


def _pack(codes) -> int:
    return sum(int(x) << (8 * i) for i, x in enumerate(codes))


def run(dut, vectors) -> list[int]:
    """Drive the combinational ``dut`` (a ``Dot4Fp8``) with each (mode, a, b, acc)."""
    got = []

    async def tb(ctx):
        for mode, a, b, acc in vectors:
            ctx.set(dut.a, _pack(a))
            ctx.set(dut.b, _pack(b))
            ctx.set(dut.acc, acc)
            ctx.set(dut.mode, MODE_CODES[mode])
            got.append(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return got


def mismatches(dut, vectors=None, frac_bits: int = DOT_FRAC_BITS) -> list[str]:
    """The scoreboard: every vector whose RTL result differs from the golden rule with
    ``frac_bits`` (the rule's 26 unless a test builds a unit for another window)."""
    vectors = cases() if vectors is None else vectors
    out = []
    for (mode, a, b, acc), got in zip(vectors, run(dut, vectors)):
        want = dot4_bits(acc, a, b, *mode_formats(mode), frac_bits=frac_bits)
        if got != want:
            out.append(f"{mode} a={[hex(x) for x in a]} b={[hex(x) for x in b]} acc={acc:#x}: "
                       f"RTL {got:#010x}, golden {want:#010x}")
    return out
