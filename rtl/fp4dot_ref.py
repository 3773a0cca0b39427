"""Golden numerics of the FP4 dot-product PE (:mod:`diptych.rtl.fp4dot`), bit-exact.

FP4 at twice FP8's rate: eight E2M1 products a step, as NVIDIA Blackwell's ``tcgen05.mma``
``kind::mxf4`` (E8M0 scales, 32-element blocks: OCP MX v1.0 MXFP4) and ``kind::mxf4nvf4``
(E4M3 scales, 16-element blocks: NVFP4) run FP4 at twice their ``kind::mxf8f6f4`` rate (PTX
ISA, "tcgen05.mma"; infer-2026 declares ``macs_per_pe_per_cycle`` mxfp4 = nvfp4 = 2 × mxfp8).
A block holds a whole number of steps (the blocks are multiples of 8), so every step has one
pair of block scales.

The **fp4dot8** rule (one step: ``acc ← step(acc, a[0:8], b[0:8], X_A, X_B)``)
    1. *Specials*: a NaN accumulator or a NaN scale (E8M0 0xFF; E4M3 S.1111.111) gives
       ``0x7FC00000``; otherwise an Inf accumulator stays that Inf (E2M1 has no Inf or NaN, a
       finite scale times a finite block sum is finite).
    2. *The step sum, exactly*: every E2M1 element is an integer ``k ∈ {0, 1, 2, 3, 4, 6, 8, 12}``
       times 2^-1, so ``P = Σ ±k_a·k_b`` (eight products ≤ 144: ``|P| ≤ 1152``, 12 signed bits)
       is the exact dot in units of 2^-2 — no alignment, no loss.
    3. *Scale*: ``S = P · X_A · X_B`` exactly. MXFP4: ``X = 2^(code − 127)`` (an exponent add);
       NVFP4: ``X`` an E4M3 value ``m·2^e`` (not a power of two: the two 4-bit significands
       multiply, ``m_A·m_B ≤ 225``, and the exponents add; the scale's sign bit is honoured as a
       sign, as :func:`diptych.rtl.minifloat.decode` reads it), so ``|S|`` is an integer of at
       most 18 bits times a power of two. The per-tensor FP32 scales of NVFP4 are **not** in
       the PE: :func:`nvfp4_matmul_bits` applies ``alpha`` to the PE's result exactly as
       :func:`diptych.rtl.formats.block_matmul_bits` does
       (:func:`~diptych.rtl.formats.apply_alpha`).
    4. *Align and add*: two terms, the accumulator (FP32; a subnormal reads as zero of its sign;
       ``1.f`` with its exponent) and ``S`` (its leading bit found by a leading-zero count); with
       ``emax`` the larger leading-bit exponent of the nonzero terms, each is truncated toward
       zero (on its magnitude) to a multiple of ``u = 2^(emax − F)``, ``F`` = :data:`FP4_FRAC_BITS`
       = 26 (as the dot4 rule); the larger term keeps every bit (24 and 18 ≤ F + 1), so only
       the smaller one loses, less than ``u``. The two are added exactly.
    5. *Round once*, as the dot4 rule's step 5 (:func:`diptych.rtl.dot_ref.rz_fp32_bits`):
       toward zero to FP32, ±0x7F7FFFFF past the top, flushed to zero of its sign below 2^-126;
       an exact zero is +0 unless the accumulator and all eight scaled products are −0.

Error bound (``tests/rtl/test_rtl_fp4dot.py`` checks it against the exact Fraction oracle): with
``E = acc + S`` exact and ``T`` the sum of step 4, ``|T − E| < u``, so the result lies in
``[rz(E − u), rz(E + u)]`` (``rz``: step 5 on an exact value). The dot4 rule truncates each
product at the alignment (``(t − 1)·u`` with five terms); here the step's products are summed
exactly first, which costs one 12-bit adder tree, and NVFP4's scale one 12 × 8 multiply.
"""

from __future__ import annotations

import numpy as np

from .dot_ref import _fp8_operand, _matmul, block_scales, rz_fp32_bits

__all__ = ["FP4_GROUP", "FP4_FRAC_BITS", "fp4_step_bits", "fp4_matmul_bits",
           "nvfp4_matmul_bits", "scale_value"]

#: Products added per step.
FP4_GROUP = 8
#: Fraction bits kept below the larger term's leading bit (step 4).
FP4_FRAC_BITS = 26
_NAN = 0x7FC00000
_SCALES = {"mxfp4": "e8m0", "nvfp4": "e4m3"}


def scale_value(kind: str, code: int):
    """A block scale as ``(sign, n, q)``, value ``(−1)^sign · n · 2^q``, or None if NaN."""
    code = int(code)
    if kind == "e8m0":
        return None if code == 0xFF else (0, 1, code - 127)
    d = _fp8_operand(code, "e4m3")
    if d[0] != "num":
        return None
    return d[1], d[2], d[3] - d[4]


def _check_mode(mode: str) -> str:
    if mode not in _SCALES:
        raise ValueError(f"mode must be one of {', '.join(_SCALES)} (the fp4dot8 datapath), "
                         f"not {mode!r}")
    return _SCALES[mode]


