"""Parameter inventory, KV-cache size and FLOPs per token of a :class:`ModelConfig`.

The inventory lists every weight tensor as HF stores it (biases, norms, router, embeddings), so
the totals are the ``sum(p.numel())`` a HF checkpoint reports. Each tensor records whether
Megatron tensor parallelism splits it (column/row-parallel linears, vocab-parallel embedding and
LM head) or replicates it (norms, router, MLA down-projections, row-parallel biases).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch.dtypes import dtype_bytes
from .config import ModelConfig
from .mamba2 import shapes as ssm_shapes


@dataclass(frozen=True)
class Tensor:
    """``count`` copies (one per layer using it) of a weight tensor of ``elements`` elements.

    ``active`` is the fraction of the copies a token uses (``k / E`` for routed experts).
    ``grouped``: ``(elements, groups)``, a split copy's ``groups`` groups of ``elements``
    each (KV heads, Mamba-2's B and C groups) that ranks share out whole: ``groups / tp`` each
    when ``tp`` divides them, else as ``undivided`` says, ``"one"`` (a rank holds one: KV heads
    replicated when ``tp`` exceeds them, :func:`kv_heads_per_rank`) or ``"all"`` (every rank
    holds them all: Mamba-2's groups, :func:`diptych.workloads.mamba2.shapes`); ``(0, 1)``:
    none.
    """

    name: str
    elements: int
    count: int
    split: bool          # split across tensor-parallel ranks
    group: str   # attn | sink | mlp | expert | shared_expert | router | norm | embed | head
    #              | mtp (an MTP module's eh_proj)
    active: float = 1.0
    grouped: tuple[int, int] = (0, 1)
    undivided: str = "all"

    @property
    def total(self) -> int:
        return self.elements * self.count

    def rank_elements(self, tp: int) -> float:
        """Elements of one copy a rank of ``tp`` tensor-parallel ranks holds: the whole of a
        tensor not split; of a split one its ``1/tp`` share, except its ``grouped`` groups
        when ``tp`` does not divide them (one or all of them whole, ``undivided``)."""
        if not self.split:
            return self.elements
        if not self.divides(tp):
            e, groups = self.grouped
            held = 1 if self.undivided == "one" else groups
            return (self.elements - e * groups) / tp + e * held
        return self.elements / tp

    def divides(self, tp: int) -> bool:
        """Whether ``tp`` ranks split the copy evenly (no ``grouped`` groups held whole)."""
        e, groups = self.grouped
        return not e or groups % tp == 0


def _linear_attention_tensors(m: ModelConfig) -> list[Tensor]:
    """Gated DeltaNet's weights, one copy per linear-attention layer, as HF's
    ``Qwen3NextGatedDeltaNet`` holds them [M: transformers models/qwen3_next]: ``in_proj_qkvz``
    (d → q, k of ``H_k·d_k`` each, v and the output gate z of ``H_v·d_v`` each),
    ``in_proj_ba`` (d → β and the decay's ``a``, one per value head), the depthwise
    ``conv1d`` over q/k/v (``kernel`` taps per channel, no bias), ``dt_bias`` and ``A_log``
    (one per value head), the gated RMSNorm's ``d_v`` weight (shared by the heads) and
    ``out_proj``. Heads split over tensor-parallel ranks, the norm weight is replicated."""
    n = m.linear_layers
    if not n:
        return []
    d = m.hidden_size
    key, val = m.linear_key_heads * m.linear_key_head_dim, \
        m.linear_value_heads * m.linear_value_head_dim
    return [Tensor("in_proj_qkvz", d * (2 * key + 2 * val), n, True, "attn"),
            Tensor("in_proj_ba", d * 2 * m.linear_value_heads, n, True, "attn"),
            Tensor("conv1d", (2 * key + val) * m.linear_conv_kernel, n, True, "norm"),
            Tensor("dt_bias_A_log", 2 * m.linear_value_heads, n, True, "norm"),
            Tensor("linear_norm", m.linear_value_head_dim, n, False, "norm"),
            Tensor("out_proj", val * d, n, True, "attn")]


def _ssm_tensors(m: ModelConfig) -> list[Tensor]:
    """A Mamba-2 mixer's weights, one copy per layer that has one, as HF's ``FalconH1Mixer``
    holds them [M: transformers models/falcon_h1]: ``in_proj`` (d → z and x of ``H·P`` each,
    B and C of ``G·N`` each, dt of ``H``; a bias with ``mamba_proj_bias``), the depthwise
    ``conv1d`` over x/B/C (and its bias), ``dt_bias``, ``A_log`` and ``D`` (one per head),
    the gated RMSNorm's weight (``mamba_rms_norm``) and ``out_proj`` (a bias with
    ``projectors_bias``). Heads split over tensor-parallel ranks; B and C by group, whole on
    every rank when the ranks do not divide the groups (``grouped``)."""
    n = sum(s.ssm for s in m.layer_specs())
    if not n:
        return []
    d, d_ssm = m.hidden_size, m.ssm_heads * m.ssm_head_dim
    conv = d_ssm + 2 * m.ssm_groups * m.ssm_state_size
    w_in = d_ssm + conv + m.ssm_heads
    bc, g = 2 * m.ssm_state_size, m.ssm_groups      # one group's B and C channels
    out = [Tensor("ssm_in_proj", d * w_in, n, True, "attn", grouped=(d * bc, g)),
           Tensor("ssm_conv1d", conv * m.ssm_conv_kernel, n, True, "norm",
                  grouped=(bc * m.ssm_conv_kernel, g)),
           Tensor("ssm_dt_bias_A_log_D", 3 * m.ssm_heads, n, True, "norm"),
           Tensor("ssm_out_proj", d_ssm * d, n, True, "attn")]
    if m.ssm_in_bias:
        out.append(Tensor("ssm_in_proj_bias", w_in, n, True, "attn", grouped=(bc, g)))
    if m.ssm_conv_bias:
        out.append(Tensor("ssm_conv1d_bias", conv, n, True, "norm", grouped=(bc, g)))
    if m.ssm_rms_norm:
        out.append(Tensor("ssm_norm", d_ssm, n, True, "norm"))
    if m.ssm_out_bias:
        out.append(Tensor("ssm_out_proj_bias", d, n, False, "attn"))
    return out


def _indexer_tensors(m: ModelConfig) -> list[Tensor]:
    """DeepSeek Sparse Attention's lightning indexer, one per layer: ``wq_b`` (the query
    latent → ``H_I·d_I``), ``wk`` (d → ``d_I``, one key shared by the heads), ``k_norm`` (a
    LayerNorm: weight and bias of ``d_I``) and ``weights_proj`` (d → ``H_I``, the per-head
    weights), none with a bias [M: inference/model.py ``Indexer``, deepseek-ai/DeepSeek-V3.2-Exp;
    transformers ``DeepseekV32Indexer``]. Replicated on every tensor-parallel rank: the
    reference runs them as plain ``Linear`` s (not column/row-parallel) and broadcasts rank
    0's top-k, and vLLM holds them as ``ReplicatedLinear`` ("no tensor parallel, just
    replicated") [M: vllm model_executor/models/deepseek_v2.py ``Indexer``]."""
    if not m.sparse_attention:
        return []
    d, L, hi, di = m.hidden_size, m.kv_layers, m.index_heads, m.index_head_dim
    return [Tensor("indexer.wq_b", m.q_lora_rank * hi * di, L, False, "attn"),
            Tensor("indexer.wk", d * di, L, False, "attn"),
            Tensor("indexer.k_norm", 2 * di, L, False, "norm"),
            Tensor("indexer.weights_proj", d * hi, L, False, "attn")]


def _attention_tensors(m: ModelConfig) -> list[Tensor]:
    """The attention layers' weights (``kv_layers`` copies: every layer but the linear ones,
    whose weights are :func:`_linear_attention_tensors`)."""
    d, h, L = m.hidden_size, m.heads, m.kv_layers
    out: list[Tensor] = _linear_attention_tensors(m) + _ssm_tensors(m)
    if m.is_mla:
        qk = m.qk_head_dim
        if m.q_lora_rank:
            out += [Tensor("q_a_proj", d * m.q_lora_rank, L, False, "attn"),
                    Tensor("q_a_layernorm", m.q_lora_rank, L, False, "norm"),
                    Tensor("q_b_proj", m.q_lora_rank * h * qk, L, True, "attn")]
        else:
            out.append(Tensor("q_proj", d * h * qk, L, True, "attn"))
        out += [Tensor("kv_a_proj_with_mqa", d * (m.kv_lora_rank + m.qk_rope_head_dim), L, False,
                       "attn"),
                Tensor("kv_a_layernorm", m.kv_lora_rank, L, False, "norm"),
                Tensor("kv_b_proj", m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim), L,
                       True, "attn"),
                Tensor("o_proj", h * m.v_head_dim * d, L, True, "attn")]
        return out + _indexer_tensors(m)
    q, kv = h * m.head_dim, m.kv_heads * m.head_dim
    gate = 2 if m.attn_output_gate else 1         # q_proj also emits the output gate
    # K and V by head: a rank holds one when the ranks outnumber the heads (kv_heads_per_rank)
    head = dict(grouped=(d * m.head_dim, m.kv_heads), undivided="one")
    out += [Tensor("q_proj", d * q * gate, L, True, "attn"),
            Tensor("k_proj", d * kv, L, True, "attn", **head),
            Tensor("v_proj", d * kv, L, True, "attn", **head),
            Tensor("o_proj", q * d, L, True, "attn")]
    if m.qkv_bias:
        out.append(Tensor("qkv_bias", q + 2 * kv, L, True, "attn",
                          grouped=(2 * m.head_dim, m.kv_heads), undivided="one"))
    if m.out_bias:
        out.append(Tensor("o_bias", d, L, False, "attn"))
    if m.qk_norm == "rmsnorm":           # one head_dim weight each for q and k, shared by heads
        out.append(Tensor("qk_norm", 2 * m.head_dim, L, False, "norm"))
    if m.attention_sinks:                # one learned logit per head
        out.append(Tensor("sinks", h, L, True, "sink"))
    return out


