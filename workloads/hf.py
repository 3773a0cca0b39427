"""HF ``config.json`` fields → :class:`~diptych.workloads.config.ModelConfig` arguments.

One function per architecture family reads the fields its HF configuration class defines, with
that class's defaults where the published configs rely on them (Gemma 3's and Llama 4's nested
``text_config`` leave most fields to the defaults of ``Gemma3TextConfig`` / ``Llama4TextConfig``,
transformers 4.51). Every value is validated when read: a message names the file, the field
(``text_config.num_hidden_layers`` for nested ones), the value and what was expected.
"""

from __future__ import annotations

import warnings

from typing import Any

#: HF ``architectures`` entry → family (see :mod:`diptych.workloads.config`).
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "llama",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Phi3ForCausalLM": "phi3",
    "MixtralForCausalLM": "mixtral",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "Gemma3ForConditionalGeneration": "gemma3",
    "GptOssForCausalLM": "gpt_oss",
    "Llama4ForCausalLM": "llama4",
    "Llama4ForConditionalGeneration": "llama4",
    "GPT2LMHeadModel": "gpt2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "Glm4MoeForCausalLM": "glm4_moe",
    "Qwen3NextForCausalLM": "qwen3_next",
    "FalconH1ForCausalLM": "falcon_h1",
}

#: HF ``layer_types`` entries → per-layer attention kind.
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding",
               "chunked_attention": "chunked"}

#: Qwen3-Next's ``layer_types`` entries (gated DeltaNet or gated full attention).
QWEN3_NEXT_LAYER_TYPES = {"linear_attention": "linear", "full_attention": "full"}
#: ``Qwen3NextConfig`` defaults (transformers) for the gated DeltaNet fields a config may omit
#: [P: transformers src/transformers/models/qwen3_next/configuration_qwen3_next.py].
QWEN3_NEXT_DEFAULTS = {
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "full_attention_interval": 4,
    "head_dim": 256,
}

#: ``FalconH1Config`` defaults (transformers) for the Mamba-2 fields a config may omit
#: [P: transformers src/transformers/models/falcon_h1/configuration_falcon_h1.py].
FALCON_H1_DEFAULTS = {
    "mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
    "mamba_expand": 2, "mamba_chunk_size": 256,
}

#: ``Gemma3TextConfig`` defaults (transformers 4.51) for the fields the Gemma 3 multimodal
#: configs omit from ``text_config`` (gemma-3-4b-it gives only 5 fields) [P: transformers
#: src/transformers/models/gemma3/configuration_gemma3.py].
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "max_position_embeddings": 131_072, "sliding_window": 4096, "sliding_window_pattern": 6,
    "hidden_activation": "gelu_pytorch_tanh",
}
#: ``Llama4TextConfig`` defaults (transformers 4.51) [P: transformers
#: src/transformers/models/llama4/configuration_llama4.py].
LLAMA4_TEXT_DEFAULTS = {
    "vocab_size": 202_048, "hidden_size": 5120, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131_072,
    "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
    "no_rope_layer_interval": 4, "attention_chunk_size": 8192,
}

_GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new", "gelu")
_SILU = ("silu", "swish")


#: Largest integers accepted: layers are built one by one, so their count is bounded tightly
#: (the deepest published models have ~100-200 layers); every other integer at 2**40.
MAX_INT: dict = {"num_hidden_layers": 10_000, "n_layer": 10_000, None: 2**40}


