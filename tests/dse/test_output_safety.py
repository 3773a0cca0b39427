"""Outputs safe to open: CSV cells spreadsheets would run as formulas are quoted, `$` in user
strings stays literal in plots, JSON output is always valid JSON."""

from __future__ import annotations

import csv
import json
import math
import sys
import warnings
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.tools.cli import main
from diptych.tools.dse.compare import CompareSettings, compare
from diptych.tools.dse.csvsafe import safe_cell
from diptych.tools.dse.report import write_report
from diptych.tools.jsonout import dumps

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import fake_eval  # noqa: E402

HOSTILE = "=cmd|' /C calc'!A0 $\\frac{a}{$"


@pytest.mark.parametrize("cell, shown", [
    ("=1+2", "'=1+2"), ("+1+2", "'+1+2"), ("-x", "'-x"), ("@SUM(A1)", "'@SUM(A1)"),
    ("\tx", "'\tx"), ("\rx", "'\rx"), ("-1.5", "-1.5"), ("+3", "+3"), ("1e-3", "1e-3"),
    ("a=b", "a=b"), ("", ""), (-1.5, -1.5), (None, None), (True, True),
])
def test_safe_cell(cell, shown):
    assert safe_cell(cell) == shown


def hostile_chip(tmp_path) -> Path:
    text = resources.files("diptych.arch.chips").joinpath("infer-2026.toml").read_text()
    p = tmp_path / "hostile.toml"
    p.write_text(text.replace('name = "infer-2026"', f"name = {json.dumps(HOSTILE)}"))
    return p


def test_compare_report_csv_and_plots_with_a_hostile_chip_name(tmp_path):
    settings = CompareSettings(prompts=(512,), batches=(1,), contexts=(1024,), ref_batch=1,
                               train_seq=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = compare([str(hostile_chip(tmp_path))], "llama-3-8b", settings,
                      run=fake_eval.roofline_run)
    files = write_report(cmp, tmp_path / "rep")  # the plots render: no mathtext error
    with open(tmp_path / "rep" / "compare.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {r["chip"] for r in rows} == {"'" + HOSTILE}
    assert all(not v.startswith(("=", "+", "@")) for r in rows for v in r.values())
    svg = (tmp_path / "rep" / "floorplan.svg").read_text()
    assert len(files) == 6 and "frac" in svg


def test_plot_labels_keep_dollars_literal(tmp_path):
    from diptych.arch import load_chip_file
    from diptych.tools.dse.floorplan import draw_floorplans, save_figure
    from diptych.tools.dse.plots import pareto_plot

    fig = pareto_plot([1.0, 2.0], [2.0, 1.0], x_label="cost $ per $unit", y_label="$y$",
                      sense_x="min", sense_y="min", annotations=["$a$", "b"])
    ax = fig.axes[0]
    assert ax.get_xlabel() == r"cost \$ per \$unit" and ax.get_ylabel() == r"\$y\$"
    save_figure(fig, tmp_path / "p.svg")
    fig = draw_floorplans([load_chip_file(hostile_chip(tmp_path))])
    assert fig.axes[0].get_title().startswith(r"=cmd|' /C calc'!A0 \$\frac{a}{\$:")
    save_figure(fig, tmp_path / "f.svg")


def test_sweep_csv_quotes_formula_cells(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(f"""base = "{hostile_chip(tmp_path)}"
[chip]
array_dim = [64]
[workload]
model = "llama-3-8b"
phase = ["prefill", "decode"]
""")
    out_csv = tmp_path / "rows.csv"
    r = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "1",
                                  "--evaluator", "fake_eval:late_metric_eval", "--no-progress",
                                  "--csv", str(out_csv)])
    assert r.exit_code == 0, r.output
    with open(out_csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2
    for row in rows:
        assert row["label"].startswith("'=HYPERLINK(")
        assert row["chip"].startswith("'=cmd|")
        assert float(row["seconds"]) > 0  # numbers stay numbers


def test_json_output_never_carries_nan_or_infinity():
    text = dumps({"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": {"d": 2}})
    assert json.loads(text) == {"a": None, "b": [None, None, 1.5], "c": {"d": 2}}
    for token in ("NaN", "Infinity"):
        assert token not in text


def test_cli_json_is_strict_json():
    r = CliRunner().invoke(main, ["gemm", "64", "64", "64", "--chip", "tpu-v1", "--json"])
    assert r.exit_code == 0, r.output
    json.loads(r.output, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
    r = CliRunner().invoke(main, ["chips", "show", "tpu-v4", "--json"])
    json.loads(r.output, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
