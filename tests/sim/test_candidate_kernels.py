"""The compiled candidate table (mapper_kernels) equals the NumPy reference bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import candidate_table_ref as REF
from diptych.arch import load_chip
from diptych.sim import mapper as MP
from diptych.sim.array import array_rates
from diptych.workloads.ops import Gemm

from simtest_helpers import small_chip


def _same(chip, op, dataflow):
    rates = array_rates(chip, op.compute_dtype)
    folded = op.b_is_weight and op.batch > 1
    m_total = op.m * op.batch if folded else op.m
    batch = 1 if folded else op.batch

    class View:
        pass
    v = View()
    v.a_dtype, v.b_dtype, v.c_dtype, v.acc_dtype = op.a_dtype, op.b_dtype, op.c_dtype, op.acc_dtype
    v.k, v.n, v.b_is_weight, v.batch, v.m = op.k, op.n, op.b_is_weight, batch, m_total
    checked = 0
    for split in MP.splits(chip, batch, m_total, op.n):
        pb = MP.orient(v, dataflow, split, m_total)
        peak = chip.dram.peak_bytes_per_s / chip.clock_hz / split.active
        try:
            want = REF.candidate_table(chip, pb, rates, split, peak)
        except ValueError as exc:
            with pytest.raises(ValueError, match="scratchpad too small"):
                MP.candidate_table(chip, pb, rates, split, peak)
            assert "scratchpad too small" in str(exc)
            continue
        got = MP.candidate_table(chip, pb, rates, split, peak)
        for col in ("mb", "kb", "nb", "order", "x_sb", "w_sb", "periods"):
            assert np.array_equal(getattr(got[0], col), getattr(want[0], col)), col
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
        checked += 1
    return checked


@settings(max_examples=80, deadline=None)
@given(r=st.sampled_from([4, 8, 16]), c=st.sampled_from([4, 8, 32]), cores=st.integers(1, 3),
       arrays=st.integers(1, 2), spad=st.sampled_from([0.0625, 0.25, 1.0]),
       sb=st.sampled_from([None, 0.0078125, 0.125, 1.0]), m=st.integers(1, 400),
       k=st.integers(1, 400), n=st.integers(1, 400), batch=st.integers(1, 3),
       shared=st.booleans(), dataflow=st.sampled_from(["os", "ws", "is"]),
       install=st.tuples(st.sampled_from([1, 4, 16]), st.sampled_from(["wave", "global"])))
def test_compiled_table_equals_numpy_reference(r, c, cores, arrays, spad, sb, m, k, n, batch,
                                               shared, dataflow, install):
    chip = small_chip(r, c, cores=cores, arrays=arrays, spad_mib=spad, sb_mib=sb, sb_bpc=256.0,
                      load_rows=install[0], swap=install[1])
    _same(chip, Gemm(name="g", m=m, k=k, n=n, batch=batch, b_is_weight=shared), dataflow)


@pytest.mark.parametrize("chip,shape,dtype,dataflow", [
    ("h100", (2048, 8192, 1024, 1, True), "bf16", "os"),
    ("tpu-v4", (4096, 4096, 11008, 1, True), "int8", "ws"),
    ("train-2026", (262144, 16385, 128, 8, False), "bf16", "is"),
    ("infer-2026", (8, 8192, 28672, 1, True), "bf16", "os"),
    ("trainium2", (1, 14336, 4096, 4, True), "fp32", "ws"),
])
def test_compiled_table_on_preset_shapes(chip, shape, dtype, dataflow):
    m, k, n, b, w = shape
    op = Gemm(name="g", m=m, k=k, n=n, batch=b, b_is_weight=w, a_dtype=dtype, b_dtype=dtype,
              c_dtype=dtype)
    assert _same(load_chip(chip), op, dataflow) > 0


def test_compiled_table_with_a_fast_weight_install():
    """tpu-v4's array with groq-lpu's install path (8 rows per cycle, a global swap; groq-lpu
    itself has no DRAM for the table's peak) on a batch-1 GEMV."""
    import dataclasses
    chip = load_chip("tpu-v4")
    arr = dataclasses.replace(chip.core.array, weight_load_rows_per_cycle=8,
                              weight_swap="global")
    chip = dataclasses.replace(chip, core=dataclasses.replace(chip.core, array=arr))
    op = Gemm(name="g", m=1, k=8192, n=7168, batch=1, b_is_weight=True, a_dtype="int8",
              b_dtype="int8", c_dtype="int8")
    assert _same(chip, op, "ws") > 0
