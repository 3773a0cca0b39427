"""The fuzz corpus of the command line (issue 22 item 9): malformed inputs of every kind, and
how a run of one is judged.

Shared by ``tests/test_fuzz_cli.py`` (a sample, in the fast tier) and
``benchmarks/bench_fuzz.py`` (the whole corpus, with its counts); ``tests/`` is put on
``sys.path`` by each, as for :mod:`roofline_double`.

A :class:`Case` is one command with its inputs written, and what a correct diptych does
with it (:data:`EXPECT`). :func:`corpus` generates the cases, at a fixed seed, family by
family (:data:`FAMILIES`): mutants of every file kind (chip, sweep spec, model config,
topology, results, runtime profile, cluster, request trace) at the value, structure and byte
level; the serve, plan, run --cluster and sweep flags at issue 22's classes of value (1e-300,
1e308, huge counts, NaN, negatives); a FIFO, ``/dev/zero`` and a column or key twice for each
file-taking flag; and the result cache's entries (forged, corrupt, truncated, wrong-typed,
NaN, links, FIFOs and directories in an entry's place, a bad key). :func:`run_case` runs one
in-process (click's CliRunner) under an alarm and says what happened (:data:`OUTCOMES`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import shutil
import signal
import tomllib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from unittest import mock

from tiny_models import TINY

SEED = 20_260_116

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


def write(path: Path, content) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def resource(pkg: str, name: str) -> str:
    return resources.files(pkg).joinpath(name).read_text()


def preset(name: str) -> dict:
    return tomllib.loads(resource("diptych.arch.chips", f"{name}.toml"))


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


def toml_mutant(rng, base: dict, values: list = BAD_VALUES):
    """(content, what) of one mutant of the TOML table ``base``: mostly structural."""
    if rng.random() < 0.75:
        d, what = mutate_structure(rng, base, values)
        return toml_doc(d), what
    return mutate_bytes(rng, toml_doc(base))


# ---- the cases ---------------------------------------------------------------------------------

#: What a correct diptych does with a case:
#: ``any``: exit 0 (the mutant happened to be valid) or exit 2 with one ``Error:`` line;
#: ``error``: exit 2 with one ``Error:`` line (a FIFO, /dev/zero, a name twice, a value past
#: a bound): exit 0 is a silent result;
#: ``recomputed``: a bad cache entry: exit 0, a warning that it was discarded (or that the
#: cache is off), and the output the command gives with a sound cache.
EXPECT = ("any", "error", "recomputed")

#: How a run ended: ``clean`` (as expected), ``internal`` (exit 1, the internal-error net,
#: or a traceback), ``hang`` (past the case's time limit), ``silent`` (exit 0 where an error,
#: a warning or the sound output was due; an empty output; strict JSON that is not, or holds
#: a non-finite or negative time, energy or rate), ``unclean`` (any other exit, or an error
#: that is not one ``Error:`` line).
OUTCOMES = ("clean", "internal", "hang", "silent", "unclean")


@dataclass
class Case:
    family: str
    what: str
    args: list[str]
    expect: str = "any"
    #: run before the command (writes a cache mutation into place)
    prepare: Callable[[], None] | None = None
    #: the output of the same command with a sound cache (``recomputed``)
    reference: str | None = None
    extra: dict = field(default_factory=dict)


SERVE = ["serve", "--chip", "h100", "--model", "llama-3-8b", "--tp", "1", "--oracle", "direct",
         "--prompt", "16", "--gen", "2", "--json"]
TRACE = "arrival_s,prompt_tokens,output_tokens\n0.0,16,2\n0.5,16,2\n"
TRACE_BAD = ["nan", "inf", "-1", "0", "1e300", "1e-300", "9" * 40, "x", "", "1.5", "1e308",
             "100000000000", "5e-324"]
#: issue 22's classes of number for a flag
FLAG_FLOATS = ["0", "-1", "nan", "inf", "1e-300", "5e-324", "1e308", "-1e308"]
FLAG_COUNTS = ["0", "-1", "1000000000", "1099511627776", "9" * 30, "1e3", "x"]


def _tiny_model(ws: Path) -> str:
    p = ws / "tiny-config.json"
    if not p.exists():
        p.write_text(json.dumps(TINY))
    return str(p)


def plan_args(ws: Path, *extra: str) -> list[str]:
    return ["plan", "--chip", "h100", "--model", _tiny_model(ws), "--cluster", "dgx-h100",
            "--chips", "8", "--batch", "8", "--seq", "512", "--top", "2", "--refine", "1",
            *extra]


def run_cluster_args(ws: Path, *extra: str) -> list[str]:
    return ["run", "--chip", "h100", "--model", _tiny_model(ws), "--phase", "decode",
            "--batch", "8", "--prompt", "16", "--tp", "8", "--chips", "8", "--json", *extra]


def chip_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    for i in range(n):
        base = preset(rng.choice(["tpu-v1", "tpu-v4", "infer-2026", "h100"]))
        if rng.random() < 0.75:
            d, what = mutate_structure(rng, base, CHIP_BAD_VALUES)
            content = toml_doc(d)
        else:
            content, what = mutate_bytes(rng, toml_doc(base))
        f = str(write(ws / f"chip{i}.toml", content))
        # no field takes a denormal-scale value (each has a physical floor)
        tiny = any(what.endswith(f" = {v!r}") for v in TINY_VALUES)
        yield Case("chip", what, ["chips", "validate", f], "error" if tiny else "any")
        yield Case("chip", what, ["chips", "show", f, "--json"])
        yield Case("chip", what, ["gemm", "64", "64", "64", "--chip", f, "--json"])
        yield Case("chip", what, ["run", "--chip", f, "--topology", str(ws / "tiny.csv"),
                                  "--json"])
        if i % 3 == 0:  # drawing a valid die takes ~2 s: every third one
            yield Case("chip", what, ["floorplan", f, "-o", str(ws / "fp.svg")])


def spec_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
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
            content, what = toml_doc({**d, key: v}), f"{key} = {v!r}"[:80]
        elif rng.random() < 0.8:
            m, what = mutate_structure(rng, d)
            content = toml_doc(m)
        else:
            content, what = mutate_bytes(rng, toml_doc(d))
        f = str(write(ws / f"spec{i}.toml", content))
        yield Case("sweep spec", what, ["sweep", f, "--out", str(ws / f"sw{i}"), "--dry-run"])
        if i % 10 == 0:  # a few real runs (a process pool each)
            yield Case("sweep spec", what, ["sweep", f, "--out", str(ws / f"run{i}"), "-j", "1",
                                            "--no-progress", "--evaluator",
                                            "fake_eval:toy_eval"],
                       extra={"all_failed_ok": True})


def model_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    base = json.loads(resource("diptych.workloads.models", "llama-3-8b.json"))
    archs = [[["LlamaForCausalLM"]], [], "LlamaForCausalLM", [123], None, [None], ["Nope"],
             [{"a": 1}]]
    for i in range(n):
        r = rng.random()
        if r < 0.2:
            content, what = json_doc({**base, "architectures": rng.choice(archs)}), "architectures"
        elif r < 0.8:
            d, what = mutate_structure(rng, base)
            content = json_doc(d)
        else:
            content, what = mutate_bytes(rng, json_doc(base))
        f = str(write(ws / f"config{i}.json", content))
        yield Case("model", what, ["models", "show", f, "--json"])
        if i % 4 == 0:
            yield Case("model", what, ["run", "--chip", "tpu-v4", "--model", f, "--phase",
                                       "decode", "--batch", "1", "--prompt", "16", "--json"])


def topology_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    headers = ["M,N,K", "Layer, M, N, K,", "name,m,n,k,batch",
               "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
               "Num Filter, Strides,", "a,b,c", "", "M,N,K,m", "M,N,K,batch,Batch"]
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
            content, what = mutate_bytes(rng, text)
        else:
            content, what = text, f"topology {h[:20]!r} + {len(rows)} rows"
        f = str(write(ws / f"topo{i}.csv", content))
        twice = h in ("M,N,K,m", "M,N,K,batch,Batch")
        yield Case("topology", what, ["run", "--chip", "tpu-v4", "--topology", f, "--json"],
                   "error" if twice else "any")


def results_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    """Results directories and files for ``pareto`` (a fixed list; ``n`` unused)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = {"point_id": "a", "area_mm2": 1.0, "tokens_per_s": 2.0}
    paths: list[tuple[Path, str, str]] = [(ws / "no-such-dir", "missing", "error")]
    d = ws / "empty"
    d.mkdir(exist_ok=True)
    paths.append((d, "empty directory", "error"))
    for name, content in [("garbage", b"PAR1 not really"), ("zero", b"")]:
        d = ws / f"res-{name}"
        d.mkdir(exist_ok=True)
        write(d / "part-1.parquet", content)
        paths.append((d, f"{name} part", "error"))
    for name, rows in [("no-y", [{"point_id": "a", "area_mm2": 1.0}]),
                       ("string-x", [{**good, "area_mm2": "big"}]),
                       ("nan", [{**good, "tokens_per_s": math.nan},
                                {**good, "point_id": "b", "area_mm2": math.inf}]),
                       ("nulls", [{**good, "tokens_per_s": None}]),
                       ("ok", [good])]:
        d = ws / f"res-{name}"
        d.mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), d / "part-1.parquet")
        paths.append((d, name, "any"))
    d = ws / "res-twice"
    d.mkdir(exist_ok=True)
    pq.write_table(pa.table([pa.array([1.0]), pa.array([2.0]), pa.array([1.0])],
                            names=["area_mm2", "tokens_per_s", "area_mm2"]),
                   d / "part-1.parquet")
    paths.append((d, "a column twice (part)", "error"))
    for name, content, expect in [
            ("csv-garbage", b"\xff\xfe\x00bad", "any"), ("csv-empty", b"", "error"),
            ("csv-header", b"area_mm2,tokens_per_s\n", "any"),
            ("csv-ragged", b"area_mm2,tokens_per_s\n1\n1,2,3\n", "error"),
            ("csv-twice", b"area_mm2,tokens_per_s,tokens_per_s\n1,2,3\n", "error"),
            ("csv-ok", b"area_mm2,tokens_per_s\n1,2\n2,1\n", "any")]:
        paths.append((write(ws / f"{name}.csv", content), name, expect))
    paths.append((write(ws / "results.txt", "x"), "unknown suffix", "error"))
    for path, what, expect in paths:
        for extra in ([], ["--where", "garbage"], ["--log-x"]):
            yield Case("results", what, ["pareto", str(path), "--x", "area_mm2", "--y",
                                         "tokens_per_s", "-o", str(ws / "p.svg"), *extra],
                       "error" if extra[:1] == ["--where"] else expect)


