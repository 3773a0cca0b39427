"""Scoreboard of the block-scaled MX unit (:class:`diptych.rtl.mx.MxDot`) in amaranth.sim.

A *block case* is ``(mode, acc, a_codes, b_codes, sa, sb)``: an FP32 accumulator, the block's
FP8 element codes (any length up to :data:`~diptych.rtl.mx.MAX_BLOCK`; padded with +0 to whole
steps of four) and its two E8M0 scale codes. :func:`run_blocks` steps the combinational unit
through each block as the PE does (the block register and flags carried from step to step, the
scales presented in the closing step only, random bits in the scale fields before it) and
returns the unit's ``acc_out`` of the closing step; :func:`expected` is the golden model's
(:func:`diptych.rtl.formats.mx_matmul_bits` of the 1 × K by K × 1 block, then the FP32 add of
the accumulator, which is how the golden accumulates blocks).
"""

from __future__ import annotations

import random

import numpy as np
from amaranth.sim import Simulator

from diptych.rtl import numerics_ref
from diptych.rtl.datapath import MODE_CODES, MX_MODES
from diptych.rtl.formats import mx_matmul_bits
from diptych.rtl.mx import MX_GROUP, MxDot
from diptych.rtl.mx_bench import directed_cases, random_cases  # noqa: F401 (re-exported)


def _lane(codes, scale: int) -> int:
    return sum(int(c) << (8 * i) for i, c in enumerate(codes)) | (scale << (8 * MX_GROUP))


def expected(case) -> int:
    """The golden result of one block case (module docstring)."""
    mode, acc, a, b, sa, sb = case
    fa, fb = MX_MODES[mode]
    k = len(a)
    dot = mx_matmul_bits(np.array([a]), np.array([[sa]]), np.array(b).reshape(k, 1),
                         np.array([[sb]]), fa, fb, block=k)
    return int(numerics_ref.fp32_add_bits(np.uint32(acc), dot)[0, 0])


def run_blocks(cases, unit=None, seed: int = 1) -> list[int]:
    """``acc_out`` of the unit (default :class:`MxDot`) at each block case's closing step."""
    dut = unit if unit is not None else MxDot()
    rnd = random.Random(seed)
    got = []

    async def bench(ctx):
        for mode, acc, a, b, sa, sb in cases:
            n = -(-len(a) // MX_GROUP) * MX_GROUP
            a = list(a) + [0] * (n - len(a))
            b = list(b) + [0] * (n - len(b))
            blk, flags = 0, 0
            ctx.set(dut.mode, MODE_CODES[mode])
            ctx.set(dut.acc, acc)
            for s in range(0, n, MX_GROUP):
                close = s + MX_GROUP == n
                ctx.set(dut.a, _lane(a[s:s + MX_GROUP], sa if close else rnd.getrandbits(8)))
                ctx.set(dut.b, _lane(b[s:s + MX_GROUP], sb if close else rnd.getrandbits(8)))
                ctx.set(dut.blk, blk)
                ctx.set(dut.flags, flags)
                blk, flags = ctx.get(dut.blk_out), ctx.get(dut.flags_out)
            got.append(ctx.get(dut.acc_out))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    return got


def mismatches(cases, unit=None, seed: int = 1) -> list[str]:
    """One line per block case whose unit result differs from the golden's."""
    got = run_blocks(cases, unit, seed)
    out = []
    for case, g in zip(cases, got):
        want = expected(case)
        if g != want:
            out.append(f"{case[0]} acc={case[1]:08x} sa={case[4]} sb={case[5]}: "
                       f"got {g:08x}, expected {want:08x}")
    return out


def corners(case) -> set[str]:
    """The closing-path classes a finite block case exercises, from its exact value alone:
    ``zero``, ``flush`` (below 2^-127), ``grid-carry`` (in [2^-126 − 2^-150, 2^-126): kept as
    2^-126 only by rounding on FP32's subnormal grid), ``grid-flush`` (in [2^-127, 2^-126 −
    2^-150)), ``tie`` (exactly half-way at the 24th bit), ``overflow`` (≥ 2^128 after rounding)
    and ``normal``; an empty set for a block with a NaN/Inf element or a NaN scale."""
    from fractions import Fraction

    from diptych.rtl.minifloat import decode
    mode, _, a, b, sa, sb = case
    fa, fb = MX_MODES[mode]
    va, vb = decode(fa, np.array(a)), decode(fb, np.array(b))
    if not (np.all(np.isfinite(va)) and np.all(np.isfinite(vb))) or 0xFF in (sa, sb):
        return set()
    v = abs(sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(va, vb))
            * Fraction(2) ** (sa + sb - 254))
    if v == 0:
        return {"zero"}
    low = Fraction(2) ** -126
    if v < low / 2:
        return {"flush"}
    if v < low:
        return {"grid-carry" if v >= low - Fraction(2) ** -150 else "grid-flush"}
    e = 0
    while v >= Fraction(2) ** (e + 1):
        e += 1
    while v < Fraction(2) ** e:
        e -= 1
    units = v / Fraction(2) ** (e - 23)            # the significand in units of its last bit
    tags = {"tie"} if units.denominator == 2 else set()
    return tags | {"overflow" if v >= Fraction(2) ** 128 - Fraction(2) ** 103 else "normal"}
