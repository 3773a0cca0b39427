"""The array timeline is stated once (sim/timing.py): perturb it and every prediction moves.

The engine and the mapper compile the functions of diptych.sim.timing (sim/jit.compile_pure);
with NUMBA_DISABLE_JIT=1 a function replaced in diptych.sim.timing before the engine is
imported is what the engine runs. These tests do that in a fresh process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diptych.sim import timing as T

HERE = Path(__file__).resolve().parent

_SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
import diptych.sim.timing as T
{patch}
from diptych.sim import engine as E
from diptych.sim import mapper as MP
from simtest_helpers import one_array_run, small_chip
chip = small_chip(4, 4, load_rows={p}, swap={swap!r})
res = {{}}
out, pb, rates, split = one_array_run(chip, 4, 5, 4, "os", 4, 5, 4)
res["os_engine"] = int(out[E.O_CYCLES])
res["os_contract"] = T.os_output_cycles(4, 4, [list(range(5))])[0][0] + 1
res["os_closed_form"] = MP.compute_cycles(chip, pb, MP.Blocks(4, 5, 4, 0), rates)
out, *_ = one_array_run(chip, 4, 5, 4, "os", 4, 5, 4, memory=True)
res["os_engine_dram"] = int(out[E.O_CYCLES])
out, pb, rates, split = one_array_run(chip, 3, 4, 8, "ws", 3, 4, 8)
res["ws_engine"] = int(out[E.O_CYCLES])
loads, rows = T.ws_schedule(4, 4, [3, 3], load_rows_per_cycle={p}, wave={wave})
res["ws_contract"] = T.ws_output_cycles(4, 4, loads, rows, {p}, {wave})[-1][-1] + 1
res["ws_closed_form"] = MP.compute_cycles(chip, pb, MP.Blocks(3, 4, 8, 0), rates)
# what the RTL bench predicts (its plan takes step counts from T.os_steps)
res["os_bench"] = T.os_isolated_cycles(4, 4, T.os_steps(5, 1))
res["ws_bench"] = T.ws_sequence_cycles(4, 4, [T.ws_fold_rows(3, 1, 1)] * 2, {p}, {wave})
print(json.dumps(res))
"""


def _run(patch: str, p: int = 1, swap: str = "wave") -> dict:
    """Run the script on a 4×4 chip whose WS weight install writes ``p`` rows per cycle with
    the given swap (default: the systolic shift-in and swap wave)."""
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    code = _SCRIPT.format(here=str(HERE), patch=patch, p=p, swap=swap,
                          wave=int(swap == "wave"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_engine_contract_and_closed_forms_follow_a_perturbed_timeline():
    base = _run("")
    # the unperturbed timeline: every prediction agrees with the contract's isolated figures
    assert base["os_engine"] == base["os_contract"] == base["os_closed_form"] \
        == T.os_isolated_cycles(4, 4, 5)
    assert base["ws_engine"] == base["ws_contract"] == base["ws_closed_form"] \
        == T.ws_sequence_cycles(4, 4, [3, 3])
    # outputs one cycle later (OS) and the next weight load two cycles later (WS)
    moved = _run("_o = T.os_row_output\n"
                 "T.os_row_output = lambda last, rows, cols, i: _o(last, rows, cols, i) + 1\n"
                 "_w = T.ws_weight_load\n"
                 "T.ws_weight_load = lambda first, rows, cols, wave=1: "
                 "_w(first, rows, cols, wave) + 2\n")
    for df, delta in (("os", 1), ("ws", 2)):
        for what in ("engine", "contract", "closed_form"):
            assert moved[f"{df}_{what}"] == base[f"{df}_{what}"] + delta, (df, what, moved)
    # (the DRAM model runs in pure Python too: a perturbed run with memory is no faster)
    assert base["os_engine_dram"] > base["os_engine"]
    assert moved["os_engine_dram"] >= base["os_engine_dram"]


def test_fold_step_counts_are_stated_once():
    """One more step per OS fold and one more streamed cycle per WS fold (sim/timing.py
    os_fold_steps, ws_fold_rows): the engine, the mapper's closed form and the bench's
    plan all move by exactly that."""
    base = _run("")
    assert base["os_bench"] == base["os_engine"] and base["ws_bench"] == base["ws_engine"]
    moved = _run("_f = T.os_fold_steps\n"
                 "T.os_fold_steps = lambda k, num, den: _f(k, num, den) + 1\n"
                 "_g = T.ws_fold_rows\n"
                 "T.ws_fold_rows = lambda m, num, den: _g(m, num, den) + 1\n")
    # OS: one 5-step tile becomes 6 steps; WS: two folds of 3 rows, period 2R + C - 2 = 10
    # hides the first fold's extra cycle, the last fold's shows
    for df in ("os", "ws"):
        for what in ("engine", "closed_form", "bench"):
            assert moved[f"{df}_{what}"] == base[f"{df}_{what}"] + 1, (df, what, moved)


def test_weight_install_path_is_stated_once():
    """A faster install path (2 rows per cycle, global swap): the engine, the contract and the
    mapper's closed form agree, and a one-cycle-longer install (timing.ws_install_cycles, the
    one statement) moves all three by exactly one cycle (here the first fold's first row; the
    period max(3 rows, 2 cycles) stays the rows')."""
    base = _run("", p=2, swap="global")
    assert base["ws_engine"] == base["ws_contract"] == base["ws_closed_form"] \
        == base["ws_bench"] == T.ws_sequence_cycles(4, 4, [3, 3], 2, 0)
    moved = _run("_i = T.ws_install_cycles\n"
                 "T.ws_install_cycles = lambda rows, p=1: _i(rows, p) + 1\n", p=2, swap="global")
    for what in ("engine", "contract", "closed_form", "bench"):
        assert moved[f"ws_{what}"] == base[f"ws_{what}"] + 1, (what, base, moved)


@pytest.mark.parametrize("R,C", [(1, 1), (4, 4), (8, 3), (16, 32)])
def test_derived_rules_are_compositions_of_the_recurrences(R, C):
    for k in range(1, 40):
        assert T.os_period(R, k) == T.os_last_step(101, k, 100, R) - 100 == max(k, R)
        assert T.ws_period(R, C, k) == T.ws_first_row(T.ws_weight_load(7, R, C), 7 + k - 1,
                                                      R) - 7 == max(k, 2 * R + C - 2)
        assert T.os_last_output(k, R, C) == T.os_row_output(k, R, C, 0) == k + 2 * R + C - 2


def test_timing_imports_no_numba():
    code = "import sys, diptych.sim.timing; print('numba' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "False", r.stderr
