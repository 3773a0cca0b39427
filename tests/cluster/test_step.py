"""The cluster step on a roofline double of the engine: against ``run_workload`` where both
apply, against hand counts for EP and CP, and its invariants."""

from __future__ import annotations

import dataclasses
import math

import pytest
from roofline_double import roofline

from diptych.workloads.moe import Routing, rank_load_factor
from diptych.arch import load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.sim.run import Scenario, run_workload
from diptych.workloads import load_model


def step(model, plan, **kw):
    kw.setdefault("batch", plan.dp * plan.micro_batch * 4)
    kw.setdefault("seq", 2048)
    kw.setdefault("phase", "train")
    return simulate_cluster_step(model, kw.pop("chip", "h100"), kw.pop("cluster", "dgx-h100"),
                                 plan, Scenario.of(**kw), simulate=roofline)


@pytest.mark.parametrize("tp,sp", [(1, None), (8, None), (8, False)])
def test_one_node_matches_run_workload(tp, sp):
    # inside one NVSwitch node the cluster's ring all-reduce is run_workload's (18 links x
    # 25 GB/s, 1 us per step), the layers are the same ops and 1F1B over one stage is
    # gradient accumulation: the step times agree with the summed run (execution="sum"),
    # whose per-layer times the cluster step composes over its pipeline; both run sequence
    # parallelism by default at TP > 1 (sp None), and neither with it off
    r = step("llama-3-8b", Plan(tp=tp, micro_batch=2, sequence_parallel=sp is not False),
             batch=8, execution="sum")
    w = run_workload("h100", "llama-3-8b",
                     Scenario.of(phase="train", batch=8, seq=2048, tp=tp, micro_batch=2,
                                 execution="sum", sequence_parallel=sp),
                     simulate=roofline)
    assert w.info["stack"]["sequence_parallel"] is (tp > 1 and sp is not False)
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
    # tokens x top-k x hidden activations per rank (the busiest rank's: a balanced router's
    # sampling excess, tests/workloads/test_moe_routing.py), and combines them back
    m = load_model("mixtral-8x7b")
    r = step(m, Plan(dp=8, ep=8), batch=8, seq=4096)
    a2a = r.comm["ep all-to-all dispatch"]
    busiest = round(4096 * 2 * rank_load_factor(Routing(), 8, 2, 4096, 8))
    assert a2a["bytes"] == pytest.approx(busiest * 4096 * 2)
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
    # DeepSeek-V3 (MLA, 256 routed experts top-8, d = 7168), 32 sequences per replica in
    # micro-batches of one, BF16
    plan = Plan(tp=8, pp=2, dp=8, ep=8)
    r = simulate_cluster_step("deepseek-v3", "h100", "dgx-h100", plan,
                              Scenario.of(phase="decode", batch=256, prompt=4096, gen=256),
                              simulate=roofline)
    assert r.phase == "decode" and r.seconds > 0
    assert r.tokens_per_s == pytest.approx(256 / r.seconds)
    # MLA caches the latent (kv_lora_rank 512) and the rope key (64) per token and layer,
    # the same on every TP rank; 61 layers over 2 stages: 31 on the first, 30 on the last
    layers = (31, 30)[r.memory.worst_stage]
    want = 32 * (4096 + 256) * (512 + 64) * 2 * layers
    assert r.memory.breakdown["kv_cache"] == pytest.approx(want)
    # each micro-batch's MoE layer dispatches T x top-k x d activations per rank, / tp:
    # T = 1 token, k = 8, d = 7168, 2 bytes; the busiest of 8 ranks receives ~1.5x the mean
    # pairs of a balanced router at one token per rank
    a2a = r.comm["ep all-to-all dispatch"]
    assert a2a["kind"] == "all_to_all" and a2a["group"] == 8
    busiest = round(1 * 8 * rank_load_factor(Routing(), 256, 8, 1, 8))
    assert 1.3 * 8 < busiest < 1.7 * 8
    assert a2a["bytes"] == pytest.approx(busiest * 7168 * 2 / 8)
    assert r.comm["ep all-to-all combine"]["bytes"] == a2a["bytes"]


