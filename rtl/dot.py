"""The FP8 dot-product PE: four FP8 products per cycle into an FP32 accumulator, rounded once.

``Dot4Fp8`` is the datapath production FP8 units use instead of the exact accumulation of the
``fp8``/``multi``/``fused`` PEs (sources and the bit-exact rule: :mod:`diptych.rtl.dot_ref`):

* four 4 × 4-bit significand multipliers (E4M3 or E5M2 per operand, chosen by ``mode`` as in
  the other FP8 PEs; an E5M2 significand is shifted up one place so that both formats have their
  hidden bit at bit 3) and four exponent adders — the products are **not** normalised;
* the largest nominal exponent among the four products and the accumulator (a 5-way maximum);
* five right shifters that align each term to that exponent in a window of ``F + 2`` bits
  (``F`` = :attr:`Dot4Fp8.FRAC_BITS` = 26 fraction bits below the largest term's leading bit),
  **truncating** what falls out;
* one signed five-input adder, one leading-zero count and normalising shift, and a result
  rounded toward zero (no rounding incrementer), with the same specials as the other FP8 units.

FP8 only: the unit has no BF16 or INT8 mode (a 2:1 BF16 mode on the same multipliers would need
8 × 8 significand products, i.e. the four 4 × 4 multipliers regrouped as one 8 × 8, which is
not built here). It is the MAC of the ``dot4`` datapath (:mod:`diptych.rtl.datapath`):
``make_mac("dot4")``, inside ``OsPe("dot4")``/``WsPe("dot4")`` (:mod:`diptych.rtl.pe`:
``Dot4OsPe``, ``Dot4WsPe``) and ``SystolicArray(R, C, "dot4", …)``, with 32-bit operand lanes
holding four K-consecutive FP8 elements (element ``4s + i`` in bits ``8i + 7 … 8i``) and the
``mode`` port of the FP8 modes (:data:`~diptych.rtl.datapath.MODE_CODES`). The same PEs are
synthesised by ``diptych rtl area --dtype dot4`` and simulated in arrays (amaranth.sim and the
cocotb bench on Verilator), bit for bit against :func:`diptych.rtl.dot_ref.dot_matmul_bits` and
cycle for cycle against :mod:`diptych.sim.timing` at four MACs per PE per cycle.
"""

# No ``from __future__ import annotations`` here: wiring.Component reads port annotations.
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .datapath import MODE_BITS, get_datapath
from .fp import CANONICAL_NAN, Fp8Multiplier
from .fused import normalise_signed
from .dot_ref import DOT_FRAC_BITS, DOT_GROUP, FP32_MAX_BITS

__all__ = ["Dot4Fp8", "MxDot4Fp8", "acc_term", "aligned_sum", "rz_result"]

# the datapath's lanes and rates are this unit's group (datapath.py states them without Amaranth)
assert get_datapath("dot4").lane_bits == 8 * DOT_GROUP
assert set(dict(get_datapath("dot4").rates).values()) == {DOT_GROUP}

_ZERO_X = -300                    # nominal exponent of a zero term: below every real one


def _place(value, lead: int, frac_bits: int):
    """``value`` with its bit ``lead`` moved to bit ``frac_bits`` (a window narrower than the
    term truncates its low bits here already, as the golden's alignment does)."""
    if frac_bits >= lead:
        return value << (frac_bits - lead)
    return value >> (lead - frac_bits)


def acc_term(m: Module, acc, xs, F: int):
    """The FP32 accumulator as a term of the dot4 rule: ``(sign, 1.f placed at bit F, nominal
    exponent, zero, NaN, Inf)``; a subnormal reads as zero of its sign, a zero or Inf takes the
    exponent of no term (``xs``: the exponents' signal shape)."""
    ae, af, asg = acc[23:31], acc[0:23], acc[31]
    a_zero = ae == 0
    acc_nan = (ae == 0xFF) & (af != 0)
    acc_inf = (ae == 0xFF) & (af == 0)
    x_acc = Signal.like(xs, name="x_acc")
    m.d.comb += x_acc.eq(Mux(a_zero | acc_inf, _ZERO_X, ae - 127))
    return (asg, _place(Mux(a_zero, 0, Cat(af, Const(1, 1))), 23, F), x_acc, a_zero, acc_nan,
            acc_inf)


