"""The sweep machinery with a tiny injected evaluator: rows, failures, budgets, resume, Dask."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.sim.run import Scenario
from diptych.tools.cli import main
from diptych.tools.dse.spec import load_spec, parse_spec
from diptych.tools.dse.sweep import part_files, read_results, run_sweep

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import fake_eval  # noqa: E402
from diptych.arch.area import die_area_mm2

SPEC = """
base = "infer-2026"
[chip]
array_dim = [64, 128]
dtype = ["int8", "bf16"]
sram_mib = [64, 256]
[workload]
model = "llama-3-8b"
phase = ["prefill", "decode"]
batch = [1, 8, 13]
"""


def write_spec(tmp_path, text=SPEC, name="spec.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def rows_by_id(out):
    rows = read_results(out).to_pylist()
    ids = [r["point_id"] for r in rows]
    assert len(ids) == len(set(ids)), "duplicate rows"
    return {r["point_id"]: {k: v for k, v in r.items() if k not in ("eval_s", "traceback")}
            for r in rows}


def test_rows_have_every_parameter_and_metric_and_failures_are_recorded(tmp_path):
    s = load_spec(write_spec(tmp_path))
    with cf.ThreadPoolExecutor(2) as ex:
        summary = run_sweep(s, tmp_path / "out", evaluate=fake_eval.toy_eval, executor=ex,
                            progress=False)
    pts = s.points()
    assert summary.total == summary.ran == len(pts) == 2 * 2 * 2 * 2 * 3
    rows = rows_by_id(tmp_path / "out")
    assert set(rows) == {p.id for p in pts}
    for p in pts:
        r = rows[p.id]
        for k, v in p.params.items():
            assert r[k] == v
        if p.workload["batch"] == 13:
            assert r["error"] == "RuntimeError: unlucky batch 13" and r["seconds"] is None
        else:
            assert r["error"] is None
            assert r["tokens_per_s"] == pytest.approx(
                fake_eval.toy_eval(s.build_chip(p.chip), p.workload)["tokens_per_s"])
            assert r["area_mm2"] == pytest.approx(die_area_mm2(s.build_chip(p.chip)))
    assert summary.failed == sum(1 for p in pts if p.workload["batch"] == 13)
    # a second run finds everything done
    with cf.ThreadPoolExecutor(2) as ex:
        again = run_sweep(s, tmp_path / "out", evaluate=fake_eval.toy_eval, executor=ex,
                          progress=False)
    assert again.ran == 0 and again.skipped == len(pts)


def test_area_budget_filters_and_an_impossible_budget_is_an_error(tmp_path):
    base = {"base": "infer-2026", "chip": {"array_dim": [64, 256]},
            "workload": {"model": "llama-3-8b", "phase": "decode"}}
    dims = {}
    for d in (64, 256):
        dims[d] = die_area_mm2(parse_spec(base).build_chip({"array_dim": d}))
    budget = (dims[64] + dims[256]) / 2
    s = parse_spec({**base, "area_budget_mm2": budget})
    summary = run_sweep(s, tmp_path / "o1", evaluate=fake_eval.toy_eval,
                        executor=cf.ThreadPoolExecutor(1), progress=False)
    assert (summary.over_budget, summary.ran) == (1, 1)
    assert [r["array_dim"] for r in read_results(tmp_path / "o1").to_pylist()] == [64]
    s = parse_spec({**base, "area_budget_mm2": dims[64] / 2})
    with pytest.raises(ValueError, match=r"area_budget_mm2 = .* excludes every one of the 2 "
                                         r"points; the smallest die is"):
        run_sweep(s, tmp_path / "o2", evaluate=fake_eval.toy_eval, progress=False)


def test_power_budget_column_and_impossible_power_budget(tmp_path):
    base = {"base": "infer-2026", "chip": {"array_dim": [64]},
            "workload": {"model": "llama-3-8b", "phase": "decode"}}
    tdp = parse_spec(base).build_chip({"array_dim": 64}).tdp_w
    s = parse_spec({**base, "power_budget_w": tdp})  # toy power is tdp / 2
    run_sweep(s, tmp_path / "o1", evaluate=fake_eval.toy_eval,
              executor=cf.ThreadPoolExecutor(1), progress=False)
    assert read_results(tmp_path / "o1").column("within_power_budget").to_pylist() == [True]
    s = parse_spec({**base, "power_budget_w": tdp / 4})
    with pytest.raises(ValueError, match="power_budget_w = .* no point stays within it"):
        run_sweep(s, tmp_path / "o2", evaluate=fake_eval.toy_eval,
                  executor=cf.ThreadPoolExecutor(1), progress=False)
    assert part_files(tmp_path / "o2")  # results are kept


def test_invalid_chip_point_is_recorded_not_fatal(tmp_path):
    # 20 GHz is outside the clock range the chip schema accepts
    s = parse_spec({"base": "infer-2026", "chip": {"clock_ghz": [1.0, 20.0]},
                    "workload": {"model": "llama-3-8b", "phase": "decode"}})
    summary = run_sweep(s, tmp_path / "o", evaluate=fake_eval.toy_eval,
                        executor=cf.ThreadPoolExecutor(1), progress=False)
    rows = {r["clock_ghz"]: r for r in read_results(tmp_path / "o").to_pylist()}
    assert rows[1.0]["error"] is None
    assert "clock_ghz=20.0: clock_ghz: expected" in rows[20.0]["error"]
    assert rows[20.0]["error"].endswith("got 20.0")
    assert summary.failed == 1 and summary.ran == 2


def env_with_fake(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def test_sigkill_mid_run_then_resume_gives_the_uninterrupted_row_set(tmp_path):
    spec = write_spec(tmp_path)
    n = len(load_spec(spec).points())
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "diptych.tools.cli", "sweep", str(spec), "--out", str(killed),
           "--evaluator", "fake_eval:toy_eval", "-j", "2", "--points-per-task", "1",
           "--no-progress"]
    proc = subprocess.Popen(cmd, env=env_with_fake(FAKE_EVAL_DELAY_S="0.2"),
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while len(part_files(killed)) < 5:
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "sweep wrote no rows in 60 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its pool workers
        proc.wait()
    partial = len(read_results(killed))
    assert 5 <= partial < n
    r = subprocess.run(cmd, env=env_with_fake(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"{partial} already done" in r.stdout
    whole = tmp_path / "whole"
    run_sweep(load_spec(spec), whole, evaluate=fake_eval.toy_eval,
              executor=cf.ThreadPoolExecutor(2), progress=False)
    assert rows_by_id(killed) == rows_by_id(whole)
    # the resumed directory is one table for the tools people use, without duplicates
    import pandas as pd
    import pyarrow.dataset as ds

    assert len(pd.read_parquet(killed)) == n == ds.dataset(killed).to_table().num_rows


def test_dask_scheduler_and_worker_on_loopback(tmp_path):
    spec = write_spec(tmp_path)
    sched_file = tmp_path / "scheduler.json"
    env = env_with_fake()
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                              "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                              "--scheduler-file", str(sched_file)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() or not sched_file.read_text().strip():
            assert time.monotonic() < deadline, "scheduler did not start"
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                                   "--nthreads", "2", "--nworkers", "1", "--no-dashboard",
                                   "--no-nanny"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        r = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "dask"),
                                      "--scheduler", address, "--evaluator",
                                      "fake_eval:toy_eval", "--no-progress"])
        assert r.exit_code == 0, r.output
    finally:
        for p in (worker, sched):
            if p is not None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
    local = tmp_path / "local"
    run_sweep(load_spec(spec), local, evaluate=fake_eval.toy_eval,
              executor=cf.ThreadPoolExecutor(2), progress=False)
    assert rows_by_id(tmp_path / "dask") == rows_by_id(local)


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    spec = write_spec(tmp_path)
    r = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "o"),
                                  "--scheduler", "tcp://127.0.0.1:9", "--evaluator",
                                  "fake_eval:toy_eval", "--no-progress"])
    assert r.exit_code == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in r.output


def test_cli_messages(tmp_path):
    bad = write_spec(tmp_path, SPEC.replace("array_dim", "array_size"), "bad.toml")
    r = CliRunner().invoke(main, ["sweep", str(bad), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "chip.array_size: unknown chip parameter" in r.output
    good = write_spec(tmp_path)
    r = CliRunner().invoke(main, ["sweep", str(good), "--out", str(tmp_path / "o"),
                                  "--evaluator", "nope"])
    assert r.exit_code == 2 and "evaluator must be written module:function" in r.output
    r = CliRunner().invoke(main, ["sweep", str(good), "--out", str(tmp_path / "o"), "--dry-run"])
    assert r.exit_code == 0 and "48 points (8 chips × 6 workloads)" in r.output


def test_default_evaluator_is_run_workload(tmp_path):
    """Two decode points through the real engine: rows equal direct run_workload results."""
    import warnings

    from diptych.sim.run import run_workload

    s = parse_spec({"base": "infer-2026", "chip": {"array_dim": [64, 128]},
                    "workload": {"model": "llama-3-8b", "phase": "decode", "batch": 1,
                                 "prompt": 512, "gen": 1}})
    summary = run_sweep(s, tmp_path / "o", executor=cf.ThreadPoolExecutor(1), progress=False)
    assert summary.failed == 0
    rows = read_results(tmp_path / "o").to_pylist()
    for r in rows:
        chip = s.build_chip({"array_dim": r["array_dim"]})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = run_workload(chip, "llama-3-8b",
                               Scenario.of(phase="decode", batch=1, prompt=512, gen=1))
        assert r["tpot_s"] == pytest.approx(ref.tpot_s)
        assert r["energy_j"] == pytest.approx(ref.energy_j)
        assert r["power_w"] == pytest.approx(ref.energy_j / ref.seconds)
        assert r["exceeds_tdp"] == (ref.energy_j / ref.seconds > chip.tdp_w)
        assert r["tokens_per_j"] == pytest.approx(1 / ref.energy_j_per_token)
        assert r["bound"] == ref.bound and r["fits"] == ref.fits


def test_cli_sweep_csv_export_and_pareto_reads_it(tmp_path):
    spec = write_spec(tmp_path)
    csv = tmp_path / "rows.csv"
    r = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "1",
                                  "--evaluator", "fake_eval:toy_eval", "--no-progress",
                                  "--csv", str(csv)], env=env_with_fake())
    assert r.exit_code == 0, r.output
    assert "48 points: 48 run (16 failed)" in r.output
    header = csv.read_text().splitlines()[0]
    assert '"point_id"' in header and "traceback" not in header
    assert len(csv.read_text().strip().splitlines()) == 1 + 48
    from_csv = read_results(csv).to_pylist()
    from_dir = read_results(tmp_path / "o").to_pylist()
    assert {r["point_id"] for r in from_csv} == {r["point_id"] for r in from_dir}
    r = CliRunner().invoke(main, ["pareto", str(csv), "--x", "area_mm2", "--y",
                                  "prefill_tokens_per_s", "-o", str(tmp_path / "p.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
