"""diptych.sim.run: a model phase lowered and timed on one chip (or one tensor-parallel group).

:func:`run_workload` lowers a phase (:mod:`diptych.workloads`), adds the ops the chip's
precision implies (:mod:`.precision_ops`), times the program as a list schedule
(:mod:`.scheduled`) or as a sum of its ops (:mod:`.node`'s ``execution="sum"``), and applies
the power limit (:mod:`.power_limit`) and cost figures; :func:`run_curve` runs a batching
curve and :func:`run_topology` a SCALE-Sim topology file. A parallel plan's step on a cluster
is :mod:`diptych.sim.cluster`'s, which builds on this layer. What to run is one
:class:`Scenario` (:mod:`.scenario`). See docs/program.md.
"""

from .links import collective_energy_j, collective_seconds
from .node import RunResult, TopologyResult, run_curve, run_topology, run_workload
from .scenario import Parallelism, Scenario

__all__ = ["Parallelism", "RunResult", "Scenario", "TopologyResult", "collective_energy_j",
           "collective_seconds", "run_curve", "run_topology", "run_workload"]