def aligned_sum(m: Module, terms, emax, F: int, M: int):
    """Steps 3–5 of the dot4 rule up to the rounding: each ``(sign, placed magnitude, nominal
    exponent)`` term shifted right by ``emax − x`` in a window of ``F + 2`` bits (**truncated**),
    signed, summed, normalised. Returns ``(neg, absval, norm, e_fin)``: the sum's sign,
    magnitude, the magnitude with its leading one at bit ``M − 1``, and the result's biased FP32
    exponent."""
    W = F + 2
    total = Signal(signed(M + 2))
    addends = []
    for n, (sign, placed, x) in enumerate(terms):
        d = Signal(range(-1024, 1024), name=f"d{n}")
        dc = Signal(range(W + 1), name=f"dc{n}")
        aligned = Signal(W, name=f"aligned{n}")
        m.d.comb += [d.eq(emax - x), dc.eq(Mux(d > W, W, d)), aligned.eq(placed >> dc)]
        addends.append(Mux(sign, -aligned, aligned))      # truncated toward zero, then signed
    m.d.comb += total.eq(sum(addends))

    neg, absval, lz, norm = normalise_signed(m, total, M)
    e_fin = Signal(range(-1024, 1024))
    m.d.comb += e_fin.eq(emax + 127 + (M - 1 - F) - lz)
    return neg, absval, norm, e_fin


def rz_result(m: Module, result, neg, norm, e_fin, M: int) -> None:
    """The last branches of the result's ``If`` chain (after the specials and the zero): past
    FP32's top the largest finite value, below 2^-126 a zero of the sum's sign, else the sum
    truncated to 24 bits (round toward zero)."""
    with m.Elif(e_fin >= 255):                # toward zero: the largest finite value
        m.d.comb += result.eq(Cat(Const(FP32_MAX_BITS, 31), neg))
    with m.Elif(e_fin <= 0):
        m.d.comb += result.eq(Cat(Const(0, 31), neg))
    with m.Else():                            # truncated to 24 bits: round toward zero
        m.d.comb += result.eq(Cat(norm[M - 24:M - 1], e_fin[0:8], neg))


class Dot4Fp8(wiring.Component):
    """Combinational ``result = dot4(acc, a, b)`` (the rule of :mod:`diptych.rtl.dot_ref`):
    ``a``/``b`` hold four FP8 elements each (element ``i`` in bits ``8i + 7 … 8i``), ``acc`` and
    ``result`` are FP32 bits, ``mode[1]``/``mode[0]``: A/B is E5M2 (else E4M3)."""

    #: bits of a lane beyond its four FP8 elements (the block-scaled subclass: its E8M0 scale)
    EXTRA_LANE_BITS = 0

    def __init__(self):
        lane = 8 * DOT_GROUP + self.EXTRA_LANE_BITS
        super().__init__({"a": In(lane), "b": In(lane), "acc": In(32), "mode": In(MODE_BITS),
                          "result": Out(32)})

    #: fraction bits kept below the largest term's leading bit (the golden's ``frac_bits``; a
    #: subclass may narrow it, e.g. to the H800's ≈ 13)
    FRAC_BITS = DOT_FRAC_BITS

    def elaborate(self, platform):
        m = Module()
        F = self.FRAC_BITS
        if not isinstance(F, int) or F < 1:
            raise ValueError(f"FRAC_BITS must be a positive integer, not {F!r}")
        # aligned magnitudes in F + 2 bits (products < 4 · 2^F);
        # |sum| < 2·2^F + 4·(225/64)·2^F < 2^(F+5)
        M = max(F + 5, 24)
        xs = Signal(range(-512, 512))
        terms = []                                # (sign, placed magnitude, nominal exponent, zero)

        asg, placed, x_acc, a_zero, acc_nan, acc_inf = acc_term(m, self.acc, xs, F)
        terms.append((asg, placed, x_acc, a_zero))

        nans, pos_infs, neg_infs = [acc_nan], [acc_inf & ~asg], [acc_inf & asg]
        scale = self._scale(m)                    # (exponent offset, NaN) or None
        if scale is not None:
            nans.append(scale[1])
        for i in range(DOT_GROUP):
            sa, ma, ea, a_nan, a_inf = self._operand(m, self.a[8 * i:8 * i + 8], self.mode[1],
                                                     f"a{i}")
            sb, mb, eb, b_nan, b_inf = self._operand(m, self.b[8 * i:8 * i + 8], self.mode[0],
                                                     f"b{i}")
            zero = (ma == 0) | (mb == 0)
            sign = sa ^ sb
            prod = Signal(8, name=f"prod{i}")
            x = Signal.like(xs, name=f"x_p{i}")
            nominal = ea + eb + 6 if scale is None else ea + eb + 6 + scale[0]
            m.d.comb += [prod.eq(ma * mb), x.eq(Mux(zero, _ZERO_X, nominal))]
            inf = (a_inf | b_inf) & ~zero
            nans.append(a_nan | b_nan | ((a_inf | b_inf) & zero))
            pos_infs.append(inf & ~sign)
            neg_infs.append(inf & sign)
            terms.append((sign, _place(prod, 6, F), x, zero))  # bit 6 (nominal 1.0) at bit F

        emax = Signal.like(xs, name="emax")
        m.d.comb += emax.eq(terms[0][2])
        for _, _, x, _ in terms[1:]:              # a chain of maxima (Yosys sees the same tree)
            nxt = Signal.like(xs)
            m.d.comb += nxt.eq(Mux(x > emax, x, emax))
            emax = nxt

        neg, absval, norm, e_fin = aligned_sum(m, [t[:3] for t in terms], emax, F, M)

        all_neg_zero = asg & a_zero
        for (sign, _, _, zero) in terms[1:]:
            all_neg_zero = all_neg_zero & sign & zero
        nan = Cat(*nans).any()
        pos_inf, neg_inf = Cat(*pos_infs).any(), Cat(*neg_infs).any()
        with m.If(nan | (pos_inf & neg_inf)):
            m.d.comb += self.result.eq(CANONICAL_NAN)
        with m.Elif(pos_inf | neg_inf):
            m.d.comb += self.result.eq(Cat(Const(0, 23), Const(0xFF, 8), neg_inf))
        with m.Elif(absval == 0):
            m.d.comb += self.result.eq(Cat(Const(0, 31), all_neg_zero))
        rz_result(m, self.result, neg, norm, e_fin, M)
        return m

    def _scale(self, m: Module):
        """(exponent offset of every product, NaN flag) of the lanes' block scales, or None:
        none here; the block-scaled unit (:class:`MxDot4Fp8`) adds its E8M0 scales."""
        return None

    @staticmethod
    def _operand(m: Module, x, e5m2, name: str):
        """(sign, significand with the hidden bit at bit 3, exponent E of its value M·2^E, nan,
        inf): :meth:`Fp8Multiplier._decode` with E5M2's 3-bit significand shifted up one."""
        s, sig, exp, nan, inf = Fp8Multiplier._decode(m, x, e5m2, name)
        sig4 = Signal(4, name=f"{name}_sig4")
        exp4 = Signal(range(-20, 16), name=f"{name}_exp4")
        m.d.comb += [sig4.eq(Mux(e5m2, sig << 1, sig)), exp4.eq(Mux(e5m2, exp - 1, exp))]
        return s, sig4, exp4, nan, inf


