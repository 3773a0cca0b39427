"""The paged KV cache's capacity on one tensor-parallel group, and its layout.

Per chip: ``HBM − weights − activations − reserve``, divided into blocks of
``kv_block_tokens`` tokens of ``kv_bytes_per_token_per_chip`` each (vLLM's PagedAttention
layout). A model whose layers have windows (sliding or chunked attention) has a
:class:`KvLayout` of several kinds: a block then holds ``kv_block_tokens`` tokens of
``unit_layers`` layers of one kind, and a layer with a window keeps only the blocks its next
query can still attend (vLLM's hybrid allocator, :class:`KvLayout`). Weights are the
replica's share (:func:`~diptych.workloads.params.weight_bytes_per_chip`, plus a draft
model's when speculating); activations are the peak working set of the largest step the
scheduler can form (a prefill chunk of ``max_batched_tokens`` tokens, as
:func:`~diptych.workloads.memory.inference_memory` counts it: the largest single op's
footprint plus one hidden state per token); the reserve is ``kv_reserve_fraction`` of HBM
(runtime, communication buffers, fragmentation: vLLM's ``gpu_memory_utilization``), or, with
the runtime's ``kv_sizing`` "free", ``kv_reserve_fraction`` of what is free once the engine
has loaded (TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction``: ``BaseKVCacheManager::
calculateMaxNumBlocks`` takes that fraction of ``cudaMemGetInfo``'s free bytes after the
engine, its execution context, runtime buffers and decoder are allocated). Either way the
runtime's ``process_gib`` (CUDA's context and libraries, memory the driver never reports)
comes off first. A draft model's cache shares the blocks, so a
block's bytes are the target's plus the draft's. An MTP draft (``--speculative draft=mtp``,
:mod:`diptych.workloads.mtp`) holds all of the target's ``mtp_layers`` modules and their caches
(one attention layer each), the embedding and head being the target's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...arch.runtime import KV_SIZINGS
from ...workloads.config import ModelConfig
from ...workloads.memory import peak_working_bytes
from ...workloads.params import (kv_bytes_per_token_per_chip, kv_groups,
                                 state_bytes_per_sequence, weight_bytes_per_chip)
from ...workloads.serving_step import Step, lower_step
from .afd_split import part_weight_bytes
from .step_time import Replica


@dataclass(frozen=True)
class KvLayout:
    """How a request's tokens map to KV blocks, per attention kind (vLLM's hybrid KV cache
    manager, ``vllm/v1/core/single_type_kv_cache_manager.py`` and
    ``kv_cache_utils._get_kv_cache_groups_uniform_page_size``).

    A block holds ``block_tokens`` tokens of ``unit_layers`` layers of one kind (the greatest
    common divisor of the kinds' layer counts: 18 for gpt-oss's 18 full + 18 sliding layers,
    2 for Gemma 3 27B's 10 + 52; a model without windows has one kind and a block holds every
    layer, the classic layout). ``kinds``: ``(attention, window, units)`` with ``units`` the
    blocks of that kind per ``block_tokens`` tokens (its layers ÷ ``unit_layers``).

    A request's blocks, page-granular as vLLM counts them: a full-attention kind holds the
    blocks of every token after the pinned shared prefix; before a step that starts at
    ``start`` computed tokens, a sliding kind frees the blocks wholly before its next query's
    window (``SlidingWindowManager``: ``max(0, start − window + 1)`` skipped tokens, their
    whole blocks freed) and a chunked kind those before its current chunk
    (``ChunkedLocalAttentionManager``: ``start // chunk · chunk`` skipped tokens). Blocks are
    allocated for every token the step computes (its K/V are written), so a prefill chunk
    holds the whole chunk in every kind until the next step. vLLM groups layers into groups
    of equal size (the smallest kind's count) and pads the last group of a kind (Gemma 3 27B:
    10 + 52 layers → 7 groups of 10, 8 padding layers); diptych counts exact layer-blocks,
    without that padding."""

    block_tokens: int
    unit_layers: int
    kinds: tuple[tuple[str, int | None, int], ...]
    state_blocks: int = 0

    @property
    def windowed(self) -> bool:
        """Some kind frees blocks outside its window."""
        return any(w is not None for _, w, _ in self.kinds)

    @property
    def per_request(self) -> bool:
        """A request's blocks are not the classic count (one block per ``block_tokens``
        tokens of every layer): windows free blocks, or a fixed state takes some."""
        return self.windowed or self.state_blocks > 0

    @property
    def units_per_block(self) -> int:
        """Blocks of all kinds per ``block_tokens`` tokens (every layer that caches K/V)."""
        return sum(u for _, _, u in self.kinds)

    def blocks(self, shared: int, upto: int, start: int) -> int:
        """Blocks a request holds with its first ``upto`` tokens allocated, after the skipped
        blocks of a step starting at ``start`` computed tokens are freed; ``shared`` prefix
        tokens (whole blocks) are in the pinned prefix cache; a request holding any token
        also holds its ``state_blocks`` (linear-attention state, not shared by the prefix)."""
        bs = self.block_tokens
        hi = -(-upto // bs)
        first = shared // bs
        total = self.state_blocks if upto > 0 else 0
        for att, w, u in self.kinds:
            lo = first
            if w is not None:
                skipped = start - w + 1 if att == "sliding" else start // w * w
                lo = max(first, skipped // bs)
            if hi > lo:
                total += u * (hi - lo)
        return total

    def max_blocks(self, total: int, shared: int, step_tokens: int) -> int:
        """An upper bound of the blocks a request of ``total`` tokens (prompt + output) holds
        in any step of at most ``step_tokens`` tokens: a kind with a window ``W`` holds at
        most ``⌊(step + W − 1)/block⌋ + 2`` blocks (the step's tokens and the ``W − 1``
        before them, each end in a partial block)."""
        bs = self.block_tokens
        own = -(-(total - shared) // bs)
        return self.state_blocks + sum(
            u * (own if w is None else min(own, (step_tokens + w - 1) // bs + 2))
            for _, w, u in self.kinds)


def kv_layout(m: ModelConfig, block_tokens: int, state_blocks: int = 0) -> KvLayout:
    """The paged layout of ``m``'s cache (:class:`KvLayout`): the kinds of the layers that
    cache K/V (a linear-attention layer caches none: its state is ``state_blocks``)."""
    kinds = kv_groups(m)
    unit = math.gcd(*(n for _, _, n in kinds))
    return KvLayout(block_tokens, unit, tuple((a, w, n // unit) for a, w, n in kinds),
                    state_blocks)


def state_blocks(state_bytes: float, block_bytes: float) -> int:
    """Blocks of ``block_bytes`` one request's fixed state of ``state_bytes`` takes (vLLM's
    hybrid allocator gives a Mamba-style layer's state whole pages per request, page sizes
    unified with the attention layers'; diptych rounds the state up to whole blocks)."""
    if state_bytes <= 0:
        return 0
    return max(1, math.ceil(state_bytes / block_bytes)) if block_bytes > 0 else 1


