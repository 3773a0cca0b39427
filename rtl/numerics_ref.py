"""NumPy golden model of the MAC-array numerics (design.md §4), on bit patterns.

This is the reference every piece of RTL is checked against, bit for bit.

INT8
    ``int8 × int8 → int32``; the accumulator wraps in two's complement.

FP8 (E4M3 and E5M2 of the OCP 8-bit Floating Point Specification v1.0, either format for
either operand)
    * FP8 inputs are honoured in full: subnormals keep their value (``0.m × 2^(1 − bias)``),
      E4M3's S.1111.111 and E5M2's S.11111.xx (xx ≠ 0) are NaN, E5M2's S.11111.00 is ±Inf
      (E4M3 has no Inf); the product of two FP8 values is exact in FP32 and never subnormal
      (at least 2^-18 for E4M3, 2^-32 for E5M2; at most 57344² < 2^32), so FP8 products
      need no flush; Inf × 0 and any NaN give the canonical NaN;
    * accumulation is exactly BF16's below: FP32 add, round to nearest even, ascending ``k``,
      FP32 addends that are subnormal read as zero, subnormal sums flush to zero.

BF16 (the same rules as Intel AMX ``VDPBF16PS`` and common DSP blocks)
    * the product of two bf16 values is formed exactly in FP32 (8 × 8 significand bits fit in
      24), overflowing to ±Inf;
    * accumulation is an FP32 add with round-to-nearest-even, in ascending ``k``, starting
      from +0 (or from a given FP32 partial sum);
    * subnormal inputs (bf16 operands and FP32 addends) read as zero of the same sign;
    * subnormal results are flushed to zero, keeping their sign;
    * every NaN becomes the canonical quiet NaN ``0x7FC00000``.

Accumulation rules of the 8-bit floating-point modes (:data:`RULES`)
    * ``"sequential"`` (the ``fp8`` and ``multi`` datapaths): every product is added to the FP32
      accumulator on its own, rounded each time, in ascending ``k`` (the BF16 rule above);
    * ``"pair"`` (the ``fused`` datapath, two FP8 MACs per cycle): the two K-consecutive products
      ``a[2s]·b[2s]`` and ``a[2s+1]·b[2s+1]`` and the accumulator are summed **exactly** and
      rounded **once** (:func:`fp32_add3_bits`: round to nearest even; subnormal accumulator
      reads as signed zero, a subnormal result flushes keeping its sign, canonical NaN, an
      exact zero is −0 only when all three terms are −0); an odd ``K`` pairs its last product
      with +0. INT8 and BF16 accumulate the same way under either rule (int32 wrap is
      associative; BF16 has one product per step).
    * ``"dot4"`` (the ``dot4`` datapath, four FP8 MACs per cycle): the accumulator and the
      products ``k = 4s … 4s + 3`` aligned to the largest exponent with truncation, summed in
      fixed point and rounded once toward zero (:func:`diptych.rtl.dot_ref.dot_matmul_bits`, the
      rule stated there); a short last group is padded with +0 products.
    * ``"mx"`` (the ``mx`` datapath, the block-scaled PE): each K-block's products summed
      exactly, times the two E8M0 block scales, rounded once to FP32, and the blocks' dots added
      to the FP32 accumulator in order (:func:`diptych.rtl.formats.mx_matmul_bits`; it needs the
      scales, so :func:`matmul_bits` refuses it);
    * ``"mxdot4"`` (the ``mxdot4`` datapath): the dot4 rule with every product scaled by its
      block's two E8M0 scales before the alignment
      (:func:`diptych.rtl.dot_ref.mx_dot_matmul_bits`; refused by :func:`matmul_bits` too).
    * ``"fp4dot8"`` (the ``fp4dot8`` datapath, eight FP4 MACs per cycle): each step's eight
      E2M1 products summed exactly, times the block's E8M0 (MXFP4) or E4M3 (NVFP4) scales, added
      to the accumulator by truncated alignment and one rounding toward zero
      (:func:`diptych.rtl.fp4dot_ref.fp4_matmul_bits`; refused by :func:`matmul_bits` too).
    * ``"mxint8"`` (the ``mxint8`` datapath): a step's four INT8 products summed exactly, the
      sum scaled by its blocks' E8M0 scales and the element's 2^-6, then the dot4 rule's
      alignment and rounding against the accumulator
      (:func:`diptych.rtl.dot_ref.mxint8_matmul_bits`; refused by :func:`matmul_bits` too).

NumPy reproduces the per-operation rules exactly with float32 arithmetic when the input flush is
applied before and the output flush after each operation (float32 multiply and add are IEEE
round-to-nearest-even, and the products of two bf16 or two FP8 significands are exact); the pair
rule's exact three-term sums use Python integers (:func:`fp32_add3_bits`). All functions take
and return unsigned integer arrays holding bit patterns (``uint8`` for FP8, ``uint16`` for bf16,
``uint32`` for FP32).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .dot_ref import dot_matmul_bits

__all__ = [
    "CANONICAL_NAN", "daz32", "ftz32", "bf16_mul_bits", "fp32_add_bits",
    "bf16_matmul_bits", "int8_matmul", "bf16_to_float", "float_to_bf16_bits",
    "FP8_FORMATS", "MODES", "mode_formats", "fp8_to_fp32_bits", "fp8_mul_bits",
    "fp8_matmul_bits", "matmul_bits", "RULES", "exact_to_fp32_bits", "fp32_add3_bits",
    "fp8_pair_matmul_bits",
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


def exact_to_fp32_bits(n: int, e: int) -> int:
    """FP32 bits of ``n · 2^e`` (integers): round to nearest even once, overflow to ±Inf,
    subnormal results flushed to signed zero, exact zero +0.

    The integer is first rounded *to odd* at 26 significant bits (exact in float64), which a
    following round-to-nearest-even at ≤ 24 bits turns into the correctly rounded result.
    """
    if n == 0:
        return 0
    neg = n < 0
    m = -n if neg else n
    bl = m.bit_length()
    if bl > 26:
        sh = bl - 26
        m = (m >> sh) | (1 if m & ((1 << sh) - 1) else 0)
        e += sh
    with np.errstate(over="ignore"):             # overflow to ±Inf is the intended result
        f32 = np.float32(math.ldexp(float(m), e) if e < 1000 else math.inf)
    bits = int(np.asarray(f32).view(np.uint32))
    if (bits >> 23) & 0xFF == 0:                    # subnormal (or zero) after rounding: flush
        bits = 0
    return bits | (0x80000000 if neg else 0)


_exact_to_fp32 = np.frompyfunc(exact_to_fp32_bits, 2, 1)


def _units_2m149(b: np.ndarray) -> np.ndarray:
    """Finite FP32 bit patterns (already DAZ) → exact signed Python ints in units of 2^-149."""
    e = ((b >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    m = np.where(e == 0, 0, (b & _FRAC32).astype(np.int64) | (1 << 23))
    v = m.astype(object) << np.maximum(e - 1, 0).astype(object)
    return np.where((b & _SIGN32) != 0, -v, v)


def fp32_add3_bits(x, y, z) -> np.ndarray:
    """FP32 ``x + y + z`` computed exactly and rounded **once** (round to nearest even).

    The contract's flushes: subnormal inputs read as zero of their sign, a subnormal result
    becomes zero of its sign, every NaN is ``0x7FC00000``; a NaN input or Infs of both signs
    give NaN, otherwise an Inf input gives that Inf; overflow gives ±Inf; an exact zero is
    −0 only when all three (flushed) inputs are −0, else +0 (so ``fp32_add3_bits(x, y, -0)``
    is :func:`fp32_add_bits`). This is the pair rule's step (:data:`RULES`).
    """
    x, y, z = np.broadcast_arrays(daz32(x), daz32(y), daz32(z))
    shape = x.shape
    terms = tuple(t.reshape(-1) for t in (x, y, z))       # 1-d: object arithmetic stays exact
    x = terms[0]
    exp_all = [(t & _EXP32) == _EXP32 for t in terms]
    nan = np.zeros(x.shape, bool)
    pos_inf = np.zeros(x.shape, bool)
    neg_inf = np.zeros(x.shape, bool)
    for t, top in zip(terms, exp_all):
        special_frac = (t & _FRAC32) != 0
        nan |= top & special_frac
        pos_inf |= top & ~special_frac & ((t & _SIGN32) == 0)
        neg_inf |= top & ~special_frac & ((t & _SIGN32) != 0)
    finite = [np.where(top, np.uint32(0), t).astype(np.uint32) for t, top in zip(terms, exp_all)]
    total = _units_2m149(finite[0]) + _units_2m149(finite[1]) + _units_2m149(finite[2])
    with np.errstate(over="ignore"):             # overflow to ±Inf is the intended result
        bits = np.asarray(_exact_to_fp32(total, -149)).astype(np.uint32)
    all_neg_zero = np.logical_and.reduce([t == _SIGN32 for t in terms])
    bits = np.where(all_neg_zero, _SIGN32, bits)
    bits = np.where(pos_inf, _EXP32, bits)
    bits = np.where(neg_inf, _EXP32 | _SIGN32, bits)
    return np.where(nan | (pos_inf & neg_inf), CANONICAL_NAN, bits).astype(np.uint32).reshape(shape)


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
    return _accumulate(lambda kk: bf16_mul_bits(a[:, kk][:, None], b[kk, :][None, :]),
                       a.shape[0], a.shape[1], b.shape[1], init_bits)


def _accumulate(products, m: int, k: int, n: int, init_bits) -> np.ndarray:
    """``((init + p0) + p1) + …`` with :func:`fp32_add_bits`; ``products(kk)`` is [M, N]."""
    acc = (np.zeros((m, n), np.uint32) if init_bits is None
           else np.array(np.broadcast_to(_as_u32(init_bits), (m, n)), dtype=np.uint32))
    for kk in range(k):
        acc = fp32_add_bits(acc, products(kk))
    return acc


#: The FP8 element formats of the datapath (OCP OFP8 v1.0).
FP8_FORMATS = ("e4m3", "e5m2")

#: Element types of a tile (a *mode* of the datapath): its A and B element formats.
MODES = {
    "int8": ("int8", "int8"),
    "bf16": ("bf16", "bf16"),
    "e4m3": ("e4m3", "e4m3"),
    "e5m2": ("e5m2", "e5m2"),
    "e4m3xe5m2": ("e4m3", "e5m2"),     # A (activations) E4M3, B (weights) E5M2
    "e5m2xe4m3": ("e5m2", "e4m3"),     # e.g. gradients E5M2 times weights E4M3
}


def mode_formats(mode: str) -> tuple[str, str]:
    """(A format, B format) of ``mode``; ValueError naming the value if unknown."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    return MODES[mode]


