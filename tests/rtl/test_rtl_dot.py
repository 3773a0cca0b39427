"""Fast tier: the dot4 FP8 PE (four products per cycle, truncated alignment, one rounding) in
amaranth.sim against its golden rule, and the golden rule against the exact Fraction oracle."""

from fractions import Fraction

import numpy as np
import pytest
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st

import rtl_dot_bench as bench
import rtl_fraction_ref as oracle
from diptych.rtl.datapath import MODE_CODES, MX_MODES, MXFP8_MODES
from diptych.rtl.dot import Dot4Fp8
from diptych.rtl.pe import Dot4OsPe, Dot4WsPe
from diptych.rtl.numerics_ref import mode_formats
from diptych.rtl.dot_ref import DOT_FRAC_BITS, dot4_bits, dot_matmul_bits



def test_directed_cases_against_golden():
    names = [c[0] for c in bench.directed()]
    vectors = [c[1:] for c in bench.directed()]
    bad = bench.mismatches(Dot4Fp8(), vectors)
    assert not bad, list(zip(names, bad))


@pytest.mark.parametrize("seed", [5, 6])
def test_random_groups_against_golden(seed):
    bad = bench.mismatches(Dot4Fp8(), bench.random_cases(seed, 400))
    assert not bad, bad[:5]


class _Dot4Narrow(Dot4Fp8):
    FRAC_BITS = 13                  # the H800's "about 14 bits" (DeepSeek-V3 §3.3.2)


def test_a_narrow_window_unit_against_golden():
    """The unit is built for any window: at 13 fraction bits (narrower than the accumulator's
    23, so the accumulator itself is truncated) it still matches the golden rule bit for bit,
    and differs from the 26-bit unit."""
    vectors = [c[1:] for c in bench.directed()] + bench.random_cases(8, 300)
    assert bench.mismatches(_Dot4Narrow(), vectors, frac_bits=13) == []
    assert bench.run(_Dot4Narrow(), vectors) != bench.run(Dot4Fp8(), vectors)


_code = st.integers(0, 255)
_group = st.tuples(st.sampled_from(bench.FP8_MODES), st.tuples(*[_code] * 4),
                   st.tuples(*[_code] * 4), st.integers(0, 2**32 - 1))


@settings(max_examples=8, deadline=None)
@given(st.lists(_group, min_size=20, max_size=40))
def test_hypothesis_groups_against_golden(vectors):
    assert bench.mismatches(Dot4Fp8(), vectors) == []


# ---- the golden rule against the exact sum ---------------------------------------------------

def _exact_terms(mode, a, b, acc, scale_exp=0):
    """Nonzero terms as (exact value, nominal exponent), or None if the group is special.

    Independent of golden_dot: values from the Fraction oracle's decoders; a product's nominal
    exponent is the sum of its operands' exponents, a subnormal operand counted at ``emin``;
    products times ``2^scale_exp`` (the mxdot4 rule's block scales)."""
    fa, fb = MX_MODES[mode] if mode in MX_MODES else mode_formats(mode)
    acc_d = oracle.decode32(acc)
    if acc_d[0] != "num":
        return None
    terms = []
    if acc_d[2]:
        terms.append(((-1) ** acc_d[1] * acc_d[2], oracle._floor_log2(acc_d[2])))
    for x, y in zip(a, b):
        dx, dy = oracle.decode_mini(fa, x), oracle.decode_mini(fb, y)
        if dx[0] != "num" or dy[0] != "num":
            return None
        if dx[2] and dy[2]:
            ex = max(oracle._floor_log2(dx[2]), 1 - oracle.MINIFLOATS[fa][2])
            ey = max(oracle._floor_log2(dy[2]), 1 - oracle.MINIFLOATS[fb][2])
            terms.append(((-1) ** (dx[1] ^ dy[1]) * dx[2] * dy[2] * Fraction(2) ** scale_exp,
                          ex + ey + scale_exp))
    return terms


#: step 5 of the rule on an exact value (the oracle's round toward zero with saturation and flush)
_rz = oracle.rz32


