"""The lowered op graph: blocks of ops, each block standing for ``repeat`` identical layers.

Identical transformer layers are lowered (and later simulated) once and scaled by ``repeat``;
ops within a block run in order. ``stage`` says where in a training step a block belongs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..sim.ops import Collective, Gemm, Op, VectorOp
from .fused import FusedAttention

STAGES = ("forward", "recompute", "backward", "optimizer")


@dataclass(frozen=True)
class Block:
    """``repeat`` identical copies of ``ops`` (one transformer layer, the head, ...)."""

    name: str
    repeat: int
    ops: tuple[Op, ...]
    stage: str = "forward"

    def __post_init__(self):
        if self.repeat < 1:
            raise ValueError(f"repeat must be a positive integer, not {self.repeat!r}")
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {self.stage!r}")

    @property
    def gemm_flops(self) -> float:
        """GEMM FLOPs of ``repeat`` copies, fused attention's included (with its recompute)."""
        return self.repeat * sum(o.flops if isinstance(o, Gemm) else o.gemm_flops
                                 for o in self.ops if isinstance(o, (Gemm, FusedAttention)))

    @property
    def recompute_flops(self) -> float:
        """GEMM FLOPs fused attention backward spends recomputing scores (not model FLOPs)."""
        return self.repeat * sum(o.recompute_flops for o in self.ops
                                 if isinstance(o, FusedAttention))


@dataclass(frozen=True)
class Workload:
    """One phase of a model lowered for one chip of a tensor-parallel group.

    ``tokens`` is the number of tokens the phase processes per model replica (prefill:
    batch × prompt; decode: batch per step; train: batch × sequence).
    """

    phase: str
    blocks: tuple[Block, ...]
    tokens: int
    batch: int
    info: dict = field(default_factory=dict, compare=False)

    def items(self) -> Iterator[tuple[Block, Op]]:
        for b in self.blocks:
            for op in b.ops:
                yield b, op

    def flops(self, stages: tuple[str, ...] = STAGES, *, recompute: bool = True) -> float:
        """GEMM FLOPs (2 × MACs) of the blocks in ``stages``, repeats included; without
        ``recompute``, less the scores fused attention backward recomputes (model FLOPs)."""
        return sum(b.gemm_flops - (0.0 if recompute else b.recompute_flops)
                   for b in self.blocks if b.stage in stages)

    @property
    def vector_ops(self) -> float:
        return sum(b.repeat * (o.flops if isinstance(o, VectorOp) else o.vector_flops)
                   for b in self.blocks for o in b.ops
                   if isinstance(o, (VectorOp, FusedAttention)))

    @property
    def collective_bytes(self) -> float:
        return sum(b.repeat * o.bytes for b in self.blocks for o in b.ops
                   if isinstance(o, Collective))

    def op_count(self) -> int:
        return sum(len(b.ops) for b in self.blocks)
