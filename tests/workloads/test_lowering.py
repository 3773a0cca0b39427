"""Lowering: FLOP totals against closed forms, bytes read per decode step, MoE, TP, training."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.workloads.ops import Collective, Gemm, VectorOp
from diptych.workloads import (Precision, causal_mean_keys, check_tp, decode, decode_context,
                               expected_experts_touched, expert_load, load_model, prefill,
                               train_step)
from diptych.workloads.params import (attention_flops_per_token, kv_bytes_per_token,
                                      matmul_param_count)

MODELS = ["llama-3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b"]


def _head_params(m) -> float:
    return m.vocab_size * m.hidden_size


@pytest.mark.parametrize("name", MODELS)
def test_prefill_flops_closed_form(name):
    m = load_model(name)
    B, S = 2, 511                      # odd S: the causal mean (S+1)/2 is an integer
    w = prefill(m, B, S)
    T = B * S
    # 2·P·tokens for every matmul but the head (last position only) + causal attention
    expect = (2 * (matmul_param_count(m) - _head_params(m)) * T + 2 * _head_params(m) * B
              + attention_flops_per_token(m, (S + 1) / 2) * T)
    assert w.flops() == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("name", ["llama-3-8b", "mixtral-8x7b", "gpt3-175b"])
def test_decode_flops_closed_form(name):
    m = load_model(name)
    B, ctx = 3, 1000
    w = decode(m, B, ctx)
    assert w.flops() == pytest.approx(B * (2 * matmul_param_count(m)
                                           + attention_flops_per_token(m, ctx)), rel=1e-12)


def _sum(w, pred, attr):
    return sum(b.repeat * getattr(o, attr) for b, o in w.items() if pred(o))


def test_decode_reads_all_weights_and_whole_kv_cache():
    m = load_model("llama-3-70b")
    B, ctx = 4, 2048
    p = Precision(weights="fp8", activations="bf16", kv="fp8")
    w = decode(m, B, ctx, precision=p, attention="unfused")    # K, V as GEMM operands
    weights = _sum(w, lambda o: isinstance(o, Gemm) and "weight" in o.tags, "b_bytes")
    assert weights == matmul_param_count(m) * 1.0           # every weight read once, fp8
    kv_read = _sum(w, lambda o: isinstance(o, Gemm) and o.name in ("attn_scores", "attn_pv"),
                   "b_bytes")
    assert kv_read == B * ctx * kv_bytes_per_token(m, "fp8")
    kv_written = _sum(w, lambda o: o.name == "kv_write", "write_bytes")
    assert kv_written == B * kv_bytes_per_token(m, "fp8")   # one new entry per sequence


def test_decode_steps_repeat_the_step():
    m = load_model("llama-3-8b")
    one, five = decode(m, 2, 100), decode(m, 2, 100, steps=5)
    assert five.flops() == 5 * one.flops()


def test_decode_context_is_mean_of_steps():
    # steps attend prompt+1 .. prompt+gen keys; mean = prompt + (gen+1)/2
    for prompt, gen in [(2048, 512), (10, 1), (7, 4)]:
        ctxs = np.arange(prompt + 1, prompt + gen + 1)
        assert decode_context(prompt, gen) == int(np.ceil(ctxs.mean()))


def test_mla_decode_reads_latent_cache():
    m = load_model("deepseek-v3")
    B, ctx = 2, 4096
    w = decode(m, B, ctx, attention="unfused")
    scores = _sum(w, lambda o: isinstance(o, Gemm) and o.name == "attn_scores", "b_bytes")
    assert scores == B * ctx * kv_bytes_per_token(m, "bf16")


def test_moe_reads_only_touched_experts():
    m = load_model("mixtral-8x7b")
    f, d = m.moe_intermediate_size, m.hidden_size
    w1 = decode(m, 1, 10)
    w64 = decode(m, 64, 10)
    per_expert = 3 * d * f * 2                      # bf16 gate, up, down
    e1 = _sum(w1, lambda o: isinstance(o, Gemm) and "expert" in o.tags, "b_bytes")
    e64 = _sum(w64, lambda o: isinstance(o, Gemm) and "expert" in o.tags, "b_bytes")
    assert e1 == 2 * per_expert * m.layers         # one token: top-2
    assert e64 == 8 * per_expert * m.layers        # 64 tokens touch all 8


def test_expected_experts_against_monte_carlo():
    rng = np.random.default_rng(0)
    for E, k, T in [(8, 2, 1), (8, 2, 3), (256, 8, 16), (64, 6, 10)]:
        trials = 4000
        counts = [len(set(np.concatenate([rng.choice(E, k, replace=False) for _ in range(T)])))
                  for _ in range(trials)]
        assert expected_experts_touched(E, k, T) == pytest.approx(np.mean(counts), rel=0.02)


@given(E=st.integers(1, 300), k=st.integers(1, 16), T=st.integers(1, 5000))
@settings(max_examples=200, deadline=None)
def test_expert_load_conserves_pairs(E, k, T):
    k = min(k, E)
    groups = expert_load(E, k, T)
    assert sum(n * t for n, t in groups) == T * k
    touched = sum(n for n, _ in groups)
    assert k <= touched <= min(E, T * k)
    assert max(t for _, t in groups) - min(t for _, t in groups) <= 1


@given(q=st.integers(1, 3000), past=st.integers(0, 3000), w=st.one_of(st.none(),
                                                                     st.integers(1, 4000)))
@settings(max_examples=200, deadline=None)
def test_causal_mean_keys_brute_force(q, past, w):
    keys = np.arange(past + 1, past + q + 1)
    if w is not None:
        keys = np.minimum(keys, w)
    assert causal_mean_keys(q, past, w) == pytest.approx(keys.mean(), rel=1e-12)


@pytest.mark.parametrize("name", ["llama-3-70b", "gpt3-175b", "mixtral-8x7b"])
def test_tensor_parallel_splits_flops_and_adds_two_all_reduces(name):
    m = load_model(name)
    tp = 8
    w1, w8 = prefill(m, 2, 255), prefill(m, 2, 255, tp=tp)
    # the MoE router is replicated on every rank; the rest splits exactly, but for the
    # vocab-parallel head, padded to a multiple of tp (GPT-3's 50257)
    router = sum(b.repeat * o.flops for b, o in w8.items() if o.name == "router")
    assert w8.flops() * tp - (tp - 1) * router == pytest.approx(w1.flops(), rel=1e-8)
    per_layer = [o for b, o in w8.items() if isinstance(o, Collective) and b.name.startswith("layers")]
    assert [o.name for o in per_layer] == ["attn_all_reduce", "mlp_all_reduce"]
    assert all(o.bytes == 2 * 255 * m.hidden_size * 2 and o.group == tp for o in per_layer)


def test_check_tp_rejects_uneven_splits():
    m = load_model("llama-3-8b")
    with pytest.raises(ValueError, match=r"tp=3 cannot split llama-3-8b: .*attention heads \(32\)"):
        check_tp(m, 3)
    check_tp(m, 16)       # 16 > 8 KV heads: KV heads replicated, allowed


@pytest.mark.parametrize("name", MODELS)
def test_training_is_three_times_forward(name):
    m = load_model(name)
    w = train_step(m, 2, 255)
    fwd = w.flops(("forward",))
    # model FLOPs; fused attention backward's recomputed scores are hardware FLOPs only
    assert w.flops(recompute=False) == pytest.approx(3 * fwd, rel=1e-12)
    assert train_step(m, 2, 255, attention="unfused").flops() == pytest.approx(3 * fwd,
                                                                               rel=1e-12)
    # forward ≈ 2·P·tokens plus the attention terms (LM head on every token in training)
    T = 2 * 255
    assert fwd == pytest.approx(2 * matmul_param_count(m) * T
                                + attention_flops_per_token(m, 128) * T, rel=1e-12)


def test_recompute_adds_one_forward_of_the_layers():
    m = load_model("llama-3-8b")
    a, b = train_step(m, 2, 255), train_step(m, 2, 255, recompute=True)
    head = 2 * m.vocab_size * m.hidden_size * 2 * 255
    assert b.flops() - a.flops() == pytest.approx(a.flops(("forward",)) - head, rel=1e-12)


def test_training_has_dgrad_and_wgrad_for_every_linear():
    m = load_model("llama-3-8b")
    w = train_step(m, 1, 64, attention="unfused")
    fwd = {o.name for b, o in w.items() if b.stage == "forward" and isinstance(o, Gemm)
           and "weight" in o.tags}
    bwd = {o.name for b, o in w.items() if b.stage == "backward"}
    for n in fwd:
        assert f"{n}.dgrad" in bwd and f"{n}.wgrad" in bwd
    assert {"attn_scores.dgrad", "attn_scores.dgrad_b", "attn_pv.dgrad",
            "attn_pv.dgrad_b"} <= bwd


def test_optimizer_and_gradient_all_reduce():
    m = load_model("llama-3-8b")
    w = train_step(m, 8, 64, dp=4)
    opt = [(b.repeat, o) for b, o in w.items() if b.stage == "optimizer"]
    (_, ar), *rest = opt
    n = 8_030_261_248
    assert isinstance(ar, Collective) and ar.group == 4 and ar.bytes == n * 2
    assert all(isinstance(o, VectorOp) for _, o in rest)
    adam = [(r, o) for r, o in rest if o.kind == "optimizer"]
    norm = [(r, o) for r, o in rest if "grad_norm" in o.tags]
    zero = [(r, o) for r, o in rest if "grad_zero" in o.tags]
    assert len(adam) + len(norm) + len(zero) == len(rest)
    for part in (adam, norm, zero):
        assert sum(r * o.elements for r, o in part) == n      # every parameter once
    # reads grad (2) + master (4) + two moments (8); writes master, moments and bf16 weight
    assert sum(r * o.read_bytes for r, o in adam) == n * 14
    assert sum(r * o.write_bytes for r, o in adam) == n * 14
    # clipping's norm reads each BF16 gradient once; the buffer is zeroed once (writes)
    assert (sum(r * o.read_bytes for r, o in norm), sum(r * o.write_bytes for r, o in norm)) \
        == (n * 2, 0)
    assert (sum(r * o.read_bytes for r, o in zero), sum(r * o.write_bytes for r, o in zero)) \
        == (0, n * 2)
    # in the step's order: the norm before the update, the zeroing after it
    order = [o.name for _, o in rest]
    assert order.index("grad_norm") < order.index("adamw") < order.index("grad_zero")
    assert w.batch == 2
    with pytest.raises(ValueError, match=r"batch \(6\) must be divisible by dp \(4\)"):
        train_step(m, 6, 64, dp=4)


@pytest.mark.parametrize("bad", [0, -1])
def test_bad_lengths(bad):
    m = load_model("llama-3-8b")
    with pytest.raises(ValueError, match=f"batch must be a positive integer, not {bad}"):
        prefill(m, bad, 10)
    with pytest.raises(ValueError, match=f"prompt_len must be a positive integer, not {bad}"):
        prefill(m, 1, bad)
    with pytest.raises(ValueError, match=f"seq_len must be a positive integer, not {bad}"):
        train_step(m, 1, bad)


def test_sliding_window_caps_decode_keys():
    from diptych.workloads import model_from_hf
    m = model_from_hf({"architectures": ["MistralForCausalLM"], "hidden_size": 4096,
                       "intermediate_size": 14336, "num_attention_heads": 32,
                       "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000,
                       "max_position_embeddings": 32768, "sliding_window": 4096}, name="m")
    assert decode(m, 1, 10000).info["keys_per_query"] == 4096


def test_micro_batches_reread_weights_but_keep_flops():
    m = load_model("llama-3-8b")
    whole = train_step(m, 8, 256, micro_batch=8)
    micro = train_step(m, 8, 256, micro_batch=2)
    assert micro.flops() == pytest.approx(whole.flops(), rel=1e-12)
    wread = lambda w: _sum(w, lambda o: isinstance(o, Gemm) and "weight" in o.tags  # noqa: E731
                           and not o.name.endswith("wgrad"), "b_bytes")
    assert wread(micro) == pytest.approx(4 * wread(whole), rel=1e-12)
    assert micro.info["micro_batches"] == 4
    with pytest.raises(ValueError, match="micro_batch must be a positive integer dividing"):
        train_step(m, 8, 256, micro_batch=3)
