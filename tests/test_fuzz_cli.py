"""No traceback for any input: generated malformed files of every kind fed to every command.

A fixed-seed generator mutates valid inputs (chip TOML, sweep spec TOML, model config.json,
topology CSV, sweep results for ``pareto``) at the value, structure and byte level; each
mutant goes to every command that reads that kind of file, in-process through click's
CliRunner (a handful also through real subprocesses). Every run must end with exit code 0 (the
mutant happened to be valid) or 2 and exactly one ``Error: ...`` line; never a traceback, never
the ``internal error`` net (exit 1). The issue's ten root causes are pinned as named cases.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from diptych.tools.cli import main

SEED = 20_260_116
HERE = Path(__file__).parent
FAKE = HERE / "dse"
sys.path.insert(0, str(FAKE))  # fake_eval, for the few sweeps that run

BAD_VALUES = [math.nan, math.inf, -math.inf, -1, 0, -0.5, 10**30, 1e308, 2**63, "12", True,
              [], {}, [[1]], "", None]
#: Chip fields also get the denormal and near-overflow scales (issue 22 item 2): a rate of
#: 1e-300 made a GEMM faster or hung it; every field has a physical floor and ceiling now.
TINY_VALUES = [1e-300, 5e-324, -1e-300]
CHIP_BAD_VALUES = BAD_VALUES + TINY_VALUES + [1e300, -1e308]


# ---- emitting files ----------------------------------------------------------------------------


def toml_value(v) -> str:
    if v is None:
        return '"null"'  # TOML has no null: a string where a value was expected
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_doc(d: dict) -> str:
    return "\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in d.items()) + "\n"


def json_doc(d) -> str:
    return json.dumps(d, allow_nan=True)  # NaN/Infinity tokens on purpose


# ---- mutations ---------------------------------------------------------------------------------


def leaves(d, path=()):
    """(path, value) of every scalar leaf of nested dicts."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from leaves(v, path + (k,))
        else:
            yield path + (k,), v


def tables(d, path=()):
    yield path
    for k, v in d.items():
        if isinstance(v, dict):
            yield from tables(v, path + (k,))


def get(d, path):
    for k in path:
        d = d[k]
    return d


def mutate_structure(rng: random.Random, d: dict,
                     values: list = BAD_VALUES) -> tuple[dict, str]:
    """One value- or structure-level mutation of a copy of ``d`` (bad values from
    ``values``)."""
    d = copy.deepcopy(d)
    kind = rng.choice(["value", "value", "value", "delete", "unknown", "retype", "nest"])
    if kind == "value":
        path, _ = rng.choice(list(leaves(d)))
        v = rng.choice(values)
        get(d, path[:-1])[path[-1]] = v
        return d, f"{'.'.join(path)} = {v!r}"
    if kind == "delete":
        path, _ = rng.choice(list(leaves(d)))
        del get(d, path[:-1])[path[-1]]
        return d, f"del {'.'.join(path)}"
    if kind == "unknown":
        t = rng.choice(list(tables(d)))
        get(d, t)["bogus_key"] = rng.choice([1, "x", [1, 2]])
        return d, f"unknown key in {'.'.join(t) or 'top'}"
    if kind == "retype":
        t = [p for p in tables(d) if p]
        if t:
            path = rng.choice(t)
            get(d, path[:-1])[path[-1]] = rng.choice([4, "table", [1, 2]])
            return d, f"{'.'.join(path)} is not a table"
    path, _ = rng.choice(list(leaves(d)))
    deep: object = 1
    for _ in range(rng.choice([3, 50])):
        deep = [deep]
    get(d, path[:-1])[path[-1]] = deep
    return d, f"{'.'.join(path)} nested"


def mutate_bytes(rng: random.Random, text: str) -> tuple[bytes, str]:
    """One byte-level corruption of ``text``."""
    data = text.encode()
    kind = rng.choice(["truncate", "latin1", "nul", "deep", "bom", "garbage"])
    if kind == "truncate":
        i = rng.randrange(1, max(2, len(data)))
        return data[:i], f"truncated at {i}"
    if kind == "latin1":
        i = rng.randrange(len(data))
        return data[:i] + b"\xe9\xff" + data[i:], "undecodable bytes"
    if kind == "nul":
        i = rng.randrange(len(data))
        return data[:i] + b"\x00" + data[i:], "NUL byte"
    if kind == "deep":
        return b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n" + data, "deeply nested"
    if kind == "bom":
        return b"\xef\xbb\xbf" + data, "UTF-8 BOM"  # valid: must still work
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))), "random bytes"


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
    d = tmp_path_factory.mktemp("fuzz")
    (d / "tiny.csv").write_text("M,N,K\n64,64,64\n")
    return d


