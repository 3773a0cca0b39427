"""One contract, both halves: a perturbed sim/timing.py moves the engine's prediction and the
bench's expected cycles together (issue 12, item 4).

The engine compiles the recurrences of :mod:`diptych.sim.timing` at import, so a replaced
function reaches it only in a fresh process with ``NUMBA_DISABLE_JIT=1`` (the engine half alone
is tests/sim/test_timing_once.py); the bench calls the same module at plan time. Here one
process runs both on the same problem, at the FP8 rates of the fused multi-precision datapath
(2 MACs per PE per cycle: the engine with ``macs_per_pe_per_cycle.fp8 = 2``, the bench with the
``fused`` PE's ``e4m3`` mode) and of the dot4 dot-product PE (4: ``fp8 = 4`` against the
``dot4`` PE in ``e5m2xe4m3``): a GEMM block whose folds are drain-limited (OS: K/n steps < R)
or swap-limited (WS: M rows < 2R + C − 2), run back to back. That the unchanged RTL then fails
the perturbed plans is shown in test_rtl_bench.py (amaranth.sim) and test_rtl_verilator.py.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diptych.rtl import bench
from diptych.rtl.plan import score
from diptych.rtl.pysim import run_plan
from diptych.sim import timing as T

SIM_TESTS = Path(__file__).resolve().parents[1] / "sim"

R, C = 3, 2
#: (datapath, FP8 MACs per PE per cycle n, mode) of the PEs the engine's rate is checked on
PES = (("fused", 2, "e4m3"), ("dot4", 4, "e5m2xe4m3"))


def gemms(n: int) -> tuple:
    """(dataflow, GEMM m, k, n) of two folds of one block at ``n`` MACs per cycle: OS, two
    C-wide tiles of K = 2n (2 steps each, < R); WS, two W tiles of depth nR, M = 2 rows each."""
    return ("os", R, 2 * n, 2 * C), ("ws", 2, n * R, 2 * C)


_SCRIPT = """
import dataclasses, json, sys
sys.path.insert(0, {sim_tests!r})
import diptych.sim.timing as T
{patch}
from diptych.arch.chip import DtypeTable
from diptych.rtl import bench
from diptych.sim import engine as E
from simtest_helpers import one_array_run, small_chip
base = small_chip({R}, {C})
res = {{}}
for dtype, rate, mode, folds in {runs!r}:
    arr = dataclasses.replace(base.core.array, macs_per_pe_per_cycle=DtypeTable(
        int8=2.0, fp8=float(rate), bf16=1.0))
    chip = dataclasses.replace(base, core=dataclasses.replace(base.core, array=arr))
    for df, m, k, n in folds:
        out, *_ = one_array_run(chip, m, k, n, df, m, k, n, dtype="fp8")
        res[f"{{dtype}}_{{df}}_engine"] = int(out[E.O_CYCLES])
        sizes = [k, k] if df == "os" else [m, m]
        plan = bench.earliest_plan({R}, {C}, dtype, df, sizes, mode, seed=3)
        res[f"{{dtype}}_{{df}}_bench"] = max(plan.expected) + 1
