"""One attention launch per layer in scheduled mixed steps: the sequence groups' cores of a
layer are one launch group (workloads/serving_step.py), which the program scheduler charges once per
layer (sim/run/scheduled.py), and the grid oracle charges the same."""

from __future__ import annotations

from dataclasses import replace

import pytest
from roofline_double import roofline

from diptych.arch import Overheads
from diptych.workloads.ops import Collective, VectorOp
from diptych.sim.run import Scenario
from diptych.sim.serving.step_time import make_replica
from diptych.sim.serving.grid_timer import GridStepTimer
from diptych.sim.run.scheduled import schedule_workload
from diptych.workloads.ops import LAUNCH_TAG, launch_group
from diptych.workloads.graph import Workload
from diptych.workloads.program import Block
from diptych.workloads.serving_step import CORE_OPS, Step, base_name, lower_step

#: steps with G = 1..4 sequence groups (a decode batch, then distinct prompt chunks): every
#: group's frame is the same set of ops, whatever the token count
STEPS = [Step(32, 32 * 1000), Step(32, 32 * 1000, ((512, 0),)),
         Step(32, 32 * 1000, ((512, 0), (256, 512))),
         Step(32, 32 * 1000, ((512, 0), (256, 512), (128, 1024)))]


def _strip(w: Workload) -> Workload:
    """``w`` with the launch groups removed: every node pays its own launch (the charge
    before launch groups)."""
    return replace(w, blocks=tuple(b.with_ops(tuple(
        replace(op, tags=tuple(t for t in op.tags if not t.startswith(LAUNCH_TAG)))
        if launch_group(op) else op for op in b.ops), b.access or None) for b in w.blocks))


def _launches_counted(w: Workload, op_s: float, coll_s) -> float:
    """Closed form of an unfused schedule's launches: every op of every layer one
    ``op_launch_us`` (a collective ``coll_s(kind)``: ``collective_launch_us``, none where its
    library's fixed latency holds it; the precision ops of sim/run/precision_ops.py none),
    except one per launch group per layer."""
    total = 0.0
    for b in w.blocks:
        groups = {launch_group(op) for op in b.ops} - {None}
        per = sum(coll_s(op.kind) if isinstance(op, Collective) else
                  0.0 if "precision" in op.tags else op_s for op in b.ops if not launch_group(op))
        total += b.repeat * (per + len(groups) * op_s)
    return total


@pytest.mark.parametrize("attention", ["fused", "unfused"])
def test_a_step_of_g_groups_pays_g_minus_one_fewer_launches_per_layer(attention):
    """The closed form from the chip's op_launch_us: a step of G sequence groups pays
    (G − 1) · layers · (core ops per group) fewer launches than with a launch per node, the
    same as a one-group step (whose frame has the same ops); with fused attention the saving
    comes off the step's time (on the real engine exactly, docs/serving.md "Fixed costs")."""
    r = make_replica("h100", "llama-3-8b",
                     Scenario.of(phase="decode", execution="schedule", attention=attention))
    op_s = r.chip.fixed_costs.op_launch_us * 1e-6
    def coll_s(kind):       # h100 runs NCCL: its ring-family kernels' baseLat holds the launch
        nccl = kind in ("all_reduce", "reduce_scatter", "all_gather")
        return 0.0 if nccl else r.chip.fixed_costs.collective_launch_us * 1e-6
    layers = r.model.layers
    base = None
    for g, st in enumerate(STEPS, start=1):
        w = lower_step(r.model, st, precision=r.precision, tp=r.tp, attention=attention)
        cores = len([op for op in w.blocks[1].ops if base_name(op.name) in CORE_OPS]) // g
        assert cores == (1 if attention == "fused" else 3)
        new = schedule_workload(w, r.chip, simulate=roofline, fusion=False)
        old = schedule_workload(_strip(w), r.chip, simulate=roofline, fusion=False)
        saved = (g - 1) * layers * cores * op_s
        assert new["launch_s"] == pytest.approx(old["launch_s"] - saved, rel=1e-12)
        assert new["launch_s"] == pytest.approx(_launches_counted(w, op_s, coll_s), rel=1e-12)
        assert old["launch_s"] == pytest.approx(
            _launches_counted(_strip(w), op_s, coll_s), rel=1e-12)
        if base is None:
            base = new["launch_s"]
        assert new["launch_s"] == pytest.approx(base, rel=1e-12)
        if attention == "fused":
            # the saving comes off the step: the cores run one after another on the array
            # (unfused, one group's softmax overlaps another's GEMMs: the list schedule
            # changes order and moves by more or less than the launches)
            assert 0.9 * saved <= old["seconds"] - new["seconds"] <= saved * (1 + 1e-9)
        # fused programs too: the saving is the same count
        fused = schedule_workload(w, r.chip, simulate=roofline)
        fused_old = schedule_workload(_strip(w), r.chip, simulate=roofline)
        assert fused["launch_s"] == pytest.approx(fused_old["launch_s"] - saved, rel=1e-12)


