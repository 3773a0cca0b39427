"""Simulator-independent testbench pieces: stimulus, reference model, scoreboard.

A :class:`Plan` is everything a driver needs to exercise a :class:`~diptych.rtl.array.SystolicArray`
for a fixed number of cycles: the port values to present in each cycle, and for each cycle in
which an output must appear the expected ``out_row`` (OS) and output bits. The expected cycles
come from the array-timing contract in :mod:`diptych.sim.timing` (imported, not copied) and the
expected bits from the NumPy golden model :mod:`diptych.rtl.golden`. The same plan drives the
fast amaranth.sim tests and the cocotb bench on Verilator, and :func:`score` compares what a
monitor saw against it.

Stimulus: random tiles with edge values (INT8 −128/127/0/−1; BF16 ±0, subnormals, ±Inf, NaNs,
largest and smallest normals, plus tiles with a wide exponent range that overflow and underflow),
bubbles in the input stream, and tiles issued back-to-back at the earliest legal cycle. WS plans
include chains of tiles that continue a K > R reduction through the top-edge partial sums.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..sim.timing import os_output_cycles, ws_output_cycles
from . import golden
from .array import check_config
from .pe import operand_bits

__all__ = ["Plan", "make_plan", "os_plan", "ws_plan", "score", "pack", "unpack", "BF16_EDGES", "INT8_EDGES"]

#: bf16 edge values: ±0, subnormals, ±Inf, NaNs (quiet, signalling, negative), the largest and
#: smallest normals of both signs, ±1.
BF16_EDGES = (0x0000, 0x8000, 0x0001, 0x807F, 0x0040, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81,
              0x7F7F, 0xFF7F, 0x0080, 0x8080, 0x3F80, 0xBF80)
INT8_EDGES = (-128, 127, 0, -1)
#: FP32 partial sums injected at the WS top edge: zeros, a subnormal, max normal, Inf, a NaN.
FP32_PSUM_EDGES = (0x00000000, 0x80000000, 0x00000001, 0x7F7FFFFF, 0xFF800000, 0x7FA00000)


def pack(values, width: int) -> int:
    """Little-endian pack of unsigned element bit patterns into one integer."""
    out = 0
    mask = (1 << width) - 1
    for e, v in enumerate(values):
        out |= (int(v) & mask) << (width * e)
    return out


def unpack(word: int, width: int, count: int) -> tuple[int, ...]:
    """Inverse of :func:`pack`: ``count`` unsigned elements of ``width`` bits."""
    mask = (1 << width) - 1
    return tuple((word >> (width * e)) & mask for e in range(count))


@dataclass
class Plan:
    """Cycle-by-cycle stimulus and expected outputs for one array configuration.

    ``inputs[c]`` maps port names to the (packed, unsigned) value to present in cycle ``c``;
    ports absent from a cycle are driven to 0. ``expected[c]`` is ``(row, words)``: the
    ``out_row`` (None for WS) and the C output bit patterns that must appear in cycle ``c``;
    in every other cycle ``out_valid`` must be low. ``n_cycles`` covers the last expected
    output plus a margin in which nothing may appear.
    """

    rows: int
    cols: int
    dtype: str
    dataflow: str
    inputs: dict[int, dict[str, int]] = field(default_factory=dict)
    expected: dict[int, tuple[int | None, tuple[int, ...]]] = field(default_factory=dict)
    n_cycles: int = 0
    n_tiles: int = 0
    bubbles: int = 0
    #: the output cycles predicted by diptych.sim.timing, per tile
    predicted: list[list[int]] = field(default_factory=list)

    @property
    def input_ports(self) -> tuple[str, ...]:
        if self.dataflow == "os":
            return ("in_valid", "in_last", "a_data", "b_data")
        return ("in_valid", "in_first", "a_data", "psum_data", "w_load", "w_data")

    def inputs_at(self, cycle: int) -> dict[str, int]:
        """Every input port's value in ``cycle`` (0 where the plan drives nothing)."""
        vals = dict.fromkeys(self.input_ports, 0)
        vals.update(self.inputs.get(cycle, {}))
        return vals


