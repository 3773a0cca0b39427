"""Lower one training step: forward, (recompute), backward, optimizer, gradient all-reduce.

Backward is derived op by op from the forward graph, so every linear layer and every attention
product gets its two backward GEMMs: for ``C[m×n] = A[m×k]·B[k×n]``, ``dA = dC·Bᵀ``
(``m×n·n×k``, dX / dQ / dP) and ``dB = Aᵀ·dC`` (``k×m·m×n``, dW / dK / dV). Each has the
forward product's MAC count, so backward GEMM FLOPs are exactly twice forward and a step is
3× forward (4× with full recomputation, which re-runs every layer's forward before its
backward). Fused attention's backward also recomputes the scores QKᵀ (FlashAttention), which
counts in hardware FLOPs only. Vector ops get a backward op of the same kind with twice the
ALU work that reads the saved input and the incoming gradient and writes the input gradient
(RoPE's reads the gradient only, a residual add's is the stream's gradient accumulation:
:func:`vector_backward_bytes`); each tensor-parallel all-reduce has its mirror in backward
(Megatron's f/g pair), the context-parallel K/V all-gather a reduce-scatter of the same
buffer (its adjoint).

The optimizer is AdamW over the rank's parameter shard: it reads the gradient, the master copy
and both moments and writes them back together with the working-precision weights. With data
parallelism the gradients are all-reduced over the ``dp`` replicas first (no ZeRO sharding).

Tensor names: a backward block reads the forward tensors by their forward names (its
``source`` is the forward block), the gradients ``d.<output>`` of the forward op's outputs, and
writes ``d.<input>`` (an activation read by several ops: running partials ``d.t#i``) or updates
``g.<weight>`` (docs/workloads.md, "Tensors").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace

from ..arch.dtypes import dtype_bytes, fmt
from .ops import BACKWARD_TAG, Collective, Gemm, Op, VectorOp
from .program import Carry, Tensor
from .config import ModelConfig
from .fused_attention import FusedAttention, fused_backward
from .graph import Workload
from . import dropout, embedding_grad as emb, loss
from .cp_attention import RingMerge
from .program import Access, Block, Use
from .lower import (AUTOGRAD_COLLECTIVE, REGATHER, RESIDUAL_ADD, _check_common, _Ctx,
                    _layer_blocks, check_attention, check_cp, check_ep, check_routing,
                    dgrad_all_reduce_group, embedding_block, forward_blocks, head_block,
                    keys_info, layer_kinds, routing_info)
from .moe import Routing
from .params import params_per_chip, weight_tensors
from .precision import Precision
from .quant import QUANT_OPS_PER_BLOCK, QUANT_OPS_PER_ELEMENT
from .sparse_attention import backward_share as sparse_share, for_backward as sparse_for_backward
from .recipe import (amax_collectives, backward_gemms, quantized, rowwise_share, sp_shards,
                     weight_cast_op)

#: Parameters per AdamW op: the update runs as a sequence of equal chunks (as multi-tensor
#: apply kernels do), one op repeated, so the engine simulates one 16 Mi-element stream instead
#: of a billion-element one; a streaming op's time per element is flat at that size.
ADAMW_CHUNK = 2**24

#: ALU ops per parameter of one AdamW update [assumption: m and v updates (3 + 4), bias
#: corrections folded into the step size, sqrt, add eps, divide, weight decay, lr scale,
#: subtract, cast to working precision ≈ 14].
ADAMW_OPS_PER_PARAM = 14.0


def backward_ops(op: Op, p: Precision, table_elements: float = 0.0) -> list[Op]:
    """The backward ops of one forward op, in execution order (a fused attention block's
    backward is one fused block, see :func:`diptych.workloads.fused_attention.fused_backward`;
    the sparse-attention indexer's scoring over its selected keys only,
    :func:`~diptych.workloads.sparse_attention.for_backward`; the loss's passes one gradient
    kernel, :mod:`~diptych.workloads.loss`). The token lookup's backward is its scatter
    between the whole-table passes over its ``table_elements`` weights
    (:mod:`~diptych.workloads.embedding_grad`; :func:`table_elements` of its block)."""
    op = sparse_for_backward(op)
    if isinstance(op, FusedAttention):
        return [fused_backward(op, lambda o: backward_ops(o, p))]
    if quantized(op):
        return backward_gemms(op, p)
    if "recipe" in op.tags:      # an FP8 cast's backward is the identity: no op
        return []
    if loss.TAG in op.tags:      # the loss's passes: one gradient kernel (workloads/loss.py)
        return loss.backward_ops(op)
    if isinstance(op, Gemm):
        weight = "weight" in op.tags
        # a weight's gradient is added into the optimizer's gradient buffer by the GEMM
        # itself (gradient_accumulation_fusion, set in every published config): it reads the
        # buffer back (c_accumulate) on every micro-batch [S: NVIDIA/TransformerEngine v1.10
        # @08a85d3b transformer_engine/pytorch/module/linear.py: the wgrad gemm with
        # accumulate=accumulate_wgrad_into_param_main_grad, out=weight.main_grad, True
        # after the first micro-batch Megatron-Core ever runs (core_r0.9.0
        # extensions/transformer_engine.py sets is_first_microbatch False after it);
        # common/gemm/cublaslt_gemm.cu: beta = accumulate ? 1 : 0, D = alpha·A·B + beta·C
        # with C = D. The buffer is grad_sync_dtype, BF16 in the published runs: NeMo v2.0.0
        # core/optim/distributed_adam.py main_grad = grad_buffer_view(param); the grads dtype
        # here]
        da = Gemm(name=f"{op.name}.dgrad", m=op.m, k=op.n, n=op.k, batch=op.batch,
                  a_dtype=p.activations, b_dtype=op.b_dtype, c_dtype=p.activations,
                  acc_dtype=op.acc_dtype, b_is_weight=op.b_is_weight,
                  tags=op.tags + ("dgrad",))
        db = Gemm(name=f"{op.name}.wgrad" if weight else f"{op.name}.dgrad_b", m=op.k, k=op.m,
                  n=op.n, batch=op.batch, a_dtype=op.a_dtype, b_dtype=p.activations,
                  c_dtype=p.grads if weight else p.activations, acc_dtype=op.acc_dtype,
                  b_is_weight=op.batch == 1, c_accumulate=weight,
                  tags=tuple(t for t in op.tags if t != "weight") + ("wgrad",))
        group = dgrad_all_reduce_group(op)
        if group > 1:
            # the output layer without sequence parallelism all-reduces its input gradient
            # after the dgrad, beside the wgrad (workloads/lower.py ``_head``)
            return [da, Collective(name=f"{op.name}.dgrad_all_reduce", kind="all_reduce",
                                   bytes=op.batch * op.m * op.k * p.a_bytes, group=group,
                                   tags=("tp", BACKWARD_TAG)), db]
        return [da, db]
    if isinstance(op, RingMerge):  # ring attention's bookkeeping (workloads/cp_attention.py)
        return [op.backward()]
    if isinstance(op, VectorOp) and emb.TAG in op.tags and table_elements:
        return list(emb.table_grad_ops(op, table_elements, p.g_bytes))
    if isinstance(op, VectorOp):
        # its output gradient is BF16 even where its forward wrote FP8 (recipe.py)
        out_bytes = op.write_bytes / (rowwise_share(p) if "fp8_rowwise" in op.tags else 1.0)
        drop = dropout_backward(op)
        if drop is not None:
            out_bytes = drop.write_bytes     # the stream's gradient, not the mask
        read, write = vector_backward_bytes(op, out_bytes)
        # a residual add that drops: its forward's compare and scale (DROP_OPS) are the
        # dropout's, whose backward is ``drop``'s kernel; the add's own backward is the
        # add's as at p = 0, untagged
        ops, tags = ((op.ops_per_element - dropout.DROP_OPS,
                      tuple(t for t in op.tags if t != dropout.TAG)) if drop is not None
                     else (op.ops_per_element, op.tags))
        return ([drop] if drop is not None else []) + [
            VectorOp(name=f"{op.name}.bwd", kind=op.kind, elements=op.elements,
                     ops_per_element=2.0 * ops,
                     read_bytes=read, write_bytes=write,
                     dtype=op.dtype, tags=tags + (BACKWARD_TAG,))]
    # the adjoint of an all-gather is a reduce-scatter of the same buffer (each rank gets its
    # chunk's gradient summed over the ranks): context parallelism's K/V all-gather, whose
    # backward sums every rank's dK/dV onto the chunk's owner [S: NVIDIA/TransformerEngine
    # v1.10 @08a85d3b transformer_engine/pytorch/attention.py: AttnFuncWithCPAndKVAllGather
    # .backward ``reduce_scatter_along_first_dim(dk, ctx.cp_group)`` (and dv);
    # AttnFuncWithCPAndKVP2P.backward adds each step's ``dkv_`` into the ``dkv`` it passes on
    # around the ring, a ring reduce-scatter]. The backward ring also gathers K/V again (the
    # rank kept its own chunk only): the backward attention reads the forward's gathered
    # name for it, and the cluster step times both (sim/cluster/step.py). And the adjoint of
    # a reduce-scatter is an all-gather (sequence parallelism's embedding) [S: NVIDIA/
    # Megatron-LM core_r0.9.0 (1afee592) megatron/core/tensor_parallel/mappings.py L368-386:
    # ``_ReduceScatterToSequenceParallelRegion.backward`` returns ``_gather_along_first_dim``]
    kind = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather"}.get(op.kind,
                                                                                op.kind)
    tags = tuple(t for t in op.tags if t != REGATHER) + (BACKWARD_TAG,)
    out = [Collective(name=f"{op.name}.bwd", kind=kind, bytes=op.bytes, group=op.group,
                      tags=tags)]
    if REGATHER in op.tags:
        # the output layer's input gathered again for its weight gradient, before the input
        # gradient's reduce-scatter (workloads/lower.py ``_head``)
        out.insert(0, Collective(name=f"{op.name}.regather", kind="all_gather", bytes=op.bytes,
                                 group=op.group, tags=tags))
    return out


def vector_backward_bytes(op: VectorOp, out_bytes: float) -> tuple[float, float]:
    """Bytes (read, written) of a forward vector op's backward kernel, given the bytes of its
    output gradient ``out_bytes``:

    * in general it reads the saved inputs and the output gradient and writes the input
      gradients (``op.read_bytes + out_bytes``, ``op.read_bytes``);
    * RoPE (kind ``rope``) is a fixed rotation of each pair, linear in its input, so its
      backward reads the output gradient only (and the FP32 angles, which the forward's byte
      model leaves out as well: ``s × d`` × 4 B against ``s·b·h × d`` × 2 B) and writes the
      input gradient: ``out_bytes``, ``op.read_bytes`` [S: NVIDIA/TransformerEngine v1.10
      @08a85d3b transformer_engine/pytorch/attention.py L3514 ``FusedRoPEFunc.forward``
      ``ctx.save_for_backward(freqs, cu_seqlens)``: the input is not saved; L3520-3529
      ``backward``: ``tex.fused_rope_backward(grad_output, freqs, ...)``];
    * a residual add (tagged :data:`~diptych.workloads.lower.RESIDUAL_ADD`, Megatron's
      bias-dropout-add) moves no bytes of its own backward: autograd hands the output
      gradient to both inputs as it is (PyTorch ``tools/autograd/derivatives.yaml``
      ``add.Tensor``: ``self: grad``, ``other: maybe_multiply(grad, alpha)``, alpha 1; the
      dropout in front of it is the identity at ``hidden_dropout`` 0, which the Llama 3.1
      and Grok-1 configs set [S: NVIDIA/dgxc-benchmarking 35a9aec llama3.1/llama3.1_8b.yaml
      and llama3.1_70b.yaml L65-67, llama3.1_405b.yaml L67-69, 143b90d grok1/grok1_314b.yaml
      L72-74: ``hidden_dropout: 0.0``, ``attention_dropout: 0.0``, ``ffn_dropout: 0.0``
      (Grok ``0``), and ``bias: false``]; GPT-3's gpt3_175b_hydra.yaml (35a9aec L66-67)
      sets ``hidden_dropout: 0.1``, whose mask and backward kernel
      :func:`dropout_backward` adds (workloads/dropout.py)) [S: NVIDIA/Megatron-LM
      core_r0.9.0 (1afee592) megatron/core/fusions/fused_bias_dropout.py L36-37 ``out =
      dropout(x, p=prob, ...)``, ``out = residual + out``; GPT-3's biases (NeMo's default, the
      yaml sets none) are not lowered].
      The kernel is where the two gradient paths of the residual stream meet: the stream
      the add read (``x``, ``h1``) is also the norm's input, and autograd's input buffer sums
      the norm's input gradient into the one the add passed through (PyTorch
      ``torch/csrc/autograd/input_buffer.cpp`` ``InputBuffer::add``/``accumulate``: one
      add, read 2, write 1): ``op.read_bytes`` (two operands of the stream's shape),
      ``out_bytes`` (one). It is charged here, at the add's backward, where the general
      rule charged read 3, write 2."""
    if op.kind == "rope":
        return out_bytes, op.read_bytes
    if RESIDUAL_ADD in op.tags:
        return op.read_bytes, out_bytes
    return op.read_bytes + out_bytes, op.read_bytes


def dropout_backward(op: VectorOp) -> VectorOp | None:
    """The dropout's own backward kernel of a residual add that drops (tagged
    :data:`~diptych.workloads.dropout.TAG`; None for any other op): ``grad · mask · scale``
    over the stream, reading the output gradient and the saved bool mask and writing the
    sub-block output's gradient (``a + 1`` read, ``a`` written per element;
    :mod:`~diptych.workloads.dropout`). It runs before the add's own backward, the stream's
    gradient accumulation (:func:`vector_backward_bytes`)."""
    if dropout.TAG not in op.tags or RESIDUAL_ADD not in op.tags:
        return None
    mask = op.elements * dropout.MASK_BYTES
    grad = op.write_bytes - mask
    return VectorOp(name=f"{op.name}.dropout_bwd", kind="elementwise", elements=op.elements,
                    ops_per_element=2.0, read_bytes=grad + mask, write_bytes=grad,
                    dtype=op.dtype,
                    tags=tuple(t for t in op.tags if t != RESIDUAL_ADD) + (BACKWARD_TAG,))


def extra_backward_collectives(ops, p: Precision) -> tuple[Collective, ...]:
    """The collectives the backward of forward ops ``ops`` runs beyond each forward
    collective's mirror (``<name>.bwd``): the output layer's re-gather under sequence
    parallelism and its input gradient's all-reduce without it (:func:`backward_ops`)."""
    return tuple(o for op in ops for o in backward_ops(op, p)
                 if isinstance(o, Collective) and not (isinstance(op, Collective)
                                                       and o.name == f"{op.name}.bwd"))


