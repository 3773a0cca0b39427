"""Tensor-parallel communication overlapped with the GEMMs as Transformer Engine runs it
(sim/run/tp_overlap.py, the chip's ``[tp_overlap]`` table): the closed forms against
event-level references, and the cluster step charging exactly them."""

from __future__ import annotations

import dataclasses
import random

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.sim.cluster.layers import layer_ops
from diptych.sim.cluster.timing import overlap_gemms
from diptych.sim.run.tp_overlap import (OVERLAP_SUB_BLOCKS, SubBlockGemms, bulk_held_s,
                                        bulk_s, nccl_sub_block, pipelined_s, requantised_s,
                                        ring_exchange_s, sub_block_overlap)
from diptych.sim.run import Scenario, run_workload
from diptych.sim.run.node import default_precision
from diptych.workloads import load_model


def _ring_events(gemm, comm, ranks):
    """Chunk i (i >= 1) of the input arrives at i x (comm / (ranks - 1)); each chunk starts
    when it has arrived and the previous one is done."""
    step, chunk, end = comm / (ranks - 1), gemm / ranks, 0.0
    for i in range(ranks):
        end = max(end, i * step) + chunk
    return end


def _pipeline_events(gemm, comm, splits):
    """GEMM chunks back to back; each chunk's reduce-scatter starts when the chunk and the
    previous reduce-scatter are done."""
    a, b, sent = gemm / splits, comm / splits, 0.0
    for i in range(splits):
        sent = max(sent, (i + 1) * a) + b
    return sent


def _bulk_steps(gemm, comm, cores, total, n=200_000):
    """The GEMM's work integrated in small steps at (total - cores)/total of its rate while
    the collective runs, at its full rate after."""
    dt, work, t = max(gemm, comm) * 3 / n, 0.0, 0.0
    while work < gemm:
        work += dt * ((total - cores) / total if t < comm else 1.0)
        t += dt
    return max(t, comm)


def test_closed_forms_match_their_event_references():
    rng = random.Random(3)
    for _ in range(300):
        g, c = rng.uniform(1e-6, 1e-3), rng.uniform(0.0, 2e-3)
        ranks, splits = rng.choice([2, 4, 8]), rng.choice([1, 2, 4, 8])
        assert ring_exchange_s(g, c, ranks) == pytest.approx(_ring_events(g, c, ranks),
                                                             rel=1e-12)
        assert pipelined_s(g, c, splits) == pytest.approx(_pipeline_events(g, c, splits),
                                                          rel=1e-12)
    for _ in range(20):
        g, c = rng.uniform(1e-6, 1e-3), rng.uniform(1e-7, 2e-3)
        cores, total = rng.choice([2, 16, 24]), 132
        assert bulk_s(g, c, cores, total) == pytest.approx(_bulk_steps(g, c, cores, total),
                                                           rel=1e-4)


def test_no_communication_costs_nothing():
    g = SubBlockGemms(col_fprop_s=3.0, row_fprop_s=1.0, row_fprop_margin_s=1.3,
                      col_dgrad_s=3.0, col_wgrad_s=3.0, row_dgrad_s=1.0)
    c = sub_block_overlap(g, all_gather_s=0.0, reduce_scatter_s=0.0, ranks=4, splits=4,
                          dgrad_cores=4, wgrad_cores=24, total_cores=132)
    assert (c.fwd_s, c.bwd_s, c.fwd_tax_s, c.bwd_tax_s) == (0.0, 0.0, 0.0, 0.0)


def test_short_collectives_cost_the_cores_they_take():
    # collectives far shorter than the GEMMs: the ring hides its all-gather; the pipelined
    # reduce-scatter costs the margin (the GEMM on fewer cores) plus its last chunk; the
    # bulk ones the cores' share of their time
    g = SubBlockGemms(col_fprop_s=4.0, row_fprop_s=2.0, row_fprop_margin_s=2.4,
                      col_dgrad_s=4.0, col_wgrad_s=4.0, row_dgrad_s=2.0)
    c = sub_block_overlap(g, all_gather_s=0.1, reduce_scatter_s=0.2, ranks=4, splits=4,
                          dgrad_cores=4, wgrad_cores=24, total_cores=132)
    assert c.fwd_tax_s == pytest.approx(0.4)
    assert c.fwd_s == pytest.approx(0.4 + 0.2 / 4)
    assert c.bwd_s == pytest.approx(0.1 * 4 / 132 + 0.2 * 24 / 132) == c.bwd_tax_s


