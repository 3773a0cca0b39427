"""Where a chip pays for block scales and weight dequantisation: ops beside each GEMM.

The lowering (``workloads/lower.py``) is chip-independent; :func:`with_precision_ops` adds,
for one chip, the work a GEMM's precision implies beyond its MACs, as ops the engine already
times (docs/precision.md):

* ``<gemm>.scales`` (kind ``copy``): the shared scales of block-scaled operands (MX, NVFP4)
  loaded from DRAM (A's and B's) and stored (C's), ``Gemm.a_scale_bytes + b_scale_bytes`` read
  and ``c_scale_bytes`` written, no ALU work. The engine moves the element tiles; this op
  moves the scale stream beside them (charged after them: exact when the GEMM is
  memory-bound, an over-count of at most the scale bytes' transfer time when it is not).
* ``<gemm>.rescale`` (kind ``scale``), only when the chip applies block scales on the vector
  unit (``core.array.block_scale = "vector"``) and the GEMM computes in a block-scaled dtype:
  the array accumulates each K-block's partial sum unscaled and the vector unit multiplies it
  by the two blocks' scales and adds it to the FP32 sum: :data:`RESCALE_OPS_PER_ELEMENT` ops
  per output element per K-block (``batch × m × n × ceil(k / block)`` elements). With
  ``"pe"`` the datapath applies the scale (an exponent add for E8M0) at no extra time.
* ``<gemm>.dequant`` (kind ``dequant``): a weight GEMM whose weights are narrower than its
  activations (W4A16, W4A8, W8A16) on a chip whose PE does not multiply that pair directly
  (``core.array.mixed_input``) and that expands weights on the vector unit
  (``core.array.dequant = "vector"``): :data:`DEQUANT_OPS_PER_ELEMENT` ops per weight element,
  once per GEMM (``b_count × k × n`` elements): the weights stream from DRAM at their narrow
  width (the GEMM's own B bytes) and are expanded on chip. A pair in ``mixed_input`` costs
  nothing beyond the activation dtype's MACs.

Under ``execution="sum"`` these ops run after one another and before their GEMM (no overlap:
an upper bound); under ``execution="schedule"`` they are nodes of the program that the list
scheduler may overlap with independent array work, as a pipelined kernel (Marlin) overlaps
dequantisation with its weight loads.
"""

from __future__ import annotations

import dataclasses
import math

from ..arch.dtypes import dtype_bytes, fmt, scale_count
from ..sim.ops import Gemm, VectorOp
from ..sim.program import Tensor
from .graph import Access, Block, Use, Workload

#: Vector ops to expand one narrow weight element to the activation dtype [assumption,
#: counted]: one to unpack and convert (the LOP3 / magic-number int4 → fp16 conversion of
#: FasterTransformer and Marlin, or a table lookup for E2M1) and one multiply-add with the
#: group's or block's scale (and zero point).
DEQUANT_OPS_PER_ELEMENT = 2.0
#: Vector ops per output element per K-block when block scales are applied on the vector
#: unit [assumption, counted]: multiply the block's partial sum by the product of its two
#: scales, add it to the FP32 sum (the scale product itself is shared by a whole row/column
#: of the block and not counted).
RESCALE_OPS_PER_ELEMENT = 2.0


def needs_dequant(g: Gemm) -> bool:
    """A weight GEMM whose weights are narrower than its activations (compute in A's dtype)."""
    return "weight" in g.tags and dtype_bytes(g.b_dtype) < dtype_bytes(g.a_dtype)


def mixed_pair(g: Gemm) -> str:
    """``WEIGHTxACT`` of a weight GEMM (``core.array.mixed_input`` spelling)."""
    return f"{g.b_dtype}x{g.a_dtype}"


def dequant_place(chip, g: Gemm) -> str | None:
    """Where ``chip`` expands ``g``'s weights: None (not a mixed GEMM), ``"pe"`` (its pair is
    in ``mixed_input``) or ``"vector"``. ValueError naming ``core.array.dequant`` when the
    chip has neither."""
    if not needs_dequant(g):
        return None
    arr = chip.core.array
    pair = mixed_pair(g)
    if pair in arr.mixed_input:
        return "pe"
    if arr.dequant == "vector":
        return "vector"
    have = ", ".join(arr.mixed_input) or "none"
    raise ValueError(f"chip {chip.name!r} cannot multiply {g.b_dtype} weights by "
                     f"{g.a_dtype} activations: core.array.mixed_input lacks {pair!r} "
                     f"(it has: {have}) and core.array.dequant is {arr.dequant!r}; expected "
                     f"a listed pair or dequant = \"vector\"")


