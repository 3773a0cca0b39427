"""OS plans for the block-scaled arrays (``mx``, ``mxdot4``, ``mxint8``): MX tiles with E8M0 block
scales (their WS plans: :mod:`diptych.rtl.mx_ws`).

Their lanes carry four FP8 elements and a scale, and the ``mx`` array one more input,
``in_block_last`` (:mod:`diptych.rtl.mx`), so their plans are made here; they are ordinary
:class:`~diptych.rtl.plan.Plan` objects (``block_port`` set for ``mx``) that the amaranth.sim
runner, the cocotb bench and the scoreboard take unchanged.

**When** comes from :mod:`diptych.sim.timing`, as for every datapath: a tile of depth K takes
``os_steps(K, 4)`` steps, its outputs appear at ``os_output_cycles`` plus
``BLOCK_SCALE_EXTRA_CYCLES`` (0), the earliest cycles from ``os_schedule``. **What** comes from
the golden model of the datapath's rule: :func:`diptych.rtl.formats.mx_matmul_bits` (``mx``) or
:func:`diptych.rtl.dot_ref.mx_dot_matmul_bits` (``mxdot4``) or
:func:`~diptych.rtl.dot_ref.mxint8_matmul_bits` (``mxint8``; :func:`golden`). A tile's K is
cut into blocks of ``block`` elements (32: OCP MX; any multiple of the 4-element step up to
:data:`~diptych.rtl.mx.MAX_BLOCK`). ``mx``: the step that ends a block has ``in_block_last`` and
the block's scales in bits 39:32 of its lanes, every other step carries **random bits** in the
scale fields (the PE must read scales only when it closes a block), and a short last block is
closed by the tile's last step (its missing elements are +0 for the golden model). ``mxdot4``
and ``mxint8``: every step carries its block's scales.
"""

from __future__ import annotations

import numpy as np

from ..sim import timing
from .array import check_config
from .bench import _new_plan, _operands, _os_earliest, _steps_with_bubbles, _Regimes, _expect
from .datapath import MODE_CODES, MX_MODES, MXFP8_MODES, get_datapath
from .minifloat import FORMATS
from .dot_ref import mx_dot_matmul_bits, mxint8_matmul_bits
from .formats import mx_matmul_bits
from .plan import Plan, pack

__all__ = ["MX_BLOCK", "check_block", "tile_operands", "mx_os_plan", "make_mx_plan",
           "mx_earliest_plan", "mx_special_plan", "directed_cases", "random_cases", "SCALE_REGIMES", "mxint8_cases",
           "golden", "random_plan_modes"]

#: The MX block (OCP MX v1.0 §5.2).
MX_BLOCK = 32
_GROUP = 4                       # elements per step (diptych.rtl.mx.MX_GROUP)
_MAX_BLOCK = 32                  # diptych.rtl.mx.MAX_BLOCK (kept import-light here)
#: Scale regimes of the random plans: E8M0 codes near 1, spread, low (block dots near FP32's
#: smallest normal: flushes and the subnormal-grid carry) and high (dots near FP32's top).
SCALE_REGIMES = {"near": (124, 131), "spread": (96, 160), "low": (52, 68), "high": (184, 197)}


def check_block(block) -> int:
    """``block`` if it is a positive multiple of 4 (the step) up to 32; else ValueError."""
    if (isinstance(block, bool) or not isinstance(block, int) or block < _GROUP
            or block % _GROUP or block > _MAX_BLOCK):
        raise ValueError(f"block must be a multiple of {_GROUP} from {_GROUP} to {_MAX_BLOCK} "
                         f"(the PEs' step and the mx PE's block register), not {block!r}")
    return block


def _fp8_mode(mode: str) -> str:
    """The FP8 mode of an MXFP8 mode's elements (mxfp8_e4m3xe5m2 → e4m3xe5m2)."""
    return mode.removeprefix("mxfp8_")


def _lane(codes, scale: int) -> int:
    return pack(codes, 8) | (int(scale) << (8 * _GROUP))


def _check_dtype(rows: int, cols: int, dtype: str, dataflow: str = "os") -> None:
    check_config(rows, cols, dtype, dataflow)
    if not get_datapath(dtype).block_scaled:
        raise ValueError(f"block-scaled plans are for the mx, mxdot4 and mxint8 datapaths, not "
                         f"{dtype!r}")


