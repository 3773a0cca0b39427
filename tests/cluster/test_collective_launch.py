"""Collective latency counted once (issue 21): a collective a library times by its protocols
(h100: NCCL, whose fixed latency ``baseLat`` is the whole fixed cost of a call) pays no
separate ``collective_launch_us``, nor does an all-to-all its point-to-point table times (a
measured whole call); one timed by the links' plain rule (sends, chips without a library,
``--ideal`` links) still does. An all-to-all on a switch is every pair at once (NCCL's grouped
sends progress independently): without the point-to-point table, one hop of latency, in
``diptych run`` as in the cluster step (tests/cluster/test_p2p_alltoall.py: with it)."""

from __future__ import annotations

import dataclasses

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster import GroupShape, bind, collective
from diptych.sim.run.links import collective_launch_seconds, collective_options
from diptych.sim.run.scheduled import schedule_workload
from diptych.sim.run.summed import block_costs
from diptych.sim.run.variant import IDEAL, Variant, variant_chip
from diptych.workloads.graph import Workload
from diptych.workloads.ops import Collective
from diptych.workloads.program import Block

H100 = load_chip("h100")
PLAIN = dataclasses.replace(H100, collectives=None)     # h100's links without NCCL's table
NO_P2P = dataclasses.replace(H100, collectives=dataclasses.replace(H100.collectives, p2p=None))
LAUNCH = 3.0e-6                                         # h100.toml [overheads]
BUS = 450e9 * 0.82                                      # h100.toml [interconnect]
HOP = 1.0e-6


def _one(kind: str, nbytes: float = 64 * 2**10, n: int = 8) -> Workload:
    op = Collective(name="c", kind=kind, bytes=nbytes, group=n)
    return Workload("decode", (Block.of_ops("x", 1, (op,)),), tokens=1, batch=1)


@pytest.mark.parametrize("kind,launch", [("all_reduce", 0.0), ("all_gather", 0.0),
                                         ("reduce_scatter", 0.0), ("all_to_all", 0.0)])
def test_the_schedule_charges_a_launch_only_outside_the_librarys_fixed_latency(kind, launch):
    r = schedule_workload(_one(kind), H100, simulate=roofline)
    assert r["launch_s"] == pytest.approx(launch, abs=1e-15)
    # the same collective on the plain links (no library table) pays the chip's launch
    assert schedule_workload(_one(kind), PLAIN, simulate=roofline)["launch_s"] == (
        pytest.approx(LAUNCH))


@pytest.mark.parametrize("kind,launch", [("all_reduce", 0.0), ("all_to_all", 0.0)])
def test_the_summed_model_charges_the_same_launches(kind, launch):
    (b,) = block_costs(_one(kind), H100, roofline, fixed_costs=True)
    (bare,) = block_costs(_one(kind), H100, roofline)
    assert b.comm_s - bare.comm_s == pytest.approx(launch, abs=1e-15)


def test_a_library_collective_costs_its_fixed_latency_once():
    # a tiny 8-GPU all-reduce: ring/LL's baseLat + 14 NVLink steps, nothing on top
    op = Collective(name="c", kind="all_reduce", bytes=8.0, group=8)
    sched = schedule_workload(_one("all_reduce", 8.0), H100, simulate=roofline)
    want = 6.6e-6 + 14 * 0.6e-6 + 2 * 7 / 8 * 8.0 / min(BUS * 0.5, 141e9)   # LL, capped
    assert min(collective_options(op, H100).values()) == pytest.approx(want)
    assert sched["seconds"] - sched["step_sync_s"] == pytest.approx(want, rel=1e-9)


def test_dropping_the_library_brings_the_launch_back():
    # --ideal drops launches and the library together; raw links alone keep the launch
    assert collective_launch_seconds("all_reduce", variant_chip(H100, IDEAL)) == 0.0
    raw = variant_chip(H100, Variant(raw_links=True))
    assert collective_launch_seconds("all_reduce", raw) == pytest.approx(LAUNCH)
    # a chip without a library table keeps its own launch (infer-2026: 1 us)
    assert collective_launch_seconds("all_reduce", load_chip("infer-2026")) == (
        pytest.approx(1.0e-6))


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("nbytes", [1024.0, 1 << 20, 1 << 28])
def test_all_to_all_on_a_switch_is_one_hop_in_run_and_in_the_cluster(n, nbytes):
    op = Collective(name="c", kind="all_to_all", bytes=nbytes, group=n)
    want = (n - 1) / n * nbytes / BUS + HOP           # every pair at once: one hop
    got = collective_options(op, NO_P2P)
    assert got == {"direct": pytest.approx(want)}
    dgx = bind(load_cluster("dgx-h100"), NO_P2P)
    c = collective("all_to_all", nbytes, GroupShape(n, n, 1), dgx)
    assert c.algorithm == "direct" and c.seconds == pytest.approx(want, rel=1e-12)