def runtime_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    runtime = tomllib.loads(resource("diptych.arch.runtimes", "vllm-v1.toml"))
    for i in range(n):
        content, what = toml_mutant(rng, runtime, BAD_VALUES + TINY_VALUES + [1e300])
        f = str(write(ws / f"rt{i}.toml", content))
        yield Case("runtime", what, [*SERVE, "--runtime", f, "--qps", "1", "--requests", "1"])


def cluster_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    cluster = tomllib.loads(resource("diptych.arch.clusters", "dgx-h100.toml"))
    for i in range(n):
        content, what = toml_mutant(rng, cluster, BAD_VALUES + TINY_VALUES + [1e300])
        f = str(write(ws / f"cl{i}.toml", content))
        yield Case("cluster", what, run_cluster_args(ws, "--cluster", f))
        if i % 3 == 0:
            args = plan_args(ws)
            args[args.index("--cluster") + 1] = f
            yield Case("cluster", what, args)


def trace_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    for i in range(n):
        if rng.random() < 0.4:
            content, what = mutate_bytes(rng, TRACE)
        elif rng.random() < 0.1:
            content, what = ("arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,16,2,3\n",
                             "a column twice")
        else:
            rows = [r.split(",") for r in TRACE.strip().splitlines()]
            i_, j = rng.randrange(1, len(rows)), rng.randrange(3)
            rows[i_][j] = rng.choice(TRACE_BAD)
            content = "\n".join(",".join(r) for r in rows) + "\n"
            what = f"row {i_} column {j} = {rows[i_][j]!r}"
        f = str(write(ws / f"tr{i}.csv", content))
        yield Case("trace", what, [*SERVE, "--trace", f],
                   "error" if what == "a column twice" else "any")


