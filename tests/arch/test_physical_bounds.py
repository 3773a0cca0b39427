"""Physical lower and upper bounds on every rate, bandwidth, latency, energy, area, power, cost
and runtime-profile field (issue 22 item 2): a denormal-scale value is refused naming the
field, in the loader and in the JSON Schema alike; an explicit 0 stays valid where it means
"none"; and at the new floors a chip still runs, no faster than the preset, with finite,
non-negative time and energy.

The reproducers: ``package.d2d_gb_per_s = 1e-300`` made a GEMM on infer-2026 faster (1,406
vs 2,531 cycles: its DRAM time overflowed the engine's int64 cycle count and came back
negative), ``noc.link_bytes_per_cycle = 1e-300`` hung it (10^303 D2D router ports to place),
``core.vector.ops_per_lane_per_cycle = 1e-300`` gave a negative energy, and a refresh
blackout as long as tREFI (each timing within its own range) hung the DRAM model.
"""

from __future__ import annotations

import json
import math
import time

import jsonschema
import pytest
from click.testing import CliRunner

from diptych.arch import ConfigError, chip_from_dict, load_chip, to_dict
from diptych.arch.chip import Chip, DtypeTable
from diptych.arch.cluster import Cluster, cluster_from_dict, load_cluster
from diptych.arch.runtime import RuntimeProfile, _from_dict as runtime_from_dict

from chip_fields import base_chip, numeric_fields, put

TINY = 1e-300

CHIP_FIELDS = list(numeric_fields(Chip))
FLOATS = [(p, m) for p, m, tp in CHIP_FIELDS if tp is float]


def test_every_float_field_has_a_positive_floor_and_a_reason():
    """No float field of a chip may take a denormal-scale positive value: each has a minimum
    > 0 (0 itself, where it means "none", through ``zero_ok``) and a reason."""
    assert len(FLOATS) > 90
    no_floor = [p for p, m in FLOATS
                if not ((m.get("min") or 0) > 0 or m.get("gt", 0) > 0)]
    assert no_floor == []
    no_reason = [p for p, m in FLOATS if not m.get("why")]
    assert no_reason == []


@pytest.mark.parametrize("path,meta,tp", CHIP_FIELDS, ids=[p for p, _, _ in CHIP_FIELDS])
def test_a_denormal_value_is_refused_naming_the_field(path, meta, tp):
    with pytest.raises(ConfigError) as info:
        chip_from_dict(put(base_chip(), path, TINY), source="bad.toml")
    msg = str(info.value)
    assert msg.startswith(f"bad.toml: {path}: expected "), msg
    assert msg.endswith("got 1e-300"), msg
    if tp is float:   # the bounds and their reason, as the schema states them
        assert f"({meta['why']})" in msg, msg


ZERO_OK = [p for p, m in FLOATS if m.get("zero_ok")]


@pytest.mark.parametrize("path", ZERO_OK)
def test_an_explicit_zero_stays_valid_where_it_means_none(path):
    try:
        chip_from_dict(put(base_chip(), path, 0.0), source="ok.toml")
    except ConfigError as exc:   # only a rule across fields (no MACs in the default dtype)
        assert not str(exc).startswith(f"ok.toml: {path}:"), str(exc)


# ---- the JSON Schema says the same ---------------------------------------------------------------


def _schema_leaves(schema: dict, path=()):
    for k, sub in schema.get("properties", {}).items():
        if sub.get("type") == "object":
            yield from _schema_leaves(sub, path + (k,))
        elif sub.get("type") in ("number", "integer"):
            yield ".".join(path + (k,)), sub


def test_the_json_schema_refuses_every_denormal_value_and_takes_zero_where_the_loader_does():
    from diptych.tools.chips_cmd import chip_json_schema

    schema = chip_json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    base = base_chip()
    assert validator.is_valid(base)
    leaves = dict(_schema_leaves(schema))
    assert set(leaves) == {p for p, _, _ in CHIP_FIELDS}
    metas = {p: m for p, m, _ in CHIP_FIELDS}
    for path, sub in leaves.items():
        assert not validator.is_valid(put(base, path, TINY)), path
        zero_ok = metas[path].get("zero_ok", False)
        assert validator.is_valid(put(base, path, 0.0)) == zero_ok or sub["type"] == "integer", \
            path
        if sub["type"] == "number":   # the bounds' reason, as the loader's message says it
            assert metas[path]["why"] in sub["description"], path


# ---- runtime profiles and clusters ---------------------------------------------------------------


PROFILE_FIELDS = list(numeric_fields(RuntimeProfile))


@pytest.mark.parametrize("path,meta,tp", PROFILE_FIELDS, ids=[p for p, _, _ in PROFILE_FIELDS])
def test_runtime_profile_fields_refuse_denormal_values(path, meta, tp):
    with pytest.raises(ConfigError, match=rf"^mine.toml: {path}: expected 0 or a number "
                                          rf">= .* \(.*\), got 1e-300$"):
        runtime_from_dict({"name": "mine", path: TINY}, "mine.toml")
    assert runtime_from_dict({"name": "mine", path: 0.0}, "mine.toml").is_ideal
    # a host time makes the profile cost time; the process's memory does not (it sizes the
    # KV cache, not a step)
    assert runtime_from_dict({"name": "mine", path: meta["min"]}, "mine.toml").is_ideal \
        == (path == "process_gib")


