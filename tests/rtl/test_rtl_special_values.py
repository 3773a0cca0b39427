"""Fast tier: the special-value classes of :mod:`diptych.rtl.special` (signed zeros in every
operand position, subnormals in and out, Inf, NaN, overflow, the INT8 wrap) on every PE
datapath in every mode and on the dot4 unit, the MAC alone in amaranth.sim, bit for bit against
the golden model; the golden model on the same steps against the exact Fraction oracle; the sign
of a zero sum stated from the operands' signs alone; where each step sits in the bench's
directed ``special`` plan, and that plan through small arrays."""

import numpy as np
import pytest
from amaranth.sim import Simulator

import rtl_dot_bench
import rtl_fraction_ref as oracle
from diptych.rtl import coverage, numerics_ref
from diptych.rtl.bench import score
from diptych.rtl.datapath import DATAPATHS, MODE_CODES, get_datapath
from diptych.rtl.dot import Dot4Fp8
from diptych.rtl.dot_ref import dot4_bits
from diptych.rtl.pe import Mac
from diptych.rtl.pysim import run_plan
from diptych.rtl.special import classes, neutral, special_cases, values
from diptych.rtl.special_plan import special_plan, special_tiles

#: (mode, MACs per step, accumulation rule) of every datapath's modes but the dot4 and the
#: block-scaled (mx, mxdot4) datapaths' (the oracle states the exact rules; the dot4 golden is
#: held to the exact sum within its truncation bound in test_rtl_dot.py, and its unit and arrays
#: are checked below; the block-scaled PEs' special values are their directed block cases,
#: test_rtl_mx.py)
_STEPS = sorted({(mode, d.macs_per_cycle(mode), d.rule if mode not in ("int8", "bf16")
                  else "sequential") for d in DATAPATHS.values() for mode in d.modes
                 if d.rule != "dot4" and not d.block_scaled})
_FP8_MODES = rtl_dot_bench.FP8_MODES


def _golden(mode: str, rule: str, c) -> int:
    """The golden model's result of one step: the 1×n by n×1 tile from ``c.acc``."""
    a = np.array([c.a]) if mode == "int8" else np.array([c.a], np.uint32)
    b = np.array(c.b).reshape(-1, 1) if mode == "int8" else np.array(c.b, np.uint32)[:, None]
    if mode == "bf16":
        a, b = a.astype(np.uint16), b.astype(np.uint16)
    elif mode != "int8":
        a, b = a.astype(np.uint8), b.astype(np.uint8)
    return int(numerics_ref.matmul_bits(mode, a, b, np.array([[c.acc]], np.uint32), rule)[0, 0])


def _oracle(mode: str, rule: str, c) -> int:
    """The exact oracle's result of the same step (INT8: Python integers modulo 2³²)."""
    if mode == "int8":
        acc = c.acc - 2**32 if c.acc >= 2**31 else c.acc
        return (acc + sum(x * y for x, y in zip(c.a, c.b))) % 2**32
    A, B = [list(c.a)], [[y] for y in c.b]
    if mode == "bf16":
        return oracle.bf16_matmul(A, B, [[c.acc]])[0][0]
    return oracle.fp8_matmul(A, B, *numerics_ref.mode_formats(mode), [[c.acc]], rule)[0][0]


@pytest.mark.parametrize("mode, n, rule", _STEPS, ids=[f"{m}-{n}-{r}" for m, n, r in _STEPS])
def test_golden_on_the_special_steps_against_the_oracle(mode, n, rule):
    bad = [(c.cls, c.name, hex(_golden(mode, rule, c)), hex(_oracle(mode, rule, c)))
           for c in special_cases(mode, n) if _golden(mode, rule, c) != _oracle(mode, rule, c)]
    assert not bad, bad[:5]


def _decode(fmt: str, code: int):
    return oracle.decode_bf16(code) if fmt == "bf16" else oracle.decode_mini(fmt, code)


