"""Transformer model descriptions, built from HuggingFace ``config.json`` dicts.

:class:`ModelConfig` is the one shape description every other module in ``workloads/`` reads.
:func:`model_from_hf` maps the fields of the supported HF architectures onto it (the mapping per
architecture family is in :mod:`diptych.workloads.hf`) and validates them eagerly: a message
names the file, the field, the value and what was expected.

Layers need not be identical: :meth:`ModelConfig.layer_specs` gives each layer's
:class:`LayerSpec` (attention kind and window, MoE or dense, RoPE or NoPE, q/k norm) and
:meth:`ModelConfig.layer_groups` groups identical layers, which the lowering emits as one block
each with its repeat count. Families (what the parser distinguishes; the lowering only reads the
fields):

* ``llama``: pre-RMSNorm, RoPE, GQA, SwiGLU MLP (Llama, Mistral, Qwen2; Qwen2 has QKV biases).
* ``qwen3`` / ``qwen3_moe``: ``llama`` with per-head q/k RMSNorm; the MoE variant routes
  top-k over ``num_experts`` in every ``decoder_sparse_step``-th layer not in ``mlp_only_layers``.
* ``phi3``: ``llama`` with fused ``qkv_proj`` / ``gate_up_proj`` (same shapes) and a window.
* ``mixtral``: ``llama`` attention with a top-k routed SwiGLU MoE in every layer.
* ``gemma2`` / ``gemma3``: GeGLU (tanh GELU), sandwich norms, embeddings scaled by √d, tied
  head; interleaved sliding-window and global layers (1:1 in Gemma 2, 5:1 in Gemma 3); Gemma 2
  soft-caps attention and final logits, Gemma 3 has q/k norm instead.
* ``gpt_oss``: MoE in every layer with biased experts and router, clamped SwiGLU, attention
  sinks, QKV/O biases, alternating sliding (128) and full layers.
* ``llama4``: MoE with one shared expert on ``moe_layers`` (dense ``intermediate_size_mlp``
  MLPs elsewhere), chunked attention on RoPE layers, global NoPE layers every fourth layer,
  weightless L2 q/k norm on RoPE layers.
* ``gpt2``: pre-LayerNorm with biases, learned positions, MHA, GELU MLP of ``n_inner`` (4·d).
* ``deepseek_v3`` / ``deepseek_v2``: multi-head latent attention (MLA) and a MoE with shared
  experts after ``first_k_dense_replace`` dense layers (V2's router has no bias).
* ``deepseek_v32``: DeepSeek-V3.2-Exp: V3 plus DeepSeek Sparse Attention on every layer (a
  lightning indexer, ``index_*``; :mod:`diptych.workloads.sparse_attention`).
* ``glm4_moe``: GLM-4.5: GQA with q/k/v biases, optional q/k norm, partial RoPE; MoE with
  shared experts after ``first_k_dense_replace`` dense layers.
* ``falcon_h1``: Falcon-H1: every layer runs GQA attention and a Mamba-2 mixer in parallel on
  the same normed input (``LayerSpec.ssm``; :mod:`diptych.workloads.mamba2`), summed into the
  residual, then a SwiGLU MLP.
* ``qwen3_next``: Qwen3-Next: gated DeltaNet linear-attention layers (``linear``, a fixed
  per-sequence state instead of a KV cache; :mod:`diptych.workloads.gated_deltanet`) and,
  every ``full_attention_interval``-th layer, gated full attention (an output gate on q_proj);
  MoE with a gated shared expert.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .hf import ARCHITECTURES, parse

#: Per-layer attention kinds: every earlier key (``full``), the last ``window`` keys
#: (``sliding``), the keys of the current ``window``-token chunk (``chunked``, Llama 4), or
#: none: a linear-attention layer (``linear``: gated DeltaNet, Qwen3-Next) carries a
#: fixed-size recurrent state per sequence instead of a KV cache.
ATTENTION_KINDS = ("full", "sliding", "chunked", "linear")
#: Dtypes a linear-attention layer's recurrent state may be kept in (``state_dtype``).
STATE_DTYPES = ("fp32", "bf16", "fp16")
#: MLP activations: gated (three matrices) SiLU, tanh-GELU and gpt-oss's clamped SiLU; the
#: ungated GPT-2 GELU (two matrices).
ACTIVATIONS = ("swiglu", "geglu", "swiglu_clamped", "gelu")
NORMS = ("rmsnorm", "layernorm")
#: q/k normalisation: none, RMSNorm with a ``head_dim`` weight on every layer (Qwen3, Gemma 3),
#: or a weightless L2 norm on the RoPE layers only (Llama 4).
QK_NORMS = ("", "rmsnorm", "l2")


@dataclass(frozen=True)
class LayerSpec:
    """What distinguishes one transformer layer from another of the same model.

    ``window`` is the sliding window (``sliding``) or chunk size (``chunked``) in tokens, None
    for ``full`` attention."""

    attention: str = "full"
    window: int | None = None
    moe: bool = False
    rope: bool = True
    qk_norm: bool = False
    ssm: bool = False      # a Mamba-2 mixer beside the attention (Falcon-H1)

    @property
    def has_state(self) -> bool:
        """The layer keeps a fixed state per sequence (linear attention or a Mamba-2 mixer)."""
        return self.linear or self.ssm

    def describe_attention(self) -> str:
        return self.attention if self.window is None else f"{self.attention} {self.window}"

    @property
    def linear(self) -> bool:
        """A linear-attention layer: a fixed state per sequence, no KV cache."""
        return self.attention == "linear"

    def kv_tokens(self, context: int) -> int:
        """Tokens of a ``context``-token sequence this layer's KV cache must hold: the window
        for sliding layers, the current chunk (at most ``window``) for chunked ones, none for
        a linear-attention layer (its state is counted per sequence:
        :func:`~diptych.workloads.params.state_bytes_per_sequence`)."""
        if self.linear:
            return 0
        return context if self.window is None else min(context, self.window)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A decoder-only transformer's shapes. Sizes are element counts.

    ``head_dim`` is the per-head width of Q/K/V for GQA/MHA models. For MLA models the Q/K head
    width is ``qk_nope_head_dim + qk_rope_head_dim``, V's is ``v_head_dim``, and the KV cache
    holds ``kv_lora_rank + qk_rope_head_dim`` elements per token per layer.
    ``experts == 0`` means a dense model; otherwise MoE layers (``layer_moe``, or every layer
    from ``first_dense_layers`` on) have ``experts`` routed experts (``experts_per_token``
    active per token) plus ``shared_experts`` always-active experts, each of width
    ``moe_intermediate_size``; dense layers have an MLP of ``intermediate_size``.

    Per-layer tuples (``layer_attention``, ``layer_moe``, ``layer_rope``) hold one entry per
    layer or are empty for a uniform model: every layer ``sliding`` when ``sliding_window`` is
    set, else ``full``; MoE from ``first_dense_layers`` on; RoPE unless ``learned_positions``.
    ``attn_logit_softcap``/``final_logit_softcap``: ``cap·tanh(x/cap)`` on the attention scores
    / the LM head's logits (Gemma 2). ``attention_sinks``: one learned logit per head in every
    softmax denominator (gpt-oss). ``sandwich_norms``: a norm after attention and after the MLP
    too (Gemma). ``scale_embeddings``: embeddings multiplied by √d (Gemma).
    ``rotary_fraction``: share of each head's dimensions RoPE rotates. ``attn_temperature_tuning``:
    NoPE layers scale queries by a position-dependent factor (Llama 4).
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
    activation: str = "swiglu"            # see ACTIVATIONS
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    learned_positions: bool = False
    sliding_window: int | None = None
    # per-layer pattern (empty: uniform, see the class docstring)
    layer_attention: tuple[str, ...] = ()
    layer_moe: tuple[bool, ...] = ()
    layer_rope: tuple[bool, ...] = ()
    attention_chunk_size: int | None = None
    # attention and block details
    qk_norm: str = ""                     # see QK_NORMS
    attn_logit_softcap: float | None = None
    final_logit_softcap: float | None = None
    attention_sinks: bool = False
    sandwich_norms: bool = False
    scale_embeddings: bool = False
    rotary_fraction: float = 1.0
    attn_temperature_tuning: bool = False
    # MoE
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_intermediate_size: int = 0
    first_dense_layers: int = 0
    router_bias: bool = False
    # MLA
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek Sparse Attention (DSA, DeepSeek-V3.2; needs MLA with query compression): a
    # lightning indexer of index_heads heads of index_head_dim scores every earlier token per
    # query (FP8) and each query's MLA attention reads only the index_topk best (0: dense)
    index_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    # the checkpoint's stored precision (config.json): torch_dtype and the quantisation
    # method of quantization_config (workloads/hf.py TORCH_DTYPES, QUANT_METHODS); a run
    # models the weights in its own dtype and says when it differs
    checkpoint_dtype: str | None = None
    checkpoint_quant: str | None = None
    # a multimodal checkpoint (config.json has a vision_config): only its text model is
    # simulated and counted; runs and `models show` say so
    vision_tower: bool = False
    # multi-token-prediction modules shipped beside the decoder (num_nextn_predict_layers:
    # DeepSeek-V3, GLM-4.5): noted by `models show`, not counted; serve's MTP draft
    mtp_layers: int = 0
    # this config is a model's MTP module (the draft of `serve --speculative draft=mtp`,
    # workloads/mtp.py): its embedding feeds enorm/hnorm and eh_proj before its one block
    mtp_module: bool = False
    # gated DeltaNet linear attention (layers whose layer_attention is "linear", Qwen3-Next):
    # key heads and width (q and k), value heads and width (v, the output gate z), the
    # depthwise causal conv's kernel over q/k/v, and the dtype the recurrent state is kept in
    linear_key_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_heads: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    state_dtype: str = "fp32"
    # gated attention (Qwen3-Next): q_proj also emits a per-channel gate, sigmoid(gate) ⊙ the
    # attention output before o_proj
    attn_output_gate: bool = False
    # the shared experts' MLP width when it is not shared_experts × moe_intermediate_size
    # (Qwen3-Next's shared_expert_intermediate_size), and a sigmoid gate (a d → 1 linear)
    # scaling the shared expert's output (Qwen2-MoE / Qwen3-Next shared_expert_gate)
    shared_expert_intermediate_size: int = 0
    shared_expert_gate: bool = False
    # Mamba-2 mixers beside the attention of every layer (Falcon-H1, parallel_ssm): heads of
    # ssm_head_dim, state width ssm_state_size, B/C groups, the causal conv's kernel and bias,
    # in_proj/out_proj biases, the RMSNorm before the gate, and the SSD chunk size
    parallel_ssm: bool = False
    ssm_heads: int = 0
    ssm_head_dim: int = 0
    ssm_state_size: int = 0
    ssm_groups: int = 0
    ssm_conv_kernel: int = 0
    ssm_conv_bias: bool = False
    ssm_in_bias: bool = False
    ssm_out_bias: bool = False
    ssm_rms_norm: bool = False
    ssm_chunk_size: int = 0

    def __post_init__(self):
        def bad(field: str, value, expected: str):
            raise ValueError(f"model {self.name!r}: {field} must be {expected}, not {value!r}")

        if self.norm not in NORMS:
            bad("norm", self.norm, "one of " + ", ".join(NORMS))
        if self.activation not in ACTIVATIONS:
            bad("activation", self.activation, "one of " + ", ".join(ACTIVATIONS))
        if self.qk_norm not in QK_NORMS:
            bad("qk_norm", self.qk_norm, "one of " + ", ".join(repr(q) for q in QK_NORMS))
        for f in ("layer_attention", "layer_moe", "layer_rope"):
            v = getattr(self, f)
            if v and len(v) != self.layers:
                bad(f, v, f"empty or one entry per layer ({self.layers}), not {len(v)} entries")
        for i, a in enumerate(self.layer_attention):
            if a not in ATTENTION_KINDS:
                bad(f"layer_attention[{i}]", a, "one of " + ", ".join(ATTENTION_KINDS))
        kinds = set(self.layer_attention) or {"sliding" if self.sliding_window else "full"}
        for kind, f in (("sliding", "sliding_window"), ("chunked", "attention_chunk_size")):
            v = getattr(self, f)
            if kind in kinds and v is None:
                bad(f, v, f"set (a positive integer) when layers use {kind} attention")
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                bad(f, v, "a positive integer or None")
        if any(self.layer_moe) and not self.is_moe:
            bad("layer_moe", self.layer_moe, "all False for a model without experts")
        for f in ("attn_logit_softcap", "final_logit_softcap"):
            v = getattr(self, f)
            if v is not None and not v > 0:
                bad(f, v, "a positive number or None")
        if not 0 < self.rotary_fraction <= 1:
            bad("rotary_fraction", self.rotary_fraction, "in (0, 1]")
        def positive(fields: tuple[str, ...], why: str) -> None:
            for f in fields:
                v = getattr(self, f)
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    bad(f, v, f"a positive integer when {why}")

        if "linear" in self.layer_attention:
            positive(("linear_key_heads", "linear_key_head_dim", "linear_value_heads",
                      "linear_value_head_dim", "linear_conv_kernel"),
                     "layers use linear attention")
            if self.linear_value_heads % self.linear_key_heads:
                bad("linear_value_heads", self.linear_value_heads,
                    f"a multiple of linear_key_heads ({self.linear_key_heads})")
        if self.parallel_ssm:
            positive(("ssm_heads", "ssm_head_dim", "ssm_state_size", "ssm_groups",
                      "ssm_conv_kernel", "ssm_chunk_size"), "layers have a Mamba-2 mixer")
            if self.ssm_heads % self.ssm_groups:
                bad("ssm_heads", self.ssm_heads, f"a multiple of ssm_groups ({self.ssm_groups})")
        if self.index_topk or self.index_heads or self.index_head_dim:
            positive(("index_heads", "index_head_dim", "index_topk", "q_lora_rank",
                      "kv_lora_rank"), "the model has a sparse-attention indexer (index_*)")
            if self.index_head_dim < self.qk_rope_head_dim:
                bad("index_head_dim", self.index_head_dim,
                    f"at least qk_rope_head_dim ({self.qk_rope_head_dim}): the indexer "
                    f"rotates that many of its dimensions")
        if self.state_dtype not in STATE_DTYPES:
            bad("state_dtype", self.state_dtype, "one of " + ", ".join(STATE_DTYPES))
        if self.shared_expert_intermediate_size < 0:
            bad("shared_expert_intermediate_size", self.shared_expert_intermediate_size,
                "a non-negative integer")

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def sparse_attention(self) -> bool:
        """DeepSeek Sparse Attention: an indexer picks ``index_topk`` keys per query."""
        return self.index_topk > 0

    def layer_specs(self) -> tuple[LayerSpec, ...]:
        """Each layer's :class:`LayerSpec`, in order."""
        return self._specs

    def layer_groups(self) -> list[tuple[LayerSpec, tuple[int, ...]]]:
        """Identical layers grouped: ``[(spec, layer indices), ...]`` in order of first use."""
        return list(self._groups)

    @cached_property
    def _specs(self) -> tuple[LayerSpec, ...]:
        specs = []
        for i in range(self.layers):
            att = (self.layer_attention[i] if self.layer_attention
                   else "sliding" if self.sliding_window else "full")
            window = {"sliding": self.sliding_window,
                      "chunked": self.attention_chunk_size}.get(att)
            moe = (self.layer_moe[i] if self.layer_moe
                   else self.is_moe and i >= self.first_dense_layers)
            rope = not self.learned_positions and (self.layer_rope[i] if self.layer_rope
                                                   else True)
            qk = self.qk_norm == "rmsnorm" or (self.qk_norm == "l2" and rope)
            specs.append(LayerSpec(att, window, bool(moe), rope, qk, self.parallel_ssm))
        return tuple(specs)

    @cached_property
    def _groups(self) -> tuple[tuple[LayerSpec, tuple[int, ...]], ...]:
        groups: dict[LayerSpec, list[int]] = {}
        for i, s in enumerate(self._specs):
            groups.setdefault(s, []).append(i)
        return tuple((s, tuple(ix)) for s, ix in groups.items())

    def describe_layers(self) -> str:
        """The layer pattern in words, e.g. ``21 × sliding 4096 + 21 × full``."""
        groups = self.layer_groups()
        parts = []
        for s, ix in groups:
            tags = [s.describe_attention() + (" + mamba2" if s.ssm else "")]
            if self.is_moe:
                tags.append("moe" if s.moe else "dense")
            if not s.rope and not self.learned_positions:
                tags.append("nope")
            parts.append(f"{len(ix)} × {' '.join(tags)}")
        return " + ".join(parts)

    @cached_property
    def moe_layers(self) -> int:
        return sum(s.moe for s in self._specs) if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    @cached_property
    def linear_layers(self) -> int:
        """Linear-attention layers (a fixed state per sequence, no KV cache)."""
        return sum(s.linear for s in self._specs)

    @cached_property
    def state_layers(self) -> int:
        """Layers that keep a fixed state per sequence (linear attention, Mamba-2 mixers)."""
        return sum(s.has_state for s in self._specs)

    @property
    def kv_layers(self) -> int:
        """Layers that cache K/V per token (every layer but the linear-attention ones)."""
        return self.layers - self.linear_layers

    @property
    def shared_width(self) -> int:
        """The shared experts' MLP width (0: none)."""
        if not self.shared_experts:
            return 0
        return self.shared_expert_intermediate_size or \
            self.moe_intermediate_size * self.shared_experts

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

    @property
    def gated_mlp(self) -> bool:
        """Gate, up and down matrices (every activation but GPT-2's GELU)."""
        return self.activation != "gelu"


