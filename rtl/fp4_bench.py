"""Plans for the FP4 array (``fp4dot8``): MXFP4 and NVFP4 tiles at eight products a step.

Its lanes carry eight E2M1 codes and the block's scale (:mod:`diptych.rtl.fp4dot`), so its
plans are made here; they are ordinary :class:`~diptych.rtl.plan.Plan` objects that the
amaranth.sim runner, the cocotb bench and the scoreboard take unchanged.

**When** comes from :mod:`diptych.sim.timing`, as for every datapath: a tile of depth K takes
``os_steps(K, 8)`` steps, its outputs appear at ``os_output_cycles`` plus
``BLOCK_SCALE_EXTRA_CYCLES`` (0), the earliest cycles from ``os_schedule``. **What** comes from
:func:`diptych.rtl.fp4dot_ref.fp4_matmul_bits` (the PE's part: NVFP4's tensor scales are outside
the array). A tile's K is cut into blocks of ``block`` elements (default the mode's: 32 for
MXFP4, OCP MX v1.0; 16 for NVFP4; any multiple of 8 up to 32); every step carries its block's
scales; a short last group is padded with +0.
"""

from __future__ import annotations

import numpy as np

from ..sim import timing
from .array import check_config
from .bench import _expect, _new_plan, _os_earliest, _steps_with_bubbles
from .datapath import FP4_MODES, MODE_CODES, get_datapath
from .fp4dot_ref import FP4_GROUP, fp4_matmul_bits
from .mx_bench import SCALE_REGIMES, tile_operands
from .plan import Plan, pack

__all__ = ["check_fp4_block", "fp4_os_plan", "make_fp4_plan", "fp4_earliest_plan",
           "fp4_special_plan", "NV_SCALE_REGIMES"]

_MAX_BLOCK = 32
#: E4M3 scale-code regimes of the NVFP4 tiles: near 1, spread over every finite code,
#: subnormal and small (dots near FP32's smallest normal only with a small accumulator: the
#: window's truncation) and the top (448).
NV_SCALE_REGIMES = {"near": (0x30, 0x40), "spread": (0x00, 0x7E), "low": (0x00, 0x10),
                    "high": (0x70, 0x7E)}


def check_fp4_block(block) -> int:
    """``block`` if it is a multiple of 8 (the step) from 8 to 32; else ValueError."""
    if (isinstance(block, bool) or not isinstance(block, int) or block < FP4_GROUP
            or block % FP4_GROUP or block > _MAX_BLOCK):
        raise ValueError(f"block must be a multiple of {FP4_GROUP} from {FP4_GROUP} to "
                         f"{_MAX_BLOCK} (the fp4dot8 PE's step; MXFP4 32, NVFP4 16), not "
                         f"{block!r}")
    return block


def _block(mode: str, block) -> int:
    return FP4_MODES[mode][2] if block is None else check_fp4_block(block)


def _check(rows: int, cols: int, modes) -> tuple:
    check_config(rows, cols, "fp4dot8", "os")
    dp = get_datapath("fp4dot8")
    modes = tuple(dp.modes if modes is None else modes)
    for mo in modes:
        dp.macs_per_cycle(mo)
    return modes


def fp4_os_plan(rows: int, cols: int, tiles, step_cycles, modes, *, block: int | None = None,
                seed: int = 1, bubble_data: str = "random") -> Plan:
    """An OS plan of the ``fp4dot8`` array from explicit tiles ``[(A, A_s, B, B_s), …]``: E2M1
    codes A[R×K], B[K×C] and scale codes of the tile's mode A_s[R×nb], B_s[nb×C], ``nb =
    ceil(K / block)`` (``block``: the mode's unless given); ``step_cycles[t]`` the cycles of
    tile t's ``os_steps(K, 8)`` steps. See the module docstring."""
    _check(rows, cols, modes)
    if len(modes) != len(tiles):
        raise ValueError(f"one mode per tile: {len(tiles)} tiles, {len(modes)} modes")
    plan = _new_plan(rows, cols, "fp4dot8", "os", seed=seed, bubble_data=bubble_data,
                     n_tiles=len(tiles), modes=list(modes))
    extra = timing.BLOCK_SCALE_EXTRA_CYCLES
    plan.predicted = [[c + extra for c in tile]
                      for tile in timing.os_output_cycles(rows, cols, step_cycles)]
    lane = get_datapath("fp4dot8").lane_bits
    for t, ((a, sa, b, sb), cycles, mode) in enumerate(zip(tiles, step_cycles, modes)):
        blk = _block(mode, block)
        a, sa, b, sb, k = tile_operands(t, (a, sa, b, sb), rows, cols, blk)
        if min(a.min(), b.min()) < 0 or max(a.max(), b.max()) > 0xF:
            raise ValueError(f"tile {t}: E2M1 codes are 0 … 0xf")
        if min(sa.min(), sb.min()) < 0 or max(sa.max(), sb.max()) > 0xFF:
            raise ValueError(f"tile {t}: scale codes are bytes 0 … 0xff")
        steps = timing.os_steps(k, FP4_GROUP)
        if len(cycles) != steps:
            raise ValueError(f"tile {t}: K={k} at {FP4_GROUP} MACs per cycle takes {steps} "
                             f"steps, but {len(cycles)} step cycles were given")
        pad = steps * FP4_GROUP - k
        ap, bp = np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, pad), (0, 0)))
        for s, c in enumerate(cycles):
            if c in plan.inputs:
                raise ValueError(f"tile {t}: two steps presented in cycle {c}")
            g, j = slice(s * FP4_GROUP, (s + 1) * FP4_GROUP), s * FP4_GROUP // blk
            plan.inputs[c] = {
                "in_valid": 1, "in_last": int(s == steps - 1), "mode": MODE_CODES[mode],
                "a_data": pack([pack(ap[i, g], 4) | int(sa[i, j]) << 32 for i in range(rows)],
                               lane),
                "b_data": pack([pack(bp[g, i], 4) | int(sb[j, i]) << 32 for i in range(cols)],
                               lane),
            }
        result = fp4_matmul_bits(a, sa, b, sb, mode, blk)
        for i, c in enumerate(plan.predicted[t]):
            _expect(plan, t, c, i, result[i])
    plan.n_cycles = max(plan.expected) + rows + cols + 4
    return plan


