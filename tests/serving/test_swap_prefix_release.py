"""A swapped-out request lets go of its cached prefix (``serve --kv-offload swap --prefixes
N``; sim/serving/engine.py ``_preempt`` / ``_admit_swapped``): before, it kept the prefix
pinned in tier 1 while out, and a few swapped requests could pin enough of tier 1 that the
head of the swap queue never fit again, a deadlock the event loop ended silently. Each case
runs the event loop beside its golden twin (engine_ref.py, which keeps every block id and
its holders) and requires the same per-request times; a loop that cannot go on raises."""

from __future__ import annotations

import numpy as np
import pytest
from test_kv_three_tiers_twin import S2, S3, swap_prefix_run
from test_prefix_cache import BB, LinearSteps, _stream

from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.engine import Instance, Req, ServingStalled, run_loop
from diptych.sim.serving.engine_ref import GoldenRequest, golden_serve
from diptych.sim.serving.kv_tier import KvTier

CFG = ServeConfig(max_batched_tokens=512)


def _both(reqs, c1, c2, c3):
    """The event loop and its twin, ``swap`` over ``c1``/``c2``/``c3`` blocks (``c3`` 0: two
    tiers), 9 prefixes of 8 blocks: the instance, the requests, the twin's run."""
    tier = KvTier(S2, "swap", blocks=c2, tier1_blocks=c1, block_bytes=BB,
                  spec3=S3 if c3 else None, blocks3=c3)
    inst, rs = swap_prefix_run(reqs, c1, tier, CFG)
    g = golden_serve([GoldenRequest(i, a, p, o, pid=pid) for i, (a, p, o, pid) in
                      enumerate(reqs)], LinearSteps(), CFG, c1, block_bytes=BB,
                     tier=(S2, "swap", c1, c2), tier3=(S3, c3) if c3 else None,
                     cached_prefix_blocks=8, rng=np.random.default_rng(1))
    return inst, rs, g


@pytest.mark.parametrize("c2, c3, stalled_before", [(40, 100, True), (140, 0, True),
                                                    (40, 0, False)],
                         ids=["three tiers", "two tiers", "two tiers, prefixes dropped"])
def test_swapped_requests_no_longer_pin_their_prefixes(c2, c3, stalled_before, monkeypatch):
    """The reproduction (40 requests, 70 tier-1 blocks, 40 in tier 2, 100 in tier 3) ended
    with 3 swapped requests pinning 24 blocks, 46 free, the head needing 47, 22 requests
    unfinished; so did two tiers of 70 and 140 blocks (``stalled_before``). Now every
    request finishes, bit for bit as the twin serves them; swapped requests looked their
    prefixes up again on the way back in (more lookups than prefixed requests). With a
    40-block tier 2 alone, it drops prefixes for room, so some swapped request finds its
    prefix gone and is recomputed (the path the other two never take)."""
    reqs = _stream(40, 9, seed=3, rate=300.0, gen_hi=600)
    lost = []               # swapped requests whose prefix left every tier (a spy)
    recompute = Instance._recompute_swapped
    monkeypatch.setattr(Instance, "_recompute_swapped",
                        lambda self, r: (lost.append(r.rid), recompute(self, r)))
    inst, rs, g = _both(reqs, 70, c2, c3)
    assert (len(lost) > 0) == (not stalled_before)
    assert min(r.finish_t for r in rs) > 0 and len(g.requests) == len(rs)
    assert {r.rid: (r.first_t, r.finish_t) for r in rs} == \
        {r.rid: (r.first_t, r.finish_t) for r in g.requests}
    pc = inst.pc
    assert inst.preemptions == g.preemptions > 0
    assert (pc.hits1, pc.hits2, pc.misses, pc.hits3) == (*g.prefix_hits, g.prefix_hits3)
    prefixed = sum(1 for *_, pid in reqs if pid >= 0)
    assert pc.hits1 + pc.hits2 + pc.hits3 + pc.misses > prefixed
    assert not pc.refs or max(pc.refs.values()) == 0        # all let go at the end
    assert inst.tier.used2 == sum(pc.blocks for _ in pc.t2)   # no swapped copy left behind


def test_a_plan_that_preempts_every_runnable_request_plans_again():
    """Two tiers, ``swap``, prefixes, a 60-block first tier: a step's plan preempts the
    sequences it could run, itself included, and runs none; the scheduler plans again at
    once (admitting what is swapped out), so every request finishes (before that fix 22 of
    40 were left unfinished, silently), exactly as the twin serves them."""
    _, rs, g = _both(_stream(40, 9, seed=3, rate=200.0, gen_hi=400), 60, 24, 0)
    assert min(r.finish_t for r in rs) > 0 and len(g.requests) == len(rs)
    assert {r.rid: (r.first_t, r.finish_t) for r in rs} == \
        {r.rid: (r.first_t, r.finish_t) for r in g.requests}


def test_a_loop_that_cannot_go_on_raises_in_both_twins():
    """A prompt of 400 tokens (25 blocks) on a 10-block cache can never be admitted: the
    event loop and its twin both raise :class:`ServingStalled` (a ValueError: the CLI's exit
    2) naming what is left and the remedy, where the loop used to return silently."""
    cfg = ServeConfig(max_batched_tokens=512)
    inst = Instance(0, "mixed", LinearSteps(), cfg, chips=1, blocks=10, block_bytes=BB,
                    static_w=0.0, rng=np.random.default_rng(1))
    with pytest.raises(ServingStalled, match=r"1 requests unfinished \(1 waiting.*--tp"):
        run_loop([inst], [Req(0, 0.0, 400, 5)])
    with pytest.raises(ServingStalled, match="golden twin.*1 waiting"):
        golden_serve([GoldenRequest(0, 0.0, 400, 5)], LinearSteps(), cfg, 10, block_bytes=BB)
    assert issubclass(ServingStalled, ValueError)
