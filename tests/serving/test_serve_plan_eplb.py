"""Redundant hot experts (EPLB) as an axis of the deployment search (issue 24 items 1 and 3:
`diptych serve-plan --redundant-experts LIST`; sim/serving/search.py) on the roofline double:
the layouts are the EP degrees that divide experts + copies, a rank's weights count its
copies (closed form), the best plan is never worse than any plan run (the redundant ones
included) and pruning keeps it, a redundant plan's row is `diptych serve --ep E
--redundant-experts R` of the same settings, and bad values exit 2 naming them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.requests import Load, parse_length
from diptych.sim.serving.search import (SearchSpace, _key, candidates, design_name, layouts,
                                        search)
from diptych.sim.serving.serve import StepTimerCache
from diptych.workloads import load_model
from diptych.workloads.params import param_count

MOE = "qwen3-30b-a3b"            # 128 experts of 3 x 2048 x 768 in each of 48 MoE layers
SPACE = SearchSpace(designs=("h100",), chips=2, tp=(1,), max_batched_tokens=(2048,),
                    chunked_prefill=(True,), disaggregated=False, ep=(2,),
                    ep_attention=("dp",), moe_skew=0.4, redundant_experts=(0, 2))
LOAD = Load(qps=4.0, prompt=parse_length("512", "prompt"), gen=parse_length("16", "gen"),
            requests=24)
CFG = ServeConfig(slo_ttft_s=2.0, slo_tpot_s=0.2)


def test_the_layouts_divide_experts_plus_copies_and_count_their_weights():
    """Per redundant count R, the EP degrees from 2 to --chips that divide 128 + R (R = 4:
    132 = 2·2·3·11, so 2, 3, 4; R = 256: 384, 2, 3, 4, but an EP-2 rank of 192 experts
    holds more bytes than an H100 has, by the closed form below); TP layouts carry no copies."""
    m, cfg = load_model(MOE), ServeConfig()
    sp = replace(SPACE, chips=4, tp=None, ep=None, ep_attention=("dp",),
                 redundant_experts=(0, 4, 256))
    got = layouts("h100", m, sp, cfg)
    assert {x[3] for x in got if x[1] == 1} == {0}
    ep = {(e, red) for _, e, _, red in got if e > 1}
    assert ep == {(2, 0), (4, 0), (2, 4), (3, 4), (4, 4), (3, 256), (4, 256)}
    # a rank's weights: the dense part whole (DP attention) and (128 + R)/ep experts
    expert = m.moe_layers * 3 * m.hidden_size * m.moe_intermediate_size     # params
    dense = param_count(m) - 128 * expert
    cap = load_chip("h100").dram.capacity_bytes
    assert 2 * (dense + 384 / 2 * expert) > cap > 2 * (dense + 384 / 3 * expert)
    rows = {p.roles[0][4:]: p for p in candidates(MOE, sp, cfg)}
    assert (2, "dp", 256) not in rows and (3, "dp", 256) in rows


@pytest.fixture(scope="module")
def searched():
    """The step timers (shared with the pruned search below) and the exhaustive search."""
    timers = StepTimerCache("grid", roofline)
    return timers, search(MOE, SPACE, LOAD, CFG, oracles=timers, prune=False)


def test_the_best_plan_is_never_worse_than_any_plan_run_redundant_ones_included(searched):
    oracles, exhaustive = searched
    rows = exhaustive["evaluated"]
    red = [r for r in rows if r["pools"][0]["redundant_experts"] == 2]
    assert len(red) == 1 and red[0]["meets_slo"]
    assert "ep 2, dp attention, 2 redundant experts" in red[0]["plan"]
    none = next(r for r in rows if r["pools"][0]["ep"] == 2
                and r["pools"][0]["redundant_experts"] == 0)
    assert red[0]["tpot_p99_s"] != none["tpot_p99_s"]           # the copies change the step
    ok = [r for r in rows if r["meets_slo"]]
    assert all(_key(exhaustive["best"]) <= _key(r) for r in ok)
    assert exhaustive["space"]["redundant_experts"] == [0, 2]
    # pruned by the price floor: the same best plans, and a skipped plan costs more
    pruned = search(MOE, SPACE, LOAD, CFG, oracles=oracles)
    assert pruned["best"] == exhaustive["best"]
    assert pruned["best_per_design"] == exhaustive["best_per_design"]
    full = {r["plan"]: r for r in rows}
    for r in pruned["evaluated"]:
        if r.get("pruned"):
            mine = exhaustive["best_per_design"][design_name(r)]
            assert full[r["plan"]]["usd_per_mtok"] > mine["usd_per_mtok"]


def test_a_redundant_plan_is_serve_with_its_flags_and_bad_values_exit_2(cli, searched):
    row = next(r for r in searched[1]["evaluated"] if r["pools"][0]["redundant_experts"] == 2)
    r = cli("serve", "--chip", "h100", "--model", MOE, "--ep", 2, "--ep-attention", "dp",
            "--redundant-experts", 2, "--moe-skew", 0.4, "--qps", 4, "--requests", 24,
            "--prompt", 512, "--gen", 16, "--max-batched-tokens", 2048, "--chunked-prefill",
            "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["info"]["pools"][0]["expert_slots"] == 130
    for mine, theirs in ((row["ttft_p99_s"], d["ttft_s"]["p99"]),
                         (row["tpot_p99_s"], d["tpot_s"]["p99"]),
                         (row["goodput_rps"], d["goodput_rps"]),
                         (row["tokens_per_j"], d["tokens_per_j"])):
        assert mine == pytest.approx(theirs, rel=1e-12)
    args = ("serve-plan", "--model", MOE, "--chip", "h100", "--chips", 4, "--qps", 4,
            "--requests", 8, "--max-batched-tokens", 2048, "--prompts", "chunked",
            "--no-disagg")
    for bad, words in ((("--ep", 4, "--redundant-experts", "0,3"),
                        ("--ep 4", "128 experts + 3 redundant = 131")),
                       (("--redundant-experts", 5), ("--redundant-experts 5", "133")),
                       (("--no-ep", "--redundant-experts", "0,32"), ("--redundant-experts 32",)),
                       (("--redundant-experts", -1), ("--redundant-experts",))):
        r = cli(*args, *bad)
        assert r.exit_code == 2 and all(w in r.output for w in words), r.output
    r = cli(*args, "--model", "llama-3-8b", "--redundant-experts", 32)
    assert r.exit_code == 2 and "--redundant-experts 32 needs a mixture-of-experts" in r.output
