"""Qwen3-Next (``Qwen3NextForCausalLM``): gated DeltaNet linear attention + gated attention
(issue 25 items 4-6). Parameter counts against a per-tensor hand formula and the model card,
the fixed state per sequence against its closed form from the config's own fields, decode
cost independent of the context in the linear layers, the chunked algorithm's FLOPs against
a closed form, every phase, and bad configs exiting 2 naming the file, key and value."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from roofline_double import roofline
from test_architectures import embeddings, glu, near
from tiny_models import TINY_NEXT as TINY

from diptych.sim.cluster import Plan, check_plan, plan_memory
from diptych.sim.run import Scenario, run_workload
from diptych.tools.cli import main
from diptych.workloads import (active_param_count, decode, decode_mean, kv_bytes_per_token,
                               load_model, model_from_hf, param_count, prefill, train_step)
from diptych.workloads.ops import Gemm
from diptych.workloads.params import state_bytes_per_sequence
from diptych.workloads.precision import Precision

MODELS = Path(__file__).parents[2] / "workloads" / "models"
NAME = "qwen3-next-80b-a3b"

def _cfg() -> dict:
    return json.loads((MODELS / f"{NAME}.json").read_text())


def _tiny():
    return model_from_hf(TINY, name="tiny-next")


def gdn(d: int, hk: int, hv: int, dk: int, dv: int, kernel: int) -> int:
    """A gated DeltaNet's tensors as HF's Qwen3NextGatedDeltaNet holds them: in_proj_qkvz,
    in_proj_ba, conv1d.weight [conv_dim, 1, kernel], dt_bias, A_log, norm.weight [d_v],
    out_proj."""
    key, val = hk * dk, hv * dv
    return (d * (2 * key + 2 * val) + d * 2 * hv + (2 * key + val) * kernel + 2 * hv + dv
            + val * d)


def gated_attn(d: int, h: int, kv: int, dh: int) -> int:
    """Qwen3NextAttention: q_proj of 2·H·d_h (queries and the output gate), k/v/o, q/k norms."""
    return d * 2 * h * dh + 2 * d * kv * dh + h * dh * d + 2 * dh


def moe(d: int, e: int, f: int, shared: int, routed: int) -> int:
    """Router [E, d], ``routed`` of the E experts, the shared expert and its gate [1, d]."""
    return d * e + routed * glu(d, f) + glu(d, shared) + d


def hand_count(c: dict, routed: int) -> int:
    d, n = c["hidden_size"], c["num_hidden_layers"]
    full = n // c["full_attention_interval"]
    lin = gdn(d, c["linear_num_key_heads"], c["linear_num_value_heads"],
              c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"])
    att = gated_attn(d, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
    mlp = moe(d, c["num_experts"], c["moe_intermediate_size"],
              c["shared_expert_intermediate_size"], routed)
    return ((n - full) * lin + full * att + n * (mlp + 2 * d)
            + embeddings(c["vocab_size"], d, c["tie_word_embeddings"]))


def test_counts_match_the_hand_formula_and_the_model_card():
    c, m = _cfg(), load_model(NAME)
    assert param_count(m) == hand_count(c, c["num_experts"]) == 79_674_391_296
    assert active_param_count(m) == pytest.approx(hand_count(c, c["num_experts_per_tok"]),
                                                  rel=1e-12)
    # the card: "80B in total and 3B activated"; Qwen's 3B leaves out the embedding table
    # and the LM head (its non-embedding counts do): 3.25 B
    assert abs(param_count(m) / 80e9 - 1) < 0.01
    assert near(active_param_count(m) - 2 * c["vocab_size"] * c["hidden_size"], "3B")


def test_layer_pattern_state_and_kv_bytes_from_the_config_fields():
    c, m = _cfg(), load_model(NAME)
    assert m.describe_layers() == "36 × linear moe + 12 × full moe"
    specs = m.layer_specs()
    assert [s.attention for s in specs[:4]] == ["linear"] * 3 + ["full"]
    full = c["num_hidden_layers"] // c["full_attention_interval"]
    lin = c["num_hidden_layers"] - full
    # KV: only the full-attention layers cache K/V (2 KV heads of 256, BF16)
    assert kv_bytes_per_token(m, "bf16") == full * 2 * c["num_key_value_heads"] * \
        c["head_dim"] * 2 == 24_576
    # state: each linear layer's d_k × d_v matrix per value head in FP32 and the conv's last
    # kernel − 1 inputs of its q/k/v channels in BF16, once per sequence
    rec = c["linear_num_value_heads"] * c["linear_key_head_dim"] * c["linear_value_head_dim"] * 4
    conv = (2 * c["linear_num_key_heads"] * c["linear_key_head_dim"] + c["linear_num_value_heads"]
            * c["linear_value_head_dim"]) * (c["linear_conv_kernel_dim"] - 1) * 2
    assert state_bytes_per_sequence(m, "bf16") == lin * (rec + conv) == 77_266_944
    assert state_bytes_per_sequence(m, "bf16", tp=4) == lin * (rec + conv) / 4
    # layer_types as a list gives the same model as the interval
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)]
    assert model_from_hf({**c, "layer_types": types}, name=NAME).layer_specs() == specs


def test_memory_fit_counts_the_state_once_per_sequence():
    c, m = _cfg(), load_model(NAME)
    per_tok_layer = 2 * c["num_key_value_heads"] * c["head_dim"] * 2
    seen = {}
    for ctx in (1024, 200_000):
        r = run_workload("h100", m, Scenario.of(phase="decode", batch=3, prompt=ctx - 1, gen=1),
                         simulate=roofline)
        bd = r.memory["breakdown"]
        assert bd["kv_cache"] == 3 * 12 * ctx * per_tok_layer
        seen[ctx] = bd["state"]
    assert seen[1024] == seen[200_000] == 3 * 77_266_944


def test_plan_memory_counts_each_stages_linear_layers_state_once_per_sequence():
    m = load_model(NAME)
    plan = Plan(tp=4, pp=2, dp=2)
    info = check_plan(plan, m, chips=plan.chips, batch=8, seq_len=1, phase="decode")
    for ctx in (4_096, 131_072):
        rep = plan_memory(m, plan, Precision(), phase="decode", seq=1,
                          micro_batches=info["micro_batches"],
                          layers_per_chunk=info["layers_per_chunk"], global_batch=8,
                          context=ctx, capacity_bytes=2**50)
        # a stage of 24 layers holds 18 linear ones; 4 sequences per data-parallel replica
        assert rep.breakdown["state"] == 4 * 18 * 77_266_944 / 36 / 4
        assert rep.breakdown["kv_cache"] == 4 * 6 * ctx * 2 * 1 * 256 * 2


def _linear_block(w):
    return next(b for b in w.blocks if "linear" in b.name)


def test_decode_cost_of_the_linear_layers_is_independent_of_the_context():
    m, B = load_model(NAME), 8
    a = _linear_block(decode(m, B, 1_000, tp=4))
    b = _linear_block(decode(m, B, 250_000, tp=4))
    c = _linear_block(decode_mean(m, B, 100_000, 5_000, tp=4))
    assert a.ops == b.ops == c.ops
    # closed form: the recurrence reads and writes each sequence's state once per step
    rec = next(op for op in a.ops if op.name == "gdn_recurrent")
    state = B * 32 // 4 * 128 * 128 * 4
    T = B
    inputs = T * ((2 * 16 * 128 + 32 * 128) // 4 * 2 + 2 * 32 // 4 * 4)    # q/k/v, g, beta
    assert rec.read_bytes == state + inputs
    assert rec.write_bytes == state + T * 32 // 4 * 128 * 2
    assert rec.flops == 7 * B * 32 // 4 * 128 * 128
    # timed (roofline double): the full-attention layers grow with the context, the linear
    # ones do not
    times = {}
    for ctx in (1_000, 250_000):
        r = run_workload("h100", m, Scenario.of(phase="decode", batch=B, prompt=ctx - 1, gen=1,
                                                tp=4, execution="sum"), simulate=roofline)
        times[ctx] = {blk: sum(x["total_seconds"] for x in r.to_dict()["layers"]
                               if x["block"] == blk)
                      for blk in ("layers (moe, linear)", "layers (moe, full)")}
    assert times[1_000]["layers (moe, linear)"] == times[250_000]["layers (moe, linear)"]
    assert times[250_000]["layers (moe, full)"] > 2 * times[1_000]["layers (moe, full)"]


def test_engine_times_the_linear_layers_alike_at_any_context():
    # the engine and the scheduled step (residency, fusion, launches), not a double: each op
    # of the linear layers takes the same time at 256 and 4,096 tokens of context, the full
    # layers' attention does not
    m = _tiny()
    t = {}
    for ctx in (256, 4096):
        r = run_workload("h100", m, Scenario.of(phase="decode", batch=8, prompt=ctx - 1, gen=1))
        t[ctx] = {(x["block"], x["op"]): x["seconds"] for x in r.to_dict()["layers"]}
    lin = [k for k in t[256] if "linear" in k[0]]
    assert len(lin) > 10 and all(t[256][k] == t[4096][k] for k in lin)
    att = ("layers (moe, full)", "attention (fused)")
    assert t[4096][att] > 4 * t[256][att]


def chunked_macs(B: int, hv: int, dk: int, dv: int, L: int) -> int:
    """MACs of flash-linear-attention's chunked gated delta rule over one layer (closed form,
    chunks of 64 tokens, the last one computed whole): per (sequence, value head, chunk)
    ``β k kᵀ`` C²·d_k, solve_tril's 16 block products of 16³ (= C³/4), ``A⁻¹[k v]``
    C²·(d_k + d_v), the state pass 2·C·d_k·d_v, ``q kᵀ`` C²·d_k, the output C·(d_k + C)·d_v."""
    C = 64
    per = (C * C * dk + 16 * 16**3 + C * C * (dk + dv) + 2 * C * dk * dv + C * C * dk
           + C * (dk + C) * dv)
    return B * hv * math.ceil(L / C) * per


@pytest.mark.parametrize("L", [64, 100, 300])
def test_chunked_flops_match_the_closed_form(L):
    m, B, d = _tiny(), 2, 256
    blk = _linear_block(prefill(m, B, L))
    got = sum(op.flops for op in blk.ops if isinstance(op, Gemm) and "gdn" in op.tags)
    assert got == 2 * chunked_macs(B, 4, 16, 24, L)
    # the projections: 2 FLOPs per token per weight of in_proj_qkvz, in_proj_ba, out_proj
    proj = sum(op.flops for op in blk.ops if isinstance(op, Gemm) and "weight" in op.tags
               and op.name in ("in_proj_qkvz", "in_proj_ba", "out_proj"))
    assert proj == 2 * B * L * d * ((2 * 2 * 16 + 2 * 4 * 24) + 2 * 4 + 4 * 24)
    # training: backward derived op by op, 3 × the forward's GEMM FLOPs
    w = train_step(m, B, L, micro_batch=B)
    train = sum(op.flops * b.repeat for b in w.blocks if "linear" in b.name
                for op in b.ops if isinstance(op, Gemm) and "gdn" in op.tags)
    assert train == 3 * got * 2            # two linear layers
    # decode: 7 ALU ops per state element per token, nothing per context token
    rec = next(op for op in _linear_block(decode(m, B, 5_000)).ops if op.name == "gdn_recurrent")
    assert rec.flops == 7 * B * 4 * 16 * 24


@pytest.mark.parametrize("phase,kw", [("prefill", dict(prompt=100)),
                                      ("decode", dict(prompt=100, gen=4)),
                                      ("train", dict(seq=128))])
@pytest.mark.parametrize("which,tp", [("tiny", 1), ("tiny", 2), (NAME, 4)])
def test_every_phase_runs(which, tp, phase, kw):
    m = _tiny() if which == "tiny" else load_model(NAME)
    r = run_workload("h100", m, Scenario.of(phase=phase, batch=2, tp=tp, **kw),
                     simulate=roofline)
    assert r.seconds > 0 and r.flops > 0


@pytest.mark.parametrize("change,match", [
    # a layer-type list that does not match the layer count: the file, the key, the value
    ({"layer_types": ["linear_attention"] * 47},
     "layer_types must list one entry per layer (num_hidden_layers = 48), not 47"),
    ({"layer_types": ["linear_attention"] * 47 + ["sliding_attention"]},
     "layer_types[47]: 'sliding_attention' is not one of 'linear_attention', 'full_attention'"),
    ({"full_attention_interval": 0}, "full_attention_interval must be an integer >= 1, not 0"),
    ({"linear_num_value_heads": 24},
     "linear_num_value_heads (24) must be a multiple of linear_num_key_heads (16)"),
])
def test_bad_configs_exit_2_naming_file_key_and_value(tmp_path, change, match):
    exits_2_naming(tmp_path, {**_cfg(), **change}, match)


def exits_2_naming(tmp_path, config: dict, match: str) -> None:
    """``models show`` of ``config`` written to a file exits 2 with ``<file>: <match>``."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config))
    r = CliRunner().invoke(main, ["models", "show", str(path)])
    assert r.exit_code == 2, r.output
    assert f"{path}: {match}" in " ".join(r.output.split())


