"""The search's fast paths against their slow references, bit for bit: an opened group's
table made from the split's fields without orienting the problem (``mapper.split_table``)
against the calls made on the oriented problem (``mapper.group_table_reference``: ``orient``,
``candidate_table``, the split-K cycles added, a stable NumPy argsort), errors included, and
the engine's compiled entry point (``gemm.engine_entry``) against Numba's dispatcher."""

import numpy as np
import pytest

from diptych.arch import load_chip
from diptych.sim import engine as E
from diptych.sim import gemm as G
from diptych.sim import mapper as MP
from diptych.sim.array import array_rates
from diptych.workloads.ops import Gemm

from simtest_helpers import small_chip

OPS = [Gemm(name="a", m=434, k=4096, n=6144, b_is_weight=True),
       Gemm(name="b", m=3, k=1000, n=257, batch=4),
       Gemm(name="c", m=100, k=64, n=2048, batch=2, b_is_weight=True),
       Gemm(name="r", m=256, k=1024, n=512, a_source="scratchpad", c_dest="shared_buffer",
            resident_bytes=1 << 20),
       # W4A16: an expanded copy of B's block in the scratchpad on tpu-v4 and the small chips
       Gemm(name="w", m=64, k=2048, n=512, a_dtype="bf16", b_dtype="int4", c_dtype="bf16")]


def _tables(chip, op, step):
    """(view, m, layout, dataflow, problem, split, peak bytes per cycle) of every ``step``-th
    split (split-K ones included) in every dataflow."""
    view = G._as_oriented(op, *((op.m * op.batch, 1) if op.b_is_weight else (op.m, op.batch)))
    m = view.m
    layout = MP.op_layout(view, m, chip.tensor_cores, chip)
    for df in chip.core.array.dataflows:
        for split in MP.splits(chip, view.batch, m, op.n, op.k)[::step]:
            pb = MP.orient(view, df, split, m, chip.tensor_cores, layout)
            yield (view, m, layout, df, pb, split,
                   chip.dram.peak_bytes_per_s / chip.clock_hz / split.active)


@pytest.mark.parametrize("chip", [
    load_chip("h100"), load_chip("tpu-v4"),
    small_chip(rows=8, cols=8, cores=3, arrays=2, spad_mib=0.05, sb_mib=0.5),
    small_chip(rows=4, cols=8, cores=2, arrays=1, spad_mib=0.02, sb_mib=None)],
    ids=["h100", "tpu-v4", "small-sb", "small"])
def test_split_table_equals_the_oriented_reference(chip):
    checked = ties = split_k = 0
    for op in OPS:
        rates = array_rates(chip, op.compute_dtype)
        for i, (view, m, layout, df, pb, split, peak) in enumerate(_tables(chip, op, 3)):
            inputs = MP.search_inputs(chip, rates, layout, view.k)
            extra = (0, 7, 123457)[i % 3]       # a split-K reduction's cycles, or none
            want = MP.group_table_reference(chip, pb, rates, split, peak, extra)
            got = MP.split_table(chip, rates, inputs, view, df, split, m, layout, peak, extra)
            assert np.array_equal(got[0].rows, want[0].rows)
            for g, w in zip(got[1:], want[1:]):
                assert g.dtype == w.dtype and np.array_equal(g, w)
            ties += int(np.any(np.diff(want[2]) == 0))  # equal estimates: the sort's stability
            checked += 1
            split_k += split.pk > 1
    assert checked >= 12 and ties >= 1 and (split_k or not chip.has_dram)


def test_split_table_raises_the_references_error():
    """A scratchpad too small for the minimal tile: the same explanatory ValueError."""
    chip = small_chip(rows=8, cols=8, cores=2, arrays=2, spad_mib=0.0002)
    op = OPS[1]
    rates = array_rates(chip, op.compute_dtype)
    n = 0
    for view, m, layout, df, pb, split, peak in _tables(chip, op, 2):
        with pytest.raises(ValueError) as want:
            MP.group_table_reference(chip, pb, rates, split, peak)
        with pytest.raises(ValueError) as got:
            MP.split_table(chip, rates, MP.search_inputs(chip, rates, layout, view.k), view,
                           df, split, m, layout, peak)
        assert str(got.value) == str(want.value)
        assert "scratchpad too small" in str(want.value)
        # the search's lazy form: a NoFit whose explained() is the same error
        with pytest.raises(MP.NoFit) as lazy:
            MP.split_table(chip, rates, MP.search_inputs(chip, rates, layout, view.k), view,
                           df, split, m, layout, peak, explain=False)
        exp = lazy.value.explained()
        assert type(exp) is ValueError and str(exp) == str(want.value)
        n += 1
    assert n >= 3
    # plan raises the explained error, as the reference path does
    with pytest.raises(ValueError) as fast:
        G.plan(op, chip)
    with pytest.raises(ValueError) as ref:
        G.plan(op, chip, reference=True)
    assert type(fast.value) is ValueError and str(fast.value) == str(ref.value)
    assert "scratchpad too small" in str(fast.value)


def test_engine_entry_runs_as_the_dispatcher():
    """The compiled entry point gives the dispatcher's outputs, with and without a cutoff;
    with Numba on, the entry is the compiled overload's, not the dispatcher it falls back
    to."""
    import numba
    chip = load_chip("h100")
    op = Gemm(name="x", m=512, k=4096, n=1024)
    p = G.plan(op, chip)
    base = MP.engine_base(chip, p["problem"], p["rates"], p["split"], True)
    MP.set_blocking(base[0], p["blocks"])
    dram = G.engine_dram_inputs(chip)
    run = G.engine_entry(base, dram)
    assert G.engine_entry(base, dram) is run           # looked up once per argument types
    if not numba.config.DISABLE_JIT:
        assert run is not E.run_schedule
        assert any(run is c.entry_point for c in E.run_schedule.overloads.values())
    ip = base[0]
    ip[E.P_PERIODS] = MP.period_cycles(chip, p["problem"], p["blocks"], p["rates"])
    ip[E.P_TRAFFIC] = int(MP.traffic_bytes(p["problem"], p["blocks"]))
    for cutoff in (0, int(p["out"][E.O_CYCLES]) // 2, int(p["out"][E.O_CYCLES]) + 1):
        ip[E.P_CUTOFF], ip[E.P_BEST] = cutoff, 0
        args = (ip, base[1], *dram, G._NO_TRACE_BLOCKS, G._NO_TRACE_SPANS)
        a, b = E.run_schedule(*args), run(*args)
        assert a.tobytes() == b.tobytes()
    assert a[E.O_CYCLES] == p["out"][E.O_CYCLES] and not a[E.O_ABORTED]
