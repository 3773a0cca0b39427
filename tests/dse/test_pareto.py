"""Pareto fronts: the fast scan against the O(n²) definition; metric selection; the plot."""

from __future__ import annotations

import concurrent.futures as cf
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.tools.cli import main
from diptych.tools.dse.pareto import (default_sense, pareto_front, pareto_front_naive,
                                      select_xy)
from diptych.tools.dse.plots import pareto_plot
from diptych.tools.dse.spec import parse_spec
from diptych.tools.dse.sweep import run_sweep

sys.path.insert(0, str(Path(__file__).parent))
import fake_eval  # noqa: E402

values = st.one_of(st.integers(0, 6).map(float), st.floats(0, 100, allow_nan=False),
                   st.none())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(values, values), max_size=40),
       st.sampled_from(["min", "max"]), st.sampled_from(["min", "max"]))
def test_front_matches_definition(pts, sx, sy):
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    assert pareto_front(xs, ys, sx, sy) == pareto_front_naive(xs, ys, sx, sy)


def test_front_small_example():
    # (area, throughput): 1 dominates 3 (smaller and faster); 0 and 1 and 2 trade off
    xs = [100, 200, 300, 250]
    ys = [10, 30, 40, 25]
    assert pareto_front(xs, ys, "min", "max") == [0, 1, 2]
    assert pareto_front(xs, ys, "max", "max") == [2]


def test_default_sense():
    assert default_sense("area_mm2") == "min"
    assert default_sense("decode_tokens_per_s") == "max"
    assert default_sense("tpot_s") == "min"
    assert default_sense("energy_j_per_token") == "min"
    assert default_sense("tokens_per_j") == "max"
    assert default_sense("mfu") == "max"


def test_plot_carries_axes_and_front():
    xs, ys = [100, 200, 300, 250], [10, 30, 40, 25]
    fig = pareto_plot(xs, ys, x_label="area_mm2", y_label="decode_tokens_per_s")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "area_mm2" and ax.get_ylabel() == "decode_tokens_per_s"
    (scatter,) = [c for c in ax.collections if c.get_label() == "points"]
    assert sorted(map(tuple, scatter.get_offsets().tolist())) == sorted(zip(xs, ys))
    (line,) = [ln for ln in ax.lines if ln.get_label() == "Pareto front"]
    assert list(line.get_xdata()) == [100, 200, 300]
    assert list(line.get_ydata()) == [10, 30, 40]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("pareto") / "res"
    s = parse_spec({"base": "infer-2026", "chip": {"array_dim": [32, 64, 128, 256],
                                                   "hbm_stacks": [4, 8]},
                    "workload": {"model": "llama-3-8b", "phase": ["prefill", "decode"],
                                 "batch": [1, 13]}})
    run_sweep(s, out, evaluate=fake_eval.toy_eval, executor=cf.ThreadPoolExecutor(2),
              progress=False)
    return out


def test_select_phase_prefixed_metrics(results):
    from diptych.tools.dse.sweep import read_results

    rows = read_results(results).to_pylist()
    xs, ys, _ = select_xy(rows, "area_mm2", "decode_tokens_per_s")
    decode_ok = [r for r in rows if r["phase"] == "decode" and not r["error"]]
    assert sorted(zip(xs, ys)) == sorted((r["area_mm2"], r["tokens_per_s"]) for r in decode_ok)
    # across phases: rows matched on chip and the other workload columns
    xs, ys, keys = select_xy(rows, "prefill_tokens_per_s", "decode_tokens_per_s")
    assert len(xs) == 8
    for x, y, chip in zip(xs, ys, keys):
        pre = [r for r in rows if r["chip"] == chip and r["phase"] == "prefill" and not r["error"]]
        dec = [r for r in rows if r["chip"] == chip and r["phase"] == "decode" and not r["error"]]
        assert (x, y) == (pre[0]["tokens_per_s"], dec[0]["tokens_per_s"])
    with pytest.raises(ValueError, match="unknown metric 'decode_speed'"):
        select_xy(rows, "area_mm2", "decode_speed")
    with pytest.raises(ValueError, match="--where nope: no such column"):
        select_xy(rows, "area_mm2", "tokens_per_s", {"nope": "1"})
    with pytest.raises(ValueError, match="no row has numeric values"):
        select_xy(rows, "area_mm2", "tokens_per_s", {"batch": "13"})


def test_cli(results, tmp_path):
    out = tmp_path / "p.svg"
    r = CliRunner().invoke(main, ["pareto", str(results), "--x", "area_mm2", "--y",
                                  "decode_tokens_per_s", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "Pareto front (area_mm2 min, decode_tokens_per_s max)" in r.output
    assert out.exists()
    r = CliRunner().invoke(main, ["pareto", str(tmp_path / "none"), "-o", str(out)])
    assert r.exit_code == 2 and "no such results directory" in r.output
