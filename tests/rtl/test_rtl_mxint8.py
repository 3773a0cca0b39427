"""The MXINT8 PE (diptych.rtl.mxint8.MxInt8Dot4, the ``mxint8`` datapath): its golden rule
(diptych.rtl.dot_ref.mxint8_dot4_bits) against the exact Fraction oracle within the rule's
stated bound, the unit against the golden on every INT8 code in every lane and the scale
regimes, and OS/WS arrays bit- and cycle-exact (fast tier, amaranth.sim)."""

from fractions import Fraction

import numpy as np
import pytest
from amaranth.sim import Simulator

import rtl_fraction_ref as oracle
from diptych.rtl.dot_ref import DOT_FRAC_BITS, mxint8_dot4_bits, mxint8_matmul_bits
from diptych.rtl.mx_bench import make_mx_plan, mx_special_plan, mxint8_cases
from diptych.rtl.mx_ws import make_mx_ws_plan, mx_ws_special_plan
from diptych.rtl.mxint8 import MxInt8Dot4
from diptych.rtl.plan import score
from diptych.rtl.pysim import run_plan

_rz = oracle.rz32


def _exact(acc, a, b, sa, sb):
    """(exact value, [nominal exponents of the nonzero terms]) of one step, or None when the
    step is special (NaN/Inf accumulator, NaN scale): element values from the oracle's MXINT8
    decoder (code · 2^-6), scales from its E8M0 decoder. The product term's nominal exponent is
    the rule's stated one: the weight of bit 15 of |Σ aᵢbᵢ| (= 2^(sa + sb − 254 + 3))."""
    xa, xb = oracle.decode_scale("e8m0", sa), oracle.decode_scale("e8m0", sb)
    d = oracle.decode32(acc)
    if xa[0] != "num" or xb[0] != "num" or d[0] != "num":
        return None
    dot = sum(((-1) ** x[1] * x[2]) * ((-1) ** y[1] * y[2]) for x, y in
              ((oracle.decode_element("int8", p), oracle.decode_element("int8", q))
               for p, q in zip(a, b)))
    acc_v = (-1) ** d[1] * d[2]
    exps = [oracle._floor_log2(d[2])] if d[2] else []
    if dot:
        exps.append(sa + sb - 254 + 3)
    return acc_v + dot * xa[2] * xb[2], exps


def _violation(acc, a, b, sa, sb, got, frac_bits=DOT_FRAC_BITS):
    ex = _exact(acc, a, b, sa, sb)
    if ex is None:
        return None
    value, exps = ex
    delta = (len(exps) - 1) * Fraction(2) ** (max(exps) - frac_bits) if exps else 0
    lo, hi = _rz(value - delta), _rz(value + delta)
    d = oracle.decode32(got)
    v = (-1) ** d[1] * d[2]
    return None if lo <= v <= hi else f"{acc:#x} {a} {b} {sa} {sb}: {float(v)} not in " \
                                      f"[{float(lo)}, {float(hi)}]"


def _steps(seed: int, n: int):
    rng = np.random.default_rng(seed)
    out = []
    for t in range(n):
        a, b = (list(map(int, rng.integers(0, 256, 4))) for _ in range(2))
        sa, sb = (int(x) for x in (rng.integers(87, 168, 2) if t % 4 else rng.integers(0, 255, 2)))
        acc = int(rng.choice([0, int(np.float32(rng.normal() * 2.0 ** rng.integers(-40, 40))
                                     .view(np.uint32)), int(rng.integers(0, 2**32))]))
        out.append((acc, a, b, sa, sb))
    return out


def test_golden_within_its_bound_of_the_exact_oracle():
    """Every step lies in [rz(E − δ), rz(E + δ)], E the oracle's exact scaled sum and δ one unit
    of the window below the larger term (two terms: the accumulator and the integer sum);
    from a +0 accumulator nothing is truncated, so the step is rz(E) exactly."""
    bad, exact_hits = [], 0
    for acc, a, b, sa, sb in _steps(21, 600) + [c[1:] for c in mxint8_cases()]:
        got = mxint8_dot4_bits(acc, a, b, (sa, sb))
        v = _violation(acc, a, b, sa, sb, got)
        bad += [v] if v else []
        ex = _exact(0, a, b, sa, sb)
        if ex is not None:
            g0 = oracle.decode32(mxint8_dot4_bits(0, a, b, (sa, sb)))
            assert (-1) ** g0[1] * g0[2] == _rz(ex[0]), (a, b, sa, sb)
            exact_hits += 1
    assert not bad, bad[:5]
    assert exact_hits > 500


def test_the_bound_catches_a_missing_element_scale():
    """The oracle check has teeth: a rule without the elements' 2^-6 each (a 2^12 error) and a
    window of 12 bits (accumulator truncated) both leave the bound."""
    acc, a, b, sa, sb = 0x3F800000, [64, 3, 0, 0], [64, 5, 0, 0], 127, 127
    assert _violation(acc, a, b, sa, sb, mxint8_dot4_bits(acc, a, b, (sa, sb))) is None
    assert _violation(acc, a, b, sa, sb, mxint8_dot4_bits(acc, a, b, (sa + 12, sb)))
    assert _violation(acc, a, b, sa, sb, mxint8_dot4_bits(acc, a, b, (sa, sb), frac_bits=12))


