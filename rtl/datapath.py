"""The PE datapaths of the RTL: which element types (*modes*) each does, at how many MACs per cycle.

No Amaranth here: the bench, the CLI and the area report use this table without building RTL.

==========  ====  ==================================================  ===========================
datapath    lane  modes (MACs per PE per cycle)                       ``mode`` port
==========  ====  ==================================================  ===========================
``int8``    8     int8 (1)                                            none
``bf16``    16    bf16 (1)                                            none
``fp8``     8     e4m3, e5m2, e4m3xe5m2, e5m2xe4m3 (1)                3 bits
``multi``   16    int8 (2), e4m3/e5m2/mixed FP8 (2), bf16 (1)         3 bits
``fused``   16    int8 (2), e4m3/e5m2/mixed FP8 (2), bf16 (1)         3 bits
``dot4``    32    e4m3, e5m2, e4m3xe5m2, e5m2xe4m3 (4)                3 bits
``mx``      40    mxfp8_e4m3, mxfp8_e5m2, mxfp8_e4m3xe5m2,            3 bits (+ block-last
                  mxfp8_e5m2xe4m3 (4), E8M0 block scales               flag, OS only)
``mxdot4``  40    the MXFP8 modes, mxfp6_e3m2, mxfp6_e2m3, mxfp4 (4)   3 bits
``mxint8``  40    mxint8 (4), E8M0 block scales                        none
``fp4dot8`` 40    mxfp4, nvfp4 (8), E8M0 or E4M3 block scales          3 bits (OS only)
==========  ====  ==================================================  ===========================

A *lane* is one operand port element: ``a_data[i]``, ``b_data[j]``, ``w_data[j]``. In the
``multi`` datapath an 8-bit mode packs **two K-consecutive elements per 16-bit lane** (element
``2s`` in bits 7:0, ``2s + 1`` in bits 15:8), and the PE does both MACs in one cycle, in that
order: ``acc ← (acc + a₀·b₀) + a₁·b₁``, two FP32 additions rounded one after the other (INT8:
one int32 sum, order immaterial). So an 8-bit mode runs an OS tile of depth K in ``ceil(K / 2)``
steps and holds a ``2R``-deep stationary tile in WS, exactly the rule the simulator applies to
an array with ``macs_per_pe_per_cycle = 2`` (:func:`diptych.sim.timing.os_steps`,
:func:`diptych.sim.timing.ws_stationary_depth`), and the FP32 results are bit-identical to the
one-MAC-per-cycle reduction in ascending ``k`` (the ``"sequential"`` accumulation rule of
:data:`diptych.rtl.numerics_ref.RULES`).

The ``fused`` datapath (:mod:`diptych.rtl.fused`) has the same lanes, modes, rates and mode codes,
but accumulates its FP8 modes by the ``"pair"`` rule: the two products of a cycle and the
accumulator are summed exactly and rounded once (``acc ← round(acc + a₀·b₀ + a₁·b₁)``), so its
FP8 results differ from one MAC per cycle in the last bits; INT8 and BF16 are the same as
``multi``'s. :attr:`Datapath.rule` names the rule; the bench's golden model follows it.

The ``dot4`` datapath (:mod:`diptych.rtl.dot`, the FP8 dot-product PE) is FP8 only: a 32-bit
lane holds **four** K-consecutive elements (element ``4s + i`` in bits ``8i + 7 … 8i``) and the
PE adds their four products to the accumulator in one step by the ``"dot4"`` rule (truncated
alignment to the largest exponent, one rounding toward zero, :mod:`diptych.rtl.dot_ref`): an OS
tile of depth K takes ``ceil(K / 4)`` steps and a WS PE holds four weights of its column, the
simulator's ``macs_per_pe_per_cycle = 4``.

The ``mx`` datapath (:mod:`diptych.rtl.mx`, the block-scaled PE) takes MXFP8 (OCP MX v1.0):
a 40-bit lane holds four K-consecutive FP8 elements (as ``dot4``) and, in bits 39:32, the E8M0
scale of the block they belong to. Each block's products are summed exactly in the PE and the
block's dot, scaled and rounded once, is added to the FP32 accumulator in the step that closes
the block (the ``"mx"`` rule of :func:`diptych.rtl.formats.block_matmul_bits`), which the
array's ``in_block_last`` flag marks (the tile's last step closes one too). Its modes name the
MXFP8 element pair (``mxfp8_e4m3xe5m2``: A E4M3, B E5M2) with the FP8 mode codes. It is
output-stationary only: the exact block sum lives in the PE (a WS column would have to pass the
wide block sum from PE to PE).

The ``mxdot4`` datapath (:class:`diptych.rtl.dot.MxDot4Fp8`) has the same lanes and modes but no
block state: it is the ``dot4`` unit with the two scales of the step's block added to every
product's exponent, and it also takes MXFP6 (E3M2, E2M3) and MXFP4 (E2M1) elements at the same
rate (mode codes 0, 1, 2; 3 is reserved), as Blackwell's ``kind::mxf8f6f4`` MMA does (the ``"mxdot4"`` rule, :func:`diptych.rtl.dot_ref.mx_dot_matmul_bits`:
truncated alignment, one rounding toward zero per step), so every step's lanes carry their
block's scales and no flag marks a block's end. Its PE is the ordinary OS PE; the bench drives
it output-stationary.

The ``fp4dot8`` datapath (:mod:`diptych.rtl.fp4dot`) is FP4 at twice FP8's rate: a 40-bit lane
holds **eight** K-consecutive E2M1 codes (element ``8s + i`` in bits ``4i + 3 … 4i``) and, in bits
39:32, their block's scale: E8M0 for ``mxfp4`` (mode code 2), E4M3 for ``nvfp4`` (code 3; the
per-tensor FP32 scales stay outside the PE). One step adds the eight products exactly, scales
the sum and adds it to the accumulator by the ``"fp4dot8"`` rule (truncated alignment, one
rounding toward zero, :mod:`diptych.rtl.fp4dot_ref`): an OS tile of depth K takes ``ceil(K / 8)``
steps, the simulator's ``macs_per_pe_per_cycle = 8``. Output-stationary only.
The ``mxint8`` datapath (:class:`diptych.rtl.mxint8.MxInt8Dot4`) has ``mxdot4``'s lanes with four
INT8 codes (OCP MX v1.0 MXINT8: each times 2^-6) and the block's E8M0 scale; its four products
are summed exactly as integers and the scaled sum meets the accumulator by the dot4 rule's
alignment and rounding (the ``"mxint8"`` rule, :func:`diptych.rtl.dot_ref.mxint8_matmul_bits`).
One mode, no ``mode`` port. ``mxdot4`` and ``mxint8`` carry their scales in every step's lanes,
so they run weight-stationary too: a stationary lane holds its four weights and their block's
scale, a streamed lane its four A elements and theirs.

Mode codes on the ``mode`` port (3 bits): int8 0, bf16 1, and for FP8 ``0b1ab`` with ``a`` = A
is E5M2 and ``b`` = B is E5M2 (e4m3 4, e4m3xe5m2 5, e5m2xe4m3 6, e5m2 7). In the array the
mode travels with ``in_valid`` (east along each row, one register per PE), so tiles of
different modes may follow each other back to back. Codes 2 and 3 are reserved (the hardware
treats them as int8).
"""

