"""What a chip's on-chip memories offer the residency planner: bytes and tensor kinds.

:func:`capacities` is the scratchpads of all cores together (``tensor_cores × capacity``) and
the shared buffer, each less the ``[residency] reserve_fraction`` kept for the engine's tiles,
with the tensor kinds each may hold (docs/program.md, "Residency"). The planner
(:mod:`diptych.sim.program.residency`) fills them; the engine's entry points use them to
check that an all-SRAM chip's operands fit (:func:`diptych.sim.api.on_chip_gemm`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capacities:
    """Bytes the planner may fill in each on-chip memory, and the kinds each may hold.
    ``dram``: False for an all-SRAM chip (everything must fit on chip). ``dram_bytes``: the
    first DRAM's capacity when the chip has a second tier (``[dram2]``): what it cannot hold
    lives in the second; 0 = one DRAM of unlimited room (the planner's view without a tier).
    ``tier2_kinds``: tensor kinds placed in the second tier whatever room the first has (a
    training run's offload, :mod:`diptych.sim.run.offload`; only with ``dram_bytes``).
    ``dram2_bytes``: the second tier's capacity when the chip has a third (``[dram3]``): what
    neither of the first two holds lives in the third; 0 = no third tier (the second's room
    unlimited to the planner, as before the third tier existed)."""

    scratchpad: int
    shared_buffer: int = 0
    scratchpad_kinds: frozenset = frozenset()
    shared_buffer_kinds: frozenset = frozenset()
    dram: bool = True
    dram_bytes: int = 0
    tier2_kinds: frozenset = frozenset()
    dram2_bytes: int = 0

    def __post_init__(self):
        for n in ("scratchpad", "shared_buffer", "dram_bytes", "dram2_bytes"):
            v = getattr(self, n)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"capacities.{n} must be an integer number of bytes >= 0, "
                                 f"not {v!r}")
        object.__setattr__(self, "scratchpad_kinds", frozenset(self.scratchpad_kinds))
        object.__setattr__(self, "shared_buffer_kinds", frozenset(self.shared_buffer_kinds))
        object.__setattr__(self, "tier2_kinds", frozenset(self.tier2_kinds))
        if self.tier2_kinds and not self.dram_bytes:
            raise ValueError(f"capacities.tier2_kinds ({', '.join(sorted(self.tier2_kinds))}) "
                             f"need a second DRAM tier (dram_bytes > 0)")
        if self.dram2_bytes and not self.dram_bytes:
            raise ValueError(f"capacities.dram2_bytes ({self.dram2_bytes}) needs a second DRAM "
                             f"tier (dram_bytes > 0)")


def capacities(chip, *, reserve_fraction: float | None = None,
               tier2_kinds: frozenset = frozenset()) -> Capacities:
    """The residency capacities of ``chip`` (see the module docstring); ``reserve_fraction``
    overrides the chip's ``[residency]`` value; ``tier2_kinds``: tensor kinds the second DRAM
    tier holds whatever room the first has (ValueError on a chip without ``[dram2]``)."""
    pol = chip.residency_policy
    r = pol.reserve_fraction if reserve_fraction is None else reserve_fraction
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < 1:
        raise ValueError(f"reserve_fraction must be in [0, 1), not {r!r}")
    sp = chip.tensor_cores * chip.core.scratchpad.capacity_bytes
    sb = chip.shared_buffer.capacity_bytes if chip.shared_buffer is not None else 0
    return Capacities(scratchpad=int(sp * (1 - r)), shared_buffer=int(sb * (1 - r)),
                      scratchpad_kinds=pol.scratchpad_kinds,
                      shared_buffer_kinds=pol.shared_buffer_kinds if sb else (),
                      dram=chip.has_dram,
                      dram_bytes=(chip.dram.capacity_bytes
                                  if getattr(chip, "dram2", None) is not None else 0),
                      tier2_kinds=tier2_kinds,
                      dram2_bytes=(chip.dram2.capacity_bytes
                                   if getattr(chip, "dram3", None) is not None else 0))
