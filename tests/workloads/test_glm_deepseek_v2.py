"""GLM-4.5 (``Glm4MoeForCausalLM``) and DeepSeek-V2 (``DeepseekV2ForCausalLM``) from their HF
config.json (issue 25 item 4): parameter counts against hand formulas (each tensor as the
checkpoint stores it) and the model cards, the layer patterns, every phase and ``serve`` on
them, and bad configs exiting 2 naming the file, key and value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from roofline_double import roofline
from test_architectures import attn, embeddings, glu, near

from diptych.sim.run import Scenario, run_workload
from diptych.sim.serving.requests import parse_length as P
from diptych.sim.serving.serve import Load, StepTimerCache, colocated, serve
from diptych.tools.cli import main
from diptych.workloads import active_param_count, load_model, model_from_hf, param_count

MODELS = Path(__file__).parents[2] / "workloads" / "models"


def _cfg(name: str) -> dict:
    return json.loads((MODELS / f"{name}.json").read_text())


def glm_moe_layer(d: int, e: int, f: int, shared: int) -> int:
    """Router weight [E, d] and its e_score_correction_bias [E], E experts and the shared
    experts' MLP of ``shared · f``."""
    return d * e + e + e * glu(d, f) + glu(d, shared * f)


def mla(d: int, h: int, q_lora: int, kv_lora: int, nope: int, rope: int, v: int) -> int:
    """DeepSeek-V2's attention: q_a_proj, q_a_layernorm, q_b_proj (or one q_proj without query
    compression), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; and the two norms."""
    q = d * q_lora + q_lora + q_lora * h * (nope + rope) if q_lora else d * h * (nope + rope)
    kv = d * (kv_lora + rope) + kv_lora + kv_lora * h * (nope + v)
    return q + kv + h * v * d + 2 * d


def ds_moe_layer(d: int, e: int, f: int, shared: int) -> int:
    """V2's router weight [E, d] (no bias), E experts, the shared experts' MLP."""
    return d * e + e * glu(d, f) + glu(d, shared * f)


# model: (hand-formula total, hand-formula active), active with the routed experts at k/E
HAND = {
    "glm-4.5": tuple(
        3 * (attn(5120, 96, 8, 128, qkv_bias=True, qk_norm=True) + glu(5120, 12288))
        + 89 * (attn(5120, 96, 8, 128, qkv_bias=True, qk_norm=True)
                + glm_moe_layer(5120, 160, 1536, 1) - (160 - e) * glu(5120, 1536))
        + embeddings(151552, 5120, False) for e in (160, 8)),
    "glm-4.5-air": tuple(
        1 * (attn(4096, 96, 8, 128, qkv_bias=True) + glu(4096, 10944))
        + 45 * (attn(4096, 96, 8, 128, qkv_bias=True)
                + glm_moe_layer(4096, 128, 1408, 1) - (128 - e) * glu(4096, 1408))
        + embeddings(151552, 4096, False) for e in (128, 8)),
    "deepseek-v2": tuple(
        60 * mla(5120, 128, 1536, 512, 128, 64, 128) + glu(5120, 12288)
        + 59 * (ds_moe_layer(5120, 160, 1536, 2) - (160 - e) * glu(5120, 1536))
        + embeddings(102400, 5120, False) for e in (160, 6)),
    "deepseek-v2-lite": tuple(
        27 * mla(2048, 16, 0, 512, 128, 64, 128) + glu(2048, 10944)
        + 26 * (ds_moe_layer(2048, 64, 1408, 2) - (64 - e) * glu(2048, 1408))
        + embeddings(102400, 2048, False) for e in (64, 6)),
}


#: [P] model cards: GLM-4.5 "355 billion total parameters with 32 billion active", GLM-4.5-Air
#: "106 billion total ... 12 billion active" (zai-org/GLM-4.5 README); DeepSeek-V2 236B total /
#: 21B activated, DeepSeek-V2-Lite 15.7B / 2.4B (deepseek-ai/DeepSeek-V2 README, the V2 paper
#: arXiv:2405.04434). Active counts leave out the embedding table (a lookup), as gpt-oss's card
#: does: with it V2-Lite would be 2.66B.
CARDS = {"glm-4.5-air": ("106B", "12B"), "deepseek-v2": ("236B", "21B"),
         "deepseek-v2-lite": ("15.7B", "2.4B"), "glm-4.5": (None, "32B")}


@pytest.mark.parametrize("name", sorted(HAND))
def test_counts_match_hand_formulas_and_the_model_cards(name):
    m = load_model(name)
    assert (param_count(m), active_param_count(m)) == (HAND[name][0],
                                                       pytest.approx(HAND[name][1], rel=1e-12))
    total, active = CARDS[name]
    table = m.vocab_size * m.hidden_size
    if total:
        assert near(param_count(m), total)
    assert near(active_param_count(m) - table, active)


