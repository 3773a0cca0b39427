"""Power as a limit: the sustainable clock in closed form, the re-run wrapper with the engine
replaced by the roofline double, power-gated idle arrays, and no change without [power]."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import chip_from_dict, load_chip, to_dict
from diptych.arch.power import PowerSplit, PowerTable, power_at, sustained_clock
from diptych.workloads import run_workload

from roofline_double import roofline


def chip(tdp=1000.0, **power):
    d = to_dict(load_chip("train-2026"))
    d["tdp_w"] = tdp
    if power is not None:
        d["power"] = power
    return chip_from_dict(d)


def test_constant_voltage_is_linear_in_the_clock():
    # V constant: P(f') = (core + io) × f'/f + static → f' = f (TDP − static) / (core + io)
    c = chip(tdp=500.0, volts_per_ghz=0.0)
    split = PowerSplit(core_w=600.0, io_w=150.0, static_w=150.0)
    assert sustained_clock(c, 900.0, 1.0, split=split) == pytest.approx(
        1.6 * (500 - 150) / 750, rel=1e-9)
    # within the TDP already: the chip's own clock
    assert sustained_clock(c, 400.0, 1.0) == 1.6


@settings(max_examples=60, deadline=None)
@given(core=st.floats(50, 2000), io=st.floats(0, 300), static=st.floats(0, 200),
       tdp=st.floats(250, 1500), slope=st.floats(0, 0.5))
def test_the_sustained_clock_meets_the_tdp_exactly_and_grows_with_it(core, io, static, tdp,
                                                                     slope):
    c = chip(tdp=tdp, volts_per_ghz=slope)
    split = PowerSplit(core, io, static)
    try:
        f = sustained_clock(c, split.total_w, 1.0, split=split)
    except ValueError:
        assert power_at(c, split, 0.1) > tdp
        return
    if split.total_w <= tdp:
        assert f == c.clock_ghz
    else:
        assert power_at(c, split, f) == pytest.approx(tdp, rel=1e-6)
        more = chip(tdp=tdp * 1.2, volts_per_ghz=slope)
        assert sustained_clock(more, split.total_w, 1.0, split=split) >= f


def test_static_power_above_the_tdp_is_an_error():
    with pytest.raises(ValueError, match="exceeds its 100 W TDP"):
        sustained_clock(chip(tdp=100.0), 1000.0, 1.0, split=PowerSplit(500.0, 0.0, 200.0))


def test_volts_by_hand():
    t = PowerTable(v_min=0.6, f_at_v_min_ghz=1.0, volts_per_ghz=0.2)
    assert t.volts(0.5) == 0.6 and t.volts(1.0) == 0.6
    assert t.volts(2.0) == pytest.approx(0.8)


def _run(c, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_workload(c, "llama-3-8b", simulate=roofline, **kw)


def test_compute_bound_run_is_reported_at_the_clock_it_can_sustain():
    c = chip(tdp=300.0)
    hot = _run(c, phase="prefill", batch=1, prompt=4096, power_limit=False)
    assert hot.energy_j / hot.seconds > 300
    res = _run(c, phase="prefill", batch=1, prompt=4096)
    lim = res.info["power_limit"]
    assert lim["clock_ghz"] < 1.6
    assert res.energy_j / res.seconds <= 300 * (1 + 1e-3)
    # the compute-bound ops stretch by the clock ratio, the memory-bound ones less
    assert hot.seconds < res.seconds <= hot.seconds * 1.6 / lim["clock_ghz"] * (1 + 1e-9)
    # MFU stays relative to the nominal 1.6 GHz peak
    assert res.mfu == pytest.approx(hot.mfu * hot.seconds / res.seconds)
    assert any("can sustain" in w for w in res.warnings)


def test_power_gating_saves_static_energy_of_idle_arrays():
    c = chip(tdp=5000.0, gated_leakage_fraction=0.1)
    plain = _run(c, phase="decode", batch=8, prompt=2048, power_limit=False)
    gated = _run(c, phase="decode", batch=8, prompt=2048)
    share = c.area_breakdown_mm2["arrays"] / c.die_area_mm2
    saved = 0.0
    for r in plain.layers:
        if r["bound"] == "communication":
            continue
        u = r["utilization"] if r["kind"] in ("gemm", "attention") else 0.0
        saved += c.energy.static_w * share * 0.9 * (1 - u) * r["seconds"] * r["repeat"]
    assert plain.energy_j - gated.energy_j == pytest.approx(saved, rel=1e-9)
    assert gated.seconds == plain.seconds
    assert gated.energy_j_per_token < plain.energy_j_per_token


def test_without_a_power_table_nothing_changes():
    c = load_chip("train-2026")
    assert c.power is None
    a = _run(c, phase="decode", batch=8, prompt=2048)
    b = _run(c, phase="decode", batch=8, prompt=2048, power_limit=False)
    assert dataclasses.asdict(a) == dataclasses.asdict(b)
