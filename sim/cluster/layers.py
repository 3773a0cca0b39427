"""Per-layer ops of one micro-batch on one rank, for a plan: the lowering's forward blocks.

The lowering (:func:`diptych.workloads.train.train_forward`,
:func:`~diptych.workloads.lower.prefill`, :func:`~diptych.workloads.lower.decode_mean`) gives
one rank's ops per layer kind (dense layer, MoE layer, embedding, head) for one micro-batch
of ``micro_batch`` sequences, with the plan's tensor, context and expert parallelism already
applied (:class:`~diptych.workloads.lower._Ctx`'s ``tp``, ``cp``, ``ep``): ``seq / cp`` tokens
per sequence whose queries attend the whole sequence's mean keys under the layer kind's mask,
the rank's ``experts / ep`` routed experts, and each kind of collective as an op tagged
``tp``, ``cp`` (ring attention's K/V all-gather) or ``ep`` (the dispatch and combine
all-to-alls). This module sorts them for the cluster step:

* the **compute** ops (forward; backward derived with the lowering's own
  :func:`diptych.workloads.train.backward_ops`), and the ops selective recomputation re-runs;
* the **collectives** by kind: the tensor-parallel ones as ops, one expert all-to-all's bytes
  per rank, this rank's K+V chunk (the cluster step times them on the topology);
* **activation memory** per layer: :func:`diptych.workloads.memory.layer_saved_bytes` of the
  block, with sequence parallelism storing the tensors replicated over the tensor-parallel
  ranks (norm inputs, inputs of the column-parallel GEMMs) ``÷ tp`` (Korthikanti et al. 2022,
  §4.2.2).

**Decode** is one representative step of ``gen`` steps after a ``context``-token cache: each
layer kind attends its own mean keys over the steps (:func:`~diptych.workloads.lower.decode_mean`),
not its keys at the mean context.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...workloads.ops import Collective, Gemm, Op, VectorOp
from ...workloads.config import ModelConfig
from ...workloads.graph import Workload
from ...workloads.program import Block
from ...workloads.lower import decode_mean, prefill
from ...workloads.memory import is_replicated, layer_saved_bytes
from ...workloads.moe import Routing
from ...workloads.precision import Precision
from ...workloads.train import (backward_ops, extra_backward_collectives, table_elements,
                                train_forward)

#: Vector ops whose outputs selective recomputation drops (recomputed from their saved
#: input): norms and activation functions (Megatron-Core ``--recompute-modules layernorm
#: moe_act``).
SELECTIVE_KINDS = ("rmsnorm", "layernorm", "swiglu", "gelu", "geglu")


@dataclass(frozen=True)
class LayerOps:
    """One copy of a layer kind for one micro-batch on one rank (``kind``: the lowering's
    block name, ``embedding`` or ``head``; ``moe``: it has routed experts).

    ``forward``/``backward``: compute ops (no collectives); ``tp``: the forward
    tensor-parallel collectives (their backward mirrors are the same); ``tp_bwd``: the
    backward's tensor-parallel collectives beyond those mirrors (the output layer's
    re-gather under sequence parallelism, its input gradient's all-reduce without it:
    :func:`~diptych.workloads.train.extra_backward_collectives`); ``a2a_bytes``: one
    expert all-to-all per rank (0 without EP); ``cp_kv_bytes``: this rank's K+V chunk
    (0 without CP); ``saved_bytes``: activations kept for backward with no recomputation
    (sequence parallelism applied); ``selective_bytes``: what selective recomputation drops;
    ``selective_ops``: the forward ops it re-runs; ``input_bytes``: the layer input kept by
    full recomputation."""

    kind: str
    forward: tuple[Op, ...]
    backward: tuple[Op, ...]
    moe: bool = False
    tp: tuple[Collective, ...] = ()
    tp_bwd: tuple[Collective, ...] = ()
    a2a_bytes: float = 0.0
    cp_kv_bytes: float = 0.0
    saved_bytes: float = 0.0
    selective_bytes: float = 0.0
    selective_ops: tuple[Op, ...] = ()
    input_bytes: float = 0.0


def _selective(ops: list[Op], m: ModelConfig, tokens: int, split: int
               ) -> tuple[float, tuple[Op, ...]]:
    """(A-operand bytes selective recomputation drops, the vector ops it re-runs): GEMM inputs
    that are the output of a norm or activation function (and the later groups of the same
    GEMM), recomputed from the vector op's saved input; replicated inputs count ``÷ split``
    (sequence parallelism)."""
    dropped = 0.0
    rerun: list[Op] = []
    src: VectorOp | None = None
    base = None
    for op in ops:
        if isinstance(op, VectorOp) and op.kind in SELECTIVE_KINDS and "saved" in op.tags:
            src, base = op, None
        elif isinstance(op, Gemm) and src is not None and "no_save_a" not in op.tags and (
                base is None or op.name.split("[")[0] == base):
            if base is None:
                rerun.append(src)
            base = op.name.split("[")[0]
            dropped += op.a_bytes / (split if is_replicated(op, m.hidden_size, tokens) else 1)
        else:
            src, base = None, None
    return dropped, tuple(rerun)


def _backward(ops: list[Op], p: Precision, table: float = 0.0) -> tuple[Op, ...]:
    out: list[Op] = []
    for op in reversed(ops):
        out += backward_ops(op, p, table)
    # the compute ops: a backward-only collective is the step's to time (LayerOps.tp_bwd)
    return tuple(o for o in out if not isinstance(o, Collective))


@lru_cache(maxsize=256)
def forward_workload(m: ModelConfig, p: Precision, *, phase: str, tp: int, cp: int, ep: int,
                     micro_batch: int, seq: int, context: int = 0, gen: int = 1,
                     attention: str = "fused", routing: Routing = Routing(),
                     sequence_parallel: bool = False) -> Workload:
    """The lowering's forward pass of one micro-batch on one rank (memoised): ``train``
    (:func:`~diptych.workloads.train.train_forward` of ``seq``-token sequences, under
    ``sequence_parallel`` if asked),
    ``prefill`` (``seq``-token prompts) or ``decode`` (the representative step of ``gen``
    steps after a ``context``-token cache, :func:`~diptych.workloads.lower.decode_mean`);
    ``routing``: a MoE model's routing (the rank lowered is the busiest)."""
    if phase == "train":
        return train_forward(m, micro_batch, seq, precision=p, tp=tp, cp=cp, ep=ep,
                             attention=attention, routing=routing,
                             sequence_parallel=sequence_parallel)
    if phase == "prefill":
        return prefill(m, micro_batch, seq, precision=p, tp=tp, cp=cp, ep=ep,
                       attention=attention, routing=routing)
    if phase == "decode":
        return decode_mean(m, micro_batch, context, gen, precision=p, tp=tp, ep=ep,
                           attention=attention, routing=routing)
    raise ValueError(f"phase must be train, prefill or decode, not {phase!r}")


