"""The power-limited clock of a serving step (issue 21 item 1).

A serving engine's steps last milliseconds to a few hundred milliseconds: each is one window
of the GPU's power limiter. When a step's average power per chip (its device energy over its
device time, the draft model's share included) is above the chip's TDP (a chip with a
``[power]`` table), the step runs at the clock the TDP sustains
(:func:`~diptych.arch.power.sustained_clock`, the step's power above the static floor taken as
core power scaling with ``f·V(f)²``), and its time stretches by the clock ratio: exact for a
compute-bound step, the kind that draws such power (a large prefill chunk); a memory-bound
step slows less but never gets there. Its core energy scales with ``(V(f')/V(f))²``, its
static energy with the longer time, so the stretched step draws exactly the TDP. The step
oracles (grid or direct) stay at the nominal clock; the limit is applied to each step's cost
as the engine runs it. By component (:meth:`StepPowerLimit.limit`), as the total: every
component but ``static`` scales with ``(V(f')/V(f))²`` (the step's power above the static
floor is all taken as core power, DRAM and links included), and ``static`` takes the rest.
``Scenario(power_limit=False)`` or a variant with ``no_power_limit`` (``--ideal``, the
waterfall's levels) leaves it out.
"""

from __future__ import annotations

from ...arch.power import TDP_TOLERANCE, core_energy_scale, sustained_clock
from ..energy_parts import STATIC


class StepPowerLimit:
    """Applies the limit to one instance's steps and counts what it did: ``steps`` stretched,
    the lowest clock (GHz), the seconds added, and ``unsustainable`` steps (not even the
    lowest clock fits: kept at the nominal clock)."""

    def __init__(self, chip):
        self.chip = chip
        self.steps = 0
        self.unsustainable = 0
        self.min_clock_ghz = chip.clock_ghz
        self.added_s = 0.0

    def __call__(self, seconds: float, energy_j: float) -> tuple[float, float]:
        """(seconds, energy per chip) of a step after the limit (module docstring)."""
        return self.limit(seconds, energy_j)[:2]

    def limit(self, seconds: float, energy_j: float, parts: tuple = ()
              ) -> tuple[float, float, tuple]:
        """(seconds, energy per chip, the energy by component) of a step after the limit;
        ``parts`` is the step's energy by component (a
        :data:`~diptych.sim.energy_parts.VECTOR`; empty: none, returned empty)."""
        chip = self.chip
        if chip.power is None or seconds <= 0:
            return seconds, energy_j, parts
        p = energy_j / seconds
        if p <= chip.tdp_w * (1 + TDP_TOLERANCE):
            return seconds, energy_j, parts
        try:
            f = sustained_clock(chip, energy_j, seconds)
        except ValueError:
            self.unsustainable += 1
            return seconds, energy_j, parts
        v2 = core_energy_scale(chip, f)
        static = min(chip.energy.static_w, p) * seconds
        new_s = seconds * chip.clock_ghz / f
        new_e = (energy_j - static) * v2 + static / seconds * new_s
        self.steps += 1
        self.min_clock_ghz = min(self.min_clock_ghz, f)
        self.added_s += new_s - seconds
        if parts:
            scaled = [x * v2 for x in parts]
            scaled[STATIC] = 0.0
            scaled[STATIC] = new_e - sum(scaled)    # static takes the rest (module docstring)
            parts = tuple(scaled)
        return new_s, new_e, parts