def _mlp(name: str, d: int, f: int, count: int, group: str, m: ModelConfig,
         active: float = 1.0) -> list[Tensor]:
    mats = 3 if m.gated_mlp else 2
    out = [Tensor(f"{name}.weights", mats * d * f, count, True, group, active)]
    if m.mlp_bias:
        out += [Tensor(f"{name}.in_bias", (mats - 1) * f, count, True, group, active),
                Tensor(f"{name}.out_bias", d, count, False, group, active)]
    return out


def weight_tensors(m: ModelConfig) -> list[Tensor]:
    """Every weight tensor of the model (see :class:`Tensor`)."""
    d, L = m.hidden_size, m.layers
    norm_elems = d if m.norm == "rmsnorm" else 2 * d
    out = _attention_tensors(m)
    per_layer = 4 if m.sandwich_norms else 2       # pre (and post) attention and MLP norms
    out.append(Tensor("layer_norms", per_layer * norm_elems, L, False, "norm"))
    if m.dense_layers:
        out += _mlp("mlp", d, m.intermediate_size, m.dense_layers, "mlp", m)
    if m.is_moe:
        n = m.moe_layers
        out.append(Tensor("router", d * m.experts, n, False, "router"))
        if m.router_bias:
            out.append(Tensor("router_bias", m.experts, n, False, "router"))
        out += _mlp("experts", d, m.moe_intermediate_size, n * m.experts, "expert", m,
                    active=m.experts_per_token / m.experts)
        if m.shared_experts:
            out += _mlp("shared_experts", d, m.shared_width, n, "shared_expert", m)
            if m.shared_expert_gate:      # sigmoid(x·w) scales the shared expert's output
                out.append(Tensor("shared_expert_gate", d, n, False, "router"))
    out.append(Tensor("final_norm", norm_elems, 1, False, "norm"))
    if m.mtp_module:     # an MTP module (workloads/mtp.py): the embedding and head are shared
        return out + [Tensor("eh_proj", 2 * d * d, 1, mtp_projection_split(m), "mtp"),
                      Tensor("mtp_norms", 2 * norm_elems, 1, False, "norm")]
    out.append(Tensor("embed_tokens", m.vocab_size * d, 1, True, "embed"))
    if m.learned_positions:
        out.append(Tensor("embed_positions", m.max_position_embeddings * d, 1, False, "embed"))
    if not m.tie_word_embeddings:
        out.append(Tensor("lm_head", m.vocab_size * d, 1, True, "head"))
    return out