def model_from_hf(d: Any, *, name: str, source: str | None = None) -> ModelConfig:
    """Build a :class:`ModelConfig` from a parsed HF ``config.json`` dict.

    Raises ValueError for unsupported architectures (listing the supported ones), missing or
    non-integer fields and inconsistent shapes (e.g. hidden size not divisible by heads).
    """
    if not isinstance(d, dict):
        raise ValueError(f"{source or 'config'}: expected a JSON object, got {type(d).__name__}")
    where = f"{source}: architectures" if source else "architectures"
    archs = d.get("architectures")
    if not archs:
        raise ValueError(f"{where} is missing: expected a list with one of "
                         f"{', '.join(ARCHITECTURES)}")
    if not isinstance(archs, Sequence) or isinstance(archs, str) or not all(
            isinstance(a, str) for a in archs):
        raise ValueError(f"{where} must be a list of architecture names (strings) such as "
                         f'["LlamaForCausalLM"], not {archs!r}')
    arch = archs[0]
    if arch not in ARCHITECTURES:
        raise ValueError(f"{where}: unsupported architecture {arch!r}; "
                         f"supported: {', '.join(ARCHITECTURES)}")
    family = ARCHITECTURES[arch]
    return ModelConfig(name=name, architecture=arch, family=family,
                       **parse(family, arch, d, source))
