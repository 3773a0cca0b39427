"""The precision costs beside attention and on chip (sim/run/precision_ops.py): attention over a KV
cache narrower than the activations, block-scaled outputs, and the scratchpad traffic of the
vector unit's expanded tiles and rescale partials, against closed forms from the model's
configuration (not from the lowered ops)."""

from __future__ import annotations

import math

import pytest
from roofline_double import roofline

from diptych.arch import chip_from_dict, load_chip, to_dict
from diptych.arch.chip import FUSABLE_KINDS
from diptych.sim import simulate
from diptych.sim.run import Scenario, run_workload
from diptych.workloads.ops import Gemm
from diptych.workloads import load_model
from diptych.workloads.quant import (DEQUANT_OPS_PER_ELEMENT, QUANT_OPS_PER_BLOCK,
                                     QUANT_OPS_PER_ELEMENT, RESCALE_OPS_PER_ELEMENT,
                                     columnwise_quant_op)
from diptych.sim.run.precision_ops import precision_ops, with_precision_ops
from diptych.workloads.params import params_per_chip
from diptych.workloads.train import ADAMW_OPS_PER_PARAM, adamw_op
from diptych.workloads.precision import Precision
from diptych.sim.run.node import lower_workload

PROMPT, GEN, BATCH = 256, 8, 2
#: keys a decode step attends on average over the GEN steps (step i attends PROMPT + i + 1)
KEYS = math.ceil(PROMPT + (GEN + 1) / 2)


def _chip(name, vector=None, **array):
    d = to_dict(load_chip(name))
    d["core"]["array"].update(array)
    d["core"]["vector"].update(vector or {})
    return chip_from_dict(d, source=f"{name}-variant")


def _fusing_h100(**array):
    """h100 with a stack that fuses every elementwise kind into its GEMMs (the shipped preset
    fuses none): a step tight enough that the dequantisation below is only partly hidden."""
    return _chip("h100", vector={"gemm_fused_kinds": list(FUSABLE_KINDS)}, **array)


def _decode(chip, model, **kw):
    return run_workload(chip, model,
                        Scenario.of(phase="decode", batch=BATCH, prompt=PROMPT, gen=GEN, **kw),
                        simulate=roofline)


def _ops(r, suffix):
    return [x for x in r.layers if x["op"].endswith(suffix)]


@pytest.mark.parametrize("attention", ["fused", "unfused"])
def test_fp8_kv_cache_with_bf16_activations_expands_every_k_and_v_element(attention):
    m = load_model("llama-3-8b")
    h100 = _fusing_h100()
    kw = dict(act_dtype="bf16", weights_dtype="bf16", attention=attention)
    bf16 = _decode(h100, m, kv_dtype="bf16", **kw)
    fp8 = _decode(h100, m, kv_dtype="fp8", **kw)
    # batch × keys × kv heads × head_dim × (K and V), per layer per step
    elements = BATCH * KEYS * m.kv_heads * m.head_dim * 2 * m.layers
    assert fp8.info["vector_ops"] - bf16.info["vector_ops"] == pytest.approx(
        DEQUANT_OPS_PER_ELEMENT * elements, rel=1e-12)
    deq = _ops(fp8, ".dequant")
    assert {x["op"] for x in deq} == {"attn_scores.dequant", "attn_pv.dequant"}
    assert all(x["dram_bytes"] == 0 for x in deq)      # the cache is read once, by attention
    # a PE that multiplies fp8 by bf16 directly: no op, the same vector work as a bf16 cache
    pe = _decode(_fusing_h100(mixed_input=["fp8xbf16"]), m, kv_dtype="fp8", **kw)
    assert not _ops(pe, ".dequant") and pe.info["vector_ops"] == bf16.info["vector_ops"]
    assert fp8.seconds > pe.seconds