def golden(dtype: str, mode: str, a, sa, b, sb, *, block: int, init_bits=None) -> np.ndarray:
    """``init + A·B`` by the datapath's rule: :func:`~diptych.rtl.formats.mx_matmul_bits`
    (``mx``; no ``init``), :func:`~diptych.rtl.dot_ref.mx_dot_matmul_bits` (``mxdot4``) or
    :func:`~diptych.rtl.dot_ref.mxint8_matmul_bits` (``mxint8``)."""
    dp = get_datapath(dtype)
    if dp.rule == "mxint8":
        return mxint8_matmul_bits(a, sa, b, sb, block=block, init_bits=init_bits)
    if dp.block_port:
        return mx_matmul_bits(a, sa, b, sb, *MX_MODES[mode], block=block)
    return mx_dot_matmul_bits(a, sa, b, sb, *MX_MODES[mode], block=block, init_bits=init_bits)


def mx_os_plan(rows: int, cols: int, tiles, step_cycles, modes, *, block: int = MX_BLOCK,
               seed: int = 1, bubble_data: str = "random", dtype: str = "mx") -> Plan:
    """An OS plan of the ``mx`` (or ``mxdot4``) array from explicit tiles ``[(A, A_s, B, B_s), …]``: element
    codes A[R×K], B[K×C] (uint8 FP8 bit patterns of the tile's mode) and E8M0 scale codes
    A_s[R×nb], B_s[nb×C], ``nb = ceil(K / block)``; ``step_cycles[t]`` the cycles of tile t's
    ``os_steps(K, 4)`` steps (:func:`diptych.sim.timing.os_output_cycles` refuses an illegal
    schedule). See the module docstring."""
    _check_dtype(rows, cols, dtype)
    check_block(block)
    dp = get_datapath(dtype)
    for mo in modes:
        dp.macs_per_cycle(mo)
    if len(modes) != len(tiles):
        raise ValueError(f"one mode per tile: {len(tiles)} tiles, {len(modes)} modes")
    plan = _new_plan(rows, cols, dtype, "os", seed=seed, bubble_data=bubble_data,
                     n_tiles=len(tiles), modes=list(modes))
    extra = timing.BLOCK_SCALE_EXTRA_CYCLES
    plan.predicted = [[c + extra for c in tile]
                      for tile in timing.os_output_cycles(rows, cols, step_cycles)]
    rnd = np.random.default_rng(seed + 991)
    for t, ((a, sa, b, sb), cycles, mode) in enumerate(zip(tiles, step_cycles, modes)):
        a, sa, b, sb, k = tile_operands(t, (a, sa, b, sb), rows, cols, block)
        for x in (a, b, sa, sb):
            if x.min() < 0 or x.max() > 0xFF:
                raise ValueError(f"tile {t}: codes are bytes 0 … 0xff")
        steps = timing.os_steps(k, _GROUP)
        if len(cycles) != steps:
            raise ValueError(f"tile {t}: K={k} at {_GROUP} MACs per cycle takes {steps} steps, "
                             f"but {len(cycles)} step cycles were given")
        ap = np.pad(a, ((0, 0), (0, steps * _GROUP - k)))
        bp = np.pad(b, ((0, steps * _GROUP - k), (0, 0)))
        for s, c in enumerate(cycles):
            if c in plan.inputs:
                raise ValueError(f"tile {t}: two steps presented in cycle {c}")
            close = (s + 1) * _GROUP % block == 0 or s == steps - 1
            blk = s * _GROUP // block
            shown = close or not dp.block_port          # mxdot4: scales on every step
            scl_a = sa[:, blk] if shown else rnd.integers(0, 256, rows)
            scl_b = sb[blk, :] if shown else rnd.integers(0, 256, cols)
            lane = dp.lane_bits
            plan.inputs[c] = {
                "in_valid": 1, "in_last": int(s == steps - 1),
                "a_data": pack([_lane(ap[i, s * _GROUP:(s + 1) * _GROUP], scl_a[i])
                                for i in range(rows)], lane),
                "b_data": pack([_lane(bp[s * _GROUP:(s + 1) * _GROUP, j], scl_b[j])
                                for j in range(cols)], lane),
            }
            if dp.has_mode_port:
                plan.inputs[c]["mode"] = MODE_CODES[mode]
            if dp.block_port:
                plan.inputs[c]["in_block_last"] = int(close)
        result = golden(dtype, mode, a, sa, b, sb, block=block)
        for i, c in enumerate(plan.predicted[t]):
            _expect(plan, t, c, i, result[i])
    plan.n_cycles = max(plan.expected) + rows + cols + 4
    return plan


