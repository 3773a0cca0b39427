"""Golden numerics of the FP8 dot-product PE (:mod:`diptych.rtl.dot`): Python integers, bit-exact.

The **dot4** rule (``DOT_GROUP = 4`` products per step) is how production FP8 datapaths add
several products to an FP32 accumulator: not exactly, but by *truncated alignment to the largest
exponent* and one normalisation per group. Fasi, Higham, Mikaitis & Pranesh, "Numerical behavior
of NVIDIA tensor cores", PeerJ Computer Science 7:e330 (2021), establish it for the V100,
T4 and A100 tensor cores (products exact; significands aligned to the largest exponent among the
products and the accumulator, the bits shifted out **truncated**; one fixed-point sum; the
result normalised once and rounded **toward zero**); Khattak & Mikaitis, "Accurate models of
NVIDIA tensor cores", arXiv:2512.07004 (2025), extend the models to the FP8 paths of Hopper and
Blackwell; DeepSeek-V3 (arXiv:2412.19437, §3.3.2) measures the H800's FP8 MMA keeping "around
14 bits" after alignment. Arm's FEAT_FP8DOT4 ``FDOT`` likewise adds four adjacent FP8 products
to one FP32 element.

The rule (one step: ``acc ← dot4(acc, a[0:4], b[0:4])``)
    1. *Specials*: a NaN operand or accumulator, Inf × 0, or Infs of both signs among the products
       and the accumulator give ``0x7FC00000``; otherwise an Inf gives that Inf.
    2. *Terms*: the accumulator (FP32; a subnormal reads as zero of its sign) with significand
       ``1.f`` (24 bits) and unbiased exponent ``x``; each product ``aᵢ·bᵢ`` exactly, as the
       integer product of the FP8 significands (hidden bit included; subnormals ``0.f`` at the
       format's ``emin``) and the **nominal** exponent ``x = xa + xb`` (the sum of the operands'
       unbiased exponents, subnormals at ``emin``): a normal product lies in ``[1, 4)·2^x``, the
       products are not normalised before alignment (that is what saves the hardware four
       normalisers). Zero terms take no part in step 3.
    3. *Alignment*: ``emax`` = the largest ``x`` of the nonzero terms; every term is truncated
       **toward zero** (on its magnitude) to a multiple of ``2^(emax − F)``, ``F`` =
       :data:`DOT_FRAC_BITS` = 26 fraction bits below the largest term's leading bit: FP32's 23
       fraction bits plus 3 guard bits (cf. the extra bits Fasi et al. find in the A100; the
       H800's narrower ≈ 13 is the same algorithm with ``frac_bits=13``).
    4. *Sum*: the truncated terms are added exactly in fixed point (signed, two's complement).
    5. *Normalise and round once*: the sum is normalised and rounded **toward zero** to FP32's 24
       significant bits (Fasi et al.: round toward zero); an exponent past FP32's largest gives
       ±``0x7F7FFFFF`` (round toward zero never reaches Inf), a result below ``2^-126`` flushes to
       zero of the sum's sign, an exact zero is +0 unless every term is −0 (then −0).

The **mxdot4** rule (the block-scaled ``mxdot4`` PE, :class:`diptych.rtl.dot.MxDot4Fp8`) is the
same step on MXFP8 operands: each product is first multiplied by its block's two E8M0 scales,
``2^(sa + sb − 254)`` (OCP MX v1.0 §6.1's ``X_A · X_B``), which only raises its nominal exponent
in step 2, so the accumulator and the scaled products are aligned, truncated and rounded as
above; a NaN scale (0xFF) makes the step NaN (:func:`dot4_bits` with ``scales``,
:func:`mx_dot_matmul_bits`). It is not the exact per-block sum of
:func:`diptych.rtl.formats.block_matmul_bits` (the ``mx`` PE's rule): a block's products are
truncated at each step's alignment and each step rounds toward zero, as FP8 is above.

Error bound (what `tests/rtl/test_rtl_dot.py` checks the rule against, with the exact sum).
Let ``E`` be the exact sum of the terms and ``S`` the fixed-point sum of step 4. A term whose
``x`` is ``emax`` loses nothing (``F ≥ 23`` keeps the accumulator's 24 bits and ``F ≥ 7`` a
product's 8); any other term loses less than one unit ``u = 2^(emax − F)``; so with ``t`` terms
``|S − E| < (t − 1)·u`` — at most ``4u`` for four products and the accumulator (with ``F < 23``
the largest term may lose bits too, and the bound is ``t·u``). Step 5 maps
``S`` monotonically (truncation toward zero, saturation at ±max, flush below 2^-126), so the
result ``R`` lies between ``rz(E − (t − 1)u)`` and ``rz(E + (t − 1)u)``, where ``rz`` is step 5
applied to an exact value. That interval is tight enough that a window one bit narrower than claimed leaves
it on cancelling sums (``tests/rtl/test_rtl_dot.py``).
"""

