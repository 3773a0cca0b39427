"""Per-layer ops of one micro-batch on one rank, for a plan: an adapter over the lowering.

The existing lowering (:func:`diptych.workloads.train_step`, :func:`~diptych.workloads.prefill`,
:func:`~diptych.workloads.decode`) already gives one tensor-parallel rank's ops per layer kind
(dense layer, MoE layer, embedding, head). This module takes its forward blocks for one
micro-batch of ``micro_batch`` sequences of ``seq / cp`` tokens and adapts them to the plan,
without touching ``workloads/``:

* **context parallelism** (``cp > 1``, ring attention with Megatron's load balancing): every
  op sees the rank's ``seq / cp`` tokens, but attention's queries attend the mean keys of the
  *whole* sequence under the layer kind's mask (``(seq+1)/2`` for full attention, less for a
  sliding window or Llama 4's chunks, :func:`~diptych.workloads.lower.mean_keys`): the
  attention GEMMs are rebuilt with that key count and re-fused
  (:func:`diptych.workloads.fused.fuse`) over the whole sequence's K and V, which arrive
  chunk by chunk over the cp ring; the rank keeps only its own K/V chunk for backward
  (``cp_kv_bytes``, the ring's message);
* **expert parallelism** (``ep > 1``): the expert GEMMs are rebuilt for the rank's
  ``experts / ep`` experts, which receive the rank's share of the ``tokens × top-k``
  token-expert pairs (``T·k`` per rank under balanced routing) — the expected number of
  local experts touched is ``E/ep · (1 − (1 − k/E)^(ep·T))``, as in
  :mod:`diptych.workloads.moe` — plus two all-to-alls per MoE layer each way (dispatch,
  combine) of ``T·k·d`` activations per rank (÷ tp: each tensor-parallel rank dispatches its
  sequence-parallel share);
* **decode** evaluates one representative step of ``gen``: each layer kind attends its own
  mean keys over the steps (:func:`decode_keys`), not its keys at the mean context;
* the **backward** ops are derived from the adapted forward ops with the lowering's own
  :func:`diptych.workloads.train.backward_ops`;
* **activation memory** per layer is :func:`diptych.workloads.memory.saved_bytes` of the
  adapted block; with sequence parallelism the tensors replicated over the tensor-parallel
  ranks (norm inputs, inputs of the column-parallel GEMMs) are stored split ``÷ tp``
  (Korthikanti et al. 2022, §4.2.2).

Phase 2 should move the CP and EP shapes into the lowering itself (a ``cp`` and ``ep``
argument of ``train_step``/``prefill``/``decode``), see docs/cluster.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

from ...sim.ops import Collective, Gemm, Op, VectorOp
from ...workloads.config import ModelConfig
from ...workloads.fused import FusedAttention, fuse
from ...workloads.graph import Block, Workload
from ...workloads.lower import decode, mean_keys, prefill
from ...workloads.memory import saved_bytes
from ...workloads.moe import expected_experts_touched
from ...workloads.precision import Precision
from ...workloads.train import backward_ops, train_step

#: Vector ops whose outputs selective recomputation drops (recomputed from their saved
#: input): norms and activation functions (Megatron-Core ``--recompute-modules layernorm
#: moe_act``).
SELECTIVE_KINDS = ("rmsnorm", "layernorm", "swiglu", "gelu")


@dataclass(frozen=True)
class LayerOps:
    """One copy of a layer kind for one micro-batch on one rank (``kind``: the lowering's
    block name, ``embedding`` or ``head``; ``moe``: it has routed experts).

    ``forward``/``backward``: compute ops (no collectives); ``tp``: the forward
    tensor-parallel collectives (their backward mirrors are the same); ``a2a_bytes``: one
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
    a2a_bytes: float = 0.0
    cp_kv_bytes: float = 0.0
    saved_bytes: float = 0.0
    selective_bytes: float = 0.0
    selective_ops: tuple[Op, ...] = ()
    input_bytes: float = 0.0


def _rescale_vec(op: VectorOp, factor: float) -> VectorOp:
    return dataclasses.replace(op, elements=max(1, int(math.ceil(op.elements * factor))),
                               read_bytes=op.read_bytes * factor,
                               write_bytes=op.write_bytes * factor)


