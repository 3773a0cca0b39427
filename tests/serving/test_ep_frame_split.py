"""Data-parallel attention's mixed steps (issue 24 item 1 leftover; sim/serving/ep.py): when
the ranks' tokens differ, the busiest rank's own ops run over its own tokens while its experts'
grouped GEMMs see the union's pairs (the frame split), and one prompt chunk takes at most one
rank's token budget (each DP rank schedules its own requests). Closed forms on small cases,
step times from the roofline double."""

from __future__ import annotations

import dataclasses

import pytest
from roofline_double import roofline

from diptych.arch.runtime import load_runtime
from diptych.sim.run import Scenario
from diptych.sim.run.summed import block_costs, combine_parts
from diptych.sim.serving.config import ServeConfig
from diptych.sim.serving.ep import EXACT_TOKENS, EpSpec, ExpertPart, ep_replica, rank_step
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Deployment, Load, Pool, StepTimerCache, serve
from diptych.sim.serving.step_time import DirectStepTimer, make_replica
from diptych.workloads import load_model
from diptych.workloads.graph import Workload
from diptych.workloads.program import Block
from diptych.workloads.serving_step import Step

MOE = "qwen3-30b-a3b"


def _replica(m, spec):
    base = make_replica("h100", m, Scenario.of(phase="decode", tp=spec.tp, execution="sum"),
                        fixed_costs=False)
    return ep_replica(dataclasses.replace(base, overlap=False), spec)


def _experts(name: str) -> bool:
    base = name.split(".")[0]
    return base.startswith("experts_") and base not in ("experts_permute", "experts_combine")


def test_a_lone_chunk_beside_decodes_charges_the_experts_the_mean_ranks_pairs():
    """Eight experts, top-8 (every token to every expert: no sampling noise), EP 4 with DP
    attention: 8 decodes and one 40-token chunk deal as 2 + 2 + 2 + (2 + 40). The busiest
    rank runs its attention, router, permutes and all-to-alls over its own 42 tokens, but each
    of its two experts sees the union's 48 tokens (T·k/ep = 48·8/4 = 96 pairs, mean rank's
    ⌈48/4⌉ = 12 tokens): the step equals the busiest rank's workload with its expert GEMMs
    swapped for those of a 12-token rank, timed in one piece."""
    m = dataclasses.replace(load_model(MOE), experts=8, experts_per_token=8)
    r = _replica(m, EpSpec(4, "dp"))
    step = Step(decode_batch=8, decode_keys=8 * 301, prefill=((40, 0),))
    share = rank_step(step, 4)
    assert share.tokens == 42 and share.prefill == ((40, 0),)
    oc = StepTimerCache("direct", roofline)
    got = oc.get(r).cost(step)
    # the reference: one workload, the busiest rank's step with the mean rank's experts
    own = r.step_workload(share)
    mean = r.frame_workload(12, 1)
    mean_ops = {b.name: [op for op in b.ops if _experts(op.name)] for b in mean.blocks}
    blocks = []
    for b in own.blocks:
        ops = list(b.ops)
        idx = [i for i, op in enumerate(ops) if _experts(op.name)]
        if idx:
            ops = ops[:idx[0]] + mean_ops[b.name] + ops[idx[-1] + 1:]
        blocks.append(Block.of_ops(b.name, b.repeat, tuple(ops)))
    gate = [op for op in mean_ops["layers (moe)"] if op.name.startswith("experts_gate_up")]
    assert [(g.m, g.batch) for g in gate] == [(48, 2)]     # 2 experts x the union's 48 rows
    ref = Workload(own.phase, tuple(blocks), tokens=own.tokens, batch=own.batch)
    s, e = combine_parts(block_costs(ref, r.chip, roofline, fixed_costs=False), {}, {},
                         overlap=False)
    assert got.seconds == pytest.approx(s, rel=1e-12)
    assert got.energy_j == pytest.approx(e, rel=1e-12)
    # the old bound (the busiest rank's own 42 tokens' pairs) is higher; a balanced step is
    # the rank's step unchanged
    assert got.seconds < DirectStepTimer(r, roofline).cost(share).seconds
    even = Step(decode_batch=8, decode_keys=8 * 301, prefill=((40, 0),) * 4)
    assert oc.get(r).cost(even) == DirectStepTimer(r, roofline).cost(rank_step(even, 4))


def test_the_expert_part_is_exact_on_its_vertices_and_linear_between():
    r = _replica(load_model(MOE), EpSpec(4, "dp"))
    grid, exact = ExpertPart(r, roofline), ExpertPart(r, roofline, exact=True)
    for t in (1, 17, EXACT_TOKENS, 69, 256, 4096):       # 69 = ⌊64·2^(1/8)⌋, a vertex
        assert grid.cost(t) == exact.cost(t)
    a, b, mid = exact.cost(69), exact.cost(76), grid.cost(72)     # 76 = ⌊64·2^(2/8)⌋
    assert mid.seconds == pytest.approx(a.seconds + (b.seconds - a.seconds) * 3 / 7, rel=1e-12)
    assert abs(mid.seconds / exact.cost(72).seconds - 1) < 0.02


def test_one_prompt_chunk_takes_at_most_one_ranks_budget():
    """A lone 2,000-token prompt on EP 4 with DP attention and 512 tokens per rank: four
    chunks of 512, 512, 512 and 464 (one rank's budget each, as each DP rank's scheduler
    fills only its own), not one chunk of the ranks' 2,048; its TTFT is those four steps."""
    r = _replica(load_model(MOE), EpSpec(4, "dp"))
    oc = StepTimerCache("direct", roofline)
    cfg = ServeConfig(max_batched_tokens=512, runtime=load_runtime("ideal"))
    res = serve(Deployment(pool=Pool(r)), Load(qps=0.01, prompt=P("2000"), gen=P("2"),
                                               requests=1), cfg, oracles=oc)
    t = oc.get(r)
    want = sum(t.cost(Step(prefill=((c, p),))).seconds
               for c, p in ((512, 0), (512, 512), (512, 1024), (464, 1536)))
    assert res.ttft_s["mean"] == pytest.approx(want, rel=1e-12)
    assert res.instances[0].rec_chunks.tolist()[:4] == [1, 1, 1, 1]
