"""One in-order stream (``in_order_units``) and one hardware queue (``queued_units``):
closed forms of what they serialise and what they leave overlapping, the fast scheduler
against its golden twin, and the steady-state jump against the materialised run with them
on."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.sim.program import Demand, Phase, bounds_ps, schedule
from diptych.sim.program.schedule_ref import schedule_ref
from diptych.workloads.program import Block, Node, Program, Tensor
from progtest_helpers import random_program, random_program_with_imports

US = 10**6          # picoseconds per microsecond
STREAM = ("array", "vector")
QUEUE = ("array", "vector", "link", "dma")


def prog(*nodes):
    names = {t for n in nodes for t in n.reads + n.writes}
    return Program("p", [Block("b", tuple(Tensor(t, 10) for t in sorted(names)), tuple(nodes))])


def ph(us, **use):
    return Phase(us * 1e-6, use)


def both(p, **kw) -> int:
    """The makespan (ps), the same from the fast scheduler and its golden twin."""
    fast = schedule(p, **kw).makespan_ps
    assert fast == schedule_ref(p, **kw)["makespan_ps"]
    return fast


def test_an_independent_vector_op_hides_or_adds_its_time():
    # a GEMM (3 us) and a vector op (2 us) with no data between them: beside each other in
    # data-flow order, one after the other on one stream (3 + 2)
    a = Node("a", writes=("x",), demand=Demand((ph(3, array=1.0, dram=0.2),)))
    v = Node("v", writes=("y",), unit="vector", demand=Demand((ph(2, vector=1.0, dram=0.3),)))
    assert both(prog(a, v)) == 3 * US
    assert both(prog(a, v), in_order_units=STREAM) == 5 * US


def test_a_later_kernel_waits_behind_one_waiting_for_a_collective():
    # c: an all-reduce (4 us, link) -> g1 (1 us) reads its result; g2 (2 us) is independent
    # but issued after g1. Data-flow: g2 runs during c (4 + 1). One stream: g2 waits behind
    # g1, which waits for c (4 + 1 + 2); the collective itself still overlaps nothing it
    # could: no kernel was issued before g1.
    c = Node("c", writes=("r",), unit="link", demand=Demand((ph(4, link=1.0),)))
    g1 = Node("g1", reads=("r",), writes=("y",), demand=Demand((ph(1, array=1.0),)))
    g2 = Node("g2", writes=("z",), demand=Demand((ph(2, array=1.0),)))
    assert both(prog(c, g1, g2)) == 5 * US
    assert both(prog(c, g1, g2), in_order_units=STREAM) == 7 * US


def test_collectives_and_prefetches_keep_overlapping():
    # a collective independent of a GEMM overlaps it on one stream too (max(3, 2))
    a = Node("a", writes=("x",), demand=Demand((ph(3, array=1.0),)))
    c = Node("c", writes=("r",), unit="link", demand=Demand((ph(2, link=1.0),)))
    assert both(prog(a, c), in_order_units=STREAM) == 3 * US
    # a weight prefetch (early, DRAM) still streams during the previous kernel: b's 1 us
    # prefetch hides in a's 2 us, then b's 1 us main phase (2 + 1)
    a = Node("a", writes=("x",), demand=Demand((ph(2, array=1.0),)))
    pre = Demand((Phase(1e-6, {"dram": 1.0}, early=True), ph(1, array=1.0)), hold_bytes=100)
    b = Node("b", reads=("x",), writes=("y",), demand=pre)
    assert both(prog(a, b), space_bytes=100, in_order_units=STREAM) == 3 * US


def test_a_collective_waiting_for_the_links_holds_back_the_kernels_queued_after_it():
    # c1 (4 us) and c2 (2 us) are independent collectives, one after the other on the links;
    # g (1 us) and g2 (3 us) are independent kernels issued after c2. On one stream alone g
    # and g2 run during c1 (the step ends with c2 at 6 us); on one hardware queue c2 cannot
    # be dispatched before c1 ends, and the kernels queued behind it wait: 4 + 1 + 3 us
    c1 = Node("c1", writes=("r1",), unit="link", demand=Demand((ph(4, link=1.0),)))
    c2 = Node("c2", writes=("r2",), unit="link", demand=Demand((ph(2, link=1.0),)))
    g = Node("g", writes=("y",), demand=Demand((ph(1, array=1.0),)))
    g2 = Node("g2", writes=("z",), demand=Demand((ph(3, array=1.0),)))
    p = prog(c1, c2, g, g2)
    assert both(p, in_order_units=STREAM) == 6 * US
    assert both(p, in_order_units=STREAM, queued_units=QUEUE) == 8 * US
    r = schedule(p, in_order_units=STREAM, queued_units=QUEUE)
    assert r.nodes[("b", 0, "g")] == (4e-6, 5e-6)


def test_a_collective_issued_before_a_kernel_still_overlaps_it():
    # what Megatron-Core sets CUDA_DEVICE_MAX_CONNECTIONS=1 for: a reduce-scatter of a's
    # output (2 us) issued before an independent weight-gradient GEMM g (3 us) is dispatched
    # first and runs beside it: 1 + max(2, 3)
    a = Node("a", writes=("x",), demand=Demand((ph(1, array=1.0),)))
    c = Node("c", reads=("x",), writes=("r",), unit="link", demand=Demand((ph(2, link=1.0),)))
    g = Node("g", writes=("w",), demand=Demand((ph(3, array=1.0),)))
    assert both(prog(a, c, g), in_order_units=STREAM, queued_units=QUEUE) == 4 * US


def test_in_order_units_are_checked():
    a = Node("a", writes=("x",), demand=Demand((ph(1, array=1.0),)))
    for bad in ("array", ("array", "gpu")):
        with pytest.raises(ValueError, match="in_order_units must be a tuple of node units"):
            schedule(prog(a), in_order_units=bad)
        with pytest.raises(ValueError, match="in_order_units must be a tuple of node units"):
            schedule_ref(prog(a), in_order_units=bad)
        with pytest.raises(ValueError, match="queued_units must be a tuple of node units"):
            schedule(prog(a), queued_units=bad)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from([0, 1000, 3000]), st.booleans(),
       st.sampled_from([(STREAM, ()), (("array",), ()), (("vector", "link"), ()),
                        (STREAM, QUEUE), ((), ("array", "link")), (("array",), ("vector",))]))
def test_fast_equals_golden_in_order(seed, space, imports, units):
    make = random_program_with_imports if imports else random_program
    p = make(seed, space=space, max_repeat=5)
    kw = dict(in_order_units=units[0], queued_units=units[1])
    fast = schedule(p, space_bytes=space, steady_state_min_repeats=4, **kw)
    ref = schedule_ref(p, space_bytes=space, **kw)
    assert fast.makespan_ps == ref["makespan_ps"]
    for blk, rep, name, spans in ref["nodes"]:
        got = fast.nodes.get((blk, rep, name))
        if got is not None:
            assert got == (spans[0][0] / 1e12, spans[-1][1] / 1e12)
    # never faster than data-flow order's bounds, never slower than all phases in series
    b = bounds_ps(p)
    assert b["critical_path"] <= fast.makespan_ps <= b["serial"]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from([0, 1000, 3000]), st.booleans(),
       st.sampled_from([(), QUEUE]))
def test_repeated_block_equals_materialised_in_order(seed, space, imports, queue):
    make = random_program_with_imports if imports else random_program
    p = make(seed, space=space, max_repeat=14, max_blocks=2, max_nodes=3)
    kw = dict(in_order_units=STREAM, queued_units=queue)
    jumped = schedule(p, space_bytes=space, steady_state_min_repeats=4, **kw)
    full = schedule(p, space_bytes=space, steady_state=False, **kw)
    assert jumped.makespan_ps == full.makespan_ps
    for key, span in jumped.nodes.items():
        assert full.nodes[key] == span