def rescale_block(g: Gemm) -> int:
    """K-block of the partial sums a block-scaled product rescales (the finer of A's and B's
    blocks); 0 when the product does not compute in a block-scaled dtype."""
    if not fmt(g.compute_dtype).block_scaled:
        return 0
    return min(b for b in (fmt(g.a_dtype).block, fmt(g.b_dtype).block) if b)


def precision_ops(g: Gemm, chip) -> list[VectorOp]:
    """The ops ``chip`` runs beside GEMM ``g`` for its precision (module docstring), in the
    order they run before it."""
    out = []
    rd = g.a_scale_bytes + g.b_scale_bytes
    wr = g.c_scale_bytes
    if rd or wr:
        n = (scale_count(g.a_dtype, g.batch * g.m, g.k)
             + scale_count(g.b_dtype, g.b_count * g.n, g.k)
             + scale_count(g.c_dtype, g.batch * g.m, g.n))
        out.append(VectorOp(name=f"{g.name}.scales", kind="copy", elements=max(1, n),
                            ops_per_element=0.0, read_bytes=rd, write_bytes=wr,
                            dtype=g.c_dtype, tags=("precision",)))
    block = rescale_block(g)
    if block and chip.core.array.block_scale == "vector":
        out.append(VectorOp(name=f"{g.name}.rescale", kind="scale",
                            elements=g.batch * g.m * g.n * math.ceil(g.k / block),
                            ops_per_element=RESCALE_OPS_PER_ELEMENT, read_bytes=0.0,
                            write_bytes=0.0, dtype="fp32", tags=("precision",)))
    if dequant_place(chip, g) == "vector":
        out.append(VectorOp(name=f"{g.name}.dequant", kind="dequant",
                            elements=g.b_count * g.k * g.n,
                            ops_per_element=DEQUANT_OPS_PER_ELEMENT, read_bytes=0.0,
                            write_bytes=0.0, dtype=g.a_dtype, tags=("precision",)))
    return out


def _with_ops(b: Block, chip) -> Block:
    ops, access, tensors = [], [], list(b.tensors)
    changed = False
    made: set[str] = set()      # tensors an earlier op of the block writes
    for i, op in enumerate(b.ops):
        extra = precision_ops(op, chip) if isinstance(op, Gemm) else []
        acc = b.access[i] if b.access else None
        if extra:
            changed = True
        for x in extra:
            ops.append(x)
            if acc is not None:
                # reads the GEMM's B operand for ordering only, when the block makes it (its
                # bytes are the GEMM's; not A, whose producer may fuse into the GEMM's
                # prologue; not a weight or an import, there from the start: an ordering
                # read of one would count as a second read of it in the residency plan and
                # put a backward block's import before its carried chain); writes a token
                # the GEMM waits for
                token = f"{op.name}.{x.name.rsplit('.', 1)[1]}"
                tensors.append(Tensor(token, 0.0))
                access.append(Access(tuple(Use(u.tensor, "read", 0.0, "dep")
                                           for u in acc.of(mode="read", role="b")
                                           if u.tensor in made)
                                     + (Use(token, "write"),)))
                acc = Access(acc.uses + (Use(token, "read", 0.0, "dep"),), acc.rmw)
        ops.append(op)
        if acc is not None:
            access.append(acc)
            made.update(acc.writes + acc.updates)
    if not changed:
        return b
    return dataclasses.replace(b, ops=tuple(ops), access=tuple(access) if b.access else (),
                               tensors=tuple(tensors))


def with_precision_ops(w: Workload, chip) -> Workload:
    """``w`` with :func:`precision_ops` before every GEMM that needs them on ``chip`` (the
    same workload when none does)."""
    blocks = tuple(_with_ops(b, chip) for b in w.blocks)
    if all(x is y for x, y in zip(blocks, w.blocks)):
        return w
    return dataclasses.replace(w, blocks=blocks)
