"""A run's energy by component (``energy_breakdown_j``, issue 23 item 5) with the engine:
the parts sum to ``energy_j`` on several presets, phases and executions, with fused attention,
links and a power limit that binds; a summed run's components against closed forms from the
chip's coefficients; a scheduled run against the summed one where they must agree."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

import pytest

from diptych.arch import load_chip
from diptych.arch.power import core_energy_scale
from diptych.sim import energy_parts as EP
from diptych.sim.run import Scenario, run_workload
from diptych.sim.run.links import ring_bytes_and_steps
from diptych.workloads import load_model, model_from_hf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_models import TINY  # noqa: E402

MODEL = model_from_hf(TINY, name="tiny-llama")
SIZES = {"prefill": dict(batch=2, prompt=256), "decode": dict(batch=4, prompt=256, gen=4),
         "train": dict(batch=2, seq=256)}


def _run(chip, phase="prefill", model=MODEL, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return run_workload(chip, model, Scenario.of(phase=phase, **{**SIZES[phase], **kw}))


def _sums_to_the_total(r):
    parts = r.energy_breakdown_j
    assert list(parts) == list(EP.COMPONENTS)
    assert all(v >= 0 for v in parts.values()), parts
    assert EP.total(parts) == pytest.approx(r.energy_j, rel=1e-9)


@pytest.mark.parametrize("chip,phase,kw", [
    ("h100", "prefill", dict(execution="sum")),
    ("h100", "decode", dict(execution="schedule")),
    ("infer-2026", "prefill", dict(execution="schedule")),            # NoC and D2D
    ("infer-2026", "decode", dict(execution="sum", attention="unfused")),
    ("train-2026", "train", dict(execution="schedule", tp=2)),       # links, fused backward
    ("tpu-v4", "train", dict(execution="sum", tp=2, dp=2)),
    ("groq-lpu", "decode", dict(execution="schedule")),              # all-SRAM: no DRAM
])
def test_the_parts_sum_to_the_total_and_so_do_every_record_s(chip, phase, kw):
    r = _run(chip, phase, **kw)
    _sums_to_the_total(r)
    for rec in r.layers:
        assert EP.total(rec["energy_breakdown_j"]) == pytest.approx(rec["energy_j"], rel=1e-9)
    # without the power limit's re-costing the run's parts are its records' × repeats × chips
    plain = _run(chip, phase, power_limit=False, **kw)
    want = EP.summed((rec["energy_breakdown_j"], rec["repeat"] * plain.chips)
                     for rec in plain.layers)
    for k in EP.COMPONENTS:
        assert plain.energy_breakdown_j[k] == pytest.approx(want[k], rel=1e-9, abs=1e-18)
    if chip == "infer-2026" and kw["execution"] == "sum":    # (the schedule keeps it on chip)
        assert plain.energy_breakdown_j["noc"] > 0 and plain.energy_breakdown_j["d2d"] > 0
    if chip == "groq-lpu":
        assert plain.energy_breakdown_j["dram"] == 0.0
    if kw.get("tp", 1) > 1:
        assert plain.energy_breakdown_j["link"] > 0


def test_a_summed_run_by_hand():
    """Summed, unfused, tp 2, no power limit: MAC = Σ GEMM MACs × pJ per MAC of their dtype;
    DRAM = the run's DRAM bytes × 8 × pJ per bit; link = each collective's ring bytes × 8 ×
    pJ per link bit; static = static W × the ops' own time (collectives charge none); all
    over both chips."""
    chip = load_chip("h100")
    e = chip.energy
    r = _run(chip, "prefill", execution="sum", attention="unfused", tp=2, power_limit=False)
    p = r.energy_breakdown_j
    n = r.chips
    gemms = [x for x in r.layers if x["kind"] == "gemm"]
    mac = sum(x["flops"] / 2 * e.pj_per_mac[x["dtype"]] * 1e-12 * x["repeat"] for x in gemms)
    colls = [x for x in r.layers if x["bound"] == "communication"]
    link = sum(ring_bytes_and_steps(x["kind"], x["link_bytes"], 2)[0] * 8 * e.pj_per_link_bit
               * 1e-12 * x["repeat"] for x in colls)
    busy = sum(x["seconds"] * x["repeat"] for x in r.layers if x["bound"] != "communication")
    assert colls and link > 0
    assert p["mac"] == pytest.approx(n * mac, rel=1e-9)
    assert p["dram"] == pytest.approx(r.dram_bytes * 8 * e.pj_per_dram_bit * 1e-12, rel=1e-9)
    assert p["link"] == pytest.approx(n * link, rel=1e-9)
    assert p["static"] == pytest.approx(n * e.static_w * busy, rel=1e-9)


def test_fused_attention_charges_its_own_traffic_and_time():
    """A fused attention record: DRAM energy of the fused kernel's own bytes, static power
    over its own time (not its parts')."""
    chip = load_chip("h100")
    e = chip.energy
    r = _run(chip, "prefill", execution="sum", power_limit=False)
    att = [x for x in r.layers if x["kind"] == "attention"]
    assert att
    for x in att:
        p = x["energy_breakdown_j"]
        assert p["dram"] == pytest.approx(x["dram_bytes"] * 8 * e.pj_per_dram_bit * 1e-12,
                                          rel=1e-9)
        assert p["static"] == pytest.approx(e.static_w * x["seconds"], rel=1e-9)
        assert p["mac"] > 0 and p["vector"] > 0


def test_the_schedule_and_the_sum_agree_where_they_must():
    """The same work: MAC, vector and link energy agree; the schedule keeps operands on chip
    (less DRAM energy) and overlaps work (other static energy). Its DRAM energy is its DRAM
    bytes' without fusion; with fusion at most that (an epilogue's extra DRAM inputs were
    never charged energy, a caveat of the total: docs/workloads.md)."""
    chip = load_chip("train-2026")          # fuses norms and elementwise ops into GEMMs
    kw = dict(tp=2, power_limit=False)
    s = _run(chip, "train", execution="sum", **kw).energy_breakdown_j
    plain = _run(chip, "train", execution="schedule", fusion=False, **kw)
    fused = _run(chip, "train", execution="schedule", **kw)
    assert any("fused" in x for x in fused.layers)
    assert not any("fused" in x for x in plain.layers)
    for r in (plain, fused):
        _sums_to_the_total(r)
        p = r.energy_breakdown_j
        for k in ("mac", "vector", "link"):
            assert p[k] == pytest.approx(s[k], rel=1e-9), k
        assert p["dram"] <= s["dram"] * (1 + 1e-9)



def test_a_fused_node_s_epilogue_inputs_are_charged_their_dram_energy():
    """Training llama-3-8b on tpu-v4: some fused nodes read their epilogue's inputs (a
    residual's gradient) from DRAM beside the GEMM; the run's DRAM energy is still exactly
    its DRAM bytes' (it fell short by those inputs before they were charged)."""
    chip = load_chip("tpu-v4")
    r = _run(chip, "train", model=load_model("llama-3-8b"), batch=1, seq=512,
             execution="schedule", fusion=True, power_limit=False)
    bits = chip.energy.pj_per_dram_bit * 8e-12
    assert r.energy_breakdown_j["dram"] == pytest.approx(r.dram_bytes * bits, rel=1e-9)
    _sums_to_the_total(r)


@pytest.mark.parametrize("fusion", [False, True])
def test_a_scheduled_run_s_dram_energy_is_its_dram_bytes(fusion):
    """With operands in DRAM: exactly its DRAM bytes' energy, with or without fusion (a fused
    node's epilogue inputs, a residual or a bias read from DRAM, are charged as the engine
    charges a GEMM's bytes)."""
    chip = load_chip("infer-2026")
    r = _run(chip, "prefill", model=load_model("llama-3-8b"), batch=1, prompt=512,
             execution="schedule", fusion=fusion, power_limit=False)
    assert any("fused" in x for x in r.layers) == fusion
    bits = chip.energy.pj_per_dram_bit * 8e-12
    assert r.energy_breakdown_j["dram"] > 0
    assert r.energy_breakdown_j["dram"] == pytest.approx(r.dram_bytes * bits, rel=1e-9)


@pytest.mark.parametrize("execution", ["schedule", "sum"])
def test_a_binding_power_limit_scales_the_core_components_only(execution):
    """infer-2026 with its TDP at 70 % of a prefill's power: the run is reported at a lower
    clock. Against the same run at that clock without the limit: MAC, vector, SRAM and NoC
    energy scale by (V(f')/V(f))², DRAM, D2D and links do not, static loses what gating
    saves; the parts still sum to the total."""
    model = load_model("llama-3-8b")
    c = load_chip("infer-2026")
    hot = _run(c, "prefill", model=model, execution=execution)
    tdp = 0.7 * hot.energy_j / hot.seconds / hot.chips
    chip = dataclasses.replace(c, tdp_w=tdp)
    low = _run(chip, "prefill", model=model, execution=execution)
    lim = low.info["power_limit"]
    assert lim["clock_ghz"] < c.clock_ghz
    _sums_to_the_total(low)
    at = _run(dataclasses.replace(chip, clock_ghz=lim["clock_ghz"], power=None), "prefill",
              model=model, execution=execution, power_limit=False)
    v2 = core_energy_scale(chip, lim["clock_ghz"])
    assert v2 < 0.9
    a, b = low.energy_breakdown_j, at.energy_breakdown_j
    for k in EP.CORE:
        assert a[k] == pytest.approx(b[k] * v2, rel=1e-9), k
    for k in ("dram", "d2d", "link"):
        assert a[k] == pytest.approx(b[k], rel=1e-12, abs=1e-18), k
    assert a["static"] == pytest.approx(b["static"] - lim["gated_static_saved_j"], rel=1e-9)