def table_elements(b: Block, p: Precision) -> float:
    """Weights of the table the token lookup of forward block ``b`` reads (the weight tensor
    of its access), 0 if ``b`` has no lookup or no accesses."""
    tab = {t.name: t for t in b.tensors + b.program_tensors}
    for op, a in zip(b.ops, b.access):
        if emb.TAG in op.tags:
            return sum(tab[u.tensor].bytes for u in a.of(mode="read")
                       if tab[u.tensor].kind == "weight") / p.w_bytes
    return 0.0


def _backward_block(b: Block, p: Precision) -> Block:
    ops: list[Op] = []
    n = table_elements(b, p)
    for op in reversed(b.ops):
        ops += backward_ops(op, p, n)
    if not b.access:
        return Block.of_ops(f"{b.name}.bwd", b.repeat, tuple(ops), "backward")
    return _named_backward(b, ops, p)


def _grad_name(name: str) -> str:
    return f"d.{name}"


class _Grads:
    """Gradient tensors of one backward block while it is derived, forward op by forward op
    in reverse. A forward tensor read by several ops gets one gradient contribution from each
    of their backward ops: each contribution is a new partial ``d.t#i`` that also reads the
    previous one (the running sum, fused into the op: an ordering-only read, not in the
    backward op's byte model), and the last one is renamed ``d.t``. A weight's gradient is a
    state tensor ``g.w`` (kind gradient) that the backward op updates (accumulated over
    micro-batches)."""

    def __init__(self, fwd: Block, tables: dict, p: Precision):
        self.fwd, self.tab, self.p = fwd, tables, p
        self.latest: dict[str, str] = {}
        self.count: dict[str, int] = {}
        self.tensors: dict[str, Tensor] = {}
        self.program: dict[str, Tensor] = {}

    def declare(self, name: str, t: Tensor, program: bool) -> str:
        (self.program if program else self.tensors)[name] = t
        return name

    def seed(self, fwd_name: str, grad: str, program: bool) -> None:
        t = self.tab[fwd_name]
        self.declare(grad, Tensor(grad, t.bytes), program)
        self.latest[fwd_name] = grad

    def of_output(self, name: str) -> str | None:
        return self.latest.get(name)

    def contribute(self, name: str, share: float, role: str = "c") -> list[Use]:
        """Uses of one backward op adding to the gradient of forward tensor ``name``."""
        t = self.tab[name]
        program = name not in {x.name for x in self.fwd.tensors}
        if t.kind == "weight":
            g = f"g.{name}"
            self.declare(g, Tensor(g, t.bytes / self.p.w_bytes * self.p.g_bytes, "gradient"),
                         program)
            return [Use(g, "update", share, role)]
        if t.is_state:
            return []
        i = self.count.get(name, 0) + 1
        self.count[name] = i
        new = f"{_grad_name(name)}#{i}"
        self.declare(new, Tensor(new, t.bytes), program)
        out = [Use(new, "write", share, role)]
        prev = self.latest.get(name)
        if prev is not None and prev.startswith(_grad_name(name) + "#"):
            out.append(Use(prev, "read", 0.0, "dep"))
        self.latest[name] = new
        return out