print(json.dumps(res))
"""


def _run(patch: str = "") -> dict:
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    runs = [(dt, n, mode, gemms(n)) for dt, n, mode in PES]
    code = _SCRIPT.format(sim_tests=str(SIM_TESTS), patch=patch, R=R, C=C, runs=runs)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


#: stricter OS drain (the next tile's last step R + 2 after the previous one's) and a later WS
#: weight load (the swap wave waited for 2 cycles longer): both delay the second fold by 2
_PERTURB = ("_o = T.os_last_step\n"
            "T.os_last_step = lambda f, k, p, r: max(_o(f, k, p, r), p + r + 2)\n"
            "_w = T.ws_weight_load\n"
            "T.ws_weight_load = lambda p, r, c, wave=1: _w(p, r, c, wave) + 2\n")


def test_engine_and_bench_follow_one_perturbed_timeline():
    base = _run()
    # unperturbed: the engine, the bench's plan and the closed forms agree at each rate, and
    # the folds are at the limits the perturbation moves (drain: 2 steps < R; swap: 2 rows <
    # 2R + C − 2)
    for dt, _, _ in PES:
        assert base[f"{dt}_os_engine"] == base[f"{dt}_os_bench"] \
            == T.os_sequence_cycles(R, C, [2, 2]), (dt, base)
        assert base[f"{dt}_ws_engine"] == base[f"{dt}_ws_bench"] \
            == T.ws_sequence_cycles(R, C, [2, 2]), (dt, base)
    assert T.os_period(R, 2) == R and T.ws_period(R, C, 2) == 2 * R + C - 2
    moved = _run(_PERTURB)
    assert set(moved) == set(base) and len(base) == 4 * len(PES)
    for key in base:
        assert moved[key] == base[key] + 2, (key, base, moved)


def test_earliest_plan_passes_the_rtl_and_fails_it_when_the_contract_is_eager(monkeypatch):
    """The bench's back-to-back WS plan passes the RTL at exactly the contract's cycles; with
    the next weight load allowed one cycle before the swap wave has left the array, the plan
    moves earlier and the unchanged RTL fails it (INT8: the swap rule is the datapath's)."""
    plan = bench.earliest_plan(R, C, "int8", "ws", [2, 2, 5], seed=5)
    assert score(plan, run_plan(plan)) == []
    monkeypatch.setattr(T, "ws_weight_load", lambda p, r, c, wave=1: p + (r + c - 2) * wave - 1)
    eager = bench.earliest_plan(R, C, "int8", "ws", [2, 2, 5], seed=5)
    assert max(eager.expected) < max(plan.expected)
    assert score(eager, run_plan(eager)) != []


def test_an_os_drain_shorter_than_r_is_refused_by_the_bench(monkeypatch):
    """OS tiles closer than R last steps would put two tiles' rows on the output port in one
    cycle (the drain registers hold a tile for R cycles): the bench refuses such a contract
    rather than keep one of the two expected outputs."""
    bench.earliest_plan(R, C, "fused", "os", [4, 4], "e4m3")
    monkeypatch.setattr(T, "os_last_step", lambda f, k, p, r: max(f + k - 1, p + r - 1))
    with pytest.raises(ValueError, match="tile 1: the timing contract predicts an output in "
                                         "cycle 7, which already holds another output"):
        bench.earliest_plan(R, C, "fused", "os", [4, 4], "e4m3")


def test_earliest_plan_bad_input():
    with pytest.raises(ValueError, match=r"sizes must be a non-empty list of positive integers"):
        bench.earliest_plan(R, C, "int8", "os", [3, 0])
    with pytest.raises(ValueError, match="several modes"):
        bench.earliest_plan(R, C, "fused", "ws", [2])


@pytest.mark.parametrize("rate", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_engine_rate_scaling_agrees_with_the_contracts_rate_rules(rate):
    """The engine takes its rate as sim/array.py's (num, den) pair and its fold steps from
    timing.os_fold_steps; the bench takes them from timing.os_steps and ws_stationary_depth
    (the rate as a float): both roads must give the same steps and depth."""
    import dataclasses

    from diptych.arch import load_chip
    from diptych.arch.chip import DtypeTable
    from diptych.sim.array import array_rates

    chip = load_chip("tpu-v4")
    arr = dataclasses.replace(chip.core.array, rows=8, cols=4,
                              macs_per_pe_per_cycle=DtypeTable(fp8=rate, bf16=1.0))
    chip = dataclasses.replace(chip, core=dataclasses.replace(chip.core, array=arr))
    r = array_rates(chip, "fp8")
    assert r.stationary_rows == T.ws_stationary_depth(8, rate)
    for k in range(1, 40):
        assert T.os_fold_steps(k, r.os_num, r.os_den) == T.os_steps(k, rate)


def test_bench_plans_the_systolic_weight_install_only():
    """The RTL implements the default WS install path only (one weight row shifted in per
    cycle, the swap wave; core.array.weight_load_rows_per_cycle = 1, weight_swap = "wave"):
    the bench plans with timing's defaults (R load cycles per tile), its plans pass the RTL, and
    a schedule for a faster path (2 rows per cycle, global swap) is refused by the bench."""
    import numpy as np
    plan = bench.earliest_plan(R, C, "int8", "ws", [1, 1], seed=3)
    assert sum(1 for v in plan.inputs.values() if v.get("w_load")) == 2 * R
    assert max(plan.expected) + 1 == T.ws_sequence_cycles(R, C, [1, 1]) \
        > T.ws_sequence_cycles(R, C, [1, 1], 2, 0)
    assert score(plan, run_plan(plan)) == []
    loads, rows = T.ws_schedule(R, C, [1, 1], load_rows_per_cycle=2, wave=0)
    tiles = [(np.ones((1, R), np.int8), np.ones((R, C), np.int8), None)] * 2
    with pytest.raises(ValueError, match="before its weights are loaded"):
        bench.ws_plan(R, C, "int8", tiles, loads, rows)
