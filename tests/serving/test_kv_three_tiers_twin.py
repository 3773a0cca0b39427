"""The KV cache across three memory tiers (issue 25, ``[dram3]``; sim/serving/kv_tier.py,
kv_chain.py, prefix_cache.py) against its golden twin (engine_ref.py, which keeps every
key's blocks per tier and moves them one block at a time): request by request, exactly, on
small cases whose tiny second tier sends KV to the third, under ``tier`` (pooled, with
speculation freeing blocks, with a prefix cache) and ``swap`` (with and without prefixes).
Step times come from the linear cost model of test_prefix_cache (no chip), except the
end-to-end run, which goes through ``serve`` on examples/chips/infer-2026-3tier.toml's
third tier."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from test_kv_three_tiers import _three
from test_kv_tier import _OC, CFG, LOAD, _serve
from test_prefix_cache import BB, LinearSteps, _stream

from diptych.sim.serving.config import ServeConfig, Speculation
from diptych.sim.serving.engine import Instance, Req, run_loop
from diptych.sim.serving.engine_ref import GoldenRequest, golden_serve, tier_copies
from diptych.sim.serving.kv_chain import chain_moves
from diptych.sim.serving.kv_tier import KvTier, TierSpec
from diptych.sim.serving.prefix_cache import PrefixCache
from diptych.sim.serving.serve import colocated, resolve_config

#: tier 2 near the chip, tier 3 behind a slower link with latency and more pJ
S2 = TierSpec(capacity_bytes=1e12, bytes_per_s=200e9, latency_s=3e-7, pj_per_bit=4.0,
              tier1_bytes_per_s=5e12, tier1_pj_per_bit=5.5)
S3 = TierSpec(capacity_bytes=1e12, bytes_per_s=40e9, latency_s=1.5e-6, pj_per_bit=20.0,
              tier1_bytes_per_s=5e12, tier1_pj_per_bit=5.5)


def test_the_twins_copy_count_equals_the_engines():
    """Every placement of up to 4 blocks per tier before and after: the twin's block-by-block
    copies (:func:`tier_copies`) equal the engine's closed count (:func:`chain_moves`)."""
    for before in itertools.product(range(5), repeat=3):
        for after in itertools.product(range(5), repeat=3):
            c = tier_copies(before, after)
            assert chain_moves(before, after) == (c.get((0, 1), 0), c.get((1, 2), 0),
                                                  c.get((0, 2), 0))


def _run(reqs, c1, c2, c3, mode, *, cfg, prefixes=0, pb=0):
    """The event loop and its twin on the same requests; ``c1`` first-tier blocks, ``c2`` and
    ``c3`` in the slower tiers (``tier``: one pool of all three)."""
    tier = KvTier(S2, mode, blocks=c2, tier1_blocks=c1, block_bytes=BB, spec3=S3, blocks3=c3)
    pc = (PrefixCache(prefixes, pb, BB, store=None if tier.pooled else tier,
                      tier3=tier.pooled) if prefixes else None)
    pool = c1 + (c2 + c3 if tier.pooled else 0)
    inst = Instance(0, "mixed", LinearSteps(), cfg, chips=1, blocks=pool, block_bytes=BB,
                    static_w=0.0, tier=tier, prefix_cache=pc, rng=np.random.default_rng(1))
    rs = []
    for i, (a, p, g, pid) in enumerate(reqs):
        r = Req(i, a, p, g)
        r.pid = pid if prefixes else -1
        rs.append(r)
    run_loop([inst], rs)
    g = golden_serve([GoldenRequest(i, a, p, o, pid=pid if prefixes else -1)
                      for i, (a, p, o, pid) in enumerate(reqs)], LinearSteps(), cfg, pool,
                     block_bytes=BB, tier=(S2, mode, c1, c2), tier3=(S3, c3),
                     cached_prefix_blocks=pb, rng=np.random.default_rng(1))
    fast = {r.rid: (r.first_t, r.finish_t) for r in rs}
    assert fast == {r.rid: (r.first_t, r.finish_t) for r in g.requests}
    assert inst.preemptions == g.preemptions
    assert (tier.peak2, tier.peak3) == (g.tier2_peak, g.tier3_peak)
    if pc is not None:
        assert (pc.hits1, pc.hits2, pc.misses, pc.hits3) == (*g.prefix_hits, g.prefix_hits3)
    return inst