def bound_violation(mode, a, b, acc, result_bits, frac_bits=DOT_FRAC_BITS, scale_exp=0):
    """None if ``result_bits`` lies in [rz(E − δ), rz(E + δ)] (E exact, δ = (t − 1) ·
    2^(emax − F) with ``t`` nonzero terms: golden_dot's bound), else a message."""
    terms = _exact_terms(mode, a, b, acc, scale_exp)
    if not terms:
        return None
    exact = sum(v for v, _ in terms)
    delta = (len(terms) - 1) * Fraction(2) ** (max(e for _, e in terms) - frac_bits)
    lo, hi = _rz(exact - delta), _rz(exact + delta)
    d = oracle.decode32(result_bits)
    got = (-1) ** d[1] * d[2]
    if lo <= got <= hi:
        return None
    return f"{mode} {a} {b} {acc:#x}: {float(got)!r} not in [{float(lo)!r}, {float(hi)!r}]"


def test_golden_within_its_error_bound():
    bad = []
    for mode, a, b, acc in bench.cases(seed=7, n=3000):
        v = bound_violation(mode, a, b, acc, dot4_bits(acc, a, b, *mode_formats(mode)))
        bad += [v] if v else []
    assert not bad, bad[:5]


@settings(max_examples=300, deadline=None)
@given(_group, st.floats(-1e6, 1e6, width=32))
def test_golden_within_its_error_bound_property(group, acc_value):
    mode, a, b, _ = group
    acc = bench.f32(acc_value)
    assert bound_violation(mode, a, b, acc, dot4_bits(acc, a, b, *mode_formats(mode))) is None


def test_mxdot4_golden_within_the_bound_of_the_exact_scaled_sum():
    """The mxdot4 rule (dot4 with E8M0 block scales added to the products' exponents) on the
    dot4 bench's groups with scales from 2^-40 to 2^40 (so the accumulator and the scaled
    products trade places in the alignment): within the truncation bound of the exact sum of
    the accumulator and the scaled products."""
    rng = np.random.default_rng(11)
    bad = []
    for mode, a, b, acc in bench.cases(seed=8, n=200):
        sa, sb = (int(x) for x in rng.integers(107, 148, 2))
        got = dot4_bits(acc, a, b, *mode_formats(mode), scales=(sa, sb))
        v = bound_violation(mode, a, b, acc, got, scale_exp=sa + sb - 254)
        bad += [v] if v else []
    for t in range(150):                  # MXFP6 and MXFP4: every code of the format
        mode = [m for m in MX_MODES if m not in MXFP8_MODES][t % 3]
        bits = 1 + oracle.MINIFLOATS[MX_MODES[mode][0]][0] + oracle.MINIFLOATS[MX_MODES[mode][0]][1]
        a, b = (list(map(int, rng.integers(0, 1 << bits, 4))) for _ in range(2))
        acc = int(rng.choice([0, bench.f32(float(rng.normal())), bench.f32(1e-6)]))
        sa, sb = (int(x) for x in rng.integers(107, 148, 2))
        got = dot4_bits(acc, a, b, *MX_MODES[mode], scales=(sa, sb))
        v = bound_violation(mode, a, b, acc, got, scale_exp=sa + sb - 254)
        bad += [v] if v else []
    assert not bad, bad[:5]


def test_mxdot4_golden_scales_a_zero_accumulator_exactly():
    """From +0 the rule is scale-invariant: the scaled step is the unscaled step times
    2^(sa + sb − 254) exactly, while both stay normal; a NaN scale makes the step NaN."""
    rng = np.random.default_rng(12)
    checked = 0
    for mode, a, b, _ in bench.cases(seed=9, n=120):
        sa, sb = (int(x) for x in rng.integers(90, 165, 2))
        plain = dot4_bits(0, a, b, *mode_formats(mode))
        got = dot4_bits(0, a, b, *mode_formats(mode), scales=(sa, sb))
        e = (plain >> 23) & 0xFF
        if 0 < e < 0xFF and 0 < e + sa + sb - 254 < 0xFF:
            assert got == plain + ((sa + sb - 254) << 23), (mode, a, b, sa, sb)
            checked += 1
        assert dot4_bits(0, a, b, *mode_formats(mode), scales=(0xFF, sb)) == 0x7FC00000
    assert checked > 60


def test_the_bound_rejects_a_window_one_bit_narrower():
    """A 25-bit window drops the whole tail of the cancelling case: outside the 26-bit bound."""
    name, mode, a, b, acc = next(c for c in bench.directed()
                                 if c[0] == "cancellation leaves a tail")
    fa, fb = mode_formats(mode)
    assert bound_violation(mode, a, b, acc, dot4_bits(acc, a, b, fa, fb)) is None
    assert bound_violation(mode, a, b, acc, dot4_bits(acc, a, b, fa, fb, frac_bits=25))


