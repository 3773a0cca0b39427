"""The paged KV cache's capacity on one tensor-parallel group.

Per chip: ``HBM − weights − activations − reserve``, divided into blocks of
``kv_block_tokens`` tokens of ``kv_bytes_per_token_per_chip`` each (vLLM's PagedAttention
layout). Weights are the replica's share (:func:`~diptych.workloads.params.params_per_chip`,
plus a draft model's when speculating); activations are the peak working set of the largest
step the scheduler can form (a prefill chunk of ``max_batched_tokens`` tokens, as
:func:`~diptych.workloads.memory.inference_memory` counts it: the largest single op's
footprint plus one hidden state per token); the reserve is ``kv_reserve_fraction`` of HBM
(runtime, communication buffers, fragmentation). A draft model's cache shares the blocks, so a
block's bytes are the target's plus the draft's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...workloads.memory import peak_working_bytes
from ...workloads.params import kv_bytes_per_token_per_chip, params_per_chip
from ...workloads.serving_step import Step, lower_step
from .step_time import Replica


@dataclass(frozen=True)
class KvBudget:
    """Bytes per chip and the resulting block count of one replica's KV cache."""

    capacity_bytes: float
    weights_bytes: float
    activation_bytes: float
    reserve_bytes: float
    bytes_per_token: float
    block_tokens: int
    blocks: int

    @property
    def kv_bytes(self) -> float:
        return self.capacity_bytes - self.weights_bytes - self.activation_bytes \
            - self.reserve_bytes

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_tokens

    @property
    def block_bytes(self) -> float:
        """Bytes of one block on one chip."""
        return self.block_tokens * self.bytes_per_token

    def to_dict(self) -> dict:
        return {"capacity_bytes": self.capacity_bytes, "weights_bytes": self.weights_bytes,
                "activation_bytes": self.activation_bytes, "reserve_bytes": self.reserve_bytes,
                "kv_bytes": self.kv_bytes, "bytes_per_token": self.bytes_per_token,
                "block_tokens": self.block_tokens, "blocks": self.blocks, "tokens": self.tokens}


def activation_bytes(r: Replica, max_tokens: int) -> float:
    """Peak activation bytes per chip of a step of ``max_tokens`` prompt tokens."""
    w = lower_step(r.model, Step(prefill=((max_tokens, 0),)), precision=r.precision, tp=r.tp,
                   attention=r.attention)
    return peak_working_bytes(w) + max_tokens * r.model.hidden_size * r.precision.a_bytes


def kv_budget(r: Replica, *, block_tokens: int, max_batched_tokens: int,
              reserve_fraction: float, draft: Replica | None = None) -> KvBudget:
    """The KV capacity of replica ``r`` (module docstring). Raises ValueError naming the
    shortfall when nothing is left for the cache."""
    cap = float(r.chip.dram.capacity_bytes)
    w = params_per_chip(r.model, r.tp) * r.precision.w_bytes
    per_tok = kv_bytes_per_token_per_chip(r.model, r.precision.kv, r.tp)
    act = activation_bytes(r, max_batched_tokens)
    if draft is not None:
        w += params_per_chip(draft.model, draft.tp) * draft.precision.w_bytes
        per_tok += kv_bytes_per_token_per_chip(draft.model, draft.precision.kv, draft.tp)
        act = max(act, activation_bytes(draft, max_batched_tokens))
    reserve = reserve_fraction * cap
    free = cap - w - act - reserve
    blocks = int(math.floor(free / (block_tokens * per_tok))) if free > 0 else 0
    if blocks < 1:
        gib = 2.0 ** 30
        raise ValueError(
            f"no room for a KV cache: {r.model.name} on {r.chip.name} at tp={r.tp} needs "
            f"{w / gib:.1f} GiB of weights + {act / gib:.1f} GiB of activations + "
            f"{reserve / gib:.1f} GiB reserve per chip, and the chip has {cap / gib:.1f} GiB; "
            f"use more chips (--tp), narrower weights (--weights-dtype) or a smaller "
            f"--max-batched-tokens")
    return KvBudget(capacity_bytes=cap, weights_bytes=w, activation_bytes=act,
                    reserve_bytes=reserve, bytes_per_token=per_tok, block_tokens=block_tokens,
                    blocks=blocks)
