"""Scoreboard of the FP4 dot-product unit (diptych.rtl.fp4dot) in amaranth.sim against its golden.

Shared by tests/rtl/test_rtl_fp4dot.py and the mutation test (rtl_mutants.py): :func:`directed`
names the classes the unit must get right, :func:`random_cases` covers every E2M1 code and every
scale regime, :func:`run` drives an ``Fp4Dot8`` combinationally, :func:`mismatches` compares with
:func:`diptych.rtl.fp4dot_ref.fp4_step_bits`. A vector is ``(mode, a[8], b[8], sa, sb, acc)``.
"""

from __future__ import annotations

import numpy as np
from amaranth.sim import Simulator

from diptych.rtl.datapath import MODE_CODES
from diptych.rtl.fp4dot_ref import fp4_step_bits
from diptych.rtl.minifloat import encode


def f32(v: float) -> int:
    return int(np.asarray(v, np.float32).view(np.uint32))


def e2m1(v: float) -> int:
    return int(encode("e2m1", np.float64(v)))


def e4m3(v: float) -> int:
    return int(encode("e4m3", np.float64(v)))


def directed() -> list[tuple]:
    """(name, mode, a, b, sa, sb, acc)."""
    six, one, half = e2m1(6.0), e2m1(1.0), e2m1(0.5)
    z = (0,) * 8
    nz = (0x8,) * 8
    return [
        ("all zero", "mxfp4", z, z, 127, 127, 0),
        ("all minus zero", "mxfp4", nz, z, 127, 127, 0x80000000),
        ("minus-zero products, +0 acc", "mxfp4", nz, z, 127, 127, 0),
        ("NVFP4 zero scale, -0 products", "nvfp4", nz, (one,) * 8, 0x00, e4m3(2.0), 0x80000000),
        ("NVFP4 negative zero scale flips the zeros", "nvfp4", z, (one,) * 8, 0x80, e4m3(2.0),
         0x80000000),
        ("exact cancellation", "mxfp4", (one, one ^ 8) * 4, (six,) * 8, 127, 127, f32(3.0)),
        ("max products", "mxfp4", (six,) * 8, (six,) * 8, 127, 127, 0),
        ("max products, negative", "nvfp4", (six ^ 8,) * 8, (six,) * 8, 0x7E, 0x7E, 0),
        ("smallest products", "mxfp4", (half,) * 8, (half,) * 8, 127, 127, f32(1.0)),
        ("step falls out of the window", "mxfp4", (half,) + z[1:], (half,) + z[1:], 100, 100,
         f32(1.0)),
        ("accumulator falls out of the window", "mxfp4", (six,) * 8, (six,) * 8, 160, 160,
         f32(1.0)),
        ("step cancels the accumulator but a tail", "nvfp4", (one ^ 8,) + z[1:], (one,) + z[1:],
         e4m3(1.125), e4m3(1.125), f32(1.265625 + 2 ** -20)),
        ("E4M3 scales 448 x 448", "nvfp4", (six,) * 8, (six,) * 8, 0x7E, 0x7E, f32(-1e5)),
        ("E4M3 subnormal scales", "nvfp4", (six,) * 8, (one,) * 8, 0x01, 0x07, 0),
        ("E8M0 top: saturates at FLT_MAX", "mxfp4", (six,) * 8, (six,) * 8, 254, 254, 0),
        ("E8M0 bottom: flushed", "mxfp4", (six,) * 8, (six,) * 8, 0, 0, 0),
        ("at 2^-126: kept", "mxfp4", (one,) + z[1:], (one,) + z[1:], 1, 127, 0),
        ("just below 2^-126: flushed", "mxfp4", (half,) + z[1:], (one,) + z[1:], 1, 127, 0),
        ("MX NaN scale A", "mxfp4", (one,) * 8, (one,) * 8, 0xFF, 127, 0),
        ("MX NaN scale B, Inf acc", "mxfp4", (one,) * 8, (one,) * 8, 127, 0xFF, 0x7F800000),
        ("NV NaN scale", "nvfp4", (one,) * 8, (one,) * 8, 0x7F, e4m3(1.0), 0),
        ("NV negative NaN scale", "nvfp4", z, z, e4m3(1.0), 0xFF, 0),
        ("MX 0x7F is 1.0, not NaN", "mxfp4", (one,) * 8, (one,) * 8, 0x7F, 0x7F, 0),
        ("NaN accumulator", "nvfp4", z, z, e4m3(1.0), e4m3(1.0), 0x7FC00001),
        ("Inf accumulator stays", "nvfp4", (six ^ 8,) * 8, (six,) * 8, 0x7E, 0x7E, 0xFF800000),
        ("subnormal accumulator reads as zero", "mxfp4", (one,) + z[1:], (one,) + z[1:], 127,
         127, 0x00400000),
        ("negative E4M3 scale", "nvfp4", (one,) * 8, (six,) * 8, 0x80 | e4m3(1.5), e4m3(3.0),
         f32(2.0)),
    ]


def random_cases(seed: int, n: int) -> list[tuple]:
    """``n`` random steps alternating MXFP4 and NVFP4: uniform E2M1 codes (every code, a quarter
    of them ±0), scales uniform over every code (NaN now and then) or near 1, accumulators
    uniform bits or near the step's magnitude."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        mode = ("mxfp4", "nvfp4")[i % 2]
        a, b = (np.where(rng.random(8) < 0.25, rng.integers(0, 2, 8) * 8,
                         rng.integers(0, 16, 8)) for _ in range(2))
        if i % 3 == 0:
            sa, sb = (int(x) for x in rng.integers(0, 256, 2))
        elif mode == "mxfp4":
            sa, sb = (int(x) for x in rng.integers(112, 143, 2))
        else:
            sa, sb = (int(x) for x in rng.integers(0x20, 0x50, 2))
        acc = (int(rng.integers(0, 2**32)) if rng.random() < 0.4
               else f32(rng.standard_normal() * 2.0 ** rng.integers(-12, 14)))
        out.append((mode, tuple(int(x) for x in a), tuple(int(x) for x in b), sa, sb, acc))
    return out


def cases(seed: int = 5, n: int = 400) -> list[tuple]:
    return [c[1:] for c in directed()] + random_cases(seed, n)


def lane(codes, scale: int) -> int:
    return sum(int(x) << (4 * i) for i, x in enumerate(codes)) | (int(scale) << 32)


def run(dut, vectors) -> list[int]:
    """Drive the combinational ``dut`` (an ``Fp4Dot8``) with each vector."""
    got = []

    async def tb(ctx):
        for mode, a, b, sa, sb, acc in vectors:
            ctx.set(dut.a, lane(a, sa))
            ctx.set(dut.b, lane(b, sb))
            ctx.set(dut.acc, acc)
            ctx.set(dut.mode, MODE_CODES[mode])
            got.append(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return got


def mismatches(dut, vectors=None) -> list[str]:
    """Every vector whose RTL result differs from the golden rule."""
    vectors = cases() if vectors is None else vectors
    out = []
    for (mode, a, b, sa, sb, acc), got in zip(vectors, run(dut, vectors)):
        want = fp4_step_bits(acc, a, b, mode, sa, sb)
        if got != want:
            out.append(f"{mode} a={list(a)} b={list(b)} s=({sa:#x}, {sb:#x}) acc={acc:#x}: RTL "
                       f"{got:#010x}, golden {want:#010x}")
    return out