def test_glm45_total_brackets_the_card_with_its_mtp_layer():
    # Z.ai's "355B" is not the decoder's count (352.80B: 0.62 % below) and the checkpoint's
    # MTP layer (num_nextn_predict_layers = 1, not simulated) is one more MoE decoder layer
    # plus eh_proj [d, 2d] and its enorm/hnorm: with it 356.78B. The card lies between the
    # two; the decoder is held to 1 % (Maverick's rounding is held to 0.5 % likewise).
    m, d = load_model("glm-4.5"), 5120
    mtp = (attn(d, 96, 8, 128, qkv_bias=True, qk_norm=True) + glm_moe_layer(d, 160, 1536, 1)
           + 2 * d * d + 2 * d)
    assert m.mtp_layers == 1
    assert param_count(m) < 355e9 < param_count(m) + mtp
    assert abs(param_count(m) / 355e9 - 1) < 0.01


def test_layer_patterns_and_family_fields():
    glm, air = load_model("glm-4.5"), load_model("glm-4.5-air")
    assert glm.describe_layers() == "3 × full dense + 89 × full moe"
    assert air.describe_layers() == "1 × full dense + 45 × full moe"
    for m, qk in ((glm, "rmsnorm"), (air, "")):
        assert (m.qkv_bias, m.out_bias, m.router_bias, m.shared_experts) == (True, False,
                                                                             True, 1)
        assert m.rotary_fraction == 0.5 and m.qk_norm == qk and m.mtp_layers == 1
    v2, lite = load_model("deepseek-v2"), load_model("deepseek-v2-lite")
    assert v2.describe_layers() == "1 × full dense + 59 × full moe"
    assert (v2.is_mla, v2.router_bias, v2.shared_experts, v2.q_lora_rank) == (True, False, 2,
                                                                             1536)
    assert lite.q_lora_rank == 0 and lite.layers == 27 and lite.experts == 64
    # MLA caches the latent and the RoPE key: (512 + 64) elements per layer
    from diptych.workloads.params import kv_bytes_per_token
    assert kv_bytes_per_token(v2, "bf16") == 60 * (512 + 64) * 2


@pytest.mark.parametrize("name,tp", [("glm-4.5", 8), ("glm-4.5-air", 4), ("deepseek-v2", 8),
                                     ("deepseek-v2-lite", 1)])
@pytest.mark.parametrize("phase,kw", [("prefill", dict(prompt=64)),
                                      ("decode", dict(prompt=64, gen=4)),
                                      ("train", dict(seq=64))])
def test_every_phase_runs(name, tp, phase, kw):
    r = run_workload("h100", load_model(name), Scenario.of(phase=phase, batch=2, tp=tp, **kw),
                     simulate=roofline)
    assert r.seconds > 0 and r.flops > 0


@pytest.mark.parametrize("name,tp", [("glm-4.5", 8), ("glm-4.5-air", 4), ("deepseek-v2", 8),
                                     ("deepseek-v2-lite", 1)])
def test_serve_runs(name, tp):
    res = serve(colocated("h100", name, tp=tp, weights_dtype="fp8"),
                Load(qps=4, prompt=P("64"), gen=P("8"), requests=6),
                oracles=StepTimerCache("grid", roofline))
    assert res.requests == 6


@pytest.mark.parametrize("name,change,match", [
    ("glm-4.5", {"first_k_dense_replace": 93},
     r"c.json: first_k_dense_replace \(93\) must be at most num_hidden_layers \(92\)"),
    ("glm-4.5", {"n_routed_experts": 0}, r"c.json: n_routed_experts must be an integer >= 1"),
    ("glm-4.5", {"partial_rotary_factor": 2},
     r"c.json: partial_rotary_factor must be a number in \(0, 1\], not 2"),
    ("deepseek-v2-lite", {"first_k_dense_replace": 28},
     r"c.json: first_k_dense_replace \(28\) must be at most num_hidden_layers \(27\)"),
    ("deepseek-v2", {"num_experts_per_tok": 161},
     r"c.json: num_experts_per_tok \(161\) must be at most n_routed_experts \(160\)"),
])
def test_bad_fields_name_file_and_field(name, change, match):
    with pytest.raises(ValueError, match=match):
        model_from_hf({**_cfg(name), **change}, name="x", source="c.json")


@pytest.mark.parametrize("name,change,match", [
    # a layer-type list that does not match the layer count: the file, the key, the value
    ("gpt-oss-20b", {"layer_types": ["full_attention"] * 3},
     "layer_types must list one entry per layer (num_hidden_layers = 24), not 3"),
    ("qwen3-30b-a3b", {"mlp_only_layers": [0, 48]},
     "mlp_only_layers[1] (48) must be a layer index in [0, 48) (num_hidden_layers = 48)"),
    ("glm-4.5-air", {"first_k_dense_replace": 47},
     "first_k_dense_replace (47) must be at most num_hidden_layers (46)"),
])
def test_bad_layer_lists_exit_2_naming_file_key_and_value(tmp_path, name, change, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**_cfg(name), **change}))
    r = CliRunner().invoke(main, ["models", "show", str(path)])
    assert r.exit_code == 2, r.output
    assert f"{path}: {match}" in " ".join(r.output.split())


def test_models_show_notes_the_mtp_layer():
    r = CliRunner().invoke(main, ["models", "show", "glm-4.5"])
    assert r.exit_code == 0, r.output
    assert "1 next-token-prediction layer (num_nextn_predict_layers), not counted below; " \
        "serve's --speculative draft=mtp" in " ".join(r.output.split())
