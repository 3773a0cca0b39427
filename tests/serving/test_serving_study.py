"""The serving study of `diptych compare --serving` (roofline double for the engine)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from roofline_double import roofline

import diptych.tools.dse.compare as compare_mod
import diptych.sim.run.node as run_mod
from diptych.sim.serving.serve import StepTimerCache, serve
from diptych.sim.serving.study import (ServingSettings, max_qps, render_serving_table,
                                        serving_study)
from diptych.tools.cli import main

SMALL = ServingSettings(duration_s=2.0, rel_tol=0.5, prompt="lognormal:mean=512,sigma=0.5",
                        gen="lognormal:mean=128,sigma=0.5", qps_start=128.0)


@pytest.fixture(scope="module")
def study():
    return serving_study(["train-2026", "infer-2026"], "llama-3-8b", SMALL, simulate=roofline)


def test_structure_and_pairs(study):
    assert set(study["colocated"]) == {"train-2026", "infer-2026"}
    for d in study["colocated"].values():
        assert d["chips"] == 2 and d["tp"] * d["replicas"] == 2
        assert d["max_qps"] > 0 and d["tokens_per_j"] > 0
        assert d["ttft_p99_s"] <= SMALL.slo_ttft_s and d["tpot_p99_s"] <= SMALL.slo_tpot_s
        # the run at that load by component (the roofline double's energy is all `other`;
        # the engine's components: tests/tools/test_energy_output.py)
        assert sum(d["energy_breakdown_j"].values()) == pytest.approx(d["energy_j"], rel=1e-9)
        assert d["energy_breakdown_j"]["other"] > 0
    pairs = {(d["prefill"], d["decode"]) for d in study["disaggregated"]}
    assert pairs == {("train-2026", "infer-2026"), ("infer-2026", "train-2026")}
    assert all(d["chips"] == 2 and d["max_qps"] for d in study["disaggregated"])
    # every serving result states scheduler, runtime, parallelism and precision per pool
    # (issue 24 item 5), as serve's own info does for the run at that load
    for name, d in study["colocated"].items():
        su = d["setup"]
        assert su["scheduler"] == "continuous" and su["runtime"] and su["scheduling"]
        assert [(p["chip"], p["tp"] * p["replicas"], p["ep"]) for p in su["pools"]] \
            == [(name, 2, 1)]
        assert set(su["pools"][0]["precision"]) == {"weights", "activations", "kv",
                                                    "accumulation"}
    assert all([p["role"] for p in d["setup"]["pools"]] == ["prefill", "decode"]
               for d in study["disaggregated"])
    json.dumps(study)                       # JSON-ready


def test_max_qps_is_a_load_that_meets_the_slo_and_twice_it_does_not(study):
    from diptych.sim.serving.serve import colocated
    d = study["colocated"]["infer-2026"]
    dep = colocated("infer-2026", "llama-3-8b", replicas=d["replicas"], tp=d["tp"])
    oc = StepTimerCache("grid", roofline)
    assert serve(dep, SMALL.load(d["max_qps"]), SMALL.config(), oracles=oc).meets_slo
    assert not serve(dep, SMALL.load(2 * d["max_qps"]), SMALL.config(), oracles=oc).meets_slo


def _fill(r) -> float:
    """The share of a run's completed requests that arrived within one mean end-to-end
    latency of the first arrival, computed from the requests themselves."""
    done = [q for q in r.reqs if q.finish_t >= 0]
    first = min(q.arrival for q in done)
    w = sum(q.finish_t - q.arrival for q in done) / len(done)
    return sum(q.arrival < first + w for q in done) / len(done)


def test_the_run_at_the_maximum_says_how_it_arrived_and_whether_it_was_steady(study):
    """Two seconds of arrivals at over a hundred requests per second: the SLOs are met while
    the system is still filling, and the entry says so rather than hiding it."""
    from diptych.sim.serving.serve import colocated
    d = study["colocated"]["infer-2026"]
    dep = colocated("infer-2026", "llama-3-8b", replicas=d["replicas"], tp=d["tp"])
    r = serve(dep, SMALL.load(d["max_qps"]), SMALL.config(),
              oracles=StepTimerCache("grid", roofline))
    assert d["fill_fraction"] == pytest.approx(_fill(r))
    assert bool(d["warnings"]) == (_fill(r) > 0.10)
    assert d["warnings"] and "steady state" in d["warnings"][0]
    done = [q for q in r.reqs if q.finish_t >= 0]
    assert d["arrival_rps"] == pytest.approx(len(done) / max(q.arrival for q in done))
    assert d["max_qps_is_lower_bound"] is False


def test_a_search_whose_every_doubling_meets_the_slos_reports_a_lower_bound():
    from rich.console import Console
    from diptych.sim.serving.serve import colocated
    s = ServingSettings(duration_s=60.0, qps_start=1.0, max_doublings=0)
    r = max_qps(colocated("infer-2026", "llama-3-8b"), s, StepTimerCache("grid", roofline))
    assert r["max_qps"] == 1.0 and r["max_qps_is_lower_bound"] is True
    one = {"model": "m", "settings": dict(s.__dict__), "disaggregated": [],
           "colocated": {"infer-2026": {"chips": 1, "tp": 1, "replicas": 1, **r}}}
    con = Console(record=True, width=200)
    con.print(render_serving_table(one))
    assert "≥ 1" in con.export_text()


def test_a_model_that_does_not_fit_gives_an_error_entry():
    s = serving_study(["tpu-v5e"], "llama-3-70b", SMALL, simulate=roofline)
    assert "error" in s["colocated"]["tpu-v5e"]


def test_no_load_meets_impossible_slos():
    from diptych.sim.serving.serve import colocated
    s = ServingSettings(duration_s=2.0, slo_tpot_s=1e-6, max_doublings=2)
    r = max_qps(colocated("h100", "llama-3-8b"), s, StepTimerCache("grid", roofline))
    assert r["max_qps"] is None and "no load" in r["note"]


def test_compare_cli_serving_section(monkeypatch, study):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dse"))
    import fake_eval

    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    monkeypatch.setattr(compare_mod, "_default_run", fake_eval.roofline_run)
    import diptych.sim.serving.study as study_mod
    seen = {}

    def fake_study(chips, model, settings=None, **kw):     # the study itself is tested above
        seen.update(chips=chips, model=model, serving_chips=settings.chips)
        return study
    monkeypatch.setattr(study_mod, "serving_study", fake_study)
    r = CliRunner().invoke(main, ["compare", "train-2026", "infer-2026", "--model",
                                  "llama-3-8b", "--prompts", "512", "--batches", "1,8",
                                  "--contexts", "1024", "--ref-batch", "8", "--train-tp", "1",
                                  "--train-batch", "2", "--train-seq", "512", "--serving",
                                  "--no-search", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert "chips" in d and d["serving"] == json.loads(json.dumps(study))
    assert seen == {"chips": ["train-2026", "infer-2026"], "model": "llama-3-8b",
                    "serving_chips": 2}             # --no-search's default deployment size
    r = CliRunner().invoke(main, ["compare", "train-2026", "infer-2026", "--model",
                                  "llama-3-8b", "--prompts", "512", "--batches", "1,8",
                                  "--contexts", "1024", "--ref-batch", "8", "--train-tp", "1",
                                  "--train-batch", "2", "--train-seq", "512", "--serving",
                                  "--no-search"])
    assert r.exit_code == 0, r.output
    assert "serving under" in r.output and "QPS" in r.output
    for name in ("train-2026", "infer-2026"):         # each deployment's setup, stated
        assert f"serving {name} (" in r.output and "runtime: " in r.output
        assert "precision: " in r.output and "scheduler: continuous" in r.output
