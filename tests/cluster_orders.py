"""The cluster training step the tests of Megatron's issue-order pipeline run
(``tests/cluster/test_megatron_p2p.py``, ``tests/cluster/test_cluster_trace.py``):
llama-3-8b on h100 chips in a dgx-h100 cluster, train, batch 4, seq 2048, summed execution,
the roofline test double; ``kernel_order`` "dataflow" is the default data-flow stack,
"one_queue" an issue-order (Megatron-Core) stack.
"""

from __future__ import annotations

from roofline_double import roofline

from diptych.sim.cluster import simulate_cluster_step
from diptych.sim.run import Scenario


def cluster_step(plan, kernel_order: str):
    return simulate_cluster_step(
        "llama-3-8b", "h100", "dgx-h100", plan,
        Scenario.of(phase="train", batch=4, seq=2048, execution="sum",
                    kernel_order=kernel_order), simulate=roofline)


def step_both_orders(plan) -> dict:
    """The step once per kernel order, keyed by the order."""
    return {order: cluster_step(plan, order) for order in ("dataflow", "one_queue")}
