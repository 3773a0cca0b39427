"""Communication beside compute (sim/run/interference.py, a chip's ``[comm_kernels]``): the
closed forms against hand-derived values and a step-by-step reference, and the cluster step
charging exactly them."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from roofline_double import roofline

from diptych.arch import load_chip
from diptych.sim.cluster import Plan, simulate_cluster_step
from diptych.arch.cluster import load_cluster
from diptych.sim.cluster.step import _bucket_tail, _setup as _phase1
from diptych.sim.run import Scenario
from diptych.sim.run.stack import scenario_chip
from diptych.workloads import load_model
from diptych.sim.run.interference import (OpLoad, beside_s, collectives_factor, dram_share,
                                          held_cores, sent_bytes, slowdown, tax_s,
                                          two_streams)


def _gemm(seconds: float, waves: int, cores: int) -> OpLoad:
    """A GEMM of ``waves`` full waves of tiles on ``cores`` cores (the engine's mapping)."""
    return OpLoad(seconds, {"tiles": waves * cores, "waves": waves, "busy_units": cores,
                            "units": "cores"})


@pytest.mark.parametrize("waves, cores, held", [(1, 132, 24), (2, 132, 16), (8, 132, 4),
                                                (3, 100, 30)])
def test_a_gemm_beside_a_collective_re_quantises_its_waves(waves, cores, held):
    """A GEMM of W waves on S cores beside a collective holding c cores for all of it runs
    ceil(W·S / (S − c)) waves: ×ceil(W·S/(S−c))/W (one wave on H100 beside a 24-CTA
    all-gather: two waves, the forum thread's "nearly doubles")."""
    g = 1e-3
    want = math.ceil(waves * cores / (cores - held)) / waves
    f = slowdown([_gemm(g, waves, cores)], held, cores, 0.0)
    assert f == pytest.approx(want, rel=1e-12)
    if (waves, cores, held) == (1, 132, 24):
        assert f == 2.0
    # the collective outlasts the slowed GEMM: the pair takes the collective's time
    assert beside_s(g, 3 * g * f, f) == 3 * g * f
    # a collective of C < G·f: the GEMM's work at 1/f for C, then at full rate
    c = 0.5 * g
    assert beside_s(g, c, f) == pytest.approx(c + g - c / f, rel=1e-12)
    assert tax_s(g, c, f) == pytest.approx(c * (1 - 1 / f), rel=1e-12)
    assert tax_s(g, c, 1.0) == pytest.approx(0.0, abs=1e-18)


def test_ops_without_a_grid_and_memory_bound_ops():
    """An op without a tile grid (attention) runs at the cores' share; a memory-bound op at
    (1 − share) of the DRAM bandwidth; the factor is the time-weighted mix."""
    a, m = OpLoad(2e-3, attention=True), OpLoad(1e-3, memory=True)
    assert slowdown([a], 24, 132, 0.0) == pytest.approx(132 / 108, rel=1e-12)
    assert slowdown([m], 24, 132, 0.3) == pytest.approx(1 / 0.7, rel=1e-12)
    assert slowdown([m], 24, 132, 0.0) == 1.0
    mix = slowdown([a, m], 24, 132, 0.3)
    assert mix == pytest.approx((2e-3 * 132 / 108 + 1e-3 / 0.7) / 3e-3, rel=1e-12)
    assert slowdown([], 24, 132, 0.3) == 1.0


def test_h100_channels_and_dram_share():
    """h100's table: 24 channels on NVLink, 16 across the network, 2 per pipeline peer (two
    peers at once); DRAM share = 3 × the bytes sent ÷ (seconds × bandwidth)."""
    h = load_chip("h100")
    t = h.comm_kernels
    assert held_cores(t, "all_gather", False) == 24
    assert held_cores(t, "reduce_scatter", True) == 16
    assert held_cores(t, "send", True) == 4
    bw = h.dram.peak_bytes_per_s
    assert dram_share(t, 1e9, 1e-2, bw) == pytest.approx(3e9 / (1e-2 * bw), rel=1e-12)
    assert dram_share(t, 1e12, 1e-3, bw) == 0.9            # capped
    assert sent_bytes("all_reduce", 8.0, 4) == 12.0
    assert sent_bytes("reduce_scatter", 8.0, 4) == 6.0
    assert sent_bytes("send", 8.0, 2) == 8.0
    # without a table (a TPU's DMA-driven collectives) nothing is taken
    tpu = load_chip("tpu-v4")
    assert tpu.comm_kernels is None
    assert collectives_factor(tpu, [("all_gather", 1e9, 1e-2, False)], [OpLoad(1.0)]) == 1.0


def _streams_steps(segments, n=20_000):
    """Reference for :func:`two_streams`: small time steps; compute at 1/factor while a
    released collective is running, collectives one at a time in release order."""
    total = sum(b for b, _, _ in segments) * max(f for _, _, f in segments) \
        + sum(c for _, c, _ in segments)
    dt = total / n
    t, i, work, queue, comm_left, done_at = 0.0, 0, 0.0, [], 0.0, 0.0
    while i < len(segments) or queue or comm_left > 0:
        running = comm_left > 0
        if i < len(segments):
            b, c, f = segments[i]
            work += dt / (f if running else 1.0)
            if work >= b:
                queue.append(c)
                i, work = i + 1, 0.0
        if comm_left > 0:
            comm_left -= dt
            done_at = t + dt
        elif queue:
            comm_left = queue.pop(0) - dt
            done_at = t + dt
        t += dt
    return max(t, done_at), dt


def test_two_streams_against_small_steps_and_the_ideal_tail():
    rng = random.Random(11)
    for _ in range(12):
        segs = [(rng.uniform(0.1, 1.0), rng.uniform(0.0, 1.2), rng.uniform(1.0, 2.0))
                for _ in range(rng.randint(1, 6))]
        ref, dt = _streams_steps(segs)
        assert two_streams(segs) == pytest.approx(ref, abs=3 * len(segs) * dt * 2.0)
        # at a factor of 1: the ideal rule's gradient-bucket tail (the step's own path)
        ideal = [(b, c, 1.0) for b, c, _ in segs]
        assert max(0.0, two_streams(ideal) - sum(b for b, _, _ in ideal)) == pytest.approx(
            _bucket_tail(ideal, True), abs=1e-12)
        assert _bucket_tail(segs, True) >= _bucket_tail(ideal, True) - 1e-12


def test_two_segments_are_the_closed_form():
    """The second segment's compute runs beside the collective the first released:
    ``G1 + beside_s(G2, C1, f)``."""
    g1, c1, g2, f = 1.0, 0.6, 2.0, 1.5
    assert two_streams([(g1, c1, f), (g2, 0.0, f)]) == pytest.approx(
        g1 + beside_s(g2, c1, f), rel=1e-12)


def _setup(chip, **plan):
    """Phase 1 of the cluster step (layer times, loads, collectives) and the whole step."""
    sc = Scenario.of(phase="train", batch=16, seq=4096, execution="sum")
    pl = Plan(micro_batch=1, **plan)
    st = _phase1(load_model("llama-3-8b"), scenario_chip(chip, sc), load_cluster("dgx-h100"),
                 pl, sc, True, roofline)
    return st, simulate_cluster_step("llama-3-8b", chip, "dgx-h100", pl, sc,
                                     simulate=roofline)


def test_the_step_charges_ring_attention_beside_its_attention():
    """CP2 × DP4 on one node: the layer's exposed ring-attention time is :func:`beside_s` of
    its attention compute and K/V exchange, the factor the attention ops' with 24 cores held
    (NVLink) and the exchange's DRAM share; the chip without the table keeps max(0, comm −
    attention); the layers' compute is unchanged, the step slower."""
    h100 = load_chip("h100")
    bare_chip = dataclasses.replace(h100, comm_kernels=None)
    st, r = _setup(h100, cp=2, dp=4, zero=1)
    _, bare = _setup(bare_chip, cp=2, dp=4, zero=1)
    lt, step, bs = st.lt["layers"], r.layers["layers"], bare.layers["layers"]
    assert (step.fwd_compute, step.bwd_compute) == (bs.fwd_compute, bs.bwd_compute)
    kv = [c for c in step.colls_fwd if c[0] == "cp"]
    cp_s = sum(c[4] for c in kv)
    assert cp_s > 0 and lt.attn_fwd_s > 0
    attn = [x for x in lt.fwd_loads.ops if x.attention]
    assert sum(x.seconds for x in attn) == pytest.approx(lt.attn_fwd_s, rel=1e-12)
    n = st.comm.shapes["cp"].n
    share = dram_share(h100.comm_kernels, sum(sent_bytes(c[2], c[3], n) for c in kv), cp_s,
                       h100.dram.peak_bytes_per_s)
    f = slowdown(attn, 24, 132, share)
    assert f == pytest.approx(132 / 108, rel=1e-12)     # attention: no tile grid of ours
    want = beside_s(lt.attn_fwd_s, cp_s, f) - lt.attn_fwd_s
    assert step.exposed_fwd["cp"] == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert bs.exposed_fwd.get("cp", 0.0) == pytest.approx(max(0.0, cp_s - lt.attn_fwd_s),
                                                          abs=1e-15)
    assert step.exposed_fwd["cp"] > bs.exposed_fwd.get("cp", 0.0)
    # the data-parallel buckets slow the backward they run beside: a longer tail
    assert r.stage_seconds[0]["grad_reduce_exposed_s"] > \
        bare.stage_seconds[0]["grad_reduce_exposed_s"]
    # ZeRO-1's parameter all-gather beside the next step's first forward: never less exposed
    assert r.stage_seconds[0]["param_all_gather_exposed_s"] >= \
        bare.stage_seconds[0]["param_all_gather_exposed_s"]
    assert r.seconds > bare.seconds


@pytest.mark.parametrize("golden", [True, False])
def test_pipeline_chunks_pay_their_send_beside_them(golden):
    """PP2: each chunk's time is the bare chunk's plus :func:`tax_s` of its send and receive
    (2 channels × 2 peers) beside its layers' ops; the event-level pipeline and its closed
    form read the same chunk times."""
    h100 = load_chip("h100")
    bare_chip = dataclasses.replace(h100, comm_kernels=None)
    st, r = _setup(h100, pp=2, dp=4)
    bare = simulate_cluster_step("llama-3-8b", bare_chip, "dgx-h100",
                                 Plan(micro_batch=1, pp=2, dp=4),
                                 Scenario.of(phase="train", batch=16, seq=4096,
                                             execution="sum"), simulate=roofline,
                                 golden=golden)
    if not golden:
        r = simulate_cluster_step("llama-3-8b", h100, "dgx-h100",
                                  Plan(micro_batch=1, pp=2, dp=4),
                                  Scenario.of(phase="train", batch=16, seq=4096,
                                              execution="sum"), simulate=roofline,
                                  golden=False)
    send = r.layout["send_s"]
    assert send > 0 and send == bare.layout["send_s"]
    act = st.comm.shapes["pp"]
    for s in range(2):
        kinds = list(st.chunks[s]) + (["embedding"] if s == 0 else []) \
            + (["head"] if s == 1 else [])
        loads = [st.lt[k].fwd_loads for k in kinds]
        brief = st.comm.brief("pp", "send", 4096 * 4096 * 2, send)
        assert brief[3] == (act.n_dom > 1)
        f = collectives_factor(h100, [brief], loads)
        assert f > 1.0
        bare_f = bare.layout["fwd"][s][0]
        assert r.layout["fwd"][s][0] == pytest.approx(bare_f + tax_s(bare_f, send, f),
                                                      rel=1e-12)
    assert r.seconds > bare.seconds
    assert r.exposed_comm_s["pp"] > bare.exposed_comm_s["pp"]