def mtp_projection_split(m: ModelConfig) -> bool:
    """Whether an MTP module's 2d → d projection is split across tensor-parallel ranks:
    vLLM's Qwen3-Next MTP makes it a ``ColumnParallelLinear(2·hidden, hidden,
    gather_output=True)`` (its outputs all-gathered; vllm/model_executor/models/
    qwen3_next_mtp.py) [S]; DeepSeek-V3's and GLM-4.5's ``eh_proj`` is an ``nn.Linear``,
    replicated (deepseek_mtp.py, glm4_moe_mtp.py) [S]."""
    return m.architecture == "Qwen3NextForCausalLM"


def param_count(m: ModelConfig) -> int:
    """Total parameters (as a HF checkpoint counts them; tied embeddings once)."""
    return sum(t.total for t in weight_tensors(m))


def active_param_count(m: ModelConfig) -> float:
    """Parameters one token uses: routed experts count ``experts_per_token / experts``."""
    return sum(t.total * t.active for t in weight_tensors(m))


def matmul_param_count(m: ModelConfig, *, active: bool = True) -> float:
    """Parameters that take part in matrix products (everything but norms, biases and the
    input embedding lookup; the LM head counts, tied or not). ``2 ×`` this is the non-attention
    forward FLOPs per token."""
    total = 0.0
    for t in weight_tensors(m):
        if t.group in ("norm", "embed", "sink") or "bias" in t.name:
            continue
        total += t.total * (t.active if active else 1.0)
    if m.tie_word_embeddings:
        total += m.vocab_size * m.hidden_size
    return total


