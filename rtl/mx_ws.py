"""Weight-stationary plans of the block-scaled arrays (``mxdot4``, ``mxint8``): the block scales
travel with the stationary weights and with the streamed A rows.

A WS PE of these datapaths holds one 40-bit lane of its column: four K-consecutive weights and,
in bits 39:32, the E8M0 scale of the block they belong to; the A lane that meets it carries the
row's four elements and **their** block's scale (:class:`diptych.rtl.pe.WsPe` unchanged: every
step's lanes carry their scales, so the PE needs no block state). PE row ``i`` of a tile of
stationary depth ``D`` (≤ ``timing.ws_stationary_depth(R, 4)`` = 4R) holds W rows ``4i … 4i + 3``,
K-block ``4i // block`` of the tile: ``w_data[j]`` of its load cycle carries ``W_s[4i // block,
j]``, ``a_data[i]`` of row ``m`` carries ``A_s[m, 4i // block]``. The ``mx`` PE keeps an exact
block sum and is OS only.

**When**: :func:`diptych.sim.timing.ws_output_cycles` (plus ``BLOCK_SCALE_EXTRA_CYCLES``, 0),
the earliest cycles from ``ws_schedule``. **What**: the datapath's rule from the top-edge partial
sums (:func:`diptych.rtl.mx_bench.golden` with ``init_bits``), the K steps in ascending order as
the partial sum flows down the column. A K > D reduction is a chain of tiles whose partial sums
are the previous tile's outputs (the random plans make such chains).
"""

from __future__ import annotations

import numpy as np

from ..sim import timing
from .bench import _expect, _new_plan, _random_psum, _steps_with_bubbles, _ws_earliest
from .datapath import MODE_CODES, MXFP8_MODES, get_datapath
from .bench import _Regimes
from .mx_bench import (MX_BLOCK, SCALE_REGIMES, _check_dtype, _elements, _fp8_mode, _lane,
                       _scales, check_block, directed_cases, golden, mxint8_cases,
                       random_plan_modes)
from .plan import Plan, pack

__all__ = ["mx_ws_plan", "make_mx_ws_plan", "mx_ws_earliest_plan", "mx_ws_special_plan"]

_GROUP = 4


