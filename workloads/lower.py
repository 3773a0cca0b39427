"""Lower a model's forward pass, per layer, to ops for one chip of a tensor-parallel group.

Conventions (all documented in docs/workloads.md):

* Linear layers are :class:`Gemm` s ``m = tokens``, ``k = in``, ``n = out / tp`` (column
  parallel) or ``k = in / tp`` (row parallel, followed by an all-reduce of ``tokens × d``
  activations: Megatron's two all-reduces per layer). Weight matrices carry the tag ``weight``.
* Attention is batched GEMMs over (sequence, KV head): GQA puts the ``g = H/H_kv`` query heads
  sharing a KV head into ``m`` so each K/V is read once. Prefill and training attend causally;
  a query attends on average ``(s+1)/2`` keys (window-capped), modelled as an ``s × ceil(mean)``
  product, i.e. the exact number of MACs of a masked (flash-style) kernel. Decode attends the
  whole cache: GEMVs whose B operand is the KV cache in the KV dtype.
* MLA (DeepSeek-V3): prefill/training use the explicit path (``kv_b_proj`` expands the latent
  into per-head K and V); decode uses the absorbed path (queries projected into the latent
  space, attention directly over the ``kv_lora + rope`` cache, values projected out per head).
* Attention is fused by default (``attention="fused"``, FlashAttention-style: one
  :class:`~diptych.workloads.fused_attention.FusedAttention` record per layer whose DRAM
  traffic is Q, K, V and O, plus the softmax statistics in training; see
  :mod:`diptych.workloads.fused_attention`). With
  ``attention="unfused"`` the scores go to memory and the softmax reads them back.
* MoE: the router GEMM, a top-k on the vector unit, then the experts touched by the batch
  (:func:`diptych.workloads.moe.expert_load`) as a batched GEMM with one weight matrix per
  expert, plus shared experts as a dense MLP. Only touched experts' weights are read.
* Layers that differ (sliding vs global attention, MoE vs dense, RoPE vs NoPE) are lowered once
  per distinct :class:`~diptych.workloads.config.LayerSpec`, each block with its repeat count.
  A sliding layer attends at most its window, a chunked layer the keys of its own chunk; in
  decode each reads only the cache it holds. Attention soft-capping adds ``cap·tanh(s/cap)``
  work per score to the softmax, attention sinks one extra logit column per query row.
* Decode over a generation (:func:`decode_mean`): one step standing for ``gen`` steps, each
  layer kind at its own mean keys over them (:meth:`_Ctx.for_layer`), not at the mean
  context (a chunked layer's keys wrap at every chunk boundary).
* Context and expert parallelism (:class:`_Ctx`'s ``cp`` and ``ep``): one rank's
  ``seq / cp`` tokens attending the whole sequence over K/V all-gathered from the ring, its
  ``experts / ep`` experts between two all-to-alls; the collectives are ops tagged ``cp`` and
  ``ep`` (as tensor parallelism's are tagged ``tp``). In training under sequence parallelism
  with the experts split over ``tp``, the MoE layer's tensor-parallel collectives are those of
  Megatron-Core's all-to-all dispatcher (:func:`alltoall_tp`).

* The 2-D weight-stationary layout (``tp_grid``, :mod:`~diptych.workloads.tp2d`, inference on
  a torus): the FFN's and attention's weights split over an ``X × YZ`` grid of the torus
  slice, the residual stream ``1/tp`` per chip, four sub-slice collectives per block.

Each op group is one function (``_attention_gqa``/``_attention_mla``, ``_qk_norm``, ``_rope``,
``_softmax``, ``_attend``, ``_residual``, ``_dense_mlp``, ``_moe_mlp``, ``_embedding``,
``_head``). Each takes an optional ``flow`` (:class:`~diptych.workloads.dataflow.Flow`) that
records the tensors its ops read and write (names in docs/workloads.md, "Tensors"); without it
the same ops come back and nothing is recorded. The blocks :func:`prefill`, :func:`decode` and
:func:`decode_mean` return carry those records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .ops import Collective, Gemm, Op, VectorOp
from .config import LayerSpec, ModelConfig
from .program import Carry
from .dataflow import NOFLOW, Flow, Pieces, scaled
from .recipe import BF16_LINEARS, FP8_CONTEXT_FMHA, quantize_records
from .fused_attention import AttnCall, fuse
from . import cp_attention, dropout, embedding_grad, loss, sampling
from .gated_deltanet import linear_attention
from .sparse_attention import CORE_OPS as DSA_CORES, attended_layer, indexer_ops
from .mamba2 import CORE_OPS as SSM_CORES, ssm_mixer
from .graph import Workload
from .tp2d import check_2d, ffn_2d, grid_problems, output_reduce_scatter, sub_slice
from .program import Block
from . import host_work
from .moe import (MEGATRON_DISPATCH, UNFUSED_UNPERMUTE, Routing, dropped_fraction,
                  expected_experts_touched, expert_load, rank_load_factor)
from .params import kv_heads_per_rank, mtp_projection_split
from .precision import Precision

#: ALU ops per output element on the vector unit [assumption: counted from the textbook
#: formulas: RMSNorm x², sum, scale, weight; LayerNorm adds mean and bias; softmax max, sub,
#: exp, sum, divide; SwiGLU = SiLU (exp, add, divide, multiply) × up; tanh-GELU ≈ 8; GeGLU =
#: tanh-GELU × up; gpt-oss's clamped SwiGLU = clamp gate (1), clamp up (2), ·α, sigmoid (exp,
#: add, divide), × gate, up + 1, × = 10; soft-capping cap·tanh(x/cap) = scale, tanh, scale = 3].
VECTOR_OPS_PER_ELEMENT = {
    "rmsnorm": 4.0, "layernorm": 7.0, "softmax": 5.0, "swiglu": 5.0, "gelu": 8.0, "rope": 3.0,
    "add": 1.0, "copy": 0.0, "embedding": 0.0, "topk": 2.0, "mul": 2.0, "permute": 0.0,
    "geglu": 9.0, "swiglu_clamped": 10.0, "softcap": 3.0,
}
#: The attention GEMMs of every attention kind (scores ``Q·Kᵀ`` and ``P·V``).
ATTENTION_GEMMS = ("attn_scores", "attn_pv")
#: Bytes of one token-expert pair's routing index (an int32 row) that a permute or unpermute
#: reads beside the rows it moves, and of its FP32 routing weight, which the unpermute reads.
INDEX_BYTES = 4
ROUTING_WEIGHT_BYTES = 4

#: The tag of an op a rank runs on its sequence shard only (``1/tp`` of the tokens) under
#: Megatron's sequence parallelism: the layer's norms and residual adds, the final norm
#: (:meth:`_Ctx.norm` with ``sharded``, :func:`_residual`).
SP_SHARD = "sp_shard"

#: A residual add (Megatron's bias-dropout-add, :func:`_residual`): its backward is the
#: residual stream's gradient accumulation (workloads/train.py ``backward_ops``).
RESIDUAL_ADD = "residual_add"

#: The tag of the output layer's sequence-parallel all-gather: its backward gathers the
#: saved input again for the weight gradient before it reduce-scatters the input gradient
#: (:func:`_head`, :func:`diptych.workloads.train.backward_ops`).
REGATHER = "wgrad_regather"

#: The tag prefix of a column-parallel linear whose backward all-reduces its input gradient
#: over ``<group>`` ranks (``dgrad_all_reduce:<group>``): the output layer at ``tp > 1``
#: without sequence parallelism (:func:`_head`, :func:`dgrad_all_reduce_group`).
DGRAD_ALL_REDUCE = "dgrad_all_reduce:"


def dgrad_all_reduce_group(op) -> int:
    """The ranks op's backward all-reduces its input gradient over (its
    :data:`DGRAD_ALL_REDUCE` tag), 1 if none."""
    for t in getattr(op, "tags", ()):
        if t.startswith(DGRAD_ALL_REDUCE):
            return int(t[len(DGRAD_ALL_REDUCE):])
    return 1


#: Lowering kinds the op language (``sim.ops.VECTOR_KINDS``) names differently.
_SIM_KIND = {"swiglu_clamped": "swiglu", "softcap": "elementwise"}


def _pos(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, not {v!r}")


def check_tp(m: ModelConfig, tp: int) -> None:
    """Raise ValueError unless Megatron tensor parallelism of degree ``tp`` splits ``m``."""
    _pos("tp", tp)
    if tp == 1:
        return
    problems = []
    if m.heads % tp:
        problems.append(f"attention heads ({m.heads})")
    if not m.is_mla and m.kv_heads % tp and tp % m.kv_heads:
        problems.append(f"KV heads ({m.kv_heads}), which must divide or be divided by tp")
    if m.parallel_ssm and m.ssm_heads % tp:
        problems.append(f"Mamba-2 heads ({m.ssm_heads})")
    if m.linear_layers and (m.linear_key_heads % tp or m.linear_value_heads % tp):
        problems.append(f"linear-attention key and value heads ({m.linear_key_heads}, "
                        f"{m.linear_value_heads})")
    if m.dense_layers and m.intermediate_size % tp:
        problems.append(f"intermediate_size ({m.intermediate_size})")
    if m.is_moe and m.moe_intermediate_size % tp:
        problems.append(f"moe_intermediate_size ({m.moe_intermediate_size})")
    if m.shared_width % tp:
        problems.append(f"the shared experts' width ({m.shared_width})")
    if problems:
        raise ValueError(f"tp={tp} cannot split {m.name}: it must divide "
                         + "; ".join(problems))


def valid_tp_degrees(m: ModelConfig, limit: int = 1024) -> list[int]:
    """Tensor-parallel degrees that split ``m``, ascending, up to ``limit``. Only the
    divisors of the attention heads are tried (:func:`check_tp` refuses any other ``tp > 1``):
    the same list as :func:`valid_tp_degrees_ref`, which tries every degree (issue 27: the
    reference raised and caught ~1,000 ValueErrors per call; tests/workloads/test_tp_degrees.py
    compares the two)."""
    return [t for t in range(1, limit + 1)
            if (t == 1 or m.heads % t == 0) and _splits(m, t)]


def _splits(m: ModelConfig, tp: int) -> bool:
    try:
        check_tp(m, tp)
    except ValueError:
        return False
    return True


def valid_tp_degrees_ref(m: ModelConfig, limit: int = 1024) -> list[int]:
    """The reference of :func:`valid_tp_degrees`: every degree up to ``limit`` checked."""
    out = []
    for t in range(1, limit + 1):
        try:
            check_tp(m, t)
        except ValueError:
            continue
        out.append(t)
    return out


def attention_calls(c: "_Ctx") -> tuple[AttnCall, ...]:
    """The kernel calls one head's queries make in a fused attention of training or prefill
    (:class:`~diptych.workloads.fused_attention.AttnCall`; decode: none, its kernels split
    the keys over the cores instead of tiling the queries).

    Without context parallelism: one call of the ``q_len`` new queries after ``past`` cached
    tokens, under the layer's mask. Under context parallelism (``cp`` ranks, causal, the
    sequence in ``2·cp`` load-balanced chunks of ``q_len / 2``, two per rank), ring attention
    as Transformer Engine runs it (``AttnFuncWithCPAndKVP2P``): step 0 the rank's two chunks
    against themselves (a causal call over ``q_len``), then one call per K/V chunk pair that
    arrives, every key visible: both query chunks against the first half of the pair, or the
    second query chunk against the whole pair (by rank; the steps alternate the two here, for
    the one rank diptych lowers). A windowed or chunked mask under context parallelism is not
    tiled (the sum of its parts, as before)."""
    if c.phase == "decode":
        return ()
    layer = c.layer
    if c.cp == 1:
        mask = {"full": "causal", "sliding": "causal"}.get(layer.attention, layer.attention)
        return (AttnCall(q_len=c.q_len, kv_len=c.past + c.q_len, past=c.past, mask=mask,
                         window=layer.window or 0),)
    if layer.window is not None or c.past:
        return ()
    half = max(1, c.q_len // 2)
    calls = [AttnCall(q_len=c.q_len, kv_len=c.q_len)]
    for step in range(1, c.cp):
        calls.append(AttnCall(q_len=c.q_len, kv_len=half, mask="full") if step % 2
                     else AttnCall(q_len=half, kv_len=c.q_len, mask="full"))
    return tuple(calls)


def causal_mean_keys(q_len: int, past: int = 0, window: int | None = None) -> float:
    """Mean number of keys a query attends when ``q_len`` new tokens follow ``past`` cached
    ones under a causal mask (query i sees ``past + i + 1`` keys), capped at ``window``."""
    if window is None or window >= past + q_len:
        return past + (q_len + 1) / 2.0
    total = 0.0
    # closed form of sum_{i=1..q} min(past + i, w)
    full_from = max(0, window - past)      # queries 1..full_from are below the window
    n_low = min(q_len, full_from)
    total += n_low * past + n_low * (n_low + 1) / 2.0
    total += (q_len - n_low) * window
    return total / q_len


def chunked_mean_keys(q_len: int, past: int, chunk: int) -> float:
    """Mean number of keys a query attends when ``q_len`` new tokens follow ``past`` cached ones
    under chunked causal attention: the token at position ``p`` (1-based) sees the
    ``((p−1) mod chunk) + 1`` tokens of its chunk up to itself (Llama 4's local layers)."""
    def upto(n: int) -> int:        # sum over positions 1..n
        q, r = divmod(n, chunk)
        return q * chunk * (chunk + 1) // 2 + r * (r + 1) // 2
    return (upto(past + q_len) - upto(past)) / q_len


def mean_keys(layer: LayerSpec, q_len: int, past: int = 0) -> float:
    """Mean keys per query of a layer of kind ``layer`` (see :func:`causal_mean_keys`); a
    linear-attention layer attends no keys (its state stands for them): 0."""
    if layer.linear:
        return 0.0
    if layer.attention == "chunked":
        return chunked_mean_keys(q_len, past, layer.window)
    return causal_mean_keys(q_len, past, layer.window)


@dataclass(frozen=True)
class _Ctx:
    """What one rank lowers: ``batch`` sequences of ``q_len`` new tokens each (per rank) after
    ``past`` cached ones, for the layer kind ``layer`` (:meth:`for_layer` sets it and its
    ``keys``).

    ``cp``: context-parallel degree (train, prefill): the rank holds ``q_len`` of each
    sequence's ``q_len·cp`` tokens (load-balanced chunks), its queries attend the mean keys of
    the whole sequence under the layer's mask, whose K and V arrive over the ring (an
    all-gather tagged ``cp``), and it keeps only its own K/V chunk. ``ep``: expert-parallel
    degree: the rank holds ``experts / ep`` routed experts and receives its share of the
    token-expert pairs through two all-to-alls (dispatch, combine; tagged ``ep``). ``gen``
    (decode): the step stands for ``gen`` consecutive steps of ``q_len`` queries after
    ``past`` cached tokens, and each layer kind attends its own mean keys over them (a
    chunked or sliding layer's mean is not its keys at the mean context)."""

    m: ModelConfig
    p: Precision
    tp: int
    batch: int        # sequences
    q_len: int        # new tokens per sequence (per context-parallel rank)
    keys: int         # keys attended per query (rounded-up mean) by the current layer kind
    phase: str        # prefill | decode | train
    attention: str = "fused"   # fused | unfused
    past: int = 0     # tokens already cached per sequence (decode: the prompt)
    layer: LayerSpec = LayerSpec()
    cp: int = 1       # context-parallel ranks a sequence is split over (train, prefill)
    ep: int = 1       # expert-parallel ranks the routed experts are split over
    gen: int = 1      # decode: consecutive steps the one lowered step stands for
    routing: Routing = Routing()   # MoE: skew and capacity factor of the routing
    #: the routed experts' tensor-parallel split: None = ``tp`` (Megatron: each expert-parallel
    #: rank is a tensor-parallel group, every expert split ÷ tp); 1 = each of the ``tp`` chips
    #: is an expert-parallel rank holding whole experts (``ep == tp``: serving's tensor-parallel
    #: attention beside expert-parallel experts, vLLM's ``--enable-expert-parallel``)
    expert_tp: int | None = None
    #: training under Megatron's sequence parallelism (``tp > 1``): the layer's norms and
    #: residual adds run on the rank's sequence shard (:attr:`sp`), and what the FP8 recipe's
    #: row-parallel linears quantise differs (:func:`~diptych.workloads.recipe.quantize_records`)
    sequence_parallel: bool = False
    #: the 2-D tensor-parallel layout (:mod:`~diptych.workloads.tp2d`): the sides of the
    #: torus slice holding the ``tp`` chips (empty: Megatron's 1-D layout) and the side the
    #: FFN's d_model is split over (``X``; the others are ``YZ``)
    tp_shape: tuple[int, ...] = ()
    tp_x_axis: int = 0
    #: inference: the serving engine's sampling kernels after the head (a runtime profile's
    #: ``sampler``, :data:`~diptych.arch.sampler.SAMPLERS`; "none": the head's logits are the
    #: step's output)
    sampler: str = "none"

    @property
    def etp(self) -> int:
        """The routed experts' tensor-parallel split (:attr:`expert_tp`; None: ``tp``)."""
        return self.tp if self.expert_tp is None else self.expert_tp

    @property
    def tp_x(self) -> int:
        """The 2-D layout's ``X`` (0 under the 1-D layout)."""
        return self.tp_shape[self.tp_x_axis] if self.tp_shape else 0

    @property
    def tp_yz_axes(self) -> tuple[int, ...]:
        """The sides of the torus slice the 2-D layout's ``YZ`` axis spans."""
        return tuple(i for i in range(len(self.tp_shape)) if i != self.tp_x_axis)

    @property
    def sp(self) -> int:
        """Shards a sequence-parallel activation is split into: ``tp`` under sequence
        parallelism (``tp > 1``) or the 2-D layout (its residual stream lives ``1/tp`` per
        chip), else 1."""
        return self.tp if (self.sequence_parallel or self.tp_shape) and self.tp > 1 else 1

    @property
    def sp_tags(self) -> tuple[str, ...]:
        """Tags of an op run on the rank's sequence shard (:data:`SP_SHARD` under sequence
        parallelism, else none)."""
        return (SP_SHARD,) if self.sp > 1 else ()

    def for_layer(self, layer: LayerSpec) -> "_Ctx":
        """This context for one layer kind: its keys per query, the rounded-up mean of
        :func:`mean_keys` over every query the context stands for (all ``gen`` steps; the
        whole sequence under context parallelism)."""
        return replace(self, layer=layer, keys=math.ceil(
            mean_keys(layer, self.q_len * self.cp * self.gen, self.past)))

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len

    @property
    def kv_cached(self) -> bool:
        return self.phase != "train"

    def gemm(self, name: str, m: int, k: int, n: int, *, batch: int = 1, weight: bool = True,
             b_dtype: str | None = None, tags: tuple[str, ...] = (), shared_b: bool | None = None
             ) -> Gemm:
        """A GEMM; a linear layer's (``weight``) takes FP8 operands under an FP8 recipe
        (tagged ``quantized``; the LM head and the router stay in BF16:
        :mod:`diptych.workloads.recipe`; under an inference recipe their weights are stored in
        its ``unquantized_weights`` dtype)."""
        p = self.p
        fp8 = weight and p.linear is not None and name not in BF16_LINEARS
        if self.fp8_attention(name):        # Q·Kᵀ and P·V from the FP8 cache, in FP8
            a = b_dtype = p.linear
        else:
            a = p.linear if fp8 else p.activations
        return Gemm(name=name, m=m, k=k, n=n, batch=batch, a_dtype=a,
                    b_dtype=b_dtype or (p.linear if fp8 else
                                        (p.unquantized_weights or p.weights) if weight
                                        else p.activations),
                    c_dtype=p.activations, acc_dtype=p.accumulation,
                    b_is_weight=(batch == 1 or weight) if shared_b is None else shared_b,
                    tags=(("weight",) if weight else ()) + tags + (("quantized",) if fp8 else ()))

    def fp8_attention(self, name: str) -> bool:
        """Whether the attention GEMM ``name`` takes FP8 queries and probabilities: a prefill
        under the ``fp8-static`` recipe over an FP8 KV cache, as TensorRT-LLM's FP8 context
        FMHA runs it (:data:`~diptych.workloads.recipe.FP8_CONTEXT_FMHA`); decode's
        attention computes in 16 bits over the FP8 cache (XQA)."""
        p = self.p
        return (name in ATTENTION_GEMMS and self.phase == "prefill"
                and p.recipe == FP8_CONTEXT_FMHA and p.kv == p.linear)

    def vec(self, name: str, kind: str, elements: float, *, reads: float = 1.0,
            writes: float = 1.0, extra_read_bytes: float = 0.0, write_dtype_bytes=None,
            ops: float | None = None, tags: tuple[str, ...] = ()) -> VectorOp:
        a = self.p.a_bytes
        wb = a if write_dtype_bytes is None else write_dtype_bytes
        e = max(1, int(math.ceil(elements)))
        return VectorOp(name=name, kind=_SIM_KIND.get(kind, kind), elements=e,
                        ops_per_element=VECTOR_OPS_PER_ELEMENT[kind] if ops is None else ops,
                        read_bytes=e * reads * a + extra_read_bytes, write_bytes=e * writes * wb,
                        dtype=self.p.activations, tags=tags)

    def all_reduce(self, name: str, elements: float) -> list[Op]:
        if self.tp == 1:
            return []
        return [Collective(name=name, kind="all_reduce", bytes=elements * self.p.a_bytes,
                           group=self.tp, tags=("tp",))]

    def input_norm(self, fl, x: str = "x") -> VectorOp:
        """The layer's input norm ``attn_norm`` over the ``x`` it carries in, recorded in
        flow ``fl`` (reads ``x`` and ``w_attn_norm``, writes ``h_attn``); on the rank's
        sequence shard under sequence parallelism (:meth:`norm`: it reads and writes ``1/sp``
        of the tensors, the all-gather before the next GEMM fills the rest of ``h_attn``)."""
        fl.t(x, self.tokens * self.m.hidden_size * self.p.a_bytes)
        return self.stream_norm(fl, "attn_norm", x, "h_attn")

    def stream_norm(self, fl, name: str, src: str, dst: str, *,
                    deps: tuple[str, ...] = ()) -> VectorOp:
        """A norm ``name`` of the residual stream ``src`` into ``dst`` (``T·d`` each),
        recorded in flow ``fl`` (reads ``src`` and ``w_<name>``, writes ``dst``, after
        ``deps``); on the rank's sequence shard under sequence parallelism (:meth:`norm`
        with ``sharded``: it reads and writes ``1/sp`` of the tensors)."""
        T, d, a = self.tokens, self.m.hidden_size, self.p.a_bytes
        op = self.norm(name, d, sharded=True)
        f = 1.0 / self.sp
        return fl.vec(op, [(src, f), (fl.t(f"w_{name}", op.read_bytes - op.elements * a,
                                           "weight"), 1.0)],
                      [(fl.t(dst, T * d * a), f)], deps=deps)

    def norm(self, name: str, width: int, rows: float | None = None, *, weights: int = 1,
             ops: float | None = None, sharded: bool = False) -> VectorOp:
        """The model's norm over ``rows`` (default: the tokens) rows of ``width``; ``weights``
        weight vectors of ``width`` read (0 for a weightless norm). ``sharded``: a norm of
        the residual stream, which under sequence parallelism runs on the rank's sequence
        shard, ``rows / sp`` rows (tagged :data:`SP_SHARD`) [S: NVIDIA/Megatron-LM core_r0.9.0
        (1afee592) megatron/core/transformer/transformer_layer.py L275-334: the layer's
        input, ``input_layernorm``/``pre_mlp_layernorm`` and the bias-dropout-adds work on the
        ``hidden_states`` the layer carries, which under sequence parallelism is the rank's
        ``[s/tp, b, h]`` shard; models/gpt/gpt_layer_specs.py L75, L150: the norms fused into
        ``TELayerNormColumnParallelLinear``, whose forward runs the norm on ``inputmat`` and
        all-gathers its output ``ln_out`` (NVIDIA/TransformerEngine v1.11 (c27ee60)
        transformer_engine/pytorch/module/layernorm_linear.py L137-164: ``_apply_normalization
        (inputmat, ...)``, then ``gather_along_first_dim(ln_out, tp_group)`` ``elif
        parallel_mode == "column" and sequence_parallel``) and whose backward runs the norm's
        backward on the reduce-scattered gradient (L571 ``reduce_scatter_along_first_dim``,
        L673-690 ``dgrad.view(inputmat.shape)``, ``tex.rmsnorm_bwd``/``layernorm_bwd``)]."""
        kind = self.m.norm
        rows = self.tokens if rows is None else rows
        tags: tuple[str, ...] = ("saved",)
        if sharded and self.sp > 1:
            rows, tags = rows / self.sp, tags + self.sp_tags
        wb = width * self.p.uw_bytes * weights * (2 if kind == "layernorm" else 1)
        return self.vec(name, kind, rows * width, reads=1.0, extra_read_bytes=wb, ops=ops,
                        tags=tags)


ATTENTION_MODES = ("fused", "unfused")


def check_attention(attention) -> None:
    if attention not in ATTENTION_MODES:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION_MODES)}, "
                         f"not {attention!r}")


