"""Datapath precisions known to diptych and their storage sizes (docs/precision.md).

Two families:

* **plain** formats (``int4 int8 fp8 bf16 fp16 fp32``): every element stands alone;
* **block-scaled** formats (``mxfp4 nvfp4 mxfp6 mxfp8 mxint8``): ``block`` consecutive
  elements along a GEMM's reduction dimension share one ``scale_bits``-bit scale. The OCP
  Microscaling (MX) formats v1.0 use 32-element blocks and an E8M0 (power-of-two) scale;
  NVIDIA's NVFP4 uses 16-element blocks of FP4 (E2M1), an E4M3 scale per block and one FP32
  scale per tensor. ``mxfp8`` stands for both MX FP8 element types (E4M3 and E5M2) and
  ``mxfp6`` for both FP6 ones (E2M3, E3M2): they cost the same bits and MACs; their numerics
  live in ``rtl/formats.py``.

Storage per element (:func:`dtype_bytes`) counts the shared scale:
``element_bits / 8 + scale_bits / 8 / block``, e.g. MXFP4 = 4/8 + 8/8/32 = 0.53125 B and NVFP4
= 4/8 + 8/8/16 = 0.5625 B; a whole tensor adds its per-tensor scale
(:func:`tensor_bytes`: 4 B for NVFP4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """How one dtype is stored: ``element_bits`` per element; ``block`` elements (along the
    reduction dimension) share one ``scale_bits``-bit ``scale`` (``block`` 0: no shared
    scale); ``tensor_scale_bytes`` once per tensor; ``element`` the plain dtype whose
    multiplier the element runs on (itself for a plain dtype)."""

    name: str
    element_bits: int
    element: str
    block: int = 0
    scale: str | None = None
    scale_bits: int = 0
    tensor_scale_bytes: int = 0

    @property
    def block_scaled(self) -> bool:
        return self.block > 0

    @property
    def bytes_per_element(self) -> float:
        """Element bits plus the block's scale bits per element, in bytes."""
        scale = self.scale_bits / self.block if self.block else 0.0
        return (self.element_bits + scale) / 8


#: Every dtype, plain ones first (narrowest first), then the block-scaled formats.
#: Sources: OCP Microscaling Formats (MX) Specification v1.0 (2023), Table 1: MXFP8 E5M2/E4M3,
#: MXFP6 E3M2/E2M3, MXFP4 E2M1, MXINT8, block 32, scale E8M0. NVFP4: NVIDIA, "Introducing
#: NVFP4 for efficient and accurate low-precision inference" (developer.nvidia.com blog, 2025)
#: and the PTX ISA (``kind::mxf4nvf4``, scale_vec::4X): E2M1 elements, 16-element blocks, an
#: E4M3 block scale and an FP32 per-tensor scale.
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("int4", 4, "int4"),
    Format("int8", 8, "int8"),
    Format("fp8", 8, "fp8"),
    Format("bf16", 16, "bf16"),
    Format("fp16", 16, "fp16"),
    Format("fp32", 32, "fp32"),
    Format("mxfp4", 4, "fp4", block=32, scale="e8m0", scale_bits=8),
    Format("nvfp4", 4, "fp4", block=16, scale="e4m3", scale_bits=8, tensor_scale_bytes=4),
    Format("mxfp6", 6, "fp6", block=32, scale="e8m0", scale_bits=8),
    Format("mxfp8", 8, "fp8", block=32, scale="e8m0", scale_bits=8),
    Format("mxint8", 8, "int8", block=32, scale="e8m0", scale_bits=8),
)}

#: Every precision a chip may support: the plain ones narrowest first, then the block-scaled.
DTYPES: tuple[str, ...] = tuple(FORMATS)
#: The block-scaled formats (a chip running one needs ``core.array.block_scale``).
BLOCK_DTYPES: tuple[str, ...] = tuple(d for d, f in FORMATS.items() if f.block_scaled)

#: Storage size of one element in bytes, the block's shared scale included (int4 packs two
#: per byte; MXFP4 = 0.53125).
DTYPE_BYTES: dict[str, float] = {d: f.bytes_per_element for d, f in FORMATS.items()}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype`` (shared block scales included); raises ValueError
    naming the known dtypes."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(
            f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}"
        ) from None


def check_dtype(dtype: str, what: str = "dtype") -> str:
    """Return ``dtype`` if it is a known precision, else raise ValueError naming ``what``."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"{what} must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return dtype


def fmt(dtype: str) -> Format:
    """The :class:`Format` of ``dtype`` (ValueError naming the known dtypes)."""
    check_dtype(dtype)
    return FORMATS[dtype]


def element_bits(dtype: str) -> int:
    """Bits of one element without its share of the block scale (what an array lane and the
    engine's operand tiles move; the scales travel as their own stream)."""
    return fmt(dtype).element_bits


def is_block_scaled(dtype: str) -> bool:
    return fmt(dtype).block_scaled


def scale_count(dtype: str, rows: int, k: int) -> int:
    """Shared scales of a ``rows × k`` operand blocked along ``k`` (its reduction dimension):
    ``rows × ceil(k / block)``; 0 for a plain dtype. A ``k`` that is not a multiple of the
    block is padded to whole blocks (the last block's scale covers fewer elements), as the
    contraction length of attention over a KV cache is any number of tokens."""
    f = fmt(dtype)
    return rows * math.ceil(k / f.block) if f.block else 0


def scale_bytes(dtype: str, rows: int, k: int, tensors: int = 1) -> float:
    """Bytes of the block scales of ``tensors`` operands of ``rows × k`` blocked along ``k``,
    plus their per-tensor scales (NVFP4's FP32); 0 for a plain dtype."""
    f = fmt(dtype)
    if not f.block:
        return 0.0
    return tensors * (scale_count(dtype, rows, k) * f.scale_bits / 8 + f.tensor_scale_bytes)


def tensor_bytes(dtype: str, elements: float) -> float:
    """Bytes of a whole tensor of ``elements`` in ``dtype``: elements × :func:`dtype_bytes`
    plus the per-tensor scale (NVFP4: 4 B)."""
    return elements * dtype_bytes(dtype) + fmt(dtype).tensor_scale_bytes
