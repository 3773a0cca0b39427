"""One checked reader for every input file (issue 22 item 5), through the command line.

For every kind of file diptych reads (chip, model config, runtime profile, cluster, topology,
request trace, sweep spec, results), the same refusals, each exit 2 with one line naming the
file: a FIFO (reading would block until a writer came), ``/dev/zero`` (reading would never
end), a directory; and a column or key named twice (which of two ``arrival_s`` columns, or
two ``"architectures"``, is meant is a guess no reader should make): CSV headers (traces,
topologies, results), Parquet results, JSON objects. TOML refuses a key twice itself.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from diptych.tools.cli import main

SERVE = ["serve", "--chip", "h100", "--model", "llama-3-8b", "--tp", "1", "--qps", "1",
         "--requests", "1"]
RUN8 = ["run", "--chip", "h100", "--model", "llama-3-8b", "--phase", "decode", "--batch", "8",
        "--prompt", "16", "--tp", "8", "--chips", "8"]

#: kind → the command reading a file of that kind at ``{}``.
KINDS = {
    "chip": ["chips", "validate", "{}"],
    "chip (run)": ["run", "--chip", "{}", "--model", "llama-3-8b", "--phase", "decode"],
    "model": ["models", "show", "{}"],
    "runtime": [*SERVE, "--runtime", "{}"],
    "cluster": [*RUN8, "--cluster", "{}"],
    "cluster (plan)": ["plan", "--chip", "h100", "--model", "llama-3-8b", "--cluster", "{}",
                       "--chips", "8", "--batch", "8", "--seq", "2048"],
    "topology": ["run", "--chip", "tpu-v4", "--topology", "{}"],
    "trace": ["serve", "--chip", "h100", "--model", "llama-3-8b", "--tp", "1", "--trace", "{}"],
    "sweep spec": ["sweep", "{}", "--out", "{out}", "--dry-run"],
    "results": ["pareto", "{}", "--x", "a", "--y", "b", "-o", "{out}.svg"],
}


def _run(kind: str, path, tmp_path):
    args = [a.replace("{}", str(path)).replace("{out}", str(tmp_path / "out"))
            for a in KINDS[kind]]
    r = CliRunner().invoke(main, args)
    assert "Traceback" not in r.output and r.exit_code == 2, (kind, r.output, r.exception)
    lines = [ln for ln in r.output.strip().splitlines()
             if ln.strip() and not ln.startswith(("Usage:", "Try "))]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    return lines[0]


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_fifo_is_refused_without_blocking(kind, tmp_path):
    fifo = tmp_path / "input.csv"
    os.mkfifo(fifo)
    line = _run(kind, fifo, tmp_path)
    assert f"{fifo}: cannot read" in line and "(not a regular file)" in line


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "results"])
def test_dev_zero_is_refused_without_reading_it(kind, tmp_path):
    line = _run(kind, "/dev/zero", tmp_path)
    assert "/dev/zero: cannot read" in line and "(not a regular file)" in line


def test_dev_zero_as_results_is_refused(tmp_path):
    assert "/dev/zero: expected a results directory" in _run("results", "/dev/zero", tmp_path)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "results"])
def test_a_directory_is_refused(kind, tmp_path):
    d = tmp_path / "input.toml"
    d.mkdir()
    line = _run(kind, d, tmp_path)
    # click's own check (a PATH that must not be a directory), the reader's, or a model
    # directory without its config.json: each names the path
    assert str(d) in line
    assert any(s in line for s in ("is a directory", "(a directory)", "config.json"))


@pytest.mark.parametrize("kind,name,text,what", [
    ("trace", "t.csv", "arrival_s,prompt_tokens,output_tokens,Arrival_s\n0,16,2,1\n",
     ":1: the header names 'arrival_s' more than once"),
    ("topology", "t.csv", "M,N,K,m\n64,64,64,32\n", ":1: the header names 'm' more than once"),
    ("topology", "t.csv", "Layer name,IFMAP Height,IFMAP Width,Filter Height,Filter Width,"
     "Channels,Num Filter,Strides,Channels\nconv,32,32,3,3,8,16,1,9\n",
     ":1: the header names 'channels' more than once"),
    ("results", "r.csv", "area_mm2,tokens_per_s,area_mm2\n1,2,3\n",
     ":1: the header names 'area_mm2' more than once"),
    ("model", "config.json", '{"architectures": ["LlamaForCausalLM"], "architectures": ["X"]}',
     ": invalid JSON (the key 'architectures' appears twice in one object)"),
    ("chip", "chip.json", '{"name": "x", "clock_ghz": 1.0, "clock_ghz": 2.0}',
     ": invalid JSON (the key 'clock_ghz' appears twice in one object)"),
    ("sweep spec", "spec.json", '{"base": "tpu-v4", "workload": {"model": "llama-3-8b", '
     '"model": "llama-3-70b", "phase": "decode"}}',
     ": invalid JSON (the key 'model' appears twice in one object)"),
    ("cluster", "c.json", '{"name": "c", "name": "d"}',
     ": invalid JSON (the key 'name' appears twice in one object)"),
    ("runtime", "r.toml", 'name = "a"\nname = "b"\n', ": invalid TOML (Cannot overwrite a value"),
])
def test_a_column_or_key_named_twice_is_refused_naming_it(kind, name, text, what, tmp_path):
    f = tmp_path / name
    f.write_text(text)
    line = _run(kind, f, tmp_path)
    assert f"Error: {f}{what}" in line, line


def test_a_parquet_results_file_or_part_with_a_column_twice_is_refused(tmp_path):
    t = pa.table([pa.array([1.0]), pa.array([2.0]), pa.array([3.0])],
                 names=["area_mm2", "tokens_per_s", "area_mm2"])
    f = tmp_path / "r.parquet"
    pq.write_table(t, f)
    assert f"{f}: the header names 'area_mm2' more than once" in _run("results", f, tmp_path)
    d = tmp_path / "results"
    d.mkdir()
    pq.write_table(t, d / "part-1.parquet")
    line = _run("results", d, tmp_path)
    assert f"{d / 'part-1.parquet'}: the header names 'area_mm2' more than once" in line


def test_a_fifo_among_the_result_parts_is_refused(tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    os.mkfifo(d / "part-1.parquet")
    line = _run("results", d, tmp_path)
    assert f"{d / 'part-1.parquet'}: cannot read results part (not a regular file)" in line