def _with(args: list[str], flag: str, value: str) -> list[str]:
    """``args`` with ``flag``'s value replaced (or the flag added)."""
    args = list(args)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    return args


def flag_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    """The serve, plan, run --cluster and gemm flags at issue 22's classes (a fixed list;
    ``n`` unused). A value past a bound must be refused before work starts."""
    def err(v: str) -> str:           # "1e3" may be read as 1000 (a valid count)
        return "any" if v == "1e3" else "error"
    serve1 = [*SERVE, "--qps", "1", "--requests", "1"]
    for q in FLAG_FLOATS:
        yield Case("serve flags", f"--qps {q}", [*SERVE, "--qps", q, "--requests", "2"],
                   "error")
        yield Case("serve flags", f"--duration {q}", [*SERVE, "--qps", "1", "--duration", q],
                   "error")
        yield Case("serve flags", f"--sweep-qps {q}:1:2",
                   [*SERVE, "--sweep-qps", f"{q}:1:2", "--requests", "2"], "error")
        yield Case("serve flags", f"--burstiness {q}", _with(serve1, "--burstiness", q),
                   "error")
    for c in FLAG_COUNTS:
        yield Case("serve flags", f"--requests {c}", _with(serve1, "--requests", c), err(c))
        yield Case("serve flags", f"--concurrency {c}",
                   [*SERVE, "--concurrency", c, "--requests", "2"], err(c))
        yield Case("serve flags", f"--sweep-qps 1:2:{c}",
                   [*SERVE, "--sweep-qps", f"1:2:{c}", "--requests", "2"], "error")
        yield Case("serve flags", f"--prompt {c}", _with(serve1, "--prompt", c), err(c))
        yield Case("serve flags", f"--tp {c}", _with(serve1, "--tp", c), "error")
        for flag in ("--batch", "--seq", "--chips", "--refine"):
            yield Case("plan flags", f"{flag} {c}", _with(plan_args(ws), flag, c), err(c))
        yield Case("plan flags", f"--top {c}", _with(plan_args(ws), "--top", c))
        yield Case("run --cluster flags", f"--batch {c}",
                   _with(run_cluster_args(ws, "--cluster", "dgx-h100"), "--batch", c), err(c))
        yield Case("run --cluster flags", f"--chips {c}",
                   _with(run_cluster_args(ws, "--cluster", "dgx-h100"), "--chips", c), "error")
        # a GEMM's dimensions have no bound of their own (its blocks do: a 10^9-row GEMM
        # is a valid one)
        yield Case("gemm flags", f"gemm {c}", ["gemm", c, "64", "64", "--chip", "tpu-v4"],
                   "error" if c in ("0", "-1", "x", "9" * 30) else "any")
    for s in ("1:2:0", "0:1:2", "nan:1:2", "1e-300:1:2", "1:1e308:2", "2:1:2", "1:2",
              "1:2:1.5"):
        yield Case("serve flags", f"--sweep-qps {s}", [*SERVE, "--sweep-qps", s,
                                                       "--requests", "2"], "error")
    for skew in ("nan", "-1", "1e308", "1e-300"):
        yield Case("plan flags", f"--moe-skew {skew}", plan_args(ws, "--moe-skew", skew))


