"""Processing elements: the single-cycle MAC and the OS / WS PEs built around it.

A PE is built for one *datapath* (:mod:`diptych.rtl.datapath`): ``int8``, ``bf16``, ``fp8``
(E4M3/E5M2 per operand), ``multi`` (the multi-precision PE: INT8 and FP8 at two MACs per
cycle, BF16 at one, selected by the ``mode`` input; FP8 products rounded one after the other),
``fused`` (the same modes and rates; the two FP8 products of a cycle and the accumulator rounded
once, :mod:`diptych.rtl.fused`) or ``dot4`` (FP8 at four MACs per cycle, the dot-product unit
of :mod:`diptych.rtl.dot`). Every PE is an
:class:`amaranth.lib.wiring.Component` with one register per hop: operands that
travel east (``a`` and the row's control flags) and south (``b`` in OS, partial sums and shadow
weights in WS) are registered once inside each PE, which is what gives PE(i, j) its
``i + j`` cycle offset in the array-timing contract (design.md §4).
"""

# No ``from __future__ import annotations`` here: wiring.Component reads port annotations.
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .datapath import DATAPATHS, MODE_BITS, get_datapath
from .dot import Dot4Fp8, MxDot4Fp8
from .fp4dot import Fp4Dot8
from .fp import Bf16Multiplier, Fp8Multiplier, Fp32Adder
from .fused import FusedMac
from .mxint8 import MxInt8Dot4

__all__ = ["DTYPES", "operand_bits", "Int8Multiplier", "Int32Adder", "Mac", "make_mac", "OsPe",
           "WsPe", "Dot4OsPe", "Dot4WsPe"]

#: Supported datapaths and their operand lane widths in bits (the accumulator is 32 bits).
DTYPES = {name: d.lane_bits for name, d in DATAPATHS.items()}


def operand_bits(dtype: str) -> int:
    """Operand lane width of ``dtype`` in bits; ValueError naming the value if unsupported."""
    return get_datapath(dtype).lane_bits


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


def _ports(dtype: str, **ports) -> dict:
    """``ports`` plus the ``mode`` input when the datapath has one."""
    if get_datapath(dtype).has_mode_port:
        ports["mode"] = In(MODE_BITS)
    return ports


