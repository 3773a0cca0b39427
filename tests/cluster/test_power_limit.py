"""The power-limited clock of a cluster step (sim/cluster/power.py): the busy power of each
stage against a hand derivation from the step's energy parts, and the re-run at the clock the
hottest stage sustains, on the roofline double."""

from __future__ import annotations

import dataclasses

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.arch.power import chip_at_clock, power_table
from diptych.sim.cluster.power import hottest_busy_power_w
from diptych.sim.cluster.run import run_cluster_step
from diptych.sim.run import Scenario
from diptych.sim.run.variant import IDEAL, Variant

SCEN = dict(phase="train", batch=8, seq=2048, tp=2, dp=2, micro_batch=2)


def _run(chip, power_limit=True, **kw):
    return run_cluster_step(chip, "llama-3-8b", Scenario.of(**SCEN, power_limit=power_limit),
                            simulate=roofline, **kw)


def _hot_chip(frac=0.7):
    """h100 with its TDP set to ``frac`` of what its stages draw while busy."""
    c = load_chip("h100")
    hot = hottest_busy_power_w(_run(c, power_limit=False))
    return dataclasses.replace(c, tdp_w=frac * hot), hot


def test_busy_power_from_the_energy_parts_by_hand():
    """One pipeline stage: every rank's busy time is the step less what it idles
    (``idle_static`` = static W × idle s × ranks), and its busy joules are compute +
    optimizer."""
    c = load_chip("h100")
    r = _run(c, power_limit=False)
    e = r.energy_breakdown
    idle_s = e["idle_static"] / (c.energy.static_w * r.chips)
    busy_s = r.seconds - idle_s
    want = (e["compute"] + e["optimizer"]) / r.chips / busy_s
    assert len(r.stage_seconds) == 1
    assert r.stage_seconds[0]["busy_power_w"] == pytest.approx(want, rel=1e-9)
    # busy power is at least the step's average (links and idle leakage dilute the average)
    assert want >= r.energy_j / r.chips / r.seconds * (1 - 1e-9)


def test_step_above_the_tdp_runs_at_the_clock_it_sustains():
    c, hot = _hot_chip(0.7)
    nominal = _run(c, power_limit=False)
    with pytest.warns(UserWarning, match="can sustain"):
        res = _run(c)
    lim = res.info["power_limit"]
    assert lim["clock_ghz"] < c.clock_ghz
    assert lim["busy_power_w_nominal"] == pytest.approx(hot)
    assert hottest_busy_power_w(res) <= c.tdp_w * (1 + 1e-3)
    # no more than the limiter needs: a clock 3 % higher is above the TDP again
    higher = run_cluster_step(chip_at_clock(c, min(c.clock_ghz, lim["clock_ghz"] * 1.03)),
                              "llama-3-8b", Scenario.of(**SCEN), simulate=roofline)
    assert hottest_busy_power_w(higher) > c.tdp_w
    # compute-bound layers stretch by the clock ratio, memory-bound ones and links less
    assert nominal.seconds < res.seconds <= nominal.seconds * c.clock_ghz / lim["clock_ghz"] \
        * (1 + 1e-9)
    # MFU stays relative to the nominal peak: the same FLOPs over a longer step
    assert res.mfu == pytest.approx(nominal.mfu * nominal.seconds / res.seconds, rel=1e-9)
    assert res.hfu == pytest.approx(nominal.hfu * nominal.seconds / res.seconds, rel=1e-9)
    # the core's energy per MAC falls with V^2: less energy per token than at full clock
    assert res.energy_j_per_token < nominal.energy_j_per_token
    assert any("can sustain" in w for w in res.warnings)
    assert not any("not sustainable" in w for w in res.warnings)


def test_the_rerun_chip_scales_core_energies_by_v_squared():
    c = load_chip("h100")
    f = 1.4
    t = power_table(c)
    v2 = (t.volts(f) / t.volts(c.clock_ghz)) ** 2
    slow = chip_at_clock(c, f)
    assert slow.clock_ghz == f and slow.power is None
    assert slow.energy.pj_per_mac.bf16 == pytest.approx(c.energy.pj_per_mac.bf16 * v2)
    assert slow.energy.pj_per_sram_byte == pytest.approx(c.energy.pj_per_sram_byte * v2)
    assert slow.energy.pj_per_vector_op == pytest.approx(c.energy.pj_per_vector_op * v2)
    for same in ("pj_per_dram_bit", "pj_per_link_bit", "static_w"):
        assert getattr(slow.energy, same) == getattr(c.energy, same)
    for bad in (0.0, -1.0, c.clock_ghz * 1.01):
        with pytest.raises(ValueError, match="clock_ghz"):
            chip_at_clock(c, bad)


def test_within_the_tdp_skipped_or_without_a_table_nothing_changes():
    hot, busy = _hot_chip(0.7)
    cool = dataclasses.replace(hot, tdp_w=busy * 1.01)
    a = _run(cool)
    assert "power_limit" not in a.info
    assert a.seconds == _run(cool, power_limit=False).seconds
    plain = _run(hot, power_limit=False).seconds
    for off, want in ((_run(hot, power_limit=False), plain),
                      (_run(hot, variant=IDEAL), _run(hot, power_limit=False,
                                                      variant=IDEAL).seconds),
                      (_run(dataclasses.replace(hot, power=None)), plain)):
        assert "power_limit" not in off.info
        assert off.seconds == pytest.approx(want, rel=1e-12)
        assert any("not sustainable" in w for w in off.warnings)


def test_a_tdp_below_the_floor_is_reported_not_hidden():
    c, _ = _hot_chip(0.7)
    cold = dataclasses.replace(c, tdp_w=c.energy.static_w * 0.5)
    with pytest.warns(UserWarning, match="cannot sustain"):
        res = _run(cold)
    assert "power_limit" not in res.info
    assert res.seconds == pytest.approx(_run(cold, power_limit=False).seconds, rel=1e-12)


def test_waterfall_charges_the_power_limited_clock():
    c, _ = _hot_chip(0.7)
    with pytest.warns(UserWarning):
        res = _run(c, waterfall=True)
    wf = res.waterfall
    shares = {s["mechanism"]: s["share"] for s in wf["steps"]}
    assert shares["power"] > 0.0
    assert sum(shares.values()) + res.mfu == pytest.approx(1.0, abs=1e-9)
    assert wf["mfu"] == pytest.approx(res.mfu)
    # the same without the limit: the power share is 0
    free = _run(c, waterfall=True, variant=Variant(no_power_limit=True))
    assert {s["mechanism"]: s["share"] for s in free.waterfall["steps"]}["power"] == \
        pytest.approx(0.0, abs=1e-12)
