"""Lower one training step: forward, (recompute), backward, optimizer, gradient all-reduce.

Backward is derived op by op from the forward graph, so every linear layer and every attention
product gets its two backward GEMMs: for ``C[m×n] = A[m×k]·B[k×n]``, ``dA = dC·Bᵀ``
(``m×n·n×k``, dX / dQ / dP) and ``dB = Aᵀ·dC`` (``k×m·m×n``, dW / dK / dV). Each has the
forward product's MAC count, so backward GEMM FLOPs are exactly twice forward and a step is
3× forward (4× with full recomputation, which re-runs every layer's forward before its
backward). Fused attention's backward also recomputes the scores QKᵀ (FlashAttention), which
counts in hardware FLOPs only. Vector ops get a backward op of the same kind with twice the
ALU work that reads the saved input and the incoming gradient and writes the input gradient;
each tensor-parallel all-reduce has its mirror in backward (Megatron's f/g pair).

The optimizer is AdamW over the rank's parameter shard: it reads the gradient, the master copy
and both moments and writes them back together with the working-precision weights. With data
parallelism the gradients are all-reduced over the ``dp`` replicas first (no ZeRO sharding).
"""

from __future__ import annotations

import math

from ..sim.ops import Collective, Gemm, Op, VectorOp
from .config import ModelConfig
from .fused import FusedAttention, fused_backward
from .graph import Block, Workload
from .lower import (_check_common, _Ctx, _embedding, _head, _layer_blocks, check_attention,
                    keys_info)
from .params import params_per_chip
from .precision import Precision

#: Parameters per AdamW op: the update runs as a sequence of equal chunks (as multi-tensor
#: apply kernels do), one op repeated, so the engine simulates one 16 Mi-element stream instead
#: of a billion-element one; a streaming op's time per element is flat at that size.
ADAMW_CHUNK = 2**24

#: ALU ops per parameter of one AdamW update [assumption: m and v updates (3 + 4), bias
#: corrections folded into the step size, sqrt, add eps, divide, weight decay, lr scale,
#: subtract, cast to working precision ≈ 14].
ADAMW_OPS_PER_PARAM = 14.0


def backward_ops(op: Op, p: Precision) -> list[Op]:
    """The backward ops of one forward op, in execution order (a fused attention block's
    backward is one fused block, see :func:`diptych.workloads.fused.fused_backward`)."""
    if isinstance(op, FusedAttention):
        return [fused_backward(op, lambda o: backward_ops(o, p))]
    if isinstance(op, Gemm):
        weight = "weight" in op.tags
        da = Gemm(name=f"{op.name}.dgrad", m=op.m, k=op.n, n=op.k, batch=op.batch,
                  a_dtype=p.activations, b_dtype=op.b_dtype, c_dtype=p.activations,
                  acc_dtype=op.acc_dtype, b_is_weight=op.b_is_weight,
                  tags=op.tags + ("dgrad",))
        db = Gemm(name=f"{op.name}.wgrad" if weight else f"{op.name}.dgrad_b", m=op.k, k=op.m,
                  n=op.n, batch=op.batch, a_dtype=op.a_dtype, b_dtype=p.activations,
                  c_dtype=p.grads if weight else p.activations, acc_dtype=op.acc_dtype,
                  b_is_weight=op.batch == 1,
                  tags=tuple(t for t in op.tags if t != "weight") + ("wgrad",))
        return [da, db]
    if isinstance(op, VectorOp):
        return [VectorOp(name=f"{op.name}.bwd", kind=op.kind, elements=op.elements,
                         ops_per_element=2.0 * op.ops_per_element,
                         read_bytes=op.read_bytes + op.write_bytes, write_bytes=op.read_bytes,
                         dtype=op.dtype, tags=op.tags + ("bwd",))]
    return [Collective(name=f"{op.name}.bwd", kind=op.kind, bytes=op.bytes, group=op.group,
                       tags=op.tags + ("bwd",))]


def _backward_block(b: Block, p: Precision) -> Block:
    ops: list[Op] = []
    for op in reversed(b.ops):
        ops += backward_ops(op, p)
    return Block(f"{b.name}.bwd", b.repeat, tuple(ops), "backward")


def _adamw(name: str, n: int, p: Precision) -> VectorOp:
    state = p.optimizer_state_bytes_per_param
    return VectorOp(name=name, kind="optimizer", elements=n, ops_per_element=ADAMW_OPS_PER_PARAM,
                    read_bytes=n * (p.g_bytes + state), write_bytes=n * (state + p.w_bytes),
                    dtype="fp32", tags=("optimizer",))


