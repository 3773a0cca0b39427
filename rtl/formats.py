"""Block-scaled number formats (OCP MX and NVIDIA NVFP4): quantise, dequantise, dot product.

The golden numerics of block-scaled formats, in NumPy, independent of any chip (the timing and
traffic side of these formats lives elsewhere; :data:`BLOCK_FORMATS` gives the bit counts it
needs). A tensor is blocked along its **last axis**: ``K`` must be a multiple of the block.

OCP Microscaling Formats (MX) Specification v1.0 (Sept. 2023)
    A block of ``k = 32`` elements shares one E8M0 scale ``X = 2^(code − 127)`` (§5.1, §5.4.1;
    code 0xFF is NaN); the value of element ``i`` is ``X · P_i`` (§5.2). Concrete formats (§5.2
    table 1): MXFP8 (E4M3 or E5M2 elements), MXFP6 (E3M2 or E2M3), MXFP4 (E2M1) and MXINT8
    (8-bit two's complement with an implicit scale of 2^-6, i.e. −2 … 1 63/64). Elements are
    those of :mod:`diptych.rtl.minifloat`.

    *Quantise* (§6.3, Algorithm 1, as in the spec authors' reference code
    ``microsoft/microxcaling`` ``mx/mx_ops.py``): ``shared_exp = floor(log2(max_i |V_i|)) −
    emax_elem`` (``emax_elem``: the exponent of the element format's largest normal; 0 for
    INT8), clamped below at −127 (an all-zero block uses ``max = 2^-126`` as the reference code
    does); then ``P_i = quantize(V_i / X)`` rounding to nearest, **ties to even**, and clamping
    to ±max (normal values saturate). A block holding a NaN or ±Inf gets the NaN scale.
    (The reference code's default rounding is ties-away-from-zero; the spec leaves the
    rounding of the conversion to the implementation. We use the IEEE default.)

    *Dot product* (§6.1–6.2: ``Dot(A, B) = X_A · X_B · Σ P_i^A × P_i^B``, ``DotGeneral`` sums
    the blocks' dots in FP32; the internal precision and order are implementation-defined).
    Our definition, which every function here and the exact oracle in the tests follow:

    1. each block pair's dot is computed **exactly** (all products and the 32-term sum, times
       both scales) and rounded **once** to FP32, round to nearest even, overflow to ±Inf, a
       subnormal result flushed to zero keeping its sign, an exact zero being +0;
    2. the blocks' dots are accumulated in ascending order from +0 with the datapath's FP32
       add (:func:`diptych.rtl.numerics_ref.fp32_add_bits`: round to nearest even, subnormal inputs
       read as zero, subnormal sums flushed, canonical NaN ``0x7FC00000``);
    3. a NaN element or NaN scale, Inf × 0, or Inf products of both signs in a block make it
       NaN; other Inf products make it ±Inf.

NVFP4 (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", NVIDIA
Technical Blog, June 2025; TensorRT-LLM ``fp4Quantize``)
    Blocks of 16 E2M1 elements share an E4M3 scale (positive, "UE4M3"), and the tensor has one
    FP32 scale: ``x = e2m1 · s_block · s_tensor``. Quantise: ``s_tensor = fp32(amax / (6 ·
    448))`` (or given), ``s_block = e4m3(amax_block / (6 · s_tensor))`` and ``e2m1(x / (s_block ·
    s_tensor))``, each conversion rounding to nearest even and saturating (CUDA's
    ``satfinite``); ``s_tensor`` is 1 when that division gives zero. Dot product: steps 1 and 2
    above with the E4M3 block scales, then the accumulated FP32 sum is multiplied by ``alpha =
    fp32(s_tensor_A · s_tensor_B)`` (the GEMM epilogue's alpha), rounded to nearest even with
    the same flushes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import numerics_ref
from .minifloat import E8M0_NAN, FORMATS, decode, e8m0_decode, encode

__all__ = ["BlockFormat", "BLOCK_FORMATS", "get_block_format", "BlockTensor", "quantize",
           "dequantize", "block_matmul_bits", "block_dot_bits", "exact_to_fp32_bits",
           "mx_matmul_bits", "apply_alpha"]


@dataclass(frozen=True)
class BlockFormat:
    """A block-scaled format: ``block`` elements of ``element`` share one ``scale``."""

    name: str
    element: str             # a minifloat name, or "int8" (MXINT8)
    block: int
    scale: str               # "e8m0" (MX) or "e4m3" (NVFP4)
    tensor_scale: bool       # an FP32 per-tensor scale as well (NVFP4)
    spec: str

    @property
    def element_bits(self) -> int:
        return 8 if self.element == "int8" else FORMATS[self.element].bits

    @property
    def scale_bits(self) -> int:
        return 8

    @property
    def bits_per_element(self) -> float:
        """Storage per element including its share of the block scale (not the tensor scale)."""
        return self.element_bits + self.scale_bits / self.block

    @property
    def max_element(self) -> float:
        return 127 / 64 if self.element == "int8" else FORMATS[self.element].max_value

    @property
    def emax_elem(self) -> int:
        """MX §6.3 ``emax_elem``: the exponent of the element format's largest normal."""
        return 0 if self.element == "int8" else FORMATS[self.element].emax