from __future__ import annotations

from dataclasses import dataclass

from .numerics_ref import MODES, RULES

__all__ = ["Datapath", "DATAPATHS", "MODE_CODES", "MODE_BITS", "MX_MODES", "MXFP8_MODES",
           "FP4_MODES", "get_datapath"]

#: Values of the ``mode`` port.
MODE_CODES = {"int8": 0, "bf16": 1, "e4m3": 4, "e4m3xe5m2": 5, "e5m2xe4m3": 6, "e5m2": 7,
              "mxfp8_e4m3": 4, "mxfp8_e4m3xe5m2": 5, "mxfp8_e5m2xe4m3": 6, "mxfp8_e5m2": 7,
              "mxfp6_e3m2": 0, "mxfp6_e2m3": 1, "mxfp4": 2, "nvfp4": 3}
#: The block-scaled modes: (A element format, B element format). MXFP8 (both block-scaled
#: datapaths) and MXFP6/MXFP4 (the ``mxdot4`` datapath; an element in the low bits of its byte).
MX_MODES = {"mxfp8_e4m3": ("e4m3", "e4m3"), "mxfp8_e5m2": ("e5m2", "e5m2"),
            "mxfp8_e4m3xe5m2": ("e4m3", "e5m2"), "mxfp8_e5m2xe4m3": ("e5m2", "e4m3"),
            "mxfp6_e3m2": ("e3m2", "e3m2"), "mxfp6_e2m3": ("e2m3", "e2m3"),
            "mxfp4": ("e2m1", "e2m1")}
