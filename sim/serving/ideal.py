"""A deployment's bound: every overhead left out (``serve --ideal``; issue 21 item 7).

What ``run --ideal`` is to one phase (:data:`~diptych.sim.run.variant.IDEAL`: no recipe or
precision-format ops, no kernel launches, collective launches or step syncs, the links at
their raw bandwidth instead of what a collective library sustains, no power limit), this is
to a serving deployment, with the serving runtime's host costs left out too: the runtime is
the deployment's own without them (:meth:`~diptych.arch.runtime.RuntimeProfile.without_host`:
its engine's KV sizing, admission, batch-size tuning and sampler kept, as the serving
waterfall's levels keep them); an engine's own all-reduce kernels give way to the links' raw
rate as any collective library does (they need the chip's collective library table, which the
raw links drop: :func:`~diptych.sim.serving.engine_allreduce.engine_all_reduce`). The
work itself stays: the GEMMs, attention, the vector-unit ops, the collectives at line rate,
the same scheduler, batching and KV cache. The served result is the bound of the
deployment's work; beside the run with its overheads it shows the distance to it (``serve
--waterfall`` splits that distance by mechanism).
"""

from __future__ import annotations

import dataclasses

from ..run.variant import IDEAL
from .config import ServeConfig
from .deployment import Deployment


def ideal(deployment: Deployment, cfg: ServeConfig | None = None
          ) -> tuple[Deployment, ServeConfig]:
    """``(deployment, cfg)`` with every overhead left out (module docstring): every replica
    (an attention-FFN layout's FFN replica and a speculative draft too, which run as their
    target does) on :data:`~diptych.sim.run.variant.IDEAL`, and ``cfg`` (None: the defaults),
    when it names no runtime, on the deployment's (:meth:`Deployment.runtime`) without its host
    costs, named ``<runtime> without host costs`` (``info.runtime``).

    ValueError when ``cfg`` names a runtime with host costs (a profile whose host fields are
    not all zero: the bound has none), or a pool runs an inference precision recipe (a recipe
    is a set of overheads; FP8 dtypes without one run FP8 GEMMs without its casts), naming
    it."""
    cfg = ServeConfig() if cfg is None else cfg
    if cfg.runtime is not None and not cfg.runtime.is_ideal:
        raise ValueError(f"--ideal leaves every overhead out, the serving runtime's host costs "
                         f"too; --runtime {cfg.runtime.name} charges them: give one of them "
                         f"(--runtime ideal alone keeps the chip's own overheads)")
    for role, pool in deployment.roles:
        recipe = pool.replica.precision.recipe
        if recipe is not None:
            who = "" if role == "mixed" else f" (the {role} pool)"
            raise ValueError(f"--ideal leaves every precision recipe's overheads out; --recipe "
                             f"{recipe}{who} names one's: give one of them (FP8 dtypes "
                             f"without a recipe run FP8 GEMMs without its casts)")
    if cfg.runtime is None:
        rt = deployment.runtime()
        if not rt.is_ideal:
            rt = dataclasses.replace(rt.without_host(), name=f"{rt.name} without host costs")
        cfg = dataclasses.replace(cfg, runtime=rt)
    return deployment.with_replicas(variant=IDEAL), cfg