def fp4_step_bits(acc: int, a_codes, b_codes, mode: str, sa: int, sb: int,
                  frac_bits: int = FP4_FRAC_BITS) -> int:
    """One step of the fp4dot8 rule (module docstring): ``acc`` FP32 bits, ``a_codes``/
    ``b_codes`` E2M1 codes (any number; the PE takes :data:`FP4_GROUP`), ``sa``/``sb`` the
    block-scale codes of ``mode`` (``"mxfp4"``: E8M0, ``"nvfp4"``: E4M3)."""
    kind = _check_mode(mode)
    acc = int(acc)
    ea, fa, acc_sign = (acc >> 23) & 0xFF, acc & 0x7FFFFF, acc >> 31
    xa, xb = scale_value(kind, sa), scale_value(kind, sb)
    if (ea == 0xFF and fa) or xa is None or xb is None:
        return _NAN
    if ea == 0xFF:
        return acc
    s_sign, s_n, s_q = xa[0] ^ xb[0], xa[1] * xb[1], xa[2] + xb[2]
    total, all_neg_zero = 0, True
    for a, b in zip(a_codes, b_codes):
        x, y = _fp8_operand(int(a), "e2m1"), _fp8_operand(int(b), "e2m1")
        n = (x[2] << x[3]) * (y[2] << y[3])               # k_a·k_b, units of 2^-2
        sign = x[1] ^ y[1] ^ s_sign
        all_neg_zero &= sign == 1 and n * s_n == 0
        total += -n if x[1] ^ y[1] else n
    terms = []                                             # (sign, n, q): (−1)^sign · n · 2^q
    if ea:
        terms.append((acc_sign, fa | (1 << 23), ea - 150))
    if total and s_n:
        terms.append((int((total < 0) ^ s_sign), abs(total) * s_n, s_q - 2))
    if not terms:
        return 0x80000000 if acc_sign and all_neg_zero else 0
    emax = max(q + n.bit_length() - 1 for _, n, q in terms)
    lsb = emax - frac_bits
    out = 0
    for sign, n, q in terms:
        mag = n << (q - lsb) if q >= lsb else n >> (lsb - q)      # truncation toward zero
        out += -mag if sign else mag
    if out == 0:
        return 0
    return rz_fp32_bits(int(out < 0), abs(out), lsb)


def _operands(a_codes, b_codes, a_scales, b_scales, block: int):
    a, b = np.asarray(a_codes), np.asarray(b_codes)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"A[M,K]·B[K,N] needs matching K, got shapes {a.shape} and {b.shape}")
    if (isinstance(block, bool) or not isinstance(block, int) or block < FP4_GROUP
            or block % FP4_GROUP):
        raise ValueError(f"block must be a positive multiple of {FP4_GROUP}, not {block!r}")
    sa, sb = block_scales(a, b, a_scales, b_scales, block)
    return a, b, sa, sb


def fp4_matmul_bits(a_codes, a_scales, b_codes, b_scales, mode: str = "mxfp4",
                    block: int | None = None, init_bits=None,
                    frac_bits: int = FP4_FRAC_BITS) -> np.ndarray:
    """``C = init + A·B`` of FP4 operands by the **fp4dot8** rule, as the PE computes it (no
    tensor scale): step ``s`` adds the products ``k = 8s … 8s + 7`` with the scales of the block
    holding them (a short last group is padded with +0 products), ``s`` ascending, from +0 or
    ``init_bits``. A[M, K], B[K, N] E2M1 codes; A_s[M, nb], B_s[nb, N] scale codes of
    ``mode``, ``nb = ceil(K / block)``; ``block`` a multiple of 8 (default: the mode's, 32 for
    MXFP4, 16 for NVFP4). Returns ``uint32[M, N]``."""
    _check_mode(mode)
    from .datapath import FP4_MODES
    block = FP4_MODES[mode][2] if block is None else block
    a, b, sa, sb = _operands(a_codes, b_codes, a_scales, b_scales, block)

    def step(acc, ag, bg, sc):
        return fp4_step_bits(acc, ag, bg, mode, *sc, frac_bits)
    return _matmul(a, b, None, None, init_bits, frac_bits, group=FP4_GROUP, step=step,
                   scales=lambda i, j, s: (sa[i, s // block], sb[s // block, j]))


def nvfp4_matmul_bits(a_codes, a_scales, b_codes, b_scales, ts_a: float, ts_b: float,
                      block: int = 16) -> np.ndarray:
    """NVFP4 ``C = alpha · (A·B)``: the PE's result (:func:`fp4_matmul_bits`, mode nvfp4) times
    ``alpha = fp32(ts_a · ts_b)`` of the FP32 tensor scales, the GEMM epilogue outside the PE,
    exactly as :func:`diptych.rtl.formats.block_matmul_bits` applies it."""
    from .formats import apply_alpha
    return apply_alpha(fp4_matmul_bits(a_codes, a_scales, b_codes, b_scales, "nvfp4", block),
                       ts_a, ts_b)
