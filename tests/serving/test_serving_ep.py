"""Expert-parallel MoE serving (sim/serving/ep.py) against independent references: the
all-to-all's closed form beside the dense-equivalent step, the grouped GEMMs' closed-form
shapes, the golden event loop (its own dealing of a step to the ranks), monotonicity in the
skew, a hand-dealt step, and bad input exiting 2. Step times come from the roofline double."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from roofline_double import roofline

from diptych.sim.run import Scenario
from diptych.sim.run.summed import block_costs, combine_parts
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.engine_ref import GoldenRequest, busiest_rank_share, golden_serve
from diptych.sim.serving.ep import EpSpec, ep_replica, eplb_skew, rank_step
from diptych.sim.serving.power import StepPowerLimit
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import (Deployment, Load, Pool, StepTimerCache, resolve_config,
                                       serve)
from diptych.sim.serving.step_time import DirectStepTimer, make_replica
from diptych.workloads import load_model
from diptych.workloads.graph import Workload
from diptych.workloads.params import param_count
from diptych.workloads.ops import Collective
from diptych.workloads.program import Block
from diptych.workloads.serving_step import Step

MOE = "qwen3-30b-a3b"            # 128 experts, top-8, 48 MoE layers


def _replica(model, spec: EpSpec, **kw):
    base = make_replica("h100", model, Scenario.of(phase="decode", tp=spec.tp, execution="sum",
                                                   **kw), fixed_costs=False)
    return ep_replica(dataclasses.replace(base, overlap=False), spec)


@pytest.mark.parametrize("attention", ["dp", "tp"])
def test_one_expert_per_rank_is_the_dense_step_plus_the_all_to_all_closed_form(attention):
    """Eight experts, top-8 (every token uses every expert: no sampling noise), EP 8: each
    rank runs one expert over the eight ranks' tokens, T·k rows; the step is the same step
    without its all-to-alls plus, per MoE layer, a dispatch and a combine of T·k·d
    activations: (n−1)/n of them over the chip's links (every pair at once, as NCCL's grouped
    sends run) at the share of their sustained bandwidth its point-to-point table gives, plus
    that table's measured per-call latency (docs/cluster.md "Collectives")."""
    m = dataclasses.replace(load_model(MOE), experts=8, experts_per_token=8)
    n = 8
    r = _replica(m, EpSpec(n, attention))
    step = Step(decode_batch=8 * 6, decode_keys=8 * 6 * 700, prefill=((256, 0),) * 8)
    share = rank_step(step, n) if attention == "dp" else step
    tokens = share.tokens if attention == "dp" else -(-step.tokens // n)   # one rank's own
    w = r.step_workload(share)
    gemms = [op for b in w.blocks for op in b.ops if op.name.startswith("experts_gate_up")]
    assert {(g.m, g.batch, g.n) for g in gemms} == {(tokens * 8, 1,
                                                     2 * m.moe_intermediate_size)}
    dense = Workload(w.phase, tuple(Block.of_ops(b.name, b.repeat, tuple(
        op for op in b.ops if not (isinstance(op, Collective) and op.name.startswith("ep_"))))
        for b in w.blocks), tokens=w.tokens, batch=w.batch)
    s0, _ = combine_parts(block_costs(dense, r.chip, roofline, fixed_costs=False), {}, {},
                          overlap=False)
    ic, p2p = r.chip.interconnect, r.chip.collectives.p2p   # h100: NCCL's measured call
    a2a = ((n - 1) / n * tokens * 8 * m.hidden_size * r.precision.a_bytes
           / (ic.sustained_bytes_per_s_per_direction * p2p.scale_up_bus_fraction)
           + p2p.base_latency_us * 1e-6)
    got = DirectStepTimer(r, roofline).cost(share).seconds
    assert got == pytest.approx(s0 + 2 * m.moe_layers * a2a, rel=1e-9)


@pytest.mark.parametrize("attention", ["dp", "tp"])
def test_skew_never_makes_a_step_faster(attention):
    steps = [Step(decode_batch=64, decode_keys=64 * 900),
             Step(decode_batch=16, decode_keys=16 * 2000, prefill=((1024, 0), (300, 500))),
             Step(prefill=((4096, 0),))]
    times = []
    for skew in (0.0, 0.1, 0.4, 1.0, 3.0):
        r = _replica(MOE, EpSpec(8, attention, skew=skew))
        t = DirectStepTimer(r, roofline)
        times.append([t.cost(rank_step(s, 8) if attention == "dp" else s).seconds
                      for s in steps])
    for a, b in zip(times, times[1:]):
        assert all(y >= x for x, y in zip(a, b))
    assert all(y > x for x, y in zip(times[0], times[-1]))      # and it does cost


def test_redundant_experts_spread_the_load():
    s = [eplb_skew(0.6, 128, r) for r in (0, 8, 32, 128)]
    assert s[0] == 0.6
    assert s == sorted(s, reverse=True) and s[-1] < 0.5 * s[0]
    assert eplb_skew(0.0, 128, 32) == 0.0


def test_a_step_dealt_to_four_ranks_by_hand():
    # decodes 3, 3, 2, 2; chunks 500 -> rank 2 (2 tokens, the first of the fewest),
    # 300 -> rank 3, 200 -> rank 0 (3 tokens, before rank 1): ranks hold 203, 3, 502, 302
    step = Step(decode_batch=10, decode_keys=10 * 401 + 3,
                prefill=((200, 0), (500, 64), (300, 0)))
    want = Step(decode_batch=2, decode_keys=-(-(10 * 401 + 3) * 2 // 10), prefill=((500, 64),))
    assert rank_step(step, 4) == want
    assert busiest_rank_share(step, 4) == want
    assert rank_step(step, 1) is step


def _ep_dep(spec, model=MOE):
    return Deployment(pool=Pool(ep_replica(make_replica("h100", model, Scenario.of(
        phase="decode", tp=spec.tp, execution="sum")), spec)))


@pytest.mark.parametrize("chunked", [True, False])
def test_ep_serve_agrees_with_its_golden_twin(chunked):
    dep = _ep_dep(EpSpec(4, "dp", redundant_experts=4, skew=0.3))
    cfg = ServeConfig(chunked_prefill=chunked, max_batched_tokens=2048)
    load = Load(qps=30, prompt=P("lognormal:mean=700,sigma=0.6"), gen=P("uniform:lo=1,hi=120"),
                requests=60)
    oc = StepTimerCache("grid", roofline)
    res = serve(dep, load, cfg, oracles=oc)
    inst = res.instances[0]
    r = dep.pool.replica
    rcfg = dataclasses.replace(resolve_config(dep, cfg), max_batched_tokens=2048 * 4,
                               max_batch=1024 * 4)
    g = golden_serve([GoldenRequest(q.rid, q.arrival, q.prompt, q.output, q.shared)
                      for q in sorted(res.reqs, key=lambda q: q.rid)],
                     oc.get(r).inner, rcfg, inst.total_blocks, layout=inst.layout,
                     rng=np.random.default_rng([cfg.seed, 1]), ranks=4,
                     experts=oc.get(r).experts,
                     power=StepPowerLimit(inst.power.chip) if inst.power else None)
    assert {q.rid: (q.first_t, q.finish_t) for q in res.reqs} == \
        {q.rid: (q.first_t, q.finish_t) for q in g.requests}
    assert inst.total_blocks == 4 * res.kv[0]["blocks"]      # four ranks' caches
    assert res.chips == 4 and res.info["pools"][0]["ep"] == 4
    assert res.info["pools"][0]["expert_slots"] == 132


def test_ep_weights_are_split_and_the_dense_part_replicated():
    m = load_model(MOE)
    dp = _ep_dep(EpSpec(4, "dp"))
    tp = _ep_dep(EpSpec(4, "tp"))
    from diptych.sim.serving.kv import kv_budget
    b = {k: kv_budget(d.pool.replica, block_tokens=16, max_batched_tokens=2048,
                      reserve_fraction=0.1) for k, d in (("dp", dp), ("tp", tp))}
    w = dp.pool.replica.precision.w_bytes
    d, e, f = m.hidden_size, m.experts, m.moe_intermediate_size
    experts = m.moe_layers * e * 3 * d * f            # gate, up, down of every expert
    # DP attention: a quarter of the experts, everything else whole; TP attention: whole
    # experts ÷ 4 hold the bytes of every expert ÷ 4, so a plain TP-4 replica's weights
    assert b["dp"].weights_bytes == pytest.approx((param_count(m) - experts * 3 / 4) * w,
                                                  rel=1e-6)
    tp4 = make_replica("h100", m, Scenario.of(phase="decode", tp=4))
    assert b["tp"].weights_bytes == pytest.approx(
        kv_budget(tp4, block_tokens=16, max_batched_tokens=2048,
                  reserve_fraction=0.1).weights_bytes, rel=1e-12)


BASE = ("serve", "--chip", "h100", "--model", MOE, "--requests", 20, "--qps", 4,
        "--prompt", 600, "--gen", 20, "--execution", "sum")


def test_ep_runs_colocated_disaggregated_and_speculative(cli):
    r = cli(*BASE, "--ep", 4, "--redundant-experts", 4, "--moe-skew", 0.2, "--json")
    assert r.exit_code == 0, r.output
    pool = json.loads(r.output)["info"]["pools"][0]
    assert (pool["ep"], pool["attention"], pool["chips"], pool["expert_slots"]) == \
        (4, "dp", 4, 132)
    assert 0 < pool["moe_skew"] < 0.2
    from diptych.tools.serve_report import setup_rows
    info = json.loads(r.output)["info"]
    # the result states its parallelism per pool as EP, not as the ranks' TP 1 (item 5)
    assert dict(setup_rows(info))["parallelism"] == \
        "h100, 1 replica x EP 4 (dp attention) = 4 chips"
    r = cli(*BASE[:3], "--prefill-chips", 4, "--decode-chips", 8, "--prefill-ep", 4,
            "--decode-ep", 8, "--ep-attention", "tp", *BASE[3:], "--json")
    assert r.exit_code == 0, r.output
    pools = json.loads(r.output)["info"]["pools"]
    assert [(p["role"], p["ep"], p["attention"], p["chips"]) for p in pools] == \
        [("prefill", 4, "tp", 4), ("decode", 8, "tp", 8)]
    assert dict(setup_rows(json.loads(r.output)["info"]))["parallelism"] == (
        "prefill: h100, 1 replica x EP 4 (tp attention) = 4 chips; "
        "decode: h100, 1 replica x EP 8 (tp attention) = 8 chips")
    r = cli("serve", "--chip", "h100", "--model", "glm-4.5-air", "--ep", 4, "--qps", 2,
            "--requests", 8, "--prompt", 300, "--gen", 8, "--speculative", "draft=mtp,k=1",
            "--execution", "sum", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["info"]["expected_tokens_per_verify"] == pytest.approx(1.85)


@pytest.mark.parametrize("args,match", [
    (("--ep", 3), "--ep 3 must divide the expert slots"),
    (("--ep", 8, "--redundant-experts", 3), "128 experts \\+ 3 redundant = 131"),
    (("--model", "llama-3-8b", "--ep", 2), "--ep 2 needs a mixture-of-experts model"),
    (("--ep", 4, "--tp", 2), "--tp 2 with --ep 4"),
    (("--redundant-experts", 4), "--redundant-experts 4 applies to expert parallelism"),
    (("--ep", 4, "--export-profile", "out"), "does not export an expert-parallel one"),
    (("--ep", 1, "--moe-skew", 0.5), "--moe-skew 0.5 sets the busiest"),
    (("--prefill-chips", 4, "--decode-chips", 8, "--ep", 8), "expert-parallel degree 8 "
     "\\(--ep / --prefill-ep\\) must divide --prefill-chips \\(4\\).*EP larger than the pool"),
])
def test_bad_ep_input_exits_2_naming_the_value(cli, args, match):
    base = list(BASE)
    if "--model" in args:
        base[base.index("--model") + 1] = args[args.index("--model") + 1]
        args = args[2:]
    r = cli(*base, *args)
    assert r.exit_code == 2, r.output
    assert re.search(match, r.output), r.output


@pytest.mark.parametrize("extra,what", [
    (("--kv-offload", "tier"), "--kv-offload tier"),
    (("--prefixes", 4, "--prefix-share", 0.5), "--prefixes"),
])
def test_tiers_and_prefix_cache_beside_dp_attention_ranks_exit_2(cli, extra, what):
    """A second memory tier and the tiered prefix cache are one engine-wide pool; beside
    data-parallel attention ranks (a cache each) they are refused by name, not mis-split."""
    r = cli("serve", "--chip", "examples/chips/infer-2026-lpddr.toml", "--model",
            "qwen3-30b-a3b", "--ep", 2, "--requests", 4, "--qps", 1, *extra)
    assert r.exit_code == 2, r.output
    assert f"{what} with expert parallelism's data-parallel attention (--ep 2)" in r.output
