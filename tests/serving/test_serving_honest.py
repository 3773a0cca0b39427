"""Issue 24 item 5, honest reports: a QPS sweep names a highest load only where its goodput
carries the load, says "≥ X" when the top of the sweep still meets the SLOs, and warns when
a stream is too short for steady state; every result states its scheduler, runtime,
parallelism per pool and precision; disaggregated pools default to one replica each; pool
sizes and request counts past their limits exit 2 naming the value. The serving engine runs
for real, on the roofline double as its step simulator (small loads: a few seconds each)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from diptych.sim.limits import MAX_REPLICAS
from diptych.sim.serving.metrics import FILL_LIMIT, fill_fraction
from diptych.sim.serving.sweep import GOODPUT_TOLERANCE, max_qps_text

#: llama-3-8b on one h100, short requests; seed 2 draws its first 20 or 40 arrivals 13 % or
#: 4 % faster than the rate (the Poisson draw of few requests strays from its rate; seed 0's
#: 20 are 26 % slower: test_a_draw_slower_than_its_rate_is_named_as_the_cause)
SMALL = ("serve", "--chip", "h100", "--model", "llama-3-8b", "--prompt", 128, "--gen", 8,
         "--seed", 2)




def _json(r) -> dict:
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_fill_fraction_counts_the_arrivals_within_one_fill_time():
    a = np.array([0.5, 0.6, 0.9, 1.49, 1.5, 3.0, 10.0])
    assert fill_fraction(a, 1.0) == pytest.approx(4 / 7)       # before 0.5 + 1.0
    assert fill_fraction(a, 100.0) == 1.0 and fill_fraction(a, 0.0) == 0.0
    assert fill_fraction([], 1.0) == 0.0


def test_a_sweep_whose_top_meets_the_slos_says_the_limit_is_above_it(cli):
    d = _json(cli(*SMALL, "--sweep-qps", "1:3:2", "--requests", 40, "--json"))
    top = d["points"][-1]
    assert top["meets_slo"] and top["sustained"]
    assert top["goodput_rps"] >= (1 - GOODPUT_TOLERANCE) * top["qps"]
    assert d["max_qps_meeting_slo"] == 3 and d["max_qps_is_lower_bound"] is True
    assert d["warnings"] == [] and d["goodput_tolerance"] == GOODPUT_TOLERANCE
    out = cli(*SMALL, "--sweep-qps", "1:3:2", "--requests", 40).output
    assert "highest load meeting the SLOs" in out and "≥ 3 req/s (top of the sweep" in out
    assert max_qps_text(d).startswith("≥ 3 req/s")
    assert "warning" not in out


def test_a_short_stream_at_a_high_rate_is_not_the_highest_load(cli):
    """The issue's case: the top of the sweep meets the SLOs at p99 with too few requests
    for its rate (they all arrive while the batch fills; goodput is a fraction of the load).
    It must not be named the highest load (it was), and both warnings say why."""
    d = _json(cli(*SMALL, "--sweep-qps", "1:200:2", "--requests", 20, "--json"))
    low, top = d["points"]
    assert top["meets_slo"] and not top["sustained"]
    assert top["goodput_rps"] < (1 - GOODPUT_TOLERANCE) * 200
    assert top["fill_fraction"] > FILL_LIMIT and low["fill_fraction"] <= FILL_LIMIT
    assert low["meets_slo"] and low["sustained"]
    assert d["max_qps_meeting_slo"] == 1 and d["max_qps_is_lower_bound"] is False
    w = d["warnings"]
    assert len(w) == 2 and all("at 200 req/s" in x and "1 req/s" not in x for x in w)
    assert "goodput" in w[0] and "too short to reach steady state" in w[1]
    assert max_qps_text(d) == "1 req/s"


def test_a_draw_slower_than_its_rate_is_named_as_the_cause(cli):
    """Seed 0 draws 20 arrivals at ~0.74 of the rate: no point carries its nominal load,
    none is named, and the warning says the draw, not the system, fell short."""
    d = _json(cli(*SMALL[:-2], "--sweep-qps", "1:2:2", "--requests", 20, "--json"))
    assert all(p["meets_slo"] and not p["sustained"] for p in d["points"])
    assert all(p["arrival_rps"] < 0.8 * p["qps"] for p in d["points"])
    assert d["max_qps_meeting_slo"] is None
    assert "the requests drawn (20, 20) arrived at only" in d["warnings"][0]


def test_a_single_run_warns_of_a_short_stream_only_when_it_is_short(cli):
    short = _json(cli(*SMALL, "--qps", 200, "--requests", 20, "--json"))
    assert short["meets_slo"] and short["info"]["fill_fraction"] > FILL_LIMIT
    assert any("too short to reach steady state" in w for w in short["warnings"])
    out = cli(*SMALL, "--qps", 200, "--requests", 20).output
    assert "warning: the request stream is too short to reach steady state" in out
    steady = _json(cli(*SMALL, "--qps", 1, "--requests", 40, "--json"))
    assert steady["meets_slo"] and steady["info"]["fill_fraction"] <= FILL_LIMIT
    assert steady["warnings"] == []


def _pools(d):
    return [(p["role"], p["chip"], p["tp"], p["replicas"], p["chips"]) for p in
            d["info"]["pools"]]


def test_every_result_states_scheduler_runtime_parallelism_and_precision(cli):
    d = _json(cli(*SMALL, "--qps", 2, "--requests", 6, "--replicas", 2, "--kv-dtype", "fp8",
                  "--runtime", "ideal", "--json"))
    i = d["info"]
    assert i["scheduler"] == "continuous" and i["runtime"] == "ideal"
    assert i["scheduling"].startswith("continuous; prompts chunked")
    assert _pools(d) == [("mixed", "h100", 1, 2, 2)]
    assert i["pools"][0]["precision"] == {"weights": "bf16", "activations": "bf16",
                                          "kv": "fp8", "accumulation": "fp32"}
    out = cli(*SMALL, "--qps", 2, "--requests", 6, "--replicas", 2, "--kv-dtype", "fp8",
              "--runtime", "ideal", "--scheduler", "static").output
    for row in ("static batches", "h100, 2 replicas x TP 1 = 2 chips",
                "W/A bf16 · KV fp8 · acc fp32"):
        assert row in out, out
    sw = _json(cli(*SMALL, "--sweep-qps", "1:2:2", "--requests", 6, "--weights-dtype", "fp8",
                   "--json"))
    assert sw["info"]["scheduler"] == "continuous" and sw["info"]["runtime"] == "vllm-v1"
    assert sw["info"]["pools"][0]["precision"]["weights"] == "fp8"
    out = cli(*SMALL, "--sweep-qps", "1:2:2", "--requests", 6, "--weights-dtype",
              "fp8").output
    assert "runtime: vllm-v1" in out and "parallelism: h100, 1 replica x TP 1 = 1 chip" in out
    assert "precision: W fp8 · A/KV bf16 · acc fp32" in out


def test_disaggregated_pools_default_to_one_replica_and_chip_fills_the_unnamed_pool(cli):
    d = _json(cli("serve", "--model", "llama-3-8b", "--prefill-chip", "train-2026",
                  "--decode-chip", "infer-2026", "--prompt", 128, "--gen", 8,
                  "--concurrency", 2, "--requests", 4, "--json"))
    assert _pools(d) == [("prefill", "train-2026", 1, 1, 1), ("decode", "infer-2026", 1, 1, 1)]
    assert d["chips"] == 2 and d["info"]["kv_transfer_bytes"] > 0
    # --chip is the chip of the pool not named; a pool size scales that pool only
    d = _json(cli(*SMALL, "--decode-chip", "infer-2026", "--decode-chips", 2,
                  "--runtime", "ideal", "--concurrency", 2, "--requests", 4, "--json"))
    assert _pools(d) == [("prefill", "h100", 1, 1, 1), ("decode", "infer-2026", 1, 2, 2)]
    d = _json(cli(*SMALL, "--prefill-chips", 2, "--concurrency", 2, "--requests", 4,
                  "--json"))
    assert _pools(d) == [("prefill", "h100", 1, 2, 2), ("decode", "h100", 1, 1, 1)]


@pytest.mark.parametrize("args,match", [
    (("--prefill-chip", "h100", "--decode-chip", "infer-2026"),
     "--chip h100 names no pool"),
    (("--decode-chip", "infer-2026", "--replicas", 2), "--replicas 2 sizes a colocated"),
    (("--decode-chips", 0), "--decode-chips must be a positive integer, not 0"),
    (("--replicas", MAX_REPLICAS + 1), f"--replicas must be a positive integer of at most "
                                       f"4,096 (sim/limits.py), not {MAX_REPLICAS + 1}"),
    (("--prefill-chips", 10**9), "--prefill-chips 1,000,000,000 is 1,000,000,000 replicas"),
    (("--requests", 10**6), "requests must be at most 100,000 (sim/limits.py), not 1,000,000"),
])
def test_bad_pools_and_request_counts_exit_2_naming_the_value(cli, args, match):
    r = cli(*SMALL, "--qps", 1, *args)
    assert r.exit_code == 2, r.output
    assert match in r.output, r.output


def test_a_disaggregated_pool_without_a_chip_exits_2_naming_the_flag(cli):
    r = cli("serve", "--model", "llama-3-8b", "--prefill-chip", "h100", "--qps", 1)
    assert r.exit_code == 2 and "give --decode-chip (or --chip" in r.output, r.output
