"""Power as a limit: the sustainable clock in closed form, the re-run wrapper with the engine
replaced by the roofline double, power-gated idle arrays, and no change without [power]."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import chip_from_dict, load_chip, to_dict
from diptych.arch.area import area_breakdown_mm2, die_area_mm2
from diptych.arch.power import PowerSplit, power_at, sustained_clock
from diptych.arch.tables import PowerTable
from diptych.sim.run import Scenario, run_workload

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
       tdp=st.floats(250, 1500), slope=st.just(0.0) | st.floats(0.001, 0.5))
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
        return run_workload(c, "llama-3-8b", Scenario.of(**kw), simulate=roofline)


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
    share = area_breakdown_mm2(c)["arrays"] / die_area_mm2(c)
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
    c = dataclasses.replace(load_chip("train-2026"), power=None)
    a = _run(c, phase="decode", batch=8, prompt=2048)
    b = _run(c, phase="decode", batch=8, prompt=2048, power_limit=False)
    assert dataclasses.asdict(a) == dataclasses.asdict(b)


PRESETS = ("h100", "tpu-v4", "tpu-v5e", "trainium2", "train-2026", "infer-2026", "tpu-v1",
           "groq-lpu")


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_has_a_cited_power_table(name):
    from importlib import resources

    from diptych.arch import preset_names
    assert set(PRESETS) == set(preset_names())
    c = load_chip(name)
    assert c.power is not None
    text = resources.files("diptych.arch.chips").joinpath(f"{name}.toml").read_text()
    block = text[text.index("[power]"):]
    assert any(tag in block for tag in ("[P]", "[S]", "[assumption]", "[design]"))
    # the nominal clock sits at a core voltage of a real process: 0.7-1.05 V
    assert 0.7 <= c.power.volts(c.clock_ghz) <= 1.05
    # gating: an idle array keeps at most its leakage
    assert 0.0 <= c.power.gated_leakage_fraction <= 1.0


def test_h100_power_at_its_other_boost_clock_by_hand():
    """Closed form: on the preset's curve, a run measured at 1.83 GHz (tensor boost) would
    draw core power × f·V² more, I/O × f more and the same static power at 1.98 GHz."""
    from diptych.arch.power import power_at
    c = load_chip("h100")
    split = PowerSplit(400.0, 150.0, c.energy.static_w)   # a hot, compute-bound run at 1.83
    assert power_at(c, split, 1.83) == pytest.approx(split.total_w)
    hi = power_at(c, split, 1.98)
    v = c.power.volts
    assert hi == pytest.approx(400.0 * 1.98 / 1.83 * (v(1.98) / v(1.83)) ** 2
                               + 150.0 * 1.98 / 1.83 + c.energy.static_w)


@pytest.mark.parametrize("name", ["infer-2026", "h100"])
def test_a_preset_above_its_tdp_runs_at_the_clock_it_can_sustain(name):
    """Lower the preset's TDP under its prefill power: the run comes back within the TDP at a
    lower clock, its time longer by at most the clock ratio."""
    c = load_chip(name)
    hot = _run(c, phase="prefill", batch=1, prompt=2048)
    # infer-2026 fits its TDP; h100's prefill is held just under its nominal clock already
    # (its energies measured on a power-limited GH100: arch/chips/h100.toml [energy])
    f_hot = hot.info["power_limit"]["clock_ghz"]
    assert f_hot <= c.clock_ghz
    power = hot.energy_j / hot.seconds / hot.chips
    tdp = 0.7 * power
    low = _run(dataclasses.replace(c, tdp_w=tdp), phase="prefill", batch=1, prompt=2048)
    lim = low.info["power_limit"]
    assert lim["clock_ghz"] < f_hot
    assert low.energy_j / low.seconds / low.chips <= tdp * (1 + 1e-3)
    assert hot.seconds < low.seconds <= hot.seconds * f_hot / lim["clock_ghz"] * (1 + 1e-9)


def test_gating_makes_decode_cheaper_on_the_presets():
    """Decode leaves most arrays idle: gating saves energy, never time."""
    c = load_chip("infer-2026")
    on = _run(c, phase="decode", batch=8, prompt=2048)
    off = _run(dataclasses.replace(c, power=dataclasses.replace(c.power,
                                                                gated_leakage_fraction=1.0)),
               phase="decode", batch=8, prompt=2048)
    assert on.seconds == off.seconds
    assert on.info["power_limit"]["gated_static_saved_j"] > 0
    assert on.energy_j < off.energy_j


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_h100_large_gemm_is_held_by_its_power_limit(dtype):
    """The h100's energies are calibrated on 8192³ GEMMs held by the 700 W limit of a real
    GH100 (arch/chips/h100.toml [energy]): at the nominal clock the engine's GEMM draws more
    than the TDP (so the power limit binds, as measured), and at the clock the TDP sustains it
    runs at the measured 667.6 / 1258.5 TFLOPS; the idle floor is nvidia-smi's 140-145 W."""
    from diptych.arch.power import PowerSplit, sustained_clock
    from diptych.sim.api import simulate
    from diptych.workloads.ops import Gemm

    c = load_chip("h100")
    st = simulate(Gemm(name="g", m=8192, k=8192, n=8192, a_dtype=dtype, b_dtype=dtype,
                       c_dtype="bf16"), c)
    assert st.energy_j / st.seconds > c.tdp_w * 1.1
    eb, t = st.energy_breakdown, st.seconds
    split = PowerSplit((eb["mac"] + eb["sram"] + eb["vector"]) / t, eb["dram"] / t,
                       eb["static"] / t)
    f = sustained_clock(c, st.energy_j, t, split=split)
    assert f < c.clock_ghz
    tflops = 2 * 8192 ** 3 / t / 1e12 * f / c.clock_ghz
    assert tflops == pytest.approx({"bf16": 667.6, "fp8": 1258.5}[dtype], rel=0.01)
    assert 140.0 <= c.energy.static_w <= 145.0
