"""Fused (FlashAttention-style) attention: one record per layer, timed from its parts
(:func:`diptych.sim.run.attention.fused_stats`).

A fused attention block keeps the ``s × keys`` scores and probabilities on chip: DRAM sees Q,
K, V and O once (plus, in training, the softmax statistics: 2 FP32 values per query row per
head, written in forward and read in backward). The block carries the ops the kernel runs on
chip (``parts``: the QKᵀ and PV GEMMs and the softmax, with their unfused shapes) so the
engine's own results for those shapes time its compute.

Timing rule (:func:`~diptych.sim.run.attention.fused_stats`)::

    seconds = max(Σ compute time of the parts,  dram_bytes ÷ streaming bandwidth)

where a part's compute time is the engine's ``compute_cycles`` (the same schedule with
unlimited DRAM bandwidth, fill and drain included) ÷ the clock, and the streaming bandwidth is
the highest DRAM bandwidth the engine achieves on any of the parts (the same kind of data
movement at larger size; capped at the chip's peak). The backward block (FlashAttention-2's)
recomputes S = QKᵀ: that GEMM is one of its parts, tagged ``recompute``, so it counts in
hardware FLOPs (HFU) but not in model FLOPs (MFU).
"""

from __future__ import annotations

from dataclasses import dataclass

from .ops import Gemm, Op, VectorOp

#: Bytes of one softmax statistic (row max and row sum are kept in FP32 by FlashAttention).
STAT_BYTES = 4.0

#: The masks an :class:`AttnCall` knows: causal (every earlier key; ``window`` > 0 keeps the
#: last ``window`` of them, a sliding window), chunked (the keys of the query's own chunk of
#: ``window`` positions, up to itself: Llama 4's local layers) and full (every key).
MASKS = ("causal", "chunked", "full")