def _lane(codes, scale):
    return sum(int(c) << (8 * i) for i, c in enumerate(codes)) | (int(scale) << 32)


def run_unit(vectors, unit=None):
    """The unit's result for each ``(acc, a, b, sa, sb)``."""
    dut = unit if unit is not None else MxInt8Dot4()
    got = []

    async def tb(ctx):
        for acc, a, b, sa, sb in vectors:
            ctx.set(dut.a, _lane(a, sa))
            ctx.set(dut.b, _lane(b, sb))
            ctx.set(dut.acc, acc)
            got.append(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return got


def unit_vectors(seed: int = 3):
    """Every INT8 code of A and of B, twice, in two lanes each (128 steps, scales near 1), the
    scale regimes (low: flushes; high: saturation; NaN either side) on random codes, and the
    directed cases' steps (their first four elements)."""
    rng = np.random.default_rng(seed)
    out = []
    for c in range(128):
        rot = c // 64                           # the second pass moves each code one lane on
        a = [(c % 64 + 64 * ((k + rot) % 4)) for k in range(4)]
        b = [(c % 64 + 64 * ((k + 2 - rot) % 4) + 17) % 256 for k in range(4)]
        acc = int(rng.choice([0, 0x3F800000, 0xC2280000, int(rng.integers(0, 2**32))]))
        out.append((acc, a, b, int(rng.integers(120, 135)), int(rng.integers(120, 135))))
    for lo, hi in ((0, 10), (60, 70), (245, 255), (255, 256)):
        for _ in range(8):
            a, b = (list(map(int, rng.integers(0, 256, 4))) for _ in range(2))
            sa = int(rng.integers(lo, hi))
            acc = int(rng.choice([0, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x80000000]))
            out.append((acc, a, b, sa, int(rng.integers(max(lo, 0), max(hi, 1)))))
    out += [(acc, a[:4], b[:4], sa, sb) for _, acc, a, b, sa, sb in mxint8_cases()]
    return out


def test_unit_on_every_code_and_the_scale_regimes():
    vectors = unit_vectors()
    got = run_unit(vectors)
    want = [mxint8_dot4_bits(acc, a, b, (sa, sb)) for acc, a, b, sa, sb in vectors]
    bad = [(v, hex(g), hex(w)) for v, g, w in zip(vectors, got, want) if g != w]
    assert not bad, bad[:5]
    # the regimes were reached: saturation, flush to zero, NaN, and plain normals
    assert {0x7F7FFFFF, 0x7FC00000} <= set(want) and 0 in want
    assert sum(0 < ((w >> 23) & 0xFF) < 0xFF for w in want) > 100


@pytest.mark.parametrize("make", [
    lambda: make_mx_plan(2, 1, seed=4, tiles=4, dtype="mxint8"),
    lambda: mx_special_plan(1, 2, dtype="mxint8"),
    lambda: make_mx_ws_plan(2, 1, seed=4, tiles=4, dtype="mxint8"),
    lambda: mx_ws_special_plan(2, 2, dtype="mxint8")], ids=["os", "os-special", "ws", "ws-special"])
def test_mxint8_array_random_and_directed_plans(make):
    """Random plans (every code, extremes, K not a multiple of 4 or of the block, the scale
    regimes with NaN scales; WS: chains of partial sums, +0-padded shallow tiles) and the
    directed plans (WS: the cases' accumulators as partial sums), bit for bit at the cycles
    sim/timing.py predicts."""
    plan = make()
    assert score(plan, run_plan(plan)) == []


def test_matmul_is_the_steps_in_order():
    """mxint8_matmul_bits (the arrays' golden) is the step rule applied in ascending K with
    each step's block scales: checked on a 1×40 by 40×1 product (blocks of 32 and 8)."""
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 256, (1, 40)), rng.integers(0, 256, (40, 1))
    sa, sb = rng.integers(120, 135, (1, 2)), rng.integers(120, 135, (2, 1))
    acc = 0
    for s in range(0, 40, 4):
        acc = mxint8_dot4_bits(acc, a[0, s:s + 4], b[s:s + 4, 0], (sa[0, s // 32], sb[s // 32, 0]))
    assert int(mxint8_matmul_bits(a, sa, b, sb)[0, 0]) == acc


@pytest.mark.parametrize("call, message", [
    (lambda: mxint8_matmul_bits(np.zeros((1, 8)), np.zeros((1, 2)), np.zeros((8, 1)),
                                np.zeros((1, 1))), "scales must be [M, 1] and [1, N]"),
    (lambda: mxint8_matmul_bits(np.zeros((1, 8)), np.zeros((1, 1)), np.zeros((8, 1)),
                                np.zeros((1, 1)), block=6), "block must be a positive multiple"),
    (lambda: make_mx_plan(2, 2, dtype="mxint8", modes=["mxfp8_e4m3"]),
     "'mxfp8_e4m3' is not a block-scaled format of the mxint8 datapath"),
    (lambda: make_mx_ws_plan(2, 2, dtype="mxint8", tiles=0), "tiles must be a positive integer"),
    (lambda: make_mx_ws_plan(2, 2, dtype="int8"), "block-scaled plans are for the mx, mxdot4"),
])
def test_bad_input_names_the_value(call, message):
    with pytest.raises(ValueError) as exc:
        call()
    assert message in str(exc.value)
