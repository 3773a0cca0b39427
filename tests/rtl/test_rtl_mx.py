"""The block-scaled PEs: ``mx`` (diptych.rtl.mx: exact block sums) and ``mxdot4``
(diptych.rtl.dot.MxDot4Fp8: the dot4 rule with the scales on the product exponents). Their
goldens against the exact oracle (mx here; mxdot4's bound in test_rtl_dot.py), the mx step unit
and both OS arrays against their goldens bit for bit at the contract's cycles, bad input.

Cost (fast tier): the mx unit on the directed block cases (the unit's 72-bit block datapath is
slow in amaranth.sim), one random plan on each array, the directed plan on the mxdot4 array, an
isolated tile, the latency constant perturbed; the directed plans run on Verilator (slow tier,
``STANDARD_CONFIGS``: mxdot4 OS 2×2; mx by hand, docs/rtl.md)."""

import numpy as np
import pytest

import rtl_fraction_ref as oracle
import rtl_mx_bench as mb
from diptych.rtl.array import SystolicArray, check_config
from diptych.rtl.datapath import MX_MODES, MXFP8_MODES, get_datapath
from diptych.rtl.formats import mx_matmul_bits
from diptych.rtl.mx_bench import (check_block, make_mx_plan, mx_earliest_plan, mx_os_plan,
                                  mx_special_plan)
from diptych.rtl.pe import Mac, OsPe, WsPe
from diptych.rtl.plan import score
from diptych.rtl.pysim import run_plan
from diptych.sim import timing


def _oracle_matmul(a, sa, b, sb, fa, fb):
    """C[i, j] from the exact Fraction oracle's block dot (OCP MX blocks of 32)."""
    out = np.zeros((a.shape[0], b.shape[1]), np.uint32)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            out[i, j] = oracle.block_dot(f"mxfp8_{fa}", a[i], sa[i], f"mxfp8_{fb}", b[:, j],
                                         sb[:, j])
    return out


@pytest.mark.parametrize("mode", MXFP8_MODES)
def test_mx_matmul_golden_against_the_exact_oracle(mode):
    """mx_matmul_bits (the array's golden: padding, transposition, scale layout) against the
    Fraction oracle's block dot, K = 70 (two full blocks and a short one), random codes with
    NaN/Inf elements, scales near 1 and at the extremes (overflow, flushes), NaN scales."""
    fa, fb = MX_MODES[mode]
    rng = np.random.default_rng(41)
    for trial in range(3):
        a = rng.integers(0, 256, (2, 70))
        b = rng.integers(0, 256, (70, 3))
        if trial:                               # mostly finite: few NaN/Inf codes
            a, b = a & 0xBF, b & 0xBF
        lo, hi = ((120, 135), (0, 256), (50, 70))[trial]
        sa, sb = rng.integers(lo, hi, (2, 3)), rng.integers(lo, hi, (3, 3))
        got = mx_matmul_bits(a, sa, b, sb, fa, fb)
        assert np.array_equal(got, _oracle_matmul(a, sa, b, sb, fa, fb)), (mode, trial)


def test_directed_cases_reach_every_class_of_the_closing_path():
    """The directed block cases (unit test and the array's directed plan) include every class
    the exact value can put the closing path in, classified from the exact value alone."""
    seen = set().union(*(mb.corners(c) for c in mb.directed_cases()))
    assert seen >= {"zero", "flush", "grid-flush", "grid-carry", "tie", "overflow", "normal"}
    nonfinite = [c for c in mb.directed_cases() if not mb.corners(c)]
    assert len(nonfinite) >= 6                   # NaN/Inf elements, Inf × 0, NaN scales


def test_mx_unit_on_directed_and_random_blocks():
    """MxDot stepped as the PE steps it (block register and flags carried, scales presented in
    the closing step only, random bits in the scale fields before it) against the golden: the
    directed cases (2^-126 boundary both ways, overflow, ties, zeros, NaN/Inf, accumulators)
    and random blocks of 1 … 32 elements in every mode."""
    cases = [c for c in mb.directed_cases() if c[0] in MXFP8_MODES] + mb.random_cases(5, 2)
    assert mb.mismatches(cases) == []


