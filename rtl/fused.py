"""The fused multi-precision MAC: two 8-bit MACs per cycle rounded once, one BF16 MAC per cycle.

The ``multi`` datapath (:mod:`diptych.rtl.pe`) does two FP8 MACs per cycle with two FP32 adders
in series, so that its result is bit-identical to one MAC per cycle. Real FP8 datapaths do not
round every product into the accumulator: they add several products and the accumulator in one
multi-term adder and normalise and round once per group (NVIDIA tensor cores: Fasi et al.,
"Numerical behavior of NVIDIA tensor cores", PeerJ CS 7:e330, 2021, and Khattak & Mikaitis,
"Accurate models of NVIDIA tensor cores", arXiv:2512.07004, 2025; Arm FEAT_FP8DOT4 ``FDOT``: four
adjacent FP8 products added to one FP32 element). Those units also truncate (DeepSeek-V3,
arXiv:2412.19437 §3.3.2: about 14 bits kept on H800); this one is exact.

``FusedMac`` is that PE datapath for the ``fused`` dtype (the **pair** rule of
:mod:`diptych.rtl.numerics_ref`):

* **INT8** (2 MACs per cycle): ``acc + a₀b₀ + a₁b₁`` modulo 2³² (the same as one at a time);
* **FP8** (E4M3/E5M2 per operand, 2 MACs per cycle): the accumulator and the two exact products
  summed exactly and rounded **once** to FP32 (:class:`Fp32Add3`);
* **BF16** (1 MAC per cycle): ``acc + a·b`` rounded once, exactly the sequential rule (the adder's
  third operand is −0, which never changes a sum:
  :func:`diptych.rtl.numerics_ref.fp32_add3_bits`).

What is shared, as a real multi-precision unit would share it: each of the two product lanes has
**one 9×9 signed multiplier** that multiplies int8 × int8, the bf16 significands (8 × 8, lane 0
only) or the FP8 significands (4 × 4), and one normaliser that turns an FP product into FP32 bits;
the BF16 product path *is* lane 0's FP8 path; and **one** FP32 adder, :class:`Fp32Add3`, serves
both FP modes. Only the int32 three-input adder is separate (it is 1/10 of the FP adder).

The exact pair window. Two FP8 products are exact integer multiples of 2⁻³² (E5M2 × E5M2: the
smallest subnormal is 2⁻¹⁶) below 2³² (57344² < 2³²), so their exact sum is a **66-bit** two's
complement fixed-point number (65 magnitude bits, LSB 2⁻³², top 2³³) — 36 + 1 bits if both
operands are E4M3 (products in [2⁻¹⁸, 2¹⁸)). Added to an FP32 accumulator with one rounding, a
fixed window would have to be extended by the accumulator's 24 bits and guard bits on both sides
(≈ 120 bits). :class:`Fp32Add3` instead aligns the three terms to the largest one's leading bit,
which needs only a 51-bit exact window (see its docstring for why that is exact).
"""

# No ``from __future__ import annotations`` here: wiring.Component reads port annotations.
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .datapath import MODE_BITS
from .fp import CANONICAL_NAN, Fp8Multiplier, round_significand

__all__ = ["Fp32Add3", "ProductLane", "FusedMac", "PAIR_WINDOW_BITS", "normalise_signed"]

#: Width of the exact two's complement fixed-point sum of two FP8 products (any format pair).
PAIR_WINDOW_BITS = 66

#: The adder's third term in BF16 mode: −0, the one zero that leaves every sum as it is; +0
#: would turn (−0) + (−0) into +0 (issue 26; the mutant ``fused-bf16-adds-plus-zero``).
_NEG_ZERO = 0x80000000


