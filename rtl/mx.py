"""The block-scaled (MX) PE: exact block dot products, scaled by E8M0 exponents, rounded once.

``MxDot`` is the combinational datapath of the ``mx`` PE (:mod:`diptych.rtl.datapath`), built
the way MX dot-product units are (OCP MX v1.0 §6.1: ``Dot(A, B) = X_A · X_B · Σ P_A·P_B`` over a
block of 32; İslamoğlu et al., "MXDOTP: a RISC-V ISA extension for enabling microscaling (MX)
floating-point dot products", ASAP 2025, arXiv:2505.13159: an MXFP8 E4M3/E5M2 dot-product unit
whose products are summed in a wide fixed-point register and whose E8M0 scales are an exponent
addition; NVIDIA Blackwell's ``tcgen05.mma … kind::mxf8f6f4`` takes the scale vectors as MMA
operands). Per step (four K-consecutive elements a cycle, as the ``dot4`` PE):

* four 4 × 4-bit significand multipliers (E4M3 or E5M2 per operand, by ``mode`` as in the FP8
  PEs); each exact 8-bit product is shifted to its place in a **fixed-point block register** of
  :attr:`MxDot.WIDTH` bits whose last bit is 2^``LSB_EXP``, the smallest product (E5M2
  subnormal²: 2⁻³⁴), and whose top holds a block of :data:`MAX_BLOCK` products of the largest
  (57344²) — so the block sum is **exact** (a Kulisch accumulator the size of one block);
* ``blk_out = blk + Σ products`` (one five-input signed add), and the block's special flags
  (a NaN operand, Inf × 0, +Inf and −Inf products) OR-ed into ``flags_out``;
* the *block-closing* path, used by the PE in the step that ends a block: the E8M0 scale codes
  ``sa``, ``sb`` (bits 39:32 of the A and B lanes) add to the exponent, ``2^(sa + sb − 254)``;
  the block sum is normalised (leading-zero count), **rounded once** to FP32 (nearest, ties to
  even; overflow to ±Inf; a result below 2⁻¹²⁶ flushed to zero of its sign unless rounding on
  FP32's subnormal grid carries it to 2⁻¹²⁶, which is what the golden's IEEE conversion does;
  an exact zero is +0) — that is ``dot``; then ``acc_out = acc + dot`` in the FP32 adder of
  the other PEs (:class:`~diptych.rtl.fp.Fp32Adder`: round to nearest even, subnormal inputs
  read as zero, subnormal sums flushed, canonical NaN).

A NaN scale (0xFF), a NaN element, Inf × 0 or Infs of both signs in the block make ``dot`` the
canonical NaN, another Inf product makes it that Inf. This is the rule of the golden model
:mod:`diptych.rtl.formats` (``block_matmul_bits``) exactly: each block pair's dot exact, rounded
once to FP32, the blocks' dots accumulated in ascending order from +0 by the FP32 add — two
roundings per block, where MXDOTP folds the accumulator into the fixed-point sum (one).
"""

# No ``from __future__ import annotations`` here: wiring.Component reads port annotations.
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .datapath import MODE_BITS, get_datapath
from .dot import Dot4Fp8
from .fp import CANONICAL_NAN, Fp32Adder, round_significand
from .fused import normalise_signed
from .pe import OsPe

__all__ = ["MxDot", "MxOsPe", "MX_GROUP", "MAX_BLOCK", "SCALE_BITS", "FLAG_BITS"]

#: Elements per step (per lane), the scale's bits, the longest block the register holds.
MX_GROUP = 4
SCALE_BITS = 8
MAX_BLOCK = 32
#: The block's special flags: NaN, +Inf product, −Inf product.
FLAG_BITS = 3

assert get_datapath("mx").lane_bits == 8 * MX_GROUP + SCALE_BITS
assert set(dict(get_datapath("mx").rates).values()) == {MX_GROUP}


