"""Fast tier: the FP units and MACs in amaranth.sim against the golden model and the oracle."""

import numpy as np
import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

import rtl_fraction_ref as oracle
from diptych.rtl import numerics_ref
from diptych.rtl.datapath import MODE_CODES, get_datapath
from diptych.rtl.fp import Bf16Multiplier, Fp8Multiplier, Fp32Adder
from diptych.rtl.fused import Fp32Add3, ProductLane
from diptych.rtl.pe import Mac
from rtl_test_vectors import BF16_EDGES, FP8_EDGES, FP32_EDGES, random_fp32


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
    assert got == numerics_ref.bf16_mul_bits(xs, ys).tolist()


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
    want = numerics_ref.fp32_add_bits(xs, ys).tolist()
    bad = [(hex(x), hex(y), hex(g), hex(w)) for x, y, g, w in zip(xs, ys, got, want) if g != w]
    assert not bad, bad[:10]


# ---- FP8 multiplier and the MACs of the fp8 and multi datapaths ---------------------------

_FMT = {"e4m3": 0, "e5m2": 1}


def _run_fp8(pairs):
    """[(a, b, fmt_a, fmt_b)] through the Fp8Multiplier in amaranth.sim."""
    dut = Fp8Multiplier()
    got = []

    async def tb(ctx):
        for a, b, fa, fb in pairs:
            ctx.set(dut.a, int(a))
            ctx.set(dut.b, int(b))
            ctx.set(dut.a_e5m2, _FMT[fa])
            ctx.set(dut.b_e5m2, _FMT[fb])
            got.append(ctx.get(dut.p))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return got


@pytest.mark.parametrize("fa, fb", [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"),
                                    ("e5m2", "e4m3")])
def test_fp8_multiplier_edges_against_oracle(fa, fb):
    pairs = [(x, y, fa, fb) for x in FP8_EDGES for y in FP8_EDGES]
    assert _run_fp8(pairs) == [oracle.fp8_mul(x, y, fa, fb) for x, y, _, _ in pairs]


def test_fp8_multiplier_random_against_golden():
    rng = np.random.default_rng(14)
    n = 4000
    a, b = rng.integers(0, 256, n), rng.integers(0, 256, n)
    fmts = [("e4m3", "e5m2")[i] for i in rng.integers(0, 2, 2 * n)]
    pairs = list(zip(a, b, fmts[:n], fmts[n:]))
    want = [int(numerics_ref.fp8_mul_bits(np.uint8(x), np.uint8(y), fa, fb))
            for x, y, fa, fb in pairs]
    assert _run_fp8(pairs) == want


