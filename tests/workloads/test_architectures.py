"""Qwen3, Gemma 2/3, gpt-oss, Llama 4 and Phi-3: parameter counts against hand formulas and the
published figures, the per-layer patterns their HF configs describe, and bad configs.

Hand formulas below list each tensor as the HF checkpoint stores it (an independent reference
to ``params.weight_tensors``). Published figures are rounded: a count agrees with one when it
lies within one unit of the figure's last digit (``near``), which covers rounding and the
truncation some cards use (Qwen3-30B-A3B's 3.35 B active parameters are printed "3.3B").
"""

from __future__ import annotations

import json

import pytest

from diptych.workloads import active_param_count, load_model, model_from_hf, param_count
from diptych.workloads.config import LayerSpec


def near(ours: float, published: str) -> bool:
    """``ours`` within one unit of the last digit of ``published`` ("8.2B", "25,600M")."""
    num, scale = published[:-1].replace(",", ""), {"B": 1e9, "M": 1e6}[published[-1]]
    decimals = len(num.split(".")[1]) if "." in num else 0
    return abs(ours - float(num) * scale) < scale * 10.0**-decimals


def attn(d: int, h: int, kv: int, dh: int, *, qkv_bias=False, o_bias=False, qk_norm=False,
         sinks=False, norms=2) -> int:
    """One layer's attention tensors and its RMSNorm weights."""
    n = d * h * dh + 2 * d * kv * dh + h * dh * d         # q_proj, k_proj, v_proj, o_proj
    n += (h * dh + 2 * kv * dh) if qkv_bias else 0         # q/k/v biases
    n += d if o_bias else 0                                # o_proj bias
    n += 2 * dh if qk_norm else 0                          # q_norm, k_norm
    n += h if sinks else 0                                 # self_attn.sinks
    return n + norms * d                                   # pre (and post) attn/MLP norms


def glu(d: int, f: int) -> int:
    """gate_proj, up_proj, down_proj (Phi-3's fused gate_up_proj has the same shape)."""
    return 3 * d * f


def embeddings(v: int, d: int, tied: bool) -> int:
    return v * d * (1 if tied else 2) + d                  # + the final norm


def gpt_oss_experts(e: int, d: int = 2880, f: int = 2880) -> int:
    """gate_up_proj [E, d, 2f] + its bias [E, 2f], down_proj [E, f, d] + its bias [E, d]."""
    return e * (d * 2 * f + 2 * f + f * d + d)


