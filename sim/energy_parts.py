"""Energy by component: what a run's, a cluster step's and a serving run's joules are made of.

Every result that reports an ``energy_j`` also reports ``energy_breakdown_j``: the same
joules by the component that spends them (the blocks of
:func:`diptych.arch.energy.energy_breakdown_j`, in display order):

* ``mac``:    the MAC arrays (MACs × pJ per MAC of their precision);
* ``vector``: the vector units (their ops × pJ per op);
* ``sram``:   scratchpad and shared-buffer bytes × pJ per byte;
* ``dram``:   DRAM bytes × 8 × pJ per bit (device, PHY and controller);
* ``noc``:    the on-chip network (a chip with a ``[noc]`` table);
* ``d2d``:    the die-to-die hop of DRAM bytes (a multi-die ``[package]``);
* ``link``:   chip-to-chip links (collectives, pipeline sends, KV transfers);
* ``static``: leakage and idle clocking over the time charged (ops, launches, bubbles, idle).

**Contract**: in joules, in the same scope as the ``energy_j`` beside it (all chips of a run,
the whole cluster's step, a serving run's every chip); every key of :data:`COMPONENTS` is
present (0.0 where the chip lacks the block or the run did not use it), and the values sum to
that ``energy_j`` (to rounding, ~1e-12 relative). An ``other`` key appears only when an op
timer gave no breakdown (a stand-in for :func:`diptych.sim.simulate` whose stats lack
``energy_breakdown``): its energy is kept there so that the sum still holds.

Nothing here computes energy: the engine's per-op breakdowns are carried through the same
arithmetic as the totals (repeats, fusion, re-costing), so no total moves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: The components, in display order (module docstring).
COMPONENTS: tuple[str, ...] = ("mac", "vector", "sram", "dram", "noc", "d2d", "link",
                               "static")
#: The components on the core's supply, whose energy per event falls with the core voltage
#: under a power cap (what :func:`diptych.sim.run.power_limit.energy_split` calls ``core``:
#: MACs, vector ops, SRAM and the NoC; DRAM, D2D and links are I/O, static is leakage).
CORE: tuple[str, ...] = ("mac", "vector", "sram", "noc")
#: The key of energy a stand-in op timer gave no breakdown for.
OTHER = "other"
#: How each component reads in the terminal and the report.
LABELS = {"mac": "MAC", "vector": "vector", "sram": "SRAM", "dram": "DRAM", "noc": "NoC",
          "d2d": "D2D", "link": "link", "static": "static", OTHER: "other"}


#: A breakdown as a vector (a serving step's cost, interpolated between grid vertices): the
#: components in order, then ``other``.
VECTOR: tuple[str, ...] = COMPONENTS + (OTHER,)
#: The index of ``static`` in :data:`VECTOR`.
STATIC = VECTOR.index("static")


def as_vector(parts: Mapping[str, float]) -> tuple[float, ...]:
    """``parts`` in the order of :data:`VECTOR` (missing keys 0)."""
    return tuple(parts.get(k, 0.0) for k in VECTOR)


def from_vector(vec) -> dict[str, float]:
    """A :data:`VECTOR` back to a breakdown: every component, ``other`` only when not 0."""
    out = dict(zip(VECTOR, (float(x) for x in vec)))
    if not out[OTHER]:
        del out[OTHER]
    return out


def zero() -> dict[str, float]:
    """Every component at 0 J."""
    return dict.fromkeys(COMPONENTS, 0.0)


def of(**joules: float) -> dict[str, float]:
    """Every component, those given at their joules (unknown names are refused)."""
    out = zero()
    for k, v in joules.items():
        if k not in out and k != OTHER:
            raise KeyError(f"energy component must be one of {', '.join(COMPONENTS)}, "
                           f"not {k!r}")
        out[k] = float(v)
    return out


def of_stats(st) -> dict[str, float]:
    """An op's stats (:class:`~diptych.sim.stats.OpStats`) by component: its
    ``energy_breakdown``; a stand-in's stats without one keep their ``energy_j`` under
    ``other``."""
    bd = getattr(st, "energy_breakdown", None)
    out = zero()
    if bd is None:
        out[OTHER] = st.energy_j
        return out
    for k, v in bd.items():
        out[k] = out.get(k, 0.0) + v
    return out


def add(acc: dict[str, float], parts: Mapping[str, float], times: float = 1.0) -> None:
    """``acc += parts × times``, in place (keys ``acc`` lacks are added)."""
    for k, v in parts.items():
        acc[k] = acc.get(k, 0.0) + v * times


def scaled(parts: Mapping[str, float], factor: float) -> dict[str, float]:
    """``parts × factor``."""
    return {k: v * factor for k, v in parts.items()}


def summed(items: Iterable[tuple[Mapping[str, float], float]]) -> dict[str, float]:
    """``Σ parts × times`` over ``(parts, times)`` pairs, every component present."""
    out = zero()
    for parts, times in items:
        add(out, parts, times)
    return out


def total(parts: Mapping[str, float]) -> float:
    """The joules of all components."""
    return sum(parts.values())


def shares(parts: Mapping[str, float]) -> dict[str, float]:
    """Each component's fraction of the total (all 0 when the total is 0)."""
    t = total(parts)
    return {k: (v / t if t else 0.0) for k, v in parts.items()}


def column(key: str) -> str:
    """The flat-table column of component ``key``: ``energy_mac_j`` ... ``energy_static_j``
    (``energy_other_j``)."""
    return f"energy_{key}_j"


#: The flat-table columns of the components, in display order (:func:`column`).
COLUMNS: tuple[str, ...] = tuple(column(k) for k in COMPONENTS)


def columns(parts: Mapping[str, float] | None) -> dict[str, float | None]:
    """A breakdown as flat-table columns (a sweep's results, ``compare.csv``): every
    :data:`COLUMNS` (0.0 for a component ``parts`` lacks; all None when there is no
    breakdown), and ``energy_other_j`` only when ``parts`` carries ``other`` energy, so that
    the columns sum to the row's ``energy_j`` as the breakdown does."""
    if not parts:
        return dict.fromkeys(COLUMNS)
    out = {column(k): float(parts.get(k, 0.0)) for k in COMPONENTS}
    if parts.get(OTHER):
        out[column(OTHER)] = float(parts[OTHER])
    return out


def with_core_reduced(parts: Mapping[str, float], reduction_j: float) -> dict[str, float]:
    """``parts`` less ``reduction_j`` taken from the core components (:data:`CORE`, and
    ``other``), in proportion to their joules: how the V² scaling of a power-limited run,
    which the totals apply to the core energy as one figure, lands on the components (each
    is scaled by the same factor). Unchanged when there is no core energy."""
    keys = [k for k in (*CORE, OTHER) if parts.get(k)]
    core = sum(parts[k] for k in keys)
    out = dict(parts)
    if not core:
        return out
    for k in keys:
        out[k] = parts[k] - reduction_j * (parts[k] / core)
    return out
