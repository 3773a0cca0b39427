"""Residency planner against an independent oracle (not the golden twin): zero DRAM traffic
wherever the rule promises it, never better than the exhaustive optimum over every placement
of a tiny program, within the proven knapsack bound of it when every tensor is live over the
whole program, and the reviewer's two-memory case."""

import random
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import TENSOR_KINDS
from diptych.sim.program import Capacities, plan_residency
from diptych.workloads.program import Block, Carry, Node, Program, Tensor
from progtest_helpers import random_program
from residency_optimum_ref import dram_traffic, held, instances, live_bytes, locations, optimum

MIB = 2**20


def both(sp: int, sb: int) -> Capacities:
    """Both memories, every kind allowed in both."""
    return Capacities(scratchpad=sp, shared_buffer=sb, scratchpad_kinds=TENSOR_KINDS,
                      shared_buffer_kinds=TENSOR_KINDS)


def plan(program, cap):
    """The plan's DRAM traffic and the bytes each memory holds, by the oracle's count."""
    insts, n = instances(program)
    res = plan_residency(program, capacity=cap)
    locs = locations(insts, res)
    used = held(insts, n, locs)
    assert max(used["scratchpad"], default=0) <= cap.scratchpad
    assert max(used["shared_buffer"], default=0) <= cap.shared_buffer
    return insts, n, res, locs


def state_program(seed: int, max_instances: int = 8) -> Program:
    """1-2 blocks of 1-3 repeats whose tensors are all state (weights read, KV caches updated):
    every instance is live over the whole program."""
    rng = random.Random(seed)
    blocks, count = [], 0
    for bi in range(rng.randint(1, 2)):
        L = rng.randint(1, 3)
        tensors, reads, updates = [], [], []
        for s in range(rng.randint(1, 2)):
            if count + L > max_instances:
                break
            count += L
            kind = rng.choice(["weight", "kv_cache"])
            tensors.append(Tensor(f"s{s}", rng.randint(1, 40) * 10, kind))
            (reads if kind == "weight" else updates).append(f"s{s}")
        if tensors:
            blocks.append(Block(f"b{bi}", tuple(tensors),
                                (Node("n", reads=tuple(reads), updates=tuple(updates)),),
                                repeat=L))
    return Program(f"state{seed}", blocks, [])


# ---- (a) zero DRAM traffic where the rule promises it ------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.booleans())
def test_fitting_either_memory_alone_leaves_nothing_in_dram(seed, in_shared):
    """Live bytes within one memory's capacity at every position: nothing in DRAM, whatever
    the other memory's capacity (even 0)."""
    p = random_program(seed, max_repeat=5, demands=False)
    insts, n = instances(p)
    peak = max(live_bytes(insts, n))
    other = random.Random(seed).randint(0, peak)
    cap = both(other, peak) if in_shared else both(peak, other)
    insts, n, res, locs = plan(p, cap)
    assert dram_traffic(insts, locs) == 0 and res.dram_bytes == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9), st.floats(0, 1))
def test_state_within_both_memories_less_the_largest_tensor_leaves_nothing_in_dram(seed, split):
    """Tensors live over the whole program whose total fits both memories together less the
    largest one: nothing in DRAM, however the capacity is split."""
    p = state_program(seed, max_instances=40)
    insts, _ = instances(p)
    total, largest = sum(i.size for i in insts), max(i.size for i in insts)
    sp = int(split * total)
    insts, n, res, locs = plan(p, both(sp, max(0, total + largest - sp)))
    assert dram_traffic(insts, locs) == 0


def test_total_capacity_alone_is_not_enough():
    """Why (a) needs the slack: three 60-byte tensors live together fit 200 bytes in total but
    not two 100-byte memories; the exhaustive optimum agrees that one must stay in DRAM."""
    b = Block("b", (Tensor("w", 60, "weight"),), (Node("n", reads=("w",)),), repeat=3)
    p = Program("three", [b], [])
    insts, n = instances(p)
    assert max(live_bytes(insts, n)) == 180
    assert optimum(insts, n, both(100, 100)) == 60
    insts, n, res, locs = plan(p, both(100, 100))
    assert dram_traffic(insts, locs) == 60


