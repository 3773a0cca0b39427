"""FP8 training recipes (issue 21, item 3): what runs in FP8, the casts and amax passes each
recipe adds (against closed forms from the model's shapes), the per-step weight cast and amax
all-reduces, the run stating its recipe, and bad input exiting 2."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from roofline_double import roofline

import diptych.sim.run.node as run_mod
from diptych.sim.cluster.run import run_cluster_step
from diptych.sim.run import Scenario, run_workload
from diptych.sim.run.node import default_precision
from diptych.tools.cli import main
from diptych.workloads import Precision, load_model, train_step
from diptych.workloads.fused_attention import FusedAttention
from diptych.workloads.ops import Collective, Gemm, VectorOp
from diptych.workloads.precision import recipe_for
from diptych.arch import load_chip

M = "llama-3-8b"
BATCH, SEQ = 2, 1024          # one micro-batch of 2 × 1024 tokens


def fp8(recipe: str) -> Precision:
    return Precision(linear="fp8", recipe=recipe)


def _ops(w, cls=object, tag=None):
    """(block, op) for every op of ``w`` of class ``cls`` (with ``tag``), with repeats."""
    return [(b, o) for b in w.blocks for o in b.ops
            if isinstance(o, cls) and (tag is None or tag in getattr(o, "tags", ()))]


@pytest.mark.parametrize("w,a,r,want", [
    ("fp8", "fp8", None, "fp8-delayed"), (None, None, "fp8-current", "fp8-current"),
    ("fp8", None, "fp8-current", "fp8-current"), ("mxfp8", "mxfp8", None, "mxfp8"),
    ("bf16", "bf16", None, None), ("int4", "fp8", None, None), (None, None, None, None)])
def test_the_dtypes_name_one_recipe(w, a, r, want):
    assert recipe_for(w, a, r) == want


@pytest.mark.parametrize("w,a,r,says", [
    ("mxfp8", None, "fp8-current", "fp8 weights and activations, not weights mxfp8"),
    ("bf16", "fp8", "fp8-delayed", "not weights bf16, activations fp8"),
    (None, "fp8", "mxfp8", "mxfp8 weights and activations"),
    (None, None, "fp8-late", "training takes one of fp8-delayed, fp8-current, mxfp8"),
    (None, None, "fp8-static", "'fp8-static' is an inference recipe; training takes")])
def test_a_recipe_that_contradicts_the_dtypes_is_refused(w, a, r, says):
    with pytest.raises(ValueError, match=says):
        recipe_for(w, a, r)


def test_training_precision_of_each_recipe():
    h100 = load_chip("h100")
    assert default_precision(h100, "train", "fp8", "fp8") == fp8("fp8-delayed")
    assert default_precision(h100, "train", recipe="fp8-current") == fp8("fp8-current")
    mx = default_precision(load_chip("train-2026"), "train", recipe="mxfp8")
    assert (mx.weights, mx.activations, mx.recipe, mx.linear) == ("mxfp8", "mxfp8", "mxfp8",
                                                                  None)
    with pytest.raises(ValueError, match="training recipe; inference takes fp8-static"):
        default_precision(h100, "decode", recipe="fp8-current")


def _shapes():
    m = load_model(M)
    t = BATCH * SEQ
    h, f = m.hidden_size, m.intermediate_size
    q = m.heads * m.head_dim
    qkv = (m.heads + 2 * m.kv_heads) * m.head_dim
    return m, t, h, f, q, qkv


def test_what_runs_in_fp8():
    """The linear layers' GEMMs (forward, dgrad, wgrad) take FP8 operands; the LM head,
    attention and every vector op stay in BF16; model FLOPs are the BF16 step's."""
    m = load_model(M)
    w = train_step(m, BATCH, SEQ, precision=fp8("fp8-delayed"), micro_batch=BATCH)
    bf = train_step(m, BATCH, SEQ, micro_batch=BATCH)
    gemms = _ops(w, Gemm)
    q = [o for _, o in gemms if "quantized" in o.tags]
    assert {o.name.split(".")[0] for o in q} == {"qkv_proj", "o_proj", "gate_up_proj",
                                                 "down_proj"}
    assert len(q) == 3 * 4                  # fprop, dgrad, wgrad of each
    assert all(o.a_dtype == o.b_dtype == "fp8" and o.c_dtype == "bf16" for o in q
               if "wgrad" not in o.tags)
    assert all(o.a_dtype == o.b_dtype == "bf16" for _, o in gemms if o.name.startswith("lm_head"))
    assert all(g.a_dtype == g.b_dtype == "bf16" for _, o in _ops(w, FusedAttention)
               for g in o.gemms)
    assert w.flops() == pytest.approx(bf.flops())


