"""NumPy golden model of the MAC-array numerics (design.md §4), on bit patterns.

This is the reference every piece of RTL is checked against, bit for bit.

INT8
    ``int8 × int8 → int32``; the accumulator wraps in two's complement.

BF16 (the same rules as Intel AMX ``VDPBF16PS`` and common DSP blocks)
    * the product of two bf16 values is formed exactly in FP32 (8 × 8 significand bits fit in
      24), overflowing to ±Inf;
    * accumulation is an FP32 add with round-to-nearest-even, in ascending ``k``, starting
      from +0 (or from a given FP32 partial sum);
    * subnormal inputs (bf16 operands and FP32 addends) read as zero of the same sign;
    * subnormal results are flushed to zero, keeping their sign;
    * every NaN becomes the canonical quiet NaN ``0x7FC00000``.

NumPy reproduces this exactly with float32 arithmetic when the input flush is applied before
and the output flush after each operation (float32 multiply and add are IEEE round-to-nearest-
even, and the product of two bf16 significands is exact). All functions take and return
unsigned integer arrays holding bit patterns (``uint16`` for bf16, ``uint32`` for FP32).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CANONICAL_NAN", "daz32", "ftz32", "bf16_mul_bits", "fp32_add_bits",
    "bf16_matmul_bits", "int8_matmul", "bf16_to_float", "float_to_bf16_bits",
]

#: The only NaN the hardware ever produces (FP32 quiet NaN, positive, zero payload).
CANONICAL_NAN = np.uint32(0x7FC00000)

_EXP32 = np.uint32(0x7F800000)
_FRAC32 = np.uint32(0x007FFFFF)
_SIGN32 = np.uint32(0x80000000)


def _as_u32(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.uint32:
        if np.any(a < 0) or np.any(a > 0xFFFFFFFF):
            raise ValueError("FP32 bit patterns must lie in 0 .. 0xFFFFFFFF")
        a = a.astype(np.uint32)
    return a


def _as_u16(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.uint16:
        if np.any(a < 0) or np.any(a > 0xFFFF):
            raise ValueError("bf16 bit patterns must lie in 0 .. 0xFFFF")
        a = a.astype(np.uint16)
    return a


def daz32(bits) -> np.ndarray:
    """FP32 bit patterns with subnormals replaced by zero of the same sign."""
    b = _as_u32(bits)
    sub = ((b & _EXP32) == 0) & ((b & _FRAC32) != 0)
    return np.where(sub, b & _SIGN32, b).astype(np.uint32)


def ftz32(bits) -> np.ndarray:
    """Result post-processing: flush subnormals to signed zero, canonicalise every NaN."""
    b = daz32(bits)
    nan = ((b & _EXP32) == _EXP32) & ((b & _FRAC32) != 0)
    return np.where(nan, CANONICAL_NAN, b).astype(np.uint32)


def bf16_mul_bits(a, b) -> np.ndarray:
    """Exact bf16 × bf16 product as FP32 bits (inputs DAZ, result FTZ, NaN canonical)."""
    a32 = daz32(_as_u16(a).astype(np.uint32) << np.uint32(16))
    b32 = daz32(_as_u16(b).astype(np.uint32) << np.uint32(16))
    with np.errstate(all="ignore"):
        p = a32.view(np.float32) * b32.view(np.float32)
    return ftz32(np.asarray(p, dtype=np.float32).view(np.uint32))


def fp32_add_bits(x, y) -> np.ndarray:
    """FP32 ``x + y`` with round-to-nearest-even (inputs DAZ, result FTZ, NaN canonical)."""
    x32 = daz32(x)
    y32 = daz32(y)
    with np.errstate(all="ignore"):
        s = x32.view(np.float32) + y32.view(np.float32)
    return ftz32(np.asarray(s, dtype=np.float32).view(np.uint32))


def bf16_matmul_bits(a_bits, b_bits, init_bits=None) -> np.ndarray:
    """``C = init + A·B`` in the hardware's BF16 order: ``((init + p0) + p1) + …``.

    ``a_bits`` is ``uint16[M, K]``, ``b_bits`` ``uint16[K, N]``; ``init_bits`` (FP32 bits,
    ``[M, N]``, default +0) is the partial sum entering the accumulation. Returns
    ``uint32[M, N]``.
    """
    a = _as_u16(a_bits)
    b = _as_u16(b_bits)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"A[M,K]·B[K,N] needs matching K, got shapes {a.shape} and {b.shape}")
    m, k = a.shape
    n = b.shape[1]
    acc = (np.zeros((m, n), np.uint32) if init_bits is None
           else np.array(np.broadcast_to(_as_u32(init_bits), (m, n)), dtype=np.uint32))
    for kk in range(k):
        p = bf16_mul_bits(a[:, kk][:, None], b[kk, :][None, :])
        acc = fp32_add_bits(acc, p)
    return acc


def int8_matmul(a, b, init=None) -> np.ndarray:
    """``C = init + A·B`` for int8 A, B with an int32 accumulator that wraps."""
    a = np.asarray(a)
    b = np.asarray(b)
    for name, v in (("A", a), ("B", b)):
        if v.size and (v.min() < -128 or v.max() > 127):
            raise ValueError(f"{name} must hold int8 values (-128 .. 127)")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"A[M,K]·B[K,N] needs matching K, got shapes {a.shape} and {b.shape}")
    acc = np.zeros((a.shape[0], b.shape[1]), np.int64)
    if init is not None:
        acc += np.asarray(init, dtype=np.int64)
    acc += a.astype(np.int64) @ b.astype(np.int64)
    return ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)


def bf16_to_float(bits) -> np.ndarray:
    """bf16 bit patterns → float32 values (no flushing; for display)."""
    return (_as_u16(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def float_to_bf16_bits(x) -> np.ndarray:
    """float32 values → bf16 bit patterns by round-to-nearest-even (NaN → 0x7FC0)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded & 0xFFFF).astype(np.uint16)
