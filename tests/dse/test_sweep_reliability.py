"""Sweeps never lose work: dead workers, killed parents, two sweeps on one directory, stale
temporary files, bad specs found before any point runs. Real processes and real signals; the
closed-form evaluators of ``fake_eval`` keep every test to a few seconds."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from diptych.tools.cli import main
from diptych.tools.dse.results import LOCK_FILE
from diptych.tools.dse.spec import load_spec, parse_spec
from diptych.tools.dse.sweep import MAX_WORKER_DEATHS, part_files, read_results, run_sweep

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import fake_eval  # noqa: E402

SMALL = {"base": "infer-2026", "chip": {"array_dim": [64]},
         "workload": {"model": "llama-3-8b", "phase": ["prefill", "decode"],
                      "batch": [1, 7, 8]}}

SPEC_TOML = """
base = "infer-2026"
[chip]
array_dim = [64, 128]
sram_mib = [64, 256]
[workload]
model = "llama-3-8b"
phase = ["prefill", "decode"]
batch = [1, 8]
"""


def rows_by_id(out):
    rows = read_results(out).to_pylist()
    return {r["point_id"]: {k: v for k, v in r.items() if k not in ("eval_s", "traceback")}
            for r in rows}


def reference(tmp_path, spec):
    whole = tmp_path / "whole"
    run_sweep(spec, whole, evaluate=fake_eval.toy_eval, executor=cf.ThreadPoolExecutor(2),
              progress=False)
    return rows_by_id(whole)


def env_with_fake(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


# ---- (a) a worker that dies ----------------------------------------------------------------


def test_a_worker_killed_mid_sweep_loses_nothing(tmp_path, monkeypatch):
    """Each batch-7 point SIGKILLs its worker the first time it runs: the pool is rebuilt,
    the points in flight run again, and the rows equal an undisturbed run's."""
    monkeypatch.setenv("FAKE_EVAL_DIE_BATCH", "7")
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("FAKE_EVAL_DIE_ONCE", str(marks))
    spec = parse_spec(SMALL)
    s = run_sweep(spec, tmp_path / "o", evaluate=fake_eval.dying_eval, jobs=2,
                  points_per_task=2, progress=False)
    assert len(list(marks.iterdir())) == 2  # both batch-7 points did kill a worker
    assert s.worker_deaths >= 1 and s.failed == 0 and s.ran == 6
    assert rows_by_id(tmp_path / "o") == reference(tmp_path, spec)


def test_a_point_that_always_kills_its_worker_is_failed_alone_and_resumed(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("FAKE_EVAL_DIE_BATCH", "7")
    monkeypatch.delenv("FAKE_EVAL_DIE_ONCE", raising=False)
    spec = parse_spec(SMALL)
    out = tmp_path / "o"
    s = run_sweep(spec, out, evaluate=fake_eval.dying_eval, jobs=2, points_per_task=3,
                  progress=False)
    rows = rows_by_id(out)
    died = {pid: r for pid, r in rows.items() if r["worker_died"]}
    assert {r["batch"] for r in died.values()} == {7} and len(died) == 2
    for r in died.values():
        assert r["error"].startswith(f"worker died: the worker process died "
                                     f"{MAX_WORKER_DEATHS} times while evaluating this point "
                                     "alone")
    ok = {pid: r for pid, r in rows.items() if not r["worker_died"]}
    assert len(ok) == 4 and all(r["error"] is None for r in ok.values())
    assert s.failed == 2
    # the crash is fixed: a resume runs exactly the two points again, replacing their rows
    monkeypatch.delenv("FAKE_EVAL_DIE_BATCH")
    again = run_sweep(spec, out, evaluate=fake_eval.dying_eval, jobs=2, progress=False)
    assert (again.ran, again.skipped, again.failed) == (2, 4, 0)
    assert rows_by_id(out) == reference(tmp_path, spec)
    import pandas as pd

    df = pd.read_parquet(out)
    assert len(df) == 6 and df["point_id"].is_unique


# ---- (b) the parent dies -------------------------------------------------------------------


@contextlib.contextmanager
def running_sweep(tmp_path, out, *extra, delay="0.3"):
    """(command, process) of a ``diptych sweep`` subprocess in its own session; the whole
    session is SIGKILLed on the way out."""
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC_TOML)
    cmd = [sys.executable, "-m", "diptych.tools.cli", "sweep", str(spec), "--out", str(out),
           "--evaluator", "fake_eval:toy_eval", "-j", "2", "--points-per-task", "1",
           "--no-progress", *extra]
    proc = subprocess.Popen(cmd, env=env_with_fake(FAKE_EVAL_DELAY_S=delay),
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield cmd, proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def test_sigkill_of_the_sweep_takes_its_workers_with_it(tmp_path):
    out = tmp_path / "o"
    with running_sweep(tmp_path, out) as (_, proc):
        wait_until(lambda: len(children(proc.pid)) >= 2 and part_files(out), 60,
                   "the sweep started no workers")
        workers = children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)  # the main process only, as the OOM killer would
        proc.wait()
        t0 = time.monotonic()
        wait_until(lambda: not any(alive(w) for w in workers), 5,
                   f"workers {workers} outlived their parent by 5 s")
        assert time.monotonic() - t0 < 5