class Mac(wiring.Component):
    """Combinational ``result = acc + a × b`` (``acc`` and ``result``: int32 or FP32 bits).

    ``int8``: signed 8-bit operands, 32-bit two's-complement accumulator (wraps).
    ``bf16``: bf16 operands, exact product in FP32 (:class:`Bf16Multiplier`), FP32 add
    (:class:`Fp32Adder`).
    ``fp8``: FP8 operands, ``mode[1]``/``mode[0]`` = A/B is E5M2 (else E4M3), exact product
    (:class:`Fp8Multiplier`), FP32 add.
    ``multi``: 16-bit lanes; ``mode`` (:data:`diptych.rtl.datapath.MODE_CODES`) selects INT8
    (two products, ``acc + a₀b₀ + a₁b₁`` mod 2³²), BF16 (one product, one FP32 add) or FP8
    (two exact products, ``(acc + a₀b₀) + a₁b₁`` through two FP32 adders in series).
    ``fused``: the same lanes and modes; FP8 ``round(acc + a₀b₀ + a₁b₁)`` in one exact
    three-operand adder (:class:`~diptych.rtl.fused.FusedMac`).
    The ``dot4`` datapath's MAC is its own unit, :class:`~diptych.rtl.dot.Dot4Fp8`
    (:func:`make_mac` gives each datapath's).
    """

    def __init__(self, dtype: str):
        if dtype in ("dot4", "mx", "mxdot4", "mxint8", "fp4dot8"):
            self._MustUse__silence = True       # a rejected instance is not "unused" design
            unit = {"dot4": "dot.Dot4Fp8", "mx": "mx.MxDot", "mxdot4": "dot.MxDot4Fp8",
                    "mxint8": "mxint8.MxInt8Dot4", "fp4dot8": "fp4dot.Fp4Dot8"}[dtype]
            raise ValueError(f"the {dtype} datapath's MAC is diptych.rtl.{unit} "
                             f"(make_mac({dtype!r}))")
        self.dtype = dtype
        w = operand_bits(dtype)
        super().__init__(_ports(dtype, a=In(w), b=In(w), acc=In(32), result=Out(32)))

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
        elif self.dtype == "multi":
            self._elaborate_multi(m)
        elif self.dtype == "fused":
            m.submodules.fused = mac = FusedMac()
            m.d.comb += [mac.a.eq(self.a), mac.b.eq(self.b), mac.acc.eq(self.acc),
                         mac.mode.eq(self.mode), self.result.eq(mac.result)]
        else:
            if self.dtype == "bf16":
                m.submodules.mul = mul = Bf16Multiplier()
            else:
                m.submodules.mul = mul = Fp8Multiplier()
                m.d.comb += [mul.a_e5m2.eq(self.mode[1]), mul.b_e5m2.eq(self.mode[0])]
            m.submodules.add = add = Fp32Adder()
            m.d.comb += [
                mul.a.eq(self.a), mul.b.eq(self.b),
                add.a.eq(self.acc), add.b.eq(mul.p),
                self.result.eq(add.s),
            ]
        return m

    def _elaborate_multi(self, m: Module) -> None:
        mode = self.mode
        is_fp8 = mode[2]
        is_bf16 = ~mode[2] & (mode[0:2] == 1)
        lanes = [(self.a[0:8], self.b[0:8]), (self.a[8:16], self.b[8:16])]
        # INT8: two products into the int32 accumulator
        int_sum = self.acc
        for n, (x, y) in enumerate(lanes):
            mul = Int8Multiplier()
            add = Int32Adder()
            m.submodules[f"imul{n}"], m.submodules[f"iadd{n}"] = mul, add
            m.d.comb += [mul.a.eq(x), mul.b.eq(y), add.a.eq(int_sum), add.b.eq(mul.p)]
            int_sum = add.s
        # FP: bf16 product or two FP8 products, through one or two FP32 adders in series
        m.submodules.bmul = bmul = Bf16Multiplier()
        m.d.comb += [bmul.a.eq(self.a), bmul.b.eq(self.b)]
        fp8 = []
        for n, (x, y) in enumerate(lanes):
            mul = Fp8Multiplier()
            m.submodules[f"fmul{n}"] = mul
            m.d.comb += [mul.a.eq(x), mul.b.eq(y), mul.a_e5m2.eq(mode[1]),
                         mul.b_e5m2.eq(mode[0])]
            fp8.append(mul)
        m.submodules.fadd0 = fadd0 = Fp32Adder()
        m.submodules.fadd1 = fadd1 = Fp32Adder()
        m.d.comb += [
            fadd0.a.eq(self.acc), fadd0.b.eq(Mux(is_bf16, bmul.p, fp8[0].p)),
            fadd1.a.eq(fadd0.s), fadd1.b.eq(fp8[1].p),
        ]
        with m.If(is_fp8):
            m.d.comb += self.result.eq(fadd1.s)
        with m.Elif(is_bf16):
            m.d.comb += self.result.eq(fadd0.s)
        with m.Else():
            m.d.comb += self.result.eq(int_sum)


def make_mac(dtype: str):
    """The combinational MAC of ``dtype`` (ports ``a``, ``b``, ``acc``, ``result`` and ``mode``
    when the datapath has modes): :class:`Mac`, the dot4 datapath's
    :class:`~diptych.rtl.dot.Dot4Fp8`, the mxdot4 datapath's, the mxint8 datapath's
    (:class:`~diptych.rtl.mxint8.MxInt8Dot4`) or the fp4dot8 datapath's
    (:class:`~diptych.rtl.fp4dot.Fp4Dot8`). The mx datapath's step unit is
    :class:`~diptych.rtl.mx.MxDot` (ports of its own: the block register and scales; it
    builds on this module, so this one does not build it): ValueError."""
    if get_datapath(dtype).block_port:
        raise ValueError(f"the {dtype} datapath's step unit is diptych.rtl.mx.MxDot")
    if dtype == "mxdot4":
        return MxDot4Fp8()
    if dtype == "fp4dot8":
        return Fp4Dot8()
    if dtype == "mxint8":
        return MxInt8Dot4()
    return Dot4Fp8() if dtype == "dot4" else Mac(dtype)


def _mode_ports(dtype: str, ports: dict) -> dict:
    """A PE's ports plus ``mode_in``/``mode_out`` when its datapath has modes (the block-scaled
    ``mx`` datapath has a PE of its own, :class:`~diptych.rtl.mx.MxOsPe`: ValueError)."""
    if get_datapath(dtype).block_port:
        raise ValueError(f"the {dtype} datapath's PE is diptych.rtl.mx.MxOsPe (output "
                         f"stationary only)")
    if get_datapath(dtype).has_mode_port:
        ports.update(mode_in=In(MODE_BITS), mode_out=Out(MODE_BITS))
    return ports