from __future__ import annotations

import numpy as np

from .minifloat import FORMATS

__all__ = ["DOT_GROUP", "DOT_FRAC_BITS", "FP32_MAX_BITS", "dot4_bits", "dot_matmul_bits",
           "rz_fp32_bits", "fp8_terms", "mx_dot_matmul_bits", "MXINT8_ELEM_EXP", "MXINT8_LEAD",
           "mxint8_dot4_bits", "mxint8_matmul_bits", "block_scales"]

#: Products added per step (per cycle of the PE).
DOT_GROUP = 4
#: Fraction bits kept below the largest term's leading bit (step 3).
DOT_FRAC_BITS = 26
#: Largest finite FP32 (what an overflow truncates to).
FP32_MAX_BITS = 0x7F7FFFFF
_NAN = 0x7FC00000


def _fp8_operand(code: int, fmt: str):
    """('nan',), ('inf', sign) or ('num', sign, significand with hidden bit, unbiased exponent,
    fraction bits) of an FP8 (or FP6/FP4: the mxdot4 rule's MXFP6/MXFP4 modes) code; subnormals
    are ``0.f`` at ``emin``."""
    f = FORMATS[fmt]
    sign = (code >> (f.bits - 1)) & 1
    e = (code >> f.man_bits) & ((1 << f.exp_bits) - 1)
    m = code & ((1 << f.man_bits) - 1)
    top = e == (1 << f.exp_bits) - 1
    if f.specials == "ieee" and top:
        return ("inf", sign) if m == 0 else ("nan",)
    if f.specials == "e4m3" and top and m == (1 << f.man_bits) - 1:
        return ("nan",)
    if e == 0:
        return ("num", sign, m, f.emin, f.man_bits)
    return ("num", sign, m | (1 << f.man_bits), e - f.bias, f.man_bits)


def fp8_terms(acc: int, a_codes, b_codes, fmt_a: str, fmt_b: str, scale_exp: int = 0):
    """Step 1 and 2 of the rule: ``('special', bits)`` or ``('terms', [(sign, n, x, q)…])`` with
    each term's value ``(−1)^sign · n · 2^q`` and nominal exponent ``x`` (``n = 0``: a zero);
    every product is scaled by ``2^scale_exp`` (the block scales of the mxdot4 rule)."""
    ea = (acc >> 23) & 0xFF
    fa = acc & 0x7FFFFF
    sa = acc >> 31
    nan = ea == 0xFF and fa != 0
    infs = {sa} if ea == 0xFF and fa == 0 else set()
    terms = [(sa, 0, 0, 0) if ea in (0, 0xFF) else (sa, fa | (1 << 23), ea - 127, ea - 127 - 23)]
    for a, b in zip(a_codes, b_codes):
        x, y = _fp8_operand(int(a), fmt_a), _fp8_operand(int(b), fmt_b)
        if x[0] == "nan" or y[0] == "nan":
            nan = True
            continue
        if x[0] == "inf" or y[0] == "inf":
            other = y if x[0] == "inf" else x
            if other[0] == "num" and other[2] == 0:          # Inf × 0
                nan = True
            else:
                infs.add((x[1] ^ y[1]))
            continue
        n = x[2] * y[2]
        x_p = x[3] + y[3] + scale_exp
        terms.append((x[1] ^ y[1], n, x_p, x_p - x[4] - y[4]))
    if nan or len(infs) == 2:
        return "special", _NAN
    if infs:
        return "special", 0x7F800000 | (infs.pop() << 31)
    return "terms", terms


