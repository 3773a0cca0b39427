"""The roofline regime of an op or a run: what ``bound`` means in every output (issue 23).

An architect reads "compute-bound" as "running near the compute roof" and "memory-bound" as
"running near the memory roof". So ``bound`` is computed from the work against the chip's
roofs, not from whichever engine unit was busiest:

* ``compute_fraction`` = time the op's work needs at the compute roof (its MACs at the
  chip's peak for the op's dtype, or a vector op's ALU work at the vector unit's peak) ÷ the
  time it took;
* ``memory_fraction`` = time its DRAM bytes need at the memory roof (the DRAM's peak
  bandwidth, or the on-chip network's cap on DRAM traffic where that is lower) ÷ the time it
  took.

The op is ``"compute"``- or ``"memory"``-bound by the larger of the two when that one is at
least :data:`ROOF_FLOOR`; when neither roof explains half of the time the op is
``"latency"``-bound (latency and overheads: pipeline fill and drain, weight installs into the
arrays, tile and wave quantisation, on-chip transfers, a DRAM stream too short to reach its
rate). Collectives are ``"communication"``-bound. A run is bound by the regime its ops spent
the most time in (``communication``: the exposed part of its collectives).

The engine's busiest unit, which is a different question (what to make faster in *this*
design), is reported under its own name: :func:`busiest_unit`.
"""

from __future__ import annotations

from .fabric import fabric

#: The regimes, in the order outputs list them.
REGIMES: tuple[str, ...] = ("compute", "memory", "communication", "latency")

#: Fraction of an op's time that the nearer roof must explain for the op to be bound by it.
#: [convention] half: an op at under half of both roofs is mostly spent on something else.
ROOF_FLOOR = 0.5


def regime(compute_fraction: float, memory_fraction: float) -> str:
    """``"compute"``, ``"memory"`` or ``"latency"`` for an op whose work needs
    ``compute_fraction`` of its time at the compute roof and ``memory_fraction`` at the DRAM
    roof (module docstring). Ties go to compute."""
    if not (compute_fraction >= 0.0 and memory_fraction >= 0.0):
        raise ValueError(f"roof fractions must be >= 0, got compute {compute_fraction!r}, "
                         f"memory {memory_fraction!r}")
    if max(compute_fraction, memory_fraction) < ROOF_FLOOR:
        return "latency"
    return "compute" if compute_fraction >= memory_fraction else "memory"


def busiest_unit(occupancy: dict[str, float]) -> dict:
    """The busiest of an op's or a run's units: ``{"unit": name, "occupancy": fraction}``
    from ``occupancy`` (unit → fraction of the time it was busy; e.g. ``array`` counts weight
    installs and fill as busy, unlike MAC utilisation). Ties go to the first listed; an empty
    mapping gives ``{"unit": None, "occupancy": 0.0}``."""
    best, share = None, 0.0
    for unit, f in occupancy.items():
        if best is None or f > share:
            best, share = unit, float(f)
    return {"unit": best, "occupancy": share}


def memory_roof_bytes_per_s(chip) -> float:
    """The chip's memory roof: its DRAM pins' peak, or the on-chip network's or die-to-die
    cap on DRAM traffic when that is lower (:mod:`~diptych.sim.fabric`); 0 without DRAM."""
    if not chip.has_dram:
        return 0.0
    return min(chip.dram_bytes_per_s, fabric(chip).dram_cap_bytes_per_s)


def roof_regime(chip, *, seconds: float, mac_flops: float = 0.0, dtype: str | None = None,
                vector_ops: float = 0.0, dram_bytes: float = 0.0) -> str:
    """:func:`regime` of work that took ``seconds`` on ``chip``: ``mac_flops`` on the arrays
    at the chip's peak for ``dtype``, ``vector_ops`` on the vector units at theirs (the two
    units run side by side: the slower roof counts), ``dram_bytes`` at the memory roof
    (:func:`memory_roof_bytes_per_s`; none on a chip without DRAM). Zero time is
    ``"latency"``."""
    if not seconds > 0.0:
        return "latency"
    t_mac = mac_flops / chip.peak_ops_per_s[dtype] if mac_flops else 0.0
    t_vec = vector_ops / chip.vector_ops_per_s if vector_ops else 0.0
    t_mem = dram_bytes / memory_roof_bytes_per_s(chip) if dram_bytes and chip.has_dram else 0.0
    return regime(max(t_mac, t_vec) / seconds, t_mem / seconds)