class Fields:
    """Typed reads of one config dict (``prefix`` names a nested one, e.g. ``text_config.``);
    ``defaults`` are the HF configuration class's values for absent keys."""

    def __init__(self, d: dict, source: str | None, prefix: str = "",
                 defaults: dict | None = None):
        self.d, self.source, self.prefix = d, source, prefix
        self.defaults = defaults or {}

    def where(self, key: str) -> str:
        return f"{self.source}: {self.prefix}{key}" if self.source else self.prefix + key

    def has(self, key: str) -> bool:
        return key in self.d and self.d[key] is not None

    def nested(self, key: str, arch: str) -> "Fields":
        v = self.d.get(key)
        if not isinstance(v, dict):
            raise ValueError(f"{self.where(key)} must be an object holding the language "
                             f"model's fields ({arch} nests them there), not {v!r}")
        return Fields(v, self.source, f"{self.prefix}{key}.", self.defaults)

    def with_defaults(self, defaults: dict) -> "Fields":
        return Fields(self.d, self.source, self.prefix, defaults)

    def _lookup(self, keys: tuple[str, ...], default: Any) -> tuple[str, Any, bool]:
        """(key, value, whether to validate it): the first present key of ``keys``, else
        ``default`` (trusted as is), else the class default of ``keys[0]``."""
        for k in keys:
            if self.has(k):
                return k, self.d[k], True
        if default is not ...:
            return keys[0], default, False
        if keys[0] in self.defaults:
            return keys[0], self.defaults[keys[0]], True
        raise ValueError(f"{self.where(keys[0])} is missing (required by this architecture)")

    def int(self, *keys: str, default: Any = ..., minimum: int | None = 1) -> Any:
        """The first present key of ``keys`` as an integer ``>= minimum``."""
        k, v, check = self._lookup(keys, default)
        if not check:
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{self.where(k)} must be an integer, not {v!r}")
        if minimum is not None and v < minimum:
            raise ValueError(f"{self.where(k)} must be an integer >= {minimum}, not {v!r}")
        top = MAX_INT.get(k, MAX_INT[None])
        if v > top:
            raise ValueError(f"{self.where(k)} must be an integer <= {top:,}, not {v!r}")
        return v

    def bool(self, *keys: str, default: Any = ...) -> Any:
        k, v, check = self._lookup(keys, default)
        if check and not isinstance(v, bool):
            raise ValueError(f"{self.where(k)} must be true or false, not {v!r}")
        return v

    def str(self, *keys: str, default: Any = ...) -> Any:
        k, v, check = self._lookup(keys, default)
        if check and not isinstance(v, str):
            raise ValueError(f"{self.where(k)} must be a string, not {v!r}")
        return v

    def cap(self, key: str, default: float | None) -> float | None:
        """A soft-capping value: a positive number, or None (also when the key is null)."""
        if key not in self.d:
            return default
        v = self.d[key]
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{self.where(key)} must be a positive number or null, not {v!r}")
        return float(v)

    def fraction(self, key: str, default: float) -> float:
        v = self.d.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ValueError(f"{self.where(key)} must be a number in (0, 1], not {v!r}")
        return float(v)

    def index_list(self, key: str, layers: int) -> list[int]:
        """A list of layer indices, each in ``[0, layers)``."""
        v = self.d[key]
        if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int)
                                          for i in v):
            raise ValueError(f"{self.where(key)} must be a list of layer indices, not {v!r}")
        for j, i in enumerate(v):
            if not 0 <= i < layers:
                raise ValueError(f"{self.where(f'{key}[{j}]')} ({i}) must be a layer index in "
                                 f"[0, {layers}) (num_hidden_layers = {layers})")
        return v

    def per_layer(self, key: str, layers: int, allowed: dict) -> tuple | None:
        """A list with one entry per layer, each a key of ``allowed`` (mapped to its value);
        None when the key is absent (or null, or empty: HF's default then applies)."""
        v = self.d.get(key)
        if v is None or v == []:
            return None
        if not isinstance(v, list) or len(v) != layers:
            n = len(v) if isinstance(v, list) else v
            raise ValueError(f"{self.where(key)} must list one entry per layer "
                             f"(num_hidden_layers = {layers}), not {n!r}")
        for i, t in enumerate(v):
            if isinstance(t, bool) or t not in allowed:
                raise ValueError(f"{self.where(f'{key}[{i}]')}: {t!r} is not one of "
                                 f"{', '.join(map(repr, allowed))}")
        return tuple(allowed[t] for t in v)


def _check_div(f: Fields, a: int, b: int, a_name: str, b_name: str) -> None:
    if a % b:
        raise ValueError(f"{f.where(a_name)} ({a}) must be divisible by {b_name} ({b}); "
                         f"inconsistent shapes")


def _activation(f: Fields, arch: str, keys: tuple[str, ...], allowed: tuple[str, ...],
                default: str) -> str:
    act = f.str(*keys, default=f.defaults.get(keys[0], default))
    if act not in allowed:
        raise ValueError(f"{f.where(keys[0])}: unsupported activation {act!r} for {arch}; "
                         f"expected {' or '.join(allowed[:1] if allowed == _SILU else allowed)}")
    return act


def _core(f: Fields, arch: str, *, tie: bool = False) -> dict:
    """Shapes every GQA decoder shares (Llama-style field names)."""
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    kv_heads = f.int("num_key_value_heads", default=f.defaults.get("num_key_value_heads", heads))
    if heads % kv_heads:
        raise ValueError(f"{f.where('num_key_value_heads')} ({kv_heads}) must divide "
                         f"num_attention_heads ({heads})")
    if f.has("head_dim") or "head_dim" in f.defaults:
        head_dim = f.int("head_dim")
    else:
        _check_div(f, hidden, heads, "hidden_size", "num_attention_heads")
        head_dim = hidden // heads
    bias = f.bool("attention_bias", default=False)
    return dict(
        layers=f.int("num_hidden_layers"), hidden_size=hidden, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, intermediate_size=f.int("intermediate_size"),
        vocab_size=f.int("vocab_size"), max_position_embeddings=f.int("max_position_embeddings"),
        tie_word_embeddings=f.bool("tie_word_embeddings", default=tie),
        qkv_bias=bias, out_bias=bias, mlp_bias=f.bool("mlp_bias", default=False))


