"""Combinational floating-point units of the MACs: bf16 and FP8 multipliers, an FP32 adder.

All follow the numerics contract of design.md §4 exactly (the NumPy statement of it is
:mod:`diptych.rtl.numerics_ref`): subnormal bf16/FP32 inputs read as signed zero, subnormal results
are flushed to signed zero, every NaN becomes ``0x7FC00000``, the adder rounds to nearest, ties
to even. FP8 inputs (E4M3, E5M2) keep their subnormal values: their products are exact and far
above FP32's smallest normal.
"""

# No ``from __future__ import annotations`` here: wiring.Component reads port annotations.
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Bf16Multiplier", "Fp8Multiplier", "Fp32Adder", "CANONICAL_NAN", "round_significand"]

CANONICAL_NAN = 0x7FC00000


def round_significand(m: Module, mant, round_up, e_norm, e_shape):
    """Add the rounding increment ``round_up`` to the 24-bit significand ``mant`` (leading one
    at bit 23) of a value with biased exponent ``e_norm``; returns ``(e_fin, frac_fin)``: the
    exponent (``e_shape``; one more when the increment carries out, 1.11…1 + 1 = 10.0…0) and the
    23-bit FP32 fraction. Over- and underflow of ``e_fin`` are the caller's."""
    rounded = Signal(25)
    m.d.comb += rounded.eq(mant + round_up)
    e_fin = Signal(e_shape)
    frac_fin = Signal(23)
    with m.If(rounded[24]):
        m.d.comb += [e_fin.eq(e_norm + 1), frac_fin.eq(rounded[1:24])]
    with m.Else():
        m.d.comb += [e_fin.eq(e_norm), frac_fin.eq(rounded[0:23])]
    return e_fin, frac_fin


class Bf16Multiplier(wiring.Component):
    """``p = a × b``: two bf16 bit patterns in, the exact product as FP32 bits out.

    The 8-bit significands multiply into 16 bits, which fit the FP32 significand without
    rounding; a biased exponent ≥ 255 gives ±Inf, ≤ 0 gives signed zero (flush).
    Inf × 0 and any NaN operand give the canonical NaN.
    """

    a: In(16)
    b: In(16)
    p: Out(32)

    def elaborate(self, platform):
        m = Module()
        sa, ea, fa = self.a[15], self.a[7:15], self.a[0:7]
        sb, eb, fb = self.b[15], self.b[7:15], self.b[0:7]
        sign = sa ^ sb

        a_zero = ea == 0          # zero or subnormal: reads as zero
        b_zero = eb == 0
        a_inf = (ea == 0xFF) & (fa == 0)
        b_inf = (eb == 0xFF) & (fb == 0)
        a_nan = (ea == 0xFF) & (fa != 0)
        b_nan = (eb == 0xFF) & (fb != 0)

        prod = Signal(16)
        m.d.comb += prod.eq(Cat(fa, Const(1, 1)) * Cat(fb, Const(1, 1)))   # in [2^14, 2^16)
        exp = Signal(range(-200, 600))
        frac = Signal(23)
        with m.If(prod[15]):
            m.d.comb += [exp.eq(ea + eb - 126), frac.eq(Cat(Const(0, 8), prod[0:15]))]
        with m.Else():
            m.d.comb += [exp.eq(ea + eb - 127), frac.eq(Cat(Const(0, 9), prod[0:14]))]

        with m.If(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)):
            m.d.comb += self.p.eq(CANONICAL_NAN)
        with m.Elif(a_inf | b_inf | (exp >= 255)):
            m.d.comb += self.p.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
        with m.Elif(a_zero | b_zero | (exp <= 0)):
            m.d.comb += self.p.eq(Cat(Const(0, 31), sign))
        with m.Else():
            m.d.comb += self.p.eq(Cat(frac, exp[0:8], sign))
        return m


