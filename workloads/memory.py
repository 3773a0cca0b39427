"""Memory footprint per chip against DRAM capacity, and what would make it fit.

Inference: weights (all experts resident) + KV cache (batch × context per layer, capped at the
window of sliding layers and the chunk of chunked ones, KV heads split over TP ranks, MLA's
latent replicated) + the peak activation working set of one op
(unfused attention's softmax holds the ``s × keys`` scores and probabilities; fused attention
only Q, K, V and O).
Training: weights + gradients + optimizer state (master copy and two moments: 16 B/param with
the defaults) + saved activations, with or without full recomputation:

* without recomputation every layer keeps the inputs its backward needs: the A operand of
  every GEMM, Q, K and V of attention, and the inputs of norms and activation functions.
  Attention memory is flash-style in both attention modes: the ``s × s`` scores and
  probabilities are recomputed in backward, not stored (fused attention also keeps its softmax
  statistics, 2 FP32 values per query row and head). For GPT-3 this is Korthikanti et al.
  2022's ``34·s·b·h`` per layer without the ``5·a·s²·b`` score term and the ``2·s·b·h`` of
  dropout masks: ``32·s·b·h``; a step with hidden dropout also keeps the bias-dropout-adds'
  bool masks (:mod:`~diptych.workloads.dropout`), Korthikanti's ``2·s·b·h``;
* with full recomputation each layer keeps only its input (``s·b·h``) and one layer's
  activations are live at a time during backward.

:func:`train_memory` also takes a ZeRO stage and shard count (:func:`zero_state_bytes`,
:func:`zero_buffer_bytes`) and sequence parallelism (:func:`layer_saved_bytes`: the tensors
every tensor-parallel rank would replicate stored ``÷ tp``); the cluster layer's
:func:`diptych.sim.cluster.memory.plan_memory` applies the same functions per pipeline stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..arch.dtypes import dtype_bytes
from .ops import Gemm, VectorOp
from .config import ModelConfig
from .fused_attention import FusedAttention
from .graph import Workload
from .program import Block
from .lower import SP_SHARD, _pos, valid_tp_degrees
from .params import (kv_cache_bytes, params_per_chip, state_bytes_per_sequence,
                     weight_bytes_per_chip)
from .precision import Precision
from . import dropout


def saved_bytes(block: Block, kv_scale: float = 1.0) -> float:
    """Activation bytes one copy of ``block`` keeps for backward (see module docstring).

    ``kv_scale`` converts the K/V operands of causal attention, modelled over the mean number
    of keys per query, back to the full sequence that is stored (``seq_len / keys``)."""
    total = 0.0
    for op in block.ops:
        if isinstance(op, Gemm):
            if "no_save_a" not in op.tags:
                total += op.a_bytes
            if "saved_b" in op.tags:
                total += op.b_bytes * kv_scale
        elif isinstance(op, VectorOp) and "saved" in op.tags:
            total += op.read_bytes
        elif isinstance(op, VectorOp) and dropout.TAG in op.tags:   # the bool mask it saved
            total += op.elements * dropout.MASK_BYTES
        elif isinstance(op, FusedAttention):   # Q, stats; K and V over the full sequence
            total += op.saved_bytes + op.saved_kv_bytes
    return total


def peak_working_bytes(w: Workload) -> float:
    """Largest single-op activation footprint (inputs and output not counted elsewhere)."""
    peak = 0.0
    for _, op in w.items():
        # the sparse-attention indexer's scores stay on chip (its kernel's epilogue reduces
        # them): not a DRAM footprint
        on_chip = "indexer" in op.tags
        if isinstance(op, Gemm):
            c = 0.0 if on_chip and op.c_dest != "dram" else op.c_bytes
            live = op.a_bytes + c + (0 if op.b_is_weight or "weight" in op.tags
                                     or w.phase == "decode" else op.b_bytes)
        elif isinstance(op, VectorOp) and "state" in op.tags:
            continue            # a sequence's state: counted once per sequence, not here
        elif isinstance(op, VectorOp) and op.kind != "optimizer":
            live = op.read_bytes + op.write_bytes - (op.scratchpad_read_bytes if on_chip
                                                     else 0.0)
        elif isinstance(op, FusedAttention):
            live = op.working_bytes
        else:
            continue
        peak = max(peak, live)
    return peak


@dataclass(frozen=True)
class MemoryReport:
    """Bytes per chip by component against ``capacity_bytes``; ``advice`` when it does not fit.

    ``tier2_parts``: breakdown keys that live in a second memory tier of
    ``tier2_capacity_bytes`` (a training offload, :mod:`diptych.sim.run.offload`): then
    ``capacity_bytes`` is the first tier's, and the report fits when each tier holds its
    parts. Without them (the default) every part is against ``capacity_bytes``."""

    capacity_bytes: float
    breakdown: dict[str, float]
    extra: dict[str, float] = field(default_factory=dict)
    advice: str = ""
    min_tp: int | None = None
    suggestion: dict | None = None
    tier2_parts: tuple[str, ...] = ()
    tier2_capacity_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        return sum(self.breakdown.values())

    @property
    def tier2_bytes(self) -> float:
        """Bytes of the parts in the second tier (0 without an offload)."""
        return sum(v for k, v in self.breakdown.items() if k in self.tier2_parts)

    @property
    def tier1_bytes(self) -> float:
        """Bytes of the parts against ``capacity_bytes`` (all of them without an offload)."""
        return self.total_bytes - self.tier2_bytes if self.tier2_parts else self.total_bytes

    @property
    def fits(self) -> bool:
        if self.tier2_parts:
            return (self.tier1_bytes <= self.capacity_bytes
                    and self.tier2_bytes <= self.tier2_capacity_bytes)
        return self.total_bytes <= self.capacity_bytes

    @property
    def deficit_bytes(self) -> float:
        if self.tier2_parts:
            return (max(0.0, self.tier1_bytes - self.capacity_bytes)
                    + max(0.0, self.tier2_bytes - self.tier2_capacity_bytes))
        return max(0.0, self.total_bytes - self.capacity_bytes)

    def to_dict(self) -> dict:
        tiers = ({"tier2_parts": list(self.tier2_parts), "tier1_bytes": self.tier1_bytes,
                  "tier2_bytes": self.tier2_bytes,
                  "tier2_capacity_bytes": self.tier2_capacity_bytes}
                 if self.tier2_parts else {})
        return {"fits": self.fits, "memory_bytes": self.total_bytes,
                "capacity_bytes": self.capacity_bytes, "deficit_bytes": self.deficit_bytes,
                "breakdown": dict(self.breakdown), **self.extra, **tiers, "advice": self.advice,
                "min_tp": self.min_tp, "suggestion": self.suggestion}


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB"


def inference_breakdown(m: ModelConfig, p: Precision, tp: int, batch: int, context: int,
                        activations: float, kv_grid: tuple[int, int] | None = None
                        ) -> dict[str, float]:
    """Weights, KV cache (``batch`` sequences of ``context`` tokens, each layer its kind's
    share) and activations per chip; a model with linear-attention layers adds ``state``:
    each sequence's fixed state once, whatever its length
    (:func:`~diptych.workloads.params.state_bytes_per_sequence`, the conv state in the
    activations' dtype). ``kv_grid``: the 2-D layout's ``(X, YZ)``
    (:mod:`~diptych.workloads.tp2d`): each chip caches ``⌈batch/X⌉`` sequences' KV heads of
    a ``YZ``-way head split."""
    kv = (-(-batch // kv_grid[0]) * kv_cache_bytes(m, p.kv, context, kv_grid[1]) if kv_grid
          else batch * kv_cache_bytes(m, p.kv, context, tp))
    bd = {"weights": weight_bytes_per_chip(m, tp, p),
          "kv_cache": kv,
          "activations": activations}
    if m.state_layers:
        bd["state"] = batch * state_bytes_per_sequence(m, p.activations, tp)
    return bd


def inference_memory(m: ModelConfig, p: Precision, tp: int, batch: int, context: int,
                     workload: Workload, capacity_bytes: float,
                     narrow_dtypes: tuple[str, ...] = ("fp8", "int8", "int4")) -> MemoryReport:
    """Footprint of serving ``batch`` sequences of up to ``context`` tokens on each of ``tp``
    chips; ``narrow_dtypes`` are the storage precisions advice may suggest, in order. Under
    the 2-D layout (the workload's ``info["tp_layout"]``) the KV cache is its grid's
    (:func:`inference_breakdown`); the advice's larger degrees stay 1-D."""
    act = peak_working_bytes(workload) + workload.tokens * m.hidden_size * p.a_bytes
    info = workload.info
    grid = (info["tp_x"], info["tp_yz"]) if info.get("tp_layout") == "2d" else None
    bd = inference_breakdown(m, p, tp, batch, context, act, grid)
    rep = MemoryReport(capacity_bytes, bd)
    if rep.fits:
        return rep

    def total(t: int, q: Precision) -> float:
        return sum(inference_breakdown(m, q, t, batch, context, act * tp / t).values())

    min_tp = next((t for t in valid_tp_degrees(m) if t > tp
                   and total(t, p) <= capacity_bytes), None)
    suggestion = None
    for q in _narrower(p, narrow_dtypes):
        if sum(inference_breakdown(m, q, tp, batch, context, act, grid).values()) \
                <= capacity_bytes:
            suggestion = {"weights_dtype": q.weights, "kv_dtype": q.kv}
            break
    return replace(rep, min_tp=min_tp, suggestion=suggestion,
                   advice=_advice(rep, tp, min_tp, suggestion, current=p))


def _narrower(p: Precision, dtypes: tuple[str, ...]):
    from ..arch.dtypes import dtype_bytes
    cands = []
    kv8 = [d for d in dtypes if dtype_bytes(d) == 1.0][:1]
    w_opts = [d for d in dtypes if dtype_bytes(d) < p.w_bytes]
    for kv in ([p.kv] + [d for d in kv8 if dtype_bytes(d) < p.kv_bytes]):
        for w in [p.weights] + w_opts:
            q = replace(p, weights=w, kv=kv)
            if q != p:
                cands.append(q)
    cands.sort(key=lambda q: (dtype_bytes(q.weights) < 1, q.w_bytes < p.w_bytes,
                              q.kv_bytes < p.kv_bytes))
    return cands


def _advice(rep: MemoryReport, tp: int, min_tp: int | None, suggestion: dict | None,
            training: bool = False, recompute_fits: bool = False,
            current: Precision | None = None) -> str:
    """The one-line advice of a report that does not fit; a precision suggestion names only
    the flags that change ``current`` (the run's precision)."""
    parts = [f"needs {_gib(rep.total_bytes)} per chip but the chip has "
             f"{_gib(rep.capacity_bytes)}: {_gib(rep.deficit_bytes)} short"]
    if recompute_fits:
        parts.append("fits with full activation recomputation (--recompute)")
    if min_tp is not None:
        parts.append(f"fits on {min_tp} chips with tensor parallelism (--tp {min_tp})")
    elif not training:
        parts.append("no tensor-parallel degree that splits the model fits")
    if suggestion:
        now = {"weights_dtype": getattr(current, "weights", None),
               "kv_dtype": getattr(current, "kv", None)}
        flags = [f"--{k.replace('_', '-')} {v}" for k, v in suggestion.items()
                 if v != now.get(k)]
        parts.append(f"fits at tp={tp} with {' '.join(flags)}")
    return "; ".join(parts)


def zero_state_bytes(params: float, zero: int, shards: int, p: Precision) -> dict[str, float]:
    """Weights, gradients and optimizer state of ``params`` parameters under ZeRO stage
    ``zero`` over ``shards`` data-parallel ranks (Rajbhandari et al. 2020: stage 1 shards the
    optimizer state, 2 also the gradients, 3 = FSDP also the weights), without the working
    buffers (:func:`zero_buffer_bytes`). Stage 0 is every replica holding it all."""
    w, g, o = p.w_bytes, p.g_bytes, p.optimizer_state_bytes_per_param
    return {"weights": params * w / (shards if zero >= 3 else 1),
            "gradients": params * g / (shards if zero >= 2 else 1),
            "optimizer_state": params * o / (shards if zero >= 1 else 1)}


def zero_buffer_bytes(largest_layer_params: float, zero: int, p: Precision) -> float:
    """Unsharded working buffers of ZeRO stage ``zero``: stage 2 keeps one layer's gradients
    (the bucket being reduced), stage 3 two layers' gathered weights (the one computing and
    the one prefetched) and one layer's gradients; ``largest_layer_params``: the largest
    layer (or embedding, or head) the rank holds."""
    n = largest_layer_params
    if zero >= 3:
        return 2 * n * p.w_bytes + n * p.g_bytes
    if zero == 2:
        return n * p.g_bytes
    return 0.0


def is_replicated(op, hidden: int, tokens: int) -> bool:
    """Saved by every tensor-parallel rank in full, what sequence parallelism splits
    ``÷ tp`` (Korthikanti et al. 2022, §4.2.2): a norm's input, or the input of a
    column-parallel GEMM over all ``tokens`` (``k`` = the model width ``hidden``)."""
    if isinstance(op, VectorOp):
        return op.kind in ("rmsnorm", "layernorm") and "saved" in op.tags
    return (isinstance(op, Gemm) and "weight" in op.tags and op.m == tokens
            and op.k == hidden and op.batch == 1 and "no_save_a" not in op.tags)


def replicated_saved_bytes(ops, hidden: int, tokens: int) -> float:
    """Saved bytes every tensor-parallel rank holds in full (:func:`is_replicated`). A norm
    the lowering already runs on the rank's sequence shard (tagged ``SP_SHARD``,
    :meth:`~diptych.workloads.lower._Ctx.norm`) reads its shard: only its weight vectors
    count here (split as an unsharded norm's whole read is, so that both lowerings store the
    same bytes)."""
    def held(op) -> float:
        if isinstance(op, Gemm):
            return op.a_bytes
        if SP_SHARD in op.tags:
            return op.read_bytes - op.elements * dtype_bytes(op.dtype)
        return op.read_bytes
    return sum(held(op) for op in ops if is_replicated(op, hidden, tokens))


def layer_saved_bytes(block: Block, kv_scale: float, hidden: int, tokens: int,
                      sp_split: int = 1) -> float:
    """:func:`saved_bytes` of one copy of a forward block with sequence parallelism over
    ``sp_split`` tensor-parallel ranks (1: none): the replicated tensors are stored split."""
    total = saved_bytes(block, kv_scale)
    if sp_split > 1:
        total -= replicated_saved_bytes(block.ops, hidden, tokens) * (1 - 1 / sp_split)
    return total


def train_breakdown(m: ModelConfig, p: Precision, tp: int, activations: float,
                    zero: int = 0, shards: int = 1) -> dict:
    """Weights, gradients, optimizer state (sharded by ZeRO ``zero`` over ``shards`` ranks)
    and ``activations`` of one tensor-parallel rank; ZeRO 2-3's working buffers are
    :func:`zero_buffer_bytes` (added by :func:`train_memory`)."""
    return {**zero_state_bytes(params_per_chip(m, tp), zero, shards, p),
            "activations": activations}


def activation_bytes(w: Workload, m: ModelConfig, p: Precision, *,
                     sequence_parallel: bool = False) -> tuple[float, float]:
    """(without recomputation, with full recomputation) saved-activation bytes of one
    micro-batch of a training workload's forward pass (:func:`saved_bytes` per layer; K and
    V over the tokens a rank stores, ``seq_len / cp``). ``sequence_parallel``: Megatron's
    sequence parallelism over the workload's ``tp`` ranks stores the tensors every rank
    would replicate (norm inputs, column-parallel GEMM inputs, the layer input kept by full
    recomputation) split ``÷ tp``."""
    fwd = [b for b in w.blocks if b.stage == "forward"]
    layers = [b for b in fwd if b.name not in ("embedding", "head")]
    n_micro = w.info.get("micro_batches", 1)          # one micro-batch's activations live
    tokens = w.tokens // n_micro
    stored = w.info.get("seq_len", 1) / w.info.get("cp", 1)
    keys = w.info.get("keys_per_query_by_block", {})
    tp = w.info.get("tp", 1)
    split = tp if sequence_parallel and tp > 1 else 1

    def saved(b: Block) -> float:   # K/V over each layer kind's mean keys → the stored tokens
        k = keys.get(b.name, w.info.get("keys_per_query", 1))
        ks = stored / k if k else 1.0    # a linear-attention layer attends no keys
        return layer_saved_bytes(b, ks, m.hidden_size, tokens, split)

    head = sum(saved(b) for b in fwd if b.name == "head")
    full = sum(b.repeat // n_micro * saved(b) for b in layers) + head
    ckpt = (sum(b.repeat // n_micro for b in layers) * tokens * m.hidden_size * p.a_bytes
            / split + max((saved(b) for b in layers), default=0.0) + head)
    return full, ckpt


def _largest_layer_params(m: ModelConfig, tp: int) -> float:
    """Parameters of the largest layer kind, embedding or head one rank holds."""
    from .train import layer_params_per_chip

    per = layer_params_per_chip(m, tp)
    kinds = ["embedding", "head"] + (["dense"] if m.dense_layers else []) + \
        (["moe"] if m.moe_layers else [])
    return max(per[k] for k in kinds)


def train_memory(m: ModelConfig, p: Precision, tp: int, workload: Workload,
                 capacity_bytes: float, recompute: bool, *, zero: int = 0, shards: int = 1,
                 sequence_parallel: bool = False) -> MemoryReport:
    """Footprint of one training replica's chip: the model state per tensor-parallel rank,
    sharded by ZeRO stage ``zero`` over ``shards`` data-parallel ranks (0, the default:
    every replica holds it all) with ZeRO 2-3's working buffers, and one micro-batch's
    saved activations (:func:`activation_bytes`). The cluster layer's
    :func:`diptych.sim.cluster.memory.plan_memory` applies the same rules
    (:func:`zero_state_bytes`, :func:`zero_buffer_bytes`, :func:`layer_saved_bytes`) per
    pipeline stage; for one stage they agree (a test)."""
    if isinstance(zero, bool) or zero not in (0, 1, 2, 3):
        raise ValueError(f"zero must be a ZeRO stage 0, 1, 2 or 3, not {zero!r}")
    _pos("shards", shards)
    full, ckpt = activation_bytes(workload, m, p, sequence_parallel=sequence_parallel)
    act = ckpt if recompute else full
    bd = train_breakdown(m, p, tp, act, zero, shards)
    if zero >= 2:
        bd = {**bd, "zero_buffers": zero_buffer_bytes(_largest_layer_params(m, tp), zero, p)}
    rep = MemoryReport(capacity_bytes, bd,
                       extra={"activations_no_recompute": full, "activations_recompute": ckpt})
    if rep.fits:
        return rep

    def total(t: int, a: float) -> float:
        state = sum(train_breakdown(m, p, t, a * tp / t, zero, shards).values())
        return state + zero_buffer_bytes(_largest_layer_params(m, t), zero, p) if zero >= 2 \
            else state

    recompute_fits = not recompute and total(tp, ckpt) <= capacity_bytes
    min_tp = next((t for t in valid_tp_degrees(m) if t > tp and total(t, act) <= capacity_bytes),
                  None)
    advice = _advice(rep, tp, min_tp, None, training=True, recompute_fits=recompute_fits)
    mb = w_mb = workload.info.get("micro_batch", 1)
    if w_mb > 1 and total(tp, act / w_mb) <= capacity_bytes:
        mb = 1
        advice += "; fits with one sequence per micro-batch (--micro-batch 1)"
    return replace(rep, min_tp=min_tp, advice=advice,
                   suggestion={"micro_batch": mb} if mb != w_mb else None)

