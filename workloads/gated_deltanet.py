"""Gated DeltaNet, the linear-attention token mixer of Qwen3-Next, lowered to ops for one
tensor-parallel rank.

A layer [M: transformers models/qwen3_next ``Qwen3NextGatedDeltaNet``; S: Yang, Kautz and
Hatamizadeh, "Gated Delta Networks", arXiv:2412.06464] projects the normed input to q, k
(``H_k`` heads of ``d_k``), v and the output gate z (``H_v`` heads of ``d_v``;
``in_proj_qkvz``) and to the per-value-head ``b`` and ``a`` (``in_proj_ba``); runs a
depthwise causal conv (``kernel`` taps, SiLU) over q/k/v; L2-normalises q and k; and runs the
gated delta rule per value head (each q/k head serves ``H_v/H_k`` value heads), with a
``d_k × d_v`` state ``S`` per sequence and head::

    S_t = α_t S_{t−1} + β_t (v_t − α_t S_{t−1}ᵀ k_t) k_tᵀ,   o_t = S_tᵀ q_t

(``α_t = exp(g_t)``, ``g = −exp(A_log)·softplus(a + dt_bias)``, ``β = sigmoid(b)``); then a
gated RMSNorm over each head (``norm(o) · SiLU(z)``) and ``out_proj``.

What the ops model:

* **Decode** (``phase == "decode"``): the recurrence as flash-linear-attention's
  ``fused_recurrent_gated_delta_rule`` runs it, on the vector lanes (no matrix product: each
  step is rank-1 work on ``S``): per token and value head ``7·d_k·d_v`` ALU ops
  (:data:`RECURRENT_OPS_PER_STATE_ELEMENT`), reading each sequence's state once and writing it
  once per step (``2 × H_v/tp × d_k × d_v`` elements in ``state_dtype``): a cost independent
  of the context. The conv reads and writes its ``kernel − 1`` cached inputs per sequence.
* **Prefill and training**: the chunked (WY) algorithm of flash-linear-attention's
  ``chunk_gated_delta_rule`` [S: fla-org/flash-linear-attention fla/ops/gated_delta_rule/
  chunk.py: ``chunk_scaled_dot_kkt_fwd``, ``solve_tril``, ``recompute_w_u_fwd``,
  ``chunk_gated_delta_rule_fwd_h``, ``chunk_fwd_o``], on chunks of :data:`CHUNK` = 64 tokens
  (a sequence's tokens rounded up to whole chunks: the kernels compute whole tiles), batched
  over (sequence, value head, chunk) = ``G`` GEMMs each:

  =================  ==========================  =================================
  op                 product per chunk           MACs per chunk
  =================  ==========================  =================================
  ``gdn_kkt``        ``A = (β k) kᵀ``            ``C²·d_k``
  ``gdn_solve``      ``(I + A)⁻¹`` in 16-blocks  :func:`solve_dots` × ``16³`` (``C³/4``)
  ``gdn_wy``         ``[w u] = A⁻¹ [k v]``       ``C²·(d_k + d_v)``
  ``gdn_state``      ``h ← h + kᵀ u``            ``C·d_k·d_v``
  ``gdn_vnew``       ``v' = u − w h``            ``C·d_k·d_v``
  ``gdn_qk``         ``P = q kᵀ ⊙ decay``        ``C²·d_k``
  ``gdn_out``        ``o = [q P]·[h; v']``       ``C·(d_k + C)·d_v``
  =================  ==========================  =================================

  Inference reads the state a chunk starts from (a prefill chunk after a past) and writes the
  final state (``gdn_state_io``). The IR's order of ``gdn_state`` before ``gdn_vnew`` stands
  for the one kernel that interleaves them chunk by chunk, its ``h`` held on chip. Training's
  backward is derived op by op like every other op (two GEMMs per GEMM: 2× forward), not
  fla's own backward kernels [assumption].

The per-sequence ops (:data:`CORE_OPS`: the conv and the delta rule, which read and write a
sequence's state) are what a serving step lowers per sequence group
(:mod:`~diptych.workloads.serving_step`); the projections, gates, gated norm and ``out_proj``
are token-parallel.

This module knows nothing of :mod:`~diptych.workloads.lower`: it takes the lowering's context
(``_Ctx``) as an argument and uses its ``gemm``/``input_norm``/``vec`` builders.
"""