@pytest.mark.parametrize("name", [NAME, "falcon-h1-0.5b"])
def test_context_parallelism_is_refused_for_state_layers(name):
    m = load_model(name)
    with pytest.raises(ValueError, match="cp=2: context parallelism of .* is not modelled"):
        prefill(m, 1, 256, cp=2)
    with pytest.raises(ValueError, match="cp=2: context parallelism of .* is not modelled"):
        check_plan(Plan(tp=1, cp=2), m, chips=2, batch=2, seq_len=256)


def test_tp_must_split_the_linear_heads():
    m = model_from_hf({**TINY, "linear_num_key_heads": 1, "linear_num_value_heads": 3},
                      name="odd")
    with pytest.raises(ValueError, match=r"linear-attention key and value heads \(1, 3\)"):
        prefill(m, 1, 16, tp=2)


def test_models_show_prints_state_per_sequence_and_kv_per_token():
    r = CliRunner().invoke(main, ["models", "show", NAME])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "KV bytes/token bf16 │ 24,576" in out
    assert "state bytes/sequence │ 77,266,944 (36 layers × (2,097,152 B recurrent fp32 + " \
           "49,152 B conv bf16)" in out
    assert "12 of 48 layers" in out
    # the checkpoint's MTP module (mtp.*; vLLM reads num_nextn_predict_layers, 1 when absent)
    assert "1 next-token-prediction layer (num_nextn_predict_layers), not counted below; " \
        "serve's --speculative draft=mtp" in out
