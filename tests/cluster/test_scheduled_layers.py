"""The cluster step with each layer kind timed as its scheduled program (execution="schedule",
sim/cluster/timing.py): against ``run_workload``'s schedule of the same phase on one node,
and against hand counts of the exposed tensor-parallel all-reduces."""

from __future__ import annotations

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.sim.run import Scenario, run_workload

PREFILL = dict(phase="prefill", batch=4, prompt=2048)


@pytest.mark.parametrize("tp", [1, 8])
def test_prefill_on_one_node_is_run_workloads_schedule(tp):
    # a prefill is a chain of layers (each one's output feeds the next): the one program
    # run_workload schedules is the layer programs back to back, plus the step's sync,
    # which the cluster step does not charge per layer; inside one NVSwitch node the
    # topology's ring all-reduce is the chip's own. Not bit for bit: the schedule streams
    # DRAM traffic at the best rate the engine achieved in the program (a layer's, here;
    # the whole phase's, in run_workload) and the logits' small all-gather takes the
    # topology's latency model: < 1 us apart. With every norm, RoPE, SwiGLU and residual add a
    # kernel of its own (h100's stacks fuse none into GEMMs), TP8's layers back to back settle
    # to a period 1.25 us (0.1 %) longer than one layer scheduled alone: a greedy list
    # schedule is not monotone in the work it is given (Graham 1969)
    r = simulate_cluster_step("llama-3-8b", "h100", "dgx-h100", Plan(tp=tp, micro_batch=4),
                              Scenario.of(**PREFILL), simulate=roofline)
    w = run_workload("h100", "llama-3-8b", Scenario.of(tp=tp, execution="schedule", **PREFILL),
                     simulate=roofline)
    sync = load_chip("h100").fixed_costs.step_sync_us * 1e-6
    assert r.info["execution"] == "schedule"
    assert r.seconds + sync == pytest.approx(w.seconds, rel=1e-5 if tp == 1 else 2e-3)


def test_prefill_exposes_every_tensor_parallel_all_reduce():
    # forward only, nothing independent of an all-reduce runs beside it: every one is on
    # the chain (32 layers x attention and MLP, the vocab-parallel embedding's all-reduce,
    # the logits' all-gather) with its launch, whatever overlap_tp says (the schedule
    # decides). h100's all-reduces and all-gathers are NCCL's: their launch is in NCCL's
    # fixed latency (baseLat), so the schedule charges none of its own
    launch = 0.0
    for overlap in (False, True):
        r = simulate_cluster_step("llama-3-8b", "h100", "dgx-h100",
                                  Plan(tp=8, micro_batch=4, overlap_tp=overlap),
                                  Scenario.of(**PREFILL), simulate=roofline)
        c = {k: v["seconds"] for k, v in r.comm.items()}
        want = (32 * (c["tp attn_all_reduce"] + c["tp mlp_all_reduce"] + 2 * launch)
                + c["tp embed_all_reduce"] + c["tp logits_all_gather"] + 2 * launch)
        assert r.exposed_comm_s["tp"] == pytest.approx(want, rel=1e-7)


def test_summed_overlap_rule_hides_what_the_schedule_exposes():
    # training: the summed composition hides each all-reduce behind its layer's compute
    # (overlap_tp); the schedule leaves those on the dependency chain exposed (each with its
    # launch, none of its own for NCCL's kernels: two all-reduces a layer, forward and backward)
    kw = dict(batch=8, seq=2048)
    plan = Plan(tp=8, micro_batch=2)
    summed = simulate_cluster_step("llama-3-8b", "h100", "dgx-h100", plan,
                                   Scenario.of(phase="train", execution="sum", **kw),
                                   simulate=roofline)
    sched = simulate_cluster_step("llama-3-8b", "h100", "dgx-h100", plan,
                                  Scenario.of(phase="train", **kw), simulate=roofline)
    assert summed.exposed_comm_s["tp"] < sched.exposed_comm_s["tp"]
    st = sched.layers["layers"]
    launches = 0.0
    assert 0 < st.exposed_fwd["tp"] <= (st.comm_fwd["tp"] + launches) * (1 + 1e-6)
    assert 0 <= st.exposed_bwd["tp"] <= (st.comm_bwd["tp"] + launches) * (1 + 1e-6)
    assert sched.flops == summed.flops and sched.hardware_flops == pytest.approx(
        summed.hardware_flops, rel=1e-12)


@pytest.mark.parametrize("tp,sp", [(1, None), (8, None), (8, False)])
def test_training_on_one_node_is_close_to_run_workloads_schedule(tp, sp):
    # each layer kind's forward+backward program is scheduled alone, so what the whole
    # step's program overlaps across layers (an all-reduce beside the next layer's work) is
    # not seen: close to run_workload's schedule, not equal
    kw = dict(batch=8, seq=2048)
    # (sequence parallelism: on both sides by default at TP > 1, and off on both)
    r = simulate_cluster_step("llama-3-8b", "h100", "dgx-h100",
                              Plan(tp=tp, micro_batch=2, sequence_parallel=sp is not False),
                              Scenario.of(phase="train", **kw), simulate=roofline)
    w = run_workload("h100", "llama-3-8b",
                     Scenario.of(phase="train", tp=tp, micro_batch=2, execution="schedule",
                                 sequence_parallel=sp, **kw),
                     simulate=roofline)
    assert r.seconds == pytest.approx(w.seconds, rel=0.05)


def test_execution_is_checked():
    with pytest.raises(ValueError, match="execution must be one of sum, schedule, not 'fast'"):
        simulate_cluster_step("llama-3-8b", "h100", "dgx-h100", Plan(tp=8, micro_batch=4),
                              Scenario.of(execution="fast", **PREFILL), simulate=roofline)


@pytest.mark.parametrize("tp", [1, 4])
def test_a_layers_backward_starts_after_its_forward(tp):
    # the cluster step times a layer's backward as its forward-and-backward program less the
    # forward alone: the output's gradient exists only after the output, so no backward op
    # may start before the forward's last op ends (the residual add's backward reads no
    # saved input: an ordering-only read of the add's output keeps it there)
    import dataclasses

    from diptych.sim.cluster.layers import forward_workload
    from diptych.sim.run.scheduled import schedule_workload
    from diptych.workloads import load_model
    from diptych.workloads.precision import Precision
    from diptych.workloads.train import _backward_block

    p = Precision()
    w = forward_workload(load_model("llama-3-8b"), p, phase="train", tp=tp, cp=1, ep=1,
                         micro_batch=1, seq=1024, sequence_parallel=tp > 1)
    b = dataclasses.replace(next(x for x in w.blocks if x.name == "layers"), repeat=1)
    r = schedule_workload(dataclasses.replace(w, blocks=(b, _backward_block(b, p))),
                          load_chip("h100"), simulate=roofline,
                          collective_time=lambda op: 1e-6)
    fwd = [x for x in r["layers"] if x["stage"] == "forward"]
    bwd = [x for x in r["layers"] if x["stage"] == "backward"]
    assert bwd and min(x["start_s"] for x in bwd) >= max(x["end_s"] for x in fwd) - 1e-12