def _softmax(c: _Ctx, rows: int) -> VectorOp:
    """The softmax over ``rows`` query rows of ``c.keys`` scores; attention sinks add one
    logit column per row, soft-capping its ALU ops per score."""
    cols = c.keys + (1 if c.m.attention_sinks else 0)
    ops = None
    if c.m.attn_logit_softcap:
        ops = VECTOR_OPS_PER_ELEMENT["softmax"] + VECTOR_OPS_PER_ELEMENT["softcap"]
    return c.vec("softmax", "softmax", rows * cols, ops=ops)


def _ring_kv(c: _Ctx, scores: Gemm, pv: Gemm, kv_shared: bool, *, flow=None,
             k: Pieces = (), v: Pieces = ()) -> tuple[list[Op], float, Pieces, Pieces]:
    """Context parallelism's K/V exchange (ring attention): the ``cp`` ranks' K and V chunks
    of ``q_len`` tokens, all-gathered so that each rank's queries see the whole sequence (one
    collective standing for the ring's ``cp − 1`` steps; its bytes are the gathered buffer).
    Returns ``(ops, this rank's K+V chunk bytes, k, v)``, the pieces now in ``kv_ring``."""
    fl = flow or NOFLOW
    k_own = scores.b_bytes * c.q_len / scores.n      # K and V of this rank's tokens
    v_own = 0.0 if kv_shared else pv.b_bytes * c.q_len / pv.k
    chunk = k_own + v_own
    if c.cp == 1 or c.phase == "decode":
        return [], chunk, list(k), list(v)
    op = Collective(name="cp_kv_all_gather", kind="all_gather", bytes=c.cp * chunk,
                    group=c.cp, tags=("cp",))
    ring = fl.t("kv_ring", op.bytes)
    fl.vec(op, list(k) + list(v), [(ring, 1.0)])
    kf = k_own / chunk
    return [op], chunk, [(ring, kf)], ([(ring, 1.0 - kf)] if v_own else [])