def _pass_mode(m: Module, pe, mac) -> None:
    """The MAC works in the mode that arrives with the operands; pass it east registered."""
    if hasattr(pe, "mode_in"):
        m.d.comb += mac.mode.eq(pe.mode_in)
        m.d.sync += pe.mode_out.eq(pe.mode_in)


class OsPe(wiring.Component):
    """Output-stationary PE.

    Ports (all sampled at the rising edge at which the PE *executes* a step):

    * ``a_in``/``valid_in``/``last_in`` (and ``mode_in`` for datapaths with modes) from the
      west, passed east registered as ``a_out``/``valid_out``/``last_out``/``mode_out``;
      ``b_in`` from the north, passed south as ``b_out``.
    * When ``valid_in``: ``acc ← acc + a·b``; if also ``last_in`` (the tile's last step) the
      finished sum goes to the drain register and ``acc`` restarts from zero (+0 for BF16).
    * The drain register ``drain_out`` otherwise holds, or takes ``drain_in`` (the drain
      register of the PE above) when ``shift`` is high: the column's drain chain moves finished
      results down to the array's bottom edge, one row per cycle.
    """

    def __init__(self, dtype: str):
        self.dtype = dtype
        if get_datapath(dtype).block_port:
            self._MustUse__silence = True       # a rejected instance is not "unused" design
        super().__init__(_mode_ports(dtype, self.ports(operand_bits(dtype))))

    @staticmethod
    def ports(w: int) -> dict:
        """The ports of an OS PE with ``w``-bit operand lanes (``mode_in``/``mode_out`` aside)."""
        return {"a_in": In(w), "b_in": In(w), "valid_in": In(1), "last_in": In(1),
                "drain_in": In(32), "shift": In(1),
                "a_out": Out(w), "b_out": Out(w), "valid_out": Out(1), "last_out": Out(1),
                "drain_out": Out(32)}

    def make_mac(self):
        """The combinational MAC inside: :func:`make_mac` of the PE's datapath."""
        return make_mac(self.dtype)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mac = mac = self.make_mac()
        acc = Signal(32)
        m.d.comb += [mac.a.eq(self.a_in), mac.b.eq(self.b_in), mac.acc.eq(acc)]
        m.d.sync += [
            self.a_out.eq(self.a_in), self.b_out.eq(self.b_in),
            self.valid_out.eq(self.valid_in), self.last_out.eq(self.last_in),
        ]
        _pass_mode(m, self, mac)
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
        if get_datapath(dtype).block_port:
            self._MustUse__silence = True       # a rejected instance is not "unused" design
        super().__init__(_mode_ports(dtype, self.ports(operand_bits(dtype))))

    @staticmethod
    def ports(w: int) -> dict:
        """The ports of a WS PE with ``w``-bit operand lanes (``mode_in``/``mode_out`` aside)."""
        return {"a_in": In(w), "valid_in": In(1), "first_in": In(1), "psum_in": In(32),
                "w_in": In(w), "w_load": In(1),
                "a_out": Out(w), "valid_out": Out(1), "first_out": Out(1), "psum_out": Out(32),
                "w_out": Out(w)}

    make_mac = OsPe.make_mac

    def elaborate(self, platform):
        m = Module()
        m.submodules.mac = mac = self.make_mac()
        active = Signal(len(self.w_out))
        swap = self.valid_in & self.first_in
        weight = Mux(swap, self.w_out, active)
        m.d.comb += [mac.a.eq(self.a_in), mac.b.eq(weight), mac.acc.eq(self.psum_in)]
        m.d.sync += [
            self.a_out.eq(self.a_in), self.valid_out.eq(self.valid_in),
            self.first_out.eq(self.first_in), self.psum_out.eq(mac.result),
        ]
        _pass_mode(m, self, mac)
        with m.If(swap):
            m.d.sync += active.eq(self.w_out)
        with m.If(self.w_load):
            m.d.sync += self.w_out.eq(self.w_in)
        return m


class Dot4OsPe(OsPe):
    """Output-stationary PE of the dot4 datapath, ``OsPe("dot4")``: the array's PE and the one
    ``diptych rtl area --dtype dot4`` synthesises (32-bit lanes, :class:`~diptych.rtl.dot.Dot4Fp8`
    as its MAC: four FP8 MACs per step)."""

    def __init__(self):
        super().__init__("dot4")


class Dot4WsPe(WsPe):
    """Weight-stationary PE of the dot4 datapath, ``WsPe("dot4")`` (32-bit lanes,
    :class:`~diptych.rtl.dot.Dot4Fp8` as its MAC)."""

    def __init__(self):
        super().__init__("dot4")
