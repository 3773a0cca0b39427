"""TestFloat-style vectors for the FP units, classified on the exact rational result.

Berkeley TestFloat (John R. Hauser, Release 3e, 2018: ``TestFloat-general.html``,
``testfloat_gen.html`` and ``source/genCases_f32.c``) builds its operands as an **exponent
class** OR-ed with a **significand pattern**: exponents of zero/subnormal, the smallest normal,
−24, −2 … 2 around the bias, 24, the largest and Inf/NaN, in both signs (``f32QIn``); patterns
``0``, ``1``, all ones and all ones but the last (``f32P1``, level 1) or single set bits, runs
of ones from the top or the bottom and all ones with one zero (``f32P2``, level 2), and random
operands whose significand is the sum of two such patterns. Level 1 pairs every value of the
small set with every other (interleaved with random cases); level 2 does it with the large set.

This module does the same for the formats the RTL implements — FP32 (the :class:`Fp32Adder` and
the fused datapath's :class:`Fp32Add3`), BF16 (:class:`Bf16Multiplier`) and FP8 E4M3/E5M2 in
all four format pairs (:class:`Fp8Multiplier`) — and adds what TestFloat leaves to chance: the
*relations between operands* that decide a rounding. Exponent differences around the
significand width (alignment, the guard and sticky positions), exact negatives (total
cancellation), near negatives (massive cancellation), sums carried into a new binade by the
rounding increment, exact ties with the last bit even and odd, ties a far term breaks (the
sticky bit alone decides), sums past FLT_MAX and ties into overflow, results at and below
2⁻¹²⁶ (the flush), subnormal and signed-zero inputs, Inf and NaN.

Every vector is **classified by** :func:`classify` **on the exact value** of the operation
(``fractions.Fraction``, from the operands decoded by :mod:`rtl_fraction_ref`), independently of
the generator's intent, of the golden model and of the RTL; so the class counts of a run say
what it exercised. The expected result of every vector is the exact oracle's
(:mod:`rtl_fraction_ref`: one IEEE rounding, then the contract's flushes).

``python tests/rtl/rtl_testfloat.py`` prints the class counts of every unit's vector set;
``--audit`` runs the FP units' mutants (:mod:`rtl_mutants`) against these vectors and against
the older unit tests of ``test_rtl_fp_units.py``; ``--verilator WORK_DIR [--level 2]`` runs a
set on the verilated units (level 2: the benchmark-sized set).
"""

from __future__ import annotations

import functools
import random
import sys
from collections import Counter
from fractions import Fraction

import rtl_fraction_ref as oracle

__all__ = ["UNITS", "CLAIMS", "vectors", "classify", "coverage", "mismatches", "run",
           "fp32_values", "FP32_P1", "fp32_p2"]

_TWO = Fraction(2)
_MIN_NORMAL = _TWO ** -126
_OVERFLOW = _TWO ** 128
_FLT_MAX = (2 - _TWO ** -23) * _TWO ** 127
#: a residue within this fraction of an ulp of the halfway point is a near-tie
_NEAR_TIE = _TWO ** -10

# ---- operands: exponent class | significand pattern (TestFloat's Q × P) ---------------------

#: FP32 biased exponents (TestFloat's f32QIn, plus 2, 253 and 254 for the extremes' neighbours):
#: zero/subnormal, smallest normals, 2^-24, 2^-2 … 2^2, 2^24, the two largest, Inf/NaN
FP32_EXPONENTS = (0, 1, 2, 103, 125, 126, 127, 128, 129, 151, 253, 254, 255)
#: TestFloat's level-1 significand patterns (f32P1)
FP32_P1 = (0x000000, 0x000001, 0x7FFFFF, 0x7FFFFE)


@functools.lru_cache(maxsize=None)
def fp32_p2(bits: int = 23) -> tuple[int, ...]:
    """TestFloat's level-2 significand patterns for a ``bits``-bit fraction (f32P2 for 23):
    zero, every single set bit, runs of ones from the top, all ones with one zero, runs of ones
    from the bottom."""
    ones = (1 << bits) - 1
    pats = [0] + [1 << i for i in range(bits)]
    pats += [ones ^ ((1 << k) - 1) for k in range(bits - 1, -1, -1)]      # top runs
    pats += [ones ^ (1 << i) for i in range(bits)]                       # one zero
    pats += [(1 << k) - 1 for k in range(bits - 1, 1, -1)]               # bottom runs
    return tuple(dict.fromkeys(pats))


