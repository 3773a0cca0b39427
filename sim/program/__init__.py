"""diptych.sim.program: time the program, not the ops.

Over a :class:`~diptych.workloads.program.Program` (the lowering's IR: named tensors and the
ops that read and write them, in blocks repeated L times): a residency planner deciding which
tensors stay on chip (:func:`plan_residency`); fusion of elementwise ops into GEMMs (:func:`fuse_program`); and
a list scheduler giving the program's time on the chip's
resources (:func:`schedule`), with the chip's fixed per-op, per-step and per-collective costs.
See docs/program.md.
"""

from .demand import RESOURCES, Demand, Phase, op_demand
from .fusion import FusedOps, fuse_program
from .residency import (Capacities, NodeResidency, Placement, Residency, capacities,
                        plan_residency)
from .schedule import BlockTiming, ScheduleResult, bounds_ps, schedule

__all__ = [
    "RESOURCES", "BlockTiming", "Capacities", "Demand", "FusedOps", "NodeResidency", "Phase",
    "Placement", "Residency", "ScheduleResult", "bounds_ps", "capacities", "fuse_program",
    "op_demand", "plan_residency", "schedule",
]
