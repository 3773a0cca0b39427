"""Deliberately broken RTL for the mutation test: each mutant is one small source edit.

A mutant names a module of ``diptych.rtl``, an exact piece of its source and the replacement;
:func:`applied` executes the edited source as a fresh module and monkeypatches its classes into
the modules that use them (the array and the simulator look them up when they elaborate), so
the rest of the bench is unchanged. If a mutation site disappears from the source the test
fails ("site not found") rather than silently testing nothing.

Each mutant names the plan that must catch it (``plan``): the standard random plans, or the
directed special-value plan (:func:`diptych.rtl.special_plan.special_plan`, in the mutant's
``modes`` only, to keep the fast tier fast) for the faults only special values show. The
rounding faults of one FP unit (config ``_FP_UNIT``, ``unit`` naming it) are scored on the unit
alone with its TestFloat-style vectors (:mod:`rtl_testfloat`).

Run ``python tests/rtl/rtl_mutants.py`` to print the mutation table (which plans catch which
fault, whether random data in the bubbles is what catches it, and what the special-value plan
catches).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import types
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    fault: str
    module: str                     # the module whose source is edited
    edits: tuple[tuple[str, str], ...]
    patch: tuple[tuple[str, str], ...]   # (module, attribute) that get the mutated class
    config: tuple[int, int, str, str]    # (rows, cols, dtype, dataflow) of the bench run
    #: the plan that must catch it: "random" (make_plan, the standard random plans) or
    #: "special" (special_plan, the directed special values, in ``modes`` only if given)
    plan: str = "random"
    modes: tuple[str, ...] = ()
    #: an FP unit scored alone on its TestFloat-style vectors (rtl_testfloat.UNITS key)
    unit: str = ""


_PE = "diptych.rtl.pe"
_FP = "diptych.rtl.fp"
_FUSED = "diptych.rtl.fused"
_ARRAY = "diptych.rtl.array"
_DOT = "diptych.rtl.dot"
_MX = "diptych.rtl.mx"
_FP4 = "diptych.rtl.fp4dot"
#: config of a mutant of the dot4 unit: scored by rtl_dot_bench on the unit, not by the array bench
_DOT_UNIT = (1, 1, "dot4", "unit")
#: config of a mutant of one FP unit: scored by rtl_testfloat on the unit alone (its ``unit``)
_FP_UNIT = (1, 1, "fp", "unit")

MUTANTS = (
    Mutant("os-acc-while-invalid", "OS PE accumulates while valid is low", _PE,
           (("            with m.If(self.valid_in):\n                m.d.sync += acc.eq(",
             "            with m.If(1):\n                m.d.sync += acc.eq("),),
           ((_ARRAY, "OsPe"),), (2, 3, "int8", "os")),
    Mutant("adder-keeps-subnormals", "FP32 adder keeps subnormal sums (no flush)", _FP,
           (("        with m.Elif(e_fin <= 0):\n"
             "            m.d.comb += self.s.eq(Cat(Const(0, 31), sx))",
             "        with m.Elif(e_fin <= 0):\n"
             "            m.d.comb += self.s.eq(Cat((Cat(frac_fin, Const(1, 1)) >> "
             "(1 - e_fin).as_unsigned())[0:23], Const(0, 8), sx))"),),
           ((_PE, "Fp32Adder"),), (2, 3, "bf16", "os")),
    Mutant("adder-ties-away", "FP32 adder rounds ties away from zero", _FP,
           (("round_up = guard & (rnd | sticky | mant[0])", "round_up = guard"),),
           ((_PE, "Fp32Adder"),), (2, 3, "bf16", "ws")),
    Mutant("int32-saturates", "int32 accumulator saturates instead of wrapping", _PE,
           (("m.d.comb += self.s.eq(self.a + self.b.as_signed())",
             "full = self.a.as_signed() + self.b.as_signed()\n"
             "        m.d.comb += self.s.eq(Mux(full > 2**31 - 1, 2**31 - 1, "
             "Mux(full < -2**31, -2**31, full)))"),),
           ((_ARRAY, "OsPe"), (_ARRAY, "WsPe")), (2, 3, "int8", "ws")),
    Mutant("ws-swap-without-valid", "WS PE swaps weights on in_first without valid", _PE,
           (("swap = self.valid_in & self.first_in", "swap = self.first_in"),),
           ((_ARRAY, "WsPe"),), (2, 3, "int8", "ws")),
    Mutant("ws-swap-one-row-late", "WS PE uses the new weights from the 2nd row on", _PE,
           (("weight = Mux(swap, self.w_out, active)", "weight = active"),),
           ((_ARRAY, "WsPe"),), (2, 3, "int8", "ws")),
    Mutant("ws-shadow-shifts-always", "WS shadow register shifts without w_load", _PE,
           (("        with m.If(self.w_load):\n            m.d.sync += self.w_out.eq(",
             "        with m.If(1):\n            m.d.sync += self.w_out.eq("),),
           ((_ARRAY, "WsPe"),), (2, 3, "bf16", "ws")),
    Mutant("os-no-deskew", "OS outputs not de-skewed (columns a cycle apart)", _ARRAY,
           (("_delay(m, pe[R - 1][j].drain_out, C - 1 - j, f\"out{j}\")",
             "_delay(m, pe[R - 1][j].drain_out, C - 1, f\"out{j}\")"),),
           (("diptych.rtl.pysim", "SystolicArray"),), (2, 3, "int8", "os")),
    Mutant("fp8-subnormals-flushed", "FP8 multiplier flushes FP8 subnormal inputs", _FP,
           (("sig.eq(Mux(e5 == 0, f2,", "sig.eq(Mux(e5 == 0, 0,"),
            ("sig.eq(Mux(e4 == 0, f3,", "sig.eq(Mux(e4 == 0, 0,")),
           ((_PE, "Fp8Multiplier"),), (2, 3, "fp8", "os")),
    Mutant("e4m3-has-inf", "E4M3 S.1111.000 decoded as Inf (IEEE habit)", _FP,
           (("                inf.eq(0),", "                inf.eq((e4 == 0xF) & (f3 == 0)),"),),
           ((_PE, "Fp8Multiplier"),), (2, 3, "fp8", "ws")),
    Mutant("multi-fp8-order-swapped", "multi PE adds the two FP8 products in the wrong order",
           _PE, (("fadd0.b.eq(Mux(is_bf16, bmul.p, fp8[0].p))",
                  "fadd0.b.eq(Mux(is_bf16, bmul.p, fp8[1].p))"),
                 ("fadd1.b.eq(fp8[1].p)", "fadd1.b.eq(fp8[0].p)")),
           ((_ARRAY, "OsPe"), (_ARRAY, "WsPe")), (2, 3, "multi", "ws")),
    Mutant("multi-b-format-from-a", "multi PE decodes B in A's FP8 format", _PE,
           (("mul.b_e5m2.eq(mode[0])]", "mul.b_e5m2.eq(mode[1])]"),),
           ((_ARRAY, "OsPe"), (_ARRAY, "WsPe")), (2, 3, "multi", "os")),
    Mutant("fused-rounds-each-product", "fused PE rounds each FP8 product into the "
           "accumulator (two adders in series, the multi PE's rule)", _FUSED,
           (("        m.submodules.add = add = Fp32Add3()\n",
             "        m.submodules.first = first = Fp32Add3()\n"
             "        m.submodules.add = add = Fp32Add3()\n"
             "        m.d.comb += [first.a.eq(self.acc), first.b.eq(lane0.p), "
             "first.c.eq(_NEG_ZERO)]\n"),
            ("add.a.eq(self.acc), add.b.eq(lane0.p),", "add.a.eq(first.s), add.b.eq(_NEG_ZERO),")),
           ((_PE, "FusedMac"),), (2, 3, "fused", "ws")),
    Mutant("add3-window-too-narrow", "three-operand adder keeps 40 bits, not 51 (an "
           "accumulator cancelling a product is not provided for)", _FUSED,
           (("    WINDOW = 51", "    WINDOW = 40"),),
           ((_PE, "FusedMac"),), (2, 3, "fused", "os")),
    Mutant("add3-sticky-dropped", "three-operand adder truncates the bits it aligns out "
           "(no jam/sticky bit)", _FUSED,
           (("aligned = Cat(shifted[0] | lost, shifted[1:N], Const(0, 3))",
             "aligned = Cat(shifted[0], shifted[1:N], Const(0, 3))"),),
           ((_PE, "FusedMac"),), (2, 3, "fused", "ws")),
    Mutant("dot4-window-one-bit-narrower", "dot4 unit keeps 25 fraction bits below the largest "
           "term, not the 26 its rule states", _DOT,
           (("    FRAC_BITS = DOT_FRAC_BITS\n", "    FRAC_BITS = DOT_FRAC_BITS - 1\n"),),
           (), _DOT_UNIT),
    Mutant("dot4-accumulator-not-aligned", "dot4 unit adds the accumulator unshifted (no "
           "alignment when a product's exponent is larger)", _DOT,
           (("dc.eq(Mux(d > W, W, d))", "dc.eq(Mux(n == 0, 0, Mux(d > W, W, d)))"),),
           (), _DOT_UNIT),
    # ---- the dot4 PE in an array (issue 26 item 3): random plans on dot4 arrays
    Mutant("ws-active-weight-16-bits", "WS PE's active weight register is 16 bits (the widest "
           "lane before dot4): from a tile's 2nd row on, W's elements 2 and 3 read as +0", _PE,
           (("active = Signal(len(self.w_out))", "active = Signal(16)"),),
           ((_ARRAY, "WsPe"),), (1, 2, "dot4", "ws")),
    Mutant("dot4-a-lanes-reversed", "dot4 unit reads A's lane in reverse (element 4s + i of A "
           "meets element 4s + 3 − i of B)", _DOT,
           (("self._operand(m, self.a[8 * i:8 * i + 8], self.mode[1],",
             "self._operand(m, self.a[8 * (3 - i):8 * (3 - i) + 8], self.mode[1],"),),
           ((_PE, "Dot4Fp8"),), (2, 1, "dot4", "os")),
    Mutant("dot4-b-format-from-a", "dot4 unit decodes B in A's FP8 format", _DOT,
           (("self._operand(m, self.b[8 * i:8 * i + 8], self.mode[0],",
             "self._operand(m, self.b[8 * i:8 * i + 8], self.mode[1],"),),
           ((_PE, "Dot4Fp8"),), (1, 2, "dot4", "ws")),
    # ---- special values: the random plans pass these; the directed special plan does not
    Mutant("fused-bf16-adds-plus-zero", "fused PE adds +0, not −0, as the three-operand "
           "adder's third term in BF16 mode, so (−0) + (−0) gives +0 (issue 26)", _FUSED,
           (("add.c.eq(Mux(is_fp8, lane1.p, _NEG_ZERO))", "add.c.eq(Mux(is_fp8, lane1.p, 0))"),),
           ((_PE, "FusedMac"),), (1, 2, "fused", "ws"), "special", ("bf16",)),
    Mutant("add3-cancelled-zero-keeps-sign", "three-operand adder passes a zero third term "
           "on with its sign when the other two cancel (−0 for x − x − 0, −0 − 0 + 0)",
           _FUSED,
           (("return Mux(mag[k] == 0, 0, Cat(mag[k], sgn[k]))", "return Cat(mag[k], sgn[k])"),),
           ((_PE, "FusedMac"),), (1, 2, "fused", "ws"), "special", ("e5m2",)),
    Mutant("adder-zero-always-plus", "FP32 adder gives +0 for every exact zero sum, "
           "(−0) + (−0) too", _FP,
           (("m.d.comb += self.s.eq(Cat(Const(0, 31), sx & ~sub))",
             "m.d.comb += self.s.eq(Const(0, 32))"),),
           ((_PE, "Fp32Adder"),), (2, 3, "bf16", "ws"), "special"),
    Mutant("fp8-zero-product-unsigned", "FP8 multiplier gives +0 for every zero product "
           "(the sign of a zero is dropped)", _FP,
           (("        with m.Elif(a_zero | b_zero):\n"
             "            m.d.comb += self.p.eq(Cat(Const(0, 31), sign))",
             "        with m.Elif(a_zero | b_zero):\n"
             "            m.d.comb += self.p.eq(0)"),),
           ((_PE, "Fp8Multiplier"),), (2, 3, "fp8", "ws"), "special"),
    Mutant("bf16-flushed-product-unsigned", "bf16 multiplier gives +0 for a zero, subnormal or "
           "underflowing product (the sign of a zero is dropped)", _FP,
           (("        with m.Elif(a_zero | b_zero | (exp <= 0)):\n"
             "            m.d.comb += self.p.eq(Cat(Const(0, 31), sign))",
             "        with m.Elif(a_zero | b_zero | (exp <= 0)):\n"
             "            m.d.comb += self.p.eq(0)"),),
           ((_PE, "Bf16Multiplier"),), (2, 3, "bf16", "ws"), "special"),
    Mutant("dot4-minus-zero-ignores-products", "dot4 unit gives −0 for a −0 accumulator and "
           "zero products of either sign", _DOT,
           (("all_neg_zero = all_neg_zero & sign & zero", "all_neg_zero = all_neg_zero & zero"),),
           (), _DOT_UNIT, "special", ("e4m3",)),
    # ---- the block-scaled MX PE (issue 26 item 2): a 1×1 mx array, its plans of diptych.rtl.mx_bench
    Mutant("mx-block-last-ignored", "mx PE closes a block only at the tile's last step: a tile's "
           "blocks merge and take the last block's scales", _MX,
           (("close = self.block_last_in | self.last_in", "close = self.last_in"),),
           ((_MX, "MxOsPe"),), (1, 1, "mx", "os")),
    Mutant("mx-no-subnormal-grid-carry", "mx unit flushes every dot below 2^-126, also those the "
           "golden's IEEE conversion rounds up to 2^-126", _MX,
           (("Cat(Const(0, 23), to_min_normal, Const(0, 7), neg)", "Cat(Const(0, 31), neg)"),),
           ((_MX, "MxOsPe"),), (1, 1, "mx", "os"), "special", ("mxfp8_e5m2",)),
    Mutant("mxdot4-b-scale-ignored", "mxdot4 unit scales the products by A's block scale only",
           _DOT, (("m.d.comb += offset.eq(s_a + s_b - 254)", "m.d.comb += offset.eq(s_a - 127)"),),
           ((_PE, "MxDot4Fp8"),), (1, 1, "mxdot4", "os")),
    # ---- the FP4 PE (fp4dot8: eight E2M1 products a step), a 1×1 array, diptych.rtl.fp4_bench
    Mutant("fp4dot8-nvfp4-scale-significand-dropped", "fp4dot8 unit applies NVFP4's E4M3 block "
           "scales as their exponents only (the 4 × 4 significand product read as 1.000)", _FP4,
           (("prod.eq(sigs[0] * sigs[1])", "prod.eq(Mux(nv, 64, sigs[0] * sigs[1]))"),),
           ((_PE, "Fp4Dot8"),), (1, 1, "fp4dot8", "os")),
    Mutant("fp4dot8-half-rate", "fp4dot8 unit adds only the first four of a step's eight FP4 "
           "products (FP8's rate)", _FP4, (("    LANES = FP4_GROUP\n", "    LANES = 4\n"),),
           ((_PE, "Fp4Dot8"),), (1, 1, "fp4dot8", "os")),
    Mutant("mxint8-no-element-scale", "MXINT8 unit forgets each element's 2^-6 (products "
           "2^12 too large)", "diptych.rtl.mxint8",
           (("sa + sb - 254 + 2 * self.ELEM_EXP + MXINT8_LEAD", "sa + sb - 254 + MXINT8_LEAD"),),
           ((_PE, "MxInt8Dot4"),), (1, 1, "mxint8", "os")),
    Mutant("ws-scale-from-shadow", "block-scaled WS PE reads the weights' block scale from the "
           "shadow register (the next tile's, loaded while this one streams), not the active "
           "one", _PE,
           (("from amaranth.hdl import Module, Mux, Signal",
             "from amaranth.hdl import Cat, Module, Mux, Signal"),
            ("        weight = Mux(swap, self.w_out, active)\n",
             "        weight = Cat(Mux(swap, self.w_out, active)[:32], self.w_out[32:])\n"),),
           ((_ARRAY, "WsPe"),), (1, 1, "mxdot4", "ws")),
    # ---- rounding faults of the FP units, scored alone on the TestFloat-style vectors
    #      (rtl_testfloat: ties, near-ties, carry-out, alignment, the ends of the range)
    Mutant("adder-sticky-dropped", "FP32 adder drops the sticky bit of the aligned operand "
           "(a near-tie above ½ ulp rounds as a tie)", _FP,
           (("m.d.comb += Y.eq(y_shift | (lost != 0))", "m.d.comb += Y.eq(y_shift)"),),
           (), _FP_UNIT, unit="fp32_add"),
    Mutant("adder-no-carry-renormalise", "FP32 adder keeps the exponent when the rounding "
           "increment carries out (1.1…1 rounds up to 1.0 of the same binade)", _FP,
           (("    with m.If(rounded[24]):", "    with m.If(0):"),),
           (), _FP_UNIT, unit="fp32_add"),
    Mutant("adder-min-normal-flushed", "FP32 adder flushes results in the lowest binade "
           "(2^-126 … 2^-125) as if subnormal", _FP,
           (("        with m.Elif(e_fin <= 0):\n"
             "            m.d.comb += self.s.eq(Cat(Const(0, 31), sx))",
             "        with m.Elif(e_fin <= 1):\n"
             "            m.d.comb += self.s.eq(Cat(Const(0, 31), sx))"),),
           (), _FP_UNIT, unit="fp32_add"),
    Mutant("adder-align-clamped-at-24", "FP32 adder caps the alignment shift at 24, not 27 "
           "(an operand 25 or more binades down counts double or more)", _FP,
           (("dc.eq(Mux(d > 27, 27, d))", "dc.eq(Mux(d > 24, 24, d))"),),
           (), _FP_UNIT, unit="fp32_add"),
    Mutant("bf16-mul-overflow-off-by-one", "bf16 multiplier overflows only past exponent 255 "
           "(a product of exponent 255 comes out as a NaN or Inf pattern with its fraction)", _FP,
           (("with m.Elif(a_inf | b_inf | (exp >= 255)):",
             "with m.Elif(a_inf | b_inf | (exp > 255)):"),),
           (), _FP_UNIT, unit="bf16_mul"),
    Mutant("bf16-mul-min-normal-flushed", "bf16 multiplier flushes products of exponent 1 "
           "(2^-126 … 2^-125)", _FP,
           (("with m.Elif(a_zero | b_zero | (exp <= 0)):",
             "with m.Elif(a_zero | b_zero | (exp <= 1)):"),),
           (), _FP_UNIT, unit="bf16_mul"),
    Mutant("add3-final-sticky-ignored", "three-operand adder ignores the sticky bits in its one "
           "rounding (a sum just above a tie rounds as a tie)", _FUSED,
           (("round_up = guard & (sticky | mant[0])", "round_up = guard & mant[0]"),),
           (), _FP_UNIT, unit="fp32_add3"),
    Mutant("add3-min-normal-flushed", "three-operand adder flushes results in the lowest binade",
           _FUSED,
           (("        with m.Elif(e_fin <= 0):\n"
             "            m.d.comb += self.s.eq(Cat(Const(0, 31), neg))",
             "        with m.Elif(e_fin <= 1):\n"
             "            m.d.comb += self.s.eq(Cat(Const(0, 31), neg))"),),
           (), _FP_UNIT, unit="fp32_add3"),
)


#: Faults of the array's control (issue 26 item 5), each caught by the enumeration of every
#: issue pattern (tests/rtl/rtl_control_patterns.py) on the array of its ``config`` (INT8).
#: ``os-drain-shifts-whole-column`` needs R ≥ 3: on two rows the next tile's writes always
#: win over the extra shifts, so every 2×2 and 2×3 pattern passes it. The control faults of
#: :data:`MUTANTS` (``CONTROL_IN_MUTANTS``) are checked against the enumeration too.
CONTROL_MUTANTS = (
    Mutant("os-drain-shifts-whole-column", "OS drain chain shifts every row of a column while "
           "any drains, so a result the next tile loads early is pushed out with the old tile's",
           _ARRAY, (("pe[i][j].shift.eq(cnt > R - i)", "pe[i][j].shift.eq(cnt != 0)"),),
           (("diptych.rtl.pysim", "SystolicArray"),), (3, 3, "int8", "os")),
    Mutant("os-drain-starts-a-cycle-late", "OS drain counter starts a cycle after the bottom PE "
           "finishes (the drain register is read one cycle late)", _ARRAY,
           (("with m.If(bot.valid_in & bot.last_in):\n                m.d.sync += cnt.eq(R)",
             "with m.If(bot.valid_out & bot.last_out):\n                m.d.sync += cnt.eq(R)"),),
           (("diptych.rtl.pysim", "SystolicArray"),), (2, 2, "int8", "os")),
    Mutant("ws-out-valid-from-column-0", "WS out_valid taken from the bottom-left PE, not the "
           "bottom-right one (C − 1 cycles early)", _ARRAY,
           (("self.out_valid.eq(pe[R - 1][C - 1].valid_out)",
             "self.out_valid.eq(pe[R - 1][0].valid_out)"),),
           (("diptych.rtl.pysim", "SystolicArray"),), (2, 2, "int8", "ws")),
    Mutant("ws-active-takes-the-shadow-above", "WS swap copies the shadow weight of the PE above "
           "(w_in) into the active register, not its own", _PE,
           (("            m.d.sync += active.eq(self.w_out)",
             "            m.d.sync += active.eq(self.w_in)"),),
           ((_ARRAY, "WsPe"),), (2, 2, "int8", "ws")),
)
#: names of the control faults in :data:`MUTANTS`
CONTROL_IN_MUTANTS = ("os-acc-while-invalid", "ws-swap-without-valid", "ws-swap-one-row-late",
                      "ws-shadow-shifts-always", "os-no-deskew")


def mutated_module(m: Mutant) -> types.ModuleType:
    """The mutant's module: the real source with the edits, executed as a new module."""
    real = importlib.import_module(m.module)
    src = inspect.getsource(real)
    for old, new in m.edits:
        if src.count(old) != 1:
            raise AssertionError(f"{m.name}: mutation site found {src.count(old)} times in "
                                 f"{m.module}: {old!r}")
        src = src.replace(old, new)
    mod = types.ModuleType(f"{m.module}__{m.name.replace('-', '_')}")
    mod.__package__ = real.__package__
    mod.__file__ = real.__file__
    exec(compile(src, f"<mutant {m.name}>", "exec", dont_inherit=True), mod.__dict__)
    return mod


