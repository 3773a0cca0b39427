"""Design-space exploration: floorplans, the chip comparison, sweeps and Pareto fronts.

* :mod:`.floorplan`: dies drawn to scale (``diptych floorplan``);
* :mod:`.compare`, :mod:`.report`: the training/prefill/decode study (``diptych compare``);
* :mod:`.spec`, :mod:`.sweep`, :mod:`.evaluate`: resumable sweeps on a process pool or a Dask
  cluster (``diptych sweep``);
* :mod:`.pareto`, :mod:`.plots`: Pareto fronts and the plots (``diptych pareto``).

The area and energy model itself lives in :mod:`diptych.arch.area` and
:mod:`diptych.arch.energy`. See docs/dse.md.
"""