@pytest.mark.parametrize("recipe", ["fp8-delayed", "fp8-current"])
def test_casts_follow_the_closed_form(recipe):
    """Per layer and micro-batch: delayed scaling casts attention's output and SwiGLU's
    (Megatron-Core's activation is not a TE kernel), and, in backward, the output gradient of
    every linear (dSwiGLU writes BF16 too); the norms write their output row-wise in FP8 and
    each is transposed in backward for the wgrad (TE 1.x ``fp8_transpose``: 1 B read, 1 B
    written). Current scaling casts every linear input and output gradient, each after an
    amax pass over it. A cast reads the BF16 tensor once and writes two FP8 copies."""
    m, t, h, f, q, qkv = _shapes()
    w = train_step(m, BATCH, SEQ, precision=fp8(recipe), micro_batch=BATCH)
    bf = train_step(m, BATCH, SEQ, micro_batch=BATCH)
    bwd = [t * h, t * 2 * f, t * h, t * qkv]
    fwd = [t * q, t * f] if recipe == "fp8-delayed" else [t * h, t * q, t * h, t * f]
    layer = [(b, o) for b, o in _ops(w, VectorOp, "recipe") if b.name.startswith("layers")]
    casts = sorted(o.elements for b, o in layer if "cast" in o.tags)
    assert casts == sorted(fwd + bwd)
    assert all(b.repeat == m.layers for b, _ in layer)
    for _, o in layer:
        if "cast" in o.tags:
            assert (o.read_bytes, o.write_bytes) == (2 * o.elements, 2 * o.elements)
    amax = sorted(o.elements for _, o in layer if "amax" in o.tags)
    assert amax == (casts if recipe == "fp8-current" else [])
    tr = [o for _, o in layer if "transpose" in o.tags]
    assert sorted(o.elements for o in tr) == ([t * h, t * h] if recipe == "fp8-delayed"
                                              else [])
    assert all((o.read_bytes, o.write_bytes) == (o.elements, o.elements) for o in tr)
    norms = {r: {o.name: o.write_bytes for _, o in _ops(x, VectorOp) if o.kind == "rmsnorm"
                 and not o.name.endswith(".bwd")} for r, x in (("fp8", w), ("bf16", bf))}
    for name, wb in norms["fp8"].items():   # the layers' norms write 1 B, the final one 2 B
        assert wb == norms["bf16"][name] / (2 if name in ("attn_norm", "mlp_norm")
                                            and recipe == "fp8-delayed" else 1)
    assert set(norms["fp8"]) == {"attn_norm", "mlp_norm", "final_norm"}


@pytest.mark.parametrize("recipe,reads", [("fp8-delayed", 1), ("fp8-current", 2)])
def test_weights_cast_once_per_step(recipe, reads):
    """Every linear weight (L × (h·qkv + q·h + 3·h·f) parameters) is written as an FP8 pair
    once per step, whatever the micro-batch count; current scaling reads it twice (amax)."""
    m, _, h, f, q, qkv = _shapes()
    n = m.layers * (h * qkv + q * h + 3 * h * f)
    for mb in (1, BATCH):
        w = train_step(m, BATCH, SEQ, precision=fp8(recipe), micro_batch=mb)
        cast = [(b, o) for b, o in _ops(w, VectorOp, "cast") if b.stage == "optimizer"]
        assert sum(b.repeat * o.elements for b, o in cast) == n
        assert sum(b.repeat * o.write_bytes for b, o in cast) == 2 * n
        assert sum(b.repeat * o.read_bytes for b, o in cast) == reads * 2 * n


def test_delayed_scaling_reduces_its_amaxes_across_ranks():
    m = load_model(M)
    tp, dp = 2, 4
    for recipe, want in (("fp8-delayed", 2), ("fp8-current", 0)):
        w = train_step(m, 8, SEQ, precision=fp8(recipe), tp=tp, dp=dp, micro_batch=1)
        red = [o for _, o in _ops(w, Collective, "amax")]
        assert len(red) == want
        # one forward and one backward reduction per micro-batch (TE reduces on every
        # fp8_autocast exit; Megatron-Core enters it once per micro-batch's forward)
        assert w.info["micro_batches"] == 2
        assert all(b.repeat == 2 for b, _ in _ops(w, Collective, "amax"))
        for o in red:         # five FP32 amaxes per linear module (3 fwd + 2 bwd), per layer
            assert (o.kind, o.group, o.bytes) == ("all_reduce", tp * dp,
                                                  5 * 4 * m.layers * 4)
    assert not _ops(train_step(m, 8, SEQ, precision=fp8("fp8-delayed"), micro_batch=1),
                    Collective, "amax")         # one rank: nothing to reduce