#: Each file-taking flag, the command reading it at ``{}`` (FIFO, /dev/zero, a name twice).
FILE_FLAGS = {
    "chips validate": ["chips", "validate", "{}"],
    "chips show": ["chips", "show", "{}", "--json"],
    "gemm --chip": ["gemm", "64", "64", "64", "--chip", "{}"],
    "run --chip": ["run", "--chip", "{}", "--model", "llama-3-8b", "--phase", "decode"],
    "compare CHIP": ["compare", "{}", "--model", "llama-3-8b"],
    "floorplan CHIP": ["floorplan", "{}", "-o", "{ws}/f.svg"],
    "models show": ["models", "show", "{}"],
    "run --model": ["run", "--chip", "tpu-v4", "--model", "{}", "--phase", "decode"],
    "serve --model": ["serve", "--chip", "h100", "--model", "{}", "--qps", "1"],
    "serve --runtime": [*SERVE, "--qps", "1", "--requests", "1", "--runtime", "{}"],
    "run --cluster": ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase", "decode",
                      "--tp", "8", "--chips", "8", "--cluster", "{}"],
    "plan --cluster": ["plan", "--chip", "h100", "--model", "llama-3-8b", "--cluster", "{}",
                       "--chips", "8", "--batch", "8", "--seq", "512"],
    "run --topology": ["run", "--chip", "tpu-v4", "--topology", "{}"],
    "serve --trace": [*SERVE, "--trace", "{}"],
    "sweep SPEC": ["sweep", "{}", "--out", "{ws}/sw-fifo", "--dry-run"],
    "pareto RESULTS": ["pareto", "{}", "--x", "a", "--y", "b", "-o", "{ws}/p.svg"],
}
#: A name twice, for the kinds with columns or keys (TOML refuses a key twice itself).
TWICE = {
    "serve --trace": ("t.csv", "arrival_s,prompt_tokens,output_tokens,ARRIVAL_S\n0,16,2,1\n"),
    "run --topology": ("t.csv", "M,N,K,k\n64,64,64,8\n"),
    "pareto RESULTS": ("r.csv", "a,b,a\n1,2,3\n"),
    "models show": ("config.json", '{"architectures": ["LlamaForCausalLM"], '
                                   '"architectures": ["X"]}'),
    "run --model": ("config.json", '{"hidden_size": 8, "hidden_size": 16}'),
    "gemm --chip": ("chip.json", '{"name": "a", "name": "b"}'),
    "plan --cluster": ("c.json", '{"name": "c", "name": "d"}'),
    "sweep SPEC": ("spec.json", '{"base": "tpu-v4", "base": "h100"}'),
    "serve --runtime": ("r.toml", 'name = "a"\nname = "b"\n'),
}