_MX = "OCP MX v1.0 §5.2"
BLOCK_FORMATS: dict[str, BlockFormat] = {f.name: f for f in (
    BlockFormat("mxfp8_e4m3", "e4m3", 32, "e8m0", False, _MX),
    BlockFormat("mxfp8_e5m2", "e5m2", 32, "e8m0", False, _MX),
    BlockFormat("mxfp6_e3m2", "e3m2", 32, "e8m0", False, _MX),
    BlockFormat("mxfp6_e2m3", "e2m3", 32, "e8m0", False, _MX),
    BlockFormat("mxfp4", "e2m1", 32, "e8m0", False, _MX),
    BlockFormat("mxint8", "int8", 32, "e8m0", False, _MX),
    BlockFormat("nvfp4", "e2m1", 16, "e4m3", True, "NVIDIA NVFP4 (2025)"),
)}


def get_block_format(name: str, block: int | None = None) -> BlockFormat:
    """The format called ``name``, optionally with a non-standard ``block`` size."""
    if name not in BLOCK_FORMATS:
        raise ValueError(f"block format must be one of {', '.join(BLOCK_FORMATS)}, not {name!r}")
    f = BLOCK_FORMATS[name]
    if block is None or block == f.block:
        return f
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer, not {block!r}")
    return BlockFormat(f.name, f.element, block, f.scale, f.tensor_scale, f.spec + " (block "
                       f"{block}: non-standard, the spec fixes {f.block})")


@dataclass(frozen=True)
class BlockTensor:
    """A quantised tensor: element codes ``[..., K]``, scale codes ``[..., K / block]``.

    Element codes are uint8 (the minifloat's bit pattern, or the two's-complement byte for
    MXINT8); scale codes are uint8 (E8M0 or E4M3); ``tensor_scale`` is an FP32 value (NVFP4) or
    None.
    """

    fmt: BlockFormat
    elements: np.ndarray
    scales: np.ndarray
    tensor_scale: float | None = None


