"""Fast tier: the FP4 dot-product PE (``fp4dot8``: eight E2M1 products a step, MXFP4 E8M0 or
NVFP4 E4M3 block scales) — its golden rule against the exact Fraction oracle within the rule's
bound, the unit in amaranth.sim against the golden bit for bit, OS arrays on random and directed
plans at the contract's cycles, the engine and the bench timing a block alike, bad input.
(Verilator: ``diptych rtl test --rows 2 --cols 2 --dtype fp4dot8 --seeds 3``, docs/rtl.md.)"""

from fractions import Fraction

import numpy as np
import pytest

import rtl_fp4_bench as bench
import rtl_fraction_ref as oracle
from diptych.rtl.array import SystolicArray, check_config
from diptych.rtl.datapath import get_datapath
from diptych.rtl.formats import get_block_format, quantize
from diptych.rtl.fp4_bench import (check_fp4_block, fp4_earliest_plan, fp4_os_plan,
                                   fp4_special_plan, make_fp4_plan)
from diptych.rtl.fp4dot import Fp4Dot8
from diptych.rtl.fp4dot_ref import (FP4_FRAC_BITS, fp4_matmul_bits, fp4_step_bits,
                                    nvfp4_matmul_bits)
from diptych.rtl.pe import Mac
from diptych.rtl.plan import score
from diptych.rtl.pysim import run_plan
from diptych.sim import timing
from test_rtl_dot import _rz

_SCALE = {"mxfp4": "e8m0", "nvfp4": "e4m3"}


# ---- the golden rule against the exact sum ---------------------------------------------------

def bound_violation(mode, a, b, sa, sb, acc, got, frac_bits=FP4_FRAC_BITS):
    """None if ``got`` is what the rule's statement allows (specials exactly; otherwise within
    [rz(E − u), rz(E + u)], E = acc + X_A·X_B·Σ aᵢbᵢ exact, u = 2^(emax − F), emax the larger
    leading-bit exponent of the accumulator and the scaled step sum), else a message. Values
    from the Fraction oracle's decoders, independent of the golden."""
    xa, xb = oracle.decode_scale(_SCALE[mode], sa), oracle.decode_scale(_SCALE[mode], sb)
    d = oracle.decode32(acc)
    if d[0] == "nan" or xa[0] == "nan" or xb[0] == "nan":
        want = 0x7FC00000
    elif d[0] == "inf":
        want = acc
    else:
        want = None
    if want is not None:
        return None if got == want else f"special {mode} {a} {b} {sa:#x} {sb:#x} {acc:#x}"
    x = (-1) ** xa[1] * xa[2] * (-1) ** xb[1] * xb[2]
    step = sum((-1) ** (p[1] ^ q[1]) * p[2] * q[2] for p, q in
               ((oracle.decode_mini("e2m1", i), oracle.decode_mini("e2m1", j)) for i, j in
                zip(a, b))) * x
    acc_v = (-1) ** d[1] * d[2]
    terms = [v for v in (acc_v, step) if v]
    exact = sum(terms, Fraction(0))
    if not terms:
        lo = hi = Fraction(0)
    else:
        u = Fraction(2) ** (max(oracle._floor_log2(abs(v)) for v in terms) - frac_bits)
        lo, hi = _rz(exact - u), _rz(exact + u)
    r = oracle.decode32(got)
    v = (-1) ** r[1] * r[2]
    if r[0] == "num" and lo <= v <= hi:
        return None
    return (f"{mode} a={list(a)} b={list(b)} s=({sa:#x}, {sb:#x}) acc={acc:#x}: {float(v)!r} "
            f"not in [{float(lo)!r}, {float(hi)!r}]")


def test_golden_within_its_bound_of_the_exact_oracle():
    """Every directed step and 1,500 random ones (every E2M1 code, scale codes uniform over all
    256 incl. NaN and negative E4M3, or near 1; accumulators any bits or near the step) within
    the rule's one-unit truncation bound of the exact value; specials exactly."""
    bad = []
    for mode, a, b, sa, sb, acc in bench.cases(seed=21, n=1500):
        got = fp4_step_bits(acc, a, b, mode, sa, sb)
        bad += [m for m in [bound_violation(mode, a, b, sa, sb, acc, got)] if m]
    assert not bad, bad[:5]


def test_the_bound_rejects_a_narrower_window():
    """The bound is tight enough to fail a rule that keeps 8 fraction bits instead of 26."""
    bad = [c for c in bench.cases(seed=22, n=300)
           if bound_violation(*c, fp4_step_bits(c[5], *c[1:3], c[0], *c[3:5], frac_bits=8))]
    assert len(bad) > 10


