"""Pipeline schedules: the golden event simulation against the published bubble fractions and
the closed forms the search uses, and activations in flight (Korthikanti et al. 2022)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.sim.cluster.schedule import (fast_pipeline_seconds, in_flight_weight,
                                          simulate_pipeline, stage_order)


def equal(p, v, f=1.0, b=2.0):
    return [[f / v] * v for _ in range(p)], [[b / v] * v for _ in range(p)]


def shape(sched, p, k, v):
    """(p, v, m) valid for ``sched``: interleaving needs p >= 2, the others v = 1."""
    p = max(p, 2) if sched == "interleaved" else p
    v = v if sched == "interleaved" else 1
    return p, v, p * k


@given(st.integers(1, 8), st.integers(1, 24))
@settings(max_examples=60, deadline=None)
def test_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(p, m):
    fwd, bwd = equal(p, 1)
    for sched in ("1f1b", "gpipe"):
        run = simulate_pipeline(fwd, bwd, m, schedule=sched)
        assert run.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
        assert run.seconds == pytest.approx((m + p - 1) * 3.0)


@given(st.integers(2, 6), st.integers(1, 4), st.integers(2, 4))
@settings(max_examples=60, deadline=None)
def test_interleaving_divides_the_bubble_by_v(p, k, v):
    m = p * k
    fwd, bwd = equal(p, v)
    run = simulate_pipeline(fwd, bwd, m, schedule="interleaved")
    # Narayanan et al. 2021: bubble time (p-1)(f+b)/v
    assert run.seconds == pytest.approx(m * 3.0 + (p - 1) * 3.0 / v)
    assert run.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1))


@given(st.sampled_from(["1f1b", "gpipe", "interleaved"]), st.integers(1, 6), st.integers(1, 4),
       st.integers(2, 3), st.integers(0, 7))
@settings(max_examples=80, deadline=None)
def test_every_unit_runs_once_in_dependency_order(sched, p, k, v, s):
    p, v, m = shape(sched, p, k, v)
    order = stage_order(sched, p, m, v, s % p)
    assert sorted(order) == sorted((kind, i, c) for kind in "FB" for i in range(m)
                                   for c in range(v))
    pos = {u: i for i, u in enumerate(order)}
    assert all(pos[("F", i, c)] < pos[("B", i, c)] for i in range(m) for c in range(v))


def test_fast_model_against_the_golden_simulation():
    rng = random.Random(7)
    for _ in range(300):
        sched = rng.choice(["1f1b", "gpipe", "interleaved"])
        p = rng.randint(2 if sched == "interleaved" else 1, 6)
        v = rng.randint(2, 3) if sched == "interleaved" else 1
        m = p * rng.randint(1, 4) if sched == "interleaved" else rng.randint(1, 12)
        fwd = [[rng.uniform(0.5, 2) for _ in range(v)] for _ in range(p)]
        bwd = [[rng.uniform(1, 4) for _ in range(v)] for _ in range(p)]
        send = rng.choice([0.0, 0.05]) if sched == "gpipe" else 0.0
        gold = simulate_pipeline(fwd, bwd, m, schedule=sched, send_s=send).seconds
        fast = fast_pipeline_seconds([sum(x) for x in fwd], [sum(x) for x in bwd], m, v, send,
                                     sched)
        if sched == "gpipe":                               # a two-phase flow shop: exact
            assert fast == pytest.approx(gold, rel=1e-12)
        elif sched == "1f1b":                              # an upper bound, within 25 %
            assert gold * (1 - 1e-12) <= fast <= 1.25 * gold
        else:
            assert abs(fast - gold) <= 0.2 * gold
    for sched, v in (("1f1b", 1), ("gpipe", 1), ("interleaved", 2)):   # equal stages: exact
        fwd, bwd = equal(4, v)
        gold = simulate_pipeline(fwd, bwd, 8, schedule=sched).seconds
        assert fast_pipeline_seconds([1.0] * 4, [2.0] * 4, 8, v, 0.0, sched) == \
            pytest.approx(gold)


def test_sends_delay_the_pipeline():
    fwd, bwd = equal(4, 1)
    base = simulate_pipeline(fwd, bwd, 8).seconds
    slow = simulate_pipeline(fwd, bwd, 8, send_s=0.1).seconds
    # at least the fill and the drain: (p-1) sends forward and (p-1) back
    assert slow >= base + 2 * 3 * 0.1 - 1e-12


@given(st.sampled_from(["1f1b", "gpipe", "interleaved"]), st.integers(1, 6), st.integers(1, 4),
       st.integers(2, 3), st.data())
@settings(max_examples=60, deadline=None)
def test_in_flight_closed_form_matches_the_simulation(sched, p, k, v, data):
    p, v, m = shape(sched, p, k, v)
    w = [[data.draw(st.integers(1, 5)) * 1.0 for _ in range(v)] for _ in range(p)]
    fwd, bwd = equal(p, v)
    run = simulate_pipeline(fwd, bwd, m, schedule=sched, chunk_weights=w)
    for s in range(p):
        assert in_flight_weight(sched, p, m, v, s, w[s]) == pytest.approx(run.peak_weight[s])


def test_first_stage_holds_korthikanti_activations():
    # 1F1B: the first stage holds p micro-batches, the last one; interleaved: the first
    # stage holds p(1 + (p-1)/(pv)) micro-batches' worth of its L/p layers
    p, v, m = 8, 4, 32
    assert in_flight_weight("1f1b", p, m, 1, 0, [1.0]) == p
    assert in_flight_weight("1f1b", p, m, 1, p - 1, [1.0]) == 1
    assert in_flight_weight("gpipe", p, m, 1, 0, [1.0]) == m
    per_chunk = 1.0 / v                                       # a chunk is 1/v of the stage
    got = in_flight_weight("interleaved", p, m, v, 0, [per_chunk] * v)
    assert got == pytest.approx(p * (1 + (p - 1) / (p * v)))
