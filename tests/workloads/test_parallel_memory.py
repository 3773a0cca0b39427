"""Collectives (ring all-reduce formula vs a step-by-step ring) and memory capacity / advice."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import load_chip
from diptych.workloads.ops import Collective
from diptych.workloads import Precision, load_model, train_step
from diptych.workloads.memory import activation_bytes, saved_bytes
from diptych.sim.run.links import collective_seconds, ring_bytes_and_steps


def ring_all_reduce_reference(n: int, nbytes: float) -> tuple[float, int]:
    """Play a ring all-reduce chunk by chunk: reduce-scatter then all-gather, n chunks of
    nbytes/n; returns (bytes chip 0 sent, steps). Also checks every chip ends with the sum."""
    data = np.arange(n * n, dtype=float).reshape(n, n)     # data[chip, chunk]
    want = data.sum(axis=0)
    sent = 0.0
    steps = 0
    for s in range(n - 1):                                  # reduce-scatter
        msgs = [(c, (c - s) % n, data[c, (c - s) % n]) for c in range(n)]
        for c, chunk, val in msgs:
            data[(c + 1) % n, chunk] += val
        sent += nbytes / n
        steps += 1
    for s in range(n - 1):                                  # all-gather
        msgs = [(c, (c + 1 - s) % n, data[c, (c + 1 - s) % n]) for c in range(n)]
        for c, chunk, val in msgs:
            data[(c + 1) % n, chunk] = val
        sent += nbytes / n
        steps += 1
    assert np.allclose(data, want[None, :])
    return sent, steps


@given(n=st.integers(2, 24), nbytes=st.floats(1.0, 1e10))
@settings(max_examples=60, deadline=None)
def test_all_reduce_bytes_match_ring_reference(n, nbytes):
    ref_sent, ref_steps = ring_all_reduce_reference(n, nbytes)
    sent, steps = ring_bytes_and_steps("all_reduce", nbytes, n)
    assert sent == pytest.approx(ref_sent, rel=1e-12) and steps == ref_steps


def test_all_reduce_time_formula():
    chip = load_chip("train-2026")          # 18 links × 50 GB/s per direction, 1 µs per hop
    op = Collective(name="ar", kind="all_reduce", bytes=2**30, group=8)
    expect = 2 * 7 / 8 * 2**30 / (18 * 50e9) + 2 * 7 * 1e-6
    assert collective_seconds(op, chip) == pytest.approx(expect, rel=1e-12)
    one = Collective(name="ar", kind="all_reduce", bytes=2**30, group=1)
    assert collective_seconds(one, chip) == 0.0


def test_no_links_is_a_clear_error():
    chip = load_chip("tpu-v1")
    with pytest.raises(ValueError, match="no chip-to-chip links"):
        collective_seconds(Collective(name="ar", kind="all_reduce", bytes=1.0, group=2), chip)


def test_gpt3_activation_memory_matches_korthikanti():
    # Korthikanti et al. 2022: 34·s·b·h + 5·a·s²·b bytes per layer (16-bit); with flash-style
    # attention (no s² term) and no dropout masks (2·s·b·h): 32·s·b·h; fused attention also
    # keeps its softmax statistics, 2 FP32 values per query row and head: 8·a·s·b
    m = load_model("gpt3-175b")
    b, s, h, a = 2, 2048, 12288, 96
    stats = {"unfused": 0, "fused": 8 * a * s * b}
    for mode in ("unfused", "fused"):
        w = train_step(m, b, s, attention=mode)
        full, ckpt = activation_bytes(w, m, Precision())
        head = sum(saved_bytes(blk) for blk in w.blocks if blk.name == "head" and
                   blk.stage == "forward")
        per_layer = (full - head) / m.layers
        assert per_layer == pytest.approx(32 * s * b * h + stats[mode], rel=1e-4)
        # full recomputation: each layer's input (s·b·h·2 bytes) + one layer's activations
        assert ckpt == pytest.approx(m.layers * s * b * h * 2 + per_layer + head, rel=1e-3)
