"""Resident operands (docs/engine.md, "Resident operands"): an operand the residency planner
keeps on chip is read at the scratchpad's or shared buffer's bandwidth and moves no DRAM byte;
a result kept on chip is not written back; the tiling capacity shrinks by the resident bytes.
The engine against its golden twin with resident operands is in test_engine_ref.py."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import load_chip
from diptych.sim import cache, simulate
from diptych.sim import engine as E
from diptych.sim import mapper as MP
from diptych.sim.dram import pin_bytes_per_s
from diptych.sim.gemm import run_engine
from diptych.workloads.ops import Gemm, VectorOp

from simtest_helpers import one_array_run, small_chip


def _gemm(**kw):
    base = dict(name="g", m=64, k=256, n=128, a_dtype="bf16", b_dtype="bf16", c_dtype="bf16")
    base.update(kw)
    return Gemm(**base)


def test_defaults_are_dram_and_keys_differ():
    g = _gemm()
    assert (g.a_source, g.b_source, g.c_dest, g.resident_bytes) == ("dram", "dram", "dram", 0)
    assert not g.on_chip
    chip = small_chip()
    keys = {cache.key("gemm", dataclasses.replace(g, **kw), chip, None)
            for kw in ({}, {"b_source": "scratchpad"}, {"c_dest": "scratchpad"},
                       {"resident_bytes": 1024})}
    assert len(keys) == 4      # the residency is part of the persistent cache key


def test_all_resident_moves_no_dram_byte():
    chip = small_chip(spad_mib=1.0)
    d = simulate(_gemm(), chip)
    r = simulate(_gemm(a_source="scratchpad", b_source="scratchpad", c_dest="scratchpad"), chip)
    assert d.dram_read_bytes > 0 and d.dram_write_bytes > 0
    assert r.dram_read_bytes == 0 and r.dram_write_bytes == 0
    assert r.energy_breakdown["dram"] == 0
    # the bytes the DRAM case moved between DRAM and the scratchpad now move within it
    assert r.sram_read_bytes > d.sram_read_bytes
    assert r.seconds < d.seconds


def test_resident_weight_removes_its_dram_reads():
    """B resident: DRAM reads are A's only (at least A once, never B); C still written."""
    chip = small_chip(spad_mib=1.0)
    g = _gemm(b_source="scratchpad")
    r = simulate(g, chip)
    assert g.a_bytes <= r.dram_read_bytes < simulate(_gemm(), chip).dram_read_bytes
    assert r.dram_write_bytes == g.c_bytes
    c = simulate(_gemm(c_dest="scratchpad"), chip)
    assert c.dram_write_bytes == 0 and c.dram_read_bytes >= g.a_bytes + g.b_bytes


def test_decode_gemv_resident_weight_is_bound_by_compute_not_dram():
    """A decode GEMV on infer-2026 with its weight in DRAM streams it at most at the pins;
    resident, its time is the arrays' (its memory-free cycles plus at most the first blocks'
    latency: the arrays are the busiest unit), never faster than its scratchpad transfers,
    and far from both roofs: latency-bound (sim/regime.py), not compute-bound."""
    chip = load_chip("infer-2026")
    g = Gemm(name="w", m=1, k=4096, n=4096, a_dtype="fp8", b_dtype="fp8", c_dtype="bf16")
    d = simulate(g, chip)
    r = simulate(dataclasses.replace(g, b_source="scratchpad"), chip)
    assert d.seconds >= g.b_bytes / chip.dram_bytes_per_s
    assert r.seconds < d.seconds and r.bound == "latency" and d.bound == "memory"
    assert r.mapping["busiest"]["unit"] == "array" and r.utilization < 0.5
    assert r.stall_breakdown["dram"] < 0.1 * r.cycles
    sp_bw = chip.tensor_cores * chip.core.scratchpad.bytes_per_cycle * chip.clock_hz
    assert r.seconds >= g.b_bytes / sp_bw


