"""The KV cache across a chip's two memory tiers in ``serve`` (issue 25 item 2,
sim/serving/kv_tier.py) against independent references: an ideal second tier equals a first
tier that held everything (equivalence), the golden event loop (engine_ref.py) in both modes,
the tiers' capacities at every step (invariant), a slower tier never helps (monotonicity),
and the transfer's closed form. Step times come from the roofline double."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.serving.config import ServeConfig, Speculation
from diptych.sim.serving.engine import Instance, Req, run_loop
from diptych.sim.serving.engine_ref import GoldenRequest, golden_serve
from diptych.sim.serving.grid_timer import GridSpec
from diptych.sim.serving.kv import kv_budget
from diptych.sim.serving.kv_tier import KvTier, TierSpec, tier_spec
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, resolve_config, serve

LPDDR = load_chip("examples/chips/infer-2026-lpddr.toml")
#: llama-3-8b on the LPDDR5X design, its first tier cut to a few GiB of KV by the reserve so
#: that a small load fills it (the tier's 160 GiB stay)
CFG = dict(max_batched_tokens=1024, kv_reserve_fraction=0.935)
LOAD = Load(qps=100, prompt=P("lognormal:mean=900,sigma=0.5"), gen=P("uniform:lo=50,hi=500"),
            requests=100)


class _SameSteps(StepTimerCache):
    """The step oracle does not look at ``[dram2]`` (a step's KV is charged at the first
    tier's rate; what the second costs is the engine's, kv_tier.py): the tier variants share
    the preset's oracle, built once."""

    def get(self, replica):
        return super().get(dataclasses.replace(replica, chip=LPDDR)
                           if replica.chip.name == LPDDR.name else replica)


#: coarse vertices, no refinement: these tests need consistent step times, not accurate ones
_OC = _SameSteps("grid", roofline, GridSpec(token_ratio=1.5, batch_ratio=1.5, keys_ratio=1.5,
                                            chunk_ratio=1.5, past_ratio=1.5, refine_tol=None))


def _chip(**tier) -> object:
    return dataclasses.replace(LPDDR, dram2=dataclasses.replace(LPDDR.dram2, **tier))


def _serve(chip, mode, load=LOAD, **cfg):
    return serve(colocated(chip, "llama-3-8b"), load,
                 ServeConfig(kv_offload=mode, **{**CFG, **cfg}), oracles=_OC)


def _times(res) -> dict:
    return {r.rid: (r.first_t, r.finish_t) for r in res.reqs}


def test_transfer_and_read_closed_forms():
    s = TierSpec(capacity_bytes=1e9, bytes_per_s=50e9, latency_s=2e-7, pj_per_bit=4.0,
                 tier1_bytes_per_s=1e12, tier1_pj_per_bit=5.5)
    assert s.move_s(1e8) == pytest.approx(1e8 / 50e9 + 2e-7, rel=1e-15)
    assert s.move_j(1e8) == pytest.approx(1e8 * 8 * 9.5e-12, rel=1e-15)
    assert s.read_s(1e8) == pytest.approx(1e8 * (1 / 50e9 - 1 / 1e12) + 2e-7, rel=1e-15)
    assert s.read_j(1e8) == pytest.approx(-1e8 * 8 * 1.5e-12, rel=1e-15)
    assert s.move_s(0) == s.read_s(0) == 0.0
    spec = tier_spec(LPDDR)         # the chip file's tier: pins (no link), no latency
    assert spec.bytes_per_s == LPDDR.dram2.peak_bytes_per_s and spec.latency_s == 0.0
    assert spec.capacity_bytes == 160 * 2**30
    assert tier_spec(load_chip("infer-2026")) is None


def _instance_run(blocks, tier, oracle, cfg, block_bytes, reqs):
    inst = Instance(0, "mixed", oracle, cfg, chips=1, blocks=blocks, block_bytes=block_bytes,
                    static_w=0.0, tier=tier)
    rs = [Req(i, a, p, g) for i, (a, p, g) in enumerate(reqs)]
    run_loop([inst], rs)
    return {r.rid: (r.first_t, r.finish_t) for r in rs}, inst


