"""The deployment search (`diptych serve-plan`; sim/serving/search.py) on the roofline double:
every plan in the space and no other, the best plan never worse than any plan it evaluated and
never violating an SLO it reports as met, the Pareto front exactly the undominated plans, the
price per token by its formula, and the binding constraint named when nothing meets the SLOs."""

from __future__ import annotations

import json

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.arch.cost import SECONDS_PER_YEAR, chip_cost
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.deployment import fit_tp
from diptych.sim.serving.requests import Load, parse_length
from diptych.sim.serving.search import (SearchSpace, _key, candidates, design_name,
                                        dominates, search,
                                        usd_per_mtok)
from diptych.sim.serving.search_prune import stream_span, usd_floor
from diptych.sim.serving.serve import StepTimerCache, serve

SPACE = SearchSpace(designs=("h100", "infer-2026"), chips=2, max_batched_tokens=(2048,),
                    chunked_prefill=(True, False))
LOAD = Load(qps=6.0, prompt=parse_length("512", "prompt"), gen=parse_length("64", "gen"),
            requests=80)
CFG = ServeConfig(slo_ttft_s=0.5, slo_tpot_s=0.05)


@pytest.fixture(scope="module")
def oracles():
    return StepTimerCache("grid", roofline)


@pytest.fixture(scope="module")
def result(oracles):
    return search("llama-3-8b", SPACE, LOAD, CFG, oracles=oracles)


def test_the_plans_are_the_space_and_nothing_else():
    plans = candidates("llama-3-8b", SPACE, CFG)
    assert len({p for p in plans}) == len(plans)
    fit = {d: fit_tp(d, "llama-3-8b", CFG) for d in SPACE.designs}
    shapes = set()
    for p in plans:
        assert p.chips <= SPACE.chips
        for _, design, tp, chips, ep, att, red in p.roles:
            assert tp >= fit[design] and chips % tp == 0 and chips >= tp
            assert (ep, att, red) == (1, "tp", 0)     # a dense model: no expert parallelism
        shapes.add(p.roles)
    # complete: every colocated size, every split that fits the chips; nothing over them
    for d in SPACE.designs:
        for t, r in ((1, 1), (1, 2), (2, 1)):
            assert (("mixed", d, t, r * t, 1, "tp", 0),) in shapes
        for e in SPACE.designs:
            assert (("prefill", d, 1, 1, 1, "tp", 0),
                    ("decode", e, 1, 1, 1, "tp", 0)) in shapes
    assert len(plans) == 2 * (2 * 3 + 4)          # policies x (colocated 3 per design + pairs)
    assert not any(r[2] == 2 and p.disaggregated for p in plans for r in p.roles)


def test_the_best_plan_is_never_worse_and_meets_its_slos(result, oracles):
    ok = [r for r in result["evaluated"] if r["meets_slo"]]
    assert result["meeting_slo"] == len(ok) and 0 < len(ok) < len(result["evaluated"])
    best = result["best"]
    assert all(_key(best) <= _key(r) for r in ok)
    for r in ok:                               # a plan reported as meeting them meets them
        assert r["ttft_p99_s"] <= CFG.slo_ttft_s and r["tpot_p99_s"] <= CFG.slo_tpot_s
    for name, b in result["best_per_design"].items():
        mine = [r for r in ok if {p["chip"] for p in r["pools"]} == {name}
                or r["design"] == name]
        assert all(_key(b) <= _key(r) for r in mine)


def test_the_best_plan_served_again_meets_the_slos(result, oracles):
    from diptych.sim.serving.search import Plan, _deployment
    from dataclasses import replace
    b = result["best"]
    plan = Plan(tuple((p["role"], p["chip"], p["tp"], p["chips"], p["ep"], p["attention"],
                      p["redundant_experts"])
                      for p in b["pools"]),
                b["max_batched_tokens"], b["chunked_prefill"])
    dep = _deployment(plan, "llama-3-8b", SPACE, {})
    r = serve(dep, LOAD, replace(CFG, max_batched_tokens=plan.max_batched_tokens,
                                 chunked_prefill=plan.chunked_prefill), oracles=oracles)
    assert r.meets_slo and r.ttft_s["p99"] == pytest.approx(b["ttft_p99_s"])


