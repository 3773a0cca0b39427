"""Where a chip pays for block scales, dequantisation and output quantisation: ops beside
each GEMM (and beside each fused attention, for the GEMMs it runs on chip).

The lowering (``workloads/lower.py``) is chip-independent; :func:`with_precision_ops` adds,
for one chip, the work a GEMM's precision implies beyond its MACs, as ops the engine already
times (docs/precision.md, "The precision ops"):

* ``<gemm>.scales`` (kind ``copy``): the shared scales of block-scaled operands (MX, NVFP4)
  loaded from DRAM (A's and B's) and stored (C's), ``Gemm.a_scale_bytes + b_scale_bytes`` read
  and ``c_scale_bytes`` written, no ALU work. The engine moves the element tiles; this op
  moves the scale stream beside them (charged after them: exact when the GEMM is
  memory-bound, an over-count of at most the scale bytes' transfer time when it is not). A
  fused attention's DRAM traffic already counts its operands' scales (``Gemm.a_bytes``
  etc.): it gets no such op.
* ``<gemm>.rescale`` (kind ``scale``), only when the chip applies block scales on the vector
  unit (``core.array.block_scale = "vector"``) and the GEMM computes in a block-scaled dtype:
  the array accumulates each K-block's partial sum unscaled and the vector unit multiplies it
  by the two blocks' scales and adds it to the FP32 sum: :data:`RESCALE_OPS_PER_ELEMENT` ops
  per output element per K-block (``batch × m × n × ceil(k / block)`` elements). Unless the
  vector unit reads the accumulators directly (``core.vector.on_array_output_path``), each
  partial sum is written to the scratchpad by the array and read back by the vector unit at
  the accumulator's width: on-chip bytes at the core's scratchpad bandwidth. With ``"pe"``
  the datapath applies the scale (an exponent add for E8M0) at no extra time.
* ``<gemm>.promote`` (kind ``scale``), only for a GEMM its training recipe runs with a split
  accumulator (tag :data:`~diptych.workloads.recipe.SPLIT_ACC_TAG`: the FP8 recipes' dgrad and
  wgrad) whose operands are both plain FP8 (no block scale) on a chip with a
  ``[split_accumulator]`` table: the tensor cores' partial sum is added
  into an FP32 accumulator on the vector unit every ``promotion_interval_k`` elements of K,
  :data:`PROMOTE_OPS_PER_ELEMENT` ops per output element per promotion (``batch × m × n ×
  ceil(k / promotion_interval_k)`` elements), of which the table's ``overlap`` hides under
  the matrix products: the op carries the rest, ``(1 − overlap) ×`` those ops (and only
  those in its energy). That rest is time the GEMM's matrix products wait, so the op is
  tagged :data:`~diptych.workloads.quant.HOLDS_ARRAY_TAG` and a schedule holds the arrays
  for it too (no other GEMM hides it). Partial sums cross the scratchpad as a rescale's do.
  A block-scaled product gets no such op: its rescale on the vector unit already promotes
  there, and with ``block_scale = "pe"`` the datapath applies the scales as it accumulates
  ([assumption]: in FP32, as a block-scaled MMA does, so nothing left to promote).
* ``<gemm>.dequant`` (kind ``dequant``): a GEMM whose B operand is narrower than its A
  operand computes in A's dtype, so B's elements are expanded to it: a weight GEMM (W4A16,
  W4A8, W8A16) or attention over a KV cache narrower than the activations (an FP8, INT8, INT4
  or MX cache with BF16 queries; the decode lowering's ``attn_scores``/``attn_pv``, whose B is
  the cache). Free when the chip's PE multiplies the pair directly
  (``core.array.mixed_input``, ``BxA``: e.g. ``int4xbf16``, ``fp8xbf16``); otherwise, with
  ``core.array.dequant = "vector"``, :data:`DEQUANT_OPS_PER_ELEMENT` ops per B element
  (``b_count × k × n``: the weights once per GEMM; every K and V element read, per layer per
  step, for attention): B streams from DRAM at its narrow width (the GEMM's own B bytes) and
  is expanded on chip. Unless the vector unit hands operands to the array directly
  (``core.vector.on_array_input_path``: registers into the MMA, as on a GPU), it reads the
  narrow tile from the scratchpad and writes it back expanded, and the array then reads it
  at A's width: on-chip bytes of ``2 × b_count × k × n × A's element bytes`` at the
  scratchpad bandwidth (the narrow read plus the array's wider re-read, and the expanded
  write).
* ``<gemm>.quant`` (kind ``scale``): a GEMM whose output C is block-scaled (MXFP8 activations
  out of a layer) quantises it block by block: per block the largest magnitude, its exponent
  and the shared scale, per element the scaled and rounded value:
  :data:`QUANT_OPS_PER_ELEMENT` ops per output element plus :data:`QUANT_OPS_PER_BLOCK` per
  block, on the vector unit unless the array's output path has a quantiser
  (``core.array.output_quant = "array"``). It reads the accumulators on their way out and
  the engine writes the narrow C: no bytes of its own.
* ``<op>.quant`` (kind ``scale``) beside a vector op whose output is stored block-scaled (a
  norm's, RoPE's, SwiGLU's, a residual add's result in MXFP8 or NVFP4 activations; the input
  gradients of the backward vector ops): the same count per output element and block,
  inside the producing kernel (:func:`vector_quant_op`).
* ``<linear>.wgrad.colquant`` (kind ``scale``) beside a weight-gradient GEMM with block-scaled
  operands (MXFP8 training): the columnwise copies of the forward input X and the output
  gradient dY that it reads along the tokens, quantised and written to DRAM
  (:func:`columnwise_quant_op`); the weights' columnwise copy is the optimizer's
  (:func:`~diptych.workloads.train.adamw_op`).

A fused attention (:class:`~diptych.workloads.fused_attention.FusedAttention`) runs its GEMMs
on chip: its parts get the rescale, dequant and quant ops above (not the scales: its DRAM traffic
counts them), as ops beside the record, which keeps its parts and traffic unchanged. When V
is a slice of K's tensor (MLA's latent cache: the record is tagged ``kv_shared``), the cache
is expanded once, for the scores. The PV product's quant op (its output O) and the scores'
(which stands for the probabilities P, the PV product's A operand: the same ``rows × keys``
elements in blocks along the keys) are both charged.

Under ``execution="sum"`` these ops run after one another and before their GEMM (no overlap:
an upper bound); under ``execution="schedule"`` they are nodes of the program that the list
scheduler may overlap with independent array work, as a pipelined kernel (Marlin) overlaps
dequantisation with its weight loads: each reads the GEMM's B operand for ordering only when
the block makes it (a weight, an import or a stored KV cache is there from the start) and
writes a token the GEMM waits for.
"""

