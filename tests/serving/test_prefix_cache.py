"""The tiered prefix cache of ``serve`` (issue 25 item 2, sim/serving/prefix_cache.py)
against independent references: its LRU order against a plain time-stamped list, the golden
event loop (engine_ref.py) request by request, an ideal second tier against a first tier that
never evicts (equivalence), and a second-tier hit's copy in closed form against a recompute.
Step times come from a linear cost model (no chip), except the end-to-end run."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from diptych.sim.serving.config import ServeConfig, Speculation
from diptych.sim.serving.engine import Instance, Req, run_loop
from diptych.sim.serving.engine_ref import GoldenRequest, golden_serve
from diptych.sim.serving.kv_tier import KvTier, TierSpec
from diptych.sim.serving.prefix_cache import PrefixCache
from diptych.sim.serving.step_time import StepCost

BB = 2.0 ** 20                    # bytes per block per chip


class LinearSteps:
    """A step costs 50 µs + 5 µs per prompt token + 1 ns per key attended (prefill past
    included; about an 8B model's prefill on one chip): enough for order and contention,
    independent of any chip."""

    def cost(self, step) -> StepCost:
        pf = sum(c for c, _ in step.prefill)
        keys = step.decode_keys + sum(c * p for c, p in step.prefill) // 64
        s = 50e-6 + 5e-6 * pf + 1e-9 * keys
        return StepCost(s, s * 100.0, ())


def _spec(bw=50e9, lat=2e-6, cap=1e12):
    return TierSpec(capacity_bytes=cap, bytes_per_s=bw, latency_s=lat, pj_per_bit=4.0,
                    tier1_bytes_per_s=5e12, tier1_pj_per_bit=5.5)


def _engine(reqs, blocks, *, count, pb, spec=None, t2=0, cfg=None, mode="swap"):
    """The event loop on ``blocks`` first-tier blocks (``tier``: a pool of them + ``t2``)."""
    cfg = cfg or ServeConfig(max_batched_tokens=512)
    tier = KvTier(spec, mode, blocks=t2, tier1_blocks=blocks, block_bytes=BB) if spec else None
    pc = PrefixCache(count, pb, BB, store=tier if mode == "swap" else None)
    pool = blocks + (t2 if mode == "tier" else 0)
    inst = Instance(0, "mixed", LinearSteps(), cfg, chips=1, blocks=pool, block_bytes=BB,
                    static_w=0.0, tier=tier, prefix_cache=pc, rng=np.random.default_rng(1))
    rs = []
    for i, (a, p, g, pid) in enumerate(reqs):
        r = Req(i, a, p, g)
        r.pid = pid
        rs.append(r)
    run_loop([inst], rs)
    return {r.rid: (r.first_t, r.finish_t) for r in rs}, inst


def _golden(reqs, blocks, *, pb, spec=None, t2=0, cfg=None, mode="swap"):
    cfg = cfg or ServeConfig(max_batched_tokens=512)
    pool = blocks + (t2 if mode == "tier" else 0)
    g = golden_serve([GoldenRequest(i, a, p, o, pid=pid) for i, (a, p, o, pid) in
                      enumerate(reqs)], LinearSteps(), cfg, pool, block_bytes=BB,
                     tier=(spec, mode, blocks, t2) if spec else None,
                     cached_prefix_blocks=pb, rng=np.random.default_rng(1))
    return {r.rid: (r.first_t, r.finish_t) for r in g.requests}, g


def _stream(n, count, seed, rate=40.0, pb=8, gen_hi=80):
    """Poisson arrivals; prompts of a ``pb``-block prefix (16-token blocks) and a rest; one
    request in ten carries none."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    rest = rng.integers(20, 300, n)
    gen = rng.integers(5, gen_hi, n)
    pid = rng.integers(0, count, n)
    pid[rng.random(n) < 0.1] = -1
    return [(float(a), int(pb * 16 + x), int(g), int(p)) for a, x, g, p in zip(t, rest, gen, pid)]


def test_lru_order_matches_a_plain_reference():
    """Random acquires, releases, donations and reclaims: the entries evicted, in order, and
    where every prefix is, equal a reference that stamps each release with a clock and evicts
    the smallest stamp (a tier of room for two entries, the oldest stored dropped first)."""
    rnd = random.Random(7)
    pb = 3
    store = KvTier(_spec(), "swap", blocks=2 * pb, tier1_blocks=100, block_bytes=BB)
    pc = PrefixCache(6, pb, BB, store=store)
    refs: dict[int, int] = {}
    stamp: dict[int, int] = {}
    tier2: dict[int, int] = {}
    clock = 0
    for _ in range(3000):
        op = rnd.choice("arrd")
        pid = rnd.randrange(6)
        if op == "a" and (pid in refs or pid in tier2):          # a hit in either tier
            assert pc.lookup(pid) == ("hit1" if pid in refs else "hit2")
            pc.acquire(pid)
            tier2.pop(pid, None)
            refs[pid] = refs.get(pid, 0) + 1
        elif op == "d" and pid not in refs and pid not in tier2:  # a miss computed it
            assert pc.lookup(pid) == "miss" and pc.donate(pid)
            refs[pid] = 1
        elif op == "r" and refs.get(pid):
            pc.release(pid)
            refs[pid] -= 1
            if refs[pid] == 0:
                clock += 1
                stamp[pid] = clock
        elif op == "a" or op == "d":
            continue
        else:                                                   # reclaim some blocks
            short = rnd.randrange(1, 3 * pb)
            unheld = sorted((p for p in refs if refs[p] == 0), key=stamp.get)
            want, gone = [], 0
            if len(unheld) * pb >= short:
                for p in unheld:
                    if gone >= short:
                        break
                    want.append(p)
                    gone += pb
            before = dict(pc.refs)
            freed, _ = pc.reclaim(short) if pc.evictable() >= short else (0, 0.0)
            assert freed == gone and sorted(set(before) - set(pc.refs)) == sorted(want)
            for p in want:                                      # into tier 2, LRU dropped
                del refs[p]
                clock += 1
                if len(tier2) == 2:
                    del tier2[min(tier2, key=tier2.get)]
                tier2[p] = clock
        assert set(pc.refs) == set(refs) and set(pc.t2) == set(tier2)
        assert list(pc.lru) == sorted((p for p in refs if refs[p] == 0), key=stamp.get)
    assert pc.hits1 and pc.hits2 and pc.dropped2 and pc.stored


GOLDEN = {
    "drop (no tier)": dict(spec=None),
    "tier 2, room for three": dict(spec=_spec(), t2=3 * 8),
    "tier 2, whole prompts": dict(spec=_spec(), t2=3 * 8,
                                  cfg=ServeConfig(max_batched_tokens=4096,
                                                  chunked_prefill=False)),
    "pooled tier": dict(spec=_spec(), t2=30, mode="tier"),
    "pooled tier, speculative": dict(spec=_spec(), t2=30, mode="tier", cfg=ServeConfig(
        max_batched_tokens=512, speculative=Speculation(3, 0.7))),
}


@pytest.mark.parametrize("case", list(GOLDEN))
def test_fast_loop_equals_its_golden_twin_with_prefixes(case):
    """Nine prefixes of 8 blocks on a 70-block cache: hits, misses, duplicates computed
    while another copy is in flight, evictions (to tier 2 and dropped), preemptions (swapped
    to tier 2 beside the prefixes while it has room)."""
    kw = GOLDEN[case]
    reqs = _stream(120, 9, seed=3, rate=100.0, gen_hi=300)
    fast, inst = _engine(reqs, 70, count=9, pb=8, **kw)
    slow, g = _golden(reqs, 70, pb=8, **kw)
    assert fast == slow
    pc = inst.pc
    assert (pc.hits1, pc.hits2, pc.misses) == g.prefix_hits
    assert pc.hits1 > 0 and pc.misses > 0 and pc.evicted > 0 and inst.preemptions > 0
    if kw["spec"] is not None:       # pooled: hits on prefixes placed in tier 2, copied up
        assert pc.hits2 > 0 and inst.tier.peak2 == g.tier2_peak > 0


def test_an_ideal_second_tier_equals_a_first_tier_that_never_evicts():
    """Infinite bandwidth, no latency: every request starts and ends exactly when a cache
    big enough to keep every prefix serves it, while the small one does evict to tier 2
    and hit there (so the test exercises it)."""
    reqs = _stream(80, 12, seed=5, rate=15.0)
    small, a = _engine(reqs, 60, count=12, pb=8, spec=_spec(bw=math.inf, lat=0.0), t2=200)
    big, b = _engine(reqs, 10_000, count=12, pb=8)
    assert small == big
    assert a.pc.hits2 > 0 and a.pc.evicted > 0 and a.preemptions == 0
    assert b.pc.evicted == 0 and b.pc.hits1 == a.pc.hits1 + a.pc.hits2


def _revisit(spec, t2):
    """Prefix 0, then prefixes 1..4 one after the other (each evicts the oldest from a cache
    with room for one request and one entry), then prefix 0 again, alone, at t = 10 s."""
    reqs = [(k * 1.0, 8 * 16 + 100, 10, k % 5) for k in range(5)] + [(10.0, 8 * 16 + 100, 10, 0)]
    times, inst = _engine(reqs, 8 + 8 + 8, count=5, pb=8, spec=spec, t2=t2)
    return times[5][0] - 10.0, inst


def test_a_second_tier_hit_pays_the_copy_back_instead_of_the_recompute():
    """The revisit's TTFT: the ideal tier's plus two copies of 8 blocks at the tier's rate
    and latency, exactly (its entry loaded back, and the least recently used entry stored to
    make room: the first tier is full of cached prefixes by then, evicted only when needed);
    below the recompute's (no tier: a miss) when the copies are the faster."""
    ideal, a = _revisit(_spec(bw=math.inf, lat=0.0), 40)
    link = _spec(bw=64e9, lat=2e-6)          # PCIe Gen5 x16-like
    hit2, b = _revisit(link, 40)
    miss, c = _revisit(None, 0)
    assert a.pc.hits2 == b.pc.hits2 == 1 and c.pc.hits2 == 0 and c.pc.misses == 6
    copy = link.move_s(8 * BB)
    assert hit2 == pytest.approx(ideal + 2 * copy, rel=1e-12)
    recompute = miss - ideal                 # the prefix's prefill chunk, on the same model
    assert 2 * copy < recompute and hit2 < miss
    crawl = _spec(bw=1e9, lat=2e-6)          # a tier slower than recomputing: the hit loses
    slow, _ = _revisit(crawl, 40)
    assert slow == pytest.approx(ideal + 2 * crawl.move_s(8 * BB), rel=1e-12) and slow > miss
    # prefixes 0, 1, 2, 3 evicted (by 2, 3, 4 and the revisit): stored, or dropped
    assert b.pc.stored == b.pc.evicted == c.pc.evicted == c.pc.dropped == 4
    kt = b.tier
    assert kt.moved_bytes == (b.pc.stored + 1) * 8 * BB           # stores + the load back
    assert b.pc.to_dict(1)["tier2_load_bytes"] == 8 * BB


def test_end_to_end_reports_the_cache_and_default_is_unchanged():
    """``serve`` on a chip with a tier (the roofline double's step times): ``--prefixes``
    draws one of N prefixes per request from its own stream (the arrivals and lengths do
    not move), reports hits per tier; the default run has no prefix cache."""
    from roofline_double import roofline
    from diptych.arch import load_chip
    from diptych.sim.serving.grid_timer import GridSpec
    from diptych.sim.serving.requests import parse_length as P
    from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
    chip = load_chip("examples/chips/infer-2026-lpddr.toml")
    oc = StepTimerCache("grid", roofline, GridSpec(token_ratio=1.5, batch_ratio=1.5,
                                                   keys_ratio=1.5, chunk_ratio=1.5,
                                                   past_ratio=1.5, refine_tol=None))
    load = Load(qps=40, prompt=P("uniform:lo=600,hi=1400"), gen=P("uniform:lo=20,hi=200"),
                requests=60)
    base = dict(max_batched_tokens=1024, kv_reserve_fraction=0.945, kv_offload="swap",
                prefix_share=0.5)
    res = serve(colocated(chip, "llama-3-8b"), load, ServeConfig(prefixes=12, **base),
                oracles=oc)
    pcd = res.info["prefix_cache"]
    carried = sum(1 for r in res.reqs if r.pid >= 0)       # a recomputed one looks again
    assert carried <= pcd["hits_tier1"] + pcd["hits_tier2"] + pcd["misses"] <= carried + sum(
        r.preemptions for r in res.reqs if r.pid >= 0)
    assert carried > len(res.reqs) // 2
    assert pcd["evicted"] > 0 and pcd["hits_tier2"] > 0
    assert res.info["kv_tiers"]["moved_bytes"] >= pcd["tier2_store_bytes"] + \
        pcd["tier2_load_bytes"]
    one = serve(colocated(chip, "llama-3-8b"), load, ServeConfig(prefixes=0, **base),
                oracles=oc)
    assert "prefix_cache" not in one.info
    assert sorted((r.arrival, r.prompt, r.output) for r in one.reqs) == \
        sorted((r.arrival, r.prompt, r.output) for r in res.reqs)


@pytest.mark.parametrize("args, word", [
    (["--prefixes", "-1", "--prefix-share", "0.5"], "prefixes must be a non-negative"),
    (["--prefixes", "4"], "--prefix-share"),
    (["--prefixes", "4", "--prefix-share", "0.001"], "under one 16-token block"),
    (["--prefixes", "4", "--prefix-share", "0.5", "--decode-chip", "infer-2026"],
     "colocated replicas only"),
])
def test_bad_prefix_options_exit_2_naming_them(cli, args, word):
    r = cli("serve", "--chip", "infer-2026", "--model", "llama-3-8b", "--qps", "2",
            "--requests", "4", *args)
    assert r.exit_code == 2 and word in r.output, r.output


def test_bad_cache_sizes_are_refused():
    with pytest.raises(ValueError, match="count"):
        PrefixCache(0, 4, BB)
    with pytest.raises(ValueError, match="blocks"):
        PrefixCache(2, 0, BB)
    with pytest.raises(ValueError, match="prefixes must be"):
        ServeConfig(prefixes=True, prefix_share=0.5)
    assert dataclasses.replace(ServeConfig(), prefix_share=0.5).prefixes == 0
