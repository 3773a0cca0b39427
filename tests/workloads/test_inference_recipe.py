"""Inference precision recipes (issue 21): FP8 linear layers over 16-bit activations, as a
serving engine runs an FP8 checkpoint. What runs in FP8 and what stays 16-bit (against the
model's shapes), the casts each recipe adds (closed forms), the weights' bytes (against the
parameter inventory and a hand count), the serving KV budget, and bad input exiting 2."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from diptych.arch import load_chip
from diptych.sim.run import Scenario
from diptych.sim.run.node import default_precision
from diptych.tools.cli import main
from diptych.tools.precision_spec import parse_precision
from diptych.workloads import Precision, load_model
from diptych.workloads.lower import decode, prefill
from diptych.workloads.ops import Collective, Gemm, VectorOp
from diptych.workloads.params import (is_quantized, param_count, weight_bytes_per_chip,
                                      weight_tensors)
from diptych.workloads.precision import check_inference_recipe

M = "llama-3-8b"


def recipe(name: str, kv: str = "fp8") -> Precision:
    return Precision(weights="fp8", activations="bf16", kv=kv, linear="fp8", recipe=name,
                     unquantized_weights="bf16")


ALL_FP8 = Precision(weights="fp8", activations="fp8", kv="fp8")
W8_A16 = Precision(weights="fp8", activations="bf16", kv="fp8")


def _ops(w, cls=object):
    return [(b, o) for b in w.blocks for o in b.ops if isinstance(o, cls)]


def _weight_bytes(w) -> float:
    """Every weight tensor the lowering reads, once each (program tensors shared)."""
    total = sum(b.repeat * t.bytes for b in w.blocks for t in b.tensors if t.kind == "weight")
    return total + sum(t.bytes for t in {t for b in w.blocks for t in b.program_tensors
                                         if t.kind == "weight"})


def test_the_linears_run_in_fp8_and_the_rest_in_bf16():
    m = load_model(M)
    w = decode(m, 8, 500, precision=recipe("fp8-static"), tp=2)
    linears = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    for _, g in _ops(w, Gemm):
        if g.name in linears:
            assert (g.a_dtype, g.b_dtype, g.c_dtype) == ("fp8", "fp8", "bf16"), g
            assert "quantized" in g.tags
        else:                                     # the LM head: BF16 weights and inputs
            assert g.name == "lm_head"
            assert (g.a_dtype, g.b_dtype, "quantized" in g.tags) == ("bf16", "bf16", False)
    # the tensor-parallel collectives move 16-bit activations: twice the all-FP8 bytes
    ar = {o.name: o.bytes for _, o in _ops(w, Collective)}
    ar8 = {o.name: o.bytes for _, o in _ops(decode(m, 8, 500, precision=ALL_FP8, tp=2),
                                             Collective)}
    assert ar["attn_all_reduce"] == 8 * m.hidden_size * 2 == 2 * ar8["attn_all_reduce"]
    assert ar["logits_all_gather"] == 8 * m.vocab_size * 2


@pytest.mark.parametrize("name", ["fp8-static", "fp8-dynamic"])
def test_the_casts_follow_the_closed_form(name):
    """Per decode layer: the static recipe's norms and gated activation write their output
    in FP8 (1 B/element) and one input gets a row-wise cast (attention's output: read 2 B,
    write 1 B); the dynamic recipe casts all four linear inputs, each after an amax pass,
    and its norms and activation write BF16. Nothing is cast column-wise, no weight is cast."""
    m = load_model(M)
    b, tp = 6, 2
    w = decode(m, b, 300, precision=recipe(name), tp=tp)
    d, f = m.hidden_size, m.intermediate_size // tp
    q = m.heads * m.head_dim // tp
    layers = [blk for blk in w.blocks if blk.name == "layers"][0]
    casts = {o.name: o for o in layers.ops if "cast" in o.tags}
    amax = {o.name: o for o in layers.ops if "amax" in o.tags}
    producers = {o.name: o for o in layers.ops if isinstance(o, VectorOp)
                 and o.kind in ("rmsnorm", "swiglu")}
    out = {"attn_norm": b * d, "mlp_norm": b * d, "swiglu": b * f}
    inputs = {"attn": b * q}
    if name == "fp8-dynamic":
        inputs |= {"h_attn": b * d, "h_mlp": b * d, "act": b * f}
    assert set(casts) == {f"{t}.cast" for t in inputs}
    for t, e in inputs.items():
        c = casts[f"{t}.cast"]
        assert (c.elements, c.read_bytes, c.write_bytes) == (e, 2 * e, e)
    if name == "fp8-static":
        assert amax == {}
        assert {k: (o.write_bytes, "fp8_rowwise" in o.tags) for k, o in producers.items()} \
            == {k: (e, True) for k, e in out.items()}
    else:
        assert {k: (o.read_bytes, o.write_bytes) for k, o in amax.items()} == \
            {f"{t}.amax": (2 * e, 4.0) for t, e in inputs.items()}
        assert {k: o.write_bytes for k, o in producers.items()} == \
            {k: 2 * e for k, e in out.items()}
    assert not any(t in o.tags for o in layers.ops for t in ("x_transpose", "transpose"))


@pytest.mark.parametrize("name", ["llama-3-70b", "gemma-2-9b", "phi-3-mini-4k"])
@pytest.mark.parametrize("tp", [1, 4])
def test_weights_lowered_add_up_to_the_inventory(name, tp):
    """Dense models (every parameter a lowered weight tensor): the weights a decode step
    reads are exactly :func:`weight_bytes_per_chip` under the recipe."""
    m = load_model(name)
    p = recipe("fp8-static")
    assert _weight_bytes(decode(m, 1, 100, precision=p, tp=tp)) == \
        weight_bytes_per_chip(m, tp, p)


#: Inventory tensors no lowering reads as a weight tensor (with or without a recipe): the
#: linears' biases, attention sinks, Mamba's per-head dt/A/D.
def _not_lowered(t) -> bool:
    return (t.name.endswith("bias") and "conv1d" not in t.name) or t.group == "sink" \
        or t.name == "ssm_dt_bias_A_log_D"


@pytest.mark.parametrize("name,tp", [
    (n, tp) for n in ("gpt-oss-20b", "qwen3-next-80b-a3b", "deepseek-v3.2-exp", "glm-4.5-air",
                      "gemma-2-9b", "falcon-h1-0.5b") for tp in (1, 4)])
def test_the_unquantised_weights_are_the_inventorys(name, tp):
    """Every model family: what the recipe adds to the weights read over W8A16 is one byte
    per unquantised parameter the inventory lists (norms, convolutions, gates, router,
    indexer weights, embedding, LM head), and :func:`weight_bytes_per_chip` says the same."""
    m = load_model(name)
    added = _weight_bytes(decode(m, 1, 100, precision=recipe("fp8-static"), tp=tp)) \
        - _weight_bytes(decode(m, 1, 100, precision=W8_A16, tp=tp))
    unq = [t for t in weight_tensors(m) if not is_quantized(t)]
    assert added == pytest.approx(sum(t.rank_elements(tp) * t.count for t in unq
                                      if not _not_lowered(t)), rel=1e-12)
    assert weight_bytes_per_chip(m, tp, recipe("fp8-static")) - \
        weight_bytes_per_chip(m, tp, W8_A16) == pytest.approx(
            sum(t.rank_elements(tp) * t.count for t in unq), rel=1e-12)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_mamba_b_and_c_are_whole_on_every_rank_when_the_ranks_do_not_divide_the_groups(tp):
    """Falcon-H1-0.5B has one group (B and C of 128 state channels each, shared by its 24
    heads): at tp > 1 each rank holds its 24/tp heads' z, x and dt but B and C whole, as vLLM's
    MambaMixer2 replicates groups the ranks do not divide, and as the lowering runs them; the
    inventory's per-rank share says the same (closed form below), and the weights a decode
    step reads add up to it."""
    m = load_model("falcon-h1-0.5b")
    d, h, p_, n, k = 1024, 24, 64, 128, 4
    assert (m.hidden_size, m.ssm_heads, m.ssm_head_dim, m.ssm_state_size, m.ssm_groups,
            m.ssm_conv_kernel) == (d, h, p_, n, 1, k)
    inproj = {t.name: t for t in weight_tensors(m)}["ssm_in_proj"]
    conv = {t.name: t for t in weight_tensors(m)}["ssm_conv1d"]
    assert inproj.rank_elements(tp) == d * ((2 * h * p_ + h) / tp + 2 * n)
    assert conv.rank_elements(tp) == k * (h * p_ / tp + 2 * n)
    for prec in (recipe("fp8-static"), W8_A16):
        assert _weight_bytes(decode(m, 1, 100, precision=prec, tp=tp)) == pytest.approx(
            weight_bytes_per_chip(m, tp, prec) - sum(
                t.rank_elements(tp) * t.count * (prec.w_bytes if is_quantized(t)
                                                 else prec.uw_bytes)
                for t in weight_tensors(m) if _not_lowered(t)), rel=1e-12)


def test_llama_weights_by_hand():
    """Llama-3-8B: embedding and LM head (2 × 128256 × 4096) and 65 norm vectors of 4096 in
    BF16, every other parameter in FP8."""
    m = load_model(M)
    unq = 2 * 128256 * 4096 + (2 * 32 + 1) * 4096
    assert weight_bytes_per_chip(m, 1, recipe("fp8-static")) == \
        (param_count(m) - unq) * 1 + unq * 2


@pytest.mark.parametrize("kv", ["fp8", "bf16"])
def test_prefill_attention_runs_as_fp8_context_fmha(kv):
    """A prefill under fp8-static over an FP8 cache: the attention's GEMMs take FP8 queries,
    keys, probabilities and values and the attention writes its output in FP8 (TensorRT-LLM's
    FP8 context FMHA), so the step has no cast at all; over a BF16 cache the attention
    computes in BF16 and its output gets a cast. Decode attention never runs in FP8."""
    from diptych.workloads.fused_attention import FusedAttention
    m = load_model(M)
    t = 2 * 256
    w = prefill(m, 2, 256, precision=recipe("fp8-static", kv=kv))
    gemms = {o.name: o for _, o in _ops(w, Gemm)}
    assert gemms["gate_up_proj"].a_dtype == "fp8" and gemms["lm_head"].b_dtype == "bf16"
    (_, att), = [(b, o) for b, o in _ops(w, FusedAttention) if b.name == "layers"]
    q = m.heads * m.head_dim
    casts = [o.name for _, o in _ops(w, VectorOp) if "cast" in o.tags]
    if kv == "fp8":
        assert {(g.a_dtype, g.b_dtype) for g in att.gemms} == {("fp8", "fp8")}
        assert att.write_bytes == t * q and casts == []
    else:
        assert {(g.a_dtype, g.b_dtype) for g in att.gemms} == {("bf16", "bf16")}
        assert att.write_bytes == 2 * t * q and casts == ["attn.cast"]
    dec = decode(m, 2, 256, precision=recipe("fp8-static"))
    (_, datt), = [(b, o) for b, o in _ops(dec, FusedAttention) if b.name == "layers"]
    assert {(g.a_dtype, g.b_dtype) for g in datt.gemms} == {("bf16", "fp8")}


def test_the_precision_each_phase_runs():
    h100 = load_chip("h100")
    assert default_precision(h100, "decode", kv_dtype="fp8", recipe="fp8-static") == \
        recipe("fp8-static")
    assert default_precision(h100, "prefill", recipe="fp8-dynamic") == \
        recipe("fp8-dynamic", kv="bf16")
    # without a recipe the dtypes mean what they say: every activation in FP8
    assert default_precision(h100, "decode", "fp8", "fp8", "fp8") == ALL_FP8


@pytest.mark.parametrize("kw,says", [
    (dict(weights="bf16", activations="bf16", linear="fp8", recipe="fp8-static",
          unquantized_weights="bf16"), "stores the linear weights in its linear dtype fp8"),
    (dict(weights="fp8", unquantized_weights="bf16"), "goes with an inference recipe"),
    (dict(weights="fp8", linear="fp8", recipe="fp8-static"), "goes with an inference recipe"),
    (dict(recipe="fp8-fast"), "recipe must be one of")])
def test_a_precision_that_contradicts_its_recipe_is_refused(kw, says):
    with pytest.raises(ValueError, match=says):
        Precision(**kw)


@pytest.mark.parametrize("r,w,a,says", [
    ("fp8-delayed", None, None, "'fp8-delayed' is a training recipe; inference takes"),
    ("fp8-static", "int4", None, "stores the linear layers' weights in fp8, not weights int4"),
    ("fp8-dynamic", None, "fp8", "keeps the activations in 16 bits"),
    ("w8a8", None, None, "'w8a8' is not a recipe")])
def test_check_inference_recipe(r, w, a, says):
    with pytest.raises(ValueError, match=says):
        check_inference_recipe(r, w, a)
    with pytest.raises(ValueError, match=says):
        Scenario(phase="decode", prompt=10, recipe=r, weights_dtype=w, act_dtype=a)


def test_precision_specs_name_inference_recipes():
    got = parse_precision(["train:fp8-current", "infer:recipe=fp8-static,kv=fp8"])
    assert (got["train"].recipe, got["decode"].recipe, got["prefill"].kv) == \
        ("fp8-current", "fp8-static", "fp8")
    every = parse_precision("recipe=fp8-dynamic,kv=fp8")   # all phases: train keeps the dtypes
    assert (every["train"].recipe, every["train"].kv, every["decode"].recipe) == \
        (None, "fp8", "fp8-dynamic")
    with pytest.raises(ValueError, match="fp8-static is an inference recipe; train takes"):
        parse_precision("train:fp8-static")


RUN = ["run", "--chip", "h100", "--model", M, "--phase", "decode", "--batch", "8",
       "--prompt", "200"]


def test_a_run_states_its_recipe_and_pays_for_it():
    import json
    out = {}
    for key, extra in (("static", ["--recipe", "fp8-static", "--kv-dtype", "fp8"]),
                       ("fp8", ["--precision", "fp8"])):
        r = CliRunner().invoke(main, RUN + extra + ["--json"])
        assert r.exit_code == 0, r.output
        out[key] = json.loads(r.output)
    p = out["static"]["precision"]
    assert (p["recipe"], p["linear"], p["activations"], p["unquantized_weights"]) == \
        ("fp8-static", "fp8", "bf16", "bf16")
    # 16-bit LM head, embedding-free decode: more bytes per step than all-FP8, so slower
    assert out["static"]["seconds"] > out["fp8"]["seconds"]
    r = CliRunner().invoke(main, RUN + ["--recipe", "fp8-static"])
    assert r.exit_code == 0 and "fp8-static" in r.output, r.output


@pytest.mark.parametrize("args,says", [
    (["--recipe", "fp8-static", "--weights-dtype", "int8"],
     "stores the linear layers' weights in fp8, not weights int8"),
    (["--recipe", "fp8-static", "--ideal"], "--ideal leaves every precision recipe's"),
    (["--recipe", "fp8-fast"], "'fp8-fast' is not one of"),
    (["--precision", "decode:fp8-current"], "fp8-current is a training recipe")])
def test_bad_inference_recipes_exit_2(args, says):
    r = CliRunner().invoke(main, RUN + args)
    assert r.exit_code == 2, r.output
    assert says in r.output and "Traceback" not in r.output


def test_serving_kv_budget_counts_bf16_head_and_embedding():
    """The serving KV budget: capacity less the weights, which under the recipe are one byte
    per unquantised parameter more than all-FP8 (and everything else unchanged)."""
    from diptych.sim.serving.kv import kv_budget
    from diptych.sim.serving.step_time import make_replica
    m = load_model(M)
    budgets = {}
    for key, kw in (("static", dict(recipe="fp8-static", kv_dtype="fp8")),
                    ("w8a16", dict(weights_dtype="fp8", act_dtype="bf16", kv_dtype="fp8"))):
        r = make_replica("h100", M, Scenario.of(phase="decode", **kw))
        budgets[key] = kv_budget(r, block_tokens=16, max_batched_tokens=2048,
                                 reserve_fraction=0.1)
    unq = sum(t.total for t in weight_tensors(m) if not is_quantized(t))
    assert budgets["static"].weights_bytes - budgets["w8a16"].weights_bytes == unq
    assert budgets["static"].activation_bytes == budgets["w8a16"].activation_bytes
    assert budgets["static"].kv_bytes == budgets["w8a16"].kv_bytes - unq


def test_serve_runs_the_recipe_and_states_it():
    import json
    args = ["serve", "--chip", "h100", "--model", M, "--qps", "5", "--requests", "30",
            "--prompt", "200", "--gen", "20", "--kv-dtype", "fp8", "--json"]
    r = CliRunner().invoke(main, args + ["--recipe", "fp8-static"])
    assert r.exit_code == 0, r.output
    p = json.loads(r.output)["info"]["pools"][0]["precision"]
    assert (p["recipe"], p["weights"], p["activations"], p["unquantized_weights"]) == \
        ("fp8-static", "fp8", "bf16", "bf16")
    bad = CliRunner().invoke(main, args + ["--recipe", "fp8-static", "--act-dtype", "fp8"])
    assert bad.exit_code == 2 and "keeps the activations in 16 bits" in bad.output, bad.output


def test_serve_plan_searches_under_the_recipe():
    import json
    r = CliRunner().invoke(main, ["serve-plan", "--model", M, "--chip", "h100", "--chips", "1",
                                  "--qps", "2", "--requests", "40", "--no-disagg", "--recipe",
                                  "fp8-dynamic", "--kv-dtype", "fp8", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["space"]["precision"] == {"kv_dtype": "fp8", "recipe": "fp8-dynamic"}
    assert {row["setup"]["pools"][0]["precision"]["recipe"] for row in d["evaluated"]} == \
        {"fp8-dynamic"}
