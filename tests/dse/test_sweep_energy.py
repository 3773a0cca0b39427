"""Energy by component in a sweep's results (issue 23 item 5): the default evaluator's rows
carry ``energy_mac_j`` ... ``energy_static_j`` beside ``energy_j``, declared in the schema
before the first part (float columns), summing to ``energy_j`` in every phase's rows; the
engine on a four-layer model."""

from __future__ import annotations

import concurrent.futures as cf
import sys
from pathlib import Path

import pytest

from diptych.sim import energy_parts as EP
from diptych.tools.dse.evaluate import metric_types
from diptych.tools.dse.results import part_files
from diptych.tools.dse.spec import parse_spec
from diptych.tools.dse.sweep import read_results, run_sweep

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402


def test_the_default_evaluator_declares_a_float_column_per_component():
    types = metric_types()
    assert all(types[c] is float for c in EP.COLUMNS)
    assert "energy_j" in types and "energy_breakdown_j" not in types


def test_a_sweep_s_component_columns_sum_to_its_energy_in_every_phase(tmp_path):
    import pyarrow.parquet as pq

    model = write_config(tmp_path, TINY, "tiny.json")
    s = parse_spec({"base": "infer-2026", "chip": {"array_dim": [64, 128]},
                    "workload": {"model": model, "phase": ["prefill", "decode", "train"],
                                 "batch": 2, "prompt": 128, "gen": 1, "seq": 128}})
    summary = run_sweep(s, tmp_path / "o", executor=cf.ThreadPoolExecutor(1), progress=False)
    assert summary.failed == 0
    rows = read_results(tmp_path / "o").to_pylist()
    assert sorted({r["phase"] for r in rows}) == ["decode", "prefill", "train"]
    assert len(rows) == 6
    for r in rows:
        assert r["energy_j"] > 0
        assert sum(r[c] for c in EP.COLUMNS) == pytest.approx(r["energy_j"], rel=1e-9)
        assert r["energy_mac_j"] > 0 and r["energy_static_j"] > 0
        assert "energy_other_j" not in r            # the engine gives every op a breakdown
    schema = pq.read_schema(part_files(tmp_path / "o")[0])
    assert all(str(schema.field(c).type) == "double" for c in EP.COLUMNS)
    assert "energy_j_per_token" in schema.names     # the old columns stay
