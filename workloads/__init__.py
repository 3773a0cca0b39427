"""diptych.workloads: transformer models from HF config.json, lowered per phase to ops.

``load_model`` reads a built-in or a user's config.json; ``prefill``/``decode``/``train_step``
lower a phase to an op graph for one chip of a tensor-parallel group. Nothing here knows a
chip beyond dtypes: timing a lowered phase on a chip is :mod:`diptych.sim.run`'s
(``run_workload``).
"""

from .config import ARCHITECTURES, ModelConfig, model_from_hf
from .graph import Workload
from .program import Block
from .lower import causal_mean_keys, check_tp, decode, decode_context, decode_mean, prefill
from .memory import MemoryReport
from .moe import expected_experts_touched, expert_load
from .params import (active_param_count, flops_per_token, kv_bytes_per_token, param_count,
                     weight_tensors)
from .precision import Precision
from .registry import builtin_names, load_model, load_model_file
from .scalesim import load_topology
from .train import train_forward, train_step

__all__ = [
    "ARCHITECTURES", "Block", "MemoryReport", "ModelConfig", "Precision", "Workload",
    "active_param_count", "builtin_names", "causal_mean_keys", "check_tp", "decode",
    "decode_context", "decode_mean", "expected_experts_touched", "expert_load",
    "flops_per_token", "kv_bytes_per_token", "load_model", "load_model_file", "load_topology",
    "model_from_hf", "param_count", "prefill", "train_forward", "train_step", "weight_tensors",
]