def test_an_ideal_tier_equals_a_first_tier_that_held_everything():
    """Infinite bandwidth, zero latency, tier 1's energy per bit: the same pool in two tiers
    serves every request at exactly the times of one tier of the pool's size, while the tier
    does hold blocks and copy them (so the test exercises it)."""
    dep = colocated(LPDDR, "llama-3-8b")
    cfg = resolve_config(dep, ServeConfig(**CFG))
    b = kv_budget(dep.pool.replica, block_tokens=16, max_batched_tokens=1024,
                  reserve_fraction=0.93)
    c1 = b.blocks // 3
    rng = np.random.default_rng(3)
    reqs = sorted(zip(np.cumsum(rng.exponential(1 / 60, 60)).tolist(),
                      rng.integers(200, 1500, 60).tolist(), rng.integers(20, 400, 60).tolist()))
    oracle = _OC.get(dep.pool.replica)
    one, _ = _instance_run(b.blocks, None, oracle, cfg, b.block_bytes, reqs)
    ideal = TierSpec(capacity_bytes=1e12, bytes_per_s=math.inf, latency_s=0.0, pj_per_bit=5.5,
                     tier1_bytes_per_s=LPDDR.dram_bytes_per_s, tier1_pj_per_bit=5.5)
    t = KvTier(ideal, "tier", blocks=b.blocks - c1, tier1_blocks=c1, block_bytes=b.block_bytes)
    two, inst = _instance_run(b.blocks, t, oracle, cfg, b.block_bytes, reqs)
    assert two == one
    assert t.peak2 > 0 and t.moved_bytes > 0 and t.read_bytes > 0


GOLDEN_CASES = {
    "tier": ("tier", {}),
    "swap": ("swap", {}),
    "tier-whole-prompts": ("tier", dict(chunked_prefill=False, max_batched_tokens=8192)),
    "tier-speculative": ("tier", dict(speculative=Speculation(2, 0.6))),
}


@pytest.mark.parametrize("case", list(GOLDEN_CASES))
def test_fast_loop_equals_its_golden_twin_with_a_tier(case):
    """The tier's copies and reads on the dependency chain, request by request, as the plain
    loop computes them; the swap case's small tier fills (some victims recomputed); whole
    prompts and speculation (rejected tokens' blocks freed) move blocks between the tiers
    their own ways."""
    mode, extra = GOLDEN_CASES[case]
    chip = _chip(capacity_gib=0.1) if mode == "swap" else LPDDR
    res = _serve(chip, mode, load=dataclasses.replace(LOAD, requests=40), **extra)
    cfg = resolve_config(colocated(chip, "llama-3-8b"),
                         ServeConfig(kv_offload=mode, **{**CFG, **extra}))
    inst = res.instances[0]
    t = inst.tier
    g = golden_serve([GoldenRequest(r.rid, r.arrival, r.prompt, r.output)
                      for r in sorted(res.reqs, key=lambda r: r.rid)],
                     _OC.get(colocated(chip, "llama-3-8b").pool.replica), cfg,
                     inst.total_blocks, block_bytes=inst.block_bytes, rng=np.random.default_rng(
                         [cfg.seed, 1]), tier=(t.spec, mode, t.tier1_blocks, t.blocks))
    assert _times(res) == {r.rid: (r.first_t, r.finish_t) for r in g.requests}
    assert res.preemptions == g.preemptions and t.peak2 == g.tier2_peak > 0
    assert t.moved_bytes > 0
    if mode == "swap":             # the tier filled: some victims were recomputed instead
        assert t.refused > 0 and t.moved_bytes == res.swap_bytes


@pytest.mark.parametrize("mode", ["tier", "swap"])
def test_blocks_never_exceed_either_tier(mode):
    res = _serve(_chip(capacity_gib=0.2), mode, kv_block_tokens=8)
    inst = res.instances[0]
    t = inst.tier
    assert len(t.rec1) == len(inst.rec_t)                # one record per step
    assert max(t.rec1) <= t.tier1_blocks and max(t.rec2) <= t.blocks
    assert max(t.rec2) > 0
    assert all(a + b <= t.tier1_blocks + t.blocks for a, b in zip(t.rec1, t.rec2))
    kt = res.info["kv_tiers"]
    assert kt["tier2_peak_bytes"] == t.peak2 * inst.block_bytes > 0
    assert kt["moved_bytes"] == pytest.approx(t.moved_bytes)