def test_ctrl_c_stops_a_sweep_with_exit_130_and_one_line(tmp_path):
    # each point takes 60 s, so a sweep that waited for its running points would take ~60 s
    # to stop; the bound below is generous for a busy 2-core machine and still far from that
    with running_sweep(tmp_path, tmp_path / "o", delay="60") as (_, proc):
        wait_until(lambda: len(children(proc.pid)) >= 2, 60, "the sweep started no workers")
        workers = children(proc.pid)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 15
        assert proc.returncode == 130
        assert err.strip().splitlines() == ["diptych: interrupted"]
        wait_until(lambda: not any(alive(w) for w in workers), 5, "workers outlived Ctrl-C")


# ---- (c) two sweeps, one directory; (d) stale temporary files --------------------------------


def test_a_second_sweep_on_a_locked_directory_is_refused(tmp_path):
    out = tmp_path / "o"
    with running_sweep(tmp_path, out, delay="0.2") as (cmd, proc):
        wait_until(lambda: part_files(out), 60, "the first sweep wrote nothing")
        r = CliRunner().invoke(main, cmd[3:], env=env_with_fake())
        assert r.exit_code == 2
        assert r.output.strip() == (f"Error: {out}: another sweep (pid {proc.pid}) is writing "
                                    "to this results directory; wait for it to finish, or use "
                                    "another --out")
        assert proc.wait(60) == 0
    rows = read_results(out).column("point_id").to_pylist()
    assert len(rows) == len(set(rows)) == 16
    assert (out / LOCK_FILE).exists()  # released, not removed: the next sweep takes it
    r = CliRunner().invoke(main, cmd[3:], env=env_with_fake())
    assert r.exit_code == 0 and "16 already done" in r.output


def test_stale_temporary_files_are_removed(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    stale = [out / ".part-00000000000000000001-deadbeef.parquet.tmp",
             out / "._common_metadata.tmp"]
    for p in stale:
        p.write_bytes(b"PAR1 half a file")
    run_sweep(parse_spec(SMALL), out, evaluate=fake_eval.toy_eval,
              executor=cf.ThreadPoolExecutor(1), progress=False)
    assert not any(p.exists() for p in stale)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [LOCK_FILE]


# ---- (e) bad specs fail before any point runs; all points failed exits non-zero -------------


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace('"llama-3-8b"', '"llama-9"'),
     "spec.toml: workload.model[0]: unknown model 'llama-9'"),
    (lambda s: s.replace('"infer-2026"', '"nan-chip.toml"'),
     "spec.toml: base: {dir}/nan-chip.toml: clock_ghz: expected a finite number >= 0.001 and "
     "<= 10 (GHz: 1 MHz is a slow microcontroller, 10 GHz is above any shipped logic clock), "
     "got nan"),
    (lambda s: s.replace("batch = [1, 8]", "batch = [1, 1000000000]"),
     "spec.toml: workload.batch[1]: batch must be at most 1,048,576 sequences"),
])
def test_a_bad_spec_fails_before_any_point_runs(tmp_path, edit, message):
    from importlib import resources

    chip = resources.files("diptych.arch.chips").joinpath("tpu-v4.toml").read_text()
    (tmp_path / "nan-chip.toml").write_text(chip.replace("clock_ghz = 1.05", "clock_ghz = nan"))
    spec = tmp_path / "spec.toml"
    spec.write_text(edit(SPEC_TOML))
    r = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "o"),
                                  "--evaluator", "fake_eval:toy_eval", "--no-progress"])
    assert r.exit_code == 2, r.output
    assert message.format(dir=tmp_path) in r.output.replace(f"{tmp_path}/spec.toml", "spec.toml")
    assert len(r.output.strip().splitlines()) == 1
    assert not part_files(tmp_path / "o")


def test_a_sweep_whose_points_all_fail_exits_non_zero(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC_TOML.replace("batch = [1, 8]", "batch = [13]"))
    r = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "1",
                                  "--evaluator", "fake_eval:toy_eval", "--no-progress"],
                           env=env_with_fake())
    assert r.exit_code == 1
    assert r.output.strip().splitlines()[-1] == (
        f"Error: every point of {spec} failed (results kept in {tmp_path / 'o'}); the first "
        "error: RuntimeError: unlucky batch 13")


# ---- (f) and size guards -------------------------------------------------------------------


