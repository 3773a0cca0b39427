"""The serving event loop against its golden twin (explicit block ids,
:func:`diptych.sim.serving.engine_ref.golden_serve`), shared by the paged-cache tests of
windows and of linear-attention state (``tests/`` is on ``sys.path``, as for
:mod:`roofline_double`)."""

from __future__ import annotations

import numpy as np
from roofline_double import roofline

from diptych.sim.serving.engine_ref import GoldenRequest, golden_serve
from diptych.sim.serving.serve import StepTimerCache, resolve_config, serve


def serve_against_twin(dep, load, cfg):
    """Serve ``load`` on ``dep`` with ``cfg`` (roofline steps through the grid), replay the
    same requests on the golden twin with the instance's blocks and layout, assert that every
    request's first-token and finish times, the steps, the preemptions, the peak blocks and
    the blocks given back agree, and return ``(result, instance)``."""
    oc = StepTimerCache("grid", roofline)
    res = serve(dep, load, cfg, oracles=oc)
    inst = res.instances[0]
    rcfg = resolve_config(dep, cfg)
    reqs = sorted(res.reqs, key=lambda r: r.rid)
    g = golden_serve([GoldenRequest(r.rid, r.arrival, r.prompt, r.output, r.shared)
                      for r in reqs], inst.oracle, rcfg, inst.total_blocks,
                     prefix_blocks=inst.prefix_blocks, block_bytes=inst.block_bytes,
                     rng=np.random.default_rng([rcfg.seed, 1]), layout=inst.layout)
    assert {r.rid: (r.first_t, r.finish_t) for r in res.reqs} == \
        {r.rid: (r.first_t, r.finish_t) for r in g.requests}
    assert len(inst.rec_t) == len(g.steps)
    assert res.preemptions == g.preemptions
    assert inst.peak_used == g.peak_blocks <= inst.total_blocks
    assert inst.free == inst.total_blocks - inst.prefix_blocks       # every block came back
    return res, inst