def _zero_sign(mode: str, c):
    """The sign of the result when every term is a zero (None otherwise), from the decoded
    operands alone: −0 exactly when the accumulator and every product are −0."""
    fa, fb = numerics_ref.mode_formats(mode)
    acc = oracle.decode32(c.acc)
    terms = [acc] + [(_decode(fa, x), _decode(fb, y)) for x, y in zip(c.a, c.b)]
    if acc[0] != "num" or acc[2] != 0:
        return None
    signs = [acc[1]]
    for x, y in terms[1:]:
        if x[0] != "num" or y[0] != "num" or (x[2] != 0 and y[2] != 0):
            return None
        signs.append(x[1] ^ y[1])
    return int(all(signs))


_FP_STEPS = [s for s in _STEPS if s[0] != "int8"] + [(m, 4, "dot4") for m in _FP8_MODES]


@pytest.mark.parametrize("mode, n, rule", _FP_STEPS, ids=[f"{m}-{n}-{r}" for m, n, r in _FP_STEPS])
def test_the_sign_of_a_zero_sum_from_the_signs_alone(mode, n, rule):
    """Every step whose terms are all zeros (a subnormal accumulator reads as a zero): the
    golden result is −0 iff every term is −0, under both rules and the dot4 rule."""
    checked = 0
    for c in special_cases(mode, n):
        want = _zero_sign(mode, c)
        if want is None:
            continue
        got = (dot4_bits(c.acc, c.a, c.b, *numerics_ref.mode_formats(mode)) if rule == "dot4"
               else _golden(mode, rule, c))
        assert got == want << 31, (c.name, hex(got))
        checked += 1
    assert checked >= 2**n, checked          # every sign combination of the products at least


def _lane(mode: str, elems) -> int:
    width = 16 if mode == "bf16" else 8
    return sum((int(x) & ((1 << width) - 1)) << (width * i) for i, x in enumerate(elems))


@pytest.mark.parametrize("dtype", [d for d in DATAPATHS
                                   if d != "dot4" and not DATAPATHS[d].block_scaled])