def rz_fp32_bits(sign: int, n: int, q: int) -> int:
    """Step 5 on an exact value ``(−1)^sign · n · 2^q`` (``n ≥ 0`` integer): FP32 bits rounded
    toward zero, ±0x7F7FFFFF past the largest exponent, flushed to signed zero below 2^-126."""
    if n == 0:
        return sign << 31
    lead = n.bit_length() - 1
    exp = q + lead                                   # unbiased exponent of the leading bit
    if exp > 127:
        return (sign << 31) | FP32_MAX_BITS
    if exp < -126:
        return sign << 31
    sig = n >> (lead - 23) if lead >= 23 else n << (23 - lead)
    return (sign << 31) | ((exp + 127) << 23) | (sig & 0x7FFFFF)


def dot4_bits(acc: int, a_codes, b_codes, fmt_a: str = "e4m3", fmt_b: str = "e4m3",
              frac_bits: int = DOT_FRAC_BITS, scales: tuple[int, int] | None = None) -> int:
    """One step of the dot4 rule (module docstring): ``acc`` FP32 bits, ``a_codes``/``b_codes``
    the group's FP8 codes (any number; the PE takes :data:`DOT_GROUP`), ``frac_bits`` = ``F``.
    ``scales``: the E8M0 block-scale codes ``(sa, sb)`` of the **mxdot4** rule (every product
    times ``2^(sa + sb − 254)`` before step 3, i.e. its nominal exponent raised by that much;
    a NaN scale, 0xFF, makes the step NaN); None: the plain dot4 rule."""
    scale_exp = 0
    if scales is not None:
        sa, sb = (int(x) for x in scales)
        if 0xFF in (sa, sb):
            return _NAN
        scale_exp = sa + sb - 254
    kind, val = fp8_terms(int(acc), a_codes, b_codes, fmt_a, fmt_b, scale_exp)
    if kind == "special":
        return val
    nonzero = [t for t in val if t[1]]
    if not nonzero:
        return 0x80000000 if all(t[0] for t in val) else 0
    return _truncated_sum(nonzero, frac_bits)


def _truncated_sum(terms, frac_bits: int) -> int:
    """Steps 3–5 on nonzero terms ``(sign, n, x, q)`` (value ``(−1)^sign · n · 2^q``, nominal
    exponent ``x``): each truncated toward zero to a multiple of ``2^(emax − frac_bits)``,
    summed exactly, rounded toward zero to FP32 (an exact zero sum is +0)."""
    lsb = max(t[2] for t in terms) - frac_bits
    total = 0
    for sign, n, _, q in terms:
        mag = n << (q - lsb) if q >= lsb else n >> (lsb - q)      # truncation toward zero
        total += -mag if sign else mag
    if total == 0:
        return 0
    return rz_fp32_bits(int(total < 0), abs(total), lsb)


def _matmul(a, b, fmt_a, fmt_b, init_bits, frac_bits, scales=None, step=None,
            group: int = DOT_GROUP) -> np.ndarray:
    """The steps of ``init + A·B``, ``group`` products each (``scales(i, j, s)``: the step's
    block scales, or None; ``step(acc, a_group, b_group, scales)``: the step rule, default
    :func:`dot4_bits`)."""
    if step is None:
        def step(acc, ag, bg, sc):
            return dot4_bits(acc, ag, bg, fmt_a, fmt_b, frac_bits, sc)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    pad = -k % group                          # +0 × +0 products: what the PE's lanes see
    a, b = np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, pad), (0, 0)))
    out = (np.zeros((m, n), np.uint32) if init_bits is None
           else np.array(np.broadcast_to(np.asarray(init_bits, np.uint32), (m, n))))
    for i in range(m):
        for j in range(n):
            acc = int(out[i, j])
            for s in range(0, k, group):
                acc = step(acc, a[i, s:s + group], b[s:s + group, j],
                           None if scales is None else scales(i, j, s))
            out[i, j] = acc
    return out


