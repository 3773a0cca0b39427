"""``diptych plan``: JSON shape and order, trace files, and bad input (exit 2, one line naming
the field and value). A 4-layer model keeps the engine's part short."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diptych.tools.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("tiny"), TINY)


def run(*args):
    return CliRunner().invoke(main, ["plan", *args])


BASE = ["--chip", "h100", "--cluster", "dgx-h100", "--batch", "32", "--seq", "512"]


def test_plan_json_trace_and_execution_traces(tiny, tmp_path):
    tr, et = tmp_path / "t.json", tmp_path / "et"
    r = run("--model", tiny, *BASE, "--chips", "8", "--top", "3", "--refine", "3", "--json",
            "--trace", str(tr), "--export-et", str(et))
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert len(d["plans"]) == 3 and d["candidates"] >= d["fitting"] >= 3
    for p in d["plans"]:
        assert {"tp", "pp", "dp", "ep", "cp", "zero", "schedule", "micro_batch", "seconds",
                "mfu", "memory_bytes_per_chip", "fits"} <= set(p)
        assert p["tp"] * p["pp"] * p["dp"] * p["cp"] == 8 and p["fits"]
    secs = [p["seconds"] for p in d["plans"]]
    assert secs == sorted(secs)
    trace = json.loads(tr.read_text())
    assert sum(e.get("name") == "process_name" for e in trace["traceEvents"]) == 8
    assert len(list(et.glob("diptych.*.et"))) == 8 and (et / "comm_group.json").exists()


def test_plan_table(tiny):
    r = run("--model", tiny, *BASE, "--chips", "4", "--top", "2", "--refine", "2")
    assert r.exit_code == 0, r.output
    assert "best 2 of" in r.output and "best plan:" in r.output


@pytest.mark.parametrize("args,msg", [
    (["--chips", "32768"], "chips (32768) exceeds the cluster's 16384 chips (dgx-h100)"),
    (["--chips", "7"], "no parallel plan splits"),
    (["--chips", "8", "--top", "0"], "--top must be a positive integer, not 0"),
    (["--chips", "0"], "chips must be a positive integer, not 0"),
    (["--chips", "8", "--batch", "0"], "batch must be a positive integer, not 0"),
    (["--chips", "8", "--seq", "-512"], "seq must be a positive integer, not -512"),
    (["--chips", "8", "--max-tp", "0"], "--max-tp must be a positive integer, not 0"),
    (["--chips", "8", "--chip", "groq-lpu"], "chip 'groq-lpu' has no DRAM"),
])
def test_bad_input_exits_2(tiny, args, msg):
    r = run("--model", tiny, *BASE, *args)
    assert r.exit_code == 2 and msg in r.output, r.output
    assert "Traceback" not in r.output


def test_progress_is_off_under_json(tiny, monkeypatch):
    # the progress display is asked to stay quiet with --json (it also stays quiet when
    # stderr is no terminal, as under the test runner, so record what it is asked)
    import contextlib

    from diptych.tools import progress as progress_mod

    asked = []

    @contextlib.contextmanager
    def spy(title, *, enabled=True, console=None):
        asked.append(enabled)
        yield lambda done, total, label: None

    monkeypatch.setattr(progress_mod, "progress_display", spy)
    for extra, want in ((["--json"], False), ([], True)):
        r = run("--model", tiny, *BASE, "--chips", "2", "--top", "1", "--refine", "1", *extra)
        assert r.exit_code == 0, r.output
        assert asked.pop() is want


def test_unknown_topology_kind_exits_2(tiny, tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text('name = "x"\ndomains = 1\n[scale_up]\nfabric = "hypercube"\nchips = 8\n'
                   'latency_us = 1.0\n[scale_out]\nkind = "none"\n')
    r = run("--model", tiny, "--chip", "h100", "--cluster", str(bad), "--chips", "8",
            "--batch", "8", "--seq", "512")
    assert r.exit_code == 2
    assert "scale_up.fabric: expected one of 'switch', 'torus', got 'hypercube'" in r.output


def test_narrowing_flags_restrict_the_search_to_the_values_given():
    args = ["plan", "--model", "llama-3-8b", "--chip", "h100", "--cluster", "dgx-h100",
            "--chips", "64", "--batch", "64", "--seq", "2048", "--top", "3", "--refine", "3",
            "--json"]
    full = json.loads(CliRunner().invoke(main, args).output)
    r = CliRunner().invoke(main, args + ["--tp", "4,8", "--zero", "1", "--micro-batch", "1",
                                         "--schedule", "1f1b", "--recompute", "none"])
    assert r.exit_code == 0, r.output
    narrow = json.loads(r.output)
    assert 0 < narrow["candidates"] < full["candidates"]
    for p in narrow["plans"]:
        assert p["tp"] in (4, 8) and p["zero"] == 1 and p["micro_batch"] == 1
        assert p["schedule"] == "1f1b" and p["recompute"] == "none"


@pytest.mark.parametrize("flag, value, message", [
    ("--zero", "4", "zero must be among 0, 1, 2, 3, not 4"),
    ("--tp", "0", "expected comma-separated positive integers, not '0'"),
    ("--schedule", "zigzag", "'zigzag' is not one of gpipe, 1f1b, interleaved"),
    ("--pp", "3", "narrowed to pp 3"),
])
def test_narrowing_flags_reject_bad_values_naming_them(flag, value, message):
    r = CliRunner().invoke(main, ["plan", "--model", "llama-3-8b", "--chip", "h100",
                                  "--cluster", "dgx-h100", "--chips", "64", "--batch", "64",
                                  "--seq", "2048", flag, value])
    assert r.exit_code == 2 and message in r.output, r.output


def test_execution_reaches_the_refined_plans(tiny):
    # plan --execution and run --cluster --execution time the layers as asked: the same plan
    # refined with summed layers is the one `run --cluster --execution sum` simulates, and
    # the default (the schedule) is what `run --cluster` gives without the flag
    args = ["--model", tiny, *BASE, "--chips", "8", "--tp", "8", "--pp", "1", "--zero", "1",
            "--micro-batch", "1", "--schedule", "1f1b", "--recompute", "none", "--top", "1",
            "--refine", "1", "--json"]
    for ex in ("sum", "schedule"):
        flags = ["--execution", ex] if ex == "sum" else []
        p = json.loads(run(*args, *flags).output)["plans"][0]
        r = CliRunner().invoke(main, ["run", "--model", tiny, "--chip", "h100", "--cluster",
                                      "dgx-h100", "--phase", "train", "--seq", "512",
                                      "--batch", "32", "--chips", "8", "--tp", "8",
                                      "--micro-batch", "1", "--zero", "1", "--json", *flags])
        assert r.exit_code == 0, r.output
        d = json.loads(r.output)
        assert d["info"]["execution"] == ex and p["execution"] == ex
        assert p["seconds"] == pytest.approx(d["seconds"], rel=1e-12)
