"""The headline study with the engine replaced by a roofline double: structure, values against
direct runs, the power check, the report's plots (through matplotlib objects) and the CLI."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.arch import chip_from_dict, load_chip, to_dict
from diptych.tools.cli import main
from diptych.tools.dse import compare as compare_mod
from diptych.tools.dse.compare import CompareSettings, compare
from diptych.tools.dse.plots import decode_curve_plot, roofline_plot
from diptych.tools.dse.report import decode_curves, roofline_inputs, write_report

sys.path.insert(0, str(Path(__file__).parent))
import fake_eval  # noqa: E402

SMALL = CompareSettings(prompts=(512, 2048), batches=(1, 8), contexts=(1024, 4096),
                        ref_batch=8, train_seq=1024)
MODEL = "llama-3-8b"


@pytest.fixture(scope="module")
def cmp():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compare(["train-2026", "infer-2026"], MODEL, SMALL, run=fake_eval.roofline_run)


def direct(chip, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fake_eval.roofline_run(chip, MODEL, **kw).to_dict()


def test_json_structure_is_exactly_the_issues(cmp):
    j = cmp.to_json()
    assert set(j) == {"model", "chips"} and j["model"] == MODEL
    assert list(j["chips"]) == ["train-2026", "infer-2026"]
    for c in j["chips"].values():
        assert set(c) == {"area_mm2", "tokens_per_j", "train", "prefill", "decode", "bottleneck"}
        assert set(c["train"]) == {"tokens_per_s", "mfu", "step_s"}
        assert [set(p) for p in c["prefill"]] == [{"prompt", "ttft_s"}] * 2
        assert [(d["batch"], d["context"]) for d in c["decode"]] == [
            (1, 1024), (8, 1024), (1, 4096), (8, 4096)]
        assert all(set(d) == {"batch", "context", "tpot_s", "tokens_per_s"} for d in c["decode"])
        assert set(c["bottleneck"]) == {"train", "prefill", "decode"}
    json.dumps(j)  # serialisable


def test_values_equal_direct_runs(cmp):
    for name in ("train-2026", "infer-2026"):
        s = cmp.to_json()["chips"][name]
        tr = direct(name, phase="train", batch=SMALL.train_batch, seq=1024, tp=8, dp=1)
        assert s["train"]["tokens_per_s"] == pytest.approx(tr["tokens_per_s_per_chip"])
        assert s["train"]["mfu"] == pytest.approx(tr["mfu"])
        assert s["train"]["step_s"] == pytest.approx(tr["seconds"])
        pf = direct(name, phase="prefill", batch=1, prompt=2048, gen=1, tp=1)
        assert s["prefill"][1]["ttft_s"] == pytest.approx(pf["ttft_s"])
        dc = direct(name, phase="decode", batch=8, prompt=1024, gen=1, tp=1)
        assert s["decode"][1]["tpot_s"] == pytest.approx(dc["tpot_s"])
        assert s["decode"][1]["tokens_per_s"] == pytest.approx(dc["tokens_per_s"])
        assert s["tokens_per_j"] == pytest.approx(1 / dc["energy_j_per_token"])
        assert s["bottleneck"]["decode"] == dc["bound"]
        assert s["area_mm2"] == pytest.approx(load_chip(name).die_area_mm2)


def test_power_above_tdp_is_flagged():
    d = to_dict(load_chip("infer-2026"))
    d["name"], d["tdp_w"] = "tiny-tdp", 1.0
    chip = chip_from_dict(d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare([chip], MODEL, SMALL, run=fake_eval.roofline_run)
    rows = c.rows()
    assert all(r["exceeds_tdp"] for r in rows)
    for r in rows:  # power = energy per chip / time
        chips = 8 if r["phase"] == "train" else 1
        assert r["power_w"] == pytest.approx(r["energy_j"] / chips / r["seconds"])


def test_report_files_and_plots(cmp, tmp_path):
    files = write_report(cmp, tmp_path / "rep")
    names = {f.name for f in files}
    assert names == {"compare.csv", "compare.json", "roofline.svg", "decode.svg",
                     "floorplan.svg", "index.html"}
    page = (tmp_path / "rep" / "index.html").read_text()
    for f in ("roofline.svg", "decode.svg", "floorplan.svg", "compare.csv", "compare.json"):
        assert f in page
    details = json.loads((tmp_path / "rep" / "compare.json").read_text())
    assert details["settings"]["train_tp"] == 8
    csv_lines = (tmp_path / "rep" / "compare.csv").read_text().strip().splitlines()
    assert len(csv_lines) == 1 + 2 * (1 + 2 + 4)


def test_roofline_places_every_op(cmp):
    inputs = list(roofline_inputs(cmp))
    fig = roofline_plot(inputs)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlabel().startswith("arithmetic intensity")
    for name, peak, bw, ops in inputs:
        (roof,) = [ln for ln in ax.lines if ln.get_label() == f"{name} roof"]
        assert max(roof.get_ydata()) == pytest.approx(peak)
        (pts,) = [c for c in ax.collections if c.get_label().startswith(f"{name} ops")]
        placeable = [o for o in ops if o["flops"] and o["dram_bytes"] and o["seconds"]]
        assert len(pts.get_offsets()) == len(placeable) > 0
        for (x, y), o in zip(pts.get_offsets().tolist(), placeable):
            assert x == pytest.approx(o["flops"] / o["dram_bytes"])
            assert y == pytest.approx(o["flops"] / o["seconds"])
            assert y <= min(peak, bw * x) * (1 + 1e-9)  # nothing above its roof


def test_decode_curve_data(cmp):
    fig = decode_curve_plot(decode_curves(cmp))
    ax = fig.axes[0]
    assert ax.get_ylabel() == "time per output token (ms)"
    s = cmp.to_json()["chips"]["infer-2026"]["decode"]
    (line,) = [ln for ln in ax.lines if ln.get_label() == "infer-2026 ctx=1024"]
    want = sorted((d["tokens_per_s"], d["tpot_s"] * 1e3) for d in s if d["context"] == 1024)
    assert list(line.get_xdata()) == pytest.approx([w[0] for w in want])
    assert list(line.get_ydata()) == pytest.approx([w[1] for w in want])


def test_cli_json_and_table(monkeypatch, tmp_path):
    monkeypatch.setattr(compare_mod, "_default_run", fake_eval.roofline_run)
    args = ["compare", "train-2026", "infer-2026", "--model", MODEL, "--prompts", "512",
            "--batches", "1,8", "--contexts", "1024", "--ref-batch", "8", "--train-seq", "1024"]
    r = CliRunner().invoke(main, args + ["--json"])
    assert r.exit_code == 0, r.output
    j = json.loads(r.stdout)
    assert j["chips"]["infer-2026"]["decode"][1]["batch"] == 8
    r = CliRunner().invoke(main, args + ["--report", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    assert "train: TP=8 DP=1" in r.output and "bottleneck: decode" in r.output
    assert (tmp_path / "rep" / "index.html").exists()
    r = CliRunner().invoke(main, args[:3] + ["--model", "no-such-model"])
    assert r.exit_code == 2 and "unknown model 'no-such-model'" in r.output
    r = CliRunner().invoke(main, args + ["--batches", "1,x"])
    assert r.exit_code == 2 and "--batches must be a comma-separated list" in r.output


def test_roofline_draws_roofs_of_other_precisions_used(cmp):
    inputs = list(roofline_inputs(cmp))
    peaks = {n: cr.chip.peak_ops_per_s for n, cr in cmp.chips.items()}
    ax = roofline_plot(inputs, dtype_peaks=peaks).axes[0]
    # infer-2026 computes in fp8 but trains in bf16 (quarter rate): its bf16 roof is drawn
    (bf16,) = [ln for ln in ax.lines if ln.get_label() == "infer-2026 roof (bf16)"]
    assert max(bf16.get_ydata()) == pytest.approx(peaks["infer-2026"]["bf16"])
    assert not [ln for ln in ax.lines if ln.get_label() == "train-2026 roof (bf16)"]


def test_run_warnings_are_collected_not_printed(cmp):
    # llama-3-8b's config allows 8192 positions; the fixture stays below that
    assert cmp.run_warnings() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a UserWarning escaping compare() would raise here
        long = compare(["infer-2026"], MODEL, CompareSettings(
            prompts=(16384,), batches=(1,), contexts=(16384,), ref_batch=1, train_seq=1024),
            run=fake_eval.roofline_run)
    notes = long.run_warnings()
    assert notes and all("max_position_embeddings" in n for n in notes)
