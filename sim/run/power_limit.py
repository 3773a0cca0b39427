"""Power as a limit on a simulated run: power-gated idle arrays and the TDP-sustainable clock.

For a chip with a ``[power]`` table (:mod:`diptych.arch.power`), :func:`apply_power_limit`
takes a finished run and

1. subtracts the static energy that power-gating saves on idle arrays (each op's arrays idle for
   (1 − utilisation) of its time; vector ops and the non-array parts of attention leave them
   fully idle; overlapped collectives are not counted);
2. when the average power per chip is still above the TDP, finds the clock the chip could
   sustain (:func:`~diptych.arch.power.sustained_clock`), re-runs the phase at that clock
   (``dataclasses.replace(chip, clock_ghz=...)``), scales the re-run's core energy (MACs,
   SRAM, vector) by (V(f')/V(f))², and repeats until the power is within the TDP (the clock
   estimate assumes time ∝ 1/clock; memory-bound ops slow down less, so a second pass may be
   needed). MFU and HFU stay relative to the nominal peak.

The result says what it did in ``info["power_limit"]`` and in a warning. Its
``energy_breakdown_j`` follows the total (:func:`finished_parts`): the gated static energy
comes off ``static``, the V² reduction off the core components (MAC, vector, SRAM, NoC) in
proportion to their joules; DRAM, D2D and links stay, as in the total.
"""

from __future__ import annotations

import dataclasses
import warnings as _warnings
from typing import Callable

from ...arch.power import (TDP_TOLERANCE, PowerSplit, core_energy_scale,
                           gated_static_savings_j, sustained_clock)
from .. import energy_parts as EP

MAX_PASSES = 6


def energy_split(chip, layers: list[dict]) -> dict[str, float]:
    """A run's per-chip energy by domain (J), from its op records: ``link`` (collectives),
    ``dram`` (DRAM bytes × pJ/bit, and the D2D hop they take), ``static`` (static W × op time) and ``core`` (the rest:
    MACs, SRAM, vector)."""
    from ..fabric import fabric

    e = chip.energy
    # the D2D PHYs are I/O like the DRAM's: their energy per byte does not fall with the core
    # voltage (the NoC's, on the core's supply, does)
    d2d_pj = fabric(chip).d2d_pj_per_dram_byte
    out = {"core": 0.0, "dram": 0.0, "link": 0.0, "static": 0.0}
    for r in layers:
        n = r.get("repeat", 1)
        total = (r.get("energy_j") or 0.0) * n
        if r.get("bound") == "communication":
            out["link"] += total
            continue
        nbytes = r.get("dram_bytes") or 0.0
        dram = nbytes * 8 * e.pj_per_dram_bit * 1e-12 * n + nbytes * d2d_pj * 1e-12 * n
        static = e.static_w * (r.get("seconds") or 0.0) * n
        out["dram"] += dram
        out["static"] += static
        out["core"] += max(0.0, total - dram - static)
    return out


def _array_ops(layers: list[dict]) -> list[dict]:
    out = []
    for r in layers:
        if r.get("bound") == "communication":
            continue
        u = r.get("utilization") if r.get("kind") in ("gemm", "attention") else 0.0
        out.append({"seconds": r.get("seconds") or 0.0, "utilization": u,
                    "repeat": r.get("repeat", 1)})
    return out


def finished_parts(parts: dict[str, float], chips: int, core_reduction_j: float,
                   gated_j: float) -> dict[str, float]:
    """A run's ``energy_breakdown_j`` (all ``chips``) after the re-costing of
    :func:`_finish`, which takes ``core_reduction_j`` (the core energy's V² saving) and
    ``gated_j`` (the static energy power-gating saves) off each chip's total: the first off
    the core components in proportion (:func:`~diptych.sim.energy_parts.with_core_reduced`),
    the second off ``static`` (and, past what ``static`` holds, off ``other``: a stand-in
    timer's ops keep their static energy there). The parts still sum to the re-costed
    total. Empty ``parts`` (a result without a breakdown) stay empty."""
    if not parts:
        return {}
    per_chip = EP.with_core_reduced(EP.scaled(parts, 1.0 / chips), core_reduction_j)
    static = per_chip.get("static", 0.0)
    beyond = min(max(0.0, gated_j - static), per_chip.get(EP.OTHER, 0.0))
    per_chip["static"] = static - (gated_j - beyond)
    if beyond:
        per_chip[EP.OTHER] -= beyond
    return EP.scaled(per_chip, chips)