from __future__ import annotations

import math

from ..arch.dtypes import dtype_bytes
from .causal_conv import causal_conv
from .dataflow import NOFLOW
from .ops import Op, VectorOp

#: Tokens per chunk of the chunked algorithm (flash-linear-attention's ``BT = 64``).
CHUNK = 64
#: Side of the diagonal blocks ``solve_tril`` inverts by substitution before merging them with
#: matrix products (fla's ``solve_tril`` for 64-token chunks works on 16 × 16 blocks).
SOLVE_BLOCK = 16
#: ALU ops per state element per token of the recurrent (decode) kernel [assumption: counted
#: from the recurrence: the decay multiply (1), ``Sᵀk`` (multiply-add, 2), the rank-1 update
#: ``S += k δᵀ`` (2) and the output ``Sᵀq`` (2); the per-head vectors (q/k L2 norms,
#: ``δ = β(v − Sᵀk)``), ``O(d)`` against ``O(d²)``, are left out].
RECURRENT_OPS_PER_STATE_ELEMENT = 7.0
#: ALU ops per gate value: ``g = −exp(A_log)·softplus(a + dt_bias)`` (add, softplus as exp,
#: add, log, the exp of ``A_log``, multiply) and ``β = sigmoid(b)`` (exp, add, divide): about
#: 5 per value each [assumption].
GATE_OPS = 5.0
#: ALU ops per element of the q/k L2 norm (square-sum, rsqrt-scale: 3, like a weightless
#: RMSNorm) and of the gated RMSNorm (RMSNorm 4 + SiLU of z 4 + the product 1).
L2NORM_OPS = 3.0
GATED_NORM_OPS = 9.0
#: ALU ops per state element of the final-state store (``gdn_state_io``: decay and add).
STATE_IO_OPS = 2.0

#: The per-sequence ops of a gated DeltaNet layer (see the module docstring).
CORE_OPS = frozenset({"gdn_conv1d", "gdn_recurrent", "gdn_qk_norm", "gdn_kkt", "gdn_solve",
                      "gdn_wy", "gdn_state", "gdn_state_io", "gdn_vnew", "gdn_qk", "gdn_out"})


def solve_dots(chunk: int = CHUNK, block: int = SOLVE_BLOCK) -> int:
    """Block products (``block³`` MACs each) that ``solve_tril`` merges a chunk's inverse with:
    the off-diagonal block ``(i, j)``, ``i > j``, of ``(I + A)⁻¹`` takes ``i − j`` products
    for its sum and one for the left multiply by the inverted diagonal block (16 for 64-token
    chunks in 16-blocks: ``C³/4`` MACs)."""
    n = chunk // block
    return sum((n - d) * (d + 1) for d in range(1, n))


def shapes(m, tp: int) -> dict:
    """One rank's gated DeltaNet widths: key/value heads ``hk``/``hv``, ``dk``/``dv``, the q/k
    width ``K``, the v/z width ``V``, the conv's channels and the qkvz projection's outputs."""
    hk, hv = m.linear_key_heads // tp, m.linear_value_heads // tp
    dk, dv = m.linear_key_head_dim, m.linear_value_head_dim
    K, V = hk * dk, hv * dv
    return {"hk": hk, "hv": hv, "dk": dk, "dv": dv, "K": K, "V": V, "conv": 2 * K + V,
            "qkvz": 2 * K + 2 * V}