@contextlib.contextmanager
def applied(m: Mutant):
    """Within the block, the RTL elaborates with the mutant in place."""
    mod = mutated_module(m)
    saved = []
    try:
        for target, attr in m.patch:
            tmod = importlib.import_module(target)
            saved.append((tmod, attr, getattr(tmod, attr)))
            setattr(tmod, attr, getattr(mod, attr))
        yield mod
    finally:
        for tmod, attr, value in reversed(saved):
            setattr(tmod, attr, value)


def caught(m: Mutant, seeds=(1, 2), tiles: int = 8, bubble_data: str = "random",
           plan: str | None = None) -> list[str]:
    """The scoreboard's complaints about the mutant on the standard plans of ``plan`` (default:
    the mutant's own): ``"random"``, one random plan per seed (the dot4 unit: its directed
    cases and random groups), or ``"special"``, the directed special-value plan (the dot4 unit:
    the special-value steps of every FP8 mode), its idle cycles seeded by each seed."""
    from diptych.rtl.bench import score
    from diptych.rtl.plans import make_plan
    from diptych.rtl.pysim import run_plan
    from diptych.rtl.special_plan import special_plan

    plan = m.plan if plan is None else plan
    if plan not in ("random", "special"):
        raise ValueError(f"plan must be 'random' or 'special', not {plan!r}")
    rows, cols, dtype, dataflow = m.config
    if m.config == _FP_UNIT:                   # the unit alone on its TestFloat-style vectors
        import rtl_testfloat
        cls = getattr(mutated_module(m), rtl_testfloat.UNITS[m.unit])
        return [f"seed {seeds[0]}: {e}"
                for e in rtl_testfloat.mismatches(m.unit, rtl_testfloat.vectors(m.unit,
                                                                                 seed=seeds[0]),
                                                  cls)]
    if m.config == _DOT_UNIT:                  # the unit's own scoreboard, seeds as random sets
        import rtl_dot_bench
        mod = mutated_module(m)
        sets = {s: rtl_dot_bench.special(m.modes or rtl_dot_bench.FP8_MODES)
                if plan == "special" else rtl_dot_bench.cases(s) for s in seeds}
        return [f"seed {seed}: {e}" for seed in seeds
                for e in rtl_dot_bench.mismatches(mod.Dot4Fp8(), sets[seed])]
    errors = []
    with applied(m):
        for seed in seeds:
            if plan == "special":
                p = special_plan(rows, cols, dtype, dataflow, m.modes or None, seed=seed,
                                 bubble_data=bubble_data)
            else:
                p = make_plan(rows, cols, dtype, dataflow, seed=seed, tiles=tiles,
                              bubble_data=bubble_data)
            errors += [f"seed {seed}: {e}" for e in score(p, run_plan(p))]
    return errors