def file_flag_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    """A FIFO, /dev/zero and a directory for every file-taking flag, and a column or key
    twice for those with columns or keys: each refused (a FIFO must not block)."""
    d = ws / "file-flags"
    d.mkdir(exist_ok=True)
    fifo = d / "input.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    adir = d / "a-directory.toml"
    adir.mkdir(exist_ok=True)
    for flag, template in FILE_FLAGS.items():
        def args(path, t=template):
            return [a.replace("{}", str(path)).replace("{ws}", str(ws)) for a in t]
        yield Case("file flags", f"{flag} FIFO", args(fifo), "error")
        yield Case("file flags", f"{flag} /dev/zero", args("/dev/zero"), "error")
        yield Case("file flags", f"{flag} directory", args(adir), "error")
        if flag in TWICE:
            name, text = TWICE[flag]
            sub = d / flag.replace(" ", "_")
            sub.mkdir(exist_ok=True)
            yield Case("file flags", f"{flag} a name twice", args(write(sub / name, text)),
                       "error")


# ---- the result cache --------------------------------------------------------------------------

#: The command whose op the cache cases corrupt (one GEMM, 64×64×64 on tpu-v4: one entry).
CACHE_COMMAND = ["gemm", "64", "64", "64", "--chip", "tpu-v4", "--json"]
#: Values a forger with the key writes into the result's counts and numbers: each breaks
#: the schema (a count is an int64 >= 0, a number finite from 0 to 1e30).
CACHE_BAD = {int: [-1, 2**63, 2**70, 1.5, "12", True, [], {}, None],
             float: [-1, -0.5, 1e308, 1e31, 10**40, "12", True, [], {}, None, [[1]]]}