def _leading_zeros(m: Module, v, width: int, name: str):
    """Number of leading zeros of ``v[0:width]`` (``width`` when it is zero), by a binary tree
    of (all-zero, count) pairs: about 2·width cells instead of a width-long priority chain."""
    n = 1
    while n < width:
        n *= 2
    bits = Cat(Const(0, n - width), v[0:width])        # zero padding below counts nothing
    nodes = [(~bits[i], Const(0, 0)) for i in range(n)]
    level = 0
    while len(nodes) > 1:
        merged = []
        for i in range(0, len(nodes), 2):
            (lo_zero, lo_count), (hi_zero, hi_count) = nodes[i], nodes[i + 1]
            z = Signal(name=f"{name}_z{level}_{i}")
            c = Signal(level + 1, name=f"{name}_c{level}_{i}")
            m.d.comb += [z.eq(hi_zero & lo_zero),
                         c.eq(Mux(hi_zero, Cat(lo_count, Const(1, 1)),
                                  Cat(hi_count, Const(0, 1))))]
            merged.append((z, c))
        nodes = merged
        level += 1
    count = Signal(range(n + 1), name=f"{name}_count")
    m.d.comb += count.eq(Mux(nodes[0][0], width, nodes[0][1]))
    return count


def normalise_signed(m: Module, total, width: int, name: str = "lz"):
    """``(neg, absval, lz, norm)`` of a signed fixed-point sum ``total`` whose magnitude fits
    ``width`` bits: its sign (the top bit), magnitude, leading-zero count and the magnitude
    shifted left by it (leading one at bit ``width − 1``; zero stays zero)."""
    neg = total[len(total) - 1]
    absval = Signal(width, name=f"{name}_abs")
    m.d.comb += absval.eq(Mux(neg, -total, total))
    lz = _leading_zeros(m, absval, width, name)
    norm = Signal(width, name=f"{name}_norm")
    m.d.comb += norm.eq(absval << lz)
    return neg, absval, lz, norm