@functools.lru_cache(maxsize=None)
def _fp8_table(fmt: str) -> np.ndarray:
    from .minifloat import decode
    if fmt not in FP8_FORMATS:
        raise ValueError(f"FP8 format must be one of {', '.join(FP8_FORMATS)}, not {fmt!r}")
    vals = decode(fmt, np.arange(256))
    return ftz32(vals.astype(np.float32).view(np.uint32))   # exact; NaN → canonical


def _as_u8(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.uint8:
        if a.dtype.kind not in "ui" or np.any(a < 0) or np.any(a > 0xFF):
            raise ValueError("FP8 bit patterns must be integers in 0 .. 0xFF")
        a = a.astype(np.uint8)
    return a


def fp8_to_fp32_bits(bits, fmt: str) -> np.ndarray:
    """FP8 bit patterns of ``fmt`` → FP32 bits of the same value (exact; NaN canonical)."""
    return _fp8_table(fmt)[_as_u8(bits)]


def fp8_mul_bits(a, b, fmt_a: str = "e4m3", fmt_b: str = "e4m3") -> np.ndarray:
    """Exact FP8 × FP8 product as FP32 bits (subnormal inputs honoured; NaN canonical)."""
    x = fp8_to_fp32_bits(a, fmt_a)
    y = fp8_to_fp32_bits(b, fmt_b)
    with np.errstate(all="ignore"):
        p = x.view(np.float32) * y.view(np.float32)      # exact: ≤ 8 significand bits
    return ftz32(np.asarray(p, dtype=np.float32).view(np.uint32))


def fp8_matmul_bits(a_bits, b_bits, fmt_a: str = "e4m3", fmt_b: str = "e4m3",
                    init_bits=None) -> np.ndarray:
    """``C = init + A·B`` for FP8 A[M, K] (``fmt_a``) and B[K, N] (``fmt_b``), FP32 bits out.

    The same order and FP32 rounding as :func:`bf16_matmul_bits`: ``((init + p0) + p1) + …``.
    """
    a, b = _as_u8(a_bits), _as_u8(b_bits)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"A[M,K]·B[K,N] needs matching K, got shapes {a.shape} and {b.shape}")
    return _accumulate(lambda kk: fp8_mul_bits(a[:, kk][:, None], b[kk, :][None, :],
                                               fmt_a, fmt_b),
                       a.shape[0], a.shape[1], b.shape[1], init_bits)