def main() -> int:
    """Print the audit table: mismatches on the random plans of seeds 1 and 2 (and the same
    plans with zero bubble data), and on the special-value plan (one run: it is directed)."""
    print("| mutant | fault | bench run | random plans (seeds 1, 2) | same plans, zero bubbles | "
          "special-value plan |")
    print("|---|---|---|---|---|---|")
    fmt = lambda e: f"caught ({len(e)})" if e else "**missed**"   # noqa: E731
    for m in MUTANTS:
        rows, cols, dtype, dataflow = m.config
        if m.config == _FP_UNIT:               # one column: the unit on its TestFloat vectors
            print(f"| `{m.name}` | {m.fault} | {m.unit} unit | TestFloat vectors: "
                  f"{fmt(caught(m, seeds=(1,)))} | (unit) | (unit) |", flush=True)
            continue
        rand = caught(m, plan="random")
        zero = ("(unit: no bubbles)" if m.config == _DOT_UNIT
                else fmt(caught(m, bubble_data="zero", plan="random")))
        special = caught(m, seeds=(1,), plan="special")
        run = "dot4 unit" if m.config == _DOT_UNIT else f"{dtype} {dataflow.upper()} {rows}×{cols}"
        if m.modes:
            run += f" ({', '.join(m.modes)})"
        print(f"| `{m.name}` | {m.fault} | {run} | {fmt(rand)} | {zero} | {fmt(special)} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