class CacheBench:
    """The fuzz's own result cache: a sound entry of the 64×64×64 GEMM, and ways to put
    something else in its place."""

    def __init__(self, ws: Path):
        self.dir = ws / "fuzz-cache"
        self.elsewhere = ws / "fuzz-cache-elsewhere"
        self.entry: Path | None = None
        self.sound: bytes = b""
        self.key: bytes = b""

    def reset(self) -> None:
        """Back to the sound entry (and key), the process's cache state fresh."""
        from diptych.sim import api, cache

        for p in (self.entry.parent.parent, self.entry.parent):
            if p.is_symlink():
                p.unlink()
        for p in (self.entry, self.dir / cache.KEY_FILE):
            if p.is_symlink() or p.is_file() or p.is_fifo():
                p.unlink()
            elif p.is_dir():
                shutil.rmtree(p)
        self.entry.parent.mkdir(parents=True, exist_ok=True)
        if self.elsewhere.exists():
            shutil.rmtree(self.elsewhere)
        self.elsewhere.mkdir()
        (self.dir / cache.KEY_FILE).write_bytes(self.key)
        os.chmod(self.dir / cache.KEY_FILE, 0o600)
        self.entry.write_bytes(self.sound)
        cache.set_enabled(True)
        cache._secret.cache_clear()
        api._gemm_cached.cache_clear()
        api._vector_cached.cache_clear()