def test_mla_latent_cache_is_expanded_once():
    m = load_model("deepseek-v3")
    h100 = load_chip("h100")
    bf16 = _decode(h100, m, kv_dtype="bf16", act_dtype="bf16", weights_dtype="bf16")
    fp8 = _decode(h100, m, kv_dtype="fp8", act_dtype="bf16", weights_dtype="bf16")
    # absorbed MLA decode attends the latent + rope cache, which is also the values
    elements = BATCH * KEYS * (m.kv_lora_rank + m.qk_rope_head_dim) * m.layers
    assert fp8.info["vector_ops"] - bf16.info["vector_ops"] == pytest.approx(
        DEQUANT_OPS_PER_ELEMENT * elements, rel=1e-12)
    assert {x["op"] for x in _ops(fp8, ".dequant")} == {"attn_scores.dequant"}


def test_kv_dequant_is_a_node_the_schedule_overlaps():
    h100 = _fusing_h100()
    kw = dict(act_dtype="bf16", weights_dtype="bf16", kv_dtype="fp8")
    sched = _decode(h100, "llama-3-8b", execution="schedule", **kw)
    base = _decode(h100, "llama-3-8b", execution="schedule", act_dtype="bf16",
                   weights_dtype="bf16", kv_dtype="bf16")
    summed = _decode(h100, "llama-3-8b", execution="sum", **kw)
    # no launch of its own (it runs inside the attention kernel), the same fused nodes
    assert sched.fixed_costs_s == pytest.approx(base.fixed_costs_s, rel=1e-12)
    assert sched.schedule["fused"] == base.schedule["fused"]
    assert sched.seconds - sched.fixed_costs_s <= summed.seconds * (1 + 1e-9)
    # it waits for the stored cache only (not the step's new entry), so the scheduler hides
    # part of it under the layer's other work: less than its own time is added
    free = _decode(_fusing_h100(mixed_input=["fp8xbf16"]), "llama-3-8b",
                   execution="schedule", **kw)
    deq = sum(x["total_seconds"] for x in _ops(summed, ".dequant"))
    assert 0 < sched.seconds - free.seconds < deq
    # the fused attention record keeps its parts and its DRAM traffic (K, V at fp8)
    att = [x for x in summed.layers if x["kind"] == "attention"]
    assert len(att) == 1 and att[0]["op"] == "attention (fused)"


def test_kv_narrower_than_activations_needs_a_way_to_expand():
    with pytest.raises(ValueError, match=r"cannot multiply fp8 B operand \(a KV cache\) by "
                                         r"bf16.*core\.array\.dequant is 'none'"):
        _decode(_chip("h100", dequant="none"), "llama-3-8b", act_dtype="bf16",
                weights_dtype="bf16", kv_dtype="fp8")


def test_dequant_and_rescale_charge_scratchpad_traffic():
    chip = _chip("infer-2026", {"on_array_output_path": False}, block_scale="vector",
                 mixed_input=[])
    g = Gemm(name="g", m=4, k=100, n=48, a_dtype="mxfp8", b_dtype="mxfp4", c_dtype="bf16",
             tags=("weight",))
    ops = {o.name.rsplit(".", 1)[1]: o for o in precision_ops(g, chip)}
    # a vector unit that feeds the array (registers into the MMA) and reads its
    # accumulators moves nothing through the scratchpad
    direct = _chip("infer-2026", {"on_array_input_path": True}, block_scale="vector",
                   mixed_input=[])
    assert all(o.read_bytes == o.write_bytes == 0 for o in precision_ops(g, direct)
               if o.name.endswith((".dequant", ".rescale")))
    # dequant: read the narrow tile and, for the array, the rest of its expanded width;
    # write the expanded tile: 100 × 48 elements at mxfp8's 8 element bits, each way
    d = ops["dequant"]
    assert d.scratchpad_read_bytes == d.scratchpad_write_bytes == 100 * 48 * 1
    assert d.dram_read_bytes == d.dram_write_bytes == 0
    # rescale: one FP32 partial sum per output element per 32-element K-block, written by
    # the array and read by the vector unit
    r = ops["rescale"]
    assert r.scratchpad_read_bytes == r.scratchpad_write_bytes == 4 * 48 * 4 * math.ceil(100 / 32)
    # the engine times them at the scratchpads' bandwidth when that is the bound
    for op in (d, r):
        st = simulate(op, chip)
        sp = chip.tensor_cores * chip.core.scratchpad.bytes_per_cycle
        alu = op.flops / (chip.tensor_cores * chip.core.vector.lanes
                          * chip.core.vector.ops_per_lane_per_cycle)
        assert st.cycles >= max(2 * d.scratchpad_read_bytes / sp if op is d else
                                2 * r.scratchpad_read_bytes / sp, alu)
        assert st.dram_read_bytes == st.dram_write_bytes == 0