def mx_ws_plan(rows: int, cols: int, tiles, load_cycles, row_cycles, modes, *,
               block: int = MX_BLOCK, seed: int = 1, bubble_data: str = "random",
               dtype: str = "mxdot4") -> Plan:
    """A WS plan of a block-scaled array from explicit tiles ``[(A, A_s, W, W_s, P), …]``:
    element codes A[M×D], W[D×C] (D ≤ 4R), E8M0 codes A_s[M×nb], W_s[nb×C], ``nb =
    ceil(D / block)``, P[M×C] the top-edge partial sums (uint32 FP32 bits, or None: +0);
    ``load_cycles[t]`` the first of tile t's R load cycles, ``row_cycles[t]`` its rows' cycles
    (:func:`diptych.sim.timing.ws_output_cycles` refuses an illegal schedule). Module docstring."""
    _check_dtype(rows, cols, dtype, "ws")
    check_block(block)
    dp = get_datapath(dtype)
    for mo in modes:
        dp.macs_per_cycle(mo)
    if not len(modes) == len(tiles) == len(load_cycles) == len(row_cycles):
        raise ValueError(f"one mode, load cycle and row list per tile: {len(tiles)} tiles, "
                         f"{len(modes)} modes, {len(load_cycles)} loads, {len(row_cycles)} rows")
    plan = _new_plan(rows, cols, dtype, "ws", seed=seed, bubble_data=bubble_data,
                     n_tiles=len(tiles), modes=list(modes))
    extra = timing.BLOCK_SCALE_EXTRA_CYCLES
    plan.predicted = [[c + extra for c in tile]
                      for tile in timing.ws_output_cycles(rows, cols, load_cycles, row_cycles)]
    depth = timing.ws_stationary_depth(rows, _GROUP)
    lane = dp.lane_bits
    for t, ((a, sa, w, sw, psum), wl, cycles, mode) in enumerate(
            zip(tiles, load_cycles, row_cycles, modes)):
        a, w = np.asarray(a).astype(np.int64), np.asarray(w).astype(np.int64)
        sa, sw = np.asarray(sa).astype(np.int64), np.asarray(sw).astype(np.int64)
        m_rows = len(cycles)
        d = w.shape[0] if w.ndim == 2 else -1
        nb = -(-d // block) if d > 0 else 0
        psum = (np.zeros((m_rows, cols), np.uint32) if psum is None
                else np.asarray(psum).astype(np.uint32))
        if (a.shape != (m_rows, d) or w.shape != (d, cols) or not 1 <= d <= depth
                or sa.shape != (m_rows, nb) or sw.shape != (nb, cols)
                or psum.shape != (m_rows, cols)):
            raise ValueError(f"tile {t}: A must be {m_rows}×D, A_s {m_rows}×ceil(D/{block}), W "
                             f"D×{cols} (D ≤ {depth}), W_s ceil(D/{block})×{cols} and P "
                             f"{m_rows}×{cols}, not {a.shape}, {sa.shape}, {w.shape}, "
                             f"{sw.shape} and {psum.shape}")
        for x in (a, w, sa, sw):
            if x.size and (x.min() < 0 or x.max() > 0xFF):
                raise ValueError(f"tile {t}: codes are bytes 0 … 0xff")
        ap, sap, wp, swp = _padded(a, sa, w, sw, depth, block)
        blk = [_GROUP * i // block for i in range(rows)]     # PE row i's K-block
        for r in range(rows):
            i = rows - 1 - r                           # PE row i: W rows 4i … 4i + 3
            plan.inputs.setdefault(wl + r, {}).update({
                "w_load": 1,
                "w_data": pack([_lane(wp[_GROUP * i:_GROUP * (i + 1), j], swp[blk[i], j])
                                for j in range(cols)], lane)})
        for mm, c in enumerate(cycles):
            vals = {"in_valid": 1, "in_first": int(mm == 0),
                    "a_data": pack([_lane(ap[mm, _GROUP * i:_GROUP * (i + 1)], sap[mm, blk[i]])
                                    for i in range(rows)], lane),
                    "psum_data": pack(psum[mm, :], 32)}
            if dp.has_mode_port:
                vals["mode"] = MODE_CODES[mode]
            plan.inputs.setdefault(c, {}).update(vals)
        result = golden(dtype, mode, ap, sap, wp, swp, block=block, init_bits=psum)
        for mm, c in enumerate(plan.predicted[t]):
            _expect(plan, t, c, None, result[mm])
    plan.n_cycles = max(plan.expected) + rows + cols + 4
    return plan


def _padded(a, sa, w, sw, depth: int, block: int):
    """A tile zero-padded to the stationary ``depth``: the PE rows below D see +0 elements (+0
    products still turn a −0 sum into +0) in the tile's last block (its scales repeated), so the
    golden model computes the padded tile."""
    d, nb = a.shape[1], sa.shape[1]
    nbp = -(-depth // block)
    return (np.pad(a, ((0, 0), (0, depth - d))), np.pad(sa, ((0, 0), (0, nbp - nb)), mode="edge"),
            np.pad(w, ((0, depth - d), (0, 0))), np.pad(sw, ((0, nbp - nb), (0, 0)), mode="edge"))


def _tile_result(dtype, mode, a, sa, w, sw, psum, depth, block):
    """The outputs of one WS tile (what a chain's next tile takes as its partial sums)."""
    return golden(dtype, mode, *_padded(a, sa, w, sw, depth, block), block=block,
                  init_bits=psum)


def make_mx_ws_plan(rows: int, cols: int, *, seed: int = 1, tiles: int = 8, start: int = 1,
                    modes=None, block: int = MX_BLOCK, bubble_data: str = "random",
                    dtype: str = "mxdot4") -> Plan:
    """A random, reproducible WS plan of a block-scaled array: every mode in turn, then at
    random; row counts 1, R, R + C or random (tile 1 long and full of bubbles, the next load
    during it); half the tiles at the earliest legal cycles; stationary depths of 4R or less;
    the element regimes of :func:`diptych.rtl.mx_bench.make_mx_plan`, the scale regimes of
    :data:`~diptych.rtl.mx_bench.SCALE_REGIMES` in turn (NaN scales sprinkled); top-edge partial
    sums of :mod:`diptych.rtl.bench`'s FP32 kinds, and chains that continue a K > 4R reduction."""
    modes = random_plan_modes(rows, cols, dtype, "ws", block, tiles, modes)
    rng = np.random.default_rng(seed)
    R, C = rows, cols
    depth = timing.ws_stationary_depth(R, _GROUP)
    tile_modes = [modes[t] if t < len(modes) else str(rng.choice(modes)) for t in range(tiles)]
    regimes, scale_regs = _Regimes(), list(SCALE_REGIMES)
    data, loads, row_cycles, bubbles = [], [], [], 0
    prev, chain = None, None
    for t, mode in enumerate(tile_modes):
        regime = regimes(_fp8_mode(mode)) if mode in MXFP8_MODES else "uniform"
        d = depth if rng.random() < 0.6 else int(rng.integers(1, depth + 1))
        if chain is not None and chain[0] == mode and t != 1 and rng.random() < 0.6:
            m_rows, psum = chain[1], chain[2]          # the next K-chunk of the same rows
        else:
            m_rows = (2 * R + C + 2 if t == 1 else
                      int(rng.choice([1, R, R + C, int(rng.integers(1, 3 * R + 2))])))
            psum = _random_psum(rng, "e4m3", (m_rows, C), regime)
        a, w = _elements(rng, mode, m_rows, d, C, regime)
        nb = -(-d // block)
        sreg = scale_regs[t % len(scale_regs)]
        sa, sw = _scales(rng, sreg, (m_rows, nb)), _scales(rng, sreg, (nb, C))
        chain = (mode, m_rows, _tile_result(dtype, mode, a, sa, w, sw, psum, depth, block))
        wl, first = _ws_earliest(R, C, prev, m_rows, start)
        cycles = list(range(first, first + m_rows))
        if t == 1 or rng.random() >= 0.5:
            s1, s2 = int(rng.integers(0, 3)), int(rng.integers(0, 3))
            wl += s1
            cycles, bub = _steps_with_bubbles(rng, [c + s1 + s2 for c in cycles],
                                              0.5 if t == 1 else 0.25, inside=t == 1)
            bubbles += bub
        data.append((a, sa, w, sw, psum))
        loads.append(wl)
        row_cycles.append(cycles)
        prev = (cycles[0], cycles[-1])
    plan = mx_ws_plan(rows, cols, data, loads, row_cycles, tile_modes, block=block, seed=seed,
                      bubble_data=bubble_data, dtype=dtype)
    plan.bubbles = bubbles
    return plan


def mx_ws_earliest_plan(rows: int, cols: int, sizes, mode: str, *, seed: int = 1,
                        block: int = MX_BLOCK, dtype: str = "mxdot4") -> Plan:
    """Back-to-back WS tiles of ``sizes`` rows each at the earliest cycles
    (:func:`diptych.sim.timing.ws_schedule`), full stationary depth 4R, moderate elements,
    scales near 1, +0 partial sums: what the engine models for the folds of one GEMM block."""
    _check_dtype(rows, cols, dtype, "ws")
    get_datapath(dtype).macs_per_cycle(mode)
    sizes = list(sizes)
    if not sizes or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        raise ValueError(f"sizes must be a non-empty list of positive integers, not {sizes!r}")
    rng = np.random.default_rng(seed)
    depth = timing.ws_stationary_depth(rows, _GROUP)
    nb = -(-depth // block)
    loads, row_cycles = timing.ws_schedule(rows, cols, sizes)
    data = []
    for m in sizes:
        a, w = _elements(rng, mode, m, depth, cols, "moderate")
        data.append((a, _scales(rng, "near", (m, nb), nan_p=0), w,
                     _scales(rng, "near", (nb, cols), nan_p=0), None))
    return mx_ws_plan(rows, cols, data, loads, row_cycles, [mode] * len(sizes), block=block,
                      seed=seed, dtype=dtype)


def mx_ws_special_plan(rows: int, cols: int, modes=None, *, seed: int = 1,
                       bubble_data: str = "random", dtype: str = "mxdot4") -> Plan:
    """The directed WS plan: the block cases of :func:`~diptych.rtl.mx_bench.directed_cases`
    and :func:`~diptych.rtl.mx_bench.mxint8_cases` of the given modes (default all), up to
    ``C`` a tile group: case ``c`` of a group is row ``c`` of A (its elements and scale) against
    column ``c`` of W (its elements and scale), with its **accumulator** as that row's partial
    sum in column ``c`` (WS applies them: −0, subnormal, Inf and NaN accumulators), the other
    outputs what the golden model makes of the other pairings. A case longer than the stationary
    depth 4R is a chain of tiles, each continuing from the previous tile's outputs. Tiles back
    to back at the earliest legal cycles."""
    _check_dtype(rows, cols, dtype, "ws")
    dp = get_datapath(dtype)
    modes = tuple(dp.modes if modes is None else modes)
    for mo in modes:
        dp.macs_per_cycle(mo)
    cases = [c for c in directed_cases() + mxint8_cases() if c[0] in modes]
    depth = timing.ws_stationary_depth(rows, _GROUP)
    data, tile_modes = [], []
    for mode in modes:
        mine = [c for c in cases if c[0] == mode]
        for g in range(0, len(mine), cols):
            group = mine[g:g + cols]
            k = max(len(c[2]) for c in group)
            k = -(-k // _GROUP) * _GROUP
            a = np.zeros((len(group), k), np.int64)
            w = np.zeros((k, cols), np.int64)
            sa = np.full((len(group), 1), 127)
            sw = np.full((1, cols), 127)
            psum = np.zeros((len(group), cols), np.uint32)
            for c, (_, acc, ca, cb, s_a, s_b) in enumerate(group):
                a[c, :len(ca)], w[:len(cb), c] = ca, cb
                sa[c, 0], sw[0, c], psum[c, c] = s_a, s_b, acc
            for k0 in range(0, k, depth):             # a chain of tiles along K
                d = min(depth, k - k0)
                data.append((a[:, k0:k0 + d], sa, w[k0:k0 + d], sw, psum))
                tile_modes.append(mode)
                psum = _tile_result(dtype, mode, a[:, k0:k0 + d], sa, w[k0:k0 + d], sw, psum,
                                    depth, MX_BLOCK)
    loads, row_cycles = timing.ws_schedule(rows, cols, [t[0].shape[0] for t in data], start=1)
    return mx_ws_plan(rows, cols, data, loads, row_cycles, tile_modes, seed=seed,
                      bubble_data=bubble_data, dtype=dtype)
