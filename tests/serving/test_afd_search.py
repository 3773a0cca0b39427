"""The attention:FFN ratio search (sim/serving/afd_search.py): its enumeration against a
hand count, its best plans against every plan it evaluated (plain comparisons), the SLOs it
reports met against the p99s it measured, a row against a direct serve of the same plan and
the price against the chips' cost by hand; bad input exits 2 naming what binds. Step times
from the roofline double."""

from __future__ import annotations

import json

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.arch.cost import SECONDS_PER_YEAR, chip_cost
from diptych.sim.serving.afd import AfdSpec
from diptych.sim.serving.afd_search import AfdSearchSpace, afd_search, candidates
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.deployment import afd_deployment
from diptych.sim.serving.requests import Load, parse_length as P
from diptych.sim.serving.serve import StepTimerCache, serve

MOE = "qwen3-30b-a3b"          # 128 experts
LOAD = Load(qps=40, requests=40, prompt=P("256"), gen=P("16"))


def test_candidates_are_every_pool_pair_within_the_budget():
    """3 chips, qwen3-30b-a3b (TP 1 and 2 split it; 1 and 2 divide its 128 experts): n:m in
    1:1, 1:2, 2:1, times two micro-batch counts, times two assignments; dp needs n >= 2."""
    sp = AfdSearchSpace(("h100", "infer-2026"), 3, microbatches=(1, 2))
    got = {(p.attention_chip, p.n, p.m, p.k) for p in candidates(MOE, sp)}
    assert got == {(a, n, m, k) for a in ("h100", "infer-2026")
                   for n, m in ((1, 1), (1, 2), (2, 1)) for k in (1, 2)}
    dp = candidates(MOE, AfdSearchSpace(("h100",), 3, microbatches=(2,),
                                        attention_layouts=("dp",)))
    assert [(p.n, p.m, p.layout) for p in dp] == [(2, 1, "dp")]
    # qwen3's 128 experts: an FFN pool of 3 or 5 chips is not searched
    five = candidates(MOE, AfdSearchSpace(("h100",), 6, attention_chips=(1,), microbatches=(2,)))
    assert [p.m for p in five] == [1, 2, 4]
    # a dense model's FFN pool: its MLPs tensor-parallel, so m a degree that splits it
    from diptych.workloads import load_model
    from diptych.workloads.lower import valid_tp_degrees
    dense = candidates("llama-3-8b", AfdSearchSpace(("h100",), 9, attention_chips=(1,),
                                                    microbatches=(2,)))
    assert [p.m for p in dense] == valid_tp_degrees(load_model("llama-3-8b"), 8)