@pytest.fixture(scope="module")
def exhaustive(oracles):
    return search("llama-3-8b", SPACE, LOAD, CFG, oracles=oracles, prune=False)


def test_the_price_floor_is_below_every_plans_price(exhaustive):
    """The floor of sim/serving/search_prune.py (capital cost over the stream's span, no
    energy) under the price every plan of the exhaustive search measured."""
    span, out = stream_span(LOAD, 8192, CFG.seed)
    assert span > 0 and out == 80 * 64
    priced = [r for r in exhaustive["evaluated"] if r.get("usd_per_mtok") is not None]
    assert len(priced) > 10 and exhaustive["pruned"] == 0
    for r in priced:
        roles = tuple((p["role"], p["chip"], p["tp"], p["chips"], p["ep"], p["attention"],
                      p["redundant_experts"])
                      for p in r["pools"])
        assert usd_floor(roles, span, out) <= r["usd_per_mtok"]


def test_pruning_never_removes_a_best_plan(result, exhaustive):
    assert result["pruned"] > 0 and result["run"] + result["pruned"] == result["candidates"]
    assert result["best"] == exhaustive["best"]
    assert result["best_per_design"] == exhaustive["best_per_design"]
    assert result["per_design"] == exhaustive["per_design"]
    full = {r["plan"]: r for r in exhaustive["evaluated"]}
    for r in result["evaluated"]:
        if r.get("pruned"):             # skipped: its design's best is cheaper than it is
            mine = exhaustive["best_per_design"][design_name(r)]
            assert full[r["plan"]].get("usd_per_mtok") is None or (
                full[r["plan"]]["usd_per_mtok"] > mine["usd_per_mtok"])
            assert "not run" in r["pruned"] and not r["meets_slo"]
        else:                           # run: the same numbers as in the exhaustive search
            assert r == full[r["plan"]]


def test_the_pareto_front_is_exactly_the_undominated_plans(result):
    ok = [r for r in result["evaluated"] if r["meets_slo"]]
    front = result["pareto"]
    for f in front:
        assert not any(dominates(r, f) for r in ok)
    ids = {id(f) for f in front}
    for r in ok:
        if id(r) not in ids:
            assert any(dominates(f, r) for f in front)


def test_the_price_per_token_is_capital_over_service_life_plus_energy(result):
    r = next(x for x in result["evaluated"] if x["meets_slo"] and not x["disaggregated"])
    chip = load_chip(r["pools"][0]["chip"])
    c, cc = chip.cost, chip_cost(chip)
    capex = r["chips"] * cc.total_usd / (c.utilisation * c.lifetime_years * SECONDS_PER_YEAR)
    want = 1e6 * (capex / r["tokens_per_s"] + c.pue * c.usd_per_kwh / 3.6e6 / r["tokens_per_j"])
    assert r["usd_per_mtok"] == pytest.approx(want, rel=1e-12)

    class NoCost:             # a deployment whose chip has no [cost] table: no price
        pools = [type("P", (), {"chips": 1, "replica": type("R", (), {"chip": type(
            "C", (), {"cost": None})()})()})()]
    assert usd_per_mtok(NoCost(), 100.0, 1.0) is None


def test_no_plan_meeting_the_slos_names_the_binding_one(oracles):
    tight = ServeConfig(slo_ttft_s=10.0, slo_tpot_s=1e-6)
    small = SearchSpace(designs=("h100",), chips=1, max_batched_tokens=(2048,),
                        chunked_prefill=(True,), disaggregated=False)
    with pytest.raises(ValueError, match="p99 TPOT binds"):
        search("llama-3-8b", small, LOAD, tight, oracles=oracles)
    with pytest.raises(ValueError, match="no plan could be built"):
        search("llama-3-70b", small, LOAD, CFG, oracles=oracles)




def test_cli_json_and_table(cli):
    args = ("serve-plan", "--model", "llama-3-8b", "--chip", "h100", "--chips", 2, "--qps", 4,
            "--requests", 60, "--max-batched-tokens", 2048, "--prompts", "chunked")
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["candidates"] == len(d["evaluated"]) and d["best"]["meets_slo"]
    r = cli(*args, "--no-disagg")
    assert r.exit_code == 0, r.output
    assert "Pareto front" in r.output and "best:" in r.output