def params_per_chip(m: ModelConfig, tp: int, ep: int = 1, *, whole_experts: bool = False
                    ) -> float:
    """Parameters one tensor-parallel rank holds (split tensors ÷ tp, the rest replicated);
    with ``ep`` expert-parallel ranks the routed experts ÷ ep too (``whole_experts``: not ÷ tp,
    each of the tp chips an expert-parallel rank holding whole experts)."""
    return sum(chip_share(t, tp, ep, whole_experts) for t in weight_tensors(m))


def chip_share(t: Tensor, tp: int, ep: int = 1, whole_experts: bool = False) -> float:
    """The elements of weight tensor ``t`` one rank holds (:func:`params_per_chip`)."""
    if t.group == "expert":
        return t.total / ep / (1 if whole_experts or not t.split else tp)
    if t.split and not t.divides(tp):      # some groups held whole (Tensor.rank_elements)
        return t.rank_elements(tp) * t.count
    # (total / tp, not rank_elements(tp) * count: the rounding every count has had)
    return t.total / tp if t.split else t.total


#: Groups of the weight tensors an inference recipe quantises (biases and the names in
#: :data:`UNQUANTIZED_LINEARS` excepted): the linear layers' (:mod:`diptych.workloads.precision`).
QUANTIZED_GROUPS = ("attn", "mlp", "expert", "shared_expert", "mtp")
#: Linear weights of those groups that a recipe keeps in 16 bits (the lowering's
#: ``indexer_weights_proj``, :data:`diptych.workloads.recipe.BF16_LINEARS`).
UNQUANTIZED_LINEARS = ("indexer.weights_proj",)