def test_scheduler_help_warns_that_a_cluster_runs_code():
    r = CliRunner().invoke(main, ["sweep", "--help"])
    text = " ".join(r.output.split())
    assert "runs the code it is sent" in text and "unpickles the results" in text
    assert "use only a cluster you trust" in text


def test_a_huge_grid_is_counted_not_built(tmp_path):
    values = ", ".join(str(1.0 + i / 1000) for i in range(1000))
    spec = tmp_path / "huge.toml"
    spec.write_text(f"""base = "infer-2026"
[chip]
clock_ghz = [{values}]
sram_mib_per_core = [{values}]
tdp_w = [{values}]
[workload]
model = "llama-3-8b"
phase = "decode"
batch = [{", ".join(str(i) for i in range(1, 1001))}]
""")
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "o"),
                                  "--dry-run"])
    assert time.monotonic() - t0 < 15  # enumerating the points would take hours
    assert r.exit_code == 2
    assert r.output.strip() == (f"Error: {spec}: the spec describes 1,000,000,000,000 points "
                                "(1,000,000,000 chips × 1,000 workloads); a sweep runs at most "
                                "1,000,000: split it into several specs")


def test_an_infinite_random_bound_is_refused(tmp_path):
    spec = tmp_path / "r.toml"
    spec.write_text("""base = "infer-2026"
mode = "random"
samples = 3
[chip]
clock_ghz = { min = 0.5, max = inf }
[workload]
model = "llama-3-8b"
phase = "decode"
""")
    r = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(tmp_path / "o"),
                                  "--dry-run"])
    assert r.exit_code == 2
    assert r.output.strip() == (f"Error: {spec}: chip.clock_ghz.max: expected a finite "
                                "positive number, got inf")


def test_dry_run_counts_invalid_and_over_budget_chips():
    spec = parse_spec({**SMALL, "chip": {"clock_ghz": [1.0, 20.0], "array_dim": [64, 256]}})
    from diptych.tools.dse.sweep import count_points, prepare

    items, bad, over = prepare(spec)
    assert count_points(spec) == (len(items), len(bad), over) == (12, 12, 0)
    assert len(spec.points()) == spec.count() == 24


def test_load_spec_of_a_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"spec.toml: cannot read sweep spec \(not a regular "):
        load_spec(fifo)


def test_a_memory_error_is_not_the_points_fault_and_is_run_again(tmp_path, monkeypatch):
    """Issue 22 item 8: a transient MemoryError is recorded like a dead worker (not as the
    point's result) and the next run evaluates the point again."""
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("FAKE_EVAL_OOM_BATCH", "7")
    monkeypatch.setenv("FAKE_EVAL_OOM_DIR", str(marks))
    spec = parse_spec(SMALL)
    out = tmp_path / "o"
    run_sweep(spec, out, evaluate=fake_eval.oom_once_eval, executor=cf.ThreadPoolExecutor(2),
              progress=False)
    rows = rows_by_id(out)
    oom = [r for r in rows.values() if r["worker_died"]]
    assert {r["batch"] for r in oom} == {7} and len(oom) == 2
    assert all(r["error"].startswith("MemoryError") and "run again" in r["error"] for r in oom)
    again = run_sweep(spec, out, evaluate=fake_eval.oom_once_eval,
                      executor=cf.ThreadPoolExecutor(2), progress=False)
    assert (again.ran, again.skipped, again.failed) == (2, 4, 0)
    assert rows_by_id(out) == reference(tmp_path, spec)


def test_a_non_finite_metric_is_an_error_row(tmp_path):
    spec = parse_spec(SMALL)
    out = tmp_path / "o"
    s = run_sweep(spec, out, evaluate=fake_eval.nan_eval, executor=cf.ThreadPoolExecutor(2),
                  progress=False)
    rows = rows_by_id(out)
    bad = [r for r in rows.values() if r["batch"] == 8]
    assert len(bad) == 2 and s.failed == 2
    assert all(r["error"] == "non-finite metric: seconds = nan" for r in bad)
    assert all(r["error"] is None for r in rows.values() if r["batch"] != 8)


@pytest.mark.parametrize("make,message", [
    (lambda f: os.mkfifo(f), "cannot read results part (not a regular file)"),
    (lambda f: pq.write_table(pa.table([[1.0], [2.0]], names=["energy_j", "energy_j"]), f),
     "the header names 'energy_j' more than once (a column may appear once)"),
])
def test_a_sweep_resuming_into_a_directory_with_a_bad_part_names_it(tmp_path, make, message):
    """A results directory a sweep resumes holds a part that is a FIFO, or one whose schema
    names a column twice (issue 22 item 5): refused before any point runs, naming it."""
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC_TOML)
    out = tmp_path / "o"
    out.mkdir()
    make(out / "part-00001.parquet")
    r = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(out), "-j", "1",
                                  "--no-progress", "--evaluator", "fake_eval:toy_eval"])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == f"Error: {out / 'part-00001.parquet'}: {message}"