def cache_family(ws: Path, rng: random.Random, n: int) -> Iterator[Case]:
    """The cache's entry of one GEMM replaced by ``n`` mutants (bytes, structure with the
    old checksum, values with a valid one) and a fixed list of things in its place; each run
    must recompute the GEMM with a warning and print what it prints with a sound cache."""
    from diptych.sim import cache

    cb = CacheBench(ws)
    if cb.dir.exists():
        shutil.rmtree(cb.dir)
    cb.entry = Path("/nonexistent")
    ref = _in_cache(cb, lambda: _invoke(CACHE_COMMAND).output)
    (entry,) = list((cb.dir / "results").rglob("*.json"))
    cb.entry, cb.sound = entry, entry.read_bytes()
    cb.key = (cb.dir / cache.KEY_FILE).read_bytes()
    sound = json.loads(cb.sound)

    def forged(mutate) -> Callable[[], None]:
        return lambda: mutate(cb)

    def replaced(make):
        return lambda c: (c.entry.unlink(), make(c))

    def bytes_of(data: bytes):
        return lambda c: c.entry.write_bytes(data)

    def with_key(d):
        def go(c):
            d["sha256"] = cache._checksum(c.entry.stem, d["result"])
            c.entry.write_text(json.dumps(d, allow_nan=True))
        return go

    fixed = [
        ("a FIFO", replaced(lambda c: os.mkfifo(c.entry))),
        ("a link to /dev/zero", replaced(lambda c: os.symlink("/dev/zero", c.entry))),
        ("a link to a FIFO", replaced(lambda c: (os.mkfifo(c.elsewhere / "f"),
                                                 os.symlink(c.elsewhere / "f", c.entry)))),
        ("a link to the sound entry elsewhere", replaced(lambda c: (
            write(c.elsewhere / "e.json", c.sound),
            os.symlink(c.elsewhere / "e.json", c.entry)))),
        ("a dangling link", replaced(lambda c: os.symlink(c.elsewhere / "gone", c.entry))),
        ("a directory", replaced(lambda c: c.entry.mkdir())),
        ("2 MiB of spaces", bytes_of(b" " * (2 << 20))),
        ("empty", bytes_of(b"")),
        ("a JSON list", bytes_of(b"[1, 2]")),
        ("a JSON string", bytes_of(b'"result"')),
        ("a key twice", bytes_of(cb.sound[:-1] + b', "sha256": "00"}')),
        ("NaN token", bytes_of(cb.sound.replace(b'"energy_j": ', b'"energy_j": NaN, "z": ', 1))),
        ("nested 100,000 deep", bytes_of(b"[" * 100_000 + b"]" * 100_000)),
        ("an integer of 5,000 digits", bytes_of(b'{"result": ' + b"9" * 5000 + b"}")),
        ("another cache's checksum", bytes_of(json.dumps({**sound, "sha256": "ab" * 32})
                                              .encode())),
        ("the shard is a link", lambda c: (
            os.rename(c.entry.parent, c.elsewhere / "shard"),
            os.symlink(c.elsewhere / "shard", c.entry.parent))),
        ("results/ is a link", lambda c: (
            os.rename(c.entry.parent.parent, c.elsewhere / "results"),
            os.symlink(c.elsewhere / "results", c.entry.parent.parent))),
        ("the key is a FIFO", lambda c: ((c.dir / cache.KEY_FILE).unlink(),
                                         os.mkfifo(c.dir / cache.KEY_FILE))),
        ("the key is a link", lambda c: ((c.dir / cache.KEY_FILE).unlink(),
                                         write(c.elsewhere / "k", c.key),
                                         os.symlink(c.elsewhere / "k", c.dir / cache.KEY_FILE))),
        ("the key is short", lambda c: (c.dir / cache.KEY_FILE).write_bytes(b"k")),
        ("the key is another", lambda c: (c.dir / cache.KEY_FILE).write_bytes(b"x" * 32)),
    ]
    mutants = []
    for _ in range(n):
        r = rng.random()
        if r < 0.35:
            data, what = mutate_bytes(rng, cb.sound.decode())
            if what == "UTF-8 BOM":
                what = "a UTF-8 BOM (the cache writes none)"
            mutants.append((f"bytes: {what}", bytes_of(data)))
        elif r < 0.7:        # edited without the key: the old checksum
            d, what = mutate_structure(rng, sound, BAD_VALUES + TINY_VALUES + [1e300])
            mutants.append((f"forged: {what}", bytes_of(json_doc(d).encode())))
        else:                # a forger with the key: values the schema must refuse
            d = copy.deepcopy(sound)
            name = rng.choice([k for k, v in d["result"].items()
                               if isinstance(v, (int, float)) and not isinstance(v, bool)])
            v = rng.choice(CACHE_BAD[type(d["result"][name])])
            d["result"][name] = v
            mutants.append((f"with the key: {name} = {v!r}", with_key(d)))
    for what, mutate in fixed + mutants:
        yield Case("cache", what, CACHE_COMMAND, "recomputed", prepare=forged(mutate),
                   reference=ref, extra={"bench": cb})


def _in_cache(cb: CacheBench, fn):
    """``fn()`` with the process's result cache in ``cb.dir``, on (whatever an earlier
    ``--no-cache`` left in the environment) and fresh (memo, key); all as it was after."""
    from diptych.sim import api, cache

    with mock.patch.dict(os.environ, {cache.ENV_DIR: str(cb.dir)}):
        os.environ.pop(cache.ENV_OFF, None)     # (put back on leaving, if it was set)
        cache.set_enabled(True)
        cache._secret.cache_clear()
        api._gemm_cached.cache_clear()
        api._vector_cached.cache_clear()
        try:
            return fn()
        finally:
            cache.set_enabled(None)
            cache._secret.cache_clear()
            api._gemm_cached.cache_clear()
            api._vector_cached.cache_clear()


#: family → (generator, cases in the full corpus per unit of ``scale`` (mutants drawn)).
FAMILIES: dict[str, tuple[Callable, int]] = {
    "chip": (chip_family, 70),
    "sweep spec": (spec_family, 70),
    "model": (model_family, 60),
    "topology": (topology_family, 60),
    "results": (results_family, 0),
    "runtime": (runtime_family, 30),
    "cluster": (cluster_family, 20),
    "trace": (trace_family, 40),
    "flags": (flag_family, 0),
    "file flags": (file_flag_family, 0),
    "cache": (cache_family, 40),
}