def f32(sign: int, exp: int, frac: int) -> int:
    """FP32 bits; ``exp`` clipped to 0 … 255, ``frac`` to 23 bits."""
    return (sign << 31) | (min(max(exp, 0), 255) << 23) | (frac & 0x7FFFFF)


def fp32_values(patterns=FP32_P1, exponents=FP32_EXPONENTS) -> list[int]:
    """Every exponent class with every pattern, both signs (TestFloat's f32NextQInP1)."""
    return [f32(s, e, p) for s in (0, 1) for e in exponents for p in patterns]


def _tf_random_fp32(rng: random.Random) -> int:
    """TestFloat's f32Random: an exponent class or a random exponent weighted towards the bias,
    and a significand that is the sum of two level-2 patterns (or random bits)."""
    p2 = fp32_p2()
    if rng.random() < 0.5:
        e = rng.choice(FP32_EXPONENTS)
    else:
        e = 127 + rng.randint(-(1 << rng.randint(0, 7)), 1 << rng.randint(0, 7))
    frac = ((rng.choice(p2) + rng.choice(p2)) if rng.random() < 0.75
            else rng.getrandbits(23))
    return f32(rng.getrandbits(1), e, frac)


def _mid(rng: random.Random, lo: int = 40, hi: int = 215) -> int:
    """A normal FP32 operand of moderate exponent with a pattern or random significand."""
    frac = rng.choice(fp32_p2()) if rng.random() < 0.5 else rng.getrandbits(23)
    return f32(rng.getrandbits(1), rng.randint(lo, hi), frac)


def _exp(x: int) -> int:
    return (x >> 23) & 0xFF


# ---- rounding-relevant relations: FP32 two- and three-operand sums ---------------------------

def _add_relations(rng: random.Random, reps: int) -> list[tuple[int, int]]:
    """Pairs (a, b) in the relations that decide an FP32 add's rounding (see the module doc)."""
    out = []
    p1 = FP32_P1
    for _ in range(reps):
        a = _mid(rng)
        ea, sa = _exp(a), a >> 31
        for d in range(0, 32):                                   # alignment 0 … 31 binades
            out.append((a, f32(rng.getrandbits(1), ea - d, rng.choice(fp32_p2()))))
        out.append((a, a ^ 0x80000000))                          # total cancellation
        for k in (-3, -1, 1, 2):                                 # massive cancellation
            out.append((a, (a ^ 0x80000000) + k))
        out.append((f32(sa, ea, 0), f32(1 - sa, ea - 1, 0x7FFFFF)))   # 2^e − (2^e − ulp/2)
        for lsb in (0, 1):                                       # exact ties, LSB even and odd
            t = (a & ~1) | lsb
            out.append((t, f32(sa, ea - 24, 0)))                 # + ½ ulp
            out.append((t, f32(1 - sa, ea - 24, 0)))             # − ½ ulp
            out.append((t, f32(sa, ea - 23, 0x400000)))          # + 1½ ulp
            out.append((t, f32(sa, ea - 24, 1)))                 # just above ½ ulp: sticky
            out.append((t, f32(1 - sa, ea - 24, 1)))
            out.append((t, f32(sa, ea - 25, 0x7FFFFF)))          # just below ½ ulp
            out.append((t, f32(sa, ea - 24, rng.choice(fp32_p2()) | 1)))
        out.append((f32(sa, ea, 0x7FFFFF), f32(sa, ea - 24, rng.choice(p1))))   # carry-out
        out.append((f32(sa, ea, 0x7FFFFF), f32(sa, ea - 23, rng.getrandbits(23))))
        out.append((a, f32(sa, ea, rng.getrandbits(23))))        # same binade: carry-in
        s = rng.getrandbits(1)                                   # the top: FLT_MAX and beyond
        top = f32(s, 254, rng.choice((0x7FFFFF, 0x7FFFFE, rng.getrandbits(23))))
        out.append((top, f32(s, 254 - rng.randint(0, 26), rng.choice(fp32_p2()))))
        out.append((f32(s, 254, 0x7FFFFF), f32(s, 230, rng.choice(p1))))     # FLT_MAX + ½ ulp
        out.append((f32(s, 254, 0x7FFFFE), f32(s, 230, 0)))                  # tie, even: stays
        out.append((f32(s, 254, 0x7FFFFF), f32(s, 229, 0x7FFFFF)))           # just below ½ ulp
        lo = f32(s, rng.randint(1, 3), rng.choice(fp32_p2()))    # the bottom: flush
        out.append((lo, f32(1 - s, rng.randint(1, 3), rng.choice(fp32_p2()))))
        out.append((f32(s, 2, 0), f32(1 - s, 1, 0)))             # 2^-125 − 2^-126 = 2^-126
        out.append((f32(s, 1, rng.getrandbits(23)), f32(s, rng.randint(1, 30), 0)))
        sub = f32(rng.getrandbits(1), 0, rng.getrandbits(23) | 1)     # subnormal inputs
        out.append((sub, rng.choice((a, 0, 0x80000000, sub ^ 0x80000000, f32(s, 1, 0)))))
    zeros = (0, 0x80000000, 0x00000001, 0x807FFFFF)
    out += [(x, y) for x in zeros for y in zeros]                 # signed zeros
    specials = (0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC12345, 0x3F800000,
                0x80000000, 0x00000000, 0x7F7FFFFF)
    out += [(x, y) for x in specials for y in specials]
    return out