def _elements(rng, mode: str, m: int, k: int, n: int, regime: str):
    """Element codes A[m×k], B[k×n] of ``mode``: the FP8 regimes of :mod:`diptych.rtl.bench`
    (MXFP8), or every code of the MXFP6/MXFP4/MXINT8 format with a quarter of them ±0 (MXINT8:
    another eighth its extremes −128, 127)."""
    if mode in MXFP8_MODES:
        return _operands(rng, _fp8_mode(mode), m, k, n, regime)
    if mode == "mxint8":
        out = []
        for shape in ((m, k), (k, n)):
            codes = rng.integers(0, 256, shape)
            u = rng.random(shape)
            codes = np.where(u < 0.25, 0, np.where(u < 0.375, rng.choice([0x80, 0x7F], shape),
                                                   codes))
            out.append(codes.astype(np.uint8))
        return out[0], out[1]
    out = []
    for fmt, shape in zip(MX_MODES[mode], ((m, k), (k, n))):
        bits = FORMATS[fmt].bits
        codes = rng.integers(0, 1 << bits, shape)
        zero = rng.random(shape) < 0.25
        out.append(np.where(zero, codes & (1 << (bits - 1)), codes).astype(np.uint8))
    return out[0], out[1]


def _scales(rng, regime: str, shape, nan_p: float = 0.02) -> np.ndarray:
    lo, hi = SCALE_REGIMES[regime]
    s = rng.integers(lo, hi + 1, shape)
    return np.where(rng.random(shape) < nan_p, 0xFF, s)        # a NaN scale, now and then


def random_plan_modes(rows: int, cols: int, dtype: str, dataflow: str, block, tiles,
                      modes) -> tuple[str, ...]:
    """The modes of a random block-scaled plan (default: every mode of the datapath), after
    checking the array, block, tile count and modes (ValueError naming the bad one)."""
    _check_dtype(rows, cols, dtype, dataflow)
    check_block(block)
    if isinstance(tiles, bool) or not isinstance(tiles, int) or tiles < 1:
        raise ValueError(f"tiles must be a positive integer, not {tiles!r}")
    dp = get_datapath(dtype)
    modes = tuple(dp.modes if modes is None else modes)
    for mo in modes:
        dp.macs_per_cycle(mo)
    return modes


