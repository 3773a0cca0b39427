"""One iteration of a serving engine (a *mixed step*) lowered to ops for one tensor-parallel rank.

A serving step (continuous batching, chunked prefill) runs, in one forward pass, every decode
sequence of the batch (``decode_queries`` new tokens each: 1, or ``k + 1`` when verifying
``k`` speculative tokens) and chunks of prompts being prefilled, each chunk with the tokens of
its prompt already in the KV cache (its *past*). The lowering:

* **Token-parallel ops** (norms, QKV/O/MLP/MoE GEMMs, RoPE, KV write, residual adds, TP
  all-reduces, the embedding) see all ``N = decode_batch · decode_queries + Σ chunk`` tokens
  as one GEMM with shared weights: they are :func:`~diptych.workloads.lower.layer_ops` of a
  context of ``N`` single-token rows.
* **Attention** is per sequence (the *cores*: the fused attention record, or the unfused
  scores/softmax/PV trio, and for MLA the absorbed ``q_absorb``/``v_absorb`` of decode or the
  ``kv_b_proj`` expansion of prefill), lowered once per layer kind (a sliding, chunked or
  global layer attends its own span): the decode sequences are one batched record at their
  mean past (rounded up; the KV bytes read are the sum over the sequences up to that rounding,
  attention time being linear in the keys); each prefill chunk is a causal record of
  ``chunk`` queries after its ``past`` (identical chunks are batched). A chunk with a past
  also reads the past's K/V that its layer kind caches (in the KV dtype); MLA's explicit
  prefill path also expands the past's latents (``kv_b_proj`` over the past tokens).
* **Linear attention** (gated DeltaNet): its per-sequence ops are cores too (the conv and
  the delta rule, :data:`~diptych.workloads.gated_deltanet.CORE_OPS`): a decode group reads
  and writes each sequence's state once, whatever its past; a prefill chunk runs the chunked
  algorithm over its own tokens, starting from the state its past left (no past K/V read).
* **Logits** are computed for ``logits_rows`` rows: each decode query row and each chunk that
  completes its prompt; a ``sampler`` (a runtime's engine, :mod:`~diptych.workloads.sampling`)
  adds its passes over them after the head.

With only decode sequences of one context, the step is exactly
:func:`~diptych.workloads.lower.decode`'s workload; with only whole prompts of one length,
exactly :func:`~diptych.workloads.lower.prefill`'s (tests hold both).

:func:`lower_step` names the step's tensors as :func:`~diptych.workloads.lower.decode` does
(the records of :mod:`~diptych.workloads.dataflow`), so that the program scheduler's residency
and fusion see a serving step as they see ``diptych run``'s phases: the token-parallel ops are
recorded for all ``N`` tokens; each sequence group's cores read their share of q and of the new
K/V rows, their own cache (``kv_cache`` of the decode batch, ``kv_past`` of a chunk with a past)
and write their own output, which the op after attention reads from every group; group ``g >
0``'s cores and tensors carry the mark ``@g`` (node names are unique in a block). With more than
one group, each core op is tagged with the launch group of its name
(:data:`~diptych.workloads.ops.LAUNCH_TAG`): the groups' cores of a layer are one varlen
kernel and pay one launch in a schedule (docs/program.md, "Launch groups").

:func:`step_parts` splits a step into the pieces a memoising oracle interpolates: the frame
(everything but the cores, a function of ``N`` and ``logits_rows``) and the cores (functions
of the decode batch and keys, or of a chunk and its past); :func:`combine_parts` puts them back
together with :func:`~diptych.sim.run.summed.simulate_workload`'s block rule, so that
``combine_parts(parts evaluated exactly) == simulate_workload(lower_step(step))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .ops import Collective, Op
from .program import Carry, Tensor
from .config import LayerSpec, ModelConfig
from .dataflow import Flow
from .ops import LAUNCH_TAG
from .fused_attention import FusedAttention
from .graph import Workload
from .program import Access, Block, Use
from .lower import (ATTENTION_CORES, _Ctx, _embedding, _head, check_attention, check_ep,
                    check_routing, check_tp, embedding_block, head_block, layer_exits,
                    layer_kinds, layer_ops, mixer_ops)
from .moe import Routing
from .gated_deltanet import CORE_OPS as GDN_CORE_OPS
from .mamba2 import CORE_OPS as SSM_CORE_OPS
from .params import kv_bytes_per_token_per_layer
from .precision import Precision

#: Names of the per-sequence ops of a layer (see the module docstring). A new model family
#: whose attention adds per-sequence ops must list them here.
CORE_OPS = ATTENTION_CORES | GDN_CORE_OPS | SSM_CORE_OPS


def _nonneg(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{name} must be a non-negative integer, not {v!r}")


@dataclass(frozen=True)
class Step:
    """What one serving step computes (per model replica).

    ``decode_batch`` sequences decode ``decode_queries`` tokens each; ``decode_keys`` is the
    sum over them of their tokens after the step's are written (each layer kind caps it by
    its window when lowered), so a plain decode step of sequences with ``c_i`` cached tokens
    has ``Σ (c_i + 1)``.
    ``prefill`` lists ``(chunk, past)`` pairs: ``chunk`` prompt tokens computed this step after
    ``past`` already cached. ``logits_rows``: rows that need logits (default: one per decode
    query and one per chunk)."""

    decode_batch: int = 0
    decode_keys: int = 0
    prefill: tuple[tuple[int, int], ...] = ()
    decode_queries: int = 1
    logits_rows: int | None = None

    def __post_init__(self):
        _nonneg("decode_batch", self.decode_batch)
        _nonneg("decode_keys", self.decode_keys)
        if isinstance(self.decode_queries, bool) or not isinstance(self.decode_queries, int) \
                or self.decode_queries < 1:
            raise ValueError(f"decode_queries must be a positive integer, not "
                             f"{self.decode_queries!r}")
        if self.decode_batch and self.decode_keys < self.decode_batch * self.decode_queries:
            raise ValueError(f"decode_keys ({self.decode_keys}) must be at least decode_batch "
                             f"x decode_queries ({self.decode_batch} x {self.decode_queries})")
        for c in self.prefill:
            if (not isinstance(c, tuple) or len(c) != 2 or isinstance(c[0], bool)
                    or not isinstance(c[0], int) or not isinstance(c[1], int) or c[0] < 1
                    or c[1] < 0):
                raise ValueError(f"prefill entries must be (chunk >= 1, past >= 0) integer "
                                 f"pairs, not {c!r}")
        if not self.decode_batch and not self.prefill:
            raise ValueError("a step must decode at least one sequence or prefill a chunk")
        if self.logits_rows is not None:
            if isinstance(self.logits_rows, bool) or not isinstance(self.logits_rows, int) \
                    or not 1 <= self.logits_rows <= self.tokens:
                raise ValueError(f"logits_rows must be an integer in 1..{self.tokens} (the "
                                 f"step's tokens), not {self.logits_rows!r}")

    @property
    def tokens(self) -> int:
        """Rows of the token-parallel GEMMs: decode queries plus prefill chunk tokens."""
        return self.decode_batch * self.decode_queries + sum(c for c, _ in self.prefill)

    @property
    def rows(self) -> int:
        if self.logits_rows is not None:
            return self.logits_rows
        return self.decode_batch * self.decode_queries + len(self.prefill)


def _check(m: ModelConfig, tp: int, attention: str) -> None:
    check_tp(m, tp)
    check_attention(attention)


@dataclass(frozen=True)
class Experts:
    """How a MoE model's routed experts are spread (expert parallelism, docs/serving.md
    "Expert parallelism"): ``ep`` ranks each holding ``experts / ep`` of them; ``routing``
    (popularity skew, capacity factor) sets the busiest rank's pairs
    (:func:`~diptych.workloads.lower.expert_groups`); ``whole``: each of the ``tp`` chips is
    an expert-parallel rank holding whole experts (``ep == tp``: attention tensor-parallel,
    experts not split), else the Megatron layout (every expert ÷ tp). The default is no
    expert parallelism."""

    ep: int = 1
    routing: Routing = Routing()
    whole: bool = False

    def check(self, m: ModelConfig, tp: int) -> None:
        check_ep(m, self.ep)
        check_routing(m, self.routing)
        if self.whole and self.ep != tp:
            raise ValueError(f"whole experts per chip need ep == tp (each tensor-parallel "
                             f"chip an expert-parallel rank), not ep={self.ep}, tp={tp}")

    def ctx(self, c: _Ctx) -> _Ctx:
        """``c`` with this expert layout."""
        if self.ep == 1 and self.routing.default:
            return c
        return replace(c, ep=self.ep, routing=self.routing,
                       expert_tp=1 if self.whole else None)


NO_EP = Experts()


def _attention_ops(c: _Ctx, flow: Flow | None = None) -> list[Op]:
    return mixer_ops(c, flow=flow)


#: One layer kind's cores of one sequence group: the op records with their tensor accesses
#: (named as the lowering names them, :mod:`~diptych.workloads.dataflow`) and the tensor table
#: of the group's own lowering.
CoreRecords = tuple[tuple[tuple[Op, Access], ...], dict[str, Tensor]]


def _core_records(ck: _Ctx) -> CoreRecords:
    """The cores of context ``ck`` (one layer kind) with their accesses."""
    fl = Flow()
    _attention_ops(ck, fl)
    return tuple((op, a) for op, a in fl.records if op.name in CORE_OPS), fl.tensors


def _cached_past(layer: LayerSpec, past: int) -> int:
    """Tokens of a ``past``-token prefix a layer of kind ``layer`` holds in its cache (and a
    chunk after it reads): all of them, the window (sliding) or the current chunk's
    (chunked)."""
    if layer.linear:          # its state, not a past, is read (by the layer's own cores)
        return 0
    if layer.window is None:
        return past
    if layer.attention == "chunked":
        return past % layer.window
    return min(past, layer.window)


def decode_cores(m: ModelConfig, batch: int, keys: int, queries: int, *, precision: Precision,
                 tp: int, attention: str = "fused") -> dict[str, tuple[Op, ...]]:
    """The per-sequence ops of one layer of each layer kind (by block name) for ``batch``
    decode sequences holding ``keys`` keys in all after this step's ``queries`` tokens each
    are written: one batched record at the mean past (rounded up), capped per layer kind by
    its window."""
    return {k: tuple(op for op, _ in recs) for k, (recs, _) in _decode_records(
        m, batch, keys, queries, precision=precision, tp=tp, attention=attention).items()}


def _decode_records(m: ModelConfig, batch: int, keys: int, queries: int, *,
                    precision: Precision, tp: int, attention: str) -> dict[str, CoreRecords]:
    """:func:`decode_cores` with their accesses (the KV cache read is tensor ``kv_cache``)."""
    _check(m, tp, attention)
    past = max(0, math.ceil(keys / batch - queries))
    c = _Ctx(m, precision, tp, batch, queries, 0, "decode", attention, past=past)
    return {name: _core_records(ck) for name, _, ck in layer_kinds(c)}


def prefill_cores(m: ModelConfig, chunk: int, past: int, count: int = 1, *,
                  precision: Precision, tp: int, attention: str = "fused"
                  ) -> dict[str, tuple[Op, ...]]:
    """The per-sequence ops of one layer of each layer kind for ``count`` identical chunks of
    ``chunk`` prompt tokens after ``past`` cached ones (see the module docstring for the
    past's reads)."""
    return {k: tuple(op for op, _ in recs) for k, (recs, _) in _prefill_records(
        m, chunk, past, count, precision=precision, tp=tp, attention=attention).items()}


#: The past's K/V a prefill chunk reads from the cache, and (MLA) its expanded latents.
PAST_KV, PAST_KV_B = "kv_past", "kv_b_past"


def _prefill_records(m: ModelConfig, chunk: int, past: int, count: int, *,
                     precision: Precision, tp: int, attention: str) -> dict[str, CoreRecords]:
    """:func:`prefill_cores` with their accesses: a chunk with a past reads the cache tensor
    ``kv_past`` (state); MLA's ``kv_b_proj (past)`` expands it into ``kv_b_past``, which the
    attention waits for (an ordering-only read: its byte model reads the latents)."""
    _check(m, tp, attention)
    c = _Ctx(m, precision, tp, count, chunk, 0, "prefill", attention, past=past)
    kv_layer = kv_bytes_per_token_per_layer(m, precision.kv, tp)
    out = {}
    for name, _, ck in layer_kinds(c):
        recs, tensors = _core_records(ck)
        past_read = _cached_past(ck.layer, past)
        if past_read:
            extra = count * past_read * kv_layer
            tensors = dict(tensors)
            tensors[PAST_KV] = Tensor(PAST_KV, extra, "kv_cache")
            grown: list[tuple[Op, Access]] = []
            for op, a in recs:
                if isinstance(op, FusedAttention):
                    op = replace(op, read_bytes=op.read_bytes + extra)
                    dep = ((Use(PAST_KV_B, "read", 0.0, "dep"),) if PAST_KV_B in tensors
                           else ())
                    a = replace(a, uses=a.uses + (Use(PAST_KV, "read", 1.0),) + dep)
                elif op.name == "kv_b_proj":      # MLA: expand the cached latents of the past
                    xp = replace(op, name="kv_b_proj (past)", m=count * past_read)
                    w = next(u for u in a.uses if u.role == "b")
                    tensors[PAST_KV_B] = Tensor(PAST_KV_B, xp.c_bytes)
                    grown.append((xp, Access((Use(PAST_KV, "read", 1.0, "a"), w,
                                              Use(PAST_KV_B, "write", 1.0, "c")))))
                grown.append((op, a))
            recs = tuple(grown)
        out[name] = (recs, tensors)
    return out


def _layer_blocks(c: _Ctx, cores: dict[str, list[Op]]) -> list[Block]:
    """Each layer kind's token-parallel ops with its cores where its attention belongs."""
    out = []
    for name, rep, ck in layer_kinds(c):
        ops = layer_ops(ck)
        at = next(i for i, op in enumerate(ops) if op.name in CORE_OPS)
        dense = [op for op in ops if op.name not in CORE_OPS]
        out.append(Block.of_ops(name, rep, tuple(dense[:at]) + tuple(cores.get(name, ()))
                                + tuple(dense[at:])))
    return out


def _blocks(m: ModelConfig, p: Precision, tp: int, attention: str, tokens: int, rows: int,
            cores: dict[str, list[Op]], experts: Experts = NO_EP,
            sampler: str = "none") -> list[Block]:
    c = experts.ctx(_Ctx(m, p, tp, tokens, 1, 0, "decode", attention))
    h = _Ctx(m, p, tp, rows, 1, 0, "decode", attention, sampler=sampler)
    return ([Block.of_ops("embedding", 1, tuple(_embedding(c)))] + _layer_blocks(c, cores)
            + [Block.of_ops("head", 1, tuple(_head(h)))])


def frame(m: ModelConfig, tokens: int, rows: int, *, precision: Precision, tp: int,
          attention: str = "fused", experts: Experts = NO_EP,
          sampler: str = "none") -> Workload:
    """The step without its cores: embedding, the layers' token-parallel ops over ``tokens``
    rows, and the head over ``rows`` rows (with the engine's ``sampler`` after it); the MoE
    layers' experts spread as ``experts`` says."""
    _check(m, tp, attention)
    experts.check(m, tp)
    return Workload("decode", tuple(_blocks(m, precision, tp, attention, tokens, rows, {},
                                            experts, sampler)),
                    tokens=tokens, batch=rows, info={"tp": tp, "attention": attention})


def _group(chunks) -> list[tuple[int, int, int]]:
    counts: dict[tuple[int, int], int] = {}
    for c, p in chunks:
        counts[(c, p)] = counts.get((c, p), 0) + 1
    return [(c, p, n) for (c, p), n in counts.items()]


def _step_records(m: ModelConfig, step: Step, *, precision: Precision, tp: int,
                  attention: str) -> list[dict[str, CoreRecords]]:
    groups = []
    if step.decode_batch:
        groups.append(_decode_records(m, step.decode_batch, step.decode_keys,
                                      step.decode_queries, precision=precision, tp=tp,
                                      attention=attention))
    for chunk, past, n in _group(step.prefill):
        groups.append(_prefill_records(m, chunk, past, n, precision=precision, tp=tp,
                                       attention=attention))
    return groups


def step_cores(m: ModelConfig, step: Step, *, precision: Precision, tp: int,
               attention: str = "fused") -> list[dict[str, tuple[Op, ...]]]:
    """The cores of each of ``step``'s sequence groups (decode batch first, then each
    distinct prefill chunk), per layer kind."""
    return [{k: tuple(op for op, _ in recs) for k, (recs, _) in g.items()}
            for g in _step_records(m, step, precision=precision, tp=tp, attention=attention)]


#: Group ``g > 0``'s cores and the tensors they make are named ``name@g`` in a step's block
#: (node names are unique in a block); :func:`base_name` strips the mark.
GROUP_MARK = "@"


def _mark(name: str, g: int) -> str:
    return name if g == 0 else f"{name}{GROUP_MARK}{g}"


def base_name(name: str) -> str:
    """An op's name without the sequence-group mark of :func:`lower_step`."""
    head, mark, tail = name.rpartition(GROUP_MARK)
    return head if mark and tail.isdigit() else name


def _named_layer(name: str, rep: int, ck: _Ctx, entry: str, exit_: str,
                 groups: list[dict[str, CoreRecords]]) -> Block:
    """One layer kind of a step with its tensors: the token-parallel ops as
    :func:`~diptych.workloads.lower.layer_ops` records them for all the step's tokens, the
    cores of every sequence group in place of that lowering's own attention. A core reads its
    group's rows of the token-parallel tensors (q, K/V entries: the share of its tokens), its
    own state (the decode batch's ``kv_cache``, a chunk's ``kv_past``) and writes its own
    output, which the op after attention reads in full from every group."""
    T, d, a = ck.tokens, ck.m.hidden_size, ck.p.a_bytes
    fl = Flow()
    layer_ops(ck, flow=fl)
    fl.t(entry, T * d * a, program=True)
    fl.t(exit_, T * d * a, program=True)
    frame = fl.records
    at = next(i for i, (op, _) in enumerate(frame) if op.name in CORE_OPS)
    dense = [(op, acc) for op, acc in frame if op.name not in CORE_OPS]
    made = {t for _, acc in dense for t in acc.writes + acc.updates}
    outs = {t for op, acc in frame if op.name in CORE_OPS for t in acc.writes}
    tensors = dict(fl.tensors)
    cores: list[tuple[Op, Access]] = []
    produced: dict[str, list[str]] = {}
    shared = len(groups) > 1
    for g, grp in enumerate(groups):
        recs, own = grp.get(name, ((), {}))

        def rename(u: Use) -> Use:
            t = u.tensor
            if t in made:                    # this group's rows of a token-parallel tensor
                whole = tensors[t].bytes
                return replace(u, share=u.share * own[t].bytes / whole) if whole else u
            if own[t].kind == "weight":
                return u
            new = _mark(t, g)
            src = own[t]
            tensors[new] = Tensor(new, src.bytes, src.kind, src.live_out)
            return replace(u, tensor=new)

        for op, acc in recs:
            # the groups' records of one op run as one varlen kernel: one launch per layer
            launch = f"{LAUNCH_TAG}{op.name}"
            acc = replace(acc, uses=tuple(rename(u) for u in acc.uses))
            for t in acc.writes:
                base = t if g == 0 else t[:t.rindex(GROUP_MARK)]
                produced.setdefault(base, []).append(t)
            cores.append((replace(op, name=_mark(op.name, g),
                                  tags=op.tags + (launch,) if shared else op.tags), acc))
    recs = []
    for op, acc in dense:
        if any(u.tensor in outs for u in acc.uses):
            acc = replace(acc, uses=tuple(v for u in acc.uses for v in (
                [replace(u, tensor=t) for t in produced[u.tensor]] if u.tensor in outs
                else [u])))
        recs.append((op, acc))
    recs[at:at] = cores
    used = {u.tensor for _, acc in recs for u in acc.uses}
    return Block.of_ops(name, rep, tuple(op for op, _ in recs), "forward",
                        access=tuple(acc for _, acc in recs),
                        tensors=tuple(t for n, t in tensors.items() if n in used),
                        program_tensors=tuple(fl.program.values()),
                        carry=(Carry("x", "y", entry, exit_),))


def _named_head(h: _Ctx, tokens: int) -> Block:
    """The head over ``h.batch`` logits rows, reading them from the last layer's output of
    ``tokens`` rows (program tensor ``hidden``)."""
    hb = head_block(h)
    rows = h.tokens
    if rows == tokens:
        return hb
    f = rows / tokens
    hidden = Tensor("hidden", tokens * h.m.hidden_size * h.p.a_bytes)
    return hb.with_ops(hb.ops, tuple(replace(acc, uses=tuple(
                           replace(u, share=u.share * f) if u.tensor == "hidden" else u
                           for u in acc.uses)) for acc in hb.access),
                       program_tensors=tuple(hidden if t.name == "hidden" else t
                                             for t in hb.program_tensors))


def lower_step(m: ModelConfig, step: Step, *, precision: Precision | None = None, tp: int = 1,
               attention: str = "fused", experts: Experts = NO_EP,
               sampler: str = "none") -> Workload:
    """The workload of one serving ``step`` for one of ``tp`` ranks (module docstring; the
    engine's ``sampler`` after the head, :mod:`~diptych.workloads.sampling`), with
    its tensors named as :func:`~diptych.workloads.lower.decode`'s are, so that the program
    scheduler (residency, fusion) sees a step as it sees ``diptych run``'s phases: a step of
    decode sequences of one context is exactly ``decode()``'s workload, tensors included."""
    _check(m, tp, attention)
    experts.check(m, tp)
    p = precision or Precision()
    groups = _step_records(m, step, precision=p, tp=tp, attention=attention)
    c = experts.ctx(_Ctx(m, p, tp, step.tokens, 1, 0, "decode", attention))
    h = _Ctx(m, p, tp, step.rows, 1, 0, "decode", attention, sampler=sampler)
    layers = [_named_layer(name, rep, ck, entry, exit_, groups)
              for (name, rep, ck), (entry, exit_) in zip(layer_kinds(c), layer_exits(c))]
    phase = "prefill" if step.prefill else "decode"
    return Workload(phase, (embedding_block(c), *layers, _named_head(h, step.tokens)),
                    tokens=step.tokens, batch=step.rows,
                    info={"tp": tp, "attention": attention, "decode_batch": step.decode_batch,
                          "decode_keys": step.decode_keys, "prefill": list(step.prefill)})


# -- pieces for a memoising oracle ------------------------------------------------------------

def core_op_names(cores: dict[str, tuple[Op, ...]]) -> dict[str, frozenset[str]]:
    """The distinct op names of cores, per layer kind (one launch each per step)."""
    return {k: frozenset(o.name for o in ops) for k, ops in cores.items()}


def core_workload(cores: dict[str, tuple[Op, ...]]) -> Workload:
    """Cores (per layer kind) as one block each, repeat 1 (for timing them alone)."""
    for ops in cores.values():
        if any(isinstance(o, Collective) for o in ops):
            raise ValueError("attention cores hold no collectives")
    return Workload("decode",
                    tuple(Block.of_ops(name, 1, tuple(ops)) for name, ops in cores.items()),
                    tokens=1, batch=1)


def step_parts(m: ModelConfig, step: Step, *, precision: Precision, tp: int,
               attention: str = "fused", experts: Experts = NO_EP, sampler: str = "none"
               ) -> tuple[Workload, list[dict[str, tuple[Op, ...]]]]:
    """The frame of ``step`` and the cores of each of its sequence groups."""
    return (frame(m, step.tokens, step.rows, precision=precision, tp=tp, attention=attention,
                  experts=experts, sampler=sampler),
            step_cores(m, step, precision=precision, tp=tp, attention=attention))


__all__ = ["CORE_OPS", "Experts", "GROUP_MARK", "NO_EP", "Step", "base_name", "core_op_names",
           "core_workload", "decode_cores", "frame", "lower_step", "prefill_cores", "step_cores",
           "step_parts"]
