"""diptych.sim: the cycle-approximate engine.

``simulate(op, chip, dataflow=None)`` and ``simulate_gemm(m, k, n, chip, dtype=None,
dataflow=None)`` return :class:`OpStats`; ``simulate_many(ops, chip)`` times a list on all
cores. See docs/engine.md for the model.

The names are loaded on first use, so that importing a submodule that needs no engine
(``diptych.workloads.ops``, ``diptych.sim.timing``) does not import Numba.
"""

__all__ = ["OpStats", "simulate", "simulate_gemm", "simulate_many"]

_HOME = {"OpStats": "stats", "simulate": "api", "simulate_gemm": "api", "simulate_many": "api"}


def __getattr__(name):
    if name in _HOME:
        import importlib
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
