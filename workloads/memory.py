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
  dropout masks: ``32·s·b·h``;
* with full recomputation each layer keeps only its input (``s·b·h``) and one layer's
  activations are live at a time during backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..sim.ops import Gemm, VectorOp
from .config import ModelConfig
from .fused import FusedAttention
from .graph import Block, Workload
from .lower import valid_tp_degrees
from .params import kv_cache_bytes, params_per_chip
from .precision import Precision


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
        elif isinstance(op, FusedAttention):   # Q, stats; K and V over the full sequence
            total += op.saved_bytes + op.saved_kv_bytes
    return total


def peak_working_bytes(w: Workload) -> float:
    """Largest single-op activation footprint (inputs and output not counted elsewhere)."""
    peak = 0.0
    for _, op in w.items():
        if isinstance(op, Gemm):
            live = op.a_bytes + op.c_bytes + (0 if op.b_is_weight or "weight" in op.tags
                                              or w.phase == "decode" else op.b_bytes)
        elif isinstance(op, VectorOp) and op.kind != "optimizer":
            live = op.read_bytes + op.write_bytes
        elif isinstance(op, FusedAttention):
            live = op.working_bytes
        else:
            continue
        peak = max(peak, live)
    return peak


@dataclass(frozen=True)
class MemoryReport:
    """Bytes per chip by component against ``capacity_bytes``; ``advice`` when it does not fit."""

    capacity_bytes: float
    breakdown: dict[str, float]
    extra: dict[str, float] = field(default_factory=dict)
    advice: str = ""
    min_tp: int | None = None
    suggestion: dict | None = None

    @property
    def total_bytes(self) -> float:
        return sum(self.breakdown.values())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def deficit_bytes(self) -> float:
        return max(0.0, self.total_bytes - self.capacity_bytes)

    def to_dict(self) -> dict:
        return {"fits": self.fits, "memory_bytes": self.total_bytes,
                "capacity_bytes": self.capacity_bytes, "deficit_bytes": self.deficit_bytes,
                "breakdown": dict(self.breakdown), **self.extra, "advice": self.advice,
                "min_tp": self.min_tp, "suggestion": self.suggestion}


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB"


def inference_breakdown(m: ModelConfig, p: Precision, tp: int, batch: int, context: int,
                        activations: float) -> dict[str, float]:
    return {"weights": params_per_chip(m, tp) * p.w_bytes,
            "kv_cache": batch * kv_cache_bytes(m, p.kv, context, tp),
            "activations": activations}


def inference_memory(m: ModelConfig, p: Precision, tp: int, batch: int, context: int,
                     workload: Workload, capacity_bytes: float,
                     narrow_dtypes: tuple[str, ...] = ("fp8", "int8", "int4")) -> MemoryReport:
    """Footprint of serving ``batch`` sequences of up to ``context`` tokens on each of ``tp``
    chips; ``narrow_dtypes`` are the storage precisions advice may suggest, in order."""
    act = peak_working_bytes(workload) + workload.tokens * m.hidden_size * p.a_bytes
    bd = inference_breakdown(m, p, tp, batch, context, act)
    rep = MemoryReport(capacity_bytes, bd)
    if rep.fits:
        return rep

    def total(t: int, q: Precision) -> float:
        return sum(inference_breakdown(m, q, t, batch, context, act * tp / t).values())

    min_tp = next((t for t in valid_tp_degrees(m) if t > tp
                   and total(t, p) <= capacity_bytes), None)
    suggestion = None
    for q in _narrower(p, narrow_dtypes):
        if total(tp, q) <= capacity_bytes:
            suggestion = {"weights_dtype": q.weights, "kv_dtype": q.kv}
            break
    return replace(rep, min_tp=min_tp, suggestion=suggestion,
                   advice=_advice(rep, tp, min_tp, suggestion))


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
            training: bool = False, recompute_fits: bool = False) -> str:
    parts = [f"needs {_gib(rep.total_bytes)} per chip but the chip has "
             f"{_gib(rep.capacity_bytes)}: {_gib(rep.deficit_bytes)} short"]
    if recompute_fits:
        parts.append("fits with full activation recomputation (--recompute)")
    if min_tp is not None:
        parts.append(f"fits on {min_tp} chips with tensor parallelism (--tp {min_tp})")
    elif not training:
        parts.append("no tensor-parallel degree that splits the model fits")
    if suggestion:
        parts.append("fits at tp=%d with --weights-dtype %s --kv-dtype %s"
                     % (tp, suggestion["weights_dtype"], suggestion["kv_dtype"]))
    return "; ".join(parts)


def train_breakdown(m: ModelConfig, p: Precision, tp: int, activations: float) -> dict:
    n = params_per_chip(m, tp)
    return {"weights": n * p.w_bytes, "gradients": n * p.g_bytes,
            "optimizer_state": n * p.optimizer_state_bytes_per_param, "activations": activations}


def activation_bytes(w: Workload, m: ModelConfig, p: Precision) -> tuple[float, float]:
    """(without recomputation, with full recomputation) saved-activation bytes of a training
    workload's forward pass."""
    fwd = [b for b in w.blocks if b.stage == "forward"]
    layers = [b for b in fwd if b.name not in ("embedding", "head")]
    n_micro = w.info.get("micro_batches", 1)          # one micro-batch's activations live
    tokens = w.tokens // n_micro
    seq = w.info.get("seq_len", 1)
    keys = w.info.get("keys_per_query_by_block", {})

    def saved(b: Block) -> float:   # K/V over each layer kind's mean keys → the stored sequence
        return saved_bytes(b, seq / keys.get(b.name, w.info.get("keys_per_query", 1)))

    head = sum(saved(b) for b in fwd if b.name == "head")
    full = sum(b.repeat // n_micro * saved(b) for b in layers) + head
    ckpt = (sum(b.repeat // n_micro for b in layers) * tokens * m.hidden_size * p.a_bytes
            + max((saved(b) for b in layers), default=0.0) + head)
    return full, ckpt


def train_memory(m: ModelConfig, p: Precision, tp: int, workload: Workload,
                 capacity_bytes: float, recompute: bool) -> MemoryReport:
    """Footprint of one training replica's chip (no ZeRO: every DP replica holds it all)."""
    full, ckpt = activation_bytes(workload, m, p)
    act = ckpt if recompute else full
    rep = MemoryReport(capacity_bytes, train_breakdown(m, p, tp, act),
                       extra={"activations_no_recompute": full, "activations_recompute": ckpt})
    if rep.fits:
        return rep

    def total(t: int, a: float) -> float:
        return sum(train_breakdown(m, p, t, a * tp / t).values())

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
