"""KV prefetch in ``serve`` (``--kv-prefetch``; docs/serving.md, "KV prefetch"): the copies a
step needs from the slower tier start during the previous step, which hides up to its own
device time less the link time its tier reads take. Against the run without prefetch (the
same requests all at t = 0, so the same steps): every step is shorter by exactly
``min(copies, previous window)`` (the closed form from that run's own records), never longer;
swap-ins are hidden the same way; off, nothing changes."""

from __future__ import annotations

import numpy as np
import pytest

from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.engine import Instance, Req, run_loop
from diptych.sim.serving.kv_tier import KvTier, TierSpec
from diptych.sim.serving.step_time import StepCost

BB = 2.0 ** 20                    # bytes per block per chip


class Steps:
    """50 µs + 5 µs per prompt token + 1 ns per key attended; records each step's seconds."""

    def __init__(self):
        self.seen: list[float] = []

    def cost(self, step) -> StepCost:
        pf = sum(c for c, _ in step.prefill)
        keys = step.decode_keys + sum(c * p for c, p in step.prefill) // 64
        s = 50e-6 + 5e-6 * pf + 1e-9 * keys
        self.seen.append(s)
        return StepCost(s, s * 100.0, ())


SPEC = TierSpec(capacity_bytes=1e12, bytes_per_s=20e9, latency_s=2e-6, pj_per_bit=4.0,
                tier1_bytes_per_s=5e12, tier1_pj_per_bit=5.5)


def _reqs(n=16, seed=3):
    rng = np.random.default_rng(seed)
    return [(0.0, int(p), int(g)) for p, g in zip(rng.integers(200, 700, n),
                                                 rng.integers(40, 160, n))]


def _run(mode, prefetch, tier1=60, t2=500, **cfg):
    cfg = ServeConfig(max_batched_tokens=512, kv_prefetch=prefetch, **cfg)
    tier = KvTier(SPEC, mode, blocks=t2, tier1_blocks=tier1, block_bytes=BB)
    steps = Steps()
    inst = Instance(0, "mixed", steps, cfg, chips=1,
                    blocks=tier1 + (t2 if mode == "tier" else 0), block_bytes=BB,
                    static_w=0.0, tier=tier)
    rs = [Req(i, a, p, g) for i, (a, p, g) in enumerate(_reqs())]
    run_loop([inst], rs)
    return inst, steps, rs


def test_each_step_is_shorter_by_the_copies_the_previous_step_hides():
    a, sa, _ = _run("tier", False)
    b, sb, _ = _run("tier", True)
    assert list(a.rec_dec) == list(b.rec_dec) and list(a.rec_pf) == list(b.rec_pf)
    assert all(r.finish_t > 0 for r in _run("tier", True)[2])
    assert list(a.tier.rec_move_s) == list(b.tier.rec_move_s)
    moves, busy, dev = a.tier.rec_move_s, a.tier.rec_busy_s, sa.seen
    reads = [x - d - m for x, d, m in zip(a.rec_dt, dev, moves)]   # what the reads added
    window, hidden = 0.0, []
    for i in range(len(dev)):           # the reference: the closed form, step by step
        hidden.append(min(moves[i], window))
        window = max(0.0, dev[i] + reads[i] - busy[i])
    assert sum(moves) > 0 and sum(hidden) > 0
    for i, (x, y) in enumerate(zip(a.rec_dt, b.rec_dt)):
        assert x - y == pytest.approx(hidden[i], rel=1e-9, abs=1e-15)
        assert y <= x
    assert b.prefetch_hidden_s == pytest.approx(sum(hidden), rel=1e-12)
    assert b.prefetch_hidden_s + b.prefetch_exposed_s == pytest.approx(sum(moves), rel=1e-12)


def test_swap_ins_are_hidden_and_no_request_finishes_later():
    (a, _, ra), (b, _, rb) = _run("swap", False, tier1=80), _run("swap", True, tier1=80)
    assert a.preemptions > 0 and list(a.rec_dec) == list(b.rec_dec)
    assert b.prefetch_hidden_s > 0
    assert all(y <= x for x, y in zip(a.rec_dt, b.rec_dt))
    assert all(q.finish_t <= p.finish_t for p, q in zip(ra, rb))


def test_prefetch_off_is_the_engine_as_before():
    a, _, ra = _run("tier", False)
    assert a.prefetch_hidden_s == a.prefetch_exposed_s == 0.0
    with pytest.raises(ValueError, match="kv_prefetch"):
        ServeConfig(kv_prefetch=1)