def linear_attention(c, *, flow=None, x: str = "x", out: str = "attn_out") -> list[Op]:
    """A gated DeltaNet token mixer for context ``c`` (a ``lower._Ctx`` of a ``linear`` layer):
    norm, ``in_proj_qkvz``, ``in_proj_ba``, the gates, the conv, the delta rule (recurrent in
    decode, chunked otherwise), the gated norm and ``out_proj`` (module docstring). With a
    ``flow`` the tensors are recorded: reads ``x``, writes ``out``; the state a sequence
    carries is ``conv_state``/``ssm_state`` (read, kind ``kv_cache``) and
    ``conv_state_new``/``ssm_state_new`` (written, outliving the step)."""
    m, T, B, q = c.m, c.tokens, c.batch, c.q_len
    d = m.hidden_size
    s = shapes(m, c.tp)
    hk, hv, dk, dv, K, V, conv = (s[k] for k in ("hk", "hv", "dk", "dv", "K", "V", "conv"))
    W = s["qkvz"]
    fl = flow or NOFLOW
    a, wb = c.p.a_bytes, c.p.w_bytes
    uw = c.p.uw_bytes           # the gates' and the norm's weights: no recipe quantises them
    sb = dtype_bytes(m.state_dtype)
    inference = c.phase != "train"
    reads_state = c.phase == "decode" or (inference and c.past > 0)

    norm = c.input_norm(fl, x)
    qkvz = c.gemm("in_proj_qkvz", T, d, W, tags=("attn",))
    fl.gemm(qkvz, [("h_attn", 1.0)], [(fl.t("w_qkvz", d * W * wb, "weight"), 1.0)],
            [(fl.t("qkvz", T * W * a), 1.0)])
    ba = c.gemm("in_proj_ba", T, d, 2 * hv, tags=("attn",))
    fl.gemm(ba, [("h_attn", 1.0)], [(fl.t("w_ba", d * 2 * hv * wb, "weight"), 1.0)],
            [(fl.t("ba", T * 2 * hv * a), 1.0)])
    gates = VectorOp(name="gdn_gates", kind="mul", elements=T * 2 * hv, ops_per_element=GATE_OPS,
                     read_bytes=T * 2 * hv * a + 2 * hv * uw, write_bytes=T * 2 * hv * 4.0,
                     dtype=c.p.activations, tags=("saved",))
    fl.vec(gates, [("ba", 1.0), (fl.t("w_gdn_gates", 2 * hv * uw, "weight"), 1.0)],
           [(fl.t("gates", T * 2 * hv * 4.0), 1.0)])
    ops: list[Op] = [norm, qkvz, ba, gates]

    # the depthwise causal conv over q/k/v (+ SiLU), with each sequence's kernel − 1 inputs
    ops.append(causal_conv(c, fl, name="gdn_conv1d", prefix="", channels=conv,
                           src=[("qkvz", conv / W)], out="qkv_conv"))

    state = B * hv * dk * dv * sb              # each sequence's recurrent state, all heads
    if c.phase == "decode":
        rec = VectorOp(name="gdn_recurrent", kind="mul", elements=B * hv * dk * dv * q,
                       ops_per_element=RECURRENT_OPS_PER_STATE_ELEMENT,
                       read_bytes=T * conv * a + T * 2 * hv * 4.0 + state,
                       write_bytes=T * V * a + state, dtype=c.p.activations,
                       tags=("state",))
        fl.vec(rec, [("qkv_conv", 1.0), ("gates", 1.0),
                     (fl.t("ssm_state", state, "kv_cache"), 1.0)],
               [(fl.t("gdn_core", T * V * a), 1.0),
                (fl.t("ssm_state_new", state, "kv_cache", live_out=True), 1.0)])
        ops.append(rec)
    else:
        ops += _chunked(c, s, fl, state if inference else 0.0, reads_state)

    gn = c.vec("gated_norm", "rmsnorm", T * V, reads=2.0, extra_read_bytes=dv * uw,
               ops=GATED_NORM_OPS, tags=("saved",))
    fl.vec(gn, [("gdn_core", 1.0), ("qkvz", V / W),
                (fl.t("w_gated_norm", dv * uw, "weight"), 1.0)],
           [(fl.t("gdn_normed", T * V * a), 1.0)])
    o = c.gemm("out_proj", T, V, d, tags=("attn",))
    fl.gemm(o, [("gdn_normed", 1.0)], [(fl.t("w_out", V * d * wb, "weight"), 1.0)],
            [(fl.t(out, T * d * a), 1.0)])
    return ops + [gn, o]


