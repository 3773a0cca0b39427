"""Model configs: built-ins against published parameter counts, HF parsing, bad configs."""

from __future__ import annotations

import json

import pytest

from diptych.workloads import (ARCHITECTURES, active_param_count, builtin_names,
                               kv_bytes_per_token, load_model, model_from_hf, param_count)
from diptych.workloads.params import kv_elements_per_token, params_per_chip

# Published totals (reference.md §5; GPT-3: Brown et al. 2020 Table 2.1).
PUBLISHED = {"llama-3-8b": 8.03e9, "llama-3-70b": 70.55e9, "llama-3.1-405b": 405.85e9,
             "mixtral-8x7b": 46.7e9, "deepseek-v3": 671e9, "gpt3-175b": 175e9}


# checked against their model cards in test_architectures.py, test_glm_deepseek_v2.py,
# test_qwen3_next.py and test_deepseek_v32.py
NEWER = ["gemma-2-27b", "gemma-2-9b", "gemma-3-12b", "gemma-3-27b", "gpt-oss-120b",
         "gpt-oss-20b", "llama-4-maverick", "llama-4-scout", "phi-3-medium-4k", "phi-3-mini-4k",
         "qwen3-235b-a22b", "qwen3-30b-a3b", "qwen3-32b", "qwen3-8b", "glm-4.5", "glm-4.5-air",
         "deepseek-v2", "deepseek-v2-lite", "qwen3-next-80b-a3b", "falcon-h1-0.5b",
         "deepseek-v3.2-exp"]


def test_builtins_are_listed():
    assert sorted([*PUBLISHED, *NEWER]) == builtin_names()


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published(name):
    n = param_count(load_model(name))
    assert abs(n / PUBLISHED[name] - 1) < 0.005, (name, n)


def test_llama3_8b_exact_hf_count():
    # HF sum(p.numel()) for Meta-Llama-3-8B (reference.md §5, thamada/modelQuery)
    assert param_count(load_model("llama-3-8b")) == 8_030_261_248


def test_llama_count_against_hand_formula():
    m = load_model("llama-3-70b")
    d, f, L, V, h, kv, dh = 8192, 28672, 80, 128256, 64, 8, 128
    hand = L * (d * (h + 2 * kv) * dh + h * dh * d + 3 * d * f + 2 * d) + d + 2 * V * d
    assert param_count(m) == hand


@pytest.mark.parametrize("name,active", [("mixtral-8x7b", 12.9e9), ("deepseek-v3", 37e9)])
def test_moe_active_parameters(name, active):
    # Mistral blog 12.9 B active; DeepSeek-V3 report 37 B activated
    assert abs(active_param_count(load_model(name)) / active - 1) < 0.02


def test_kv_bytes_per_token():
    assert kv_bytes_per_token(load_model("llama-3-70b"), "bf16") == 327_680
    assert kv_bytes_per_token(load_model("llama-3-8b"), "bf16") == 128 * 1024
    assert kv_bytes_per_token(load_model("llama-3.1-405b"), "bf16") == 504 * 1024
    assert kv_elements_per_token(load_model("deepseek-v3")) == (512 + 64) * 61
    assert kv_bytes_per_token(load_model("deepseek-v3"), "fp8") == 35_136
    assert kv_bytes_per_token(load_model("gpt3-175b"), "bf16") == 2 * 96 * 12288 * 2


# Exact HF parameter counts of public checkpoints (sum of numel over the state dict).
HF_CASES = [
    ({"architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_layer": 12, "n_head": 12,
      "vocab_size": 50257, "n_positions": 1024, "n_ctx": 1024}, 124_439_808),          # gpt2
    ({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
      "num_attention_heads": 14, "num_key_value_heads": 2, "num_hidden_layers": 24,
      "vocab_size": 151936, "tie_word_embeddings": True, "max_position_embeddings": 131072,
      "sliding_window": 131072, "use_sliding_window": False}, 494_032_768),     # Qwen2-0.5B
    ({"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
      "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096},
     7_241_732_096),                                                          # Mistral-7B-v0.1
]


@pytest.mark.parametrize("cfg,count", HF_CASES)
def test_hf_architectures_exact_counts(cfg, count):
    assert param_count(model_from_hf(cfg, name="x")) == count


def test_qwen2_window_off_and_mistral_window_on():
    assert model_from_hf(HF_CASES[1][0], name="q").sliding_window is None
    assert model_from_hf(HF_CASES[2][0], name="m").sliding_window == 4096


def test_user_config_file_loads(tmp_path):
    p = tmp_path / "my-model" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(HF_CASES[2][0]))
    m = load_model(str(p))
    assert m.name == "my-model" and param_count(m) == HF_CASES[2][1]
    assert load_model(str(p.parent)).name == "my-model"


def test_params_per_chip_splits_matrices_not_norms():
    m = load_model("llama-3-8b")
    n1, n8 = params_per_chip(m, 1), params_per_chip(m, 8)
    replicated = 2 * 4096 * 32 + 4096          # layer norms and final norm
    assert n1 == param_count(m)
    assert n8 == pytest.approx((n1 - replicated) / 8 + replicated)


def test_unsupported_architecture_lists_supported():
    with pytest.raises(ValueError) as e:
        model_from_hf({"architectures": ["BertModel"]}, name="b", source="cfg.json")
    msg = str(e.value)
    assert "BertModel" in msg and "cfg.json" in msg
    for a in ARCHITECTURES:
        assert a in msg


def test_hidden_not_divisible_by_heads():
    bad = dict(HF_CASES[2][0], hidden_size=4100)
    with pytest.raises(ValueError, match=r"hidden_size \(4100\) must be divisible by "
                                         r"num_attention_heads \(32\)"):
        model_from_hf(bad, name="x")


@pytest.mark.parametrize("field,value,match", [
    ("num_hidden_layers", 0, "num_hidden_layers must be an integer >= 1, not 0"),
    ("vocab_size", "big", "vocab_size must be an integer, not 'big'"),
    ("num_key_value_heads", 7, r"num_key_value_heads \(7\) must divide"),
])
def test_bad_fields(field, value, match):
    with pytest.raises(ValueError, match=match):
        model_from_hf(dict(HF_CASES[2][0], **{field: value}), name="x")


def test_missing_field_and_experts():
    cfg = dict(HF_CASES[2][0])
    del cfg["intermediate_size"]
    with pytest.raises(ValueError, match="intermediate_size is missing"):
        model_from_hf(cfg, name="x")
    mix = json.loads(json.dumps(HF_CASES[2][0]))
    mix.update(architectures=["MixtralForCausalLM"], num_local_experts=4, num_experts_per_tok=5)
    with pytest.raises(ValueError, match=r"num_experts_per_tok \(5\) must be at most"):
        model_from_hf(mix, name="x")


def test_unknown_model_name():
    with pytest.raises(ValueError, match="unknown model 'llama-9'.*llama-3-8b"):
        load_model("llama-9")


def test_invalid_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        load_model(str(p))