def test_directed_cases_mean_what_they_say():
    """Results worked out by hand from the rule (not from either implementation)."""
    want = {
        "all zero": 0, "all minus zero": 0x80000000, "minus-zero products, +0 acc": 0,
        "exact cancellation": 0, "product cancels the accumulator": 0,
        "cancellation leaves a tail": bench.f32(3 * 2.0**-26),        # 1.75 truncated to 1, ×3
        "products fall out of the window": bench.f32(1.0),            # 2^-30 < 2^-26: dropped
        "accumulator falls out of the window": bench.f32(4 * 448.0**2),
        "E4M3 max": bench.f32(4 * 448.0**2),
        "FP32 max accumulator absorbs the products": 0x7F7FFFFF,
        "E5M2 Inf": 0x7F800000, "E5M2 -Inf": 0xFF800000, "Inf x 0": 0x7FC00000,
        "Infs of both signs": 0x7FC00000, "Inf accumulator, opposite Inf product": 0x7FC00000,
        "Inf accumulator": 0xFF800000, "E5M2 NaN": 0x7FC00000, "E4M3 NaN": 0x7FC00000,
        "NaN accumulator": 0x7FC00000, "subnormal accumulator reads as zero": bench.f32(1.0),
        "subnormal E4M3 inputs": bench.f32(2.0**-18 + 7 * 2.0**-9 - 3 * 2.0**-18
                                           + 4 * 7 * 2.0**-18),
    }
    for name, mode, a, b, acc in bench.directed():
        if name in want:
            got = dot4_bits(acc, a, b, *mode_formats(mode))
            assert got == want[name], (name, hex(got), hex(want[name]))


# ---- the PEs around it -----------------------------------------------------------------------

def _codes(rng, shape):
    """FP8 codes without NaN/Inf (E4M3 and E5M2 both read them as finite)."""
    return rng.choice([c for c in range(256) if c & 0x7F < 0x7C], size=shape).astype(np.uint8)


def test_os_pe_accumulates_groups_and_drains():
    """Two back-to-back tiles of K = 12 (3 steps of 4) and K = 8 with bubbles; each drain is
    the golden dot4 chain from +0."""
    rng = np.random.default_rng(3)
    tiles = [(_codes(rng, 12), _codes(rng, 12), "e4m3"), (_codes(rng, 8), _codes(rng, 8), "e5m2")]
    dut = Dot4OsPe()
    drains = []

    async def tb(ctx):
        for a, b, mode in tiles:
            steps = len(a) // 4
            for s in range(steps):
                ctx.set(dut.a_in, int(a[4 * s:4 * s + 4].view("<u4")[0]))
                ctx.set(dut.b_in, int(b[4 * s:4 * s + 4].view("<u4")[0]))
                ctx.set(dut.mode_in, MODE_CODES[mode])
                ctx.set(dut.valid_in, 1)
                ctx.set(dut.last_in, int(s == steps - 1))
                await ctx.tick()
                ctx.set(dut.valid_in, 0)
                await ctx.tick()                     # a bubble between steps
            drains.append(ctx.get(dut.drain_out))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    want = [int(dot_matmul_bits(a[None, :], b[:, None], *mode_formats(mode))[0, 0])
            for a, b, mode in tiles]
    assert drains == want


def test_ws_pe_adds_its_group_to_the_partial_sum():
    rng = np.random.default_rng(4)
    w = _codes(rng, 4)
    rows = [(_codes(rng, 4), int(rng.integers(0, 2**31))) for _ in range(5)]
    dut = Dot4WsPe()
    got = []

    async def tb(ctx):
        ctx.set(dut.w_in, int(w.view("<u4")[0]))
        ctx.set(dut.w_load, 1)
        await ctx.tick()
        ctx.set(dut.w_load, 0)
        for n, (a, psum) in enumerate(rows):
            ctx.set(dut.a_in, int(a.view("<u4")[0]))
            ctx.set(dut.psum_in, psum)
            ctx.set(dut.mode_in, MODE_CODES["e4m3xe5m2"])
            ctx.set(dut.valid_in, 1)
            ctx.set(dut.first_in, int(n == 0))
            await ctx.tick()
            got.append(ctx.get(dut.psum_out))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    assert got == [dot4_bits(psum, a, w, "e4m3", "e5m2") for a, psum in rows]