@pytest.fixture(scope="module")
def result():
    """A search where the TPOT SLO cuts the plans (some meet it, some do not)."""
    sp = AfdSearchSpace(("h100", "infer-2026"), 4, microbatches=(1, 4))
    oracles = StepTimerCache("grid", roofline)      # both searches: the same step timers
    probe = afd_search(MOE, sp, LOAD, oracles=oracles)
    tpots = sorted(r["tpot_p99_s"] for r in probe["evaluated"] if "error" not in r)
    slo = tpots[len(tpots) // 2]           # the median plan's p99 TPOT: about half meet it
    cfg = ServeConfig(slo_tpot_s=slo)
    return afd_search(MOE, sp, LOAD, cfg, oracles=oracles), cfg


def test_best_plans_are_never_worse_than_any_evaluated(result):
    res, _ = result
    ok = [r for r in res["evaluated"] if r["meets_slo"]]
    assert 0 < len(ok) < len(res["evaluated"])
    b = res["best"]
    for r in ok:
        assert b["usd_per_mtok"] <= r["usd_per_mtok"]
        if b["usd_per_mtok"] == r["usd_per_mtok"]:
            assert b["goodput_rps_per_chip"] >= r["goodput_rps_per_chip"]
    for name, d in res["per_assignment"].items():
        mine = [r for r in ok if r["assignment"] == name]
        if not mine:
            assert d["best"] is None and d["binding"].startswith("no plan meets the SLOs")
            continue
        assert d["best"]["usd_per_mtok"] == min(r["usd_per_mtok"] for r in mine)
        assert d["best_goodput"]["goodput_rps_per_chip"] == \
            max(r["goodput_rps_per_chip"] for r in mine)
        assert d["best"]["assignment"] == name


def test_no_plan_reported_meeting_the_slos_violates_them(result):
    res, cfg = result
    for r in res["evaluated"]:
        if r["meets_slo"]:
            assert r["ttft_p99_s"] <= cfg.slo_ttft_s and r["tpot_p99_s"] <= cfg.slo_tpot_s


def test_a_row_is_the_serve_of_its_plan_priced_on_both_pools(result):
    """The best row's goodput equals a direct serve of its deployment; its price is both
    pools' chips' cost over their service life per token, plus the energy (by hand)."""
    res, cfg = result
    b = res["best"]
    dep = afd_deployment(b["pools"][0]["chip"], b["pools"][1]["chip"], MOE,
                         AfdSpec(b["attention_chips"], b["ffn_chips"], b["microbatches"]))
    from diptych.sim.serving.afd_search import search_runtime
    r = serve(dep, LOAD, search_runtime(("h100", "infer-2026"), cfg),
              oracles=StepTimerCache("grid", roofline))
    assert r.goodput_rps / dep.chips == pytest.approx(b["goodput_rps_per_chip"], rel=1e-12)
    capex = 0.0
    for pool in b["pools"]:
        chip = load_chip(pool["chip"])
        c = chip.cost
        capex += pool["chips"] * chip_cost(chip).total_usd / (
            c.utilisation * c.lifetime_years * SECONDS_PER_YEAR)
    c = load_chip(b["pools"][0]["chip"]).cost
    energy = c.pue / 3.6e6 * c.usd_per_kwh / r.tokens_per_j
    assert b["usd_per_mtok"] == pytest.approx(1e6 * (capex / r.tokens_per_s + energy),
                                              rel=1e-9)


def test_no_feasible_plan_names_the_binding_slo():
    sp = AfdSearchSpace(("h100",), 2, microbatches=(2,))
    with pytest.raises(ValueError, match=r"no plan meets the SLOs: p99 TPOT binds; the "
                                         r"closest plan \(1:1: attention 1 x h100"):
        afd_search(MOE, sp, LOAD, ServeConfig(slo_tpot_s=1e-6),
                   oracles=StepTimerCache("grid", roofline))


BASE = ("serve-plan-afd", "--model", MOE, "--chip", "h100", "--chip", "infer-2026",
        "--qps", 40, "--requests", 20, "--prompt", 256, "--gen", 8, "--afd-microbatches", 2)


def test_cli_prints_the_best_plan_per_assignment(cli):
    r = cli(*BASE, "--chips", 2, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["candidates"] == 2 and set(d["per_assignment"]) == {
        "attention h100 + FFN infer-2026", "attention infer-2026 + FFN h100"}
    r = cli(*BASE, "--chips", 2)
    assert r.exit_code == 0, r.output
    assert "best: 1:1: attention 1 x" in r.output, r.output
    assert "attention h100 + FFN" in r.output and "attention infer-2026 + FFN" in r.output


@pytest.mark.parametrize("args,match", [
    (("--chips", 1), "--chips must be an integer of at least 2"),
    (("--chips", 2, "--slo-tpot", 1e-6), "no plan meets the SLOs: p99 TPOT binds"),
    (("--chips", 4, "--attention-chips", 3), "no AFD plan fits 4 chips"),
    (("--chips", 2, "--afd-attention", "pp"), "expected tp, dp or both"),
])
def test_bad_search_input_exits_2_naming_it(cli, args, match):
    r = cli(*BASE, *args)
    assert r.exit_code == 2, r.output
    assert match in r.output, r.output


def test_a_pool_too_small_for_its_part_is_what_binds(cli):
    """DeepSeek-V3's experts need 18+ H100s: a 4-chip budget builds no plan, and says why."""
    r = cli("serve-plan-afd", "--model", "deepseek-v3", "--chip", "h100", "--chips", 4,
            "--qps", 1, "--requests", 2, "--afd-microbatches", 2)
    assert r.exit_code == 2, r.output
    assert "no plan could be built: --ffn-chips" in r.output
    assert "the FFN pool cannot hold its part of deepseek-v3" in r.output