def is_quantized(t: Tensor) -> bool:
    """Whether an inference recipe stores weight tensor ``t`` in its linear dtype."""
    return (t.group in QUANTIZED_GROUPS and "bias" not in t.name
            and t.name not in UNQUANTIZED_LINEARS)


def weight_bytes(shares, p) -> float:
    """Bytes of ``shares`` (``(Tensor, elements)`` pairs) in precision ``p`` (a
    :class:`~diptych.workloads.precision.Precision`): every element at ``p.w_bytes``, except
    under an inference recipe, whose unquantised weights (embedding, LM head, router, norms,
    biases: :func:`is_quantized`) are ``p.uw_bytes`` each."""
    if p.unquantized_weights is None:
        return sum(n for _, n in shares) * p.w_bytes
    return sum(n * (p.w_bytes if is_quantized(t) else p.uw_bytes) for t, n in shares)


def weight_bytes_per_chip(m: ModelConfig, tp: int, p, ep: int = 1, *,
                          whole_experts: bool = False) -> float:
    """Bytes of the weights one tensor-parallel rank holds (:func:`params_per_chip`'s shares)
    in precision ``p`` (:func:`weight_bytes`)."""
    return weight_bytes([(t, chip_share(t, tp, ep, whole_experts)) for t in weight_tensors(m)],
                        p)


def kv_elements_per_token(m: ModelConfig) -> int:
    """KV-cache elements per token, all layers that cache K/V (``L`` = ``kv_layers``: a
    linear-attention layer has a fixed state instead, :func:`state_bytes_per_sequence`):
    ``2·L·H_kv·d_head`` (MLA: ``L·(r_kv + d_rope)``). Sliding and chunked layers hold only
    their window of tokens: see :func:`kv_cache_bytes`."""
    if m.is_mla:
        return m.kv_layers * (m.kv_lora_rank + m.qk_rope_head_dim)
    return 2 * m.kv_layers * m.kv_heads * m.head_dim


#: The lightning indexer's key cache per token per layer: ``index_head_dim`` FP8 (E4M3)
#: values and one FP32 scale per 128-value block, whatever the KV dtype [M: inference/model.py
#: ``Indexer``: ``k_cache`` float8_e4m3fn of ``head_dim``, ``k_scale_cache`` float32 of
#: ``head_dim // block_size``, ``block_size = 128``; deepseek-ai/DeepSeek-V3.2-Exp].
INDEX_KEY_BYTES, INDEX_SCALE_BYTES, INDEX_SCALE_BLOCK = 1, 4, 128