def workspace(ws: Path) -> Path:
    """Prepare ``ws`` for the corpus (the small files the cases share)."""
    write(ws / "tiny.csv", "M,N,K\n64,64,64\n")
    _tiny_model(ws)
    return ws


def corpus(ws: Path, families=None, scale: float = 1.0, seed: int = SEED) -> Iterator[Case]:
    """The cases of ``families`` (default: all), ``scale`` × their counts, generated lazily
    at ``seed`` (each family at its own offset: one family's cases do not move with
    another's count)."""
    for k, name in enumerate(FAMILIES):
        if families is not None and name not in families:
            continue
        gen, n = FAMILIES[name]
        yield from gen(ws, random.Random(seed + 101 * k), max(1, round(n * scale)))


# ---- running and judging -----------------------------------------------------------------------


class Hang(BaseException):
    """A case past its time limit (a BaseException: diptych's error net must not catch it)."""


def _invoke(args: list[str]):
    from click.testing import CliRunner

    from diptych.tools.cli import main

    return CliRunner().invoke(main, args)


def _strict_json(out: str):
    def refuse(c):
        raise ValueError(f"{c} in strict JSON")
    return json.loads(out, parse_constant=refuse)


def run_case(case: Case, timeout_s: int = 120) -> tuple[str, str]:
    """Run ``case`` in-process under an alarm of ``timeout_s``; (outcome, detail), the
    outcome one of :data:`OUTCOMES` (module docstring), the detail what was wrong."""
    def alarm(signum, frame):
        raise Hang()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout_s)
    caught: list = []
    try:
        if case.expect == "recomputed":
            cb = case.extra["bench"]

            def go():
                cb.reset()
                case.prepare()
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    r = _invoke(case.args)
                caught.extend(str(x.message) for x in w)
                return r
            r = _in_cache(cb, go)
        else:
            r = _invoke(case.args)
    except Hang:
        return "hang", f"no exit after {timeout_s} s"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return judge(case, r.exit_code, r.output, caught, r.exception)


def judge(case: Case, code: int, out: str, caught: list[str], exc=None) -> tuple[str, str]:
    """The outcome of ``case`` from its exit code, output and warnings."""
    if (code == 1 and case.extra.get("all_failed_ok")
            and out.strip().startswith("Error: every point of")):
        return "clean", "exit 1: every point failed"    # a sweep's own verdict (docs/limits.md)
    if "Traceback" in out or "internal error" in out or code == 1:
        return "internal", out.strip().splitlines()[-1] if out.strip() else repr(exc)
    if code == 2:
        lines = [ln for ln in out.strip().splitlines()
                 if ln.strip() and not ln.startswith(("Usage: ", "Try "))]
        if len(lines) == 1 and lines[0].startswith("Error: "):
            if case.expect == "recomputed":
                return "silent", f"refused instead of recomputed: {lines[0]}"
            return "clean", lines[0]
        return "unclean", out.strip()[:300]
    if code != 0:
        return "unclean", f"exit {code}: {out.strip()[:200]} {exc!r}"
    if not out.strip():
        return "silent", "exit 0 and nothing printed"
    if case.expect == "error":
        return "silent", "exit 0 where an error was due"
    if "--json" in case.args:
        try:
            from diptych.tools.result_check import check_result

            d = _strict_json(out)
            if isinstance(d, dict):
                check_result(d, case.what)
        except (ValueError, RuntimeError) as e:
            return "silent", f"--json output: {e}"
    if case.expect == "recomputed":
        if not any("discarded and recomputed" in m or "cache key" in m or "is a link" in m
                   for m in caught):
            return "silent", "a bad cache entry and no warning"
        if out != case.reference:
            return "silent", "output differs from the sound cache's"
    return "clean", "exit 0"