@pytest.mark.parametrize("bad, word", [
    (("--chips", 0), "chips"),
    (("--chips", 2, "--chip", "no-such-chip"), "no-such-chip"),
    (("--chips", 2, "--prompts", "sometimes"), "chunked"),
    (("--chips", 2, "--tp", "0"), "positive"),
])
def test_bad_input_exits_2_naming_it(cli, bad, word):
    args = ["serve-plan", "--model", "llama-3-8b", "--qps", 4, "--requests", 60]
    if "--chip" not in bad:
        args += ["--chip", "h100"]
    r = cli(*args, *bad)
    assert r.exit_code == 2 and word in r.output


def test_a_pair_of_chips_with_different_runtimes_needs_one_named(result, oracles):
    """h100 names vllm-v1, infer-2026 the ideal runtime: their pairs are refused, and the
    per-design verdict says why (not that the model does not fit); with a runtime named
    they run."""
    from diptych.arch.runtime import load_runtime
    from dataclasses import replace
    v = result["per_design"]["prefill h100 + decode infer-2026"]
    assert v["best"] is None and "different serving runtimes" in v["binding"]
    assert "holds the model" not in v["binding"]
    one = replace(SPACE, chunked_prefill=(True,))
    res = search("llama-3-8b", one, LOAD, replace(CFG, runtime=load_runtime("ideal")),
                 oracles=oracles, prune=False)
    pairs = [r for r in res["evaluated"] if r["design"] == "prefill h100 + decode infer-2026"]
    assert pairs and all("error" not in r and r["ttft_p99_s"] > 0 for r in pairs)


def test_the_plans_state_whole_prompts_when_the_runtime_runs_them(oracles):
    """Review finding 4: trtllm-triton batches whole prompts (split_prompts false); its
    chunked plans say so, run so (the same numbers as serve with that runtime) and a
    prefill-first plan is unchanged; --split-prompts (cfg.split_prompts) overrides it."""
    from dataclasses import replace
    from diptych.arch.runtime import load_runtime
    from diptych.sim.serving.deployment import colocated
    trt = replace(CFG, runtime=load_runtime("trtllm-triton"))
    space = replace(SPACE, designs=("h100",), disaggregated=False,
                    max_batched_tokens=(4096,))
    plans = candidates("llama-3-8b", space, trt)
    assert {(p.chunked_prefill, p.split_prompts) for p in plans} == {(True, False),
                                                                    (False, False)}
    for p in plans:
        text = p.describe()
        assert ("whole prompts batched into decode steps" in text) == p.chunked_prefill
        assert ("prompts apart from decode steps" in text) == (not p.chunked_prefill)
        assert p.to_dict()["split_prompts"] is (False if p.chunked_prefill else None)
    assert all(p.split_prompts for p in candidates("llama-3-8b", space, CFG))
    assert all(p.split_prompts for p in candidates(
        "llama-3-8b", space, replace(trt, split_prompts=True)))
    res = search("llama-3-8b", replace(space, chunked_prefill=(True,)), LOAD, trt,
                 oracles=oracles, prune=False)
    row = res["evaluated"][0]
    assert row["pools"][0]["replicas"] == 1 and "whole prompts" in row["plan"]
    r = serve(colocated("h100", "llama-3-8b", tp=1), LOAD,
              replace(trt, max_batched_tokens=4096), oracles=oracles)
    assert "whole prompts" in r.info["scheduling"]
    assert row["ttft_p99_s"] == r.ttft_s["p99"] and row["tpot_p99_s"] == r.tpot_s["p99"]


def test_serve_plan_takes_split_prompts_and_its_error_names_a_flag_it_has(cli):
    args = ("serve-plan", "--model", "llama-3-8b", "--chip", "h100", "--chips", 1, "--qps", 2,
            "--requests", 20, "--prompt", 3000, "--gen", 8, "--max-batched-tokens", 2048,
            "--prompts", "chunked", "--runtime", "trtllm-triton", "--no-disagg", "--json")
    r = cli(*args)
    assert r.exit_code == 2 and "whole prompts" in r.output and "--split-prompts" in r.output
    d = json.loads(cli(*args, "--split-prompts").output)
    assert d["best"]["split_prompts"] is True and "chunked into" in d["best"]["plan"]