def _add3_relations(rng: random.Random, reps: int) -> list[tuple[int, int, int]]:
    """Triples (a, b, c) in the relations that decide a one-rounding three-term sum: a pair
    cancelling with the third term 0 … 70 binades below, in every position; ties that a far
    third term breaks (round to nearest decided by the sticky bit alone); split ties; carry-out;
    overflow; the flush; signed zeros."""
    out = []

    def perm(t):
        k = rng.randrange(3)
        return t[k:] + t[:k]

    for _ in range(reps):
        a = _mid(rng, 80, 200)
        ea, sa = _exp(a), a >> 31
        far = f32(rng.getrandbits(1), ea - rng.randint(0, 70), rng.choice(fp32_p2()))
        out.append(perm((a, a ^ 0x80000000, far)))                   # exact pair, third left
        near = (a ^ 0x80000000) + rng.choice((-2, -1, 1, 3))
        out.append(perm((a, near, f32(rng.getrandbits(1), ea - rng.randint(10, 70),
                                      rng.getrandbits(23)))))      # massive cancellation
        # accumulator a cancelling an 8-bit "product" to a few ulps, an 8-bit term below
        b = (a & 0xFFFF0000) ^ 0x80000000
        out.append(((a + rng.randint(-3, 3)) & 0xFFFFFFFF, b,
                    f32(rng.getrandbits(1), ea - 23 - rng.randint(0, 40),
                        rng.getrandbits(7) << 16)))
        for lsb in (0, 1):
            t = (a & ~1) | lsb
            half = f32(sa, ea - 24, 0)
            tiny = f32(rng.getrandbits(1), ea - rng.randint(30, 60), rng.getrandbits(23))
            out.append(perm((t, half, 0)))                          # exact tie
            out.append(perm((t, half, tiny)))                       # a far term breaks it
            out.append(perm((t, f32(sa, ea - 25, 0), f32(sa, ea - 25, 0))))   # split tie
            out.append(perm((t, f32(sa, ea - 25, 0), f32(sa, ea - 26, rng.getrandbits(23)))))
        out.append(perm((f32(sa, ea, 0x7FFFFF), f32(sa, ea - 24, 0),
                         f32(sa, ea - rng.randint(25, 60), 0))))      # carry-out
        s = rng.getrandbits(1)
        out.append(perm((f32(s, 254, rng.getrandbits(23)), f32(s, 254 - rng.randint(0, 3),
                                                                rng.getrandbits(23)),
                         f32(1 - s, rng.randint(200, 254), rng.getrandbits(23)))))
        out.append(perm((f32(s, 254, 0x7FFFFF), f32(s, 230, 0), f32(1 - s, 200, 0))))
        out.append(perm((f32(s, rng.randint(1, 3), rng.getrandbits(23)),
                         f32(1 - s, rng.randint(1, 3), rng.getrandbits(23)),
                         f32(rng.getrandbits(1), rng.randint(0, 2), rng.getrandbits(23)))))
        out.append(perm((f32(s, 2, 0), f32(1 - s, 1, 0), rng.choice((0, 0x80000000)))))
        out.append(perm((f32(s, 1, rng.getrandbits(23)), f32(1 - s, 1, rng.getrandbits(23)),
                         rng.choice((0, 0x80000000)))))                # below 2^-126: flush
        out.append(perm((a, a ^ 0x80000000, rng.choice((0, 0x80000000)))))   # exact zero
        out.append(perm((f32(s, 254, 0x7FFFFF), f32(s, 230, 0),
                         rng.choice((0, f32(s, rng.randint(150, 200), 0))))))  # into overflow
    zs = (0, 0x80000000, 0x00000001, 0x807FFFFF)
    out += [(x, y, z) for x in zs for y in zs for z in zs[:2]]
    sp = (0x7F800000, 0xFF800000, 0x7FC00000, 0xFF800001, 0x3F800000, 0x80000000)
    out += [(x, y, z) for x in sp for y in sp for z in sp[::2]]
    return out