class Fp32Add3(wiring.Component):
    """``s = a + b + c`` on FP32 bit patterns, computed exactly and rounded **once**.

    Round to nearest, ties to even; subnormal inputs read as zero of their sign, a subnormal
    result flushes to zero of its sign, every NaN becomes ``0x7FC00000``, NaN or Infs of both
    signs give NaN, overflow gives ±Inf, an exact zero is −0 only when all three inputs are −0
    (the golden statement is :func:`diptych.rtl.numerics_ref.fp32_add3_bits`).

    Datapath: the three 24-bit significands are aligned to the largest exponent ``emax`` in a
    register whose bit ``WINDOW`` holds the largest operand's leading bit, so bits 1 … ``WINDOW``
    are exact and bit 0 (``u``) is a *jam* bit: the OR of everything an operand loses below bit 1
    (round to odd at ``u``). One signed three-input add, one leading-zero normalisation, one
    rounding. Why 51 bits suffice:

    * no operand loses bits: the register holds the exact sum;
    * one operand loses bits: the others are multiples of ``2u``, so the register holds the sum
      rounded to odd at ``u``, and round-to-nearest of that equals round-to-nearest of the exact
      sum as long as ``u`` is at least two bits below the result's last bit, i.e. the result's
      leading bit is at ``emax − WINDOW + 25`` or above. Only massive cancellation of the two
      larger operands can bring it lower; their sum is then a nonzero multiple of
      ``2^(emax−24)`` (≥ 2^(emax−25) after the third operand, which has lost bits and so is below
      2^(emax−WINDOW+24)), so ``WINDOW ≥ 50`` suffices — or it is zero: two operands are exact
      negatives of each other, and the result is the third operand exactly (detected by
      comparing magnitudes, no rounding);
    * two operands lose bits: both are below 2^(emax−WINDOW+24), so the sum is within
      2^(emax−WINDOW+25) of the largest operand, which is representable and at least 2^(emax−25)
      from any rounding boundary: ``WINDOW ≥ 51`` makes both the exact and the jammed sum round
      to it.

    So ``WINDOW = 51``: the register is 52 bits, the signed sum 55. (The deep check in
    :mod:`diptych.rtl.fp_sweep`, whose vector classes include the accumulator-cancels-a-product
    case that sizes the window, finds mismatches with ``WINDOW = 48`` and none from 49 up: the
    bound above is conservative by a bit or two.)
    """

    a: In(32)
    b: In(32)
    c: In(32)
    s: Out(32)

    #: exact bits below (and including) the largest operand's leading bit
    WINDOW = 51

    def elaborate(self, platform):
        m = Module()
        W = self.WINDOW
        N = W + 1                                   # register bits: 0 (jam) … W (leading bit)
        ops = (self.a, self.b, self.c)
        sgn = [v[31] for v in ops]
        exp = [v[23:31] for v in ops]
        frac = [v[0:23] for v in ops]
        nan = [(e == 0xFF) & (f != 0) for e, f in zip(exp, frac)]
        inf = [(e == 0xFF) & (f == 0) for e, f in zip(exp, frac)]
        # magnitudes with subnormals read as zero (for the exact-cancellation test)
        mag = [Mux(e == 0, 0, v[0:31]) for e, v in zip(exp, ops)]

        emax01 = Mux(exp[0] > exp[1], exp[0], exp[1])
        emax = Signal(8)
        m.d.comb += emax.eq(Mux(emax01 > exp[2], emax01, exp[2]))

        terms = []
        for i in range(3):
            sig = Mux(exp[i] == 0, 0, Cat(frac[i], Const(1, 1)))          # 24 bits
            d = Signal(8, name=f"d{i}")
            dc = Signal(range(N + 1), name=f"dc{i}")
            shifted = Signal(N, name=f"shifted{i}")
            tz = Signal(range(25), name=f"tz{i}")    # trailing zeros of the significand
            m.d.comb += [
                d.eq(emax - exp[i]),
                dc.eq(Mux(d > N, N, d)),
                shifted.eq((sig << (W - 23)) >> dc),  # leading bit at W when d = 0
                tz.eq(24),
            ]
            for k in reversed(range(24)):
                with m.If(sig[k]):
                    m.d.comb += tz.eq(k)
            # bits fall below bit 1 exactly when the shift passes the lowest set bit
            lost = (sig != 0) & (dc > tz + (W - 23))
            aligned = Cat(shifted[0] | lost, shifted[1:N], Const(0, 3))
            terms.append(Mux(sgn[i], ~aligned, aligned))   # one's complement; +1 below

        total = Signal(signed(N + 3))
        m.d.comb += total.eq(terms[0] + terms[1] + terms[2] + sgn[0] + sgn[1] + sgn[2])
        M = N + 2                                   # |total| < 3 · 2^N: leading bit ≤ N + 1
        neg, absval, lz, norm = normalise_signed(m, total, M)
        e_norm = Signal(range(-128, 512))
        m.d.comb += e_norm.eq(emax + (M - 1 - W) - lz)

        mant = norm[M - 24:M]
        guard = norm[M - 25]
        sticky = norm[0:M - 25] != 0
        round_up = guard & (sticky | mant[0])
        e_fin, frac_fin = round_significand(m, mant, round_up, e_norm, range(-128, 512))

        pos_inf = (inf[0] & ~sgn[0]) | (inf[1] & ~sgn[1]) | (inf[2] & ~sgn[2])
        neg_inf = (inf[0] & sgn[0]) | (inf[1] & sgn[1]) | (inf[2] & sgn[2])

        def cancels(i, j):
            return (mag[i] == mag[j]) & (sgn[i] != sgn[j])

        def exactly(k):                             # the third operand, a zero as +0
            return Mux(mag[k] == 0, 0, Cat(mag[k], sgn[k]))

        all_neg_zero = (mag[0] == 0) & (mag[1] == 0) & (mag[2] == 0) & sgn[0] & sgn[1] & sgn[2]
        with m.If(nan[0] | nan[1] | nan[2] | (pos_inf & neg_inf)):
            m.d.comb += self.s.eq(CANONICAL_NAN)
        with m.Elif(pos_inf | neg_inf):
            m.d.comb += self.s.eq(Cat(Const(0, 23), Const(0xFF, 8), neg_inf))
        with m.Elif(cancels(0, 1)):
            m.d.comb += self.s.eq(exactly(2))
        with m.Elif(cancels(0, 2)):
            m.d.comb += self.s.eq(exactly(1))
        with m.Elif(cancels(1, 2)):
            m.d.comb += self.s.eq(exactly(0))
        with m.Elif(absval == 0):
            m.d.comb += self.s.eq(Cat(Const(0, 31), all_neg_zero))
        with m.Elif(e_fin >= 255):
            m.d.comb += self.s.eq(Cat(Const(0, 23), Const(0xFF, 8), neg))
        with m.Elif(e_fin <= 0):
            m.d.comb += self.s.eq(Cat(Const(0, 31), neg))
        with m.Else():
            m.d.comb += self.s.eq(Cat(frac_fin, e_fin[0:8], neg))
        return m