# ---- (b) against the exhaustive optimum --------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9))
def test_state_programs_within_the_knapsack_bound_of_the_optimum(seed):
    """Every instance live over the whole program, every kind in both memories: the on-chip
    set is a priority prefix, so the plan's DRAM traffic is at most the optimum plus the free
    on-chip bytes at the highest traffic per byte left in DRAM (the fractional-knapsack
    bound, residency.py's property 4), and never below the optimum; each memory's free
    bytes are fewer than those of the item it refused first, so together fewer than twice the
    largest item's when anything is left in DRAM."""
    p = state_program(seed)
    rng = random.Random(seed)
    insts, _ = instances(p)
    total = sum(i.size for i in insts)
    cap = both(rng.randint(0, total), rng.randint(0, total))
    insts, n, res, locs = plan(p, cap)
    got, best = dram_traffic(insts, locs), optimum(insts, n, cap)
    on_chip = sum(i.size for i, loc in zip(insts, locs) if loc != "dram")
    free = cap.scratchpad + cap.shared_buffer - on_chip
    d_left = max((Fraction(i.traffic, i.size) for i, loc in zip(insts, locs)
                  if loc == "dram"), default=Fraction(0))
    assert best <= got <= best + d_left * free
    if got:
        assert free < 2 * max(i.size for i in insts)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9))
def test_tiny_programs_never_beat_the_optimum(seed):
    """Random tiny programs (activations with their own live ranges, carried inputs, state),
    random capacities and kinds: the plan is feasible (capacities checked position by
    position), so its DRAM traffic is at least the exhaustive optimum's; equal (zero) when the
    live bytes fit one memory."""
    rng = random.Random(seed)
    p = random_program(seed, max_blocks=2, max_nodes=2, max_repeat=2, demands=False)
    insts, n = instances(p)
    if len(insts) > 12:      # keep the enumeration small (at most 10 instances then)
        p = random_program(seed, max_blocks=1, max_nodes=2, max_repeat=2, demands=False)
        insts, n = instances(p)
    peak = max(live_bytes(insts, n))
    cap = Capacities(scratchpad=rng.randint(0, peak), shared_buffer=rng.randint(0, peak),
                     scratchpad_kinds=set(rng.sample(TENSOR_KINDS, rng.randint(0, 5))),
                     shared_buffer_kinds=set(rng.sample(TENSOR_KINDS, rng.randint(0, 5))))
    insts, n, res, locs = plan(p, cap)
    got, best = dram_traffic(insts, locs), optimum(insts, n, cap)
    assert got >= best
    kinds = {i.kind for i in insts}
    if (peak <= cap.scratchpad and kinds <= cap.scratchpad_kinds) or (
            peak <= cap.shared_buffer and kinds <= cap.shared_buffer_kinds):
        assert got == best == 0


# ---- (c) the reviewer's case ---------------------------------------------------------------
def test_second_memory_takes_what_the_first_refused():
    """4 layers of 100 MiB of weights and 50 MiB of KV cache (read / updated by one node, 1 MiB
    activations carried between layers), 400 MiB of scratchpad and 300 MiB of shared buffer,
    every kind in both. By hand: priority activations, then KV (2 DRAM bytes per byte), then
    weights (1); the scratchpad holds the activations, the four caches (200 MiB) and one
    weight (300 MiB + the activations; a second would need 400 MiB + them); the shared buffer
    is offered only the three other weights: 300 MiB, which fit exactly. Nothing in DRAM."""
    T = (Tensor("x", MIB), Tensor("y", MIB), Tensor("w", 100 * MIB, "weight"),
         Tensor("kv", 50 * MIB, "kv_cache"))
    b = Block("layers", T, (Node("layer", reads=("x", "w"), updates=("kv",), writes=("y",)),),
              repeat=4, carry=(Carry("x", "y", "emb", "out"),))
    p = Program("decode", [b], [Tensor("emb", MIB), Tensor("out", MIB, live_out=True)])
    insts, n, res, locs = plan(p, both(400 * MIB, 300 * MIB))
    assert res.dram_bytes == 0 and dram_traffic(insts, locs) == 0
    w, kv = res.placement("w", "layers"), res.placement("kv", "layers")
    assert (kv.scratchpad, kv.shared_buffer) == (4, 0)
    assert (w.scratchpad, w.shared_buffer) == (1, 3)
    assert max(held(insts, n, locs)["shared_buffer"]) == 300 * MIB
    assert res.on_chip_bytes("shared_buffer") == 300 * MIB
