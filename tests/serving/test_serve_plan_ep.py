"""The deployment search over expert parallelism (issue 24 item 1 in `diptych serve-plan`;
sim/serving/search.py) on the roofline double: the EP layouts are exactly the valid ones
(degrees dividing the experts, pools in whole EP groups, ranks that hold the model), an EP
plan's row is the serve of the same deployment built by hand, the best plan is never worse
than any plan run, and the printed plans name their EP layout."""

from __future__ import annotations

import json

import pytest
from roofline_double import roofline

from diptych.sim.run import Scenario
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.ep import EpSpec, ep_replica
from diptych.sim.serving.kv import kv_budget
from diptych.sim.serving.requests import Load, parse_length
from diptych.sim.serving.search import SearchSpace, _key, candidates, layouts, search
from diptych.sim.serving.serve import Deployment, Pool, StepTimerCache, serve
from diptych.sim.serving.step_time import make_replica

MOE = "qwen3-30b-a3b"            # 128 experts: EP 2, 4 divide them, 3 does not
SPACE = SearchSpace(designs=("h100",), chips=4, max_batched_tokens=(2048,),
                    chunked_prefill=(True,), disaggregated=False)
LOAD = Load(qps=4.0, prompt=parse_length("512", "prompt"), gen=parse_length("32", "gen"),
            requests=40)
CFG = ServeConfig(slo_ttft_s=1.0, slo_tpot_s=0.1)


def test_the_ep_layouts_are_the_valid_ones():
    """Every EP degree from 2 to the chips that divides 128 experts (2, 4; not 3), each with
    both attention layouts whose ranks hold the model (the fit rule recomputed here), and
    pools in whole EP groups (4 chips: one EP-4 replica or two EP-2 ones)."""
    cfg = ServeConfig()
    got = layouts("h100", MOE, SPACE, cfg)
    want = []
    for e in (2, 3, 4):
        if 128 % e:
            continue
        for att in ("dp", "tp"):
            spec = EpSpec(e, att)
            r = ep_replica(make_replica("h100", MOE, Scenario.of(phase="decode", tp=spec.tp)),
                           spec)
            if kv_budget(r, block_tokens=cfg.kv_block_tokens,
                         max_batched_tokens=cfg.max_batched_tokens,
                         reserve_fraction=cfg.kv_reserve_fraction).tokens >= 8192:
                want.append((spec.tp, e, att, 0))
    assert [x for x in got if x[1] > 1] == want == [(1, 2, "dp", 0), (2, 2, "tp", 0),
                                                     (1, 4, "dp", 0), (4, 4, "tp", 0)]
    shapes = {p.roles for p in candidates(MOE, SPACE, CFG)}
    ep = {s for s in shapes if s[0][4] > 1}
    assert ep == {(("mixed", "h100", t, n, e, a, 0),) for t, n, e, a in (
        (1, 2, 2, "dp"), (1, 4, 2, "dp"), (2, 2, 2, "tp"), (2, 4, 2, "tp"), (1, 4, 4, "dp"),
        (4, 4, 4, "tp"))}
    # a dense model has no EP layout; --no-ep (ep=()) leaves only TP
    assert all(r[4] == 1 for p in candidates("llama-3-8b", SPACE, CFG) for r in p.roles)
    from dataclasses import replace
    assert all(r[4] == 1 for p in candidates(MOE, replace(SPACE, ep=()), CFG)
               for r in p.roles)
    # disaggregated: each pool's size a multiple of its own replica's chips
    for p in candidates(MOE, replace(SPACE, disaggregated=True, ep=(2,)), CFG):
        for r in p.roles:
            assert r[3] % (r[4] if r[4] > 1 else r[2]) == 0


@pytest.mark.parametrize("bad, match", [
    (dict(ep=(3,)), "--ep 3 must divide the expert slots"),
    (dict(ep=(8,)), "--ep 8 is larger than --chips"),
])
def test_bad_ep_degrees_are_named(bad, match):
    from dataclasses import replace
    with pytest.raises(ValueError, match=match):
        candidates(MOE, replace(SPACE, **bad), CFG)
    with pytest.raises(ValueError, match="needs a mixture-of-experts model"):
        candidates("llama-3-8b", replace(SPACE, ep=(2,)), CFG)


