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