from __future__ import annotations

import dataclasses
import math

from ...arch.dtypes import element_bits, fmt, scale_count
from ...workloads.fused_attention import FusedAttention
from ...workloads.graph import Workload
from ...workloads.program import Access, Block, Use
from ...workloads.ops import Gemm, VectorOp
from ...workloads.program import Tensor
from ...workloads.serving_step import base_name
from ...workloads.quant import (DEQUANT_OPS_PER_ELEMENT, HOLDS_ARRAY_TAG, IN_KERNEL_TAG,
                                PROMOTE_OPS_PER_ELEMENT, RESCALE_OPS_PER_ELEMENT, _quant_op,
                                columnwise_quant_op, rescale_block, vector_quant_op)
from ...workloads.recipe import SPLIT_ACC_TAG
from ..support import dequant_place, expanded_b_bits


def _on_chip(name: str, kind: str, elements: int, ops: float, nbytes: float, dtype: str
             ) -> VectorOp:
    """A precision op whose ``nbytes`` read and ``nbytes`` written are all scratchpad
    traffic (no DRAM byte)."""
    return VectorOp(name=name, kind=kind, elements=elements, ops_per_element=ops,
                    read_bytes=nbytes, write_bytes=nbytes, scratchpad_read_bytes=nbytes,
                    scratchpad_write_bytes=nbytes, dtype=dtype, tags=("precision",))


def _partial_sums(g: Gemm, chip, interval_k: int) -> tuple[int, float]:
    """The partial sums GEMM ``g`` hands the vector unit once every ``interval_k`` elements of
    K (a rescale's K-block, a promotion interval): their count (``batch × m × n ×
    ceil(k / interval_k)``) and the bytes each of the scratchpad's write and read moves at the
    accumulator's width (0 when the vector unit reads the accumulators directly,
    ``core.vector.on_array_output_path``)."""
    e = g.batch * g.m * g.n * math.ceil(g.k / interval_k)
    return e, (0.0 if chip.core.vector.on_array_output_path
               else e * element_bits(g.acc_dtype) / 8)