MXFP8_MODES = tuple(m for m in MX_MODES if m.startswith("mxfp8"))
#: The FP4 modes of the ``fp4dot8`` datapath: (element format, block-scale format, block).
FP4_MODES = {"mxfp4": ("e2m1", "e8m0", 32), "nvfp4": ("e2m1", "e4m3", 16)}
MODE_BITS = 3


@dataclass(frozen=True)
class Datapath:
    """A PE datapath: operand lane width, the MACs per cycle of each mode it supports, and the
    accumulation rule of its FP8 modes (:data:`diptych.rtl.numerics_ref.RULES`)."""

    name: str
    lane_bits: int
    rates: tuple[tuple[str, int], ...]
    rule: str = "sequential"

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.rates)

    @property
    def os_only(self) -> str:
        """Why the datapath runs output-stationary only ('': it runs both dataflows)."""
        if self.block_port:
            return "each block's exact sum stays in its PE"
        if self.rule == "fp4dot8":
            return "its eight-element lanes have no WS plans yet"
        return ""

    @property
    def block_scaled(self) -> bool:
        """Whether the lanes carry block scales (the ``mx``, ``mxdot4``, ``mxint8`` and
        ``fp4dot8`` datapaths)."""
        return self.rule in ("mx", "mxdot4", "mxint8", "fp4dot8")

    @property
    def block_port(self) -> bool:
        """Whether the array has an ``in_block_last`` input (the ``mx`` datapath: its PE
        keeps each block's exact sum and closes it when told)."""
        return self.rule == "mx"

    @property
    def has_mode_port(self) -> bool:
        return len(self.rates) > 1

    def macs_per_cycle(self, mode: str) -> int:
        """MACs per PE per cycle in ``mode``; ValueError naming the mode if unsupported."""
        rates = dict(self.rates)
        if mode not in rates:
            kind = "a block-scaled format" if mode.startswith(("mx", "nvfp")) else "a mode"
            raise ValueError(f"{mode!r} is not {kind} of the {self.name} datapath (its modes: "
                             f"{', '.join(self.modes)}; the block-scaled PEs are the mx "
                             f"datapath, modes {', '.join(MXFP8_MODES)}, and mxdot4, those and "
                             f"mxfp6_e3m2, mxfp6_e2m3, mxfp4; mxint8, mode mxint8; fp4dot8: "
                             f"mxfp4, nvfp4)")
        return rates[mode]

    def element_bits(self, mode: str) -> int:
        """Width of one element in ``mode`` (a lane holds ``macs_per_cycle`` of them)."""
        self.macs_per_cycle(mode)
        return 16 if mode == "bf16" else 4 if self.rule == "fp4dot8" else 8


_FP8_MODES = ("e4m3", "e5m2", "e4m3xe5m2", "e5m2xe4m3")
DATAPATHS: dict[str, Datapath] = {d.name: d for d in (
    Datapath("int8", 8, (("int8", 1),)),
    Datapath("bf16", 16, (("bf16", 1),)),
    Datapath("fp8", 8, tuple((m, 1) for m in _FP8_MODES)),
    Datapath("multi", 16, (("int8", 2),) + tuple((m, 2) for m in _FP8_MODES) + (("bf16", 1),)),
    Datapath("fused", 16, (("int8", 2),) + tuple((m, 2) for m in _FP8_MODES) + (("bf16", 1),),
             rule="pair"),
    Datapath("dot4", 32, tuple((m, 4) for m in _FP8_MODES), rule="dot4"),
    Datapath("mx", 40, tuple((m, 4) for m in MXFP8_MODES), rule="mx"),
    Datapath("mxdot4", 40, tuple((m, 4) for m in MX_MODES), rule="mxdot4"),
    Datapath("mxint8", 40, (("mxint8", 4),), rule="mxint8"),
    Datapath("fp4dot8", 40, tuple((m, 8) for m in FP4_MODES), rule="fp4dot8"),
)}
assert all(m in MODES or m in MX_MODES or m in FP4_MODES or m == "mxint8"
           for d in DATAPATHS.values() for m in d.modes)
assert all(d.rule in RULES for d in DATAPATHS.values())


def get_datapath(dtype: str) -> Datapath:
    """The datapath called ``dtype``; ValueError naming the value if there is none."""
    if dtype not in DATAPATHS:
        raise ValueError(f"dtype must be one of {', '.join(DATAPATHS)}, not {dtype!r}")
    return DATAPATHS[dtype]