@pytest.mark.parametrize("dtype", ["mx", "mxdot4"])
def test_block_scaled_os_array_random_plan(dtype):
    """A random plan on an OS 2×1 array (every mode: MXFP8, and MXFP6/MXFP4 on mxdot4; back to
    back and with bubbles
    carrying random data, K not a multiple of 4 or of the block, multi-block tiles, the scale
    regimes): every output bit-exact at the cycle sim/timing.py predicts."""
    plan = make_mx_plan(2, 1, seed=2, tiles=7, dtype=dtype)
    assert set(plan.modes) == set(get_datapath(dtype).modes)
    assert max(_steps_per_tile(plan)) > 32 // 4                 # some tile spans two blocks
    assert score(plan, run_plan(plan)) == []


def test_mxdot4_array_directed_plan_and_rules_differ():
    """The directed block cases on an OS 1×2 mxdot4 array (MXFP8, MXFP6 and MXFP4), bit for bit;
    on the MXFP8 cases the exact mx rule's results differ (the two goldens differ there)."""
    plan = mx_special_plan(1, 2, dtype="mxdot4")
    obs = run_plan(plan)
    assert score(plan, obs) == []
    assert {"mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"} <= set(plan.modes)
    plan = mx_special_plan(1, 2, MXFP8_MODES, dtype="mxdot4")
    exact = mx_special_plan(1, 2, dtype="mx")
    assert sum(plan.expected[c] != exact.expected[c] for c in plan.expected) > 10


def _steps_per_tile(plan):
    """The number of steps of each tile (from the plan's inputs)."""
    tiles, n = [], 0
    for c in sorted(plan.inputs):
        v = plan.inputs[c]
        n += v.get("in_valid", 0)
        if v.get("in_valid") and v["in_last"]:
            tiles.append(n)
            n = 0
    return tiles


def test_mx_isolated_tile_cycles_and_bits():
    """One isolated K = 38 tile on the mx OS 3×1 (10 steps, two blocks, the last short): its
    rows appear bottom first at os_isolated_cycles(R, C, 10) + BLOCK_SCALE_EXTRA_CYCLES, equal
    to the exact oracle computed straight from the codes."""
    R, C, K = 3, 1, 38
    rng = np.random.default_rng(9)
    a, b = rng.integers(0, 256, (R, K)) & 0xBF, rng.integers(0, 256, (K, C)) & 0xBF
    sa, sb = rng.integers(118, 136, (R, 2)), rng.integers(118, 136, (2, C))
    steps = timing.os_steps(K, 4)
    plan = mx_os_plan(R, C, [(a, sa, b, sb)], [list(range(steps))], ["mxfp8_e5m2xe4m3"])
    obs = run_plan(plan)
    assert score(plan, obs) == []
    assert obs[-1][0] + 1 == (timing.os_isolated_cycles(R, C, steps)
                              + timing.BLOCK_SCALE_EXTRA_CYCLES)
    assert [row for _, row, _ in obs] == [2, 1, 0]
    want = _oracle_matmul(a, sa, b, sb, "e5m2", "e4m3")
    assert [tuple(w) for _, _, w in obs] == [tuple(want[i]) for i in (2, 1, 0)]


def test_mx_block_scale_latency_is_stated_once(monkeypatch):
    """The bench takes the block-scale path's latency from sim/timing.py: with one extra cycle
    stated there every expected output moves by one and the (single-cycle) RTL fails."""
    plan = mx_earliest_plan(1, 2, [8, 8], dtype="mxdot4")
    obs = run_plan(plan)
    assert score(plan, obs) == []
    monkeypatch.setattr(timing, "BLOCK_SCALE_EXTRA_CYCLES", 1)
    late = mx_earliest_plan(1, 2, [8, 8], dtype="mxdot4")
    assert sorted(late.expected) == [c + 1 for c in sorted(plan.expected)]
    assert score(late, obs) != []


_ENGINE = """
import dataclasses, json, sys
sys.path.insert(0, {sim_tests!r})
from diptych.arch.chip import DtypeTable
from diptych.rtl.mx_bench import mx_earliest_plan
from diptych.rtl.mx_ws import mx_ws_earliest_plan
from diptych.sim import engine as E
from simtest_helpers import one_array_run, small_chip
base = small_chip(3, 2)
arr = dataclasses.replace(base.core.array, block_scale="pe",
                          macs_per_pe_per_cycle=DtypeTable(bf16=1.0, mxfp8=4.0, mxint8=4.0))
chip = dataclasses.replace(base, core=dataclasses.replace(base.core, array=arr))
out, *_ = one_array_run(chip, 3, 8, 4, "os", 3, 8, 4, dtype="mxfp8")
res = {{"engine": int(out[E.O_CYCLES])}}
for dt in ("mx", "mxdot4"):
    res[dt] = max(mx_earliest_plan(3, 2, [8, 8], dtype=dt).expected) + 1
out, *_ = one_array_run(chip, 3, 8, 4, "os", 3, 8, 4, dtype="mxint8")
res["engine_mxint8"] = int(out[E.O_CYCLES])
res["mxint8"] = max(mx_earliest_plan(3, 2, [8, 8], "mxint8", dtype="mxint8").expected) + 1
ws = {{}}
for fmt, dt, mode in (("mxfp8", "mxdot4", "mxfp8_e4m3"), ("mxint8", "mxint8", "mxint8")):
    out, *_ = one_array_run(chip, 2, 12, 4, "ws", 2, 12, 4, dtype=fmt)
    ws["engine_" + fmt] = int(out[E.O_CYCLES])
    ws[dt] = max(mx_ws_earliest_plan(3, 2, [2, 2], mode, dtype=dt).expected) + 1
res["ws"] = ws
print(json.dumps(res))
"""


