"""Falcon-H1 (``FalconH1ForCausalLM``): attention and a Mamba-2 mixer in parallel on every
layer (issue 25 item 4, the Mamba-2 hybrid; items 5-6 for its state). Parameter count against
a per-tensor hand formula and the published size, the state per sequence against its closed
form from the config's fields, decode cost of the Mamba-2 mixer independent of the context,
the chunked SSD's FLOPs against a closed form, every phase and serve, bad configs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from roofline_double import roofline
from test_architectures import attn, embeddings, glu, near
from test_qwen3_next import exits_2_naming
from tiny_models import TINY

from diptych.sim.run import Scenario, run_workload
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
from diptych.workloads import decode, kv_bytes_per_token, load_model, model_from_hf, \
    param_count, prefill, train_step
from diptych.workloads.ops import Gemm
from diptych.workloads.params import state_bytes_per_sequence

MODELS = Path(__file__).parents[2] / "workloads" / "models"
NAME = "falcon-h1-0.5b"

#: a four-layer Falcon-H1: 8 Mamba-2 heads of 32, state 16, 2 groups, chunks of 64
TINY_H1 = {**TINY, "architectures": ["FalconH1ForCausalLM"], "mamba_d_ssm": 256,
           "mamba_n_heads": 8, "mamba_d_head": 32, "mamba_d_state": 16, "mamba_n_groups": 2,
           "mamba_d_conv": 4, "mamba_chunk_size": 64}


def _cfg() -> dict:
    return json.loads((MODELS / f"{NAME}.json").read_text())


def mamba2(d: int, d_ssm: int, heads: int, groups: int, state: int, kernel: int) -> int:
    """FalconH1Mixer's tensors: in_proj (z, x, B, C, dt), conv1d weight and bias over x/B/C,
    dt_bias, A_log, D, out_proj (no biases, no norm: mamba_proj_bias, projectors_bias and
    mamba_rms_norm false)."""
    conv = d_ssm + 2 * groups * state
    return d * (d_ssm + conv + heads) + conv * kernel + conv + 3 * heads + d_ssm * d


def test_count_matches_the_hand_formula_and_the_published_size():
    c = _cfg()
    d = c["hidden_size"]
    layer = (attn(d, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
             + mamba2(d, c["mamba_d_ssm"], c["mamba_n_heads"], c["mamba_n_groups"],
                      c["mamba_d_state"], c["mamba_d_conv"]) + glu(d, c["intermediate_size"]))
    hand = c["num_hidden_layers"] * layer + embeddings(c["vocab_size"], d, False)
    assert param_count(load_model(NAME)) == hand == 521_411_104
    assert near(hand, "0.5B")              # tiiuae/Falcon-H1-0.5B-Instruct: "0.5B"


def test_state_and_kv_bytes_from_the_config_fields():
    c, m = _cfg(), load_model(NAME)
    L = c["num_hidden_layers"]
    assert m.describe_layers() == "36 × full + mamba2"
    assert kv_bytes_per_token(m, "bf16") == L * 2 * c["num_key_value_heads"] * c["head_dim"] * 2
    rec = c["mamba_n_heads"] * c["mamba_d_head"] * c["mamba_d_state"] * 4
    conv = (c["mamba_d_ssm"] + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) \
        * (c["mamba_d_conv"] - 1) * 2
    assert state_bytes_per_sequence(m, "bf16") == L * (rec + conv) == 28_698_624
    r = run_workload("h100", m, Scenario.of(phase="decode", batch=4, prompt=10_000, gen=1),
                     simulate=roofline)
    assert r.memory["breakdown"]["state"] == 4 * L * (rec + conv)


def _ssm_ops(w):
    return [op for op in w.blocks[1].ops if op.name.startswith(("ssm_", "in_proj_ssm",
                                                                  "out_proj_ssm"))]


def test_decode_cost_of_the_ssm_is_independent_of_the_context():
    m, B = load_model(NAME), 8
    a, b = _ssm_ops(decode(m, B, 100, tp=2)), _ssm_ops(decode(m, B, 16_000, tp=2))
    assert a == b and len(a) == 5
    rec = next(op for op in a if op.name == "ssm_recurrent")
    state = B * 12 * 64 * 128 * 4                       # 24 heads over 2 ranks, P 64, N 128
    assert rec.read_bytes == state + B * ((768 + 2 * 128) + 12) * 2
    assert rec.write_bytes == state + B * 768 * 2
    assert rec.flops == 5 * B * 12 * 64 * 128
    att = {ctx: next(op for op in decode(m, B, ctx, tp=2).blocks[1].ops
                     if op.name == "attention (fused)") for ctx in (100, 16_000)}
    assert att[16_000].read_bytes > 100 * att[100].read_bytes


def test_engine_times_the_ssm_alike_at_any_context():
    # the engine and the scheduled step: the Mamba-2 ops take the same time at 256 and 4,096
    # tokens of context, the attention beside them does not
    m = model_from_hf(TINY_H1, name="tiny-h1")
    t = {}
    for ctx in (256, 4096):
        r = run_workload("h100", m, Scenario.of(phase="decode", batch=8, prompt=ctx - 1, gen=1))
        t[ctx] = {x["op"]: x["seconds"] for x in r.to_dict()["layers"] if x["block"] == "layers"}
    ssm = [k for k in t[256] if "ssm" in k]
    assert len(ssm) == 5 and all(t[256][k] == t[4096][k] for k in ssm)
    assert t[4096]["attention (fused)"] > 4 * t[256]["attention (fused)"]


@pytest.mark.parametrize("L", [64, 100, 200])
def test_chunked_ssd_flops_match_the_closed_form(L):
    m, B = model_from_hf(TINY_H1, name="tiny-h1"), 3
    blk = prefill(m, B, L).blocks[1]
    got = sum(op.flops for op in blk.ops if isinstance(op, Gemm) and "ssm" in op.tags)
    C, N, Pd, H, G = 64, 16, 32, 8, 2
    k = math.ceil(L / C)
    # per chunk: C·Bᵀ per group C²·N; Bᵀ·X per head C·N·P; [C, CB∘L]·[S; X] per head C·(N+C)·P
    assert got == 2 * B * k * (G * C * C * N + H * (C * N * Pd + C * (N + C) * Pd))
    train = train_step(m, B, L, micro_batch=B)
    fwd_bwd = sum(op.flops * b.repeat for b in train.blocks if b.name.startswith("layers")
                  for op in b.ops if isinstance(op, Gemm) and "ssm" in op.tags)
    assert fwd_bwd == 3 * 4 * got                       # four layers, forward + 2× backward


@pytest.mark.parametrize("phase,kw", [("prefill", dict(prompt=100)),
                                      ("decode", dict(prompt=100, gen=4)),
                                      ("train", dict(seq=128))])
@pytest.mark.parametrize("tp", [1, 2])
def test_every_phase_runs(tp, phase, kw):
    for m in (model_from_hf(TINY_H1, name="tiny-h1"), load_model(NAME)):
        r = run_workload("h100", m, Scenario.of(phase=phase, batch=2, tp=tp, **kw),
                         simulate=roofline)
        assert r.seconds > 0 and r.flops > 0


def test_serve_runs_and_holds_the_state_per_request():
    res = serve(colocated("h100", NAME), Load(qps=8, prompt=P("200"), gen=P("16"), requests=8),
                oracles=StepTimerCache("grid", roofline))
    assert res.requests == 8
    lay = res.instances[0].layout
    # 28.7 MB of state over blocks of 16 tokens × 36 layers × 512 B
    assert lay.state_blocks == math.ceil(28_698_624 / (16 * 36 * 512)) == 98


@pytest.mark.parametrize("change,match", [
    ({"mamba_d_head": 48}, "mamba_d_head (48) × mamba_n_heads (24) must equal mamba_d_ssm (1536)"),
    ({"mamba_n_groups": 5}, "mamba_n_heads (24) must be divisible by mamba_n_groups (5)"),
    ({"mamba_d_state": 0}, "mamba_d_state must be an integer >= 1, not 0"),
])
def test_bad_configs_exit_2_naming_file_key_and_value(tmp_path, change, match):
    exits_2_naming(tmp_path, {**_cfg(), **change}, match)
