"""The op language between workloads/ and sim/: what the engine is asked to run.

Workloads lower models into lists of these frozen records; the engine maps and times each one
on a chip. Sizes are element counts; dtypes are names from :data:`diptych.arch.DTYPES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..arch.dtypes import check_dtype, dtype_bytes

VECTOR_KINDS = ("elementwise", "add", "mul", "silu", "gelu", "swiglu", "rope", "softmax",
                "rmsnorm", "layernorm", "embedding", "optimizer", "copy", "topk")
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


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

    def __post_init__(self):
        for n in ("m", "k", "n", "batch"):
            _positive_int(n, getattr(self, n))
        for n in ("a_dtype", "b_dtype", "c_dtype", "acc_dtype"):
            check_dtype(getattr(self, n), n)

    @property
    def compute_dtype(self) -> str:
        return self.a_dtype if dtype_bytes(self.a_dtype) >= dtype_bytes(self.b_dtype) else self.b_dtype

    @property
    def macs(self) -> int:
        return self.batch * self.m * self.k * self.n

    @property
    def flops(self) -> int:
        return 2 * self.macs

    @property
    def a_bytes(self) -> float:
        return self.batch * self.m * self.k * dtype_bytes(self.a_dtype)

    @property
    def b_bytes(self) -> float:
        nb = 1 if self.b_is_weight else self.batch
        return nb * self.k * self.n * dtype_bytes(self.b_dtype)

    @property
    def c_bytes(self) -> float:
        return self.batch * self.m * self.n * dtype_bytes(self.c_dtype)


@dataclass(frozen=True, kw_only=True)
class VectorOp:
    """An op on the vector unit: ``elements`` outputs, ``ops_per_element`` ALU ops each,
    ``read_bytes`` in from DRAM and ``write_bytes`` out to DRAM."""

    name: str
    kind: str
    elements: int
    ops_per_element: float
    read_bytes: float
    write_bytes: float
    dtype: str = "bf16"
    tags: tuple[str, ...] = field(default=())

    def __post_init__(self):
        if self.kind not in VECTOR_KINDS:
            raise ValueError(f"kind must be one of {', '.join(VECTOR_KINDS)}, not {self.kind!r}")
        _positive_int("elements", self.elements)
        for n in ("ops_per_element", "read_bytes", "write_bytes"):
            if getattr(self, n) < 0:
                raise ValueError(f"{n} must be >= 0, not {getattr(self, n)!r}")
        check_dtype(self.dtype)

    @property
    def flops(self) -> float:
        return self.elements * self.ops_per_element


@dataclass(frozen=True, kw_only=True)
class Collective:
    """A collective over ``group`` chips moving a ``bytes``-sized buffer per chip."""

    name: str
    kind: str
    bytes: float
    group: int
    tags: tuple[str, ...] = field(default=())

    def __post_init__(self):
        if self.kind not in COLLECTIVE_KINDS:
            raise ValueError(f"kind must be one of {', '.join(COLLECTIVE_KINDS)}, not {self.kind!r}")
        _positive_int("group", self.group)
        if self.bytes < 0:
            raise ValueError(f"bytes must be >= 0, not {self.bytes!r}")


Op = Gemm | VectorOp | Collective


def check_dataflows(chip, dataflow):
    """The dataflows to try for a GEMM on ``chip``: the requested one (validated) or all the
    chip supports."""
    from ..arch.chip import DATAFLOWS
    supported = chip.core.array.dataflows
    if dataflow is None:
        return tuple(supported)
    if dataflow not in DATAFLOWS:
        raise ValueError(f"dataflow must be one of {', '.join(DATAFLOWS)}, not {dataflow!r}")
    if dataflow not in supported:
        raise ValueError(f"dataflow {dataflow!r} is not supported by chip {chip.name!r} "
                         f"(supported: {', '.join(supported)})")
    return (dataflow,)