def _mode_flags(mode):
    """(is_int8, is_bf16, is_fp8) of a mode code (datapath.MODE_CODES; 2, 3 are int8)."""
    is_fp8 = mode[2]
    is_bf16 = ~mode[2] & (mode[0:2] == 1)
    return ~is_fp8 & ~is_bf16, is_bf16, is_fp8


class ProductLane(wiring.Component):
    """One product lane of the fused datapath: ``ip`` = int8 × int8 (16 bits, two's
    complement) and ``p`` = the exact FP8 × FP8 (or, with ``bf16=True``, bf16 × bf16) product
    as FP32 bits, from one shared 9×9 signed multiplier.

    The lane's operands are ``a[0:8]``, ``b[0:8]`` in the 8-bit modes (``mode[1]``/``mode[0]``:
    A/B is E5M2) and ``a``, ``b`` (16 bits) in BF16 mode. The FP product's significand is placed
    at the top of a 16-bit field (bf16: 8 × 8 = 15–16 bits; FP8: 4 × 4 ≤ 8 bits, shifted up 8),
    normalised by its leading one (at most 7 places: FP8 subnormals), and packed as FP32 with
    the same special rules as :class:`~diptych.rtl.fp.Bf16Multiplier` (bf16: inputs DAZ,
    overflow to ±Inf, underflow flushed) and :class:`~diptych.rtl.fp.Fp8Multiplier` (FP8:
    subnormals kept, never over- or underflows).
    """

    def __init__(self, bf16: bool):
        self.bf16 = bf16
        w = 16 if bf16 else 8
        super().__init__({"a": In(w), "b": In(w), "mode": In(MODE_BITS),
                          "p": Out(32), "ip": Out(16)})

    def elaborate(self, platform):
        m = Module()
        is_int, is_bf16, _ = _mode_flags(self.mode)
        if not self.bf16:
            is_bf16 = Const(0, 1)
        sa, ma, ea, a_nan, a_inf = Fp8Multiplier._decode(m, self.a[0:8], self.mode[1], "fa")
        sb, mb, eb, b_nan, b_inf = Fp8Multiplier._decode(m, self.b[0:8], self.mode[0], "fb")
        a_zero, b_zero = ma == 0, mb == 0
        width = 9 if self.bf16 else 8              # bf16 significands are 8 bits unsigned
        x, y = Signal(signed(width)), Signal(signed(width))
        e_top = Signal(range(-300, 300))            # exponent of bit 15 of the product field
        with m.If(is_int):
            m.d.comb += [x.eq(self.a[0:8].as_signed()), y.eq(self.b[0:8].as_signed())]
        with m.Else():
            m.d.comb += [x.eq(ma), y.eq(mb), e_top.eq(ea + eb + 7)]
        overflow = underflow = Const(0, 1)
        if self.bf16:                               # bf16 operands: sign, 8-bit exponent, 7 bits
            (xa, ya), (xe, ye), (xf, yf) = ((self.a[15], self.b[15]), (self.a[7:15], self.b[7:15]),
                                            (self.a[0:7], self.b[0:7]))
            with m.If(is_bf16):
                m.d.comb += [x.eq(Cat(xf, Const(1, 1))), y.eq(Cat(yf, Const(1, 1))),
                             e_top.eq(xe + ye - 253)]
            sa, sb = Mux(is_bf16, xa, sa), Mux(is_bf16, ya, sb)
            a_nan = Mux(is_bf16, (xe == 0xFF) & (xf != 0), a_nan)
            b_nan = Mux(is_bf16, (ye == 0xFF) & (yf != 0), b_nan)
            a_inf = Mux(is_bf16, (xe == 0xFF) & (xf == 0), a_inf)
            b_inf = Mux(is_bf16, (ye == 0xFF) & (yf == 0), b_inf)
            a_zero = Mux(is_bf16, xe == 0, a_zero)
            b_zero = Mux(is_bf16, ye == 0, b_zero)
        prod = Signal(signed(2 * width))
        m.d.comb += [prod.eq(x * y), self.ip.eq(prod[0:16])]

        field = Signal(16)
        m.d.comb += field.eq(Mux(is_bf16, prod[0:16], Cat(Const(0, 8), prod[0:8])))
        lz = Signal(range(8))
        for i in range(8):                          # leading one among bits 8 … 15
            with m.If(field[8 + i]):
                m.d.comb += lz.eq(7 - i)
        norm = Signal(16)
        m.d.comb += norm.eq(field << lz)
        exp = Signal(range(-400, 400))
        m.d.comb += exp.eq(e_top - lz + 127)
        if self.bf16:
            overflow = is_bf16 & (exp >= 255)
            underflow = is_bf16 & (exp <= 0)
        sign = sa ^ sb
        with m.If(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)):
            m.d.comb += self.p.eq(CANONICAL_NAN)
        with m.Elif(a_inf | b_inf | overflow):
            m.d.comb += self.p.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
        with m.Elif(a_zero | b_zero | underflow):
            m.d.comb += self.p.eq(Cat(Const(0, 31), sign))
        with m.Else():
            m.d.comb += self.p.eq(Cat(Const(0, 8), norm[0:15], exp[0:8], sign))
        return m


