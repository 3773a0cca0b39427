"""The cluster step charges the ops a chip runs beside each GEMM for its precision (block
scales' stream, vector rescale, weight dequantisation; sim/run/precision_ops.py), as ``diptych run``
does: against ``run_workload`` inside one node, against the ops-free timing where a precision
needs none (bit for bit), and against the closed form of the added work (roofline double)."""

from __future__ import annotations

import math

import pytest
from roofline_double import roofline

from diptych.arch import chip_from_dict, load_chip, to_dict
from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.sim.cluster import timing
from diptych.sim.cluster.timing import TpLinks, layer_times
from diptych.sim.cluster.topology import GroupShape
from diptych.sim.run import Scenario, run_workload
from diptych.workloads.ops import Gemm, VectorOp
from diptych.workloads import load_model
from diptych.sim.run.node import default_precision

TRAIN = dict(phase="train", batch=8, seq=2048, micro_batch=2)
PREFILL = dict(phase="prefill", batch=4, prompt=2048, micro_batch=4)
DECODE = dict(phase="decode", batch=4, prompt=1024, gen=16, micro_batch=4)
MXFP8 = dict(weights_dtype="mxfp8", act_dtype="mxfp8")
W4A16 = dict(weights_dtype="int4")


@pytest.mark.parametrize("chip,kw,dtypes,tp", [
    ("train-2026", TRAIN, MXFP8, 1),           # block scales in the PE: their stream only
    ("h100", PREFILL, W4A16, 1),               # int4 expanded on the CUDA cores
    ("h100", PREFILL, W4A16, 8),
    ("h100", DECODE, W4A16, 1),
    ("infer-2026", DECODE, dict(weights_dtype="mxfp4", act_dtype="mxfp8"), 1),
])
def test_one_node_sum_matches_run_workload(chip, kw, dtypes, tp):
    # the summed composition inside one node is run_workload's summed run
    # (tests/cluster/test_step.py), precision ops included: the same ops, each charged once
    # (prefill: its all-reduces exposed, run_workload without overlap). Not MXFP8 at tp > 1:
    # there run_workload's all-reduce of MXFP8 activations takes longer than the topology's
    # (47.6 vs 44.4 us for Llama-3-8B's 17.3 MB on train-2026), with or without these ops
    kw = dict(kw)
    mb = kw.pop("micro_batch")
    r = simulate_cluster_step("llama-3-8b", chip, "dgx-h100", Plan(tp=tp, micro_batch=mb),
                              Scenario.of(execution="sum", **kw, **dtypes),
                              simulate=roofline)
    if kw["phase"] == "train":
        kw["micro_batch"] = mb
    w = run_workload(chip, "llama-3-8b",
                     Scenario.of(tp=tp, execution="sum", overlap=kw["phase"] == "train",
                                 power_limit=False, **kw, **dtypes),
                     simulate=roofline)
    assert r.seconds == pytest.approx(w.seconds, rel=1e-9)
    assert r.hardware_flops == pytest.approx(w.hardware_flops, rel=1e-9)


def _times(monkeypatch, chip, dtypes, kw, execution="sum", charged=True):
    """layer_times (uncached) with the precision ops, or with them taken out."""
    if not charged:
        monkeypatch.setattr(timing, "with_precision_ops", lambda w, c: w)
    chip = load_chip(chip)
    kw = dict(kw)
    phase = kw.pop("phase")
    p = default_precision(chip, phase, dtypes.get("weights_dtype"), dtypes.get("act_dtype"),
                          None)
    links = None
    if execution == "schedule":
        from diptych.arch.cluster import load_cluster
        from diptych.sim.cluster.topology import bind
        links = TpLinks(GroupShape(1, 1, 1), bind(load_cluster("dgx-h100"), chip))
    out = layer_times.__wrapped__(
        load_model("llama-3-8b"), chip, p, phase=phase, tp=1, cp=1, ep=1,
        micro_batch=kw["micro_batch"], seq=kw.get("seq", kw.get("prompt")) if phase != "decode"
        else 1, context=kw.get("prompt", 0) if phase == "decode" else 0,
        gen=kw.get("gen", 1), simulate=roofline, execution=execution, tp_links=links)
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("execution", ["sum", "schedule"])
@pytest.mark.parametrize("chip,kw,dtypes", [
    ("h100", TRAIN, {}),                                  # bf16
    ("h100", DECODE, dict(weights_dtype="fp8", act_dtype="fp8")),
    ("infer-2026", PREFILL, dict(weights_dtype="int8", act_dtype="int8")),
])
def test_precisions_without_ops_time_as_before(monkeypatch, chip, kw, dtypes, execution):
    # BF16, FP8, INT8: no GEMM needs a precision op, so the layer times are those of the
    # ops-free path bit for bit (LayerTime equality: every float)
    assert _times(monkeypatch, chip, dtypes, kw, execution) == \
        _times(monkeypatch, chip, dtypes, kw, execution, charged=False)


