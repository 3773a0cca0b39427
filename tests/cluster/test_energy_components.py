"""A cluster step's energy by component (``energy_breakdown_j``, issue 23 item 5), with the
engine on a four-layer model: the components sum to the step's energy beside its by-part
view, match ``run_workload``'s inside one node, and follow a power-limited re-run."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

import pytest

from diptych.arch import load_chip
from diptych.sim import energy_parts as EP
from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.sim.cluster.power import hottest_busy_power_w
from diptych.sim.cluster.run import run_cluster_step
from diptych.sim.run import Scenario, run_workload
from diptych.workloads import model_from_hf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY  # noqa: E402

MODEL = model_from_hf(TINY, name="tiny-llama")


def _step(plan, chip="h100", **kw):
    kw = {"phase": "train", "batch": 4 * plan.dp * plan.micro_batch, "seq": 256, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return simulate_cluster_step(MODEL, chip, "dgx-h100", plan, Scenario.of(**kw))


@pytest.mark.parametrize("plan,kw", [
    (Plan(tp=2, pp=2, dp=2, zero=1, micro_batch=1), dict(execution="sum")),
    (Plan(tp=2, pp=2, dp=2, zero=1, micro_batch=1), dict(execution="schedule")),
    (Plan(tp=2, pp=2, micro_batch=1, recompute="selective"), dict(execution="sum")),
    (Plan(tp=2, pp=2, micro_batch=1, recompute="full"), dict(execution="schedule")),
    (Plan(tp=2, pp=2, micro_batch=1), dict(phase="decode", batch=4, prompt=256, gen=4)),
])
def test_the_components_sum_to_the_step_and_agree_with_its_parts(plan, kw):
    r = _step(plan, **kw)
    parts, by_part = r.energy_breakdown_j, r.energy_breakdown
    assert list(parts) == list(EP.COMPONENTS)
    assert all(v >= 0 for v in parts.values())
    assert EP.total(parts) == pytest.approx(r.energy_j, rel=1e-9)
    assert r.to_dict()["energy_breakdown_j"] == parts
    # links are links in both views; the idle static power is static power
    assert parts["link"] == pytest.approx(by_part["link"], rel=1e-9)
    assert parts["static"] >= by_part["idle_static"] > 0
    assert parts["mac"] > 0 and parts["sram"] > 0
    if plan.dp > 1:
        assert parts["link"] > 0


@pytest.mark.parametrize("sp", [None, False])
def test_one_node_has_run_workloads_components(sp):
    """Inside one node the step is run_workload's summed model (tests/cluster/test_energy.py):
    component by component too, once the idle static power is set aside."""
    # (sequence parallelism: on both sides by default at TP 2, and off on both)
    r = _step(Plan(tp=2, micro_batch=2, sequence_parallel=sp is not False), batch=8,
              execution="sum")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        w = run_workload(load_chip("h100"), MODEL,
                         Scenario.of(phase="train", batch=8, seq=256, tp=2, micro_batch=2,
                                     power_limit=False, execution="sum",
                                     sequence_parallel=sp))
    got, want = dict(r.energy_breakdown_j), w.energy_breakdown_j
    got["static"] -= r.energy_breakdown["idle_static"]
    for k in EP.COMPONENTS:
        if k != "static":
            assert got[k] == pytest.approx(want[k], rel=1e-6, abs=1e-15), k
    # the step times AdamW from one simulated chunk per parameter (sim/cluster/step.py
    # _per_param), the run as one op: their times, so static energies, differ slightly
    assert got["static"] == pytest.approx(want["static"], rel=1e-3)


def test_a_power_limited_step_reports_the_slowed_chip_s_components():
    """h100 with its TDP at 80 % of the hottest stage's busy power (llama-3-8b: the
    four-layer model's power is mostly static, which no clock lowers): the step is re-run at
    a lower clock, whose core energies per event are smaller; its components still sum."""
    c = load_chip("h100")
    sc = Scenario.of(phase="train", batch=4, seq=512, tp=2, dp=2, micro_batch=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        nominal = run_cluster_step(c, "llama-3-8b", dataclasses.replace(sc, power_limit=False))
        hot = dataclasses.replace(c, tdp_w=0.8 * hottest_busy_power_w(nominal))
        res = run_cluster_step(hot, "llama-3-8b", sc)
    assert res.info["power_limit"]["clock_ghz"] < c.clock_ghz
    p, q = res.energy_breakdown_j, nominal.energy_breakdown_j
    assert EP.total(p) == pytest.approx(res.energy_j, rel=1e-9)
    assert p["mac"] < q["mac"] and p["sram"] < q["sram"]
    assert p["link"] == pytest.approx(q["link"], rel=1e-9)