class FusedMac(wiring.Component):
    """Combinational fused multi-precision MAC (see the module docstring): 16-bit lanes; in the
    8-bit modes element ``2s`` in bits 7:0 and ``2s + 1`` in bits 15:8, as in the ``multi``
    datapath. ``mode`` codes: :data:`diptych.rtl.datapath.MODE_CODES`."""

    a: In(16)
    b: In(16)
    acc: In(32)
    mode: In(MODE_BITS)
    result: Out(32)

    def elaborate(self, platform):
        m = Module()
        is_int, _, is_fp8 = _mode_flags(self.mode)
        m.submodules.lane0 = lane0 = ProductLane(bf16=True)
        m.submodules.lane1 = lane1 = ProductLane(bf16=False)
        m.submodules.add = add = Fp32Add3()
        m.d.comb += [
            lane0.a.eq(self.a), lane0.b.eq(self.b), lane0.mode.eq(self.mode),
            lane1.a.eq(self.a[8:16]), lane1.b.eq(self.b[8:16]), lane1.mode.eq(self.mode),
            add.a.eq(self.acc), add.b.eq(lane0.p),
            add.c.eq(Mux(is_fp8, lane1.p, _NEG_ZERO)),
        ]
        int_sum = Signal(32)
        m.d.comb += int_sum.eq(self.acc + lane0.ip.as_signed() + lane1.ip.as_signed())
        m.d.comb += self.result.eq(Mux(is_int, int_sum, add.s))
        return m
