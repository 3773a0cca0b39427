"""A lowered phase: the blocks of the program IR (:mod:`diptych.workloads.program`) one phase
of a model runs, and the programs a step assembles from them.

Identical transformer layers are lowered (and later simulated) once and scaled by ``repeat``;
ops within a block run in order. A block's ``stage`` says where in a training step it belongs.

**Tensors.** Every node of a lowered block carries an :class:`~diptych.workloads.program.Access`
record naming the tensors its op reads, writes and updates, with its role (a GEMM's A, B or C
operand) and the share of the tensor it moves (a partial access: RoPE on the rotated part of
q and k, the touched rows of an embedding table). The names live in the block's tensor table
(``tensors``: one layer's weights, activations, KV cache, gradients) or, for tensors that
connect blocks (the embedding's output, the last layer's output, the logits), in
``program_tensors``; ``carry`` hands the layer output to the next layer's input. A backward
(or recompute) block names the forward tensors it reads by their forward names and says which
block they come from (``source``). The access records are kept in the nodes, beside the ops,
never in them: an op record stays a pure shape (``Gemm``, ``VectorOp``, ...) that the engine
memoises on.

A :class:`Workload` is one phase's blocks (forward, recompute, backward and optimizer blocks
of a training step; one step's blocks in inference); :func:`program_pieces` assembles from
them the :class:`~diptych.workloads.program.Program` (s) the scheduler runs (docs/program.md):
each block with its repeats per micro-batch or step, the imports of the forward tensors its
backward reads, the data-parallel gradient all-reduce; a block without access records (a
topology file, a hand-made block) becomes a chain: each op reads its predecessor's output.
The summed execution (:func:`diptych.sim.run.summed.simulate_workload`) runs the same blocks'
nodes one after another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field

from .fused_attention import FusedAttention
from .ops import Collective, Gemm, Op, VectorOp
from .program import STAGES, Access, Block, Carry, Import, Node, Program, Tensor, Use

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


# ---- from a workload to programs -----------------------------------------------------------
def output_bytes(op) -> float:
    """Bytes an op writes (a chain block's tensor sizes)."""
    if isinstance(op, Gemm):
        return op.c_bytes
    if isinstance(op, Collective):
        return op.bytes
    return op.write_bytes


@dataclass(frozen=True)
class Piece:
    """A program run ``times`` times in a row (decode steps, a training step's micro-batches
    but the last), and whether the per-step fixed cost follows each run (``step``)."""

    program: Program
    times: int = 1
    step: bool = True
    label: str = ""


def _chain_block(b: Block, repeat: int, prev: Tensor | None, i: int
                 ) -> tuple[Block, list[Tensor], Tensor]:
    """A block without names as a chain: op j reads op j−1's output; repeat k's first op reads
    repeat k−1's last output (the previous block's for k = 0)."""
    outs = [Tensor(f"out{j}", float(output_bytes(n.payload))) for j, n in enumerate(b.nodes)]
    entry = prev or Tensor(f"chain{i}.in", 0.0)
    exit_ = Tensor(f"chain{i}.out", outs[-1].bytes)
    glob = ([] if prev else [entry]) + [exit_]
    inp = Tensor("in", entry.bytes)
    nodes = [dataclasses.replace(n, reads=("in",) if j == 0 else (outs[j - 1].name,),
                                 writes=(outs[j].name,))
             for j, n in enumerate(b.nodes)]
    blk = Block(b.name, (inp, *outs), tuple(nodes), repeat,
                (Carry("in", outs[-1].name, entry.name, exit_.name),))
    return blk, glob, exit_


def _named_block(b: Block, repeat: int, source: Block | None, extra_nodes=(),
                 extra_tensors=()) -> Block:
    """A lowered block with names as a program block: its nodes (and ``extra_nodes``), its
    tensors, and the imports of the forward tensors a backward or recompute block reads from
    its ``source``."""
    nodes = list(b.nodes) + list(extra_nodes)
    tensors = list(b.tensors) + list(extra_tensors)
    imports = ()
    if source is not None:
        src = {t.name for t in source.tensors}
        local = {t for n in nodes for t in n.writes + n.updates}
        used = dict.fromkeys(t for n in nodes for t in n.reads)
        imports = tuple(Import(t, source.name, t) for t in used if t in src and t not in local)
    return Block(b.name, tuple(tensors), tuple(nodes), repeat, b.carry, imports)


def _program(name: str, blocks: list[tuple[Block, int]], by_name: dict[str, Block],
             extras: dict | None = None) -> Program:
    """A Program of ``(workload block, repeat)`` pairs; blocks with access records keep their
    names, the others become chains. ``extras[block name]`` = (nodes, tensors) to append."""
    extras = extras or {}
    out, glob = [], {}
    prev = None
    for i, (b, L) in enumerate(blocks):
        if not b.access:
            blk, g, prev = _chain_block(b, L, prev, i)
            for t in g:
                glob[t.name] = t
            out.append(blk)
            continue
        for t in b.program_tensors:
            old = glob.setdefault(t.name, t)
            if old != t:
                raise ValueError(f"program tensor {t.name!r} is declared twice differently: "
                                 f"{old!r} and {t!r}")
        nodes, tensors = extras.get(b.name, ((), ()))
        out.append(_named_block(b, L, by_name.get(b.source) if b.source else None,
                                nodes, tensors))
    return Program(name, out, tuple(glob.values()))


def _merge_recompute(rec: Block, bwd: Block) -> Block:
    """A recompute block and the backward block of the same layers as one block: each layer
    is recomputed right before its backward (activation checkpointing) — the recomputation
    starts when the gradient reaches the layer (an ordering-only read of the carried
    gradient), and the backward ops read the recomputed tensors locally."""
    dy = bwd.carry[0].input
    first = rec.access[0]
    access = (Access(first.uses + (Use(dy, "read", 0.0, "dep"),), first.rmw),) + rec.access[1:]
    tensors = {t.name: t for t in bwd.tensors}
    for t in rec.tensors:
        tensors.setdefault(t.name, t)
    return bwd.with_ops(rec.ops + bwd.ops, access + bwd.access,
                        tensors=tuple(tensors.values()))


def program_pieces(w: Workload, *, dp_buckets: dict | None = None) -> list[Piece]:
    """The programs a workload's step runs, in order (docs/program.md, "Programs of a run").

    Inference: one program per step (a decode of ``steps`` steps runs it ``steps`` times).
    Training: the micro-batch (forward, recompute, backward) runs ``micro_batches − 1`` times,
    then the last micro-batch with the data-parallel gradient all-reduce, bucketed per layer
    (``dp_buckets[block name]`` = bytes per repeat; from :func:`.train.dp_buckets`), then
    the optimizer. Repeats are per micro-batch / per step here."""
    by_name = {b.name: b for b in w.blocks}
    if w.phase == "train":
        n = w.info.get("micro_batches", 1)
        mb = [b for b in w.blocks if b.stage != "optimizer"]
        rec = {b.source: b for b in mb if b.stage == "recompute"}
        seq = []
        for b in mb:
            if b.stage == "recompute":
                continue
            if b.stage == "backward" and b.source in rec:
                b = _merge_recompute(rec[b.source], b)
            seq.append((b, b.repeat // n))
        pieces = []
        dp = w.info.get("dp", 1)
        if n > 1 or dp == 1:
            pieces.append(Piece(_program(f"{w.phase} micro-batch", seq, by_name),
                                n - 1 if dp > 1 else n, step=False, label="micro-batch"))
        if dp > 1:
            pieces.append(Piece(_program(f"{w.phase} last micro-batch", seq, by_name,
                                         _dp_nodes(seq, dp_buckets or {}, dp)),
                                1, step=False, label="last micro-batch + gradient all-reduce"))
        opt = [(b, b.repeat) for b in w.blocks if b.stage == "optimizer"
               and not any(isinstance(o, Collective) and "dp" in o.tags for o in b.ops)]
        if opt:
            pieces.append(Piece(_program(f"{w.phase} optimizer", opt, by_name), 1, step=False,
                                label="optimizer"))
        return [dataclasses.replace(pieces[-1], step=True)] if len(pieces) == 1 else \
            pieces[:-1] + [dataclasses.replace(pieces[-1], step=True)]
    steps = w.info.get("steps", 1)
    seq = [(b, b.repeat // steps) for b in w.blocks]
    return [Piece(_program(w.phase, seq, by_name), steps, label="step")]


def _dp_nodes(seq, buckets: dict, dp: int) -> dict:
    """Per backward block, the data-parallel all-reduce of its gradients (one bucket per
    repeat), after the block's weight-gradient ops."""
    out = {}
    for b, _ in seq:
        if b.stage != "backward" or b.source not in buckets:
            continue
        nbytes = buckets[b.source]
        grads = tuple(dict.fromkeys(t for a in b.access for t in a.updates))
        op = Collective(name="grad_all_reduce", kind="all_reduce", bytes=nbytes, group=dp,
                        tags=("dp",))
        node = Node("grad_all_reduce", reads=grads, writes=("g.reduced",), unit="link",
                    payload=op)
        out[b.name] = ((node,), (Tensor("g.reduced", float(nbytes), "gradient",
                                        live_out=True),))
    return out
