"""DeepSeek Sparse Attention (DSA, DeepSeek-V3.2-Exp): the lightning indexer's ops and the
number of keys the main attention then reads.

Per layer and query token ``t`` the indexer scores every earlier token ``s`` [P: DeepSeek-V3.2-Exp
paper eq. 1; M: inference/model.py ``Indexer``, deepseek-ai/DeepSeek-V3.2-Exp]::

    I[t, s] = Σ_j  w[t, j] · ReLU(q_I[t, j] · k_I[s])        (j over index_n_heads heads)

with ``q_I = wq_b(query latent)`` (``H_I × d_I``), ``k_I = LayerNorm(wk(x))`` (one ``d_I``
key per token, shared by the heads, cached in FP8 with an FP32 scale per 128 values) and
``w = weights_proj(x)``; RoPE on the first ``qk_rope_head_dim`` dimensions, a Hadamard rotation
and FP8 quantisation of q and k, then ``fp8_index`` (an FP8 GEMM whose epilogue applies ReLU,
the head weights and the sum over heads, writing one FP32 logit per key) and a top-k of
``min(index_topk, context)`` keys. The main MLA attention of the query reads only those keys'
latents: its keys per query are ``min(context, index_topk)`` (:func:`attended_layer`), which
is counted exactly as a sliding window of ``index_topk`` counts them (the selected keys are
scattered, but a row of latent is contiguous: the gather runs at memory rate).

What is lowered (:func:`indexer_ops`), per layer, on every tensor-parallel rank (the reference
runs the indexer's linears unsplit and broadcasts rank 0's top-k; vLLM's ``Indexer`` holds
them as ``ReplicatedLinear`` with ``weights_proj`` unquantised [M: vllm
model_executor/models/deepseek_v2.py]):

* token-parallel: ``indexer_wq_b``, ``indexer_wk``, ``indexer_weights_proj`` (kept in BF16
  under an FP8 recipe, as the reference keeps ``weights_proj`` in the default dtype), the
  k LayerNorm, RoPE on ``H_I + 1`` rows of ``qk_rope_head_dim``, the rotation and FP8 cast
  (``indexer_quant``: ``log2(d_I)`` add/subtract steps of the fast Hadamard transform plus
  amax and scale [assumption]) and, when a cache is kept, the key-cache write (132 B/token);
* per sequence (serving's cores): ``indexer_scores``, an FP8 × FP8 GEMM of the
  ``q_len·H_I`` query rows (the heads share the key, as in MQA) against every cached key,
  whose ``H_I``-row scores stay on chip (``c_dest`` scratchpad: the kernel reduces them in
  its epilogue); ``indexer_reduce`` (ReLU, × weight, + over heads: 3 ops per score, reading
  the keys' FP32 scales and writing the FP32 logits) and ``indexer_topk`` (reads the logits,
  writes ``min(keys, topk)`` int32 indices). Their cost is linear in the context.

Training lowers the paper's sparse training stage (all parameters trained, 2048 keys per
query; the indexer trained by its KL loss over the selected set, its input detached): the
forward as above, and the backward of the scoring GEMM and its reduction over the selected
keys only (:func:`for_backward`; the generic rule for everything else, which also gives the
indexer projections an input gradient the detached graph does not need: a small overcount,
``2·T·(r_q·H_I·d_I + d·d_I + d·H_I)`` FLOPs per layer). The dense warm-up stage (indexer
alone trained, dense attention) is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .config import LayerSpec
from .dataflow import NOFLOW, scaled
from .ops import Gemm, Op, VectorOp
from .params import index_key_bytes_per_token

#: The serving step's per-sequence indexer ops (cores: their cost depends on each context).
CORE_OPS = frozenset({"indexer_scores", "indexer_reduce", "indexer_topk"})
#: Tag prefix carrying the selected keys per query row an op's backward runs over.
SELECTED_TAG = "selected_keys="
#: FP8 (E4M3) operands of the indexer's scoring GEMM; FP32 logits, scales and head weights.
FP8, FP32 = "fp8", "fp32"
LOGIT_BYTES = INDEX_BYTES = 4
#: ALU ops per score of the scoring epilogue: ReLU, × the head weight, + over heads [M:
#: inference/kernel.py ``fp8_index``].
REDUCE_OPS = 3.0


def attended_layer(layer: LayerSpec, topk: int) -> LayerSpec:
    """The layer kind whose key count the main attention of a DSA layer has: every earlier
    key up to ``topk`` of them per query (a window of ``topk``, by count)."""
    return replace(layer, attention="sliding", window=topk)


def indexer_ops(c, *, flow=None, q_latent: str = "q_a_n", x: str = "h_attn"
                ) -> tuple[list[Op], list[Op]]:
    """The indexer of one layer for context ``c`` (a :class:`~diptych.workloads.lower._Ctx`
    whose ``keys`` are the layer's full causal mean): ``(token-parallel ops, per-sequence
    ops)``, recorded in ``flow`` (reads ``x`` and the query latent ``q_latent``; writes
    ``idx_topk``, the selected indices)."""
    m, p, fl = c.m, c.p, flow or NOFLOW
    T, B, q = c.tokens, c.batch, c.q_len
    d, hi, di, rope = m.hidden_size, m.index_heads, m.index_head_dim, m.qk_rope_head_dim
    a, wb = p.a_bytes, p.w_bytes
    tags = ("attn", "indexer")

    def lin(name: str, src: str, k_: int, n_: int, dst: str) -> Gemm:
        op = c.gemm(name, T, k_, n_, tags=tags)
        b = wb if "quantized" in op.tags else p.uw_bytes     # (uw_bytes: wb without a recipe)
        return fl.gemm(op, [(src, 1.0)], [(fl.t(f"w_{name}", k_ * n_ * b, "weight"), 1.0)],
                       [(fl.t(dst, T * n_ * a), 1.0)])

    pre: list[Op] = [lin("indexer_wq_b", q_latent, m.q_lora_rank, hi * di, "idx_q"),
                     lin("indexer_wk", x, d, di, "idx_k")]
    nw = 2 * di * p.uw_bytes            # the norm's weight and bias (no recipe quantises them)
    op = c.vec("indexer_k_norm", "layernorm", T * di, extra_read_bytes=nw)
    pre.append(fl.vec(op, [("idx_k", 1.0), (fl.t("w_indexer_k_norm", nw, "weight"), 1.0)],
                      [(fl.t("idx_k_n", T * di * a), 1.0)]))
    pre.append(lin("indexer_weights_proj", x, d, hi, "idx_w"))
    op = c.vec("indexer_rope", "rope", T * (hi + 1) * rope)
    pre.append(fl.vec(op, [("idx_q", rope / di), ("idx_k_n", rope / di)],
                      [(fl.t("idx_qk_pe", op.write_bytes), 1.0)]))
    # inference runs the scoring in FP8 (the reference's fp8_index); training in the
    # activations' dtype [assumption: DeepSeek publishes no indexer training kernel]
    fp8 = c.phase != "train"
    op = c.vec("indexer_quant", "elementwise", T * (hi + 1) * di,
               ops=math.log2(di) + (2.0 if fp8 else 0.0), write_dtype_bytes=1.0 if fp8 else None)
    pre.append(fl.vec(op, [("idx_q", 1.0 - rope / di), ("idx_k_n", 1.0 - rope / di),
                           ("idx_qk_pe", 1.0)], [(fl.t("idx_qk8", op.write_bytes), 1.0)]))
    k8 = [("idx_qk8", 1.0 / (hi + 1))]
    q8 = [("idx_qk8", hi / (hi + 1))]
    key_bytes = index_key_bytes_per_token(m)
    if c.kv_cached:
        op = c.vec("indexer_k_write", "copy", T * di, reads=1.0 / a,
                   write_dtype_bytes=key_bytes / di)
        pre.append(fl.vec(op, k8, [(fl.t("idx_k_new", op.write_bytes, "kv_cache",
                                         live_out=True), 1.0)]))
    keys, scales = c.keys, 0.0
    if c.phase == "decode":     # the cached FP8 keys, then their FP32 scales
        fl.t("idx_k_cache", B * (keys - 1) * key_bytes, "kv_cache")
        cache = [("idx_k_cache", 1.0), ("idx_k_new", 1.0)]
        k_src, s_src = scaled(cache, di / key_bytes), scaled(cache, 1.0 - di / key_bytes)
        scales = B * keys * (key_bytes - di)
    else:                       # this step's keys (on chip with their scales): the causal mean
        k_src, s_src = scaled(k8, keys / q), []
    sel = c.for_layer(attended_layer(c.layer, m.index_topk)).keys   # mean selected per query
    sel_tag = (f"{SELECTED_TAG}{sel}/{keys}",)
    qk_dt = FP8 if fp8 else p.activations
    scores = Gemm(name="indexer_scores", m=q * hi, k=di, n=keys, batch=B, a_dtype=qk_dt,
                  b_dtype=qk_dt, c_dtype=FP32 if fp8 else p.activations, acc_dtype=FP32,
                  b_is_weight=False,
                  c_dest="scratchpad", tags=tags + sel_tag)
    fl.gemm(scores, q8, k_src, [(fl.t("idx_scores", scores.c_bytes), 1.0)])
    on_chip = float(scores.c_bytes)
    reduce = VectorOp(name="indexer_reduce", kind="elementwise", elements=B * q * hi * keys,
                      ops_per_element=REDUCE_OPS,
                      read_bytes=on_chip + scales + T * hi * a, write_bytes=T * keys * LOGIT_BYTES,
                      dtype=p.activations, tags=tags + sel_tag, scratchpad_read_bytes=on_chip)
    fl.vec(reduce, [("idx_scores", 1.0), ("idx_w", 1.0)] + s_src,
           [(fl.t("idx_logits", reduce.write_bytes), 1.0)])
    topk = VectorOp(name="indexer_topk", kind="topk", elements=T * keys, ops_per_element=2.0,
                    read_bytes=T * keys * LOGIT_BYTES, write_bytes=T * sel * INDEX_BYTES,
                    dtype=p.activations, tags=tags)
    fl.vec(topk, [("idx_logits", 1.0)], [(fl.t("idx_topk", topk.write_bytes), 1.0)])
    return pre, [scores, reduce, topk]


def selected(op) -> tuple[int, int] | None:
    """``(selected, scored)`` keys per query row of an indexer op's forward (None: not one)."""
    for t in op.tags:
        if t.startswith(SELECTED_TAG):
            sel, keys = t[len(SELECTED_TAG):].split("/")
            return int(sel), int(keys)
    return None


def backward_share(op) -> float:
    """The share of an op's forward operands and output its backward touches: ``selected /
    scored`` keys for the indexer's scoring and reduction (:func:`for_backward`), else 1."""
    s = selected(op)
    return 1.0 if s is None else s[0] / s[1]


def for_backward(op):
    """The forward op whose backward a training step runs: the indexer's scoring GEMM and its
    reduction restricted to the selected keys (the sparse stage's indexer loss is a KL
    divergence over the selected set only, so only those scores get a gradient [P: paper
    eq. 4]); any other op as is."""
    s = selected(op)
    if s is None:
        return op
    sel, keys = s
    if isinstance(op, Gemm):
        return replace(op, n=sel, c_dest="dram")
    f = sel / keys
    return replace(op, elements=max(1, round(op.elements * f)), read_bytes=op.read_bytes * f,
                   write_bytes=op.write_bytes * f, scratchpad_read_bytes=0.0)