@dataclass(frozen=True)
class KvBudget:
    """Bytes per chip and the resulting block count of one replica's KV cache; a block is
    ``block_tokens`` tokens of ``layout.unit_layers`` layers (:class:`KvLayout`)."""

    capacity_bytes: float
    weights_bytes: float
    activation_bytes: float
    reserve_bytes: float
    bytes_per_token: float
    block_tokens: int
    blocks: int
    layout: KvLayout
    #: blocks the chip's second memory tier adds to the scheduler's pool (``--kv-offload
    #: tier``, :mod:`.kv_tier`; 0: the pool is ``blocks``)
    tier2_blocks: int = 0
    #: blocks the chip's third tier adds to it (``[dram3]`` under ``--kv-offload tier``)
    tier3_blocks: int = 0
    #: bytes the engine allocates before it sizes its cache (the runtime's sampler's
    #: logits buffers, :func:`~diptych.arch.sampler.engine_buffer_bytes`)
    engine_bytes: float = 0.0
    #: bytes the engine's process holds besides them (the runtime's ``process_gib``)
    process_bytes: float = 0.0

    @property
    def pool_blocks(self) -> int:
        """Blocks the scheduler allocates from: the first tier's and the pooled slower ones'."""
        return self.blocks + self.tier2_blocks + self.tier3_blocks

    @property
    def kv_bytes(self) -> float:
        return self.capacity_bytes - self.weights_bytes - self.activation_bytes \
            - self.reserve_bytes - self.engine_bytes - self.process_bytes

    @property
    def tokens(self) -> int:
        """Tokens the cache holds in every layer (a prefill chunk's, say)."""
        return self.blocks // self.layout.units_per_block * self.block_tokens

    @property
    def block_bytes(self) -> float:
        """Bytes of one block on one chip."""
        return _block_bytes(self.block_tokens, self.bytes_per_token, self.layout)

    def to_dict(self) -> dict:
        return {"capacity_bytes": self.capacity_bytes, "weights_bytes": self.weights_bytes,
                "activation_bytes": self.activation_bytes, "reserve_bytes": self.reserve_bytes,
                **({"engine_bytes": self.engine_bytes} if self.engine_bytes else {}),
                **({"process_bytes": self.process_bytes} if self.process_bytes else {}),
                "kv_bytes": self.kv_bytes, "bytes_per_token": self.bytes_per_token,
                "block_tokens": self.block_tokens, "blocks": self.blocks, "tokens": self.tokens,
                "block_layers": self.layout.unit_layers,
                "state_blocks_per_request": self.layout.state_blocks,
                "layer_kinds": [{"attention": a, "window": w, "blocks_per_block_tokens": u}
                                for a, w, u in self.layout.kinds],
                **({"tier2_blocks": self.tier2_blocks, "tier2_tokens": self.tier2_blocks
                    // self.layout.units_per_block * self.block_tokens}
                   if self.tier2_blocks else {}),
                **({"tier3_blocks": self.tier3_blocks, "tier3_tokens": self.tier3_blocks
                    // self.layout.units_per_block * self.block_tokens}
                   if self.tier3_blocks else {})}


def _block_bytes(block_tokens: int, per_token: float, layout: KvLayout) -> float:
    """One block's bytes: ``block_tokens`` tokens of ``unit_layers`` of all the layers."""
    if layout.units_per_block == 1:                  # every layer: the classic block exactly
        return block_tokens * per_token
    return block_tokens * per_token / layout.units_per_block


def activation_bytes(r: Replica, max_tokens: int) -> float:
    """Peak activation bytes per chip of a step of ``max_tokens`` prompt tokens."""
    w = lower_step(r.model, Step(prefill=((max_tokens, 0),)), precision=r.precision, tp=r.tp,
                   attention=r.attention, experts=r.experts)
    return peak_working_bytes(w) + max_tokens * r.model.hidden_size * r.precision.a_bytes


def kv_budget(r: Replica, *, block_tokens: int, max_batched_tokens: int,
              reserve_fraction: float, draft: Replica | None = None,
              engine_bytes: float = 0.0, sizing: str = "capacity",
              process_bytes: float = 0.0) -> KvBudget:
    """The KV capacity of replica ``r`` (module docstring). With a ``draft`` model, whose
    cache shares the target's blocks, a block holds every layer of both and keeps every
    token (no window frees blocks). ``engine_bytes``: what the engine allocates per chip
    before sizing its cache besides weights and activations (its sampler's buffers);
    ``process_bytes``: what its process holds besides (CUDA's context, libraries). ``sizing``
    "capacity": the reserve is ``reserve_fraction`` of the chip's capacity; "free": of what is
    left once everything else is allocated (module docstring). Raises ValueError naming the
    shortfall when nothing is left for the cache."""
    cap = float(r.chip.dram.capacity_bytes)
    w = (part_weight_bytes(r, "attention", r.tp) if r.afd_side else    # AFD: no FFN
         weight_bytes_per_chip(r.model, r.tp, r.precision, r.experts.ep,
                               whole_experts=r.experts.whole))
    per_tok = kv_bytes_per_token_per_chip(r.model, r.precision.kv, r.tp)
    act = activation_bytes(r, max_batched_tokens)
    if draft is not None:      # an MTP draft: every one of the target's MTP modules resident
        copies = r.model.mtp_layers if draft.model.mtp_module else 1
        # an AFD attention pool's MTP draft holds its non-FFN part (the FFN pool the rest)
        w += copies * (part_weight_bytes(draft, "attention", draft.tp) if draft.afd_side else
                       weight_bytes_per_chip(draft.model, draft.tp, draft.precision,
                                             draft.experts.ep,
                                             whole_experts=draft.experts.whole))
        per_tok += copies * kv_bytes_per_token_per_chip(draft.model, draft.precision.kv, draft.tp)
        act = max(act, activation_bytes(draft, max_batched_tokens))
    state = state_bytes_per_sequence(r.model, r.precision.activations, r.tp)
    if draft is not None:
        state += state_bytes_per_sequence(draft.model, draft.precision.activations, draft.tp)
    layout = (KvLayout(block_tokens, r.model.layers, (("full", None, 1),)) if draft is not None
              else kv_layout(r.model, block_tokens))
    if per_tok <= 0:
        raise ValueError(f"{r.model.name}: no layer caches K/V (every layer is linear "
                         f"attention); serve's paged cache needs at least one attention layer")
    unit = _block_bytes(block_tokens, per_tok, layout)
    if state:
        layout = replace(layout, state_blocks=state_blocks(state, unit))
    if sizing not in KV_SIZINGS:
        raise ValueError(f"KV sizing {sizing!r}: expected one of {', '.join(KV_SIZINGS)}")
    if sizing == "capacity":
        reserve = reserve_fraction * cap
    else:                               # a fraction of what the loaded engine leaves free
        reserve = reserve_fraction * max(cap - w - act - engine_bytes - process_bytes, 0.0)
    free = cap - w - act - reserve - engine_bytes - process_bytes
    blocks = int(math.floor(free / unit)) if free > 0 else 0
    if blocks < layout.units_per_block + layout.state_blocks:
        gib = 2.0 ** 30
        raise ValueError(
            f"no room for a KV cache: {r.model.name} on {r.chip.name} at tp={r.tp} needs "
            f"{w / gib:.1f} GiB of weights + {act / gib:.1f} GiB of activations + "
            + (f"{engine_bytes / gib:.1f} GiB of the engine's buffers + " if engine_bytes
               else "")
            + (f"{process_bytes / gib:.1f} GiB of the engine's process + " if process_bytes
               else "")
            + f"{reserve / gib:.1f} GiB reserve per chip, and the chip has {cap / gib:.1f} GiB; "
            f"use more chips ({'--attention-chips' if r.afd_side else '--tp'}), narrower "
            f"weights (--weights-dtype) or a smaller "
            f"--max-batched-tokens")
    return KvBudget(capacity_bytes=cap, weights_bytes=w, activation_bytes=act,
                    reserve_bytes=reserve, bytes_per_token=per_tok, block_tokens=block_tokens,
                    blocks=blocks, layout=layout, engine_bytes=engine_bytes,
                    process_bytes=process_bytes)
