"""The headline study with the engine replaced by a roofline double: structure, values against
direct runs, the power check, the report's plots (through matplotlib objects) and the CLI."""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.arch import chip_from_dict, load_chip, to_dict
from diptych.sim.run import Scenario
from diptych.tools.cli import main
from diptych.tools.dse import compare as compare_mod
from diptych.tools.dse.compare import CompareSettings, compare
from diptych.tools.dse.compare_table import metrics
from diptych.tools.dse.plots import decode_curve_plot, roofline_plot
from diptych.tools.dse.report import decode_curves, roofline_inputs, write_report

sys.path.insert(0, str(Path(__file__).parent))
import fake_eval  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402
from diptych.arch.area import die_area_mm2

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
    assert set(j) == {"model", "chips", "verdicts", "warnings"} and j["model"] == MODEL
    assert j["warnings"] == cmp.warnings()      # issue 22 item 4: the caveats in the JSON
    assert list(j["chips"]) == ["train-2026", "infer-2026"]
    for c in j["chips"].values():
        assert set(c) == {"area_mm2", "tokens_per_j", "train", "prefill", "decode", "bottleneck",
                          "precision", "cost_usd", "usd_per_mtok", "energy_breakdown_j"}
        assert set(c["energy_breakdown_j"]) == {"train", "prefill", "decode"}
        assert set(c["train"]) == {"tokens_per_s", "mfu", "step_s", "mfu_peak_dtype", "plan"}
        assert c["train"]["plan"]["tp"] == 8 and c["train"]["plan"]["cluster"] is None
        assert set(c["precision"]) == {"train", "prefill", "decode"}
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
        assert s["area_mm2"] == pytest.approx(die_area_mm2(load_chip(name)))


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
    # --execution sum: the summed runs (the model before issue 9), not the default schedule
    r = CliRunner().invoke(main, args + ["--json", "--execution", "sum", "--no-fusion"])
    s = json.loads(r.stdout)["chips"]["infer-2026"]["decode"][0]["tpot_s"]
    want = fake_eval.roofline_run("infer-2026", MODEL, phase="decode", batch=1, prompt=1024,
                                  gen=1, execution="sum").tpot_s
    assert s == want != j["chips"]["infer-2026"]["decode"][0]["tpot_s"]


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


# ---- precision, default contexts, ratios, warnings, progress (issue 15) ---------------------

def test_precision_stated_is_what_each_run_used(cmp):
    for name in ("train-2026", "infer-2026"):
        s = cmp.to_json()["chips"][name]
        tr = direct(name, phase="train", batch=SMALL.train_batch, seq=1024, tp=8, dp=1)
        dc = direct(name, phase="decode", batch=8, prompt=1024, gen=1, tp=1)
        for phase, run in (("train", tr), ("decode", dc)):
            p = s["precision"][phase]
            for k in ("weights", "activations", "kv", "accumulation"):
                assert p[k] == run["precision"][k]
            assert p["compute"] == run["info"]["compute_dtype"] and p["unsupported"] is None
        assert s["train"]["mfu_peak_dtype"] == tr["info"]["compute_dtype"]
    # the defaults differ between the chips: that is what the table must say
    assert cmp.summary("infer-2026")["precision"]["decode"]["weights"] == "fp8"
    assert cmp.summary("train-2026")["precision"]["decode"]["weights"] == "bf16"


