"""DeepSeek-V3.2-Exp (``DeepseekV32ForCausalLM``: DeepSeek Sparse Attention on MLA) from its
HF config.json (issue 25 item 4): the parameter count against a hand formula and the model
card, the KV bytes per token (latent + RoPE key + the indexer's FP8 key and scale), the
indexer's cost linear in the context and the main attention's reads capped at ``index_topk``
(closed forms), the sparse training stage's indexer backward over the selected keys, every
phase and ``serve`` on it, and bad configs exiting 2 naming the file, key and value."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from roofline_double import roofline
from test_architectures import embeddings, glu
from test_glm_deepseek_v2 import mla
from test_tensors import check_bytes
from tiny_models import TINY_DSA, write_config

from diptych.sim.cluster import Plan, check_plan
from diptych.sim.run import Scenario, run_workload
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
from diptych.tools.cli import main
from diptych.workloads import (active_param_count, decode, kv_bytes_per_token, load_model,
                               model_from_hf, param_count, prefill)
from diptych.workloads.graph import program_pieces
from diptych.workloads.lower import causal_mean_keys
from diptych.workloads.memory import peak_working_bytes
from diptych.workloads.params import params_per_chip
from diptych.workloads.train import train_step

MODELS = Path(__file__).parents[2] / "workloads" / "models"


def _tiny():
    return model_from_hf(TINY_DSA, name="tiny-dsa")


def _ops(w, name: str) -> list:
    return [op for b in w.blocks for op in b.ops if op.name == name]


def indexer(d: int, q_lora: int, heads: int, dim: int) -> int:
    """wq_b [H_I·d_I, r_q], wk [d_I, d], k_norm (LayerNorm weight and bias), weights_proj
    [H_I, d], no biases [M: DeepSeek-V3.2-Exp inference/model.py ``Indexer``]."""
    return q_lora * heads * dim + d * dim + 2 * dim + d * heads


def v3_moe_layer(d: int, e: int, f: int) -> int:
    """V3's router weight [E, d] and e_score_correction_bias [E], E experts, one shared."""
    return d * e + e + e * glu(d, f) + glu(d, f)


def test_count_matches_the_hand_formula_and_the_model_card():
    m = load_model("deepseek-v3.2-exp")
    d, e = 7168, 256
    hand = (61 * (mla(d, 128, 1536, 512, 128, 64, 128) + indexer(d, 1536, 64, 128))
            + 3 * glu(d, 18432) + 58 * v3_moe_layer(d, e, 2048)
            + embeddings(129280, d, False))
    active = hand - 58 * (e - 8) * glu(d, 2048)
    assert param_count(m) == hand == 671_877_944_064
    assert active_param_count(m) == pytest.approx(active, rel=1e-12)
    # the indexer adds 61 × 13,959,424 = 851,524,864 to DeepSeek-V3 (0.13 %)
    assert param_count(m) - param_count(load_model("deepseek-v3")) == 851_524_864
    # [P] DeepSeek-V3 card (V3.2-Exp is V3.1-Terminus plus DSA, paper §1): 671B total, 37B
    # activated; active without the embedding table (a lookup): 37.48B
    assert abs(param_count(m) / 671e9 - 1) < 0.005
    assert abs((active_param_count(m) - 129280 * d) / 37e9 - 1) < 0.02
    # the indexer is replicated on every tensor-parallel rank (plain Linear in the reference)
    assert params_per_chip(m, 8) - params_per_chip(load_model("deepseek-v3"), 8) == 851_524_864


def test_kv_bytes_per_token_closed_form():
    m = load_model("deepseek-v3.2-exp")
    # per layer: 512 latent + 64 RoPE key in the KV dtype, + the indexer key: 128 FP8 values
    # and one FP32 scale per 128 (inference/model.py k_cache, k_scale_cache)
    for dtype, b in (("bf16", 2), ("fp8", 1)):
        assert kv_bytes_per_token(m, dtype) == 61 * ((512 + 64) * b + 128 + 4)
    assert kv_bytes_per_token(m, "fp8") == 43_188
    assert kv_bytes_per_token(load_model("deepseek-v3"), "fp8") == 35_136


