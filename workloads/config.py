"""Transformer model descriptions, built from HuggingFace ``config.json`` dicts.

:class:`ModelConfig` is the one shape description every other module in ``workloads/`` reads.
:func:`model_from_hf` maps the fields of the supported HF architectures onto it and validates
them eagerly: a message names the file, the field, the value and what was expected.

Families (what the lowering distinguishes):

* ``llama``: pre-RMSNorm, RoPE, GQA, SwiGLU MLP (Llama, Mistral, Qwen2; Qwen2 has QKV biases).
* ``mixtral``: ``llama`` attention with a top-k routed SwiGLU MoE in every layer.
* ``gpt2``: pre-LayerNorm with biases, learned positions, MHA, GELU MLP of ``n_inner`` (4·d).
* ``deepseek_v3``: multi-head latent attention (MLA) and a MoE with shared experts after
  ``first_k_dense_replace`` dense layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: HF ``architectures`` entry → family.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "llama",
    "MixtralForCausalLM": "mixtral",
    "GPT2LMHeadModel": "gpt2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
}


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A decoder-only transformer's shapes. Sizes are element counts.

    ``head_dim`` is the per-head width of Q/K/V for GQA/MHA models. For MLA models the Q/K head
    width is ``qk_nope_head_dim + qk_rope_head_dim``, V's is ``v_head_dim``, and the KV cache
    holds ``kv_lora_rank + qk_rope_head_dim`` elements per token per layer.
    ``experts == 0`` means a dense model; otherwise layers from ``first_dense_layers`` on are MoE
    layers with ``experts`` routed experts (``experts_per_token`` active per token) plus
    ``shared_experts`` always-active experts, each of width ``moe_intermediate_size``.
    """

    name: str
    architecture: str
    family: str
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    norm: str = "rmsnorm"                 # "rmsnorm" | "layernorm"
    activation: str = "swiglu"            # "swiglu" | "gelu"
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    learned_positions: bool = False
    sliding_window: int | None = None
    # MoE
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_intermediate_size: int = 0
    first_dense_layers: int = 0
    # MLA
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head (MLA: nope + rope part)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of one value head."""
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per KV head (GQA group; 1 for MHA)."""
        return self.heads // self.kv_heads


def _where(source: str | None, key: str) -> str:
    return f"{source}: {key}" if source else key


def _get(d: dict, keys: tuple[str, ...], source: str | None, *, default: Any = ..., kind=int,
         minimum: int | None = 1) -> Any:
    """The first present key of ``keys``; validated as a positive integer by default."""
    for k in keys:
        if k in d and d[k] is not None:
            v = d[k]
            if kind is int:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"{_where(source, k)} must be an integer, not {v!r}")
                if minimum is not None and v < minimum:
                    raise ValueError(f"{_where(source, k)} must be an integer >= {minimum}, "
                                     f"not {v!r}")
            elif kind is bool and not isinstance(v, bool):
                raise ValueError(f"{_where(source, k)} must be true or false, not {v!r}")
            return v
    if default is ...:
        raise ValueError(f"{_where(source, keys[0])} is missing (required by this architecture)")
    return default