@dataclass(frozen=True)
class AttnCall:
    """One kernel call of a fused attention record, as its tiles see it: ``q_len`` queries of
    each head at positions ``past … past + q_len − 1`` of the sequence against ``kv_len``
    keys at positions ``kv_start … kv_start + kv_len − 1``, under ``mask``. A record without
    calls is not tiled (decode; docs/workloads.md, "Fused attention")."""

    q_len: int
    kv_len: int
    past: int = 0
    kv_start: int = 0
    mask: str = "causal"
    window: int = 0

    def __post_init__(self):
        if self.mask not in MASKS:
            raise ValueError(f"mask must be one of {', '.join(MASKS)}, not {self.mask!r}")
        for name in ("q_len", "kv_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)!r}")
        for name in ("past", "kv_start", "window"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, not {getattr(self, name)!r}")


@dataclass(frozen=True)
class FusedAttention:
    """One fused attention kernel of one layer (forward or backward).

    ``read_bytes``/``write_bytes`` are its DRAM traffic; ``saved_bytes`` the activations it
    keeps for backward besides those counted elsewhere (Q and the stats), ``saved_kv_bytes``
    the K and V it keeps (full sequence); ``working_bytes`` its live footprint outside the
    KV cache (for the inference peak working set)."""

    name: str
    parts: tuple[Op, ...]
    read_bytes: float
    write_bytes: float
    saved_bytes: float = 0.0
    saved_kv_bytes: float = 0.0
    working_bytes: float = 0.0
    tags: tuple[str, ...] = ()
    # residency (phase 2b): the parts of read_bytes + write_bytes served by tensors kept in
    # the scratchpads or the shared buffer (default: all in DRAM)
    scratchpad_bytes: float = 0.0
    shared_buffer_bytes: float = 0.0
    # tiling (training and prefill): the kernel calls one head's queries make, and how many
    # query heads × sequences run them (0: not tiled)
    calls: tuple[AttnCall, ...] = ()
    groups: int = 0

    def __post_init__(self):
        if not self.parts or not all(isinstance(p, (Gemm, VectorOp)) for p in self.parts):
            raise ValueError(f"parts of {self.name!r} must be a non-empty tuple of Gemm and "
                             f"VectorOp, not {self.parts!r}")
        for f in ("read_bytes", "write_bytes", "saved_bytes", "saved_kv_bytes",
                  "working_bytes", "scratchpad_bytes", "shared_buffer_bytes"):
            v = getattr(self, f)
            if not v >= 0:
                raise ValueError(f"{f} of {self.name!r} must be >= 0, not {v!r}")

    @property
    def gemms(self) -> tuple[Gemm, ...]:
        return tuple(p for p in self.parts if isinstance(p, Gemm))

    @property
    def gemm_flops(self) -> float:
        """GEMM FLOPs of the parts, recomputation included (hardware FLOPs)."""
        return sum(g.flops for g in self.gemms)

    @property
    def recompute_flops(self) -> float:
        """GEMM FLOPs spent recomputing the scores (not model FLOPs)."""
        return sum(g.flops for g in self.gemms if "recompute" in g.tags)

    @property
    def vector_flops(self) -> float:
        return sum(p.flops for p in self.parts if isinstance(p, VectorOp))

    @property
    def flops(self) -> float:
        return self.gemm_flops + self.vector_flops

    @property
    def dram_bytes(self) -> float:
        """Bytes that cross DRAM (the traffic less what resident tensors serve)."""
        if self.scratchpad_bytes or self.shared_buffer_bytes:
            return max(0.0, self.read_bytes + self.write_bytes - self.scratchpad_bytes
                       - self.shared_buffer_bytes)
        return self.read_bytes + self.write_bytes

    @property
    def compute_dtype(self) -> str:
        return self.gemms[0].compute_dtype


def on_chip(op):
    """``op`` (a Gemm or VectorOp) with every operand in the scratchpads: how the parts of a
    fused kernel, and fused vector ops, are timed on a chip without DRAM (their compute is
    what counts; their traffic is the fused record's)."""
    import dataclasses
    if isinstance(op, Gemm):
        return dataclasses.replace(op, a_source="scratchpad", b_source="scratchpad",
                                   c_dest="scratchpad")
    return dataclasses.replace(op, scratchpad_read_bytes=op.read_bytes,
                               shared_buffer_read_bytes=0.0,
                               scratchpad_write_bytes=op.write_bytes,
                               shared_buffer_write_bytes=0.0)


def fuse(name: str, scores: Gemm, softmax: VectorOp, pv: Gemm, *, keys_stored: int,
         heads_rows: int, kv_shared: bool = False, stats: bool = False,
         kv_cache: bool = False, tags: tuple[str, ...] = (),
         calls: tuple[AttnCall, ...] = (), groups: int = 0) -> FusedAttention:
    """The forward fused block of the unfused trio ``scores → softmax → pv``.

    Q is the scores' A operand, O the PV product; K and V are the B operands over the
    ``keys_stored`` keys held per sequence (the GEMMs' ``n``/``k`` is the causal mean, so they
    are rescaled to the full length). ``kv_shared``: V is a slice of K's tensor (MLA's latent
    cache) and is not read again (tagged ``kv_shared``: the cache is expanded once for both
    products, sim/run/precision_ops.py). ``heads_rows``: query rows × heads (for the statistics,
    written only when ``stats``). ``kv_cache``: K and V are the KV cache (not working set).
    ``calls``, ``groups``: the tiling (:class:`AttnCall`; ``groups`` = sequences × query
    heads)."""
    q, o = scores.a_bytes, pv.c_bytes
    k = scores.b_bytes * keys_stored / scores.n
    v = 0.0 if kv_shared else pv.b_bytes * keys_stored / pv.k
    st = 2.0 * STAT_BYTES * heads_rows if stats else 0.0
    return FusedAttention(name=name, parts=(scores, softmax, pv), read_bytes=q + k + v,
                          write_bytes=o + st, saved_bytes=q + st, saved_kv_bytes=k + v,
                          working_bytes=q + o + (0.0 if kv_cache else k + v),
                          tags=tags + (("kv_shared",) if kv_shared else ()),
                          calls=tuple(calls), groups=groups)


def fused_backward(op: FusedAttention, backward_ops) -> FusedAttention:
    """FlashAttention backward of a forward fused block: recompute S = QKᵀ, softmax backward,
    dP = dO·Vᵀ, dV = Pᵀ·dO, dS → dQ = dS·K, dK = dSᵀ·Q. Reads Q, K, V, O, dO and the
    statistics; writes dQ, dK, dV. ``backward_ops`` maps a forward op to its backward ops.

    K and V are the ones the forward streamed (``read_bytes`` less Q), not the ones it keeps
    (``saved_kv_bytes``): under context parallelism the rank keeps one chunk only, and its
    backward kernels read every ring step's K/V chunk again (received over the ring once
    more) and write each step's dK/dV, which the ring's bookkeeping then adds up
    [S: NVIDIA/TransformerEngine v1.10 @08a85d3b transformer_engine/pytorch/attention.py
    ``AttnFuncWithCPAndKVP2P``: forward saves one K/V chunk (``kv = p2p_comm_buffers[-1]``);
    backward, per step ``i``: ``kv = p2p_comm_buffers[i % 2][0]`` (the chunk received),
    ``dq_, dk_, dv_ = fused_attn_bwd(..., kv_[..., 0, :, :], kv_[..., 1, :, :], ...)``, then
    ``dkv_ = torch.cat((dk_, dv_))`` added into ``dkv``; workloads/cp_attention.py].
    Without context parallelism the two are the same bytes."""
    scores, softmax, pv = op.parts
    recompute = Gemm(name=f"{scores.name}.recompute", m=scores.m, k=scores.k, n=scores.n,
                     batch=scores.batch, a_dtype=scores.a_dtype, b_dtype=scores.b_dtype,
                     c_dtype=scores.c_dtype, acc_dtype=scores.acc_dtype,
                     b_is_weight=scores.b_is_weight, tags=scores.tags + ("recompute",))
    parts = [recompute] + backward_ops(pv) + backward_ops(softmax) + backward_ops(scores)
    q, o = scores.a_bytes, pv.c_bytes
    kv = op.read_bytes - q                  # the K and V the forward streamed
    st = op.saved_bytes - q
    return FusedAttention(name=f"{op.name}.bwd", parts=tuple(parts),
                          read_bytes=q + kv + o + o + st, write_bytes=q + kv,
                          working_bytes=2 * (q + kv + o), tags=op.tags + ("bwd",),
                          calls=op.calls, groups=op.groups)
