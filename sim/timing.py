"""The array-timing contract (design.md §4), shared with the RTL bench.

This module is the single statement of *when* a systolic array consumes inputs and produces
outputs. The engine uses its closed forms; the cocotb bench imports :func:`os_output_cycles`
and :func:`ws_output_cycles` and checks that every hardware output appears in exactly the
predicted cycle. Cycle ``n`` ends with rising edge ``n``; interfaces are unskewed.

Output stationary (OS), ``C[R×C] = A[R×K] · B[K×C]``
    Step ``k`` (column ``k`` of A and row ``k`` of B) is presented in cycle ``n_k``; PE(i, j)
    executes it at edge ``n_k + i + j``. With ``L`` the cycle of the tile's last step, output
    row ``i`` (0 = top) appears in cycle ``L + R + C − 1 + (R − 1 − i)``: bottom row first.
    Issue rules between consecutive tiles ``t``, ``t+1``: ``n_{t+1,0} > L_t`` (one step per
    cycle) and ``L_{t+1} ≥ L_t + R`` (the drain register holds one tile's results for R
    cycles). An isolated tile takes ``K + 2R + C − 2`` cycles; back-to-back tiles settle at one
    per ``max(K, R)`` cycles.

Weight stationary (WS), ``C[M×C] = A[M×R] · W[R×C]``
    A tile's weights are shifted into shadow registers during the R cycles
    ``w .. w + R − 1`` (double buffering); row ``m`` of A presented in cycle ``s_m`` leaves in
    cycle ``s_m + R + C − 1``. Rules: ``s_{t,0} ≥ w_t + R``; rows strictly increase and
    ``s_{t+1,0} > s_{t,last}``; the next weight load may start once this tile's swap wave has
    left the array, ``w_{t+1} ≥ s_{t,0} + R + C − 2`` (which also implies ``≥ w_t + R``).
    An isolated tile takes ``2R + C + M − 1`` cycles; the tile period is
    ``max(M, 2R + C − 2)``. For K > R the previous partial sums enter at the top edge with
    their row, so accumulation order is unchanged.

    The weight-install path (two chip parameters, ``core.array.weight_load_rows_per_cycle``
    ``p`` and ``core.array.weight_swap``; docs/engine.md): the load takes
    ``I = ceil(R / p)`` cycles instead of R (``p`` rows written per cycle, e.g. from ``p``
    parallel SRAM streams), so ``s_{t,0} ≥ w_t + I``; with ``weight_swap = "global"`` every
    PE switches to the new weights at once, in the tile's first-row cycle (a fused
    dot-product array with double-buffered weight registers: no swap wave), and the next
    load may start in that cycle, ``w_{t+1} ≥ s_{t,0}``. The period becomes
    ``max(M, I + R + C − 2)`` (wave) or ``max(M, I)`` (global). The defaults ``p = 1`` and
    ``"wave"`` are the rules above exactly, the only ones the RTL implements (the RTL bench
    refuses others).

Input stationary (IS) is WS on the transposed problem: ``Cᵀ = Bᵀ · Aᵀ`` with A held in the
array and columns of B streamed (the engine swaps M and N).

Precisions: INT8 and BF16 share this timeline (single-cycle MAC). A PE doing ``n`` MACs per
cycle in some dtype consumes ``n`` K-steps per cycle: the engine applies these rules with
``K → ceil(K / n)`` (OS) or with an effective ``n·R``-deep stationary tile (WS/IS); ``n < 1``
(multi-pass modes) stretches each step to ``1/n`` cycles. The RTL's PEs at ``n`` = 2 (the
multi-precision PEs' INT8/FP8 modes) and ``n`` = 4 (the FP8 dot-product PE, ``dot4``: four
products and the accumulator summed in one cycle) are single-cycle too, so the rules above hold
for them unchanged: the latency a group of ``n`` products adds to the timeline is **zero
cycles**, and an isolated OS tile takes ``ceil(K / n) + 2R + C − 2`` cycles (the RTL bench
checks both at every output).

Block-scaled formats (MX, ``core.array.block_scale = "pe"``): the RTL's block-scaled PE
(``mx``, four MXFP8 elements a step, ``n`` = 4) sums each K-block's products exactly and, in the
step that closes the block, applies the two E8M0 scales (an exponent add), rounds once and adds
the block's dot to its FP32 accumulator, all in that step's cycle. So the block-scale path adds
:data:`BLOCK_SCALE_EXTRA_CYCLES` = **0** cycles to the timeline, per block and per tile (the
engine adds nothing for ``block_scale = "pe"``; the RTL bench adds this constant to every
predicted output cycle of a block-scaled tile, so the two are one statement).

The rules are stated once, as the small scalar functions in "The recurrences" below
(:func:`os_last_step`, :func:`os_last_output`, :func:`ws_weight_load`, :func:`ws_first_row`,
:func:`ws_row_output`, :func:`os_period`, :func:`ws_period`). The contract functions here
(used by the RTL bench), the Numba engine (:mod:`diptych.sim.engine` compiles these same
functions) and the mapper's closed forms all call them, so changing the contract here changes
every prediction. The module imports nothing but the standard library (the RTL bench imports
it without Numba). To run the engine on a perturbed contract, set ``NUMBA_DISABLE_JIT=1`` in a
fresh process and replace the function here before importing :mod:`diptych.sim.engine` (the
engine binds them at import); tests/sim/test_timing_once.py does this.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Cycles the PE's block-scale path (scale, round, accumulate in the block-closing step) adds to
#: an OS tile's outputs: zero, the RTL's ``mx`` PE does it in the closing step's cycle.
BLOCK_SCALE_EXTRA_CYCLES = 0

__all__ = [
    "BLOCK_SCALE_EXTRA_CYCLES", "os_isolated_cycles", "ws_isolated_cycles", "os_period", "ws_period",
    "os_output_cycles", "ws_output_cycles", "os_schedule", "ws_schedule",
    "os_sequence_cycles", "ws_sequence_cycles",
    "os_last_step", "os_last_output", "os_row_output", "ws_weight_load", "ws_first_row",
    "ws_row_output", "os_fold_steps", "ws_fold_rows", "ws_install_cycles",
]


# ---------------------------------------------------------------------------------------------
# The recurrences: pure integer functions of scalars (the kernels compile them with
# sim.jit.compile_pure, which lets them call one another)

#: The functions kernels may compile (they call only one another).
KERNEL_FUNCTIONS = ("os_fold_steps", "ws_fold_rows", "os_last_step", "os_row_output",
                    "os_last_output", "os_period", "ws_install_cycles", "ws_weight_load",
                    "ws_first_row", "ws_row_output", "ws_period")


def os_fold_steps(k: int, num: int, den: int) -> int:
    """OS: the steps (cycles with ``in_valid``) of a fold of depth ``k`` on PEs consuming
    ``num/den`` K-steps per cycle (a PE doing ``n`` MACs per cycle, ``n = num/den`` in lowest
    terms): ``ceil(k · den / num)``. Each step carries ``n`` consecutive k (``n`` ≥ 1) or
    lasts ``1/n`` cycles (``n`` < 1, multi-pass modes)."""
    return -(-k * den // num)


def ws_fold_rows(m: int, num: int, den: int) -> int:
    """WS: the cycles in which a fold streams its ``m`` rows at ``num/den`` ≤ 1 rows per cycle
    (a multi-pass mode presents each row for ``den/num`` cycles): ``ceil(m · den / num)``."""
    return -(-m * den // num)


def os_last_step(first: int, k: int, prev_last: int, rows: int) -> int:
    """OS: the last-step cycle of a tile of ``k`` steps offered from cycle ``first`` (which must
    be after ``prev_last``, the previous tile's last step): its steps run back to back, and
    the drain register holds the previous results for R cycles, so ``L ≥ prev_last + R``."""
    return max(first + k - 1, prev_last + rows)


def os_row_output(last: int, rows: int, cols: int, i: int) -> int:
    """OS: the cycle in which output row ``i`` (0 = top) of a tile whose last step was in
    cycle ``last`` appears: ``last + R + C − 1 + (R − 1 − i)``, bottom row first."""
    return last + rows + cols - 1 + (rows - 1 - i)


def os_last_output(last: int, rows: int, cols: int) -> int:
    """OS: the cycle of a tile's last output (its top row)."""
    return os_row_output(last, rows, cols, 0)


def ws_install_cycles(rows: int, load_rows_per_cycle: int = 1) -> int:
    """WS: the cycles a tile's weight load takes when ``load_rows_per_cycle`` (``p``) rows of
    weights are written per cycle: ``ceil(R / p)`` (R for the systolic shift-in, ``p = 1``)."""
    return -(-rows // load_rows_per_cycle)


def ws_weight_load(prev_first: int, rows: int, cols: int, wave: int = 1) -> int:
    """WS: the earliest weight load after a tile whose first row was in ``prev_first``.
    ``wave = 1`` (the systolic swap wave): once that tile's swap wave has left the array,
    ``prev_first + R + C − 2``; ``wave = 0`` (every PE switches at once when the tile's first
    row enters): in that cycle, ``prev_first``."""
    return prev_first + (rows + cols - 2) * wave


def ws_first_row(load: int, prev_last: int, rows: int, load_rows_per_cycle: int = 1) -> int:
    """WS: the earliest first row of a tile whose weights load from cycle ``load``: after the
    load (``ws_install_cycles``: R cycles at one row per cycle) and after the previous tile's
    last row ``prev_last``."""
    return max(load + ws_install_cycles(rows, load_rows_per_cycle), prev_last + 1)


def ws_row_output(row: int, rows: int, cols: int) -> int:
    """WS: the cycle in which a row presented in cycle ``row`` leaves the array."""
    return row + rows + cols - 1


def _check_dims(rows: int, cols: int) -> None:
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, not {v!r}")


def _check_install(load_rows_per_cycle: int, wave: int) -> None:
    p = load_rows_per_cycle
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"load_rows_per_cycle must be a positive integer, not {p!r}")
    if wave not in (0, 1):
        raise ValueError(f"wave must be 1 (swap wave) or 0 (global swap), not {wave!r}")


def os_isolated_cycles(rows: int, cols: int, k: int) -> int:
    """Cycles of one OS tile alone: first step presented in cycle 0 to last output, inclusive."""
    return os_last_output(k - 1, rows, cols) + 1


def ws_isolated_cycles(rows: int, cols: int, m: int, load_rows_per_cycle: int = 1) -> int:
    """Cycles of one WS tile alone: weight load from cycle 0 to last output, inclusive."""
    return ws_row_output(ws_first_row(0, -1, rows, load_rows_per_cycle) + m - 1, rows, cols) + 1


def os_period(rows: int, k: int) -> int:
    """Steady-state cycles between back-to-back OS tiles of depth ``k``: the last steps of
    consecutive tiles are ``os_last_step(L + 1, k, L, R) − L`` apart."""
    return os_last_step(1, k, 0, rows)


def ws_period(rows: int, cols: int, m: int, load_rows_per_cycle: int = 1, wave: int = 1) -> int:
    """Steady-state cycles between back-to-back WS tiles of ``m`` streamed rows: the first rows
    of consecutive tiles are ``ws_first_row(ws_weight_load(s, R, C), s + m − 1, R) − s`` apart
    (with the install path's ``p`` and ``wave``)."""
    return ws_first_row(ws_weight_load(0, rows, cols, wave), m - 1, rows, load_rows_per_cycle)


def os_output_cycles(rows: int, cols: int, step_cycles: Sequence[Sequence[int]]) -> list[list[int]]:
    """Predict when each OS tile's output rows appear.

    ``step_cycles[t][k]`` is the cycle in which step ``k`` of tile ``t`` is presented (ragged
    tiles simply have fewer steps; a tile using fewer rows or columns keeps the same timeline).
    Returns ``out[t][i]``: the cycle in which output row ``i`` (0 = top) of tile ``t`` appears.
    Raises ValueError if the presentation breaks an issue rule.
    """
    _check_dims(rows, cols)
    out: list[list[int]] = []
    prev_last = None
    for t, steps in enumerate(step_cycles):
        if len(steps) == 0:
            raise ValueError(f"tile {t} has no steps")
        for k in range(1, len(steps)):
            if steps[k] <= steps[k - 1]:
                raise ValueError(f"tile {t}: step {k} presented in cycle {steps[k]}, "
                                 f"not after step {k - 1} (cycle {steps[k - 1]})")
        if steps[0] < 0:
            raise ValueError(f"tile {t}: step 0 presented in negative cycle {steps[0]}")
        last = steps[-1]
        if prev_last is not None:
            if steps[0] <= prev_last:
                raise ValueError(f"tile {t}: first step in cycle {steps[0]} overlaps the previous "
                                 f"tile, whose last step was in cycle {prev_last}")
            if last < os_last_step(steps[0], 1, prev_last, rows):
                raise ValueError(f"tile {t}: last step in cycle {last} is less than R={rows} "
                                 f"cycles after the previous tile's ({prev_last})")
        out.append([os_row_output(last, rows, cols, i) for i in range(rows)])
        prev_last = last
    return out


def os_schedule(rows: int, cols: int, k_per_tile: Sequence[int], start: int = 0) -> list[list[int]]:
    """Earliest legal presentation cycles for back-to-back OS tiles of the given depths."""
    _check_dims(rows, cols)
    sched: list[list[int]] = []
    prev_last = None
    for t, k in enumerate(k_per_tile):
        if k < 1:
            raise ValueError(f"tile {t}: k must be >= 1, not {k!r}")
        if prev_last is None:
            first = start
        else:   # steps back to back, ending at the earliest legal last step
            first = os_last_step(prev_last + 1, k, prev_last, rows) - (k - 1)
        sched.append(list(range(first, first + k)))
        prev_last = first + k - 1
    return sched


def os_sequence_cycles(rows: int, cols: int, k_per_tile: Sequence[int]) -> int:
    """Total cycles (cycle 0 to the last output, inclusive) of back-to-back OS tiles."""
    last = -1
    for t, k in enumerate(k_per_tile):
        last = k - 1 if t == 0 else os_last_step(last + 1, k, last, rows)
    return os_last_output(last, rows, cols) + 1


def ws_output_cycles(rows: int, cols: int, weight_load_cycles: Sequence[int],
                     row_cycles: Sequence[Sequence[int]], load_rows_per_cycle: int = 1,
                     wave: int = 1) -> list[list[int]]:
    """Predict when each WS tile's output rows leave the array.

    ``weight_load_cycles[t]`` is the first of the R cycles (``ws_install_cycles``) in which
    tile ``t``'s weights are shifted in; ``row_cycles[t][m]`` the cycle in which row ``m`` of A
    is presented. ``load_rows_per_cycle`` and ``wave``: the install path (module docstring).
    Returns ``out[t][m]`` = the cycle in which output row ``m`` of tile ``t`` leaves.
    Raises ValueError if an issue rule is broken.
    """
    _check_dims(rows, cols)
    _check_install(load_rows_per_cycle, wave)
    inst = ws_install_cycles(rows, load_rows_per_cycle)
    if len(weight_load_cycles) != len(row_cycles):
        raise ValueError("weight_load_cycles and row_cycles must have one entry per tile")
    out: list[list[int]] = []
    prev_first = prev_last = None
    for t, (w, srows) in enumerate(zip(weight_load_cycles, row_cycles)):
        if len(srows) == 0:
            raise ValueError(f"tile {t} has no rows")
        if w < 0:
            raise ValueError(f"tile {t}: weight load in negative cycle {w}")
        for m in range(1, len(srows)):
            if srows[m] <= srows[m - 1]:
                raise ValueError(f"tile {t}: row {m} presented in cycle {srows[m]}, "
                                 f"not after row {m - 1} (cycle {srows[m - 1]})")
        if srows[0] < w + inst:
            raise ValueError(f"tile {t}: first row in cycle {srows[0]} before its weights are "
                             f"loaded (load starts {w}, takes {inst} cycles)")
        if prev_first is not None:
            earliest = ws_weight_load(prev_first, rows, cols, wave)
            if w < earliest:
                what = "swap wave left the array" if wave else "weights were swapped in"
                raise ValueError(f"tile {t}: weight load in cycle {w} before the previous tile's "
                                 f"{what} (cycle {earliest})")
            if srows[0] <= prev_last:
                raise ValueError(f"tile {t}: first row in cycle {srows[0]} overlaps the previous "
                                 f"tile's last row (cycle {prev_last})")
        out.append([ws_row_output(s, rows, cols) for s in srows])
        prev_first, prev_last = srows[0], srows[-1]
    return out


def ws_schedule(rows: int, cols: int, m_per_tile: Sequence[int], start: int = 0,
                load_rows_per_cycle: int = 1, wave: int = 1) -> tuple[list[int], list[list[int]]]:
    """Earliest legal (weight-load cycles, row cycles) for back-to-back WS tiles."""
    _check_dims(rows, cols)
    _check_install(load_rows_per_cycle, wave)
    loads: list[int] = []
    sched: list[list[int]] = []
    prev_first = prev_last = None
    for t, m in enumerate(m_per_tile):
        if m < 1:
            raise ValueError(f"tile {t}: m must be >= 1, not {m!r}")
        if prev_first is None:
            w = start
            first = ws_first_row(w, start - 1, rows, load_rows_per_cycle)
        else:
            w = ws_weight_load(prev_first, rows, cols, wave)
            first = ws_first_row(w, prev_last, rows, load_rows_per_cycle)
        loads.append(w)
        sched.append(list(range(first, first + m)))
        prev_first, prev_last = first, first + m - 1
    return loads, sched


def ws_sequence_cycles(rows: int, cols: int, m_per_tile: Sequence[int],
                       load_rows_per_cycle: int = 1, wave: int = 1) -> int:
    """Total cycles (cycle 0 to the last output, inclusive) of back-to-back WS tiles."""
    first = last = None
    p = load_rows_per_cycle
    for m in m_per_tile:
        f = (ws_first_row(0, -1, rows, p) if first is None else
             ws_first_row(ws_weight_load(first, rows, cols, wave), last, rows, p))
        first, last = f, f + m - 1
    return ws_row_output(last, rows, cols) + 1


def os_steps(k: int, macs_per_pe_per_cycle: float = 1) -> int:
    """Steps (cycles with ``in_valid``) of an OS tile of depth ``k`` on PEs doing
    ``macs_per_pe_per_cycle`` MACs per cycle: ``ceil(k / n)`` (each step carries ``n``
    consecutive k); the rules above then apply to the steps."""
    from fractions import Fraction

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, not {k!r}")
    n = Fraction(macs_per_pe_per_cycle).limit_denominator(1024)  # exact: arch.chip.check_rate
    if n <= 0:
        raise ValueError(f"macs_per_pe_per_cycle must be > 0, not {macs_per_pe_per_cycle!r}")
    return os_fold_steps(k, n.numerator, n.denominator)


def ws_stationary_depth(rows: int, macs_per_pe_per_cycle: float = 1) -> int:
    """K-depth of one WS stationary tile: ``rows · max(1, floor(n))`` (a PE doing ``n`` ≥ 1
    MACs per cycle holds ``n`` consecutive weights of its column)."""
    _check_dims(rows, 1)
    if macs_per_pe_per_cycle <= 0:
        raise ValueError(f"macs_per_pe_per_cycle must be > 0, not {macs_per_pe_per_cycle!r}")
    return rows * max(1, int(macs_per_pe_per_cycle))


__all__ += ["os_steps", "ws_stationary_depth"]