def test_a_zero_accumulator_gets_the_scaled_step_rounded_toward_zero():
    """From +0 the step is exact before one rounding toward zero: MXFP4 within FP32's normal
    range gives exactly X_A·X_B·Σ when that fits 24 bits (it always does: |Σ| ≤ 288)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        a, b = rng.integers(0, 16, 8), rng.integers(0, 16, 8)
        sa, sb = (int(x) for x in rng.integers(100, 155, 2))
        got = oracle.decode32(fp4_step_bits(0, a, b, "mxfp4", sa, sb))
        dot = sum((-1) ** (p[1] ^ q[1]) * p[2] * q[2] for p, q in (
            (oracle.decode_mini("e2m1", int(i)), oracle.decode_mini("e2m1", int(j)))
            for i, j in zip(a, b)))
        assert (-1) ** got[1] * got[2] == dot * Fraction(2) ** (sa + sb - 254)


def test_nvfp4_tensor_scales_applied_outside_as_the_oracle_does():
    """NVFP4 from FP32 data: formats.quantize (E2M1 codes, E4M3 block scales, FP32 tensor
    scales), the PE's golden, then alpha = fp32(ts_A · ts_B) applied by the oracle's FP32
    multiply; and the result within a few units of the exact dequantised dot."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((2, 48)), rng.standard_normal((3, 48)) * 50
    ta, tb = quantize(x, "nvfp4"), quantize(w, get_block_format("nvfp4"))
    a, b = np.asarray(ta.elements), np.asarray(tb.elements).T
    sa, sb = np.asarray(ta.scales), np.asarray(tb.scales).T
    got = nvfp4_matmul_bits(a, sa, b, sb, ta.tensor_scale, tb.tensor_scale)
    pe = fp4_matmul_bits(a, sa, b, sb, "nvfp4")
    alpha = oracle.encode32(0, Fraction(ta.tensor_scale) * Fraction(tb.tensor_scale))
    for i in range(2):
        for j in range(3):
            assert got[i, j] == oracle.fp32_mul(int(pe[i, j]), alpha)
            exact = Fraction(0)
            for k in range(48):
                ea = oracle.decode_mini("e2m1", int(a[i, k]))
                eb = oracle.decode_mini("e2m1", int(b[k, j]))
                s = (oracle.decode_mini("e4m3", int(sa[i, k // 16]))[2]
                     * oracle.decode_mini("e4m3", int(sb[k // 16, j]))[2])
                exact += (-1) ** (ea[1] ^ eb[1]) * ea[2] * eb[2] * s
            exact *= Fraction(ta.tensor_scale) * Fraction(tb.tensor_scale)
            v = oracle.decode32(int(got[i, j]))
            assert abs((-1) ** v[1] * v[2] - exact) <= abs(exact) * Fraction(1, 2 ** 20)


# ---- the unit and the arrays against the golden ---------------------------------------------

def test_unit_against_golden():
    """Fp4Dot8 in amaranth.sim, every directed step and 300 random ones, both modes."""
    bad = bench.mismatches(Fp4Dot8(), bench.cases(seed=5, n=300))
    assert not bad, bad[:5]


@pytest.mark.parametrize("seed", [1, 2])
def test_os_array_random_plan(seed):
    """A random plan on an OS 2×1 array (MXFP4 and NVFP4, back to back and with bubbles, K not
    a multiple of 8 or of the block, tiles of several blocks, scale regimes near 1, spread,
    FP32's bottom and top, NaN scales), bit for bit at the contract's cycles."""
    plan = make_fp4_plan(2, 1, seed=seed, tiles=7)
    assert {"mxfp4", "nvfp4"} <= set(plan.modes)
    assert score(plan, run_plan(plan)) == []


def test_os_array_directed_plan():
    """The directed steps (FP32's bottom and top, every E2M1 code against the largest and
    smallest, cancellation, −0 products, zero/negative/subnormal/largest E4M3 scales, NaN
    scales) as one-step tiles on an OS 1×2 array."""
    plan = fp4_special_plan(1, 2)
    assert score(plan, run_plan(plan)) == []


def test_tiles_take_ceil_k_over_8_steps_and_latency_is_stated_once(monkeypatch):
    """Two back-to-back tiles (K = 20: 3 steps; K = 16: 2) at the earliest cycles: the outputs
    where os_output_cycles of ceil(K/8) steps puts them; one extra block-scale cycle stated in
    sim/timing.py moves every expected output by one and the RTL then fails."""
    plan = fp4_earliest_plan(1, 2, [20, 16], "nvfp4")
    cyc = timing.os_schedule(1, 2, [3, 2])
    assert sorted(plan.expected) == sorted(c for t in timing.os_output_cycles(1, 2, cyc)
                                           for c in t)
    obs = run_plan(plan)
    assert score(plan, obs) == []
    monkeypatch.setattr(timing, "BLOCK_SCALE_EXTRA_CYCLES", 1)
    late = fp4_earliest_plan(1, 2, [20, 16], "nvfp4")
    assert sorted(late.expected) == [c + 1 for c in sorted(plan.expected)]
    assert score(late, obs) != []


_ENGINE = """
import dataclasses, json, sys
sys.path.insert(0, {sim_tests!r})
from diptych.arch.chip import DtypeTable
from diptych.rtl.fp4_bench import fp4_earliest_plan
from diptych.sim import engine as E
from simtest_helpers import one_array_run, small_chip
base = small_chip(3, 2)
arr = dataclasses.replace(base.core.array, block_scale="pe",
                          macs_per_pe_per_cycle=DtypeTable(bf16=1.0, mxfp4=8.0, nvfp4=8.0))
chip = dataclasses.replace(base, core=dataclasses.replace(base.core, array=arr))
res = {{}}
for dt in ("mxfp4", "nvfp4"):
    out, *_ = one_array_run(chip, 3, 16, 4, "os", 3, 16, 4, dtype=dt)
    res["engine " + dt] = int(out[E.O_CYCLES])
    res["bench " + dt] = max(fp4_earliest_plan(3, 2, [16, 16], dt).expected) + 1
print(json.dumps(res))
"""


def test_engine_and_bench_time_an_fp4_block_alike():
    """The engine (``block_scale = "pe"``, ``macs_per_pe_per_cycle`` mxfp4 = nvfp4 = 8) and the
    bench's back-to-back plans give the same cycles for one OS GEMM block of two drain-limited
    folds (K = 16: 2 steps < R = 3): os_sequence_cycles(3, 2, [2, 2]), as
    test_engine_and_bench_time_an_mxfp8_block_alike for mxfp8 (a fresh process without
    Numba's JIT)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    sim_tests = str(Path(__file__).resolve().parents[1] / "sim")
    r = subprocess.run([sys.executable, "-c", _ENGINE.format(sim_tests=sim_tests)],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, NUMBA_DISABLE_JIT="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    want = timing.os_sequence_cycles(3, 2, [2, 2]) + timing.BLOCK_SCALE_EXTRA_CYCLES
    assert res == {f"{w} {d}": want for d in ("mxfp4", "nvfp4") for w in ("engine", "bench")}


@pytest.mark.parametrize("call, message", [
    (lambda: check_config(2, 2, "fp4dot8", "ws"),
     "the fp4dot8 datapath is output-stationary only"),
    (lambda: check_fp4_block(12), "block must be a multiple of 8 from 8 to 32"),
    (lambda: check_fp4_block(64), "not 64"),
    (lambda: check_fp4_block(4), "not 4"),
    (lambda: make_fp4_plan(2, 2, block=24 + 1), "not 25"),
    (lambda: fp4_special_plan(2, 2, ["mxfp8_e4m3"]),
     "'mxfp8_e4m3' is not a block-scaled format of the fp4dot8 datapath"),
    (lambda: get_datapath("mxdot4").macs_per_cycle("nvfp4"), "fp4dot8: mxfp4, nvfp4"),
    (lambda: fp4_step_bits(0, [0], [0], "mxfp8", 127, 127),
     "mode must be one of mxfp4, nvfp4 (the fp4dot8 datapath), not 'mxfp8'"),
    (lambda: fp4_matmul_bits(np.zeros((1, 8)), np.zeros((1, 1)), np.zeros((8, 1)),
                             np.zeros((1, 1)), "nvfp4", block=12), "not 12"),
    (lambda: fp4_matmul_bits(np.zeros((1, 40)), np.zeros((1, 1)), np.zeros((40, 1)),
                             np.zeros((1, 1))), "scales must be [M, 2] and [2, N]"),
    (lambda: fp4_os_plan(1, 1, [(np.full((1, 8), 16), np.zeros((1, 1)), np.zeros((8, 1)),
                                 np.zeros((1, 1)))], [[1]], ["mxfp4"]), "E2M1 codes are 0"),
    (lambda: Mac("fp4dot8"), "the fp4dot8 datapath's MAC is diptych.rtl.fp4dot.Fp4Dot8"),
    (lambda: SystolicArray(2, 2, "fp4dot8", "ws"), "output-stationary only"),
])
def test_bad_input_names_the_value(call, message):
    with pytest.raises(ValueError) as exc:
        call()
    assert message in str(exc.value)
