"""Lowering of the heterogeneous-layer families (Qwen3, Gemma 2/3, gpt-oss, Llama 4, Phi-3)
against closed forms: FLOPs with per-layer-kind attention spans, KV bytes read and held, the
vector work of soft-capping and attention sinks, and runs on a chip (roofline double, one on
the engine). Spans are brute-forced with numpy, independently of ``lower.causal_mean_keys``."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.run import Scenario, run_workload
from diptych.workloads.ops import Gemm
from diptych.workloads import Precision, decode, load_model, prefill, train_step
from diptych.workloads.fused_attention import FusedAttention
from diptych.workloads.lower import chunked_mean_keys
from diptych.workloads.memory import activation_bytes
from diptych.workloads.params import kv_bytes_by_layer_kind, matmul_param_count

NEW = ["qwen3-8b", "qwen3-30b-a3b", "gemma-2-9b", "gemma-3-27b", "gpt-oss-20b",
       "gpt-oss-120b", "llama-4-scout", "llama-4-maverick", "phi-3-mini-4k"]


def spans(m, positions: np.ndarray) -> list[np.ndarray]:
    """Keys each query position (1-based) attends, per layer: full, window-capped or within
    its chunk."""
    out = []
    for s in m.layer_specs():
        if s.attention == "sliding":
            out.append(np.minimum(positions, s.window))
        elif s.attention == "chunked":
            out.append((positions - 1) % s.window + 1)
        else:
            out.append(positions)
    return out


def per_key_flops(m) -> float:
    """QKᵀ and P·V FLOPs per (query, key) pair in one layer, all heads."""
    return 2.0 * m.heads * (m.qk_head_dim + m.v_dim)


@pytest.mark.parametrize("name", NEW)
def test_prefill_flops_closed_form(name):
    m = load_model(name)
    B, S = 2, 9001                                   # longer than every window and chunk
    head = m.vocab_size * m.hidden_size
    keys = [math.ceil(k.mean()) for k in spans(m, np.arange(1, S + 1))]
    expect = (2 * (matmul_param_count(m) - head) * B * S + 2 * head * B
              + per_key_flops(m) * sum(keys) * B * S)
    assert prefill(m, B, S).flops() == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("name", NEW)
def test_decode_flops_and_kv_read_closed_form(name):
    m = load_model(name)
    B, ctx = 3, 10_000
    keys = [int(k[0]) for k in spans(m, np.array([ctx]))]
    w = decode(m, B, ctx, precision=Precision(kv="fp8"))
    assert w.flops() == pytest.approx(B * (2 * matmul_param_count(m)
                                           + per_key_flops(m) * sum(keys)), rel=1e-12)
    # fused decode reads each layer's cache (its window / chunk) once: K and V, fp8
    kv = sum(b.repeat * (o.read_bytes - o.parts[0].a_bytes) for b, o in w.items()
             if isinstance(o, FusedAttention))
    assert kv == B * sum(keys) * 2 * m.kv_heads * m.head_dim * 1.0


def test_layer_blocks_and_their_ops():
    names = lambda w: {b.name: b.repeat for b in w.blocks if b.name.startswith("layers")}  # noqa
    ops = lambda w, blk: [o.name for b, o in w.items() if b.name == blk]  # noqa: E731
    g = decode(load_model("gemma-2-9b"), 1, 100)
    assert names(g) == {"layers (sliding 4096)": 21, "layers (full)": 21}
    layer = ops(g, "layers (full)")
    assert "attn_post_norm" in layer and "mlp_post_norm" in layer and "geglu" in layer
    assert "embed_scale" in ops(g, "embedding") and "logit_softcap" in ops(g, "head")
    mav = decode(load_model("llama-4-maverick"), 1, 100)
    assert names(mav) == {"layers (dense, chunked 8192)": 24, "layers (moe, chunked 8192)": 12,
                          "layers (moe, full, nope)": 12}
    nope, local = ops(mav, "layers (moe, full, nope)"), ops(mav, "layers (moe, chunked 8192)")
    assert "rope" not in nope and "attn_temperature" in nope and "shared_down_proj" in nope
    assert "rope" in local and "attn_temperature" not in local
    assert "qk_norm" in ops(decode(load_model("llama-4-scout"), 1, 100),
                            "layers (moe, chunked 8192)")
    assert "qk_norm" in ops(decode(load_model("qwen3-8b"), 1, 100), "layers")
    oss = ops(decode(load_model("gpt-oss-20b"), 1, 100), "layers (moe, sliding 128)")
    assert "experts_swiglu_clamped" in oss and "qk_norm" not in oss


def test_softcapping_adds_three_ops_per_score_and_logit():
    m = load_model("gemma-2-9b")
    plain = replace(m, attn_logit_softcap=None, final_logit_softcap=None)
    B, S = 2, 6000
    keys = [math.ceil(k.mean()) for k in spans(m, np.arange(1, S + 1))]
    scores = B * m.heads * S * sum(keys)
    for mode in ("fused", "unfused"):
        a, b = prefill(m, B, S, attention=mode), prefill(plain, B, S, attention=mode)
        assert a.vector_ops - b.vector_ops == pytest.approx(3 * (scores + B * m.vocab_size),
                                                            rel=1e-12)
        assert a.flops() == b.flops()


def test_attention_sinks_add_one_logit_column_per_row():
    m = load_model("gpt-oss-20b")
    B, S = 2, 700
    a, b = prefill(m, B, S), prefill(replace(m, attention_sinks=False), B, S)
    # softmax: 5 ALU ops per element, one extra element per query row and head in every layer
    assert a.vector_ops - b.vector_ops == pytest.approx(5 * m.layers * B * m.heads * S,
                                                        rel=1e-12)


@pytest.mark.parametrize("name", NEW)
def test_training_is_three_times_forward(name):
    m = load_model(name)
    w = train_step(m, 2, 1023)
    assert w.flops(recompute=False) == pytest.approx(3 * w.flops(("forward",)), rel=1e-12)
    u = train_step(m, 2, 1023, attention="unfused")
    assert u.flops() == pytest.approx(3 * w.flops(("forward",)), rel=1e-12)


def test_training_keeps_whole_sequence_kv_for_windowed_layers():
    # unfused lowering models K/V over each kind's mean keys and memory rescales them to the
    # stored sequence per block; fused keeps K, V (whole sequence) and the softmax statistics:
    # the two differ by exactly the statistics, 2 FP32 values per query row and head per layer
    m, B, S = load_model("gemma-2-9b"), 1, 8192
    p = Precision()
    fused, _ = activation_bytes(train_step(m, B, S), m, p)
    unfused, _ = activation_bytes(train_step(m, B, S, attention="unfused"), m, p)
    assert fused - unfused == pytest.approx(m.layers * 2 * 4 * B * m.heads * S, rel=1e-9)


@pytest.mark.parametrize("name,tp,prompt,gen", [("gemma-2-9b", 1, 8000, 192),
                                                ("llama-4-scout", 8, 19_000, 1000),
                                                ("gpt-oss-20b", 2, 3000, 100)])
def test_kv_cache_memory_per_layer_kind(name, tp, prompt, gen):
    m = load_model(name)
    B, ctx = 4, prompt + gen
    held = sum(int(min(ctx, s.window) if s.window else ctx) for s in m.layer_specs())
    per_layer = 2 * max(1, m.kv_heads // tp) * m.head_dim * 2            # bf16 K and V
    r = run_workload("train-2026", m,
                     Scenario.of(phase="decode", batch=B, prompt=prompt, gen=gen, tp=tp,
                                 act_dtype="bf16"),
                     simulate=roofline)
    assert r.memory_breakdown["kv_cache"] == B * held * per_layer


def test_kv_bytes_by_layer_kind():
    per_layer = 2 * 8 * 256 * 2                       # gemma-2-9b: K and V, 8 heads of 256, bf16
    assert kv_bytes_by_layer_kind(load_model("gemma-2-9b"), "bf16") == [
        {"attention": "sliding 4096", "layers": 21, "bytes_per_token_per_layer": per_layer,
         "window": 4096},
        {"attention": "full", "layers": 21, "bytes_per_token_per_layer": per_layer,
         "window": None}]
    # Llama 4 at tp=8: one KV head per rank; the chunk bounds what a chunked layer holds
    kinds = kv_bytes_by_layer_kind(load_model("llama-4-maverick"), "fp8", tp=8)
    assert [(k["attention"], k["layers"], k["window"]) for k in kinds] == [
        ("chunked 8192", 36, 8192), ("full", 12, None)]
    assert {k["bytes_per_token_per_layer"] for k in kinds} == {2 * 1 * 128 * 1}


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("phase,kw", [("prefill", dict(batch=1, prompt=2048)),
                                      ("decode", dict(batch=8, prompt=2048, gen=64)),
                                      ("train", dict(batch=4, seq=2048))])
def test_runs_on_a_chip(name, phase, kw):
    m = load_model(name)
    tp = 8 if m.is_moe and m.experts >= 128 else 1
    # the summed run's block rule (execution="sum"): without overlap the step is the sum of its
    # ops; with TP, overlap hides collectives behind compute: never below the compute, never
    # above the serial sum (the schedule's own bounds: tests/workloads/test_execute.py)
    r = run_workload("train-2026", m, Scenario.of(phase=phase, tp=tp, execution="sum", **kw),
                     simulate=roofline)
    assert r.seconds > 0 and r.tokens_per_s > 0 and r.energy_j > 0
    serial = r if tp == 1 else run_workload("train-2026", m,
                                            Scenario.of(phase=phase, tp=tp, overlap=False,
                                                        execution="sum", **kw),
                                            simulate=roofline)
    assert serial.seconds == pytest.approx(sum(x["total_seconds"] for x in serial.layers),
                                           rel=1e-9)
    compute = sum(x["total_seconds"] for x in r.layers if x["bound"] != "communication")
    assert compute * (1 - 1e-9) <= r.seconds <= serial.seconds * (1 + 1e-9)
    if tp > 1:
        assert compute < serial.seconds          # there was communication to hide
    assert set(r.info["keys_per_query_by_block"]) == {
        b for b in {x["block"] for x in r.layers} if b.startswith("layers")
        and not b.endswith((".bwd", ".recompute"))}


@pytest.mark.parametrize("name", ["gpt-oss-20b", "llama-4-maverick"])
def test_tensor_parallel_splits_flops(name):
    m, tp = load_model(name), 8
    w1, w8 = prefill(m, 2, 255), prefill(m, 2, 255, tp=tp)
    router = sum(b.repeat * o.flops for b, o in w8.items() if o.name == "router")
    assert w8.flops() * tp - (tp - 1) * router == pytest.approx(w1.flops(), rel=1e-9)


def test_engine_runs_a_new_family():
    # the real engine on the new vector kinds (clamped SwiGLU, soft-capping) and fused sinks
    chip = load_chip("train-2026")
    for name in ("gpt-oss-20b", "gemma-2-9b"):
        r = run_workload(chip, name, Scenario.of(phase="decode", batch=2, prompt=512, gen=4))
        assert r.seconds > 0 and r.bound == "memory"
        # (a GEMM with its epilogue fused into it is a "fused" record)
        gemms = sum(x["flops"] * x["repeat"] for x in r.layers
                    if x["kind"] in ("gemm", "fused"))
        assert gemms > 0


@given(q=st.integers(1, 3000), past=st.integers(0, 20000), chunk=st.integers(1, 4096))
@settings(max_examples=150, deadline=None)
def test_chunked_mean_keys_brute_force(q, past, chunk):
    pos = np.arange(past + 1, past + q + 1)
    assert chunked_mean_keys(q, past, chunk) == pytest.approx(((pos - 1) % chunk + 1).mean(),
                                                              rel=1e-12)


def test_decode_gemm_operands_are_the_windowed_cache():
    # unfused decode: the scores' B operand of a sliding layer is its window of the cache
    m = load_model("gemma-3-27b")
    w = decode(m, 2, 5000, attention="unfused")
    ns = {b.name: o.n for b, o in w.items() if isinstance(o, Gemm) and o.name == "attn_scores"}
    assert ns == {"layers (sliding 1024)": 1024, "layers (full)": 5000}
