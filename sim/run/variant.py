"""A run with some of its mechanisms turned off: the steps of the efficiency waterfall and
``--ideal`` (docs/workloads.md, "Efficiency waterfall").

A :class:`Variant` says which costs a run leaves out; :func:`apply_variant` turns it into
what the run path takes: the chip (launch and sync costs zeroed, links at their raw
bandwidth), an op timer (vector-unit ops, or recipe and precision-format ops, taking no time)
and a collective timer (collectives taking no time). The default variant changes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from ...workloads.ops import Collective, VectorOp

#: Tags of the ops a precision recipe or a block-scaled format adds (casts, amax passes,
#: block quantisation): :mod:`diptych.workloads.recipe`, :mod:`diptych.sim.run.precision_ops`.
RECIPE_TAGS = ("recipe", "precision")


@dataclass(frozen=True)
class Variant:
    """What a run leaves out (all False: the run as it is).

    ``free_vector``: vector-unit ops (norms, activations, softmax, permutes, the optimizer,
    embedding lookups; inside fused attention too) take no time; ``free_recipe``: the ops a
    precision recipe or a block-scaled format adds take no time; ``no_launches``: no kernel
    launch, collective launch, host synchronisation or step-sync cost; ``free_comm``:
    collectives take no time; ``raw_links``: collectives run at the links' raw bandwidth
    (``bus_efficiency`` 1, no in-network-reduction latency, no collective library's
    protocols: one protocol at the links' per-hop latency) instead of what a library
    sustains; ``no_power_limit``:
    the chip runs at its nominal clock whatever its power."""

    free_vector: bool = False
    free_recipe: bool = False
    no_launches: bool = False
    free_comm: bool = False
    raw_links: bool = False
    no_power_limit: bool = False

    @property
    def is_default(self) -> bool:
        return self == Variant()


#: ``--ideal``: every overhead off (recipe ops, launches and syncs, the collective library's
#: losses, the power limit); the work itself (GEMMs, vector ops, collectives at line rate)
#: stays.
IDEAL = Variant(free_recipe=True, no_launches=True, raw_links=True, no_power_limit=True)


def _is_recipe(op) -> bool:
    return any(t in RECIPE_TAGS for t in getattr(op, "tags", ()))


#: The fields of an op's stats (:class:`~diptych.sim.stats.OpStats`) that a free op zeroes.
_ZEROED = ("cycles", "seconds", "compute_cycles", "array_busy_cycles", "stall_cycles",
           "dram_read_bytes", "dram_write_bytes", "energy_j")


def _free(st):
    """``st`` with no time, bytes or energy: an op that costs nothing (the fields a stats
    record has of :data:`_ZEROED` and its breakdowns; a test's timer may have fewer)."""
    names = {f.name for f in dataclasses.fields(st)}
    kw = {k: type(getattr(st, k))(0) for k in _ZEROED if k in names}
    for k in ("stall_breakdown", "energy_breakdown"):
        if k in names:
            kw[k] = {n: type(v)(0) for n, v in getattr(st, k).items()}
    return dataclasses.replace(st, **kw)


def variant_timer(simulate: Callable | None, v: Variant) -> Callable | None:
    """``simulate`` (None: :func:`diptych.sim.simulate`) with ``v``'s free ops costing
    nothing (the op is still timed once, so a bad op is refused as in the real run);
    ``simulate`` itself when ``v`` frees no op."""
    if not (v.free_vector or v.free_recipe):
        return simulate
    if simulate is None:
        from ..api import simulate

    def timer(op, chip, **kw):
        st = simulate(op, chip, **kw)
        if (v.free_recipe and _is_recipe(op)) or (v.free_vector and isinstance(op, VectorOp)):
            return _free(st)
        return st
    return timer


def variant_chip(chip, v: Variant):
    """``chip`` without launch and sync costs (``no_launches``) and with its links at their
    raw bandwidth (``raw_links``)."""
    if v.no_launches and chip.overheads is not None:
        chip = dataclasses.replace(chip, overheads=dataclasses.replace(
            chip.overheads, op_launch_us=0.0, step_sync_us=0.0, collective_launch_us=0.0,
            host_sync_us=0.0))
    if v.raw_links and chip.interconnect is not None:
        chip = dataclasses.replace(chip, interconnect=dataclasses.replace(
            chip.interconnect, bus_efficiency=1.0, in_network_reduction_latency_us=0.0,
            in_network_reduction_ramp=()),
            collectives=None)
    return chip


def variant_cluster(cluster, v: Variant):
    """``cluster`` with its scale-out links at their raw bandwidth (``raw_links``; the
    scale-up links are the chip's, :func:`variant_chip`)."""
    if v.raw_links and cluster.scale_out is not None:
        cluster = dataclasses.replace(cluster, scale_out=dataclasses.replace(
            cluster.scale_out, bus_efficiency=1.0))
    return cluster


def collective_timer(v: Variant) -> Callable | None:
    """A collective timer for ``v`` (None: the chip's links, the default)."""
    if not v.free_comm:
        return None

    def free(op: Collective) -> float:
        return 0.0
    return free
