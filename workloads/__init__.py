"""diptych.workloads: transformer models from HF config.json, lowered per phase to ops.

``load_model`` reads a built-in or a user's config.json; ``prefill``/``decode``/``train_step``
lower a phase to an op graph for one chip of a tensor-parallel group. Nothing here knows a
chip beyond dtypes: timing a lowered phase on a chip is :mod:`diptych.sim.run`'s
(``run_workload``).

The names below load on first use (PEP 562): ``diptych models show`` needs the registry and
the parameter counts, not the lowering (issue 27, start-up).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - what the lazy names are, for readers and checkers
    from .config import ARCHITECTURES, ModelConfig, model_from_hf
    from .graph import Workload
    from .lower import (causal_mean_keys, check_tp, decode, decode_context, decode_mean,
                        prefill)
    from .memory import MemoryReport
    from .moe import expected_experts_touched, expert_load
    from .params import (active_param_count, flops_per_token, kv_bytes_per_token,
                         param_count, weight_tensors)
    from .precision import Precision
    from .program import Block
    from .registry import builtin_names, load_model, load_model_file
    from .scalesim import load_topology
    from .train import train_forward, train_step

#: Public name → the submodule that defines it.
_HOME = {
    **dict.fromkeys(("ARCHITECTURES", "ModelConfig", "model_from_hf"), "config"),
    "Workload": "graph",
    "Block": "program",
    **dict.fromkeys(("causal_mean_keys", "check_tp", "decode", "decode_context",
                     "decode_mean", "prefill"), "lower"),
    "MemoryReport": "memory",
    **dict.fromkeys(("expected_experts_touched", "expert_load"), "moe"),
    **dict.fromkeys(("active_param_count", "flops_per_token", "kv_bytes_per_token",
                     "param_count", "weight_tensors"), "params"),
    "Precision": "precision",
    **dict.fromkeys(("builtin_names", "load_model", "load_model_file"), "registry"),
    "load_topology": "scalesim",
    **dict.fromkeys(("train_forward", "train_step"), "train"),
}

__all__ = [
    "ARCHITECTURES", "Block", "MemoryReport", "ModelConfig", "Precision", "Workload",
    "active_param_count", "builtin_names", "causal_mean_keys", "check_tp", "decode",
    "decode_context", "decode_mean", "expected_experts_touched", "expert_load",
    "flops_per_token", "kv_bytes_per_token", "load_model", "load_model_file", "load_topology",
    "model_from_hf", "param_count", "prefill", "train_forward", "train_step", "weight_tensors",
]
assert sorted(__all__) == sorted(_HOME)


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value      # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