def _fp8_share(tab: dict, name: str, cast_of: dict) -> float:
    """Bytes of tensor ``name`` over those of the BF16 tensor it was cast from (1 for a cast
    pair or a tensor not cast; ½ for a row-wise-only cast)."""
    src = cast_of.get(name)
    return 1.0 if src is None else tab[name].bytes / tab[src].bytes


def _quantized_backward(op: Gemm, a: Access, d_out: list, deps, dep_grads, gr: "_Grads", it,
                        cast_of: dict, p: Precision) -> list[Access]:
    """The accesses of an FP8 linear's backward ops (:func:`~.recipe.backward_gemms`): the
    output gradient's cast (reads the BF16 gradient, writes its FP8 pair); dgrad and wgrad
    read the pair's halves and the forward's FP8 operands, and write BF16 (FP32) gradients,
    twice the bytes of the FP8 halves they stand for: an input that was cast takes the
    gradient itself (the cast passes it straight through). An input a norm wrote row-wise
    only (``x_transpose``) is transposed before the wgrad, which reads the transpose."""
    out: list[Access] = []
    nxt = next(it)
    dy = [dataclasses.replace(u, share=u.share * 0.5) for u in d_out]
    dy_t = dy               # what the wgrad reads of the output gradient
    if "amax" in nxt.tags:
        am = gr.declare(f"{nxt.name}#t", Tensor(f"{nxt.name}#t", nxt.write_bytes), False)
        out.append(Access((*d_out, Use(am, "write"))))
        nxt = next(it)
    if "cast" in nxt.tags:
        pre = tuple(Use(x.uses[-1].tensor, "read", 0.0, "dep") for x in out)
        n = sp_shards(op)
        if n > 1:
            # the rank's shard, cast row-wise into the gathered FP8 gradient (the all-gather
            # fills the rest), which is transposed for the wgrad (recipe.backward_gemms)
            token = gr.declare(f"{nxt.name}#t", Tensor(f"{nxt.name}#t",
                                                       nxt.write_bytes * n), False)
            out.append(Access((*(dataclasses.replace(u, share=u.share / n) for u in d_out),
                               *pre, Use(token, "write", 1.0 / n))))
            tr = next(it)
            tt = gr.declare(f"{tr.name}#t", Tensor(f"{tr.name}#t", tr.write_bytes), False)
            out.append(Access((Use(token, "read"), Use(tt, "write"))))
            dy, dy_t = [Use(token, "read")], [Use(tt, "read")]
        else:
            token = gr.declare(f"{nxt.name}#t", Tensor(f"{nxt.name}#t", nxt.write_bytes),
                               False)
            out.append(Access((*d_out, *pre, Use(token, "write"))))
            dy = dy_t = [Use(token, "read", 0.5)]
        next(it)
    nxt = next(it)
    ua, ub = a.of(role="a"), a.of(role="b")
    # the BF16 gradient is twice the bytes of the FP8 copy read: a cast pair's half, a
    # norm's row-wise half, or (sequence parallelism) a row-wise-only cast's whole output
    grad_a = [x for u in ua
              for x in gr.contribute(cast_of.get(u.tensor, u.tensor),
                                     u.share * 2 * _fp8_share(gr.tab, u.tensor, cast_of))]
    out.append(Access((*(Use(u.tensor, "read", u.share, "b") for u in ub),
                       *(dataclasses.replace(u, role="a") for u in dy), *deps, *grad_a,
                       *dep_grads)))
    xa = ua
    if "transpose" in nxt.tags:
        token = gr.declare(f"{nxt.name}#t", Tensor(f"{nxt.name}#t", nxt.write_bytes), False)
        # after the output gradient's cast, as TE runs it (and a backward layer's work
        # waits for the gradient that reaches it)
        out.append(Access((*ua, *(Use(u.tensor, "read", 0.0, "dep") for u in dy),
                           Use(token, "write"))))
        xa = (Use(token, "read", 1.0, "a"),)
        next(it)
    out.append(Access((*xa, *(dataclasses.replace(u, role="b") for u in dy_t), *deps,
                       *[x for u in ub for x in gr.contribute(u.tensor, u.share * 2)])))
    return out