def _bf16_tile(rng, shape, regime: str) -> np.ndarray:
    sign = rng.integers(0, 2, shape)
    frac = rng.integers(0, 128, shape)
    if regime == "wide":          # overflow to Inf and underflow to zero happen
        exp = rng.integers(1, 255, shape)
    else:                         # a narrow range: cancellation and rounding dominate
        exp = rng.integers(120, 136, shape)
    bits = (sign << 15) | (exp << 7) | frac
    edge_p = {"moderate": 0.0, "wide": 0.0, "sprinkled": 0.04, "edges": 0.3}[regime]
    mask = rng.random(shape) < edge_p
    bits = np.where(mask, rng.choice(np.array(BF16_EDGES), shape), bits)
    return bits.astype(np.uint16)


def _int8_tile(rng, shape, regime: str) -> np.ndarray:
    v = rng.integers(-128, 128, shape)
    edge_p = {"moderate": 0.0, "wide": 0.1, "sprinkled": 0.1, "edges": 0.5}[regime]
    mask = rng.random(shape) < edge_p
    return np.where(mask, rng.choice(np.array(INT8_EDGES), shape), v).astype(np.int8)


_REGIMES = ("moderate", "moderate", "wide", "sprinkled", "edges")


def _operands(rng, dtype, shape, regime):
    return _bf16_tile(rng, shape, regime) if dtype == "bf16" else _int8_tile(rng, shape, regime)


def _gemm(dtype, a, b, init=None) -> np.ndarray:
    """Reference result as unsigned 32-bit patterns."""
    if dtype == "bf16":
        return golden.bf16_matmul_bits(a, b, init)
    r = golden.int8_matmul(a, b, None if init is None else init.view(np.int32))
    return r.view(np.uint32)


def _steps_with_bubbles(rng, first: int, n: int, bubble_p: float) -> tuple[list[int], int]:
    cycles, c, bubbles = [], first, 0
    for _ in range(n):
        cycles.append(c)
        gap = int(rng.integers(1, 4)) if rng.random() < bubble_p else 0
        bubbles += gap
        c += 1 + gap
    return cycles, bubbles


def make_plan(rows: int, cols: int, dtype: str, dataflow: str, *, seed: int = 1,
              tiles: int = 8, start: int = 1) -> Plan:
    """A random but reproducible plan of ``tiles`` tiles (see the module docstring)."""
    check_config(rows, cols, dtype, dataflow)
    if isinstance(tiles, bool) or not isinstance(tiles, int) or tiles < 1:
        raise ValueError(f"tiles must be a positive integer, not {tiles!r}")
    rng = np.random.default_rng(seed)
    build = _random_os if dataflow == "os" else _random_ws
    plan = build(rng, rows, cols, dtype, tiles, start)
    return plan


def _elem_bits(x: np.ndarray, w: int) -> np.ndarray:
    return x.view(np.uint8 if w == 8 else np.uint16)


def _as_operands(dtype: str, x) -> np.ndarray:
    x = np.asarray(x)
    if dtype == "int8":
        if x.size and (x.min() < -128 or x.max() > 127):
            raise ValueError("int8 operands must lie in -128 .. 127")
        return x.astype(np.int8)
    if x.size and (x.min() < 0 or x.max() > 0xFFFF):
        raise ValueError("bf16 operands are bit patterns in 0 .. 0xFFFF")
    return x.astype(np.uint16)