def test_models_show_lists_the_indexer_and_its_kv_share():
    r = CliRunner().invoke(main, ["models", "show", "deepseek-v3.2-exp"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "DSA: a lightning indexer of 64 heads × 128 (FP8)" in out
    assert "the top 2,048 per query" in out
    assert "KV bytes/token fp8 │ 43,188" in out
    assert "132 B indexer key" in out
    r = CliRunner().invoke(main, ["models", "show", "deepseek-v3.2-exp", "--json"])
    s = json.loads(r.output)
    assert s["index_key_bytes_per_token_per_layer"] == 132
    assert s["indexer_flops_per_token_per_context_token"] == 2 * 61 * 64 * 128


def test_decode_attention_reads_stop_at_topk_and_the_indexer_grows_linearly():
    m, B = _tiny(), 3                      # index_topk 64, 4 indexer heads of 16
    reads, scores = {}, {}
    for ctx in (16, 63, 64, 200, 1000, 4000):
        w = decode(m, B, ctx)
        att = _ops(w, "attention (fused)")[0]
        sc = _ops(w, "indexer_scores")[0]
        reads[ctx], scores[ctx] = att.read_bytes, sc
        keys = ctx                         # the cache with this step's token
        # the indexer scores every key: q·H_I rows × d_I, FP8 keys of every sequence
        assert (sc.m, sc.k, sc.n, sc.batch) == (4, 16, keys, B)
        assert sc.flops == 2 * B * 4 * 16 * keys
        assert sc.b_bytes == B * 16 * keys
        red = _ops(w, "indexer_reduce")[0]
        assert red.elements == B * 4 * keys
        assert red.write_bytes == B * keys * 4          # one FP32 logit per key
        # the main attention's scores run over min(context, topk) keys
        att_scores = next(p for p in att.parts if p.name == "attn_scores")
        assert att_scores.n == min(keys, 64)
        topk = _ops(w, "indexer_topk")[0]
        assert topk.write_bytes == B * min(keys, 64) * 4
    assert reads[64] == reads[200] == reads[1000] == reads[4000] > reads[63] > reads[16]
    assert scores[4000].flops / scores[1000].flops == 4.0


def test_full_model_decode_attention_is_flat_in_context_beyond_topk():
    m = load_model("deepseek-v3.2-exp")
    a, b = (decode(m, 4, ctx, tp=8) for ctx in (32_768, 131_072))
    assert _ops(a, "attention (fused)")[0].read_bytes == \
        _ops(b, "attention (fused)")[0].read_bytes
    ia, ib = (_ops(w, "indexer_scores")[0].b_bytes for w in (a, b))
    assert ib / ia == 4.0


def test_prefill_attention_keys_are_the_topk_capped_causal_mean():
    m, s, k = _tiny(), 512, 64
    w = prefill(m, 2, s)
    att = _ops(w, "attention (fused)")[0]
    scores = next(p for p in att.parts if p.name == "attn_scores")
    # query i (1-based) attends min(i, topk) keys: (topk(topk+1)/2 + (s-topk)·topk) / s
    mean = (k * (k + 1) / 2 + (s - k) * k) / s
    assert scores.n == math.ceil(mean) == math.ceil(causal_mean_keys(s, 0, k))
    # the indexer scores the whole causal triangle: (s+1)/2 keys per query
    assert _ops(w, "indexer_scores")[0].n == math.ceil((s + 1) / 2)


def test_the_on_chip_scores_are_no_working_set():
    # fp8_index reduces the H_I-row scores in its epilogue: the peak working set is the
    # logits (T × keys FP32, written then read by the top-k), not the scores (H_I × larger)
    w = prefill(_tiny(), 2, 512)
    scores = _ops(w, "indexer_scores")[0]
    logits = _ops(w, "indexer_topk")[0].read_bytes
    assert logits == 2 * 512 * scores.n * 4
    assert peak_working_bytes(w) < scores.c_bytes


def test_context_parallelism_is_refused():
    with pytest.raises(ValueError, match=r"cp=2: context parallelism of tiny-dsa's sparse "
                                         r"attention .* is not modelled; use cp=1"):
        prefill(_tiny(), 2, 512, cp=2)
    with pytest.raises(ValueError, match="cp=2: context parallelism of .* is not modelled"):
        check_plan(Plan(tp=1, cp=2), _tiny(), chips=2, batch=2, seq_len=256)


def test_training_backward_scores_only_the_selected_keys():
    m, seq = _tiny(), 512
    w = train_step(m, 2, seq)
    fwd = _ops(w, "indexer_scores")[0]
    assert fwd.n == math.ceil((seq + 1) / 2)
    sel = math.ceil(causal_mean_keys(seq, 0, 64))
    # dQ_I = dI·K (k = the selected keys), dK_I = Qᵀ·dI (n = the selected keys)
    dq = _ops(w, "indexer_scores.dgrad")[0]          # one per block (dense, MoE layers)
    dk = _ops(w, "indexer_scores.dgrad_b")[0]
    assert (dq.m, dq.k, dq.n) == (fwd.m, sel, fwd.k)
    assert (dk.m, dk.k, dk.n) == (fwd.k, fwd.m, sel)


PHASES = [("prefill", dict(prompt=256)), ("decode", dict(prompt=256, gen=4)),
          ("train", dict(seq=128))]


def test_ops_agree_with_their_tensors_past_topk():
    # the tiny model's top-64 is exceeded: the backward's shares of the scores are sel/keys
    m = _tiny()
    for w in (prefill(m, 2, 256), decode(m, 3, 300), train_step(m, 2, 256),
              train_step(m, 2, 256, tp=2, attention="unfused")):
        assert check_bytes(w) == [], w.phase
        assert program_pieces(w)          # Program() validates each


@pytest.mark.parametrize("phase,kw", PHASES)
def test_every_phase_runs_on_the_tiny_model(phase, kw):
    r = run_workload("h100", _tiny(), Scenario.of(phase=phase, batch=2, **kw),
                     simulate=roofline)
    assert r.seconds > 0 and r.flops > 0


@pytest.mark.parametrize("phase,kw", [
    *PHASES[:2], pytest.param(*PHASES[2], marks=pytest.mark.slow)])     # train: ~7 s
def test_every_phase_runs_on_the_full_model(phase, kw):
    r = run_workload("h100", "deepseek-v3.2-exp",
                     Scenario.of(phase=phase, batch=2, tp=8, **kw), simulate=roofline)
    assert r.seconds > 0 and r.flops > 0


def test_serve_runs_on_the_tiny_model(tmp_path):
    # 300-token prompts past the tiny model's top-64
    res = serve(colocated("h100", write_config(tmp_path, TINY_DSA), tp=1),
                Load(qps=4, prompt=P("300"), gen=P("8"), requests=4),
                oracles=StepTimerCache("grid", roofline))
    assert res.requests == 4


@pytest.mark.slow       # ~5 s
def test_serve_runs_past_topk():
    # 3,000-token prompts: the decode steps select 2,048 of their keys
    res = serve(colocated("infer-2026", "deepseek-v3.2-exp", tp=8, weights_dtype="fp8"),
                Load(qps=4, prompt=P("3000"), gen=P("8"), requests=4),
                oracles=StepTimerCache("grid", roofline))
    assert res.requests == 4


def test_long_decode_is_cheaper_than_deepseek_v3():
    # at 128K tokens of context V3 reads the whole latent cache, V3.2 2,048 rows of it plus
    # its 132-byte index keys
    scen = Scenario.of(phase="decode", batch=8, prompt=131_072, gen=1, tp=8)
    t32 = run_workload("h100", "deepseek-v3.2-exp", scen, simulate=roofline).seconds
    t3 = run_workload("h100", "deepseek-v3", scen, simulate=roofline).seconds
    assert t32 < t3


@pytest.mark.parametrize("change,match", [
    ({"index_head_dim": 32},
     "c.json: index_head_dim (32) must be at least qk_rope_head_dim (64)"),
    ({"index_topk": 0}, "c.json: index_topk must be an integer >= 1, not 0"),
    ({"index_n_heads": "64"}, "c.json: index_n_heads must be an integer, not '64'"),
    ({"q_lora_rank": None}, "c.json: q_lora_rank must be a positive integer for "
                            "DeepseekV32ForCausalLM"),
])
def test_bad_fields_exit_2_naming_file_key_and_value(tmp_path, change, match):
    cfg = {**json.loads((MODELS / "deepseek-v3.2-exp.json").read_text()), **change}
    with pytest.raises(ValueError) as e:
        model_from_hf(cfg, name="x", source="c.json")
    assert match in str(e.value)
    path = write_config(tmp_path, cfg, "c.json")
    r = CliRunner().invoke(main, ["models", "show", path])
    assert r.exit_code == 2, r.output
    assert match.replace("c.json", path) in " ".join(r.output.split())