def _attend(c: _Ctx, scores: Gemm, softmax: VectorOp, pv: Gemm, heads: int,
            kv_shared: bool = False, *, flow=None, q: Pieces = (), k: Pieces = (),
            v: Pieces = (), out: str = "attn", deps: tuple[str, ...] = ()) -> list[Op]:
    """The attention trio as three ops (unfused) or one fused record, after the context-
    parallel K/V all-gather (:func:`_ring_kv`) when ``c.cp > 1``. With a ``flow``: ``q``
    (the scores' A operand), ``k`` and ``v`` (the stored keys and values, whole: the GEMMs
    read their causal-mean share) as pieces; the output is tensor ``out``; ``deps``:
    ordering-only inputs (DSA: the indexer's selected indices)."""
    fl = flow or NOFLOW
    rows = c.batch * heads * c.q_len
    ring, chunk, k, v = _ring_kv(c, scores, pv, kv_shared, flow=flow, k=k, v=v)
    # keys each sequence's K/V holds: the cache (decode), else the whole sequence (which
    # under context parallelism arrives over the ring)
    stored = c.keys if c.phase == "decode" else c.q_len * c.cp
    fl.t(out, pv.c_bytes)
    if c.attention == "unfused":
        cols = c.keys + (1 if c.m.attention_sinks else 0)
        fl.t("scores", scores.c_bytes)
        fl.t("probs", rows * cols * c.p.a_bytes)
        return ring + [fl.gemm(scores, q, scaled(k, c.keys / stored), [("scores", 1.0)],
                               deps=deps),
                       fl.vec(softmax, [("scores", cols / c.keys)], [("probs", 1.0)]),
                       fl.gemm(pv, [("probs", c.keys / cols)], scaled(v, c.keys / stored),
                               [(out, 1.0)])]
    op = fuse("attention (fused)", scores, softmax, pv, keys_stored=stored,
              heads_rows=rows, kv_shared=kv_shared, stats=c.phase == "train",
              kv_cache=c.phase == "decode",
              tags=("attn",) + ((dropout.TAG,) if c.phase == "train" and c.p.attention_dropout
                                else ()), calls=attention_calls(c),
              groups=c.batch * heads)
    if ring:                     # the rank keeps only its own K/V chunk for backward
        op = replace(op, saved_kv_bytes=chunk)
    # training's ring attention: the steps' partial outputs, merged into ``out`` by the
    # stack's bookkeeping passes (workloads/cp_attention.py)
    merge = (cp_attention.merge_op(c.cp, scores.a_bytes, pv.c_bytes, chunk,
                                   pv.batch * pv.m * pv.n, c.p.activations)
             if ring and c.phase == "train" else None)
    steps = fl.t(f"{out}_steps", pv.c_bytes) if merge else out
    writes = [(steps, 1.0)]
    if c.phase == "train":
        writes.append((fl.t("attn_stats", op.write_bytes - pv.c_bytes), 1.0))
    ops = ring + [fl.vec(op, list(q) + list(k) + list(v), writes, deps=deps)]
    if merge:
        ops.append(fl.vec(merge, [(steps, merge.read_bytes / pv.c_bytes)],
                          [(out, merge.write_bytes / pv.c_bytes)]))
    return ops


def _qk_norm(c: _Ctx, h: int, hkv: int, *, flow=None, parts: dict | None = None) -> list[Op]:
    """Per-head q/k norm over ``head_dim`` (Qwen3, Gemma 3: RMSNorm with weights; Llama 4: a
    weightless L2 norm, one op less per element). With a ``flow``, ``parts`` maps q/k/v to
    their pieces and is updated: q and k now live in ``qk_n``."""
    if not c.layer.qk_norm:
        return []
    fl = flow or NOFLOW
    l2 = c.m.qk_norm == "l2"
    op = c.norm("qk_norm", c.m.head_dim, c.tokens * (h + hkv), weights=0 if l2 else 2,
                ops=VECTOR_OPS_PER_ELEMENT["rmsnorm"] - 1.0 if l2 else None)
    if parts is None:
        return [op]
    w = [] if l2 else [(fl.t("w_qk_norm", op.read_bytes - c.tokens * (h + hkv) * c.m.head_dim
                             * c.p.a_bytes, "weight"), 1.0)]
    fl.t("qk_n", c.tokens * (h + hkv) * c.m.head_dim * c.p.a_bytes)
    fl.vec(op, parts["q"] + parts["k"] + w, [("qk_n", 1.0)])
    parts["q"], parts["k"] = [("qk_n", h / (h + hkv))], [("qk_n", hkv / (h + hkv))]
    return [op]


def _rope(c: _Ctx, h: int, hkv: int, *, flow=None, parts: dict | None = None) -> list[Op]:
    """RoPE on q and k (the rotated share of each head), or on NoPE layers with temperature
    tuning the position-dependent query scale (Llama 4). With a ``flow`` (see
    :func:`_qk_norm`): the rotated dimensions of q and k live in ``qk_rot`` (the rest stays
    where it was), a scaled q in ``q_temp``."""
    fl = flow or NOFLOW
    if c.layer.rope:
        frac = c.m.rotary_fraction
        dims = c.m.head_dim if frac == 1.0 else c.m.head_dim * frac
        op = c.vec("rope", "rope", c.tokens * (h + hkv) * dims)
        if parts is not None:
            f = dims / c.m.head_dim
            fl.t("qk_rot", op.write_bytes)
            fl.vec(op, scaled(parts["q"] + parts["k"], f), [("qk_rot", 1.0)])
            rest = 1.0 - f
            parts["q"] = [("qk_rot", h / (h + hkv))] + (scaled(parts["q"], rest) if rest else [])
            parts["k"] = [("qk_rot", hkv / (h + hkv))] + (scaled(parts["k"], rest) if rest
                                                           else [])
        return [op]
    if c.m.attn_temperature_tuning and not c.m.learned_positions:
        op = c.vec("attn_temperature", "mul", c.tokens * h * c.m.head_dim, ops=1.0)
        if parts is not None:
            fl.t("q_temp", op.write_bytes)
            fl.vec(op, parts["q"], [("q_temp", 1.0)])
            parts["q"] = [("q_temp", 1.0)]
        return [op]
    return []


def _qkv_heads(c: _Ctx, h: int, hkv: int, width: int, *, flow=None
               ) -> tuple[list[Op], dict[str, Pieces]]:
    """The QK norms and rotary embedding of ``h`` query and ``hkv`` KV heads read from the
    fused ``qkv`` tensor (``width`` heads wide: q, any gate, k, v); returns their ops and the
    pieces of ``qkv`` (or of what the norms and rotary wrote) holding q, k and v (empty
    without a ``flow``)."""
    parts = {"q": [("qkv", h / width)], "k": [("qkv", hkv / width)],
             "v": [("qkv", hkv / width)]} if flow is not None else None
    ops = _qk_norm(c, h, hkv, flow=flow, parts=parts)
    ops += _rope(c, h, hkv, flow=flow, parts=parts)
    return ops, parts or {"q": [], "k": [], "v": []}


def _attention_gqa(c: _Ctx, *, flow=None, x: str = "x", out: str = "attn_out") -> list[Op]:
    m, tp, T = c.m, c.tp, c.tokens
    d, dh = m.hidden_size, m.head_dim
    h = m.heads // tp
    hkv = kv_heads_per_rank(m, tp)
    g = h // hkv
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.w_bytes
    gate = h if m.attn_output_gate else 0     # gated attention: q_proj's gate heads
    qkvw = (h + gate + 2 * hkv) * dh
    norm = c.input_norm(fl, x)
    qkv = c.gemm("qkv_proj", T, d, qkvw, tags=("attn",))
    fl.gemm(qkv, [("h_attn", 1.0)], [(fl.t("w_qkv", d * qkvw * wb, "weight"), 1.0)],
            [(fl.t("qkv", T * qkvw * a), 1.0)])
    ops: list[Op] = [norm, qkv]
    width = h + gate + 2 * hkv
    more, parts = _qkv_heads(c, h, hkv, width, flow=flow)
    ops += more
    kv_dtype = c.p.kv if c.phase == "decode" else None
    if c.kv_cached:
        op = c.vec("kv_write", "copy", T * 2 * hkv * dh, write_dtype_bytes=c.p.kv_bytes)
        fl.vec(op, parts["k"] + parts["v"],
               [(fl.t("kv_new", op.write_bytes, "kv_cache", live_out=True), 1.0)])
        ops.append(op)
    sq = g * c.q_len
    if c.phase == "decode":                      # K and V: the cache and the new entries
        fl.t("kv_cache", c.batch * (c.keys - 1) * 2 * hkv * dh * c.p.kv_bytes, "kv_cache")
        k = v = [("kv_cache", 0.5), ("kv_new", 0.5)]
    else:
        k, v = parts["k"], parts["v"]
    ops += _attend(c, c.gemm("attn_scores", sq, dh, c.keys, batch=c.batch * hkv, weight=False,
                             b_dtype=kv_dtype, tags=("attn", "saved_b"), shared_b=False),
                   _softmax(c, c.batch * h * c.q_len),
                   c.gemm("attn_pv", sq, c.keys, dh, batch=c.batch * hkv, weight=False,
                          b_dtype=kv_dtype, tags=("attn", "saved_b", "no_save_a"),
                          shared_b=False), h, flow=flow, q=parts["q"], k=k, v=v)
    src = "attn"
    if gate:          # Qwen3-Next: attn · sigmoid(gate) before o_proj (sigmoid 3, product 1)
        op = c.vec("attn_gate", "mul", T * h * dh, reads=2.0, ops=4.0, tags=("saved",))
        fl.vec(op, [("attn", 1.0), ("qkv", gate / width)],
               [(fl.t("attn_gated", T * h * dh * a), 1.0)])
        ops.append(op)
        src = "attn_gated"
    o = c.gemm("o_proj", T, h * dh, d, tags=("attn",))
    fl.gemm(o, [(src, 1.0)], [(fl.t("w_o", h * dh * d * wb, "weight"), 1.0)],
            [(fl.t(out, T * d * a), 1.0)])
    ops.append(o)
    return ops