class MxDot4Fp8(Dot4Fp8):
    """The block-scaled dot4 unit (the ``mxdot4`` datapath): :class:`Dot4Fp8` whose 40-bit lanes
    carry, in bits 39:32, the E8M0 scale of the block the four elements belong to, and whose
    elements may also be MXFP6 (E3M2, E2M3) or MXFP4 (E2M1) codes in the low bits of their byte
    (mode codes 0, 1, 2; the FP8 modes as :class:`Dot4Fp8`). The two
    scales add to every product's nominal exponent (``2^(sa + sb − 254)``: one 9-bit add shared
    by the four products, and an exponent add per product) before the alignment; a NaN scale
    (0xFF) makes the step NaN. Everything else is the dot4 rule: truncated alignment to the
    largest exponent, one rounding toward zero (golden :func:`diptych.rtl.dot_ref.dot4_bits`
    with ``scales``, :func:`~diptych.rtl.dot_ref.mx_dot_matmul_bits`). The PE needs no block
    state: every step carries its block's scales."""

    EXTRA_LANE_BITS = 8

    #: (exponent bits, mantissa bits, bias) of the MXFP6/MXFP4 element of mode codes 0, 1, 2
    #: (3 is reserved and decodes as code 2); both operands take the mode's format
    SMALL = ((3, 2, 3), (2, 3, 1), (2, 1, 1))

    def _operand(self, m: Module, x, e5m2, name: str):
        """FP8 (``mode[2]`` set: :meth:`Dot4Fp8._operand`) or the mode's FP6/FP4 element (no
        Inf or NaN), in the same form: sign, significand with its hidden bit at bit 3, the
        exponent of its last bit."""
        s8, sig8, exp8, nan8, inf8 = Dot4Fp8._operand(m, x, e5m2, name)
        sign = Signal(name=f"{name}_sgn")
        sig = Signal(4, name=f"{name}_sigm")
        exp = Signal(range(-20, 16), name=f"{name}_expm")
        with m.If(self.mode[2]):
            m.d.comb += [sign.eq(s8), sig.eq(sig8), exp.eq(exp8)]
        for code, (eb, mb, bias) in enumerate(self.SMALL):
            e, f = x[mb:mb + eb], x[0:mb]
            hidden = Mux(e == 0, 0, 1)
            with m.Elif(self.mode[0:2] == code if code < 2 else self.mode[1]):
                m.d.comb += [sign.eq(x[eb + mb]), sig.eq(Cat(f, hidden) << (3 - mb)),
                             exp.eq(Mux(e == 0, 1, e) - bias - 3)]
        return sign, sig, exp, nan8 & self.mode[2], inf8 & self.mode[2]

    def _scale(self, m: Module):
        s_a, s_b = self.a[8 * DOT_GROUP:], self.b[8 * DOT_GROUP:]
        offset = Signal(range(-300, 300), name="scale_exp")
        m.d.comb += offset.eq(s_a + s_b - 254)
        return offset, (s_a == 0xFF) | (s_b == 0xFF)
