"""The efficiency waterfall of a run: from the chips' peak to the reported MFU, one named
mechanism at a time (docs/workloads.md, "Efficiency waterfall").

The run is repeated with its mechanisms added one after another (:data:`STEPS`, in that
order), each a :class:`~diptych.sim.run.variant.Variant` of the same scenario; the time each
adds is its cost, and its **share** is the MFU it takes away, so the shares and the reported
MFU add up to 1 (the peak) exactly:

1. ``recomputation``: hardware FLOPs above the model's (recomputed activations, work every
   tensor-parallel rank repeats) at the peak rate;
2. ``gemm``: the GEMMs and fused attention as the engine runs them, alone (tile and wave
   quantisation, operand streaming and memory stalls, memory-bound GEMVs; the GEMMs a
   tensor-parallel overlap splits, as their chunks: :mod:`~diptych.sim.run.tp_overlap`);
   ``pipeline_bubble`` (a parallel plan's step only): the idle share of the pipeline's
   busiest stage at that level, split out of it;
3. ``non_gemm``: the vector-unit work (norms, activations, softmax, RoPE, permutes, the
   optimizer, embedding lookups);
4. ``recipe``: the ops a precision recipe or a block-scaled format adds (casts, amax
   passes, block quantisation, a split accumulator's exposed promotions);
5. ``launches``: kernel launches, collective launches and step syncs;
6. ``communication``: the collectives' exposed time;
7. ``power``: the clock the chip's TDP sustains (0 when the limit does not bind).

A mechanism added later is charged whatever it costs on top of the earlier ones (the
overlaps between them go to the later one). The waterfall is of a run as it was asked for
(``--ideal`` included: its overhead steps are then 0).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from .variant import Variant

#: The mechanisms, in the order they are added, with what each stands for (a parallel plan's
#: step adds :data:`BUBBLE` after ``gemm``).
STEPS: tuple[tuple[str, str], ...] = (
    ("recomputation", "recomputed and replicated work"),
    ("gemm", "GEMMs and attention below peak (tile and wave quantisation, memory)"),
    ("non_gemm", "non-GEMM work on the vector units"),
    ("recipe", "precision-recipe and format overheads"),
    ("launches", "kernel launches and step syncs"),
    ("communication", "exposed communication"),
    ("power", "power-limited clock"),
)
#: The pipeline's idle time, split out of the ``gemm`` step of a parallel plan's step.
BUBBLE = ("pipeline_bubble", "pipeline bubble")


@dataclass(frozen=True)
class Waterfall:
    """``steps``: one dict per mechanism (``mechanism``, ``what``, ``seconds`` it adds,
    ``share`` of the peak it takes, ``mfu`` after it); ``bound_s``: the model FLOPs at the
    peak rate; ``mfu``: the reported MFU (``1 − Σ share``)."""

    bound_s: float
    seconds: float
    mfu: float
    steps: tuple[dict, ...]

    def to_dict(self) -> dict:
        return {"bound_s": self.bound_s, "seconds": self.seconds, "mfu": self.mfu,
                "steps": [dict(s) for s in self.steps]}


def _levels(base: Variant) -> list[Variant]:
    """The variants of steps 2–6 (each turns its own mechanism back on), on top of
    ``base`` (the run's own variant: what it leaves out stays out)."""
    on = lambda **kw: dataclasses.replace(base, **{k: getattr(base, k) or v  # noqa: E731
                                                   for k, v in kw.items()})
    return [on(free_vector=True, free_recipe=True, no_launches=True, free_comm=True),
            on(free_recipe=True, no_launches=True, free_comm=True),
            on(no_launches=True, free_comm=True),
            on(free_comm=True),
            base]


def waterfall(result, rerun: Callable[[Variant], object], base: Variant | None = None, *,
              unlimited=None) -> Waterfall:
    """The waterfall of ``result`` (a run's :class:`~diptych.sim.run.node.RunResult` or a
    cluster step's :class:`~diptych.sim.cluster.step.ClusterResult`, with its own variant
    ``base``): ``rerun(variant)`` is the same scenario's result with ``variant`` and without
    the power limit (module docstring). ``unlimited``: ``result`` itself when no power limit
    changed it, so the last level is not run again."""
    base = base or Variant()
    peak = result.mfu and result.flops / (result.mfu * result.seconds)  # chips × peak
    if not peak:
        raise ValueError("the run has no model FLOPs: its waterfall is empty")
    bound = result.flops / peak
    times = [bound, result.hardware_flops / peak]
    names = list(STEPS)
    for i, v in enumerate(_levels(base)):
        r = unlimited if v == base and unlimited is not None else rerun(v)
        bubble = getattr(r, "bubble_fraction", None)
        if i == 0 and bubble is not None:
            times.append(r.seconds * (1.0 - bubble))
            names.insert(2, BUBBLE)
        times.append(r.seconds)
    times.append(result.seconds)
    steps = []
    for (name, what), before, after in zip(names, times, times[1:]):
        steps.append({"mechanism": name, "what": what, "seconds": after - before,
                      "share": bound / before - bound / after, "mfu": bound / after})
    return Waterfall(bound_s=bound, seconds=result.seconds, mfu=result.mfu, steps=tuple(steps))