def os_plan(rows: int, cols: int, dtype: str, tiles, step_cycles) -> Plan:
    """An OS plan from explicit tiles ``[(A[R×K], B[K×C]), …]`` and their step cycles.

    Operands are int8 arrays (``dtype="int8"``) or uint16 bf16 bit patterns. The output
    cycles are :func:`diptych.sim.timing.os_output_cycles` of ``step_cycles`` (which raises
    ValueError if an issue rule is broken); the bits are the golden model's.
    """
    check_config(rows, cols, dtype, "os")
    w = operand_bits(dtype)
    plan = Plan(rows, cols, dtype, "os", n_tiles=len(tiles))
    plan.predicted = os_output_cycles(rows, cols, step_cycles)
    for t, ((a, b), cycles) in enumerate(zip(tiles, step_cycles)):
        a, b = _as_operands(dtype, a), _as_operands(dtype, b)
        k = len(cycles)
        if a.shape != (rows, k) or b.shape != (k, cols):
            raise ValueError(f"tile {t}: A must be {rows}×{k} and B {k}×{cols}, "
                             f"not {a.shape} and {b.shape}")
        for kk, c in enumerate(cycles):
            if c in plan.inputs:
                raise ValueError(f"tile {t}: two steps presented in cycle {c}")
            plan.inputs[c] = {
                "in_valid": 1, "in_last": int(kk == k - 1),
                "a_data": pack(_elem_bits(a[:, kk], w), w),
                "b_data": pack(_elem_bits(b[kk, :], w), w),
            }
        result = _gemm(dtype, a, b)
        for i, c in enumerate(plan.predicted[t]):
            plan.expected[c] = (i, tuple(int(x) for x in result[i]))
    plan.n_cycles = max(plan.expected) + rows + cols + 4
    return plan


def ws_plan(rows: int, cols: int, dtype: str, tiles, load_cycles, row_cycles) -> Plan:
    """A WS plan from explicit tiles ``[(A[M×R], W[R×C], P[M×C] or None), …]``.

    ``load_cycles[t]`` is the first of tile ``t``'s R consecutive weight-load cycles,
    ``row_cycles[t]`` the cycles of its rows; P holds the top-edge partial sums as uint32 bit
    patterns (None: zeros). Output cycles come from :func:`diptych.sim.timing.ws_output_cycles`.
    """
    check_config(rows, cols, dtype, "ws")
    w = operand_bits(dtype)
    plan = Plan(rows, cols, dtype, "ws", n_tiles=len(tiles))
    plan.predicted = ws_output_cycles(rows, cols, load_cycles, row_cycles)
    for t, ((a, wt, psum), wl, cycles) in enumerate(zip(tiles, load_cycles, row_cycles)):
        m_rows = len(cycles)
        a, wt = _as_operands(dtype, a), _as_operands(dtype, wt)
        psum = (np.zeros((m_rows, cols), np.uint32) if psum is None
                else np.asarray(psum).astype(np.uint32))
        if a.shape != (m_rows, rows) or wt.shape != (rows, cols) or psum.shape != (m_rows, cols):
            raise ValueError(f"tile {t}: A must be {m_rows}×{rows}, W {rows}×{cols} and P "
                             f"{m_rows}×{cols}, not {a.shape}, {wt.shape} and {psum.shape}")
        for r in range(rows):
            plan.inputs.setdefault(wl + r, {}).update({
                "w_load": 1, "w_data": pack(_elem_bits(wt[rows - 1 - r, :], w), w)})
        for m, c in enumerate(cycles):
            plan.inputs.setdefault(c, {}).update({
                "in_valid": 1, "in_first": int(m == 0),
                "a_data": pack(_elem_bits(a[m, :], w), w),
                "psum_data": pack(psum[m, :], 32),
            })
        result = _gemm(dtype, a, wt, psum)
        for m, c in enumerate(plan.predicted[t]):
            plan.expected[c] = (None, tuple(int(x) for x in result[m]))
    plan.n_cycles = max(plan.expected) + rows + cols + 4
    return plan


def _random_os(rng, rows, cols, dtype, n_tiles, start):
    R = rows
    tiles, step_cycles, bubbles = [], [], 0
    prev_last = None
    for _ in range(n_tiles):
        # depths around R exercise both issue rules: K < R is limited by the drain, K ≥ R not
        k = int(rng.choice([1, max(1, R - 1), R, R + 1, 2 * R + 3, int(rng.integers(1, 3 * R + 2))]))
        tight = rng.random() < 0.5          # tight: the earliest legal cycles, no bubbles
        first = start if prev_last is None else max(prev_last + 1, prev_last + R - (k - 1))
        if not tight:
            first += int(rng.integers(0, 3))
        cycles, bub = _steps_with_bubbles(rng, first, k, 0.0 if tight else 0.25)
        if prev_last is not None and cycles[-1] < prev_last + R:
            cycles = [c + prev_last + R - cycles[-1] for c in cycles]
        bubbles += bub
        regime = str(rng.choice(_REGIMES))
        tiles.append((_operands(rng, dtype, (R, k), regime),
                      _operands(rng, dtype, (k, cols), regime)))
        step_cycles.append(cycles)
        prev_last = cycles[-1]
    plan = os_plan(rows, cols, dtype, tiles, step_cycles)
    plan.bubbles = bubbles
    return plan