def _run_mac(dut, vectors):
    """``dut.result`` for each (mode code, a, b, acc), combinationally in amaranth.sim."""
    got = []

    async def tb(ctx):
        for code, a, b, acc in vectors:
            ctx.set(dut.mode, code)
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.acc, acc)
            got.append(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return got


def _lane(x, n, w):
    return sum(int(v) << (w * t) for t, v in enumerate(np.ravel(x)[:n]))


@pytest.mark.parametrize("dtype", ["fp8", "multi", "fused"])
def test_mac_every_mode_against_golden(dtype):
    """``result = acc + a·b`` (multi, 8-bit modes: ``(acc + a₀b₀) + a₁b₁``; fused:
    ``round(acc + a₀b₀ + a₁b₁)``) in every mode, by the datapath's golden rule."""
    dp = get_datapath(dtype)
    rng = np.random.default_rng(15)
    dut = Mac(dtype)
    cases = []
    for mode in dp.modes:
        n = dp.macs_per_cycle(mode)
        for _ in range(150):
            if mode == "int8":
                a = rng.integers(-128, 128, (1, n)).astype(np.int8)
                b = rng.integers(-128, 128, (n, 1)).astype(np.int8)
                acc = rng.integers(0, 2**32, (1, 1), dtype=np.uint64).astype(np.uint32)
            else:
                a = rng.integers(0, 1 << dp.element_bits(mode), (1, n))
                b = rng.integers(0, 1 << dp.element_bits(mode), (n, 1))
                acc = random_fp32(rng, 1).reshape(1, 1)
            want = int(numerics_ref.matmul_bits(mode, a, b, acc, rule=dp.rule)[0, 0])
            eb = dp.element_bits(mode)
            cases.append((MODE_CODES[mode], _lane(a.view(np.uint8) if mode == "int8" else a,
                                                  n, eb),
                          _lane(b.T.view(np.uint8) if mode == "int8" else b.T, n, eb),
                          int(acc[0, 0]), want, mode))
    got = _run_mac(dut, [c[:4] for c in cases])
    bad = [(c[5], hex(c[1]), hex(c[2]), hex(c[3]), hex(g), hex(c[4]))
           for c, g in zip(cases, got) if g != c[4]]
    assert not bad, bad[:5]


# ---- the fused datapath: product lanes and the exact three-operand adder ------------------

def _run_add3(triples):
    dut = Fp32Add3()
    got = []

    async def tb(ctx):
        for x, y, z in triples:
            ctx.set(dut.a, int(x))
            ctx.set(dut.b, int(y))
            ctx.set(dut.c, int(z))
            got.append(ctx.get(dut.s))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return got


def test_add3_edges_against_oracle():
    """A sample of the FP32 edge cube (every value in every position, with every other)."""
    rng = np.random.default_rng(41)
    e = FP32_EDGES
    triples = [(x, y, rng.choice(e)) for x in e for y in e] + \
              [(rng.choice(e), x, y) for x in e for y in e[::2]]
    got = _run_add3(triples)
    bad = [(hex(x), hex(y), hex(z), hex(g)) for (x, y, z), g in zip(triples, got)
           if g != oracle.fp32_add3(int(x), int(y), int(z))]
    assert not bad, bad[:5]


def test_add3_adversarial_against_golden():
    """The deep check's vector classes (fp_sweep.add3_vectors), a sample in amaranth.sim."""
    from diptych.rtl.fp_sweep import add3_vectors

    v = add3_vectors(480, seed=12)        # 60 of each class; the slow tier checks 20,000
    got = _run_add3(v[:, :3].tolist())
    bad = [tuple(hex(int(t)) for t in row) + (hex(g),) for row, g in zip(v, got)
           if g != int(row[3])]
    assert not bad, bad[:5]


@pytest.mark.parametrize("bf16", [True, False])
def test_product_lanes_against_golden(bf16):
    """Each lane's one multiplier: int8 × int8, every FP8 format pair on the edge codes and at
    random, and (lane 0) bf16 × bf16, against the golden model's products."""
    rng = np.random.default_rng(42)
    dut = ProductLane(bf16=bf16)
    cases = []
    for a, b in zip(rng.integers(-128, 128, 300), rng.integers(-128, 128, 300)):
        cases.append((MODE_CODES["int8"], int(a) & 0xFF, int(b) & 0xFF, "ip",
                      (int(a) * int(b)) & 0xFFFF))
    for mode in ("e4m3", "e5m2", "e4m3xe5m2", "e5m2xe4m3"):
        fa, fb = numerics_ref.mode_formats(mode)
        pairs = [(x, y) for x in FP8_EDGES for y in FP8_EDGES[::3]]
        pairs += list(zip(rng.integers(0, 256, 200).tolist(), rng.integers(0, 256, 200).tolist()))
        for x, y in pairs:
            cases.append((MODE_CODES[mode], x, y, "p",
                          int(numerics_ref.fp8_mul_bits(np.uint8(x), np.uint8(y), fa, fb))))
    if bf16:
        xs = list(BF16_EDGES) + rng.integers(0, 2**16, 600).tolist()
        ys = list(BF16_EDGES[::-1]) + rng.integers(0, 2**16, 600).tolist()
        for x, y in zip(xs, ys):
            cases.append((MODE_CODES["bf16"], x, y, "p", int(numerics_ref.bf16_mul_bits(x, y))))
    got = []

    async def tb(ctx):
        for code, a, b, port, _ in cases:
            ctx.set(dut.mode, code)
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            got.append(ctx.get(getattr(dut, port)))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    bad = [(c[0], hex(c[1]), hex(c[2]), hex(g), hex(c[4])) for c, g in zip(cases, got)
           if g != c[4]]
    assert not bad, bad[:5]


def _f8(fmt, v):
    """FP8 code of the exact value ``v`` (the oracle's encoder; it must be exact here)."""
    from fractions import Fraction
    v = Fraction(v)
    code = oracle.encode_mini(fmt, int(v < 0), abs(v))
    assert oracle.decode_mini(fmt, code)[2] == abs(v), (fmt, v)
    return code


def _f32(v):
    from fractions import Fraction
    return oracle.encode32(int(v < 0), abs(Fraction(v)))


_X = 5 * 2**28                     # 1.25 · 2^30: FP32 ulp 2^7, so 2^6 is an exact tie
_E5 = "e5m2"
#: (name, mode, (a0, a1), (b0, b1), acc bits): FP8 elements as exact values (or raw codes
#: given as strings), bf16 elements as bit patterns (one lane)
_FUSED_DIRECTED = [
    ("tie broken up by a product 2^-62 of acc", "e5m2", (2**3, 2**-16), (2**3, 2**-16), _f32(_X)),
    ("tie broken down by a product 2^-62 of acc", "e5m2", (2**3, -2**-16), (2**3, 2**-16),
     _f32(_X)),
    ("tie with E4M3's smallest product", "e4m3", (2**3, 2**-9), (2**3, 2**-9), _f32(_X)),
    ("plain tie (second product 0): to even", "e5m2", (2**3, 0), (2**3, 1), _f32(_X)),
    ("acc cancels both products exactly: +0", "e4m3", (6, 1), (8, 2), _f32(-50)),
    ("all three −0: −0", "e4m3", ("0x80", "0x80"), (1, 1), 0x80000000),
    ("−0 acc, −0 and +0 products: +0", "e4m3", ("0x80", 0), (1, 1), 0x80000000),
    ("subnormal acc reads as −0: −0", "e5m2", ("0x80", "0x80"), (1, 1), 0x80000001),
    ("subnormal acc reads as +0", "e5m2", (0, 0), (1, 1), 0x00000001),
    ("acc cancels the first product, the tiny second is left exactly", "e5m2",
     (1.5 * 2**8, -2**-16), (1.75 * 2**8, 2**-16), _f32(-1.5 * 1.75 * 2**16)),
    ("acc holds X + t, a product cancels X, t + tiny rounds once", "e5m2",
     (-1.5 * 2**8, 2**-16), (1.75 * 2**8, 2**-15), _f32(1.5 * 1.75 * 2**16) + 3),
    ("the two products cancel each other: acc exactly", "e4m3", (448, -448), (2, 2),
     _f32(2**-100)),
    ("FLT_MAX plus the largest products does not overflow", "e5m2", (57344, 57344),
     (57344, 57344), 0x7F7FFFFF),
    ("E4M3 S.1111.000 is 256, not Inf", "e4m3", ("0x78", 0), (1, 0), 0),
    ("E4M3 S.1111.111 is NaN", "e4m3", ("0x7F", 1), (1, 1), 0),
    ("E5M2 +Inf and −Inf products: NaN", "e5m2", ("0x7C", "0xFC"), (1, 1), 0),
    ("E5M2 Inf × 0: NaN", "e5m2", ("0x7C", 1), (0, 1), 0),
    ("E5M2 Inf product into a finite acc: Inf", "e5m2", ("0xFC", 1), (1, 1), 0x7F7FFFFF),
    ("+Inf acc and a −Inf product: NaN", "e4m3xe5m2", (1, 1), ("0xFC", 0), 0x7F800000),
    ("NaN acc: canonical NaN", "e5m2xe4m3", (1, 1), (1, 1), 0xFFC00001),
    ("bf16: the sum falls below 2^-126 and flushes to +0", "bf16", (0xA000,), (0x2000,),
     0x00C00000),
    ("bf16: −1.5·2^-126 + 2^-126 flushes to −0", "bf16", (0x2000,), (0x2000,), 0x80C00000),
    ("bf16: FLT_MAX + one ulp overflows to +Inf", "bf16", (0x5F80,), (0x5380,), 0x7F7FFFFF),
    ("bf16: FLT_MAX + ½ ulp ties to even, into overflow", "bf16", (0x5F80,), (0x5300,),
     0x7F7FFFFF),
    ("bf16: acc cancels the product exactly: +0", "bf16", (0xC040,), (0x3F80,), _f32(3)),
]


def _fused_case(mode, a, b, acc):
    """(lane a, lane b, oracle result) of a directed case."""
    fa, fb = numerics_ref.mode_formats(mode)
    if mode == "bf16":
        return a[0], b[0], oracle.bf16_matmul([list(a)], [[x] for x in b], [[acc]])[0][0]
    ca = [int(v, 16) if isinstance(v, str) else _f8(fa, v) for v in a]
    cb = [int(v, 16) if isinstance(v, str) else _f8(fb, v) for v in b]
    want = oracle.fp8_matmul([ca], [[x] for x in cb], fa, fb, [[acc]], rule="pair")[0][0]
    return ca[0] | ca[1] << 8, cb[0] | cb[1] << 8, want


def test_fused_mac_directed_against_the_fraction_oracle():
    """The fused MAC (amaranth.sim) on directed pairs: ties only a far product decides,
    cancellation (exact, to a tiny residue), signed zeros, subnormal accumulators and sums,
    FP32 overflow (bf16), E4M3's 256 and NaN, E5M2 Inf and NaN — against the exact oracle
    (acc + a₀b₀ + a₁b₁ rounded once; bf16 acc + a·b) and the golden model."""
    cases = [(name, mode, acc, *_fused_case(mode, a, b, acc))
             for name, mode, a, b, acc in _FUSED_DIRECTED]
    for name, mode, acc, la, lb, want in cases:
        n = 1 if mode == "bf16" else 2
        w = 16 if mode == "bf16" else 8
        ea = np.array([[(la >> (w * i)) & ((1 << w) - 1) for i in range(n)]])
        eb = np.array([[(lb >> (w * i)) & ((1 << w) - 1)] for i in range(n)])
        gold = numerics_ref.matmul_bits(mode, ea, eb, np.array([[acc]], np.uint32), rule="pair")
        assert int(gold[0, 0]) == want, name
    got = _run_mac(Mac("fused"), [(MODE_CODES[mode], la, lb, acc)
                                  for _, mode, acc, la, lb, _ in cases])
    bad = [(c[0], hex(g), hex(c[5])) for c, g in zip(cases, got) if g != c[5]]
    assert not bad, bad


def test_fused_directed_cases_mean_what_they_say():
    """The directed cases' expected results, stated independently of both models."""
    want = {c[0]: c for c in _FUSED_DIRECTED}

    def expect(name, mode, a, b, acc):
        return _fused_case(mode, a, b, acc)[2]
    x = _f32(_X)
    assert expect(*want["tie broken up by a product 2^-62 of acc"]) == x + 1
    assert expect(*want["tie broken down by a product 2^-62 of acc"]) == x
    assert expect(*want["tie with E4M3's smallest product"]) == x + 1
    assert expect(*want["plain tie (second product 0): to even"]) == x
    assert expect(*want["acc cancels both products exactly: +0"]) == 0
    assert expect(*want["all three −0: −0"]) == 0x80000000
    assert expect(*want["−0 acc, −0 and +0 products: +0"]) == 0
    assert expect(*want["subnormal acc reads as −0: −0"]) == 0x80000000
    assert expect(*want["acc cancels the first product, the tiny second is left exactly"]) \
        == 0xAF800000                                               # −2^-32
    assert expect(*want["the two products cancel each other: acc exactly"]) == _f32(2**-100)
    assert expect(*want["FLT_MAX plus the largest products does not overflow"]) == 0x7F7FFFFF
    assert expect(*want["E4M3 S.1111.000 is 256, not Inf"]) == _f32(256)
    for nan in ("E4M3 S.1111.111 is NaN", "E5M2 +Inf and −Inf products: NaN",
                "E5M2 Inf × 0: NaN", "+Inf acc and a −Inf product: NaN", "NaN acc: canonical NaN"):
        assert expect(*want[nan]) == numerics_ref.CANONICAL_NAN
    assert expect(*want["E5M2 Inf product into a finite acc: Inf"]) == 0xFF800000
    assert expect(*want["bf16: the sum falls below 2^-126 and flushes to +0"]) == 0
    assert expect(*want["bf16: −1.5·2^-126 + 2^-126 flushes to −0"]) == 0x80000000
    assert expect(*want["bf16: FLT_MAX + one ulp overflows to +Inf"]) == 0x7F800000
    assert expect(*want["bf16: FLT_MAX + ½ ulp ties to even, into overflow"]) == 0x7F800000
    assert expect(*want["bf16: acc cancels the product exactly: +0"]) == 0
