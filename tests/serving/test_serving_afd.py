"""Attention–FFN disaggregation (sim/serving/afd.py) against independent references: the
colocated step (same chip in both roles, free link, one micro-batch), the serial sum with the
link's closed form, the ideal split bound, an enumeration of the dispatch fan-out, the pools'
memory, and bad input exiting 2. Step times come from the roofline double."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.run import Scenario
from diptych.sim.run.summed import block_costs, combine_parts
from diptych.sim.serving.afd import AfdLayout, AfdSpec, AfdTimer, check_ffn_fits, fanout
from diptych.sim.serving.afd_split import split_workload
from diptych.sim.serving.deployment import afd_deployment
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, serve
from diptych.sim.serving.step_time import DirectStepTimer, make_replica
from diptych.workloads import load_model
from diptych.workloads.serving_step import Step

MOE = "qwen3-30b-a3b"          # 128 experts, top-8, no shared expert, 48 MoE layers
DENSE = "llama-3-8b"
FREE = dict(link_bytes_per_s=math.inf, link_latency_s=0.0)
STEPS = [Step(decode_batch=24, decode_keys=24 * 900),
         Step(decode_batch=6, decode_keys=6 * 3000, prefill=((512, 0), (200, 64)))]


def _replica(model, chip="h100"):
    return make_replica(chip, model, Scenario.of(phase="decode", tp=1, execution="sum"))


def _afd(model, spec, chip="h100"):
    r = _replica(model, chip)
    return AfdTimer(dataclasses.replace(r, afd_side="attention"), r, spec, roofline)


@pytest.mark.parametrize("model", [DENSE, MOE])
@pytest.mark.parametrize("step", STEPS)
def test_one_micro_batch_with_a_free_link_is_the_colocated_step(model, step):
    """Same chip in both roles, an infinitely fast link, k = 1: the colocated step (the
    existing direct timer on the whole lowering), to rounding."""
    colocated = DirectStepTimer(_replica(model), roofline).cost(step)
    got = _afd(model, AfdSpec(1, 1, 1, **FREE)).cost(step)
    assert got.seconds == pytest.approx(colocated.seconds, rel=1e-12)


@pytest.mark.parametrize("model", [DENSE, MOE])
def test_one_micro_batch_is_serial_attention_transfer_ffn_transfer(model):
    """k = 1 over the chips' links: the colocated step plus, every layer, the two transfers
    of tokens × hidden × 2 bytes (bf16) at the chip's sustained link bandwidth plus its
    latency (the KV transfer's link model)."""
    step = STEPS[0]
    m, chip = load_model(model), load_chip("h100")
    ic = chip.interconnect
    tx = step.tokens * m.hidden_size * 2 / ic.sustained_bytes_per_s_per_direction \
        + ic.latency_us * 1e-6
    colocated = DirectStepTimer(_replica(model), roofline).cost(step).seconds
    got = _afd(model, AfdSpec(1, 1, 1)).cost(step).seconds
    assert got == pytest.approx(colocated + 2 * m.layers * tx, rel=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_same_chip_free_link_is_never_faster_than_the_ideal_split(k):
    """Two copies of one chip can at best split the colocated step's work perfectly: never
    below max(the whole step's attention part, its FFN part), never below half the
    colocated step."""
    r = _replica(MOE)
    for step in STEPS:
        def part(side):
            bc = block_costs(split_workload(r.step_workload(step), side), r.chip, roofline,
                             fixed_costs=r.fixed_costs)
            return combine_parts(bc, {}, {}, r.overlap)[0]
        got = _afd(MOE, AfdSpec(1, 1, k, **FREE)).cost(step).seconds
        colocated = DirectStepTimer(r, roofline).cost(step).seconds
        assert got >= max(part("attention"), part("ffn")) - 1e-15
        assert got >= colocated / 2


def test_more_micro_batches_hide_the_link():
    """With the chip's own links, a second micro-batch hides most of the transfers (the
    hidden share reported in the totals grows from 0 at k = 1)."""
    one, two = _afd(MOE, AfdSpec(1, 1, 1)), _afd(MOE, AfdSpec(1, 1, 4))
    one.cost(STEPS[0])
    two.cost(STEPS[0])
    assert one.totals["link_exposed_s"] == pytest.approx(one.totals["link_busy_s"])
    assert two.totals["link_exposed_s"] < 0.2 * two.totals["link_busy_s"]


def test_fanout_is_the_expected_distinct_ranks_by_enumeration():
    """Top-2 of 8 experts over 4 ranks of 2 experts: the mean distinct ranks over every
    pair of experts (equally likely)."""
    m = dataclasses.replace(load_model(MOE), experts=8, experts_per_token=2)
    pairs = list(itertools.combinations(range(8), 2))
    mean = sum(len({e // 2 for e in p}) for p in pairs) / len(pairs)
    assert fanout(m, 4, moe_layer=True) == pytest.approx(mean)
    assert fanout(m, 4, moe_layer=False) == 4       # a dense MLP: every rank's slice
    assert fanout(m, 1, moe_layer=True) == 1


def test_pools_are_checked_against_their_memory():
    """DeepSeek-V3's experts (~1.3 TB in bf16) do not fit one H100's FFN pool; its
    attention part on one chip leaves the KV cache room."""
    dep = afd_deployment("h100", "h100", "deepseek-v3", AfdSpec(1, 8, 2))
    with pytest.raises(ValueError, match="--ffn-chips 8: the FFN pool cannot hold its part "
                                         "of deepseek-v3.*use at least 18 FFN chips"):
        check_ffn_fits(dep.afd.ffn, dep.afd.spec, 0.1)
    big = afd_deployment("h100", "h100", "deepseek-v3", AfdSpec(1, 32, 2))
    assert check_ffn_fits(big.afd.ffn, big.afd.spec, 0.1) < 0.9 * 80e9


def test_serve_states_the_layout_utilisation_and_link():
    dep = afd_deployment("h100", "h100", MOE, AfdSpec(1, 2, 2))
    res = serve(dep, Load(concurrency=8, requests=16, prompt=P("256"), gen=P("16")),
                oracles=StepTimerCache("direct", roofline))
    a = res.info["afd"]
    assert res.chips == 3
    assert a["attention"]["chips"] == 1 and a["ffn"]["chips"] == 2 and a["ffn"]["ep"] == 2
    assert 0 < a["attention"]["utilisation"] <= 1 and 0 < a["ffn"]["utilisation"] <= 1
    assert 0 <= a["link_hidden_fraction"] <= 1
    assert a["link_s_per_step"] > 0 and a["microbatches"] == 2
    assert [p["role"] for p in res.info["pools"]] == ["attention", "ffn"]


def test_layout_is_validated():
    with pytest.raises(ValueError, match="--afd-microbatches must be a positive integer"):
        AfdSpec(1, 1, 0)
    r = _replica(DENSE)
    with pytest.raises(ValueError, match="the FFN replica has 1 chips, --ffn-chips 2"):
        AfdLayout(r, AfdSpec(1, 2))


BASE = ("serve", "--model", MOE, "--attention-chip", "h100", "--ffn-chip", "h100",
        "--requests", 4, "--qps", 1, "--prompt", 128, "--gen", 4)


@pytest.mark.parametrize("args,match", [
    (("--afd-microbatches", 0), "--afd-microbatches must be a positive integer, not 0"),
    (("--ffn-chips", 2, "--ep", 4), "--ep 4 with attention-FFN disaggregation: the experts "
     "are expert-parallel over the FFN pool \\(--ffn-chips 2\\)"),
    (("--prefill-chips", 2), "--prefill-chips with attention-FFN disaggregation"),
    (("--tp", 2), "--tp 2 with attention-FFN disaggregation"),
    (("--attention-chips", 0), "--attention-chips must be a positive integer, not 0"),
    (("--execution", "schedule"), "--execution schedule with attention-FFN"),
])
def test_bad_afd_input_exits_2_naming_it(cli, args, match):
    r = cli(*BASE, *args)
    assert r.exit_code == 2, r.output
    assert re.search(match, r.output), r.output


@pytest.mark.parametrize("model,extra,match", [
    ("deepseek-v3", ("--ffn-chips", 4), "--ffn-chips 4: the FFN pool cannot hold its part "
     "of deepseek-v3"),
    # the FFN pool holds its ~650 GiB over 16 chips; the attention part (~142 GiB of
    # embeddings, attention and head) does not fit one H100
    ("llama-3.1-405b", ("--ffn-chips", 16), "no room for a KV cache: llama-3.1-405b on "
     "h100 at tp=1 needs 141.7 GiB of weights.*use more chips \\(--attention-chips\\)"),
])
def test_a_pool_that_cannot_hold_its_part_exits_2(cli, model, extra, match):
    r = cli("serve", "--model", model, "--attention-chip", "h100", "--ffn-chip", "h100",
            *extra, "--requests", 2, "--qps", 1, "--oracle", "direct")
    assert r.exit_code == 2, r.output
    assert re.search(match, r.output), r.output


def test_a_dense_model_needs_its_ffn_pool_named(cli):
    """AFD on a dense model: its MLPs are the FFN pool's (tensor-parallel over m); without a
    chip for that pool (no --ffn-chip, no --chip) it exits 2 naming the flag."""
    r = cli("serve", "--model", DENSE, "--attention-chip", "h100", "--requests", 2, "--qps", 1)
    assert r.exit_code == 2, r.output
    assert "attention-FFN disaggregation needs a chip for each pool: give --ffn-chip" in r.output
    r = cli("serve", "--model", DENSE, "--attention-chip", "h100", "--ffn-chip", "h100",
            "--ffn-chips", 2, "--requests", 2, "--qps", 1, "--prompt", 64, "--gen", 4,
            "--oracle", "direct", "--json")
    assert r.exit_code == 0, r.output
    ffn = json.loads(r.output)["info"]["afd"]["ffn"]
    assert (ffn["tp"], ffn["ep"], ffn["chips"]) == (2, 1, 2)


def test_cli_json_states_afd(cli):
    r = cli(*BASE, "--ffn-chips", 2, "--oracle", "direct", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["info"]["afd"]["ffn"]["ep"] == 2 and d["chips"] == 3


def test_roles_evaluate_both_assignments_and_name_the_better():
    """compare --serving-afd's study: both assignments searched over their n:m ratios and
    micro-batches, each at its highest goodput per chip (at least that of every plan of its
    assignment on the search's Pareto front), the better named with the ratio it chose."""
    from diptych.sim.serving.afd_roles import AfdRoleSettings, afd_roles

    s = AfdRoleSettings(chips=3, microbatches=(1, 2), concurrency=4, requests=8,
                        prompt="128", gen="8")
    r = afd_roles("h100", "infer-2026", MOE, s, oracles=StepTimerCache("direct", roofline))
    a, b = r["assignments"]
    assert (a["attention_chip"], a["ffn_chip"]) == ("h100", "infer-2026")
    assert (b["attention_chip"], b["ffn_chip"]) == ("infer-2026", "h100")
    for x in (a, b):
        mine = [row for row in r["search"]["pareto"] if row["pools"][0]["chip"] ==
                x["attention_chip"]]
        assert all(x["goodput_rps_per_chip"] >= row["goodput_rps_per_chip"] for row in mine)
        assert x["attention_chips"] + x["ffn_chips"] <= 3
        assert x["ratio"] == f"{x['attention_chips']}:{x['ffn_chips']}"
    best, other = r["assignments"][r["best"]], r["assignments"][1 - r["best"]]
    assert best["goodput_rps_per_chip"] >= other["goodput_rps_per_chip"]
    assert r["verdict"].startswith(f"{best['attention_chip']} should hold attention and "
                                   f"{best['ffn_chip']} the experts")
    assert f"({best['attention_chips']} attention : {best['ffn_chips']} FFN chips" \
        in r["verdict"]
    assert "sets the pace" in r["verdict"]


def test_serving_afd_needs_two_chips(cli):
    r = cli("compare", "h100", "--model", MOE, "--serving-afd")
    assert r.exit_code == 2, r.output
    assert "--serving-afd puts two chips in the attention and FFN roles" in r.output


def test_data_parallel_attention_is_one_ranks_share_beside_all_ranks_ffn():
    """Two one-chip attention ranks, a free link, one micro-batch, 2b sequences: each rank
    attends its b sequences (the colocated step of b less its FFN part) while the FFN pool
    runs all 2b tokens' FFN part."""
    r = _replica(MOE)
    b = 12
    half, whole = (Step(decode_batch=n, decode_keys=n * 900) for n in (b, 2 * b))

    def ffn(step):
        bc = block_costs(split_workload(r.step_workload(step), "ffn"), r.chip, roofline,
                         fixed_costs=r.fixed_costs)
        return combine_parts(bc, {}, {}, r.overlap)[0]

    ref = DirectStepTimer(r, roofline).cost(half).seconds - ffn(half) + ffn(whole)
    dep = afd_deployment("h100", "h100", MOE,
                         AfdSpec(2, 1, 1, attention_layout="dp", **FREE))
    att = dataclasses.replace(dep.pool.replica, fixed_costs=r.fixed_costs)
    got = AfdTimer(att, r, dep.afd.spec, roofline).cost(whole).seconds
    assert att.dp == 2 and att.tp == 1 and dep.chips == 3
    assert got == pytest.approx(ref, rel=1e-12)


def test_data_parallel_attention_serves_with_a_cache_per_rank(cli):
    r = cli(*BASE, "--attention-chips", 2, "--afd-attention", "dp", "--oracle", "direct",
            "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    att = d["info"]["afd"]["attention"]
    assert (att["layout"], att["dp"], att["tp"], d["chips"]) == ("dp", 2, 1, 3)
    r = cli(*BASE, "--attention-chips", 2, "--afd-attention", "dp", "--prefixes", 2,
            "--prefix-share", 0.5)
    assert r.exit_code == 2, r.output
    assert "--prefixes with --afd-attention dp (2 ranks) is not modelled yet" in r.output


def test_compare_serving_afd_prints_both_assignments_and_the_verdict(cli):
    r = cli("compare", "h100", "infer-2026", "--model", MOE, "--serving-afd", "--execution",
            "sum", "--batches", 8, "--ref-batch", 8, "--contexts", 512, "--prompts", 512,
            "--serving-chips", 2, "--json")
    assert r.exit_code == 0, r.output
    roles = json.loads(r.output)["serving_afd"]
    assert {(a["attention_chip"], a["ffn_chip"]) for a in roles["assignments"]} == \
        {("h100", "infer-2026"), ("infer-2026", "h100")}
    best = roles["assignments"][roles["best"]]
    assert roles["verdict"].startswith(f"{best['attention_chip']} should hold attention")
    assert best["ratio"] == "1:1" and roles["settings"]["chips"] == 2
