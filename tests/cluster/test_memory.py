"""Memory per chip of a plan against hand formulas: ZeRO (Rajbhandari et al. 2020, Fig. 1),
activations (Korthikanti et al. 2022) under the pipeline schedules, KV cache, and advice."""

from __future__ import annotations

import pytest

from diptych.sim.cluster import Plan, check_plan, plan_memory, zero_state_bytes
from diptych.sim.cluster.params import layer_params
from diptych.workloads import Precision, load_model, param_count
from diptych.workloads.params import kv_bytes_per_token_per_chip, params_per_chip

P = Precision()
GB = 1e9


@pytest.mark.parametrize("stage,want_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(stage, want_gb):
    # Rajbhandari et al. 2020, Fig. 1: Psi = 7.5B, N_d = 64, K = 12 (mixed-precision Adam)
    got = sum(zero_state_bytes(7.5e9, stage, 64, P).values())
    assert got / GB == pytest.approx(want_gb, abs=0.05)


@pytest.mark.parametrize("name", ["llama-3-8b", "deepseek-v3", "gpt3-175b"])
@pytest.mark.parametrize("tp", [1, 8])
def test_stage_parameters_add_up_to_the_model(name, tp):
    m = load_model(name)
    lp = layer_params(m, tp)
    total = lp.stage(m.dense_layers, m.moe_layers, True, True)[0]
    assert total == pytest.approx(params_per_chip(m, tp), rel=1e-12)
    if tp == 1:
        assert total == pytest.approx(param_count(m), rel=1e-12)


def mem(model, plan, seq=2048, batch=None, phase="train", context=0, cap=80 * 2**30):
    batch = batch or plan.dp * plan.micro_batch * 8
    info = check_plan(plan, model, chips=plan.chips, batch=batch,
                      seq_len=seq if phase != "decode" else 1, phase=phase)
    return plan_memory(model, plan, P, phase=phase, seq=seq if phase != "decode" else 1,
                       micro_batches=info["micro_batches"],
                       layers_per_chunk=info["layers_per_chunk"], capacity_bytes=cap,
                       global_batch=batch, context=context)


def test_training_state_per_zero_stage_on_a_model():
    m = load_model("llama-3-8b")
    psi = param_count(m)
    for z, want in ((0, 16 * psi), (1, 4 * psi + 12 * psi / 8), (2, 2 * psi + 14 * psi / 8),
                    (3, 16 * psi / 8)):
        bd = mem(m, Plan(dp=8, zero=z)).breakdown
        assert bd["weights"] + bd["gradients"] + bd["optimizer_state"] == pytest.approx(want)
    # ZeRO-3 keeps two gathered layers and one layer's gradients
    lp = layer_params(m, 1)
    biggest = max(lp.dense, lp.embedding, lp.head)
    assert mem(m, Plan(dp=8, zero=3)).breakdown["zero_buffers"] == pytest.approx(6 * biggest)


def test_activations_follow_korthikanti_with_sequence_parallelism():
    # per layer, flash-style and without dropout masks: 32·s·b·h/t bytes plus the softmax
    # statistics 8·a·s·b/t; 1F1B's first stage holds p micro-batches, its last one
    m = load_model("gpt3-175b")
    s, b, h, a, t, p = 2048, 1, 12288, 96, 8, 4
    per_layer = (32 * s * b * h + 8 * a * s * b) / t
    r = mem(m, Plan(tp=t, pp=p, dp=1, zero=1))
    first, last = r.per_stage[0], r.per_stage[-1]
    assert r.worst_stage == 0
    acts0 = r.breakdown["activations"]
    assert acts0 == pytest.approx(p * 24 * per_layer, rel=1e-3)
    # without sequence parallelism the norm inputs and column-parallel inputs (8·s·b·h) are
    # kept whole: 8 + 24/t (Korthikanti's 10 + 24/t less the 2·s·b·h of dropout masks)
    nosp = mem(m, Plan(tp=t, pp=p, dp=1, zero=1, sequence_parallel=False))
    want = (8 * s * b * h + 24 * s * b * h / t + 8 * a * s * b / t) * 24 * p
    assert nosp.breakdown["activations"] == pytest.approx(want, rel=1e-3)
    assert first > last
    # GPipe holds all 8 micro-batches on every stage; the last one is the worst: its 24
    # layers and the head's FP32 softmax over its vocabulary shard (4·s·b·v, v = ceil(50257
    # / 8): Megatron's cross-entropy saves it, workloads/loss.py) with the final norm's and
    # the LM head's inputs (2·2·s·b·h/t)
    gp = mem(m, Plan(tp=t, pp=p, dp=1, zero=1, schedule="gpipe"))
    v = 6283
    assert gp.worst_stage == p - 1
    assert gp.breakdown["activations"] == pytest.approx(
        8 * (24 * per_layer + 4 * s * b * v + 4 * s * b * h / t), rel=1e-3)


def test_recomputation_shrinks_activations():
    m = load_model("gpt3-175b")
    s, b, h = 2048, 1, 12288
    none = mem(m, Plan(pp=96, dp=1, zero=3)).breakdown["activations"]
    sel = mem(m, Plan(pp=96, dp=1, zero=3, recompute="selective")).breakdown["activations"]
    full = mem(m, Plan(pp=96, dp=1, zero=3, recompute="full")).breakdown["activations"]
    # stage 0 holds 96 micro-batches... of one layer each (1F1B, p = 96 > m = 8: all 8)
    # selective drops the inputs of qkv (2sbh) and fc1 (2sbh) and gelu's output (8sbh)
    assert none - sel == pytest.approx(8 * 12 * s * b * h, rel=1e-6)
    # full keeps each in-flight layer's input (2sbh) plus one whole layer
    assert full == pytest.approx(8 * 2 * s * b * h + none / 8, rel=1e-3)


def test_kv_cache_for_decode_with_pipeline_stages():
    m = load_model("llama-3-70b")
    r = mem(m, Plan(tp=8, pp=2, dp=1), batch=64, phase="decode", context=4096)
    per_token = kv_bytes_per_token_per_chip(m, "bf16", 8)
    assert r.breakdown["kv_cache"] == pytest.approx(64 * 4096 * per_token / 2)


def test_advice_names_the_cheapest_change_that_fits():
    m = load_model("llama-3-70b")
    r = mem(m, Plan(tp=8, dp=8, zero=0), seq=4096)
    assert not r.fits
    assert "fits with ZeRO stage 1 (--zero 1)" in r.advice
    assert r.suggestion == {"zero": 1}
    # no single change is enough for Llama-3-8B at 4 x 8k tokens per micro-batch on 8 chips
    r = mem(load_model("llama-3-8b"), Plan(dp=8, micro_batch=4), seq=8192)
    assert not r.fits and "no single change fits; together: --zero 2" in r.advice
    fixed = mem(load_model("llama-3-8b"), Plan(dp=8, **r.suggestion), seq=8192,
                batch=8 * 4 * 8)
    assert fixed.fits
    # 70B on 8 chips cannot hold its 16 B/param training state even fully sharded
    r = mem(m, Plan(dp=8, zero=3), seq=8192)
    assert not r.fits and "no change in the advice list fits, alone or together" in r.advice


def test_hybrid_sharding_divides_by_the_shard_group():
    m = load_model("llama-3-8b")
    psi = param_count(m)
    bd = mem(m, Plan(dp=8, zero=1, zero_shards=2)).breakdown
    assert bd["optimizer_state"] == pytest.approx(12 * psi / 2)


@pytest.mark.parametrize("name", ["deepseek-v3", "mixtral-8x7b", "llama-3-8b"])
def test_layers_in_order_add_up_to_the_model(name):
    # every layer index maps to the lowered block of its kind (DeepSeek-V3: 3 dense, 58 MoE)
    from diptych.sim.cluster.layers import layer_ops, layer_order
    m = load_model(name)
    lo = layer_ops(m, P, phase="train", tp=1, cp=1, ep=1, micro_batch=1, seq=1024)
    order = layer_order(m, lo)
    lp = layer_params(m, 1)
    total = sum(lp.of(k, lo[k].moe)[0] for k in order + ["embedding", "head"])
    assert total == pytest.approx(param_count(m), rel=1e-12)
    assert sum(lo[k].moe for k in order) == m.moe_layers


@pytest.mark.parametrize("name,tp", [("gemma-3-27b", 8), ("gpt-oss-120b", 8),
                                     ("llama-4-scout", 8), ("llama-3-70b", 8)])
def test_kv_cache_holds_what_each_layer_kind_caches(name, tp):
    # sliding layers hold their window, chunked ones a chunk, global ones the context:
    # the workloads library's kv_cache_bytes per sequence, times the replica's sequences
    # (Gemma 3: 52 of 62 layers slide over 1024 tokens; gpt-oss: half over 128; Llama 4
    # Scout: 36 of 48 chunked at 8192)
    from diptych.workloads.params import kv_cache_bytes
    m = load_model(name)
    context = 32768
    r = mem(m, Plan(tp=tp, dp=2), batch=16, phase="decode", context=context,
            cap=2**50)
    assert r.breakdown["kv_cache"] == pytest.approx(8 * kv_cache_bytes(m, "bf16", context, tp))


def test_unfused_saved_keys_follow_each_layer_kind():
    # unfused attention keeps K and V of the whole sequence for backward whatever a layer
    # kind's window: the saved bytes are the workloads library's activation_bytes, layer
    # kind by layer kind (gemma-2-9b at 8192 tokens: sliding layers attend 3072 keys on
    # average, global ones 4096.5)
    from diptych.sim.cluster.layers import layer_ops, layer_order
    from diptych.workloads import train_step
    from diptych.workloads.memory import activation_bytes
    m, seq = load_model("gemma-2-9b"), 8192
    lo = layer_ops(m, P, phase="train", tp=1, cp=1, ep=1, micro_batch=1, seq=seq,
                   attention="unfused")
    ours = sum(lo[k].saved_bytes for k in layer_order(m, lo)) + lo["head"].saved_bytes
    w = train_step(m, 1, seq, precision=P, attention="unfused")
    assert ours == pytest.approx(activation_bytes(w, m, P)[0], rel=1e-12)


@pytest.mark.parametrize("name,tp,dp,zero,recompute,sp", [
    ("llama-3-8b", 1, 8, 0, "none", False),
    ("llama-3-8b", 2, 4, 0, "full", False),
    ("gpt3-175b", 8, 2, 0, "none", True),
    ("gpt3-175b", 8, 2, 0, "full", True),
    ("mixtral-8x7b", 2, 2, 0, "none", False),
    ("deepseek-v3", 8, 1, 0, "none", True),
    ("llama-3-8b", 2, 8, 1, "none", True),
    ("llama-3-8b", 1, 8, 2, "none", False),
    ("gemma-3-12b", 4, 4, 3, "full", True),
])
def test_train_memory_agrees_with_plan_memory_on_one_stage(name, tp, dp, zero, recompute, sp):
    # the workloads library's train_memory (one replica's chip, ZeRO over dp shards) and the
    # cluster's plan_memory of the single-stage plan apply the same rules
    from diptych.workloads import train_step
    from diptych.workloads.memory import train_memory
    m, seq, mb = load_model(name), 2048, 1
    # (the one-node lowering under the same sequence parallelism, as run_workload lowers it)
    w = train_step(m, dp * mb * 2, seq, tp=tp, dp=dp, micro_batch=mb,
                   recompute=recompute == "full", sequence_parallel=sp)
    ours = train_memory(m, P, tp, w, 2**50, recompute == "full", zero=zero, shards=dp,
                        sequence_parallel=sp)
    theirs = mem(m, Plan(tp=tp, dp=dp, zero=zero, micro_batch=mb, recompute=recompute,
                         sequence_parallel=sp), seq=seq, batch=dp * mb * 2, cap=2**50)
    assert ours.total_bytes == pytest.approx(theirs.total_bytes, rel=1e-12)
    for k, v in ours.breakdown.items():
        assert v == pytest.approx(theirs.breakdown[k], rel=1e-12, abs=1e-6), k


def test_sequence_parallel_activation_bytes_follow_korthikanti():
    # the workloads library's activation_bytes with sequence parallelism: GPT-3's
    # 32·s·b·h/t + 8·a·s·b/t per layer (flash-style, no dropout masks); without it the norm
    # and column-parallel inputs (8·s·b·h) stay whole: 8·s·b·h + 24·s·b·h/t + 8·a·s·b/t.
    # The head keeps the final norm's and the LM head's input (split by SP) and the logits
    # of its vocabulary shard for the loss in FP32, as Megatron's cross-entropy saves its
    # softmax (ceil(50257 / 8) = 6283 columns, 4 bytes; workloads/loss.py); a saved norm
    # input counts with the norm's gain and bias vectors (2·h), 2 per layer + the final one
    from diptych.workloads import train_step
    from diptych.workloads.memory import activation_bytes
    m = load_model("gpt3-175b")
    s, b, h, a, t, v = 2048, 1, 12288, 96, 8, 6283
    w = train_step(m, b, s, tp=t, micro_batch=b)
    sp, _ = activation_bytes(w, m, P, sequence_parallel=True)
    nosp, _ = activation_bytes(w, m, P)
    gains = (2 * 96 + 1) * 2 * h * 2
    assert sp == pytest.approx(96 * (32 * s * b * h + 8 * a * s * b) / t
                               + (2 * 2 * s * b * h + gains) / t + 4 * s * b * v, rel=1e-9)
    assert nosp == pytest.approx(96 * (8 * s * b * h + (24 * s * b * h + 8 * a * s * b) / t)
                                 + 2 * 2 * s * b * h + gains + 4 * s * b * v, rel=1e-9)