def _dropout_backward_access(reads, d_out: list, a: Access, gr: _Grads) -> Access:
    """Tensor uses of a dropping residual add's dropout backward (:func:`dropout_backward`):
    it reads the output gradient and the saved mask and writes the gradient of the
    sub-block's output (the add's first operand)."""
    *inp, _ = [u for u in reads if u.role != "dep"]
    masks = [u for u in a.of(mode="write") if u.tensor.endswith("_dropout_mask")]
    return Access((*d_out, *(Use(u.tensor, "read", u.share) for u in masks),
                   *(x for u in inp for x in gr.contribute(u.tensor, u.share, ""))))


def _residual_backward_uses(reads, d_out: list, outs, gr: "_Grads", inputs: bool = True
                            ) -> tuple[tuple, tuple]:
    """Tensor uses of a residual add's backward, the residual stream's gradient accumulation
    (:func:`vector_backward_bytes`): the sub-block's output (the add's first operand) gets
    the output gradient as it is (a write of no bytes, ordering only), the stream (its
    second) the summed gradient. Its two reads, the output gradient and the norm's input
    gradient, are both charged to the output gradient: in the reverse order derived here
    the norm's contribution comes after the add's (a running partial, :class:`_Grads`).
    It reads no saved input, so an ordering-only read of the add's forward output ``outs``
    keeps it behind its forward (an output's gradient exists only after the output: else a
    layer's forward-and-backward program, which the cluster step times as one
    (sim/cluster/timing.py, "Execution"), would start the backward beside the forward).
    ``inputs`` False: the sub-block's output took its gradient from the dropout's backward
    (:func:`_dropout_backward_access`), so this adds no ordering-only one."""
    *inp, resid = [u for u in reads if u.role != "dep"]
    uses = (*(u for u in reads if u.role == "dep"),
            *(dataclasses.replace(u, share=2.0 * u.share) for u in d_out),
            *(Use(w, "read", 0.0, "dep") for w in outs))
    grads = (*(x for u in (inp if inputs else ()) for x in gr.contribute(u.tensor, 0.0, "")),
             *gr.contribute(resid.tensor, resid.share, ""))
    return uses, grads