CLUSTER_FLOATS = [(p, m) for p, m, tp in numeric_fields(Cluster) if tp is float]


@pytest.mark.parametrize("path,meta", CLUSTER_FLOATS, ids=[p for p, _ in CLUSTER_FLOATS])
def test_cluster_rates_refuse_denormal_values(path, meta):
    data = to_dict(load_cluster("dgx-h100"))
    with pytest.raises(ConfigError, match=rf"^mine.toml: {path}: expected "):
        cluster_from_dict(put(data, path, TINY), source="mine.toml")
    with pytest.raises(ConfigError, match=rf"^mine.toml: {path}: expected "):
        cluster_from_dict(put(data, path, 1e308), source="mine.toml")
    assert meta.get("max") is not None and meta.get("why")


# ---- the reproducers --------------------------------------------------------------------------------


def infer(**changes) -> Chip:
    d = to_dict(load_chip("infer-2026"))
    for path, v in changes.items():
        d = put(d, path.replace("__", "."), v)
    return chip_from_dict(d, source="mine.json")


def gemm(chip, n=256):
    from diptych.sim import simulate_gemm

    t0 = time.perf_counter()
    st = simulate_gemm(n, n, n, chip)
    took = time.perf_counter() - t0
    for name, v in (("cycles", st.cycles), ("seconds", st.seconds),
                    ("energy_j", st.energy_j), *st.energy_breakdown.items()):
        assert math.isfinite(v) and v >= 0, (name, v)
    return st, took


@pytest.mark.parametrize("path,floor", [("package.d2d_gb_per_s", 1.0),
                                        ("noc.link_bytes_per_cycle", 0.125),
                                        ("core.vector.ops_per_lane_per_cycle", 0.001)])
def test_the_three_reproducers_are_refused_on_the_command_line(tmp_path, path, floor):
    from diptych.tools.cli import main

    d = to_dict(load_chip("infer-2026"))
    f = tmp_path / "chip.json"
    f.write_text(json.dumps(put(d, path, TINY)))
    r = CliRunner().invoke(main, ["gemm", "64", "64", "64", "--chip", str(f), "--json"])
    assert r.exit_code == 2, r.output
    assert f"chip.json: {path}: expected " in r.output and f">= {floor:g} " in r.output


def test_the_slowest_d2d_is_slower_than_the_preset_not_faster():
    """1e-300 GB/s gave 1,406 cycles against 2,531: the DRAM time (~10^300 ns) overflowed the
    engine's float -> int64 cycle conversion (undefined in LLVM; INT64_MIN on x86), so every
    wait on DRAM read as 'long ago'. Any value the loader takes keeps cycles far below int64."""
    preset, _ = gemm(load_chip("infer-2026"), 512)
    slow, took = gemm(infer(package__d2d_gb_per_s=1.0), 512)
    assert slow.cycles > preset.cycles and took < 10
    # less bandwidth is never faster along the way down
    mid, _ = gemm(infer(package__d2d_gb_per_s=100.0), 512)
    assert preset.cycles <= mid.cycles <= slow.cycles


def test_the_thinnest_noc_finishes_quickly_and_is_not_faster():
    """1e-300 bytes per cycle asked for ~10^303 router ports for the D2D interface (D2D GB/s ÷
    link GB/s): a loop that never ended. The ports are now capped per router along the edge."""
    from diptych.arch.noc import MAX_D2D_PORTS_PER_ROUTER, noc_report

    preset, _ = gemm(load_chip("infer-2026"))
    chip = infer(noc__link_bytes_per_cycle=0.125)
    slow, took = gemm(chip)
    assert slow.cycles >= preset.cycles and took < 10
    # the most ports any accepted chip can ask for: the widest D2D over the thinnest links at
    # the slowest clock (10^9 ports uncapped)
    extreme = infer(noc__link_bytes_per_cycle=0.125, package__d2d_gb_per_s=1e6,
                    package__d2d_gb_per_s_per_mm=1e5, clock_ghz=0.001,
                    power__min_clock_ghz=0.001)
    t0 = time.perf_counter()
    rep = noc_report(extreme)
    assert time.perf_counter() - t0 < 2
    assert rep.sources <= 8 + 2 * MAX_D2D_PORTS_PER_ROUTER * max(rep.rows, rep.cols)
    assert 0 < rep.dram_cap_bytes_per_s < math.inf


def test_the_slowest_vector_unit_has_a_finite_positive_energy():
    from diptych.sim.vector import softmax_op, vector_stats

    op = softmax_op("softmax", 1024, 1024)
    fast = vector_stats(op, load_chip("infer-2026"))
    slow = vector_stats(op, infer(core__vector__ops_per_lane_per_cycle=0.001))
    assert slow.cycles > fast.cycles
    for v in (slow.cycles, slow.seconds, slow.energy_j, *slow.energy_breakdown.values()):
        assert math.isfinite(v) and v >= 0