def test_block_scaled_output_is_quantised_on_the_vector_unit_unless_the_array_does_it():
    g = Gemm(name="up", m=5, k=64, n=100, batch=3, a_dtype="mxfp8", b_dtype="mxfp8",
             c_dtype="mxfp8", b_is_weight=False)
    ops = {o.name.rsplit(".", 1)[1]: o for o in precision_ops(g, load_chip("train-2026"))}
    q = ops["quant"]
    rows, blocks = 3 * 5, math.ceil(100 / 32)
    assert q.elements == rows * 100
    assert q.flops == pytest.approx(QUANT_OPS_PER_ELEMENT * rows * 100
                                    + QUANT_OPS_PER_BLOCK * rows * blocks, rel=1e-12)
    assert "quant" not in {o.name.rsplit(".", 1)[1] for o in precision_ops(
        g, _chip("train-2026", output_quant="array"))}
    # a plain output is not quantised
    plain = Gemm(name="p", m=5, k=64, n=100, a_dtype="mxfp8", b_dtype="mxfp8", c_dtype="bf16")
    assert not any(o.name.endswith(".quant") for o in precision_ops(plain, load_chip("train-2026")))
    with pytest.raises(ValueError, match=r"output_quant"):
        _chip("train-2026", output_quant="epilogue")


def test_mxfp8_decode_quantises_every_block_scaled_product_output():
    m = load_model("llama-3-8b")
    chip = load_chip("infer-2026")
    r = _decode(chip, m, weights_dtype="mxfp8", act_dtype="mxfp8", kv_dtype="mxfp8",
                execution="sum")
    # each layer's products of T = BATCH tokens: q/k/v (d → (H + 2 H_kv) d_h), o (H d_h → d),
    # gate/up (d → 2 f), down (f → d); attention's P (H × KEYS per token) and O (H × d_h);
    # the LM head (d → vocab) on the last tokens
    d, f, dh = m.hidden_size, m.intermediate_size, m.head_dim
    h, hkv = m.heads, m.kv_heads
    widths = [(h + 2 * hkv) * dh, d, 2 * f, d, KEYS, dh]
    rows = [BATCH, BATCH, BATCH, BATCH, BATCH * h, BATCH * h]
    per_layer = sum(t * (QUANT_OPS_PER_ELEMENT * n + QUANT_OPS_PER_BLOCK * math.ceil(n / 32))
                    for t, n in zip(rows, widths))
    head = BATCH * (QUANT_OPS_PER_ELEMENT * m.vocab_size
                    + QUANT_OPS_PER_BLOCK * math.ceil(m.vocab_size / 32))
    got = sum(x["flops"] * x["repeat"] for x in _ops(r, ".quant")
              if x["op"].rsplit(".", 1)[0] in _GEMMS)
    assert got == pytest.approx(m.layers * per_layer + head, rel=1e-12)


_GEMMS = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attn_scores", "attn_pv",
          "lm_head"}


