"""``diptych run --precision``: the shorthand equals the per-tensor options it stands for."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from roofline_double import roofline

import diptych.sim.run.node as run_mod
from diptych.sim.run import Scenario
from diptych.tools.cli import main

BASE = ["run", "--chip", "train-2026", "--model", "llama-3-8b", "--phase", "decode",
        "--batch", "4", "--prompt", "256", "--json"]


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.setattr(run_mod, "_default_simulate", lambda: roofline)
    runner = CliRunner()
    return lambda *args: runner.invoke(main, [*BASE, *args])


def _json(r):
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_shorthand_equals_the_per_tensor_options(cli):
    a = _json(cli("--precision", "w=fp8,a=fp8,kv=fp8"))
    b = _json(cli("--weights-dtype", "fp8", "--act-dtype", "fp8", "--kv-dtype", "fp8"))
    assert a["precision"] == b["precision"] and a["precision"]["weights"] == "fp8"
    assert a["tpot_s"] == b["tpot_s"]
    c = _json(cli("--precision", "fp8"))
    assert c["tpot_s"] == a["tpot_s"]
    d = _json(cli("--precision", "w=fp8"))     # weight-only: activations keep bf16
    assert (d["precision"]["weights"], d["precision"]["activations"]) == ("fp8", "bf16")
    e = _json(cli("--precision", "w=fp8", "--kv-dtype", "fp8"))   # different tensors: fine
    assert (e["precision"]["weights"], e["precision"]["kv"]) == ("fp8", "fp8")


def test_conflicts_and_other_phases_are_errors(cli):
    r = cli("--precision", "bf16", "--weights-dtype", "fp8")
    assert r.exit_code == 2 and "both set that tensor" in r.output
    r = cli("--precision", "train:fp8")
    assert r.exit_code == 2 and "not the decode phase" in r.output
    r = cli("--precision", "int8")              # train-2026 has no int8 datapath
    assert r.exit_code == 2 and "cannot compute" in r.output


def test_run_curve_reports_progress():
    calls = []
    run_mod.run_curve("train-2026", "llama-3-8b", Scenario.of(phase="decode", prompt=128),
                      batches=[1, 4], simulate=roofline, progress=lambda *a: calls.append(a))
    assert calls == [(0, 2, "batch 1"), (1, 2, "batch 4"), (2, 2, "done")]
