"""diptych.sim: the cycle-approximate engine.

``simulate(op, chip, dataflow=None)`` and ``simulate_gemm(m, k, n, chip, dtype=None,
dataflow=None)`` return :class:`OpStats`; ``simulate_many(ops, chip)`` times a list on all
cores. See docs/engine.md for the model.
"""

from .api import simulate, simulate_gemm, simulate_many
from .stats import OpStats

__all__ = ["OpStats", "simulate", "simulate_gemm", "simulate_many"]
