"""Parallelism plans: field checks, model checks with messages naming field and value, layer
splits, and where ranks sit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import Plan, bind, check_plan, group_ranks, group_shape, split_layers
from diptych.sim.cluster.topology import group_of
from diptych.workloads import load_model

LLAMA = load_model("llama-3.1-405b")
DSV3 = load_model("deepseek-v3")


def test_init_defaults():
    p = Plan()
    assert (p.tp, p.pp, p.dp, p.ep, p.cp, p.zero, p.schedule) == (1, 1, 1, 1, 1, 0, "1f1b")
    assert Plan(tp=8, pp=16, dp=128, cp=2).chips == 8 * 16 * 128 * 2


@pytest.mark.parametrize("kw,match", [
    ({"tp": 0}, r"tp must be a positive integer, not 0"),
    ({"zero": 4}, r"zero must be a ZeRO stage 0, 1, 2 or 3 \(3 = FSDP\), not 4"),
    ({"schedule": "zb"}, r"schedule must be one of gpipe, 1f1b, interleaved, not 'zb'"),
    ({"recompute": "some"}, r"recompute must be one of none, selective, full, not 'some'"),
    ({"schedule": "interleaved", "pp": 4}, r"virtual_stages must be at least 2"),
    ({"schedule": "interleaved", "virtual_stages": 2}, r"needs pp >= 2, not pp=1"),
    ({"virtual_stages": 2, "pp": 2}, r"virtual_stages \(2\) applies to the interleaved"),
    ({"pp": 2, "layers_per_stage": (3,)}, r"layers_per_stage must list pp x virtual_stages = 2"),
])
def test_init_wrong_fields(kw, match):
    with pytest.raises(ValueError, match=match):
        Plan(**kw)


@pytest.mark.parametrize("plan,kw,match", [
    (Plan(tp=3, dp=2), {}, r"tp=3 cannot split llama-3.1-405b: it must divide attention heads "
                           r"\(128\)"),
    (Plan(tp=8, dp=2), {"chips": 32}, r"chips \(32\) must equal tp x pp x dp x cp = 8 x 1 x 2 x "
                                      r"1 = 16"),
    (Plan(tp=8, dp=2), {"cluster_chips": 8}, r"chips \(16\) exceeds the cluster's 8 chips"),
    (Plan(tp=8, dp=2, ep=2), {}, r"ep=2 needs a mixture-of-experts model"),
    (Plan(tp=8, dp=2, cp=3), {"chips": 48, "seq_len": 8192},
     r"cp=3 splits each sequence into 2 x cp = 6 load-balanced chunks: seq_len \(8192\)"),
    (Plan(tp=8, dp=2, micro_batch=3), {}, r"batch \(16\) must be divisible by dp x micro_batch "
                                          r"\(2 x 3 = 6\)"),
    (Plan(tp=8, pp=4, dp=2, schedule="interleaved", virtual_stages=2), {"chips": 64,
                                                                         "batch": 12},
     r"needs micro_batches \(6\) to be a multiple of pp \(4\)"),
    (Plan(tp=8, pp=127), {"chips": 1016}, r"pp x virtual_stages \(127\) must be at most the "
                                          r"number of layers \(126\)"),
    (Plan(tp=8, pp=2, layers_per_stage=(60, 60)), {}, r"sums to 120, not llama-3.1-405b's 126"),
])
def test_check_plan_messages(plan, kw, match):
    args = {"chips": plan.chips, "batch": 16, "seq_len": 4096} | kw
    with pytest.raises(ValueError, match=match):
        check_plan(plan, LLAMA, **args)


def test_expert_parallel_checks():
    with pytest.raises(ValueError, match=r"ep=3 must divide the number of experts \(256"):
        check_plan(Plan(dp=6, ep=3), DSV3, chips=6, batch=6, seq_len=4096)
    with pytest.raises(ValueError, match=r"ep=64 must divide dp x cp = 32"):
        check_plan(Plan(tp=8, dp=32, ep=64), DSV3, chips=256, batch=64, seq_len=4096)
    info = check_plan(Plan(tp=8, dp=64, ep=64), DSV3, chips=512, batch=64, seq_len=4096)
    assert info["micro_batches"] == 1
    with pytest.raises(ValueError, match=r"cp=2: context parallelism .* decode"):
        check_plan(Plan(dp=1, cp=2), DSV3, chips=2, batch=1, seq_len=1, phase="decode")


def test_llama3_405b_split_has_fewer_layers_at_the_ends():
    # 126 layers over 16 stages (Llama 3): 14 x 8 + 2 x 7, the extra layers in the middle
    lps = split_layers(126, 16)
    assert sum(lps) == 126 and lps[0] == lps[-1] == 7 and max(lps) == 8


@given(st.integers(1, 200), st.integers(1, 64))
@settings(max_examples=200, deadline=None)
def test_split_layers_is_even(layers, chunks):
    if chunks > layers:
        with pytest.raises(ValueError):
            split_layers(layers, chunks)
        return
    lps = split_layers(layers, chunks)
    assert sum(lps) == layers and len(lps) == chunks and max(lps) - min(lps) <= 1


def test_megatron_rank_order():
    # tp innermost, then cp, dp, pp (Megatron-Core's default tp-cp-ep-dp-pp)
    p = Plan(tp=2, cp=2, dp=2, pp=2)
    assert group_ranks(p, "tp") == [0, 1]
    assert group_ranks(p, "cp") == [0, 2]
    assert group_ranks(p, "dp") == [0, 2, 4, 6]              # the dense gradient group: dp x cp
    assert group_ranks(p, "pp") == [0, 8]
    q = Plan(tp=2, dp=4, ep=2)
    assert group_ranks(q, "ep") == [0, 2] and group_ranks(q, "edp") == [0, 4]
    assert group_of(q, "ep", 5) == (5, 7) and group_of(q, "edp", 3) == (3, 7)
    r = Plan(tp=2, cp=2, dp=2, pp=2, order="tp-cp-pp-dp")
    assert group_ranks(r, "pp") == [0, 4] and group_ranks(r, "dp") == [0, 2, 8, 10]


def test_group_shapes_on_the_presets():
    dgx = bind(load_cluster("dgx-h100"), load_chip("h100"))
    p = Plan(tp=8, pp=16, dp=128)
    assert group_shape(group_ranks(p, "tp"), dgx) == group_shape(list(range(8)), dgx)
    dp = group_shape(group_ranks(p, "dp"), dgx)
    assert (dp.n, dp.n_local, dp.n_dom, dp.leaf_local) == (128, 1, 128, False)
    small = group_shape(group_ranks(Plan(tp=8, dp=32), "dp"), dgx)
    assert small.leaf_local                        # 32 nodes: one SU, same rail
    pod = bind(load_cluster("tpu-v4-pod"), load_chip("tpu-v4"))
    tp16 = group_shape(group_ranks(Plan(tp=16, dp=256), "tp"), pod)
    assert tp16.spans == ((16, True),)
    dp = group_shape(group_ranks(Plan(tp=16, dp=256), "dp"), pod)
    assert dp.spans == ((16, True), (16, True)) and dp.n_dom == 1


def test_hybrid_sharding_groups():
    # ZeRO state sharded within groups of 4 of the 8 data-parallel ranks, replicated twice
    q = Plan(tp=2, dp=8, zero=3, zero_shards=4)
    assert group_ranks(q, "zs") == [0, 2, 4, 6] and group_ranks(q, "zr") == [0, 8]
    assert group_of(q, "zs", 11) == (9, 11, 13, 15) and group_of(q, "zr", 11) == (3, 11)
    e = Plan(dp=8, ep=2, zero=1, zero_shards=4)
    assert group_ranks(e, "ezs") == [0, 2] and group_of(e, "ezs", 5) == (5, 7)
    with pytest.raises(ValueError, match=r"zero_shards=3 must divide dp x cp = 8"):
        check_plan(Plan(dp=8, zero_shards=3), LLAMA, chips=8, batch=8, seq_len=4096)
    with pytest.raises(ValueError, match=r"zero_shards must be a positive integer, not 0"):
        Plan(zero_shards=0)