CASES = {       # (c1, c2, c3, mode, config, prefixes, (rate per s, longest output))
    "tier": (40, 12, 300, "tier", {}, 0, (100.0, 200)),
    "tier, speculative": (40, 12, 300, "tier", dict(speculative=Speculation(3, 0.7)), 0,
                          (100.0, 200)),
    "tier, whole prompts": (40, 12, 300, "tier",
                            dict(chunked_prefill=False, max_batched_tokens=2048), 0,
                            (100.0, 200)),
    "tier, prefixes": (60, 10, 300, "tier", {}, 9, (100.0, 200)),
    "swap": (60, 12, 40, "swap", {}, 0, (200.0, 400)),
    "swap, prefixes": (70, 12, 60, "swap", {}, 9, (200.0, 400)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fast_loop_equals_its_golden_twin_over_three_tiers(case):
    """A few dozen requests on a small first tier and a tinier second: the third tier holds
    blocks (pooled: placed, copied and read there; swap: victims there once tier 2 is full),
    and every request's first-token and finish times equal the twin's, bit for bit."""
    c1, c2, c3, mode, extra, prefixes, (rate, gen_hi) = CASES[case]
    cfg = ServeConfig(**{"max_batched_tokens": 512, **extra})
    reqs = _stream(40, max(prefixes, 1), seed=3, rate=rate, gen_hi=gen_hi)
    inst = _run(reqs, c1, c2, c3, mode, cfg=cfg, prefixes=prefixes, pb=8 if prefixes else 0)
    t = inst.tier
    assert 0 < t.peak2 <= c2 and 0 < t.peak3 <= c3 and t.moved3_bytes > 0     # tier 3 used
    if mode == "tier":
        assert t.read3_bytes > 0
    else:           # victims in both tiers (and, the case without prefixes, some refused)
        assert inst.preemptions > 0 and t.read3_bytes == 0
        assert t.refused > 0 or prefixes
    if prefixes and mode == "tier":
        assert inst.pc.hits3 > 0          # a hit on a prefix sunk to tier 3
    if prefixes and mode == "swap":       # evicted prefixes demoted to tier 3, stored there
        pc = inst.pc                      # when tier 2 is full of sequences, hit there
        assert pc.demoted3 > 0 and pc.stored3 > 0 and pc.dropped3 > 0 and pc.hits3 > 0


def test_serve_on_a_three_tier_chip_equals_its_golden_twin():
    """``serve`` on the LPDDR design with a 0.02 GiB second tier and the 3-tier example's CXL
    third tier (the roofline double's step times): the instance ``serve`` builds (its blocks
    per tier, the chip files' rates) runs exactly as the twin given the same tiers."""
    chip = _three(0.02)
    load = dataclasses.replace(LOAD, requests=30)
    res = _serve(chip, "tier", load=load)
    cfg = resolve_config(colocated(chip, "llama-3-8b"), ServeConfig(kv_offload="tier", **CFG))
    inst = res.instances[0]
    t = inst.tier
    g = golden_serve([GoldenRequest(r.rid, r.arrival, r.prompt, r.output)
                      for r in sorted(res.reqs, key=lambda r: r.rid)],
                     _OC.get(colocated(chip, "llama-3-8b").pool.replica), cfg,
                     inst.total_blocks, block_bytes=inst.block_bytes,
                     rng=np.random.default_rng([cfg.seed, 1]),
                     tier=(t.spec, "tier", t.tier1_blocks, t.blocks), tier3=(t.spec3, t.blocks3))
    assert {r.rid: (r.first_t, r.finish_t) for r in res.reqs} == \
        {r.rid: (r.first_t, r.finish_t) for r in g.requests}
    assert res.preemptions == g.preemptions
    assert (t.peak2, t.peak3) == (g.tier2_peak, g.tier3_peak) and t.peak3 > 0


def _ideal(cap_blocks):
    return TierSpec(capacity_bytes=cap_blocks * BB, bytes_per_s=math.inf, latency_s=0.0,
                    pj_per_bit=5.5, tier1_bytes_per_s=5e12, tier1_pj_per_bit=5.5)


def swap_prefix_run(reqs, c1: int, tier: KvTier, cfg: ServeConfig):
    """The event loop over ``reqs`` (``(arrival, prompt, output, pid)``) on a ``c1``-block
    first tier with ``tier`` (``swap``) and 9 prefixes of 8 blocks: the instance, requests."""
    pc = PrefixCache(9, 8, BB, store=tier)
    inst = Instance(0, "mixed", LinearSteps(), cfg, chips=1, blocks=c1, block_bytes=BB,
                    static_w=0.0, tier=tier, prefix_cache=pc, rng=np.random.default_rng(1))
    rs = []
    for i, (a, p, g, pid) in enumerate(reqs):
        rs.append(Req(i, a, p, g))
        rs[-1].pid = pid
    run_loop([inst], rs)
    return inst, rs


def test_ideal_tiers_keep_every_evicted_prefix_as_one_big_second_tier_does():
    """``swap`` with prefixes, tiers 2 and 3 of infinite bandwidth and no latency: a tier 2
    of 12 blocks with a tier 3 of 400 serves every request at exactly the times of a lone
    tier 2 of 412 blocks (nothing evicted is lost in either: a prefix tier 2 would drop is
    demoted to tier 3), its tier-2 hits split between the two tiers; while a tier 2 of 12
    blocks alone drops prefixes and recomputes them (so the third tier is what keeps them)."""
    reqs = _stream(40, 9, seed=3, rate=200.0, gen_hi=400)
    cfg = ServeConfig(max_batched_tokens=512)
    runs = []
    for c2, c3 in ((12, 400), (412, 0), (12, 0)):
        tier = KvTier(_ideal(c2), "swap", blocks=c2, tier1_blocks=70, block_bytes=BB,
                      spec3=_ideal(c3) if c3 else None, blocks3=c3)
        inst, rs = swap_prefix_run(reqs, 70, tier, cfg)
        runs.append(({r.rid: (r.first_t, r.finish_t) for r in rs}, inst.pc))
    (three, p3), (big, pb_), (small, ps) = runs
    assert three == big
    assert p3.demoted3 > 0 and p3.hits3 > 0 and p3.dropped == p3.dropped2 == p3.dropped3 == 0
    assert (p3.hits1, p3.hits2 + p3.hits3, p3.misses) == (pb_.hits1, pb_.hits2, pb_.misses)
    assert ps.dropped2 > 0 and ps.misses > pb_.misses and small != big
