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

A fused attention (:class:`~diptych.workloads.fused.FusedAttention`) runs its GEMMs on chip:
its parts get the rescale, dequant and quant ops above (not the scales: its DRAM traffic
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

from ..arch.dtypes import dtype_bytes, element_bits, fmt, scale_count
from ..sim.ops import Gemm, VectorOp, expanded_b_bits, mixed_pair, narrow_b
from ..sim.program import Tensor
from .fused import FusedAttention
from .graph import Access, Block, Use, Workload

#: Vector ops to expand one narrow element (a weight or a KV-cache entry) to the compute
#: dtype [assumption, counted]: one to unpack and convert (the LOP3 / magic-number int4 →
#: fp16 conversion of FasterTransformer and Marlin, vLLM paged attention's ``fp8::
#: scaled_convert`` of FP8 KV entries, or a table lookup for E2M1) and one multiply-add with
#: the group's or block's scale (and zero point).
DEQUANT_OPS_PER_ELEMENT = 2.0
#: Vector ops per output element per K-block when block scales are applied on the vector
#: unit [assumption, counted]: multiply the block's partial sum by the product of its two
#: scales, add it to the FP32 sum (the scale product itself is shared by a whole row/column
#: of the block and not counted).
RESCALE_OPS_PER_ELEMENT = 2.0
#: Vector ops per output element to quantise a product's output to a block-scaled dtype
#: [assumption, counted from the conversion of OCP MX v1.0 §6.3: the shared exponent is
#: floor(log2(max |V_i|)) − emax of the element format, P_i = quantize(V_i / X)]: |x| and
#: the running max over the block (2), the multiply by 1/X (X a power of two, or NVFP4's
#: E4M3 scale), the round/convert to the element format (1 + 1).
QUANT_OPS_PER_ELEMENT = 4.0
#: Vector ops per block of that quantisation [assumption, counted]: the block max's exponent
#: and the subtraction of the format's emax (E8M0), or NVFP4's amax / 6 and its rounding to
#: E4M3 (2).
QUANT_OPS_PER_BLOCK = 2.0


def dequant_place(chip, g: Gemm) -> str | None:
    """Where ``chip`` expands ``g``'s B operand: None (not a mixed GEMM), ``"pe"`` (its pair
    is in ``mixed_input``) or ``"vector"``. ValueError naming ``core.array.dequant`` when the
    chip has neither."""
    if not narrow_b(g):
        return None
    arr = chip.core.array
    pair = mixed_pair(g)
    if pair in arr.mixed_input:
        return "pe"
    if arr.dequant == "vector":
        return "vector"
    have = ", ".join(arr.mixed_input) or "none"
    what = "weights" if "weight" in g.tags else "B operand (a KV cache)"
    raise ValueError(f"chip {chip.name!r} cannot multiply {g.b_dtype} {what} by "
                     f"{g.a_dtype} activations: core.array.mixed_input lacks {pair!r} "
                     f"(it has: {have}) and core.array.dequant is {arr.dequant!r}; expected "
                     f"a listed pair or dequant = \"vector\"")


def rescale_block(g: Gemm) -> int:
    """K-block of the partial sums a block-scaled product rescales (the finer of A's and B's
    blocks); 0 when the product does not compute in a block-scaled dtype."""
    if not fmt(g.compute_dtype).block_scaled:
        return 0
    return min(b for b in (fmt(g.a_dtype).block, fmt(g.b_dtype).block) if b)


def _on_chip(name: str, kind: str, elements: int, ops: float, nbytes: float, dtype: str
             ) -> VectorOp:
    """A precision op whose ``nbytes`` read and ``nbytes`` written are all scratchpad
    traffic (no DRAM byte)."""
    return VectorOp(name=name, kind=kind, elements=elements, ops_per_element=ops,
                    read_bytes=nbytes, write_bytes=nbytes, scratchpad_read_bytes=nbytes,
                    scratchpad_write_bytes=nbytes, dtype=dtype, tags=("precision",))


def _quant_op(name: str, elements: int, blocks: int, dtype: str, write_bytes: float = 0.0
              ) -> VectorOp:
    """A block quantisation on the vector unit: :data:`QUANT_OPS_PER_ELEMENT` per element
    plus :data:`QUANT_OPS_PER_BLOCK` per block, no read, ``write_bytes`` written."""
    return VectorOp(name=name, kind="scale", elements=elements,
                    ops_per_element=QUANT_OPS_PER_ELEMENT
                    + QUANT_OPS_PER_BLOCK * blocks / elements, read_bytes=0.0,
                    write_bytes=write_bytes, dtype=dtype, tags=("precision",))


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
    vec = chip.core.vector
    block = rescale_block(g)
    if block and chip.core.array.block_scale == "vector":
        e = g.batch * g.m * g.n * math.ceil(g.k / block)
        out.append(_on_chip(f"{g.name}.rescale", "scale", e, RESCALE_OPS_PER_ELEMENT,
                            0.0 if vec.on_array_output_path
                            else e * element_bits(g.acc_dtype) / 8, "fp32"))
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


#: Vector-op kinds whose output is not block-quantised by :func:`vector_quant_op`: copies
#: and gathers (a KV-cache write, an embedding lookup) move their input's blocks with their
#: scales, top-k writes routing indices and weights that no product reads, and the
#: precision ops themselves.
_NO_OUTPUT_QUANT = ("copy", "embedding", "topk", "optimizer", "dequant", "scale")


def vector_quant_op(op: VectorOp) -> VectorOp | None:
    """``<op>.quant``: the block quantisation of vector op ``op``'s output when it is stored
    in a block-scaled dtype (MXFP8 or NVFP4 activations: a norm's, an activation function's,
    a residual add's, an unfused softmax's result, the next product's A operand, and in
    training the input gradients the backward vector ops write), else None.

    The lowering writes a vector op's output in the activations' dtype (``op.dtype``, at
    ``dtype_bytes`` per element: elements and scales), so its output elements are
    ``write_bytes / dtype_bytes(op.dtype)``; each is quantised as a GEMM's block-scaled output
    is (:data:`QUANT_OPS_PER_ELEMENT` per element, :data:`QUANT_OPS_PER_BLOCK` per block of
    ``fmt(op.dtype).block`` along the row: the lowering's rows, hidden size, head_dim and the
    MLP width per rank, are whole blocks). On the vector unit, inside the producing kernel
    (the values are its own; Transformer Engine fuses the cast into its normalisation and
    activation kernels), so no launch and no bytes of its own: the op's ``write_bytes``
    already count the narrow output and its scales."""
    f = fmt(op.dtype)
    if (not f.block_scaled or op.kind in _NO_OUTPUT_QUANT or "precision" in op.tags
            or op.ops_per_element == 0 or op.write_bytes <= 0):
        return None
    e = max(1, round(op.write_bytes / dtype_bytes(op.dtype)))
    return _quant_op(f"{op.name}.quant", e, math.ceil(e / f.block), op.dtype)


def columnwise_quant_op(g: Gemm) -> VectorOp | None:
    """``<g>.colquant``: the columnwise (transposed) copies a weight-gradient GEMM ``g``
    (``dW = Xᵀ·dY``, named ``<linear>.wgrad``) reads, when they are block-scaled (MXFP8
    training), else None (docs/precision.md, "Backward GEMMs").

    Both of its operands are read along the tokens, the dimension along which neither was
    quantised when it was made (X, the forward input, and dY, the output gradient, are
    stored blocked along their rows' features, for the forward GEMM and the data-gradient
    GEMM), so each needs a second, columnwise MXFP8 copy with its own scales (Transformer
    Engine, "Performance considerations: handling transposes": *rowwise* and *columnwise*
    usages). The copy is quantised from the high-precision values, not from the rowwise copy
    (double quantisation): its producer, which holds them on chip (every activation and
    gradient is stored only block-scaled in this model), quantises them twice and writes
    both copies, as Transformer Engine's ``MXFP8Quantizer`` makes both usages in one pass
    over its input. Cost: :data:`QUANT_OPS_PER_ELEMENT` per element plus
    :data:`QUANT_OPS_PER_BLOCK` per block (blocks along the tokens: the scales ``g`` reads)
    on the vector unit, and the copy's DRAM write, elements and scales (``g``'s A and B
    bytes, what it reads); no read. One per weight GEMM: each forward input and each output
    gradient has one transposed reader, the weight-gradient GEMM. The weights' columnwise
    copy, read by the data-gradient GEMM, is made once per step by the optimizer
    (:func:`~diptych.workloads.train.adamw_op`)."""
    if "wgrad" not in g.tags or not g.name.endswith(".wgrad"):
        return None
    a, b = fmt(g.a_dtype).block_scaled, fmt(g.b_dtype).block_scaled
    if not (a or b):
        return None
    e = (g.batch * g.m * g.k if a else 0) + (g.b_count * g.k * g.n if b else 0)
    blocks = ((scale_count(g.a_dtype, g.batch * g.m, g.k) if a else 0)
              + (scale_count(g.b_dtype, g.b_count * g.n, g.k) if b else 0))
    return _quant_op(f"{g.name}.colquant", e, blocks, g.a_dtype if a else g.b_dtype,
                     write_bytes=(g.a_bytes if a else 0.0) + (g.b_bytes if b else 0.0))


def attention_precision_ops(op: FusedAttention, chip) -> list[VectorOp]:
    """The ops ``chip`` runs beside fused attention ``op`` for the precision of the GEMMs it
    runs on chip (module docstring): its parts' rescale, dequant and quant ops, without the
    scale streams (the record's DRAM traffic counts them) and, when V is a slice of K's
    tensor (``kv_shared``), without a second expansion of the cache."""
    shared = "kv_shared" in op.tags
    return [x for i, g in enumerate(op.gemms)
            for x in precision_ops(g, chip, scales=False, dequant=not (shared and i > 0))]


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
            ops.append(x)
            if acc is not None:
                # ordering reads only (_ordering_reads); writes a token (named as the
                # precision op) the GEMM waits for
                tensors.append(Tensor(x.name, 0.0))
                access.append(Access(_ordering_reads(op, acc, kinds, made)
                                     + (Use(x.name, "write"),)))
                acc = Access(acc.uses + (Use(x.name, "read", 0.0, "dep"),), acc.rmw)
        ops.append(op)
        if acc is not None:
            access.append(acc)
            made.update(acc.writes + acc.updates)
    if not changed:
        return b
    return dataclasses.replace(b, ops=tuple(ops), access=tuple(access) if b.access else (),
                               tensors=tuple(tensors))


def with_precision_ops(w: Workload, chip) -> Workload:
    """``w`` with :func:`precision_ops` before every GEMM and :func:`attention_precision_ops`
    before every fused attention that needs them on ``chip`` (the same workload when none
    does)."""
    blocks = tuple(_with_ops(b, chip) for b in w.blocks)
    if all(x is y for x, y in zip(blocks, w.blocks)):
        return w
    return dataclasses.replace(w, blocks=blocks)
