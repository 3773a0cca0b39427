"""The power-limited clock of a cluster step (issue 21 item 1).

A GPU's power limiter holds the board to its TDP over windows of tens of milliseconds
(nvidia-smi's power limit, enforced by the board's firmware by lowering the SM clock), far
shorter than a training step or a pipeline bubble. So what must stay within the TDP is not the
step's average but each chip's power **while its ops run**: per pipeline stage, the compute
and optimizer joules of one rank over their seconds (:func:`~.energy.busy_power_w`, in each
``stage_seconds`` entry as ``busy_power_w``). When the hottest stage is above the TDP of a chip
with a ``[power]`` table, :func:`limit_step_power` re-runs the whole step on the chip at a
lower clock (:func:`~diptych.arch.power.chip_at_clock`: the core's energies per event scaled by
``(V(f')/V(f))²``, DRAM, link and static figures unchanged) until that stage is within it:

1. the first clock assumes the busy power is core power above the static floor scaling as
   ``f·V(f)²`` (:func:`~diptych.arch.power.sustained_clock`); DRAM and links do not slow
   down with the clock, so that guess is too high and the step is still above the TDP;
2. each further clock solves the busy power on a two-term model fitted to the nominal step
   and the latest re-run (:func:`_fitted_clock`: the core's share scaling as ``f·V(f)²``,
   DRAM and links as ``f``, aiming at the middle of the :data:`SETTLE` band under the TDP;
   the secant through the last two points where the fit is degenerate), at least 0.1 %
   below the last clock, never below ``min_clock_ghz``, until one is within the TDP (+0.1 %);
3. a clock within the TDP whose busy power is more than :data:`SETTLE` below it is refined
   the same way inside the bracket it forms with the lowest clock above the TDP, up to
   :data:`MAX_PASSES` re-runs in all; the highest clock within the TDP is the one reported.

Every chip of the step runs at that clock (the pipeline waits for its slowest stage; a colder
stage gains nothing from its own higher clock but the energy, not modelled). MFU and HFU stay
relative to the nominal peak; ``info["power_limit"]`` says what was done. The whole-step
average power may well be below the TDP while a stage's busy power is above it.
"""

from __future__ import annotations

import dataclasses
import warnings as _warnings
from typing import Callable

from ...arch.power import (TDP_TOLERANCE, PowerSplit, chip_at_clock, core_energy_scale,
                           power_table, sustained_clock)

#: Re-runs of the step at most (each is a whole step at a new clock).
MAX_PASSES = 6
#: A clock within the TDP is kept once its busy power is at most this fraction below the TDP
#: (else the clock is refined between it and the lowest clock above the TDP): the GH100 held
#: 688-692 W under its 700 W limit through seconds of GEMMs, 1.1-1.7 % below it [M:
#: benchmarks/gpu/h200-2026-12-04/sustain.json, the energy counter and NVML].
SETTLE = 0.02


def hottest_busy_power_w(res) -> float:
    """The highest ``busy_power_w`` of ``res``'s stages (a cluster step's result), W."""
    return max((s.get("busy_power_w") or 0.0 for s in res.stage_seconds), default=0.0)


def _report(res, chip, clock_ghz: float, hot_w: float, passes: int, note: str):
    """``res`` (run at ``clock_ghz``) reported as a step of the nominal ``chip``."""
    scale = clock_ghz / chip.clock_ghz
    info = dict(res.info)
    info["power_limit"] = {"clock_ghz": clock_ghz, "nominal_clock_ghz": chip.clock_ghz,
                           "busy_power_w_nominal": hot_w,
                           "busy_power_w": hottest_busy_power_w(res),
                           "tdp_w": chip.tdp_w, "passes": passes}
    # (a re-run within the TDP carries no "not sustainable" warning of its own)
    return dataclasses.replace(res, mfu=res.mfu * scale, hfu=res.hfu * scale, info=info,
                               warnings=list(res.warnings) + [note])