def test_resident_bytes_shrink_the_tiling_capacity_down_to_the_reserve():
    chip = small_chip(spad_mib=1.0)
    full = simulate(_gemm(), chip).mapping["scratchpad_bytes_per_array"]
    half = simulate(_gemm(resident_bytes=2**19), chip).mapping["scratchpad_bytes_per_array"]
    floor = simulate(_gemm(resident_bytes=2**40), chip).mapping["scratchpad_bytes_per_array"]
    assert full == 2**20 and half == 2**19
    assert floor == int(2**20 * chip.residency_policy.reserve_fraction)


def test_bad_sources_are_refused():
    with pytest.raises(ValueError, match="a_source must be one of"):
        _gemm(a_source="l2")
    with pytest.raises(ValueError, match="no \\[shared_buffer\\]"):
        simulate(_gemm(b_source="shared_buffer"), small_chip())
    groq = load_chip("groq-lpu")
    g = _gemm(a_dtype="int8", b_dtype="int8", c_dtype="int8", acc_dtype="fp32")
    with pytest.raises(ValueError, match="has no DRAM"):
        simulate(g, groq)
    ok = simulate(dataclasses.replace(g, a_source="scratchpad", b_source="scratchpad",
                                      c_dest="scratchpad"), groq)
    assert ok.dram_read_bytes == ok.dram_write_bytes == 0 and ok.seconds > 0


def test_vector_op_on_chip_bytes():
    chip = small_chip(spad_mib=1.0)
    v = VectorOp(name="v", kind="add", elements=1 << 16, ops_per_element=1.0,
                 read_bytes=2 * 2 ** 17, write_bytes=2 ** 17)
    d = simulate(v, chip)
    r = simulate(dataclasses.replace(v, scratchpad_read_bytes=2 ** 17), chip)
    v_on = dataclasses.replace(v, scratchpad_read_bytes=2 * 2 ** 17, scratchpad_write_bytes=2 ** 17)
    a = simulate(v_on, chip)
    assert (d.dram_read_bytes, r.dram_read_bytes, a.dram_read_bytes) == (2 ** 18, 2 ** 17, 0)
    assert a.dram_write_bytes == 0 and a.seconds <= r.seconds <= d.seconds
    with pytest.raises(ValueError, match="must be at most read_bytes"):
        dataclasses.replace(v, scratchpad_read_bytes=2 ** 19)
    groq = load_chip("groq-lpu")
    with pytest.raises(ValueError, match="has no DRAM"):
        simulate(dataclasses.replace(v, dtype="int8"), groq)
    assert simulate(dataclasses.replace(v_on, dtype="int8"), groq).dram_read_bytes == 0


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 48), k=st.integers(1, 48), n=st.integers(1, 48),
       df=st.sampled_from(["os", "ws", "is"]), src=st.tuples(*[st.integers(0, 2)] * 3),
       shared=st.booleans(), gbps=st.sampled_from([0.5, 3.2]))
def test_table_bounds_hold_with_resident_operands(m, k, n, df, src, shared, gbps):
    """Every candidate's lower bound stays below its simulated cycles when operands are
    resident (the bounds the branch and bound prunes with), and its cycles equal the
    memory-free closed form plus stalls."""
    chip = small_chip(4, 4, spad_mib=0.0625, gbps=gbps, sb_mib=0.25, sb_bpc=16.0)
    _, pb, rates, split = one_array_run(chip, m, k, n, df, 1, 1, 1, b_is_weight=shared)
    pb = dataclasses.replace(pb, x_src=src[0], w_src=src[1], o_dst=src[2])
    peak = pin_bytes_per_s(chip) / chip.clock_hz / split.active
    cs, est, lb = MP.candidate_table(chip, pb, rates, split, peak)
    for i, blk in enumerate(cs):
        assert not (src[0] and blk.x_sb) and not (src[1] and blk.w_sb)
        out, _, _ = run_engine(chip, pb, blk, rates, split, True)
        assert lb[i] <= out[E.O_CYCLES] * (1 + 1e-9)
        assert out[E.O_DRAM_RD] + out[E.O_DRAM_WR] == pytest.approx(
            MP.traffic_bytes(pb, blk), rel=1e-12, abs=1e-9)
    assert MP.group_floor(chip, pb, rates, split, peak) <= min(lb) * (1 + 1e-9)