def _gemms(ops):
    return [o for o in ops if isinstance(o, Gemm)]


def _mx_scale_bytes(g: Gemm) -> float:
    """E8M0 bytes of an MXFP8 GEMM's operands: one per 32 elements along K for A (m x k)
    and B (k x n), along N for C (m x n), a short last block padded (docs/precision.md)."""
    return (g.batch * g.m * math.ceil(g.k / 32) + g.b_count * g.n * math.ceil(g.k / 32)
            + g.batch * g.m * math.ceil(g.n / 32))


def _vector_quant_s(ops, chip) -> float:
    """Seconds of quantising the MXFP8 outputs of the vector ops that compute (not copies,
    gathers, top-k; not the loss's FP32 passes or the embedding table's FP32-labelled
    gradient sums): 4 ops per element + 2 per 32-element block, at the vector rate."""
    n = sum(o.write_bytes / (1 + 1 / 32) for o in ops if isinstance(o, VectorOp)
            and o.dtype == "mxfp8" and o.ops_per_element > 0
            and o.kind not in ("copy", "embedding", "topk"))
    return n * (4 + 2 / 32) / chip.vector_ops_per_s


def _colquant_s(ops, chip) -> float:
    """Seconds of the columnwise copies of each weight-gradient GEMM's X and dY (roofline:
    4 ops per element + 2 per block along the tokens, or the copies' DRAM write)."""
    out = 0.0
    for g in _gemms(ops):
        if g.name.endswith(".wgrad"):
            e = g.m * g.k + g.k * g.n
            blocks = (g.m + g.n) * math.ceil(g.k / 32)
            out += max((4 * e + 2 * blocks) / chip.vector_ops_per_s,
                       (e + blocks) / chip.dram_bytes_per_s)
    return out


def test_mxfp8_training_adds_each_gemms_scale_stream(monkeypatch):
    # train-2026 applies scales in the PE: each GEMM adds its scale bytes at the DRAM rate,
    # forward and backward (data- and weight-gradient GEMMs are MXFP8 too: operands and
    # gradients quantised along each backward GEMM's own K). The quantisation of their
    # MXFP8 outputs is an op of its own (tests/workloads/test_quant_costs.py): here the
    # array's output path does it (output_quant = "array"), at no time; the vector ops'
    # MXFP8 outputs are quantised on the vector unit, and each weight-gradient GEMM's
    # operands get their columnwise copies
    d = to_dict(load_chip("train-2026"))
    d["core"]["array"]["output_quant"] = "array"
    chip = chip_from_dict(d, source="train-2026-variant")
    got = _times(monkeypatch, chip, MXFP8, TRAIN)
    base = _times(monkeypatch, chip, MXFP8, TRAIN, charged=False)
    for kind, t in got.items():
        fwd = (sum(_mx_scale_bytes(g) for g in _gemms(t.ops.forward)) / chip.dram_bytes_per_s
               + _vector_quant_s(t.ops.forward, chip))
        bwd = (sum(_mx_scale_bytes(g) for g in _gemms(t.ops.backward)) / chip.dram_bytes_per_s
               + _vector_quant_s(t.ops.backward, chip) + _colquant_s(t.ops.backward, chip))
        assert (fwd > 0 and bwd > 0) == bool(_gemms(t.ops.forward))    # embedding: none
        assert t.fwd_s - base[kind].fwd_s == pytest.approx(fwd, rel=1e-9)
        assert t.bwd_s - base[kind].bwd_s == pytest.approx(bwd, rel=1e-9)
        assert t.fwd_flops == base[kind].fwd_flops        # MACs unchanged