class MxDot(wiring.Component):
    """Combinational MX step (module docstring). Lanes ``a``/``b``: four FP8 elements (element
    ``i`` in bits ``8i + 7 … 8i``) and the block's E8M0 scale in bits 39:32; ``blk``/``blk_out``
    the exact block sum (signed, units of 2^``LSB_EXP``), ``flags``/``flags_out`` (bit 0 NaN,
    1 +Inf, 2 −Inf); ``dot`` the closed block (``blk_out`` scaled and rounded) and ``acc_out``
    = ``acc + dot`` (FP32 bits), meaningful in a block-closing step."""

    #: the exponent of the block register's last bit (E5M2 subnormal × E5M2 subnormal)
    LSB_EXP = -34
    #: magnitude bits of a block of MAX_BLOCK products (< 32 · 57344² · 2^34 < 2^71)
    MAG_BITS = 71
    WIDTH = MAG_BITS + 1

    a: In(8 * MX_GROUP + SCALE_BITS)
    b: In(8 * MX_GROUP + SCALE_BITS)
    mode: In(MODE_BITS)
    blk: In(MAG_BITS + 1)
    flags: In(FLAG_BITS)
    acc: In(32)
    blk_out: Out(MAG_BITS + 1)
    flags_out: Out(FLAG_BITS)
    dot: Out(32)
    acc_out: Out(32)

    def elaborate(self, platform):
        m = Module()
        W, lsb = self.MAG_BITS, self.LSB_EXP
        nan, pinf, ninf = self.flags[0], self.flags[1], self.flags[2]
        addends = [self.blk.as_signed()]
        for i in range(MX_GROUP):
            sa, ma, ea, a_nan, a_inf = Dot4Fp8._operand(m, self.a[8 * i:8 * i + 8],
                                                        self.mode[1], f"a{i}")
            sb, mb, eb, b_nan, b_inf = Dot4Fp8._operand(m, self.b[8 * i:8 * i + 8],
                                                        self.mode[0], f"b{i}")
            zero = (ma == 0) | (mb == 0)
            sign = sa ^ sb
            prod = Signal(8, name=f"prod{i}")
            sh = Signal(range(64), name=f"sh{i}")              # ea + eb − LSB_EXP: 0 … 58
            placed = Signal(W, name=f"placed{i}")
            m.d.comb += [prod.eq(ma * mb), sh.eq(ea + eb - lsb), placed.eq(prod << sh)]
            addends.append(Mux(sign, -placed, placed))
            inf = (a_inf | b_inf) & ~zero
            nan = nan | a_nan | b_nan | ((a_inf | b_inf) & zero)
            pinf = pinf | (inf & ~sign)
            ninf = ninf | (inf & sign)
        total = Signal(signed(W + 1))
        m.d.comb += [total.eq(sum(addends)), self.blk_out.eq(total),
                     self.flags_out.eq(Cat(nan, pinf, ninf))]

        # close the block: scale (an exponent add), normalise, round once, accumulate
        neg, absval, lz, norm = normalise_signed(m, total, W, "mx")
        s_a, s_b = self.a[8 * MX_GROUP:], self.b[8 * MX_GROUP:]
        e_biased = Signal(range(-1024, 1024))           # biased exponent of the leading bit
        m.d.comb += e_biased.eq((W - 1 - lz) + lsb + s_a + s_b - 254 + 127)
        mant, guard = norm[W - 24:W], norm[W - 25]
        sticky = norm[0:W - 25].any()
        e_fin, frac = round_significand(m, mant, guard & (sticky | mant[0]), e_biased,
                                        e_biased.shape())
        # at 2^-127 the golden rounds on FP32's subnormal grid (23 bits): only a carry to
        # 2^-126 survives the flush
        to_min_normal = (e_biased == 0) & norm[W - 23:W].all() & norm[W - 24]
        value = Signal(32)
        with m.If(absval == 0):
            m.d.comb += value.eq(0)
        with m.Elif(e_biased <= -1):
            m.d.comb += value.eq(Cat(Const(0, 31), neg))
        with m.Elif(e_biased == 0):
            m.d.comb += value.eq(Cat(Const(0, 23), to_min_normal, Const(0, 7), neg))
        with m.Elif(e_fin >= 255):
            m.d.comb += value.eq(Cat(Const(0, 23), Const(0xFF, 8), neg))
        with m.Else():
            m.d.comb += value.eq(Cat(frac, e_fin[0:8], neg))
        scale_nan = (s_a == 0xFF) | (s_b == 0xFF)
        with m.If(nan | scale_nan | (pinf & ninf)):
            m.d.comb += self.dot.eq(CANONICAL_NAN)
        with m.Elif(pinf | ninf):
            m.d.comb += self.dot.eq(Cat(Const(0, 23), Const(0xFF, 8), ninf))
        with m.Else():
            m.d.comb += self.dot.eq(value)
        m.submodules.add = add = Fp32Adder()
        m.d.comb += [add.a.eq(self.acc), add.b.eq(self.dot), self.acc_out.eq(add.s)]
        return m


class MxOsPe(wiring.Component):
    """Output-stationary PE of the ``mx`` datapath: :class:`~diptych.rtl.pe.OsPe`'s ports and
    registers (40-bit lanes, ``mode``), plus ``block_last_in``/``block_last_out`` travelling
    east with the row, and the exact block register (``blk``, :attr:`MxDot.WIDTH` bits, and
    the block's special flags) beside the FP32 accumulator.

    When ``valid_in``: the step's four products join the block register; if the step closes a
    block (``block_last_in`` or ``last_in``) the block's dot (scaled by the scales in this
    step's lanes, rounded once) is added to ``acc`` and the block register clears; if
    ``last_in`` the finished sum goes to the drain register and ``acc`` restarts from +0. The
    drain chain is the OS PE's. Single-cycle: no latency beyond the other PEs'
    (:data:`diptych.sim.timing.BLOCK_SCALE_EXTRA_CYCLES` = 0).
    """

    def __init__(self):
        self.dtype = "mx"
        ports = OsPe.ports(get_datapath("mx").lane_bits)
        ports.update(mode_in=In(MODE_BITS), mode_out=Out(MODE_BITS),
                     block_last_in=In(1), block_last_out=Out(1))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mac = mac = MxDot()
        acc = Signal(32)
        blk = Signal(MxDot.WIDTH)
        flags = Signal(FLAG_BITS)
        m.d.comb += [mac.a.eq(self.a_in), mac.b.eq(self.b_in), mac.mode.eq(self.mode_in),
                     mac.acc.eq(acc), mac.blk.eq(blk), mac.flags.eq(flags)]
        m.d.sync += [
            self.a_out.eq(self.a_in), self.b_out.eq(self.b_in),
            self.valid_out.eq(self.valid_in), self.last_out.eq(self.last_in),
            self.block_last_out.eq(self.block_last_in), self.mode_out.eq(self.mode_in),
        ]
        close = self.block_last_in | self.last_in
        with m.If(self.valid_in):
            with m.If(close):
                m.d.sync += [blk.eq(0), flags.eq(0), acc.eq(mac.acc_out)]
            with m.Else():
                m.d.sync += [blk.eq(mac.blk_out), flags.eq(mac.flags_out)]
        with m.If(self.valid_in & self.last_in):
            m.d.sync += [acc.eq(0), self.drain_out.eq(mac.acc_out)]
        with m.Elif(self.shift):
            m.d.sync += self.drain_out.eq(self.drain_in)
        return m