def make_mx_plan(rows: int, cols: int, *, seed: int = 1, tiles: int = 8, start: int = 1,
                 modes=None, block: int = MX_BLOCK, bubble_data: str = "random",
                 dtype: str = "mx") -> Plan:
    """A random, reproducible plan of the ``mx`` OS array: every MXFP8 mode in turn, then at
    random; depths around R steps with K not a multiple of 4 or of the block (short last
    blocks); half the tiles at the earliest legal cycles, half with slack and bubbles (tile 1
    long and full of them); the FP8 element regimes of :mod:`diptych.rtl.bench` (edges,
    sticky ties, rounding order, cancellation, subnormals, wide, moderate, sprinkled NaN/Inf)
    and the scale regimes of :data:`SCALE_REGIMES` in turn."""
    modes = random_plan_modes(rows, cols, dtype, "os", block, tiles, modes)
    rng = np.random.default_rng(seed)
    tile_modes = [modes[t] if t < len(modes) else str(rng.choice(modes)) for t in range(tiles)]
    regimes, scale_regs = _Regimes(), list(SCALE_REGIMES)
    R = rows
    data, step_cycles, bubbles, prev_last = [], [], 0, None
    for t, mode in enumerate(tile_modes):
        nbs = block // _GROUP                           # steps a block
        steps = int(rng.choice([1, max(1, R - 1), R, R + 1, 2 * R + 3, nbs + 1, 2 * nbs + 1,
                                int(rng.integers(1, 3 * R + 2))]))
        steps = max(2 * R + 3, nbs + 2) if t == 1 else steps
        k = max(1, steps * _GROUP - int(rng.integers(0, _GROUP)))
        regime = regimes(_fp8_mode(mode)) if mode in MXFP8_MODES else "uniform"
        if regime in ("cancel", "sticky"):
            k = max(k, 4 * int(rng.integers(1, 3)))
        steps = timing.os_steps(k, _GROUP)
        cycles = _os_earliest(R, cols, prev_last, steps, start)
        if t == 1 or rng.random() >= 0.5:
            slack = int(rng.integers(0, 3))
            cycles, bub = _steps_with_bubbles(rng, [c + slack for c in cycles],
                                              0.5 if t == 1 else 0.25, inside=t == 1)
            bubbles += bub
        a, b = _elements(rng, mode, R, k, cols, regime)
        nb = -(-k // block)
        sreg = scale_regs[t % len(scale_regs)]
        data.append((a, _scales(rng, sreg, (R, nb)), b, _scales(rng, sreg, (nb, cols))))
        step_cycles.append(cycles)
        prev_last = cycles[-1]
    plan = mx_os_plan(rows, cols, data, step_cycles, tile_modes, block=block, seed=seed,
                      bubble_data=bubble_data, dtype=dtype)
    plan.bubbles = bubbles
    return plan


def mx_earliest_plan(rows: int, cols: int, sizes, mode: str = "mxfp8_e4m3", *, seed: int = 1,
                     block: int = MX_BLOCK, dtype: str = "mx") -> Plan:
    """Back-to-back ``mx`` tiles of depths ``sizes`` at the earliest cycles the contract allows
    (:func:`diptych.sim.timing.os_schedule` of ``os_steps(K, 4)`` steps): what the engine models
    for the folds of one GEMM block. Moderate elements, scales near 1."""
    _check_dtype(rows, cols, dtype)
    get_datapath(dtype).macs_per_cycle(mode)
    sizes = list(sizes)
    if not sizes or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sizes):
        raise ValueError(f"sizes must be a non-empty list of positive integers, not {sizes!r}")
    rng = np.random.default_rng(seed)
    cycles = timing.os_schedule(rows, cols, [timing.os_steps(k, _GROUP) for k in sizes])
    data = []
    for k in sizes:
        a, b = _elements(rng, mode, rows, k, cols, "moderate")
        nb = -(-k // block)
        data.append((a, _scales(rng, "near", (rows, nb), nan_p=0), b,
                     _scales(rng, "near", (nb, cols), nan_p=0)))
    return mx_os_plan(rows, cols, data, cycles, [mode] * len(sizes), block=block, seed=seed,
                      dtype=dtype)


# ---- directed block cases ---------------------------------------------------------------------

def _exact(mode, a, b) -> tuple[int, int]:
    """The block's element dot as ``(n, q)``: value ``n · 2^q`` (finite elements only)."""
    from fractions import Fraction

    from .minifloat import decode
    fa, fb = MX_MODES[mode]
    v = sum(Fraction(float(decode(fa, np.array([x]))[0])) * Fraction(float(decode(fb, np.array(
        [y]))[0])) for x, y in zip(a, b))
    return v.numerator, v.denominator


def lead_exponent(mode, a, b):
    """floor(log2 |Σ aᵢbᵢ|) of the block at unit scales, or None for an exact zero."""
    n, d = _exact(mode, a, b)
    if n == 0:
        return None
    e = abs(n).bit_length() - d.bit_length()
    while abs(n) >= d * 2 ** (e + 1) if e >= 0 else abs(n) * 2 ** (-e - 1) >= d:
        e += 1
    while (abs(n) < d * 2 ** e) if e >= 0 else (abs(n) * 2 ** (-e) < d):
        e -= 1
    return e


def _scales_for(rng, lead: int, target: int) -> tuple[int, int]:
    """E8M0 codes (sa, sb) with ``sa + sb − 254 = target − lead``, each in 0 … 254."""
    total = 254 + target - lead
    lo, hi = max(0, total - 254), min(254, total)
    sa = int(rng.integers(lo, hi + 1))
    return sa, total - sa


def _finite(rng, fmt: str, size: int, lo_exp: int, hi_exp: int) -> list[int]:
    """Random finite codes of ``fmt`` with values ±(1 + f)·2^e, e in lo … hi (may be subnormal
    or zero where the format rounds them so)."""
    from .minifloat import encode
    e = rng.integers(lo_exp, hi_exp + 1, size)
    v = (1 + rng.integers(0, 8, size) / 8) * np.exp2(e) * rng.choice([-1.0, 1.0], size)
    return [int(c) for c in encode(fmt, v, saturate=True)]


def directed_cases(seed: int = 7) -> list[tuple]:
    """Block cases aimed at the closing path: dots scaled to just below, at and above 2^-126
    (the flush and the subnormal-grid carry), near FP32's top (overflow to Inf), ties and
    sticky bits at the 24th bit, cancellation to zero, NaN and Inf elements and scales."""
    rng = np.random.default_rng(seed)
    cases = []
    modes = list(MXFP8_MODES)
    for t in range(24):
        mode = modes[t % 4]
        fa, fb = MX_MODES[mode]
        k = int(rng.choice([4, 8, 16]))
        a = _finite(rng, fa, k, -6, 6)
        b = _finite(rng, fb, k, -6, 6)
        lead = lead_exponent(mode, a, b)
        if lead is None:
            continue
        target = [-128, -127, -127, -126, -126, 127, 128, 0][t % 8]
        sa, sb = _scales_for(rng, lead, target)
        acc = 0 if t % 3 else int(np.float32(rng.normal()).view(np.uint32))
        cases.append((mode, acc, a, b, sa, sb))
    # the subnormal-grid carry: a dot of (2^24 − 1 + ½)·2^-151 = 2^-127·(2 − 2^-23 ...)
    for mode, fa, fb in (("mxfp8_e5m2", "e5m2", "e5m2"), ("mxfp8_e4m3", "e4m3", "e4m3")):
        from .minifloat import encode
        one = int(encode(fa, np.array([1.0]))[0])
        # products 1, ½, ¼ ... as powers of two: 1 + 2^-1 + … makes a run of ones
        for run in (22, 23, 24, 25):
            a, b = [], []
            for i in range(0, min(run, 30), 1):
                x = float(2.0 ** -i)
                ea = -(i // 2)
                a.append(int(encode(fa, np.array([2.0 ** ea]))[0]))
                b.append(int(encode(fb, np.array([x / 2.0 ** ea]))[0]))
            a, b = a[:32], b[:32]
            lead = lead_exponent(mode, a, b)
            for target in (-127, -126):
                sa, sb = _scales_for(rng, lead, target)
                cases.append((mode, 0, a, b, sa, sb))
        cases.append((mode, 0, [one] * 4, [one] * 4, 0, 0))           # 4·2^-254: flushed
        cases.append((mode, 0, [one] * 4, [one] * 4, 254, 254))       # 4·2^254: Inf
        cases.append((mode, 0, [one] * 4, [one] * 4, 0xFF, 127))      # NaN scale
        cases.append((mode, 0, [one, one ^ 0x80], [one, one], 127, 127))  # exact zero: +0
        cases.append((mode, 0x80000000, [0x80] * 4, [0] * 4, 127, 127))  # −0 + (+0)
    e5_inf, e5_one = 0x7C, 0x3C
    cases += [("mxfp8_e5m2", 0, [e5_inf, 0x3C], [e5_one, 0x3C], 127, 127),     # +Inf
              ("mxfp8_e5m2", 0, [e5_inf, e5_inf ^ 0x80], [e5_one, e5_one], 127, 127),  # NaN
              ("mxfp8_e5m2", 0, [e5_inf, 0x3C], [0x00, 0x3C], 127, 127),       # Inf × 0
              ("mxfp8_e4m3xe5m2", 0, [0x38, 0x7F], [e5_one, e5_one], 127, 127),  # E4M3 NaN
              ("mxfp8_e5m2xe4m3", 0x7F800000, [0x3C], [0x38], 127, 127),        # acc Inf
              ("mxfp8_e4m3", 0x00000001, [0x38], [0x38], 127, 127)]              # DAZ acc
    # MXFP6 and MXFP4 (the mxdot4 PE): dots scaled to the bottom, the top and 1 of FP32
    small = np.random.default_rng(seed + 1)
    for t, mode in enumerate(m for m in MX_MODES if m not in MXFP8_MODES for _ in range(3)):
        fa, fb = MX_MODES[mode]
        a, b = _finite(small, fa, 8, -2, 2), _finite(small, fb, 8, -2, 2)
        lead = lead_exponent(mode, a, b)
        if lead is not None:
            sa, sb = _scales_for(small, lead, (-127, 127, 0)[t % 3])
            cases.append((mode, 0, a, b, sa, sb))
    return cases


def mxint8_cases(seed: int = 11) -> list[tuple]:
    """Directed MXINT8 block cases ``("mxint8", acc, a, b, sa, sb)`` (INT8 codes as bytes): the
    extremes (−128·−128 × 32 = 2^19 times the scales: at FP32's top it saturates to the largest
    finite, at the bottom it flushes), exact cancellation to +0 (also against a −0 accumulator),
    sums just below and above 2^-126, a NaN scale of either side, Inf/NaN and subnormal
    accumulators, and random blocks with scales near 1."""
    rng = np.random.default_rng(seed)
    mn, mx_ = 0x80, 0x7F
    one = 64                                   # 64 · 2^-6 = 1
    cases = [("mxint8", 0, [mn] * 32, [mn] * 32, 254, 254),          # saturates: +max
             ("mxint8", 0, [mn] * 32, [mx_] * 32, 254, 254),         # −max
             ("mxint8", 0, [mn] * 32, [mn] * 32, 0, 0),              # 2^19 · 2^-254: flushed
             ("mxint8", 0, [one] * 4, [one] * 4, 2, 0),              # 4 · 2^-252: flushed
             ("mxint8", 0, [one] * 4, [0xC0] * 4, 2, 0),             # −4 · 2^-252: −0
             ("mxint8", 0, [one] * 2, [one] * 2, 1, 0),              # 2 · 2^-253 … flushed
             ("mxint8", 0, [one, 1], [one, 1], 127 - 126 + 127, 0),  # 2^-126 (1 + 2^-12): normal
             ("mxint8", 0, [one, mn], [one, 0x20], 127, 127),        # 1 − 1 = +0
             ("mxint8", 0x80000000, [one, mn], [one, 0x20], 127, 127),  # −0 + 0 = +0
             ("mxint8", 0x80000000, [0] * 4, [5] * 4, 127, 127),     # −0 + 0 products = +0
             ("mxint8", 0x3F800000, [one] * 4, [one] * 4, 0xFF, 127),  # NaN scale (A)
             ("mxint8", 0x3F800000, [one] * 4, [one] * 4, 127, 0xFF),  # NaN scale (B)
             ("mxint8", 0xFF800000, [one] * 4, [one] * 4, 127, 127),  # −Inf accumulator
             ("mxint8", 0x7FC00001, [one] * 4, [one] * 4, 127, 127),  # NaN accumulator
             ("mxint8", 0x00000001, [one] * 4, [one] * 4, 127, 127),  # subnormal acc: zero
             ("mxint8", 0x3F800000, [1] * 4, [1] * 4, 127 - 30, 127),  # falls out of the window
             ("mxint8", 0x7F7FFFFF, [mx_] * 8, [mx_] * 8, 254, 254),   # past the top: max
             ("mxint8", 0x3F800000, [1], [1], 121, 121)]             # 1 + 2^-24: a tie (WS)
    for t in range(8):
        k = int(rng.choice([4, 8, 16, 32]))
        a, b = (list(map(int, rng.integers(0, 256, k))) for _ in range(2))
        sa, sb = (int(x) for x in rng.integers(118, 137, 2))
        acc = int(np.float32(rng.normal() * 2.0 ** rng.integers(-8, 8)).view(np.uint32))
        cases.append(("mxint8", acc if t % 2 else 0, a, b, sa, sb))
    return cases


def random_cases(seed: int, n: int) -> list[tuple]:
    """``n`` random block cases: every mode, blocks of 1 … 32 elements, moderate and full-range
    element codes (with NaN/Inf/subnormals), scales around 127 and at the extremes."""
    rng = np.random.default_rng(seed)
    cases = []
    modes = list(MXFP8_MODES)
    for t in range(n):
        mode = modes[t % 4]
        fa, fb = MX_MODES[mode]
        k = int(rng.integers(1, 33))
        if t % 3 == 0:
            a, b = (list(map(int, rng.integers(0, 256, k))), list(map(int, rng.integers(0, 256, k))))
        else:
            a, b = _finite(rng, fa, k, -9, 8), _finite(rng, fb, k, -9, 8)
        sa, sb = (int(x) for x in (rng.integers(110, 145, 2) if t % 5 else
                                   rng.integers(0, 256, 2)))
        acc = int(rng.choice([0, int(np.float32(rng.normal() * 8).view(np.uint32)),
                              int(rng.integers(0, 2**32))]))
        cases.append((mode, acc, a, b, sa, sb))
    return cases


def mx_special_plan(rows: int, cols: int, modes=None, *, seed: int = 1,
                    bubble_data: str = "random", dtype: str = "mx") -> Plan:
    """The directed plan of the ``mx`` array: the block cases of :func:`directed_cases` (dots
    scaled to just below, at and above 2^-126, near FP32's top, ties, exact zeros, NaN and Inf
    elements, NaN scales) of the given modes (default all), ``min(R, C)`` a tile on its
    diagonal (PE(i, i) gets case i's A elements and scale in row i, its B elements and scale in
    column i; the other PEs meet other cases' rows and columns, the golden model computes them
    all), one block per tile, tiles back to back at the earliest legal cycles. The cases'
    accumulators do not apply (an OS tile starts from +0). ``seed``/``bubble_data``: what the
    idle cycles carry."""
    _check_dtype(rows, cols, dtype)
    modes = tuple(get_datapath(dtype).modes if modes is None else modes)
    for mo in modes:
        get_datapath(dtype).macs_per_cycle(mo)
    cases = [c for c in directed_cases() + mxint8_cases() if c[0] in modes]
    d = min(rows, cols)
    data, tile_modes = [], []
    for mode in modes:
        mine = [c for c in cases if c[0] == mode]
        for g in range(0, len(mine), d):
            group = mine[g:g + d]
            k = max(len(c[2]) for c in group)
            a = np.zeros((rows, k), np.int64)
            b = np.zeros((k, cols), np.int64)
            sa = np.full((rows, 1), 127)
            sb = np.full((1, cols), 127)
            for i, (_, _, ca, cb, s_a, s_b) in enumerate(group):
                a[i, :len(ca)], b[:len(cb), i] = ca, cb
                sa[i, 0], sb[0, i] = s_a, s_b
            data.append((a, sa, b, sb))
            tile_modes.append(mode)
    steps = [timing.os_steps(t[0].shape[1], _GROUP) for t in data]
    cycles = timing.os_schedule(rows, cols, steps, start=1)
    return mx_os_plan(rows, cols, data, cycles, tile_modes, seed=seed, bubble_data=bubble_data,
                      dtype=dtype)


def tile_operands(t: int, tile, rows: int, cols: int, block: int):
    """``(A, A_s, B, B_s, K)`` of block-scaled tile ``t`` as int64 arrays, or ValueError naming
    the shapes an R×C array with blocks of ``block`` needs (A R×K, A_s R×ceil(K/block), B K×C,
    B_s ceil(K/block)×C)."""
    a, sa, b, sb = (np.asarray(x).astype(np.int64) for x in tile)
    k = a.shape[1] if a.ndim == 2 else -1
    nb = -(-k // block) if k > 0 else 0
    if (a.shape != (rows, k) or b.shape != (k, cols) or k < 1 or sa.shape != (rows, nb)
            or sb.shape != (nb, cols)):
        raise ValueError(f"tile {t}: A must be {rows}×K, A_s {rows}×ceil(K/{block}), B K×"
                         f"{cols} and B_s ceil(K/{block})×{cols}, not {a.shape}, "
                         f"{sa.shape}, {b.shape} and {sb.shape}")
    return a, sa, b, sb, k
