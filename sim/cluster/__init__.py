"""sim.cluster: a training step (or inference pass) over a cluster of chips.

Parallelism plans (``plan``), the topology and where ranks sit (``topology``), collectives
over it (``collectives``), per-layer ops and times of one micro-batch (``layers``,
``timing``), memory per chip (``memory``), pipeline schedules (``schedule``), the step
(``step``), the plan search (``search``) and traces (``trace``). See docs/cluster.md.
"""

from .collectives import CommCost, collective, lower_bound_seconds
from .memory import ClusterMemory, plan_memory, zero_state_bytes
from .plan import Plan, check_plan, split_layers
from .schedule import fast_pipeline_seconds, simulate_pipeline, stage_order
from .step import ClusterResult, simulate_cluster_step
from .topology import GroupShape, Network, bind, group_ranks, group_shape

__all__ = [
    "ClusterMemory", "ClusterResult", "CommCost", "GroupShape", "Network", "Plan", "bind",
    "check_plan", "collective", "fast_pipeline_seconds", "group_ranks", "group_shape",
    "lower_bound_seconds", "plan_memory", "simulate_cluster_step", "simulate_pipeline",
    "split_layers", "stage_order", "zero_state_bytes",
]
