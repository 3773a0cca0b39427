"""The AFD ping-pong pipeline's closed form (sim/serving/afd_pipeline.py) against an
event-by-event schedule of the same pipeline: k micro-batches, four in-order resources
(attention pool, link A→B, FFN pool, link B→A), each micro-batch's layers in sequence."""

from __future__ import annotations

import math
import random

import pytest

from diptych.sim.serving.afd_pipeline import Stages, pipeline_seconds, segment_seconds


def scheduled(layers: list[tuple[float, float, float, float]], k: int) -> float:
    """The slow, obviously-correct reference: every (micro-batch, layer, stage) starts when
    its micro-batch finished the previous stage and its resource finished the previous
    micro-batch it serves (micro-batches in order 0..k-1, layer after layer)."""
    free = [0.0] * 4
    ready = [0.0] * k
    for stages in layers:
        for r, t in enumerate(stages):
            for j in range(k):
                start = max(ready[j], free[r])
                ready[j] = free[r] = start + t
    return max(ready)


def test_closed_form_equals_the_event_schedule():
    rng = random.Random(7)
    for _ in range(400):
        st = tuple(rng.choice([0.0, rng.uniform(0.01, 1.0)]) for _ in range(4))
        if not any(st):
            continue
        L, k = rng.randint(1, 12), rng.randint(1, 9)
        ref = scheduled([st] * L, k)
        assert segment_seconds(Stages(*st, L), k) == pytest.approx(ref, rel=1e-12)


def test_one_micro_batch_is_every_layer_serial():
    """k = 1: attention + transfer + FFN + transfer, layer after layer."""
    st = Stages(0.3, 0.05, 0.7, 0.04, 10)
    assert segment_seconds(st, 1) == pytest.approx(10 * (0.3 + 0.05 + 0.7 + 0.04))


@pytest.mark.parametrize("a,f", [(0.3, 0.7), (0.9, 0.2), (0.5, 0.5)])
def test_free_link_and_many_micro_batches_approach_the_slower_pool(a, f):
    """With a free link, per micro-batch and layer the time tends to max(a, f): the
    other pool is hidden; the fill is one round trip (a + f) less the busiest stage."""
    L = 8
    for k in (16, 256, 4096):
        t = segment_seconds(Stages(a, 0.0, f, 0.0, L), k)
        assert t == pytest.approx(k * L * max(a, f) + min(a, f))   # fill: S − s
    t = segment_seconds(Stages(a, 0.0, f, 0.0, L), 4096)
    assert t / (4096 * L) == pytest.approx(max(a, f), rel=1e-3)


def test_the_link_is_hidden_until_it_is_the_busiest_stage():
    """Resource-bound, the link costs nothing more while it is not the busiest stage (only
    its share of the fill); once it is, it sets the pace."""
    base = segment_seconds(Stages(0.5, 0.0, 0.4, 0.0, 20), 6)
    hidden = segment_seconds(Stages(0.5, 0.1, 0.4, 0.1, 20), 6)
    assert hidden - base == pytest.approx(0.2)              # two transfers in the fill only
    bound = segment_seconds(Stages(0.5, 0.8, 0.4, 0.1, 20), 6)
    assert bound == pytest.approx((0.5 + 0.8 + 0.4 + 0.1) + (6 * 20 - 1) * 0.8)


def test_segments_in_sequence_bound_the_continuous_schedule():
    """Layers of two kinds (dense then MoE): the sum of the segments' closed forms is never
    below the continuous schedule, and above it by at most the first segment's drain
    ((k − 1)·s_a, its last micro-batch behind its first) plus the second's fill
    (S_b − s_b)."""
    rng = random.Random(3)
    for _ in range(100):
        a = tuple(rng.uniform(0.01, 1) for _ in range(4))
        b = tuple(rng.uniform(0.01, 1) for _ in range(4))
        la, lb, k = rng.randint(1, 5), rng.randint(1, 20), rng.randint(1, 6)
        ref = scheduled([a] * la + [b] * lb, k)
        got = pipeline_seconds([Stages(*a, la), Stages(*b, lb)], k)
        slack = (k - 1) * max(a) + sum(b) - max(b)
        assert ref - 1e-12 <= got <= ref + slack + 1e-12


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_micro_batches_are_refused(k):
    with pytest.raises(ValueError, match="micro-batches must be a positive integer"):
        segment_seconds(Stages(1, 1, 1, 1, 1), k)


def test_bad_stage_is_refused():
    with pytest.raises(ValueError, match="stage ffn_s"):
        segment_seconds(Stages(1, 1, math.nan, 1, 1), 2)