def _named_backward(b: Block, bops: list[Op], p: Precision) -> Block:
    """The backward block of forward block ``b`` with its tensors: every backward op reads the
    forward tensors it needs by their forward names (the program imports them from ``b``:
    ``source``), the gradients of the forward op's outputs, and writes the gradients of its
    inputs (module docstring of :mod:`diptych.workloads.train`; names in docs/workloads.md)."""
    tab = {t.name: t for t in b.tensors + b.program_tensors}
    gr = _Grads(b, tab, p)
    carry = ()
    for c in b.carry:        # the layer output's gradient comes from the next layer
        gr.seed(c.output, _grad_name(c.output), False)
    for t in b.program_tensors:          # what the block exports: the embedding, the loss
        if any(t.name in a.writes for a in b.access):
            gr.seed(t.name, _grad_name(t.name), True)
    access: list[Access] = []
    # an FP8 cast's output carries its input's gradient straight through (recipe.py)
    cast_of = {a.writes[0]: a.of(mode="read")[0].tensor for op, a in zip(b.ops, b.access)
               if "cast" in op.tags}
    it = iter(bops)
    # the loss's input (the logits): its one backward kernel writes their gradient
    loss_in = next((a.of(mode="read")[0].tensor for op, a in zip(b.ops, b.access)
                    if loss.TAG in op.tags), None)
    spans: dict[int, tuple[int, int]] = {}   # forward op → the span of its backward accesses
    mark = None
    for op, a in reversed(list(zip(b.ops, b.access))):
        if mark is not None:
            spans[mark[0]] = (mark[1], len(access))
        mark = (id(op), len(access))
        if "recipe" in op.tags:
            continue
        if emb.TAG in op.tags:
            # zero the table's gradient, scatter the rows into it, add it to the weight's
            next(it), next(it), next(it)
            nbytes = table_elements(b, p) * p.g_bytes
            z = gr.declare("d.table#0", Tensor("d.table#0", nbytes), False)
            t = gr.declare("d.table", Tensor("d.table", nbytes), False)
            d_out = [Use(gr.of_output(w), "read") for w in a.writes if gr.of_output(w)]
            weights = [u for u in a.of(mode="read") if tab[u.tensor].kind == "weight"]
            access += [Access((Use(z, "write"),)),
                       Access((*d_out, Use(z, "read", 0.0, "dep"),
                               Use(t, "write", weights[0].share))),
                       Access((Use(t, "read"),
                               *[x for u in weights for x in gr.contribute(u.tensor, 1.0)]),
                              rmw=True)]
            continue
        if loss.TAG in op.tags:
            if "saved" in op.tags:    # reads the softmax it saved and the loss's gradient
                kernels = len(loss.backward_ops(op))
                for _ in range(kernels):
                    next(it)
                d_loss = [Use(gr.of_output(w), "read") for w in a.writes if gr.of_output(w)]
                # and writes the softmax back in place: a dead copy of its bytes
                back = gr.declare(f"{a.writes[0]}#bwd",
                                  Tensor(f"{a.writes[0]}#bwd", tab[a.writes[0]].bytes), False)
                if kernels == 1:      # fused: the logits' gradient in the same kernel
                    access.append(Access((Use(a.writes[0], "read"), *d_loss,
                                          *gr.contribute(loss_in, 1.0, ""),
                                          Use(back, "write"))))
                else:                 # unfused: the multiply in place, then the cast's backward
                    access += [Access((Use(a.writes[0], "read"), *d_loss, Use(back, "write"))),
                               Access((Use(back, "read"), *gr.contribute(loss_in, 1.0, "")))]
            continue
        if isinstance(op, RingMerge):    # reads the output's gradient, writes the steps'
            next(it)
            (d_o,) = [gr.of_output(w) for w in a.writes]
            (steps,) = [u.tensor for u in a.of(mode="read")]
            access.append(Access((Use(d_o, "read", op.bwd_read_bytes / tab[steps].bytes),
                                  *gr.contribute(steps, op.bwd_write_bytes / tab[steps].bytes,
                                                 ""))))
            continue
        outs = a.writes[:1] if isinstance(op, FusedAttention) else a.writes
        # a norm that wrote its output row-wise in FP8 gets the BF16 output gradient
        g = 1.0 / rowwise_share(p) if "fp8_rowwise" in op.tags else 1.0
        d_out = [Use(gr.of_output(w), "read", u.share * g) for w in outs
                 for u in a.of(mode="write") if u.tensor == w and gr.of_output(w)]
        reads = a.of(mode="read")
        deps = a.of(role="dep")
        # an ordering-only input (routing indices) gets an ordering-only gradient, so that
        # its producer's backward op still runs behind the gradient chain
        dep_grads = [x for u in deps for x in gr.contribute(
            u.tensor, 0.0, "c" if isinstance(op, Gemm) else "")]
        if quantized(op):
            access += _quantized_backward(op, a, d_out, deps, dep_grads, gr, it, cast_of, p)
            continue
        # the indexer's scores get a gradient over the selected keys only: that share of
        # the output's gradient and (a GEMM) of its B operand (sparse_attention.for_backward)
        f = sparse_share(op)
        if f != 1.0:
            d_out = [dataclasses.replace(u, share=u.share * f) for u in d_out]
        if isinstance(op, Gemm):
            next(it), next(it)
            ua, ub = a.of(role="a"), a.of(role="b")
            access.append(Access((*(Use(u.tensor, "read", u.share * f, "b") for u in ub),
                                  *(dataclasses.replace(u, role="a") for u in d_out), *deps,
                                  *[x for u in ua for x in gr.contribute(u.tensor, u.share)],
                                  *dep_grads)))
            if dgrad_all_reduce_group(op) > 1:   # the input gradient all-reduced in place
                next(it)
                access.append(Access(tuple(x for u in ua for x in (
                    Use(gr.of_output(u.tensor), "read", u.share),
                    *gr.contribute(u.tensor, u.share, "")))))
            access.append(Access((*ua, *(dataclasses.replace(u, role="b") for u in d_out),
                                  *deps,
                                  *[x for u in ub for x in gr.contribute(u.tensor,
                                                                         u.share * f)])))
            continue
        next(it)
        if isinstance(op, Collective) and REGATHER in op.tags:
            # the re-gather reads the saved shard again; what it writes stands for the
            # gathered input the weight gradient reads (no op reads it here)
            name = f"{a.writes[0]}#regather"
            gr.declare(name, Tensor(name, tab[a.writes[0]].bytes), False)
            access.append(Access((*reads, Use(name, "write"))))
            next(it)
        if f != 1.0:
            reads = tuple(dataclasses.replace(u, share=u.share * f) for u in reads)
        if isinstance(op, Collective):     # the mirrored collective moves the gradient only
            uses = tuple(d_out)
            if AUTOGRAD_COLLECTIVE in op.tags:
                # after the whole backward of every linear that reads its output (through an
                # FP8 cast): an ordering-only read of each weight gradient their backward ops
                # updated (lower.py AUTOGRAD_COLLECTIVE)
                users = [id(o) for o, x in zip(b.ops, b.access) if isinstance(o, Gemm)
                         and any(cast_of.get(u.tensor, u.tensor) in a.writes
                                 for u in x.of(role="a"))]
                done = dict.fromkeys(u.tensor for i in users
                                     for x in access[slice(*spans.get(i, (0, 0)))]
                                     for u in x.uses if u.mode == "update")
                uses += tuple(Use(t, "read", 0.0, "dep") for t in done)
        elif isinstance(op, FusedAttention):  # reads O and the softmax statistics it saved
            uses = (*reads, *(Use(u.tensor, "read", u.share) for u in a.of(mode="write")),
                    *d_out)
        elif isinstance(op, VectorOp) and op.kind == "rope":   # reads the gradient only
            uses = (*(u for u in reads if u.role == "dep"), *d_out)
        elif isinstance(op, VectorOp) and RESIDUAL_ADD in op.tags:
            dropped = dropout.TAG in op.tags
            if dropped:    # the dropout's backward first (its own kernel, dropout_backward)
                next(it)
                access.append(_dropout_backward_access(reads, d_out, a, gr))
            uses, grads = _residual_backward_uses(reads, d_out, a.writes, gr,
                                                  inputs=not dropped)
            access.append(Access(uses + grads + tuple(dep_grads)))
            continue
        else:
            uses = (*reads, *d_out)
        grads = [x for u in reads if u.role != "dep"
                 for x in gr.contribute(u.tensor, u.share, "")]
        access.append(Access(tuple(uses) + tuple(grads) + tuple(dep_grads)))
    # the last partial of each gradient takes the plain name d.t
    final = {v: _grad_name(k) for k, v in gr.latest.items() if "#" in v}
    access = [Access(tuple(dataclasses.replace(u, tensor=final.get(u.tensor, u.tensor))
                           for u in x.uses), x.rmw) for x in access]
    rename = lambda d: {final.get(k, k): Tensor(final.get(k, k), t.bytes, t.kind, t.live_out)
                        for k, t in d.items()}
    local, program = rename(gr.tensors), rename(gr.program)
    for c in b.carry:
        carry += (Carry(_grad_name(c.output), _grad_name(c.input), _grad_name(c.exit),
                        _grad_name(c.entry)),)
        program[_grad_name(c.exit)] = Tensor(_grad_name(c.exit), tab[c.output].bytes)
        program[_grad_name(c.entry)] = Tensor(_grad_name(c.entry), tab[c.input].bytes)
    # the forward tensors it reads (the program imports them from the forward block)
    read = {u.tensor for x in access for u in x.uses}
    local.update({t.name: t for t in b.tensors if t.name in read})
    program.update({t.name: t for t in b.program_tensors if t.name in read})
    return Block.of_ops(f"{b.name}.bwd", b.repeat, tuple(bops), "backward", access=tuple(access),
                        tensors=tuple(local.values()), program_tensors=tuple(program.values()),
                        carry=carry, source=b.name)


