"""The efficiency waterfall and ``--ideal`` (sim/run/waterfall.py, sim/run/variant.py).

The waterfall's steps are checked against independent sums over the run's own op records
(the time launches, collectives and recipe ops hold up a summed run; the model's FLOPs at
the peak rate), and its shares against the definition: they and the MFU add up to 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.arch import load_chip
from diptych.sim.run import Scenario, run_workload
from diptych.sim.run.variant import IDEAL, Variant
from diptych.tools.cli import main

TRAIN = Scenario(phase="train", batch=4, seq=1024, weights_dtype="fp8", act_dtype="fp8")


def _steps(res) -> dict:
    return {s["mechanism"]: s for s in res.waterfall["steps"]}


@pytest.fixture(scope="module")
def fp8_train():
    return run_workload("h100", "llama-3-8b", TRAIN, waterfall=True)


def test_shares_and_mfu_add_up_to_the_peak(fp8_train):
    r = fp8_train
    wf = r.waterfall
    assert wf["mfu"] == r.mfu and wf["seconds"] == r.seconds
    assert sum(s["share"] for s in wf["steps"]) + r.mfu == pytest.approx(1.0, abs=1e-12)
    assert [s["mechanism"] for s in wf["steps"]] == [
        "recomputation", "gemm", "non_gemm", "recipe", "launches", "communication", "power"]
    # the steps' seconds add up from the bound to the reported time
    assert wf["bound_s"] + sum(s["seconds"] for s in wf["steps"]) == pytest.approx(r.seconds)
    assert all(s["seconds"] >= -1e-12 for s in wf["steps"])


def test_bound_and_recomputation_are_the_flops_at_peak(fp8_train):
    r = fp8_train
    peak = load_chip("h100").peak_ops_per_s[r.info["compute_dtype"]]   # MFU's reference
    assert r.waterfall["bound_s"] == pytest.approx(r.flops / peak)
    rec = _steps(r)["recomputation"]
    assert rec["seconds"] == pytest.approx((r.hardware_flops - r.flops) / peak)


def test_one_chip_has_no_communication_and_an_fp8_recipe_costs_its_ops(fp8_train):
    st = _steps(fp8_train)
    assert st["communication"]["seconds"] == 0.0
    assert st["recipe"]["seconds"] > 0 and st["non_gemm"]["seconds"] > 0
    assert st["power"]["seconds"] == 0.0      # an H100 training step stays under 700 W here


def test_launch_step_is_the_launches_the_schedule_charges():
    # with nothing else to overlap (a summed run adds every op's time), the launch step is
    # exactly the launch and sync time the run reports
    s = Scenario(phase="decode", batch=8, prompt=1024, execution="sum")
    r = run_workload("h100", "llama-3-8b", s, waterfall=True)
    assert _steps(r)["launches"]["seconds"] == pytest.approx(0.0, abs=1e-12)  # sum: none
    sched = run_workload("h100", "llama-3-8b", Scenario(phase="decode", batch=8, prompt=1024),
                         waterfall=True)
    assert _steps(sched)["launches"]["seconds"] == pytest.approx(sched.fixed_costs_s, rel=0.05)


def test_communication_step_counts_exposed_collectives():
    s = Scenario.of(phase="decode", batch=8, prompt=1024, tp=4)
    r = run_workload("h100", "llama-3-70b", s, waterfall=True)
    comm = _steps(r)["communication"]["seconds"]
    # decode's all-reduces sit on the dependency chain: the step is their exposed time less
    # their launches (charged by the launch step before it)
    exposed = sum(x["exposed_total_s"] - x["launch_s"] * x["repeat"] for x in r.layers
                  if x["bound"] == "communication")
    assert comm > 0 and comm == pytest.approx(exposed, rel=1e-3)


def test_ideal_leaves_the_overheads_out(fp8_train):
    ideal = run_workload("h100", "llama-3-8b", TRAIN, variant=IDEAL, waterfall=True)
    st = _steps(ideal)
    assert st["recipe"]["seconds"] == st["launches"]["seconds"] == 0.0
    assert ideal.seconds < fp8_train.seconds and ideal.mfu > fp8_train.mfu
    # the work itself is the same: GEMM and non-GEMM steps agree with the real run's
    real = _steps(fp8_train)
    for k in ("recomputation", "gemm", "non_gemm"):
        assert st[k]["seconds"] == pytest.approx(real[k]["seconds"])
    assert ideal.info["variant"]["no_launches"] is True
    assert "variant" not in fp8_train.info


def test_raw_links_run_collectives_at_line_rate():
    s = Scenario.of(phase="decode", batch=8, prompt=1024, tp=4)
    real = run_workload("h100", "llama-3-70b", s)
    raw = run_workload("h100", "llama-3-70b", s, variant=Variant(raw_links=True))
    comm = lambda r: sum(x["seconds"] for x in r.layers if x["bound"] == "communication")  # noqa
    assert comm(raw) < comm(real)


def test_free_ops_cost_nothing_but_are_still_checked():
    s = Scenario(phase="prefill", batch=1, prompt=512)
    free = run_workload("h100", "llama-3-8b", s, variant=Variant(free_vector=True))
    vec = [x for x in free.layers if x["kind"] == "vector"]
    assert vec and all(x["seconds"] == 0 for x in vec)


def test_cli_prints_the_waterfall_and_refuses_contradictions():
    r = CliRunner()
    args = ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase", "prefill",
            "--batch", "1", "--prompt", "256"]
    out = r.invoke(main, args)
    assert out.exit_code == 0 and "efficiency: peak 100.0 %" in out.output
    js = json.loads(r.invoke(main, args + ["--json", "--ideal"]).output)
    assert js["waterfall"]["steps"][4]["mechanism"] == "launches"
    assert js["waterfall"]["steps"][4]["seconds"] == 0.0
    curve = json.loads(r.invoke(main, args[:-3] + ["1,2", "--prompt", "256", "--json"]).output)
    assert all(c["waterfall"] is None for c in curve["curve"])
    bad = r.invoke(main, ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase", "train",
                          "--batch", "8", "--seq", "1024", "--recipe", "fp8-current",
                          "--ideal"])
    assert bad.exit_code == 2 and "--ideal" in bad.output and "--recipe" in bad.output
    clus = r.invoke(main, args + ["--cluster", "dgx-h100", "--tp", "2", "--ideal"])
    assert clus.exit_code == 0 and "efficiency: peak 100.0 %" in clus.output
    for flag in ("--ideal", "--waterfall"):     # a topology file: GEMMs only, no model's run
        csv = Path(__file__).resolve().parents[2] / "examples" / "resnet50-conv.csv"
        topo = r.invoke(main, ["run", "--chip", "tpu-v1", "--topology", str(csv), flag])
        assert topo.exit_code == 2 and flag in topo.output and "GEMMs only" in topo.output
        assert "router" not in topo.output


def test_a_cluster_step_has_a_waterfall_with_its_pipeline_bubble():
    from diptych.sim.cluster.run import build_plan, run_cluster_step
    s = Scenario.of(phase="train", batch=16, seq=2048, chips=16, tp=2, pp=4, micro_batch=1)
    plan = build_plan(s, zero=1)
    r = run_cluster_step("h100", "llama-3-8b", s, cluster="dgx-h100", plan=plan,
                         waterfall=True)
    wf = r.waterfall
    names = [x["mechanism"] for x in wf["steps"]]
    assert names[:3] == ["recomputation", "gemm", "pipeline_bubble"]
    assert sum(x["share"] for x in wf["steps"]) + r.mfu == pytest.approx(1.0, abs=1e-12)
    st = _steps(r)
    assert st["pipeline_bubble"]["seconds"] > 0 and st["communication"]["seconds"] > 0
    assert st["power"]["seconds"] == pytest.approx(0.0, abs=1e-9)   # no limit on a cluster
    ideal = run_cluster_step("h100", "llama-3-8b", s, cluster="dgx-h100", plan=plan,
                             variant=IDEAL)
    assert ideal.seconds < r.seconds and ideal.info["variant"]["raw_links"] is True
    assert r.to_dict()["waterfall"] == wf


def test_compare_adds_each_chip_s_waterfalls_to_json_terminal_and_report(tmp_path):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tiny_models import TINY, write_config
    from diptych.tools.dse.compare import CompareSettings, compare
    from diptych.tools.dse.report import write_report

    model = write_config(tmp_path, TINY)
    s = CompareSettings(prompts=(256,), batches=(1, 4), contexts=(512,), ref_batch=4,
                        train_tp=1, train_batch=2, train_seq=256, waterfall=True)
    c = compare(["h100", "tpu-v5e"], model, s)
    for name in ("h100", "tpu-v5e"):
        wf = c.summary(name)["waterfall"]
        assert set(wf) == {"train", "prefill", "decode"}
        runs = {"train": c.chips[name].train, "prefill": c.chips[name].prefill[256],
                "decode": c.chips[name].decode[(4, 512)]}
        for phase, w in wf.items():
            assert w["mfu"] == runs[phase]["mfu"]
            assert sum(x["share"] for x in w["steps"]) + w["mfu"] == pytest.approx(1.0)
    # only the reference points pay for a waterfall
    assert c.chips["h100"].decode[(1, 512)].get("waterfall") is None
    assert "waterfall" not in compare(["h100"], model, CompareSettings(
        prompts=(256,), batches=(1,), contexts=(512,), ref_batch=1, train_tp=1,
        train_batch=2, train_seq=256)).summary("h100")
    html = (tmp_path / "r").joinpath("index.html")
    write_report(c, tmp_path / "r")
    assert "Where the peak goes" in html.read_text()
    out = CliRunner().invoke(main, ["compare", "h100", "--model", model, "--prompts", "256",
                                    "--batches", "1", "--contexts", "512", "--ref-batch", "1",
                                    "--train-tp", "1", "--train-batch", "2", "--train-seq",
                                    "256", "--waterfall"])
    assert out.exit_code == 0, out.output
    assert "h100 decode: efficiency: peak 100.0 %" in out.output


def test_compare_cluster_chips_waterfall_is_the_best_plans_step(tmp_path):
    """With --cluster-chips, the training column's waterfall is the best plan's step re-run
    with its waterfall (issue 21 item 7): a pipeline-bubble step, shares and MFU summing to
    the peak, and the same MFU the column reports."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tiny_models import TINY, write_config
    from diptych.tools.dse.compare import CompareSettings, compare

    model = write_config(tmp_path, TINY)
    s = CompareSettings(prompts=(256,), batches=(1,), contexts=(512,), ref_batch=1,
                        train_tp=1, train_batch=2, train_seq=256, cluster_chips=4,
                        waterfall=True)
    c = compare(["h100"], model, s)
    tr = c.chips["h100"].train
    wf = c.summary("h100")["waterfall"]["train"]
    assert wf is not None and wf["mfu"] == pytest.approx(tr["mfu"])
    names = [x["mechanism"] for x in wf["steps"]]
    assert "pipeline_bubble" in names and names[-1] == "power"
    assert sum(x["share"] for x in wf["steps"]) + wf["mfu"] == pytest.approx(1.0)
    assert tr["search"]["candidates"] >= tr["search"]["fitting"] >= 1
