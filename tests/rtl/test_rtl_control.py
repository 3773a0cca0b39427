"""The array's control checked on every issue pattern (issue 26 item 5): the OS drain and the WS
weight load/swap, on 2×2, 3×3, 2×3 and 3×2 arrays in amaranth.sim (every reachable control
window with every legal next symbol, tests/rtl/rtl_control_patterns.py), every output bit-exact
against the golden model and in the cycle diptych.sim.timing predicts; a 16×16 array in the
slow tier."""

import itertools

import pytest

from rtl_control_patterns import (OsIssue, WsIssue, covering_walk, os_pattern_plan,
                                  ws_pattern_plan)
from rtl_mutants import CONTROL_IN_MUTANTS, CONTROL_MUTANTS, MUTANTS, applied

from diptych.rtl.bench import earliest_plan, make_plan, score
from diptych.rtl.pysim import run_plan
from diptych.sim import timing

_SHAPES = ((2, 2), (3, 3), (2, 3), (3, 2))
_ISSUE = {"os": (OsIssue, os_pattern_plan), "ws": (WsIssue, ws_pattern_plan)}


def _errors(rows, cols, dataflow, seed=1):
    issue, plan_of = _ISSUE[dataflow]
    walk = covering_walk(issue(rows, cols))
    errors = []
    for n, seq in enumerate(walk.sequences):
        plan = plan_of(rows, cols, seq, seed=seed + n)
        errors += [f"sequence {n}: {e}" for e in score(plan, run_plan(plan))]
    return walk, errors


@pytest.mark.parametrize("dataflow", ("os", "ws"))
@pytest.mark.parametrize("rows, cols", _SHAPES)
def test_every_issue_pattern_is_bit_and_cycle_exact(rows, cols, dataflow):
    walk, errors = _errors(rows, cols, dataflow)
    assert walk.covered == walk.edges > 0
    assert errors == []


def test_the_walk_covers_every_window_and_transition():
    """Coverage is by construction; check it independently by replaying the sequences through
    the automaton and collecting the (window, symbol) pairs taken."""
    for cls in (OsIssue, WsIssue):
        issue = cls(3, 3)
        walk = covering_walk(issue)
        taken, windows = set(), set()
        for seq in walk.sequences:
            state, win = issue.init, (issue.symbols[0],) * issue.memory
            for sym in seq:
                windows.add((state, win))
                taken.add((state, win, sym))
                state = issue.step(state, sym)
                assert state is not None
                win = win[1:] + (sym,)
        assert len(taken) == walk.edges and len(windows) == walk.windows


def test_the_os_automaton_is_the_contracts_issue_rule():
    """Every OS symbol string up to 9 cycles on a 3×3 array: the automaton accepts it exactly
    when diptych.sim.timing.os_output_cycles accepts its tiles (so the walk enumerates all legal
    patterns, not a subset)."""
    issue = OsIssue(3, 3)
    for n in range(1, 10):
        for seq in itertools.product(issue.symbols, repeat=n):
            if seq[-1] != "L":
                continue
            state, ok = issue.init, True
            for sym in seq:
                state = issue.step(state, sym)
                if state is None:
                    ok = False
                    break
            tiles, cur = [], []
            for c, sym in enumerate(seq):
                if sym != "-":
                    cur.append(c)
                if sym == "L":
                    tiles.append(cur)
                    cur = []
            try:
                timing.os_output_cycles(3, 3, tiles)
                legal = True
            except ValueError:
                legal = False
            assert ok == legal, seq


@pytest.mark.parametrize("rows, cols", ((2, 2), (3, 3)))
def test_ws_walk_has_the_hard_cases(rows, cols):
    """The WS walk has what makes the control hard: a row presented during a load, a first row
    in the first cycle after its load (timing.ws_first_row) and a load starting the first cycle
    the swap wave allows (timing.ws_weight_load)."""
    issue = WsIssue(rows, cols)
    seq = max(covering_walk(issue).sequences, key=len)
    load = [s[0] for s in seq]
    starts = [c for c in range(len(seq)) if load[c] and (c == 0 or not load[c - 1])]
    firsts = [c for c in range(len(seq)) if seq[c][1] == "F"]
    assert any(ld and row == "r" for ld, row in seq)
    assert any(c + timing.ws_first_row(0, -1, rows) in firsts for c in starts)
    assert any(f + timing.ws_weight_load(0, rows, cols) in starts for f in firsts)


def _control_mutants():
    by_name = {m.name: m for m in MUTANTS}
    return [*CONTROL_MUTANTS, *(by_name[n] for n in CONTROL_IN_MUTANTS)]


@pytest.mark.parametrize("mutant", _control_mutants(), ids=lambda m: m.name)
def test_the_enumeration_catches_control_faults(mutant):
    rows, cols, _, dataflow = mutant.config
    with applied(mutant):
        _, errors = _errors(rows, cols, dataflow)
    assert errors, f"{mutant.name} ({mutant.fault}) passed every issue pattern"


def test_two_rows_cannot_show_the_whole_column_drain_fault():
    """Why the enumeration runs on 3×3 as well: with two rows the next tile's results are
    written in the very cycles the faulty extra shifts would move them, so every 2×2 pattern
    passes ``os-drain-shifts-whole-column``; three rows expose it (the test above)."""
    m = next(m for m in CONTROL_MUTANTS if m.name == "os-drain-shifts-whole-column")
    with applied(m):
        assert _errors(2, 2, "os")[1] == []


@pytest.mark.slow
@pytest.mark.parametrize("dataflow", ("os", "ws"))
def test_16x16_random_and_back_to_back(dataflow):
    """16×16: a random plan (bubbles, depths around R, back-to-back tiles) and tiles at the
    earliest cycles the contract allows, bit- and cycle-exact."""
    plans = [make_plan(16, 16, "int8", dataflow, seed=3, tiles=3),
             earliest_plan(16, 16, "int8", dataflow, [1, 16, 3, 17] if dataflow == "os"
                           else [1, 40, 2, 16])]
    for plan in plans:
        assert plan.expected
        assert score(plan, run_plan(plan)) == []