def _experts(f: Fields, e_key: str, k_keys: tuple[str, ...] = ("num_experts_per_tok",)
             ) -> tuple[int, int]:
    e, k = f.int(e_key), f.int(*k_keys)
    if k > e:
        raise ValueError(f"{f.where(k_keys[0])} ({k}) must be at most {e_key} ({e})")
    return e, k


def _windows(f: Fields, types: tuple[str, ...]) -> dict:
    """``layer_attention`` and the sliding window its sliding layers need."""
    out: dict = {"layer_attention": types}
    if "sliding" in types:
        out["sliding_window"] = f.int("sliding_window")
    return out


def _qwen_windows(f: Fields, layers: int) -> dict:
    """Qwen2/Qwen3: ``layer_types`` if given, else with ``use_sliding_window`` the layers from
    ``max_window_layers`` on slide (HF Qwen2Config/Qwen3Config)."""
    types = f.per_layer("layer_types", layers, LAYER_TYPES)
    if types is None:
        if not (f.bool("use_sliding_window", default=False) and f.has("sliding_window")):
            return {}
        first = f.int("max_window_layers", default=28, minimum=0)
        types = tuple("sliding" if i >= first else "full" for i in range(layers))
    return _windows(f, types) if "sliding" in types else {}


def _llama(f: Fields, arch: str) -> dict:
    cfg = _core(f, arch)
    _activation(f, arch, ("hidden_act",), _SILU, "silu")
    if arch == "Qwen2ForCausalLM":
        cfg["qkv_bias"] = True
        cfg.update(_qwen_windows(f, cfg["layers"]))
    elif f.has("sliding_window"):                     # Mistral: every layer slides
        cfg["sliding_window"] = f.int("sliding_window")
    return cfg


def _phi3(f: Fields, arch: str) -> dict:
    cfg = _llama(f, arch)        # fused qkv_proj / gate_up_proj: the same shapes as separate
    cfg["rotary_fraction"] = f.fraction("partial_rotary_factor", 1.0)
    return cfg


def _qwen3(f: Fields, arch: str) -> dict:
    cfg = _core(f, arch)
    _activation(f, arch, ("hidden_act",), _SILU, "silu")
    cfg.update(_qwen_windows(f, cfg["layers"]), qk_norm="rmsnorm")
    return cfg


def _qwen3_moe(f: Fields, arch: str) -> dict:
    return _qwen_moe_layers(f, _qwen3(f, arch))


def _qwen_moe_layers(f: Fields, cfg: dict) -> dict:
    """Qwen3-MoE's (and Qwen3-Next's) MLPs: top-k of ``num_experts`` in every
    ``decoder_sparse_step``-th layer not in ``mlp_only_layers``."""
    n = cfg["layers"]
    e, k = _experts(f, "num_experts")
    step = f.int("decoder_sparse_step", default=1)
    dense = set(f.index_list("mlp_only_layers", n)) if f.has("mlp_only_layers") else set()
    cfg.update(experts=e, experts_per_token=k, moe_intermediate_size=f.int("moe_intermediate_size"),
               layer_moe=tuple(i not in dense and (i + 1) % step == 0 for i in range(n)))
    return cfg


def _mixtral(f: Fields, arch: str) -> dict:
    """Mixtral: top-k of ``num_local_experts`` in every layer; each expert gates
    ``ACT2FN[hidden_act](w1 x) * w3 x`` (HF ``MixtralBlockSparseTop2MLP``), so a GELU
    ``hidden_act`` is a GeGLU (e.g. Grok-1's shapes in this schema, benchmarks/models)."""
    cfg = _core(f, arch)
    act = _activation(f, arch, ("hidden_act",), _SILU + _GELU_TANH, "silu")
    e, k = _experts(f, "num_local_experts")
    cfg.update(experts=e, experts_per_token=k, moe_intermediate_size=cfg["intermediate_size"])
    if act in _GELU_TANH:
        cfg["activation"] = "geglu"
    return cfg


def _gemma(f: Fields, arch: str, types: tuple[str, ...] | None, default_types) -> dict:
    """What Gemma 2 and 3 share: tanh-GeGLU, sandwich norms, √d-scaled tied embeddings."""
    cfg = _core(f, arch, tie=True)
    _activation(f, arch, ("hidden_activation", "hidden_act"), _GELU_TANH, "gelu_pytorch_tanh")
    types = types or default_types(cfg["layers"])
    cfg.update(_windows(f, types), activation="geglu", sandwich_norms=True,
               scale_embeddings=True)
    return cfg


