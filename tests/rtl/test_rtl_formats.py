"""Element and block-scaled formats (FP8/FP6/FP4, MX, NVFP4) against the Fraction oracle."""

from fractions import Fraction

import numpy as np
import pytest

import rtl_fraction_ref as oracle
from diptych.rtl import formats as F
from diptych.rtl import minifloat as mf

MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8"]


@pytest.mark.parametrize("name", list(mf.FORMATS))
def test_decode_every_code(name):
    vals = mf.decode(name, np.arange(1 << mf.FORMATS[name].bits))
    for code, v in enumerate(vals):
        d = oracle.decode_mini(name, code)
        if d[0] == "nan":
            assert np.isnan(v), (name, code)
        elif d[0] == "inf":
            assert v == (-np.inf if d[1] else np.inf), (name, code)
        else:
            assert Fraction(float(v)) == (-d[2] if d[1] else d[2]), (name, code)
            assert bool(np.signbit(v)) == bool(d[1])
    assert Fraction(mf.FORMATS[name].max_value) == oracle.mini_max(name)


def _encode_vectors(name, rng):
    """Random values over the format's range and beyond, every value, every midpoint between
    neighbours (ties), just either side of them, the overflow threshold max + ½ ulp, specials."""
    f = mf.FORMATS[name]
    pos = np.unique(np.abs(f.table[np.isfinite(f.table)]))
    mids = (pos[:-1] + pos[1:]) / 2
    ulp = pos[-1] - pos[-2]
    near = np.concatenate([np.nextafter(mids, 0), np.nextafter(mids, np.inf)])
    over = np.array([pos[-1] + ulp / 2, np.nextafter(pos[-1] + ulp / 2, 0),
                     np.nextafter(pos[-1] + ulp / 2, np.inf), pos[-1] * 4, 1e300, pos[1] / 2,
                     pos[1] / 3])
    rand = rng.standard_normal(800) * np.exp2(rng.integers(-12, 18, 800))
    x = np.concatenate([pos, mids, near, over, rand])
    return np.concatenate([x, -x, [0.0, -0.0]])


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("name", list(mf.FORMATS))
def test_encode_against_oracle(name, saturate):
    x = _encode_vectors(name, np.random.default_rng(31))
    got = mf.encode(name, x, saturate=saturate)
    for xi, g in zip(x.tolist(), got.tolist()):
        want = oracle.encode_mini(name, int(np.signbit(xi)), abs(Fraction(xi)), saturate)
        assert g == want, (name, saturate, xi, hex(g), hex(want))


def test_encode_specials():
    assert mf.encode("e4m3", [np.nan, np.inf, -np.inf]).tolist() == [0x7F, 0x7E, 0xFE]
    assert mf.encode("e4m3", [np.inf, 464.0, 464.1], saturate=False).tolist() == [0x7F, 0x7E,
                                                                                   0x7F]
    assert mf.encode("e5m2", [np.inf, 61440.0, 61439.0], saturate=False).tolist() == [0x7C, 0x7C,
                                                                                     0x7B]
    assert mf.encode("e2m1", [np.nan, 1e9, -7.0]).tolist() == [0x0, 0x7, 0xF]


