"""Precision per tensor class: weights, activations, KV cache, accumulation, training state.

Examples: BF16 inference (all ``bf16``); W8A8 with an FP8 KV cache (``weights="fp8",
activations="fp8", kv="fp8"``); weight-only INT4 (``weights="int4"``, activations ``bf16``);
BF16 mixed-precision training with an FP32 master copy and FP32 Adam moments (16 B/param).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch.dtypes import check_dtype, dtype_bytes


@dataclass(frozen=True, kw_only=True)
class Precision:
    """Storage precision of each tensor class. The array computes a product in the wider of
    its two inputs (:attr:`diptych.workloads.ops.Gemm.compute_dtype`), so weight-only quantisation
    saves bytes, not MACs.

    Training state per parameter is ``weights + grads + master + 2 × moments`` bytes
    (BF16/BF16/FP32/FP32 = 2 + 2 + 4 + 8 = 16 B, as in mixed-precision Adam); ``master=None``
    drops the master copy (pure BF16 training).
    """

    weights: str = "bf16"
    activations: str = "bf16"
    kv: str = "bf16"
    accumulation: str = "fp32"
    grads: str = "bf16"
    master: str | None = "fp32"
    moments: str = "fp32"

    def __post_init__(self):
        for name in ("weights", "activations", "kv", "accumulation", "grads", "moments"):
            check_dtype(getattr(self, name), f"{name} dtype")
        if self.master is not None:
            check_dtype(self.master, "master dtype")

    @property
    def w_bytes(self) -> float:
        return dtype_bytes(self.weights)

    @property
    def a_bytes(self) -> float:
        return dtype_bytes(self.activations)

    @property
    def kv_bytes(self) -> float:
        return dtype_bytes(self.kv)

    @property
    def g_bytes(self) -> float:
        return dtype_bytes(self.grads)

    @property
    def optimizer_state_bytes_per_param(self) -> float:
        """Master copy plus the two Adam moments, bytes per parameter."""
        master = dtype_bytes(self.master) if self.master else 0.0
        return master + 2 * dtype_bytes(self.moments)

    @property
    def train_state_bytes_per_param(self) -> float:
        """Weights + gradients + master + moments, bytes per parameter (16 by default)."""
        return self.w_bytes + self.g_bytes + self.optimizer_state_bytes_per_param

    def describe(self) -> str:
        return (f"W {self.weights} / A {self.activations} / KV {self.kv} / "
                f"acc {self.accumulation}")