# ---- BF16 and FP8 multiplier operands ---------------------------------------------------------

#: bf16 biased exponents: zero/subnormal, smallest normals, around 2^±64 (whose products sit
#: at FP32's ends), around the bias, the largest, Inf/NaN
BF16_EXPONENTS = (0, 1, 2, 63, 64, 126, 127, 128, 190, 191, 253, 254, 255)
BF16_P1 = (0x00, 0x01, 0x7F, 0x7E)


def _bf16(s, e, f):
    return (s << 15) | (min(max(e, 0), 255) << 7) | (f & 0x7F)


def _mul_relations(rng: random.Random, reps: int) -> list[tuple[int, int]]:
    """bf16 pairs whose product exponent lies at FP32's edges (ea + eb − 127 around 0 … 1 and
    254 … 255, with and without the significand carry), subnormal and zero operands of both
    signs, Inf × 0, NaNs."""
    out = []
    p2 = fp32_p2(7)
    for _ in range(reps):
        for target in (-1, 0, 1, 2, 253, 254, 255, 256):
            ea = rng.randint(max(1, target + 127 - 254), min(254, target + 127 - 1))
            eb = target + 127 - ea
            if 1 <= eb <= 254:
                out.append((_bf16(rng.getrandbits(1), ea, rng.choice(p2)),
                            _bf16(rng.getrandbits(1), eb, rng.choice(p2))))
        x = _bf16(rng.getrandbits(1), rng.randint(1, 254), rng.getrandbits(7))
        out.append((_bf16(rng.getrandbits(1), 0, rng.getrandbits(7)), x))
        out.append((x, _bf16(rng.getrandbits(1), 0, 0)))
    specials = (0x0000, 0x8000, 0x0001, 0x807F, 0x7F80, 0xFF80, 0x7FC0, 0xFF81, 0x3F80, 0x7F7F)
    out += [(x, y) for x in specials for y in specials]
    return out


_FP8 = {0: "e4m3", 1: "e5m2"}
#: (exponent bits, mantissa bits) of the FP8 formats
_FP8_FIELDS = {0: (4, 3), 1: (5, 2)}


def _fp8_values(fmt: int) -> list[int]:
    """Every exponent class (0, 1, 2, bias, the two largest) with every level-1 pattern (0, 1,
    all ones, all ones but the last), both signs: E4M3's S.1111.111 is its NaN and S.1111.000
    the number 256; E5M2's S.11111.00 is Inf and S.11111.xx NaN."""
    eb, mb = _FP8_FIELDS[fmt]
    top = (1 << eb) - 1
    bias = (1 << (eb - 1)) - 1
    ones = (1 << mb) - 1
    vals = {(s << 7) | (e << mb) | p for s in (0, 1) for e in (0, 1, 2, bias, top - 1, top)
            for p in (0, 1, ones, ones - 1)}
    return sorted(vals)


# ---- the vector sets ----------------------------------------------------------------------