@pytest.mark.parametrize("act,block", [("mxfp8", 32), ("nvfp4", 16)])
def test_block_scaled_vector_op_outputs_are_quantised(act, block):
    m = load_model("llama-3-8b")
    r = _decode(load_chip("infer-2026"), m, weights_dtype=act, act_dtype=act, kv_dtype=act,
                execution="sum")
    # what each layer's vector ops write for the next product (or the residual stream),
    # per token: the attention norm (d), RoPE on q and k ((H + H_kv) d_h), the residual add
    # (d), the MLP norm (d), SwiGLU (f), the second residual add (d); the final norm (d) on
    # the last tokens. The KV-cache write copies blocks with their scales (no quantisation)
    d, f, dh = m.hidden_size, m.intermediate_size, m.head_dim
    per_token = 4 * d + (m.heads + m.kv_heads) * dh + f
    n = BATCH * (m.layers * per_token + d)
    q = [x for x in _ops(r, ".quant") if x["op"].rsplit(".", 1)[0] not in _GEMMS]
    assert {x["op"] for x in q} == {"attn_norm.quant", "rope.quant", "attn_residual.quant",
                                    "mlp_norm.quant", "swiglu.quant", "mlp_residual.quant",
                                    "final_norm.quant"}
    got = sum(x["flops"] * x["repeat"] for x in q)
    assert got == pytest.approx(QUANT_OPS_PER_ELEMENT * n + QUANT_OPS_PER_BLOCK * n / block,
                                rel=1e-12)
    # inside the producing kernel: no bytes of their own
    assert all(x["dram_bytes"] == 0 for x in q)


@pytest.mark.parametrize("chip,p", [
    ("h100", Precision()),
    ("h100", Precision(weights="fp8", activations="fp8", kv="fp8")),
    ("infer-2026", Precision(weights="fp8", activations="fp8", kv="fp8")),
    ("train-2026", Precision()),
])
@pytest.mark.parametrize("phase", ["decode", "prefill", "train"])
def test_plain_workloads_get_no_precision_ops(chip, p, phase):
    s = Scenario(phase=phase, batch=2, prompt=64, gen=4, seq=64 if phase == "train" else None)
    w, _ = lower_workload(load_model("llama-3-8b"), s, precision=p, tp=1, dp=1)
    assert with_precision_ops(w, load_chip(chip)) is w


def test_rescale_of_fused_attention_parts_on_a_vector_scaling_chip():
    m = load_model("llama-3-8b")
    chip = _chip("infer-2026", block_scale="vector")
    r = _decode(chip, m, weights_dtype="mxfp8", act_dtype="mxfp8", kv_dtype="mxfp8")
    resc = {x["op"]: x for x in _ops(r, ".rescale")}
    # scores: H query rows per token × KEYS outputs, K-blocks over head_dim; PV: H × head_dim
    # outputs, K-blocks over the keys
    h, dh = m.heads, m.head_dim
    assert resc["attn_scores.rescale"]["flops"] == pytest.approx(
        RESCALE_OPS_PER_ELEMENT * BATCH * h * KEYS * math.ceil(dh / 32))
    assert resc["attn_pv.rescale"]["flops"] == pytest.approx(
        RESCALE_OPS_PER_ELEMENT * BATCH * h * dh * math.ceil(KEYS / 32))


def test_mxfp8_training_runs_as_a_schedule():
    # the backward layer's precision ops, the output quantisation's included, wait for
    # nothing the block imports (a repeated block reads its imports behind its carried
    # chain)
    r = run_workload("train-2026", "llama-3-8b",
                     Scenario.of(phase="train", batch=2, seq=256, weights_dtype="mxfp8",
                                 act_dtype="mxfp8", execution="schedule"),
                     simulate=roofline)
    ops = {x["op"] for x in r.layers}
    assert {"down_proj.dgrad.quant", "down_proj.dgrad.scales"} <= ops
    summed = run_workload("train-2026", "llama-3-8b",
                          Scenario.of(phase="train", batch=2, seq=256, weights_dtype="mxfp8",
                                      act_dtype="mxfp8", execution="sum"),
                          simulate=roofline)
    assert r.seconds - r.fixed_costs_s <= summed.seconds * (1 + 1e-9)


