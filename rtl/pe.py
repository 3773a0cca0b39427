"""Processing elements: the single-cycle MAC and the OS / WS PEs built around it.

Every PE is an :class:`amaranth.lib.wiring.Component` with one register per hop: operands that
travel east (``a`` and the row's control flags) and south (``b`` in OS, partial sums and shadow
weights in WS) are registered once inside each PE, which is what gives PE(i, j) its
``i + j`` cycle offset in the array-timing contract (design.md §4).
"""

# No ``from __future__ import annotations`` here: wiring.Component reads port annotations.
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fp import Bf16Multiplier, Fp32Adder

__all__ = ["DTYPES", "operand_bits", "Int8Multiplier", "Int32Adder", "Mac", "OsPe", "WsPe"]

#: Supported element types and their operand widths in bits (the accumulator is 32 bits).
DTYPES = {"int8": 8, "bf16": 16}


def operand_bits(dtype: str) -> int:
    """Operand width of ``dtype`` in bits; raises ValueError naming the value if unsupported."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return DTYPES[dtype]


class Int8Multiplier(wiring.Component):
    """``p = a × b``: signed 8-bit operands, the exact 16-bit two's-complement product."""

    a: In(8)
    b: In(8)
    p: Out(16)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.p.eq(self.a.as_signed() * self.b.as_signed())
        return m


class Int32Adder(wiring.Component):
    """``s = a + b`` modulo 2³² (``b`` is a 16-bit product, sign-extended)."""

    a: In(32)
    b: In(16)
    s: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.s.eq(self.a + self.b.as_signed())
        return m


class Mac(wiring.Component):
    """Combinational ``result = acc + a × b``.

    ``int8``: signed 8-bit operands, 32-bit two's-complement accumulator (wraps).
    ``bf16``: bf16 operands, exact product in FP32 (:class:`Bf16Multiplier`), FP32 add
    (:class:`Fp32Adder`); ``acc`` is FP32 bits.
    """

    def __init__(self, dtype: str):
        self.dtype = dtype
        w = operand_bits(dtype)
        super().__init__({"a": In(w), "b": In(w), "acc": In(32), "result": Out(32)})

    def elaborate(self, platform):
        m = Module()
        if self.dtype == "int8":
            m.submodules.mul = mul = Int8Multiplier()
            m.submodules.add = add = Int32Adder()
            m.d.comb += [
                mul.a.eq(self.a), mul.b.eq(self.b),
                add.a.eq(self.acc), add.b.eq(mul.p),
                self.result.eq(add.s),
            ]
        else:
            m.submodules.mul = mul = Bf16Multiplier()
            m.submodules.add = add = Fp32Adder()
            m.d.comb += [
                mul.a.eq(self.a), mul.b.eq(self.b),
                add.a.eq(self.acc), add.b.eq(mul.p),
                self.result.eq(add.s),
            ]
        return m


class OsPe(wiring.Component):
    """Output-stationary PE.

    Ports (all sampled at the rising edge at which the PE *executes* a step):

    * ``a_in``/``valid_in``/``last_in`` from the west, passed east registered as
      ``a_out``/``valid_out``/``last_out``; ``b_in`` from the north, passed south as ``b_out``.
    * When ``valid_in``: ``acc ← acc + a·b``; if also ``last_in`` (the tile's last step) the
      finished sum goes to the drain register and ``acc`` restarts from zero (+0 for BF16).
    * The drain register ``drain_out`` otherwise holds, or takes ``drain_in`` (the drain
      register of the PE above) when ``shift`` is high: the column's drain chain moves finished
      results down to the array's bottom edge, one row per cycle.
    """

    def __init__(self, dtype: str):
        self.dtype = dtype
        w = operand_bits(dtype)
        super().__init__({
            "a_in": In(w), "b_in": In(w), "valid_in": In(1), "last_in": In(1),
            "drain_in": In(32), "shift": In(1),
            "a_out": Out(w), "b_out": Out(w), "valid_out": Out(1), "last_out": Out(1),
            "drain_out": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mac = mac = Mac(self.dtype)
        acc = Signal(32)
        m.d.comb += [mac.a.eq(self.a_in), mac.b.eq(self.b_in), mac.acc.eq(acc)]
        m.d.sync += [
            self.a_out.eq(self.a_in), self.b_out.eq(self.b_in),
            self.valid_out.eq(self.valid_in), self.last_out.eq(self.last_in),
        ]
        with m.If(self.valid_in & self.last_in):
            m.d.sync += [acc.eq(0), self.drain_out.eq(mac.result)]
        with m.Else():
            with m.If(self.valid_in):
                m.d.sync += acc.eq(mac.result)
            with m.If(self.shift):
                m.d.sync += self.drain_out.eq(self.drain_in)
        return m


class WsPe(wiring.Component):
    """Weight-stationary PE with a double-buffered (shadow / active) weight.

    * ``w_in`` from the north is shifted into the shadow register when ``w_load`` is high and
      passed south as ``w_out`` (the shadow register itself).
    * ``a_in``/``valid_in``/``first_in`` from the west, passed east registered. A valid step
      with ``first_in`` (the first row of a tile) swaps: it uses the shadow weight and copies
      it into the active register; later steps use the active weight.
    * ``psum_out ← psum_in + a·w`` every cycle (registered), flowing south.
    """

    def __init__(self, dtype: str):
        self.dtype = dtype
        w = operand_bits(dtype)
        super().__init__({
            "a_in": In(w), "valid_in": In(1), "first_in": In(1), "psum_in": In(32),
            "w_in": In(w), "w_load": In(1),
            "a_out": Out(w), "valid_out": Out(1), "first_out": Out(1), "psum_out": Out(32),
            "w_out": Out(w),
        })

    def elaborate(self, platform):
        m = Module()
        w = operand_bits(self.dtype)
        m.submodules.mac = mac = Mac(self.dtype)
        active = Signal(w)
        swap = self.valid_in & self.first_in
        weight = Mux(swap, self.w_out, active)
        m.d.comb += [mac.a.eq(self.a_in), mac.b.eq(weight), mac.acc.eq(self.psum_in)]
        m.d.sync += [
            self.a_out.eq(self.a_in), self.valid_out.eq(self.valid_in),
            self.first_out.eq(self.first_in), self.psum_out.eq(mac.result),
        ]
        with m.If(swap):
            m.d.sync += active.eq(self.w_out)
        with m.If(self.w_load):
            m.d.sync += self.w_out.eq(self.w_in)
        return m