def test_grid_oracle_charges_one_launch_per_layer_for_all_cores():
    """The grid oracle's fixed costs (with − without the chip's overheads) in a step of G
    groups equal the schedule's own count, and are the same for every G: (G − 1) · layers
    launches fewer than a launch per core."""
    r = make_replica("h100", "llama-3-8b", Scenario.of(phase="decode", execution="schedule"))
    free = replace(r, chip=replace(r.chip, overheads=Overheads()))
    op_s = r.chip.fixed_costs.op_launch_us * 1e-6
    charged = []
    for st in STEPS:
        c = GridStepTimer(r, roofline).cost(st).seconds - GridStepTimer(free, roofline).cost(
            st).seconds
        w = lower_step(r.model, st, precision=r.precision, tp=r.tp)
        own = schedule_workload(w, r.chip, simulate=roofline)["fixed_costs_s"]
        assert c == pytest.approx(own, rel=1e-6)
        charged.append(c)
    # a launch per core would add (G − 1) · layers · op_launch_us to the one-group charge
    assert charged[-1] - charged[0] < 0.5 * (len(STEPS) - 1) * r.model.layers * op_s
    for c in charged:
        assert c == pytest.approx(charged[0], rel=1e-6)


def test_a_one_group_step_has_no_launch_groups():
    """A step of one sequence group is `decode()`'s or `prefill()`'s workload exactly (tests
    in test_serving_step.py): its cores carry no launch tag."""
    r = make_replica("h100", "llama-3-8b", Scenario.of(phase="decode", execution="schedule"))
    for st in (Step(8, 8 * 100), Step(prefill=((300, 0),) * 2)):
        w = lower_step(r.model, st, precision=r.precision, tp=r.tp)
        assert all(launch_group(op) is None for b in w.blocks for op in b.ops)


def test_launch_group_pays_once_per_block_copy_on_its_first_node():
    """The hook alone, on a hand-built block: three independent vector ops of one group and
    one of its own, repeated 5 times: 2 launches per copy, on the group's first node."""
    r = make_replica("h100", "llama-3-8b", Scenario.of(phase="decode", execution="schedule"))
    op_s = r.chip.fixed_costs.op_launch_us * 1e-6

    def v(name, group=None):
        return VectorOp(name=name, kind="add", elements=1 << 16, ops_per_element=1.0,
                        read_bytes=2.0 * (1 << 17), write_bytes=float(1 << 17),
                        tags=(f"{LAUNCH_TAG}{group}",) if group else ())

    blk = Block.of_ops("layer", 5, (v("a", "g"), v("b", "g"), v("c"), v("d", "g")))
    w = Workload("decode", (blk,), tokens=1, batch=1)
    t = schedule_workload(w, r.chip, simulate=roofline, fusion=False)
    assert t["launch_s"] == pytest.approx(5 * 2 * op_s, rel=1e-12)
    by = {rec["op"]: rec["launch_s"] for rec in t["layers"]}
    assert by == {"a": op_s, "b": 0.0, "c": op_s, "d": 0.0}
