"""A fused attention kernel as its tiles run it, on a chip with an ``[attention]`` table.

FlashAttention-style kernels give each core a tile of ``block_q`` query rows of one head and
walk the keys ``block_k`` at a time (:class:`~diptych.arch.chip.AttentionKernel`). Three
things the sum of the kernel's parts (:mod:`diptych.sim.run.attention`) does not see follow
from that (Shah et al., FlashAttention-3, arXiv 2407.08608, §3 and Figs. 5–6):

* **whole blocks**: a tile visits every key block any of its rows sees, so under a causal
  mask the diagonal blocks are computed in full and a short sequence wastes a larger share
  (:func:`call_blocks` counts the (query tile, key block) pairs of each call; the parts'
  GEMMs and softmax, timed by the engine at the exact mean span, are scaled by
  ``pairs · block_q · block_k ÷`` their scores);
* **a fixed cost per tile**: loading the tile's queries and filling the pipeline, the final
  rescale and the output store, ``tile_overhead_cycles`` per tile and call, spread over the
  cores, which a tile of few key blocks amortises badly;
* **the exponentials on the special-function units**: one per score (forward, and in the
  backward's recomputation of P), ``exp_per_cycle`` per core, and the rest of the softmax on
  the vector lanes; ``softmax_overlap`` of the softmax's time hides under the matrix products
  (FA3's warp-specialised ping-pong), the rest follows them;
* **the MMA instructions' rate**: the matrix products take ``1 / mma_fraction`` of the
  engine's time (a kernel written for an older instruction set, FlashAttention-2's
  ``mma.sync`` on Hopper, reaches a fraction of the cores' rate; 1 for a native kernel);
* **attention dropout**: a call that drops probabilities (tagged ``dropout``,
  :mod:`~diptych.workloads.dropout`) draws its mask with Philox inside the kernel, forward and
  backward, and moves no more bytes; it takes ``1 + dropout_cost`` of the tile time, the
  kernel's measured share;
* **the masked backward's rate**: a backward call under a mask (causal, windowed, chunked)
  runs its share of the tile work at ``bwd_causal_fraction`` of the unmasked rate. Measured
  causal backward kernels run at 0.82-0.96 of their unmasked rate per useful FLOP at 4k-16k
  tokens (NVIDIA cudnn-frontend's SDPA benchmarks: cuDNN, FlashAttention-2), where whole
  diagonal blocks and the per-tile costs account for 0.93-0.97 (h100); the rest (the masked tiles'
  path, the uneven tiles' tail on the cores) is not separable from outside the closed
  kernels, so it is one measured fraction per kernel (docs/validation-published.md, "The
  causal backward").

The cores share the tiles by the table's ``dispatch``: ``balanced``, the time is the largest
of the mean load (the core work plus the tiles' fixed cost, over the cores), the longest tile
on one core, and the waves of the shortest (exact when every tile is alike); ``grid``, as a
GPU's block scheduler hands out a grid of one tile per block, in launch order to whichever
core frees first (:func:`grid_makespan`: a small grid ends on a ragged round, its last and
longest causal tiles running while other cores idle). The core work is the matrix products
plus the softmax's unhidden share (all of it hidden, at 1: the larger of the two). The DRAM
side is unchanged (:func:`~diptych.sim.run.attention.fused_stats` takes the larger).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from ...workloads import dropout
from ...workloads.fused_attention import AttnCall, FusedAttention
from ...workloads.ops import Gemm, VectorOp


@dataclass(frozen=True)
class Blocks:
    """One call's tiling for one head: ``tiles`` query tiles, ``pairs`` (tile, key block)
    pairs visited, ``longest`` and ``shortest`` the most and fewest key blocks one tile
    visits, ``scores`` the scores its mask really has (for the check of the rule)."""

    tiles: int
    pairs: int
    longest: int
    scores: int
    shortest: int = 0


def _visible(call: AttnCall, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest key position visible to queries at ``pos`` (both inclusive; hi <
    lo: none), within the call's keys."""
    k0, k1 = call.kv_start, call.kv_start + call.kv_len - 1
    if call.mask == "full":
        return np.full_like(pos, k0), np.full_like(pos, k1)
    hi = np.minimum(pos, k1)
    if call.mask == "chunked" and call.window:
        lo = (pos // call.window) * call.window
    elif call.window:
        lo = pos - call.window + 1
    else:
        lo = np.zeros_like(pos)
    return np.maximum(lo, k0), hi


def tile_blocks(call: AttnCall, block_q: int, block_k: int) -> np.ndarray:
    """Key blocks each query tile of ``call`` visits (one head), in query order: every block
    from the one holding its first row's lowest visible key to the one holding its last
    row's highest (the visible range only grows with the position)."""
    tiles = math.ceil(call.q_len / block_q)
    j = np.arange(tiles, dtype=np.int64)
    first = call.past + j * block_q
    last = call.past + np.minimum((j + 1) * block_q, call.q_len) - 1
    lo, _ = _visible(call, first)
    _, hi = _visible(call, last)
    return np.where(hi >= lo, (hi - call.kv_start) // block_k - (lo - call.kv_start) // block_k
                    + 1, 0)


def call_blocks(call: AttnCall, block_q: int, block_k: int) -> Blocks:
    """The tiling of ``call`` for one head (see :class:`Blocks`, :func:`tile_blocks`)."""
    nb = tile_blocks(call, block_q, block_k)
    tiles = len(nb)
    rows = call.past + np.arange(call.q_len, dtype=np.int64)
    rlo, rhi = _visible(call, rows)
    return Blocks(tiles=tiles, pairs=int(nb.sum()), longest=int(nb.max(initial=0)),
                  scores=int(np.maximum(rhi - rlo + 1, 0).sum()),
                  shortest=int(nb.min()) if tiles else 0)


def tiled(op: FusedAttention, chip) -> bool:
    """Whether ``op`` runs by the tile rule on ``chip`` (an ``[attention]`` table and calls)."""
    return getattr(chip, "attention", None) is not None and bool(op.calls)


def tile_shaped_parts(op: FusedAttention, chip) -> tuple:
    """``op``'s parts as the engine times them under the tile rule: one query head per batch
    entry, and every GEMM dimension that is the parts' mean key span (the scores' N) rounded
    up to whole key blocks, so that the engine's rate is the one of the kernel's whole blocks
    (an odd mean, e.g. 4,097 keys, would otherwise cost the engine a fold of one column); the
    vector parts as they are.

    Under grouped-query attention the lowering folds a KV head's ``r`` query heads into one
    GEMM (the rows ``r·q``; the key-side gradients dK = dSᵀQ and dV = PᵀdO reduce over them,
    K = ``r·q``); the kernels give each query head its own tiles and sum the key-side
    gradients over the group after [S: Dao-AILab/flash-attention csrc/flash_attn/
    flash_api.cpp ``mha_bwd``: ``dk_expanded``/``dv_expanded`` of ``num_heads`` heads, then
    ``at::sum_out`` over ``num_heads / num_heads_k``; FA3 hopper accumulates them in FP32
    per KV head], so the engine times them per query head: batch × ``r``, ``r·q`` → ``q``.
    (A fold equal to the key span or the head dimension is left as it is: the two cannot be
    told apart.)"""
    import dataclasses
    g0 = op.gemms[0]
    keys = g0.n
    r = op.groups // g0.batch if op.groups and op.groups % g0.batch == 0 else 1
    rows = g0.m // r if r > 1 and g0.m % r == 0 else 0
    unfold = rows > 0 and rows * r not in (keys, g0.k)
    bk = chip.attention.block_k
    aligned = -(-keys // bk) * bk
    if aligned == keys and not unfold:
        return op.parts
    out = []
    for p in op.parts:
        if isinstance(p, Gemm):
            if unfold and p.batch == g0.batch:
                d = "m" if p.m == rows * r else "k" if p.k == rows * r else None
                if d:
                    p = dataclasses.replace(p, **{d: rows, "batch": p.batch * r})
            p = dataclasses.replace(p, **{d: aligned for d in ("m", "k", "n")
                                          if getattr(p, d) == keys})
        out.append(p)
    return tuple(out)


def _scores(parts) -> float:
    """The scores the parts' first GEMM computes (what the engine timed)."""
    g = next(p for p in parts if isinstance(p, Gemm))
    return float(g.batch) * g.m * g.n


def work_scale(op: FusedAttention, chip) -> float:
    """The tiles' work over the tile-shaped parts' (:func:`tile_shaped_parts`): ``(tile, key
    block) pairs · block_q · block_k ÷`` the parts' scores. It scales their compute time and
    their core energy (MACs, SRAM, vector: whole blocks are computed, not the mean span)."""
    return _tiling(op, chip)[1]


def _tiling(op: FusedAttention, chip) -> tuple[list[Blocks], float]:
    """Each call's :class:`Blocks` (one head) and :func:`work_scale`."""
    at = chip.attention
    blocks = [call_blocks(c, at.block_q, at.block_k) for c in op.calls]
    pairs = op.groups * sum(b.pairs for b in blocks)
    return blocks, pairs * at.block_q * at.block_k / _scores(tile_shaped_parts(op, chip))


def tiled_compute_seconds(op: FusedAttention, chip, part_stats, compute_seconds) -> float:
    """Compute time of ``op`` on ``chip`` by the tile rule (module docstring), from the
    engine's results for its tile-shaped parts (:func:`tile_shaped_parts`; ``part_stats`` in
    their order) and ``compute_seconds(stats, chip)`` (a part's time without the DRAM
    limit)."""
    at = chip.attention
    bq, bk = at.block_q, at.block_k
    parts = tile_shaped_parts(op, chip)
    blocks, scale = _tiling(op, chip)
    pairs = op.groups * sum(b.pairs for b in blocks)
    tiles = op.groups * sum(b.tiles for b in blocks)
    longest = max(b.longest for b in blocks)
    shortest = min(b.shortest for b in blocks)
    mma = vec = 0.0
    exps = 0.0
    for part, st in zip(parts, part_stats):
        t = compute_seconds(st, chip) * scale
        if isinstance(part, Gemm):
            mma += t / at.mma_fraction      # the kernel's MMA instructions' share of the rate
        elif isinstance(part, VectorOp) and part.kind == "softmax" and at.exp_per_cycle > 0:
            share = 1.0 / part.ops_per_element if part.ops_per_element else 0.0
            vec += t * (1.0 - share)          # max, subtract, sum, rescale: the lanes
            exps += pairs * bq * bk           # one exponential per score, on the SFUs
        else:
            vec += t
    clock, cores = chip.clock_hz, chip.tensor_cores
    sfu = exps / (cores * at.exp_per_cycle * clock) if exps else 0.0
    bwd = "bwd" in op.tags
    hidden = 0.0 if bwd else at.softmax_overlap
    overhead = at.bwd_tile_overhead_cycles if bwd else at.tile_overhead_cycles
    soft = sfu + vec
    work = max(mma, soft) if hidden >= 1.0 else mma + (1.0 - hidden) * soft
    if bwd:
        work += pairs * at.bwd_block_overhead_cycles / (cores * clock)
        masked = op.groups * sum(b.pairs for b, c in zip(blocks, op.calls) if c.mask != "full")
        if masked and at.bwd_causal_fraction < 1.0:
            # the masked calls' share of the work at their lower rate
            work *= 1.0 + masked / pairs * (1.0 / at.bwd_causal_fraction - 1.0)
    if not pairs:
        return 0.0
    # a tile of n key blocks takes n·pair + overhead on its core; the cores share the tiles
    # (longest first), so the time is at least the mean load, the longest tile, and the
    # waves of the shortest (exact for equal tiles)
    pair = work * cores / pairs
    ov = overhead / clock
    if at.dispatch == "grid":
        t = grid_makespan(op, chip, pair, ov, reverse=bwd)
    else:
        t = max(work + tiles * ov / cores, longest * pair + ov,
                math.ceil(tiles / cores) * (shortest * pair + ov))
    # a kernel that drops probabilities draws its mask inside, at its measured cost
    return t * (1.0 + at.dropout_cost) if dropout.TAG in op.tags else t


def grid_makespan(op: FusedAttention, chip, pair_s: float, tile_s: float, *,
                  reverse: bool = False) -> float:
    """Seconds until the last core finishes ``op``'s tiles handed out as a GPU's hardware
    block scheduler hands out a grid of one tile per block (``[attention] dispatch =
    "grid"``): in launch order, query tile fastest, then call (sequence), then head
    (FlashAttention-2's forward grid ``(m_block, batch, head)`` [S: Dao-AILab/flash-attention
    csrc/flash_attn/src/flash_fwd_launch_template.h, ``dim3 grid(num_m_block, params.b,
    params.h)``; flash_fwd_kernel.h ``m_block = blockIdx.x``]), each to whichever core frees
    first; a tile of ``n`` key blocks holds its core ``n·pair_s + tile_s``. ``reverse``: each
    call's tiles longest first (the backward kernels' grid is over key blocks, ``(n_block,
    batch, head)``, and under a causal mask the first key block is the longest; diptych
    keeps the forward's query tiles and reverses their order). Greedy list scheduling, the
    core loads kept in a heap."""
    at = chip.attention
    head: list[float] = []
    for c in op.calls:
        nb = tile_blocks(c, at.block_q, at.block_k)
        head.extend((nb[::-1] if reverse else nb).tolist())
    times = [n * pair_s + tile_s for n in head]
    loads = [0.0] * chip.tensor_cores
    for _ in range(op.groups):
        for t in times:
            heapq.heapreplace(loads, loads[0] + t)
    return max(loads)