def _plain_fp8(dtype: str) -> bool:
    """Whether ``dtype`` is 8-bit floating point without a block scale."""
    f = fmt(dtype)
    return f.element == "fp8" and f.element_bits == 8 and not f.block_scaled


def promote_op(g: Gemm, chip) -> VectorOp | None:
    """The exposed promotions of split-accumulator GEMM ``g`` on ``chip`` (module docstring,
    ``<gemm>.promote``), or None: ``g`` not tagged :data:`~diptych.workloads.recipe.
    SPLIT_ACC_TAG`, an operand that is not plain 8-bit floating point (a BF16 or a
    block-scaled product: the split accumulator is FP8 tensor cores' fast accumulation turned
    off), ``chip`` without a ``[split_accumulator]`` table, or all of it hidden
    (``overlap = 1``)."""
    table = chip.split_accumulator
    if (table is None or SPLIT_ACC_TAG not in g.tags or table.overlap >= 1.0
            or not (_plain_fp8(g.a_dtype) and _plain_fp8(g.b_dtype))):
        return None
    e, nbytes = _partial_sums(g, chip, table.promotion_interval_k)
    op = _on_chip(f"{g.name}.promote", "scale", e, PROMOTE_OPS_PER_ELEMENT * (1.0 - table.overlap),
                  nbytes, "fp32")
    return dataclasses.replace(op, tags=op.tags + (HOLDS_ARRAY_TAG,))


def precision_ops(g: Gemm, chip, *, scales: bool = True, dequant: bool = True
                  ) -> list[VectorOp]:
    """The ops ``chip`` runs beside GEMM ``g`` for its precision (module docstring), in the
    order they run before it; ``scales=False`` leaves out the scale stream, ``dequant=False``
    the expansion of B (:func:`attention_precision_ops`)."""
    out = []
    rd = g.a_scale_bytes + g.b_scale_bytes
    wr = g.c_scale_bytes
    if scales and (rd or wr):
        n = (scale_count(g.a_dtype, g.batch * g.m, g.k)
             + scale_count(g.b_dtype, g.b_count * g.n, g.k)
             + scale_count(g.c_dtype, g.batch * g.m, g.n))
        out.append(VectorOp(name=f"{g.name}.scales", kind="copy", elements=max(1, n),
                            ops_per_element=0.0, read_bytes=rd, write_bytes=wr,
                            dtype=g.c_dtype, tags=("precision",)))
    block = rescale_block(g)
    if block and chip.core.array.block_scale == "vector":
        e, nbytes = _partial_sums(g, chip, block)
        out.append(_on_chip(f"{g.name}.rescale", "scale", e, RESCALE_OPS_PER_ELEMENT, nbytes,
                            "fp32"))
    elif not block:
        promote = promote_op(g, chip)
        if promote is not None:
            out.append(promote)
    if dequant and dequant_place(chip, g) == "vector":
        # the expanded copy goes through the scratchpad at A's width unless the vector unit
        # feeds the array (the mapper sizes its tiles by the same rule)
        e = g.b_count * g.k * g.n
        out.append(_on_chip(f"{g.name}.dequant", "dequant", e, DEQUANT_OPS_PER_ELEMENT,
                            e * expanded_b_bits(chip, g) / 8, g.a_dtype))
    col = columnwise_quant_op(g)
    if col is not None:
        out.append(col)
    if fmt(g.c_dtype).block_scaled and chip.core.array.output_quant == "vector":
        out.append(_quant_op(f"{g.name}.quant", g.batch * g.m * g.n,
                             scale_count(g.c_dtype, g.batch * g.m, g.n), g.c_dtype))
    return out


def attention_precision_ops(op: FusedAttention, chip) -> list[VectorOp]:
    """The ops ``chip`` runs beside fused attention ``op`` for the precision of the GEMMs it
    runs on chip (module docstring): its parts' rescale, dequant and quant ops, without the
    scale streams (the record's DRAM traffic counts them) and, when V is a slice of K's
    tensor (``kv_shared``), without a second expansion of the cache. The ops of a serving
    step's sequence group ``g > 0`` (a record named ``name@g``,
    :func:`~diptych.workloads.serving_step.lower_step`) carry its mark too
    (``attn_scores@g.quant``): each group's are its own."""
    shared = "kv_shared" in op.tags
    ops = [x for i, g in enumerate(op.gemms)
           for x in precision_ops(g, chip, scales=False, dequant=not (shared and i > 0))]
    mark = op.name[len(base_name(op.name)):]
    if not mark:
        return ops
    return [dataclasses.replace(x, name=f"{stem}{mark}.{suffix}")
            for x in ops for stem, suffix in (x.name.rsplit(".", 1),)]


