"""``diptych run`` with a parallel plan (``--cluster``, ``--pp`` ...): the JSON keys of issue
11, the numbers the library gives, the default one-domain cluster, the old ``--recompute``
flag, traces, inference plans, and bad plans (exit 2, one line naming the flag). 4-layer
models keep the engine's part short."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.sim.cluster.run import run_cluster_step
from diptych.sim.run import Scenario, run_workload
from diptych.tools.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from roofline_double import roofline  # noqa: E402
from tiny_models import TINY, TINY_MOE, write_config  # noqa: E402

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return write_config(d, TINY, "tiny.json"), write_config(d, TINY_MOE, "moe.json")


def run(*args):
    return CliRunner().invoke(main, ["run", *args])


TRAIN = ["--phase", "train", "--chip", "h100", "--batch", "8", "--seq", "512"]


def test_json_keeps_run_keys_and_adds_bubble_and_exposed_communication(models, tmp_path):
    tiny, _ = models
    tr = tmp_path / "trace.json"
    r = run("--model", tiny, *TRAIN, "--cluster", "dgx-h100", "--chips", "8", "--tp", "2",
            "--pp", "2", "--zero", "1", "--schedule", "interleaved", "--virtual-stages", "2",
            "--micro-batch", "1", "--json", "--trace", str(tr))
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {"memory_bytes_per_chip", "seconds", "mfu", "bubble_fraction",
            "exposed_comm_s"} <= set(d)
    assert set(d["exposed_comm_s"]) == {"tp", "cp", "ep", "pp", "dp"}
    assert (d["tp"], d["pp"], d["dp"], d["zero"], d["schedule"], d["virtual_stages"],
            d["micro_batch"], d["chips"], d["cluster"]) == (2, 2, 2, 1, "interleaved", 2, 1, 8,
                                                            "dgx-h100")
    assert 0 < d["bubble_fraction"] < 1 and d["batch"] == 8
    # the numbers are the library's step
    ref = simulate_cluster_step(tiny, "h100", "dgx-h100",
                                Plan(tp=2, pp=2, dp=2, zero=1, schedule="interleaved",
                                     virtual_stages=2, micro_batch=1),
                                Scenario.of(phase="train", batch=8, seq=512))
    assert d["seconds"] == pytest.approx(ref.seconds, rel=1e-12)
    assert d["memory_bytes_per_chip"] == pytest.approx(ref.memory_bytes_per_chip, rel=1e-12)
    # the trace has one process per rank
    events = json.loads(tr.read_text())["traceEvents"]
    assert sum(e.get("name") == "process_name" for e in events) == 8


def test_table_states_plan_bubble_communication_and_memory(models):
    tiny, _ = models
    r = run("--model", tiny, *TRAIN, "--cluster", "dgx-h100", "--chips", "4", "--pp", "2",
            "--dp", "2", "--recompute", "selective")
    assert r.exit_code == 0, r.output
    for text in ("tp1 pp2 dp2, ZeRO-0, 1f1b, mb 4, recompute selective", "4 chips of dgx-h100",
                 "step time", "tokens/s", "MFU / HFU", "pipeline bubble",
                 "exposed communication", "memory per chip", "pipeline stages",
                 "collectives", "pp send"):
        assert text in r.output, text


def test_plan_flags_without_a_cluster_run_on_one_domain_of_the_chip_s_links(models):
    tiny, _ = models
    r = run("--model", tiny, *TRAIN, "--chips", "4", "--tp", "2", "--pp", "2", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["cluster"] == "h100 x4" and d["info"]["cluster_default"] is True
    r = run("--model", tiny, *TRAIN, "--chips", "4", "--tp", "2", "--pp", "2")
    assert "default: one switch domain on the chip's own links" in r.output


@pytest.mark.parametrize("sp", [None, False])
def test_one_domain_tensor_parallel_plan_equals_run_without_a_cluster(sp):
    # a plan without a cluster runs on one switch domain of the chip's links: with tensor
    # parallelism only it is diptych run's own summed training step (same ops, ring, overlap
    # rule, when the cluster step composes summed layer times: execution="sum" for both;
    # sequence parallelism on both sides by default, and off on both)
    kw = dict(phase="train", batch=4, seq=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = run_workload("h100", "llama-3-8b",
                             Scenario.of(tp=8, micro_batch=2, execution="sum",
                                         sequence_parallel=sp, **kw),
                             simulate=roofline)
        plan = run_cluster_step("h100", "llama-3-8b", Scenario.of(execution="sum", **kw),
                                plan=Plan(tp=8, micro_batch=2,
                                          sequence_parallel=sp is not False),
                                simulate=roofline)
    assert plan.seconds == pytest.approx(plain.seconds, rel=1e-6)
    assert plan.mfu == pytest.approx(plain.mfu, rel=1e-6)


def test_recompute_flag_alone_is_still_full(models):
    tiny, _ = models
    base = ["--model", tiny, *TRAIN, "--json"]
    flag, full, none, plain = (json.loads(run(*base, *extra).stdout) for extra in
                               (["--recompute"], ["--recompute", "full"],
                                ["--recompute", "none"], []))
    assert flag["seconds"] == full["seconds"] and flag["info"]["recompute"] is True
    assert none["seconds"] == plain["seconds"] and plain["info"]["recompute"] is False
    assert flag["seconds"] > plain["seconds"]
    sel = json.loads(run(*base, "--recompute", "selective").stdout)
    assert sel["recompute"] == "selective" and sel["info"]["cluster_default"] is True


def test_inference_uses_the_same_plan_pipeline_and_experts(models):
    _, moe = models
    r = run("--model", moe, "--chip", "h100", "--phase", "decode", "--cluster", "dgx-h100",
            "--chips", "8", "--pp", "2", "--dp", "4", "--ep", "4", "--batch", "32",
            "--prompt", "256", "--gen", "32", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["phase"], d["pp"], d["dp"], d["ep"]) == ("decode", 2, 4, 4)
    assert d["tpot_s"] == d["seconds"] and d["exposed_comm_s"]["ep"] > 0
    assert d["exposed_comm_s"]["pp"] > 0 and d["micro_batch"] == 4   # 8 sequences ÷ pp
    r = run("--model", moe, "--chip", "h100", "--phase", "prefill", "--cluster", "dgx-h100",
            "--chips", "4", "--cp", "2", "--dp", "2", "--ep", "2", "--batch", "2",
            "--prompt", "256", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["ttft_s"] == d["seconds"] and d["exposed_comm_s"]["cp"] >= 0


def test_a_batching_curve_on_a_cluster(models):
    tiny, _ = models
    r = run("--model", tiny, "--chip", "h100", "--phase", "decode", "--pp", "2", "--chips",
            "2", "--batch", "2,8", "--prompt", "128", "--json")
    assert r.exit_code == 0, r.output
    assert [c["batch"] for c in json.loads(r.stdout)["curve"]] == [2, 8]


def test_training_only_flags_are_refused_for_inference(models):
    tiny, _ = models
    r = run("--model", tiny, "--chip", "h100", "--phase", "decode", "--prompt", "128",
            "--pp", "2", "--chips", "2", "--zero", "1")
    assert r.exit_code == 2 and "--zero applies to training; decode runs the plan" in r.output
    r = run("--model", tiny, "--chip", "h100", "--phase", "prefill", "--prompt", "128",
            "--cp", "2", "--chips", "2", "--schedule", "gpipe")
    assert r.exit_code == 2 and "--schedule applies to training" in r.output


@pytest.mark.parametrize("args,msg", [
    (["--chips", "8", "--tp", "3", "--pp", "2"],
     "--chips (8) must be a multiple of tp × pp × cp (3 × 2 × 1)"),
    (["--chips", "8", "--pp", "2", "--dp", "2"], "--chips (8) must equal tp × pp × cp × dp"),
    (["--chips", "4", "--pp", "2", "--ep", "2"], "ep=2 needs a mixture-of-experts model"),
    (["--chips", "4", "--pp", "2", "--ep", "4"], "--ep (4) must divide dp × cp (2 × 1)"),
    (["--chips", "4", "--pp", "2", "--virtual-stages", "2"],
     "virtual_stages (2) applies to the interleaved schedule only"),
    (["--chips", "4", "--zero", "5"], "zero must be a ZeRO stage 0, 1, 2 or 3"),
    (["--chips", "4", "--cp", "3"], "--chips (4) must be a multiple of tp × pp × cp"),
    (["--chips", "6", "--cp", "3"], "cp=3 splits each sequence into 2 x cp = 6"),
    (["--chips", "32768", "--cluster", "dgx-h100"], "chips (32768) exceeds the cluster's"),
    (["--chips", "4", "--cluster", "nope.toml"], "nope.toml"),
    (["--chips", "8", "--pp", "2", "--batch", "3"], "--batch (3) must be divisible by dp (4)"),
])
def test_bad_plans_exit_2_naming_the_flag(models, args, msg):
    tiny, _ = models
    r = run("--model", tiny, *TRAIN, *args)
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
