"""The ping-pong pipeline of attention–FFN disaggregation (AFD) in closed form
(docs/serving.md, "Attention–FFN disaggregation").

A decode iteration's batch is split into ``k`` micro-batches. Each layer, a micro-batch runs
four stages on four resources, each resource serving the micro-batches in order (micro-batch
0, 1, …, k−1 of layer 1, then of layer 2, …), as MegaScale-Infer's ping-pong pipeline
shuttles them [S: Zhu et al., "MegaScale-Infer: Serving Mixture-of-Experts at Scale with
Disaggregated Expert Parallelism", arXiv 2504.02263, its "ping-pong pipeline parallelism":
the batch is partitioned into m micro-batches that alternate between the attention nodes
and the expert nodes so that one micro-batch's communication and FFN overlap another's
attention]:

``a``  attention side (pool A), ``x``  activations A → B over the link,
``f``  FFN side (pool B),       ``y``  FFN outputs B → A over the link.

With ``k`` identical micro-batches and ``L`` identical layers, ``S = a + x + f + y`` (one
micro-batch's round trip) and ``s = max(a, x, f, y)`` (the busiest stage), the iteration
takes

    T(k, L) = max( L·S + (k − 1)·s ,  S + (k·L − 1)·s ).

Derivation. Identical jobs through stages in order leave the busiest stage ``s`` apart
(a proportionate flow shop: job ``j`` completes one pass at ``S + j·s``). *Latency-bound*
(``k·s ≤ S``): micro-batch 0 is back at pool A after ``S``, by which time every resource has
finished the previous layer's ``k`` micro-batches (each took ``k·stage ≤ k·s ≤ S``), so no
micro-batch ever waits for a resource again: the last of them finishes ``L·S + (k − 1)·s``.
*Resource-bound* (``k·s ≥ S``): the busiest stage's resource serves its ``k·L`` jobs back to
back once the first arrives, the first reaches it after the stages before it and the last
leaves it before the stages after it: ``S − s`` of fill plus ``k·L·s``, i.e.
``S + (k·L − 1)·s``; this is MegaScale-Infer's iteration latency
``(T_a + T_e + 2·T_c) + T_f·(m·L − 1)`` with ``T_f`` the slower of attention and experts
[S: arXiv 2504.02263, under its condition that the transfer is the shorter stage]. The
two expressions cross at ``k·s = S`` and the larger is the binding one, hence the ``max``.
``k = 1`` gives ``L·S``: every layer serial, attention + transfer + FFN + transfer.
With a free link and many micro-batches a layer costs ``k·max(a, f)`` per ``k`` micro-
batches: the slower pool, the other hidden. tests/sim/serving/test_afd_pipeline.py checks
the closed form against an event-by-event schedule of the same pipeline.

Layers of several kinds (a model's first dense layers before its MoE layers) are segments
run one after the other (:func:`pipeline_seconds`): the sum of each segment's closed form,
an upper bound of the continuous schedule (a segment's first micro-batch starts when the
previous segment's last is done, not its first): per boundary at most the earlier segment's
drain ``(k − 1)·s`` plus the later one's fill ``S − s`` more (tested).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple


class Stages(NamedTuple):
    """One micro-batch's seconds per layer on each resource (module docstring) and the
    number of layers of this kind."""

    attention_s: float
    to_ffn_s: float
    ffn_s: float
    to_attention_s: float
    layers: int = 1

    @property
    def round_trip_s(self) -> float:
        return self.attention_s + self.to_ffn_s + self.ffn_s + self.to_attention_s

    @property
    def busiest_s(self) -> float:
        return max(self.attention_s, self.to_ffn_s, self.ffn_s, self.to_attention_s)


def segment_seconds(st: Stages, k: int) -> float:
    """``T(k, L)`` of the module docstring for ``st.layers`` layers of ``st``'s stages."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"micro-batches must be a positive integer, not {k!r}")
    for name, v in zip(Stages._fields, st):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"stage {name} must be a finite non-negative number, not {v!r}")
    if st.layers == 0:
        return 0.0
    S, s, L = st.round_trip_s, st.busiest_s, st.layers
    return max(L * S + (k - 1) * s, S + (k * L - 1) * s)


def pipeline_seconds(segments: Sequence[Stages], k: int) -> float:
    """The layers' time of one iteration: the segments one after another (module
    docstring)."""
    return sum(segment_seconds(st, k) for st in segments)


__all__ = ["Stages", "pipeline_seconds", "segment_seconds"]