def test_bad_input():
    with pytest.raises(ValueError, match=r"chips \(32768\) exceeds the cluster's 16384 chips"):
        step("llama-3-8b", Plan(tp=8, dp=4096))
    with pytest.raises(ValueError, match="phase must be one of prefill, decode, train"):
        step("llama-3-8b", Plan(), phase="serve")
    with pytest.raises(ValueError, match=r"chip 'tpu-v4' cannot compute weights x activations "
                                         r"in fp8"):
        simulate_cluster_step("llama-3-8b", "tpu-v4", "tpu-v4-pod", Plan(),
                              Scenario.of(phase="train", batch=4, seq=2048, act_dtype="fp8"),
                              simulate=roofline)
    with pytest.raises(ValueError, match=r"does not fit the SRAM of chip 'groq-lpu'"):
        step("llama-3-8b", Plan(tp=8), chip="groq-lpu")
    for kw, name in ((dict(batch=0), "batch"), (dict(seq=-1), "seq")):
        with pytest.raises(ValueError, match=rf"^{name} must be a positive integer, not "):
            step("llama-3-8b", Plan(), **kw)
    for kw, name in ((dict(prompt=0), "prompt"), (dict(prompt=64, gen=0), "gen")):
        with pytest.raises(ValueError, match=rf"^{name} must be a positive integer, not 0"):
            simulate_cluster_step("llama-3-8b", "h100", "dgx-h100", Plan(),
                                  Scenario.of(batch=1, phase="decode", **kw), simulate=roofline)


def test_hybrid_sharding_reduces_expert_shards_between_replicas():
    # Mixtral on 16 chips: ZeRO-1 shards over groups of 8 ranks and replicates across the 2
    # groups; EP 8 leaves each rank one whole expert (expert shard group of 8 / 8 = 1), so
    # the replica all-reduce carries the dense part / 8 and the rank's expert whole
    d, f = 4096, 14336
    dense = 2 * d * d + 2 * d * 1024 + 2 * d + 8 * d      # q, o; k, v (8 KV heads); norms; router
    expert = 3 * d * f
    r = step("mixtral-8x7b", Plan(dp=16, ep=8, zero=1, zero_shards=8), batch=16, seq=512)
    rep = r.comm["dp grad replica all_reduce layers (moe)"]
    assert rep["group"] == 2
    assert rep["bytes"] == pytest.approx((dense / 8 + expert) * 2)
    z3 = step("mixtral-8x7b", Plan(dp=16, ep=8, zero=3, zero_shards=8), batch=16, seq=512)
    assert z3.comm["zero3 replica all-reduce layers (moe)"]["bytes"] == pytest.approx(
        (dense / 8 + expert) * 2)


def test_prefill_tensor_parallel_all_reduce_is_not_hidden():
    # in prefill each layer's all-reduce feeds the next GEMM: by default it adds to the
    # layer's time (run_workload with overlap off); overlap_tp=True hides it as
    # run_workload's overlap does (the summed run's rules, execution="sum")
    kw = dict(phase="prefill", batch=4, prompt=2048)
    r = simulate_cluster_step("llama-3-8b", "h100", "dgx-h100", Plan(tp=8, micro_batch=4),
                              Scenario.of(execution="sum", **kw), simulate=roofline)
    serial = run_workload("h100", "llama-3-8b",
                          Scenario.of(tp=8, overlap=False, execution="sum", **kw),
                          simulate=roofline)
    assert r.seconds == pytest.approx(serial.seconds, rel=1e-6)
    hidden = simulate_cluster_step("llama-3-8b", "h100", "dgx-h100",
                                   Plan(tp=8, micro_batch=4, overlap_tp=True),
                                   Scenario.of(execution="sum", **kw), simulate=roofline)
    overlapped = run_workload("h100", "llama-3-8b", Scenario.of(tp=8, execution="sum", **kw),
                              simulate=roofline)
    assert hidden.seconds == pytest.approx(overlapped.seconds, rel=1e-6)
    assert hidden.seconds < r.seconds