def _cp_attention(ops: list[Op], keys: int, seq: int) -> tuple[list[Op], float]:
    """Rebuild attention for ring attention: ``keys`` mean keys per query over the whole
    sequence of ``seq`` tokens; returns the ops and this rank's K+V chunk bytes."""
    out: list[Op] = []
    kv_chunk = 0.0
    for i, op in enumerate(ops):
        if isinstance(op, FusedAttention):
            scores, soft, pv = op.parts
            old = scores.n
            s2 = dataclasses.replace(scores, n=keys)
            p2 = dataclasses.replace(pv, k=keys)
            v2 = _rescale_vec(soft, keys / old)
            stats = op.saved_bytes - scores.a_bytes
            heads_rows = int(round(stats / 8.0)) if stats > 0 else 1
            f = fuse(op.name, s2, v2, p2, keys_stored=seq, heads_rows=heads_rows,
                     stats=stats > 0, tags=op.tags)
            kv_chunk += op.saved_kv_bytes
            out.append(dataclasses.replace(f, saved_kv_bytes=op.saved_kv_bytes))
        elif isinstance(op, Gemm) and op.name == "attn_scores":
            out.append(dataclasses.replace(op, n=keys))
        elif isinstance(op, VectorOp) and op.name == "softmax":
            prev = next(o for o in reversed(ops[:i]) if getattr(o, "name", "") == "attn_scores")
            out.append(_rescale_vec(op, keys / prev.n))
        elif isinstance(op, Gemm) and op.name == "attn_pv":
            out.append(dataclasses.replace(op, k=keys))
        else:
            out.append(op)
    return out, kv_chunk


def _unfused_kv_chunk(ops: list[Op], q_len: int) -> float:
    """K+V bytes of this rank's ``q_len`` tokens in an unfused layer (B operands of the
    scores and P·V GEMMs, rescaled from the mean key count to the stored length)."""
    total = 0.0
    for op in ops:
        if isinstance(op, Gemm) and op.name == "attn_scores":
            total += op.b_bytes * q_len / op.n
        elif isinstance(op, Gemm) and op.name == "attn_pv":
            total += op.b_bytes * q_len / op.k
    return total


def _ep_experts(ops: list[Op], m: ModelConfig, ep: int, tokens: int) -> list[Op]:
    """Replace the expert GEMMs by those of ``experts / ep`` local experts receiving
    ``tokens × top-k`` token-expert pairs (balanced routing)."""
    e_local = m.experts // ep
    k = m.experts_per_token
    pairs = tokens * k
    touched = expected_experts_touched(m.experts, k, ep * tokens) / ep
    n_exp = max(1, min(e_local, pairs, round(touched)))
    q, r = divmod(pairs, n_exp)
    groups = [(n, t) for n, t in ((r, q + 1), (n_exp - r, q)) if n and t]
    out: list[Op] = []
    for op in ops:
        if isinstance(op, Gemm) and op.name.startswith(("experts_gate_up", "experts_down")):
            base = op.name.split("[")[0]
            if out and isinstance(out[-1], Gemm) and out[-1].name.split("[")[0] == base:
                continue                               # already rebuilt this op's groups
            for i, (n, t) in enumerate(groups):
                sfx = f"[{i}]" if len(groups) > 1 else ""
                out.append(dataclasses.replace(op, name=base + sfx, m=t, batch=n))
        else:
            out.append(op)
    return out


def _is_replicated(op: Op, m: ModelConfig, tokens: int) -> bool:
    """Saved by every tensor-parallel rank in full: a norm's input, or the input of a
    column-parallel GEMM over all ``tokens`` (what sequence parallelism splits)."""
    if isinstance(op, VectorOp):
        return op.kind in ("rmsnorm", "layernorm") and "saved" in op.tags
    return (isinstance(op, Gemm) and "weight" in op.tags and op.m == tokens
            and op.k == m.hidden_size and op.batch == 1 and "no_save_a" not in op.tags)


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
            dropped += op.a_bytes / (split if _is_replicated(op, m, tokens) else 1)
        else:
            src, base = None, None
    return dropped, tuple(rerun)


def _replicated_saved(ops: list[Op], m: ModelConfig, tokens: int) -> float:
    """Saved bytes every tensor-parallel rank holds in full (:func:`_is_replicated`)."""
    return sum(op.read_bytes if isinstance(op, VectorOp) else op.a_bytes
               for op in ops if _is_replicated(op, m, tokens))


def _backward(ops: list[Op], p: Precision) -> tuple[Op, ...]:
    out: list[Op] = []
    for op in reversed(ops):
        out += backward_ops(op, p)
    return tuple(out)


def decode_keys(m: ModelConfig, context: int, gen: int) -> list[int]:
    """Keys per query of each layer kind (``m.layer_groups()`` order), averaged over ``gen``
    decode steps after a ``context``-token cache: step ``i`` (0-based) attends the keys of
    position ``context + i + 1`` under the layer's mask, so the mean is
    :func:`~diptych.workloads.lower.mean_keys` of ``gen`` queries after ``context`` past
    tokens (rounded up, as the lowering rounds). A chunked layer's mean is not its keys at
    the mean context: Llama 4's 8192-token chunks, prompt 4096, 8192 steps: 4096.5 keys, not
    the 1 key of position 8193."""
    return [math.ceil(mean_keys(spec, gen, context)) for spec, _ in m.layer_groups()]


