"""Exact oracle for the BF16 numerics contract, with fractions.Fraction (slow, obviously correct).

Independent of NumPy and of the RTL: decode bit patterns to exact rationals, do the operation
exactly, round once to FP32 (round-to-nearest-even with gradual underflow, as IEEE 754 does),
then apply the contract's flushes: subnormal inputs read as signed zero, a subnormal result
becomes signed zero, every NaN becomes 0x7FC00000.
"""

from fractions import Fraction

NAN = 0x7FC00000
_MIN_NORMAL = Fraction(1, 2**126)
_OVERFLOW = Fraction(2**128)


def decode32(bits: int):
    """('nan',), ('inf', sign) or ('num', sign, magnitude) with subnormals read as zero."""
    sign = bits >> 31
    e = (bits >> 23) & 0xFF
    f = bits & 0x7FFFFF
    if e == 0xFF:
        return ("nan",) if f else ("inf", sign)
    if e == 0:
        return ("num", sign, Fraction(0))
    return ("num", sign, Fraction(0x800000 + f, 2**23) * Fraction(2) ** (e - 127))


def decode_bf16(bits: int):
    return decode32(bits << 16)


def _floor_log2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    return e


def encode32(sign: int, value: Fraction, flush: bool = True) -> int:
    """Round ``(-1)^sign · value`` (value ≥ 0) to FP32 bits under the contract (``flush=False``:
    plain IEEE rounding, subnormal results kept)."""
    if value == 0:
        return sign << 31
    e = _floor_log2(value)
    quantum = Fraction(2) ** (max(e, -126) - 23)     # subnormal grid below 2^-126
    q = value / quantum
    n = q.numerator // q.denominator
    rem = q - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    r = n * quantum
    if r >= _OVERFLOW:
        return (sign << 31) | 0x7F800000
    if r < _MIN_NORMAL:                               # subnormal (or zero) result: flush
        if not flush:
            return (sign << 31) | int(r / Fraction(2) ** -149)
        return sign << 31
    e2 = _floor_log2(r)
    frac = (r / Fraction(2) ** e2 - 1) * 2**23
    assert frac.denominator == 1
    return (sign << 31) | ((e2 + 127) << 23) | int(frac)


def mul_decoded(x, y) -> int:
    """FP32 bits of the product of two decoded values: exact, then one rounding (encode32)."""
    if x[0] == "nan" or y[0] == "nan":
        return NAN
    sign = x[1] ^ y[1]
    if x[0] == "inf" or y[0] == "inf":
        other = y if x[0] == "inf" else x
        if other[0] == "num" and other[2] == 0:
            return NAN
        return (sign << 31) | 0x7F800000
    return encode32(sign, x[2] * y[2])


def bf16_mul(a: int, b: int) -> int:
    return mul_decoded(decode_bf16(a), decode_bf16(b))


def fp32_add(a: int, b: int) -> int:
    x, y = decode32(a), decode32(b)
    if x[0] == "nan" or y[0] == "nan":
        return NAN
    if x[0] == "inf" and y[0] == "inf":
        return NAN if x[1] != y[1] else (x[1] << 31) | 0x7F800000
    if x[0] == "inf" or y[0] == "inf":
        s = x[1] if x[0] == "inf" else y[1]
        return (s << 31) | 0x7F800000
    vx = -x[2] if x[1] else x[2]
    vy = -y[2] if y[1] else y[2]
    s = vx + vy
    if s == 0:
        both_negative_zero = x[1] == 1 and y[1] == 1   # (-0) + (-0) = -0, otherwise +0
        return 0x80000000 if both_negative_zero else 0
    return encode32(int(s < 0), abs(s))


def fp32_add3(a: int, b: int, c: int) -> int:
    """The pair rule's step: ``a + b + c`` exactly, one rounding (encode32), the contract's
    flushes; exact zero −0 only when all three (flushed) terms are −0."""
    xs = [decode32(v) for v in (a, b, c)]
    if any(x[0] == "nan" for x in xs):
        return NAN
    infs = {x[1] for x in xs if x[0] == "inf"}
    if len(infs) == 2:
        return NAN
    if infs:
        return (infs.pop() << 31) | 0x7F800000
    s = sum((-x[2] if x[1] else x[2]) for x in xs)
    if s == 0:
        return 0x80000000 if all(x[1] == 1 and x[2] == 0 for x in xs) else 0
    return encode32(int(s < 0), abs(s))


def matmul(A, B, mul, init=None, rule: str = "sequential"):
    """Row-major lists of bit patterns → FP32 bits from +0 or ``init``: ``"sequential"``,
    ((init + p0) + p1) + … in ascending k; ``"pair"``, acc ← add3(acc, p(2s), p(2s+1)), an odd
    K's last product paired with +0."""
    M, K, N = len(A), len(B), len(B[0])
    out = []
    for i in range(M):
        row = []
        for j in range(N):
            acc = 0 if init is None else int(init[i][j])
            p = [mul(int(A[i][k]), int(B[k][j])) for k in range(K)]
            if rule == "pair":
                for k in range(0, K, 2):
                    acc = fp32_add3(acc, p[k], p[k + 1] if k + 1 < K else 0)
            else:
                for pk in p:
                    acc = fp32_add(acc, pk)
            row.append(acc)
        out.append(row)
    return out


