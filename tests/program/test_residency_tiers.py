"""The residency planner with a second DRAM tier (``Capacities.dram_bytes``: a chip with
``[dram2]``): fast against golden, the first tier never over-filled, more first-tier room never
moving a tensor down, and a tier that is never needed changing nothing. (The planner's on-chip
rule: test_residency.py.)"""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.sim.program import Capacities, plan_residency
from diptych.sim.program.residency_ref import plan_residency_ref
from progtest_helpers import random_program, random_program_with_imports
from residency_optimum_ref import instances, locations
from test_residency import random_caps

#: Rank of a location in the hierarchy: a tensor may only move up as memory grows.
RANK = {"scratchpad": 0, "shared_buffer": 1, "dram": 2, "dram2": 3, "dram3": 4}


def with_tier(cap: Capacities, dram_bytes: int, dram2_bytes: int = 0) -> Capacities:
    return Capacities(scratchpad=cap.scratchpad, shared_buffer=cap.shared_buffer,
                      scratchpad_kinds=cap.scratchpad_kinds,
                      shared_buffer_kinds=cap.shared_buffer_kinds, dram_bytes=dram_bytes,
                      dram2_bytes=dram2_bytes)


def tiered_case(seed: int, imports: bool = False):
    rng = random.Random(seed)
    p = (random_program_with_imports(seed) if imports else
         random_program(seed, max_repeat=7, demands=False))
    return p, with_tier(random_caps(rng), rng.randint(1, 20000))


def decisions(res):
    return {k: (p.scratchpad, p.shared_buffer, p.dram2, p.dram3)
            for k, p in res.placements.items()}


def dram_held(program, res, tier: str = "dram") -> list[int]:
    """Independently of the planner: bytes of the instances in DRAM tier ``tier`` per
    position."""
    insts, n = instances(program)
    used = [0] * n
    for i, loc in zip(insts, locations(insts, res)):
        if loc == tier:
            for x in range(i.first, i.last + 1):
                used[x] += i.size
    return used


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.booleans())
def test_fast_equals_golden_with_a_second_tier(seed, imports):
    p, cap = tiered_case(seed, imports)
    fast, ref = plan_residency(p, capacity=cap), plan_residency_ref(p, capacity=cap)
    assert decisions(fast) == decisions(ref)
    assert fast.dram_bytes == ref.dram_bytes and fast.dram2_bytes == ref.dram2_bytes


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9))
def test_the_first_tier_is_never_overfilled(seed):
    p, cap = tiered_case(seed)
    res = plan_residency(p, capacity=cap)
    assert max(dram_held(p, res), default=0) <= cap.dram_bytes
    # what the second tier holds is off chip, and counted in the DRAM traffic
    assert res.dram2_bytes <= res.dram_bytes


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.integers(1, 20000))
def test_more_first_tier_never_moves_a_tensor_down(seed, more):
    p, small = tiered_case(seed)
    insts, _ = instances(p)
    a = plan_residency(p, capacity=small)
    b = plan_residency(p, capacity=with_tier(small, small.dram_bytes + more))
    assert b.dram2_bytes <= a.dram2_bytes and b.dram_bytes == a.dram_bytes
    for la, lb in zip(locations(insts, a), locations(insts, b)):
        assert RANK[lb] <= RANK[la]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**9))
def test_a_tier_never_needed_changes_nothing(seed):
    """A first tier that holds every tensor leaves the plan as without a second tier."""
    p, cap = tiered_case(seed)
    huge = with_tier(cap, 10**12)
    alone = with_tier(cap, 0)
    assert decisions(plan_residency(p, capacity=huge)) == decisions(
        plan_residency(p, capacity=alone))


def test_state_spills_last_layers_first():
    """Per-layer weights of a repeated block: the first tier holds the first layers, the
    second the rest (the planner's prefix order), and a node view names the tier."""
    p = random_program(11, max_repeat=7, demands=False)
    cap = Capacities(scratchpad=0, dram_bytes=1)
    res = plan_residency(p, capacity=cap)
    state = [pl for pl in res.placements.values() if pl.state and pl.live and pl.instances > 1]
    for pl in state:
        locs = [pl.location(i) for i in range(pl.instances)]
        assert locs == sorted(locs, key=RANK.get)
        assert "dram2" in locs


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**9))
def test_offloaded_kinds_live_whole_in_the_second_tier(seed):
    """``tier2_kinds`` (a training offload): every instance of those kinds in the second
    tier, nothing of them on chip, the rest planned as before; fast equals golden."""
    p, cap = tiered_case(seed)
    kinds = frozenset(random.Random(seed).sample(["weight", "optimizer_state", "gradient"], 2))
    off = Capacities(**{**{f: getattr(cap, f) for f in (
        "scratchpad", "shared_buffer", "scratchpad_kinds", "shared_buffer_kinds",
        "dram_bytes")}, "tier2_kinds": kinds})
    fast, ref = plan_residency(p, capacity=off), plan_residency_ref(p, capacity=off)
    assert decisions(fast) == decisions(ref)
    for pl in fast.placements.values():
        if pl.tensor.kind in kinds and pl.live:
            assert (pl.scratchpad, pl.shared_buffer, pl.dram2) == (0, 0, pl.instances)


def three_tier_case(seed: int):
    p, cap = tiered_case(seed)
    return p, with_tier(cap, cap.dram_bytes, random.Random(seed + 1).randint(1, 20000))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**9))
def test_fast_equals_golden_with_a_third_tier(seed):
    """The third tier (``dram2_bytes``): fast and golden place every class alike; the first
    and second tiers are never over-filled (counted independently, instance by instance);
    what the third holds is off chip."""
    p, cap = three_tier_case(seed)
    fast, ref = plan_residency(p, capacity=cap), plan_residency_ref(p, capacity=cap)
    assert decisions(fast) == decisions(ref)
    assert max(dram_held(p, fast), default=0) <= cap.dram_bytes
    assert max(dram_held(p, fast, "dram2"), default=0) <= cap.dram2_bytes
    assert fast.dram2_bytes + fast.dram3_bytes <= fast.dram_bytes


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**9))
def test_a_third_tier_never_needed_changes_nothing(seed):
    """A second tier that holds everything the first refuses leaves the plan as without a
    third; more second-tier room never moves a tensor down."""
    p, cap = three_tier_case(seed)
    two = with_tier(cap, cap.dram_bytes)
    huge = with_tier(cap, cap.dram_bytes, 10**12)
    assert decisions(plan_residency(p, capacity=huge)) == decisions(
        plan_residency(p, capacity=two))
    insts, _ = instances(p)
    a = plan_residency(p, capacity=cap)
    b = plan_residency(p, capacity=with_tier(cap, cap.dram_bytes, cap.dram2_bytes + 5000))
    for la, lb in zip(locations(insts, a), locations(insts, b)):
        assert RANK[lb] <= RANK[la]
