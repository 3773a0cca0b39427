"""Sweep specs: expansion, stable ids, derived chips, and clear messages for bad input."""

from __future__ import annotations

import pytest

from diptych.arch import load_chip
from diptych.tools.dse.spec import CHIP_PARAMS, TIER3_PARAMS, TIER_PARAMS, parse_spec

BASE = {"base": "infer-2026", "workload": {"model": "llama-3-8b", "phase": ["prefill", "decode"]}}


def spec(**kw):
    d = {**BASE, **kw}
    return parse_spec(d, source="t.toml")


def test_grid_expands_every_combination_with_stable_ids():
    s = spec(chip={"array_dim": [64, 128], "dtype": ["int8", "fp8", "bf16"]},
             workload={"model": "llama-3-8b", "phase": ["prefill", "decode"], "batch": [1, 8]})
    pts = s.points()
    assert len(pts) == 2 * 3 * 2 * 2
    assert len({p.id for p in pts}) == len(pts)
    combos = {(p.chip["array_dim"], p.chip["dtype"], p.workload["phase"], p.workload["batch"])
              for p in pts}
    assert len(combos) == len(pts)
    again = spec(chip={"array_dim": [64, 128], "dtype": ["int8", "fp8", "bf16"]},
                 workload={"model": "llama-3-8b", "phase": ["prefill", "decode"],
                           "batch": [1, 8]})
    assert [p.id for p in again.points()] == [p.id for p in pts]
    other_base = parse_spec({**BASE, "base": "train-2026",    # (no int8: rebuilt arrays)
                             "dtype_datapath": "rebuild",
                             "chip": {"array_dim": [64, 128], "dtype": ["int8", "fp8", "bf16"]},
                             "workload": {"model": "llama-3-8b", "phase": ["prefill", "decode"],
                                          "batch": [1, 8]}})
    assert not {p.id for p in other_base.points()} & {p.id for p in pts}


def test_random_mode_is_seeded_and_in_range():
    kw = dict(mode="random", samples=40, seed=3,
              chip={"array_rows": {"min": 32, "max": 256, "log": True},
                    "sram_mib": {"min": 8.0, "max": 256.0}, "dtype": ["int8", "bf16"]})
    a, b = spec(**kw).chip_points(), spec(**kw).chip_points()
    assert a == b and len(a) == 40
    assert all(32 <= p["array_rows"] <= 256 and isinstance(p["array_rows"], int) for p in a)
    assert all(8.0 <= p["sram_mib"] <= 256.0 for p in a)
    assert {p["dtype"] for p in a} == {"int8", "bf16"}
    assert spec(**{**kw, "seed": 4}).chip_points() != a


def test_derived_chip_applies_every_named_parameter():
    base = load_chip("infer-2026")
    s = spec(chip={})
    params = {"clock_ghz": 1.2, "cores": 4, "arrays_per_core": 1, "array_rows": 64,
              "array_cols": 32, "dtype": "bf16", "sram_mib": 32.0, "vector_lanes": 256,
              "hbm_stacks": 4, "hbm_gbps_per_pin": 6.4, "links": 2, "link_gb_per_s": 25.0,
              "tdp_w": 300.0, "dram.t_rcd_ns": 15.0}
    assert set(params) - {"dram.t_rcd_ns"} == set(CHIP_PARAMS) - {
        "array_dim", "sram_mib_per_core", *TIER_PARAMS, *TIER3_PARAMS}  # test_tier_axes.py
    c = s.build_chip(params)
    assert (c.clock_ghz, c.tensor_cores, c.core.arrays) == (1.2, 4, 1)
    assert (c.core.array.rows, c.core.array.cols) == (64, 32)
    # the dtype axis keeps the base chip's datapath: every rate as declared, bf16 the default
    assert c.dtypes == base.dtypes and c.default_dtype == "bf16"
    assert c.core.array.macs_per_pe_per_cycle == base.core.array.macs_per_pe_per_cycle
    assert c.core.scratchpad.capacity_mib == 8.0  # 32 MiB over 4 cores
    assert c.core.vector.lanes == 256
    assert c.dram.stacks == 4
    assert c.dram.capacity_gib == pytest.approx(base.dram.capacity_gib / base.dram.stacks * 4)
    assert c.dram.gbps_per_pin == 6.4 and c.dram.t_rcd_ns == 15.0
    assert c.interconnect.links == 2 and c.interconnect.gb_per_s_per_link_per_direction == 25.0
    assert c.tdp_w == 300.0 and c.area_budget_mm2 == 0.0
    assert c.name.startswith("infer-2026-")
    # the base chip is untouched
    assert load_chip("infer-2026") == base


@pytest.mark.parametrize("data, message", [
    ({"chip": {"array_size": [64]}}, "chip.array_size: unknown chip parameter"),
    ({"chip": {"dram.nope": [1]}}, "chip.dram.nope: unknown chip parameter"),
    ({"chip": {"array_dim": []}}, "chip.array_dim: empty list"),
    ({"workload": {"model": "llama-3-8b", "phase": []}}, "workload.phase: empty list"),
    ({"workload": {"model": "m", "phase": "decode", "bacth": 1}}, "workload.bacth: expected a "
                                                                  "known workload parameter"),
    ({"workload": {"model": "m", "phase": "serve"}}, "workload.phase[0]: expected one of"),
    ({"workload": {"model": "m"}}, "workload.phase: missing required key"),
    ({"chip": {"dtype": ["int9"]}}, "chip.dtype[0]: expected one of int4"),
    ({"chip": {"cores": [0]}}, "chip.cores[0]: expected a positive integer, got 0"),
    ({"chip": {"array_dim": [64], "array_rows": [32]}}, "cannot be combined"),
    ({"chip": {"array_dim": {"min": 8, "max": 16}}}, "ranges need mode"),
    ({"mode": "grid", "samples": 3}, "no samples in grid mode"),
    ({"mode": "random"}, "samples: expected a positive integer in random mode"),
    ({"mode": "lhs"}, "mode: expected \"grid\" or \"random\""),
    ({"budget": 3}, "budget: expected no such key"),
    ({"base": "h100", "dtype_datapath": "rebuild", "chip": {"dtype": ["int4"]}},
     "chip.dtype[0]: the base chip 'h100' has no area.mm2_per_mac.int4 coefficient"),
    ({"area_budget_mm2": -5}, "area_budget_mm2: expected a finite positive number"),
    ({"base": "no-such-chip"}, "unknown chip 'no-such-chip'"),
])
def test_bad_specs_have_clear_messages(data, message):
    with pytest.raises(ValueError) as exc:
        parse_spec({**BASE, **data}, source="t.toml")
    assert message in str(exc.value)
    if "base" not in data or data["base"] == "h100":
        assert str(exc.value).startswith("t.toml: ")


def test_missing_base():
    with pytest.raises(ValueError, match="base: missing required key"):
        parse_spec({"workload": BASE["workload"]}, source="t.toml")


def test_execution_is_a_workload_axis():
    s = spec(workload={"model": "llama-3-8b", "phase": "decode", "execution": ["sum", "schedule"]})
    assert sorted(p.workload["execution"] for p in s.points()) == ["schedule", "sum"]
    with pytest.raises(ValueError,
                       match=r"workload.execution\[0\]: expected one of schedule, sum, got 'x'"):
        spec(workload={"model": "llama-3-8b", "phase": "decode", "execution": "x"})