def test_mxfp8_training_makes_columnwise_copies_once_per_tensor():
    m = load_model("llama-3-8b")
    kw = dict(phase="train", batch=2, seq=256, execution="sum")
    r = run_workload("train-2026", m, Scenario.of(weights_dtype="mxfp8", act_dtype="mxfp8", **kw),
                     simulate=roofline)
    T = 2 * 256                                       # one micro-batch of two sequences
    d, f, dh = m.hidden_size, m.intermediate_size, m.head_dim
    qkv = (m.heads + 2 * m.kv_heads) * dh
    # per weight GEMM (in → out features): X, T × in, and dY, T × out, each copied blocked
    # along the T tokens: in + out rows of T / 32 blocks, 1 B per element and per scale
    linears = [(d, qkv), (m.heads * dh, d), (d, 2 * f), (f, d)]
    elements = T * sum(i + o for i, o in linears)
    blocks = sum(i + o for i, o in linears) * math.ceil(T / 32)
    col = {x["op"]: x for x in _ops(r, ".colquant")}
    assert set(col) == {"qkv_proj.wgrad.colquant", "o_proj.wgrad.colquant",
                        "gate_up_proj.wgrad.colquant", "down_proj.wgrad.colquant",
                        "lm_head.wgrad.colquant"}
    layer = [x for x in col.values() if not x["op"].startswith("lm_head")]
    assert all(x["repeat"] == m.layers for x in layer)
    assert sum(x["flops"] for x in layer) == pytest.approx(
        QUANT_OPS_PER_ELEMENT * elements + QUANT_OPS_PER_BLOCK * blocks, rel=1e-12)
    assert sum(x["dram_bytes"] for x in layer) == pytest.approx(elements + blocks, rel=1e-12)
    # the weights' columnwise copy: once per step, by the optimizer (one more write of the
    # MXFP8 weights and their quantisation): grads mxfp8, master and moments fp32
    n = params_per_chip(m, 1)
    opt = [y for y in r.layers if y["op"] == "adamw"]
    assert sum(y["repeat"] * y["flops"] for y in opt) == pytest.approx(
        n * (ADAMW_OPS_PER_PARAM + QUANT_OPS_PER_ELEMENT + QUANT_OPS_PER_BLOCK / 32),
        rel=1e-12)
    mx = 1 + 1 / 32
    assert sum(y["repeat"] * y["dram_bytes"] for y in opt) == pytest.approx(
        n * ((mx + 12) + (12 + 2 * mx)), rel=1e-12)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_plain_training_makes_no_columnwise_copies(dtype):
    g = Gemm(name="up.wgrad", m=64, k=128, n=96, a_dtype=dtype, b_dtype=dtype,
             c_dtype=dtype, tags=("mlp", "wgrad"))
    assert columnwise_quant_op(g) is None
    p = Precision(weights=dtype, activations=dtype, grads=dtype)
    op = adamw_op(1000, p)
    assert op.flops == 1000 * ADAMW_OPS_PER_PARAM
    assert op.write_bytes == 1000 * (p.optimizer_state_bytes_per_param + p.w_bytes)


def _problems(chip, g, df):
    """The mapper's problem for ``g`` on ``chip`` with the chip's expanded B block (as
    ``simulate`` plans it) and without (the layout of the shape alone), and the first split."""
    from diptych.sim import mapper as MP
    split = MP.splits(chip, g.batch, g.m, g.n, g.k)[0]
    with_chip = MP.orient(g, df, split, g.m, chip.tensor_cores,
                          MP.op_layout(g, g.m, chip.tensor_cores, chip))
    plain = MP.orient(g, df, split, g.m, chip.tensor_cores)
    return with_chip, plain, split


