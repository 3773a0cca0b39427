"""Request streams: length distributions, arrival processes, traces and their errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diptych.sim.serving.requests import (LengthDist, load_trace, open_loop_arrivals,
                                          parse_length)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trace-small.csv"


@pytest.mark.parametrize("text,kind,mean", [
    ("1000", "fixed", 1000), ("fixed:64", "fixed", 64), ("uniform:lo=10,hi=30", "uniform", 20),
    ("normal:mean=500,std=50", "normal", 500), ("lognormal:mean=1000,sigma=0.5", "lognormal",
                                                1000)])
def test_parse_length_forms(text, kind, mean):
    d = parse_length(text)
    assert d.kind == kind and d.mean == mean


@pytest.mark.parametrize("text,match", [
    ("0", "positive"), ("abc", "one of"), ("uniform:lo=5", "exactly lo, hi"),
    ("uniform:lo=9,hi=3", "hi"), ("lognormal:mean=-1,sigma=1", "mean must be a positive"),
    ("normal:mean=10,std=-1", "std must be >= 0"), ("lognormal:mean=10,sigma", "key=value"),
    ("fixed:2.5", "integer")])
def test_parse_length_errors_name_the_value(text, match):
    with pytest.raises(ValueError, match=match):
        parse_length(text, "--prompt")


def test_lognormal_mean_and_sigma_are_those_asked_for():
    rng = np.random.default_rng(1)
    x = parse_length("lognormal:mean=1000,sigma=0.5").sample(rng, 200_000)
    assert x.mean() == pytest.approx(1000, rel=0.01)
    assert np.log(x).std() == pytest.approx(0.5, rel=0.02)
    assert x.min() >= 1 and x.dtype == np.int64


def test_uniform_is_inclusive_and_normal_is_clipped_at_one():
    rng = np.random.default_rng(2)
    u = LengthDist("uniform", 3, 5).sample(rng, 10_000)
    assert set(u.tolist()) == {3, 4, 5}
    n = LengthDist("normal", 2, 10).sample(rng, 10_000)
    assert n.min() == 1


def test_poisson_and_gamma_arrivals_have_the_rate_and_burstiness():
    rng = np.random.default_rng(3)
    t = open_loop_arrivals(rng, 5.0, count=100_000)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.2, rel=0.01)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)      # exponential: CV 1
    g = np.diff(open_loop_arrivals(rng, 5.0, count=100_000, burstiness=0.25))
    assert g.mean() == pytest.approx(0.2, rel=0.02)
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.03)            # CV = 1/sqrt(shape)


def test_duration_bounds_the_arrivals():
    t = open_loop_arrivals(np.random.default_rng(4), 50.0, duration_s=10.0)
    assert t.max() < 10.0 and len(t) == pytest.approx(500, rel=0.15)


@pytest.mark.parametrize("rate", [0, -1.0, float("nan"), float("inf")])
def test_bad_rates_are_rejected(rate):
    with pytest.raises(ValueError, match="qps must be a positive"):
        open_loop_arrivals(np.random.default_rng(0), rate, count=3)


def test_example_trace_loads_sorted():
    tr = load_trace(EXAMPLE)
    assert len(tr) == 120
    assert np.all(np.diff(tr.arrival_s) >= 0)
    assert tr.prompt_tokens.min() >= 1 and tr.output_tokens.min() >= 1


@pytest.mark.parametrize("body,match", [
    ("", "holds no requests"),
    ("arrival_s,prompt_tokens,output_tokens\n", "holds no requests"),
    ("arrival,prompt,output\n1,2,3\n", "missing arrival_s"),
    ("arrival_s,prompt_tokens,output_tokens\n0.5,10,4\nx,10,4\n", ":3: arrival_s"),
    ("arrival_s,prompt_tokens,output_tokens\n0.5,10\n", ":2: expected 3 fields"),
    ("arrival_s,prompt_tokens,output_tokens\n0.5,0,4\n", ":2: prompt_tokens must be an integer"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,3,4\n", ":2: arrival_s must be a number from 0"),
    ("arrival_s,prompt_tokens,output_tokens\n1,3,2.5\n", ":2: output_tokens"),
    # issue 22 item 5: bounds, duplicate columns, oversized fields
    ("arrival_s,prompt_tokens,output_tokens\n1e300,3,4\n", ":2: arrival_s must be a number from 0"),
    ("arrival_s,prompt_tokens,output_tokens\n1,100000000000000000000000000000,4\n",
     ":2: prompt_tokens must be an integer from 1 to 16,777,216"),
    ("arrival_s,prompt_tokens,output_tokens,prompt_tokens\n1,3,4,5\n",
     ":1: the header names 'prompt_tokens' more than once"),
    ("arrival_s,prompt_tokens,output_tokens\n1,3," + "9" * 200_000 + "\n", ":2: invalid CSV")])
def test_bad_traces_name_file_and_line(tmp_path, body, match):
    p = tmp_path / "t.csv"
    p.write_text(body)
    with pytest.raises(ValueError, match=match) as e:
        load_trace(p)
    assert str(p) in str(e.value)


def test_trace_reader_refuses_fifos_and_undecodable_bytes(tmp_path):
    """The trace goes through the checked reader (issue 22 item 5): a FIFO is refused before
    it is opened (reading would block), undecodable bytes name the file."""
    import os
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file") as e:
        load_trace(fifo)
    assert str(fifo) in str(e.value)
    bad = tmp_path / "t.csv"
    bad.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n1,2,\xff\n")
    with pytest.raises(ValueError, match="not UTF-8") as e:
        load_trace(bad)
    assert str(bad) in str(e.value)
