"""The KV cache across three memory tiers in ``serve`` (issue 25, ``[dram3]``;
sim/serving/kv_tier.py, kv_chain.py) against independent references: the two-tier copy
count (the formula before the third tier), a hand-worked placement's closed form, ideal
slower tiers equal one tier that held everything, a third tier never reached changes
nothing (bit for bit), a slower third tier never helps, and what a run reports."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from test_kv_tier import _OC, CFG, LOAD, LPDDR, _instance_run, _serve

from diptych.arch import load_chip
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.kv import kv_budget
from diptych.sim.serving.kv_chain import chain_moves
from diptych.sim.serving.kv_tier import KvTier, TierSpec, copy_path, tier_spec
from diptych.sim.serving.serve import colocated, resolve_config

CXL = load_chip("examples/chips/infer-2026-3tier.toml").dram3
BW1 = LPDDR.dram_bytes_per_s


def _spec(bw, lat=0.0, pj=4.0, cap=1e12):
    return TierSpec(capacity_bytes=cap, bytes_per_s=bw, latency_s=lat, pj_per_bit=pj,
                    tier1_bytes_per_s=BW1, tier1_pj_per_bit=5.5)


def test_two_tier_copies_equal_the_formula_before_the_third_tier():
    """Every (blocks, tier-2 blocks) before and after up to 7 blocks: the count the two-tier
    engine used (``|Δ₂|`` less what was written or freed in its direction)."""
    for b0, b in itertools.product(range(8), repeat=2):
        for t0, t2 in itertools.product(range(b0 + 1), range(b + 1)):
            d = t2 - t0
            old = max(0, d - max(0, b - b0)) + max(0, -d - max(0, b0 - b))
            assert chain_moves((b0 - t0, t0), (b - t2, t2)) == (old, 0, 0)


def test_three_tier_copies_are_the_blocks_over_their_tiers_count():
    """The fewest copies: the blocks a tier holds over its new count, less what a free
    takes (or, growing, the blocks over less nothing: new blocks are written in place)."""
    for before in itertools.product(range(4), repeat=3):
        for after in itertools.product(range(4), repeat=3):
            m = chain_moves(before, after)
            over = sum(max(0, b - a) for a, b in zip(after, before))
            under = sum(max(0, a - b) for a, b in zip(after, before))
            grew = sum(after) - sum(before)
            assert sum(m) == (over if grew >= 0 else under)
    assert chain_moves((0, 2, 2), (5, 0, 0)) == (2, 0, 2)     # the new block written in tier 1
    assert chain_moves((4, 0, 0), (0, 0, 4)) == (0, 0, 4)
    assert chain_moves((0, 3, 0), (0, 0, 3)) == (0, 3, 0)
    with pytest.raises(ValueError, match="2 or 3 tiers"):
        chain_moves((1,), (1,))


class _R:
    def __init__(self, rid, blocks):
        self.rid, self.blocks, self.pref = rid, blocks, False


def test_a_placement_over_three_tiers_in_closed_form():
    """Tier 1 of 4 blocks, tier 2 of 3, tier 3 of 10. Step 1: A (5 blocks) then B (4): A
    has 4 in tier 1 and 1 in tier 2, B 2 in tier 2 and 2 in tier 3; both read their slower
    blocks. Step 2: A gone, B grown to 5: B takes tier 1 (4) and 1 block of tier 2; one of its
    tier-2 blocks and its 2 tier-3 blocks are copied up, the new block written in place."""
    bb = 1e6
    s2, s3 = _spec(100e9, 1e-7, 4.0), _spec(30e9, 5e-7, 20.0)
    t = KvTier(s2, "tier", blocks=3, tier1_blocks=4, block_bytes=bb, spec3=s3, blocks3=10)
    a, b = _R(0, 5), _R(1, 4)
    got = t.place([a, b], 9, [a, b])
    assert got == pytest.approx(s2.read_s(3 * bb) + s3.read_s(2 * bb), rel=1e-12)
    assert (t.used2, t.used3, t.tier_of(0), t.tier_of(1)) == (3, 2, 2, 3)
    b.blocks = 5
    got = t.place([b], 5, [b])
    assert got == pytest.approx(s2.move_s(bb) + s3.move_s(2 * bb) + s2.read_s(bb), rel=1e-12)
    assert t.moved_bytes == 3 * bb and t.moved3_bytes == 2 * bb
    assert t.move3_j == pytest.approx(2 * bb * 8 * (20.0 + 5.5) * 1e-12, rel=1e-12)
    assert t.read3_bytes == 2 * bb and t.peak3 == 2 and list(t.rec3) == [2, 0]
    # a copy between tiers 2 and 3 goes through the chip: the slower rate, both latencies
    p = copy_path(s2, s3)
    assert p.move_s(bb) == pytest.approx(bb / 30e9 + 6e-7, rel=1e-12)
    assert p.move_j(bb) == pytest.approx(bb * 8 * 24e-12, rel=1e-12)


def _setup():
    dep = colocated(LPDDR, "llama-3-8b")
    cfg = resolve_config(dep, ServeConfig(**CFG))
    b = kv_budget(dep.pool.replica, block_tokens=16, max_batched_tokens=1024,
                  reserve_fraction=0.93)
    rng = np.random.default_rng(3)
    reqs = sorted(zip(np.cumsum(rng.exponential(1 / 60, 60)).tolist(),
                      rng.integers(200, 1500, 60).tolist(), rng.integers(20, 400, 60).tolist()))
    return cfg, b, reqs, _OC.get(dep.pool.replica)


def test_ideal_slower_tiers_equal_one_tier_that_held_everything():
    """Infinite bandwidth, no latency, tier 1's energy per bit in tiers 2 and 3: the pool in
    three tiers serves every request at exactly the times of one tier of its size, while
    the third tier does hold, copy and read blocks (so the test exercises it)."""
    cfg, b, reqs, oracle = _setup()
    one, _ = _instance_run(b.blocks, None, oracle, cfg, b.block_bytes, reqs)
    ideal = _spec(math.inf, 0.0, 5.5)
    c1 = c2 = b.blocks // 4
    t = KvTier(ideal, "tier", blocks=c2, tier1_blocks=c1, block_bytes=b.block_bytes,
               spec3=ideal, blocks3=b.blocks - c1 - c2)
    three, _ = _instance_run(b.blocks, t, oracle, cfg, b.block_bytes, reqs)
    assert three == one
    assert t.peak3 > 0 and t.moved3_bytes > 0 and t.read3_bytes > 0


def test_a_third_tier_never_reached_changes_nothing():
    """A tier 2 that holds the whole overflow: adding a tier 3 leaves every time, copy and
    read of the two-tier run bit for bit (tier 3 stays empty)."""
    cfg, b, reqs, oracle = _setup()
    s2 = tier_spec(LPDDR)
    c1 = b.blocks // 3
    runs = []
    for extra in ({}, dict(spec3=_spec(20e9, 1e-6, 25.0), blocks3=1000)):
        t = KvTier(s2, "tier", blocks=b.blocks - c1, tier1_blocks=c1, block_bytes=b.block_bytes,
                   **extra)
        times, _ = _instance_run(b.blocks, t, oracle, cfg, b.block_bytes, reqs)
        runs.append((times, t.moved_bytes, t.move_s, t.read_s, t.read_j, list(t.rec2)))
    assert runs[0] == runs[1] and runs[0][1] > 0 and t.peak3 == 0


def test_a_slower_third_tier_never_improves_ttft_or_tpot():
    """Tier 3 behind a small tier 2 at 100, 20 and 5 GB/s (the last with 2 µs more)."""
    cfg, b, reqs, oracle = _setup()
    c1 = c2 = b.blocks // 4
    out = []
    for bw, lat in ((100e9, 0.0), (20e9, 0.0), (5e9, 2e-6)):
        t = KvTier(tier_spec(LPDDR), "tier", blocks=c2, tier1_blocks=c1,
                   block_bytes=b.block_bytes, spec3=_spec(bw, lat, 25.0),
                   blocks3=b.blocks - c1 - c2)
        times, _ = _instance_run(b.blocks, t, oracle, cfg, b.block_bytes, reqs)
        first = sorted(f - a for (f, _), (a, _, _) in zip(times.values(), reqs))
        tpot = sorted((e - f) / max(1, g - 1) for (f, e), (_, _, g) in
                      zip(times.values(), reqs))
        out.append((np.mean(first), first[-1], np.mean(tpot), tpot[-1]))
    for a, b_ in zip(out, out[1:]):
        assert all(y >= x for x, y in zip(a, b_))
    assert out[-1][2] > out[0][2]


def _three(cap2_gib=0.1):
    return dataclasses.replace(LPDDR, dram2=dataclasses.replace(LPDDR.dram2,
                                                                capacity_gib=cap2_gib),
                               dram3=CXL)


@pytest.mark.parametrize("mode", ["tier", "swap", "prefixes"])
def test_a_run_reports_each_tier_and_spills_past_a_full_second(mode):
    """A 0.1 GiB tier 2: the cache spills to tier 3 (pooled), or victims swap there once tier
    2 is full; info.kv_tiers and the budget report each tier; the tiers' joules are in the
    energy breakdown. With a prefix cache in the pool, hits are counted per tier."""
    extra = (dict(prefixes=40, prefix_share=0.5, kv_reserve_fraction=0.94)
             if mode == "prefixes" else {})     # more prefixes than held: cold ones sink
    res = _serve(_three(0.02 if extra else 0.1), "tier" if extra else mode,
                 load=dataclasses.replace(LOAD, requests=60), **extra)
    kt = res.info["kv_tiers"]
    t = res.instances[0].tier
    assert kt["tier3_peak_bytes"] == t.peak3 * res.instances[0].block_bytes > 0
    assert 0 < kt["tier3_moved_bytes"] <= kt["moved_bytes"] and kt["tier3_move_j"] > 0
    assert kt["tier3_blocks"] == t.blocks3 == int(CXL.capacity_bytes // t.block_bytes)
    assert max(t.rec2) <= t.blocks and max(t.rec3) <= t.blocks3
    assert sum(res.energy_breakdown_j.values()) == pytest.approx(res.energy_j, rel=1e-9)
    if extra:
        pcd = res.info["prefix_cache"]
        carried = sum(1 for r in res.reqs if r.pid >= 0)
        assert pcd["hits_tier1"] + pcd["hits_tier2"] + pcd["hits_tier3"] + pcd["misses"] \
            >= carried and pcd["hits_tier3"] > 0
    if mode != "swap":
        assert kt["tier3_read_added_s"] > 0 and res.kv[0]["tier3_blocks"] == t.blocks3
    else:
        assert t.refused == 0 and kt["tier3_read_bytes"] == 0