def _fitted_clock(chip, pts: list, target_w: float) -> float | None:
    """The clock at which the busy power reaches ``target_w`` on a two-term model fitted to
    the nominal point and the latest re-run (``pts``: (clock GHz, busy W), the nominal clock
    first): :func:`~diptych.arch.power.power_at` of a :class:`~diptych.arch.power.PowerSplit`
    whose core and I/O watts are the two points' solution, solved by
    :func:`~diptych.arch.power.sustained_clock`. None when the fit is degenerate (a negative
    term, the two points at one clock) or the target lies below ``min_clock_ghz``."""
    (f0, p0), (f1, p1) = pts[0], pts[-1]
    if f1 >= f0:
        return None
    pace = f1 / f0
    core_pace = core_energy_scale(chip, f1) * pace
    if core_pace == pace:
        return None
    static = chip.energy.static_w
    core = ((p1 - static) - (p0 - static) * pace) / (core_pace - pace)
    io = p0 - static - core
    if core <= 0 or io < 0:
        return None
    try:
        return sustained_clock(dataclasses.replace(chip, tdp_w=target_w), 0.0, 1.0,
                               split=PowerSplit(core, io, static))
    except ValueError:
        return None


def limit_step_power(res, chip, rerun: Callable):
    """``res`` (a cluster step at ``chip``'s nominal clock) at the clock its hottest stage can
    sustain within the TDP (module docstring); ``rerun(chip_at_clock)`` runs the same step on
    another chip. Returns ``res`` itself when the chip has no ``[power]`` table or no stage
    is above the TDP; when not even ``min_clock_ghz`` gets it there, ``res`` with a warning
    saying so."""
    if getattr(chip, "power", None) is None or not res.seconds:
        return res
    tdp = chip.tdp_w
    hot = hottest_busy_power_w(res)
    if hot <= tdp * (1 + TDP_TOLERANCE):
        return res
    f_min = min(power_table(chip).min_clock_ghz, chip.clock_ghz)
    try:
        f = sustained_clock(chip, hot, 1.0)
    except ValueError:
        f = f_min
    pts = [(chip.clock_ghz, hot)]
    best = None          # (clock, power, result, pass) of the highest clock within the TDP
    for n in range(1, MAX_PASSES + 1):
        if best is None:
            f = max(f_min, min(f, pts[-1][0] * (1 - 1e-3)))
        cur = rerun(chip_at_clock(chip, f))
        p = hottest_busy_power_w(cur)
        pts.append((f, p))
        if p <= tdp * (1 + TDP_TOLERANCE) and (best is None or f > best[0]):
            best = (f, p, cur, n)
        if best is not None and best[1] >= tdp * (1 - SETTLE):
            break
        if best is None and f <= f_min * (1 + 1e-9):
            break
        model = _fitted_clock(chip, pts, tdp * (1 - SETTLE / 2))
        if best is None:
            (f1, p1), (f2, p2) = pts[-2], pts[-1]
            f = f2 + (tdp - p2) * (f2 - f1) / (p2 - p1) if p2 != p1 else f2 * 0.98
            if model is not None:
                f = model
        else:
            # bracketed between the best clock within the TDP and the lowest clock above it:
            # the fitted clock (else the secant), kept strictly inside the bracket
            f_hi, p_hi = min((q for q in pts if q[1] > tdp * (1 + TDP_TOLERANCE)),
                             key=lambda q: q[0])
            f_lo, p_lo = best[0], best[1]
            f = f_lo + (tdp - p_lo) * (f_hi - f_lo) / (p_hi - p_lo) if p_hi != p_lo else f_lo
            if model is not None:
                f = model
            f = min(max(f, f_lo + 0.1 * (f_hi - f_lo)), f_hi - 0.1 * (f_hi - f_lo))
    if best is not None:
        f, p, cur, n = best
        note = (f"{chip.name}: {hot:.0f} W per chip while its ops run at {chip.clock_ghz:g} "
                f"GHz exceeds the {tdp:.0f} W TDP: the step is reported at the "
                f"{f:.3g} GHz it can sustain ({p:.0f} W)")
        _warnings.warn(note, stacklevel=3)
        return _report(cur, chip, f, hot, n, note)
    note = (f"{chip.name}: {pts[-1][1]:.0f} W per chip while its ops run even at "
            f"{pts[-1][0]:.3g} GHz stays above the {tdp:.0f} W TDP (DRAM, link and static "
            f"power do not fall with the clock): reported at {chip.clock_ghz:g} GHz, a speed "
            f"the part cannot sustain")
    _warnings.warn(note, stacklevel=3)
    return dataclasses.replace(res, warnings=list(res.warnings) + [note])
