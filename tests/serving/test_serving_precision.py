"""Serving steps charge each GEMM's precision ops (sim/run/precision_ops.py: block scales' stream,
vector rescale, weight dequantisation) as ``diptych run`` does: a decode-only step equals
``run --phase decode`` in the same precision, the pieces and the grid still recombine to the
direct simulation, and the ops add what their closed form says (roofline double)."""

from __future__ import annotations

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.run import Scenario
from diptych.workloads.ops import Gemm
from diptych.sim.serving.step_time import DirectStepTimer, make_replica
from diptych.sim.serving.grid_timer import GridStepTimer, exact_parts_cost
from diptych.sim.support import dequant_place
from diptych.sim.run.node import run_workload
from diptych.workloads.serving_step import Step, lower_step

#: (chip, dtypes): int4 weights expanded on h100's CUDA cores (W4A16); MXFP4 weights with
#: MXFP8 or MXFP4 activations on infer-2026 (scales applied in the PE: their stream only)
PRECISIONS = [("h100", dict(weights_dtype="int4")),
              ("infer-2026", dict(weights_dtype="mxfp4", act_dtype="mxfp8")),
              ("infer-2026", dict(weights_dtype="mxfp4", act_dtype="mxfp4"))]


@pytest.mark.parametrize("execution", ["schedule", "sum"])
@pytest.mark.parametrize("chip,dtypes", PRECISIONS)
def test_decode_step_equals_run_decode_in_that_precision(chip, dtypes, execution):
    # (the summed run charges no fixed costs: the replica's stand-in is turned off)
    r = run_workload(chip, "llama-3-8b",
                     Scenario.of(phase="decode", batch=6, prompt=799, gen=1, execution=execution,
                                 power_limit=False, **dtypes),
                     simulate=roofline)
    rep = make_replica(chip, "llama-3-8b",
                       Scenario.of(phase="decode", execution=execution, **dtypes),
                       fixed_costs=execution == "schedule")
    assert DirectStepTimer(rep, roofline).cost(Step(6, 6 * 800)).seconds == \
        pytest.approx(r.seconds, rel=1e-12)


def _uncharged(monkeypatch):
    import diptych.sim.serving.step_time as oracle
    monkeypatch.setattr(oracle, "with_precision_ops", lambda w, c: w)


def test_w4a16_decode_step_adds_the_dequantisation_closed_form(monkeypatch):
    # h100, summed, no fixed costs: the step grows by 2 ops per weight element of every
    # weight GEMM at the vector rate, and launches nothing more with fixed costs on
    chip = load_chip("h100")
    st = Step(6, 6 * 800)
    w4 = make_replica(chip, "llama-3-8b", Scenario.of(phase="decode", weights_dtype="int4"))
    gemms = [(b.repeat, op) for b in lower_step(w4.model, st, precision=w4.precision).blocks
             for op in b.ops if isinstance(op, Gemm) and "weight" in op.tags]
    want = sum(rep * 2.0 * g.b_count * g.k * g.n for rep, g in gemms) / chip.vector_ops_per_s
    for fixed in (False, True):
        rep = make_replica(chip, "llama-3-8b",
                           Scenario.of(phase="decode", execution="sum", weights_dtype="int4"),
                           fixed_costs=fixed)
        got = DirectStepTimer(rep, roofline).cost(st).seconds
        _uncharged(monkeypatch)
        base = DirectStepTimer(rep, roofline).cost(st).seconds
        monkeypatch.undo()
        assert want > 0
        assert got - base == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("chip,dtypes", PRECISIONS)
def test_grid_is_exact_on_its_vertices_with_precision_ops(chip, dtypes):
    # summed pieces against their exact recombination; scheduled frame vertices against the
    # direct schedule (as test_serving_oracle.py does without precision ops)
    r = make_replica(chip, "llama-3-8b", Scenario.of(phase="decode", execution="sum", **dtypes))
    g = GridStepTimer(r, roofline)
    for st in (Step(8, 8 * 16), Step(prefill=((16, 0),)), Step(4, 4 * 40, ((8, 0),))):
        want = exact_parts_cost(r, st, roofline)
        assert g.cost(st).seconds == pytest.approx(want.seconds, rel=1e-9)
        assert g.cost(st).energy_j == pytest.approx(want.energy_j, rel=1e-9)
        assert want.seconds == pytest.approx(DirectStepTimer(r, roofline).cost(st).seconds,
                                             rel=1e-12)
    r = make_replica(chip, "llama-3-8b",
                     Scenario.of(phase="decode", execution="schedule", **dtypes))
    g, d = GridStepTimer(r, roofline), DirectStepTimer(r, roofline)
    for st in (Step(8, 8), Step(16, 16), Step(32, 32)):
        assert g.cost(st).seconds == pytest.approx(d.cost(st).seconds, rel=1e-8)
        assert g.cost(st).energy_j == pytest.approx(d.cost(st).energy_j, rel=1e-9)


@pytest.mark.parametrize("execution", ["sum", "schedule"])
def test_mla_cores_charge_their_gemms_precision_ops(execution):
    # DeepSeek-V3's absorbed decode GEMMs (q_absorb, v_absorb) and a chunk's kv_b_proj are
    # per-sequence cores holding int4 weights: their dequantisation is charged with the
    # cores (pieces and grid agree with the direct step; the cores do cost more)
    r = make_replica("h100", "deepseek-v3",
                     Scenario.of(phase="decode", tp=8, execution=execution, weights_dtype="int4"))
    cores = [op for b in lower_step(r.model, Step(4, 4 * 300, ((64, 128),)),
                                    precision=r.precision, tp=8).blocks for op in b.ops
             if isinstance(op, Gemm) and op.name.split("@")[0] in ("q_absorb", "v_absorb",
                                                                     "kv_b_proj")]
    assert cores and all(dequant_place(r.chip, g) == "vector" for g in cores)
    d = DirectStepTimer(r, roofline)
    if execution == "sum":
        for st in (Step(4, 4 * 300, ((64, 128),)), Step(prefill=((256, 512),))):
            assert exact_parts_cost(r, st, roofline).seconds == pytest.approx(
                d.cost(st).seconds, rel=1e-12)
    else:
        g = GridStepTimer(r, roofline)
        for st in (Step(8, 8), Step(16, 16)):
            assert g.cost(st).seconds == pytest.approx(d.cost(st).seconds, rel=1e-8)