def adamw_op(n: int, p: Precision, name: str = "adamw") -> VectorOp:
    """One AdamW update of ``n`` parameters on the vector unit: reads the gradient, the
    master copy and both moments, writes them back with the working-precision weights
    (:data:`ADAMW_OPS_PER_PARAM` ALU ops per parameter).

    Block-scaled weights (MXFP8 training) are written twice: the rowwise copy the forward
    and weight-gradient GEMMs read, blocked along the input features, and the columnwise
    copy the data-gradient GEMM reads (``Wᵀ``), blocked along the output features, each
    quantised from the new master value (Transformer Engine quantises a weight for both
    usages once and reuses the copies over the step's micro-batches): one more write of
    ``n`` weights at their width (elements and scales) and the columnwise quantisation's
    ALU ops (:data:`~diptych.workloads.quant.QUANT_OPS_PER_ELEMENT` per weight,
    :data:`~diptych.workloads.quant.QUANT_OPS_PER_BLOCK` per block; docs/precision.md,
    "Backward GEMMs")."""
    state = p.optimizer_state_bytes_per_param
    f = fmt(p.weights)
    copies = 2 if f.block_scaled else 1
    ops = ADAMW_OPS_PER_PARAM + (QUANT_OPS_PER_ELEMENT + QUANT_OPS_PER_BLOCK / f.block
                                 if f.block_scaled else 0.0)
    return VectorOp(name=name, kind="optimizer", elements=n, ops_per_element=ops,
                    read_bytes=n * (p.g_bytes + state),
                    write_bytes=n * (state + copies * p.w_bytes), dtype="fp32",
                    tags=("optimizer",))


def grad_norm_op(n: int, p: Precision, name: str = "grad_norm") -> VectorOp:
    """The gradient norm of ``n`` parameters that gradient clipping needs: one read of their
    gradients (a square and a sum each), before the update, which applies the clip factor
    as a scale [S: NVIDIA/NeMo v2.0.0 @e938df32 (NeMo 24.09) clip_grads.py
    ``clip_grad_norm_distributed_optimizer`` → Apex ``DistributedFusedAdam.grad_norm``:
    ``multi_tensor_l2norm`` over the rank's gradient shard, then ``clip_grad_norm`` folds the
    factor into the step's gradient scale (NVIDIA/apex
    apex/contrib/optimizers/distributed_fused_adam.py); dgxc-benchmarking 35a9aec
    llama3.1/llama3.1_8b.yaml ``gradient_clip_val: 1.0``]."""
    return VectorOp(name=name, kind="elementwise", elements=n, ops_per_element=2.0,
                    read_bytes=n * p.g_bytes, write_bytes=0.0, dtype="fp32",
                    tags=("optimizer", "grad_norm"))


def grad_zero_op(n: int, p: Precision, name: str = "grad_zero") -> VectorOp:
    """Zeroing the contiguous gradient buffer of ``n`` parameters (every parameter the rank
    computes gradients for, before any sharding) for the next step's accumulation: one write
    [S: NVIDIA/apex apex/contrib/optimizers/distributed_fused_adam.py ``zero_grad``:
    ``self._grad_buffer.zero_()`` with ``contiguous_grad_buffer`` (dgxc-benchmarking 35a9aec
    llama3.1/llama3.1_8b.yaml ``contiguous_grad_buffer: true``; the buffer holds
    ``grad_sync_dtype``, there ``bf16``); Megatron-Core's own DDP zeroes its ``grad_data`` the
    same way (core_r0.9.0 megatron/core/distributed/param_and_grad_buffer.py ``reset``)]."""
    return VectorOp(name=name, kind="copy", elements=n, ops_per_element=0.0, read_bytes=0.0,
                    write_bytes=n * p.g_bytes, dtype=p.grads, tags=("optimizer", "grad_zero"))