def _gemma2(f: Fields, arch: str) -> dict:
    """Gemma 2: even layers slide, odd ones are global (HF ``Gemma2DecoderLayer``); attention
    and final logits soft-capped (defaults 50 and 30, HF Gemma2Config)."""
    n = f.int("num_hidden_layers")
    cfg = _gemma(f, arch, f.per_layer("layer_types", n, LAYER_TYPES),
                 lambda n: tuple("sliding" if i % 2 == 0 else "full" for i in range(n)))
    cfg.update(attn_logit_softcap=f.cap("attn_logit_softcapping", 50.0),
               final_logit_softcap=f.cap("final_logit_softcapping", 30.0))
    return cfg


def _gemma3(f: Fields, arch: str) -> dict:
    """Gemma 3: every ``sliding_window_pattern``-th layer (6) is global, the rest slide; q/k
    RMSNorm; no soft-capping unless the config asks for it."""
    if arch == "Gemma3ForConditionalGeneration":
        f = f.nested("text_config", arch)
    f = f.with_defaults(GEMMA3_TEXT_DEFAULTS)
    n = f.int("num_hidden_layers")
    pattern = f.int("sliding_window_pattern", "_sliding_window_pattern")
    cfg = _gemma(f, arch, f.per_layer("layer_types", n, LAYER_TYPES),
                 lambda n: tuple("full" if (i + 1) % pattern == 0 else "sliding"
                                 for i in range(n)))
    cfg.update(attn_logit_softcap=f.cap("attn_logit_softcapping", None),
               final_logit_softcap=f.cap("final_logit_softcapping", None), qk_norm="rmsnorm")
    return cfg


def _gpt_oss(f: Fields, arch: str) -> dict:
    """gpt-oss: every layer MoE (biased experts and router, clamped SwiGLU), attention sinks,
    QKV/O biases; ``layer_types`` (default: even layers slide, HF GptOssConfig)."""
    cfg = _core(f, arch)
    _activation(f, arch, ("hidden_act",), _SILU, "silu")
    n = cfg["layers"]
    types = (f.per_layer("layer_types", n, LAYER_TYPES)
             or tuple("sliding" if i % 2 == 0 else "full" for i in range(n)))
    e, k = _experts(f, "num_local_experts", ("num_experts_per_tok", "experts_per_token"))
    bias = f.bool("attention_bias", default=True)
    cfg.update(_windows(f, types), experts=e, experts_per_token=k,
               moe_intermediate_size=cfg["intermediate_size"], qkv_bias=bias, out_bias=bias,
               mlp_bias=True, router_bias=True, attention_sinks=True,
               activation="swiglu_clamped")
    return cfg


def _llama4(f: Fields, arch: str) -> dict:
    """Llama 4: MoE (one shared expert, width ``intermediate_size``) on ``moe_layers`` (default
    every ``interleave_moe_layer_step``-th), dense MLPs of ``intermediate_size_mlp`` elsewhere;
    RoPE layers (``no_rope_layers[i] == 1``) attend within ``attention_chunk_size`` chunks with
    an L2 q/k norm, the others are global NoPE layers (every fourth by default)."""
    top = f
    if arch == "Llama4ForConditionalGeneration":
        f = f.nested("text_config", arch)
    f = f.with_defaults(LLAMA4_TEXT_DEFAULTS)
    cfg = _core(f, arch, tie=top.bool("tie_word_embeddings", default=False))
    _activation(f, arch, ("hidden_act",), _SILU, "silu")
    n = cfg["layers"]
    e, k = _experts(f, "num_local_experts")
    if f.has("moe_layers"):
        moe = set(f.index_list("moe_layers", n))
    else:
        step = f.int("interleave_moe_layer_step")
        moe = set(range(step - 1, n, step))
    rope = f.per_layer("no_rope_layers", n, {1: True, 0: False})
    if rope is None:
        every = f.int("no_rope_layer_interval")
        rope = tuple((i + 1) % every != 0 for i in range(n))
    types = (f.per_layer("layer_types", n, LAYER_TYPES)
             or tuple("chunked" if r else "full" for r in rope))
    tuning = f.d.get("attn_temperature_tuning", True)
    if tuning is not None and not isinstance(tuning, (bool, int)):
        raise ValueError(f"{f.where('attn_temperature_tuning')} must be true, false or an "
                         f"integer, not {tuning!r}")
    cfg.update(intermediate_size=f.int("intermediate_size_mlp"),
               moe_intermediate_size=f.int("intermediate_size"), experts=e,
               experts_per_token=k, shared_experts=1,
               layer_moe=tuple(i in moe for i in range(n)), layer_rope=rope,
               layer_attention=types,
               attention_chunk_size=f.int("attention_chunk_size") if "chunked" in types else None,
               qk_norm="l2" if f.bool("use_qk_norm", default=True) else "",
               attn_temperature_tuning=bool(tuning))
    if "sliding" in types:
        cfg["sliding_window"] = f.int("sliding_window")
    return cfg


