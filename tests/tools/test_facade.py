"""``import diptych``: a light import, and the facade returns what the commands print."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from roofline_double import roofline

import diptych
import diptych.sim.run.node as run_mod
from diptych.arch import load_chip
from diptych.sim.run import Scenario
from diptych.tools.cli import main
from diptych.tools.dse import compare as compare_mod


@pytest.fixture
def no_engine(monkeypatch):
    """The engine replaced by the roofline double, for the facade and the CLI alike."""
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)


def test_import_is_light_until_a_simulation():
    code = ("import sys, diptych\n"
            "assert 'numba' not in sys.modules, 'import diptych loaded numba'\n"
            "chip = diptych.load_chip('tpu-v4'); diptych.Chip\n"
            "assert 'numba' not in sys.modules, 'load_chip loaded numba'\n"
            "diptych.simulate_gemm(128, 128, 128, chip)\n"
            "assert 'numba' in sys.modules\n"
            "print(diptych.__version__)\n")
    # the persistent cache off: a cached 128³ GEMM would need no kernel and load no numba
    from diptych.sim.cache import ENV_OFF
    env = {**os.environ, ENV_OFF: "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == diptych.__version__


def test_public_names():
    for name in diptych.__all__:
        assert getattr(diptych, name) is not None, name
        assert name in dir(diptych)
    assert diptych.Chip is type(diptych.load_chip("tpu-v4"))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        diptych.nope  # noqa: B018


def test_simulate_gemm_is_the_engine_s():
    from diptych.sim import simulate_gemm

    chip = load_chip("tpu-v4")
    assert diptych.simulate_gemm(256, 512, 128, "tpu-v4") == simulate_gemm(256, 512, 128, chip)


def test_run_is_run_json(no_engine):
    args = dict(phase="decode", batch=4, prompt=512, gen=8, precision="w=fp8,a=fp8,kv=fp8")
    r = diptych.run("train-2026", "llama-3-8b", **args)
    cli = CliRunner().invoke(main, ["run", "--chip", "train-2026", "--model", "llama-3-8b",
                                    "--phase", "decode", "--batch", "4", "--prompt", "512",
                                    "--gen", "8", "--precision", "w=fp8,a=fp8,kv=fp8",
                                    "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(json.dumps(r.to_dict())) == json.loads(cli.stdout)
    with pytest.raises(ValueError, match="not a dtype"):
        diptych.run("train-2026", "llama-3-8b", phase="decode", prompt=64, precision="fp9")
    # --execution sum --no-fusion, the same way
    r = diptych.run("train-2026", "llama-3-8b", execution="sum", fusion=False, **args)
    cli = CliRunner().invoke(main, ["run", "--chip", "train-2026", "--model", "llama-3-8b",
                                    "--phase", "decode", "--batch", "4", "--prompt", "512",
                                    "--gen", "8", "--precision", "w=fp8,a=fp8,kv=fp8",
                                    "--execution", "sum", "--no-fusion", "--json"])
    assert r.execution == "sum"
    assert json.loads(json.dumps(r.to_dict())) == json.loads(cli.stdout)


def test_compare_is_compare_json(monkeypatch):
    from diptych.sim.run import run_workload

    monkeypatch.setattr(compare_mod, "_default_run",
                        lambda chip, model, **kw: run_workload(chip, model, Scenario.of(**kw),
                                                               simulate=roofline))
    cmp = diptych.compare(["train-2026", "infer-2026"], "llama-3-8b", prompts=[512],
                          contexts=[1024], batches=[1, 8], ref_batch=8, train_seq=1024,
                          precision=["train:bf16", "infer:fp8"])
    cli = CliRunner().invoke(main, ["compare", "train-2026", "infer-2026", "--model",
                                    "llama-3-8b", "--prompts", "512", "--contexts", "1024",
                                    "--batches", "1,8", "--ref-batch", "8", "--train-seq",
                                    "1024", "--precision", "train:bf16", "--precision",
                                    "infer:fp8", "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(json.dumps(cmp.to_json())) == json.loads(cli.stdout)
    assert cmp.summary("train-2026")["precision"]["decode"]["weights"] == "fp8"


def test_the_facade_covers_serve_plan_sweep_and_floorplan(tmp_path):
    """Issue 23 item 7: every command has its facade function, returning what the command
    prints (the same numbers as its --json)."""
    r = diptych.serve("h100", "llama-3-8b", qps=2.0, requests=3, prompt="128", gen="4",
                      tp=1)
    cli = CliRunner().invoke(main, ["serve", "--chip", "h100", "--model", "llama-3-8b",
                                    "--tp", "1", "--qps", "2", "--requests", "3",
                                    "--prompt", "128", "--gen", "4", "--json"])
    assert cli.exit_code == 0, cli.output
    d = json.loads(cli.output)
    assert r.to_dict()["ttft_s"]["mean"] == pytest.approx(d["ttft_s"]["mean"], rel=1e-12)
    assert r.to_dict()["tpot_s"]["mean"] == pytest.approx(d["tpot_s"]["mean"], rel=1e-12)
    # issue 24 item 5: the result states its scheduler, runtime, pools and precision
    assert r.info["scheduler"] == "continuous" and r.info["runtime"] == "vllm-v1"
    assert r.info["pools"] == d["info"]["pools"] == [
        {"role": "mixed", "chip": "h100", "tp": 1, "replicas": 1, "chips": 1, "ep": 1,
         "attention": "tp", "precision": {"weights": "bf16", "activations": "bf16", "kv": "bf16",
                       "accumulation": "fp32"}}]

    p = diptych.plan("h100", "llama-3-8b", "dgx-h100", chips=8, batch=8, seq=2048, refine=2,
                     tp=[8], zero=[0])
    cli = CliRunner().invoke(main, ["plan", "--chip", "h100", "--model", "llama-3-8b",
                                    "--cluster", "dgx-h100", "--chips", "8", "--batch", "8",
                                    "--seq", "2048", "--refine", "2", "--top", "2", "--tp", "8",
                                    "--zero", "0", "--json"])
    assert cli.exit_code == 0, cli.output
    best = json.loads(cli.output)["plans"][0]
    assert p.plans[0].seconds == pytest.approx(best["seconds"], rel=1e-12)

    spec = tmp_path / "s.toml"
    spec.write_text('base = "infer-2026"\n[chip]\narray_dim = [64]\n[workload]\n'
                    'model = "llama-3-8b"\nphase = ["decode"]\nbatch = [1]\nprompt = [128]\n')
    summary = diptych.sweep(spec, tmp_path / "out", jobs=1)
    assert summary.total == 1 and summary.failed == 0

    fig, plans = diptych.floorplan(["h100"], tmp_path / "f.svg")
    assert (tmp_path / "f.svg").stat().st_size > 0 and plans[0][0] == "h100"
    assert {"serve", "plan", "sweep", "floorplan"} <= set(diptych.__all__)