#: Accumulation rules of the 8-bit floating-point modes (module docstring): each product
#: rounded into the accumulator on its own, two products and the accumulator rounded once, or
#: four products and the accumulator aligned with truncation and rounded once toward zero
#: (``"dot4"``, :mod:`diptych.rtl.dot_ref`).
RULES = ("sequential", "pair", "dot4", "mx", "mxdot4", "mxint8", "fp4dot8")


def fp8_pair_matmul_bits(a_bits, b_bits, fmt_a: str = "e4m3", fmt_b: str = "e4m3",
                         init_bits=None) -> np.ndarray:
    """``C = init + A·B`` for FP8 A[M, K], B[K, N] under the **pair** rule: in step ``s`` the
    accumulator and the products ``k = 2s`` and ``2s + 1`` are summed exactly and rounded once
    (:func:`fp32_add3_bits`), ``s`` ascending, from +0 or ``init_bits``; an odd ``K`` pairs
    its last product with +0. Returns ``uint32[M, N]``.
    """
    a, b = _as_u8(a_bits), _as_u8(b_bits)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"A[M,K]·B[K,N] needs matching K, got shapes {a.shape} and {b.shape}")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    acc = (np.zeros((m, n), np.uint32) if init_bits is None
           else np.array(np.broadcast_to(_as_u32(init_bits), (m, n)), dtype=np.uint32))

    def product(kk):
        if kk >= k:
            return np.zeros((m, n), np.uint32)                  # +0: the odd K's partner
        return fp8_mul_bits(a[:, kk][:, None], b[kk, :][None, :], fmt_a, fmt_b)
    for kk in range(0, k, 2):
        acc = fp32_add3_bits(acc, product(kk), product(kk + 1))
    return acc