def test_pinned_precision_runs_every_chip_in_it():
    from diptych.tools.precision_spec import parse_precision

    s = CompareSettings(prompts=(512,), batches=(1,), contexts=(1024,), ref_batch=1,
                        train_seq=1024, precision=parse_precision("bf16"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare(["train-2026", "infer-2026"], MODEL, s, run=fake_eval.roofline_run)
    for name in c.chips:
        for ph, p in c.summary(name)["precision"].items():
            assert (p["weights"], p["activations"], p["kv"]) == ("bf16",) * 3, (name, ph)
    dc = direct("infer-2026", phase="decode", batch=1, prompt=1024, gen=1, tp=1,
                weights_dtype="bf16", act_dtype="bf16", kv_dtype="bf16")
    assert c.summary("infer-2026")["decode"][0]["tpot_s"] == pytest.approx(dc["tpot_s"])
    # per phase and per tensor: only inference weights pinned to int4
    s2 = CompareSettings(prompts=(512,), batches=(1,), contexts=(1024,), ref_batch=1,
                         train_seq=1024, precision=parse_precision(["infer:w=int4"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c2 = compare(["infer-2026"], MODEL, s2, run=fake_eval.roofline_run)
    p = c2.summary("infer-2026")["precision"]
    assert (p["decode"]["weights"], p["decode"]["activations"]) == ("int4", "fp8")
    assert p["train"]["weights"] == "bf16"


def test_unsupported_precision_is_a_cell_not_a_crash(monkeypatch):
    monkeypatch.setattr(compare_mod, "_default_run", fake_eval.roofline_run)
    args = ["compare", "infer-2026", "tpu-v1", "--model", MODEL, "--prompts", "512",
            "--batches", "1", "--contexts", "1024", "--ref-batch", "1", "--train-seq", "1024",
            "--precision", "fp8"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "unsupported" in r.output and "tpu-v1 has no fp8 datapath" in r.output
    r = CliRunner().invoke(main, args + ["--json"])
    j = json.loads(r.stdout)["chips"]["tpu-v1"]
    assert j["train"]["tokens_per_s"] is None and j["decode"][0]["tpot_s"] is None
    assert "int8" in j["precision"]["decode"]["unsupported"]
    assert json.loads(r.stdout)["chips"]["infer-2026"]["decode"][0]["tpot_s"] > 0
    r = CliRunner().invoke(main, args[:-1] + ["w=fp9"])
    assert r.exit_code == 2 and "'fp9' is not a dtype" in r.output


def test_default_contexts_stay_within_the_model_window():
    from diptych.tools.dse.compare import default_contexts

    assert default_contexts(8192) == ((2048, 8192), (2048, 8191))
    assert default_contexts(2048) == ((1024, 2048), (1023, 2047))
    assert default_contexts(131072, gen=4) == ((2048, 32768), (2048, 32768))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = compare(["infer-2026"], MODEL, CompareSettings(batches=(1,), ref_batch=1,
                                                           train_seq=1024),
                    run=fake_eval.roofline_run)
    assert c.settings.prompts == (2048, 8192) and c.settings.contexts == (2048, 8191)
    assert c.run_warnings() == []  # llama-3-8b: max_position_embeddings 8192
    assert c.max_positions == 8192


def test_cli_context_sets_prompts_and_contexts(monkeypatch):
    monkeypatch.setattr(compare_mod, "_default_run", fake_eval.roofline_run)
    base = ["compare", "infer-2026", "--model", MODEL, "--batches", "1", "--ref-batch", "1",
            "--train-seq", "1024", "--json"]
    j = json.loads(CliRunner().invoke(main, base + ["--context", "512,1024"]).stdout)
    c = j["chips"]["infer-2026"]
    assert [p["prompt"] for p in c["prefill"]] == [512, 1024]
    assert [d["context"] for d in c["decode"]] == [512, 1024]
    j = json.loads(CliRunner().invoke(main, base + ["--context", "512", "--prompts",
                                                    "256"]).stdout)
    c = j["chips"]["infer-2026"]
    assert [p["prompt"] for p in c["prefill"]] == [256]
    assert [d["context"] for d in c["decode"]] == [512]


def test_ratio_column_is_each_chip_over_the_first(cmp):
    from diptych.tools.dse.compare_table import metrics

    rows = {m.label: m for m in metrics(cmp)}
    a, b = (cmp.to_json()["chips"][n] for n in ("train-2026", "infer-2026"))
    want = b["train"]["tokens_per_s"] / a["train"]["tokens_per_s"]
    assert rows["train tokens/s per chip"].ratios == (f"{want:.3g}×",)
    tpot = b["decode"][1]["tpot_s"] / a["decode"][1]["tpot_s"]
    tps = b["decode"][1]["tokens_per_s"] / a["decode"][1]["tokens_per_s"]
    assert rows["decode b=8 ctx=1024: TPOT · tokens/s"].ratios == (f"{tpot:.3g}× · {tps:.3g}×",)
    # training leads its section with tokens/s; MFU names its peak's precision
    train = [m for m in metrics(cmp) if m.section == "train"]
    assert train[0].label == "train tokens/s per chip"
    assert all(c.endswith("of bf16 peak") for c in rows["train MFU (of the chip's own peak)"].cells)
    assert not rows["precision: train"].ratios


def test_progress_reports_every_run(cmp):
    calls = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compare(["infer-2026"], MODEL, SMALL, run=fake_eval.roofline_run,
                progress=lambda d, t, label: calls.append((d, t, label)))
    total = 1 + 2 + 2 * 2
    assert [c[0] for c in calls] == list(range(total + 1))
    assert {c[1] for c in calls} == {total}
    assert calls[0][2] == "infer-2026: train" and calls[-1][2] == "done"


def test_report_warns_and_marks_infeasible_points(tmp_path):
    d = to_dict(load_chip("infer-2026"))
    d["name"], d["tdp_w"] = "tiny-tdp", 1.0
    d["dram"]["capacity_gib"] = 17.0      # llama-3-8b bf16 weights (16 GB) fit, large batches not
    chip = chip_from_dict(d)
    s = CompareSettings(prompts=(512,), batches=(1, 256), contexts=(1024, 16384), ref_batch=1,
                        train_seq=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = compare([chip], MODEL, s, run=fake_eval.roofline_run)
    write_report(c, tmp_path / "rep")
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "does not fit in memory" in page and "TDP" in page
    assert "exceeds llama-3-8b&#x27;s max_position_embeddings" in page
    from diptych.tools.dse.report import INFEASIBLE, _mark, infeasible_points

    bad = infeasible_points(c)
    no_fit = [(r["tokens_per_s"], r["tpot_s"] * 1e3) for r in c.chips["tiny-tdp"].decode.values()
              if r["fits"] is False]
    assert no_fit and sorted(bad["fits"]["decode"]) == sorted(no_fit)
    fig = decode_curve_plot(decode_curves(c))
    _mark(fig, bad, "decode")
    (marks,) = [m for m in fig.axes[0].collections
                if m.get_label() == INFEASIBLE["fits"][1]]
    got = sorted(map(tuple, marks.get_offsets().tolist()))
    assert [x for p in got for x in p] == pytest.approx([x for p in sorted(no_fit) for x in p])


def test_roofline_title_agrees_with_the_legend(cmp):
    inputs = list(roofline_inputs(cmp))
    ax = roofline_plot(inputs).axes[0]
    skipped = sum(1 for _, _, _, ops in inputs for o in ops
                  if not (o["flops"] and o["dram_bytes"] and o["seconds"]))
    legend_says = any("not placeable" in t.get_text() for t in ax.get_legend().get_texts())
    assert (skipped > 0) == legend_says
    if skipped:
        assert f"{skipped} without FLOPs or DRAM traffic left out" in ax.get_title()
    else:
        assert ax.get_title() == "Roofline: every op placed"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


_SEARCH = compare_mod._default_search


def roofline_search(chip, model, cluster, **kw):
    """The plan search with the engine replaced by the roofline double."""
    from roofline_double import roofline
    return _SEARCH(chip, model, cluster, simulate=roofline, **kw)


def test_cluster_chips_trains_the_plan_the_search_finds(tiny):
    from diptych.sim.cluster.search import search_plans
    from roofline_double import roofline

    s = CompareSettings(prompts=(256,), batches=(1,), contexts=(256,), ref_batch=1,
                        train_seq=512, train_tp=2, train_batch=4, cluster_chips=4)
    assert s.global_batch == 4 * 4 // 2 and s.cluster_name == "dgx-h100"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = compare(["h100", "train-2026"], tiny, s, run=fake_eval.roofline_run,
                      search=roofline_search)
    for name in ("h100", "train-2026"):
        tr = cmp.to_json()["chips"][name]["train"]
        best = search_plans(tiny, name, "dgx-h100",
                            Scenario.of(phase="train", chips=4, batch=8, seq=512),
                            refine=compare_mod.PLAN_REFINE, simulate=roofline).plans[0]
        assert tr["step_s"] == pytest.approx(best.seconds)
        assert tr["tokens_per_s"] == pytest.approx(best.tokens_per_s / 4)
        plan = tr["plan"]
        assert {k: plan[k] for k in ("tp", "pp", "dp", "cp", "ep", "zero", "schedule",
                                     "micro_batch", "recompute")} == {
            k: getattr(best.plan, k) for k in ("tp", "pp", "dp", "cp", "ep", "zero",
                                               "schedule", "micro_batch", "recompute")}
        assert plan["chips"] == 4 and plan["cluster"] == "dgx-h100"
        assert plan["candidates"] >= plan["fitting"] >= 1
        assert plan["text"] == best.plan.describe()
    rows = {m.label: m for m in metrics(cmp)}
    label = "train plan (4 chips of dgx-h100)"
    assert rows[label].cells == tuple(cmp.to_json()["chips"][n]["train"]["plan"]["text"]
                                      for n in ("h100", "train-2026"))
    assert "best plan found for 4 chips of dgx-h100, 8 × 512 tokens" in s.describe()
    from rich.console import Console
    from diptych.tools.compare_cmd import render_table
    con = Console(width=250, record=True)
    con.print(render_table(cmp))
    text = con.export_text()
    assert label in text and rows[label].cells[0] in text
    assert [r["batch"] for r in cmp.rows() if r["phase"] == "train"] == [8, 8]


def test_cli_cluster_chips_json_report_and_bad_input(tiny, monkeypatch, tmp_path):
    monkeypatch.setattr(compare_mod, "_default_run", fake_eval.roofline_run)
    monkeypatch.setattr(compare_mod, "_default_search", roofline_search)
    args = ["compare", "h100", "--model", tiny, "--prompts", "256", "--batches", "1",
            "--contexts", "256", "--ref-batch", "1", "--train-seq", "512", "--train-tp", "2",
            "--train-batch", "4", "--cluster-chips", "4"]
    r = CliRunner().invoke(main, args + ["--json", "--report", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)["chips"]["h100"]["train"]["plan"]
    assert plan["tp"] * plan["pp"] * plan["dp"] * plan["cp"] == 4
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "train plan (4 chips of dgx-h100)" in html and plan["text"] in html
    assert json.loads((tmp_path / "rep" / "compare.json").read_text())[
        "chips"]["h100"]["train"]["plan"] == plan
    for extra, msg in ((["--cluster-chips", "99999"], "cluster_chips (99999) exceeds the "
                        "cluster's 16384 chips (dgx-h100)"),
                       (["--cluster", "no-such.toml"], "no-such.toml"),
                       (["--train-batch", "3", "--cluster-chips", "3"], "--cluster-batch")):
        r = CliRunner().invoke(main, args + extra)
        assert r.exit_code == 2 and msg in r.output, r.output
    r = CliRunner().invoke(main, args[:-2] + ["--cluster", "dgx-h100"])
    assert r.exit_code == 2 and "--cluster-chips" in r.output


def test_execution_and_fusion_reach_every_single_node_run():
    # compare's settings pass execution/fusion to run_workload; the default is the schedule
    seen = []

    def spy(chip, model, **kw):
        seen.append((kw.get("execution"), kw.get("fusion", True)))
        return fake_eval.roofline_run(chip, model, **kw)

    one = CompareSettings(prompts=(512,), batches=(1,), contexts=(1024,), ref_batch=1,
                          train_seq=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dflt = compare(["infer-2026"], MODEL, one, run=spy)
        assert set(seen) == {(None, True)}
        seen.clear()
        summed = compare(["infer-2026"], MODEL, CompareSettings(
            **{**one.__dict__, "execution": "sum", "fusion": False}), run=spy)
    assert set(seen) == {("sum", False)}
    d, s = dflt.to_json()["chips"]["infer-2026"], summed.to_json()["chips"]["infer-2026"]
    # the same runs as run_workload's own, each way
    want = fake_eval.roofline_run("infer-2026", MODEL, phase="decode", batch=1, prompt=1024,
                                  gen=1)
    assert d["decode"][0]["tpot_s"] == want.tpot_s and want.execution == "schedule"
    want = fake_eval.roofline_run("infer-2026", MODEL, phase="decode", batch=1, prompt=1024,
                                  gen=1, execution="sum")
    assert s["decode"][0]["tpot_s"] == want.tpot_s
    with pytest.raises(ValueError, match="execution must be 'sum', 'schedule' or None"):
        CompareSettings(execution="fast")


def test_cells_that_cannot_be_computed_are_named_and_nothing_computed_exits_2():
    """Issue 22 item 4: a setting no run could take is refused before any run; a cell that
    fails is a warning in the terminal, the JSON and the report; a study with no computable
    cell is an error (exit 2), not a table of nulls."""
    from click.testing import CliRunner
    from diptych.tools.cli import main

    with pytest.raises(ValueError, match="train_seq must be at most 16,777,216"):
        CompareSettings(train_seq=10**9)
    with pytest.raises(ValueError, match="contexts must be at most"):
        CompareSettings(contexts=(10**12,))
    r = CliRunner().invoke(main, ["compare", "h100", "--model", "llama-3-8b", "--precision",
                                  "nvfp4", "--json"])
    assert r.exit_code == 2 and "no cell could be computed" in r.output
    assert "no nvfp4 datapath" in r.output


def test_a_verdict_per_phase_names_the_winner_the_margin_and_the_resource(cmp):
    """Issue 23 item 4: per phase the chip with the best headline number wins, by the ratio
    of the two best, and the text names the winner's regime and the resource behind it."""
    v = cmp.verdicts()
    assert set(v) == {"train", "prefill", "decode"}
    summ = {n: cmp.summary(n) for n in cmp.chips}
    dec = {n: next(d["tokens_per_s"] for d in s["decode"]
                   if (d["batch"], d["context"]) == (SMALL.ref_batch, SMALL.contexts[0]))
           for n, s in summ.items()}
    best, other = sorted(dec, key=dec.get, reverse=True)
    assert v["decode"]["winner"] == best and v["decode"]["runner_up"] == other
    assert v["decode"]["by"] == pytest.approx(dec[best] / dec[other])
    ttft = {n: s["prefill"][0]["ttft_s"] for n, s in summ.items()}
    fast = min(ttft, key=ttft.get)
    assert v["prefill"]["winner"] == fast and v["prefill"]["by"] >= 1.0
    tr = {n: s["train"]["tokens_per_s"] for n, s in summ.items()}
    assert v["train"]["winner"] == max(tr, key=tr.get)
    for phase, x in v.items():
        assert x["text"].startswith(f"{phase}: {x['winner']} wins")
        assert ("DRAM bandwidth" in x["text"]) == (x["bound"] == "memory")
        assert ("peak of" in x["text"]) == (x["bound"] == "compute")
    assert cmp.to_json()["verdicts"] == v
    one = compare(["h100"], MODEL, SMALL, run=fake_eval.roofline_run)
    assert one.verdicts() == {}


def test_the_chip_block_states_the_interconnect(cmp):
    row = next(m for m in metrics(cmp) if m.label == "interconnect (per direction)")
    for cell, name in zip(row.cells, cmp.chips):
        ic = load_chip(name).interconnect
        assert cell.startswith(f"{ic.links} × ") and "B/s" in cell


def test_the_report_s_every_run_table_reads_in_units_with_its_flags_first(cmp, tmp_path):
    """Issue 23 item 8: the every-run table has readable headers, values in units (not
    %.4g fractions), fits/error/bound before the numbers, and tokens/s per chip as the
    summary gives it; the CSV keeps the raw columns."""
    import re
    from diptych.tools.dse.report import run_table_html

    rows = cmp.rows()
    page = run_table_html(rows)
    heads = re.findall(r"<th>(.*?)</th>", page)
    assert heads[:7] == ["chip", "phase", "batch", "context", "fits", "error", "bound"]
    assert "tokens/s per chip" in heads and "TTFT" in heads and "power per chip" in heads
    assert " tok/s" in page and "%" in page and " J" in page
    for r in rows:
        assert r["tokens_per_s_per_chip"] == pytest.approx(
            r["tokens_per_s"] / (8 if r["phase"] == "train" else 1))
    tr = next(r for r in rows if r["phase"] == "train")
    summ = cmp.summary(tr["chip"])
    assert tr["tokens_per_s_per_chip"] == pytest.approx(summ["train"]["tokens_per_s"])


def test_ideal_runs_every_point_without_its_overheads(tiny):
    """``ideal`` (``--ideal``): every run is ``run_workload``'s own under IDEAL (values equal
    the direct runs), no slower than the run as it is, and faster where overheads exist (the
    h100's launches); the cluster path re-runs the plan the search found under IDEAL."""
    from diptych.sim.cluster.search import search_plans
    from diptych.sim.run.variant import IDEAL
    from roofline_double import roofline

    one = CompareSettings(prompts=(512,), batches=(1,), contexts=(1024,), ref_batch=1,
                          train_seq=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real = compare(["h100"], MODEL, one, run=fake_eval.roofline_run)
        bound = compare(["h100"], MODEL, replace(one, ideal=True), run=fake_eval.roofline_run)
        want = fake_eval.roofline_run("h100", MODEL, phase="decode", batch=1, prompt=1024,
                                      gen=1, variant=IDEAL)
    r, b = real.to_json(), bound.to_json()
    assert "ideal" not in r and b["ideal"] is True
    assert b["chips"]["h100"]["decode"][0]["tpot_s"] == want.tpot_s
    for ph, key in (("prefill", "ttft_s"), ("decode", "tpot_s")):
        assert b["chips"]["h100"][ph][0][key] < r["chips"]["h100"][ph][0][key]
    assert b["chips"]["h100"]["train"]["step_s"] < r["chips"]["h100"]["train"]["step_s"]
    assert bound.chips["h100"].train["info"]["variant"]["no_launches"] is True
    assert "ideal: recipe and format ops" in bound.settings.describe()
    assert "ideal" not in real.settings.describe()
    # the plan search's best plan, re-run under IDEAL
    s = CompareSettings(prompts=(256,), batches=(1,), contexts=(256,), ref_batch=1,
                        train_seq=512, train_tp=2, train_batch=4, cluster_chips=4, ideal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = compare(["h100"], tiny, s, run=fake_eval.roofline_run, search=roofline_search)
        sc = Scenario.of(phase="train", chips=4, batch=8, seq=512)
        best = search_plans(tiny, "h100", "dgx-h100", sc, refine=compare_mod.PLAN_REFINE,
                            simulate=roofline).plans[0]
    from diptych.sim.cluster.run import run_cluster_step
    again = run_cluster_step("h100", tiny, sc, cluster="dgx-h100", plan=best.plan,
                             simulate=roofline, variant=IDEAL)
    tr = cmp.to_json()["chips"]["h100"]["train"]
    assert tr["step_s"] == pytest.approx(again.seconds, rel=1e-12) and again.seconds < best.seconds


def test_ideal_bad_input_names_what_contradicts_it(monkeypatch):
    from diptych.tools.precision_spec import PrecisionChoice

    with pytest.raises(ValueError, match="pins the fp8-delayed recipe for train"):
        CompareSettings(ideal=True, precision={"train": PrecisionChoice(recipe="fp8-delayed")})
    monkeypatch.setattr(compare_mod, "_default_run", fake_eval.roofline_run)
    args = ["compare", "h100", "--model", MODEL, "--prompts", "512", "--batches", "1",
            "--contexts", "1024", "--ref-batch", "1", "--train-seq", "1024", "--ideal"]
    for extra in (["--serving"], ["--serving-afd"], ["--serving-search"],
                  ["--serving", "--no-search"]):
        r = CliRunner().invoke(main, args + extra)
        assert r.exit_code == 2 and "--ideal" in r.output and extra[0] in r.output, r.output
    r = CliRunner().invoke(main, args + ["--no-search"])     # its own error first
    assert r.exit_code == 2 and "add --serving" in r.output
    r = CliRunner().invoke(main, args + ["--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ideal"] is True