def _gpt2(f: Fields, arch: str) -> dict:
    hidden = f.int("n_embd", "hidden_size")
    heads = f.int("n_head", "num_attention_heads")
    _check_div(f, hidden, heads, "n_embd", "n_head")
    return dict(
        layers=f.int("n_layer", "num_hidden_layers"), hidden_size=hidden, heads=heads,
        kv_heads=heads, head_dim=hidden // heads, intermediate_size=f.int("n_inner",
                                                                          default=4 * hidden),
        vocab_size=f.int("vocab_size"), max_position_embeddings=f.int("n_positions", "n_ctx"),
        norm="layernorm", activation="gelu",
        tie_word_embeddings=f.bool("tie_word_embeddings", default=True),
        qkv_bias=True, out_bias=True, mlp_bias=True, learned_positions=True)


def _first_dense(f: Fields, layers: int, default) -> int:
    """``first_k_dense_replace``: dense layers before the MoE ones, at most ``layers``
    (``default`` when absent; ``...``: required)."""
    first = f.int("first_k_dense_replace", default=default, minimum=0)
    if first > layers:
        raise ValueError(f"{f.where('first_k_dense_replace')} ({first}) must be at "
                         f"most num_hidden_layers ({layers})")
    return first


def _deepseek_v3(f: Fields, arch: str) -> dict:
    hidden, heads = f.int("hidden_size"), f.int("num_attention_heads")
    kv_heads = f.int("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise ValueError(f"{f.where('num_key_value_heads')} ({kv_heads}) must divide "
                         f"num_attention_heads ({heads})")
    _check_div(f, hidden, heads, "hidden_size", "num_attention_heads")
    _activation(f, arch, ("hidden_act",), _SILU, "silu")
    layers = f.int("num_hidden_layers")
    e, k = _experts(f, "n_routed_experts")
    freq = f.int("moe_layer_freq", default=1)
    if freq != 1:
        raise ValueError(f"{f.where('moe_layer_freq')}: only 1 (every layer after "
                         f"first_k_dense_replace) is supported, not {freq!r}")
    first = _first_dense(f, layers, 0)
    bias = f.bool("attention_bias", default=False)
    return dict(
        layers=layers, hidden_size=hidden, heads=heads, kv_heads=heads,
        head_dim=f.int("qk_nope_head_dim") + f.int("qk_rope_head_dim"),
        intermediate_size=f.int("intermediate_size"), vocab_size=f.int("vocab_size"),
        max_position_embeddings=f.int("max_position_embeddings"),
        tie_word_embeddings=f.bool("tie_word_embeddings", default=False),
        qkv_bias=bias, out_bias=bias, mlp_bias=f.bool("mlp_bias", default=False),
        experts=e, experts_per_token=k, router_bias=True,
        shared_experts=f.int("n_shared_experts", default=0, minimum=0),
        moe_intermediate_size=f.int("moe_intermediate_size"), first_dense_layers=first,
        q_lora_rank=f.int("q_lora_rank", default=0, minimum=0),
        kv_lora_rank=f.int("kv_lora_rank"), qk_nope_head_dim=f.int("qk_nope_head_dim"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"), v_head_dim=f.int("v_head_dim"),
        **_mtp(f))


def _mtp(f: Fields) -> dict:
    """``num_nextn_predict_layers``: multi-token-prediction modules the checkpoint ships
    beside the decoder (DeepSeek-V3, GLM-4.5): not in the model's own counts or steps;
    ``serve --speculative draft=mtp`` runs them as the draft (workloads/mtp.py)."""
    return {"mtp_layers": f.int("num_nextn_predict_layers", default=0, minimum=0)}


def _deepseek_v2(f: Fields, arch: str) -> dict:
    """DeepSeek-V2 (and V2-Lite): V3's MLA and shared-expert MoE after
    ``first_k_dense_replace`` dense layers, but its router (``MoEGate``: softmax scores,
    ``topk_method`` ``greedy`` or ``group_limited_greedy``) has no ``e_score_correction_bias``:
    no router bias [P: MaxText configs/models/deepseek2-16b.yml ``routed_bias: False``; M:
    deepseek-ai/DeepSeek-V2 modeling_deepseek.py ``MoEGate`` holds only its weight]. V2-Lite
    has no query compression (``q_lora_rank`` null)."""
    return {**_deepseek_v3(f, arch), "router_bias": False}


#: ``DeepseekV32Config`` defaults for the indexer fields a config may omit [P: transformers
#: src/transformers/models/deepseek_v32/modular_deepseek_v32.py; the same in DeepSeek's
#: inference/model.py ``ModelArgs`` and config_671B_v3.2.json, deepseek-ai/DeepSeek-V3.2-Exp].
DEEPSEEK_V32_DEFAULTS = {"index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048}


def _deepseek_v32(f: Fields, arch: str) -> dict:
    """DeepSeek-V3.2-Exp (``DeepseekV32ForCausalLM``): DeepSeek-V3 (MLA, the shared-expert MoE
    after ``first_k_dense_replace`` dense layers, its MTP module noted) plus DeepSeek Sparse
    Attention in every layer: a lightning indexer of ``index_n_heads`` heads of
    ``index_head_dim`` (its ``wq_b`` reads the MLA query latent, so ``q_lora_rank`` is
    required) selects ``index_topk`` tokens per query [P: DeepSeek-V3.2-Exp paper §1; M:
    inference/model.py ``Indexer``, deepseek-ai/DeepSeek-V3.2-Exp]."""
    f = f.with_defaults(DEEPSEEK_V32_DEFAULTS)
    cfg = _deepseek_v3(f, arch)
    if not cfg["q_lora_rank"]:
        raise ValueError(f"{f.where('q_lora_rank')} must be a positive integer for {arch}: the "
                         f"indexer's wq_b reads the query latent, not {f.d.get('q_lora_rank')!r}")
    heads, dim = f.int("index_n_heads"), f.int("index_head_dim")
    if dim < cfg["qk_rope_head_dim"]:
        raise ValueError(f"{f.where('index_head_dim')} ({dim}) must be at least "
                         f"qk_rope_head_dim ({cfg['qk_rope_head_dim']}): the indexer rotates "
                         f"that many of its dimensions")
    return {**cfg, "index_heads": heads, "index_head_dim": dim, "index_topk": f.int("index_topk")}


def _glm4_moe(f: Fields, arch: str) -> dict:
    """GLM-4.5 (``Glm4MoeForCausalLM``): GQA attention with q/k/v biases
    (``attention_bias``) and a bias-free ``o_proj``, optional per-head q/k RMSNorm
    (``use_qk_norm``), RoPE on ``partial_rotary_factor`` of each head; dense SwiGLU MLPs in
    the first ``first_k_dense_replace`` layers, then a MoE of ``n_routed_experts`` top-k
    experts (sigmoid router with an ``e_score_correction_bias``) plus ``n_shared_experts``
    [M: transformers src/transformers/models/glm4_moe/modeling_glm4_moe.py;
    ``partial_rotary_factor`` 0.5 when absent: P, its configuration_glm4_moe.py]. The MTP
    layer (``num_nextn_predict_layers``) is noted, not simulated."""
    cfg = _core(f, arch)
    _activation(f, arch, ("hidden_act",), _SILU, "silu")
    layers = cfg["layers"]
    e, k = _experts(f, "n_routed_experts")
    first = _first_dense(f, layers, ...)
    cfg.update(out_bias=False, experts=e, experts_per_token=k, router_bias=True,
               shared_experts=f.int("n_shared_experts", minimum=0),
               moe_intermediate_size=f.int("moe_intermediate_size"), first_dense_layers=first,
               rotary_fraction=f.fraction("partial_rotary_factor", 0.5),
               qk_norm="rmsnorm" if f.bool("use_qk_norm", default=False) else "")
    return {**cfg, **_mtp(f)}


def _qwen3_next(f: Fields, arch: str) -> dict:
    """Qwen3-Next (``Qwen3NextForCausalLM``): ``layer_types`` (``linear_attention`` /
    ``full_attention``, one per layer) or, when absent, every ``full_attention_interval``-th
    layer (4) full and the others linear, as ``Qwen3NextConfig`` builds it. Linear layers are
    gated DeltaNet (``linear_num_key_heads`` q/k heads of ``linear_key_head_dim``,
    ``linear_num_value_heads`` v heads of ``linear_value_head_dim``, a
    ``linear_conv_kernel_dim``-tap causal conv); full layers are Qwen3 attention (q/k
    RMSNorm, partial RoPE, ``partial_rotary_factor`` 0.25 when absent) whose ``q_proj`` also
    emits a sigmoid output gate (``Qwen3NextAttention``). MLPs as Qwen3-MoE
    (``decoder_sparse_step``, ``mlp_only_layers``) with a shared expert of
    ``shared_expert_intermediate_size`` scaled by ``shared_expert_gate`` (``Qwen2MoeSparseMoeBlock``)
    [M: transformers models/qwen3_next/modular_qwen3_next.py]. The MTP module the checkpoint
    ships (``mtp.*`` weights, which HF skips on load) is noted (``num_nextn_predict_layers`` or
    ``mtp_num_hidden_layers``, 1 when absent as vLLM reads it): not in the model's own counts
    or steps; ``serve --speculative draft=mtp`` runs it as the draft (workloads/mtp.py)."""
    f = f.with_defaults(QWEN3_NEXT_DEFAULTS)
    cfg = _core(f, arch)
    _activation(f, arch, ("hidden_act",), _SILU, "silu")
    cfg = _qwen_moe_layers(f, {**cfg, "qk_norm": "rmsnorm"})
    n = cfg["layers"]
    types = f.per_layer("layer_types", n, QWEN3_NEXT_LAYER_TYPES)
    if types is None:
        every = f.int("full_attention_interval")
        types = tuple("full" if (i + 1) % every == 0 else "linear" for i in range(n))
    kh, vh = f.int("linear_num_key_heads"), f.int("linear_num_value_heads")
    if vh % kh:
        raise ValueError(f"{f.where('linear_num_value_heads')} ({vh}) must be a multiple of "
                         f"linear_num_key_heads ({kh}): each q/k head serves "
                         f"num_value_heads / num_key_heads value heads")
    shared = f.int("shared_expert_intermediate_size", default=0, minimum=0)
    # the checkpoint ships one MTP module (mtp.*) whatever the config says; vLLM's
    # Qwen3NextMTP takes num_nextn_predict_layers, 1 when absent [M: vllm
    # model_executor/models/qwen3_next_mtp.py]
    mtp = f.int("num_nextn_predict_layers", "mtp_num_hidden_layers", default=1, minimum=0)
    cfg.update(layer_attention=types, linear_key_heads=kh, linear_value_heads=vh,
               linear_key_head_dim=f.int("linear_key_head_dim"),
               linear_value_head_dim=f.int("linear_value_head_dim"),
               linear_conv_kernel=f.int("linear_conv_kernel_dim"), attn_output_gate=True,
               rotary_fraction=f.fraction("partial_rotary_factor", 0.25),
               shared_experts=1 if shared else 0, shared_expert_intermediate_size=shared,
               shared_expert_gate=bool(shared), mtp_layers=mtp)
    return cfg


def _falcon_h1(f: Fields, arch: str) -> dict:
    """Falcon-H1 (``FalconH1ForCausalLM``): every layer is "hybrid": Llama attention (GQA,
    RoPE, ``attention_bias``) and a Mamba-2 mixer run in parallel on the normed input and
    are summed into the residual, then a SwiGLU MLP [M: transformers
    models/falcon_h1/modeling_falcon_h1.py ``FalconH1DecoderLayer``]. The mixer: ``mamba_d_ssm``
    channels (``mamba_expand × hidden_size`` when null) in ``mamba_n_heads`` heads of
    ``mamba_d_head`` (``auto``: ``d_ssm / heads``; their product must be ``d_ssm``),
    ``mamba_n_groups`` B/C groups of ``mamba_d_state``, a ``mamba_d_conv``-tap conv
    (``mamba_conv_bias``), ``mamba_proj_bias`` on ``in_proj``, ``projectors_bias`` on
    ``out_proj``, an RMSNorm before the gate when ``mamba_rms_norm``, SSD chunks of
    ``mamba_chunk_size``. The muP multipliers scale activations only (no cost)."""
    f = f.with_defaults(FALCON_H1_DEFAULTS)
    cfg = _core(f, arch)
    _activation(f, arch, ("hidden_act",), _SILU, "silu")
    heads = f.int("mamba_n_heads")
    # FalconH1Config: mamba_d_ssm 1024 when absent, mamba_expand × hidden_size when null
    if "mamba_d_ssm" in f.d and f.d["mamba_d_ssm"] is None:
        d_ssm = f.int("mamba_expand") * cfg["hidden_size"]
    else:
        d_ssm = f.int("mamba_d_ssm", default=1024)
    head = f.d.get("mamba_d_head", "auto")
    if head in ("auto", None):
        _check_div(f, d_ssm, heads, "mamba_d_ssm", "mamba_n_heads")
        head = d_ssm // heads
    else:
        head = f.int("mamba_d_head")
        if head * heads != d_ssm:
            raise ValueError(f"{f.where('mamba_d_head')} ({head}) × mamba_n_heads ({heads}) "
                             f"must equal mamba_d_ssm ({d_ssm})")
    groups = f.int("mamba_n_groups")
    _check_div(f, heads, groups, "mamba_n_heads", "mamba_n_groups")
    cfg.update(parallel_ssm=True, ssm_heads=heads, ssm_head_dim=head,
               ssm_state_size=f.int("mamba_d_state"), ssm_groups=groups,
               ssm_conv_kernel=f.int("mamba_d_conv"),
               ssm_conv_bias=f.bool("mamba_conv_bias", default=True),
               ssm_in_bias=f.bool("mamba_proj_bias", default=False),
               ssm_out_bias=f.bool("projectors_bias", default=False),
               ssm_rms_norm=f.bool("mamba_rms_norm", default=False),
               ssm_chunk_size=f.int("mamba_chunk_size"))
    return cfg


_PARSERS = {"llama": _llama, "phi3": _phi3, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe,
            "mixtral": _mixtral, "gemma2": _gemma2, "gemma3": _gemma3, "gpt_oss": _gpt_oss,
            "llama4": _llama4, "gpt2": _gpt2, "deepseek_v3": _deepseek_v3,
            "deepseek_v2": _deepseek_v2, "deepseek_v32": _deepseek_v32, "glm4_moe": _glm4_moe,
            "qwen3_next": _qwen3_next,
            "falcon_h1": _falcon_h1}


def _dense_without_moe_layers(cfg: dict) -> dict:
    """A MoE configuration whose layer pattern leaves no MoE layer is a dense model, as
    transformers builds it: its decoder layers put a plain MLP wherever the pattern does not
    ask for experts (``Qwen3MoeDecoderLayer``: ``decoder_sparse_step`` and
    ``mlp_only_layers``; ``Llama4TextDecoderLayer``: ``moe_layers``; DeepSeek-V3:
    ``first_k_dense_replace``), so e.g. Qwen3-MoE with ``decoder_sparse_step`` = 100 over 48
    layers or Llama 4 with ``moe_layers: []`` has no experts, router or shared expert
    (``experts = 0``)."""
    if not cfg.get("experts"):
        return cfg
    pattern = cfg.get("layer_moe")
    if any(pattern) if pattern else cfg.get("first_dense_layers", 0) < cfg["layers"]:
        return cfg
    return {**cfg, "experts": 0, "experts_per_token": 0, "shared_experts": 0,
            "moe_intermediate_size": 0, "first_dense_layers": 0, "router_bias": False,
            "layer_moe": (), "shared_expert_intermediate_size": 0,
            "shared_expert_gate": False}


#: ``torch_dtype`` values of a config.json (transformers' names) and the diptych dtype each
#: stores its weights in ("auto": the checkpoint's own, unknown here).
TORCH_DTYPES: dict[str, str | None] = {
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "auto": None}
#: ``quantization_config.quant_method`` values transformers knows (its QuantizationMethod
#: enum) and the diptych weight dtype that models each (None: no single one).
QUANT_METHODS: dict[str, str | None] = {
    "mxfp4": "mxfp4", "fp8": "fp8", "fbgemm_fp8": "fp8", "compressed-tensors": None,
    "modelopt": None, "awq": "int4", "gptq": "int4", "aqlm": None, "vptq": None,
    "bitsandbytes": None, "quanto": None, "eetq": "int8", "higgs": None, "hqq": None,
    "torchao": None, "bitnet": None, "spqr": None, "quark": None, "fp_quant": None,
    "auto-round": "int4"}


def _checkpoint(f: Fields) -> dict:
    """The checkpoint's stored precision: ``torch_dtype`` (an unknown name is an error naming
    the key) and ``quantization_config.quant_method`` (must be a non-empty string; one
    transformers does not know is warned about)."""
    out = {}
    dt = f.d.get("torch_dtype")
    if dt is not None:
        if not isinstance(dt, str) or dt not in TORCH_DTYPES:
            raise ValueError(f"{f.where('torch_dtype')}: expected one of "
                             f"{', '.join(TORCH_DTYPES)}, got {str(dt)[:40]!r}")
        out["checkpoint_dtype"] = dt
    q = f.d.get("quantization_config")
    if q is not None:
        method = q.get("quant_method") if isinstance(q, dict) else None
        if not isinstance(method, str) or not method.strip():
            raise ValueError(f"{f.where('quantization_config.quant_method')}: expected the "
                             f"quantisation method's name (e.g. 'mxfp4', 'fp8'), got "
                             f"{str(method)[:40]!r}")
        if method not in QUANT_METHODS:
            warnings.warn(f"{f.where('quantization_config.quant_method')}: {method[:40]!r} is "
                          f"not a method transformers knows ({', '.join(QUANT_METHODS)}); "
                          f"diptych models the weights in the run's dtype", stacklevel=4)
        out["checkpoint_quant"] = method
    return out


def quantised_weights(m) -> str | None:
    """The diptych dtype of a quantised checkpoint's weights (``quantization_config``), or
    None when the checkpoint is not quantised or no single dtype models its method."""
    return QUANT_METHODS.get(m.checkpoint_quant) if m.checkpoint_quant else None


def parse(family: str, arch: str, d: dict, source: str | None) -> dict:
    """ModelConfig keyword arguments (all but name, architecture, family) for ``d``; a MoE
    configuration without MoE layers comes back dense (:func:`_dense_without_moe_layers`);
    the checkpoint's stored precision (:func:`_checkpoint`); ``vision_tower`` when the config
    has a ``vision_config`` (Gemma 3, Llama 4: the text model alone is simulated)."""
    f = Fields(d, source)
    extra = {"vision_tower": True} if isinstance(d.get("vision_config"), dict) else {}
    return {**_dense_without_moe_layers(_PARSERS[family](f, arch)), **_checkpoint(f), **extra}
