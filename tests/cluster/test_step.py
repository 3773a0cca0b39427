"""The cluster step on a roofline double of the engine: against ``run_workload`` where both
apply, against hand counts for EP and CP, and its invariants."""

from __future__ import annotations

import dataclasses

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.workloads import load_model, run_workload


def step(model, plan, **kw):
    kw.setdefault("batch", plan.dp * plan.micro_batch * 4)
    kw.setdefault("seq", 2048)
    return simulate_cluster_step(model, kw.pop("chip", "h100"), kw.pop("cluster", "dgx-h100"),
                                 plan, simulate=roofline, **kw)


@pytest.mark.parametrize("tp", [1, 8])
def test_one_node_matches_run_workload(tp):
    # inside one NVSwitch node the cluster's ring all-reduce is run_workload's (18 links x
    # 25 GB/s, 1 us per step), the layers are the same ops and 1F1B over one stage is
    # gradient accumulation: the step times agree
    r = step("llama-3-8b", Plan(tp=tp, micro_batch=2), batch=8)
    w = run_workload("h100", "llama-3-8b", phase="train", batch=8, seq=2048, tp=tp,
                     micro_batch=2, simulate=roofline)
    assert r.seconds == pytest.approx(w.seconds, rel=1e-6)
    assert r.flops == pytest.approx(w.flops, rel=1e-9)
    assert r.mfu == pytest.approx(w.mfu, rel=1e-6)
    assert r.hfu == pytest.approx(w.hfu, rel=1e-6)


def test_result_fields():
    r = step("llama-3-8b", Plan(tp=2, pp=2, dp=4, zero=1))
    d = r.to_dict()
    for k in ("tp", "pp", "dp", "ep", "cp", "zero", "schedule", "micro_batch", "seconds",
              "mfu", "hfu", "bubble_fraction", "exposed_comm_s", "memory_bytes_per_chip",
              "fits", "tokens_per_s"):
        assert k in d
    assert set(d["exposed_comm_s"]) == {"tp", "cp", "ep", "pp", "dp"}
    assert all(v >= 0 for v in d["exposed_comm_s"].values())
    assert 0 < r.mfu <= r.hfu <= 1
    assert 0 < r.bubble_fraction < 1
    assert r.tokens_per_s == pytest.approx(r.batch * 2048 / r.seconds)


def test_more_network_bandwidth_is_never_slower():
    plan = Plan(tp=8, pp=2, dp=4, zero=1)
    base = step("llama-3-8b", plan)
    c = load_cluster("dgx-h100")
    fast = dataclasses.replace(c, scale_out=dataclasses.replace(
        c.scale_out, nic_gb_per_s_per_direction=400.0))
    assert step("llama-3-8b", plan, cluster=fast).seconds <= base.seconds


def test_full_recompute_costs_one_forward():
    plan = Plan(tp=8, pp=2, dp=4)
    none = step("llama-3-8b", plan)
    full = step("llama-3-8b", dataclasses.replace(plan, recompute="full"))
    assert full.seconds > none.seconds
    assert full.flops == none.flops
    # hardware FLOPs: forward + backward (2x) + recomputed forward, over the layers
    assert full.hardware_flops / none.hardware_flops == pytest.approx(4 / 3, rel=0.02)


def test_expert_all_to_all_bytes():
    # Mixtral, EP 8 over 8 data-parallel ranks of a node (tp 1): each MoE layer dispatches
    # tokens x top-k x hidden activations per rank, and combines them back
    m = load_model("mixtral-8x7b")
    r = step(m, Plan(dp=8, ep=8), batch=8, seq=4096)
    a2a = r.comm["ep all-to-all dispatch"]
    assert a2a["bytes"] == pytest.approx(4096 * 2 * 4096 * 2)
    assert a2a["kind"] == "all_to_all" and a2a["group"] == 8
    assert r.exposed_comm_s["ep"] > 0                  # not overlapped by default
    moe = next(v for k, v in r.layers.items() if "moe" in k)
    assert [c[2] for c in moe.colls_fwd if c[0] == "ep"] == ["all_to_all"] * 2


