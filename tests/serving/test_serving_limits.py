"""Bounds on the serving, plan and sweep surfaces (issue 22 item 1, docs/limits.md): every size,
rate and count past sim/limits.py is refused before work starts, naming the flag, the value
and the limit."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from diptych.arch.runtime import _from_dict
from diptych.sim.limits import (BURSTINESS_RANGE, MAX_ARRIVAL_S, MAX_REFINE, MAX_REQUESTS,
                                MAX_SWEEP_POINTS, QPS_RANGE)
from diptych.sim.serving.requests import Load, draw_requests, open_loop_arrivals
from diptych.sim.serving.sweep import parse_sweep
from diptych.tools.cli import main
from diptych.tools.dse.pool import local_workers


@pytest.mark.parametrize("kw,match", [
    (dict(qps=QPS_RANGE[1] * 10), "qps must be between"),
    (dict(qps=QPS_RANGE[0] / 10), "qps must be between"),
    (dict(qps=1.0, requests=MAX_REQUESTS + 1), "requests must be at most 100,000"),
    (dict(concurrency=MAX_REQUESTS + 1), "concurrency must be at most"),
    # implied counts: 64 requests per client, qps x duration
    (dict(concurrency=MAX_REQUESTS // 64 + 1), "64 requests per client"),
    (dict(qps=100.0, duration_s=MAX_REQUESTS / 100.0 * 2), "--qps 100 over --duration"),
    (dict(qps=1.0, duration_s=MAX_ARRIVAL_S * 2), "duration must be at most"),
    # the gaps' gamma shape: 5e-324 drew NaN gaps ("no request completed" and a numpy
    # warning), 1e-300 and 1e308 ran (the fuzz corpus found them)
    (dict(qps=1.0, burstiness=5e-324), "burstiness must be a number from 0.001 to 1000"),
    (dict(qps=1.0, burstiness=1e-300), "burstiness must be a number from 0.001 to 1000"),
    (dict(qps=1.0, burstiness=1e308), "burstiness must be a number from 0.001 to 1000"),
    (dict(qps=1.0, burstiness=BURSTINESS_RANGE[1] * 1.01), "burstiness must be a number"),
])
def test_loads_past_the_limits_are_refused_at_construction(kw, match):
    with pytest.raises(ValueError, match=match):
        Load(**kw)


def test_within_the_limits_loads_are_built():
    Load(qps=QPS_RANGE[0], requests=5)
    for b in BURSTINESS_RANGE:         # both ends draw finite, increasing arrivals
        t = open_loop_arrivals(np.random.default_rng(0), 10.0, count=1000, burstiness=b)
        assert np.isfinite(t).all() and (np.diff(t) >= 0).all()
    Load(concurrency=MAX_REQUESTS // 64)
    Load(qps=100.0, duration_s=MAX_REQUESTS / 100.0 * 0.5)


def test_arrivals_past_the_clock_horizon_are_refused():
    """At 1e-6 req/s, 20 Poisson arrivals reach ~2e7 s, past the 1e7 s over which a float64
    clock keeps ~2 ns resolution: refused, where before TTFT and TPOT rounded to 0."""
    with pytest.raises(ValueError, match="later than the 1e\\+07 s"):
        open_loop_arrivals(np.random.default_rng(0), QPS_RANGE[0], count=20)
    t = open_loop_arrivals(np.random.default_rng(0), 1.0, count=20)
    assert t[-1] < MAX_ARRIVAL_S


def test_trace_longer_than_the_request_limit_is_refused(tmp_path):
    p = tmp_path / "t.csv"
    rows = "\n".join(f"{i * 1e-3},8,4" for i in range(MAX_REQUESTS + 1))
    p.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows + "\n")
    with pytest.raises(ValueError, match="more than the 100,000"):
        draw_requests(Load(trace=str(p)), 4096, np.random.default_rng(0))
    # --requests keeps a long trace within the limit
    arr, pr, out, _ = draw_requests(Load(trace=str(p), requests=10), 4096,
                                    np.random.default_rng(0))
    assert len(arr) == 10


@pytest.mark.parametrize("text,match", [
    (f"1:2:{MAX_SWEEP_POINTS + 1}", "at most 100 rates"),
    ("1e-300:1:3", "LO must be between"),
    ("1:1e300:3", "HI must be between"),
])
def test_sweep_qps_is_bounded(text, match):
    with pytest.raises(ValueError, match=match):
        parse_sweep(text)
    assert parse_sweep(f"1:2:{MAX_SWEEP_POINTS}") == (1.0, 2.0, MAX_SWEEP_POINTS)


@pytest.mark.parametrize("field,value", [
    ("step_host_device_fraction", 1e308), ("step_host_fixed_us", 1e308),
    ("step_host_per_seq_us", 1e5), ("request_in_us", 1e8), ("token_out_us", 1e7),
    ("tokenize_us_per_token", 1e5), ("step_exposed_us", 1e7)])
def test_runtime_profile_fields_have_upper_bounds(field, value):
    """A profile whose host time is absurd (1e308 us per step) is refused when loaded, where
    it used to give a 1e304 s run or null metrics with exit 0."""
    with pytest.raises(ValueError, match=field):
        _from_dict({"name": "x", field: value}, "x.toml")


def test_plan_refine_and_top_are_bounded():
    r = CliRunner().invoke(main, ["plan", "--chip", "h100", "--model", "llama-3-8b",
                                  "--cluster", "dgx-h100", "--chips", "8", "--batch", "8",
                                  "--seq", "2048", "--refine", str(MAX_REFINE + 1)])
    assert r.exit_code == 2 and "--refine must be at most 256" in r.output


def test_sweep_workers_are_capped(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    told = []
    assert local_workers(10_000, 1) == 1                       # one point, one worker
    assert local_workers(10_000, 100, log=told.append) == 4     # capped at the CPUs
    assert told and "capped at this machine's 4 CPUs" in told[0]
    assert local_workers(10_000, 100, oversubscribe=True) == 100
    assert local_workers(None, 100) == 4 and local_workers(2, 100) == 2


def test_serve_cli_refuses_before_running():
    r = CliRunner().invoke(main, ["serve", "--chip", "h100", "--model", "llama-3-8b",
                                  "--qps", "1", "--requests", "1000000000"])
    assert r.exit_code == 2 and "requests must be at most 100,000" in r.output