def vectors(unit: str, level: int = 1, seed: int = 1) -> list[tuple[int, ...]]:
    """The vector set of ``unit`` (a key of :data:`UNITS`): TestFloat's level-1 pairing of the
    pattern values (sampled for the three-operand adder), TestFloat-style random operands, and
    the rounding relations. ``level=2`` uses the level-2 patterns and more of everything (a
    benchmark-sized set, not the fast tier's)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {sorted(UNITS)}, not {unit!r}")
    if level not in (1, 2):
        raise ValueError(f"level must be 1 or 2, not {level!r}")
    rng = random.Random(f"{unit}:{level}:{seed}")
    reps = 12 if level == 1 else 200
    pats = FP32_P1 if level == 1 else fp32_p2()
    if unit == "fp32_add":
        vals = fp32_values(pats)
        pos = [v for v in vals if not v >> 31]
        pairs = [(x ^ (rng.getrandbits(1) << 31), y ^ (rng.getrandbits(1) << 31))
                 for x in pos for y in pos]
        if level == 1:
            pairs = rng.sample(pairs, 1200)
        rand = [(_tf_random_fp32(rng), _tf_random_fp32(rng)) for _ in range(300 * level ** 3)]
        return pairs + rand + _add_relations(rng, reps)
    if unit == "fp32_add3":
        vals = fp32_values(pats)
        triples = [tuple(rng.choice(vals) for _ in range(3)) for _ in range(250 * level ** 4)]
        rand = [tuple(_tf_random_fp32(rng) for _ in range(3)) for _ in range(100 * level ** 4)]
        return triples + rand + _add3_relations(rng, reps // 2 if level == 1 else reps)
    if unit == "bf16_mul":
        p = BF16_P1 if level == 1 else fp32_p2(7)
        pos = [_bf16(0, e, f) for e in BF16_EXPONENTS for f in p]
        pairs = [(x ^ (rng.getrandbits(1) << 15), y ^ (rng.getrandbits(1) << 15))
                 for x in pos for y in pos]
        if level == 1:
            pairs = rng.sample(pairs, 1000)
        return pairs + _mul_relations(rng, reps * 2)
    # fp8_mul: every level-1 value of A's format against every one of B's, all four pairs
    # (level 2: every code against every code, the exhaustive 2^18)
    out = []
    for fa in (0, 1):
        for fb in (0, 1):
            xs = _fp8_values(fa) if level == 1 else range(256)
            ys = _fp8_values(fb) if level == 1 else range(256)
            out += [(x, y, fa, fb) for x in xs for y in ys]
    return out


# ---- the independent classifier (exact rationals) -------------------------------------------

def _floor_log2(v: Fraction) -> int:
    return oracle._floor_log2(v)


def _rounding(v: Fraction) -> set[str]:
    """Classes of rounding the exact magnitude ``v > 0`` to FP32 under the contract (nearest
    even; a result below 2⁻¹²⁶ flushes): exact / inexact, ties with the last kept bit even
    (stays) or odd (rounds up), near-ties just above and below the halfway point (only bits far
    below decide: the sticky bit), the increment carrying into a new binade, overflow (and by
    the rounding alone), FLT_MAX, 2⁻¹²⁶ and the flush."""
    cls = set()
    if v < _MIN_NORMAL:
        return {"underflow"}
    e = _floor_log2(v)
    q = v / _TWO ** (e - 23)
    n = q.numerator // q.denominator
    r = q - n
    half = Fraction(1, 2)
    cls.add("exact" if r == 0 else "inexact")
    if r == half:
        cls.add("tie-down" if n % 2 == 0 else "tie-up")
    elif half < r <= half + _NEAR_TIE:
        cls.add("near-tie-above")
    elif half - _NEAR_TIE <= r < half:
        cls.add("near-tie-below")
    rn = n + (1 if r > half or (r == half and n % 2) else 0)
    if rn == 1 << 24:
        cls.add("carry-out")
    rv = rn * _TWO ** (e - 23)
    if rv >= _OVERFLOW:
        cls.add("overflow")
        if v < _OVERFLOW:
            cls.add("overflow-by-rounding")
    elif rv == _FLT_MAX:
        cls.add("max-result")
    if rv == _MIN_NORMAL:
        cls.add("min-normal-result")
    return cls


def _classify_sum(decoded, bits) -> set[str]:
    cls = set()
    if any(x[0] == "nan" for x in decoded):
        return {"nan-in"}
    infs = {x[1] for x in decoded if x[0] == "inf"}
    if infs:
        return {"inf-in"} | ({"inf-cancel"} if len(infs) == 2 else set())
    for b in bits:
        if _exp(b) == 0:
            cls.add("subnormal-in" if b & 0x7FFFFF else "zero-in")
    terms = [(-x[2] if x[1] else x[2]) for x in decoded]
    nonzero = [t for t in terms if t != 0]
    if len(nonzero) < len(terms):
        cls.add("zero-in")
    s = sum(terms)
    exps = [_floor_log2(abs(t)) for t in nonzero]
    if len(nonzero) == 2:
        d = abs(exps[0] - exps[1])
        cls.add("align-0" if d == 0 else "align-1" if d == 1 else "align-mid" if d < 22
                else "align-near-width" if d <= 26 else "align-far")
    for i in range(len(terms)):
        for j in range(i + 1, len(terms)):
            if terms[i] != 0 and terms[i] == -terms[j] and len(terms) == 3:
                cls.add("cancel-pair")
    if s == 0:
        if nonzero:
            cls.add("cancel-total")
        all_neg = all(x[1] == 1 and x[2] == 0 for x in decoded)
        return cls | {"zero-result-neg" if all_neg else "zero-result-pos"}
    e = _floor_log2(abs(s))
    emax = max(exps)
    if len({t > 0 for t in nonzero}) == 2:
        if e <= emax - 2:
            cls.add("cancel-massive")
        elif e == emax - 1:
            cls.add("cancel-one")
    if e > emax:
        cls.add("carry-in")
    if len(nonzero) == 3 and min(exps) < e - 25:
        cls.add("far-term")                  # a term wholly below the result's guard bit
    return cls | _rounding(abs(s))


def _classify_product(x, y, carry_exps) -> set[str]:
    if x[0] == "nan" or y[0] == "nan":
        return {"nan-in"}
    if x[0] == "inf" or y[0] == "inf":
        other = y if x[0] == "inf" else x
        return {"inf-in"} | ({"inf-times-zero"} if other[0] == "num" and other[2] == 0
                             else set())
    p = x[2] * y[2]
    if p == 0:
        return {"zero-in", "zero-result-neg" if x[1] ^ y[1] else "zero-result-pos"}
    cls = {"carry" if _floor_log2(p) > carry_exps(x, y) else "no-carry"}
    if p >= _TWO ** 127:
        cls.add("top-binade")
    return cls | _rounding(p)


def classify(unit: str, v: tuple[int, ...]) -> set[str]:
    """The corner classes vector ``v`` of ``unit`` hits, from the exact result alone (see
    :func:`_rounding` and the class names in :data:`CLAIMS`)."""
    if unit in ("fp32_add", "fp32_add3"):
        return _classify_sum([oracle.decode32(b) for b in v], v)
    if unit == "bf16_mul":
        cls = {"subnormal-in" for b in v if (b >> 7) & 0xFF == 0 and b & 0x7F}
        x, y = oracle.decode_bf16(v[0]), oracle.decode_bf16(v[1])
        lead = lambda x, y: _floor_log2(x[2]) + _floor_log2(y[2])   # noqa: E731
        return cls | _classify_product(x, y, lead)
    a, b, fa, fb = v
    x, y = oracle.decode_mini(_FP8[fa], a), oracle.decode_mini(_FP8[fb], b)
    cls = set()
    for code, f, d in ((a, fa, x), (b, fb, y)):
        eb, mb = _FP8_FIELDS[f]
        if (code >> mb) & ((1 << eb) - 1) == 0 and code & ((1 << mb) - 1):
            cls.add("subnormal-in")
        if d[0] == "num" and d[2] == oracle.mini_max(_FP8[f]):
            cls.add("max-in")
    if fa != fb:
        cls.add("mixed-formats")
    lead = lambda x, y: _floor_log2(x[2]) + _floor_log2(y[2])     # noqa: E731
    return cls | _classify_product(x, y, lead)


def coverage(unit: str, vecs) -> Counter:
    """How many vectors of ``vecs`` hit each class."""
    c = Counter()
    for v in vecs:
        c.update(classify(unit, v))
    return c


# ---- the units, their references and what each vector set claims to exercise -----------------

_ROUND = ("exact", "inexact", "tie-down", "tie-up", "near-tie-above", "near-tie-below",
          "carry-out", "overflow", "overflow-by-rounding", "max-result", "min-normal-result",
          "underflow")
_SUM = ("carry-in", "cancel-total", "cancel-massive", "cancel-one", "subnormal-in", "zero-in",
        "zero-result-neg", "zero-result-pos", "nan-in", "inf-in", "inf-cancel")
#: the classes each unit's level-1 vector set must exercise (a test fails on a zero count)
CLAIMS = {
    "fp32_add": _ROUND + _SUM + ("align-0", "align-1", "align-mid", "align-near-width",
                                 "align-far"),
    "fp32_add3": _ROUND + _SUM + ("cancel-pair", "far-term"),
    "bf16_mul": ("exact", "carry", "no-carry", "overflow", "underflow", "min-normal-result",
                 "top-binade", "subnormal-in", "zero-in", "zero-result-neg",
                 "zero-result-pos", "inf-in", "nan-in", "inf-times-zero"),
    "fp8_mul": ("exact", "carry", "no-carry", "subnormal-in", "max-in", "mixed-formats",
                "zero-in", "zero-result-neg", "zero-result-pos", "inf-in", "nan-in",
                "inf-times-zero"),
}


def _units():
    from diptych.rtl.fp import Bf16Multiplier, Fp8Multiplier, Fp32Adder
    from diptych.rtl.fused import Fp32Add3
    return {
        "fp32_add": (Fp32Adder, ("a", "b"), "s", oracle.fp32_add),
        "fp32_add3": (Fp32Add3, ("a", "b", "c"), "s", oracle.fp32_add3),
        "bf16_mul": (Bf16Multiplier, ("a", "b"), "p", oracle.bf16_mul),
        "fp8_mul": (Fp8Multiplier, ("a", "b", "a_e5m2", "b_e5m2"), "p",
                    lambda a, b, fa, fb: oracle.fp8_mul(a, b, _FP8[fa], _FP8[fb])),
    }


#: unit name: the RTL class's name in diptych.rtl (fp or fused)
UNITS = {"fp32_add": "Fp32Adder", "fp32_add3": "Fp32Add3", "bf16_mul": "Bf16Multiplier",
         "fp8_mul": "Fp8Multiplier"}


def run(unit: str, vecs, cls=None) -> list[int]:
    """Drive the unit (or ``cls``, a variant of it) with ``vecs`` in amaranth.sim."""
    from amaranth.sim import Simulator
    default, ports, out, _ = _units()[unit]
    dut = (cls or default)()
    ins = [getattr(dut, p) for p in ports]
    o = getattr(dut, out)
    got = []

    async def tb(ctx):
        for v in vecs:
            for port, x in zip(ins, v):
                ctx.set(port, int(x))
            got.append(ctx.get(o))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return got


def expected(unit: str, vecs) -> list[int]:
    """The exact oracle's result of every vector."""
    ref = _units()[unit][3]
    return [ref(*v) for v in vecs]


