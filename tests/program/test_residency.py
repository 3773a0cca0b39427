"""Residency planner: fast against golden, the properties (capacity never exceeded, more SRAM
never more DRAM traffic, too-large tensors off chip, kinds honoured), a hand-computed case
and the chip-derived capacities. (Against the exhaustive optimum: test_residency_optimum.py.)"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import TENSOR_KINDS, load_chip
from diptych.sim.program import Capacities, capacities
from diptych.workloads.program import Block, Carry, Node, Program, Tensor
from diptych.sim.program import plan_residency
from diptych.sim.program.residency_ref import plan_residency_ref
from progtest_helpers import random_program, random_program_with_imports
from residency_optimum_ref import held, instances, locations

#: Rank of a location in the hierarchy (a tensor may only move up as SRAM grows).
RANK = {"scratchpad": 0, "shared_buffer": 1, "dram": 2}


def random_caps(rng: random.Random, dram=True) -> Capacities:
    """Random capacities: one time in three both memories with every kind in both (where the
    second memory takes what the first refused), else random kinds, maybe no shared buffer."""
    if rng.random() < 1 / 3:
        return Capacities(scratchpad=rng.randint(0, 9000), shared_buffer=rng.randint(1, 9000),
                          scratchpad_kinds=TENSOR_KINDS, shared_buffer_kinds=TENSOR_KINDS,
                          dram=dram)
    return Capacities(scratchpad=rng.randint(0, 9000),
                      shared_buffer=rng.choice([0, rng.randint(0, 6000)]),
                      scratchpad_kinds=set(rng.sample(TENSOR_KINDS, rng.randint(0, 5))),
                      shared_buffer_kinds=set(rng.sample(TENSOR_KINDS, rng.randint(0, 5))),
                      dram=dram)


def random_case(seed: int):
    """A random program (no demands needed) and random capacities for it."""
    return random_program(seed, max_repeat=7, demands=False), random_caps(random.Random(seed))


def decisions(res):
    return {k: (p.scratchpad, p.shared_buffer) for k, p in res.placements.items()}


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9))
def test_fast_equals_golden(seed):
    p, cap = random_case(seed)
    fast, ref = plan_residency(p, capacity=cap), plan_residency_ref(p, capacity=cap)
    assert decisions(fast) == decisions(ref)
    assert fast.dram_bytes == ref.dram_bytes


def live_sets(program, res):
    """Independently of the planner: per position, the bytes of instances in each memory."""
    insts, n = instances(program)
    return held(insts, n, locations(insts, res))


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9))
def test_capacity_never_exceeded_and_big_tensors_stay_off_chip(seed):
    p, cap = random_case(seed)
    res = plan_residency(p, capacity=cap)
    used = live_sets(p, res)
    assert max(used["scratchpad"]) <= cap.scratchpad
    assert max(used["shared_buffer"]) <= cap.shared_buffer
    for pl in res.placements.values():
        if pl.scratchpad:
            assert pl.tensor.bytes <= cap.scratchpad and pl.tensor.kind in cap.scratchpad_kinds
        if pl.shared_buffer:
            assert pl.tensor.bytes <= cap.shared_buffer
            assert pl.tensor.kind in cap.shared_buffer_kinds


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9), st.integers(0, 4000), st.integers(0, 4000))
def test_more_sram_never_more_dram_traffic(seed, more_sp, more_sb):
    """More of either memory (or both): no more DRAM traffic, and every tensor instance stays
    where it was or moves up (DRAM -> shared buffer -> scratchpad)."""
    p, small = random_case(seed)
    insts, _ = instances(p)
    a = plan_residency(p, capacity=small)
    for sp, sb in ((more_sp, 0), (0, more_sb), (more_sp, more_sb)):
        big = Capacities(scratchpad=small.scratchpad + sp,
                         shared_buffer=small.shared_buffer + sb,
                         scratchpad_kinds=small.scratchpad_kinds,
                         shared_buffer_kinds=small.shared_buffer_kinds)
        b = plan_residency(p, capacity=big)
        assert b.dram_bytes <= a.dram_bytes
        for la, lb in zip(locations(insts, a), locations(insts, b)):
            assert RANK[lb] <= RANK[la]


def test_everything_fits_means_no_dram_traffic():
    p = random_program(7, max_repeat=5, demands=False)
    cap = Capacities(scratchpad=10**9, scratchpad_kinds=TENSOR_KINDS)
    res = plan_residency(p, capacity=cap)
    assert res.dram_bytes == 0
    assert all(pl.dram == 0 for pl in res.placements.values() if pl.live)


# ---- a case computed by hand -------------------------------------------------------------
def layer_program():
    """4 layers of one node: reads the layer input x and weight w (100 B), appends to its KV
    cache kv (60 B, updated in place), writes y (10 B), carried to the next layer."""
    T = (Tensor("x", 10), Tensor("y", 10), Tensor("w", 100, "weight"),
         Tensor("kv", 60, "kv_cache"))
    N = (Node("attn", reads=("x", "w"), updates=("kv",), writes=("y",)),)
    b = Block("b", T, N, repeat=4, carry=(Carry("x", "y", "emb", "out"),))
    return Program("p", [b], [Tensor("emb", 10), Tensor("out", 10, live_out=True)])


# Priorities (saved DRAM bytes per byte): y 60/20 = 3 (three instances, two live at once),
# kv 120/60 = 2 per instance, then emb, out and w at 1 (fewer bytes first).
# Loads before each item: y peaks at 20; kv instance j needs 20 + 60(j+1) = 80 .. 260;
# emb and out then need 250 + 10 = 260; weight instance j needs 260 + 100(j+1) = 360 ...
@pytest.mark.parametrize("cap,sp,dram", [
    (300, {"b/y": 3, "b/kv": 4, "emb": 1, "out": 1, "b/w": 0}, 4 * 100),
    (100, {"b/y": 3, "b/kv": 1, "emb": 0, "out": 0, "b/w": 0}, 3 * 120 + 10 + 10 + 400),
    (10, {"b/y": 0, "b/kv": 0, "emb": 0, "out": 0, "b/w": 0}, 60 + 4 * 120 + 10 + 10 + 400),
    (660, {"b/y": 3, "b/kv": 4, "emb": 1, "out": 1, "b/w": 4}, 0),
])
def test_hand_computed(cap, sp, dram):
    c = Capacities(scratchpad=cap, scratchpad_kinds=TENSOR_KINDS)
    res = plan_residency(layer_program(), capacity=c)
    assert {k: p.scratchpad for k, p in res.placements.items()} == sp
    assert res.dram_bytes == dram


# Both memories, every kind in both, 100 + 300 bytes. Scratchpad (offered everything): y (20),
# kv[0] (20 + 60 = 80); kv[1] would need 140, and emb, out, w are refused too (the offered
# loads reach 260 + their own). Shared buffer (offered what the scratchpad refused): kv[1..3]
# (60, 120, 180), emb and out (190 where each is live), w[0] (180 + 10 + 100 = 290); w[1]
# would need 390. DRAM: w[1..3], 300 bytes.
def test_hand_computed_two_memories():
    c = Capacities(scratchpad=100, shared_buffer=300, scratchpad_kinds=TENSOR_KINDS,
                   shared_buffer_kinds=TENSOR_KINDS)
    res = plan_residency(layer_program(), capacity=c)
    assert decisions(res) == {"b/y": (3, 0), "b/kv": (1, 3), "emb": (0, 1), "out": (0, 1),
                              "b/w": (0, 1)}
    assert res.dram_bytes == 3 * 100
    assert res.segments("b") == ((0, 1), (1, 4))


def test_node_views_segments_and_spill():
    p = layer_program()
    res = plan_residency(p, capacity=Capacities(scratchpad=100,
                                                scratchpad_kinds=TENSOR_KINDS))
    assert res.segments("b") == ((0, 1), (1, 4))           # KV of the first layer on chip
    v0, v2 = res.node("b", "attn", 0), res.node("b", "attn", 2)
    assert v0.location("emb") == "dram" and v0.location("b[0].kv") == "scratchpad"
    assert v2.location("b[1].y") == "scratchpad" and v2.location("b[2].kv") == "dram"
    assert res.node("b", "attn", 3).location("out") == "dram"
    assert v2.dram_read_bytes == 100 + 60 and v2.dram_write_bytes == 60 and v2.spill_bytes == 0
    tiny = plan_residency(p, capacity=Capacities(scratchpad=10,
                                                 scratchpad_kinds=TENSOR_KINDS))
    assert tiny.node("b", "attn", 1).spill_bytes == 10 + 10  # reads y[0], writes y[1]
    with pytest.raises(ValueError, match="repeat must be in"):
        res.node("b", "attn", 4)


def test_all_sram_chip_must_fit():
    p = layer_program()
    fit = plan_residency(p, capacity=Capacities(scratchpad=660, scratchpad_kinds=TENSOR_KINDS,
                                                dram=False))
    assert fit.dram_bytes == 0
    with pytest.raises(ValueError) as info:
        plan_residency(p, capacity=Capacities(scratchpad=300, scratchpad_kinds=TENSOR_KINDS,
                                              dram=False))
    assert "the chip has no DRAM and tensor 'b/w' (100 bytes) finds no room in 300 bytes" \
        in str(info.value)


# ---- capacities from chips ---------------------------------------------------------------
def test_capacities_from_presets():
    v1 = capacities(load_chip("tpu-v1"))
    assert v1.scratchpad == int(24 * 2**20 * 0.75)          # the UB less the 25 % tile reserve
    assert v1.scratchpad_kinds == {"activation"}            # weights only via the weight FIFO
    assert v1.shared_buffer == 0 and v1.dram
    h = capacities(load_chip("h100"))
    assert h.scratchpad_kinds == set() and h.shared_buffer_kinds == {"activation"}
    assert h.shared_buffer == int(int(47.68 * 2**20) * 0.75)
    g = capacities(load_chip("groq-lpu"))
    assert g.scratchpad == int(220 * 2**20 * 0.95) and not g.dram
    assert g.scratchpad_kinds == set(TENSOR_KINDS)
    assert capacities(load_chip("tpu-v1"), reserve_fraction=0.0).scratchpad == 24 * 2**20
    with pytest.raises(ValueError, match=r"reserve_fraction must be in \[0, 1\)"):
        capacities(load_chip("tpu-v1"), reserve_fraction=1.0)


def test_tpu_v1_keeps_activations_not_weights():
    p = layer_program()
    res = plan_residency(p, load_chip("tpu-v1"))
    assert res.placement("w", "b").scratchpad == 0
    assert res.placement("y", "b").scratchpad == 3
    assert res.dram_bytes == 4 * 100 + 4 * 120              # weights and caches stay in DDR3


# ---- imports: activations saved for a later block ----------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9))
def test_imports_fast_equals_golden_and_fits(seed):
    p = random_program_with_imports(seed, max_repeat=7, demands=False)
    cap = random_caps(random.Random(seed))
    fast, ref = plan_residency(p, capacity=cap), plan_residency_ref(p, capacity=cap)
    assert decisions(fast) == decisions(ref)
    assert fast.dram_bytes == ref.dram_bytes
    used = live_sets(p, fast)
    assert max(used["scratchpad"]) <= cap.scratchpad
    assert max(used["shared_buffer"]) <= cap.shared_buffer
    more = Capacities(scratchpad=cap.scratchpad + 3000, shared_buffer=cap.shared_buffer,
                      scratchpad_kinds=cap.scratchpad_kinds,
                      shared_buffer_kinds=cap.shared_buffer_kinds)
    assert plan_residency(p, capacity=more).dram_bytes <= fast.dram_bytes
