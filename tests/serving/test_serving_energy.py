"""A serving run's energy by component (issue 23 item 5), with the engine on a four-layer
model: each step's components sum to its energy, on the grid (interpolated with the energy's
own weights) and the direct oracle, summed and scheduled; a run's components sum to its
energy and per output token to 1 / tokens_per_j, with idle static power, KV transfers, a
draft model and a power limit that binds."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from diptych.arch import load_chip
from diptych.sim import energy_parts as EP
from diptych.sim.run import Scenario
from diptych.sim.serving.config import ServeConfig, Speculation
from diptych.sim.serving.grid_timer import GridStepTimer, exact_parts_cost
from diptych.sim.serving.power import StepPowerLimit
from diptych.sim.serving.requests import Load, parse_length
from diptych.sim.serving.serve import Deployment, Pool, serve
from diptych.sim.serving.step_time import DirectStepTimer, make_replica
from diptych.workloads import model_from_hf
from diptych.workloads.serving_step import Step

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY, write_config  # noqa: E402

MODEL = model_from_hf(TINY, name="tiny-llama")
STEPS = [Step(8, 8 * 300), Step(prefill=((200, 0),)), Step(3, 3 * 500, ((64, 128),)),
         Step(5, 5 * 777, ((37, 0), (90, 41)))]


def _replica(chip="infer-2026", **kw):
    return make_replica(chip, MODEL, Scenario.of(phase="decode", **kw))


def _sums(cost):
    assert len(cost.parts) == len(EP.VECTOR) and all(x >= 0 for x in cost.parts)
    assert sum(cost.parts) == pytest.approx(cost.energy_j, rel=1e-9)


@pytest.mark.parametrize("execution", ["sum", "schedule"])
def test_every_step_s_components_sum_on_both_oracles_and_agree(execution):
    r = _replica(execution=execution)
    grid, direct = GridStepTimer(r), DirectStepTimer(r)
    for st in STEPS:
        g, d = grid.cost(st), direct.cost(st)
        _sums(g)
        _sums(d)
        for k, (a, b) in enumerate(zip(g.parts, d.parts)):
            if execution == "sum":      # as the energies agree (docs/serving.md's error)
                assert a == pytest.approx(b, rel=0.03, abs=1e-3 * d.energy_j), EP.VECTOR[k]
            elif EP.VECTOR[k] in ("mac", "vector"):
                # the grid times a schedule's cores as summed blocks, operands in DRAM, where
                # the direct schedule keeps them on chip: the same work, other bytes
                assert a == pytest.approx(b, rel=1e-3), EP.VECTOR[k]
        assert g.parts[EP.VECTOR.index("mac")] > 0
        assert g.parts[EP.VECTOR.index(EP.OTHER)] == 0.0
        if execution == "sum":     # the pieces simulated exactly: the direct oracle's parts
            x = exact_parts_cost(r, st)
            _sums(x)
            for a, b in zip(x.parts, d.parts):
                assert a == pytest.approx(b, rel=1e-9, abs=1e-18)


def test_a_grid_query_between_vertices_interpolates_the_components_with_the_energy():
    """A step whose tokens fall between the token axis's vertices: its energy is a blend of
    the vertices', and so is each component; their sum stays the energy."""
    r = _replica()
    grid = GridStepTimer(r)
    for n in (41, 97, 203):             # past the dense range: between geometric vertices
        c = grid.cost(Step(n, n * 300))
        _sums(c)


def test_the_power_limit_scales_every_component_but_static():
    c = load_chip("h100")
    lim = StepPowerLimit(c)
    parts = EP.as_vector(EP.of(mac=6.0, sram=1.0, dram=2.0, static=1.0))
    s, e, p = lim.limit(0.010, 10.0, parts)                   # 1 kW for 10 ms
    assert s > 0.010 and lim.steps == 1
    assert sum(p) == pytest.approx(e, rel=1e-12)
    v2 = p[EP.VECTOR.index("mac")] / 6.0
    assert v2 < 1
    for k in ("sram", "dram"):
        assert p[EP.VECTOR.index(k)] == pytest.approx(parts[EP.VECTOR.index(k)] * v2)
    assert StepPowerLimit(c)(0.010, 10.0) == (s, e)            # the (seconds, energy) call


def _load(n=12, prompt="300", gen="12", qps=40.0):
    return Load(qps=qps, prompt=parse_length(prompt, "prompt"), gen=parse_length(gen, "gen"),
                requests=n)


def _check_run(res):
    parts = res.energy_breakdown_j
    assert list(parts)[:len(EP.COMPONENTS)] == list(EP.COMPONENTS) and EP.OTHER not in parts
    assert all(v >= 0 for v in parts.values())
    assert EP.total(parts) == pytest.approx(res.energy_j, rel=1e-9)
    per_tok = res.energy_breakdown_j_per_token
    assert EP.total(per_tok) == pytest.approx(1.0 / res.tokens_per_j, rel=1e-9)
    assert res.to_dict()["energy_breakdown_j"] == parts
    return parts


@pytest.mark.parametrize("oracle", ["grid", "direct"])
def test_a_serving_run_s_components_sum_to_its_energy(oracle):
    res = serve(Deployment(pool=Pool(_replica(), 2)), _load(), oracle=oracle)
    parts = _check_run(res)
    assert parts["mac"] > 0 and parts["static"] > 0 and parts["link"] == 0.0


def test_kv_transfers_are_link_energy_and_a_draft_model_is_counted(tmp_path):
    pre, dec = _replica(), _replica()
    res = serve(Deployment(prefill=Pool(pre), decode=Pool(dec)), _load())
    parts = _check_run(res)
    assert parts["link"] > 0
    draft = write_config(tmp_path, {**TINY, "num_hidden_layers": 2}, "draft.json")
    cfg = ServeConfig(speculative=Speculation(k=2, accept=0.7, draft=draft))
    plain = _check_run(serve(Deployment(pool=Pool(_replica())), _load()))
    spec = _check_run(serve(Deployment(pool=Pool(_replica())), _load(), cfg))
    assert spec["mac"] != plain["mac"]


def test_a_serving_run_on_a_hot_chip_still_sums():
    """An infer-2026 whose TDP its prefill steps exceed: those steps run at a lower clock
    (info.power_limit.steps), and the run's components still sum to its energy."""
    base = load_chip("infer-2026")
    hot = dataclasses.replace(base, tdp_w=base.energy.static_w * 1.05)
    rep = make_replica(hot, MODEL, Scenario.of(phase="decode"))
    res = serve(Deployment(pool=Pool(rep)), _load(prompt="2000", gen="4", qps=200.0))
    assert res.info["power_limit"]["steps"] > 0
    _check_run(res)
