"""The list scheduler against its golden twin, closed-form cases and the bounds every
schedule obeys; the steady-state jump over repeated blocks against the materialised run."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.sim.program import Demand, Phase, bounds_ps, schedule
from diptych.workloads.program import Block, Carry, Import, Node, Program, Tensor
from diptych.sim.program.schedule_ref import schedule_ref
from progtest_helpers import decode_layer_program, random_program, random_program_with_imports

US = 10**6          # picoseconds per microsecond


def prog(*nodes, tensors=None):
    names = {t for n in nodes for t in n.reads + n.writes}
    tensors = tensors or tuple(Tensor(t, 10) for t in sorted(names))
    return Program("p", [Block("b", tensors, tuple(nodes))])


def ph(us, **use):
    return Phase(us * 1e-6, use)


# ---- closed forms ------------------------------------------------------------------------
def test_independent_units_overlap_dependent_ops_add():
    a = Node("a", writes=("x",), demand=Demand((ph(3, array=1.0),)))
    v = Node("v", writes=("y",), unit="vector", demand=Demand((ph(2, vector=1.0),)))
    assert schedule(prog(a, v)).makespan_ps == 3 * US
    v2 = Node("v", reads=("x",), writes=("y",), unit="vector",
              demand=Demand((ph(2, vector=1.0),)))
    assert schedule(prog(a, v2)).makespan_ps == 5 * US


def test_dram_shares_serialise_or_share():
    a = Node("a", writes=("x",), demand=Demand((ph(3, array=1.0, dram=0.6),)))
    v = Node("v", writes=("y",), unit="vector", demand=Demand((ph(2, vector=1.0, dram=0.6),)))
    assert schedule(prog(a, v)).makespan_ps == 5 * US        # 0.6 + 0.6 > 1: one after another
    v = Node("v", writes=("y",), unit="vector", demand=Demand((ph(2, vector=1.0, dram=0.4),)))
    assert schedule(prog(a, v)).makespan_ps == 3 * US        # 0.6 + 0.4 fit together


def test_prefetch_overlaps_the_previous_op():
    a = Node("a", writes=("x",), demand=Demand((ph(2, array=1.0),)))
    pre = Demand((Phase(1e-6, {"dram": 1.0}, early=True), ph(1, array=1.0)), hold_bytes=100)
    b = Node("b", reads=("x",), writes=("y",), demand=pre)
    assert schedule(prog(a, b), space_bytes=100).makespan_ps == 3 * US
    # the same op without a prefetch phase waits for its data, then streams
    b = Node("b", reads=("x",), writes=("y",), demand=Demand((ph(2, array=1.0, dram=0.5),)))
    assert schedule(prog(a, b), space_bytes=100).makespan_ps == 4 * US


def test_prefetch_takes_the_dram_left_free():
    # a reserves half the DRAM for 2 us: b's 1 us prefetch streams at the other half, ends at 2
    a = Node("a", writes=("x",), demand=Demand((ph(2, array=1.0, dram=0.5),)))
    pre = Demand((Phase(1e-6, {"dram": 1.0}, early=True), ph(1, array=1.0)), hold_bytes=1)
    b = Node("b", reads=("x",), writes=("y",), demand=pre)
    r = schedule(prog(a, b), space_bytes=1)
    assert r.makespan_ps == 3 * US
    assert r.nodes[("b", 0, "b")] == (0.0, 3e-6)


def test_prefetch_space_is_held_until_the_node_ends():
    # two prefetching ops, space for one: the second prefetch waits for the first op's end
    mk = lambda n, r, w: Node(n, reads=r, writes=w, demand=Demand(
        (Phase(1e-6, {"dram": 1.0}, early=True), ph(1, array=1.0)), hold_bytes=10))
    a = Node("a", writes=("x",), demand=Demand((ph(5, vector=1.0),)), unit="vector")
    b, c = mk("b", ("x",), ("y",)), mk("c", ("y",), ("z",))
    assert schedule(prog(a, b, c), space_bytes=20).makespan_ps == 7 * US
    # b's prefetch 0-1, a ends 5, b 5-6, c's prefetch 6-7 (space freed at 6), c 7-8
    assert schedule(prog(a, b, c), space_bytes=10).makespan_ps == 8 * US


def test_all_reduce_in_decode_is_exposed_without_prefetch():
    L, ar = 12, 2e-6
    base = schedule(decode_layer_program(L)).makespan_s
    with_ar = schedule(decode_layer_program(L, allreduce_s=ar)).makespan_s
    assert with_ar - base == pytest.approx(L * ar, rel=1e-9)
    # with room to prefetch the next weights, streaming continues under the all-reduce
    pre = schedule(decode_layer_program(L, prefetch_bytes=1e6), space_bytes=4e6).makespan_s
    pre_ar = schedule(decode_layer_program(L, prefetch_bytes=1e6, allreduce_s=ar),
                      space_bytes=4e6).makespan_s
    assert pre <= base and pre_ar - pre < 0.2 * L * ar


def test_fixed_costs_add_up():
    p = decode_layer_program(4, launch_s=2e-6)
    q = decode_layer_program(4)
    r, r0 = schedule(p, step_sync_seconds=20e-6), schedule(q)
    launches = 4 * 6              # every node of every layer (embed and head have none)
    # a chain of dependent ops: every launch is on the critical path
    assert r.makespan_s - r0.makespan_s == pytest.approx(launches * 2e-6, rel=1e-9)
    assert r.seconds == pytest.approx(r.makespan_s + 20e-6)


def test_errors():
    n = Node("a", writes=("x",))
    with pytest.raises(ValueError, match="block 'b': node 'a' has no demand"):
        schedule(prog(n))
    big = Node("a", writes=("x",), demand=Demand((Phase(1e-6, {"dram": 1.0}, early=True),
                                                   ph(1, array=1.0)), hold_bytes=50))
    with pytest.raises(ValueError, match="node 'a' holds 50 bytes, more than the 10-byte "
                                         "prefetch space"):
        schedule(prog(big), space_bytes=10)
    with pytest.raises(ValueError, match="space_bytes must be a finite number >= 0"):
        schedule(prog(big), space_bytes=-1)
    with pytest.raises(ValueError, match="step_sync_seconds must be a finite number >= 0"):
        schedule(prog(big), space_bytes=100, step_sync_seconds=-1e-6)


# ---- golden twin, bounds, steady state ---------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from([0, 1000, 3000]), st.booleans())
def test_fast_equals_golden(seed, space, imports):
    # with imports: a backward block reading what an earlier block's repeats saved
    make = random_program_with_imports if imports else random_program
    p = make(seed, space=space, max_repeat=5)
    fast = schedule(p, space_bytes=space, steady_state_min_repeats=4)
    ref = schedule_ref(p, space_bytes=space)
    assert fast.makespan_ps == ref["makespan_ps"]
    for blk, rep, name, spans in ref["nodes"]:
        got = fast.nodes.get((blk, rep, name))
        if got is not None:
            assert got == (spans[0][0] / 1e12, spans[-1][1] / 1e12)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from([0, 1000, 3000]))
def test_bounds(seed, space):
    p = random_program(seed, space=space, max_repeat=6)
    b = bounds_ps(p)
    m = schedule(p, space_bytes=space).makespan_ps
    assert b["critical_path"] <= m
    assert b["busiest"] <= m
    assert m <= b["serial"]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from([0, 1000, 3000]))
def test_repeated_block_equals_materialised(seed, space):
    p = random_program(seed, space=space, max_repeat=16, max_blocks=2, max_nodes=3)
    jumped = schedule(p, space_bytes=space, steady_state_min_repeats=4)
    full = schedule(p, space_bytes=space, steady_state=False)
    assert jumped.makespan_ps == full.makespan_ps
    for key, span in jumped.nodes.items():
        assert full.nodes[key] == span
    assert jumped.busy_s == full.busy_s


def test_steady_state_is_used_and_cheap():
    p = decode_layer_program(80, prefetch_bytes=1e6, allreduce_s=2e-6)
    r = schedule(p, space_bytes=4e6)
    full = schedule(p, space_bytes=4e6, steady_state=False)
    assert r.makespan_ps == full.makespan_ps
    layers = r.blocks[1]
    assert layers.simulated_repeats < 10 and layers.period_s is not None
    assert r.simulated_phases < full.simulated_phases / 8
    # the period is a layer's DRAM time: 4 x 1 MB of weights and 0.5 MB of KV at 1 TB/s
    assert layers.period_s == pytest.approx(4.5e-6, rel=1e-9)
    assert r.utilization("dram") == pytest.approx(full.utilization("dram"))


# ---- imports (a backward block reading what an earlier block's repeats saved) ------------
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.sampled_from([0, 1000, 3000]))
def test_imports_repeated_block_equals_materialised(seed, space):
    p = random_program_with_imports(seed, space=space, max_repeat=14, max_blocks=2,
                                    max_nodes=3)
    jumped = schedule(p, space_bytes=space, steady_state_min_repeats=4)
    full = schedule(p, space_bytes=space, steady_state=False)
    assert jumped.makespan_ps == full.makespan_ps
    for key, span in jumped.nodes.items():
        assert full.nodes[key] == span
    b = bounds_ps(p)
    assert b["critical_path"] <= jumped.makespan_ps <= b["serial"]


def test_backward_reads_the_saved_layer_in_reverse():
    # forward: 6 layers of a (1 us, array) -> b (1 us, vector), each saving "h"; a seed op
    # (1 us); backward: 6 layers of one 2 us op reading the saved "h" and the layer input of
    # layer L-1-k behind the carried gradient. A chain: 12 + 1 + 12 us.
    act = lambda n, b=10: Tensor(n, b)
    fwd = Block("f", (act("x"), act("h"), act("y")),
                (Node("a", reads=("x",), writes=("h",), demand=Demand((ph(1, array=1.0),))),
                 Node("b", reads=("h",), writes=("y",), unit="vector",
                      demand=Demand((ph(1, vector=1.0),)))),
                repeat=6, carry=(Carry("x", "y", "in", "out"),))
    seed = Block("s", (), (Node("s", reads=("out",), writes=("d0",), unit="vector",
                                demand=Demand((ph(1, vector=1.0),))),))
    bwd = Block("g", (act("hs"), act("xs"), act("dy"), act("p")),
                (Node("d", reads=("hs", "xs", "dy"), writes=("p",), unit="link",
                      demand=Demand((ph(2, link=1.0),))),),
                repeat=6, carry=(Carry("dy", "p", "d0", "d6"),),
                imports=(Import("hs", "f", "h"), Import("xs", "f", "x")))
    p = Program("p", [fwd, seed, bwd], [act("in"), act("out"), act("d0"), act("d6")])
    r = schedule(p)
    assert r.makespan_ps == schedule_ref(p)["makespan_ps"] == 25 * US
    ex = p.expand()
    g0 = next(n for n in ex.nodes if n.block == 2 and n.repeat == 0)
    assert g0.reads == ("f[5].h", "f[4].y", "d0")      # layer 5's h, its input = layer 4's y
    g5 = next(n for n in ex.nodes if n.block == 2 and n.repeat == 5)
    assert g5.reads == ("f[0].h", "in", "g[4].p")
    f = {(n.repeat, n.node.name): n.index for n in ex.nodes if n.block == 0}
    assert f[(5, "a")] in g0.preds and f[(0, "a")] in g5.preds
    assert p.import_writer(2, "hs", 1) == (0, 4, 0)     # repeat 1 reads layer 4's "h" (node a)
    assert p.import_writer(2, "xs", 5) is None           # layer 0's input: the program's "in"
    # saved activations are placed instance by instance, live for the whole program
    from diptych.sim.program import Capacities, plan_residency
    # g's carried gradient p saves most per byte (two of its 10-byte instances live at a
    # time), then 30 bytes leave room for three of the six saved "h"
    res = plan_residency(p, capacity=Capacities(scratchpad=50, scratchpad_kinds={"activation"}))
    assert res.placement("h", "f").saved and res.placement("h", "f").scratchpad == 3
    assert res.node("g", "d", 0).location("f[5].h") == "dram"
    assert res.node("g", "d", 5).location("f[0].h") == "scratchpad"
    with pytest.raises(ValueError, match="node 'd' reads the imported tensor 'hs' but does not "
                                         "depend on a carried input"):
        Program("p", [fwd, Block("g", bwd.tensors, (Node("d", reads=("hs",), writes=("p",)),),
                                 repeat=6, imports=bwd.imports[:1])], [act("in"), act("out")])