def write(path: Path, content) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def preset(name: str) -> dict:
    return tomllib.loads(resources.files("diptych.arch.chips").joinpath(f"{name}.toml")
                         .read_text())


# ---- the generated cases -------------------------------------------------------------------------


def chip_cases(rng, n):
    for i in range(n):
        base = preset(rng.choice(["tpu-v1", "tpu-v4", "infer-2026", "h100"]))
        if rng.random() < 0.75:
            d, what = mutate_structure(rng, base, CHIP_BAD_VALUES)
            yield toml_doc(d), what
        else:
            yield mutate_bytes(rng, toml_doc(base))


def test_fuzz_chip_files(ws):
    rng = random.Random(SEED)
    codes = []
    for i, (content, what) in enumerate(chip_cases(rng, 70)):
        f = write(ws / f"chip{i}.toml", content)
        valid = check(["chips", "validate", str(f)], what).exit_code == 0
        # no field takes a denormal-scale value (each has a physical floor)
        assert not (valid and any(what.endswith(f" = {v!r}") for v in TINY_VALUES)), what
        codes.append(int(not valid) * 2)
        for args in (["chips", "show", str(f), "--json"],
                     ["gemm", "64", "64", "64", "--chip", str(f), "--json"],
                     ["run", "--chip", str(f), "--topology", str(ws / "tiny.csv"), "--json"],
                     # drawing a valid die takes ~2 s: every third one
                     ["floorplan", str(f), "-o", str(ws / "fp.svg")] if not valid or i % 3 == 0
                     else None):
            if args is not None:
                codes.append(check(args, what).exit_code)
    assert codes.count(2) > 0.6 * len(codes)  # the generator mostly makes bad inputs


def spec_cases(rng, n, ws):
    bad_chip = write(ws / "bad-chip.toml", toml_doc({**preset("tpu-v4"), "clock_ghz": math.nan}))
    bad_model = write(ws / "bad-config.json", '{"architectures": [["LlamaForCausalLM"]]}')
    base = {"base": "tpu-v4", "chip": {"array_dim": [64, 128]},
            "workload": {"model": "llama-3-8b", "phase": ["decode"], "batch": [1, 8]}}
    random_base = {"base": "tpu-v4", "mode": "random", "samples": 3, "seed": 1,
                   "chip": {"clock_ghz": {"min": 0.5, "max": 1.5, "log": True}},
                   "workload": {"model": "llama-3-8b", "phase": "decode"}}
    extra = [("base", str(bad_chip)), ("base", "missing.toml"), ("base", 7),
             ("workload", {"model": str(bad_model), "phase": "decode"}),
             ("workload", {"model": "no-such-model", "phase": "decode"}),
             ("workload", {"model": "llama-3-8b", "phase": "decode", "batch": 10**12}),
             ("chip", {"array_dim": list(range(1, 1001)), "clock_ghz": [1.0] * 1000,
                       "tdp_w": [100.0] * 1000}),
             ("chip", {"dram": [1]}), ("chip", {"name": ["x"]})]
    for i in range(n):
        d = random_base if rng.random() < 0.3 else base
        if rng.random() < 0.2:
            key, v = rng.choice(extra)
            yield toml_doc({**d, key: v}), f"{key} = {v!r}"[:80]
        elif rng.random() < 0.8:
            m, what = mutate_structure(rng, d)
            yield toml_doc(m), what
        else:
            yield mutate_bytes(rng, toml_doc(d))


def test_fuzz_sweep_specs(ws):
    rng = random.Random(SEED + 1)
    for i, (content, what) in enumerate(spec_cases(rng, 70, ws)):
        f = write(ws / f"spec{i}.toml", content)
        check(["sweep", str(f), "--out", str(ws / f"sw{i}"), "--dry-run"], what)
        if i % 10 == 0:  # a few real runs (a process pool each)
            check(["sweep", str(f), "--out", str(ws / f"run{i}"), "-j", "1", "--no-progress",
                   "--evaluator", "fake_eval:toy_eval"], what, all_failed_ok=True)


