"""The MXINT8 dot-product unit: four INT8 products per step, E8M0 block scales, one rounding.

``MxInt8Dot4`` is the MAC of the ``mxint8`` datapath (:mod:`diptych.rtl.datapath`), a sibling of
the block-scaled ``mxdot4`` unit (:class:`diptych.rtl.dot.MxDot4Fp8`) for OCP MX v1.0's MXINT8
(§5.2: INT8 elements with an implicit 2^-6, E8M0 scales per 32-element block). The lanes are
``mxdot4``'s: 40 bits, four K-consecutive INT8 codes (element ``4s + i`` in bits ``8i + 7 … 8i``)
and the block's E8M0 scale in bits 39:32. Per step:

* four signed 8 × 8 multipliers and an adder tree: ``S = Σ aᵢ·bᵢ`` **exact** (18-bit signed;
  the products of one step share one exponent, so an integer unit needs no alignment among them);
* the two scales add to the exponent of ``S``'s term (one 9-bit add, as in ``mxdot4``);
* the accumulator and that one term are aligned to the larger nominal exponent in a window of
  ``F + 2`` bits (``F`` = 26, :data:`~diptych.rtl.dot_ref.DOT_FRAC_BITS`), the smaller one
  **truncated**; one signed add, one leading-zero normalisation, a result rounded **toward
  zero** with the dot4 PE's saturation and flush.

A NaN scale or accumulator gives the canonical NaN, an Inf accumulator that Inf. The golden rule
is :func:`diptych.rtl.dot_ref.mxint8_dot4_bits` (bit-exact). Why a sibling and not a mode of
``mxdot4``: INT8 needs 8 × 8 significand multipliers where the FP8/FP6/FP4 unit has 4 × 4 ones,
so a shared unit would carry four unused 8 × 8 multipliers in every MXFP8 step and move the
presets' MXFP8 area coefficient, which is that unit's.
"""

# No ``from __future__ import annotations`` here: wiring.Component reads port annotations.
from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .datapath import get_datapath
from .dot import _ZERO_X, _place, acc_term, aligned_sum, rz_result
from .dot_ref import DOT_FRAC_BITS, DOT_GROUP, MXINT8_ELEM_EXP, MXINT8_LEAD
from .fp import CANONICAL_NAN

__all__ = ["MxInt8Dot4"]

assert get_datapath("mxint8").lane_bits == 8 * DOT_GROUP + 8


class MxInt8Dot4(wiring.Component):
    """Combinational ``result = mxint8_step(acc, a, b)`` (module docstring): ``a``/``b`` 40-bit
    lanes (four INT8 codes and an E8M0 scale in bits 39:32), ``acc``/``result`` FP32 bits."""

    #: fraction bits kept below the larger term's leading bit (the golden's ``frac_bits``)
    FRAC_BITS = DOT_FRAC_BITS
    #: the exponent of each element's last bit (2^-6, OCP MX v1.0 §5.2)
    ELEM_EXP = MXINT8_ELEM_EXP

    def __init__(self):
        lane = 8 * DOT_GROUP + 8
        super().__init__({"a": In(lane), "b": In(lane), "acc": In(32), "result": Out(32)})

    def elaborate(self, platform):
        m = Module()
        F = self.FRAC_BITS
        M = max(F + 5, 24)                        # |sum| < 4 · 2^F (both terms < 2 · 2^F)
        xs = Signal(range(-512, 512))

        # the integer sum of the step's four products (|S| ≤ 2^16)
        prods = []
        for i in range(DOT_GROUP):
            p = Signal(signed(16), name=f"prod{i}")
            m.d.comb += p.eq(self.a[8 * i:8 * i + 8].as_signed()
                             * self.b[8 * i:8 * i + 8].as_signed())
            prods.append(p)
        s = Signal(signed(18), name="isum")
        m.d.comb += s.eq(sum(prods))
        s_abs = Signal(17, name="isum_abs")
        m.d.comb += s_abs.eq(Mux(s < 0, -s, s))

        sa, sb = self.a[8 * DOT_GROUP:], self.b[8 * DOT_GROUP:]
        x_s = Signal.like(xs, name="x_s")
        m.d.comb += x_s.eq(Mux(s == 0, _ZERO_X,
                               sa + sb - 254 + 2 * self.ELEM_EXP + MXINT8_LEAD))

        # the accumulator: 1.f at bit F (a subnormal reads as zero)
        asg, placed, x_acc, _, acc_nan, acc_inf = acc_term(m, self.acc, xs, F)
        terms = [(asg, placed, x_acc), (s < 0, _place(s_abs, MXINT8_LEAD, F), x_s)]
        emax = Signal.like(xs, name="emax")
        m.d.comb += emax.eq(Mux(x_s > x_acc, x_s, x_acc))
        neg, absval, norm, e_fin = aligned_sum(m, terms, emax, F, M)

        with m.If(acc_nan | (sa == 0xFF) | (sb == 0xFF)):
            m.d.comb += self.result.eq(CANONICAL_NAN)
        with m.Elif(acc_inf):
            m.d.comb += self.result.eq(self.acc)
        with m.Elif(absval == 0):                 # an integer sum has no −0: +0
            m.d.comb += self.result.eq(0)
        rz_result(m, self.result, neg, norm, e_fin, M)
        return m