@pytest.mark.parametrize("df", ["os", "ws", "is"])
def test_expanded_b_block_takes_scratchpad_capacity(df):
    from diptych.sim import mapper as MP
    from diptych.sim.array import array_rates
    # W4A16 on infer-2026 without its int4xbf16 pair: the vector unit writes each int4
    # weight block back at bf16 into the scratchpad, beside the two narrow slots
    chip = _chip("infer-2026", mixed_input=[])
    g = Gemm(name="w", m=256, k=8192, n=8192, a_dtype="bf16", b_dtype="int4",
             c_dtype="bf16", tags=("weight",))
    pb, plain, split = _problems(chip, g, df)
    rates = array_rates(chip, "bf16")
    cap, acc = MP.capacity(chip, split)
    got = MP.candidates(chip, pb, rates, split)
    # closed form: the plain blocking's footprint plus one B block (kb × nb, or its
    # transpose under input stationary) at 2 bytes per element, shared like B's slots
    cd = pb.x_cdup if pb.transposed else pb.w_cdup

    def fits(b):
        base = MP.footprint(plain, b.mb, b.kb, b.nb, acc)
        extra = -(-(b.kb * (b.mb if pb.transposed else b.nb) * 2) // cd)
        return base + extra <= cap
    want = [b for b in MP.candidates(chip, plain, rates, split) if fits(b)]
    assert got == want
    assert len(got) < len(MP.candidates(chip, plain, rates, split))   # it binds here
    # a PE that multiplies int4 by bf16, or a vector unit feeding the array from its
    # registers, keeps no expanded copy: the plain capacity
    for other in (_chip("infer-2026"), _chip("infer-2026", {"on_array_input_path": True},
                                             mixed_input=[])):
        assert _problems(other, g, df)[0] == plain


def test_expanded_b_block_in_the_mapping_and_only_for_vector_dequant():
    from diptych.sim import mapper as MP
    from diptych.sim.support import dequant_place
    g = Gemm(name="w", m=64, k=4096, n=4096, a_dtype="bf16", b_dtype="int4",
             c_dtype="bf16", tags=("weight",))
    chip = _chip("infer-2026", mixed_input=[])
    m = simulate(g, chip).mapping
    blk = m["block"]
    b_block = blk["k"] * blk["n"]
    # the reported scratchpad use counts the expanded block at bf16 (+ rounding of none:
    # blocks are whole bytes at 4 bits)
    assert m["scratchpad_bytes_used"] >= 2 * b_block // 2 + b_block * 2
    assert m["scratchpad_bytes_used"] <= m["scratchpad_bytes_per_array"]
    # the mapper expands exactly where sim/run/precision_ops.py charges an expanded tile's
    # scratchpad traffic (vector dequantisation on a chip without on_array_input_path)
    for name in ("infer-2026", "train-2026", "h100", "tpu-v4", "trainium2"):
        c = load_chip(name)
        for a, b in (("bf16", "int4"), ("bf16", "fp8"), ("fp8", "int4"), ("bf16", "bf16"),
                     ("mxfp8", "mxfp4")):
            x = Gemm(name="x", m=8, k=64, n=64, a_dtype=a, b_dtype=b, c_dtype=a)
            try:
                place = dequant_place(c, x)
            except ValueError:
                place = None
            want = place == "vector" and not c.core.vector.on_array_input_path
            assert (MP.expanded_b_bits(c, x) > 0) == want, (name, a, b)


@pytest.mark.parametrize("register_path", [True, False])
def test_kv_expansion_in_the_attention_kernels_register_path(register_path):
    """On a chip whose vector unit feeds the array from registers (h100's
    ``on_array_input_path``) the fused attention converts its cache in the kernel: its
    dequant op is tagged ``in_kernel`` and the attention does not wait for it; the summed
    model adds its time to the attention's compute term, ``max(compute + conversion,
    memory)``. Without the register path the attention waits for the expanded cache and the
    summed model adds the op after it."""
    from diptych.sim.run.summed import block_costs, simulate_workload
    from diptych.workloads.quant import IN_KERNEL_TAG
    chip = _chip("h100", {"on_array_input_path": register_path})
    p = Precision(weights="bf16", activations="bf16", kv="fp8")
    s = Scenario.of(phase="decode", batch=64, prompt=2048, gen=1)
    w = with_precision_ops(lower_workload(load_model("llama-3-8b"), s, precision=p, tp=1,
                                          dp=1)[0], chip)
    (b,) = [b for b in w.blocks if b.name == "layers"]
    deq = [i for i, o in enumerate(b.ops) if o.name.endswith(".dequant")]
    att = [i for i, o in enumerate(b.ops) if o.name == "attention (fused)"][0]
    assert len(deq) == 2
    assert all((IN_KERNEL_TAG in b.ops[i].tags) == register_path for i in deq)
    waits = {u.tensor for u in b.access[att].uses if u.role == "dep"}
    assert waits.isdisjoint({b.ops[i].name for i in deq}) == register_path
    recs = [r for r in simulate_workload(w, chip, simulate=roofline)["layers"]
            if r["block"] == "layers"]
    k = sum(r["seconds"] for r in recs if r["op"].endswith(".dequant"))
    (a,) = [r for r in recs if r["kind"] == "attention"]
    rest = sum(r["seconds"] for r in recs if r["bound"] != "communication"
               and not r["op"].endswith(".dequant"))
    (cost,) = [c for c in block_costs(w, chip, roofline) if c.name == "layers"]
    if register_path:
        assert cost.attention_compute_s == pytest.approx(a["compute_seconds"] + k, rel=1e-12)
        assert cost.compute_s == pytest.approx(
            rest - a["seconds"] + max(a["compute_seconds"] + k, a["memory_seconds"]),
            rel=1e-12)
        assert cost.compute_s < rest + k          # the conversion hides under the loads
    else:
        assert cost.attention_compute_s == pytest.approx(a["compute_seconds"], rel=1e-12)
        assert cost.compute_s == pytest.approx(rest + k, rel=1e-12)


#: TensorRT-LLM's XQA decode kernel on an H200 (NVIDIA/TensorRT-LLM @319f5114, blog16
#: "Decode Baseline"): TB/s over an FP8 and a BF16 cache at 16k and 64k keys
XQA_TBS = {"fp8": (4.03, 4.10), "bf16": (4.31, 4.37)}


def _decode_attention(chip, kv):
    from diptych.workloads.fused_attention import FusedAttention
    p = Precision(weights="bf16", activations="bf16", kv=kv)
    s = Scenario.of(phase="decode", batch=64, prompt=2048, gen=1)
    w = lower_workload(load_model("llama-3-8b"), s, precision=p, tp=1, dp=1)[0]
    return next(op for b, op in w.items() if isinstance(op, FusedAttention))


def test_an_in_kernel_cache_expansion_costs_the_stream_xqa_measures():
    """h100's ``in_kernel_expand_stream`` is XQA's FP8-over-BF16 bandwidth (0.935, 0.938);
    a decode attention over an FP8 cache streams at that share of the rate it reaches over a
    BF16 one, a BF16 cache and a chip without the register path (whose attention waits for
    the expanded cache instead) not at all."""
    from diptych.sim.run.attention import expand_stream_fraction, fused_stats
    h100 = load_chip("h100")
    share = h100.core.vector.in_kernel_expand_stream
    measured = [f / b for f, b in zip(XQA_TBS["fp8"], XQA_TBS["bf16"])]
    assert min(measured) - 0.005 <= share <= max(measured) + 0.005
    free = _chip("h100", {"in_kernel_expand_stream": 1.0})
    fp8, bf16 = _decode_attention(h100, "fp8"), _decode_attention(h100, "bf16")
    a, b = fused_stats(fp8, h100, simulate), fused_stats(fp8, free, simulate)
    assert a.stream_bytes_per_s == pytest.approx(share * b.stream_bytes_per_s, rel=1e-12)
    assert a.memory_seconds == pytest.approx(b.memory_seconds / share, rel=1e-12)
    assert a.seconds > b.seconds                        # memory-bound: the step pays it
    assert expand_stream_fraction(bf16, h100) == 1.0
    assert fused_stats(bf16, h100, simulate) == fused_stats(bf16, free, simulate)
    no_path = _chip("h100", {"on_array_input_path": False})
    assert expand_stream_fraction(fp8, no_path) == 1.0