def _chunked(c, s: dict, fl, state: float, reads_state: bool) -> list[Op]:
    """The chunked delta rule of prefill and training (module docstring's table), reading
    ``qkv_conv`` and ``gates``, writing ``gdn_core``; ``state``: bytes of the final state an
    inference pass stores (and reads first when ``reads_state``: a chunk after a past)."""
    T, B, q = c.tokens, c.batch, c.q_len
    hk, hv, dk, dv, K, V, conv = (s[k] for k in ("hk", "hv", "dk", "dv", "K", "V", "conv"))
    a = c.p.a_bytes
    C = CHUNK
    n = math.ceil(q / C)                  # chunks per sequence (the last one padded)
    G = B * hv * n                        # (sequence, value head, chunk) products per GEMM
    pad = n * C / q                       # rows computed per token
    rep = hv / hk                         # value heads each q/k head serves
    # q and k live in qk_l2 (q first); a GEMM reads one of them for every value head
    qk = 0.5 * rep * pad
    norm = VectorOp(name="gdn_qk_norm", kind="rmsnorm", elements=T * 2 * K,
                    ops_per_element=L2NORM_OPS, read_bytes=T * 2 * K * a,
                    write_bytes=T * 2 * K * a, dtype=c.p.activations, tags=("saved",))
    fl.vec(norm, [("qkv_conv", 2 * K / conv)], [(fl.t("qk_l2", T * 2 * K * a), 1.0)])
    ops: list[Op] = [norm]

    def gemm(name, m_, k_, n_, batch, A, Bp, out, out_bytes, share=1.0):
        op = c.gemm(name, m_, k_, n_, batch=batch, weight=False, tags=("attn", "gdn"),
                    shared_b=False)
        fl.gemm(op, A, Bp, [(fl.t(out, out_bytes), share)], deps=("gates",))
        ops.append(op)

    k_l2, q_l2 = [("qk_l2", qk)], [("qk_l2", qk)]
    gemm("gdn_kkt", C, dk, C, G, k_l2, k_l2, "gdn_A", G * C * C * a)
    dots, blk = solve_dots(), SOLVE_BLOCK
    f = dots * blk * blk / (C * C)        # 1.0 for 64-token chunks in 16-blocks
    gemm("gdn_solve", blk, blk, blk, G * dots, [("gdn_A", f)], [("gdn_A", f)], "gdn_Ainv",
         G * C * C * a, f)
    gemm("gdn_wy", C, C, dk + dv, G, [("gdn_Ainv", 1.0)],
         k_l2 + [("qkv_conv", pad * V / conv)], "gdn_wu", G * C * (dk + dv) * a)
    u, w = [("gdn_wu", dv / (dk + dv))], [("gdn_wu", dk / (dk + dv))]
    gemm("gdn_state", dk, C, dv, G, k_l2, u, "gdn_h", G * dk * dv * a)
    if state:                             # the final state (and the one the chunk starts from)
        io = VectorOp(name="gdn_state_io", kind="mul", elements=B * hv * dk * dv,
                      ops_per_element=STATE_IO_OPS,
                      read_bytes=B * hv * dk * dv * a + (state if reads_state else 0.0),
                      write_bytes=state, dtype=c.p.activations, tags=("state",))
        rd = [("gdn_h", 1.0 / n)]
        if reads_state:
            rd.append((fl.t("ssm_state", state, "kv_cache"), 1.0))
        fl.vec(io, rd, [(fl.t("ssm_state_new", state, "kv_cache", live_out=True), 1.0)])
        ops.append(io)
    gemm("gdn_vnew", C, dk, dv, G, w, [("gdn_h", 1.0)], "gdn_vnew", G * C * dv * a)
    gemm("gdn_qk", C, dk, C, G, q_l2, k_l2, "gdn_P", G * C * C * a)
    gemm("gdn_out", C, dk + C, dv, G, q_l2 + [("gdn_P", 1.0)],
         [("gdn_h", 1.0), ("gdn_vnew", 1.0)], "gdn_core", T * V * a, pad)
    return ops

