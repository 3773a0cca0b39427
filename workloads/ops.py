"""The op language between workloads/ and sim/: what the engine is asked to run.

Workloads lower models into lists of these frozen records; the engine maps and times each one
on a chip. Sizes are element counts; dtypes are names from :data:`diptych.arch.DTYPES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..arch.dtypes import check_dtype, dtype_bytes, element_bits, scale_bytes

VECTOR_KINDS = ("elementwise", "add", "mul", "silu", "gelu", "geglu", "swiglu", "rope",
                "softmax", "rmsnorm", "layernorm", "embedding", "optimizer", "copy", "topk",
                "dequant", "scale", "permute")
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
#: Where an operand of an op lives (the residency planner's locations, docs/program.md):
#: DRAM (the default: streamed through the DMA engines), or kept on chip between ops in the
#: cores' scratchpads or the shared buffer.
SOURCES = ("dram", "scratchpad", "shared_buffer")
#: The tag of a backward pass's op (workloads/train.py ``backward_ops``): the one tag
#: :func:`diptych.sim.simulate` keeps on a vector op, since a stack's kernel rate may differ
#: by direction (sim/vector.py ``stream_fraction``).
BACKWARD_TAG = "bwd"


def _check_source(name: str, value) -> None:
    if value not in SOURCES:
        raise ValueError(f"{name} must be one of {', '.join(SOURCES)}, not {value!r}")


def _check_bytes(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer number of bytes >= 0, not {value!r}")


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class Gemm:
    """``batch`` independent products ``C[m×n] = A[m×k] · B[k×n]``.

    ``b_is_weight`` marks B as a weight matrix shared by the whole batch (read once per use);
    otherwise each batch element has its own B (e.g. attention over a KV cache).
    ``a_dtype``/``b_dtype`` are the input precisions, ``c_dtype`` the stored output precision,
    ``acc_dtype`` the accumulator's. The array runs in ``compute_dtype`` (defaults to the wider
    of the inputs).

    Bytes (``a_bytes``, ``b_bytes``, ``c_bytes``) are each operand's elements at their element
    bits plus, for a block-scaled dtype (MX, NVFP4), its scales: A (m × k) and B (k × n) are
    blocked along k, C (m × n) along n (it is the next product's A), ``rows × ceil(len /
    block)`` scales each (a partial last block is padded), plus the per-tensor scale once
    per operand (docs/precision.md). The engine moves the element tiles; the scale streams
    (``*_scale_bytes``) are charged by the op that loads them
    (:mod:`diptych.workloads.quant`).

    Residency (docs/engine.md, "Resident operands"; all part of the memo and cache keys, and
    the defaults time the op exactly as before they existed): ``a_source``/``b_source`` say
    where A and B are read from and ``c_dest`` where C is written (:data:`SOURCES`): an
    operand in the ``scratchpad`` streams into the tile slots at the core's scratchpad
    bandwidth, one in the ``shared_buffer`` at the array's share of its bandwidth, neither
    moves a DRAM byte. ``resident_bytes``: bytes of the scratchpads (all cores together) held
    by tensors the residency planner keeps there during this op; the tiling capacity of each
    core shrinks by its share (never below the ``[residency] reserve_fraction`` of it).

    ``c_accumulate``: the product is added into C's existing contents, ``C += A·B`` (cuBLAS's
    ``beta = 1`` with C and D the same buffer): the kernel reads C (``c_read_bytes``) as
    well as writing it. A weight-gradient GEMM accumulating into the optimizer's gradient
    buffer runs so (:func:`diptych.workloads.train.backward_ops`, docs/workloads.md).
    """

    name: str
    m: int
    k: int
    n: int
    batch: int = 1
    a_dtype: str = "bf16"
    b_dtype: str = "bf16"
    c_dtype: str = "bf16"
    acc_dtype: str = "fp32"
    b_is_weight: bool = True
    tags: tuple[str, ...] = field(default=())
    # residency (phase 2b of issue 9): where each operand lives; defaults = all in DRAM
    a_source: str = "dram"
    b_source: str = "dram"
    c_dest: str = "dram"
    resident_bytes: int = 0
    c_accumulate: bool = False

    def __post_init__(self):
        for n in ("m", "k", "n", "batch"):
            _positive_int(n, getattr(self, n))
        if not isinstance(self.c_accumulate, bool):
            raise ValueError(f"c_accumulate must be true or false, not {self.c_accumulate!r}")
        for n in ("a_dtype", "b_dtype", "c_dtype", "acc_dtype"):
            check_dtype(getattr(self, n), n)
        for n in ("a_source", "b_source", "c_dest"):
            _check_source(n, getattr(self, n))
        _check_bytes("resident_bytes", self.resident_bytes)

    @property
    def on_chip(self) -> bool:
        """True when some operand lives on chip (the engine's resident paths are used)."""
        return (self.a_source, self.b_source, self.c_dest) != ("dram",) * 3

    @property
    def compute_dtype(self) -> str:
        return self.a_dtype if dtype_bytes(self.a_dtype) >= dtype_bytes(self.b_dtype) else self.b_dtype

    @property
    def macs(self) -> int:
        return self.batch * self.m * self.k * self.n

    @property
    def flops(self) -> int:
        return 2 * self.macs

    # ---- byte accounting (element bytes + block scales; docs/precision.md) ---------------
    @property
    def b_count(self) -> int:
        """Distinct B matrices: 1 for a shared weight, else one per batch element."""
        return 1 if self.b_is_weight else self.batch

    @property
    def a_scale_bytes(self) -> float:
        return scale_bytes(self.a_dtype, self.batch * self.m, self.k)

    @property
    def b_scale_bytes(self) -> float:
        return scale_bytes(self.b_dtype, self.b_count * self.n, self.k)

    @property
    def c_scale_bytes(self) -> float:
        return scale_bytes(self.c_dtype, self.batch * self.m, self.n)

    @property
    def a_element_bytes(self) -> float:
        """A's element bytes without its scales: what the engine moves (a block-scaled
        operand's scales are its GEMM's ``.scales`` op, sim/run/precision_ops.py)."""
        return self.batch * self.m * self.k * element_bits(self.a_dtype) / 8

    @property
    def b_element_bytes(self) -> float:
        return self.b_count * self.k * self.n * element_bits(self.b_dtype) / 8

    @property
    def c_element_bytes(self) -> float:
        return self.batch * self.m * self.n * element_bits(self.c_dtype) / 8

    @property
    def a_bytes(self) -> float:
        return self.a_element_bytes + self.a_scale_bytes

    @property
    def b_bytes(self) -> float:
        return self.b_element_bytes + self.b_scale_bytes

    @property
    def c_bytes(self) -> float:
        return self.c_element_bytes + self.c_scale_bytes

    @property
    def c_read_bytes(self) -> float:
        """Bytes of C the kernel reads back to add into (``c_accumulate``), else 0."""
        return self.c_element_bytes if self.c_accumulate else 0.0



def narrow_b(op) -> bool:
    """A product (a :class:`Gemm` or a view of one) whose B operand (weights, or a KV cache)
    is narrower than its A operand: it computes in A's dtype and B's elements are expanded to
    it, in the PE or on the vector unit (docs/precision.md, "Dequantisation")."""
    return dtype_bytes(op.b_dtype) < dtype_bytes(op.a_dtype)


def mixed_pair(op) -> str:
    """``BxA`` of a product (``core.array.mixed_input`` spelling: ``WEIGHTxACT``, or
    ``KVxACT`` for attention over a narrower KV cache)."""
    return f"{op.b_dtype}x{op.a_dtype}"



@dataclass(frozen=True, kw_only=True)
class VectorOp:
    """An op on the vector unit: ``elements`` outputs, ``ops_per_element`` ALU ops each,
    ``read_bytes`` in and ``write_bytes`` out.

    Residency (defaults: everything in DRAM, timed exactly as before these fields existed):
    ``scratchpad_read_bytes``/``shared_buffer_read_bytes`` are the parts of ``read_bytes``
    read from tensors kept on chip, ``scratchpad_write_bytes``/``shared_buffer_write_bytes``
    the parts of ``write_bytes`` written to them; the rest crosses DRAM."""

    name: str
    kind: str
    elements: int
    ops_per_element: float
    read_bytes: float
    write_bytes: float
    dtype: str = "bf16"
    tags: tuple[str, ...] = field(default=())
    # residency (phase 2b of issue 9): bytes served on chip; defaults = all in DRAM
    scratchpad_read_bytes: float = 0.0
    shared_buffer_read_bytes: float = 0.0
    scratchpad_write_bytes: float = 0.0
    shared_buffer_write_bytes: float = 0.0

    def __post_init__(self):
        if self.kind not in VECTOR_KINDS:
            raise ValueError(f"kind must be one of {', '.join(VECTOR_KINDS)}, not {self.kind!r}")
        _positive_int("elements", self.elements)
        for n in ("ops_per_element", "read_bytes", "write_bytes", "scratchpad_read_bytes",
                  "shared_buffer_read_bytes", "scratchpad_write_bytes",
                  "shared_buffer_write_bytes"):
            if getattr(self, n) < 0:
                raise ValueError(f"{n} must be >= 0, not {getattr(self, n)!r}")
        for io in ("read", "write"):
            on = getattr(self, f"scratchpad_{io}_bytes") + getattr(self, f"shared_buffer_{io}_bytes")
            if on > getattr(self, f"{io}_bytes") * (1 + 1e-12):
                raise ValueError(f"scratchpad_{io}_bytes + shared_buffer_{io}_bytes ({on:.6g}) "
                                 f"must be at most {io}_bytes ({getattr(self, f'{io}_bytes'):.6g})")
        check_dtype(self.dtype)

    @property
    def dram_read_bytes(self) -> float:
        """The part of ``read_bytes`` that crosses DRAM."""
        return max(0.0, self.read_bytes - self.scratchpad_read_bytes
                   - self.shared_buffer_read_bytes)

    @property
    def dram_write_bytes(self) -> float:
        """The part of ``write_bytes`` that crosses DRAM."""
        return max(0.0, self.write_bytes - self.scratchpad_write_bytes
                   - self.shared_buffer_write_bytes)

    @property
    def flops(self) -> float:
        return self.elements * self.ops_per_element


@dataclass(frozen=True, kw_only=True)
class Collective:
    """A collective over ``group`` chips moving a ``bytes``-sized buffer per chip.

    ``torus_shape``/``torus_axes``: a group that is a sub-grid of a torus slice (the 2-D
    tensor-parallel layout's X or YZ axis, :mod:`~diptych.workloads.tp2d`): the whole
    slice's sides and the indices of the sides this group spans (their product is
    ``group``); empty: the group is a slice of its own."""

    name: str
    kind: str
    bytes: float
    group: int
    tags: tuple[str, ...] = field(default=())
    torus_shape: tuple[int, ...] = field(default=())
    torus_axes: tuple[int, ...] = field(default=())

    def __post_init__(self):
        if self.kind not in COLLECTIVE_KINDS:
            raise ValueError(f"kind must be one of {', '.join(COLLECTIVE_KINDS)}, not {self.kind!r}")
        _positive_int("group", self.group)
        if self.bytes < 0:
            raise ValueError(f"bytes must be >= 0, not {self.bytes!r}")
        if self.torus_axes and math.prod(self.torus_shape[i] for i in self.torus_axes) \
                != self.group:
            raise ValueError(f"torus_axes {self.torus_axes!r} of torus_shape "
                             f"{self.torus_shape!r} must span group ({self.group}) chips")


Op = Gemm | VectorOp | Collective


#: An op tagged ``launch:<key>`` belongs to the launch group ``<key>`` of its block: the
#: group's nodes run as ONE kernel (a serving engine's varlen attention over all the step's
#: sequences of a layer, :func:`~diptych.workloads.serving_step.lower_step`) and pay one launch per
#: block copy, charged on the first of them in the scheduler's priority order.
LAUNCH_TAG = "launch:"


def launch_group(op) -> str | None:
    """The launch group of ``op`` (its ``launch:<key>`` tag's key), or None: its own."""
    for t in getattr(op, "tags", ()):
        if t.startswith(LAUNCH_TAG):
            return t[len(LAUNCH_TAG):]
    return None