@lru_cache(maxsize=1024)
def layer_ops(m: ModelConfig, p: Precision, *, phase: str, tp: int, cp: int, ep: int,
              micro_batch: int, seq: int, context: int = 0, gen: int = 1,
              sequence_parallel: bool = True, attention: str = "fused",
              routing: Routing = Routing()) -> dict[str, LayerOps]:
    """The ops of each layer kind for one micro-batch of ``micro_batch`` sequences on one
    rank of the plan (module docstring), keyed by the lowering's block name (one per
    distinct layer kind, in order of first use; see :func:`layer_order`), ``embedding`` and
    ``head``.

    ``phase``: ``train`` (forward and backward of ``seq``-token sequences), ``prefill``
    (forward, logits for the last position) or ``decode`` (one token per sequence: the
    representative step of ``gen`` steps after a ``context``-token cache, each layer kind
    at its mean keys over the steps)."""
    w = forward_workload(m, p, phase=phase, tp=tp, cp=cp, ep=ep, micro_batch=micro_batch,
                         seq=seq, context=context, gen=gen, attention=attention,
                         routing=routing, sequence_parallel=sequence_parallel)
    q_len = seq // cp
    tokens = w.tokens
    keys_by_block = w.info["keys_per_query_by_block"]
    split = tp if (sequence_parallel and tp > 1) else 1
    train = phase == "train"
    out: dict[str, LayerOps] = {}
    for b in w.blocks:
        kind = b.name
        colls = [o for o in b.ops if isinstance(o, Collective)]
        ops = [o for o in b.ops if not isinstance(o, Collective)]
        # K/V operands span the layer kind's mean keys; the rank stores q_len tokens of them
        # (a linear-attention layer attends no keys: nothing to scale)
        ks = q_len / keys_by_block[kind] if keys_by_block.get(kind) else 1.0
        saved = layer_saved_bytes(Block.of_ops(kind, 1, tuple(ops)), ks, m.hidden_size, tokens,
                                  split) if train else 0.0
        sel_bytes, sel_ops = _selective(ops, m, tokens, split)
        out[kind] = LayerOps(
            kind=kind, forward=tuple(ops),
            moe=any(isinstance(o, Gemm) and "expert" in o.tags for o in ops),
            backward=_backward(ops, p, table_elements(b, p)) if train else (),
            tp=tuple(o for o in colls if "tp" in o.tags),
            tp_bwd=tuple(o for o in extra_backward_collectives(b.ops, p) if "tp" in o.tags)
            if train else (),
            a2a_bytes=next((o.bytes for o in colls if "ep" in o.tags), 0.0),
            cp_kv_bytes=sum(o.bytes / o.group for o in colls if "cp" in o.tags),
            saved_bytes=saved, selective_bytes=sel_bytes if train else 0.0,
            selective_ops=sel_ops if train else (),
            input_bytes=tokens * m.hidden_size * p.a_bytes / split)
    return out


def layer_order(m: ModelConfig, ops: dict[str, LayerOps]) -> list[str]:
    """The :func:`layer_ops` key of every layer, in layer order. The lowering emits one block
    per distinct layer kind in order of first use: the model's ``layer_groups()``."""
    keys = [k for k in ops if k not in ("embedding", "head")]
    index = [0] * m.layers
    for g, (_, layers) in enumerate(m.layer_groups()):
        for i in layers:
            index[i] = g
    if max(index) >= len(keys):                      # pragma: no cover - lowering changed
        raise ValueError(f"{m.name}: {max(index) + 1} layer kinds but the lowering emitted "
                         f"{len(keys)} layer blocks ({', '.join(keys)})")
    return [keys[i] for i in index]
