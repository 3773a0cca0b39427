"""Block-scaled formats: bytes per element and per operand against the hand formula
(OCP MX v1.0: 32-element blocks, an 8-bit E8M0 scale; NVFP4: 16-element blocks, an 8-bit
E4M3 scale, one FP32 scale per tensor), and the chip fields that say where scales apply."""

from __future__ import annotations

import math

import pytest

from diptych.arch import ConfigError, chip_from_dict, load_chip, to_dict
from diptych.arch.dtypes import (BLOCK_DTYPES, DTYPE_BYTES, DTYPES, scale_count,
                                 tensor_bytes)
from diptych.sim import cache
from diptych.workloads.ops import Gemm
from diptych.arch.area import die_area_mm2

# (element bits, block, scale bits, per-tensor scale bytes): the specs' numbers, typed here
SPEC = {"mxfp4": (4, 32, 8, 0), "nvfp4": (4, 16, 8, 4), "mxfp6": (6, 32, 8, 0),
        "mxfp8": (8, 32, 8, 0), "mxint8": (8, 32, 8, 0)}


@pytest.mark.parametrize("dtype", sorted(SPEC))
def test_bytes_per_element_count_the_shared_scale(dtype):
    e, block, s, t = SPEC[dtype]
    assert DTYPE_BYTES[dtype] == e / 8 + s / 8 / block
    assert tensor_bytes(dtype, 1024) == 1024 * (e / 8 + s / 8 / block) + t


def test_named_examples_and_plain_dtypes_unchanged():
    assert DTYPE_BYTES["mxfp4"] == 0.53125 and DTYPE_BYTES["nvfp4"] == 0.5625
    assert DTYPE_BYTES["mxfp8"] == 1.03125 and DTYPE_BYTES["mxfp6"] == 0.78125
    assert {d: DTYPE_BYTES[d] for d in ("int4", "int8", "fp8", "bf16", "fp16", "fp32")} == \
        {"int4": 0.5, "int8": 1.0, "fp8": 1.0, "bf16": 2.0, "fp16": 2.0, "fp32": 4.0}
    assert set(BLOCK_DTYPES) == set(SPEC) and set(BLOCK_DTYPES) < set(DTYPES)


@pytest.mark.parametrize("m,k,n,batch,shared", [(3, 100, 64, 1, True), (7, 64, 48, 3, False),
                                                (1, 8192, 1024, 1, True)])
def test_gemm_operand_bytes_match_the_hand_formula(m, k, n, batch, shared):
    g = Gemm(name="g", m=m, k=k, n=n, batch=batch, a_dtype="mxfp8", b_dtype="nvfp4",
             c_dtype="mxfp4", b_is_weight=shared)
    nb = 1 if shared else batch
    # A: m x k blocked along k; B: k x n along k; C: m x n along n (the next A)
    a = batch * (m * k * 1.0 + m * math.ceil(k / 32) * 1.0)
    b = nb * k * n * 0.5 + nb * n * math.ceil(k / 16) * 1.0 + 4
    c = batch * (m * n * 0.5 + m * math.ceil(n / 32) * 1.0)
    assert (g.a_bytes, g.b_bytes, g.c_bytes) == (a, b, c)
    assert g.b_scale_bytes == nb * n * math.ceil(k / 16) + 4
    # a multiple of the block: exactly elements x bytes per element (+ per-tensor scale)
    if k % 32 == 0 and not (n % 32):
        assert g.a_bytes == batch * m * k * DTYPE_BYTES["mxfp8"]


def test_partial_last_block_is_padded():
    assert scale_count("mxfp4", 5, 33) == 10 and scale_count("bf16", 5, 33) == 0


def test_plain_gemm_bytes_unchanged():
    g = Gemm(name="g", m=5, k=7, n=9, a_dtype="bf16", b_dtype="int4", c_dtype="bf16")
    assert (g.a_bytes, g.b_bytes, g.c_bytes) == (5 * 7 * 2, 7 * 9 * 0.5, 5 * 9 * 2)
    assert g.a_scale_bytes == g.b_scale_bytes == g.c_scale_bytes == 0