class Fp8Multiplier(wiring.Component):
    """``p = a × b``: two FP8 bit patterns in, the exact product as FP32 bits out.

    ``a_e5m2``/``b_e5m2`` select each operand's format (0: E4M3, 1: E5M2; OCP OFP8 v1.0).
    Each operand decodes to a sign, a 4-bit integer significand ``M`` (hidden bit included; a
    subnormal has none) and the exponent ``E`` of its last bit, value ``M · 2^E`` (E4M3: ``E =
    max(e, 1) − 10``; E5M2: ``E = max(e, 1) − 17``). The 8-bit product ``Ma · Mb`` is
    normalised by its leading one (subnormal operands make it short) into an FP32 with biased
    exponent ``Ea + Eb + lead + 127``, which lies in 95 … 160: never subnormal, never Inf.
    E4M3 has no Inf (S.1111.111 is its only NaN); E5M2's S.11111.00 is ±Inf. Inf × 0 and any
    NaN give the canonical NaN.
    """

    a: In(8)
    b: In(8)
    a_e5m2: In(1)
    b_e5m2: In(1)
    p: Out(32)

    @staticmethod
    def _decode(m: Module, x, e5m2, name: str):
        """(sign, M[4], E, nan, inf) of an FP8 operand of either format."""
        e4, f3 = x[3:7], x[0:3]
        e5, f2 = x[2:7], x[0:2]
        sig = Signal(4, name=f"{name}_sig")
        exp = Signal(range(-20, 16), name=f"{name}_exp")
        nan = Signal(name=f"{name}_nan")
        inf = Signal(name=f"{name}_inf")
        with m.If(e5m2):
            m.d.comb += [
                sig.eq(Mux(e5 == 0, f2, Cat(f2, Const(1, 2)))),
                exp.eq(Mux(e5 == 0, 1, e5) - 17),
                nan.eq((e5 == 0x1F) & (f2 != 0)),
                inf.eq((e5 == 0x1F) & (f2 == 0)),
            ]
        with m.Else():
            m.d.comb += [
                sig.eq(Mux(e4 == 0, f3, Cat(f3, Const(1, 1)))),
                exp.eq(Mux(e4 == 0, 1, e4) - 10),
                nan.eq((e4 == 0xF) & (f3 == 0x7)),
                inf.eq(0),
            ]
        return x[7], sig, exp, nan, inf

    def elaborate(self, platform):
        m = Module()
        sa, ma, ea, a_nan, a_inf = self._decode(m, self.a, self.a_e5m2, "a")
        sb, mb, eb, b_nan, b_inf = self._decode(m, self.b, self.b_e5m2, "b")
        sign = sa ^ sb
        a_zero = ma == 0
        b_zero = mb == 0

        prod = Signal(8)
        m.d.comb += prod.eq(ma * mb)
        lead = Signal(range(8))
        for i in range(8):                    # priority encoder: the highest set bit wins
            with m.If(prod[i]):
                m.d.comb += lead.eq(i)
        exp = Signal(8)
        m.d.comb += exp.eq(ea + eb + lead + 127)
        shamt = Signal(3)
        m.d.comb += shamt.eq(7 - lead)
        frac = Signal(23)                     # the bits below the leading one, left-aligned
        m.d.comb += frac.eq(Cat(Const(0, 16), prod[0:7]) << shamt)

        with m.If(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)):
            m.d.comb += self.p.eq(CANONICAL_NAN)
        with m.Elif(a_inf | b_inf):
            m.d.comb += self.p.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
        with m.Elif(a_zero | b_zero):
            m.d.comb += self.p.eq(Cat(Const(0, 31), sign))
        with m.Else():
            m.d.comb += self.p.eq(Cat(frac, exp, sign))
        return m