def _ordering_reads(op, acc: Access, kinds: dict, made: set) -> tuple[Use, ...]:
    """What a precision op of ``op`` waits for (ordering-only reads; its bytes are the op's),
    among the tensors an earlier op of the block makes: a weight, an import or the stored KV
    cache is there from the start (an ordering read of one would count as a second read of it
    in the residency plan and put a backward block's import before its carried chain). A
    GEMM's: its B operand (not A, whose producer may fuse into the GEMM's prologue). A fused
    attention's over a stored KV cache: nothing (the cache's expansion may run ahead, as a
    weight's dequantisation does, not behind the step's new entries, one token); otherwise
    what it reads."""
    if isinstance(op, Gemm):
        uses = acc.of(mode="read", role="b")
    elif isinstance(op, VectorOp):
        # the quantisation of a vector op's output (fused into it): waiting for its inputs
        # would add a reader that keeps the op out of its GEMM's prologue or epilogue
        return ()
    else:
        uses = acc.of(mode="read")
        if any(kinds.get(u.tensor) == "kv_cache" and u.tensor not in made for u in uses):
            return ()
    return tuple(Use(u.tensor, "read", 0.0, "dep") for u in uses if u.tensor in made)


def _in_kernel(op, x: VectorOp, chip) -> bool:
    """Whether fused attention ``op`` runs beside its precision op ``x`` rather than after it:
    ``x`` expands its KV cache (a dequant op) on a chip whose vector unit hands operands to
    the array directly (``core.vector.on_array_input_path``).
    There the attention kernel converts each cache entry in registers on its way into the
    MMA, overlapped with its own loads of the cache (vLLM's paged attention
    ``fp8::scaled_convert``; TensorRT-LLM's XQA over an FP8 cache, which computes in FP16/BF16
    "reducing data loading and conversion" [S: NVIDIA/TensorRT-LLM docs/source/blogs/
    XQA-kernel.md; docs/source/advanced/gpt-attention.md, XQA support matrix]): the op keeps
    its vector-unit time and energy, which bound the step on a unit too slow for the stream,
    and the attention does not wait for it."""
    return (isinstance(op, FusedAttention) and x.kind == "dequant"
            and chip.core.vector.on_array_input_path)


def _with_ops(b: Block, chip) -> Block:
    ops, access, tensors = [], [], list(b.tensors)
    kinds = {t.name: t.kind for t in b.tensors + b.program_tensors}
    changed = False
    made: set[str] = set()      # tensors an earlier op of the block writes
    for i, op in enumerate(b.ops):
        extra = (precision_ops(op, chip) if isinstance(op, Gemm) else
                 attention_precision_ops(op, chip) if isinstance(op, FusedAttention) else
                 [q for q in (vector_quant_op(op),) if q] if isinstance(op, VectorOp) else [])
        acc = b.access[i] if b.access else None
        if extra:
            changed = True
        for x in extra:
            inside = _in_kernel(op, x, chip)
            if inside:
                x = dataclasses.replace(x, tags=x.tags + (IN_KERNEL_TAG,))
            ops.append(x)
            if acc is not None:
                # ordering reads only (_ordering_reads); writes a token (named as the
                # precision op) the GEMM waits for, unless it is a stored cache's expansion
                # in an attention kernel's register path (:func:`_in_kernel`)
                tensors.append(Tensor(x.name, 0.0))
                access.append(Access(_ordering_reads(op, acc, kinds, made)
                                     + (Use(x.name, "write"),)))
                if not inside:
                    acc = Access(acc.uses + (Use(x.name, "read", 0.0, "dep"),), acc.rmw)
        ops.append(op)
        if acc is not None:
            access.append(acc)
            made.update(acc.writes + acc.updates)
    if not changed:
        return b
    return b.with_ops(ops, access if b.access else None, tensors=tuple(tensors))


def with_precision_ops(w: Workload, chip) -> Workload:
    """``w`` with :func:`precision_ops` before every GEMM and :func:`attention_precision_ops`
    before every fused attention that needs them on ``chip`` (the same workload when none
    does)."""
    blocks = tuple(_with_ops(b, chip) for b in w.blocks)
    if all(x is y for x, y in zip(blocks, w.blocks)):
        return w
    return dataclasses.replace(w, blocks=blocks)