def _chip(**array):
    d = to_dict(load_chip("train-2026"))
    d["core"]["array"].update(array)
    return chip_from_dict(d, source="t.toml")


def test_block_rate_needs_a_scale_place():
    with pytest.raises(ConfigError, match=r"core\.array\.block_scale.*mxfp8.*'none'"):
        _chip(block_scale="none")
    assert _chip(block_scale="vector").core.array.block_scale == "vector"
    with pytest.raises(ConfigError, match=r"core\.array\.block_scale"):
        _chip(block_scale="alu")


def test_mixed_input_pairs_are_checked():
    assert _chip(mixed_input=["int4xbf16"]).core.array.mixed_input == ("int4xbf16",)
    with pytest.raises(ConfigError, match=r"core\.array\.mixed_input.*int4xint8"):
        _chip(mixed_input=["int4xint8"])          # no int8 datapath on train-2026
    with pytest.raises(ConfigError, match=r"core\.array\.mixed_input"):
        _chip(mixed_input=["bf16xint4"])          # weights wider than activations
    with pytest.raises(ConfigError, match=r"core\.array\.dequant"):
        _chip(dequant="pe")


def test_presets_supporting_block_formats():
    inf = load_chip("infer-2026")
    r = inf.core.array.macs_per_pe_per_cycle
    assert inf.core.array.block_scale == "pe"
    assert r["mxfp4"] == r["nvfp4"] == 2 * r["fp8"] and r["mxfp8"] == r["fp8"]
    assert load_chip("train-2026").supports("mxfp8")
    assert not any(load_chip("h100").supports(d) for d in BLOCK_DTYPES)
    # mxfp8 and mxfp6 have an area coefficient (the mxdot4 PE's synthesis, docs/dse.md 1.2):
    # it sizes infer-2026's PE (at 1 MAC per cycle, 0.341e-3 mm2 against fp8's 0.272e-3) and
    # not train-2026's (fp16 does); infer-2026's mxfp4 and nvfp4 (the fp4dot8 PE's, 1.3: 2 x
    # 0.119e-3) stay under it, so removing every block format moves only mxfp8's share
    for name, mxfp8_adds in (("infer-2026", 0.341e-3 - 0.272e-3), ("train-2026", 0.0)):
        chip = load_chip(name)
        d = to_dict(chip)
        rates = d["core"]["array"]["macs_per_pe_per_cycle"]
        for fmt in BLOCK_DTYPES:
            rates.pop(fmt, None)
        d["core"]["array"]["block_scale"] = "none"
        d["core"]["array"]["mixed_input"] = [p for p in d["core"]["array"]["mixed_input"]
                                             if not any(f in p for f in BLOCK_DTYPES)]
        without = chip_from_dict(d, source=name)
        pes = chip.arrays * chip.core.array.pes
        assert die_area_mm2(chip) == pytest.approx(die_area_mm2(without) + pes * mxfp8_adds,
                                                   rel=1e-12)


def test_cache_key_sees_new_fields_and_dtypes():
    base = _chip(block_scale="pe")
    g = Gemm(name="", m=1, k=64, n=64, a_dtype="mxfp8", b_dtype="mxfp8")
    keys = {cache.key("gemm", g, base, None),
            cache.key("gemm", g, _chip(block_scale="vector"), None),
            cache.key("gemm", g, _chip(block_scale="pe", mixed_input=["int4xbf16"]), None),
            cache.key("gemm", g, _chip(block_scale="pe", dequant="none"), None),
            cache.key("gemm", Gemm(name="", m=1, k=64, n=64, a_dtype="mxfp8",
                                   b_dtype="mxfp4"), base, None)}
    assert len(keys) == 5