def model_cases(rng, n):
    base = json.loads(resources.files("diptych.workloads.models").joinpath("llama-3-8b.json")
                      .read_text())
    archs = [[["LlamaForCausalLM"]], [], "LlamaForCausalLM", [123], None, [None], ["Nope"],
             [{"a": 1}]]
    for i in range(n):
        r = rng.random()
        if r < 0.2:
            yield json_doc({**base, "architectures": rng.choice(archs)}), "architectures"
        elif r < 0.8:
            d, what = mutate_structure(rng, base)
            yield json_doc(d), what
        else:
            yield mutate_bytes(rng, json_doc(base))


def test_fuzz_model_configs(ws):
    rng = random.Random(SEED + 2)
    for i, (content, what) in enumerate(model_cases(rng, 60)):
        f = write(ws / f"config{i}.json", content)
        check(["models", "show", str(f), "--json"], what)
        if i % 4 == 0:
            check(["run", "--chip", "tpu-v4", "--model", str(f), "--phase", "decode",
                   "--batch", "1", "--prompt", "16", "--json"], what)


def topology_cases(rng, n):
    headers = ["M,N,K", "Layer, M, N, K,", "name,m,n,k,batch",
               "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
               "Num Filter, Strides,", "a,b,c", ""]
    good = ["16", "32", "64"]
    bad = ["0", "-3", "x", "1e3", "", "99999999999999999999", "1000000000000",
           '"' + "x" * 200_000 + '"', "64\x00", "3.5"]
    for i in range(n):
        h = rng.choice(headers[:4] * 3 + headers[4:])
        ncol = max(1, h.count(",") + 1)
        rows = []
        for _ in range(rng.randrange(1, 4)):
            row = [rng.choice(good) for _ in range(ncol)]
            if h.startswith("Layer name"):  # IFMAP >= filter: a valid conv layer
                row = ["conv", "32", "32", "3", "3", "8", "16", "1"][:ncol]
            if rng.random() < 0.4:
                row[rng.randrange(len(row))] = rng.choice(bad)
            if rng.random() < 0.1:
                row = row[:-1] if rng.random() < 0.5 else row + ["7", "7"]
            rows.append(",".join(row))
        text = "\n".join([h, *rows]) + "\n"
        if rng.random() < 0.15:
            yield mutate_bytes(rng, text)
        else:
            yield text, f"topology {h[:20]!r} + {len(rows)} rows"


def test_fuzz_topology_files(ws):
    rng = random.Random(SEED + 3)
    for i, (content, what) in enumerate(topology_cases(rng, 60)):
        f = write(ws / f"topo{i}.csv", content)
        check(["run", "--chip", "tpu-v4", "--topology", str(f), "--json"], what)


def results_cases(ws):
    """Results directories and files for ``pareto``."""
    good = {"point_id": "a", "area_mm2": 1.0, "tokens_per_s": 2.0}
    yield ws / "no-such-dir", "missing"
    d = ws / "empty"
    d.mkdir()
    yield d, "empty directory"
    for name, content in [("garbage", b"PAR1 not really"), ("zero", b"")]:
        d = ws / f"res-{name}"
        d.mkdir()
        write(d / "part-1.parquet", content)
        yield d, f"{name} part"
    for name, rows in [("no-y", [{"point_id": "a", "area_mm2": 1.0}]),
                       ("string-x", [{**good, "area_mm2": "big"}]),
                       ("nan", [{**good, "tokens_per_s": math.nan},
                                {**good, "point_id": "b", "area_mm2": math.inf}]),
                       ("nulls", [{**good, "tokens_per_s": None}]),
                       ("ok", [good])]:
        d = ws / f"res-{name}"
        d.mkdir()
        pq.write_table(pa.Table.from_pylist(rows), d / "part-1.parquet")
        yield d, name
    for name, content in [("csv-garbage", b"\xff\xfe\x00bad"), ("csv-empty", b""),
                          ("csv-header", b"area_mm2,tokens_per_s\n"),
                          ("csv-ragged", b"area_mm2,tokens_per_s\n1\n1,2,3\n"),
                          ("csv-ok", b"area_mm2,tokens_per_s\n1,2\n2,1\n")]:
        yield write(ws / f"{name}.csv", content), name
    yield write(ws / "results.txt", "x"), "unknown suffix"
    fifo = ws / "fifo.csv"
    os.mkfifo(fifo)
    yield fifo, "a FIFO"


def test_fuzz_pareto_inputs(ws):
    for path, what in results_cases(ws):
        for extra in ([], ["--where", "garbage"], ["--where", "chip=x"], ["--log-x"]):
            check(["pareto", str(path), "--x", "area_mm2", "--y", "tokens_per_s",
                   "-o", str(ws / "p.svg"), *extra], what)


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


