"""The precision ops a lowering emits on its own, without a chip: the block quantisation of a
vector op's block-scaled output and the columnwise copies a block-scaled weight-gradient GEMM
reads (docs/precision.md, "The precision ops"), with the op counts every precision op is
charged by. Which further ops a chip runs beside each GEMM (scale streams, rescaling,
dequantisation) depends on its datapath: :mod:`diptych.sim.run.precision_ops`.
"""

from __future__ import annotations

import math

from ..arch.dtypes import dtype_bytes, fmt, scale_count
from .ops import Gemm, VectorOp

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
#: Vector ops per output element per promotion of a split-accumulator GEMM's partial sum
#: (a chip's ``[split_accumulator]``) [counted: NVIDIA/cutlass
#: include/cutlass/gemm/collective/fp8_accumulation.hpp ``promote_core``, ``accum_(i) +=
#: accum_temp_(i)``: one FP32 add; the next MMA starts its partial sum from zero].
PROMOTE_OPS_PER_ELEMENT = 1.0
#: The tag of a precision op whose time the matrix products of its GEMM wait out (a split
#: accumulator's exposed promotions: the share its kernel does not hide under other MMAs): the
#: program scheduler holds the arrays for it as well as the vector unit, so no other array
#: work hides it a second time (sim/run/scheduled.py).
HOLDS_ARRAY_TAG = "holds_array"
#: The tag of a precision op that runs inside its fused attention kernel: a stored KV
#: cache's expansion converted in registers on its way into the MMA
#: (:func:`diptych.sim.run.precision_ops._in_kernel`); a schedule does not make the attention
#: wait for it, the summed model adds its time to the attention's compute term.
IN_KERNEL_TAG = "in_kernel"
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


def rescale_block(g: Gemm) -> int:
    """K-block of the partial sums a block-scaled product rescales (the finer of A's and B's
    blocks); 0 when the product does not compute in a block-scaled dtype."""
    if not fmt(g.compute_dtype).block_scaled:
        return 0
    return min(b for b in (fmt(g.a_dtype).block, fmt(g.b_dtype).block) if b)


def _quant_op(name: str, elements: int, blocks: int, dtype: str, write_bytes: float = 0.0
              ) -> VectorOp:
    """A block quantisation on the vector unit: :data:`QUANT_OPS_PER_ELEMENT` per element
    plus :data:`QUANT_OPS_PER_BLOCK` per block, no read, ``write_bytes`` written."""
    return VectorOp(name=name, kind="scale", elements=elements,
                    ops_per_element=QUANT_OPS_PER_ELEMENT
                    + QUANT_OPS_PER_BLOCK * blocks / elements, read_bytes=0.0,
                    write_bytes=write_bytes, dtype=dtype, tags=("precision",))


#: Vector-op kinds whose output is not block-quantised by :func:`vector_quant_op`: copies
#: and gathers (a KV-cache write, an embedding lookup, an MoE permute) move their input's
#: blocks with their scales, top-k writes routing indices and weights that no product reads,
#: and the precision ops themselves.
_NO_OUTPUT_QUANT = ("copy", "embedding", "topk", "optimizer", "dequant", "scale", "permute")


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