def test_decode_exposes_every_tensor_parallel_collective():
    # Llama-3-8B decode on TP8: per step 32 layers x (attention + MLP all-reduce), the
    # vocab-parallel embedding's all-reduce and the logits' all-gather, all exposed (small
    # all-reduces take the tree algorithm, unlike run_workload's ring, so the hand count
    # uses the collectives' own times)
    # (the summed composition, execution="sum": its overlap rule)
    kw = dict(phase="decode", batch=4, prompt=2048, gen=64, execution="sum")
    r = simulate_cluster_step("llama-3-8b", "h100", "dgx-h100", Plan(tp=8, micro_batch=4),
                              Scenario.of(**kw), simulate=roofline)
    c = {k: v["seconds"] for k, v in r.comm.items()}
    want = (32 * (c["tp attn_all_reduce"] + c["tp mlp_all_reduce"])
            + c["tp embed_all_reduce"] + c["tp logits_all_gather"])
    assert r.exposed_comm_s["tp"] == pytest.approx(want, rel=1e-9)
    hidden = simulate_cluster_step("llama-3-8b", "h100", "dgx-h100",
                                   Plan(tp=8, micro_batch=4, overlap_tp=True),
                                   Scenario.of(**kw), simulate=roofline)
    assert hidden.exposed_comm_s["tp"] < want / 2
    assert r.seconds - hidden.seconds == pytest.approx(want - hidden.exposed_comm_s["tp"])


def test_decode_attends_each_layer_kinds_mean_keys_over_the_steps():
    # Llama 4 Scout: 36 chunked layers (8192-token chunks) and 12 global ones; prompt 4096,
    # 8192 generated tokens. Brute force over the steps: step i attends position
    # 4096 + i + 1, whose chunk holds ((p - 1) mod 8192) + 1 keys (4096.5 on average; the
    # mean context 8193 would give 1 key), a global layer p keys.
    from diptych.sim.cluster.layers import layer_ops
    from diptych.sim.run.node import default_precision
    m = load_model("llama-4-scout")
    prompt, gen, chunk = 4096, 8192, 8192
    positions = range(prompt + 1, prompt + gen + 1)
    want = {"chunked": math.ceil(sum((q - 1) % chunk + 1 for q in positions) / gen),
            "full": math.ceil(sum(positions) / gen)}
    assert want["chunked"] == 4097
    p = default_precision(load_chip("h100"), "decode")
    lo = layer_ops(m, p, phase="decode", tp=8, cp=1, ep=1, micro_batch=1, seq=1,
                   context=prompt, gen=gen, attention="unfused")
    for kind, ops in lo.items():
        if kind in ("embedding", "head"):
            continue
        scores = next(o for o in ops.forward if getattr(o, "name", "") == "attn_scores")
        assert scores.n == want["chunked" if "chunked" in kind else "full"], kind
    r = simulate_cluster_step(m, "h100", "dgx-h100", Plan(tp=8),
                              Scenario.of(phase="decode", batch=1, prompt=prompt, gen=gen),
                              simulate=roofline)
    assert r.info["decode"]["keys_per_query_by_block"] == {
        "layers (moe, chunked 8192)": want["chunked"], "layers (moe, full, nope)": want["full"]}


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
    pre = simulate_cluster_step(m, "h100", "dgx-h100", Plan(tp=8),
                                Scenario.of(phase="prefill", batch=4, prompt=4096),
                                simulate=roofline)
    assert pre.memory.breakdown["kv_cache"] == pytest.approx(4 * 4096 * per_token)
    dec = simulate_cluster_step(m, "h100", "dgx-h100", Plan(tp=8, pp=2),
                                Scenario.of(phase="decode", batch=4, prompt=4096, gen=512),
                                simulate=roofline)
    assert dec.memory.breakdown["kv_cache"] == pytest.approx(4 * 4608 * per_token / 2)


def test_optimizer_time_is_norm_update_and_buffer_zeroing_at_memory_rate():
    # ZeRO-1 over dp × cp = 8 ranks: each rank's shard (n / 8) is read for the clipping norm
    # (2 B per BF16 gradient) and updated by AdamW (reads 14, writes 14 B, 14 ops), and its
    # whole gradient buffer (n parameters, 2 B each) is zeroed for the next step; the
    # roofline double: max(ops / vector rate, bytes / DRAM rate) per parameter
    from diptych.arch import load_chip
    from diptych.workloads.params import params_per_chip
    r = step("llama-3-8b", Plan(dp=4, cp=2, zero=1), batch=8)
    c = load_chip("h100")
    n = params_per_chip(load_model("llama-3-8b"), 1)
    bw, vec = c.dram_bytes_per_s, c.vector_ops_per_s
    adam, norm, zero = max(14 / vec, 28 / bw), max(2 / vec, 2 / bw), 2 / bw
    assert r.stage_seconds[0]["optimizer_s"] == pytest.approx(
        n / 8 * (adam + norm) + n * zero, rel=1e-9)