def _random_psum(rng, dtype, shape):
    if rng.random() < 0.6:
        return np.zeros(shape, np.uint32)             # a fresh reduction from +0 / 0
    if dtype == "bf16":
        psum = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
        mask = rng.random(shape) < 0.2
        return np.where(mask, rng.choice(np.array(FP32_PSUM_EDGES, np.uint32), shape),
                        psum).astype(np.uint32)
    # near the int32 limits, so the accumulator wraps
    return rng.choice(np.array([2**31 - 1, 2**31, 2**31 - 100, 5], np.uint64),
                      shape).astype(np.uint32)


def _random_ws(rng, rows, cols, dtype, n_tiles, start):
    R, C = rows, cols
    tiles, loads, row_cycles, bubbles = [], [], [], 0
    prev_first = prev_last = None
    chain = None      # (rows, partial sums) of a K > R reduction in progress
    for _ in range(n_tiles):
        regime = str(rng.choice(_REGIMES))
        if chain is not None and rng.random() < 0.7:
            m_rows, psum = chain                       # continue: next K-chunk, same rows
        else:
            m_rows = int(rng.choice([1, R, R + C, int(rng.integers(1, 3 * R + 2))]))
            psum = _random_psum(rng, dtype, (m_rows, C))
        a = _operands(rng, dtype, (m_rows, R), regime)
        wt = _operands(rng, dtype, (R, C), regime)
        chain = (m_rows, _gemm(dtype, a, wt, psum))
        tight = rng.random() < 0.5
        wl = start if prev_first is None else prev_first + R + C - 2
        if not tight:
            wl += int(rng.integers(0, 3))
        first = wl + R if prev_last is None else max(wl + R, prev_last + 1)
        if not tight:
            first += int(rng.integers(0, 3))
        cycles, bub = _steps_with_bubbles(rng, first, m_rows, 0.0 if tight else 0.25)
        bubbles += bub
        tiles.append((a, wt, psum))
        loads.append(wl)
        row_cycles.append(cycles)
        prev_first, prev_last = cycles[0], cycles[-1]
    plan = ws_plan(rows, cols, dtype, tiles, loads, row_cycles)
    plan.bubbles = bubbles
    return plan


def score(plan: Plan, observed: list[tuple[int, int | None, tuple[int, ...]]],
          max_errors: int = 20) -> list[str]:
    """Compare monitor observations ``(cycle, out_row, words)`` with the plan.

    Returns human-readable mismatch descriptions (empty means every output appeared in its
    predicted cycle with the right bits, and nothing else appeared).
    """
    errors: list[str] = []
    seen = {}
    for cycle, row, words in observed:
        seen[cycle] = (row, tuple(words))
    for cycle in sorted(set(plan.expected) | set(seen)):
        if len(errors) >= max_errors:
            errors.append("... (more errors suppressed)")
            break
        if cycle not in seen:
            errors.append(f"cycle {cycle}: expected an output (row {plan.expected[cycle][0]}), "
                          "out_valid was low")
            continue
        if cycle not in plan.expected:
            errors.append(f"cycle {cycle}: unexpected output {_fmt(seen[cycle][1])}")
            continue
        erow, ewords = plan.expected[cycle]
        row, words = seen[cycle]
        if erow is not None and row != erow:
            errors.append(f"cycle {cycle}: out_row {row}, expected {erow}")
        if words != ewords:
            bad = [j for j in range(len(ewords)) if words[j] != ewords[j]]
            errors.append(f"cycle {cycle}: columns {bad} got {_fmt(words)}, "
                          f"expected {_fmt(ewords)}")
    return errors


def _fmt(words) -> str:
    return "[" + " ".join(f"{w:08x}" for w in words) + "]"
