"""Every issue pattern of the array's control, in one stimulus (issue 26 item 5).

The array's control state (the valid/last/first flags travelling through the PEs and the skew
registers, the OS drain counters and the drain-chain enables, the WS load/swap enables and
output de-skew) is a function of the last ``M`` cycles of *control symbols* presented at the
ports, where ``M`` is the longest a flag lives in the array: OS ``2R + C − 2`` cycles (a last
step to its top row leaving, :func:`diptych.sim.timing.os_last_output`), WS ``R + C − 1``
(a row to its output, :func:`diptych.sim.timing.ws_row_output`). A control symbol is what the
producer does in a cycle: OS ``-`` (bubble), ``s`` (a step), ``L`` (a tile's last step); WS a
pair (``w_load``, row) with row ``-``, ``r`` or ``F`` (a tile's first row).

An *issue automaton* (:class:`OsIssue`, :class:`WsIssue`) states the contract's issue rules
(:mod:`diptych.sim.timing`): which symbol may follow which history. :func:`covering_walk`
enumerates every reachable *window* (the automaton's state and the last ``M`` symbols) and every
legal next symbol from each, and builds one legal symbol sequence that takes every such
transition at least once: every reachable control state of the RTL, with every legal input
from it. :func:`os_pattern_plan` / :func:`ws_pattern_plan` turn a sequence into a bench
:class:`~diptych.rtl.plan.Plan` (random INT8 operands, random top-edge partial sums, random data
on every idle port) whose expected outputs are the golden model's bits in the cycles
:mod:`diptych.sim.timing` predicts, which the scoreboard checks cycle by cycle.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from diptych.rtl import bench
from diptych.sim import timing

__all__ = ["OsIssue", "WsIssue", "Walk", "covering_walk", "os_pattern_plan", "ws_pattern_plan"]


class OsIssue:
    """OS issue rules: one step per cycle (``s``/``L``) or a bubble (``-``); a tile's last step
    ``L`` at least R cycles after the previous one (:func:`~diptych.sim.timing.os_last_step`).
    State: cycles since the last ``L``, saturating at R."""

    symbols = ("-", "s", "L")

    def __init__(self, rows: int, cols: int):
        self.rows, self.cols = rows, cols
        self.memory = timing.os_last_output(0, rows, cols)       # 2R + C − 2
        self.init = rows

    def step(self, since: int, sym: str):
        """The state after ``sym``, or None if the contract forbids it."""
        if sym == "L":
            return 1 if since >= timing.os_last_step(0, 1, 0, self.rows) else None
        return min(since + 1, self.rows)


class WsIssue:
    """WS issue rules: a load is R consecutive ``w_load`` cycles (bottom row first) and starts
    once the previous tile's swap wave has left (:func:`~diptych.sim.timing.ws_weight_load`) and
    its weights were taken; a first row ``F`` after its load has finished
    (:func:`~diptych.sim.timing.ws_first_row`); other rows ``r`` only within a tile.
    State: (load cycles done, 0 when none is under way; a loaded tile waits; a tile is open;
    cycles since the last first row, saturating at R + C − 2)."""

    symbols = tuple((load, row) for load in (0, 1) for row in ("-", "r", "F"))

    def __init__(self, rows: int, cols: int):
        self.rows, self.cols = rows, cols
        self.memory = timing.ws_row_output(0, rows, cols)         # R + C − 1
        self.gap = timing.ws_weight_load(0, rows, cols)           # R + C − 2
        self.init = (0, False, False, self.gap)

    def step(self, state, sym):
        pos, fresh, in_tile, since = state
        load, row = sym
        R = self.rows
        if pos and not load:
            return None                               # the R load cycles are consecutive
        if load and not pos and (fresh or since < self.gap):
            return None                               # a load waits for the swap wave
        npos = pos + 1 if load else 0
        nfresh = fresh
        if npos == R:
            npos, nfresh = 0, True
        if row == "F":
            if not fresh or pos or load:
                return None                           # the weights are not (all) there yet
            nfresh, in_tile = False, True
        elif row == "r" and not in_tile:
            return None
        nsince = 1 if row == "F" else min(since + 1, self.gap)
        return (npos, nfresh, in_tile, nsince)


@dataclass(frozen=True)
class Walk:
    """Legal symbol sequences, each from the power-on state, and their coverage: ``windows``
    the reachable windows (control states), ``edges`` the reachable (window, symbol)
    transitions, ``covered`` how many the sequences take (all, by construction). A second
    sequence is needed only for transitions that leave the power-on state (a window no later
    history returns to, e.g. WS before its first tile)."""
    sequences: tuple[tuple, ...]
    windows: int
    edges: int
    covered: int


def covering_walk(issue) -> Walk:
    """Sequences from the power-on state (bubbles before it) that together take every reachable
    transition of ``issue``'s window graph: greedy walks that take an untaken symbol where they
    can and otherwise the shortest path (breadth first) to a window that has one; a new walk
    starts from power-on when the untaken ones are out of reach."""
    m = issue.memory
    idle = issue.symbols[0]
    start = (issue.init, (idle,) * m)

    def succ(node):
        state, win = node
        for sym in issue.symbols:
            nxt = issue.step(state, sym)
            if nxt is not None:
                yield sym, (nxt, win[1:] + (sym,))

    # every reachable window and its legal symbols
    graph = {}
    todo = deque([start])
    while todo:
        node = todo.popleft()
        if node in graph:
            continue
        graph[node] = dict(succ(node))
        todo.extend(n for n in graph[node].values() if n not in graph)
    edges = sum(len(v) for v in graph.values())
    untaken = {node: set(out) for node, out in graph.items()}
    seqs, covered = [], 0
    while covered < edges:
        seq, node = [], start
        while True:
            path = _path_to_untaken(graph, untaken, node)
            if path is None:
                break
            for sym in path:
                if sym in untaken[node]:
                    untaken[node].discard(sym)
                    covered += 1
                seq.append(sym)
                node = graph[node][sym]
        seqs.append(tuple(seq))
    return Walk(tuple(seqs), len(graph), edges, covered)


def _path_to_untaken(graph, untaken, node):
    """Symbols of a shortest path from ``node`` to a window with an untaken symbol, and that
    symbol; None when every transition is taken."""
    prev = {node: None}
    todo = deque([node])
    while todo:
        n = todo.popleft()
        if untaken[n]:
            path = [min(untaken[n], key=lambda s: str(s))]
            while prev[n] is not None:
                p, sym = prev[n]
                path.append(sym)
                n = p
            return path[::-1]
        for sym, nxt in graph[n].items():
            if nxt not in prev:
                prev[nxt] = (n, sym)
                todo.append(nxt)
    return None


def _int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def os_pattern_plan(rows: int, cols: int, symbols, *, seed: int = 1, start: int = 2):
    """An INT8 OS plan presenting ``symbols`` (of :class:`OsIssue`) from cycle ``start``; steps
    after the last ``L`` are dropped (a tile is only scored when it closes)."""
    rng = np.random.default_rng(seed)
    tiles, cycles, cur = [], [], []
    for c, sym in enumerate(symbols):
        if sym in ("s", "L"):
            cur.append(start + c)
        if sym == "L":
            cycles.append(cur)
            tiles.append((_int8(rng, (rows, len(cur))), _int8(rng, (len(cur), cols))))
            cur = []
    return bench.os_plan(rows, cols, "int8", tiles, cycles, seed=seed)


def ws_pattern_plan(rows: int, cols: int, symbols, *, seed: int = 1, start: int = 2):
    """An INT8 WS plan presenting ``symbols`` (of :class:`WsIssue`) from cycle ``start``, each
    tile with random weights and random int32 top-edge partial sums; a load no first row
    takes is dropped."""
    rng = np.random.default_rng(seed)
    loads, rows_at, load_start, run = [], [], None, 0
    for c, (load, row) in enumerate(symbols):
        if load:
            load_start = start + c if run == 0 else load_start
            run = (run + 1) % rows
            if run == 0:
                loads.append(load_start)
        if row == "F":
            rows_at.append([start + c])
        elif row == "r":
            rows_at[-1].append(start + c)
    loads = loads[:len(rows_at)]
    tiles = [(_int8(rng, (len(rc), rows)), _int8(rng, (rows, cols)),
              rng.integers(0, 2**32, (len(rc), cols), dtype=np.uint64).astype(np.uint32))
             for rc in rows_at]
    return bench.ws_plan(rows, cols, "int8", tiles, loads, rows_at, seed=seed)