def _adamw_block(name: str, repeat: int, n: int, p: Precision) -> Block:
    """``repeat`` AdamW chunks of ``n`` parameters, each with its own slice of the gradient,
    master copy, moments and working weights."""
    master = dtype_bytes(p.master) if p.master else 0.0
    t = [Tensor("g", n * p.g_bytes, "gradient"),
         Tensor("master", n * master, "optimizer_state"),
         Tensor("m", n * dtype_bytes(p.moments), "optimizer_state"),
         Tensor("v", n * dtype_bytes(p.moments), "optimizer_state"),
         Tensor("w", n * p.w_bytes, "weight", live_out=True)]
    uses = [Use("g"), Use("master", "update"), Use("m", "update"), Use("v", "update"),
            Use("w", "write")]
    if fmt(p.weights).block_scaled:          # the columnwise copy (adamw_op)
        t.append(Tensor("w_col", n * p.w_bytes, "weight", live_out=True))
        uses.append(Use("w_col", "write"))
    acc = Access(tuple(uses), rmw=True)
    return Block.of_ops(name, repeat, (adamw_op(n, p),), "optimizer", access=(acc,),
                        tensors=tuple(t))


def linear_params_per_chip(m: ModelConfig, tp: int) -> float:
    """Parameters of the linear layers one TP rank holds (attention projections, MLPs, every
    expert): the weights an FP8 recipe casts (not norms, biases, sinks, the router, the
    embedding or the LM head)."""
    n = 0.0
    for t in weight_tensors(m):
        if t.group in ("attn", "mlp", "expert", "shared_expert") and "bias" not in t.name:
            e = t.rank_elements(tp)
            n += e * t.count * (m.experts if t.group == "expert" else 1)
    return n


