"""The FP4 dot-product PE: eight E2M1 products a step, MXFP4 or NVFP4 block scales (``fp4dot8``).

FP4 at twice FP8's rate (NVIDIA Blackwell ``tcgen05.mma`` ``kind::mxf4``/``kind::mxf4nvf4``,
PTX ISA; infer-2026's ``macs_per_pe_per_cycle`` mxfp4 = nvfp4 = 2 × mxfp8). ``Fp4Dot8`` is
combinational ``result = step(acc, a, b)`` by the **fp4dot8** rule of
:mod:`diptych.rtl.fp4dot_ref` (bit for bit), built as:

* eight E2M1 decoders (a 2-bit significand ``1.m``/``0.m`` and a shift 0 … 2) and eight 2 × 2
  significand multipliers whose 4-bit products are shifted by ``sh_a + sh_b`` (0 … 4): each
  product an exact integer ``k_a·k_b ≤ 144`` in units of 2^-2;
* one signed eight-input 12-bit adder tree: the step's dot ``P``, exact;
* the block scales, one pair per step (a block is a whole number of steps): MXFP4's E8M0 codes
  (``mode`` code 2) are exponents only, NVFP4's E4M3 codes (code 3, ``mode[0]`` set) have
  4-bit significands, multiplied once (4 × 4 bits) and their exponents added; then
  ``|P| × m_A·m_B`` in one 11 × 8-bit multiplier (MXFP4's significand is 1.000, the product a
  shift);
* an 18-bit leading-zero count that normalises that term, a two-way maximum of its exponent and
  the accumulator's, two right shifters (truncating what falls out of the 26-bit window), one
  signed adder, the leading-zero normaliser and round-toward-zero of the ``dot4`` unit
  (:class:`diptych.rtl.dot.Dot4Fp8`), with its specials (a NaN scale or accumulator: NaN; an Inf
  accumulator stays Inf; E2M1 has neither).

The lane is 40 bits: eight K-consecutive E2M1 codes (element ``8s + i`` in bits ``4i + 3 …
4i``) and the block's scale code in bits 39:32, on every step (no block state in the PE). It is
the MAC of ``OsPe("fp4dot8")`` and ``SystolicArray(R, C, "fp4dot8", "os")``; output-stationary
only (the bench has no WS plans with block scales). The NVFP4 per-tensor FP32 scales are applied
outside the array (:func:`diptych.rtl.fp4dot_ref.nvfp4_matmul_bits`).
"""

# No ``from __future__ import annotations`` here: wiring.Component reads port annotations.
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .datapath import MODE_BITS, MODE_CODES, get_datapath
from .dot import _ZERO_X, _place
from .dot_ref import FP32_MAX_BITS
from .fp import CANONICAL_NAN
from .fp4dot_ref import FP4_FRAC_BITS, FP4_GROUP
from .fused import _leading_zeros, normalise_signed

__all__ = ["Fp4Dot8"]

SCALE_BITS = 8
assert get_datapath("fp4dot8").lane_bits == 4 * FP4_GROUP + SCALE_BITS
assert MODE_CODES["mxfp4"] == 2 and MODE_CODES["nvfp4"] == 3      # mode[0]: E4M3 scales
_T = 18                             # |P|·m_A·m_B ≤ 1152 · 225 < 2^18


