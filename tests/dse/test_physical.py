"""Physical-design columns in sweeps (feasible, the reason, cost, NoC) and cost as a Pareto
axis; cost in `run --json` and in the compare report."""

from __future__ import annotations

import concurrent.futures as cf
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.arch import load_chip
from diptych.arch.cost import chip_cost
from diptych.tools.cli import main
from diptych.tools.dse.pareto import default_sense, select_xy
from diptych.tools.dse.spec import parse_spec
from diptych.tools.dse.sweep import read_results, run_sweep

sys.path.insert(0, str(Path(__file__).parent))
import fake_eval  # noqa: E402

SPEC = {
    "base": "train-2026",
    "chip": {"hbm_stacks": [4, 6, 8], "cores": [8, 12]},
    "workload": {"model": "llama-3-8b", "phase": "decode", "batch": 8, "prompt": 1024},
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    spec = parse_spec(SPEC)
    with cf.ThreadPoolExecutor(2) as ex:
        run_sweep(spec, out, evaluate=fake_eval.roofline_eval, executor=ex, progress=False)
    return read_results(out).to_pylist(), spec


def test_infeasible_points_are_rows_with_the_reason_not_errors(rows):
    rows, spec = rows
    assert len(rows) == 6 and all(r["error"] is None for r in rows)
    for r in rows:
        chip = spec.build_chip({"hbm_stacks": r["hbm_stacks"], "cores": r["cores"]})
        if r["hbm_stacks"] == 8 and r["cores"] == 8:  # 8 PHYs on two long edges ≤ 33 mm
            assert r["feasible"] is False and "8 DRAM PHYs" in r["infeasible_reason"]
        if r["cores"] == 12:                      # 12 of train-2026's cores: over the reticle
            assert r["feasible"] is False and "reticle" in r["infeasible_reason"]
        if r["hbm_stacks"] < 8 and r["cores"] == 8:
            assert r["feasible"] is True and r["infeasible_reason"] is None
        assert r["cost_usd"] == pytest.approx(chip_cost(chip).total_usd)
        assert r["usd_per_mtok"] > 0 and r["noc_dram_cap_bytes_per_s"] > 0
        assert r["tokens_per_s_per_usd"] == pytest.approx(r["tokens_per_s"] / r["cost_usd"])


def test_cost_is_a_pareto_axis_and_feasibility_a_filter(rows):
    rows, _ = rows
    assert default_sense("usd_per_mtok") == "min"
    assert default_sense("cost_usd") == "min"
    assert default_sense("tokens_per_s_per_usd") == "max"
    xs, ys, _ = select_xy(rows, "cost_usd", "tokens_per_s", where={"feasible": "True"})
    assert len(xs) == 2


def test_run_json_carries_cost(monkeypatch):
    import diptych.sim.run.node as run_mod
    from roofline_double import roofline

    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    r = CliRunner().invoke(main, ["run", "--chip", "infer-2026", "--model", "llama-3-8b",
                                  "--phase", "decode", "--batch", "8", "--prompt", "1024",
                                  "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["cost_usd"] == pytest.approx(chip_cost(load_chip("infer-2026")).total_usd)
    assert d["usd_per_mtok"] > 0
    from diptych.arch.cost import cost_metrics
    assert d["tokens_per_s_per_usd"] == cost_metrics(load_chip("infer-2026"), d)[
        "tokens_per_s_per_usd"]


def test_compare_report_has_cost_warnings_and_provenance(tmp_path):
    import warnings

    from diptych.tools import __version__
    from diptych.tools.dse.compare import CompareSettings, compare
    from diptych.tools.dse.report import write_report

    s = CompareSettings(prompts=(512,), batches=(1, 8), contexts=(1024,), ref_batch=8,
                        train_seq=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = compare(["train-2026", "infer-2026", "examples/chips/infer-2026-1die.toml"],
                      "llama-3-8b", s, run=fake_eval.roofline_run)
    j = cmp.to_json()["chips"]
    for name in ("train-2026", "infer-2026"):
        assert j[name]["cost_usd"] == pytest.approx(chip_cost(load_chip(name)).total_usd)
        ref = cmp.chips[name].decode[(8, 1024)]
        tps = ref["tokens_per_s"] / ref["chips"]
        assert j[name]["usd_per_mtok"] == pytest.approx(
            1e6 * (j[name]["cost_usd"] / (tps * 0.6 * 4 * 365.25 * 86400)
                   + (ref["energy_j_per_token"] + load_chip(name).energy.static_w * 0.4 / 0.6
                      / tps) / 3.6e6 * 0.08))
    write_report(cmp, tmp_path)
    page = (tmp_path / "index.html").read_text()
    assert "chip cost (manufacturing)" in page and "$ per million tokens: capex amortised" in page
    assert "infer-2026-1die: cannot be built as described: the die: 8 DRAM PHYs" in page
    assert "infer-2026: cannot be built" not in page   # the preset's two dies fit
    assert f"diptych {__version__}" in page
    details = json.loads((tmp_path / "compare.json").read_text())
    assert details["provenance"]["diptych_version"] == __version__
    # the sources' git commit tells two reports of one version apart (issue 23 item 8)
    from diptych.tools.dse.physical import source_commit
    commit = source_commit()
    assert details["provenance"]["source_commit"] == (commit or "")
    if commit:
        assert f"diptych {__version__} ({commit})" in page
    assert any("8 DRAM PHYs" in w for w in details["geometry_warnings"])


def test_compare_flags_power_limited_runs_and_states_each_chips_spec(tmp_path):
    """A chip whose TDP its prefill exceeds: the runs are flagged power-limited with the
    clock they were reported at (table, warnings, report); the chip rows state its spec in
    engineering notation."""
    import dataclasses
    import warnings

    from rich.console import Console

    from diptych.tools.compare_cmd import render_table
    from diptych.tools.dse.compare import CompareSettings, compare
    from diptych.tools.dse.compare_table import metrics
    from diptych.tools.dse.report import write_report

    base = load_chip("infer-2026")
    s = CompareSettings(prompts=(2048,), batches=(1,), contexts=(1024,), ref_batch=1,
                        train_seq=1024, train_tp=1, train_batch=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hot = fake_eval.roofline_run(base, "llama-3-8b", phase="prefill", batch=1, prompt=2048)
        tdp = 0.7 * hot.energy_j / hot.seconds
        cool = dataclasses.replace(base, name="infer-cool", tdp_w=tdp)
        cmp = compare([base, cool], "llama-3-8b", s, run=fake_eval.roofline_run)
    rows = {m.label: m for m in metrics(cmp)}
    ttft = rows["TTFT, 2048-token prompt"]
    assert "power-limited" not in ttft.notes[0] and "power-limited" in ttft.notes[1]
    warns = [w for w in cmp.warnings() if w.startswith("infer-cool: power-limited")]
    assert len(warns) == 1 and "reported at the clock it can sustain" in warns[0]
    assert "prefill 2048 at" in warns[0] or "every run, at" in warns[0]
    # the spec, in engineering notation, with ratios where the units agree
    assert rows["DRAM bandwidth"].cells == ("9.83 TB/s", "9.83 TB/s")
    assert rows["peak (inference precision)"].cells[0] == "3.36 POP/s fp8"
    assert rows["dies (outline)"].cells[0] == "2 × 21.0 × 18.5 mm"
    assert rows["clock"].ratios == ("1×",)
    con = Console(width=250, record=True)
    con.print(render_table(cmp))
    text = con.export_text()
    assert "power-limited" in text and "diptych " in text and "9.83 TB/s" in text
    write_report(cmp, tmp_path)
    page = (tmp_path / "index.html").read_text()
    assert "power-limited" in page and "tensor cores × arrays" in page