def recipe_blocks(m: ModelConfig, p: Precision, tp: int, dp: int,
                  micro_batches: int = 1) -> list[Block]:
    """What an FP8 recipe adds to a step beside its micro-batches
    (:mod:`~diptych.workloads.recipe`): the weights' FP8 copies, cast once per step, in
    chunks of :data:`ADAMW_CHUNK`, and the delayed recipe's amax all-reduces over the
    ``tp × dp`` ranks (five amaxes per linear GEMM), one at the end of each micro-batch's
    forward and one in its backward: Megatron-Core runs each forward of its transformer
    block inside ``fp8_autocast`` and TE reduces the amaxes on every exit and in the
    matching backward [S: NVIDIA/Megatron-LM core_r0.9.0 transformer_block.py
    ``fp8_context``; TransformerEngine v1.11 fp8.py ``fp8_autocast_exit`` →
    ``reduce_and_update_fp8_tensors``]."""
    if not p.quantized:
        return []
    n = max(1, math.ceil(linear_params_per_chip(m, tp)))
    out = []
    for name, rep, k in (("fp8_weight_cast", n // ADAMW_CHUNK, ADAMW_CHUNK),
                         ("fp8_weight_cast.tail", 1, n % ADAMW_CHUNK)):
        if rep and k:
            op = weight_cast_op("fp8_weight_cast", k, p)
            out.append(Block.of_ops(name, rep, (op,), "optimizer", access=(Access(
                (Use("w", "read", op.read_bytes / (k * p.w_bytes)), Use("w_fp8", "write"))),),
                tensors=(Tensor("w", k * p.w_bytes, "weight"),
                         Tensor("w_fp8", op.write_bytes, "weight", live_out=True))))
    c = _Ctx(m, p, tp, 1, 1, 0, "train")
    gemms = sum(b.repeat * sum(1 for o in b.ops if quantized(o)) for b in _layer_blocks(c))
    for op in amax_collectives(p, 5 * gemms, tp * dp):
        out.append(Block.of_ops(op.name, micro_batches, (op,), "optimizer", access=(Access(
            (Use("amax", "read"), Use("amax_reduced", "write"))),), tensors=(
            Tensor("amax", op.bytes, "optimizer_state"),
            Tensor("amax_reduced", op.bytes, "optimizer_state", live_out=True))))
    return out


def optimizer_blocks(m: ModelConfig, p: Precision, tp: int, dp: int,
                     micro_batches: int = 1) -> list[Block]:
    """Gradient all-reduce over ``dp`` replicas (if any), the gradient norm for clipping
    (:func:`grad_norm_op`), the AdamW update of one shard: it reads the gradient, master copy
    and both moments and writes them back with the working-precision weights, in chunks of
    :data:`ADAMW_CHUNK` parameters; the gradient buffer zeroed for the next step
    (:func:`grad_zero_op`); then what an FP8 recipe adds per step (:func:`recipe_blocks`)."""
    n = max(1, math.ceil(params_per_chip(m, tp)))
    blocks: list[Block] = []
    if dp > 1:
        op = Collective(name="grad_all_reduce", kind="all_reduce", bytes=n * p.g_bytes,
                        group=dp, tags=("dp",))
        blocks.append(Block.of_ops("grad_all_reduce", 1, (op,), "optimizer",
                                   access=(Access((Use("grads"), Use("grads_reduced", "write"))),),
                                   tensors=(Tensor("grads", op.bytes, "gradient"),
                                     Tensor("grads_reduced", op.bytes, "gradient",
                                            live_out=True))))
    q, r = divmod(n, ADAMW_CHUNK)
    for kind, op_of in (("grad_norm", grad_norm_op), ("", None), ("grad_zero", grad_zero_op)):
        for name, rep, k in ((kind or "optimizer", q, ADAMW_CHUNK),
                             (f"{kind or 'optimizer'}.tail", 1, r)):
            if not (rep and k):
                continue
            if op_of is None:
                blocks.append(_adamw_block(name, rep, k, p))
            else:
                op = op_of(k, p)
                g = Tensor("g", k * p.g_bytes, "gradient", live_out=True)
                blocks.append(Block.of_ops(name, rep, (op,), "optimizer", access=(Access((
                    Use("g", "read" if kind == "grad_norm" else "write"),)),), tensors=(g,)))
    return blocks + recipe_blocks(m, p, tp, dp, micro_batches)


def layer_params_per_chip(m: ModelConfig, tp: int) -> dict[str, float]:
    """Parameters one TP rank holds per layer of each kind (``"dense"``, ``"moe"``: every
    expert, touched or not) and outside the layers (``"embedding"``: the token and position
    tables; ``"head"``: the final norm and an untied LM head); the layers' sum plus these is
    :func:`~diptych.workloads.params.params_per_chip`."""
    out = {"dense": 0.0, "moe": 0.0, "embedding": 0.0, "head": 0.0}
    for t in weight_tensors(m):
        n = t.rank_elements(tp)
        if t.group == "embed":
            out["embedding"] += n
        elif t.group == "head" or t.name == "final_norm":
            out["head"] += n
        elif t.group == "mlp":
            out["dense"] += n
        elif t.group in ("router", "shared_expert"):
            out["moe"] += n
        elif t.group == "expert":
            out["moe"] += n * m.experts
        else:                                    # attention, sinks, layer norms
            # a hybrid model's mixers (linear or full attention) differ between layers:
            # each layer counts their mean, so that the layers' sum is exact
            if t.count != m.layers:
                n = n * t.count / m.layers
            out["dense"] += n
            out["moe"] += n
    return out


def dp_buckets(m: ModelConfig, p: Precision, tp: int) -> dict[str, float]:
    """Bytes of the data-parallel gradient all-reduce per repeat of each forward block: one
    bucket per layer (all of its parameters, every expert of an MoE layer), the head's and
    the embedding's (what a DDP-style all-reduce overlapping backward reduces)."""
    per = layer_params_per_chip(m, tp)
    c = _Ctx(m, p, tp, 1, 1, 0, "train")
    out = {"embedding": per["embedding"] * p.g_bytes, "head": per["head"] * p.g_bytes}
    for name, _, ck in layer_kinds(c):
        out[name] = per["moe" if ck.layer.moe else "dense"] * p.g_bytes
    return out


#: Default tokens per micro-batch [assumption: a typical per-chip micro-batch at 4-8k
#: sequence lengths]; the default micro-batch is the largest divisor of the per-replica batch
#: whose tokens stay within ``max(seq_len, DEFAULT_MICRO_TOKENS)``.
DEFAULT_MICRO_TOKENS = 8192


def default_micro_batch(batch: int, seq_len: int) -> int:
    """Sequences per micro-batch (see :data:`DEFAULT_MICRO_TOKENS`)."""
    cap = max(1, max(seq_len, DEFAULT_MICRO_TOKENS) // seq_len)
    return max(d for d in range(1, min(batch, cap) + 1) if batch % d == 0)


def train_forward(m: ModelConfig, micro_batch: int, seq_len: int, *,
                  precision: Precision | None = None, tp: int = 1, cp: int = 1, ep: int = 1,
                  routing: Routing = Routing(),
                  attention: str = "fused", sequence_parallel: bool = False) -> Workload:
    """The forward blocks (embedding, one block per layer kind, head with the loss) of one
    training micro-batch of ``micro_batch`` sequences of ``seq_len`` tokens on one rank of a
    ``tp``-way tensor-parallel, ``cp``-way context-parallel, ``ep``-way expert-parallel
    group (:class:`~diptych.workloads.lower._Ctx`: the rank holds ``seq_len / cp`` tokens of
    each sequence and ``experts / ep`` routed experts; the context- and expert-parallel
    collectives are ops of the blocks, tagged ``cp`` and ``ep``). ``sequence_parallel``
    (``tp > 1``): what an FP8 recipe's row-parallel linears quantise changes
    (:func:`~diptych.workloads.recipe.quantize_records`), and a MoE layer with ``ep > 1`` and
    its experts split over ``tp`` runs Megatron-Core's all-to-all dispatcher: the router and
    unpermute on the sequence shard, the dispatcher's own TP all-gather and reduce-scatter
    in place of the MLP all-reduce (:func:`~diptych.workloads.lower.alltoall_tp`). These are
    the blocks :func:`train_step` repeats per micro-batch (at ``cp = ep = 1``) and what the
    cluster layer (:mod:`diptych.sim.cluster.layers`) times per pipeline stage."""
    _check_common(m, micro_batch, tp, seq_len=seq_len)
    check_attention(attention)
    check_cp(cp, seq_len, m=m)
    check_ep(m, ep)
    p = precision or Precision()
    c = _Ctx(m, p, tp, micro_batch, seq_len // cp, 0, "train", attention, cp=cp, ep=ep,
             routing=check_routing(m, routing), sequence_parallel=sequence_parallel)
    return Workload("train", tuple(forward_blocks(c)), tokens=micro_batch * c.q_len,
                    batch=micro_batch,
                    info={"seq_len": seq_len, **keys_info(c), "tp": tp, "cp": cp, "ep": ep,
                          "micro_batch": micro_batch, "micro_batches": 1,
                          "attention": attention, **routing_info(c)})


def train_step(m: ModelConfig, batch: int, seq_len: int, *, precision: Precision | None = None,
               tp: int = 1, dp: int = 1, recompute: bool = False,
               micro_batch: int | None = None, attention: str = "fused",
               routing: Routing = Routing(), sequence_parallel: bool = False) -> Workload:
    """One optimizer step on ``batch`` sequences (global, split over ``dp`` replicas) of
    ``seq_len`` tokens, for one chip of a ``tp``-way tensor-parallel group.

    Each replica runs its sequences as ``micro_batch``-sequence micro-batches (gradient
    accumulation: forward and backward per micro-batch, weights re-read each time, one
    micro-batch's activations live at a time), then one optimizer update. Blocks of one
    micro-batch are repeated ``batch / dp / micro_batch`` times. ``attention``: "fused"
    (FlashAttention forward and backward) or "unfused". ``routing``: a MoE model's routing
    (:class:`~diptych.workloads.moe.Routing`; without expert parallelism only a capacity
    factor changes the work). ``sequence_parallel`` (``tp > 1``): Megatron's sequence
    parallelism, lowered as :func:`train_forward` lowers it (the norms and residual adds on
    the rank's sequence shard, the embedding's reduce-scatter, the head's all-gather, what an
    FP8 recipe's row-parallel linears quantise), the cluster step's default."""
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
    c = _Ctx(m, p, tp, mb, seq_len, 0, "train", attention, routing=check_routing(m, routing),
             sequence_parallel=sequence_parallel)
    emb = embedding_block(c)
    layers = _layer_blocks(c)
    head = head_block(c)
    fwd = [emb, *layers, head]
    blocks = list(fwd)
    if recompute:
        blocks += [replace(x, name=f"{x.name}.recompute", stage="recompute", carry=(),
                           program_tensors=(), source=x.name) for x in layers]
    blocks += [_backward_block(head, p)] + [_backward_block(x, p) for x in reversed(layers)]
    blocks.append(_backward_block(emb, p))
    blocks = [replace(x, repeat=x.repeat * n_micro) for x in blocks]
    blocks += optimizer_blocks(m, p, tp, dp, n_micro)
    return Workload("train", tuple(blocks), tokens=b * seq_len, batch=b,
                    info={"seq_len": seq_len, **keys_info(c), "tp": tp, "dp": dp,
                          "recompute": recompute, "global_batch": batch, "micro_batch": mb,
                          "micro_batches": n_micro, "attention": attention,
                          "sequence_parallel": c.sp > 1, **routing_info(c)})