def index_key_bytes_per_token(m: ModelConfig) -> float:
    """Bytes of the indexer's key cache per token per layer (0 without sparse attention):
    DeepSeek-V3.2's ``128·1 + 4 = 132``."""
    if not m.sparse_attention:
        return 0.0
    di = m.index_head_dim
    return di * INDEX_KEY_BYTES + -(-di // INDEX_SCALE_BLOCK) * INDEX_SCALE_BYTES


def kv_bytes_per_token(m: ModelConfig, dtype: str = "bf16") -> float:
    """KV-cache bytes per token in ``dtype`` (Llama-3-70B BF16: 327,680 B), plus with sparse
    attention the indexer's own key cache (:func:`index_key_bytes_per_token`, in FP8 whatever
    ``dtype``) of every layer."""
    base = kv_elements_per_token(m) * dtype_bytes(dtype)
    if m.sparse_attention:
        return base + m.kv_layers * index_key_bytes_per_token(m)
    return base


def kv_heads_per_rank(m: ModelConfig, tp: int) -> int:
    """KV heads a tensor-parallel rank stores: ``H_kv / tp``, or 1 (replicated) when tp > H_kv.
    MLA's latent cache is shared by all heads and replicated on every rank (returns 1)."""
    if m.is_mla:
        return 1
    return max(1, m.kv_heads // tp)


def kv_bytes_per_token_per_chip(m: ModelConfig, dtype: str, tp: int) -> float:
    """KV-cache bytes per token one tensor-parallel rank stores, all layers."""
    if m.is_mla:
        return kv_bytes_per_token(m, dtype)
    return 2 * m.kv_layers * kv_heads_per_rank(m, tp) * m.head_dim * dtype_bytes(dtype)


def kv_bytes_per_token_per_layer(m: ModelConfig, dtype: str, tp: int) -> float:
    """KV-cache bytes per token of one layer that caches K/V, on one TP rank (0 for a model
    whose every layer is linear attention)."""
    return kv_bytes_per_token_per_chip(m, dtype, tp) / m.kv_layers if m.kv_layers else 0.0


def kv_bytes_by_layer_kind(m: ModelConfig, dtype: str = "bf16", tp: int = 1) -> list[dict]:
    """Per distinct layer kind: ``attention`` (e.g. ``sliding 4096``), ``layers``,
    ``bytes_per_token_per_layer`` on one TP rank and ``window`` (tokens a layer of this kind
    caches at most; None: the whole context)."""
    per_layer = kv_bytes_per_token_per_layer(m, dtype, tp)
    return [{"attention": s.describe_attention(), "layers": len(ix),
             "bytes_per_token_per_layer": per_layer, "window": s.window}
            for s, ix in _kv_groups(m)]


def kv_groups(m: ModelConfig) -> list[tuple[str, int | None, int]]:
    """What a KV cache holds, by attention kind: ``(attention, window, layers)`` per distinct
    kind in order of first use (``("full", None, 18), ("sliding", 128, 18)`` for
    gpt-oss-120b); a layer of a kind with a window caches at most ``window`` tokens."""
    return [(s.attention, s.window, len(ix)) for s, ix in _kv_groups(m)]


def _kv_groups(m: ModelConfig):
    """Layer groups by attention kind only (what the KV cache depends on); linear-attention
    layers cache no K/V and are left out."""
    groups: dict = {}
    for s, ix in m.layer_groups():
        if s.linear:
            continue
        key = (s.attention, s.window)
        groups.setdefault(key, (s, []))[1].extend(ix)
    return [(s, ix) for s, ix in groups.values()]


def kv_cache_bytes(m: ModelConfig, dtype: str, context: int, tp: int = 1) -> float:
    """KV-cache bytes of one ``context``-token sequence on one TP rank: every layer caches
    ``min(context, window)`` tokens (sliding: the window; chunked: at most one chunk, the worst
    case over positions; full: the whole context)."""
    per_token_all = kv_bytes_per_token_per_chip(m, dtype, tp)
    groups = _kv_groups(m)
    if not groups:                           # linear attention only: no KV cache
        return 0.0
    if len(groups) == 1:                     # uniform: keep the historical product exactly
        return groups[0][0].kv_tokens(context) * per_token_all
    return sum(len(ix) * s.kv_tokens(context) for s, ix in groups) * (per_token_all
                                                                       / m.kv_layers)


def state_bytes_per_layer(m: ModelConfig, tp: int = 1, conv_dtype: str = "bf16"
                          ) -> dict[str, float]:
    """The fixed state one sequence keeps in one linear-attention layer on one TP rank
    (empty for a model without such layers), by part:

    * ``recurrent``: the gated delta rule's matrix, ``H_v/tp × d_k × d_v`` elements per
      sequence (each value head has its own; q/k heads are shared by ``H_v/H_k`` of them), in
      the model's ``state_dtype`` [assumption: FP32 — HF's ``torch_recurrent_gated_delta_rule``
      and flash-linear-attention's kernels keep and return the state in FP32];
    * ``conv``: the causal conv's last ``kernel − 1`` inputs of its ``(2·H_k·d_k + H_v·d_v)/tp``
      channels, in the activations' dtype ``conv_dtype`` (HF's ``causal_conv1d_update`` keeps
      ``conv_state`` in the input dtype; vLLM allocates the same ``(kernel − 1) × conv_dim``).

    A Mamba-2 mixer (Falcon-H1) keeps ``H/tp × P × N`` elements in ``state_dtype`` and its
    conv's ``kernel − 1`` inputs of ``(H·P + 2·G·N)/tp`` channels (``G`` split over ranks when
    it divides, else replicated), the same rule.

    Neither grows with the context: a sequence holds it once, whatever its length."""
    if m.parallel_ssm:
        s = ssm_shapes(m, tp)
        return {"recurrent": s["h"] * s["p"] * s["n"] * dtype_bytes(m.state_dtype),
                "conv": s["conv"] * (m.ssm_conv_kernel - 1) * dtype_bytes(conv_dtype)}
    if not m.linear_layers:
        return {}
    return {"recurrent": m.linear_value_heads // tp * m.linear_key_head_dim
            * m.linear_value_head_dim * dtype_bytes(m.state_dtype),
            "conv": (2 * m.linear_key_heads * m.linear_key_head_dim + m.linear_value_heads
                     * m.linear_value_head_dim) // tp * (m.linear_conv_kernel - 1)
            * dtype_bytes(conv_dtype)}


def state_bytes_per_sequence(m: ModelConfig, conv_dtype: str = "bf16", tp: int = 1) -> float:
    """Bytes of fixed state one sequence holds on one TP rank, all linear-attention layers
    (:func:`state_bytes_per_layer`; the conv state in ``conv_dtype``): counted once per
    sequence, independent of its length (Qwen3-Next-80B-A3B: 36 layers × (2 MiB recurrent +
    48 KiB conv) = 77,266,944 B in FP32/BF16 at tp 1)."""
    per = state_bytes_per_layer(m, tp, conv_dtype)
    if not per:
        return 0.0
    return m.state_layers * (per["recurrent"] + per["conv"])


def attention_flops_per_token(m: ModelConfig, context: float) -> float:
    """Forward attention GEMM FLOPs of one token attending to ``context`` keys, all layers:
    scores ``2·H·d_qk·c`` plus ``P·V`` ``2·H·d_v·c`` per layer (MHA: ``4·d·c``), with ``c``
    capped at each layer's window (sliding) or chunk (chunked: an upper bound, a token attends
    only the keys of its own chunk so far); with DeepSeek Sparse Attention ``c`` is capped at
    ``index_topk`` and the indexer adds ``2·H_I·d_I`` per context token per layer."""
    groups = _kv_groups(m)
    if not groups:
        return 0.0
    if m.sparse_attention:   # DSA: top-k keys, plus the indexer's H_I·d_I MACs per key
        return 2.0 * m.kv_layers * (m.heads * (m.qk_head_dim + m.v_dim)
                                    * min(context, m.index_topk)
                                    + m.index_heads * m.index_head_dim * context)
    if len(groups) == 1:                     # uniform: the historical expression exactly
        c = min(context, groups[0][0].window or context)
        return 2.0 * len(groups[0][1]) * m.heads * (m.qk_head_dim + m.v_dim) * c
    return 2.0 * m.heads * (m.qk_head_dim + m.v_dim) * sum(
        len(ix) * min(context, s.window or context) for s, ix in groups)


def flops_per_token(m: ModelConfig, context: float = 0.0) -> float:
    """Forward FLOPs per token: ``2 × active matmul parameters`` plus attention at ``context``."""
    return 2.0 * matmul_param_count(m) + attention_flops_per_token(m, context)