def test_mac_on_the_special_steps_against_golden(dtype):
    """The datapath's MAC (amaranth.sim) in every mode on every special-value step (the dot4
    datapath's MAC is its unit, ``Dot4Fp8``: the next test)."""
    dp = get_datapath(dtype)
    cases = [(mode, c) for mode in dp.modes
             for c in special_cases(mode, dp.macs_per_cycle(mode))]
    dut = Mac(dtype)
    got = []

    async def tb(ctx):
        for mode, c in cases:
            if dp.has_mode_port:
                ctx.set(dut.mode, MODE_CODES[mode])
            ctx.set(dut.a, _lane(mode, c.a))
            ctx.set(dut.b, _lane(mode, c.b))
            ctx.set(dut.acc, c.acc)
            got.append(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    rule = {m: "sequential" if m in ("int8", "bf16") else dp.rule for m in dp.modes}
    bad = [(mode, c.cls, c.name, hex(g), hex(_golden(mode, rule[mode], c)))
           for (mode, c), g in zip(cases, got) if g != _golden(mode, rule[mode], c)]
    assert not bad, bad[:5]


def test_dot4_unit_on_the_special_steps_against_golden():
    vectors = rtl_dot_bench.special()
    assert len(vectors) == sum(len(special_cases(m, 4)) for m in _FP8_MODES)
    bad = rtl_dot_bench.mismatches(Dot4Fp8(), vectors)
    assert not bad, bad[:5]


_SHAPES = [(m, n) for m in ("int8", "bf16", *_FP8_MODES) for n in (1, 2, 4)
           if m != "bf16" or n == 1]


@pytest.mark.parametrize("mode, n", _SHAPES, ids=[f"{m}-{n}" for m, n in _SHAPES])
def test_every_class_in_every_operand_position(mode, n):
    """The classes a mode claims are there, and each value class stands in every position:
    both zeros in A and B of every lane and in the accumulator; subnormals, Infs (where the
    format has them) and NaNs in A and B of the first and last lane and in the accumulator."""
    cases = special_cases(mode, n)
    assert {c.cls for c in cases} == set(classes(mode))
    fa, fb = numerics_ref.mode_formats(mode)
    acc_fmt = "int32" if mode == "int8" else "fp32"

    def present(fmt, where, names, lanes):
        v = values(fmt)
        for name in names:
            codes = v[name] if isinstance(v[name], tuple) else (v[name],)
            for lane in lanes:
                pos = (lambda c: c.acc) if where == "acc" else \
                      (lambda c, la=lane: getattr(c, where)[la])
                assert any(pos(c) in codes for c in cases), (mode, n, where, lane, name)

    zeros = ["+0"] if mode == "int8" else ["+0", "-0"]
    for fmt, where in ((fa, "a"), (fb, "b")):
        present(fmt, where, zeros, range(n))
    present(acc_fmt, "acc", zeros, [0])
    if mode == "int8":
        present("int32", "acc", ["+max", "-max"], [0])
        return
    for fmt, where in ((fa, "a"), (fb, "b"), ("fp32", "acc")):
        names = ["+sub", "-sub", "nan"] + [s for s in ("+inf", "-inf") if s in values(fmt)]
        present(fmt, where, names, sorted({0, n - 1}))


@pytest.mark.parametrize("dataflow", ["os", "ws"])
@pytest.mark.parametrize("dtype", [d for d in DATAPATHS if not DATAPATHS[d].block_scaled])
def test_the_special_plan_holds_every_step(dtype, dataflow):
    """WS: every step is one output of the special plan (its A row, W column and partial sum;
    the deeper stationary rows neutral); OS: every step's A and B meet on a tile's diagonal."""
    rows, cols = (2, 3) if dataflow == "os" else (3, 2)
    dp = get_datapath(dtype)
    for mode in dp.modes:
        n = dp.macs_per_cycle(mode)
        na, nb = neutral(mode)
        tiles = special_tiles(rows, cols, dtype, dataflow, mode)
        cells = set()
        for tile in tiles:
            if dataflow == "os":
                a, b = tile
                cells |= {(tuple(a[i]), tuple(b[:, i])) for i in range(min(rows, cols))}
                continue
            a, w, p = tile
            assert (a[:, n:] == na).all() and (w[n:, :] == nb).all()
            cells |= {(tuple(a[m, :n]), tuple(w[:n, j]), int(p[m, j]))
                      for m in range(len(a)) for j in range(cols)}
        for c in special_cases(mode, n):
            assert ((c.a, c.b) if dataflow == "os" else (c.a, c.b, c.acc)) in cells, \
                (dtype, mode, c.name)


@pytest.mark.parametrize("rows, cols, dtype, dataflow", [
    (2, 2, "int8", "os"), (2, 2, "int8", "ws"), (2, 3, "bf16", "os"), (3, 2, "bf16", "ws"),
    (2, 2, "fp8", "ws")])
def test_the_special_plan_on_small_arrays(rows, cols, dtype, dataflow):
    """The directed plan through an array in amaranth.sim, every output bit-exact and in its
    cycle (the fused arrays run it on Verilator in the slow tier, and under the mutation test in
    BF16 and E5M2; the multi array is slow in amaranth.sim, its MAC is checked above)."""
    plan = special_plan(rows, cols, dtype, dataflow, seed=3)
    assert set(plan.modes) == set(get_datapath(dtype).modes)
    assert score(plan, run_plan(plan)) == []
    claimed = coverage.claims(rows, cols, dtype, dataflow, directed=("special",))
    assert coverage.claim_errors(coverage.count(plan), claimed, f"{dtype} {dataflow}") == []


def test_wrong_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="n must be 1, 2 or 4 MACs per step, not 3"):
        special_cases("e4m3", 3)
    with pytest.raises(ValueError, match="mode must be one of .*, not 'mxfp4'"):
        special_cases("mxfp4")
    with pytest.raises(ValueError, match="'e4m3' is not a mode of the bf16 datapath"):
        special_plan(2, 2, "bf16", "ws", ["e4m3"])
    with pytest.raises(ValueError, match="fmt must be one of .*, not 'fp16'"):
        values("fp16")
