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


def encode32(sign: int, value: Fraction) -> int:
    """Round ``(-1)^sign · value`` (value ≥ 0) to FP32 bits under the contract."""
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
        return sign << 31
    e2 = _floor_log2(r)
    frac = (r / Fraction(2) ** e2 - 1) * 2**23
    assert frac.denominator == 1
    return (sign << 31) | ((e2 + 127) << 23) | int(frac)


def bf16_mul(a: int, b: int) -> int:
    x, y = decode_bf16(a), decode_bf16(b)
    if x[0] == "nan" or y[0] == "nan":
        return NAN
    sign = x[1] ^ y[1]
    if x[0] == "inf" or y[0] == "inf":
        other = y if x[0] == "inf" else x
        if other[0] == "num" and other[2] == 0:
            return NAN
        return (sign << 31) | 0x7F800000
    return encode32(sign, x[2] * y[2])


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


def bf16_matmul(A, B, init=None):
    """Row-major lists of bf16 bits → FP32 bits, ((init + p0) + p1) + … in ascending k."""
    M, K, N = len(A), len(B), len(B[0])
    out = []
    for i in range(M):
        row = []
        for j in range(N):
            acc = 0 if init is None else int(init[i][j])
            for k in range(K):
                acc = fp32_add(acc, bf16_mul(int(A[i][k]), int(B[k][j])))
            row.append(acc)
        out.append(row)
    return out