def test_engine_and_bench_time_an_mxfp8_block_alike():
    """The engine (``block_scale = "pe"``, ``macs_per_pe_per_cycle.mxfp8 = mxint8 = 4``, no
    extra time) and the bench's back-to-back plans for the block-scaled PEs
    (``BLOCK_SCALE_EXTRA_CYCLES`` added) give the same cycles for one OS GEMM block of two
    drain-limited folds (K = 8: 2 steps < R = 3): os_sequence_cycles(3, 2, [2, 2]) (mx, mxdot4,
    mxint8); and for one WS block of two swap-limited folds (stationary depth 4R = 12, M = 2
    rows each; the scales in the stationary and streamed lanes, diptych.rtl.mx_ws):
    ws_sequence_cycles(3, 2, [2, 2]) (mxdot4, mxint8). A latency stated in sim/timing.py that
    the engine did not apply would fail here. (A fresh process without Numba's JIT, as
    test_rtl_contract.py.)"""
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
    ws = timing.ws_sequence_cycles(3, 2, [2, 2]) + timing.BLOCK_SCALE_EXTRA_CYCLES
    assert res == {"engine": want, "mx": want, "mxdot4": want, "engine_mxint8": want,
                   "mxint8": want, "ws": {"engine_mxfp8": ws, "mxdot4": ws,
                                          "engine_mxint8": ws, "mxint8": ws}}


@pytest.mark.parametrize("call, message", [
    (lambda: check_config(2, 2, "mx", "ws"),
     "the mx datapath is output-stationary only (each block's exact sum stays in its PE), not "
     "dataflow 'ws'"),
    (lambda: check_block(48), "block must be a multiple of 4 from 4 to 32"),
    (lambda: check_block(6), "not 6"),
    (lambda: check_block(0), "not 0"),
    (lambda: make_mx_plan(2, 2, block=64), "not 64"),
    (lambda: mx_special_plan(2, 2, ["e4m3"]), "'e4m3' is not a mode of the mx datapath"),
    (lambda: get_datapath("mx").macs_per_cycle("nvfp4"),
     "'nvfp4' is not a block-scaled format of the mx datapath"),
    (lambda: get_datapath("dot4").macs_per_cycle("mxfp8_e4m3"),
     "the block-scaled PEs are the mx datapath"),
    (lambda: get_datapath("mxdot4").macs_per_cycle("nvfp4"),
     "'nvfp4' is not a block-scaled format of the mxdot4 datapath"),
    (lambda: OsPe("mx"), "the mx datapath's PE is diptych.rtl.mx.MxOsPe"),
    (lambda: WsPe("mx"), "the mx datapath's PE is diptych.rtl.mx.MxOsPe"),
    (lambda: Mac("mx"), "the mx datapath's MAC is diptych.rtl.mx.MxDot"),
    (lambda: SystolicArray(2, 2, "mx", "ws"), "output-stationary only"),
    (lambda: mx_os_plan(2, 2, [(np.zeros((2, 8)), np.zeros((2, 2)), np.zeros((8, 2)),
                                np.zeros((1, 2)))], [[0, 1]], ["mxfp8_e4m3"]),
     "tile 0: A must be 2×K, A_s 2×ceil(K/32)"),
    (lambda: mx_matmul_bits(np.zeros((1, 4)), np.zeros((1, 2)), np.zeros((4, 1)),
                            np.zeros((1, 1))), "scales must be [M, 1] and [1, N]"),
])
def test_bad_input_names_the_value(call, message):
    with pytest.raises(ValueError) as exc:
        call()
    assert message in str(exc.value)