def _blocks(x: np.ndarray, block: int, what: str) -> np.ndarray:
    k = x.shape[-1] if x.ndim else 0
    if x.ndim == 0 or k % block:
        raise ValueError(f"block size {block} does not divide the last axis of {what} "
                         f"(K = {k})")
    return x.reshape(*x.shape[:-1], k // block, block)


def _element_values(fmt: BlockFormat, codes: np.ndarray) -> np.ndarray:
    if fmt.element == "int8":
        return codes.astype(np.uint8).view(np.int8).astype(np.float64) / 64.0
    return decode(fmt.element, codes)


def _encode_elements(fmt: BlockFormat, v: np.ndarray) -> np.ndarray:
    if fmt.element == "int8":
        q = np.clip(np.rint(np.where(np.isfinite(v), v, 0.0) * 64.0), -127, 127)
        return q.astype(np.int8).view(np.uint8)
    return encode(fmt.element, v, saturate=True)


def _scale_values(fmt: BlockFormat, codes: np.ndarray) -> np.ndarray:
    return e8m0_decode(codes) if fmt.scale == "e8m0" else decode("e4m3", codes)


def quantize(x, fmt: str | BlockFormat, block: int | None = None,
             tensor_scale: float | None = None) -> BlockTensor:
    """Quantise FP32 values ``x[..., K]`` to ``fmt`` (see the module docstring for the rules)."""
    f = get_block_format(fmt, block) if isinstance(fmt, str) else fmt
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    xb = _blocks(x, f.block, "x")
    finite = np.all(np.isfinite(xb), axis=-1)
    amax = np.max(np.where(np.isfinite(xb), np.abs(xb), 0.0), axis=-1)
    ts = None
    if f.scale == "e8m0":
        if tensor_scale is not None:
            raise ValueError(f"{f.name} has no tensor scale (only nvfp4 does)")
        _, e = np.frexp(np.where(amax > 0, amax, 2.0 ** -126))
        shared = np.maximum(e - 1 - f.emax_elem, -127)     # floor(log2 amax) − emax_elem
        codes = np.where(finite & (shared <= 127), shared + 127, E8M0_NAN).astype(np.uint8)
        scale = np.ldexp(1.0, np.minimum(shared, 127))
    else:
        if tensor_scale is None:           # IEEE float32 division: one rounding
            t_amax = np.float32(np.max(amax)) if amax.size else np.float32(0)
            ts = float(t_amax / np.float32(6.0 * 448.0)) or 1.0
        else:
            ts = float(np.float32(tensor_scale))
            if not (math.isfinite(ts) and ts > 0):
                raise ValueError(f"tensor_scale must be a positive finite FP32 value, not "
                                 f"{tensor_scale!r}")
        codes = encode("e4m3", amax / (6.0 * ts), saturate=True)
        codes = np.where(finite, codes, FORMATS["e4m3"].nan_code).astype(np.uint8)
        scale = decode("e4m3", codes) * ts
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(scale[..., None] > 0, xb / scale[..., None], 0.0)
    v = np.where(np.isfinite(xb), v, xb)      # NaN/Inf elements: the format's NaN/Inf, or 0
    elements = _encode_elements(f, v).reshape(x.shape)
    return BlockTensor(f, elements, codes, ts)


def dequantize(t: BlockTensor) -> np.ndarray:
    """Exact float64 values of a :class:`BlockTensor` (element × block scale × tensor scale)."""
    f = t.fmt
    e = _blocks(np.asarray(t.elements), f.block, "elements")
    v = _element_values(f, e) * _scale_values(f, np.asarray(t.scales))[..., None]
    if t.tensor_scale is not None:
        v = v * t.tensor_scale
    return v.reshape(np.asarray(t.elements).shape)


# ---- exact block dot products ------------------------------------------------------------

def _fixed_point(kind: str, codes: np.ndarray) -> tuple[np.ndarray, int]:
    """Values of ``codes`` as (integers, exponent): value = integer · 2^exponent, exactly.

    Non-finite codes give integer 0; the caller handles them from the float values.
    """
    if kind == "int8":
        return codes.astype(np.uint8).view(np.int8).astype(np.int64), -6
    f = FORMATS[kind]
    q = f.emin - f.man_bits                         # the smallest subnormal is 2^q
    v = decode(f, codes)
    return np.where(np.isfinite(v), np.ldexp(np.where(np.isfinite(v), v, 0.0), -q),
                    0.0).astype(np.int64), q


_to_fp32 = np.frompyfunc(numerics_ref.exact_to_fp32_bits, 2, 1)
exact_to_fp32_bits = numerics_ref.exact_to_fp32_bits     # re-exported (from the golden model)


def _scale_fixed(fmt: BlockFormat, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Block scales as (integer, exponent) arrays; NaN scales give (0, 0)."""
    codes = np.asarray(codes).astype(np.int64)
    if fmt.scale == "e8m0":
        return np.ones_like(codes), np.where(codes == E8M0_NAN, 0, codes - 127)
    n, q = _fixed_point("e4m3", codes)
    return n, np.full_like(codes, q)


def _block_dots(a: BlockTensor, b: BlockTensor) -> np.ndarray:
    """FP32 bits ``[M, N, blocks]`` of every block pair's exact dot, rounded once."""
    fa, fb = a.fmt, b.fmt
    if fa.block != fb.block:
        raise ValueError(f"block sizes differ: {fa.name} has {fa.block}, {fb.name} {fb.block}")
    ea = _blocks(np.atleast_2d(a.elements), fa.block, "A")      # [M, nb, blk]
    eb = _blocks(np.atleast_2d(b.elements), fb.block, "B")      # [N, nb, blk]
    if ea.shape[-2] != eb.shape[-2]:
        raise ValueError(f"A and B must have the same K, not {ea.shape[-2] * fa.block} and "
                         f"{eb.shape[-2] * fb.block}")
    na, qa = _fixed_point(fa.element, ea)
    nb, qb = _fixed_point(fb.element, eb)
    # exact integer sums (Python ints: E5M2 products need up to 64 bits, their sums more)
    prod = na.astype(object)[:, None] * nb.astype(object)[None, :]     # [M, N, nb, blk]
    sums = prod.sum(axis=-1)
    sa_n, sa_e = _scale_fixed(fa, np.atleast_2d(a.scales))
    sb_n, sb_e = _scale_fixed(fb, np.atleast_2d(b.scales))
    n = sums * (sa_n.astype(object)[:, None] * sb_n.astype(object)[None, :])
    e = (qa + qb) + sa_e[:, None] + sb_e[None, :]
    with np.errstate(over="ignore"):
        bits = _to_fp32(n, e).astype(np.uint32)
    # specials, from the float values
    va = _element_values(fa, ea)[:, None]
    vb = _element_values(fb, eb)[None, :]
    with np.errstate(invalid="ignore"):
        p = va * vb                                  # inf·0 → NaN, NaN stays
    pos_inf = np.any(p == np.inf, axis=-1)
    neg_inf = np.any(p == -np.inf, axis=-1)
    nan = (np.any(np.isnan(p), axis=-1) | (pos_inf & neg_inf)
           | np.isnan(_scale_values(fa, np.atleast_2d(a.scales)))[:, None]
           | np.isnan(_scale_values(fb, np.atleast_2d(b.scales)))[None, :])
    bits = np.where(pos_inf, np.uint32(0x7F800000), bits)
    bits = np.where(neg_inf, np.uint32(0xFF800000), bits)
    return np.where(nan, numerics_ref.CANONICAL_NAN, bits).astype(np.uint32)


def block_matmul_bits(a: BlockTensor, b: BlockTensor) -> np.ndarray:
    """``C[M, N] = A[M, K] · B[N, K]ᵀ`` (both blocked along K) as FP32 bits, by the rules of the
    module docstring: exact block dots rounded once, FP32 accumulation over blocks in order,
    then the tensor scales (NVFP4)."""
    dots = _block_dots(a, b)
    acc = np.zeros(dots.shape[:2], np.uint32)
    for j in range(dots.shape[-1]):
        acc = numerics_ref.fp32_add_bits(acc, dots[..., j])
    if a.tensor_scale is not None or b.tensor_scale is not None:
        acc = apply_alpha(acc, a.tensor_scale, b.tensor_scale)
    return acc


def apply_alpha(acc_bits, ts_a: float | None, ts_b: float | None) -> np.ndarray:
    """FP32 bits ``acc_bits`` times ``alpha = fp32(ts_a · ts_b)`` (a missing scale is 1): the
    NVFP4 GEMM epilogue, one float32 multiply rounded to nearest even, inputs and result
    flushed (subnormal in, zero out, as the datapath's FP32 operations)."""
    alpha = np.float32(ts_a or 1.0) * np.float32(ts_b or 1.0)
    alpha_bits = numerics_ref.ftz32(np.asarray(alpha, np.float32).view(np.uint32))
    x = numerics_ref.daz32(np.asarray(acc_bits, np.uint32)).view(np.float32)
    with np.errstate(all="ignore"):
        return numerics_ref.ftz32((x * alpha_bits.view(np.float32)).astype(np.float32)
                                  .view(np.uint32))


def block_dot_bits(a: BlockTensor, b: BlockTensor) -> int:
    """Dot product of two blocked vectors ``[K]`` as FP32 bits (see :func:`block_matmul_bits`)."""
    return int(block_matmul_bits(a, b)[0, 0])


def mx_matmul_bits(a_codes, a_scales, b_codes, b_scales, fmt_a: str = "e4m3",
                   fmt_b: str = "e4m3", block: int = 32) -> np.ndarray:
    """``C = A·B`` of MX operands as the block-scaled PE sees them (:mod:`diptych.rtl.mx`):
    element codes A[M, K] and B[K, N] of the element formats ``fmt_a``/``fmt_b``, E8M0 scale
    codes A_s[M, nb] and B_s[nb, N] with ``nb = ceil(K / block)``; a K that is not a multiple
    of ``block`` is padded with +0 elements (its last block is short). The rules of
    :func:`block_matmul_bits`. Returns ``uint32[M, N]``."""
    a, b = np.asarray(a_codes), np.asarray(b_codes)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"A[M,K]·B[K,N] needs matching K, got shapes {a.shape} and {b.shape}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer, not {block!r}")
    nb = -(-a.shape[1] // block)
    sa, sb = np.asarray(a_scales), np.asarray(b_scales)
    if sa.shape != (a.shape[0], nb) or sb.shape != (nb, b.shape[1]):
        raise ValueError(f"scales must be [M, {nb}] and [{nb}, N] for K = {a.shape[1]} in "
                         f"blocks of {block}, not {sa.shape} and {sb.shape}")
    pad = nb * block - a.shape[1]
    a, b = np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, pad), (0, 0)))

    def fmt(elem):
        return BlockFormat(f"mx_{elem}", elem, block, "e8m0", False, _MX)
    ta = BlockTensor(fmt(fmt_a), a.astype(np.uint8), sa.astype(np.uint8))
    tb = BlockTensor(fmt(fmt_b), np.ascontiguousarray(b.T).astype(np.uint8),
                     np.ascontiguousarray(sb.T).astype(np.uint8))
    return block_matmul_bits(ta, tb)