def mismatches(unit: str, vecs=None, cls=None) -> list[str]:
    """Every vector whose RTL result differs from the exact oracle's, with its classes."""
    vecs = vectors(unit) if vecs is None else vecs
    out = []
    for v, got, want in zip(vecs, run(unit, vecs, cls), expected(unit, vecs)):
        if got != want:
            out.append(f"{unit} {tuple(hex(x) for x in v)}: RTL {got:#010x}, exact {want:#010x}"
                       f" [{', '.join(sorted(classify(unit, v)))}]")
    return out


def _print_coverage() -> None:
    for unit in UNITS:
        vecs = vectors(unit)
        c = coverage(unit, vecs)
        print(f"{unit}: {len(vecs)} vectors")
        for k in sorted(c):
            print(f"  {k:22s} {c[k]:6d}{'' if k in CLAIMS[unit] else '  (not claimed)'}")


def audit() -> None:
    """Mutants of the FP units: caught by the old unit tests of test_rtl_fp_units.py, and by
    these vectors (mismatch counts)."""
    import importlib
    import rtl_mutants
    import test_rtl_fp_units as old
    old_tests = {
        "fp32_add": [old.test_adder_edges_against_oracle,
                     lambda: old.test_adder_random_against_golden(12),
                     lambda: old.test_adder_random_against_golden(13)],
        "fp32_add3": [old.test_add3_edges_against_oracle,
                      old.test_add3_adversarial_against_golden],
        "bf16_mul": [old.test_multiplier_edges_against_oracle,
                     old.test_multiplier_random_against_golden],
        "fp8_mul": [lambda: [old.test_fp8_multiplier_edges_against_oracle(a, b)
                             for a in _FP8.values() for b in _FP8.values()],
                    old.test_fp8_multiplier_random_against_golden],
    }
    print("| mutant | unit | old unit tests (test_rtl_fp_units.py) | TestFloat vectors |")
    print("|---|---|---|---|")
    for m in rtl_mutants.MUTANTS:
        if m.module not in ("diptych.rtl.fp", "diptych.rtl.fused"):
            continue
        mod = rtl_mutants.mutated_module(m)
        src = importlib.import_module(m.module)
        units = [u for u, name in UNITS.items() if hasattr(src, name) and _touches(m, src, name)]
        for unit in units:
            name = UNITS[unit]
            saved = getattr(old, name)
            setattr(old, name, getattr(mod, name))
            failed = 0
            try:
                for t in old_tests[unit]:
                    try:
                        t()
                    except AssertionError:
                        failed += 1
            finally:
                setattr(old, name, saved)
            n = len(mismatches(unit, cls=getattr(mod, name)))
            old_col = f"caught ({failed} tests)" if failed else "**missed**"
            print(f"| `{m.name}` | {name} | {old_col}"
                  f" | {f'caught ({n} vectors)' if n else '**missed**'} |", flush=True)