def test_megatron_nccl_path_against_its_event_reference():
    """Userbuffers off (Megatron's sequence parallelism on NCCL): the forward all-gather and
    reduce-scatter and the backward's output-gradient all-gather are exposed whole; the
    saved input's all-gather runs beside the data-gradient GEMM and the input gradient's
    reduce-scatter beside the weight-gradient GEMM, each NCCL kernel holding its cores (the
    GEMM's work integrated step by step); no margin is taken in the forward."""
    rng = random.Random(5)
    for _ in range(20):
        g = SubBlockGemms(col_fprop_s=rng.uniform(1e-4, 1e-3), row_fprop_s=2e-4,
                          row_fprop_margin_s=9.0, col_dgrad_s=rng.uniform(1e-5, 1e-3),
                          col_wgrad_s=rng.uniform(1e-5, 1e-3), row_dgrad_s=2e-4)
        ag, rs, k = rng.uniform(1e-6, 1e-3), rng.uniform(1e-6, 1e-3), rng.choice([16, 24])
        c = nccl_sub_block(g, all_gather_s=ag, reduce_scatter_s=rs, nccl_cores=k,
                           total_cores=132)
        assert c.fwd_s == pytest.approx(ag + rs, rel=1e-12) and c.fwd_tax_s == 0.0
        x = _bulk_steps(g.col_dgrad_s, ag, k, 132) - g.col_dgrad_s
        dx = _bulk_steps(g.col_wgrad_s, rs, k, 132) - g.col_wgrad_s
        assert c.bwd_s == pytest.approx(ag + x + dx, rel=1e-3, abs=1e-9)
    # collectives far shorter than the GEMMs: the backward's bulk pair costs the cores' share
    g = SubBlockGemms(col_fprop_s=4.0, row_fprop_s=2.0, row_fprop_margin_s=2.4,
                      col_dgrad_s=4.0, col_wgrad_s=4.0, row_dgrad_s=2.0)
    c = nccl_sub_block(g, all_gather_s=0.1, reduce_scatter_s=0.2, nccl_cores=24,
                       total_cores=132)
    assert c.bwd_s == pytest.approx(0.1 + 0.3 * 24 / 132)
    assert c.bwd_tax_s == pytest.approx(0.3 * 24 / 132)


def _held_steps(gemm, held, comm, n=200_000):
    """The GEMM's work integrated in small steps at 1/held of it per second while the
    collective runs, at 1/gemm after."""
    dt, work, t = max(held, comm) * 3 / n, 0.0, 0.0
    while work < 1.0:
        work += dt / (held if t < comm else gemm)
        t += dt
    return max(t, comm)


def test_waves_requantise_on_the_cores_left():
    """A GEMM launched for all 132 SMs beside an NCCL kernel holding 24: its tiles take
    ceil(tiles / 108) waves (forum thread 337991: 132 CTAs -> 2 waves, nearly double); a
    GEMM whose tiles fit on the cores left is not slowed; without the engine's mapping, the
    cores' share; bulk_held_s against its event reference, and equal to bulk_s at the
    cores' share."""
    one = dict(tiles=132, waves=1, units="cores", busy_units=132)
    assert requantised_s(1.0, one, 24, 132) == pytest.approx(2.0)
    six = dict(tiles=768, waves=6, units="cores", busy_units=132)
    assert requantised_s(6.0, six, 24, 132) == pytest.approx(8.0)    # ceil(768/108) = 8
    small = dict(tiles=64, waves=1, units="cores", busy_units=64)
    assert requantised_s(1.0, small, 24, 132) == 1.0
    arrays = dict(tiles=528, waves=1, units="arrays", busy_units=528, arrays_per_core=4)
    assert requantised_s(1.0, arrays, 24, 132) == pytest.approx(2.0)  # 432 arrays left
    assert requantised_s(1.0, None, 24, 132) == pytest.approx(132 / 108)
    assert requantised_s(1.0, one, 0, 132) == 1.0
    rng = random.Random(7)
    for _ in range(20):
        g, c = rng.uniform(1e-6, 1e-3), rng.uniform(1e-7, 2e-3)
        h = g * rng.uniform(1.0, 2.5)
        assert bulk_held_s(g, h, c) == pytest.approx(_held_steps(g, h, c), rel=1e-4)
        assert bulk_held_s(g, g * 132 / 108, c) == pytest.approx(bulk_s(g, c, 24, 132),
                                                                 rel=1e-12)
    # the NCCL path charges the re-quantised GEMMs when they are timed
    g = SubBlockGemms(col_fprop_s=4.0, row_fprop_s=2.0, row_fprop_margin_s=2.0,
                      col_dgrad_s=1.0, col_wgrad_s=1.0, row_dgrad_s=2.0,
                      col_dgrad_held_s=2.0, col_wgrad_held_s=1.0)
    c = nccl_sub_block(g, all_gather_s=0.5, reduce_scatter_s=0.5, nccl_cores=24,
                       total_cores=132)
    assert c.bwd_s == pytest.approx(0.5 + 0.25 + 0.0)