def optimizer_blocks(m: ModelConfig, p: Precision, tp: int, dp: int) -> list[Block]:
    """Gradient all-reduce over ``dp`` replicas (if any) and the AdamW update of one shard:
    it reads the gradient, master copy and both moments and writes them back with the
    working-precision weights, in chunks of :data:`ADAMW_CHUNK` parameters."""
    n = max(1, math.ceil(params_per_chip(m, tp)))
    blocks: list[Block] = []
    if dp > 1:
        blocks.append(Block("grad_all_reduce", 1, (
            Collective(name="grad_all_reduce", kind="all_reduce", bytes=n * p.g_bytes,
                       group=dp, tags=("dp",)),), "optimizer"))
    q, r = divmod(n, ADAMW_CHUNK)
    if q:
        blocks.append(Block("optimizer", q, (_adamw("adamw", ADAMW_CHUNK, p),), "optimizer"))
    if r:
        blocks.append(Block("optimizer.tail", 1, (_adamw("adamw", r, p),), "optimizer"))
    return blocks


#: Default tokens per micro-batch [assumption: a typical per-chip micro-batch at 4-8k
#: sequence lengths]; the default micro-batch is the largest divisor of the per-replica batch
#: whose tokens stay within ``max(seq_len, DEFAULT_MICRO_TOKENS)``.
DEFAULT_MICRO_TOKENS = 8192


def default_micro_batch(batch: int, seq_len: int) -> int:
    """Sequences per micro-batch (see :data:`DEFAULT_MICRO_TOKENS`)."""
    cap = max(1, max(seq_len, DEFAULT_MICRO_TOKENS) // seq_len)
    return max(d for d in range(1, min(batch, cap) + 1) if batch % d == 0)


def train_step(m: ModelConfig, batch: int, seq_len: int, *, precision: Precision | None = None,
               tp: int = 1, dp: int = 1, recompute: bool = False,
               micro_batch: int | None = None, attention: str = "fused") -> Workload:
    """One optimizer step on ``batch`` sequences (global, split over ``dp`` replicas) of
    ``seq_len`` tokens, for one chip of a ``tp``-way tensor-parallel group.

    Each replica runs its sequences as ``micro_batch``-sequence micro-batches (gradient
    accumulation: forward and backward per micro-batch, weights re-read each time, one
    micro-batch's activations live at a time), then one optimizer update. Blocks of one
    micro-batch are repeated ``batch / dp / micro_batch`` times. ``attention``: "fused"
    (FlashAttention forward and backward) or "unfused"."""
    _check_common(m, batch, tp, seq_len=seq_len, dp=dp)
    check_attention(attention)
    if batch % dp:
        raise ValueError(f"batch ({batch}) must be divisible by dp ({dp}): the global batch is "
                         f"split evenly over data-parallel replicas")
    p = precision or Precision()
    b = batch // dp
    mb = default_micro_batch(b, seq_len) if micro_batch is None else micro_batch
    if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1 or b % mb:
        raise ValueError(f"micro_batch must be a positive integer dividing the per-replica "
                         f"batch ({b}), not {mb!r}")
    n_micro = b // mb
    c = _Ctx(m, p, tp, mb, seq_len, 0, "train", attention)
    emb = Block("embedding", 1, tuple(_embedding(c)))
    layers = _layer_blocks(c)
    head = Block("head", 1, tuple(_head(c)))
    fwd = [emb, *layers, head]
    blocks = list(fwd)
    if recompute:
        blocks += [Block(f"{x.name}.recompute", x.repeat, x.ops, "recompute") for x in layers]
    blocks += [_backward_block(head, p)] + [_backward_block(x, p) for x in reversed(layers)]
    blocks.append(_backward_block(emb, p))
    blocks = [Block(x.name, x.repeat * n_micro, x.ops, x.stage) for x in blocks]
    blocks += optimizer_blocks(m, p, tp, dp)
    return Workload("train", tuple(blocks), tokens=b * seq_len, batch=b,
                    info={"seq_len": seq_len, **keys_info(c), "tp": tp, "dp": dp,
                          "recompute": recompute, "global_batch": batch, "micro_batch": mb,
                          "micro_batches": n_micro, "attention": attention})
