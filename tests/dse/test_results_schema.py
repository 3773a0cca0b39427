"""Results directories read as one table by pandas and pyarrow.dataset: one schema for every
part, declared before the first part, nulls typed, extended deterministically."""

from __future__ import annotations

import concurrent.futures as cf
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from diptych.tools.dse.evaluate import evaluate_workload
from diptych.tools.dse.results import SCHEMA_FILE
from diptych.tools.dse.spec import parse_spec
from diptych.tools.dse.sweep import part_files, read_results, result_columns, run_sweep

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import fake_eval  # noqa: E402

SPEC = {"base": "infer-2026", "chip": {"array_dim": [64, 128], "dtype": ["int8", "bf16"]},
        "workload": {"model": "llama-3-8b", "phase": ["prefill", "decode"],
                     "batch": [1, 8, 13]}}


def assert_one_schema(out: Path) -> pa.Schema:
    """Every part has exactly the directory's declared schema, with no null-typed column; the
    tools people use read it as one table."""
    schema = pq.read_schema(out / SCHEMA_FILE)
    assert not [f.name for f in schema if pa.types.is_null(f.type)]
    for f in part_files(out):
        assert pq.read_schema(f).equals(schema), f.name
    n = len(read_results(out))
    assert len(pd.read_parquet(out)) == n
    assert ds.dataset(out, format="parquet").to_table().num_rows == n
    return schema


def test_a_partly_failed_sweep_with_undeclared_metrics_reads_as_one_table(tmp_path):
    """Failures first (batch 13 raises), then a metric no one declared appears late, typed int
    in one part and float in another: earlier parts are rewritten to the widened schema."""
    spec = parse_spec(SPEC)
    out = tmp_path / "o"
    s = run_sweep(spec, out, evaluate=fake_eval.late_metric_eval, jobs=2, points_per_task=1,
                  progress=False)
    assert s.failed == 8 and s.ran == 24
    schema = assert_one_schema(out)
    assert schema.field("late").type == pa.float64()
    assert schema.field("label").type == pa.string()
    assert schema.field("seconds").type == pa.float64()
    assert schema.field("error").type == pa.string()
    df = pd.read_parquet(out)
    late = df.set_index(["phase", "batch"])["late"].dropna().groupby(level=[0, 1]).first()
    assert late.to_dict() == {("decode", 8): 2.5, ("prefill", 8): 3.0}
    assert df["error"].notna().sum() == 8
    assert df.loc[df["batch"] == 13, "seconds"].isna().all()
    # the parameters keep their declared types even in parts of failed points only
    assert schema.field("array_dim").type == pa.int64()
    assert schema.field("dtype").type == pa.string()


def test_a_resumed_sweep_reads_as_one_table(tmp_path):
    spec = parse_spec(SPEC)
    out = tmp_path / "o"
    first = parse_spec({**SPEC, "workload": {**SPEC["workload"], "batch": [13]}})
    run_sweep(first, out, evaluate=fake_eval.toy_eval, executor=cf.ThreadPoolExecutor(1),
              progress=False)  # only failures so far: no metric column seen yet
    s = run_sweep(spec, out, evaluate=fake_eval.toy_eval, executor=cf.ThreadPoolExecutor(2),
                  progress=False)
    assert s.skipped == 8 and s.ran == 16
    assert_one_schema(out)
    assert len(pd.read_parquet(out)) == 24


def test_an_older_directory_is_repaired_on_resume(tmp_path):
    """Parts written one schema each (as before): pandas cannot read them; a resume unifies."""
    out = tmp_path / "o"
    out.mkdir()
    spec = parse_spec(SPEC)
    pts = spec.points()
    pq.write_table(pa.Table.from_pylist([{"point_id": pts[0].id, **pts[0].params,
                                          "seconds": None, "error": "x"}]),
                   out / "part-00000000000000000001-aaaaaaaa.parquet")
    pq.write_table(pa.Table.from_pylist([{"point_id": pts[1].id, **pts[1].params,
                                          "seconds": 1.5, "error": None}]),
                   out / "part-00000000000000000002-bbbbbbbb.parquet")
    with pytest.raises(Exception):
        ds.dataset(out, format="parquet").to_table()
    run_sweep(spec, out, evaluate=fake_eval.toy_eval, executor=cf.ThreadPoolExecutor(2),
              progress=False)
    assert_one_schema(out)
    assert len(pd.read_parquet(out)) == 24


def test_the_default_evaluator_declares_its_metrics(tmp_path):
    """Every point fails (tp = 7 cannot split the model), yet the only part carries the metric
    columns of a successful run, typed."""
    cols = result_columns(parse_spec(SPEC), evaluate_workload)
    assert cols["tpot_s"] == pa.float64() and cols["fits"] == pa.bool_()
    assert cols["bound"] == pa.string() and cols["tokens_per_j"] == pa.float64()
    spec = parse_spec({**SPEC, "chip": {"array_dim": [64]},
                       "workload": {"model": "llama-3-8b", "phase": "decode", "tp": 7}})
    run_sweep(spec, tmp_path / "o", executor=cf.ThreadPoolExecutor(1), progress=False)
    schema = assert_one_schema(tmp_path / "o")
    assert schema.field("tpot_s").type == pa.float64()
    assert pd.read_parquet(tmp_path / "o")["error"].str.contains("tp=7 cannot split").all()
