"""Where a chip pays for block scales and weight dequantisation (sim/run/precision_ops.py): the ops
beside each GEMM against hand counts, and whole runs whose extra vector work and bytes equal
the sum of those counts over the model's weight matrices."""

from __future__ import annotations

import math

import pytest
from roofline_double import roofline

from diptych.arch import chip_from_dict, load_chip, to_dict
from diptych.sim.run import Scenario, run_workload
from diptych.workloads.ops import Gemm
from diptych.workloads import load_model
from diptych.workloads.precision import Precision
from diptych.workloads.quant import DEQUANT_OPS_PER_ELEMENT, RESCALE_OPS_PER_ELEMENT
from diptych.sim.run.precision_ops import precision_ops
from diptych.sim.run.node import lower_workload


def _chip(name, **array):
    d = to_dict(load_chip(name))
    d["core"]["array"].update(array)
    return chip_from_dict(d, source=f"{name}-variant")


def _by_kind(ops):
    return {o.name.rsplit(".", 1)[1]: o for o in ops}


def test_scale_stream_and_pe_scaling():
    g = Gemm(name="qkv", m=4, k=100, n=48, a_dtype="mxfp8", b_dtype="mxfp4",
             c_dtype="mxfp8", tags=("weight",))
    ops = _by_kind(precision_ops(g, load_chip("infer-2026")))   # mxfp4xmxfp8 in the PE
    assert set(ops) == {"scales", "quant"}       # its mxfp8 output is quantised
    s = ops["scales"]
    assert s.read_bytes == 4 * math.ceil(100 / 32) + 48 * math.ceil(100 / 32)
    assert s.write_bytes == 4 * math.ceil(48 / 32)
    assert s.flops == 0


def test_vector_scaling_rescales_every_k_block():
    chip = _chip("infer-2026", block_scale="vector")
    g = Gemm(name="g", m=3, k=100, n=40, batch=2, a_dtype="nvfp4", b_dtype="nvfp4",
             c_dtype="bf16", b_is_weight=False)
    ops = _by_kind(precision_ops(g, chip))
    r = ops["rescale"]
    assert r.elements == 2 * 3 * 40 * math.ceil(100 / 16)
    assert r.flops == RESCALE_OPS_PER_ELEMENT * 2 * 3 * 40 * 7
    # no byte: infer-2026's vector unit reads the partial sums from the accumulators
    assert r.read_bytes == r.write_bytes == 0
    # A and B (one per batch element) scales plus a per-tensor FP32 scale each
    assert ops["scales"].read_bytes == 2 * 3 * 7 + 2 * 40 * 7 + 4 + 4


def test_dequant_where_the_chip_does_it():
    g = Gemm(name="up", m=1, k=256, n=512, a_dtype="bf16", b_dtype="int4", tags=("weight",))
    d = _by_kind(precision_ops(g, load_chip("h100")))["dequant"]       # CUDA cores
    assert d.elements == 256 * 512 and d.flops == DEQUANT_OPS_PER_ELEMENT * 256 * 512
    # the GEMM reads the int4 weights; h100 expands them in registers (no scratchpad bytes)
    assert d.read_bytes == d.write_bytes == 0
    assert precision_ops(g, load_chip("infer-2026")) == []   # int4xbf16 in the PE: free
    # B narrower than A computes in A's dtype whatever B is (here a KV cache): expanded too
    kv = Gemm(name="s", m=1, k=64, n=64, batch=3, a_dtype="bf16", b_dtype="fp8",
              b_is_weight=False)
    assert _by_kind(precision_ops(kv, load_chip("h100")))["dequant"].elements == 3 * 64 * 64
    with pytest.raises(ValueError, match=r"core\.array\.dequant is 'none'"):
        precision_ops(Gemm(name="w", m=1, k=8, n=8, a_dtype="int8", b_dtype="int4",
                           tags=("weight",)), load_chip("tpu-v1"))


def _weight_gemms(w):
    return [(b, op) for b in w.blocks for op in b.ops
            if isinstance(op, Gemm) and "weight" in op.tags]


