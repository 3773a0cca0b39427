"""Energy by component in the outputs (issue 23 item 5): the terminal row of ``run``,
``run --cluster``, ``compare`` (per chip and phase) and ``serve``, their JSON, and the
report's stacked bar (escaped, self-contained), with the engine on a four-layer model."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.sim import energy_parts as EP
from diptych.tools import fmt
from diptych.tools.cli import main
from diptych.tools.dse.energy_chart import energy_bars_svg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("models"), TINY, "tiny.json")


def cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def test_the_shares_read_in_the_components_order_and_leave_out_crumbs():
    parts = EP.of(mac=41.0, sram=12.0, dram=30.0, static=16.96, link=0.04)
    text = fmt.energy_shares(parts)
    assert text == "MAC 41.0 % · SRAM 12.0 % · DRAM 30.0 % · static 17.0 % of 100 J"
    assert fmt.energy_line(parts).startswith("energy by component  MAC 41.0 %")
    assert fmt.energy_shares({}) == fmt.energy_shares(None) == fmt.MISSING


def test_the_stacked_bar_is_escaped_svg_with_a_segment_per_component():
    svg = energy_bars_svg([("a<b & c", EP.of(mac=3.0, static=1.0)), ("none", None)])
    root = ET.fromstring(svg)                      # well-formed, so every text is escaped
    assert "a&lt;b &amp; c" in svg and "<b &" not in svg
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert titles == ["a<b & c: MAC 75.0 % (3 J)", "a<b & c: static 25.0 % (1 J)"]
    widths = [float(r.get("width")) for r in root.iter("{http://www.w3.org/2000/svg}rect")
              if r.find("{http://www.w3.org/2000/svg}title") is not None]
    assert widths[0] == pytest.approx(3 * widths[1])
    assert energy_bars_svg([("x", None)]) == ""


def test_run_prints_a_row_and_its_json_sums(tiny):
    args = ("run", "--chip", "h100", "--model", tiny, "--phase", "decode", "--batch", "4",
            "--prompt", "256", "--gen", "4")
    assert "energy by component" in cli(*args).output
    d = json.loads(cli(*args, "--json").output)
    assert EP.total(d["energy_breakdown_j"]) == pytest.approx(d["energy_j"], rel=1e-9)
    assert all("energy_breakdown_j" in rec for rec in d["layers"])


def test_run_cluster_prints_a_row_and_its_json_sums(tiny):
    args = ("run", "--chip", "h100", "--model", tiny, "--phase", "train", "--batch", "8",
            "--seq", "256", "--cluster", "dgx-h100", "--chips", "4", "--tp", "2", "--pp", "2",
            "--micro-batch", "1")
    out = cli(*args).output
    assert "energy by component" in out and "MAC" in out
    d = json.loads(cli(*args, "--json").stdout)
    assert EP.total(d["energy_breakdown_j"]) == pytest.approx(d["energy_j"], rel=1e-9)
    assert set(d["energy_breakdown"]) == {"compute", "optimizer", "link", "idle_static"}


def test_compare_prints_a_line_per_chip_and_phase_and_reports_a_stacked_bar(tiny, tmp_path):
    args = ("compare", "train-2026", "infer-2026", "--model", tiny, "--train-tp", "1",
            "--train-batch", "2", "--train-seq", "256", "--prompts", "128", "--batches",
            "1,4", "--contexts", "256", "--ref-batch", "4")
    out = cli(*args, "--report", tmp_path / "rep").output
    lines = [x for x in out.splitlines() if "energy by component" in x]
    assert [x.split(":")[0] for x in lines] == [f"{c} {p}" for c in ("train-2026", "infer-2026")
                                                for p in ("train", "prefill", "decode")]
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "<h2>Energy by component</h2>" in page
    svg = page[page.index("<svg", page.index("Energy by component")):]
    svg = svg[:svg.index("</svg>") + 6]
    ET.fromstring(svg)
    assert "train-2026 · decode b=4 ctx=256" in svg
    details = json.loads((tmp_path / "rep" / "compare.json").read_text())
    for run in details["chips"]["infer-2026"]["runs"]:
        assert EP.total(run["energy_breakdown_j"]) == pytest.approx(run["energy_j"], rel=1e-9)
    d = json.loads(cli(*args, "--json").output)
    for chip in d["chips"].values():
        assert set(chip["energy_breakdown_j"]) == {"train", "prefill", "decode"}
        assert all(EP.total(p) > 0 for p in chip["energy_breakdown_j"].values())


def test_serve_prints_a_row_with_the_energy_per_output_token(tiny):
    args = ("serve", "--chip", "h100", "--model", tiny, "--qps", "20", "--requests", "8",
            "--prompt", "200", "--gen", "8")
    out = cli(*args).output
    assert "energy by component" in out and "per output token" in out
    d = json.loads(cli(*args, "--json").output)
    assert EP.total(d["energy_breakdown_j"]) == pytest.approx(d["energy_j"], rel=1e-9)
    assert EP.total(d["energy_breakdown_j_per_token"]) == pytest.approx(1 / d["tokens_per_j"],
                                                                        rel=1e-9)


# ---- the rest of the outputs: batching curves, QPS sweeps, compare.csv, compare --serving ----

def test_the_compact_shares_fit_a_table_cell():
    parts = EP.of(mac=41.0, sram=12.0, dram=30.0, static=16.6, link=0.4)
    assert fmt.energy_shares(parts, compact=True) == "MAC 41 · SRAM 12 · DRAM 30 · static 17 % " \
                                                     "of 100 J"
    assert fmt.energy_shares(None, compact=True) == fmt.MISSING


def test_the_run_batching_curve_has_a_component_cell_per_batch(tiny):
    args = ("run", "--chip", "h100", "--model", tiny, "--phase", "decode", "--batch", "1,8",
            "--prompt", "256", "--gen", "2")
    d = json.loads(cli(*args, "--json").output)
    assert [r["batch"] for r in d["curve"]] == [1, 8]
    for r in d["curve"]:
        assert set(EP.COMPONENTS) <= set(r["energy_breakdown_j"])
        assert EP.total(r["energy_breakdown_j"]) == pytest.approx(r["energy_j"], rel=1e-9)
    out = cli(*args).output
    table = out[out.index("batching curve"):]
    assert "energy by component" in table
    for r in d["curve"]:     # each batch's row ends with its own compact shares and total
        row = next(x for x in table.splitlines() if x.startswith(f"│ {r['batch']} "))
        assert fmt.energy_shares(r["energy_breakdown_j"], compact=True) in row


def test_the_run_cluster_batching_curve_has_a_component_cell_per_batch(tiny):
    args = ("run", "--chip", "h100", "--model", tiny, "--phase", "train", "--batch", "4,8",
            "--seq", "256", "--cluster", "dgx-h100", "--chips", "2", "--tp", "2",
            "--micro-batch", "1")
    out = cli(*args).output
    table = out[out.index("batching curve"):]
    rows = [x for x in table.splitlines() if x.startswith(("│ 4 ", "│ 8 "))]
    assert len(rows) == 2 and all("% of " in x and "MAC" in x for x in rows)


def test_serve_sweep_points_carry_the_components_and_the_table_shows_them(tiny):
    args = ("serve", "--chip", "h100", "--model", tiny, "--sweep-qps", "10:40:2",
            "--requests", "8", "--prompt", "200", "--gen", "8")
    d = json.loads(cli(*args, "--json").output)
    assert len(d["points"]) == 2
    for p in d["points"]:
        assert set(p["energy_breakdown_j"]) == set(EP.COMPONENTS)
        assert EP.total(p["energy_breakdown_j"]) == pytest.approx(p["energy_j"], rel=1e-9)
        assert p["energy_breakdown_j"]["mac"] > 0 and p["energy_breakdown_j"]["dram"] > 0
        assert EP.total(p["energy_breakdown_j_per_token"]) == pytest.approx(
            1 / p["tokens_per_j"], rel=1e-9)
    out = cli(*args).output
    assert "energy by component, per output token" in out
    for p in d["points"]:
        assert fmt.energy_shares(p["energy_breakdown_j_per_token"], compact=True) in out


def test_compare_csv_has_a_column_per_component_beside_the_energy(tiny, tmp_path):
    import csv

    cli("compare", "train-2026", "infer-2026", "--model", tiny, "--train-tp", "1",
        "--train-batch", "2", "--train-seq", "256", "--prompts", "128", "--batches", "1,4",
        "--contexts", "256", "--ref-batch", "4", "--report", tmp_path / "rep")
    with open(tmp_path / "rep" / "compare.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    cols = list(rows[0])
    at = cols.index("energy_j_per_token")
    assert cols[at + 1:at + 1 + len(EP.COLUMNS)] == list(EP.COLUMNS)
    assert cols[cols.index("energy_j") + 1] == "energy_j_per_token"     # old columns kept
    assert len(rows) == 2 * (1 + 1 + 2)                    # train, one prompt, two batches
    for r in rows:
        assert sum(float(r[c]) for c in EP.COLUMNS) == pytest.approx(float(r["energy_j"]),
                                                                     rel=1e-9)
        assert float(r["energy_mac_j"]) > 0 and float(r["energy_static_j"]) > 0
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "energy_mac_j" not in page and "energy mac" not in page    # the CSV's alone


def test_compare_serving_carries_the_components_in_json_terminal_and_report(
        tiny, tmp_path, monkeypatch):
    import diptych.sim.serving.study as study_mod

    small = study_mod.ServingSettings(duration_s=1.0, min_requests=8, rel_tol=0.5,
                                      prompt="128", gen="8", qps_start=64.0, max_doublings=1)
    real = study_mod.serving_study
    monkeypatch.setattr(study_mod, "serving_study",
                        lambda chips, model, settings=None, **kw: real(chips, model, small, **kw))
    args = ("compare", "train-2026", "infer-2026", "--model", tiny, "--train-tp", "1",
            "--train-batch", "2", "--train-seq", "256", "--prompts", "128", "--batches", "4",
            "--contexts", "256", "--ref-batch", "4", "--serving", "--no-search")
    d = json.loads(cli(*args, "--json").output)["serving"]
    entries = list(d["colocated"].values()) + d["disaggregated"]
    assert len(entries) == 4
    for e in entries:
        assert set(e["energy_breakdown_j"]) == set(EP.COMPONENTS)
        assert EP.total(e["energy_breakdown_j"]) == pytest.approx(e["energy_j"], rel=1e-9)
        assert EP.total(e["energy_breakdown_j_per_token"]) == pytest.approx(
            1 / e["tokens_per_j"], rel=1e-9)
        assert e["energy_breakdown_j"]["mac"] > 0
    assert any(e["energy_breakdown_j"]["link"] > 0 for e in d["disaggregated"])  # KV moves
    out = cli(*args, "--report", tmp_path / "rep").output
    lines = [x for x in out.splitlines()
             if x.startswith("serving ") and x.endswith(" per output token")]
    assert [x.split(":")[0] for x in lines] == [
        "serving train-2026 (2 x tp 1)", "serving infer-2026 (2 x tp 1)",
        "serving prefill train-2026 + decode infer-2026",
        "serving prefill infer-2026 + decode train-2026"]
    for x, e in zip(lines, entries):
        assert x.endswith(fmt.energy_line(e["energy_breakdown_j_per_token"])
                          + " per output token")
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "<h2>Serving under SLOs: energy by component</h2>" in page
    svg = page[page.index("<svg", page.index("Serving under SLOs")):]
    ET.fromstring(svg[:svg.index("</svg>") + 6])
    assert "prefill train-2026 + decode infer-2026" in svg
    details = json.loads((tmp_path / "rep" / "compare.json").read_text())
    assert details["serving"]["colocated"]["infer-2026"]["energy_breakdown_j"] == \
        d["colocated"]["infer-2026"]["energy_breakdown_j"]