def test_a_slower_tier_never_improves_ttft_or_tpot():
    """The tier's pins at 8533, 4266 and 1066 MT/s, then behind a slow link with latency."""
    runs = [_serve(c, "tier") for c in (_chip(), _chip(gbps_per_pin=4.266),
                                        _chip(gbps_per_pin=1.066))]
    slow = dataclasses.replace(_chip(gbps_per_pin=1.066).dram2, attach="cxl", links=1,
                               link_gb_per_s=8.0, link_latency_ns=2000.0)
    runs.append(_serve(dataclasses.replace(LPDDR, dram2=slow), "tier"))
    for a, b in zip(runs, runs[1:]):
        for k in ("mean", "p99"):
            assert b.tpot_s[k] >= a.tpot_s[k]
            assert b.ttft_s[k] >= a.ttft_s[k]
    assert runs[-1].tpot_s["mean"] > runs[0].tpot_s["mean"]


def test_the_tier_relieves_preemption_and_reports_where_kv_lived():
    none, tier = _serve(LPDDR, "none"), _serve(LPDDR, "tier")
    assert none.preemptions > 0 and tier.preemptions == 0
    assert "kv_tiers" not in none.info
    kt = tier.info["kv_tiers"]
    assert kt["mode"] == "tier" and kt["tier2_peak_bytes"] > 0 and kt["tier2_read_added_s"] > 0
    assert tier.kv[0]["tier2_blocks"] == kt["tier2_blocks"]
    # the tier's joules are in the breakdown (dram), which still sums to the total
    assert sum(tier.energy_breakdown_j.values()) == pytest.approx(tier.energy_j, rel=1e-9)
    assert kt["move_j"] > 0


def test_a_chip_without_a_tier_serves_as_before():
    """The preset without its ``[dram2]``: the default (``auto``) is ``none``, bit for bit,
    and it preempts where the tier would not have (tests/serving/test_serving_engine.py and
    the golden set hold ``none`` to the engine before the tier existed)."""
    bare = dataclasses.replace(LPDDR, dram2=None)
    a, b = _serve(bare, "auto").to_dict(), _serve(bare, "none").to_dict()
    assert a["preemptions"] > 0 and "kv_tiers" not in a["info"]
    assert a.pop("config")["kv_offload"] == "auto" and b.pop("config")["kv_offload"] == "none"
    assert a == b


@pytest.mark.parametrize("kw, word", [
    (dict(capacity_bytes=0.0), "capacity_bytes"), (dict(capacity_bytes=-1.0), "capacity_bytes"),
    (dict(bytes_per_s=0.0), "bytes_per_s"), (dict(latency_s=-1e-9), "latency_s"),
    (dict(pj_per_bit=float("nan")), "pj_per_bit")])
def test_bad_tier_sizes_are_refused_naming_the_field(kw, word):
    base = dict(capacity_bytes=1e9, bytes_per_s=1e10, latency_s=0.0, pj_per_bit=4.0,
                tier1_bytes_per_s=1e12, tier1_pj_per_bit=5.5)
    with pytest.raises(ValueError, match=word):
        TierSpec(**{**base, **kw})
    with pytest.raises(ValueError, match="blocks"):
        KvTier(TierSpec(**base), "tier", blocks=0, tier1_blocks=10, block_bytes=1.0)


def test_offload_without_a_tier_exits_2_naming_it(cli):
    r = cli("serve", "--chip", "h100", "--model", "llama-3-8b", "--qps", "1", "--requests",
            "5", "--kv-offload", "tier")
    assert r.exit_code == 2 and "--kv-offload tier" in r.output and "h100" in r.output
    r = cli("serve", "--chip", LPDDR_PATH, "--model", "llama-3-8b", "--qps", "1",
            "--requests", "5", "--kv-offload", "swap", "--preemption", "swap")
    assert r.exit_code == 2 and "--kv-offload swap" in r.output


LPDDR_PATH = "examples/chips/infer-2026-lpddr.toml"