def _train(chip, tp=4, execution="schedule", sp=True, **stack):
    return simulate_cluster_step("llama-3-8b", chip, "dgx-h100",
                                 Plan(tp=tp, micro_batch=1, sequence_parallel=sp),
                                 Scenario.of(phase="train", batch=8, seq=2048,
                                             execution=execution, **stack), simulate=roofline)


def test_the_step_without_userbuffers_charges_the_nccl_path():
    """``tp_comm_overlap=False`` (NeMo ``ub_tp_comm_overlap: false``): each sub-block costs
    :func:`nccl_sub_block` of its GEMMs and collectives, with h100's ``nccl_cores``; the
    layers' compute is unchanged, and the exposed time exceeds the userbuffers stack's."""
    h100 = load_chip("h100")
    ub = _train(h100)
    r = _train(h100, tp_comm_overlap=False)
    st = r.layers["layers"]
    lo = layer_ops(load_model("llama-3-8b"), default_precision(h100, "train"), phase="train",
                   tp=4, cp=1, ep=1, micro_batch=1, seq=2048)
    gemms = overlap_gemms(lo["layers"], h100, roofline, 4)
    want_f = want_b = 0.0
    for sub in OVERLAP_SUB_BLOCKS:
        ag = r.comm[f"tp overlapped {sub} all-gather"]["seconds"]
        rs = r.comm[f"tp overlapped {sub} reduce-scatter"]["seconds"]
        cost = nccl_sub_block(gemms[sub], all_gather_s=ag, reduce_scatter_s=rs,
                              nccl_cores=h100.tp_overlap.nccl_cores, total_cores=132)
        want_f, want_b = want_f + cost.fwd_s, want_b + cost.bwd_s
    assert h100.tp_overlap.nccl_cores == 24
    assert st.exposed_fwd["tp"] == pytest.approx(want_f, rel=1e-9, abs=1e-12)
    assert st.exposed_bwd["tp"] == pytest.approx(want_b, rel=1e-9, abs=1e-12)
    us = ub.layers["layers"]
    assert (st.fwd_compute, st.bwd_compute) == (us.fwd_compute, us.bwd_compute)
    assert r.exposed_comm_s["tp"] > ub.exposed_comm_s["tp"]


@pytest.mark.parametrize("execution", ["schedule", "sum"])
def test_the_step_charges_the_overlap_of_each_sub_block(execution):
    """A layer's tensor-parallel cost is the closed form of each sub-block, from the GEMM
    times the layer carries and the collectives' times on the topology; its compute is
    what the chip without the table computes."""
    h100 = load_chip("h100")
    r = _train(h100, execution=execution)
    bare = _train(dataclasses.replace(h100, tp_overlap=None), execution=execution)
    st = r.layers["layers"]
    lo = layer_ops(load_model("llama-3-8b"), default_precision(h100, "train"), phase="train",
                   tp=4, cp=1, ep=1, micro_batch=1, seq=2048)
    gemms = overlap_gemms(lo["layers"], h100, roofline, 4)
    table, want_f, want_b = h100.tp_overlap, 0.0, 0.0
    assert set(gemms) == {"attn", "mlp"}
    for sub, (_, dgrad, wgrad) in OVERLAP_SUB_BLOCKS.items():
        ag = r.comm[f"tp overlapped {sub} all-gather"]["seconds"]
        rs = r.comm[f"tp overlapped {sub} reduce-scatter"]["seconds"]
        cost = sub_block_overlap(gemms[sub], all_gather_s=ag, reduce_scatter_s=rs,
                                 ranks=4, splits=table.splits,
                                 dgrad_cores=table.cores()[dgrad],
                                 wgrad_cores=table.cores()[wgrad], total_cores=132)
        want_f, want_b = want_f + cost.fwd_s, want_b + cost.bwd_s
        assert 0 < cost.fwd_tax_s < cost.fwd_s
    assert st.exposed_fwd["tp"] == pytest.approx(want_f, rel=1e-9, abs=1e-12)
    assert st.exposed_bwd["tp"] == pytest.approx(want_b, rel=1e-9, abs=1e-12)
    bs = bare.layers["layers"]
    assert (st.fwd_compute, st.bwd_compute) == (bs.fwd_compute, bs.bwd_compute)
    # the row-parallel GEMM is slower on the cores the reduce-scatter leaves it
    g = gemms["attn"]
    assert g.row_fprop_margin_s > g.row_fprop_s > 0
    if execution == "schedule":   # the all-reduces leave the chain: less exposed than there
        assert r.exposed_comm_s["tp"] < bare.exposed_comm_s["tp"]
    else:                         # the summed rule hid them wholly behind the layer: more
        assert r.exposed_comm_s["tp"] > bare.exposed_comm_s["tp"]


