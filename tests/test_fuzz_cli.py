"""No traceback for any input: generated malformed files of every kind fed to every command.

The corpus (``tests/fuzz_corpus.py``, shared with ``benchmarks/bench_fuzz.py``, which runs
all of it and prints its counts) mutates valid inputs (chip TOML, sweep spec TOML, model
config.json, topology CSV, sweep results for ``pareto``, runtime profiles, cluster files,
request traces, the result cache's entries) at the value, structure and byte level, sets the
serve/plan/run --cluster flags to issue 22's classes (1e-300, 1e308, huge counts, NaN), and
hands every file-taking flag a FIFO, ``/dev/zero``, a directory and a name twice; each case
goes to the commands that read it, in-process through click's CliRunner under an alarm (a
handful also through real processes). Every run must end as a correct diptych ends
(:data:`fuzz_corpus.OUTCOMES` ``clean``): exit 0 (the mutant happened to be valid) or 2 and
exactly one ``Error: ...`` line where an error is due, a bad cache entry recomputed with a
warning and the sound output; never a traceback, the ``internal error`` net (exit 1), a hang
or a silent result. The issue's ten root causes are pinned as named cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

import fuzz_corpus as F
from fuzz_corpus import preset, toml_doc, write
from diptych.tools.cli import main

HERE = Path(__file__).parent
FAKE = HERE / "dse"
sys.path.insert(0, str(FAKE))  # fake_eval, for the few sweeps that run


# ---- running ------------------------------------------------------------------------------------


def check(args: list[str], what: str, *, all_failed_ok: bool = False):
    r = CliRunner().invoke(main, args)
    out = r.output
    context = f"{what}: diptych {' '.join(args)}\n{out}"
    assert "Traceback" not in out, context
    if r.exit_code == 1 and all_failed_ok and out.strip().startswith("Error: every point of"):
        return r
    assert r.exit_code in (0, 2), context + repr(r.exception)
    if r.exit_code == 0 and "--json" in args:  # strict JSON: no NaN or Infinity tokens
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json: {context}"))
    if r.exit_code == 2:
        lines = out.strip().splitlines()
        if lines[0].startswith("Usage: "):  # click's own usage error (an unknown option)
            lines = lines[3:]
        assert len(lines) == 1 and lines[0].startswith("Error: "), context
        assert "internal error" not in out, context
    return r


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return F.workspace(tmp_path_factory.mktemp("fuzz"))


def run_families(ws, families, scale: float = 1.0) -> Counter:
    """Every case of ``families`` at ``scale``: each must end clean; the counts (by outcome,
    and exit 0 / refused among the clean) are returned and printed."""
    counts: Counter = Counter()
    bad = []
    for case in F.corpus(ws, families, scale):
        outcome, detail = F.run_case(case, timeout_s=120)
        counts[outcome] += 1
        counts["exit 0" if detail.startswith("exit 0") else "refused"] += outcome == "clean"
        if outcome != "clean":
            bad.append(f"[{case.family}] {case.what}: diptych {' '.join(case.args)[:200]}\n"
                       f"  {outcome}: {detail}")
    print(f"{', '.join(families)}: {sum(counts[o] for o in F.OUTCOMES)} runs, "
          + ", ".join(f"{counts[k]} {k}" for k in (*F.OUTCOMES, "exit 0", "refused")))
    assert not bad, "\n".join(bad)
    return counts


# ---- the generated cases -------------------------------------------------------------------------


def test_fuzz_chip_files(ws):
    """Chip mutants (denormal and near-overflow values too) to chips validate/show, gemm, run
    and floorplan; a chip with a denormal-scale field must never validate (each field has a
    physical floor: the corpus expects an error)."""
    c = run_families(ws, ["chip"])
    assert c["refused"] > 0.6 * c["clean"]  # the generator mostly makes bad inputs


def test_fuzz_sweep_specs(ws):
    run_families(ws, ["sweep spec"])


def test_fuzz_model_configs(ws):
    run_families(ws, ["model"])


def test_fuzz_topology_files(ws):
    run_families(ws, ["topology"])


def test_fuzz_pareto_inputs(ws):
    run_families(ws, ["results"])


def test_fuzz_command_line_numbers(ws):
    for dims in (["0", "1", "1"], ["-5", "1", "1"], ["1e3", "1", "1"], ["x", "1", "1"],
                 ["9" * 30, "1", "1"], ["1000000000000"] * 3, ["1000000"] * 3):
        check(["gemm", *dims, "--chip", "tpu-v4"], "gemm dims")
    for batch in ("0", "-1", "x", "1,,2", "1000000000", "9" * 40):
        check(["run", "--chip", "tpu-v4", "--model", "llama-3-8b", "--phase", "decode",
               "--batch", batch, "--prompt", "16"], f"batch {batch}")
    for sched in ("tcp://[::1", "tcp://host:99999", "tcp://" + "x" * 300 + ":1", "udp://h:1"):
        spec = write(ws / "ok-spec.toml", toml_doc({"base": "tpu-v4", "workload": {
            "model": "llama-3-8b", "phase": "decode"}}))
        check(["sweep", str(spec), "--out", str(ws / "s"), "--scheduler", sched], sched)


# ---- the root causes, by name ------------------------------------------------------------


ROOT_CAUSES = [
    ("deeply nested TOML", "chip", b"x = " + b"[" * 50_000 + b"]" * 50_000,
     "invalid TOML (nested too deeply)"),
    ("deeply nested JSON", "model", b"[" * 100_000 + b"]" * 100_000,
     "invalid JSON (nested too deeply)"),
    ("nested architectures", "model", b'{"architectures": [["LlamaForCausalLM"]]}',
     "architectures must be a list of architecture names (strings)"),
    ("10**30 layers (hung building them)", "model",
     json.dumps({**json.loads(resources.files("diptych.workloads.models")
                              .joinpath("llama-3-8b.json").read_text()),
                 "num_hidden_layers": 10**30}).encode(),
     "num_hidden_layers must be an integer <= 10,000"),
    ("CSV field over 128 KiB", "topology", b"M,N,K\n" + b'"' + b"1" * 200_000 + b'",1,1\n',
     "invalid CSV (field larger than field limit (131072))"),
    ("undecodable chip", "chip", b'name = "caf\xe9"\n', "chip file is not UTF-8 text"),
    ("undecodable model", "model", b'{"x": "caf\xe9"}', "model config is not UTF-8 text"),
    ("undecodable topology", "topology", b"M,N,K\n\xff,1,1\n", "topology file is not UTF-8"),
    ("inf bound in a random sweep", "spec",
     b'base = "tpu-v4"\nmode = "random"\nsamples = 2\n[chip]\nclock_ghz = {min = 1, max = inf}'
     b'\n[workload]\nmodel = "llama-3-8b"\nphase = "decode"\n',
     "chip.clock_ghz.max: expected a finite positive number, got inf"),
]


@pytest.mark.parametrize("what,kind,content,message", ROOT_CAUSES,
                         ids=[c[0] for c in ROOT_CAUSES])
def test_root_causes_are_messages_naming_the_file(ws, what, kind, content, message):
    suffix = {"chip": "toml", "model": "json", "topology": "csv", "spec": "toml"}[kind]
    f = write(ws / f"root-{kind}.{suffix}", content)
    args = {"chip": ["chips", "validate", str(f)], "model": ["models", "show", str(f)],
            "topology": ["run", "--chip", "tpu-v4", "--topology", str(f)],
            "spec": ["sweep", str(f), "--out", str(ws / "root"), "--dry-run"]}[kind]
    r = check(args, what)
    assert r.exit_code == 2 and str(f) in r.output and message in r.output, r.output


def test_zero_area_floorplan_is_a_message(ws):
    d = preset("tpu-v4")
    d["area"] = {k: ({dt: 0.0 for dt in v} if isinstance(v, dict) else 0.0)
                 for k, v in d["area"].items()}
    f = write(ws / "zero-area.toml", toml_doc(d))
    r = check(["floorplan", str(f), "-o", str(ws / "z.svg")], "zero area")
    assert r.exit_code == 2 and "the modelled die area is 0 mm²" in r.output


def test_a_fifo_as_chip_does_not_block(ws):
    fifo = ws / "chip-fifo.toml"
    os.mkfifo(fifo)
    r = check(["chips", "validate", str(fifo)], "fifo")
    assert r.exit_code == 2 and "not a regular file" in r.output


def test_internal_errors_are_one_line_with_exit_1(monkeypatch):
    import diptych.arch as arch

    monkeypatch.setattr(arch, "load_chip_file",
                        lambda p: (_ for _ in ()).throw(ZeroDivisionError("boom")))
    import diptych.tools.chips_cmd as cc

    monkeypatch.setattr(cc, "load_chip_file", arch.load_chip_file)
    r = CliRunner().invoke(main, ["chips", "validate", "x.toml"])
    assert r.exit_code == 1
    assert r.output.strip() == ("Error: internal error: ZeroDivisionError: boom (a bug in "
                                "diptych; rerun with `diptych --debug ...` for the traceback "
                                "and report it)")
    r = CliRunner().invoke(main, ["--debug", "chips", "validate", "x.toml"])
    assert isinstance(r.exception, ZeroDivisionError)  # --debug keeps the traceback


# ---- a handful through real processes ------------------------------------------------------------


@pytest.mark.parametrize("what,kind,content,message", ROOT_CAUSES[:4],
                         ids=[c[0] for c in ROOT_CAUSES[:4]])
def test_real_processes_print_one_line_and_exit_2(ws, what, kind, content, message):
    suffix = {"chip": "toml", "model": "json", "topology": "csv", "spec": "toml"}[kind]
    f = write(ws / f"proc-{kind}.{suffix}", content)
    args = {"chip": ["chips", "validate", str(f)], "model": ["models", "show", str(f)],
            "topology": ["run", "--chip", "tpu-v4", "--topology", str(f)]}[kind]
    r = subprocess.run([sys.executable, "-m", "diptych.tools.cli", *args], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert r.stdout == "" and r.stderr.count("\n") == 1 and message in r.stderr


# ---- the serving, planning and cluster surfaces, the cache (issue 22 item 9) --------------------


def test_fuzz_serving_planning_and_cluster_inputs(ws):
    """Runtime profiles, cluster files and request traces mutated as the other kinds are; the
    serve, plan, run --cluster and gemm flags at issue 22's classes (1e-300, 5e-324, 1e308,
    10^9 and 10^30-digit counts, nan): every run ends clean, a value past a bound refused
    before work starts."""
    c = run_families(ws, ["runtime", "cluster", "trace", "flags"])
    assert c["refused"] > 0.5 * c["clean"]


def test_fuzz_every_file_taking_flag_refuses_fifos_devices_directories_and_names_twice(ws):
    """A FIFO (it used to block), /dev/zero (it would never end), a directory and a column
    or key twice, for each of the 16 file-taking flags: each refused in one line."""
    c = run_families(ws, ["file flags"])
    assert c["exit 0"] == 0


def test_fuzz_result_cache_entries(ws):
    """The cache's entry of one GEMM replaced by forged (edited without the key, or with it
    past the schema), corrupt, truncated, wrong-typed and NaN entries, links (to /dev/zero,
    a FIFO, a sound entry elsewhere, nothing), a FIFO, a directory, a linked shard or
    results directory and a bad key: each run recomputes the GEMM with a warning and prints
    exactly what a sound cache gives (the benchmark draws more)."""
    run_families(ws, ["cache"])