def bf16_matmul(A, B, init=None):
    return matmul(A, B, bf16_mul, init)


# ---- FP8 / FP6 / FP4 / E8M0 from first principles (OCP OFP8 v1.0, OCP MX v1.0 §5.3-5.4) ------

#: name: (exponent bits, mantissa bits, bias, specials) — restated from the specs, not imported
MINIFLOATS = {
    "e4m3": (4, 3, 7, "e4m3"),    # no Inf; S.1111.111 is NaN; max 448
    "e5m2": (5, 2, 15, "ieee"),   # S.11111.00 Inf, S.11111.xx NaN; max 57344
    "e3m2": (3, 2, 3, "none"),    # max 28
    "e2m3": (2, 3, 1, "none"),    # max 7.5
    "e2m1": (2, 1, 1, "none"),    # max 6
}


def decode_mini(name: str, code: int):
    """('nan',), ('inf', sign) or ('num', sign, exact magnitude); subnormals keep their value."""
    eb, mb, bias, specials = MINIFLOATS[name]
    sign = code >> (eb + mb)
    e = (code >> mb) & ((1 << eb) - 1)
    m = code & ((1 << mb) - 1)
    if specials == "ieee" and e == (1 << eb) - 1:
        return ("inf", sign) if m == 0 else ("nan",)
    if specials == "e4m3" and e == (1 << eb) - 1 and m == (1 << mb) - 1:
        return ("nan",)
    if e == 0:
        return ("num", sign, Fraction(m, 2**mb) * Fraction(2) ** (1 - bias))
    return ("num", sign, (1 + Fraction(m, 2**mb)) * Fraction(2) ** (e - bias))


def mini_max(name: str) -> Fraction:
    eb, mb, bias, specials = MINIFLOATS[name]
    top = (1 << eb) - 1 - (1 if specials == "ieee" else 0)
    top_m = (1 << mb) - 1 - (1 if specials == "e4m3" else 0)
    return (1 + Fraction(top_m, 2**mb)) * Fraction(2) ** (top - bias)


def _rne(q: Fraction) -> int:
    n = q.numerator // q.denominator
    rem = q - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return n


def encode_mini(name: str, sign: int, value: Fraction, saturate: bool = True) -> int:
    """Round ``(-1)^sign · value`` to the format: nearest, ties to even; then saturate to ±max
    or (not saturating) overflow to Inf (E5M2) / NaN (E4M3) beyond max + ½ ulp."""
    eb, mb, bias, specials = MINIFLOATS[name]
    sbit = sign << (eb + mb)
    if value == 0:
        return sbit
    emin = 1 - bias
    e = max(_floor_log2(value), emin)
    quantum = Fraction(2) ** (e - mb)
    r = _rne(value / quantum) * quantum
    if r > mini_max(name):
        if saturate or specials == "none":
            r = mini_max(name)
        elif specials == "ieee":
            return sbit | (((1 << eb) - 1) << mb)
        else:
            return sbit | (1 << (eb + mb)) - 1
    if r == 0:
        return sbit
    if r < Fraction(2) ** emin:
        return sbit | int(r / Fraction(2) ** (emin - mb))
    e2 = _floor_log2(r)
    mant = r / Fraction(2) ** (e2 - mb) - 2**mb
    assert mant.denominator == 1
    return sbit | ((e2 + bias) << mb) | int(mant)


def fp8_mul(a: int, b: int, fa: str, fb: str) -> int:
    """Exact FP8 × FP8 product to FP32 bits (FP8 subnormals honoured, NaN canonical)."""
    return mul_decoded(decode_mini(fa, a), decode_mini(fb, b))


def fp8_matmul(A, B, fa: str, fb: str, init=None, rule: str = "sequential"):
    return matmul(A, B, lambda a, b: fp8_mul(a, b, fa, fb), init, rule)


def fp32_mul(a: int, b: int) -> int:
    """FP32 × FP32 under the contract (inputs DAZ, one rounding, result FTZ, NaN canonical)."""
    return mul_decoded(decode32(a), decode32(b))


#: The largest finite FP32 value.
FP32_MAX = Fraction(2**24 - 1) * Fraction(2) ** (127 - 23)


