"""Invariants over random chips and shapes (design.md §2)."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.sim import mapper as MP
from diptych.sim.gemm import gemm_stats
from diptych.workloads.ops import Gemm

from simtest_helpers import check_more_bandwidth_or_scratchpad, small_chip

chips = st.builds(
    lambda r, c, cores, arrays, spad, gbps, dfs, sb: small_chip(
        r, c, cores=cores, arrays=arrays, spad_mib=spad, gbps=gbps, dataflows=dfs,
        sb_mib=sb[0], sb_bpc=sb[1]),
    st.sampled_from([4, 8, 16, 32]), st.sampled_from([4, 8, 16, 32]), st.integers(1, 3),
    st.integers(1, 2), st.sampled_from([0.0625, 0.25, 1.0]), st.sampled_from([1.6, 3.2]),
    st.sampled_from([("os",), ("ws",), ("is",), ("os", "ws", "is")]),
    # no shared buffer, or a small / large one, slower or faster than the DRAM pins
    st.sampled_from([(None, 0.0), (0.0078125, 64.0), (0.125, 256.0), (1.0, 1024.0)]))
shapes = st.tuples(st.integers(1, 300), st.integers(1, 300), st.integers(1, 300),
                   st.integers(1, 3), st.booleans())


def _op(s):
    m, k, n, b, shared = s
    return Gemm(name="g", m=m, k=k, n=n, batch=b, b_is_weight=shared)


@settings(max_examples=100, deadline=None)
@given(chip=chips, s=shapes)
def test_bounds_and_utilization(chip, s):
    op = _op(s)
    st_ = gemm_stats(op, chip)
    peak_macs = chip.peak_macs_per_cycle(op.compute_dtype)
    peak_bpc = chip.dram.peak_bytes_per_s / chip.clock_hz
    assert st_.cycles >= op.macs / peak_macs
    assert st_.cycles >= (st_.dram_read_bytes + st_.dram_write_bytes) / peak_bpc * (1 - 1e-9)
    if chip.shared_buffer is None:
        assert st_.shared_buffer_read_bytes == 0
    else:
        assert st_.cycles >= st_.shared_buffer_read_bytes / chip.shared_buffer.bytes_per_cycle
    assert 0 < st_.utilization <= 1
    assert st_.cycles >= st_.compute_cycles >= st_.array_busy_cycles
    assert st_.stall_cycles == sum(st_.stall_breakdown.values())
    assert st_.cycles == st_.array_busy_cycles + st_.stall_cycles
    # minimum traffic: every operand at least once
    assert st_.dram_read_bytes >= op.a_bytes + op.b_bytes - 1e-6
    assert st_.dram_write_bytes >= op.c_bytes - 1e-6


#: the mapper prunes a candidate whose bound is within PRUNE_TOLERANCE of the best found, so
#: its answer is within that fraction of the true best; comparisons allow that much
SLACK = 1.0 / (1.0 - MP.PRUNE_TOLERANCE)


@settings(max_examples=100, deadline=None)
@given(chip=chips, s=shapes)
def test_more_bandwidth_or_scratchpad_never_slower(chip, s):
    check_more_bandwidth_or_scratchpad(_op(s), chip, SLACK)


@settings(max_examples=60, deadline=None)
@given(chip=chips, s=shapes)
def test_bigger_shared_buffer_never_slower(chip, s):
    """A shared buffer (or a bigger one) only adds mappings: the mapper may still bypass it."""
    from diptych.arch import SharedBuffer
    op = _op(s)
    base = gemm_stats(op, chip).cycles
    sb = chip.shared_buffer or SharedBuffer(capacity_mib=0.0078125, bytes_per_cycle=64.0)
    with_sb = dataclasses.replace(chip, shared_buffer=sb)
    bigger = dataclasses.replace(chip, shared_buffer=dataclasses.replace(
        sb, capacity_mib=sb.capacity_mib * 4))
    a = gemm_stats(op, with_sb).cycles
    assert a <= base * SLACK
    assert gemm_stats(op, bigger).cycles <= a * SLACK


@settings(max_examples=20, deadline=None)
@given(chip=chips, s=shapes)
def test_deterministic(chip, s):
    op = _op(s)
    assert gemm_stats(op, chip) == gemm_stats(op, chip)