def llama4_vision(v: dict, text_d: int) -> int:
    """Llama 4's vision tower and projector, tensor by tensor (not simulated; only to compare
    with the card's totals, which include it)."""
    w, f, layers, p = (v["hidden_size"], v["intermediate_size"], v["num_hidden_layers"],
                       v["patch_size"])
    patches = (v["image_size"] // p) ** 2
    emb = w + (patches + 1) * w + v["num_channels"] * p * p * w + 4 * w   # cls, pos, patch, LNs
    layer = 4 * (w * w + w) + (w * f + f) + (f * w + w) + 4 * w            # attn, fc1, fc2, LNs
    shuffled = int(w / v["pixel_shuffle_ratio"] ** 2)
    adapter = shuffled * v["projector_input_dim"] + v["projector_input_dim"] * \
        v["projector_output_dim"]
    return emb + layers * layer + adapter + v["vision_output_dim"] * text_d


# model: (hand-formula total, hand-formula active)
HAND = {
    "qwen3-8b": (36 * (attn(4096, 32, 8, 128, qk_norm=True) + glu(4096, 12288))
                 + embeddings(151936, 4096, False),) * 2,
    "qwen3-32b": (64 * (attn(5120, 64, 8, 128, qk_norm=True) + glu(5120, 25600))
                  + embeddings(151936, 5120, False),) * 2,
    "qwen3-30b-a3b": tuple(48 * (attn(2048, 32, 4, 128, qk_norm=True) + 2048 * 128
                                 + e * glu(2048, 768)) + embeddings(151936, 2048, False)
                           for e in (128, 8)),
    "qwen3-235b-a22b": tuple(94 * (attn(4096, 64, 4, 128, qk_norm=True) + 4096 * 128
                                   + e * glu(4096, 1536)) + embeddings(151936, 4096, False)
                             for e in (128, 8)),
    "gemma-2-9b": (42 * (attn(3584, 16, 8, 256, norms=4) + glu(3584, 14336))
                   + embeddings(256000, 3584, True),) * 2,
    "gemma-2-27b": (46 * (attn(4608, 32, 16, 128, norms=4) + glu(4608, 36864))
                    + embeddings(256000, 4608, True),) * 2,
    "gemma-3-12b": (48 * (attn(3840, 16, 8, 256, qk_norm=True, norms=4) + glu(3840, 15360))
                    + embeddings(262208, 3840, True),) * 2,
    "gemma-3-27b": (62 * (attn(5376, 32, 16, 128, qk_norm=True, norms=4) + glu(5376, 21504))
                    + embeddings(262208, 5376, True),) * 2,
    "gpt-oss-20b": tuple(24 * (attn(2880, 64, 8, 64, qkv_bias=True, o_bias=True, sinks=True)
                               + 2880 * 32 + 32 + gpt_oss_experts(32) * k // 32)
                         + embeddings(201088, 2880, False) for k in (32, 4)),
    "gpt-oss-120b": tuple(36 * (attn(2880, 64, 8, 64, qkv_bias=True, o_bias=True, sinks=True)
                                + 2880 * 128 + 128 + gpt_oss_experts(128) * k // 128)
                          + embeddings(201088, 2880, False) for k in (128, 4)),
    "llama-4-scout": tuple(48 * (attn(5120, 40, 8, 128) + 5120 * 16 + (e + 1) * glu(5120, 8192))
                           + embeddings(202048, 5120, False) for e in (16, 1)),
    "llama-4-maverick": tuple(24 * (attn(5120, 40, 8, 128) + 5120 * 128 + (e + 1) *
                                    glu(5120, 8192))
                              + 24 * (attn(5120, 40, 8, 128) + glu(5120, 16384))
                              + embeddings(202048, 5120, False) for e in (128, 1)),
    "phi-3-mini-4k": (32 * (attn(3072, 32, 32, 96) + glu(3072, 8192))
                      + embeddings(32064, 3072, False),) * 2,
    "phi-3-medium-4k": (40 * (attn(5120, 40, 10, 128) + glu(5120, 17920))
                        + embeddings(32064, 5120, False),) * 2,
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_counts_match_hand_formulas(name):
    m = load_model(name)
    total, active = HAND[name]
    assert param_count(m) == total
    assert active_param_count(m) == pytest.approx(active, rel=1e-12)


def _embedding_table(m) -> int:
    return m.vocab_size * m.hidden_size


def _non_embedding(m) -> int:
    """Everything but the embedding table and an untied LM head (Qwen's and Gemma's
    "non-embedding" count; the final norm is in it)."""
    return param_count(m) - _embedding_table(m) * (1 if m.tie_word_embeddings else 2)


# [P] Qwen3 model cards on huggingface.co/Qwen (Model Overview: "Number of Parameters",
# "Number of Parameters (Non-Embedding)", "Number of Activated Parameters").
QWEN3 = {"qwen3-8b": ("8.2B", "6.95B", None), "qwen3-32b": ("32.8B", "31.2B", None),
         "qwen3-30b-a3b": ("30.5B", "29.9B", "3.3B"),
         "qwen3-235b-a22b": ("235B", "234B", "22B")}


@pytest.mark.parametrize("name", sorted(QWEN3))
def test_qwen3_against_model_cards(name):
    m = load_model(name)
    total, non_emb, active = QWEN3[name]
    assert near(param_count(m), total) and near(_non_embedding(m), non_emb)
    if active:
        assert near(active_param_count(m), active)


def test_gemma2_exact_against_the_report():
    # [P] Gemma 2 report (arXiv:2408.00118), parameter table: non-embedding 8,324,201,984 (9B)
    # and 26,047,480,320 (27B); its embedding counts a 256,128-row table (917,962,752 = 256,128
    # × 3584), HF's checkpoint stores 256,000 rows.
    for name, non_emb, d in (("gemma-2-9b", 8_324_201_984, 3584),
                             ("gemma-2-27b", 26_047_480_320, 4608)):
        m = load_model(name)
        assert _non_embedding(m) == non_emb
        assert param_count(m) == non_emb + 256_000 * d


GEMMA3_1B = {   # google/gemma-3-1b-it config.json: the text-only Gemma3ForCausalLM
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False,
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
    "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
    "num_hidden_layers": 26, "num_key_value_heads": 1, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": None,
    "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "vocab_size": 262144}


def test_gemma3_against_the_report():
    # [P] Gemma 3 report (arXiv:2503.19786) Table 1, (embedding, non-embedding) parameters;
    # its embedding count includes the 1152 → d multimodal projection (and the 417M SigLIP
    # vision encoder, which we do not simulate, is listed apart).
    one = model_from_hf(GEMMA3_1B, name="gemma-3-1b")
    assert near(_embedding_table(one), "302M") and near(_non_embedding(one), "698M")
    for name, emb, non_emb in (("gemma-3-12b", "1,012M", "10,759M"),
                               ("gemma-3-27b", "1,416M", "25,600M")):
        m = load_model(name)
        projector = 1152 * m.hidden_size
        assert near(_embedding_table(m) + projector, emb), name
        assert near(_non_embedding(m), non_emb), name


def test_gpt_oss_against_the_model_card():
    # [P] gpt-oss model card (OpenAI, 2025): 116.8B total / 5.1B active and 20.9B / 3.6B. Its
    # active count leaves out the embedding table (a lookup) but counts the unembedding:
    # with it the 120b would be 5.7B active.
    for name, total, active in (("gpt-oss-120b", "116.8B", "5.1B"),
                                ("gpt-oss-20b", "20.9B", "3.6B")):
        m = load_model(name)
        assert near(param_count(m), total)
        assert near(active_param_count(m) - _embedding_table(m), active)
        assert not near(active_param_count(m), active)


def test_llama4_against_the_model_card():
    # [P] Llama 4 model card (Meta, 2025): Scout 17B active / 109B total, Maverick 17B / 400B,
    # totals with the vision encoder. Meta rounds Maverick's 401.6B to a round 400B, so the
    # totals are held to 0.5 % (one unit of a 3-digit figure) and the active counts to "17B".
    for name, total in (("llama-4-scout", 109e9), ("llama-4-maverick", 400e9)):
        m = load_model(name)
        cfg = json.loads((_models_dir() / f"{name}.json").read_text())
        vision = llama4_vision(cfg["vision_config"], m.hidden_size)
        assert abs((param_count(m) + vision) / total - 1) < 0.005, name
        assert near(active_param_count(m), "17B"), name


def test_phi3_against_the_report():
    # [P] Phi-3 report (arXiv:2404.14219): phi-3-mini 3.8B, phi-3-medium 14B parameters.
    assert near(param_count(load_model("phi-3-mini-4k")), "3.8B")
    assert near(param_count(load_model("phi-3-medium-4k")), "14B")


def _models_dir():
    from importlib import resources
    return resources.files("diptych.workloads.models")


# --- per-layer patterns from the configs --------------------------------------------------

def _pattern(m) -> list[tuple[str, int | None]]:
    return [(s.attention, s.window) for s in m.layer_specs()]


def test_gemma2_alternates_sliding_and_global():
    m = load_model("gemma-2-9b")
    assert _pattern(m) == [("sliding", 4096) if i % 2 == 0 else ("full", None)
                           for i in range(42)]
    assert (m.attn_logit_softcap, m.final_logit_softcap) == (50.0, 30.0)
    assert m.sandwich_norms and m.scale_embeddings and m.tie_word_embeddings
    assert m.activation == "geglu" and m.qk_norm == ""


def test_gemma3_five_local_to_one_global_and_nested_defaults():
    m = load_model("gemma-3-27b")
    glob = [i for i, s in enumerate(m.layer_specs()) if s.attention == "full"]
    assert glob == list(range(5, 62, 6))                      # layers 6, 12, ... (1-based)
    assert {s.window for s in m.layer_specs() if s.attention == "sliding"} == {1024}
    assert m.attn_logit_softcap is None and m.final_logit_softcap is None
    assert m.qk_norm == "rmsnorm"
    # fields text_config leaves to Gemma3TextConfig's defaults
    assert (m.vocab_size, m.max_position_embeddings) == (262_208, 131_072)
    assert load_model("gemma-3-12b").head_dim == 256
    # a newer config spelling the pattern out as layer_types wins over sliding_window_pattern
    cfg = dict(GEMMA3_1B, layer_types=["full_attention"] * 26)
    assert {s.attention for s in model_from_hf(cfg, name="x").layer_specs()} == {"full"}


def test_gpt_oss_layers():
    m = load_model("gpt-oss-120b")
    assert _pattern(m) == [("sliding", 128), ("full", None)] * 18
    assert all(s.moe for s in m.layer_specs())
    assert m.attention_sinks and m.qkv_bias and m.out_bias and m.mlp_bias and m.router_bias
    assert (m.experts, m.experts_per_token, m.activation) == (128, 4, "swiglu_clamped")


def test_llama4_chunked_nope_and_interleaved_moe():
    scout, mav = load_model("llama-4-scout"), load_model("llama-4-maverick")
    for m in (scout, mav):
        specs = m.layer_specs()
        nope = [i for i, s in enumerate(specs) if not s.rope]
        assert nope == list(range(3, 48, 4))
        assert all(s.attention == "full" for i, s in enumerate(specs) if i in nope)
        assert all(s == LayerSpec("chunked", 8192, s.moe, True, s.qk_norm)
                   for i, s in enumerate(specs) if i not in nope)
        assert (m.moe_intermediate_size, m.intermediate_size, m.shared_experts) == \
            (8192, 16384, 1)
    assert all(s.moe for s in scout.layer_specs())
    # Maverick gives no moe_layers: interleave_moe_layer_step 2 makes the odd layers MoE
    assert [s.moe for s in mav.layer_specs()] == [i % 2 == 1 for i in range(48)]
    # Scout's L2 q/k norm (no weights) only on its RoPE layers; Maverick has none
    assert [s.qk_norm for s in scout.layer_specs()] == [s.rope for s in scout.layer_specs()]
    assert not any(s.qk_norm for s in mav.layer_specs())


def test_qwen3_moe_dense_layers_and_qwen_windows():
    cfg = json.loads((_models_dir() / "qwen3-30b-a3b.json").read_text())
    m = model_from_hf(dict(cfg, mlp_only_layers=[0, 47], decoder_sparse_step=2), name="x")
    assert [s.moe for s in m.layer_specs()] == [i % 2 == 1 and i != 47 for i in range(48)]
    d, n_moe = 2048, 23
    hand = (48 * attn(d, 32, 4, 128, qk_norm=True) + n_moe * (d * 128 + 128 * glu(d, 768))
            + 25 * glu(d, 6144) + embeddings(151936, d, False))
    assert param_count(m) == hand
    # use_sliding_window: the layers from max_window_layers on slide (HF Qwen2/Qwen3)
    w = model_from_hf(dict(json.loads((_models_dir() / "qwen3-8b.json").read_text()),
                           use_sliding_window=True, sliding_window=4096, max_window_layers=28),
                      name="w")
    assert _pattern(w) == [("full", None)] * 28 + [("sliding", 4096)] * 8


def test_phi3_window_and_partial_rotary():
    m = load_model("phi-3-mini-4k")
    assert _pattern(m) == [("sliding", 2047)] * 32
    cfg = json.loads((_models_dir() / "phi-3-mini-4k.json").read_text())
    assert model_from_hf(dict(cfg, partial_rotary_factor=0.75), name="x").rotary_fraction == 0.75


# --- bad configs ----------------------------------------------------------------------------

def _cfg(name: str) -> dict:
    return json.loads((_models_dir() / f"{name}.json").read_text())


@pytest.mark.parametrize("archs", [[["LlamaForCausalLM"]], "LlamaForCausalLM", [3]])
def test_architectures_must_be_a_list_of_strings(archs):
    cfg = dict(_cfg("llama-3-8b"), architectures=archs)
    with pytest.raises(ValueError, match=r"cfg.json: architectures must be a list of "
                                         r"architecture names \(strings\)"):
        model_from_hf(cfg, name="x", source="cfg.json")


@pytest.mark.parametrize("name,change,match", [
    ("gpt-oss-20b", {"layer_types": ["full_attention"] * 3},
     r"c.json: layer_types must list one entry per layer \(num_hidden_layers = 24\), not 3"),
    ("gpt-oss-20b", {"layer_types": ["sliding_attention"] * 23 + ["global"]},
     r"c.json: layer_types\[23\]: 'global' is not one of"),
    ("gpt-oss-20b", {"sliding_window": None}, r"c.json: sliding_window is missing"),
    ("gemma-2-9b", {"attn_logit_softcapping": -1.0},
     r"c.json: attn_logit_softcapping must be a positive number or null, not -1.0"),
    ("gemma-3-27b", {"text_config": None},
     r"c.json: text_config must be an object holding the language model's fields"),
    ("gemma-3-27b", {"text_config": {"num_hidden_layers": 0}},
     r"c.json: text_config.num_hidden_layers must be an integer >= 1, not 0"),
    ("llama-4-scout", {"text_config": {"moe_layers": [0, 48]}},
     r"c.json: text_config.moe_layers\[1\] \(48\) must be a layer index in \[0, 48\)"),
    ("llama-4-scout", {"text_config": {"no_rope_layers": [2] * 48}},
     r"c.json: text_config.no_rope_layers\[0\]: 2 is not one of 1, 0"),
    ("qwen3-30b-a3b", {"num_experts_per_tok": 200},
     r"c.json: num_experts_per_tok \(200\) must be at most num_experts \(128\)"),
    ("phi-3-mini-4k", {"partial_rotary_factor": 0},
     r"c.json: partial_rotary_factor must be a number in \(0, 1\], not 0"),
    ("gemma-2-9b", {"hidden_activation": "relu"},
     r"c.json: hidden_activation: unsupported activation 'relu' for Gemma2ForCausalLM"),
])
def test_bad_fields_name_file_and_field(name, change, match):
    cfg = _cfg(name)
    for k, v in change.items():
        if k == "text_config" and isinstance(v, dict):
            cfg[k] = dict(cfg[k], **v)
        else:
            cfg[k] = v
    with pytest.raises(ValueError, match=match):
        model_from_hf(cfg, name="x", source="c.json")


def test_model_config_validates_its_layer_pattern():
    m = load_model("gemma-2-9b")
    from dataclasses import replace
    with pytest.raises(ValueError, match=r"layer_attention must be empty or one entry per layer "
                                         r"\(42\), not 3 entries"):
        replace(m, layer_attention=("full",) * 3)
    with pytest.raises(ValueError, match=r"attention_chunk_size must be set .* chunked"):
        replace(m, layer_attention=("chunked",) * 42)
    with pytest.raises(ValueError, match=r"layer_moe must be all False for a model without"):
        replace(m, layer_moe=(True,) * 42)
    with pytest.raises(ValueError, match=r"layer_attention\[0\] must be one of full, sliding"):
        replace(m, layer_attention=("local",) + ("full",) * 41)