def _touches(m, src, name: str) -> bool:
    """Whether the mutant's edits lie in class ``name``'s source (or in a helper it calls)."""
    import inspect
    cls_src = inspect.getsource(getattr(src, name))
    helper = "round_significand" in cls_src and any(
        old in inspect.getsource(src.round_significand) for old, _ in m.edits)
    return helper or any(old in cls_src for old, _ in m.edits)


def verilator(level: int, seed: int, work) -> bool:
    """Every unit's vectors at ``level`` with the oracle's results through the FP deep check's
    verilated units (built once into ``work``); prints counts, classes and the harness's
    report. Level 2 is the benchmark-sized set (about 1.3 M FP32 sums)."""
    import time
    from pathlib import Path
    from diptych.rtl.fp_sweep import build, check, write_vectors
    work = Path(work)
    binary = work / "check" if (work / "check").exists() else build(work)
    path = work / f"testfloat-{level}-{seed}.bin"
    path.unlink(missing_ok=True)
    for unit in UNITS:
        t0 = time.process_time()
        vecs = vectors(unit, level, seed)
        n = write_vectors(path, unit, vecs, expected(unit, vecs))
        c = coverage(unit, vecs)
        print(f"{unit}: {n} vectors ({time.process_time() - t0:.0f} s CPU for the oracle and "
              f"the classes): " + ", ".join(f"{k} {c[k]}" for k in sorted(c)), flush=True)
        missing = [k for k in CLAIMS[unit] if not c[k]]
        if missing:
            print(f"  claimed but not exercised: {missing}")
    t0 = time.perf_counter()
    ok, report = check(binary, mul_range=(0, 0), fp8=False, vector_file=path)
    print(report)
    print(f"{'PASS' if ok else 'FAIL'} ({time.perf_counter() - t0:.1f} s on Verilator)")
    return ok


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audit", action="store_true", help="the FP units' mutants (table)")
    ap.add_argument("--verilator", metavar="WORK_DIR",
                    help="run the vectors on the verilated units (harness built in WORK_DIR)")
    ap.add_argument("--level", type=int, default=1, choices=(1, 2))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.audit:
        audit()
    elif args.verilator:
        sys.exit(0 if verilator(args.level, args.seed, args.verilator) else 1)
    else:
        _print_coverage()