class Fp4Dot8(wiring.Component):
    """Combinational ``result = step(acc, a, b)`` (the fp4dot8 rule): ``a``/``b`` 40-bit lanes
    (eight E2M1 codes and a scale code), ``acc``/``result`` FP32 bits, ``mode`` 3 bits
    (``mode[0]``: NVFP4's E4M3 scales, else MXFP4's E8M0)."""

    #: fraction bits kept below the larger term's leading bit (the golden's ``frac_bits``)
    FRAC_BITS = FP4_FRAC_BITS
    #: products a step (a subclass may halve it: the mutation audit's rate mutant)
    LANES = FP4_GROUP

    def __init__(self):
        lane = 4 * FP4_GROUP + SCALE_BITS
        super().__init__({"a": In(lane), "b": In(lane), "acc": In(32), "mode": In(MODE_BITS),
                          "result": Out(32)})

    def elaborate(self, platform):
        m = Module()
        F = self.FRAC_BITS
        M = F + 2                                 # two terms < 2^(F+1) each
        xs = Signal(range(-1024, 1024))
        nv = self.mode[0]

        # the step's dot P, exact, in units of 2^-2; the products' signs for a −0 result
        prods, neg_zeros = [], []
        s_sign, s_sig, s_exp, s_nan = self._scales(m, nv)
        for i in range(self.LANES):
            sa, ka, sha = self._element(m, self.a[4 * i:4 * i + 4], f"a{i}")
            sb, kb, shb = self._element(m, self.b[4 * i:4 * i + 4], f"b{i}")
            p = Signal(8, name=f"p{i}")
            m.d.comb += p.eq((ka * kb) << (sha + shb))
            prods.append(Mux(sa ^ sb, -p, p))
            neg_zeros.append((sa ^ sb ^ s_sign) & ((p == 0) | (s_sig == 0)))
        dot = Signal(signed(12), name="step_dot")
        m.d.comb += dot.eq(sum(prods))

        # scaled: |P| · m_A·m_B · 2^(x_A + x_B − 2), normalised by an 18-bit leading-zero count
        t_neg = dot[11]
        t_abs = Signal(11, name="t_abs")
        mag = Signal(_T, name="t_mag")
        m.d.comb += [t_abs.eq(Mux(t_neg, -dot, dot)), mag.eq(t_abs * s_sig)]
        lz = _leading_zeros(m, mag, _T, "tlz")
        norm = Signal(_T, name="t_norm")
        m.d.comb += norm.eq(mag << lz)
        t_zero = mag == 0
        x_t = Signal.like(xs, name="x_t")
        m.d.comb += x_t.eq(Mux(t_zero, _ZERO_X, s_exp - 2 + (_T - 1) - lz))
        t_sign = t_neg ^ s_sign

        # the accumulator: 1.f at bit F (a subnormal reads as zero of its sign)
        ae, af, asg = self.acc[23:31], self.acc[0:23], self.acc[31]
        a_zero = ae == 0
        acc_nan = (ae == 0xFF) & (af != 0)
        acc_inf = (ae == 0xFF) & (af == 0)
        x_acc = Signal.like(xs, name="x_acc")
        m.d.comb += x_acc.eq(Mux(a_zero | acc_inf, _ZERO_X, ae - 127))

        emax = Signal.like(xs, name="emax")
        m.d.comb += emax.eq(Mux(x_t > x_acc, x_t, x_acc))
        W = F + 1
        total = Signal(signed(M + 1))
        addends = []
        for n, (sign, placed, x) in enumerate((
                (asg, _place(Mux(a_zero, 0, Cat(af, Const(1, 1))), 23, F), x_acc),
                (t_sign, _place(norm, _T - 1, F), x_t))):
            d = Signal(range(-2048, 2048), name=f"d{n}")
            dc = Signal(range(W + 1), name=f"dc{n}")
            aligned = Signal(W, name=f"aligned{n}")
            m.d.comb += [d.eq(emax - x), dc.eq(Mux(d > W, W, d)), aligned.eq(placed >> dc)]
            addends.append(Mux(sign, -aligned, aligned))
        m.d.comb += total.eq(addends[0] + addends[1])

        neg, absval, lz2, norm2 = normalise_signed(m, total, M)
        e_fin = Signal(range(-2048, 2048))
        m.d.comb += e_fin.eq(emax + 127 + (M - 1 - F) - lz2)
        all_neg_zero = asg & a_zero & Cat(*neg_zeros).all()
        with m.If(acc_nan | s_nan):
            m.d.comb += self.result.eq(CANONICAL_NAN)
        with m.Elif(acc_inf):
            m.d.comb += self.result.eq(self.acc)
        with m.Elif(absval == 0):
            m.d.comb += self.result.eq(Cat(Const(0, 31), all_neg_zero))
        with m.Elif(e_fin >= 255):                # toward zero: the largest finite value
            m.d.comb += self.result.eq(Cat(Const(FP32_MAX_BITS, 31), neg))
        with m.Elif(e_fin <= 0):
            m.d.comb += self.result.eq(Cat(Const(0, 31), neg))
        with m.Else():
            m.d.comb += self.result.eq(Cat(norm2[M - 24:M - 1], e_fin[0:8], neg))
        return m

    @staticmethod
    def _element(m: Module, c, name: str):
        """(sign, 2-bit significand ``1.m``/``0.m``, shift) of an E2M1 code: value = sig ·
        2^shift · 2^-1."""
        e = c[1:3]
        sig = Signal(2, name=f"{name}_sig")
        sh = Signal(2, name=f"{name}_sh")
        m.d.comb += [sig.eq(Cat(c[0], e != 0)), sh.eq(Mux(e == 0, 0, e - 1))]
        return c[3], sig, sh

    def _scales(self, m: Module, nv):
        """(sign, significand product m_A·m_B (8 bits), exponent of its last bit x_A + x_B,
        NaN) of the step's two block scales: E8M0 (``2^(code − 127)`` = 8 · 2^(code − 130)) or
        E4M3 (``m · 2^(max(e, 1) − 10)``, its sign bit a sign)."""
        sigs, exps, signs, nans = [], [], [], []
        for side, lane in (("a", self.a), ("b", self.b)):
            c = lane[4 * FP4_GROUP:]
            e4, f4 = c[3:7], c[0:3]
            sig = Signal(4, name=f"s{side}_sig")
            exp = Signal(range(-300, 300), name=f"s{side}_exp")
            m.d.comb += [sig.eq(Mux(nv, Cat(f4, e4 != 0), 8)),
                         exp.eq(Mux(nv, Mux(e4 == 0, 1, e4) - 10, c - 130))]
            sigs.append(sig)
            exps.append(exp)
            signs.append(nv & c[7])
            nans.append(Mux(nv, (e4 == 0xF) & (f4 == 7), c == 0xFF))
        prod = Signal(8, name="s_sig")
        x = Signal(range(-600, 600), name="s_exp")
        m.d.comb += [prod.eq(sigs[0] * sigs[1]), x.eq(exps[0] + exps[1])]
        return signs[0] ^ signs[1], prod, x, nans[0] | nans[1]