def matmul_bits(mode: str, a, b, init_bits=None, rule: str = "sequential") -> np.ndarray:
    """``C = init + A·B`` in ``mode`` (see :data:`MODES`) as unsigned 32-bit patterns.

    Operands are int8 values for ``int8``, uint16 bit patterns for ``bf16`` and uint8 bit
    patterns for the FP8 modes; ``init_bits`` is uint32 (int32 or FP32 bits). ``rule`` (one of
    :data:`RULES`) is how the FP8 modes accumulate; INT8 and BF16 are the same under both.
    """
    fa, fb = mode_formats(mode)
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, not {rule!r}")
    if rule in ("mx", "mxdot4", "mxint8", "fp4dot8"):
        raise ValueError(f"the {rule} rule needs block scales: diptych.rtl.formats."
                         f"mx_matmul_bits (mx), diptych.rtl.dot_ref.mx_dot_matmul_bits (mxdot4), "
                         f"diptych.rtl.dot_ref.mxint8_matmul_bits (mxint8), "
                         f"diptych.rtl.fp4dot_ref.fp4_matmul_bits (fp4dot8)")
    if mode == "int8":
        init = None if init_bits is None else np.asarray(init_bits).astype(np.uint32).view(np.int32)
        return int8_matmul(a, b, init).view(np.uint32)
    if mode == "bf16":
        return bf16_matmul_bits(a, b, init_bits)
    if rule == "pair":
        return fp8_pair_matmul_bits(a, b, fa, fb, init_bits)
    if rule == "dot4":
        return dot_matmul_bits(_as_u8(a), _as_u8(b), fa, fb, init_bits)
    return fp8_matmul_bits(a, b, fa, fb, init_bits)


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