def _blocks(rng, n_blocks, block):
    """FP32 blocks of varied scale, with zeros, ties to even, subnormals and huge values."""
    out = []
    for b in range(n_blocks):
        x = rng.standard_normal(block) * 2.0 ** int(rng.integers(-40, 40))
        kind = b % 6
        if kind == 1:
            x[rng.integers(0, block, block // 4)] = 0.0
        elif kind == 2:                                  # exact ties once scaled
            x = rng.integers(-64, 64, block) * 0.25 * 2.0 ** int(rng.integers(-5, 5))
        elif kind == 3:
            x = rng.standard_normal(block) * 2.0 ** -140  # FP32 subnormals
        elif kind == 4:
            x = rng.standard_normal(block) * 2.0 ** 126
        elif kind == 5:
            x[:] = 0.0
        out.append(x)
    return np.concatenate(out).astype(np.float32)


@pytest.mark.parametrize("name", MX)
def test_mx_quantize_against_oracle(name):
    rng = np.random.default_rng(32)
    x = _blocks(rng, 24, 32)
    q = F.quantize(x, name)
    assert q.elements.shape == x.shape and q.scales.shape == (24,)
    for j in range(24):
        sc, el = oracle.mx_quantize_block(x[32 * j:32 * (j + 1)], name)
        assert int(q.scales[j]) == sc, (name, j)
        assert q.elements[32 * j:32 * (j + 1)].tolist() == el, (name, j)


def test_nvfp4_quantize_against_oracle():
    rng = np.random.default_rng(33)
    for trial in range(6):
        x = _blocks(rng, 8, 16)
        x = x * np.float32(2.0 ** int(rng.integers(-30, 1))) if trial < 5 else x * 0
        q = F.quantize(x, "nvfp4")
        ts = oracle.nvfp4_tensor_scale(x)
        assert Fraction(q.tensor_scale) == ts
        for j in range(8):
            sc, el = oracle.nvfp4_quantize_block(x[16 * j:16 * (j + 1)], ts)
            assert int(q.scales[j]) == sc and q.elements[16 * j:16 * (j + 1)].tolist() == el


def test_quantize_rules_in_closed_form():
    # MXFP4: amax 5.0 → floor(log2 5) − emax(E2M1 = 2) = 0, scale 2^0 (code 127); 5 → 4 (tie)
    q = F.quantize(np.array([5.0, 1.0, -0.25] + [0.0] * 29, np.float32), "mxfp4")
    assert int(q.scales[0]) == 127 and F.dequantize(q)[:3].tolist() == [4.0, 1.0, -0.0]
    # MXFP8 E4M3: amax 1000 → 9 − 8 = 1, elements 500 → saturate at 448 → 896
    q = F.quantize(np.array([1000.0] + [3.0] * 31, np.float32), "mxfp8_e4m3")
    assert int(q.scales[0]) == 128 and F.dequantize(q)[:2].tolist() == [896.0, 3.0]
    # MXINT8: amax 3 → scale 2^1; 3/2 = 1.5 → 96/64
    q = F.quantize(np.array([3.0, -1.0] + [0.0] * 30, np.float32), "mxint8")
    assert int(q.scales[0]) == 128 and q.elements[:2].view(np.int8).tolist() == [96, -32]
    # a NaN or Inf in a block makes its scale NaN (0xFF), other blocks are unaffected
    x = np.ones(64, np.float32)
    x[3] = np.inf
    q = F.quantize(x, "mxfp6_e3m2")
    assert q.scales.tolist() == [0xFF, 127 - 4]
    assert np.isnan(F.dequantize(q)[:32]).all()
    # NVFP4: amax 6·448 → tensor scale 1; a block of amax 3 → E4M3(0.5), elements ×2
    x = np.zeros(32, np.float32)
    x[0], x[16], x[17] = 6 * 448, 3.0, 1.0
    q = F.quantize(x, "nvfp4")
    assert q.tensor_scale == 1.0 and F.dequantize(q)[[0, 16, 17]].tolist() == [2688.0, 3.0, 1.0]


def test_bits_per_element():
    got = {n: f.bits_per_element for n, f in F.BLOCK_FORMATS.items()}
    assert got == {"mxfp8_e4m3": 8.25, "mxfp8_e5m2": 8.25, "mxfp6_e3m2": 6.25,
                   "mxfp6_e2m3": 6.25, "mxfp4": 4.25, "mxint8": 8.25, "nvfp4": 4.5}


@pytest.mark.parametrize("name", MX + ["nvfp4"])
def test_dequantize_is_exact(name):
    rng = np.random.default_rng(34)
    bf = F.BLOCK_FORMATS[name]
    q = F.quantize(_blocks(rng, 6, bf.block), name)
    got = F.dequantize(q)
    for i in range(0, q.elements.size, 7):
        e = oracle.decode_element(bf.element, int(q.elements[i]))
        s = oracle.decode_scale(bf.scale, int(q.scales[i // bf.block]))
        if s[0] == "nan" or e[0] != "num":
            assert not np.isfinite(got[i])
            continue
        want = (-e[2] if e[1] else e[2]) * s[2] * Fraction(q.tensor_scale or 1)
        assert Fraction(float(got[i])) == want


def _oracle_dot(a, b):
    ts = lambda t: None if t.tensor_scale is None else Fraction(t.tensor_scale)   # noqa: E731
    return oracle.block_dot(a.fmt.name, a.elements, a.scales, b.fmt.name, b.elements, b.scales,
                            ts(a), ts(b))


@pytest.mark.parametrize("fa, fb", [(n, n) for n in MX + ["nvfp4"]]
                         + [("mxfp8_e4m3", "mxfp4"), ("mxfp6_e2m3", "mxfp8_e5m2"),
                            ("mxint8", "mxfp6_e3m2")])
def test_block_dot_of_quantized_data_against_oracle(fa, fb):
    rng = np.random.default_rng(35)
    blk = F.BLOCK_FORMATS[fa].block
    for _ in range(6):
        k = blk * int(rng.integers(1, 5))
        a = F.quantize(_blocks(rng, k // blk, blk), fa)
        b = F.quantize(_blocks(rng, k // blk, blk), fb)
        assert F.block_dot_bits(a, b) == _oracle_dot(a, b), (fa, fb)


@pytest.mark.parametrize("name", MX + ["nvfp4"])
def test_block_dot_of_random_codes_with_specials(name):
    """Random element and scale codes: NaN/Inf elements, NaN scales, extreme scales whose dots
    overflow to Inf or fall below FP32's normal range and flush."""
    rng = np.random.default_rng(36)
    bf = F.BLOCK_FORMATS[name]
    width = bf.element_bits
    for trial in range(12):
        nb = int(rng.integers(1, 4))
        k = nb * bf.block

        def tensor():
            el = rng.integers(0, 1 << width, k).astype(np.uint8)
            if bf.scale == "e8m0":
                sc = rng.choice([0, 1, 20, 100, 127, 140, 200, 254, 0xFF], nb,
                                p=[.1, .1, .1, .15, .15, .15, .1, .1, .05])
            else:
                sc = rng.integers(0, 0x7F, nb)
            ts = float(np.float32(2.0 ** rng.integers(-60, 60))) if bf.tensor_scale else None
            return F.BlockTensor(bf, el, sc.astype(np.uint8), ts)
        a, b = tensor(), tensor()
        assert F.block_dot_bits(a, b) == _oracle_dot(a, b), (name, trial)


def test_block_matmul_shapes_and_rows():
    rng = np.random.default_rng(37)
    a = F.quantize(rng.standard_normal((3, 64)).astype(np.float32), "mxfp8_e4m3")
    b = F.quantize(rng.standard_normal((2, 64)).astype(np.float32), "mxfp8_e4m3")
    c = F.block_matmul_bits(a, b)
    assert c.shape == (3, 2)
    row = F.BlockTensor(a.fmt, a.elements[1], a.scales[1])
    col = F.BlockTensor(b.fmt, b.elements[0], b.scales[0])
    assert int(c[1, 0]) == F.block_dot_bits(row, col)
    # close to the exact dot of the dequantised values (one rounding per block, FP32 sums)
    exact = F.dequantize(a) @ F.dequantize(b).T
    assert np.allclose(c.view(np.float32), exact, rtol=1e-6)


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="block size 32 does not divide the last axis of x "
                                         r"\(K = 48\)"):
        F.quantize(np.zeros(48, np.float32), "mxfp4")
    with pytest.raises(ValueError, match="block format must be one of .* not 'mxfp3'"):
        F.quantize(np.zeros(32, np.float32), "mxfp3")
    with pytest.raises(ValueError, match="block sizes differ: mxfp4 has 32, nvfp4 16"):
        F.block_dot_bits(F.quantize(np.ones(32, np.float32), "mxfp4"),
                         F.quantize(np.ones(32, np.float32), "nvfp4"))
    with pytest.raises(ValueError, match="mxfp4 has no tensor scale"):
        F.quantize(np.ones(32, np.float32), "mxfp4", tensor_scale=2.0)
    with pytest.raises(ValueError, match="block must be a positive integer, not 0"):
        F.get_block_format("mxfp4", 0)
    with pytest.raises(ValueError, match="element format must be one of"):
        mf.decode("e3m4", [1])
    with pytest.raises(ValueError, match="E8M0 codes must be integers"):
        mf.e8m0_decode([256])
    f16 = F.get_block_format("mxfp4", 16)
    assert f16.block == 16 and "non-standard" in f16.spec
