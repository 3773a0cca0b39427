"""Energy of a cluster step: per-stage compute from the per-layer records, plus the links.

Every chip of pipeline stage ``s`` (``plan.chips / pp`` of them: its tensor-, context- and
data-parallel ranks) spends, per step:

* **compute**: for each of the ``m`` micro-batches, the simulated energy of the layers of its
  chunks (:class:`~.timing.LayerTime`: forward; in training backward, plus the forward again
  under full recomputation or the selective ops under selective recomputation), which
  includes the static power of the ops' own time, exactly as ``diptych run`` counts it; in
  training also the optimizer (AdamW over the rank's parameters, the lowering's own op);
* **links**: every collective it takes part in, at ``pj_per_link_bit`` per bit it sends
  (all-reduce ``2(n−1)/n`` of the buffer, reduce-scatter, all-gather and all-to-all
  ``(n−1)/n``, a point-to-point send its bytes: the ring volumes, the least any algorithm
  sends): the layers' collectives per micro-batch, the pipeline sends (activations forward,
  their gradients backward), the gradient reduction and ZeRO's parameter all-gather once;
* **idle static**: ``static_w`` × the step time its ops do not cover (pipeline bubbles,
  exposed communication, waiting for the slowest stage): a chip leaks while it waits.

:func:`busy_power_w` gives each stage's power *while its ops run* (compute and optimizer
joules over their seconds): what a GPU's power limiter, which acts over windows far shorter
than a pipeline bubble (tens of milliseconds), holds to the TDP; the power-limited clock of a
cluster step (:mod:`diptych.sim.cluster.power`) is set by the hottest stage.

:func:`step_energy` returns the whole cluster's joules by part; the sum is ``energy_j`` of
:class:`~.step.ClusterResult`, which derives tokens/J, the average power per chip against the
TDP and, for a chip with a ``[cost]`` table, $ per million tokens. :func:`step_energy_parts`
returns the same joules by component (MAC arrays, vector units, SRAM, DRAM, NoC, D2D, links,
static: :mod:`diptych.sim.energy_parts`): the compute and optimizer parts by the components
of their simulated ops, the links under ``link``, the idle static under ``static``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .. import energy_parts as EP
from ..protocols import sent_bytes

PARTS = ("compute", "optimizer", "link", "idle_static")


def link_joules(chip, colls: Iterable[tuple[str, float, int]]) -> float:
    """Link energy (J, one rank) of ``(collective kind, bytes per rank, group size)``."""
    return sum(sent_bytes(k, b, n) for k, b, n in colls) * 8 * chip.energy.pj_per_link_bit \
        * 1e-12


def step_energy(chip, *, ranks_per_stage: int, micro_batches: int, seconds: float,
                stages: list[Mapping]) -> dict[str, float]:
    """Joules of one step of the whole cluster by part (:data:`PARTS`).

    ``stages``: per pipeline stage, one rank's ``compute_j`` per micro-batch,
    ``busy_s`` per micro-batch (its ops' time), ``optimizer_j`` and ``optimizer_s`` per
    step, ``colls_per_mb`` (``(kind, bytes, group)`` of each micro-batch) and
    ``colls_per_step`` (once per step)."""
    m = micro_batches
    out = dict.fromkeys(PARTS, 0.0)
    for st in stages:
        out["compute"] += st["compute_j"] * m
        out["optimizer"] += st.get("optimizer_j", 0.0)
        out["link"] += _link_j(chip, st, m)
        out["idle_static"] += _idle_static_j(chip, st, m, seconds)
    return {k: v * ranks_per_stage for k, v in out.items()}


def step_energy_parts(chip, *, ranks_per_stage: int, micro_batches: int, seconds: float,
                      stages: list[Mapping]) -> dict[str, float]:
    """The joules of :func:`step_energy` by component (module docstring): ``stages`` as it
    takes them, each also with ``compute_parts`` (per micro-batch) and ``optimizer_parts``
    (per step), the components of ``compute_j`` and ``optimizer_j``. Sums to the parts'
    sum."""
    m = micro_batches
    out = EP.zero()
    for st in stages:
        EP.add(out, st["compute_parts"], m)
        EP.add(out, st.get("optimizer_parts") or {})
        out["link"] += _link_j(chip, st, m)
        out["static"] += _idle_static_j(chip, st, m, seconds)
    return EP.scaled(out, ranks_per_stage)


def _link_j(chip, st: Mapping, m: int) -> float:
    """One rank's link joules of a stage's collectives in a step (``m`` micro-batches)."""
    return (link_joules(chip, st["colls_per_mb"]) * m
            + link_joules(chip, st.get("colls_per_step", ())))


def _idle_static_j(chip, st: Mapping, m: int, seconds: float) -> float:
    """One rank's static joules over the part of the step its ops do not cover."""
    busy = st["busy_s"] * m + st.get("optimizer_s", 0.0)
    return chip.energy.static_w * max(0.0, seconds - busy)


def busy_power_w(stages: list[Mapping], micro_batches: int) -> list[float]:
    """Per pipeline stage (``stages`` as :func:`step_energy` takes them), one rank's average
    power (W) over the time its ops run: ``(compute_j·m + optimizer_j) / (busy_s·m +
    optimizer_s)``; 0 for a stage that runs nothing."""
    m = micro_batches
    out = []
    for st in stages:
        busy = st["busy_s"] * m + st.get("optimizer_s", 0.0)
        joules = st["compute_j"] * m + st.get("optimizer_j", 0.0)
        out.append(joules / busy if busy > 0 else 0.0)
    return out
