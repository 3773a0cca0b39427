"""The power-limited clock of a serving step (sim/serving/power.py): the stretched step draws
exactly the TDP by the closed form of arch/power.py, the event loop applies it to every step
(its golden twin too), and nothing changes within the TDP or without a limit."""

from __future__ import annotations

import dataclasses

import pytest
from roofline_double import roofline
from test_serving_engine import _golden_of, _spaced_trace

from diptych.arch import load_chip
from diptych.arch.power import PowerSplit, power_at, sustained_clock
from diptych.arch.runtime import IDEAL
from diptych.sim.run import Scenario
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.power import StepPowerLimit
from diptych.sim.serving.serve import Deployment, Load, Pool, StepTimerCache, serve
from diptych.sim.serving.step_time import make_replica


def test_a_hot_step_is_stretched_to_draw_exactly_the_tdp():
    c = load_chip("h100")
    lim = StepPowerLimit(c)
    s, e = 0.010, 0.010 * 1000.0                  # 1 kW for 10 ms
    s2, e2 = lim(s, e)
    f = sustained_clock(c, e, s)
    assert f < c.clock_ghz
    assert s2 == pytest.approx(s * c.clock_ghz / f, rel=1e-12)
    assert e2 / s2 == pytest.approx(c.tdp_w, rel=1e-6)
    # the same number from the closed form of the split (core above the static floor)
    split = PowerSplit(1000.0 - c.energy.static_w, 0.0, c.energy.static_w)
    assert power_at(c, split, f) == pytest.approx(c.tdp_w, rel=1e-6)
    assert lim.steps == 1 and lim.min_clock_ghz == f and lim.added_s == pytest.approx(s2 - s)


def test_cool_steps_and_chips_without_a_table_are_left_alone():
    c = load_chip("h100")
    lim = StepPowerLimit(c)
    assert lim(0.01, 0.01 * 600.0) == (0.01, 0.01 * 600.0)
    assert lim(0.0, 0.0) == (0.0, 0.0)
    free = StepPowerLimit(dataclasses.replace(c, power=None))
    assert free(0.01, 0.01 * 2000.0) == (0.01, 0.01 * 2000.0)
    cold = StepPowerLimit(dataclasses.replace(c, tdp_w=c.energy.static_w / 2))
    assert cold(0.01, 0.01 * 1000.0) == (0.01, 0.01 * 1000.0)
    assert cold.unsustainable == 1 and cold.steps == 0


def _dep(chip, power_limit=True):
    return Deployment(pool=Pool(make_replica(chip, "llama-3-8b",
                                             Scenario(phase="decode", power_limit=power_limit))))


def test_serving_on_a_hot_chip_runs_its_prefills_slower(tmp_path):
    """An h100 with a 500 W limit: the roofline's 2k-token prefill steps are above it and
    stretch, the batch-1 decode steps (~400 W since the GH100-measured energies,
    docs/validation-published.md "Measured on Hopper") are below it and do not; the golden
    twin, given the same limit, agrees on every request."""
    hot = dataclasses.replace(load_chip("h100"), tdp_w=500.0)
    load = Load(trace=_spaced_trace(tmp_path, 4, 2048, 8))
    cfg = ServeConfig(runtime=IDEAL)
    res = serve(_dep(hot), load, cfg, oracles=StepTimerCache("direct", roofline))
    free = serve(_dep(hot, power_limit=False), load, cfg,
                 oracles=StepTimerCache("direct", roofline))
    pl = res.info["power_limit"]
    assert pl["steps"] == 4 and pl["min_clock_ghz"] < hot.clock_ghz and pl["added_s"] > 0
    assert "power_limit" not in free.info and not free.warnings
    assert any("TDP" in w for w in res.warnings)
    assert res.ttft_s["mean"] > free.ttft_s["mean"]
    assert res.tpot_s["mean"] == pytest.approx(free.tpot_s["mean"], rel=1e-12)
    gold = _golden_of(res, _dep(hot), cfg, load, StepTimerCache("direct", roofline))
    got = sorted(res.reqs, key=lambda r: r.rid)
    assert [r.first_t for r in got] == pytest.approx([g.first_t for g in gold.requests],
                                                     rel=1e-12)