def test_context_parallel_splits_attention_evenly():
    # ring attention with load balancing: each of cp ranks attends its seq/cp queries over
    # the causal mean of the whole sequence, so the ranks together do cp=1's attention FLOPs
    m = load_model("llama-3-8b")
    one = step(m, Plan(tp=8, dp=2), batch=4, seq=16384)
    two = step(m, Plan(tp=8, dp=1, cp=2), batch=4, seq=16384)
    assert two.flops == one.flops
    assert two.hardware_flops == pytest.approx(one.hardware_flops, rel=1e-3)
    cpag = two.comm["cp kv all-gather"]
    kv_chunk = 8192 * 2 * (8 // 8) * 128 * 2            # K and V of 8192 tokens, 1 KV head
    assert cpag["bytes"] == pytest.approx(2 * kv_chunk)


def test_zero3_gathers_each_layer():
    m = load_model("llama-3-8b")
    r = step(m, Plan(tp=8, dp=4, zero=3))
    from diptych.sim.cluster.params import layer_params
    assert r.comm["zero3 all-gather layers"]["bytes"] == pytest.approx(
        layer_params(m, 8).dense * 2)
    assert "dp grad reduce_scatter layers" not in r.comm
    z1 = step(m, Plan(tp=8, dp=4, zero=1))
    assert "dp grad reduce_scatter layers" in z1.comm
    assert r.memory_bytes_per_chip < z1.memory_bytes_per_chip


def test_decode_with_expert_parallelism():
    r = simulate_cluster_step("deepseek-v3", "h100", "dgx-h100", Plan(tp=8, pp=2, dp=8, ep=8),
                              phase="decode", batch=256, prompt=4096, gen=256,
                              simulate=roofline)
    assert r.phase == "decode" and r.seconds > 0
    assert r.memory.breakdown["kv_cache"] > 0
    assert "ep all-to-all dispatch" in r.comm
    assert r.tokens_per_s == pytest.approx(256 / r.seconds)


def test_bad_input():
    with pytest.raises(ValueError, match=r"chips \(32768\) exceeds the cluster's 16384 chips"):
        step("llama-3-8b", Plan(tp=8, dp=4096))
    with pytest.raises(ValueError, match="phase must be train, prefill or decode"):
        step("llama-3-8b", Plan(), phase="serve")
    with pytest.raises(ValueError, match="cannot compute in"):
        simulate_cluster_step("llama-3-8b", load_chip("tpu-v1"), "dgx-h100", Plan(),
                              batch=4, seq=2048, act_dtype="fp16", simulate=roofline)


def test_hybrid_sharding_all_reduces_between_replicas():
    m = load_model("llama-3-8b")
    r = step(m, Plan(tp=8, dp=4, zero=1, zero_shards=2))
    rep = r.comm["dp grad replica all_reduce layers"]
    assert rep["kind"] == "all_reduce" and rep["group"] == 2
    assert r.comm["dp grad reduce_scatter layers"]["group"] == 2


def test_inference_memory_holds_the_whole_cache():
    # prefill writes the prompt's KV; decode holds prompt + generated tokens at its last step
    m = load_model("llama-3-70b")
    from diptych.workloads.params import kv_bytes_per_token_per_chip
    per_token = kv_bytes_per_token_per_chip(m, "bf16", 8)
    pre = simulate_cluster_step(m, "h100", "dgx-h100", Plan(tp=8), phase="prefill", batch=4,
                                prompt=4096, simulate=roofline)
    assert pre.memory.breakdown["kv_cache"] == pytest.approx(4 * 4096 * per_token)
    dec = simulate_cluster_step(m, "h100", "dgx-h100", Plan(tp=8, pp=2), phase="decode",
                                batch=4, prompt=4096, gen=512, simulate=roofline)
    assert dec.memory.breakdown["kv_cache"] == pytest.approx(4 * 4608 * per_token / 2)