def _elements(rng, m: int, k: int, n: int):
    """E2M1 codes A[m×k], B[k×n]: every code, a quarter of them ±0."""
    out = []
    for shape in ((m, k), (k, n)):
        codes = rng.integers(0, 16, shape)
        out.append(np.where(rng.random(shape) < 0.25, codes & 8, codes))
    return out[0], out[1]


def _scales(rng, mode: str, regime: str, shape, nan_p: float = 0.02) -> np.ndarray:
    """Scale codes of ``mode`` in ``regime``; NaN now and then (E8M0 0xFF, E4M3 0x7F)."""
    lo, hi = (SCALE_REGIMES if mode == "mxfp4" else NV_SCALE_REGIMES)[regime]
    s = rng.integers(lo, hi + 1, shape)
    return np.where(rng.random(shape) < nan_p, 0xFF if mode == "mxfp4" else 0x7F, s)


def make_fp4_plan(rows: int, cols: int, *, seed: int = 1, tiles: int = 8, start: int = 1,
                  modes=None, block: int | None = None, bubble_data: str = "random") -> Plan:
    """A random, reproducible plan of the ``fp4dot8`` OS array: MXFP4 and NVFP4 in turn, then
    at random; depths around R steps with K not a multiple of 8 or of the block; half the tiles
    at the earliest legal cycles, half with slack and bubbles (tile 1 long and full of them);
    every E2M1 code; the scale regimes (near 1, spread, FP32's bottom, its top) in turn, with
    NaN scales now and then."""
    modes = _check(rows, cols, modes)
    if block is not None:
        check_fp4_block(block)
    if isinstance(tiles, bool) or not isinstance(tiles, int) or tiles < 1:
        raise ValueError(f"tiles must be a positive integer, not {tiles!r}")
    rng = np.random.default_rng(seed)
    tile_modes = [modes[t] if t < len(modes) else str(rng.choice(modes)) for t in range(tiles)]
    R, regs = rows, list(SCALE_REGIMES)
    data, step_cycles, bubbles, prev_last = [], [], 0, None
    for t, mode in enumerate(tile_modes):
        nbs = _block(mode, block) // FP4_GROUP
        steps = int(rng.choice([1, max(1, R - 1), R, R + 1, 2 * R + 3, nbs + 1, 2 * nbs + 1,
                                int(rng.integers(1, 3 * R + 2))]))
        steps = max(2 * R + 3, nbs + 2) if t == 1 else steps
        k = max(1, steps * FP4_GROUP - int(rng.integers(0, FP4_GROUP)))
        steps = timing.os_steps(k, FP4_GROUP)
        cycles = _os_earliest(R, cols, prev_last, steps, start)
        if t == 1 or rng.random() >= 0.5:
            slack = int(rng.integers(0, 3))
            cycles, bub = _steps_with_bubbles(rng, [c + slack for c in cycles],
                                              0.5 if t == 1 else 0.25, inside=t == 1)
            bubbles += bub
        a, b = _elements(rng, R, k, cols)
        nb = -(-k // _block(mode, block))
        reg = regs[t % len(regs)]
        data.append((a, _scales(rng, mode, reg, (R, nb)), b, _scales(rng, mode, reg, (nb, cols))))
        step_cycles.append(cycles)
        prev_last = cycles[-1]
    plan = fp4_os_plan(rows, cols, data, step_cycles, tile_modes, block=block, seed=seed,
                       bubble_data=bubble_data)
    plan.bubbles = bubbles
    return plan


def fp4_earliest_plan(rows: int, cols: int, sizes, mode: str = "mxfp4", *, seed: int = 1,
                      block: int | None = None) -> Plan:
    """Back-to-back tiles of depths ``sizes`` at the earliest cycles the contract allows
    (:func:`diptych.sim.timing.os_schedule` of ``os_steps(K, 8)`` steps): what the engine models
    for the folds of one GEMM block. Scales near 1."""
    _check(rows, cols, (mode,))
    sizes = list(sizes)
    if not sizes or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        raise ValueError(f"sizes must be a non-empty list of positive integers, not {sizes!r}")
    rng = np.random.default_rng(seed)
    cycles = timing.os_schedule(rows, cols, [timing.os_steps(k, FP4_GROUP) for k in sizes])
    data = []
    for k in sizes:
        a, b = _elements(rng, rows, k, cols)
        nb = -(-k // _block(mode, block))
        data.append((a, _scales(rng, mode, "near", (rows, nb), 0), b,
                     _scales(rng, mode, "near", (nb, cols), 0)))
    return fp4_os_plan(rows, cols, data, cycles, [mode] * len(sizes), block=block, seed=seed)


def directed_steps() -> list[tuple]:
    """One-step cases ``(mode, a[8], b[8], sa, sb)`` at the edges of the rule, from +0: products
    at FP32's bottom (kept at 2^-126, flushed below) and top (saturated), every E2M1 code
    against the largest and the smallest, exact cancellation, −0 products, zero and negative
    E4M3 scales, E4M3 subnormal scales and 448, NaN scales of both kinds."""
    one, six, half = 0x2, 0x7, 0x1
    z = [0] * 8
    codes = list(range(8))
    return [
        ("mxfp4", [one] + z[1:], [one] + z[1:], 1, 127), ("mxfp4", [half] + z[1:],
                                                           [one] + z[1:], 1, 127),
        ("mxfp4", [six] * 8, [six] * 8, 254, 254), ("mxfp4", [six] * 8, [six] * 8, 0, 0),
        ("mxfp4", codes, [six] * 8, 127, 127), ("mxfp4", [c | 8 for c in codes], [half] * 8,
                                                 127, 127),
        ("mxfp4", [one, one | 8] * 4, [six] * 8, 127, 127), ("mxfp4", [8] * 8, z, 127, 127),
        ("mxfp4", [one] * 8, [one] * 8, 0xFF, 127), ("mxfp4", [one] * 8, [one] * 8, 127, 0xFF),
        ("nvfp4", codes, [six] * 8, 0x7E, 0x7E), ("nvfp4", [c | 8 for c in codes], [six] * 8,
                                                   0x01, 0x07),
        ("nvfp4", [one] * 8, [one] * 8, 0x00, 0x38), ("nvfp4", [8] * 8, [one] * 8, 0x80, 0x38),
        ("nvfp4", [one] * 8, [six] * 8, 0xBC, 0x3A), ("nvfp4", [one] * 8, [one] * 8, 0x7F, 0x38),
        ("nvfp4", [one] * 8, [one] * 8, 0x38, 0xFF), ("nvfp4", [six] * 8, [six | 8] * 8, 0x3B,
                                                      0x45),
    ]


def fp4_special_plan(rows: int, cols: int, modes=None, *, seed: int = 1,
                     bubble_data: str = "random") -> Plan:
    """The directed plan: the steps of :func:`directed_steps` (of ``modes``, default both),
    ``min(R, C)`` a tile on its diagonal (PE(i, i) gets case i's A in row i and its B in column
    i, each one step, scales in the lanes; the other PEs meet other cases' rows and columns,
    the golden computes them all), tiles back to back at the earliest legal cycles."""
    modes = _check(rows, cols, modes)
    d = min(rows, cols)
    data, tile_modes = [], []
    for mode in modes:
        mine = [c for c in directed_steps() if c[0] == mode]
        for g in range(0, len(mine), d):
            a, b = np.zeros((rows, 8), np.int64), np.zeros((8, cols), np.int64)
            one = 127 if mode == "mxfp4" else 0x38
            sa, sb = np.full((rows, 1), one), np.full((1, cols), one)
            for i, (_, ca, cb, s_a, s_b) in enumerate(mine[g:g + d]):
                a[i], b[:, i], sa[i, 0], sb[0, i] = ca, cb, s_a, s_b
            data.append((a, sa, b, sb))
            tile_modes.append(mode)
    cycles = timing.os_schedule(rows, cols, [1] * len(data), start=1)
    return fp4_os_plan(rows, cols, data, cycles, tile_modes, seed=seed, bubble_data=bubble_data)
