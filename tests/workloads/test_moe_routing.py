"""MoE routing: the busiest expert-parallel rank, dropped pairs, permute and unpermute.

The closed forms of :mod:`diptych.workloads.moe` are checked against an independent
reference, a simulated router: each token draws its k distinct experts with probabilities
proportional to log-normal popularities of the given coefficient of variation (Gumbel top-k
sampling with numpy), the pairs are counted per rank (experts ``r·E/ep`` .. on rank ``r``)
and per expert, and the busiest rank's count and the pairs over capacity are averaged over
many routings. The permute kernels are checked against DeepSeek's published H800 trace.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from diptych.arch import load_chip
from diptych.sim.api import simulate
from diptych.sim.run import Scenario, run_workload
from diptych.tools.cli import main
from diptych.workloads import load_model, prefill
from diptych.workloads.lower import expert_groups
from diptych.workloads.moe import (AUX_LOSS_EXPERTS, AUX_LOSS_MAX_VIOLATION, AUX_LOSS_SKEW,
                                   Routing, dropped_fraction, expected_max_normal,
                                   rank_load_factor, skew_from_max_violation)
from diptych.workloads.ops import Gemm, VectorOp


def _routings(E, k, T, skew, trials, seed):
    """``trials`` routings of ``T`` tokens: an array (trials, T, k) of expert indices."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        if skew > 0:
            s2 = math.log(1 + skew ** 2)          # log-normal with mean 1 and CV ``skew``
            w = rng.lognormal(-s2 / 2, math.sqrt(s2), E)
        else:
            w = np.ones(E)
        g = np.log(w)[None, :] + rng.gumbel(size=(T, E))
        out.append(np.argpartition(-g, k - 1, axis=1)[:, :k])
    return out


def _simulated_busiest(E, k, T, ep, skew, trials=120, seed=0):
    """Mean over routings of the busiest rank's pairs ÷ T·k (ep·T tokens routed)."""
    f = [np.bincount(top.ravel() // (E // ep), minlength=ep).max() / (T * k)
         for top in _routings(E, k, ep * T, skew, trials, seed)]
    return float(np.mean(f))


def _simulated_dropped(E, k, T, skew, cf, trials=120, seed=1):
    """Mean over routings of the pairs over each expert's capacity ``cf·T·k/E``."""
    cap = cf * T * k / E
    f = [np.maximum(np.bincount(top.ravel(), minlength=E) - cap, 0).sum() / (T * k)
         for top in _routings(E, k, T, skew, trials, seed)]
    return float(np.mean(f))


def test_expected_max_normal_closed_forms_and_samples():
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-6)
    rng = np.random.default_rng(3)
    for n in (8, 64):
        sample = rng.standard_normal((20000, n)).max(axis=1).mean()
        assert expected_max_normal(n) == pytest.approx(sample, abs=0.02)


@pytest.mark.parametrize("E,k,T,ep,skew", [
    (8, 2, 4096, 8, 0.0),       # Mixtral-like, EP 8: sampling only, ~1 %
    (8, 2, 256, 8, 0.0),
    (128, 8, 128, 16, 0.0),     # fine-grained, EP 16
    (64, 6, 512, 8, 0.0),
    (128, 8, 256, 8, 0.3),      # popularity skew on top
    (8, 2, 1024, 4, 0.3),
])
def test_busiest_rank_matches_a_simulated_router(E, k, T, ep, skew):
    want = _simulated_busiest(E, k, T, ep, skew)
    got = rank_load_factor(Routing(skew=skew), E, k, T, ep)
    assert got == pytest.approx(want, rel=0.025)
    assert got > 1.0