def test_only_training_overlaps_and_only_when_asked():
    """Prefill and decode keep each all-reduce on the dependency chain (the stack overlaps
    training GEMMs), and ``overlap_tp=False`` turns the stack's overlap off too."""
    h100 = load_chip("h100")
    bare = dataclasses.replace(h100, tp_overlap=None)
    kw = dict(phase="prefill", batch=2, prompt=1024)
    a = simulate_cluster_step("llama-3-8b", h100, "dgx-h100", Plan(tp=4, micro_batch=2),
                              Scenario.of(**kw), simulate=roofline)
    b = simulate_cluster_step("llama-3-8b", bare, "dgx-h100", Plan(tp=4, micro_batch=2),
                              Scenario.of(**kw), simulate=roofline)
    assert a.seconds == b.seconds
    off = Plan(tp=4, micro_batch=1, overlap_tp=False)
    kw = dict(phase="train", batch=8, seq=2048)
    a = simulate_cluster_step("llama-3-8b", h100, "dgx-h100", off, Scenario.of(**kw),
                              simulate=roofline)
    b = simulate_cluster_step("llama-3-8b", bare, "dgx-h100", off, Scenario.of(**kw),
                              simulate=roofline)
    assert a.seconds == b.seconds


@pytest.mark.parametrize("sp", [None, False])
def test_a_one_node_run_charges_the_same_overlap(sp):
    """``run_workload`` applies the table per layer block (tp_overlap.one_node_overlap): on
    one node its summed training step is the cluster step's, and not the bare chip's, with
    sequence parallelism (the default on both sides) and without it."""
    h100 = load_chip("h100")
    kw = dict(phase="train", batch=8, seq=2048, tp=4, micro_batch=1, execution="sum",
              sequence_parallel=sp)
    w = run_workload(h100, "llama-3-8b", Scenario.of(**kw), simulate=roofline)
    bare = run_workload(dataclasses.replace(h100, tp_overlap=None), "llama-3-8b",
                        Scenario.of(**kw), simulate=roofline)
    r = _train(h100, execution="sum", sp=sp is not False)
    assert w.seconds == pytest.approx(r.seconds, rel=1e-9)
    assert w.seconds > bare.seconds        # the summed rule hid the all-reduces wholly
    # and with userbuffers off, Megatron's NCCL path, the same on one node and in the step
    w = run_workload(h100, "llama-3-8b", Scenario.of(**kw, tp_comm_overlap=False),
                     simulate=roofline)
    r = _train(h100, execution="sum", sp=sp is not False, tp_comm_overlap=False)
    assert w.seconds == pytest.approx(r.seconds, rel=1e-9)


def test_a_one_node_fp8_run_gathers_in_fp8_as_the_step_does():
    """Under FP8 delayed scaling with sequence parallelism (the default at TP 4) the one-node
    run's overlapped all-gathers move 1 B per element (tp_overlap.gather_share), as the
    cluster step's do: the two steps agree (with 2 B gathers on one node they differ by
    ~8 %)."""
    h100 = load_chip("h100")
    kw = dict(phase="train", batch=8, seq=2048, execution="sum", recipe="fp8-delayed")
    w = run_workload(h100, "llama-3-8b", Scenario.of(tp=4, micro_batch=1, **kw),
                     simulate=roofline)
    r = simulate_cluster_step("llama-3-8b", h100, "dgx-h100", Plan(tp=4, micro_batch=1),
                              Scenario.of(**kw), simulate=roofline)
    assert w.info["stack"]["sequence_parallel"] is True
    assert w.seconds == pytest.approx(r.seconds, rel=1e-9)