def _operands(a_codes, b_codes):
    a, b = np.asarray(a_codes), np.asarray(b_codes)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"A[M,K]·B[K,N] needs matching K, got shapes {a.shape} and {b.shape}")
    return a, b


def dot_matmul_bits(a_codes, b_codes, fmt_a: str = "e4m3", fmt_b: str = "e4m3",
                    init_bits=None, frac_bits: int = DOT_FRAC_BITS) -> np.ndarray:
    """``C = init + A·B`` for FP8 A[M, K], B[K, N] by the dot4 rule: step ``s`` adds the products
    ``k = 4s … 4s + 3`` (a short last group is padded with +0 products), ``s`` ascending, from +0
    or ``init_bits``. Returns ``uint32[M, N]``."""
    a, b = _operands(a_codes, b_codes)
    return _matmul(a, b, fmt_a, fmt_b, init_bits, frac_bits)


def mx_dot_matmul_bits(a_codes, a_scales, b_codes, b_scales, fmt_a: str = "e4m3",
                       fmt_b: str = "e4m3", block: int = 32, init_bits=None,
                       frac_bits: int = DOT_FRAC_BITS) -> np.ndarray:
    """``C = init + A·B`` of MXFP8 operands by the **mxdot4** rule: the dot4 rule with each
    group's products scaled by its block's E8M0 scales, ``2^(sa + sb − 254)`` (an exponent add
    before the alignment; :func:`dot4_bits` with ``scales``). A[M, K], B[K, N] element codes,
    A_s[M, nb], B_s[nb, N] scale codes, ``nb = ceil(K / block)``, ``block`` a multiple of
    :data:`DOT_GROUP` (a group never straddles two blocks); a short last group is padded with
    +0 products. Returns ``uint32[M, N]``."""
    a, b, scales = _block_operands(a_codes, a_scales, b_codes, b_scales, block)
    return _matmul(a, b, fmt_a, fmt_b, init_bits, frac_bits, scales)