def test_busiest_rank_grows_with_skew_and_ranks_and_shrinks_with_tokens():
    f = lambda **kw: rank_load_factor(Routing(skew=kw.pop("skew", 0.0)), **kw)  # noqa: E731
    base = dict(experts=64, top_k=4, tokens=512, ep=8)
    assert f(**base) < f(**base, skew=0.2) < f(**base, skew=0.5)
    assert f(**{**base, "ep": 4}) < f(**base) < f(**{**base, "ep": 16})
    assert f(**{**base, "tokens": 4096}) < f(**base) < f(**{**base, "tokens": 64})
    assert rank_load_factor(Routing(skew=0.5), 64, 4, 512, 1) == 1.0     # one rank: all
    # a capacity factor caps it, padding fixes it
    assert rank_load_factor(Routing(skew=0.5, capacity_factor=1.1), 64, 4, 512, 8) == 1.1
    assert rank_load_factor(Routing(capacity_factor=1.25, pad=True), 64, 4, 512, 8) == 1.25
    # never above what one rank can receive: every pair that lands on its experts
    assert rank_load_factor(Routing(skew=10.0), 8, 2, 1, 8) <= 8 * 1 / 2


@pytest.mark.parametrize("E,k,T,skew,cf", [
    (8, 2, 4096, 0.0, 1.0), (64, 6, 512, 0.0, 1.0), (128, 8, 256, 0.0, 1.0),
    (64, 6, 512, 0.2, 1.0), (8, 2, 4096, 0.3, 1.25),
])
def test_dropped_pairs_match_a_simulated_router(E, k, T, skew, cf):
    want = _simulated_dropped(E, k, T, skew, cf)
    got = dropped_fraction(Routing(skew=skew, capacity_factor=cf), E, k, T)
    assert got == pytest.approx(want, abs=0.012)


def test_dropless_drops_nothing_and_more_capacity_drops_less():
    assert dropped_fraction(Routing(skew=0.5), 64, 4, 512) == 0.0
    d = [dropped_fraction(Routing(skew=0.3, capacity_factor=c), 64, 4, 512)
         for c in (0.8, 1.0, 1.25, 2.0)]
    assert d == sorted(d, reverse=True) and d[0] >= 0.2 - 1e-9 and d[-1] < 1e-3