@pytest.fixture
def roofline_runs(monkeypatch):
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)


def _train(**kw):
    return run_workload(load_chip("h100"), load_model(M),
                        Scenario.of(phase="train", batch=BATCH, seq=SEQ, micro_batch=BATCH,
                                    **kw))


def test_a_recipe_costs_time_and_the_run_says_which(roofline_runs):
    bf = _train()
    d = _train(weights_dtype="fp8", act_dtype="fp8")
    c = _train(recipe="fp8-current")
    assert d.precision["recipe"] == "fp8-delayed" and d.precision["linear"] == "fp8"
    assert c.precision["recipe"] == "fp8-current"
    assert bf.precision["recipe"] is None
    assert c.seconds > d.seconds          # the amax passes and unfused casts
    assert d.seconds < bf.seconds         # FP8 GEMMs still win on an H100
    assert d.flops == pytest.approx(bf.flops)


def test_the_cluster_step_charges_the_weight_cast_and_amax_all_reduce(roofline_runs):
    kw = dict(phase="train", batch=16, seq=SEQ, tp=2, dp=4, pp=2, micro_batch=1)
    args = (load_chip("h100"), load_model(M))
    bf = run_cluster_step(*args, Scenario.of(**kw), cluster="dgx-h100", simulate=roofline)
    d = run_cluster_step(*args, Scenario.of(recipe="fp8-delayed", **kw), cluster="dgx-h100",
                         simulate=roofline)
    assert d.precision["recipe"] == "fp8-delayed"
    assert all(o > b for o, b in zip(d.layout["optimizer"], bf.layout["optimizer"]))
    amax = [k for k in d.comm if "amax" in k]
    assert amax and all(d.comm[k]["group_kind"] == "amax" for k in amax)
    assert not [k for k in bf.comm if "amax" in k]


def test_the_cluster_step_reduces_amaxes_per_micro_batch_and_chunk(roofline_runs):
    """The delayed recipe's amax all-reduces run once per autocast exit and once in the
    matching backward: per micro-batch and model chunk. With the weight casts fixed per step,
    the FP8 optimizer tail over BF16's grows by the same time for every added micro-batch
    (1 → 2 → 3 per replica); current scaling has none."""
    args = (load_chip("h100"), load_model(M))

    def extra(recipe, mb):
        kw = dict(phase="train", batch=4 * mb, seq=SEQ, tp=2, dp=4, pp=2, micro_batch=1)
        bf, q = (run_cluster_step(*args, Scenario.of(**kw, **r), cluster="dgx-h100",
                                  simulate=roofline) for r in ({}, {"recipe": recipe}))
        return q.layout["optimizer"][0] - bf.layout["optimizer"][0]
    d = [extra("fp8-delayed", mb) for mb in (1, 2, 3)]
    assert d[1] - d[0] > 0
    assert d[2] - d[1] == pytest.approx(d[1] - d[0], rel=1e-6)
    c = [extra("fp8-current", mb) for mb in (1, 2)]
    assert c[1] == pytest.approx(c[0], rel=1e-6)


RUN = ["run", "--chip", "h100", "--model", M, "--json"]


@pytest.mark.parametrize("args,says", [
    (["--phase", "train", "--seq", "256", "--recipe", "fp9"], "'fp9' is not one of"),
    (["--phase", "decode", "--prompt", "64", "--recipe", "fp8-current"],
     "recipe 'fp8-current' is a training recipe; inference takes fp8-static, fp8-dynamic"),
    (["--phase", "train", "--seq", "256", "--recipe", "fp8-static"],
     "'fp8-static' is an inference recipe; training takes one of"),
    (["--phase", "train", "--seq", "256", "--recipe", "fp8-current", "--weights-dtype",
      "mxfp8"], "trains with fp8 weights and activations, not weights mxfp8"),
    (["--phase", "train", "--seq", "256", "--precision", "recipe=fp7"],
     "'fp7' is not a recipe"),
    (["--phase", "train", "--seq", "256", "--precision", "train:fp8-current", "--recipe",
      "fp8-delayed"], "both set the recipe"),
    (["--phase", "prefill", "--prompt", "64", "--precision", "infer:recipe=mxfp8"],
     "mxfp8 is a training recipe; infer takes the dtypes")])
def test_bad_recipes_exit_2_naming_them(args, says):
    r = CliRunner().invoke(main, RUN + args)
    assert r.exit_code == 2, r.output
    assert says in r.output and "Traceback" not in r.output
