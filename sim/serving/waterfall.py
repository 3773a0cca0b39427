"""The serving waterfall (issue 21 item 7): where a deployment's device time and its
requests' latency go, one named mechanism at a time (docs/serving.md, "Serving waterfall").

The same load (the same seed: the same requests) is served once per level, each level a
:class:`~diptych.sim.run.variant.Variant` of the deployment's replicas plus a runtime, the
mechanisms added one after another:

1. ``gemm``: the GEMMs and attention as the engine runs them, every other cost off (vector
   ops, recipe ops, launches and syncs, collectives free; no power limit; the ``ideal``
   runtime);
2. ``non_gemm``: + the vector-unit work (norms, activations, softmax, RoPE, sampling's head);
3. ``recipe``: + the ops a precision format adds (block scales, quantisation);
4. ``launches``: + kernel and collective launches and step syncs;
5. ``communication``: + the collectives (tensor-parallel all-reduces, KV hand-off aside);
6. ``power``: + the clock the TDP sustains (:mod:`~diptych.sim.serving.power`);
7. ``host``: + the runtime's host costs (per step and on each request's path): the run as
   reported.

A level's **busy time** is the device-busy seconds of the whole deployment (each instance's
steps, host time included from level 7, summed over instances); each mechanism's ``busy_s``
is what it adds and its ``share`` that over the reported run's busy time, so the shares add
up to 1. Serving is latency-bound and its arrivals set the wall time, so the waterfall is in
time, not MFU; each step also says the mean TTFT and TPOT and the output tokens/s after it
(a mechanism can shorten a queue as well as lengthen a step, so latency deltas need not be
monotone). A level that leaves a mechanism out which the run itself leaves out (``--ideal``,
``Scenario(power_limit=False)``) changes nothing there.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..run.variant import Variant

#: The mechanisms, in the order they are added, with what each stands for.
STEPS: tuple[tuple[str, str], ...] = (
    ("gemm", "GEMMs and attention alone"),
    ("non_gemm", "vector-unit work"),
    ("recipe", "precision-format ops"),
    ("launches", "kernel launches and step syncs"),
    ("communication", "collectives"),
    ("power", "power-limited clock"),
    ("host", "serving runtime's host costs"),
)


def _levels(base: Variant) -> list[Variant]:
    """The variants of levels 1–6 on top of ``base`` (what it leaves out stays out)."""
    def on(**kw):
        return dataclasses.replace(base, **{k: getattr(base, k) or v for k, v in kw.items()})
    off = dict(free_vector=True, free_recipe=True, no_launches=True, free_comm=True,
               no_power_limit=True)
    levels = [on(**off)]
    for name in ("free_vector", "free_recipe", "no_launches", "free_comm", "no_power_limit"):
        off[name] = False
        levels.append(on(**off))
    return levels


def with_variant(deployment, variant: Variant):
    """``deployment`` with every replica running ``variant`` (its own chip underneath)."""
    return deployment.with_replicas(variant=variant)


def _metrics(res) -> dict:
    busy = sum(sum(i.rec_dt) for i in res.instances)
    return {"busy_s": busy, "ttft_s": res.ttft_s["mean"], "tpot_s": res.tpot_s["mean"],
            "tokens_per_s": res.tokens_per_s}


def serving_waterfall(result, deployment, load, cfg, rerun: Callable) -> dict:
    """The waterfall of ``result`` (a :class:`~diptych.sim.serving.serve.ServeResult` of
    ``deployment`` serving ``load`` under ``cfg``, resolved): ``rerun(deployment, cfg)``
    serves the same load again. Returns ``{"busy_s", "steps": [{mechanism, what, busy_s,
    share, ttft_s, tpot_s, tokens_per_s}]}`` (module docstring)."""
    base = deployment.pools[0].replica.variant
    levels = _levels(base)
    # the levels below ``host`` run without the runtime's host costs, its engine's all-reduce
    # and sampler kept (device mechanisms: they enter with ``communication`` and the
    # non-GEMM work), its KV sizing and batch-size tuning kept (every level holds the same
    # requests in the same batches)
    ideal_cfg = dataclasses.replace(cfg, runtime=cfg.runtime.without_host())
    rows = [_metrics(rerun(with_variant(deployment, v), ideal_cfg)) for v in levels]
    rows.append(_metrics(result))
    final = rows[-1]["busy_s"]
    steps = []
    before = 0.0
    for (name, what), m in zip(STEPS, rows):
        steps.append({"mechanism": name, "what": what, "busy_s": m["busy_s"] - before,
                      "share": (m["busy_s"] - before) / final if final else 0.0,
                      "ttft_s": m["ttft_s"], "tpot_s": m["tpot_s"],
                      "tokens_per_s": m["tokens_per_s"]})
        before = m["busy_s"]
    return {"busy_s": final, "steps": steps}