@pytest.fixture(scope="module")
def oracles():
    return StepTimerCache("grid", roofline)


@pytest.fixture(scope="module")
def result(oracles):
    return search(MOE, SPACE, LOAD, CFG, oracles=oracles, prune=False)


def test_an_ep_plan_is_the_hand_built_deployment_served(result, oracles):
    rows = {r["plan"]: r for r in result["evaluated"]}
    row = rows["mixed 2 x h100 (ep 2, dp attention); max 2048 tokens per step, prompts "
               "chunked into decode steps"]
    assert [(p["ep"], p["attention"], p["replicas"], p["tp"]) for p in row["pools"]] \
        == [(2, "dp", 2, 1)]
    rep = ep_replica(make_replica("h100", MOE, Scenario.of(phase="decode", tp=1)),
                     EpSpec(2, "dp"))
    from dataclasses import replace
    r = serve(Deployment(pool=Pool(rep, 2)), LOAD,
              replace(CFG, max_batched_tokens=2048, chunked_prefill=True), oracles=oracles)
    assert r.ttft_s["p99"] == row["ttft_p99_s"] and r.tpot_s["p99"] == row["tpot_p99_s"]
    assert r.info["pools"][0]["ep"] == 2 and r.info["pools"][0]["attention"] == "dp"


def test_the_best_plan_is_never_worse_than_any_plan_run(result):
    ok = [r for r in result["evaluated"] if r["meets_slo"]]
    assert any(p["ep"] > 1 for r in ok for p in r["pools"])          # EP plans ran and met
    assert all(_key(result["best"]) <= _key(r) for r in ok)
    for r in ok:
        assert r["ttft_p99_s"] <= CFG.slo_ttft_s and r["tpot_p99_s"] <= CFG.slo_tpot_s
    assert result["candidates"] == len(result["evaluated"]) == len(candidates(MOE, SPACE, CFG))


def test_cli_prints_the_ep_layout(cli):
    args = ("serve-plan", "--model", MOE, "--chip", "h100", "--chips", 2, "--qps", 4,
            "--requests", 30, "--prompt", 512, "--gen", 32, "--max-batched-tokens", 2048,
            "--prompts", "chunked", "--no-disagg", "--ep-attention", "dp", "--exhaustive")
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert {(p["ep"], p["attention"]) for x in d["evaluated"] for p in x["pools"]} \
        == {(1, "tp"), (2, "dp")}
    assert all("(ep 2, dp attention)" in x["plan"] for x in d["evaluated"]
               if x["pools"][0]["ep"] == 2)
    r = cli(*args, "--top", 20)
    assert r.exit_code == 0, r.output
    for x in d["pareto"] + [v["best"] for v in d["per_design"].values()]:
        assert x["plan"] in r.output               # the front and the best, layout and all
    # every row states its setup (issue 24 item 5): scheduler, runtime, pools, precision
    for x in d["evaluated"]:
        su = x["setup"]
        assert su["scheduler"] == "continuous" and su["runtime"] == "vllm-v1"
        assert [(p["ep"], p["attention"]) for p in su["pools"]] == [
            (p["ep"], p["attention"]) for p in x["pools"]]
        assert su["pools"][0]["precision"]["weights"] == "bf16"
    from diptych.tools.serve_report import setup_line
    line = setup_line(d["per_design"]["h100"]["best"]["setup"])
    assert f"h100's best plan: {line}" in r.output and "precision: " in line
    for bad, word in ((("--ep", 3), "--ep 3"), (("--ep-attention", "xx"), "--ep-attention"),
                      (("--ep", 2, "--no-ep"), "--no-ep")):
        r = cli(*args, *bad)
        assert r.exit_code == 2 and word in r.output, r.output
