"""Transformer Engine's split accumulator (docs/precision.md, "The split accumulator"): the
FP8 recipes run their dgrad and wgrad GEMMs with cuBLAS's fast accumulation off (TE v1.11
``module/base.py``: ``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = True``, ``_2X_ACC_WGRAD =
True``), and a chip with a ``[split_accumulator]`` table pays the exposed share of the FP32
promotions on its vector unit (``<gemm>.promote``). Checked against the closed form of the
promotion cost of one GEMM (datasheet rates: 132 SMs × 128 FP32 lanes at 1.83 GHz against
4,096 FP8 MACs per SM per clock) and of a whole step (from the model's shapes, not the lowered
ops); BF16 steps, forward GEMMs and chips without the table do not move."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
from roofline_double import roofline

from diptych.arch import chip_from_dict, load_chip, to_dict
from diptych.arch.schema import ConfigError
from diptych.sim.run import Scenario, run_workload
from diptych.sim.run.precision_ops import precision_ops, promote_op
from diptych.sim.vector import vector_stats
from diptych.workloads import Precision, load_model, train_step
from diptych.workloads.ops import Gemm
from diptych.workloads.recipe import SPLIT_ACC_TAG

#: the h100 preset as NVIDIA publishes the part [S]: 132 SMs, 128 FP32 CUDA cores each,
#: 4,096 dense FP8 MACs per SM per clock (1,979 TFLOPS), 1.83 GHz
SMS, LANES, FP8_MACS, CLOCK_HZ = 132, 128, 4096, 1.83e9


def _h100(**table):
    d = to_dict(load_chip("h100"))
    d["split_accumulator"].update(table)
    return chip_from_dict(d, source="h100-variant")


def _dgrad(m, k, n, **kw):
    return Gemm(name="fc2.dgrad", m=m, k=k, n=n, a_dtype="fp8", b_dtype="fp8",
                tags=("quantized", "dgrad", SPLIT_ACC_TAG), **kw)


@pytest.mark.parametrize("recipe", ["fp8-delayed", "fp8-current"])
def test_the_recipe_splits_the_accumulator_of_dgrad_and_wgrad_not_fprop(recipe):
    w = train_step(load_model("llama-3-8b"), 1, 512, precision=Precision(linear="fp8",
                                                                        recipe=recipe))
    gemms = [o for b in w.blocks for o in b.ops if isinstance(o, Gemm)]
    split = {o.name for o in gemms if SPLIT_ACC_TAG in o.tags}
    fp8 = [o for o in gemms if "quantized" in o.tags]
    assert split and split == {o.name for o in fp8 if {"dgrad", "wgrad"} & set(o.tags)}
    # every FP8 linear's forward GEMM keeps fast accumulation; the LM head is BF16
    assert all(o.name not in split for o in fp8 if not {"dgrad", "wgrad"} & set(o.tags))
    bf16 = train_step(load_model("llama-3-8b"), 1, 512)
    assert not any(SPLIT_ACC_TAG in o.tags for b in bf16.blocks for o in b.ops
                   if isinstance(o, Gemm))


@pytest.mark.parametrize("m,k,n", [(8192, 4096, 14336), (4096, 14336, 4096), (512, 200, 384)])
@pytest.mark.parametrize("overlap", [0.0, 0.5])
def test_one_gemm_pays_its_exposed_promotions(m, k, n, overlap):
    chip = _h100(overlap=overlap)
    op = promote_op(_dgrad(m, k, n), chip)
    promotions = math.ceil(k / 128)                     # one every 128 elements of K
    assert op.name == "fc2.dgrad.promote" and op.elements == m * n * promotions
    exposed_adds = m * n * promotions * (1 - overlap)   # one FP32 add per output element each
    want_s = math.ceil(exposed_adds / (SMS * LANES)) / CLOCK_HZ
    assert vector_stats(op, chip).seconds == pytest.approx(want_s, rel=1e-12)
    assert op.read_bytes == 0 and op.scratchpad_read_bytes == 0  # accumulators in registers
    if k % 128 == 0:
        # against the GEMM's tensor time at the FP8 peak: (1 - overlap) x 128 / 4096 x 128
        tensor_s = m * n * k / (SMS * FP8_MACS * CLOCK_HZ)
        assert want_s / tensor_s == pytest.approx(0.25 * (1 - overlap), rel=1e-4)


def test_no_promotion_without_the_tag_the_table_or_anything_exposed():
    h100 = load_chip("h100")
    fprop = Gemm(name="fc2", m=4096, k=14336, n=4096, a_dtype="fp8", b_dtype="fp8",
                 tags=("quantized",))
    assert promote_op(fprop, h100) is None
    assert not [x for x in precision_ops(fprop, h100) if x.name.endswith(".promote")]
    assert [x.name for x in precision_ops(_dgrad(64, 256, 64), h100)] == ["fc2.dgrad.promote"]
    bare = dataclasses.replace(h100, split_accumulator=None)
    assert promote_op(_dgrad(4096, 14336, 4096), bare) is None
    assert promote_op(_dgrad(4096, 14336, 4096), _h100(overlap=1.0)) is None
    for name in ("train-2026", "infer-2026", "tpu-v5e", "trainium2"):
        assert load_chip(name).split_accumulator is None


@pytest.mark.parametrize("key,value,says", [
    ("overlap", 1.5, "h100-variant: split_accumulator.overlap: expected 0 or a number >= "
                     "0.001 and <= 1 (a fraction: 1 hides all of it), got 1.5"),
    ("overlap", -0.1, "split_accumulator.overlap: expected 0 or a number >= 0.001 and <= 1 "
                      "(a fraction: 1 hides all of it), got -0.1"),
    ("promotion_interval_k", 0, "split_accumulator.promotion_interval_k: expected "),
    ("promotion_interval_k", 64.5, "split_accumulator.promotion_interval_k: expected ")])
def test_a_bad_table_is_refused_naming_the_field(key, value, says):
    with pytest.raises(ConfigError, match=re.escape(says)) as e:
        _h100(**{key: value})
    assert str(e.value).endswith(f"got {value!r}")


def _step(chip, execution, **kw):
    return run_workload(chip, "llama-3-8b",
                        Scenario.of(phase="train", batch=1, seq=1024, execution=execution,
                                    kernel_order="dataflow", **kw),
                        simulate=roofline)


@pytest.mark.parametrize("execution", ["sum", "schedule"])
def test_a_step_moves_by_the_closed_form_of_its_promotions(execution):
    """Summed, and scheduled with independent kernels free to overlap (data-flow order): the
    exposed promotions are time their GEMM's matrix products wait, which no other GEMM
    hides."""
    h100 = load_chip("h100")
    bare = dataclasses.replace(h100, split_accumulator=None)
    assert _step(h100, execution).seconds == _step(bare, execution).seconds      # BF16
    with_ = _step(h100, execution, recipe="fp8-delayed")
    without = _step(bare, execution, recipe="fp8-delayed")
    # from the model's shapes: per layer the linears d→q+2kv, d→d, d→2f (gate and up), f→d;
    # per linear (in→out) over T tokens the dgrad adds T·in·ceil(out/128) and the wgrad
    # in·out·ceil(T/128), the table's unhidden share of them exposed, at 132 × 128 adds per
    # clock
    m = load_model("llama-3-8b")
    t, d, f = 1024, m.hidden_size, m.intermediate_size
    qkv = (m.heads + 2 * m.kv_heads) * m.head_dim
    adds = sum(t * i * math.ceil(o / 128) + i * o * math.ceil(t / 128)
               for i, o in ((d, qkv), (d, d), (d, 2 * f), (f, d)))
    want = m.layers * adds * (1.0 - h100.split_accumulator.overlap) / (SMS * LANES * CLOCK_HZ)
    assert with_.seconds - without.seconds == pytest.approx(want, rel=1e-6)


def test_only_plain_fp8_products_promote():
    """The split accumulator is FP8 tensor cores' fast accumulation turned off: a BF16 GEMM
    and an MXFP8 product whose block scales the PEs apply (``block_scale = "pe"``) get no
    promotion even when tagged, on a chip with the table; a plain FP8 one on it does."""
    d = to_dict(load_chip("train-2026"))
    assert d["core"]["array"]["block_scale"] == "pe"
    d["split_accumulator"] = to_dict(load_chip("h100"))["split_accumulator"]
    chip = chip_from_dict(d, source="train-2026-split")
    mx = Gemm(name="fc2.dgrad", m=4096, k=14336, n=4096, a_dtype="mxfp8", b_dtype="mxfp8",
              tags=("quantized", "dgrad", SPLIT_ACC_TAG))
    bf16 = Gemm(name="fc2.dgrad", m=4096, k=14336, n=4096, a_dtype="bf16", b_dtype="bf16",
                tags=("dgrad", SPLIT_ACC_TAG))
    for g in (mx, bf16):
        assert promote_op(g, chip) is None, g.a_dtype
        assert not [x for x in precision_ops(g, chip) if x.name.endswith(".promote")], g.a_dtype
    assert [x.name for x in precision_ops(_dgrad(4096, 14336, 4096), chip)
            if x.name.endswith(".promote")] == ["fc2.dgrad.promote"]
