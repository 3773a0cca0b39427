"""Cluster results carry energy (sim/cluster/energy.py): against ``run_workload`` where both
apply, hand counts of the link bytes, and the derived tokens/J, power and cost."""

from __future__ import annotations

import pytest
from roofline_double import roofline
from test_step import step   # the cluster step on the roofline double

from diptych.arch import load_chip
from diptych.arch.cost import cost_metrics
from diptych.sim.cluster import Plan
from diptych.sim.cluster.energy import PARTS, sent_bytes
from diptych.sim.run import Scenario, run_workload
from diptych.workloads import load_model
from diptych.workloads.params import params_per_chip
from diptych.sim.run.node import default_precision




@pytest.mark.parametrize("tp,sp", [(1, None), (8, None), (8, False)])
def test_one_node_energy_is_run_workloads(tp, sp):
    """Inside one node the step is run_workload's summed model (tests/cluster/test_step.py:
    the cluster step composes per-layer summed times, docs/cluster.md): so is its energy, once
    the static power of the exposed communication (which run_workload does not charge) is
    set aside."""
    # (sequence parallelism: on both sides by default at TP > 1, and off on both)
    r = step("llama-3-8b", Plan(tp=tp, micro_batch=2, sequence_parallel=sp is not False),
             batch=8, execution="sum")
    w = run_workload(load_chip("h100"), "llama-3-8b",
                     Scenario.of(phase="train", batch=8, seq=2048, tp=tp, micro_batch=2,
                                 power_limit=False, execution="sum", sequence_parallel=sp),
                     simulate=roofline)
    assert set(r.energy_breakdown) == set(PARTS)
    assert r.energy_j == pytest.approx(sum(r.energy_breakdown.values()), rel=1e-12)
    charged = r.energy_j - r.energy_breakdown["idle_static"]
    assert charged == pytest.approx(w.energy_j, rel=1e-6)
    exposed = sum(r.exposed_comm_s.values())
    assert r.energy_breakdown["idle_static"] == pytest.approx(
        tp * load_chip("h100").energy.static_w * exposed, rel=1e-6, abs=1e-9)


def test_data_parallel_link_energy_by_hand():
    """dp = 2, ZeRO-0: each rank all-reduces every gradient once per step, sending
    2(n−1)/n = 1 × the gradient bytes; nothing else crosses a link."""
    m = load_model("llama-3-8b")
    chip = load_chip("h100")
    r = step(m, Plan(dp=2, micro_batch=2), batch=8)
    p = default_precision(chip, "train")
    grads = params_per_chip(m, 1) * p.g_bytes
    want = 2 * grads * 8 * chip.energy.pj_per_link_bit * 1e-12
    assert r.energy_breakdown["link"] == pytest.approx(want, rel=1e-6)


def test_sent_bytes_are_the_ring_volumes():
    assert sent_bytes("all_reduce", 100.0, 4) == pytest.approx(150.0)
    assert sent_bytes("reduce_scatter", 100.0, 4) == pytest.approx(75.0)
    assert sent_bytes("all_to_all", 100.0, 4) == pytest.approx(75.0)
    assert sent_bytes("send", 100.0, 2) == 100.0
    assert sent_bytes("all_reduce", 100.0, 1) == 0.0


def test_bubbles_leak_static_power_and_data_parallelism_scales_energy():
    one = step("llama-3-8b", Plan(pp=4, micro_batch=1), batch=4)
    more = step("llama-3-8b", Plan(pp=4, micro_batch=1), batch=32)
    # 4 micro-batches over 4 stages: a large bubble; 32 hide most of it
    assert one.bubble_fraction > more.bubble_fraction
    assert (one.energy_breakdown["idle_static"] / one.energy_j
            > more.energy_breakdown["idle_static"] / more.energy_j)
    a = step("llama-3-8b", Plan(tp=2, micro_batch=2), batch=8)
    b = step("llama-3-8b", Plan(tp=2, dp=2, micro_batch=2), batch=16)
    # twice the replicas, twice the tokens: the same compute energy per token
    assert b.energy_breakdown["compute"] == pytest.approx(2 * a.energy_breakdown["compute"],
                                                          rel=1e-9)
    assert b.energy_breakdown["link"] > 2 * a.energy_breakdown["link"]   # + the dp all-reduce


@pytest.mark.parametrize("phase", ["train", "prefill", "decode"])
def test_tokens_per_joule_power_and_cost_follow(phase):
    chip = load_chip("h100")
    kw = dict(seq=2048) if phase == "train" else dict(prompt=1024, gen=4)
    r = step("llama-3-8b", Plan(tp=2, pp=2, micro_batch=1), batch=8, phase=phase, **kw)
    d = r.to_dict()
    tokens = r.batch * (r.seq if phase != "decode" else 1)
    assert d["energy_j"] > 0 and d["energy_j_per_token"] == pytest.approx(r.energy_j / tokens)
    assert d["tokens_per_j"] == pytest.approx(tokens / r.energy_j)
    assert d["power_w"] == pytest.approx(r.energy_j / r.chips / r.seconds)
    assert d["exceeds_tdp"] == (d["power_w"] > chip.tdp_w)
    want = cost_metrics(chip, {"tokens_per_s": r.tokens_per_s, "chips": r.chips,
                               "energy_j_per_token": d["energy_j_per_token"]})
    assert d["usd_per_mtok"] == pytest.approx(want["usd_per_mtok"])
    assert d["cost_usd"] == pytest.approx(want["cost_usd"])


def test_a_step_above_the_tdp_is_flagged():
    import dataclasses
    chip = dataclasses.replace(load_chip("h100"), tdp_w=50.0)
    r = step("llama-3-8b", Plan(tp=2, micro_batch=2), batch=8, chip=chip)
    assert r.to_dict()["exceeds_tdp"] is True
    assert any("exceeds its 50 W TDP" in w for w in r.warnings)