def model_from_hf(d: dict, *, name: str, source: str | None = None) -> ModelConfig:
    """Build a :class:`ModelConfig` from a parsed HF ``config.json`` dict.

    Raises ValueError for unsupported architectures (listing the supported ones), missing or
    non-integer fields and inconsistent shapes (e.g. hidden size not divisible by heads).
    """
    if not isinstance(d, dict):
        raise ValueError(f"{source or 'config'}: expected a JSON object, got {type(d).__name__}")
    archs = d.get("architectures")
    if not archs or not isinstance(archs, list):
        raise ValueError(f"{_where(source, 'architectures')} is missing: expected a list with one "
                         f"of {', '.join(ARCHITECTURES)}")
    arch = archs[0]
    if arch not in ARCHITECTURES:
        raise ValueError(f"{_where(source, 'architectures')}: unsupported architecture {arch!r}; "
                         f"supported: {', '.join(ARCHITECTURES)}")
    family = ARCHITECTURES[arch]
    g = lambda *keys, **kw: _get(d, keys, source, **kw)  # noqa: E731

    if family == "gpt2":
        hidden = g("n_embd", "hidden_size")
        heads = g("n_head", "num_attention_heads")
        _check_div(hidden, heads, source, "n_embd", "n_head")
        inner = g("n_inner", default=4 * hidden)
        cfg = dict(
            layers=g("n_layer", "num_hidden_layers"), hidden_size=hidden, heads=heads,
            kv_heads=heads, head_dim=hidden // heads, intermediate_size=inner,
            vocab_size=g("vocab_size"), max_position_embeddings=g("n_positions", "n_ctx"),
            norm="layernorm", activation="gelu",
            tie_word_embeddings=g("tie_word_embeddings", default=True, kind=bool),
            qkv_bias=True, out_bias=True, mlp_bias=True, learned_positions=True)
    else:
        hidden = g("hidden_size")
        heads = g("num_attention_heads")
        kv_heads = g("num_key_value_heads", default=heads)
        if heads % kv_heads:
            raise ValueError(f"{_where(source, 'num_key_value_heads')} ({kv_heads}) must divide "
                             f"num_attention_heads ({heads})")
        if "head_dim" in d and d["head_dim"] is not None and family != "deepseek_v3":
            head_dim = g("head_dim")
        else:
            _check_div(hidden, heads, source, "hidden_size", "num_attention_heads")
            head_dim = hidden // heads
        act = d.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ValueError(f"{_where(source, 'hidden_act')}: unsupported activation {act!r} for "
                             f"{arch}; expected silu")
        window = None
        if family == "llama" and d.get("sliding_window") is not None:
            if arch != "Qwen2ForCausalLM" or d.get("use_sliding_window", False):
                window = g("sliding_window")
        cfg = dict(
            layers=g("num_hidden_layers"), hidden_size=hidden, heads=heads, kv_heads=kv_heads,
            head_dim=head_dim, intermediate_size=g("intermediate_size"),
            vocab_size=g("vocab_size"),
            max_position_embeddings=g("max_position_embeddings"),
            tie_word_embeddings=g("tie_word_embeddings", default=False, kind=bool),
            qkv_bias=(arch == "Qwen2ForCausalLM"
                      or g("attention_bias", default=False, kind=bool)),
            out_bias=g("attention_bias", default=False, kind=bool),
            mlp_bias=g("mlp_bias", default=False, kind=bool),
            sliding_window=window)
        if family == "mixtral":
            e = g("num_local_experts")
            k = g("num_experts_per_tok")
            if k > e:
                raise ValueError(f"{_where(source, 'num_experts_per_tok')} ({k}) must be at most "
                                 f"num_local_experts ({e})")
            cfg.update(experts=e, experts_per_token=k,
                       moe_intermediate_size=cfg["intermediate_size"])
        if family == "deepseek_v3":
            e = g("n_routed_experts")
            k = g("num_experts_per_tok")
            if k > e:
                raise ValueError(f"{_where(source, 'num_experts_per_tok')} ({k}) must be at most "
                                 f"n_routed_experts ({e})")
            freq = g("moe_layer_freq", default=1)
            if freq != 1:
                raise ValueError(f"{_where(source, 'moe_layer_freq')}: only 1 (every layer after "
                                 f"first_k_dense_replace) is supported, not {freq!r}")
            first = g("first_k_dense_replace", default=0, minimum=0)
            if first > cfg["layers"]:
                raise ValueError(f"{_where(source, 'first_k_dense_replace')} ({first}) must be at "
                                 f"most num_hidden_layers ({cfg['layers']})")
            cfg.update(
                experts=e, experts_per_token=k,
                shared_experts=g("n_shared_experts", default=0, minimum=0),
                moe_intermediate_size=g("moe_intermediate_size"), first_dense_layers=first,
                q_lora_rank=g("q_lora_rank", default=0, minimum=0),
                kv_lora_rank=g("kv_lora_rank"), qk_nope_head_dim=g("qk_nope_head_dim"),
                qk_rope_head_dim=g("qk_rope_head_dim"), v_head_dim=g("v_head_dim"),
                head_dim=g("qk_nope_head_dim") + g("qk_rope_head_dim"),
                kv_heads=heads)
    return ModelConfig(name=name, architecture=arch, family=family, **cfg)


def _check_div(a: int, b: int, source, a_name: str, b_name: str) -> None:
    if a % b:
        raise ValueError(f"{_where(source, a_name)} ({a}) must be divisible by {b_name} ({b}); "
                         f"inconsistent shapes")