@lru_cache(maxsize=256)
def decode_workload(m: ModelConfig, batch: int, context: int, gen: int = 1, *,
                    precision: Precision | None = None, tp: int = 1,
                    attention: str = "fused") -> Workload:
    """One representative step of ``gen`` decode steps of ``batch`` sequences after a
    ``context``-token cache, each layer kind attending its own mean keys over the steps
    (:func:`decode_keys`). Each layer block comes from the lowering's one-step
    :func:`~diptych.workloads.decode` at a cache length equal to that mean, which is exact:
    the mean never exceeds the layer's window or chunk, so the lowering's capping leaves it
    alone, and nothing else in a decode step depends on the cache length."""
    keys = decode_keys(m, context, gen)
    lowered = {k: decode(m, batch, k, precision=precision, tp=tp, attention=attention)
               for k in set(keys)}
    base = lowered[keys[0]]
    layers = [lowered[k].blocks[1 + g] for g, k in enumerate(keys)]
    blocks = (base.blocks[0], *layers, base.blocks[-1])
    by_block = {b.name: k for b, k in zip(layers, keys)}
    return Workload("decode", blocks, tokens=batch, batch=batch,
                    info={**base.info, "context_len": context, "gen": gen,
                          "keys_per_query": max(keys), "keys_per_query_by_block": by_block})


@lru_cache(maxsize=1024)
def layer_ops(m: ModelConfig, p: Precision, *, phase: str, tp: int, cp: int, ep: int,
              micro_batch: int, seq: int, context: int = 0, gen: int = 1,
              sequence_parallel: bool = True, attention: str = "fused"
              ) -> dict[str, LayerOps]:
    """The plan-adapted ops of each layer kind for one micro-batch of ``micro_batch``
    sequences on one rank (module docstring), keyed by the lowering's block name (one per
    distinct layer kind, in order of first use; see :func:`layer_order`), ``embedding`` and
    ``head``.

    ``phase``: ``train`` (forward and backward of ``seq``-token sequences), ``prefill``
    (forward, logits for the last position) or ``decode`` (one token per sequence: the
    representative step of ``gen`` steps after a ``context``-token cache, each layer kind
    at its mean keys over the steps, :func:`decode_workload`)."""
    q_len = seq // cp
    if phase == "train":
        w = train_step(m, micro_batch, q_len, precision=p, tp=tp, micro_batch=micro_batch,
                       attention=attention)
    elif phase == "prefill":
        w = prefill(m, micro_batch, q_len, precision=p, tp=tp, attention=attention)
    elif phase == "decode":
        w = decode_workload(m, micro_batch, context, gen, precision=p, tp=tp,
                            attention=attention)
    else:
        raise ValueError(f"phase must be train, prefill or decode, not {phase!r}")
    tokens = micro_batch * (1 if phase == "decode" else q_len)
    # keys per query of each layer kind over the whole sequence (ring attention, cp > 1)
    specs = iter(spec for spec, _ in m.layer_groups())
    keys_by_block = w.info["keys_per_query_by_block"]
    out: dict[str, LayerOps] = {}
    for b in w.blocks:
        if b.stage != "forward":
            continue
        ops = list(b.ops)
        kind = b.name
        layer = kind not in ("embedding", "head")
        moe = any(getattr(o, "name", "").startswith("experts_") for o in ops)
        tp_ops = tuple(o for o in ops if isinstance(o, Collective))
        ops = [o for o in ops if not isinstance(o, Collective)]
        kv_chunk = 0.0
        # unfused K/V operands span the layer kind's mean keys; the stored K/V is q_len long
        ks = q_len / keys_by_block[kind] if layer else 1.0
        if layer and cp > 1:
            keys = math.ceil(mean_keys(next(specs), seq))
            if attention == "unfused":
                kv_chunk = _unfused_kv_chunk(ops, q_len)
                ops, _ = _cp_attention(ops, keys, seq)
                ks = q_len / keys
            else:
                ops, kv_chunk = _cp_attention(ops, keys, seq)
        a2a = 0.0
        if moe and ep > 1:
            ops = _ep_experts(ops, m, ep, tokens)
            a2a = tokens * m.experts_per_token * m.hidden_size * p.a_bytes / tp
        blk = Block(kind, 1, tuple(ops))
        saved = saved_bytes(blk, ks) if phase == "train" else 0.0
        split = tp if (sequence_parallel and tp > 1) else 1
        sel_bytes, sel_ops = _selective(ops, m, tokens, split)
        if split > 1:
            saved -= _replicated_saved(ops, m, tokens) * (1 - 1 / split)
        out[kind] = LayerOps(
            kind=kind, forward=tuple(ops), moe=moe,
            backward=_backward(ops, p) if phase == "train" else (),
            tp=tp_ops, a2a_bytes=a2a, cp_kv_bytes=kv_chunk, saved_bytes=saved,
            selective_bytes=sel_bytes if phase == "train" else 0.0,
            selective_ops=sel_ops if phase == "train" else (),
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