def test_expert_groups_hold_the_busiest_rank_s_pairs():
    m = load_model("qwen3-30b-a3b")              # 128 experts, top-8
    E, k, T = m.experts, m.experts_per_token, 2048
    pairs = lambda g: sum(n * t for n, t in g)   # noqa: E731
    assert pairs(expert_groups(m, T)) == T * k                 # one rank: every pair
    r = Routing(skew=0.4)
    assert pairs(expert_groups(m, T, 8, r)) == round(T * k * rank_load_factor(r, E, k, T, 8))
    assert pairs(expert_groups(m, T, 1, r)) == T * k           # skew moves pairs, not work
    cap = Routing(capacity_factor=1.0)
    assert pairs(expert_groups(m, T, 1, cap)) == round(T * k * (1 - dropped_fraction(cap, E, k,
                                                                                      T)))
    pad = Routing(capacity_factor=1.5, pad=True)
    assert expert_groups(m, T, 1, pad) == [(E, math.ceil(1.5 * T * k / E))]
    assert expert_groups(m, T, 8, pad) == [(E // 8, round(1.5 * T * k) // (E // 8))]


def _moe_ops(w):
    blk = next(b for b in w.blocks if "moe" in b.name)
    return {o.name: o for o in blk.ops}


def test_permute_and_unpermute_move_the_pairs_at_memory_rate():
    m = load_model("mixtral-8x7b")               # top-2, hidden 4096, BF16
    T, d, k = 4096, m.hidden_size, 2
    ops = _moe_ops(prefill(m, 1, T))
    perm, comb = ops["experts_permute"], ops["experts_combine"]
    assert perm.kind == comb.kind == "permute"
    # permute: each token's row read once, written once per expert, plus its int32 indices
    assert perm.read_bytes == pytest.approx(T * d * 2 + T * k * 4)
    assert perm.write_bytes == pytest.approx(T * k * d * 2)
    # unpermute: the k expert rows and their index and FP32 weight read, one row written
    assert comb.read_bytes == pytest.approx(T * k * d * 2 + T * k * 8)
    assert comb.write_bytes == pytest.approx(T * d * 2)
    assert perm.ops_per_element == 0.0


def test_permute_is_not_fused_into_a_gemm():
    res = run_workload("h100", "mixtral-8x7b", Scenario(phase="prefill", batch=1, prompt=1024))
    names = [r["op"] for r in res.layers]
    assert "experts_permute" in names and "experts_combine" in names
    assert not any("+experts_combine" in n or "experts_permute+" in n for n in names)


@pytest.mark.parametrize("what,read,write,measured_s", [
    # DeepSeek-V3 training trace, H800 (HBM3, 3.35 TB/s, as the h100 preset), EP64, 4096
    # tokens per GPU, top-8, hidden 7168: ~30.9k distinct token rows in, 32,768 expert rows
    # out (FP8 rows + scales, 7392 B); the BF16 unpermute the other way (14,336 B rows)
    # deepseek-ai/profile-data train.json: expand_to_fused_with_scales 159-221 us (typical
    # 176), reduce_fused_impl 294-362 us (typical 330)
    ("permute", 30_900 * 7392, 32_768 * 7392, 176e-6),
    ("unpermute", 32_768 * 14_336, 30_900 * 14_336, 330e-6),
])
def test_permute_kernels_against_deepseek_s_trace(what, read, write, measured_s):
    op = VectorOp(name=what, kind="permute", elements=write // 2, ops_per_element=0.0,
                  read_bytes=float(read), write_bytes=float(write))
    s = simulate(op, load_chip("h100")).seconds
    # within 15 %: diptych streams the rows at its HBM rate (~3.0 TB/s); the measured
    # gathers reach 2.7-2.8 TB/s (row-granular, index-driven)
    assert s == pytest.approx(measured_s, rel=0.15)


def test_skew_slows_an_expert_parallel_step_and_not_a_one_rank_one():
    from diptych.sim.cluster.run import run_cluster_step
    base = dict(phase="train", batch=8, seq=1024, chips=8, tp=1, ep=8, micro_batch=1)
    a = run_cluster_step("h100", "mixtral-8x7b", Scenario.of(**base))
    b = run_cluster_step("h100", "mixtral-8x7b", Scenario.of(**base, moe_skew=0.3))
    assert b.seconds > 1.1 * a.seconds and b.flops == a.flops
    one = dict(phase="prefill", batch=1, prompt=512)
    x = run_workload("h100", "mixtral-8x7b", Scenario.of(**one))
    y = run_workload("h100", "mixtral-8x7b", Scenario.of(**one, moe_skew=0.3))
    assert y.seconds == x.seconds


def test_padding_runs_every_expert_at_capacity():
    one = dict(phase="prefill", batch=1, prompt=2048)
    x = run_workload("h100", "mixtral-8x7b", Scenario.of(**one))
    y = run_workload("h100", "mixtral-8x7b",
                     Scenario.of(**one, moe_capacity_factor=1.5, moe_pad=True))
    gemm = lambda r: sum(l["flops"] * l.get("repeat", 1) for l in r.layers  # noqa: E731,E741
                         if l["op"].startswith("experts_gate_up"))
    assert gemm(y) == pytest.approx(1.5 * gemm(x), rel=1e-3)
    assert y.flops == x.flops and y.hardware_flops > x.hardware_flops
    assert y.to_dict()["info"]["moe_routing"]["busiest_rank_load"] == 1.5


def test_scenario_takes_routing_keywords_once():
    s = Scenario.of(phase="prefill", prompt=8, moe_skew=0.2, moe_capacity_factor=1.25)
    assert s.routing == Routing(skew=0.2, capacity_factor=1.25)
    assert Scenario.of(phase="prefill", prompt=8, moe_skew=None).routing == Routing()
    with pytest.raises(ValueError, match="either as routing= or as moe_"):
        Scenario.of(phase="prefill", prompt=8, moe_skew=0.1, routing=Routing())
    with pytest.raises(ValueError, match="routing must be a Routing"):
        Scenario(phase="prefill", routing=0.3)


@pytest.mark.parametrize("kw,match", [
    (dict(skew=-0.1), r"moe skew \(--moe-skew\) must be a number in \[0, 10\]"),
    (dict(skew=11), r"moe skew"),
    (dict(skew=True), r"moe skew"),
    (dict(capacity_factor=0), r"moe capacity factor \(--moe-capacity-factor\) must be"),
    (dict(capacity_factor=65), r"capacity factor"),
    (dict(pad=True), r"moe pad \(--moe-pad\) needs a capacity factor"),
    (dict(pad=1), r"moe pad \(--moe-pad\) must be True or False"),
])
def test_bad_routing_names_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        Routing(**kw)


def test_cli_routing_flags_and_their_errors():
    r = CliRunner()
    args = ["run", "--chip", "h100", "--phase", "prefill", "--batch", "1", "--prompt", "256"]
    ok = r.invoke(main, args + ["--model", "mixtral-8x7b", "--moe-capacity-factor", "1.25",
                                "--json"])
    assert ok.exit_code == 0, ok.output
    import json
    info = json.loads(ok.output)["info"]["moe_routing"]
    assert info["capacity_factor"] == 1.25 and 0 < info["dropped_fraction"] < 0.2
    dense = r.invoke(main, args + ["--model", "llama-3-8b", "--moe-skew", "0.2"])
    assert dense.exit_code == 2 and "needs a mixture-of-experts model" in dense.output
    pad = r.invoke(main, args + ["--model", "mixtral-8x7b", "--moe-pad"])
    assert pad.exit_code == 2 and "--moe-pad" in pad.output
    bad = r.invoke(main, args + ["--model", "mixtral-8x7b", "--moe-skew", "-1"])
    assert bad.exit_code == 2 and "--moe-skew" in bad.output
    name = r.invoke(main, args + ["--model", "mixtral-8x7b", "--moe-skew", "Aux-Loss", "--json"])
    assert name.exit_code == 0, name.output
    assert json.loads(name.output)["info"]["moe_routing"]["skew"] == AUX_LOSS_SKEW
    word = r.invoke(main, args + ["--model", "mixtral-8x7b", "--moe-skew", "trained"])
    assert word.exit_code == 2 and "--moe-skew" in word.output and "aux-loss" in word.output


def test_an_expert_parallel_rank_runs_a_little_over_its_share():
    m = load_model("deepseek-v3")
    a = prefill(m, 1, 512, ep=8)
    b = prefill(m, 1, 512)
    gemms = lambda w: [o for bl in w.blocks for o in bl.ops if isinstance(o, Gemm)  # noqa: E731
                       and o.name.startswith("experts_")]
    # the busiest of 8 ranks runs a few per cent more than its 1/8 share of the pairs
    rows_ep = sum(o.batch * o.m for o in gemms(a) if "gate_up" in o.name)
    rows_one = sum(o.batch * o.m for o in gemms(b) if "gate_up" in o.name)
    assert rows_one == 512 * 8 and 1.0 < rows_ep / rows_one < 1.05


def _megatron_drop_and_pad(tokens_per_tp_rank, E, k, cf, tp, ep):
    """Megatron-Core's drop-and-pad all-to-all dispatcher (core_r0.9.0-0.11.0
    ``MoEAlltoAllTokenDispatcher.preprocess`` with ``moe_pad_expert_input_to_capacity``):
    ``capacity = ceil(S·k/E × cf)`` per expert and source rank (``get_capacity``), the
    rank sends ``capacity × E`` rows (``num_out_tokens``) and each local expert runs
    ``capacity × tp × ep`` rows."""
    capacity = math.ceil(tokens_per_tp_rank * k / E * cf)
    return capacity * E, capacity * tp * ep


@pytest.mark.parametrize("cf,seq", [(1.0, 8192), (1.25, 8192), (1.1, 8192), (1.0, 4040)])
def test_padded_routing_runs_megatron_s_drop_and_pad_rows(cf, seq):
    # Grok-1's published layout on Mixtral's routing shape (8 experts top-2): TP4 (sequence
    # parallel) CP2 EP8, NVIDIA's grok1_314b.yaml capacity factor 1.0, padded; 1.1 and 505
    # tokens per tensor-parallel rank make the capacity a fraction that Megatron rounds up
    from diptych.workloads.train import train_forward
    m = load_model("mixtral-8x7b")
    tp, cp, ep = 4, 2, 8
    E, k, d = m.experts, m.experts_per_token, m.hidden_size
    pad = Routing(capacity_factor=cf, pad=True)
    ops = _moe_ops(train_forward(m, 1, seq, tp=tp, cp=cp, ep=ep, routing=pad,
                                 sequence_parallel=True))
    sent, rows = _megatron_drop_and_pad(seq // cp // tp, E, k, cf, tp, ep)
    up = ops["experts_gate_up"]
    assert (up.batch, up.m) == (E // ep, rows)
    assert ops["ep_dispatch"].bytes == ops["ep_combine"].bytes == sent * d * 2   # BF16 rows


def test_padding_at_capacity_one_removes_the_busiest_rank_s_excess():
    # dropless, a balanced router's busiest of 8 ranks runs ~1.4 % over its share (sampling
    # noise, 4,096 tokens per rank); padded at capacity factor 1 every rank runs exactly it
    from diptych.workloads.train import train_forward
    m = load_model("mixtral-8x7b")
    kw = dict(tp=4, cp=2, ep=8, sequence_parallel=True)
    free = _moe_ops(train_forward(m, 1, 8192, **kw))["experts_gate_up"]
    pad = _moe_ops(train_forward(m, 1, 8192, routing=Routing(capacity_factor=1.0, pad=True),
                                 **kw))["experts_gate_up"]
    share = 4096 * m.experts_per_token
    assert pad.m == share and 1.01 < free.m / share < 1.02


def test_aux_loss_skew_reproduces_the_measured_max_violation():
    E, v = AUX_LOSS_EXPERTS, AUX_LOSS_MAX_VIOLATION
    # closed form: diptych's busiest rank with one expert per rank and no sampling noise
    f = rank_load_factor(Routing(skew=AUX_LOSS_SKEW), E, 6, 10 ** 12, E)
    assert f == pytest.approx(1 + v, rel=1e-6)
    for e, s in ((8, 0.1), (64, 0.5), (256, 0.2)):       # the inverse, round trip
        g = rank_load_factor(Routing(skew=s), e, 2, 10 ** 12, e)
        assert skew_from_max_violation(g - 1, e) == pytest.approx(s, rel=1e-6)
    # Monte Carlo: E experts with normal popularities of that CV, Wang et al.'s MaxVio of
    # each draw, (max − mean) / mean, averaged (the closed form's √(1 − 1/E): 0.8 % at 64)
    rng = np.random.default_rng(7)
    p = 1 + AUX_LOSS_SKEW * rng.standard_normal((20_000, E))
    vio = (p.max(axis=1) - p.mean(axis=1)) / p.mean(axis=1)
    assert float(vio.mean()) == pytest.approx(v, rel=0.02)


@pytest.mark.parametrize("args,match", [
    ((-0.1, 64), "max_violation"), ((True, 64), "max_violation"),
    ((float("nan"), 64), "max_violation"), ((math.inf, 64), "max_violation"),
    ((0.5, 1), "experts"), ((0.5, 8.0), "experts")])
def test_bad_max_violation_names_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        skew_from_max_violation(*args)