# ---- the serving, planning and cluster surfaces (issue 22 item 9) ----------------------------------


def _resource(pkg: str, name: str) -> dict:
    return tomllib.loads(resources.files(pkg).joinpath(name).read_text())


SERVE = ["serve", "--chip", "h100", "--model", "llama-3-8b", "--tp", "1", "--oracle", "direct",
         "--prompt", "16", "--gen", "2", "--json"]
TRACE = "arrival_s,prompt_tokens,output_tokens\n0.0,16,2\n0.5,16,2\n"
TRACE_BAD = ["nan", "inf", "-1", "0", "1e300", "1e-300", "9" * 40, "x", "", "1.5"]


def _toml_mutant(rng, base: dict):
    """(content, what) of one mutant of the TOML table ``base``: mostly structural."""
    if rng.random() < 0.75:
        d, what = mutate_structure(rng, base)
        return toml_doc(d), what
    return mutate_bytes(rng, toml_doc(base))


def trace_cases(rng, n):
    for _ in range(n):
        if rng.random() < 0.5:
            yield mutate_bytes(rng, TRACE)
            continue
        rows = [r.split(",") for r in TRACE.strip().splitlines()]
        i, j = rng.randrange(1, len(rows)), rng.randrange(3)
        rows[i][j] = rng.choice(TRACE_BAD)
        yield "\n".join(",".join(r) for r in rows) + "\n", f"row {i} column {j} = {rows[i][j]!r}"


def test_fuzz_serving_planning_and_cluster_inputs(ws):
    """Runtime profiles, cluster files and request traces mutated as the other kinds are, and
    the serve/plan flags at the classes of issue 22 (1e-300, 1e308, huge counts, nan): every
    run ends with exit 0 or 2 and one `Error:` line. Prints its counts."""
    rng = random.Random(SEED + 9)
    codes: list[int] = []
    runtime = _resource("diptych.arch.runtimes", "vllm-v1.toml")
    for i in range(12):
        content, what = _toml_mutant(rng, runtime)
        f = write(ws / f"rt{i}.toml", content)
        codes.append(check([*SERVE, "--runtime", str(f), "--qps", "1", "--requests", "1"],
                           f"runtime {what}").exit_code)
    cluster = _resource("diptych.arch.clusters", "dgx-h100.toml")
    for i in range(8):
        content, what = _toml_mutant(rng, cluster)
        f = write(ws / f"cl{i}.toml", content)
        codes.append(check(["run", "--chip", "h100", "--model", "llama-3-8b", "--phase",
                            "decode", "--batch", "8", "--prompt", "16", "--cluster", str(f),
                            "--tp", "8", "--chips", "8", "--json"], f"cluster {what}").exit_code)
    for i, (content, what) in enumerate(trace_cases(rng, 12)):
        f = write(ws / f"tr{i}.csv", content)
        codes.append(check([*SERVE, "--trace", str(f)], f"trace {what}").exit_code)
    flags = ([["--qps", q, "--requests", "2"] for q in
              ("0", "-1", "nan", "inf", "1e-300", "1e308")]
             + [["--qps", "1", "--requests", r] for r in ("0", "-1", "1000000000", "9" * 30)]
             + [["--concurrency", c, "--requests", "2"] for c in ("0", "1000000000")]
             + [["--qps", "1", "--duration", t] for t in ("nan", "-1", "1e308")]
             + [["--sweep-qps", s, "--requests", "2"] for s in
                ("1:2:0", "1:2:1000000000", "0:1:2", "nan:1:2", "1e-300:1:2")])
    for extra in flags:
        codes.append(check([*SERVE, *extra], " ".join(extra)).exit_code)
    for extra in (["--batch", "9" * 40], ["--refine", "0"], ["--refine", "1000000"],
                  ["--top", "-1"], ["--seq", "1e308"]):
        codes.append(check(["plan", "--chip", "h100", "--model", "llama-3-8b", "--cluster",
                            "dgx-h100", "--chips", "8", "--batch", "8", "--seq", "2048",
                            *extra], " ".join(extra)).exit_code)
    print(f"serving/planning/cluster fuzz: {len(codes)} runs, {codes.count(0)} exit 0, "
          f"{codes.count(2)} exit 2, 0 internal errors, 0 tracebacks")
    assert codes.count(2) > 0.5 * len(codes)
