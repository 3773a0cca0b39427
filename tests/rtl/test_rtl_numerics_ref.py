"""The NumPy golden model against the exact Fraction oracle (random and edge vectors)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rtl_fraction_ref as oracle
from rtl_test_vectors import BF16_EDGES, FP8_EDGES, FP32_EDGES, random_fp32
from diptych.rtl import numerics_ref

def test_bf16_mul_edges_cross_product():
    a = np.array(BF16_EDGES, np.uint16)
    got = numerics_ref.bf16_mul_bits(a[:, None], a[None, :])
    for i, x in enumerate(BF16_EDGES):
        for j, y in enumerate(BF16_EDGES):
            assert int(got[i, j]) == oracle.bf16_mul(x, y), (hex(x), hex(y))


def test_bf16_mul_random():
    rng = np.random.default_rng(5)
    a = rng.integers(0, 2**16, 4000).astype(np.uint16)
    b = rng.integers(0, 2**16, 4000).astype(np.uint16)
    got = numerics_ref.bf16_mul_bits(a, b)
    for x, y, g in zip(a.tolist(), b.tolist(), got.tolist()):
        assert g == oracle.bf16_mul(x, y), (hex(x), hex(y))


def test_fp32_add_edges_cross_product():
    a = np.array(FP32_EDGES, np.uint32)
    got = numerics_ref.fp32_add_bits(a[:, None], a[None, :])
    for i, x in enumerate(FP32_EDGES):
        for j, y in enumerate(FP32_EDGES):
            assert int(got[i, j]) == oracle.fp32_add(x, y), (hex(x), hex(y))


def test_fp32_add_random_and_cancellation():
    rng = np.random.default_rng(6)
    x = random_fp32(rng, 4000)
    y = random_fp32(rng, 4000)
    # near-cancellation: y ≈ −x, a few ulps apart
    y[:800] = (x[:800] ^ np.uint32(0x80000000)) + rng.integers(0, 5, 800).astype(np.uint32)
    got = numerics_ref.fp32_add_bits(x, y)
    for a, b, g in zip(x.tolist(), y.tolist(), got.tolist()):
        assert g == oracle.fp32_add(a, b), (hex(a), hex(b))


@pytest.mark.parametrize("x, y, expected", [
    (0x3F800000, 0x33800000, 0x3F800000),   # 1 + 2^-24: a tie, rounds to even (down)
    (0x3F800001, 0x33800000, 0x3F800002),   # (1 + ulp) + 2^-24: a tie, rounds to even (up)
    (0x7F7FFFFF, 0x73000000, 0x7F800000),   # FLT_MAX + half an ulp: tie to even overflows
    (0x00C00000, 0x80800000, 0x00000000),   # 1.5·2^-126 − 2^-126 = 2^-127: flushed, +0
    (0x80C00000, 0x00800000, 0x80000000),   # and the negative case keeps its sign
    (0x80000000, 0x80000000, 0x80000000),   # (−0) + (−0) = −0
    (0x3F800000, 0xBF800000, 0x00000000),   # x + (−x) = +0
    (0x807FFFFF, 0x80000000, 0x80000000),   # a subnormal input reads as −0
    (0x7F800000, 0xFF800000, 0x7FC00000),   # Inf − Inf = canonical NaN
    (0xFFC00001, 0x3F800000, 0x7FC00000),   # any NaN becomes canonical
])
def test_fp32_add_named_cases(x, y, expected):
    assert int(numerics_ref.fp32_add_bits(x, y)) == expected
    assert oracle.fp32_add(x, y) == expected


def test_bf16_matmul_against_oracle():
    rng = np.random.default_rng(7)
    for trial in range(6):
        m, k, n = rng.integers(1, 5, 3)
        edges = np.array(BF16_EDGES, np.uint16)
        a = rng.integers(0, 2**16, (m, k)).astype(np.uint16)
        b = rng.integers(0x3C00, 0x4400, (k, n)).astype(np.uint16)   # mostly moderate values
        a = np.where(rng.random((m, k)) < 0.2, rng.choice(edges, (m, k)), a).astype(np.uint16)
        init = None if trial % 2 else random_fp32(rng, m * n).reshape(m, n)
        got = numerics_ref.bf16_matmul_bits(a, b, init)
        want = oracle.bf16_matmul(a.tolist(), b.tolist(), None if init is None else init.tolist())
        assert got.tolist() == want


def test_bf16_matmul_is_one_sequential_order():
    """Splitting K into chunks and feeding partial sums back gives the same bits (WS K > R)."""
    rng = np.random.default_rng(8)
    a = rng.integers(0x3800, 0x4800, (3, 10)).astype(np.uint16)
    b = (rng.integers(0x3800, 0x4800, (10, 2)) | (rng.integers(0, 2, (10, 2)) << 15)).astype(np.uint16)
    full = numerics_ref.bf16_matmul_bits(a, b)
    part = numerics_ref.bf16_matmul_bits(a[:, :4], b[:4])
    part = numerics_ref.bf16_matmul_bits(a[:, 4:7], b[4:7], part)
    part = numerics_ref.bf16_matmul_bits(a[:, 7:], b[7:], part)
    assert np.array_equal(full, part)
    assert oracle.bf16_matmul(a.tolist(), b.tolist()) == full.tolist()


def test_int8_matmul_wraps():
    a = np.full((1, 4), -128, np.int8)
    b = np.full((4, 1), -128, np.int8)
    init = np.array([[2**31 - 1 - 3 * 16384]], np.int64)
    got = numerics_ref.int8_matmul(a, b, init)
    assert int(got[0, 0]) == (2**31 - 1 - 3 * 16384 + 4 * 16384) - 2**32


def test_int8_matmul_matches_python():
    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, (3, 7)).astype(np.int8)
    b = rng.integers(-128, 128, (7, 4)).astype(np.int8)
    got = numerics_ref.int8_matmul(a, b)
    for i in range(3):
        for j in range(4):
            assert int(got[i, j]) == sum(int(a[i, k]) * int(b[k, j]) for k in range(7))


def test_golden_rejects_bad_input():
    with pytest.raises(ValueError, match="bf16 bit patterns"):
        numerics_ref.bf16_mul_bits(-1, 0)
    with pytest.raises(ValueError, match="matching K"):
        numerics_ref.bf16_matmul_bits(np.zeros((2, 3), np.uint16), np.zeros((2, 3), np.uint16))
    with pytest.raises(ValueError, match="int8"):
        numerics_ref.int8_matmul(np.array([[200]]), np.array([[1]]))


# ---- FP8 ----------------------------------------------------------------------------------

FP8_PAIRS = [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"), ("e5m2", "e4m3")]


@pytest.mark.parametrize("fa, fb", FP8_PAIRS)
def test_fp8_mul_edges_against_oracle(fa, fb):
    a = np.array(FP8_EDGES, np.uint8)
    got = numerics_ref.fp8_mul_bits(a[:, None], a[None, :], fa, fb)
    for i, x in enumerate(FP8_EDGES):
        for j, y in enumerate(FP8_EDGES):
            assert int(got[i, j]) == oracle.fp8_mul(x, y, fa, fb), (fa, fb, hex(x), hex(y))


@pytest.mark.parametrize("fa, fb", FP8_PAIRS)
def test_fp8_mul_random_against_oracle(fa, fb):
    rng = np.random.default_rng(21)
    a = rng.integers(0, 256, 1500).astype(np.uint8)
    b = rng.integers(0, 256, 1500).astype(np.uint8)
    got = numerics_ref.fp8_mul_bits(a, b, fa, fb)
    for x, y, g in zip(a.tolist(), b.tolist(), got.tolist()):
        assert g == oracle.fp8_mul(x, y, fa, fb), (hex(x), hex(y))


@pytest.mark.parametrize("fa, fb", FP8_PAIRS)
def test_fp8_mul_all_pairs_are_exact_products(fa, fb):
    """All 65,536 pairs: finite products equal the float64 product of the decoded values
    (exact there), are never subnormal in FP32, and specials follow the OFP8 rules."""
    from diptych.rtl.minifloat import decode
    codes = np.arange(256)
    x = decode(fa, codes)[:, None]
    y = decode(fb, codes)[None, :]
    got = numerics_ref.fp8_mul_bits(codes[:, None].astype(np.uint8),
                                    codes[None, :].astype(np.uint8), fa, fb)
    with np.errstate(invalid="ignore"):
        want = x * y
    nan = np.isnan(want)
    assert np.all(got[nan] == numerics_ref.CANONICAL_NAN)
    fin = np.isfinite(want)
    assert np.array_equal(got[fin].view(np.float32).astype(np.float64), want[fin])
    assert np.all(np.isinf(got[~nan & ~fin].view(np.float32)))
    exp = (got[fin] >> 23) & 0xFF
    assert np.all((exp > 0) | ((got[fin] & 0x7FFFFFFF) == 0))       # no subnormal products
    assert np.sum(fin & (np.abs(want) > 0) & (np.abs(want) < 2.0**-14)) > 0  # subnormals used


@pytest.mark.parametrize("fa, fb", FP8_PAIRS)
def test_fp8_matmul_against_oracle(fa, fb):
    rng = np.random.default_rng(22)
    edges = np.array(FP8_EDGES, np.uint8)
    for trial in range(4):
        m, k, n = rng.integers(1, 5, 3)
        a = rng.integers(0, 256, (m, k)).astype(np.uint8)
        b = rng.integers(0x20, 0x48, (k, n)).astype(np.uint8)
        a = np.where(rng.random((m, k)) < 0.2, rng.choice(edges, (m, k)), a).astype(np.uint8)
        init = None if trial % 2 else random_fp32(rng, m * n).reshape(m, n)
        got = numerics_ref.fp8_matmul_bits(a, b, fa, fb, init)
        want = oracle.fp8_matmul(a.tolist(), b.tolist(), fa, fb,
                                 None if init is None else init.tolist())
        assert got.tolist() == want


def test_matmul_bits_dispatches_on_mode():
    rng = np.random.default_rng(23)
    a8 = rng.integers(-128, 128, (2, 3)).astype(np.int8)
    b8 = rng.integers(-128, 128, (3, 2)).astype(np.int8)
    assert np.array_equal(numerics_ref.matmul_bits("int8", a8, b8).view(np.int32),
                          numerics_ref.int8_matmul(a8, b8))
    a = rng.integers(0, 256, (2, 3)).astype(np.uint8)
    b = rng.integers(0, 256, (3, 2)).astype(np.uint8)
    assert np.array_equal(numerics_ref.matmul_bits("e5m2xe4m3", a, b),
                          numerics_ref.fp8_matmul_bits(a, b, "e5m2", "e4m3"))
    with pytest.raises(ValueError, match="mode must be one of .* not 'fp4'"):
        numerics_ref.matmul_bits("fp4", a, b)
    with pytest.raises(ValueError, match="FP8 bit patterns"):
        numerics_ref.fp8_mul_bits(300, 1)


# ---- the pair rule: three FP32 operands summed exactly, rounded once ---------------------

def test_fp32_add3_edges_cube_against_oracle():
    e = np.array(FP32_EDGES, np.uint32)
    got = numerics_ref.fp32_add3_bits(e[:, None, None], e[None, :, None], e[None, None, :])
    for i, x in enumerate(FP32_EDGES):
        for j, y in enumerate(FP32_EDGES):
            for k, z in enumerate(FP32_EDGES):
                assert int(got[i, j, k]) == oracle.fp32_add3(x, y, z), (hex(x), hex(y), hex(z))


def test_fp32_add3_adversarial_against_oracle():
    """The deep check's vector classes (massive cancellation with a far third operand, an
    accumulator cancelling an FP8-sized product, near-ties, exact negatives in every position,
    underflow, overflow), checked here against the exact oracle rather than the golden."""
    from diptych.rtl.fp_sweep import add3_vectors

    v = add3_vectors(4000, seed=11)
    got = numerics_ref.fp32_add3_bits(v[:, 0], v[:, 1], v[:, 2])
    for (x, y, z), g in zip(v[:, :3].tolist(), got.tolist()):
        assert g == oracle.fp32_add3(x, y, z), (hex(x), hex(y), hex(z))


def test_fp32_add3_with_negative_zero_is_the_two_operand_add():
    rng = np.random.default_rng(31)
    x, y = random_fp32(rng, 5000), random_fp32(rng, 5000)
    y[:1000] = x[:1000] ^ np.uint32(0x80000000)
    assert np.array_equal(numerics_ref.fp32_add3_bits(x, y, np.uint32(0x80000000)),
                          numerics_ref.fp32_add_bits(x, y))


@pytest.mark.parametrize("x, y, z, expected", [
    (0x3F800000, 0x33800000, 0x00800000, 0x3F800001),   # 1 + 2^-24 (tie) + tiny: rounds up
    (0x3F800000, 0x33800000, 0x80800000, 0x3F800000),   # ... minus tiny: rounds down
    (0x4B000001, 0xCB000001, 0x00800001, 0x00800001),   # x − x + tiny: the tiny, exactly
    (0x80000000, 0x80000000, 0x80000000, 0x80000000),   # all −0: −0
    (0x80000000, 0x80000000, 0x00000000, 0x00000000),   # any +0: +0
    (0x7F7FFFFF, 0x73000000, 0xF3000000, 0x7F7FFFFF),   # FLT_MAX + ½ ulp − ½ ulp: no overflow
    (0x7F7FFFFF, 0x73000000, 0x00000001, 0x7F800000),   # a subnormal third reads as zero
    (0x7F800000, 0xFF800000, 0x3F800000, 0x7FC00000),   # Inf − Inf: NaN
    (0x00C00000, 0x80800000, 0x00000000, 0x00000000),   # a subnormal result flushes to +0
])
def test_fp32_add3_named_cases(x, y, z, expected):
    assert int(numerics_ref.fp32_add3_bits(x, y, z)) == expected
    assert oracle.fp32_add3(x, y, z) == expected


@pytest.mark.parametrize("fa, fb", FP8_PAIRS)
def test_fp8_pair_matmul_against_oracle(fa, fb):
    rng = np.random.default_rng(32)
    edges = np.array(FP8_EDGES, np.uint8)
    for trial in range(5):
        m, n = rng.integers(1, 4, 2)
        k = int(rng.integers(1, 8))                       # odd K: the last product pairs with +0
        a = rng.integers(0, 256, (m, k)).astype(np.uint8)
        b = rng.integers(0x20, 0x48, (k, n)).astype(np.uint8)
        a = np.where(rng.random((m, k)) < 0.2, rng.choice(edges, (m, k)), a).astype(np.uint8)
        init = None if trial % 2 else random_fp32(rng, m * n).reshape(m, n)
        got = numerics_ref.matmul_bits(f"{fa}x{fb}" if fa != fb else fa, a, b, init, rule="pair")
        want = oracle.fp8_matmul(a.tolist(), b.tolist(), fa, fb,
                                 None if init is None else init.tolist(), rule="pair")
        assert got.tolist() == want


def test_pair_rule_rounds_once_where_the_sequential_rule_rounds_twice():
    """X, 0, h, τ with h half an ulp of X and τ tiny: one at a time, X + h ties to even (X) and
    τ is lost; the pair rule sums h and τ with X exactly and rounds away from X."""
    from diptych.rtl.minifloat import encode
    a = encode("e5m2", np.array([[1.25 * 2**15, 0.0, 2.0**3, 2.0**-16]]))
    b = encode("e5m2", np.array([[2.0**15], [0.0], [2.0**3], [2.0**-16]]))
    x = np.float32(1.25 * 2**30).view(np.uint32)
    assert int(numerics_ref.fp8_matmul_bits(a, b, "e5m2", "e5m2")[0, 0]) == x
    assert int(numerics_ref.matmul_bits("e5m2", a, b, rule="pair")[0, 0]) == x + 1
    assert oracle.fp8_matmul(a.tolist(), b.tolist(), "e5m2", "e5m2", rule="pair") == [[x + 1]]


def test_int8_and_bf16_do_not_depend_on_the_rule():
    rng = np.random.default_rng(33)
    a8, b8 = rng.integers(-128, 128, (2, 5)), rng.integers(-128, 128, (5, 3))
    a16 = rng.integers(0x3800, 0x4800, (2, 5)).astype(np.uint16)
    b16 = rng.integers(0x3800, 0x4800, (5, 3)).astype(np.uint16)
    for mode, a, b in (("int8", a8, b8), ("bf16", a16, b16)):
        for rule in ("pair", "dot4"):
            assert np.array_equal(numerics_ref.matmul_bits(mode, a, b, rule=rule),
                                  numerics_ref.matmul_bits(mode, a, b))
    with pytest.raises(ValueError, match="rule must be one of sequential, pair, dot4, mx, mxdot4, "
                                         "mxint8, fp4dot8, not 'quad'"):
        numerics_ref.matmul_bits("e4m3", a16 & 0xFF, b16 & 0xFF, rule="quad")
    for rule in ("mx", "mxdot4", "mxint8", "fp4dot8"):  # block-scaled: no scales here
        with pytest.raises(ValueError, match=f"the {rule} rule needs block scales: "
                                             "diptych.rtl.formats.mx_matmul_bits"):
            numerics_ref.matmul_bits("e4m3", a16 & 0xFF, b16 & 0xFF, rule=rule)


_U32 = st.integers(0, 2**32 - 1)


@st.composite
def _near_cancelling(draw):
    """x, −x ± a few ulps (or exactly −x), and a third operand anywhere or far below."""
    x = draw(_U32)
    y = (x ^ 0x80000000) + draw(st.integers(-3, 3))
    z = draw(st.one_of(_U32, st.integers(0, 2**31 - 1).map(
        lambda f: (f & 0x807FFFFF) | (max(1, ((x >> 23) & 0xFF) - 40) << 23))))
    return x, y & 0xFFFFFFFF, z


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.tuples(_U32, _U32, _U32), _near_cancelling()))
def test_fp32_add3_property_against_oracle_and_order_free(xyz):
    """Any three FP32 patterns: the golden three-operand add is the oracle's exact sum
    rounded once, and (being one rounding of an exact sum) the same in every operand order."""
    want = oracle.fp32_add3(*xyz)
    for perm in itertools.permutations(xyz):
        assert int(numerics_ref.fp32_add3_bits(*perm)) == want, [hex(v) for v in perm]


_FP8_FORMATS = st.sampled_from(["e4m3", "e5m2"])


@settings(max_examples=200, deadline=None)
@given(fa=_FP8_FORMATS, fb=_FP8_FORMATS, a=st.tuples(st.integers(0, 255), st.integers(0, 255)),
       b=st.tuples(st.integers(0, 255), st.integers(0, 255)), acc=_U32)
def test_pair_step_is_the_exact_sum_of_the_decoded_terms_rounded_once(fa, fb, a, b, acc):
    """One pair step straight from the spec: the FP8 codes decoded to exact rationals (OCP
    OFP8), acc + a₀b₀ + a₁b₁ summed as Fractions, one round to nearest even to FP32 with the
    contract's flushes — no FP32 product in between. Specials are left to the other tests."""
    xa = [oracle.decode_mini(fa, v) for v in a]
    xb = [oracle.decode_mini(fb, v) for v in b]
    xc = oracle.decode32(acc)
    if any(x[0] != "num" for x in (*xa, *xb, xc)):
        return
    terms = [(-1) ** xc[1] * xc[2]] + [(-1) ** (p[1] ^ q[1]) * p[2] * q[2]
                                        for p, q in zip(xa, xb)]
    total = sum(terms)
    if total == 0:
        signs = [xc[1]] + [p[1] ^ q[1] for p, q in zip(xa, xb)]
        want = 0x80000000 if all(signs) else 0
    else:
        want = oracle.encode32(int(total < 0), abs(total))
    got = numerics_ref.fp8_pair_matmul_bits(np.array([a], np.uint8), np.array([[v] for v in b],
                                                                          np.uint8),
                                      fa, fb, np.array([[acc]], np.uint32))
    assert int(got[0, 0]) == want