def test_a_run_on_a_one_lane_vector_unit_has_a_non_negative_energy(tmp_path):
    """A fused GEMM+vector record lasts as long as its slower epilogue: it is charged static
    power over all of that time (sim/run/scheduled.py), so the power-gating saving over the
    same time cannot drive the run's energy negative (it was -0.0017 J)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from tiny_models import TINY, write_config

    from diptych.sim.run import Scenario, run_workload

    cfg = write_config(tmp_path, TINY)
    base = run_workload(load_chip("infer-2026"), cfg, Scenario(phase="prefill", prompt=128))
    slow = run_workload(infer(core__vector__lanes=1), cfg, Scenario(phase="prefill", prompt=128))
    assert slow.seconds > base.seconds
    assert slow.energy_j >= 0 and slow.energy_j_per_token >= 0   # -0.0017 J


def test_a_refresh_blackout_as_long_as_trefi_is_refused():
    """t_rcd = t_cl = t_ras = 1000 ns with t_refi = 1000 ns (each within its range) hung the
    DRAM model: its walk over refresh windows never advanced."""
    with pytest.raises(ConfigError, match=r"^mine.json: dram.t_refi_ns: expected at least 2x "
                                          r"the refresh blackout t_rfc_ns \+ t_rcd_ns \+ "
                                          r"t_cl_ns \(2350 ns\).*got 1000.0$"):
        infer(dram__t_rcd_ns=1000.0, dram__t_cl_ns=1000.0, dram__t_ras_ns=1000.0,
              dram__t_refi_ns=1000.0)
    # the tightest refresh accepted (blackout = half of tREFI) runs, quickly and not faster
    preset, _ = gemm(load_chip("infer-2026"))
    st, took = gemm(infer(dram__t_rfc_ns=21.2, dram__t_refi_ns=100.0))
    assert st.cycles >= preset.cycles and took < 10


# ---- a property: every rate at its floor still runs ------------------------------------------------

#: Fields a GEMM's time or energy depends on (rates, bandwidths, latencies, energies, clock,
#: power), and for which less is slower.
TIMING_PREFIXES = ("clock_ghz", "core.vector.", "dma.", "dram.", "energy.", "package.d2d",
                   "noc.", "core.array.macs_per_pe_per_cycle.fp8", "tdp_w", "power.")
SLOWER_WHEN_LESS = ("clock_ghz", "core.vector.ops_per_lane_per_cycle", "dma.bytes_per_cycle",
                    "dram.gbps_per_pin", "package.d2d_gb_per_s", "package.d2d_gb_per_s_per_mm",
                    "noc.link_bytes_per_cycle", "core.array.macs_per_pe_per_cycle.fp8")
#: (the thinnest D2D PHY per mm of edge only fits the die with a thin D2D interface)
#: Companions that keep a floor within the cross-field rules (tRAS >= tRCD; the refresh
#: blackout within half of tREFI; the lowest clock no higher than the clock).
COMPANIONS = {"dram.t_ras_ns": {"dram.t_rcd_ns": 0.1},
              "dram.t_refi_ns": {"dram.t_rfc_ns": 21.2},
              "clock_ghz": {"power.min_clock_ghz": 0.001},
              "package.d2d_gb_per_s_per_mm": {"package.d2d_gb_per_s": 1.0}}
FLOORS = [(p, m) for p, m, tp in CHIP_FIELDS
          if tp is float and p.startswith(TIMING_PREFIXES)
          and (not p.startswith(("energy.pj_per_mac.", "core.array.")) or p.endswith(".fp8"))]


@pytest.mark.parametrize("path,meta", FLOORS, ids=[p for p, _ in FLOORS])
def test_gemm_at_every_floor_is_finite_quick_and_not_faster(path, meta):
    preset, _ = gemm(load_chip("infer-2026"))
    changes = {path: meta["min"], **COMPANIONS.get(path, {})}
    d = to_dict(load_chip("infer-2026"))
    for p, v in changes.items():
        d = put(d, p, v)
    chip = chip_from_dict(d, source="floor.json")
    st, took = gemm(chip)
    assert took < 10, (path, took)
    if path in SLOWER_WHEN_LESS:   # seconds: a slower clock takes fewer cycles of DRAM time
        assert st.seconds >= preset.seconds, (path, st.seconds, preset.seconds)


def test_the_floors_cover_every_rate_the_issue_named():
    named = {"core.vector.ops_per_lane_per_cycle", "dram.t_rcd_ns", "dram.t_cl_ns",
             "dram.t_rp_ns", "dram.t_rfc_ns", "dram.t_wtr_ns", "dram.t_rtw_ns",
             "package.d2d_gb_per_s", "package.d2d_latency_ns", "noc.link_bytes_per_cycle",
             "noc.hop_latency_cycles", "energy.pj_per_dram_bit", "energy.static_w"}
    assert named <= {p for p, _ in FLOORS}
    assert isinstance(load_chip("infer-2026").energy.pj_per_mac, DtypeTable)