class Fp32Adder(wiring.Component):
    """``s = a + b`` on FP32 bit patterns, round to nearest even, DAZ/FTZ, canonical NaN.

    Classic single-path design: order the operands by magnitude, align the smaller one with
    guard, round and sticky bits, add or subtract, normalise (leading-zero shift after a
    subtraction), round, then resolve overflow (±Inf) and underflow (signed zero). An exact
    zero from opposite signs is +0; ``(-0) + (-0)`` is -0.
    """

    a: In(32)
    b: In(32)
    s: Out(32)

    def elaborate(self, platform):
        m = Module()

        def unpack(v):
            sgn, e, f = v[31], v[23:31], v[0:23]
            nan = (e == 0xFF) & (f != 0)
            inf = (e == 0xFF) & (f == 0)
            return sgn, e, f, nan, inf

        sa, ea, fa, a_nan, a_inf = unpack(self.a)
        sb, eb, fb, b_nan, b_inf = unpack(self.b)

        # Order by magnitude (subnormals are zero for this purpose: their exponent is 0 and
        # their significand is dropped below, so any normal operand outranks them).
        mag_a = Mux(ea == 0, 0, self.a[0:31])
        mag_b = Mux(eb == 0, 0, self.b[0:31])
        swap = Signal()
        m.d.comb += swap.eq(mag_b > mag_a)
        sx, ex, fx = Signal(), Signal(8), Signal(23)
        sy, ey, fy = Signal(), Signal(8), Signal(23)
        m.d.comb += [
            sx.eq(Mux(swap, sb, sa)), ex.eq(Mux(swap, eb, ea)), fx.eq(Mux(swap, fb, fa)),
            sy.eq(Mux(swap, sa, sb)), ey.eq(Mux(swap, ea, eb)), fy.eq(Mux(swap, fa, fb)),
        ]
        # 24-bit significands with the hidden bit; zero/subnormal read as zero.
        mx = Signal(24)
        my = Signal(24)
        m.d.comb += [
            mx.eq(Mux(ex == 0, 0, Cat(fx, Const(1, 1)))),
            my.eq(Mux(ey == 0, 0, Cat(fy, Const(1, 1)))),
        ]
        # Align: 27-bit values = significand followed by guard, round, sticky.
        d = Signal(8)
        m.d.comb += d.eq(ex - ey)
        X = Signal(27)
        m.d.comb += X.eq(mx << 3)
        yfull = Signal(27)
        m.d.comb += yfull.eq(my << 3)
        dc = Signal(5)
        m.d.comb += dc.eq(Mux(d > 27, 27, d))
        y_shift = Signal(27)
        lost = Signal(27)
        m.d.comb += [
            y_shift.eq(yfull >> dc),
            lost.eq(yfull & ((Const(1, 28) << dc) - 1)),
        ]
        Y = Signal(27)
        m.d.comb += Y.eq(y_shift | (lost != 0))

        sub = Signal()
        m.d.comb += sub.eq(sx ^ sy)
        raw = Signal(28)
        m.d.comb += raw.eq(Mux(sub, X - Y, X + Y))

        # Normalise to 27 bits with the leading one at bit 26.
        norm = Signal(27)
        e_norm = Signal(range(-64, 512))
        with m.If(raw[27]):
            m.d.comb += [norm.eq(raw[1:28] | raw[0]), e_norm.eq(ex + 1)]
        with m.Else():
            lz = Signal(range(28))
            for i in range(27):             # priority encoder: highest set bit wins
                with m.If(raw[i]):
                    m.d.comb += lz.eq(26 - i)
            m.d.comb += [norm.eq(raw[0:27] << lz), e_norm.eq(ex - lz)]

        # Round to nearest even.
        mant = norm[3:27]
        guard, rnd, sticky = norm[2], norm[1], norm[0]
        round_up = guard & (rnd | sticky | mant[0])
        e_fin, frac_fin = round_significand(m, mant, round_up, e_norm, range(-64, 512))

        with m.If(a_nan | b_nan | (a_inf & b_inf & (sa != sb))):
            m.d.comb += self.s.eq(CANONICAL_NAN)
        with m.Elif(a_inf):
            m.d.comb += self.s.eq(Cat(Const(0, 23), Const(0xFF, 8), sa))
        with m.Elif(b_inf):
            m.d.comb += self.s.eq(Cat(Const(0, 23), Const(0xFF, 8), sb))
        with m.Elif(raw == 0):
            # exact zero: +0 unless both operands are (flushed) zeros of negative sign
            m.d.comb += self.s.eq(Cat(Const(0, 31), sx & ~sub))
        with m.Elif(e_fin >= 255):
            m.d.comb += self.s.eq(Cat(Const(0, 23), Const(0xFF, 8), sx))
        with m.Elif(e_fin <= 0):
            m.d.comb += self.s.eq(Cat(Const(0, 31), sx))
        with m.Else():
            m.d.comb += self.s.eq(Cat(frac_fin, e_fin[0:8], sx))
        return m