def _finish(res, chip, nominal, clock_ghz: float, rerun_res=None, note: str | None = None):
    """``res`` (or the re-run) with the gated, V²-scaled energy and derived figures."""
    base = rerun_res or res
    n = base.chips
    split = energy_split(chip, base.layers)
    v2 = core_energy_scale(nominal, clock_ghz)
    saved = gated_static_savings_j(chip, _array_ops(base.layers))
    per_chip = base.energy_j / n - split["core"] * (1.0 - v2) - saved
    scale = nominal.clock_ghz / clock_ghz
    energy = per_chip * n
    tokens = base.energy_j / base.energy_j_per_token if base.energy_j_per_token else 0.0
    info = dict(base.info)
    info["power_limit"] = {"clock_ghz": clock_ghz, "nominal_clock_ghz": nominal.clock_ghz,
                           "gated_static_saved_j": saved * n,
                           "core_energy_scale": v2,
                           "power_w_per_chip": per_chip / base.seconds if base.seconds else None,
                           "tdp_w": nominal.tdp_w}
    warns = list(base.warnings) + ([note] if note else [])
    return dataclasses.replace(
        base, chip=nominal.name, energy_j=energy,
        energy_breakdown_j=finished_parts(base.energy_breakdown_j, n,
                                          split["core"] * (1.0 - v2), saved),
        energy_j_per_token=energy / tokens if tokens else base.energy_j_per_token,
        mfu=base.mfu / scale, hfu=base.hfu / scale, info=info, warnings=warns)


def apply_power_limit(res, chip, rerun: Callable):
    """``res`` with power gating and the TDP clock limit applied (see the module docstring);
    ``rerun(chip_at_clock)`` runs the same phase on another chip without power limits. Returns
    ``res`` unchanged for a chip without a ``[power]`` table."""
    if getattr(chip, "power", None) is None or not res.seconds:
        return res
    nominal = out = _finish(res, chip, chip, chip.clock_ghz)
    clock = chip.clock_ghz
    cur = res
    for _ in range(MAX_PASSES + 1):
        p = out.energy_j / out.chips / out.seconds
        if p <= chip.tdp_w * (1 + TDP_TOLERANCE):
            return out
        if _ == MAX_PASSES:
            break
        split = energy_split(chip, cur.layers)
        run_chip = dataclasses.replace(chip, clock_ghz=clock)
        v2 = core_energy_scale(chip, clock)
        secs = cur.seconds
        saved = gated_static_savings_j(chip, _array_ops(cur.layers))
        ps = PowerSplit(split["core"] * v2 / secs, (split["dram"] + split["link"]) / secs,
                        max(0.0, split["static"] - saved) / secs)
        try:
            new = sustained_clock(run_chip, out.energy_j / out.chips, secs, split=ps)
        except ValueError as exc:  # not even the lowest clock fits: report, keep the run
            return dataclasses.replace(out, warnings=list(out.warnings) + [str(exc)])
        if new >= clock * (1 - 1e-6):
            new = clock * 0.98  # the estimate assumed time ∝ 1/clock; step down regardless
        clock = new
        cur = rerun(dataclasses.replace(chip, clock_ghz=clock, power=None))
        hot = res.energy_j / res.chips / res.seconds
        note = (f"{chip.name}: {hot:.0f} W at {chip.clock_ghz:g} GHz exceeds the "
                f"{chip.tdp_w:.0f} W TDP: reported at the {clock:.3g} GHz it can sustain")
        out = _finish(res, chip, chip, clock, rerun_res=cur, note=note)
        if out.energy_j / out.chips / out.seconds <= chip.tdp_w * (1 + TDP_TOLERANCE):
            _warnings.warn(note, stacklevel=3)
    note = (f"{chip.name}: {p:.0f} W even at {clock:.3g} GHz stays above the {chip.tdp_w:.0f} W "
            f"TDP (DRAM, link and static power do not fall with the clock): reported at "
            f"{chip.clock_ghz:g} GHz, a speed the part cannot sustain")
    _warnings.warn(note, stacklevel=3)
    return dataclasses.replace(nominal, warnings=list(nominal.warnings) + [note])
