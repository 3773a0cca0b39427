"""`serve --speculative draft=mtp`: the model's own multi-token-prediction module drafts.

Against independent references: the module's parameters counted by hand from DeepSeek-V3's
config (and the model card's 685 B − 671 B), its pass lowered as one of the target's layers
plus the projection, the draft + verify step time assembled from the pieces, the tokens per
verify step's closed form, the golden event loop, and the refusal of a model without one.
Step times come from the roofline double."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from roofline_double import roofline

from diptych.arch.runtime import IDEAL
from diptych.sim.serving.config import ServeConfig, Speculation, parse_speculative
from diptych.sim.serving.deployment import Deployment, Pool, fit_tp
from diptych.sim.serving.engine_ref import GoldenRequest, golden_serve
from diptych.sim.serving.kv import kv_budget
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, resolve_config, serve
from diptych.sim.serving.step_time import DirectStepTimer, make_replica
from diptych.sim.run import Scenario
from diptych.workloads import load_model
from diptych.workloads.mtp import MTP_ACCEPT, mtp_module, mtp_params
from diptych.workloads.params import param_count
from diptych.workloads.serving_step import Step

MTP1 = parse_speculative("draft=mtp,k=1")
#: GLM-4.5-Air (one MTP layer) in BF16 on four H100s: the smallest built-in with an MTP module
AIR = colocated("h100", "glm-4.5-air", tp=4, power_limit=False)
_SHARED = StepTimerCache("grid", roofline)


def test_deepseek_v3_mtp_module_counted_by_hand():
    m = load_model("deepseek-v3")
    d, h, V = 7168, 128, 129280
    attn = (d * 1536 + 1536 + 1536 * h * (128 + 64) + d * (512 + 64) + 512
            + 512 * h * (128 + 128) + h * 128 * d)
    moe = 256 * d + 256 + 256 * 3 * d * 2048 + 3 * d * 2048     # router (+ bias), experts, shared
    norms = 2 * d + d + 2 * d        # the block's two, shared_head.norm, enorm and hnorm
    eh_proj = 2 * d * d
    assert mtp_params(m) == attn + moe + norms + eh_proj
    # the card: "671B of the Main Model weights and 14B of the Multi-Token Prediction (MTP)
    # Module weights", 685 B in all (rounded figures); the checkpoint's module also stores the
    # (shared) embedding and head again: 13.46 B, 684.49 B in all
    assert param_count(m) + mtp_params(m) + 2 * V * d == pytest.approx(685e9, abs=1e9)
    assert param_count(m) == pytest.approx(671e9, abs=0.5e9)


def test_mtp_pass_is_one_target_layer_after_the_projection():
    r = AIR.pool.replica
    mtp = dataclasses.replace(r, model=mtp_module(r.model))
    step = Step(8, 8 * 300)
    wt, wd = r.step_workload(step), mtp.step_workload(step)
    layers = [b for b in wd.blocks if b.name not in ("embedding", "head")]
    assert [b.repeat for b in layers] == [1]
    moe = next(b for b in wt.blocks if "moe" in b.name)
    assert [(o.name, getattr(o, "m", None), getattr(o, "k", None), getattr(o, "n", None))
            for o in layers[0].ops] == \
        [(o.name, getattr(o, "m", None), getattr(o, "k", None), getattr(o, "n", None))
         for o in moe.ops]
    emb = next(b for b in wd.blocks if b.name == "embedding")
    proj = next(o for o in emb.ops if o.name == "mtp_eh_proj")
    d = r.model.hidden_size
    assert (proj.m, proj.k, proj.n) == (8, 2 * d, d)         # replicated: not split by tp
    head_t = next(b for b in wt.blocks if b.name == "head")
    head_d = next(b for b in wd.blocks if b.name == "head")
    assert [(o.name, getattr(o, "n", None)) for o in head_t.ops] == \
        [(o.name, getattr(o, "n", None)) for o in head_d.ops]   # the shared head, as the target's


def test_mtp_weights_and_cache_counted_in_the_fit():
    r = AIR.pool.replica
    mtp = dataclasses.replace(r, model=mtp_module(r.model))
    kw = dict(block_tokens=16, max_batched_tokens=8192, reserve_fraction=0.1)
    plain, spec = kv_budget(r, **kw), kv_budget(r, draft=mtp, **kw)
    wb = r.precision.w_bytes
    assert spec.weights_bytes - plain.weights_bytes == pytest.approx(
        mtp_params(r.model, r.tp) * wb)
    m = r.model           # one more layer's K/V per token (GQA, kv heads split by tp)
    assert spec.bytes_per_token - plain.bytes_per_token == pytest.approx(
        2 * (m.kv_heads // r.tp) * m.head_dim * r.precision.kv_bytes)
    assert plain.bytes_per_token == pytest.approx(m.layers * 2 * (m.kv_heads // r.tp)
                                                  * m.head_dim * r.precision.kv_bytes)
    assert spec.blocks < plain.blocks
    # fit_tp counts the modules too: GLM-4.5-Air in FP8 at tp 2 with a reserve that leaves
    # one step's KV cache and half the modules' weights: it fits without the draft, not with
    fp8 = make_replica("h100", "glm-4.5-air", Scenario.of(phase="decode", tp=2,
                                                          weights_dtype="fp8"))
    b = kv_budget(fp8, block_tokens=16, max_batched_tokens=8192, reserve_fraction=0.0)
    spare = b.capacity_bytes - b.weights_bytes - b.activation_bytes - 8192 * b.bytes_per_token
    reserve = (spare - mtp_params(m, 2) * fp8.precision.w_bytes / 2) / b.capacity_bytes
    fp = {"weights_dtype": "fp8"}
    assert fit_tp("h100", "glm-4.5-air", ServeConfig(kv_reserve_fraction=reserve),
                  precision=fp) == 2
    spec = ServeConfig(kv_reserve_fraction=reserve, speculative=MTP1)
    assert fit_tp("h100", "glm-4.5-air", spec, precision=fp) == 4
    # serve's pools: only the decode pool drafts, so only it holds the modules
    from diptych.tools.serve_cmd import _pool
    ex = {"execution": None, "fusion": True}
    assert [_pool("h100", "glm-4.5-air", None, 1, None, fp, "fused", ex, spec, what).replica.tp
            for what in ("prefill", "decode")] == [2, 4]


def test_draft_plus_verify_step_time_equals_the_pieces():
    k, prompt, gen = 3, 300, 13
    cfg = ServeConfig(speculative=Speculation(k, 1.0, "mtp"), runtime=IDEAL)
    oc = StepTimerCache("direct", roofline)
    res = serve(AIR, Load(concurrency=1, prompt=P(str(prompt)), gen=P(str(gen)), requests=1),
                cfg, oracles=oc)
    r = AIR.pool.replica
    target = oc.get(r)
    draft = DirectStepTimer(dataclasses.replace(r, model=mtp_module(r.model)), roofline)
    q = k + 1
    dt = res.instances[0].rec_dt
    # the prompt: the target's prefill and the draft's pass over the same chunk
    pf = ((prompt, 0),)
    assert dt[0] == pytest.approx(target.cost(Step(prefill=pf)).seconds
                                  + draft.cost(Step(prefill=pf)).seconds, rel=1e-12)
    for i in range(1, len(dt)):        # k MTP passes of one token, then one (k+1)-row verify
        c = prompt + (i - 1) * q
        want = target.cost(Step(1, c + q, (), q)).seconds + sum(
            draft.cost(Step(1, c + 1 + j)).seconds for j in range(k))
        assert dt[i] == pytest.approx(want, rel=1e-12)
    assert len(dt) == 1 + -(-(gen - 1) // q)           # every proposal accepted


def test_tokens_per_verify_step_follow_the_published_acceptance():
    assert MTP1.accept == MTP_ACCEPT == 0.85
    assert parse_speculative("draft=mtp,k=2,accept=0.6") == Speculation(2, 0.6, "mtp")
    for k in (1, 2):
        spec = Speculation(k, MTP_ACCEPT, "mtp")
        res = serve(AIR, Load(concurrency=8, prompt=P("256"), gen=P("400"), requests=16),
                    ServeConfig(speculative=spec), oracles=_SHARED)
        emits = len(res.instances[0].itl)
        tokens = sum(x.output - 1 for x in res.reqs)
        expect = (1 - MTP_ACCEPT ** (k + 1)) / (1 - MTP_ACCEPT)
        assert spec.expected_tokens == pytest.approx(expect)
        assert tokens / emits == pytest.approx(expect, rel=0.03)


def test_per_position_acceptance_yields_the_sum_of_the_reach():
    # one module reused for three positions, accepted less often at the later ones
    spec = parse_speculative("draft=mtp,k=3,accept=0.85/0.6")
    assert spec.rates == (0.85, 0.6, 0.6)
    assert spec.expected_tokens == pytest.approx(1 + 0.85 + 0.85 * 0.6 + 0.85 * 0.36)
    # a constant list is the constant rate's closed form
    assert Speculation(3, 0.7, later=(0.7, 0.7)).expected_tokens == pytest.approx(
        Speculation(3, 0.7).expected_tokens)
    res = serve(AIR, Load(concurrency=8, prompt=P("256"), gen=P("400"), requests=16),
                ServeConfig(speculative=spec), oracles=_SHARED)
    tokens = sum(x.output - 1 for x in res.reqs)
    assert tokens / len(res.instances[0].itl) == pytest.approx(spec.expected_tokens, rel=0.03)
    for bad, match in (("draft=mtp,k=1,accept=0.8/0.5", "at most k"),
                       ("draft=mtp,k=2,accept=0.8/x", "one per position"),
                       ("draft=mtp,k=2,accept=0.8/1.5", "probability")):
        with pytest.raises(ValueError, match=match):
            parse_speculative(bad)


@pytest.mark.parametrize("chunked", [True, False])
def test_fast_loop_equals_its_golden_twin_with_an_mtp_draft(chunked):
    cfg = ServeConfig(speculative=Speculation(2, 0.8, "mtp", later=() if chunked else (0.5,)),
                      chunked_prefill=chunked,
                      max_batched_tokens=1024, prefix_share=0.25)
    load = Load(qps=30, prompt=P("uniform:lo=100,hi=900"), gen=P("uniform:lo=1,hi=120"),
                requests=50)
    res = serve(AIR, load, cfg, oracles=_SHARED)
    cfg = resolve_config(AIR, cfg)
    inst = res.instances[0]
    assert inst.draft is not None and inst.draft.replica.model.mtp_module
    reqs = sorted(res.reqs, key=lambda x: x.rid)
    g = golden_serve([GoldenRequest(x.rid, x.arrival, x.prompt, x.output, x.shared)
                      for x in reqs], inst.oracle, cfg, inst.total_blocks,
                     prefix_blocks=inst.prefix_blocks, draft=inst.draft,
                     block_bytes=inst.block_bytes, rng=np.random.default_rng([cfg.seed, 1]),
                     layout=inst.layout)
    assert {x.rid: (x.first_t, x.finish_t) for x in res.reqs} == \
        {x.rid: (x.first_t, x.finish_t) for x in g.requests}
    assert len(inst.rec_t) == len(g.steps)
    assert inst.peak_used == g.peak_blocks


def test_mtp_drafts_on_the_decode_pool_of_a_disaggregated_deployment():
    r = AIR.pool.replica
    dep = Deployment(prefill=Pool(r, 1), decode=Pool(r, 1))
    load = Load(qps=2, prompt=P("uniform:lo=200,hi=600"), gen=P("uniform:lo=50,hi=150"),
                requests=20)
    base = serve(dep, load, ServeConfig(), oracles=_SHARED)
    spec = serve(dep, load, ServeConfig(speculative=MTP1), oracles=_SHARED)
    pre, dec = spec.instances
    assert pre.draft is None and dec.draft.replica.model.mtp_module
    assert spec.tpot_s["mean"] < base.tpot_s["mean"]
    assert spec.kv[1]["weights_bytes"] > base.kv[1]["weights_bytes"]


def test_a_model_without_mtp_is_refused(cli):
    dep = colocated("h100", "llama-3-8b")
    with pytest.raises(ValueError, match="llama-3-8b.*num_nextn_predict_layers"):
        serve(dep, Load(qps=1, requests=2), ServeConfig(speculative=MTP1), oracles=_SHARED)
    out = cli("serve", "--chip", "h100", "--model", "llama-3-8b", "--qps", 1, "--requests", 2,
              "--speculative", "draft=mtp,k=1")
    assert out.exit_code == 2
    assert "llama-3-8b" in out.output and "num_nextn_predict_layers = 0" in out.output


def test_make_replica_of_the_draft_runs_as_its_target():
    r = make_replica("h100", "glm-4.5-air", Scenario.of(phase="decode", tp=4,
                                                         execution="schedule"))
    cost = DirectStepTimer(dataclasses.replace(r, model=mtp_module(r.model)), roofline).cost(
        Step(4, 4 * 200))
    assert 0 < cost.seconds < DirectStepTimer(r, roofline).cost(Step(4, 4 * 200)).seconds


def test_qwen3_next_projection_is_column_parallel_and_gathered():
    r = make_replica("h100", "qwen3-next-80b-a3b", Scenario.of(phase="decode", tp=4))
    mtp = dataclasses.replace(r, model=mtp_module(r.model))
    emb = mtp.step_workload(Step(8, 8 * 300)).blocks[0]
    d = r.model.hidden_size
    proj = next(o for o in emb.ops if o.name == "mtp_eh_proj")
    gather = next(o for o in emb.ops if o.name == "mtp_all_gather")
    assert (proj.m, proj.k, proj.n) == (8, 2 * d, d // 4)
    assert gather.bytes == 8 * d * r.precision.a_bytes
    # its block is a full-attention MoE layer, as vLLM's Qwen3NextMTP builds it
    assert mtp.model.layer_specs()[0].attention == "full" and mtp.model.kv_layers == 1


def test_cli_runs_an_mtp_draft(cli):
    import json
    out = cli("serve", "--chip", "h100", "--model", "glm-4.5-air", "--tp", 4, "--qps", 2,
              "--requests", 6, "--prompt", "300", "--gen", "20", "--speculative",
              "draft=mtp,k=1", "--json")
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["config"]["speculative"] == {"k": 1, "accept": 0.85, "draft": "mtp", "later": []}
    assert d["info"]["expected_tokens_per_verify"] == pytest.approx(1.85)