def _block_operands(a_codes, a_scales, b_codes, b_scales, block):
    """``(A, B, scales(i, j, s))`` of a block-scaled product, or ValueError naming a bad block
    size or scale shape."""
    a, b = _operands(a_codes, b_codes)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1 or block % DOT_GROUP:
        raise ValueError(f"block must be a positive multiple of {DOT_GROUP}, not {block!r}")
    sa, sb = block_scales(a, b, a_scales, b_scales, block)
    return a, b, lambda i, j, s: (sa[i, s // block], sb[s // block, j])


def block_scales(a, b, a_scales, b_scales, block: int):
    """The scale arrays of A[M,K]·B[K,N] in blocks of ``block``: ``[M, ceil(K/block)]`` and
    ``[ceil(K/block), N]``, or ValueError naming the shapes found."""
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    nb = -(-k // block)
    sa, sb = np.asarray(a_scales), np.asarray(b_scales)
    if sa.shape != (m, nb) or sb.shape != (nb, n):
        raise ValueError(f"scales must be [M, {nb}] and [{nb}, N] for K = {k} in blocks of "
                         f"{block}, not {sa.shape} and {sb.shape}")
    return sa, sb


# ---- MXINT8 (the mxint8 PE, diptych.rtl.mxint8) -----------------------------------------------

#: An MXINT8 element is its INT8 code (two's complement) times 2^-6 (OCP MX v1.0 §5.2, table 1:
#: "INT8, implicit scale 2^-6", values −2 … 1 63/64).
MXINT8_ELEM_EXP = -6
#: The bit of |S| (S: the step's integer sum of four INT8 products, |S| ≤ 4 · 128² = 2^16) that
#: the rule treats as the product term's leading bit: its nominal exponent is that bit's weight,
#: so the term is at most 2 · 2^x, as an FP8 product is below 4 · 2^x.
MXINT8_LEAD = 15


def _int8(code) -> int:
    """The signed value of an INT8 code (a byte, two's complement)."""
    return ((int(code) & 0xFF) ^ 0x80) - 0x80


def mxint8_dot4_bits(acc: int, a_codes, b_codes, scales: tuple[int, int],
                     frac_bits: int = DOT_FRAC_BITS) -> int:
    """One step of the **mxint8** rule: ``acc`` FP32 bits, ``a_codes``/``b_codes`` the step's
    INT8 codes (bytes, two's complement; any number, the PE takes :data:`DOT_GROUP`),
    ``scales`` the E8M0 codes ``(sa, sb)`` of their blocks.

    The products are summed **exactly** as integers, ``S = Σ aᵢ·bᵢ`` (an integer adder tree:
    the four INT8 products share one exponent, so nothing is aligned among them), and ``S`` is
    one term of value ``S · 2^(sa + sb − 254 − 12)`` (each element carries 2^-6) with nominal
    exponent ``x = sa + sb − 254 − 12 + MXINT8_LEAD``. The accumulator and that term then go
    through steps 3–5 of the dot4 rule (module docstring): truncated alignment to the larger
    nominal exponent at ``frac_bits`` fraction bits, one fixed-point add, one rounding toward
    zero (±0x7F7FFFFF past FP32's top, flushed below 2^-126). Specials: a NaN scale (0xFF) or
    NaN accumulator gives NaN, an Inf accumulator that Inf (INT8 elements have none); an exact
    zero is +0 (an integer sum has no −0). Error bound: two terms, so the result lies in
    ``[rz(E − u), rz(E + u)]``, ``u = 2^(emax − frac_bits)`` (``frac_bits ≥ 23``)."""
    sa, sb = (int(x) for x in scales)
    ea, fa, sgn = (int(acc) >> 23) & 0xFF, int(acc) & 0x7FFFFF, int(acc) >> 31
    if 0xFF in (sa, sb) or (ea == 0xFF and fa):
        return _NAN
    if ea == 0xFF:
        return int(acc)
    s = sum(_int8(x) * _int8(y) for x, y in zip(a_codes, b_codes))
    q_s = sa + sb - 254 + 2 * MXINT8_ELEM_EXP
    terms = []                                       # (sign, n, nominal exponent, q)
    if ea:
        terms.append((sgn, fa | (1 << 23), ea - 127, ea - 127 - 23))
    if s:
        terms.append((int(s < 0), abs(s), q_s + MXINT8_LEAD, q_s))
    return _truncated_sum(terms, frac_bits) if terms else 0


def mxint8_matmul_bits(a_codes, a_scales, b_codes, b_scales, block: int = 32, init_bits=None,
                       frac_bits: int = DOT_FRAC_BITS) -> np.ndarray:
    """``C = init + A·B`` of MXINT8 operands by the mxint8 rule (:func:`mxint8_dot4_bits`): A[M,
    K], B[K, N] INT8 codes (bytes), A_s[M, nb], B_s[nb, N] E8M0 codes, ``nb = ceil(K /
    block)``, ``block`` a multiple of :data:`DOT_GROUP`; steps of four K-consecutive elements in
    ascending order from +0 or ``init_bits`` (a short last step padded with zeros). Returns
    ``uint32[M, N]``."""
    a, b, scales = _block_operands(a_codes, a_scales, b_codes, b_scales, block)
    return _matmul(a, b, "", "", init_bits, frac_bits, scales,
                   step=lambda acc, ag, bg, sc: mxint8_dot4_bits(acc, ag, bg, sc, frac_bits))