def test_w4a16_decode_adds_each_weight_gemms_dequantisation(monkeypatch):
    # h100 expands int4 weights on the CUDA cores: 2 ops per weight element (k x n), once
    # per GEMM, at the vector rate; no block scales
    chip = load_chip("h100")
    got = _times(monkeypatch, "h100", W4A16, DECODE)
    base = _times(monkeypatch, "h100", W4A16, DECODE, charged=False)
    for kind, t in got.items():
        want = sum(2.0 * g.b_count * g.k * g.n for g in _gemms(t.ops.forward)
                   if "weight" in g.tags) / chip.vector_ops_per_s
        assert (want > 0) == bool(_gemms(t.ops.forward))
        assert t.fwd_s - base[kind].fwd_s == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("chip,kw,dtypes", [("h100", PREFILL, W4A16),
                                             ("train-2026", TRAIN, MXFP8)])
def test_scheduled_layers_charge_precision_ops_too(monkeypatch, chip, kw, dtypes):
    # execution="schedule": the ops are nodes of each layer kind's program (no launch of
    # their own) and lengthen it, forward and backward. (Not always by at most their own
    # times: the residency plan counts a scale op's ordering read of a B operand the block
    # makes as one more read of it, e.g. the head's backward on train-2026 gains 16.1 us for
    # 13.6 us of scale ops.) MXFP8 training schedules at all: a weight GEMM whose
    # activations stay on chip streams only its weights' element bytes, the prefetchable
    # part (sim/run/scheduled.py)
    got = _times(monkeypatch, chip, dtypes, kw, "schedule")
    base = _times(monkeypatch, chip, dtypes, kw, "schedule", charged=False)
    for kind, t in got.items():
        if not _gemms(t.ops.forward):                        # embedding
            assert t == base[kind]
            continue
        assert t.fwd_s > base[kind].fwd_s
        assert kw["phase"] != "train" or t.bwd_s > base[kind].bwd_s


@pytest.mark.parametrize("chip,dtypes,tp", [("h100", W4A16, 1), ("h100", W4A16, 8),
                                            ("train-2026", MXFP8, 1)])
def test_scheduled_prefill_on_one_node_is_run_workloads_schedule(chip, dtypes, tp):
    # as tests/cluster/test_scheduled_layers.py, precision ops in both: one program for the
    # phase in run_workload, one per layer kind in the cluster step, which cannot overlap a
    # layer's precision ops (they wait on weights only) with the previous layer's work: the
    # step is longer by less than those ops' own times, never shorter
    kw = dict(PREFILL)
    mb = kw.pop("micro_batch")
    r = simulate_cluster_step("llama-3-8b", chip, "dgx-h100", Plan(tp=tp, micro_batch=mb),
                              Scenario.of(**kw, **dtypes), simulate=roofline)
    w = run_workload(chip, "llama-3-8b",
                     Scenario.of(tp=tp, execution="schedule", power_limit=False, **kw, **dtypes),
                     simulate=roofline)
    summed = run_workload(chip, "llama-3-8b",
                          Scenario.of(tp=tp, execution="sum", power_limit=False, **kw, **dtypes),
                          simulate=roofline)
    own = sum(x["seconds"] * x["repeat"] for x in summed.layers
              if x["op"].rsplit(".", 1)[-1] in ("scales", "rescale", "dequant",
                                                "quant"))
    sync = load_chip(chip).fixed_costs.step_sync_us * 1e-6
    assert own > 0
    # "never shorter" up to the list schedule's own anomalies (Graham 1969: a greedy schedule
    # of a larger program can be longer than its parts' schedules): 0.12 % on h100's unfused
    # TP8 program (every norm, RoPE, SwiGLU and residual add a node of its own), < 1e-5 when
    # they fuse into GEMMs
    assert -2e-3 * w.seconds <= r.seconds + sync - w.seconds <= own


def test_scheduled_mxfp8_training_is_close_to_run_workloads_schedule():
    # as tests/cluster/test_scheduled_layers.py's BF16 training: each layer kind's program
    # alone, so close to run_workload's one program, not equal; run_workload's own MXFP8
    # training program validates (a backward block's scale ops read no import)
    kw = dict(TRAIN, **MXFP8)
    mb = kw.pop("micro_batch")
    r = simulate_cluster_step("llama-3-8b", "train-2026", "dgx-h100", Plan(tp=1, micro_batch=mb),
                              Scenario.of(**kw), simulate=roofline)
    w = run_workload("train-2026", "llama-3-8b",
                     Scenario.of(micro_batch=mb, execution="schedule", power_limit=False, **kw),
                     simulate=roofline)
    assert r.seconds == pytest.approx(w.seconds, rel=0.05)
