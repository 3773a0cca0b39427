"""Fast tier: the BF16 multiplier and FP32 adder in amaranth.sim against the golden model."""

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

import rtl_fraction_oracle as oracle
from diptych.rtl import golden
from diptych.rtl.fp import Bf16Multiplier, Fp32Adder
from rtl_test_vectors import BF16_EDGES, FP32_EDGES, random_fp32


def _run_comb(dut, in_a, in_b, out, xs, ys):
    got = []

    async def tb(ctx):
        for x, y in zip(xs, ys):
            ctx.set(in_a, int(x))
            ctx.set(in_b, int(y))
            got.append(ctx.get(out))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return got


def test_init():
    mul, add = Bf16Multiplier(), Fp32Adder()
    Fragment.get(mul, None), Fragment.get(add, None)     # both elaborate
    assert (len(mul.a), len(mul.b), len(mul.p)) == (16, 16, 32)
    assert (len(add.a), len(add.b), len(add.s)) == (32, 32, 32)


def test_multiplier_edges_against_oracle():
    xs = [x for x in BF16_EDGES for _ in BF16_EDGES]
    ys = [y for _ in BF16_EDGES for y in BF16_EDGES]
    dut = Bf16Multiplier()
    got = _run_comb(dut, dut.a, dut.b, dut.p, xs, ys)
    assert got == [oracle.bf16_mul(x, y) for x, y in zip(xs, ys)]


def test_multiplier_random_against_golden():
    rng = np.random.default_rng(11)
    xs = rng.integers(0, 2**16, 3000).astype(np.uint16)
    ys = rng.integers(0, 2**16, 3000).astype(np.uint16)
    dut = Bf16Multiplier()
    got = _run_comb(dut, dut.a, dut.b, dut.p, xs, ys)
    assert got == golden.bf16_mul_bits(xs, ys).tolist()


def test_adder_edges_against_oracle():
    xs = [x for x in FP32_EDGES for _ in FP32_EDGES]
    ys = [y for _ in FP32_EDGES for y in FP32_EDGES]
    dut = Fp32Adder()
    got = _run_comb(dut, dut.a, dut.b, dut.s, xs, ys)
    assert got == [oracle.fp32_add(x, y) for x, y in zip(xs, ys)]


@pytest.mark.parametrize("seed", [12, 13])
def test_adder_random_against_golden(seed):
    rng = np.random.default_rng(seed)
    xs = random_fp32(rng, 2500)
    ys = random_fp32(rng, 2500)
    # cancellation (massive left shifts) and alignment just past the guard/round/sticky bits
    ys[:500] = (xs[:500] ^ np.uint32(0x80000000)) + rng.integers(0, 5, 500).astype(np.uint32)
    ys[500:1000] = ((xs[500:1000] & np.uint32(0x807FFFFF))
                    | (((xs[500:1000] >> 23) & 0xFF).clip(30, 255) - rng.integers(0, 30, 500)
                       ).astype(np.uint32) << 23)
    dut = Fp32Adder()
    got = _run_comb(dut, dut.a, dut.b, dut.s, xs, ys)
    want = golden.fp32_add_bits(xs, ys).tolist()
    bad = [(hex(x), hex(y), hex(g), hex(w)) for x, y, g, w in zip(xs, ys, got, want) if g != w]
    assert not bad, bad[:10]
