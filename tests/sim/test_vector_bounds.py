"""The vector model's shortcuts (issue 27, the 1000-point sweep): the memoised DRAM streams
(:func:`diptych.sim.vector.stream_ns`) against a fresh :class:`~diptych.sim.dram.FastDram`
streamed by hand, the floor :func:`diptych.sim.vector.vector_floor_cycles` against the full
model's cycles, and the split-K reduction (which skips core counts by that floor) against
the plain loop over every core count."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings, strategies as st

from diptych.arch import load_chip
from diptych.sim import mapper as MP
from diptych.sim.dram import FastDram
from diptych.sim.gemm import _reduction_op, split_k_reduction
from diptych.sim.vector import stream_ns, vector_floor_cycles, vector_stats
from diptych.workloads.ops import Gemm, VectorOp

CHIPS = ("infer-2026", "train-2026", "h100", "trainium2", "tpu-v4")


def _by_hand(dram, ns_per_byte, rd, wr, chunk):
    """The two streams on a fresh model, as vector_stats made them before the memo."""
    m = FastDram(dram, ns_per_byte)
    done = 0.0
    if rd > 0:
        done = m.stream(0.0, 0, rd, chunk, False)
    if wr > 0:
        done = m.stream(0.0, 1 << 40, wr, chunk, True)
    return done


@settings(max_examples=40, deadline=None)
@given(chip=st.sampled_from(CHIPS), rd=st.integers(0, 1 << 26), wr=st.integers(0, 1 << 26),
       cores=st.sampled_from((1, 2, 4, 8, 33)), fabric=st.sampled_from((0.0, 0.0004, 0.003)))
def test_stream_ns_is_a_fresh_models_streams(chip, rd, wr, cores, fabric):
    dram = load_chip(chip).dram
    chunk = 64 * 1024 * cores
    want = _by_hand(dram, fabric, rd, wr, chunk)
    assert stream_ns(dram, fabric, rd, wr, chunk) == want
    # a memo hit (after other streams have warmed the shared pattern cache) is the same
    _by_hand(dram, fabric, wr + 4096, rd + 12288, chunk * 2)
    assert stream_ns(dram, fabric, rd, wr, chunk) == want


_vector_ops = st.builds(
    VectorOp, name=st.just("v"), kind=st.sampled_from(("add", "rmsnorm", "softmax", "copy")),
    elements=st.integers(1, 1 << 24), ops_per_element=st.sampled_from((0.0, 1.0, 5.0, 31.0)),
    read_bytes=st.integers(0, 1 << 27), write_bytes=st.integers(0, 1 << 26),
    dtype=st.sampled_from(("bf16", "fp32")))


@settings(max_examples=80, deadline=None)
@given(op=_vector_ops, chip=st.sampled_from(CHIPS), resident=st.booleans(), data=st.data())
def test_vector_floor_is_at_most_the_cycles(op, chip, resident, data):
    c = load_chip(chip)
    if resident:     # a resident input: only the rest crosses DRAM
        op = dataclasses.replace(op, scratchpad_read_bytes=op.read_bytes // 2)
    cores = data.draw(st.sampled_from(MP.core_counts(c.tensor_cores)))
    assert vector_floor_cycles(op, c, cores) <= vector_stats(op, c, cores).cycles


def test_vector_floor_is_tight_where_the_ports_bind():
    """On one core the DMA port, not the DRAM stream, sets an elementwise op's time: the
    floor is then the cycles less at most the fill/drain chunk (a floor that could not
    prune would be no use to the reduction)."""
    c = load_chip("h100")
    op = VectorOp(name="v", kind="add", elements=1 << 22, ops_per_element=1.0,
                  read_bytes=1 << 24, write_bytes=1 << 23, dtype="fp32")
    st_ = vector_stats(op, c, 1)
    assert st_.mapping["memory_cycles"] > st_.compute_cycles
    assert st_.cycles - st_.compute_cycles // 256 - 1 <= vector_floor_cycles(op, c, 1) \
        <= st_.cycles


@settings(max_examples=25, deadline=None)
@given(chip=st.sampled_from(CHIPS), m=st.integers(1, 4096), n=st.integers(1, 8192),
       pk=st.sampled_from((2, 3, 8, 32, 64)), dtype=st.sampled_from(("bf16", "fp8")))
def test_split_k_reduction_is_the_first_best_core_count(chip, m, n, pk, dtype):
    """The reduction (core counts whose floor cannot beat the best skipped) is the plain
    loop's: every core count timed, the first with the fewest cycles kept."""
    c = load_chip(chip)
    if not c.supports(dtype):
        return
    op = Gemm(name="g", m=m, k=4096, n=n, a_dtype=dtype, b_dtype=dtype)
    r = _reduction_op(op, pk)
    want = None
    for cores in MP.core_counts(c.tensor_cores):
        s = vector_stats(r, c, cores)
        if want is None or s.cycles < want.cycles:
            want = s
    split = MP.Split(pb=1, pm=1, pn=1, batch=1, m=m, n=n, active=c.tensor_cores,
                     arrays_per_core=1, pk=pk, k=-(-4096 // pk))
    assert split_k_reduction(op, c, split) == want
