"""Fused (FlashAttention-style) attention against the unfused lowering and closed forms."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from roofline_double import roofline

import diptych.sim.run.node as run_mod
from diptych.arch import load_chip
from diptych.sim.run import Scenario, run_workload
from diptych.workloads.ops import Gemm
from diptych.tools.cli import main
from diptych.workloads import Precision, decode, load_model, prefill, train_step
from diptych.workloads.fused_attention import FusedAttention
from diptych.workloads.params import kv_bytes_per_token
from diptych.sim.run.summed import simulate_workload

MODELS = ["llama-3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b"]


def _fused(w, stage="forward"):
    return [(b, o) for b, o in w.items() if isinstance(o, FusedAttention) and b.stage == stage]


@pytest.mark.parametrize("name", MODELS)
def test_forward_flops_equal_unfused(name):
    m = load_model(name)
    for f, u in [(prefill(m, 2, 300), prefill(m, 2, 300, attention="unfused")),
                 (decode(m, 3, 700), decode(m, 3, 700, attention="unfused"))]:
        assert f.flops() == pytest.approx(u.flops(), rel=1e-12)
        assert f.vector_ops == pytest.approx(u.vector_ops, rel=1e-12)
        assert len(_fused(f)) == len(f.blocks) - 2       # one record per layer block
        assert not _fused(u)


@pytest.mark.parametrize("name", ["llama-3-8b", "deepseek-v3"])
def test_backward_flops_add_the_score_recompute(name):
    m = load_model(name)
    f, u = train_step(m, 2, 255), train_step(m, 2, 255, attention="unfused")
    # the forward QKᵀ product, recomputed once per layer in backward
    scores = sum(b.repeat * o.flops for b, o in u.items()
                 if b.stage == "forward" and isinstance(o, Gemm) and o.name == "attn_scores")
    assert scores > 0
    assert f.flops() == pytest.approx(u.flops() + scores, rel=1e-12)
    assert f.flops(recompute=False) == pytest.approx(u.flops(), rel=1e-12)
    r_f = run_workload("train-2026", m, Scenario.of(phase="train", batch=2, seq=255),
                       simulate=roofline)
    r_u = run_workload("train-2026", m,
                       Scenario.of(phase="train", batch=2, seq=255, attention="unfused"),
                       simulate=roofline)
    assert r_f.flops == pytest.approx(r_u.flops, rel=1e-12)              # MFU: model FLOPs
    assert r_f.hardware_flops == pytest.approx(r_u.hardware_flops + scores, rel=1e-12)


def test_fused_dram_bytes_closed_form():
    m = load_model("llama-3-8b")      # GQA: 32 heads, 8 KV heads, head_dim 128
    B, S, H, Hkv, dh, a = 2, 64, 32, 8, 128, 2
    q = o = B * S * H * dh * a
    k = v = B * S * Hkv * dh * a
    stats = B * H * S * 2 * 4
    (_, fwd), = _fused(prefill(m, B, S))
    assert fwd.read_bytes == q + k + v and fwd.write_bytes == o          # no stats in inference
    w = train_step(m, B, S)
    (_, tf), = _fused(w)
    assert tf.read_bytes == q + k + v and tf.write_bytes == o + stats
    (_, bwd), = _fused(w, "backward")
    assert bwd.read_bytes == q + k + v + o + o + stats                  # Q, K, V, O, dO, stats
    assert bwd.write_bytes == q + k + v                                 # dQ, dK, dV
    # the summed run's per-op record (every operand in DRAM) carries exactly those bytes
    r = run_workload("train-2026", m,
                     Scenario.of(phase="prefill", batch=B, prompt=S, execution="sum"),
                     simulate=roofline)
    rec = next(x for x in r.layers if x["op"] == "attention (fused)")
    assert rec["dram_bytes"] == q + k + v + o
    assert rec["kind"] == "attention" and rec["bound"] in ("compute", "memory")


def test_long_prefill_fits_and_drops_the_score_working_set():
    m = load_model("llama-3-70b")
    S, a, h, d = 32768, 2, 64, 8192
    kw = dict(phase="prefill", batch=1, prompt=S)
    with pytest.warns(UserWarning, match="max_position_embeddings"):
        f = run_workload("train-2026", m, Scenario.of(**kw), simulate=roofline)
        u = run_workload("train-2026", m, Scenario.of(attention="unfused", **kw),
                         simulate=roofline)
    assert f.fits and not u.fits
    # unfused: the peak working set is the softmax reading the scores and writing the
    # probabilities (2 × h × S × keys) on top of the S × d hidden state
    s2 = 2 * a * h * S * math.ceil((S + 1) / 2)
    hidden = S * d * a
    act_f, act_u = f.memory_breakdown["activations"], u.memory_breakdown["activations"]
    assert act_u == s2 + hidden
    # fused: no S² term is held, the peak is some linear-in-S op (an MLP GEMM here)
    assert hidden < act_f < 0.05 * s2
    assert f.seconds < u.seconds


def _attention_seconds(w, chip):
    t = simulate_workload(w, chip)
    names = ("attention (fused)", "attn_scores", "softmax", "attn_pv")
    return sum(r["seconds"] for r in t["layers"] if r["op"] in names and r["block"] == "layers")


@given(batch=st.integers(1, 3), s=st.integers(1, 700), decode_=st.booleans())
@settings(max_examples=8, deadline=None)
def test_fused_never_slower_than_unfused_on_the_engine(batch, s, decode_):
    chip = load_chip("train-2026")
    m = load_model("llama-3-8b")
    lower = decode if decode_ else prefill
    f = _attention_seconds(lower(m, batch, s), chip)
    u = _attention_seconds(lower(m, batch, s, attention="unfused"), chip)
    assert 0 < f <= u * (1 + 1e-12)


def test_decode_reads_the_kv_cache_once():
    B, ctx = 4, 2048
    m = load_model("llama-3-70b")
    p = Precision(weights="fp8", activations="bf16", kv="fp8")
    (blk, fa), = _fused(decode(m, B, ctx, precision=p))
    q = o = B * m.heads * m.head_dim * 2                    # one query row per head
    assert blk.repeat * (fa.read_bytes - q) == B * ctx * kv_bytes_per_token(m, "fp8")
    assert fa.write_bytes == o
    # MLA absorbed decode: the latent cache is K and V at once, read a single time
    d = load_model("deepseek-v3")
    w = decode(d, B, ctx)
    kv = 0.0
    for b, fa in _fused(w):
        scores = fa.parts[0]
        kv += b.repeat * (fa.read_bytes - scores.a_bytes)
    assert kv == B * ctx * kv_bytes_per_token(d, "bf16")
    u = decode(d, B, ctx, attention="unfused")    # unfused reads it again for PV (latent only)
    kv_u = sum(b.repeat * o.b_bytes for b, o in u.items()
               if isinstance(o, Gemm) and o.name in ("attn_scores", "attn_pv"))
    r, rope = d.kv_lora_rank, d.qk_rope_head_dim
    assert kv_u == pytest.approx(kv * (2 * r + rope) / (r + rope), rel=1e-12)


def test_bad_attention_mode_and_cli_option(monkeypatch):
    m = load_model("llama-3-8b")
    with pytest.raises(ValueError, match="attention must be one of fused, unfused, not 'flash'"):
        prefill(m, 1, 16, attention="flash")
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    runner = CliRunner()
    base = ["run", "--chip", "train-2026", "--model", "llama-3-8b", "--phase", "prefill",
            "--prompt", "64", "--json"]
    ops = {}
    for mode in ("fused", "unfused"):
        res = runner.invoke(main, base + ["--attention", mode])
        assert res.exit_code == 0, res.output
        d = json.loads(res.output)
        assert d["info"]["attention"] == mode
        ops[mode] = {x["op"] for x in d["layers"]}
    assert "attention (fused)" in ops["fused"] and "softmax" not in ops["fused"]
    assert "softmax" in ops["unfused"] and "attention (fused)" not in ops["unfused"]
