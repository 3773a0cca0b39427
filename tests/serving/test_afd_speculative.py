"""Speculative decoding with attention–FFN disaggregation (sim/serving/serve.py `_afd_draft`):
with acceptance 0 every step yields one token, so each decode step of the speculative run is
the plain AFD step less its one-token cost plus the closed form of the draft and verify
costs — the verify step of ``1 + k`` tokens per sequence through the AFD pipeline, and ``k``
draft steps where the draft's layers live (an MTP module's through its own AFD pipeline, a
draft model on the attention pool). The memory each pool holds is counted by hand. Step
times from the roofline double."""

from __future__ import annotations

import dataclasses
import json

import pytest
from roofline_double import roofline

from diptych.arch.runtime import IDEAL
from diptych.sim.energy_parts import VECTOR
from diptych.sim.run import Scenario
from diptych.sim.serving.afd import AfdSpec, AfdTimer, OnAttentionPool, check_ffn_fits
from diptych.sim.serving.config import ServeConfig, parse_speculative
from diptych.sim.serving.deployment import afd_deployment
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, serve
from diptych.sim.serving.step_time import DirectStepTimer, StepCost, make_replica
from diptych.workloads.mtp import mtp_module
from diptych.workloads.serving_step import Step

PROMPT, GEN, K = 200, 6, 2


def _decode_steps(dep, spec):
    cfg = ServeConfig(runtime=IDEAL, speculative=parse_speculative(spec) if spec else None)
    r = serve(dep, Load(concurrency=1, requests=1, prompt=P(str(PROMPT)), gen=P(str(GEN))),
              cfg, oracles=StepTimerCache("direct", roofline))
    i = r.instances[0]
    return [dt for b, pf, dt in zip(i.rec_dec, i.rec_pf, i.rec_dt) if b == 1 and pf == 0]


@pytest.mark.parametrize("model,ffn_chips,draft", [
    ("glm-4.5-air", 4, "mtp"),          # its MTP layer: attention on A, experts on B
    ("qwen3-30b-a3b", 2, "qwen3-8b"),   # a draft model, resident on the attention pool
])
def test_acceptance_zero_is_plain_afd_plus_draft_and_verify(model, ffn_chips, draft):
    dep = afd_deployment("h100", "h100", model, AfdSpec(1, ffn_chips, 2))
    att, ffn = dep.pool.replica, dep.afd.ffn
    target = AfdTimer(att, ffn, dep.afd.spec, roofline)
    if draft == "mtp":
        mtp = mtp_module(att.model)
        d = AfdTimer(dataclasses.replace(att, model=mtp), dataclasses.replace(ffn, model=mtp),
                     dep.afd.spec, roofline)
    else:
        r = make_replica("h100", draft, Scenario.of(phase="decode", tp=1))
        d = DirectStepTimer(dataclasses.replace(r, variant=att.variant), roofline)
    plain = _decode_steps(dep, None)
    spec = _decode_steps(dep, f"draft={draft},k={K},accept=0")
    assert len(plain) == len(spec) == GEN - 1          # one token per step either way
    for i, (p, s) in enumerate(zip(plain, spec)):
        computed = PROMPT + i               # tokens in the cache before the step
        one = target.cost(Step(1, computed + 1)).seconds
        verify = target.cost(Step(1, computed + 1 + K, (), 1 + K)).seconds
        drafts = sum(d.cost(Step(1, computed + 1 + j)).seconds for j in range(K))
        assert p == pytest.approx(one, rel=1e-12)
        assert s == pytest.approx(p - one + verify + drafts, rel=1e-12)


def test_a_draft_on_the_attention_pool_is_charged_per_chip_of_both_pools():
    """n = 1 attention chip spends 10 J in a 2 s draft step; m = 3 FFN chips idle at 5 W:
    (10 + 3 · 5 · 2) / 4 J per chip of the instance; the components likewise."""
    class Fixed:
        simulations = 0

        def cost(self, step):
            return StepCost(2.0, 10.0, (6.0, 4.0) + (0.0,) * (len(VECTOR) - 2))

    c = OnAttentionPool(Fixed(), 1, 3, 5.0).cost(Step(1, 1))
    assert c.seconds == 2.0 and c.energy_j == pytest.approx(40 / 4)
    assert sum(c.parts) == pytest.approx(c.energy_j)


def test_an_mtp_draft_puts_its_experts_on_the_ffn_pool():
    """DeepSeek-V3's MTP module: its 256 routed experts and shared expert (3 · 7168 · 2048
    each, counted in workloads/mtp's hand test) sit on the FFN pool, bf16, ÷ m chips."""
    dep = afd_deployment("h100", "h100", "deepseek-v3", AfdSpec(1, 32, 2))
    ffn = dep.afd.ffn
    mtp = dataclasses.replace(ffn, model=mtp_module(ffn.model))
    base = check_ffn_fits(ffn, dep.afd.spec, 0.1)
    got = check_ffn_fits(ffn, dep.afd.spec, 0.1, draft=mtp)
    assert got - base == pytest.approx(257 * 3 * 7168 * 2048 / 32 * 2, rel=1e-12)


def test_serve_cli_runs_speculative_afd(cli):
    r = cli("serve", "--model", "glm-4.5-air", "--attention-chip", "h100", "--ffn-chip", "h100",
            "--ffn-chips", 4, "--speculative", "draft=mtp,k=2,accept=0.8", "--requests", 4,
            "--qps", 1, "--prompt", 128, "--gen", 8, "--oracle", "direct", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["info"]["afd"]["ffn"]["ep"] == 4
    assert d["info"]["expected_tokens_per_verify"] == pytest.approx(1 + 0.8 + 0.8 ** 2)