def _attention_2d(c: _Ctx, *, flow=None, x: str = "x", out: str = "attn_out") -> list[Op]:
    """GQA/MQA attention of the 2-D layout (:mod:`~diptych.workloads.tp2d`): ``qkv_proj``
    an ``E/X × (heads/YZ)·dh`` block after the input's all-gather over ``YZ``; its partial
    sums reduce-scattered over ``X`` onto the batch, so each chip attends ``⌈B/X⌉``
    sequences' ``heads/YZ`` query heads (its KV cache: those sequences' KV heads, 1/YZ of
    them or one replicated) [assumption: the paper's Figure 2 layout for the FFN applied to
    the heads as to d_ff, the X axis split over the batch]; the output all-gathered over
    ``X`` into ``o_proj``'s ``(heads/YZ)·dh × E/X`` block, whose partial sums the residual
    reduce-scatters over ``YZ`` (:func:`_residual`). Writes ``out`` (``T·E/X``)."""
    m, T = c.m, c.tokens
    X = c.tp_x
    yz = c.tp // X
    dh, e = m.head_dim, m.hidden_size // X
    h, hkv = m.heads // yz, kv_heads_per_rank(m, yz)
    sub = replace(c, tp=yz, batch=-(-c.batch // X), tp_shape=())
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.w_bytes
    qkvw = (h + 2 * hkv) * dh
    xs, yzs = (c.tp_x_axis,), c.tp_yz_axes
    norm = c.input_norm(fl, x)
    ag = sub_slice("attn_in_all_gather", "all_gather", T * e * a, c, yzs)
    fl.vec(ag, [("h_attn", 1.0 / c.tp)], [(fl.t("attn_in", T * e * a), 1.0)])
    qkv = c.gemm("qkv_proj", T, e, qkvw, tags=("attn",))
    fl.gemm(qkv, [("attn_in", 1.0)], [(fl.t("w_qkv", e * qkvw * wb, "weight"), 1.0)],
            [(fl.t("qkv_partial", T * qkvw * a), 1.0)])
    rs = sub_slice("qkv_reduce_scatter", "reduce_scatter", X * sub.tokens * qkvw * a, c, xs)
    fl.vec(rs, [("qkv_partial", 1.0)], [(fl.t("qkv", sub.tokens * qkvw * a), 1.0)])
    ops: list[Op] = [norm, ag, qkv, rs]
    more, parts = _qkv_heads(sub, h, hkv, h + 2 * hkv, flow=flow)
    ops += more
    kv_dtype = c.p.kv if c.phase == "decode" else None
    op = sub.vec("kv_write", "copy", sub.tokens * 2 * hkv * dh, write_dtype_bytes=c.p.kv_bytes)
    fl.vec(op, parts["k"] + parts["v"],
           [(fl.t("kv_new", op.write_bytes, "kv_cache", live_out=True), 1.0)])
    ops.append(op)
    if c.phase == "decode":
        fl.t("kv_cache", sub.batch * (c.keys - 1) * 2 * hkv * dh * c.p.kv_bytes, "kv_cache")
        k = v = [("kv_cache", 0.5), ("kv_new", 0.5)]
    else:
        k, v = parts["k"], parts["v"]
    sq = h // hkv * c.q_len
    ops += _attend(sub, sub.gemm("attn_scores", sq, dh, c.keys, batch=sub.batch * hkv,
                                 weight=False, b_dtype=kv_dtype, tags=("attn", "saved_b"),
                                 shared_b=False),
                   _softmax(sub, sub.batch * h * c.q_len),
                   sub.gemm("attn_pv", sq, c.keys, dh, batch=sub.batch * hkv, weight=False,
                            b_dtype=kv_dtype, tags=("attn", "saved_b", "no_save_a"),
                            shared_b=False), h, flow=flow, q=parts["q"], k=k, v=v)
    ag_o = sub_slice("attn_out_all_gather", "all_gather", X * sub.tokens * h * dh * a, c, xs)
    fl.vec(ag_o, [("attn", 1.0)], [(fl.t("attn_all", X * sub.tokens * h * dh * a), 1.0)])
    o = c.gemm("o_proj", T, h * dh, e, tags=("attn",))
    # (⌈B/X⌉ sequences on each of the X chips: o_proj reads the batch's T of them)
    fl.gemm(o, [("attn_all", T / (X * sub.tokens))],
            [(fl.t("w_o", h * dh * e * wb, "weight"), 1.0)],
            [(fl.t(out, T * e * a), 1.0)])
    return ops + [ag_o, o]


def _attention_mla(c: _Ctx, *, flow=None, x: str = "x", out: str = "attn_out") -> list[Op]:
    m, tp, T = c.m, c.tp, c.tokens
    d, h = m.hidden_size, m.heads // tp
    r_kv, rope, nope, v = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim
    qk = nope + rope
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.w_bytes

    def norm(name: str, width: int, src: Pieces, dst: str, sharded: bool = False
             ) -> VectorOp:
        # the layer's input norm runs on the sequence shard (_Ctx.norm, sequence parallelism)
        op = c.norm(name, width, sharded=sharded)
        f = 1.0 / c.sp if sharded else 1.0
        return fl.vec(op, scaled(src, f) + [(fl.t(f"w_{name}", op.read_bytes - op.elements * a,
                                                  "weight"), 1.0)],
                      [(fl.t(dst, T * width * a), f)])

    def lin(name: str, src: str, k_: int, n_: int, dst: str) -> Gemm:
        op = c.gemm(name, T, k_, n_, tags=("attn",))
        return fl.gemm(op, [(src, 1.0)], [(fl.t(f"w_{name}", k_ * n_ * wb, "weight"), 1.0)],
                       [(fl.t(dst, T * n_ * a), 1.0)])

    fl.t(x, T * d * a)
    ops: list[Op] = [norm("attn_norm", d, [(x, 1.0)], "h_attn", sharded=True)]
    if m.q_lora_rank:
        ops += [lin("q_a_proj", "h_attn", d, m.q_lora_rank, "q_a"),
                norm("q_a_norm", m.q_lora_rank, [("q_a", 1.0)], "q_a_n"),
                lin("q_b_proj", "q_a_n", m.q_lora_rank, h * qk, "q")]
    else:
        ops.append(lin("q_proj", "h_attn", d, h * qk, "q"))
    ops += [lin("kv_a_proj", "h_attn", d, r_kv + rope, "kv_a"),
            norm("kv_a_norm", r_kv, [("kv_a", r_kv / (r_kv + rope))], "c_kv")]
    op = c.vec("rope", "rope", T * (h + 1) * rope)
    fl.vec(op, [("q", rope / qk), ("kv_a", rope / (r_kv + rope))],
           [(fl.t("qk_pe", op.write_bytes), 1.0)])
    ops.append(op)
    q_pe, k_pe = [("qk_pe", h / (h + 1))], [("qk_pe", 1 / (h + 1))]
    if c.kv_cached:
        op = c.vec("kv_write", "copy", T * (r_kv + rope), write_dtype_bytes=c.p.kv_bytes)
        fl.vec(op, [("c_kv", 1.0)] + k_pe,
               [(fl.t("kv_new", op.write_bytes, "kv_cache", live_out=True), 1.0)])
        ops.append(op)
    w_kv_b = fl.t("w_kv_b", r_kv * h * (nope + v) * wb, "weight")
    full, sel = c, ()
    if m.sparse_attention:
        # DSA: the indexer scores every cached key, then attention reads the top-k of them
        pre, cores = indexer_ops(c, flow=flow)
        ops += pre + cores
        c, sel = c.for_layer(attended_layer(c.layer, m.index_topk)), ("idx_topk",)
    if c.phase == "decode":
        # absorbed: q_nope · W_UK per head into the latent space; attend over the latent cache
        # (MQA-like: all heads of a sequence share it); project values out with W_UV per head.
        kv = c.p.kv
        fl.t("kv_cache", c.batch * (full.keys - 1) * (r_kv + rope) * c.p.kv_bytes, "kv_cache")
        latent = [("kv_cache", 1.0), ("kv_new", 1.0)]
        if c is not full:        # DSA: the selected rows of the latent cache
            latent = scaled(latent, c.keys / full.keys)
        qa = c.gemm("q_absorb", T, nope, r_kv, batch=h, tags=("attn",), shared_b=False)
        fl.gemm(qa, [("q", nope / qk)], [(w_kv_b, nope / (nope + v))],
                [(fl.t("q_lat", T * h * r_kv * a), 1.0)])
        ops.append(qa)
        ops += _attend(c, c.gemm("attn_scores", h * c.q_len, r_kv + rope, c.keys,
                                 batch=c.batch, weight=False, b_dtype=kv, tags=("attn",),
                                 shared_b=False),
                       _softmax(c, c.batch * h * c.q_len),
                       c.gemm("attn_pv", h * c.q_len, c.keys, r_kv, batch=c.batch,
                              weight=False, b_dtype=kv, tags=("attn",), shared_b=False),
                       h, kv_shared=True,   # values are the latent: the cache is read once
                       flow=flow, q=[("q_lat", 1.0)] + q_pe, k=latent,
                       v=scaled(latent, r_kv / (r_kv + rope)) if c.attention == "unfused"
                       else [], out="o_lat", deps=sel)
        va = c.gemm("v_absorb", T, r_kv, v, batch=h, tags=("attn",), shared_b=False)
        fl.gemm(va, [("o_lat", 1.0)], [(w_kv_b, v / (nope + v))],
                [(fl.t("attn", T * h * v * a), 1.0)])
        ops.append(va)
    else:
        kvb = c.gemm("kv_b_proj", T, r_kv, h * (nope + v), tags=("attn",))
        fl.gemm(kvb, [("c_kv", 1.0)], [(w_kv_b, 1.0)],
                [(fl.t("kv_b", T * h * (nope + v) * a), 1.0)])
        ops += [kvb,
                *_attend(c, c.gemm("attn_scores", c.q_len, qk, c.keys, batch=c.batch * h,
                                   weight=False, tags=("attn", "saved_b"), shared_b=False),
                         _softmax(c, c.batch * h * c.q_len),
                         c.gemm("attn_pv", c.q_len, c.keys, v, batch=c.batch * h,
                                weight=False, tags=("attn", "saved_b", "no_save_a"),
                                shared_b=False), h,
                         flow=flow, q=[("q", nope / qk)] + q_pe,
                         # K: each head's k_nope and the shared k_pe (broadcast to the heads)
                         k=[("kv_b", nope / (nope + v))] + scaled(k_pe, h),
                         v=[("kv_b", v / (nope + v))], deps=sel)]
    o = c.gemm("o_proj", T, h * v, d, tags=("attn",))
    fl.gemm(o, [("attn", 1.0)], [(fl.t("w_o", h * v * d * wb, "weight"), 1.0)],
            [(fl.t(out, T * d * a), 1.0)])
    ops.append(o)
    return ops


def _dense_mlp(c: _Ctx, prefix: str, width: int, *, flow=None, inp: str = "h_mlp",
               out: str | None = None) -> list[Op]:
    if c.tp_shape:
        return ffn_2d(c, prefix, width, flow=flow, inp=inp, out=out)
    T, d, f, act = c.tokens, c.m.hidden_size, width // c.tp, c.m.activation
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.w_bytes
    out = out or f"{prefix}mlp_out"
    if c.m.gated_mlp:
        up, fn, down = (c.gemm(f"{prefix}gate_up_proj", T, d, 2 * f, tags=("mlp",)),
                        c.vec(f"{prefix}{act}", act, T * f, reads=2.0, tags=("saved",)),
                        c.gemm(f"{prefix}down_proj", T, f, d, tags=("mlp",)))
        names = (f"{prefix}gate_up", f"w_{prefix}gate_up", f"w_{prefix}down")
        up_n = 2 * f
    else:
        up, fn, down = (c.gemm(f"{prefix}fc1", T, d, f, tags=("mlp",)),
                        c.vec(f"{prefix}gelu", "gelu", T * f, tags=("saved",)),
                        c.gemm(f"{prefix}fc2", T, f, d, tags=("mlp",)))
        names = (f"{prefix}fc1", f"w_{prefix}fc1", f"w_{prefix}fc2")
        up_n = f
    fl.gemm(up, [(inp, 1.0)], [(fl.t(names[1], d * up_n * wb, "weight"), 1.0)],
            [(fl.t(names[0], T * up_n * a), 1.0)])
    fl.vec(fn, [(names[0], 1.0)], [(fl.t(f"{prefix}act", T * f * a), 1.0)])
    fl.gemm(down, [(f"{prefix}act", 1.0)], [(fl.t(names[2], f * d * wb, "weight"), 1.0)],
            [(fl.t(out, T * d * a), 1.0)])
    return [up, fn, down]


def expert_groups(m: ModelConfig, tokens: int, ep: int = 1, routing: Routing = Routing(),
                  sources: int = 1) -> list[tuple[int, int]]:
    """``[(experts, token-expert pairs each), ...]`` that one rank's expert GEMMs run for
    ``tokens`` tokens routed top-k: the busiest rank's (the step waits for it).

    Padded (``routing.pad``): every expert runs its capacity whatever the routing, counted as
    Megatron-Core's drop-and-pad dispatcher counts it (core_r0.9.0-0.11.0
    ``MoEAlltoAllTokenDispatcher.preprocess``, ``get_capacity``): ``⌈C·S·k/E⌉`` rows from
    each of the ``sources × ep`` ranks that route to it, ``S = ⌈tokens / sources⌉`` tokens
    each (``sources``: the tensor-parallel ranks whose sequence-parallel shards the tokens
    are, when the experts are split over them; 1 otherwise).
    Without expert parallelism: :func:`diptych.workloads.moe.expert_load` over all experts
    (less the pairs a capacity factor drops, :func:`~diptych.workloads.moe.dropped_fraction`).
    With ``ep`` ranks each holding
    ``experts / ep`` of them, the busiest rank receives
    :func:`~diptych.workloads.moe.rank_load_factor` × ``T·k`` pairs (the ``ep`` ranks'
    ``ep·T`` tokens spread with the sampling noise of the router and ``routing``'s skew, capped
    or padded by its capacity factor), falling on the expected number of its experts touched,
    ``E/ep · (1 − (1 − k/E)^(ep·T))`` (rounded, at least 1, at most its experts and its pairs),
    as evenly as integers allow."""
    e, k = m.experts, m.experts_per_token
    if routing.pad:
        per_source = math.ceil(routing.capacity_factor * -(-tokens // sources) * k / e)
        return [(e // ep, per_source * sources * ep)]
    if ep == 1:
        if routing.capacity_factor is None:
            return expert_load(e, k, tokens)
        pairs = max(1, round(tokens * k * (1 - dropped_fraction(routing, e, k, tokens))))
        touched = expected_experts_touched(e, k, tokens)
        n_exp = max(1, min(e, pairs, round(touched)))
    else:
        pairs = max(1, round(tokens * k * rank_load_factor(routing, e, k, tokens, ep)))
        touched = expected_experts_touched(e, k, ep * tokens) / ep
        n_exp = max(1, min(e // ep, pairs, round(touched)))
    q, r = divmod(pairs, n_exp)
    return [(n, t) for n, t in ((r, q + 1), (n_exp - r, q)) if n and t]


#: The tensor-parallel collectives of Megatron-Core's all-to-all token dispatcher
#: (:func:`alltoall_tp`): the all-gather of what the dispatch brought, and the
#: reduce-scatter of the experts' partial sums before the combine.
EP_TP_GATHER = "ep_tp_all_gather"
EP_TP_SCATTER = "ep_tp_reduce_scatter"
#: The tag of a collective that autograd runs as a node of its own after the linears that
#: consume its output (the dispatcher's all-gather: every expert group's first linear): its
#: backward (the gradient's collective) starts only when each such linear's whole backward,
#: data and weight gradient, is done (one autograd node computes
#: both before it returns; PyTorch's synchronous NCCL call then waits for the stream), so
#: it hides behind neither (workloads/train.py ``_named_backward``) [S: NVIDIA/Megatron-LM
#: core_v0.10.0 megatron/core/tensor_parallel/mappings.py ``_GatherFromSequenceParallelRegion
#: .backward`` → ``_reduce_scatter_along_first_dim``: ``dist_reduce_scatter_func(output,
#: input_.contiguous(), group=group)``, no ``async_op``; against TE's and Megatron's own
#: linears, which reduce-scatter the input gradient asynchronously beside the
#: weight-gradient GEMM].
AUTOGRAD_COLLECTIVE = "autograd_collective"


def alltoall_tp(c: _Ctx) -> bool:
    """Whether a MoE layer runs Megatron-Core's all-to-all token dispatcher with its experts
    split over the tensor-parallel group under sequence parallelism (training, ``ep > 1``,
    the routed experts ÷ ``tp > 1``, Megatron's 1-D layout): each rank
    routes its sequence shard (the MoE layer's input is the pre-MLP norm's shard), permutes
    its pairs, exchanges them over the expert-parallel group, then **all-gathers** what
    arrived over the tensor-parallel group (every rank runs its ``1/tp`` slice of the local
    experts on the group's rows) and **reduce-scatters** the experts' partial sums before
    the combine all-to-all; the unpermute writes the shard, which the residual add takes
    as it is. So the layer has no MLP all-reduce (the dense layer's stand-in for sequence
    parallelism's reduce-scatter and all-gather of ``tokens × hidden``): its tensor-parallel
    collectives each move the rows the rank's experts run, ``C·T·k`` of them at capacity
    factor ``C`` (Grok-1's recipe: twice the dense layer's ``T``), on NCCL beside nothing,
    since each one's output is the next kernel's input [S: NVIDIA/Megatron-LM core_v0.10.0
    megatron/core/transformer/moe/token_dispatcher.py ``MoEAlltoAllTokenDispatcher``:
    "permute->A2A(EP)->AG(TP)->sort_chunk" and "sort_chunk->RS(TP)->A2A(EP)->unpermute";
    ``token_permutation``: ``all_to_all(self.ep_group, ...)`` then ``if self.tp_size > 1:
    global_input_tokens = gather_from_sequence_parallel_region(global_input_tokens,
    group=self.tp_group, ...)``; ``token_unpermutation``: ``reduce_scatter_to_sequence_
    parallel_region(hidden_states, group=self.tp_group, ...)`` then the all-to-all and
    ``unpermute(..., restore_shape=self.hidden_shape_before_permute)``, the shard's shape;
    the same in core_v0.9.0 and core_v0.11.0 (``tp_size`` = expert tensor parallelism, =
    ``tp`` by default); experts.py ``SequentialMLP`` / ``MLP(..., is_expert=True)``: the
    expert linears' own communication is off (``explicit_expert_comm``,
    extensions/transformer_engine.py), so TE's userbuffers do not overlap these]. Shared
    experts run beside the dispatcher as the plain sequence-parallel MLP Megatron's
    ``SharedExpertMLP(MLP)`` is, with the dense MLP's all-reduce of ``tokens × hidden``
    (:func:`_moe_mlp`; its gate, Qwen's, on the shard) [S: core_v0.10.0
    megatron/core/transformer/moe/shared_experts.py, moe_layer.py ``output +=
    self.shared_experts(hidden_states)``]; that all-reduce is not one of the sub-blocks a
    ``[tp_overlap]`` stack overlaps (sim/run/tp_overlap.py ``OVERLAP_SUB_BLOCKS``): NCCL
    [assumption: whether TE's userbuffers serve the shared expert's linears not read].
    Dropless (no capacity factor): Megatron passes the split sizes to PyTorch's list
    all-to-all and all-gathers the token counts over ``tp × ep`` first; the collectives are
    modelled as the same rings over the busiest rank's rows, the counts' all-gather not
    at all [assumption]. Without expert parallelism (``ep = 1``) the layer is modelled as
    Megatron's ``allgather`` dispatcher: its all-gather and reduce-scatter of the
    ``tokens × hidden`` shard are the layer's all-reduce as a dense MLP has it."""
    etp = c.etp
    return (c.phase == "train" and c.sequence_parallel and c.layer.moe and c.ep > 1
            and c.tp > 1 and etp == c.tp and not c.tp_shape)


def _dispatcher_tp(c: _Ctx, name: str, nbytes: float, *tags: str) -> Collective:
    """One of :func:`alltoall_tp`'s tensor-parallel collectives (``name``: :data:`EP_TP_GATHER`
    or :data:`EP_TP_SCATTER`) over ``nbytes``, the rows this rank's experts run."""
    kind = "all_gather" if name == EP_TP_GATHER else "reduce_scatter"
    return Collective(name=name, kind=kind, bytes=nbytes, group=c.tp, tags=("tp", *tags))


def _moe_mlp(c: _Ctx, *, flow=None, inp: str = "h_mlp", out: str = "moe_out") -> list[Op]:
    """Router, top-k, the permute that sorts the token-expert pairs by expert (a gather at
    memory rate, with the routing indices), the routed experts (this rank's ``experts / ep``
    with expert parallelism, between the dispatch and combine all-to-alls: ``T·k·d``
    activations per rank each way, ÷ tp because each tensor-parallel rank dispatches its
    sequence-parallel share, as Megatron-Core's token dispatcher does; × the busiest rank's
    load, :func:`expert_groups`), the unpermute (the weighted sum of each token's ``k``
    expert outputs), shared experts. Permute and unpermute are kind ``permute``: gathers by
    index that no GEMM's prologue or epilogue absorbs (Transformer Engine's and DeepSeek's
    run them as kernels of their own)."""
    m, T, d, act = c.m, c.tokens, c.m.hidden_size, c.m.activation
    e, k = m.experts, m.experts_per_token
    # the experts' split: ÷ tp (Megatron), or whole on each chip of a tensor-parallel group
    # whose chips are the expert-parallel ranks (expert_tp = 1): each then routes the pairs of
    # its sequence-parallel share of the tokens, Te = ⌈T/tp⌉
    etp = c.etp
    te = T if etp == c.tp else -(-T // c.tp)
    f = m.moe_intermediate_size // etp
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.w_bytes
    # Megatron-Core's all-to-all dispatcher under sequence parallelism (:func:`alltoall_tp`):
    # the router runs on the rank's sequence shard, and the tensor-parallel group's
    # collectives are the dispatcher's own (an all-gather of what the dispatch brought, a
    # reduce-scatter before the combine), not the layer's all-reduce
    mega = alltoall_tp(c)
    tr = -(-T // c.tp) if mega else T        # tokens this rank routes
    # padded capacity counts per source rank: Megatron's tensor-parallel ranks each route
    # their sequence-parallel share when the experts are split over them
    groups = expert_groups(m, te, c.ep, c.routing, sources=c.tp if etp == c.tp else 1)
    rows = sum(n * per for n, per in groups)  # pairs this rank's experts run
    router = c.gemm("router", tr, d, e, tags=("moe",))
    topk = c.vec("topk", "topk", tr * e, writes=k / e)
    fl.gemm(router, [(inp, tr / T)], [(fl.t("w_router", d * e * c.p.uw_bytes, "weight"), 1.0)],
            [(fl.t("router_logits", tr * e * a), 1.0)])
    fl.vec(topk, [("router_logits", 1.0)], [(fl.t("topk", topk.write_bytes), 1.0)])
    ops: list[Op] = [router, topk]
    megatron = c.routing.dispatcher == "megatron"
    if megatron:
        # Megatron-Core's router and dispatcher in PyTorch (workloads/moe.py
        # MEGATRON_DISPATCH): their small kernels over the routing map and the two host
        # synchronisations of masked_select, one op of that many launches on the logits
        op = c.vec("moe_dispatch_bookkeeping", "elementwise", tr * e, writes=1.0,
                   ops=VECTOR_OPS_PER_ELEMENT["mul"],
                   tags=("moe",) + host_work.tags(**MEGATRON_DISPATCH))
        fl.vec(op, [("router_logits", 1.0)], [(fl.t("routing_map", op.write_bytes), 1.0)])
        ops.append(op)
    # the pairs this rank sorts: all of them without EP (dropped or padded as routed); with
    # EP its sequence-parallel share of its own tokens' pairs (÷ tp), before the dispatch
    share = 1.0 if c.ep == 1 else 1.0 / c.tp
    sent = rows if c.ep == 1 else T * k * share
    op = c.vec("experts_permute", "permute", sent * d, reads=T * share / sent,
               extra_read_bytes=T * k * share * INDEX_BYTES, ops=0.0)
    idx = T * k * INDEX_BYTES / topk.write_bytes      # the routing map, per byte of topk
    fl.vec(op, [(inp, share), ("topk", idx * share)],
           [(fl.t("experts_in", sent * d * a), 1.0)],
           deps=("routing_map",) if megatron else ())
    ops.append(op)
    src, pairs_in = "experts_in", rows
    a2a = rows * d * a / etp                  # the busiest rank's all-to-all bytes each way
    if c.ep > 1:
        # the tensors hold what arrives at the busiest rank (÷ tp); its tensor-parallel
        # group shares them, so the experts read tp times their share
        op = Collective(name="ep_dispatch", kind="all_to_all", bytes=a2a, group=c.ep,
                        tags=("ep",))
        fl.vec(op, [("experts_in", 1.0)], [(fl.t("ep_in", a2a), 1.0)])
        ops.append(op)
        src, pairs_in = "ep_in", rows / etp
        if mega:
            # the tensor-parallel group gathers what each rank's dispatch brought: every rank
            # runs its expert slice (÷ tp) on the group's rows
            op = _dispatcher_tp(c, EP_TP_GATHER, rows * d * a, AUTOGRAD_COLLECTIVE)
            fl.vec(op, [("ep_in", 1.0)], [(fl.t("ep_in_tp", rows * d * a), 1.0)])
            ops.append(op)
            src, pairs_in = "ep_in_tp", rows
    sfxs = [f"[{i}]" if len(groups) > 1 else "" for i in range(len(groups))]
    for (n_exp, per), sfx in zip(groups, sfxs):
        op = c.gemm(f"experts_gate_up{sfx}", per, d, 2 * f, batch=n_exp,
                    tags=("moe", "expert"), shared_b=False)
        fl.gemm(op, [(src, n_exp * per / pairs_in)],
                [(fl.t(f"w_experts_gate_up{sfx}", n_exp * d * 2 * f * wb, "weight"), 1.0)],
                [(fl.t(f"experts_gate_up{sfx}", n_exp * per * 2 * f * a), 1.0)])
        ops.append(op)
    op = c.vec(f"experts_{act}", act, rows * f, reads=2.0, tags=("saved",))
    fl.vec(op, [(f"experts_gate_up{sfx}", 1.0) for sfx in sfxs],
           [(fl.t("experts_act", rows * f * a), 1.0)])
    ops.append(op)
    for (n_exp, per), sfx in zip(groups, sfxs):
        op = c.gemm(f"experts_down{sfx}", per, f, d, batch=n_exp,
                    tags=("moe", "expert"), shared_b=False)
        fl.gemm(op, [("experts_act", n_exp * per / rows)],
                [(fl.t(f"w_experts_down{sfx}", n_exp * f * d * wb, "weight"), 1.0)],
                [(fl.t(f"experts_down{sfx}", n_exp * per * d * a), 1.0)])
        ops.append(op)
    downs = [(f"experts_down{sfx}", 1.0) for sfx in sfxs]
    back = min(rows, T * k)                   # the pairs the unpermute reads (no padding)
    if c.ep > 1:
        if mega:
            # the expert slices' partial sums reduce-scattered back over the group: each
            # rank keeps the rows its own dispatch brought
            op = _dispatcher_tp(c, EP_TP_SCATTER, rows * d * a)
            fl.vec(op, downs, [(fl.t("ep_red", rows * d * a), 1.0 / c.tp)])
            ops.append(op)
            downs = [("ep_red", 1.0 / c.tp)]
        op = Collective(name="ep_combine", kind="all_to_all", bytes=a2a, group=c.ep,
                        tags=("ep",))
        fl.vec(op, downs if mega else scaled(downs, 1.0 / c.tp),
               [(fl.t("ep_out", a2a), 1.0)])
        ops.append(op)
        # back at the source rank: its own tokens' pairs (the busiest rank sent more); under
        # Megatron's dispatcher those of its sequence shard, unpermuted into the shard
        own = te * k / (c.tp if mega else 1)
        downs, back = [("ep_out", etp * own / rows)], own
    # the tokens the unpermute writes, and its routing indices and weights (those of the
    # pairs this rank routed: its sequence shard's under Megatron's dispatcher)
    t_out, routed = (tr, share) if mega else (te, 1.0)
    # Megatron-Core's unpermute unfused: the product by the probabilities reads and writes
    # the rows again, torch.zeros writes the output before scatter_add_ (UNFUSED_UNPERMUTE)
    more_r, more_w = UNFUSED_UNPERMUTE if megatron else (0.0, 0.0)
    zeros = 1.0 if megatron else 0.0          # torch.zeros writes the output once more
    op = c.vec("experts_combine", "permute", back * d,
               reads=1.0 + more_r,
               writes=(t_out * d * (1.0 + zeros)) / (back * d) + more_w,
               extra_read_bytes=T * k * routed * (INDEX_BYTES + ROUTING_WEIGHT_BYTES),
               ops=VECTOR_OPS_PER_ELEMENT["mul"])
    fl.vec(op, downs + [("topk", idx * routed * (INDEX_BYTES + ROUTING_WEIGHT_BYTES)
                         / INDEX_BYTES)],
           [(fl.t(out, T * d * a), 1.0 / c.tp if mega else 1.0)])
    ops.append(op)
    shared, f_out = "shared_out", 1.0
    if m.shared_experts:
        ops += _dense_mlp(c, "shared_", m.shared_width, flow=flow, inp=inp, out="shared_out")
        if mega:
            # Megatron's SharedExpertMLP is a plain MLP beside the dispatcher: its linears
            # all-gather the shard and reduce-scatter their partial sums back to it, the
            # collectives a dense layer's MLP has (its all-reduce stands for them, as the
            # layer's own does: _residual) [S: NVIDIA/Megatron-LM core_v0.10.0
            # megatron/core/transformer/moe/shared_experts.py ``SharedExpertMLP(MLP)``,
            # ``forward``: ``output, _ = super().forward(hidden_states)``; moe_layer.py
            # ``output += self.shared_experts(hidden_states)`` after ``token_unpermutation``,
            # without ``moe_shared_expert_overlap``, its default]
            (op,) = c.all_reduce("shared_all_reduce", T * d)
            fl.vec(op, [("shared_out", 1.0)], [(fl.t(SHARED_REDUCED, T * d * a), 1.0 / c.tp)])
            ops.append(op)
            shared, f_out = SHARED_REDUCED, 1.0 / c.tp
    if m.shared_expert_gate:
        # Qwen2-MoE / Qwen3-Next: sigmoid(x·w_gate) scales the shared expert's output (a
        # d → 1 linear, then the sigmoid and the product per element: 4 ops); on the
        # sequence shard under Megatron's dispatcher (shared_experts.py ``forward``: the gate
        # reads ``hidden_states``, the shard, and scales the reduce-scattered output)
        g = c.gemm("shared_expert_gate", tr, d, 1, tags=("moe",))
        fl.gemm(g, [(inp, tr / T)], [(fl.t("w_shared_expert_gate", d * c.p.uw_bytes, "weight"),
                                      1.0)],
                [(fl.t("shared_gate", tr * a), 1.0)])
        op = c.vec("shared_gate_scale", "mul", tr * d, reads=1.0, extra_read_bytes=tr * a,
                   ops=4.0, tags=("saved",))
        fl.vec(op, [(shared, f_out), ("shared_gate", 1.0)],
               [(fl.t(SHARED_GATED, T * d * a), f_out)])
        ops += [g, op]
    return ops


#: The gated shared expert's output (Qwen3-Next), summed into the MoE output.
SHARED_GATED = "shared_gated"
#: The shared experts' output reduced to the sequence shard (:func:`alltoall_tp`).
SHARED_REDUCED = "shared_red"


def _shared_output(c: _Ctx) -> tuple[str, ...]:
    """The shared experts' output tensor the MoE output is summed with (none without)."""
    if not c.m.shared_experts:
        return ()
    if c.m.shared_expert_gate:
        return (SHARED_GATED,)
    return (SHARED_REDUCED,) if alltoall_tp(c) else ("shared_out",)


def _residual(c: _Ctx, name: str, *, flow=None, inp: str | None = None, resid: str = "x",
              out: str | None = None, extra: tuple[str, ...] = (), reduced: bool = False
              ) -> list[Op]:
    """TP all-reduce of a sub-block's output, its post-norm (sandwich norms) and the residual
    add. With a ``flow``: ``inp`` the sub-block's output, ``resid`` the residual stream,
    ``out`` the sum; ``extra`` outputs summed into ``inp`` (the shared experts': the sum is
    not an op of its own, an ordering-only read of the first op); ``reduced``: ``inp`` is
    already the reduced sequence shard (a MoE layer under Megatron's all-to-all dispatcher,
    :func:`alltoall_tp`): no all-reduce.

    Under sequence parallelism the all-reduce stands for Megatron's reduce-scatter (the
    cluster step times it so, sim/cluster/step.py) and what follows it runs on the rank's
    sequence shard, ``1/sp`` of the tokens (tagged :data:`SP_SHARD`; it reads and writes
    ``1/sp`` of each tensor) [S: NVIDIA/Megatron-LM core_r0.9.0 (1afee592)
    megatron/core/transformer/transformer_layer.py L291-294, L331-334: ``self_attn_bda`` /
    ``mlp_bda`` over the row-parallel linear's output and the ``residual`` the layer
    carries, both ``[s/tp, b, h]`` under sequence parallelism: the row-parallel linear
    reduce-scatters its output (tensor_parallel/layers.py L1153-1154 ``elif
    self.sequence_parallel: output_ = reduce_scatter_to_sequence_parallel_region(...)``;
    TransformerEngine v1.11 (c27ee60) module/linear.py L355-356 ``elif parallel_mode ==
    "row" and sequence_parallel: out, _ = reduce_scatter_along_first_dim(out, tp_group)``;
    models/gpt/gpt_layer_specs.py L85: a MoE layer's ``pre_mlp_layernorm`` is a ``TENorm``
    on the same hidden states)]. A post-norm (sandwich norms)
    over the reduced output runs there too [assumption: where its input lives; Megatron-Core
    core_r0.9.0 has no sandwich norms]."""
    d, T = c.m.hidden_size, c.tokens
    fl = flow or NOFLOW
    a = c.p.a_bytes
    f = 1.0 / c.sp
    cur, deps = inp, extra
    # the 2-D layout: o_proj's or the FFN's partial sums reduce-scattered over YZ (tp2d.py);
    # none after a MoE layer whose dispatcher reduce-scattered its output (alltoall_tp)
    ops = ([] if reduced else [output_reduce_scatter(c, name)] if c.tp_shape else
           c.all_reduce(f"{name}_all_reduce", T * d))
    for op in ops:
        fl.vec(op, [(cur, 1.0)], [(fl.t(f"{name}_red", T * d * a),
                                   f if op.kind == "reduce_scatter" else 1.0)], deps=deps)
        cur, deps = f"{name}_red", ()
    if c.m.sandwich_norms:
        ops.append(c.stream_norm(fl, f"{name}_post_norm", cur, f"{name}_pn", deps=deps))
        cur, deps = f"{name}_pn", ()
    op = c.vec(f"{name}_residual", "add", T * d / c.sp, reads=2.0,
               tags=c.sp_tags + (RESIDUAL_ADD,))
    writes = [(fl.t(out or f"{name}_sum", T * d * a), f)]
    if c.phase == "train" and c.p.hidden_dropout:
        # the bias-dropout-add also writes its bool mask, saved for the backward
        # (workloads/dropout.py): 1 B per element; the compare and the scale on the lanes
        op = replace(op, write_bytes=op.write_bytes + op.elements * dropout.MASK_BYTES,
                     ops_per_element=op.ops_per_element + dropout.DROP_OPS,
                     tags=op.tags + (dropout.TAG,))
        writes.append((fl.t(f"{name}_dropout_mask", T * d * dropout.MASK_BYTES), f))
    fl.vec(op, [(cur, f), (resid, f)], writes, deps=deps)
    ops.append(op)
    return ops


def mixer_ops(c: _Ctx, *, flow=None) -> list[Op]:
    """A layer's token mixer (its norm, attention or linear attention, output projection):
    gated DeltaNet on a ``linear`` layer
    (:func:`~diptych.workloads.gated_deltanet.linear_attention`), MLA or GQA attention
    otherwise. Reads ``x``, writes ``attn_out``."""
    if c.layer.linear:
        return linear_attention(c, flow=flow)
    att = (_attention_2d if c.tp_shape else _attention_mla if c.m.is_mla else
           _attention_gqa)(c, flow=flow)
    if not c.layer.ssm:
        return att
    # Falcon-H1: a Mamba-2 mixer beside the attention on the same normed input, writing
    # ssm_out (summed into the residual); its per-sequence ops follow the attention's, so that
    # a serving step's cores stay together: [attention up to its core] [in_proj_ssm]
    # [attention core] [SSM cores] [the rest of the attention] [the rest of the SSM]
    first = len(flow.records) if flow is not None else 0
    ssm = ssm_mixer(c, flow=flow)
    core = [i for i, op in enumerate(att) if op.name in ATTENTION_CORES]
    mine = [i for i, op in enumerate(ssm) if op.name in SSM_CORES]
    lo, hi = core[0], core[-1] + 1
    order = ([("a", i) for i in range(lo)] + [("s", i) for i in range(mine[0])]
             + [("a", i) for i in range(lo, hi)] + [("s", i) for i in mine]
             + [("a", i) for i in range(hi, len(att))]
             + [("s", i) for i in range(mine[-1] + 1, len(ssm))])
    if flow is not None:
        recs = flow.records[first - len(att):]
        flow.records[first - len(att):] = [recs[i if k == "a" else len(att) + i]
                                          for k, i in order]
    return [att[i] if k == "a" else ssm[i] for k, i in order]


#: The per-sequence ops of an attention mixer (serving_step's cores besides the linear and
#: state-space mixers').
ATTENTION_CORES = frozenset({"attention (fused)", "attn_scores", "softmax", "attn_pv",
                             "q_absorb", "v_absorb", "kv_b_proj"}) | DSA_CORES


def layer_ops(c: _Ctx, *, flow=None) -> list[Op]:
    """One transformer layer of kind ``c.layer`` for one TP rank, in execution order. With a
    ``flow`` (:class:`~diptych.workloads.dataflow.Flow`) the tensors are recorded: the layer
    reads ``x`` and writes ``y`` (docs/workloads.md lists the names)."""
    fl = flow or NOFLOW
    ops = mixer_ops(c, flow=flow)
    ops += _residual(c, "attn", flow=flow, inp="attn_out", resid="x", out="h1",
                     extra=("ssm_out",) if c.layer.ssm else ())
    ops.append(c.stream_norm(fl, "mlp_norm", "h1", "h_mlp"))   # the sequence shard (SP)
    if c.layer.moe:
        ops += _moe_mlp(c, flow=flow)
        out, extra = "moe_out", _shared_output(c)
    else:
        ops += _dense_mlp(c, "", c.m.intermediate_size, flow=flow)
        out, extra = "mlp_out", ()
    ops += _residual(c, "mlp", flow=flow, inp=out, resid="h1", out="y", extra=extra,
                     reduced=alltoall_tp(c))
    return ops


def _embedding(c: _Ctx, *, flow=None, out: str = "emb") -> list[Op]:
    """The token embedding (vocab-parallel: an all-reduce), [× √d], [+ learned positions].
    With a ``flow``: reads rows of the program tensor ``w_embed``, writes ``out``.

    Under sequence parallelism a model without learned positions reduce-scatters the
    lookup's partial sums instead (``embed_reduce_scatter``: each rank keeps its sequence
    shard) and scales them there (the scale: where the tensor lives [assumption: no
    Megatron-Core source read for Gemma's scale]) [S: NVIDIA/Megatron-LM core_r0.9.0 (1afee592)
    megatron/core/models/common/embeddings/language_model_embedding.py L41-52:
    ``reduce_scatter_embeddings = (not add_position_embedding) and num_tokentypes <= 0 and
    sequence_parallel``, passed to ``VocabParallelEmbedding``; tensor_parallel/layers.py
    L240-246: ``reduce_scatter_to_sequence_parallel_region`` else
    ``reduce_from_tensor_model_parallel_region``]; with learned positions the sum is
    all-reduced, the positions added over the whole sequence and the shard taken after
    (L107-126 ``scatter_to_sequence_parallel_region``, a split), as without it."""
    d, T = c.m.hidden_size, c.tokens
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.uw_bytes           # (no recipe quantises the embedding)
    table = fl.t("w_embed", -(-c.m.vocab_size // c.tp) * d * wb, "weight", program=True)
    spec: list = [(c.vec("embed_tokens", "embedding", T * d, reads=0.0,
                         extra_read_bytes=T * d * wb, tags=(embedding_grad.TAG,)),
                   [(table, T / -(-c.m.vocab_size // c.tp))])]
    scatter = c.sp > 1 and not c.m.learned_positions
    if scatter:
        spec.append((Collective(name="embed_reduce_scatter", kind="reduce_scatter",
                                bytes=T * d * a, group=c.tp, tags=("tp",)), []))
    else:
        spec += [(op, []) for op in c.all_reduce("embed_all_reduce", T * d)]
    if c.m.scale_embeddings:
        spec.append((c.vec("embed_scale", "mul", T * d / (c.sp if scatter else 1), ops=1.0,
                           tags=c.sp_tags if scatter else ()), []))
    if c.m.learned_positions:
        pos = fl.t("w_pos", c.m.max_position_embeddings * d * wb, "weight")
        spec.append((c.vec("embed_positions", "add", T * d, reads=1.0,
                           extra_read_bytes=T * d * wb),
                     [(pos, T / c.m.max_position_embeddings)]))
    mtp = c.m.mtp_module
    cur = None
    f = 1.0                  # the share of the tensors an op touches: the shard after a scatter
    for i, (op, extra) in enumerate(spec):
        last = i == len(spec) - 1 and not mtp
        dst = fl.t(out, T * d * a, program=True) if last else fl.t(f"emb{i}", T * d * a)
        g = 1.0 / c.sp if isinstance(op, Collective) and op.kind == "reduce_scatter" else f
        fl.vec(op, ([(cur, f)] if cur else []) + extra, [(dst, g)])
        cur, f = dst, g
    ops = [op for op, _ in spec]
    if mtp:
        ops += _mtp_input(c, cur, fl, out)
    return ops


def _mtp_input(c: _Ctx, emb: str, fl, out: str) -> list[Op]:
    """A multi-token-prediction module's input (DeepSeek-V3 report §2.2, arXiv 2412.19437:
    ``h' = M·[RMSNorm(h); RMSNorm(Emb(t))]``): ``enorm`` over the token embedding ``emb``,
    ``hnorm`` over the previous depth's hidden states (the program tensor ``mtp_hidden``,
    from outside the module), and ``eh_proj``, a 2d → d linear, replicated on every
    tensor-parallel rank or column-parallel with its outputs all-gathered
    (:func:`~diptych.workloads.params.mtp_projection_split`); it writes ``out``."""
    d, T = c.m.hidden_size, c.tokens
    a, wb = c.p.a_bytes, c.p.w_bytes
    split = mtp_projection_split(c.m) and c.tp > 1
    n = -(-d // c.tp) if split else d
    enorm, hnorm = c.norm("mtp_enorm", d), c.norm("mtp_hnorm", d)
    proj = c.gemm("mtp_eh_proj", T, 2 * d, n, tags=("mtp",))
    fl.vec(enorm, [(emb, 1.0), (fl.t("w_mtp_enorm", enorm.read_bytes - T * d * a, "weight"),
                                1.0)], [(fl.t("mtp_e", T * d * a), 1.0)])
    fl.vec(hnorm, [(fl.t("mtp_hidden", T * d * a, program=True), 1.0),
                   (fl.t("w_mtp_hnorm", hnorm.read_bytes - T * d * a, "weight"), 1.0)],
           [(fl.t("mtp_h", T * d * a), 1.0)])
    dst = fl.t("mtp_proj", T * n * a) if split else fl.t(out, T * d * a, program=True)
    fl.gemm(proj, [("mtp_e", 1.0), ("mtp_h", 1.0)],
            [(fl.t("w_mtp_eh_proj", 2 * d * n * wb, "weight"), 1.0)], [(dst, 1.0)])
    if not split:
        return [enorm, hnorm, proj]
    gather = Collective(name="mtp_all_gather", kind="all_gather", bytes=T * d * a,
                        group=c.tp, tags=("tp",))
    fl.vec(gather, [(dst, 1.0)], [(fl.t(out, T * d * a, program=True), 1.0)])
    return [enorm, hnorm, proj, gather]


def _head(c: _Ctx, *, flow=None, inp: str = "hidden") -> list[Op]:
    """Final norm and LM head (and the final logit soft-capping); inference computes logits
    for the last token only. With a ``flow``: reads the program tensor ``inp`` (the last
    layer's output); the LM head of a model with tied embeddings reads ``w_embed``."""
    d = c.m.hidden_size
    v = -(-c.m.vocab_size // c.tp)
    rows = c.tokens if c.phase == "train" else c.batch
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.uw_bytes           # (no recipe quantises the LM head)
    # training under sequence parallelism: the final norm on the rank's sequence shard, its
    # output all-gathered for the column-parallel output layer [S: NVIDIA/Megatron-LM
    # core_r0.9.0 (1afee592) megatron/core/transformer/transformer_block.py L493-494
    # ``final_layernorm`` over the block's (sharded) hidden states; models/gpt/gpt_model.py
    # L140 ``output_layer = tensor_parallel.ColumnParallelLinear``, whose forward all-gathers
    # its input when ``sequence_parallel`` (tensor_parallel/layers.py L400-409,
    # ``LinearWithGradAccumulationAndAsyncCommunication.forward``: ``_all_gather_base``)].
    # Its backward runs two collectives under sequence parallelism, the saved shard gathered
    # again for the weight gradient and the input gradient reduce-scattered (tagged REGATHER,
    # train.backward_ops), and without it (tp > 1) one, the input gradient's all-reduce
    # (tagged DGRAD_ALL_REDUCE on the GEMM) [S: NVIDIA/Megatron-LM core_r0.9.0 (1afee592)
    # megatron/core/tensor_parallel/layers.py L432-445 ``if ctx.sequence_parallel``:
    # ``_all_gather_base(all_gather_buffer, input, ...)`` into ``total_input`` for the
    # wgrad; L468-478 ``_reduce_scatter_base(sub_grad_input, grad_input, ...)``; L460-465
    # ``if ctx.allreduce_dgrad: torch.distributed.all_reduce(grad_input, ...)``, with
    # L820-822 ``allreduce_dgrad = world_size > 1 and not self.sequence_parallel and not
    # self.disable_grad_reduce`` (so L887-896 passes the input through: not
    # ``copy_to_tensor_model_parallel_region``, whose backward would be the same all-reduce)]
    # the 2-D layout's residual stream too lives 1/tp per chip (tp2d.py)
    norm = c.norm("final_norm", d, rows, sharded=c.phase == "train" or bool(c.tp_shape))
    f = 1.0 / c.sp
    fl.t(inp, c.tokens * d * a, program=True)
    fl.vec(norm, [(inp, rows / c.tokens * f),
                  (fl.t("w_final_norm", norm.read_bytes - norm.elements * a, "weight"), 1.0)],
           [(fl.t("hn", rows * d * a), f)])
    ops: list[Op] = [norm]
    hn = "hn"
    if c.sp > 1:
        op = Collective(name="head_all_gather", kind="all_gather", bytes=rows * d * a,
                        group=c.tp, tags=("tp", REGATHER))
        fl.vec(op, [(hn, f)], [(fl.t("hn_all", rows * d * a), 1.0)])
        ops.append(op)
        hn = "hn_all"
    reduce = (f"{DGRAD_ALL_REDUCE}{c.tp}",) if c.phase == "train" and c.tp > 1 \
        and c.sp == 1 else ()
    head = c.gemm("lm_head", rows, d, v, tags=("head",) + reduce)
    w = (fl.t("w_embed", v * d * wb, "weight", program=True) if c.m.tie_word_embeddings
         else fl.t("w_head", d * v * wb, "weight"))
    fl.gemm(head, [(hn, 1.0)], [(w, 1.0)], [(fl.t("logits", rows * v * a), 1.0)])
    ops.append(head)
    cur = "logits"
    if c.m.final_logit_softcap:
        op = c.vec("logit_softcap", "softcap", rows * v)
        fl.vec(op, [(cur, 1.0)], [(fl.t("logits_capped", rows * v * a), 1.0)])
        ops.append(op)
        cur = "logits_capped"
    if c.phase == "train":       # the loss as Megatron-Core runs it (workloads/loss.py)
        passes = loss.forward_ops(rows, v, a, c.p.cross_entropy)
        buf, row = cur, None
        for i, (op, (out, is_row)) in enumerate(zip(passes, loss.outputs(c.p.cross_entropy))):
            last = i == len(passes) - 1
            # each pass reads the FP32 buffer before it and writes the next, or (a row
            # reduction) its row vector, which the next pass reads as an ordering input
            nbytes = op.write_bytes - (rows * loss.FP32_BYTES if last else 0.0)
            outs = [(fl.t(out, nbytes), 1.0)]
            if last:
                outs.append((fl.t("loss", rows * loss.FP32_BYTES, program=True,
                                  live_out=True), 1.0))
            fl.vec(op, [(buf, 1.0)], outs, deps=(row,) if row else ())
            if is_row:
                row = out
            else:
                buf, row = out, None
        ops += passes
    else:
        if c.tp > 1:
            op = Collective(name="logits_all_gather", kind="all_gather",
                            bytes=rows * c.m.vocab_size * c.p.a_bytes, group=c.tp, tags=("tp",))
            fl.vec(op, [(cur, 1.0)], [(fl.t("logits_all", op.bytes), 1.0)])
            ops.append(op)
            cur = "logits_all"
        # the engine's sampling kernels over the gathered logits, each reading the buffer
        # the one before wrote (workloads/sampling.py)
        for op in sampling.sampler_ops(rows, c.m.vocab_size, a, c.sampler):
            fl.vec(op, [(cur, 1.0)], [(fl.t(op.name, op.write_bytes), 1.0)])
            ops.append(op)
            cur = op.name
        fl.live_out(cur)
    return ops


def _block_name(groups, spec: LayerSpec, ix: tuple[int, ...]) -> str:
    """``layers`` for a uniform model; ``layers[a:b]`` for a contiguous run (DeepSeek's dense
    prefix); otherwise ``layers (…)`` with what sets the kind apart; ``(moe)`` marks MoE."""
    if len(groups) == 1:
        return "layers (moe)" if spec.moe else "layers"
    specs = [s for s, _ in groups]
    tags = ["moe"] if spec.moe else []
    contiguous = ix == tuple(range(ix[0], ix[-1] + 1))
    if not contiguous and not spec.moe and any(s.moe for s in specs):
        tags.append("dense")
    if len({(s.attention, s.window) for s in specs}) > 1:
        tags.append(spec.describe_attention())
    if not spec.rope and any(s.rope for s in specs):
        tags.append("nope")
    if len({s.qk_norm for s in specs}) > 1 and len({s.rope for s in specs}) == 1:
        tags.append("qk-norm" if spec.qk_norm else "no qk-norm")
    base = f"layers[{ix[0]}:{ix[-1] + 1}]" if contiguous else "layers"
    return f"{base} ({', '.join(tags)})" if tags else base


def layer_kinds(c: _Ctx) -> list[tuple[str, int, _Ctx]]:
    """``(block name, layers, context)`` per distinct layer kind, in order of first use."""
    groups = c.m.layer_groups()
    return [(_block_name(groups, s, ix), len(ix), c.for_layer(s)) for s, ix in groups]


def _named(name: str, repeat: int, fl: Flow, ops: list[Op], stage: str = "forward",
           carry=(), p: Precision | None = None, sp: int = 1) -> Block:
    """A block of ``ops`` with the tensors and accesses ``fl`` recorded for them; under
    ``p``'s FP8 recipe with the casts its linear layers need
    (:func:`~diptych.workloads.recipe.quantize_records`; ``sp``: sequence-parallel shards)."""
    if [id(o) for o, _ in fl.records] != [id(o) for o in ops]:
        raise ValueError(f"lowering bug: block {name!r} recorded "
                         f"{[o.name for o, _ in fl.records]} for ops {[o.name for o in ops]}")
    records, tensors = fl.records, fl.tensors
    if p is not None and p.quantized:
        records, tensors = quantize_records(records, {**fl.program, **fl.tensors}, p, sp=sp)
        tensors = {k: t for k, t in tensors.items() if k not in fl.program}
    return Block.of_ops(name, repeat, tuple(op for op, _ in records), stage,
                        access=tuple(a for _, a in records), tensors=tuple(tensors.values()),
                        program_tensors=tuple(fl.program.values()), carry=tuple(carry))


def layer_exits(c: _Ctx) -> list[tuple[str, str]]:
    """``(entry, exit)`` program tensors of each layer block: the embedding's output feeds
    the first kind, ``hidden`` is the last kind's output (``hidden[i]`` in between)."""
    n = len(layer_kinds(c))
    names = ["emb"] + [f"hidden[{i}]" for i in range(n - 1)] + ["hidden"]
    return list(zip(names[:-1], names[1:]))


def _layer_blocks(c: _Ctx, stage: str = "forward") -> list[Block]:
    out = []
    T, d, a = c.tokens, c.m.hidden_size, c.p.a_bytes
    for (name, n, ck), (entry, exit_) in zip(layer_kinds(c), layer_exits(c)):
        fl = Flow()
        ops = layer_ops(ck, flow=fl)
        fl.t(entry, T * d * a, program=True)
        fl.t(exit_, T * d * a, program=True)
        out.append(_named(name, n, fl, ops, stage, (Carry("x", "y", entry, exit_),), c.p,
                          sp=c.sp))
    return out


def embedding_block(c: _Ctx) -> Block:
    """The embedding as a block with its tensors."""
    fl = Flow()
    return _named("embedding", 1, fl, _embedding(c, flow=fl), p=c.p)


def head_block(c: _Ctx) -> Block:
    """The final norm and LM head as a block with its tensors."""
    fl = Flow()
    return _named("head", 1, fl, _head(c, flow=fl), p=c.p)


def forward_blocks(c: _Ctx) -> list[Block]:
    """Embedding, the layer blocks and the head of one forward pass."""
    return [embedding_block(c)] + _layer_blocks(c) + [head_block(c)]


def keys_info(c: _Ctx) -> dict:
    """``keys_per_query`` (the longest span over layer kinds) and ``keys_per_query_by_block``
    for a workload's ``info``."""
    by_block = {name: ck.keys for name, _, ck in layer_kinds(c)}
    return {"keys_per_query": max(by_block.values()), "keys_per_query_by_block": by_block}


def _check_common(m: ModelConfig, batch: int, tp: int, grid=None, **lengths) -> None:
    _pos("batch", batch)
    for k, v in lengths.items():
        _pos(k, v)
    if grid is None:                # the 2-D layout checks its own split (_grid)
        check_tp(m, tp)


def check_ep(m: ModelConfig, ep: int) -> None:
    """Raise ValueError unless ``ep`` expert-parallel ranks split ``m``'s routed experts."""
    _pos("ep", ep)
    if ep == 1:
        return
    if not m.is_moe:
        raise ValueError(f"ep={ep} needs a mixture-of-experts model; {m.name} is dense "
                         f"(use ep=1)")
    if m.experts % ep:
        raise ValueError(f"ep={ep} must divide the number of experts ({m.experts} in "
                         f"{m.name})")


def check_routing(m: ModelConfig, routing: Routing) -> Routing:
    """``routing`` when ``m`` can take it: a dense model takes only the default."""
    if not isinstance(routing, Routing):
        raise ValueError(f"routing must be a Routing, not {type(routing).__name__}")
    if not routing.default and not m.is_moe:
        raise ValueError(f"MoE routing ({routing.describe()}) needs a mixture-of-experts "
                         f"model; {m.name} is dense")
    return routing


def routing_info(c: _Ctx) -> dict:
    """The routing a MoE lowering ran with, for ``Workload.info`` (nothing for a dense
    model): the busiest rank's load over the mean per micro-batch and the dropped pairs."""
    m, r = c.m, c.routing
    if not m.is_moe:
        return {}
    e, k = m.experts, m.experts_per_token
    return {"moe_routing": {
        "skew": r.skew, "capacity_factor": r.capacity_factor, "pad": r.pad,
        "dispatcher": r.dispatcher,
        "busiest_rank_load": rank_load_factor(r, e, k, c.tokens, c.ep),
        "dropped_fraction": dropped_fraction(r, e, k, c.tokens)}}


def check_cp(cp: int, length: int, name: str = "seq_len", m: ModelConfig | None = None
             ) -> None:
    """Raise ValueError unless ``cp`` context-parallel ranks split a ``length``-token
    sequence into equal chunks (and ``m``, when given, has no layer whose state would pass
    from rank to rank: context parallelism of linear attention is not modelled, nor of DSA's
    indexer, whose keys the ring would have to carry too)."""
    _pos("cp", cp)
    if cp > 1 and m is not None and m.state_layers:
        raise ValueError(f"cp={cp}: context parallelism of {m.name}'s linear-attention or "
                         f"Mamba-2 layers (their state passes from rank to rank) is not "
                         f"modelled; use cp=1")
    if cp > 1 and m is not None and m.sparse_attention:
        raise ValueError(f"cp={cp}: context parallelism of {m.name}'s sparse attention (its "
                         f"indexer scores every rank's keys) is not modelled; use cp=1")
    if length % cp:
        raise ValueError(f"cp={cp} must divide {name} ({length}): each context-parallel rank "
                         f"holds an equal share of every sequence")


def prefill(m: ModelConfig, batch: int, prompt_len: int, *, precision: Precision | None = None,
            tp: int = 1, attention: str = "fused", cp: int = 1, ep: int = 1,
            routing: Routing = Routing(), tp_grid: tuple[tuple[int, ...], int] | None = None
            ) -> Workload:
    """The prompt pass: ``batch`` sequences of ``prompt_len`` tokens, causal attention
    (``attention``: "fused" or "unfused"; window- or chunk-limited per layer kind), KV written
    to the cache, logits for the last position (time to first token). ``cp``/``ep``: one
    rank's share under context / expert parallelism (:class:`_Ctx`): ``prompt_len / cp``
    tokens per sequence, ``experts / ep`` routed experts."""
    _check_common(m, batch, tp, tp_grid, prompt_len=prompt_len)
    check_attention(attention)
    check_cp(cp, prompt_len, "prompt_len", m)
    check_ep(m, ep)
    p = precision or Precision()
    c = _Ctx(m, p, tp, batch, prompt_len // cp, 0, "prefill", attention, cp=cp, ep=ep,
             routing=check_routing(m, routing), **_grid(m, tp, tp_grid, "prefill"))
    return Workload("prefill", tuple(forward_blocks(c)), tokens=batch * c.q_len, batch=batch,
                    info={"prompt_len": prompt_len, **keys_info(c), "tp": tp, **_grid_info(c),
                          "attention": attention, **({"cp": cp, "ep": ep}
                                                     if (cp, ep) != (1, 1) else {}),
                          **routing_info(c)})


def _grid(m: ModelConfig, tp: int, tp_grid, phase: str) -> dict:
    """The :class:`_Ctx` fields of the 2-D layout ``tp_grid`` = (torus slice sides, the
    ``X`` side's index; :mod:`~diptych.workloads.tp2d`), or none for the 1-D layout (None)."""
    if tp_grid is None:
        return {}
    shape, xi = tuple(tp_grid[0]), tp_grid[1]
    if math.prod(shape) != tp or not 0 <= xi < len(shape):
        raise ValueError(f"tp_grid {tp_grid!r} must be the sides of a {tp}-chip slice and "
                         f"the index of one of them")
    check_2d(m, phase)
    bad = grid_problems(m, shape[xi], tp // shape[xi])
    if bad:
        raise ValueError(f"tp_grid {tp_grid!r} cannot split {m.name}: " + "; ".join(bad))
    return {"tp_shape": shape, "tp_x_axis": xi}


def _grid_info(c: _Ctx) -> dict:
    """The workload info of a 2-D layout: the slice and its ``X``, ``YZ``."""
    return ({"tp_layout": "2d", "tp_x": c.tp_x, "tp_yz": c.tp // c.tp_x,
             "tp_slice": "x".join(map(str, c.tp_shape))} if c.tp_shape else {})


def decode_context(prompt_len: int, gen: int) -> int:
    """The mean context of ``gen`` decode steps after a ``prompt_len`` prompt.

    Step i (0-based) attends position ``prompt_len + i + 1``; the mean over the steps,
    ``prompt_len + (gen + 1)/2`` rounded up, is what a **full-attention** layer attends on
    average (its cost is linear in the context). A sliding-window or chunked layer's mean
    keys over the steps are *not* its keys at this context (a chunked layer's
    ``((c − 1) mod chunk) + 1`` is not linear in ``c``): :func:`decode_mean` gives each layer
    kind its own mean (:meth:`_Ctx.for_layer`)."""
    _pos("prompt", prompt_len)
    _pos("gen", gen)
    return prompt_len + (gen + 2) // 2


def decode(m: ModelConfig, batch: int, context_len: int, steps: int = 1, *,
           precision: Precision | None = None, tp: int = 1, attention: str = "fused",
           ep: int = 1, routing: Routing = Routing(),
           tp_grid: tuple[tuple[int, ...], int] | None = None) -> Workload:
    """``steps`` decode steps, each generating one token per sequence attending
    ``context_len`` keys (``attention``: "fused" or "unfused"): every step reads all active
    weights and each sequence's whole KV cache (a sliding layer's window, a chunked layer's
    current chunk: ``((context_len − 1) mod chunk) + 1`` keys), and writes the new KV
    entries. The step's blocks repeat ``steps`` times (``repeat`` is multiplied). For the
    steps of a generation, whose contexts differ, use :func:`decode_mean`. ``ep``: one
    rank's share of the routed experts (:class:`_Ctx`)."""
    _check_common(m, batch, tp, tp_grid, context_len=context_len, steps=steps)
    check_attention(attention)
    check_ep(m, ep)
    p = precision or Precision()
    c = _Ctx(m, p, tp, batch, 1, 0, "decode", attention, past=context_len - 1, ep=ep,
             routing=check_routing(m, routing), **_grid(m, tp, tp_grid, "decode"))
    blocks = [replace(b, repeat=b.repeat * steps) for b in forward_blocks(c)]
    return Workload("decode", tuple(blocks), tokens=batch * steps, batch=batch,
                    info={"context_len": context_len, **keys_info(c), "steps": steps,
                          "tp": tp, **_grid_info(c), "attention": attention,
                          **({"ep": ep} if ep > 1 else {}),
                          **routing_info(c)})


def decode_mean(m: ModelConfig, batch: int, prompt_len: int, gen: int = 1, *,
                precision: Precision | None = None, tp: int = 1, attention: str = "fused",
                ep: int = 1, routing: Routing = Routing(),
                tp_grid: tuple[tuple[int, ...], int] | None = None) -> Workload:
    """One representative step of the ``gen`` decode steps after a ``prompt_len``-token
    prompt (one token per sequence per step; step ``i``, 0-based, attends position
    ``prompt_len + i + 1``): each layer kind attends its own mean keys over the steps,
    :func:`mean_keys` of ``gen`` queries after ``prompt_len`` cached tokens, rounded up —
    the mean context (:func:`decode_context`) for a full-attention layer, at most the
    window for a sliding one, the mean of its chunk's keys for a chunked one (Llama 4 Scout,
    8192-token chunks, prompt 4096, 8192 steps: 4097 keys, not the 1 key of the mean context
    8193). Nothing else in a decode step depends on the cache length, so the step's time is
    the mean time per output token. ``info["context_len"]`` is the mean context."""
    context = decode_context(prompt_len, gen)
    _check_common(m, batch, tp, tp_grid)
    check_attention(attention)
    check_ep(m, ep)
    p = precision or Precision()
    c = _Ctx(m, p, tp, batch, 1, 0, "decode", attention, past=prompt_len, ep=ep, gen=gen,
             routing=check_routing(m, routing), **_grid(m, tp, tp_grid, "decode"))
    return Workload("decode", tuple(forward_blocks(c)), tokens=batch, batch=batch,
                    info={"context_len": context,
                          "prompt_len": prompt_len, "gen": gen, **keys_info(c), "steps": 1,
                          "tp": tp, **_grid_info(c), "attention": attention,
                          **({"ep": ep} if ep > 1 else {}),
                          **routing_info(c)})