def rz32(v: Fraction) -> Fraction:
    """Round toward zero to FP32 (24 bits), saturating at the largest finite, flushing below
    2^-126: the dot4 rule's step 5 on an exact value."""
    if v == 0:
        return Fraction(0)
    s, a = (1 if v > 0 else -1), abs(v)
    if a >= FP32_MAX:
        return s * FP32_MAX
    if a < Fraction(2) ** -126:
        return Fraction(0)
    q = Fraction(2) ** (_floor_log2(a) - 23)
    return s * (a // q) * q


def fp32_value(bits: int) -> Fraction:
    """Exact value of a finite FP32 pattern (gradual: subnormals keep their value)."""
    s, e, f = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    v = Fraction(f, 2**23) * Fraction(2) ** -126 if e == 0 else \
        (1 + Fraction(f, 2**23)) * Fraction(2) ** (e - 127)
    return -v if s else v


# ---- block-scaled formats (OCP MX v1.0 §6.1-6.3; NVIDIA NVFP4) ----------------------------

#: block format: (element, block size, scale kind)
BLOCKS = {
    "mxfp8_e4m3": ("e4m3", 32, "e8m0"), "mxfp8_e5m2": ("e5m2", 32, "e8m0"),
    "mxfp6_e3m2": ("e3m2", 32, "e8m0"), "mxfp6_e2m3": ("e2m3", 32, "e8m0"),
    "mxfp4": ("e2m1", 32, "e8m0"), "mxint8": ("int8", 32, "e8m0"), "nvfp4": ("e2m1", 16, "e4m3"),
}


def decode_element(elem: str, code: int):
    if elem == "int8":
        v = code - 256 if code >= 128 else code
        return ("num", int(v < 0), Fraction(abs(v), 64))
    return decode_mini(elem, code)


def decode_scale(kind: str, code: int):
    if kind == "e8m0":
        return ("nan",) if code == 0xFF else ("num", 0, Fraction(2) ** (code - 127))
    return decode_mini("e4m3", code)


def _emax_elem(elem: str) -> int:
    return 0 if elem == "int8" else _floor_log2(mini_max(elem))


def _encode_element(elem: str, v: Fraction) -> int:
    """Nearest-even, saturating conversion of an exact value to an element code."""
    if elem == "int8":
        n = max(-127, min(127, _rne(abs(v) * 64) * (1 if v >= 0 else -1)))
        return n & 0xFF
    return encode_mini(elem, int(v < 0), abs(v), saturate=True)


def mx_quantize_block(values, fmt: str):
    """MX §6.3 Algorithm 1 on one block of finite floats: (scale code, element codes)."""
    elem, _, _ = BLOCKS[fmt]
    vals = [Fraction(float(v)) for v in values]
    amax = max(abs(v) for v in vals)
    shared = (_floor_log2(amax) if amax else -126) - _emax_elem(elem)
    shared = max(shared, -127)
    X = Fraction(2) ** shared
    return shared + 127, [_encode_element(elem, v / X) for v in vals]


def nvfp4_tensor_scale(values) -> Fraction:
    """fp32(amax / (6 · 448)), IEEE rounding; 1 when that is zero."""
    amax = max(abs(Fraction(float(v))) for v in values)
    s = fp32_value(encode32(0, amax / (6 * 448), flush=False))
    return s if s else Fraction(1)


def nvfp4_quantize_block(values, tensor_scale: Fraction):
    """(E4M3 scale code, E2M1 codes) of one 16-element block, given the FP32 tensor scale."""
    vals = [Fraction(float(v)) for v in values]
    amax = max(abs(v) for v in vals)
    s_code = encode_mini("e4m3", 0, amax / (6 * tensor_scale), saturate=True)
    s = decode_mini("e4m3", s_code)[2]
    if s == 0:
        return s_code, [0] * len(vals)
    return s_code, [_encode_element("e2m1", v / (s * tensor_scale)) for v in vals]


def block_dot(fmt_a: str, a_codes, a_scales, fmt_b: str, b_codes, b_scales,
              ts_a=None, ts_b=None) -> int:
    """FP32 bits of the dot of two blocked vectors under formats.py's stated rules."""
    ea, blk, ka = BLOCKS[fmt_a]
    eb, _, kb = BLOCKS[fmt_b]
    acc = 0
    for j in range(len(a_scales)):
        sa, sb = decode_scale(ka, int(a_scales[j])), decode_scale(kb, int(b_scales[j]))
        terms = [(decode_element(ea, int(x)), decode_element(eb, int(y)))
                 for x, y in zip(a_codes[j * blk:(j + 1) * blk], b_codes[j * blk:(j + 1) * blk])]
        nan = sa[0] == "nan" or sb[0] == "nan"
        infs = set()
        total = Fraction(0)
        for x, y in terms:
            if x[0] == "nan" or y[0] == "nan":
                nan = True
                continue
            sign = x[1] ^ y[1]
            if x[0] == "inf" or y[0] == "inf":
                other = y if x[0] == "inf" else x
                if other[0] == "num" and other[2] == 0:
                    nan = True
                else:
                    infs.add(sign)
                continue
            p = x[2] * y[2]
            total += -p if sign else p
        if nan or len(infs) == 2:
            dot = NAN
        elif infs:
            dot = (infs.pop() << 31) | 0x7F800000
        else:
            v = total * sa[2] * sb[2]
            dot = 0 if v == 0 else encode32(int(v < 0), abs(v))
        acc = fp32_add(acc, dot)
    if ts_a is not None or ts_b is not None:
        alpha = encode32(0, (ts_a or Fraction(1)) * (ts_b or Fraction(1)))
        acc = fp32_mul(acc, alpha)
    return acc
