"""The bench's directed ``special`` plan: every special-value step of :mod:`diptych.rtl.special`
in every mode of a datapath, laid out as back-to-back tiles of an array.

**WS** reaches every operand position, the accumulator included: the top-edge partial sum is
the step's accumulator. The steps of a mode are grouped by their B elements: a tile holds up
to C distinct B tuples (column j's W rows ``0 … n−1``; the deeper stationary rows hold the
neutral B, +1) and, as its rows, every step whose B tuple is one of them (A row: the step's A
elements, then the neutral A, −0, so the deeper products are −0 and change nothing); the
partial sums of a row are its step's accumulator in every column. Output (m, j) of the step's
own column is the step itself; the other columns are further combinations, checked all the same.

**OS** starts each tile from +0, so it reaches the A and B positions only: one-step tiles whose
diagonal cell (t, t) is step t's product(s) added to +0 (up to min(R, C) steps a tile; the other
rows and columns hold the neutral elements, the off-diagonal cells are further combinations).
In particular a tile of −0 products must come out +0: the accumulator restarts from +0.

Tiles follow each other at the earliest cycles the contract allows
(:func:`diptych.sim.timing.os_schedule` / :func:`~diptych.sim.timing.ws_schedule`); expected
bits come from the golden model under the datapath's rule, as for every plan
(:func:`diptych.rtl.bench.os_plan` / :func:`~diptych.rtl.bench.ws_plan`).
"""

from __future__ import annotations

import numpy as np

from ..sim import timing
from .array import check_config
from .bench import os_plan, ws_plan
from .datapath import get_datapath
from .special import neutral, special_cases

__all__ = ["special_plan", "special_tiles"]


def special_tiles(rows: int, cols: int, dtype: str, dataflow: str, mode: str) -> list:
    """The tiles of ``mode``'s special-value steps: OS ``[(A[R×n], B[n×C]), …]``, WS
    ``[(A[M×D], W[D×C], P[M×C]), …]`` (D the stationary depth), element arrays as
    :func:`~diptych.rtl.bench.os_plan` / :func:`~diptych.rtl.bench.ws_plan` take them."""
    check_config(rows, cols, dtype, dataflow)
    n = get_datapath(dtype).macs_per_cycle(mode)
    cases = special_cases(mode, n)
    na, nb = neutral(mode)
    tiles = []
    if dataflow == "os":
        pairs = list(dict.fromkeys((c.a, c.b) for c in cases))
        g = min(rows, cols)
        for i in range(0, len(pairs), g):
            a = np.full((rows, n), na, np.int64)
            b = np.full((n, cols), nb, np.int64)
            for t, (x, y) in enumerate(pairs[i:i + g]):
                a[t, :], b[:, t] = x, y
            tiles.append((a, b))
        return tiles
    depth = timing.ws_stationary_depth(rows, n)
    b_tuples = list(dict.fromkeys(c.b for c in cases))
    for i in range(0, len(b_tuples), cols):
        group = b_tuples[i:i + cols]
        steps = [c for c in cases if c.b in group]
        w = np.full((depth, cols), nb, np.int64)
        for j, y in enumerate(group):
            w[:n, j] = y
        a = np.full((len(steps), depth), na, np.int64)
        a[:, :n] = [c.a for c in steps]
        psum = np.array([[c.acc] * cols for c in steps], np.uint32)
        tiles.append((a, w, psum))
    return tiles


def special_plan(rows: int, cols: int, dtype: str, dataflow: str, modes=None, *,
                 seed: int = 1, bubble_data: str = "random"):
    """The directed special-value :class:`~diptych.rtl.plan.Plan` of ``modes`` (default or
    empty: every mode of the datapath; ValueError naming a mode it does not have), tiles back to back at the earliest legal cycles (module docstring);
    ``seed`` and ``bubble_data`` set what the idle cycles carry. The block-scaled ``mx``
    datapath's directed plan is :func:`diptych.rtl.mx_bench.mx_special_plan`."""
    check_config(rows, cols, dtype, dataflow)
    dp = get_datapath(dtype)
    if dtype == "fp4dot8":
        from .fp4_bench import fp4_special_plan
        return fp4_special_plan(rows, cols, modes or None, seed=seed, bubble_data=bubble_data)
    if dp.block_scaled and dataflow == "ws":
        from .mx_ws import mx_ws_special_plan
        return mx_ws_special_plan(rows, cols, modes or None, seed=seed, bubble_data=bubble_data,
                                  dtype=dtype)
    if dp.block_scaled:
        from .mx_bench import mx_special_plan
        return mx_special_plan(rows, cols, modes or None, seed=seed, bubble_data=bubble_data,
                               dtype=dtype)
    modes = tuple(modes or dp.modes)
    tiles, tile_modes = [], []
    for mode in modes:
        dp.macs_per_cycle(mode)
        for tile in special_tiles(rows, cols, dtype, dataflow, mode):
            tiles.append(tile)
            tile_modes.append(mode)
    if dataflow == "os":
        cycles = timing.os_schedule(rows, cols, [1] * len(tiles), start=1)
        return os_plan(rows, cols, dtype, tiles, cycles, tile_modes, seed=seed,
                       bubble_data=bubble_data)
    loads, row_cycles = timing.ws_schedule(rows, cols, [len(t[0]) for t in tiles], start=1)
    return ws_plan(rows, cols, dtype, tiles, loads, row_cycles, tile_modes, seed=seed,
                   bubble_data=bubble_data)