def test_w4a16_run_adds_the_hand_counted_dequant_work():
    chip = load_chip("h100")
    kw = dict(phase="decode", batch=1, prompt=256, gen=8)
    base = run_workload(chip, "llama-3-8b", Scenario.of(**kw), simulate=roofline)
    w4 = run_workload(chip, "llama-3-8b", Scenario.of(weights_dtype="int4", **kw),
                      simulate=roofline)
    p = Precision(weights="int4")
    w, _ = lower_workload(load_model("llama-3-8b"),
                          Scenario(phase="decode", batch=1, prompt=256, gen=8), precision=p,
                          tp=1, dp=1)
    hand = sum(b.repeat * DEQUANT_OPS_PER_ELEMENT * op.b_count * op.k * op.n
               for b, op in _weight_gemms(w))
    assert w4.info["vector_ops"] - base.info["vector_ops"] == pytest.approx(hand, rel=1e-12)
    deq = [r for r in w4.layers if r["op"].endswith(".dequant")]
    assert len(deq) == len(_weight_gemms(w)) and all(r["dram_bytes"] == 0 for r in deq)
    # the same request where the PE takes int4 x bf16: no dequant op, the weights' bytes only
    pe = run_workload(_chip("h100", mixed_input=["int4xbf16"]), "llama-3-8b",
                      Scenario.of(weights_dtype="int4", **kw), simulate=roofline)
    assert pe.info["vector_ops"] == base.info["vector_ops"]
    assert w4.seconds > pe.seconds and pe.seconds < base.seconds


def test_mx_run_charges_scale_bytes_once():
    chip = load_chip("infer-2026")
    kw = dict(phase="decode", batch=1, prompt=256, gen=8)
    w, _ = lower_workload(load_model("llama-3-8b"),
                          Scenario(phase="decode", batch=1, prompt=256, gen=8),
                          precision=Precision(weights="mxfp4", activations="mxfp8",
                                              kv="mxfp8"), tp=1, dp=1)
    # the per-op accounting with every operand in DRAM (execution="sum"); the roofline double
    # moves a GEMM's element bytes only, as the engine does
    r = run_workload(chip, "llama-3-8b",
                     Scenario.of(weights_dtype="mxfp4", act_dtype="mxfp8", kv_dtype="mxfp8",
                                 execution="sum", **kw),
                     simulate=roofline)
    scales = sum(x["dram_bytes"] * x["repeat"] for x in r.layers
                 if x["op"].endswith(".scales"))
    hand = sum(b.repeat * (op.a_scale_bytes + op.b_scale_bytes + op.c_scale_bytes)
               for b in w.blocks for op in b.ops if isinstance(op, Gemm))
    assert scales == pytest.approx(hand, rel=1e-12) and hand > 0
    # weight scales: one byte per 32 weights of every weight matrix
    wsc = sum(b.repeat * op.n * math.ceil(op.k / 32) for b, op in _weight_gemms(w))
    assert wsc == pytest.approx(sum(b.repeat * op.b_scale_bytes for b, op in _weight_gemms(w)))


def test_schedule_charges_no_launch_for_precision_ops_and_keeps_fusion():
    chip = load_chip("h100")
    kw = dict(phase="decode", batch=1, prompt=256, gen=8, execution="schedule")
    base = run_workload(chip, "llama-3-8b", Scenario.of(**kw), simulate=roofline)
    w4 = run_workload(chip, "llama-3-8b", Scenario.of(weights_dtype="int4", **kw),
                      simulate=roofline)
    # same launches (the dequant ops run inside their GEMMs' kernels), same fused nodes
    assert w4.fixed_costs_s == pytest.approx(base.fixed_costs_s, rel=1e-12)
    assert w4.schedule["fused"] == base.schedule["fused"]
    summed = run_workload(chip, "llama-3-8b",
                          Scenario.of(weights_dtype="int4", **{**kw, "execution": "sum"}),
                          simulate=roofline)
    # the list schedule may overlap dequantisation with array work; the sum cannot
    assert w4.seconds - w4.fixed_costs_s <= summed.seconds * (1 + 1e-9)
