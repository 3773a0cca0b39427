"""Energy by component (sim/energy_parts.py, issue 23 item 5): the helpers, and a summed
workload's components against closed forms from the chip's energy coefficients
(arch/energy.py), independent of the engine's own breakdown."""

from __future__ import annotations

import pytest

from diptych.arch import load_chip
from diptych.sim import energy_parts as EP
from diptych.sim import simulate
from diptych.sim import vector as V
from diptych.sim.run.summed import block_costs, combine_energy_parts, simulate_workload
from diptych.workloads.graph import Workload
from diptych.workloads.ops import Gemm
from diptych.workloads.program import Block


def _workload(*blocks) -> Workload:
    return Workload("x", tuple(blocks), tokens=1, batch=1)


def test_every_component_is_present_and_unknown_names_are_refused():
    assert list(EP.zero()) == list(EP.COMPONENTS)
    assert EP.of(mac=1.0)["mac"] == 1.0 and EP.total(EP.of(mac=1.0, static=2.0)) == 3.0
    with pytest.raises(KeyError, match="energy component"):
        EP.of(leakage=1.0)


def test_stats_without_a_breakdown_keep_their_energy_under_other():
    class Stand:
        energy_j = 2.5
    got = EP.of_stats(Stand())
    assert got[EP.OTHER] == 2.5 and EP.total(got) == 2.5


def test_the_vector_form_round_trips_and_drops_an_empty_other():
    parts = EP.of(mac=1.0, dram=2.0, static=3.0)
    vec = EP.as_vector(parts)
    assert len(vec) == len(EP.VECTOR) and vec[EP.STATIC] == 3.0
    assert EP.from_vector(vec) == parts
    assert EP.from_vector(EP.as_vector({**parts, EP.OTHER: 4.0}))[EP.OTHER] == 4.0


def test_a_core_reduction_scales_every_core_component_by_one_factor():
    parts = EP.of(mac=4.0, vector=1.0, sram=2.0, noc=1.0, dram=5.0, link=3.0, static=7.0)
    out = EP.with_core_reduced(parts, 2.0)               # core 8 J → 6 J: × 0.75
    for k in EP.CORE:
        assert out[k] == pytest.approx(parts[k] * 0.75, rel=1e-15)
    for k in ("dram", "d2d", "link", "static"):
        assert out[k] == parts[k]
    assert EP.total(out) == pytest.approx(EP.total(parts) - 2.0, rel=1e-15)
    assert EP.with_core_reduced(EP.of(dram=1.0), 0.5) == EP.of(dram=1.0)   # no core energy


def test_one_gemm_repeated_by_hand():
    """Three copies of one GEMM, summed: MAC = MACs × pJ per MAC of its dtype, DRAM = its DRAM
    bytes × 8 × pJ per bit, static = static W × the run's time; the whole sums to the
    total."""
    chip = load_chip("h100")
    op = Gemm(name="g", m=512, k=1024, n=768, a_dtype="bf16", b_dtype="bf16", c_dtype="bf16")
    t = simulate_workload(_workload(Block.of_ops("b", 3, (op,))), chip)
    e = chip.energy
    parts = t["energy_breakdown_j"]
    assert parts["mac"] == pytest.approx(3 * op.macs * e.pj_per_mac["bf16"] * 1e-12, rel=1e-12)
    assert parts["dram"] == pytest.approx(t["dram_bytes"] * 8 * e.pj_per_dram_bit * 1e-12,
                                          rel=1e-12)
    assert parts["static"] == pytest.approx(e.static_w * t["seconds"], rel=1e-12)
    assert parts["link"] == parts["noc"] == parts["d2d"] == 0.0
    assert EP.total(parts) == pytest.approx(t["energy_j"], rel=1e-12)
    rec = t["layers"][0]
    assert EP.total(rec["energy_breakdown_j"]) == pytest.approx(rec["energy_j"], rel=1e-12)


def test_a_vector_op_by_hand_and_block_costs_carry_the_components():
    chip = load_chip("infer-2026")          # a [noc] and a two-die package: noc and d2d too
    op = V.norm_op("n", 256, 4096)
    w = _workload(Block.of_ops("b", 2, (op,)))
    t = simulate_workload(w, chip)
    st = simulate(op, chip)
    parts = t["energy_breakdown_j"]
    assert parts["vector"] == pytest.approx(2 * st.flops * chip.energy.pj_per_vector_op * 1e-12,
                                            rel=1e-12)
    assert parts["mac"] == 0.0 and parts["noc"] > 0 and parts["d2d"] > 0
    assert EP.total(parts) == pytest.approx(t["energy_j"], rel=1e-12)
    # the serving grids' per-block costs: the launch costs' static power lands in static
    bc = block_costs(w, chip, fixed_costs=True)
    assert EP.total(bc[0].energy_breakdown_j) == pytest.approx(bc[0].energy_j, rel=1e-12)
    assert bc[0].energy_breakdown_j["static"] > st.energy_breakdown["static"]
    both = combine_energy_parts(bc, {"b": EP.of(link=1.0)})
    assert both["link"] == 2.0                           # the cores' parts × the repeats


def test_the_gated_static_energy_of_a_stand_in_s_run_comes_off_other():
    """A run timed by a stand-in for the engine keeps its ops' energy under ``other``, static
    power included: what power-gating saves comes off ``other`` past what ``static`` holds
    (never a negative component), and the parts still sum to the re-costed total."""
    from diptych.sim.run.power_limit import finished_parts

    parts = {**EP.of(static=0.5), EP.OTHER: 10.0}          # two chips
    out = finished_parts(parts, 2, core_reduction_j=1.0, gated_j=0.75)
    assert out["static"] == 0.0 and min(out.values()) >= 0
    assert EP.total(out) == pytest.approx(EP.total(parts) - 2 * (1.0 + 0.75), rel=1e-12)
    real = finished_parts(EP.of(mac=4.0, dram=2.0, static=3.0), 1, 1.0, 0.5)
    assert real == pytest.approx(EP.of(mac=3.0, dram=2.0, static=2.5), rel=1e-12)
    assert finished_parts({}, 1, 1.0, 0.5) == {}


def test_columns_name_every_component_and_keep_a_stand_in_s_other():
    assert EP.COLUMNS == tuple(f"energy_{k}_j" for k in EP.COMPONENTS)
    cols = EP.columns({"mac": 2.0, "static": 1.0})
    assert list(cols) == list(EP.COLUMNS) and sum(cols.values()) == 3.0
    assert EP.columns(None) == EP.columns({}) == dict.fromkeys(EP.COLUMNS)
    cols = EP.columns({**EP.zero(), "other": 4.0})
    assert cols["energy_other_j"] == 4.0 and sum(cols.values()) == 4.0
