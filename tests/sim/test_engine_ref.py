"""The Numba engine and its pure-Python golden twin agree exactly on random small cases."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.sim import engine as E
from diptych.sim import engine_ref as G
from diptych.sim import mapper as MP

from simtest_helpers import golden_problem, one_array_run, small_chip


@settings(max_examples=150, deadline=None)
@given(R=st.sampled_from([2, 4, 8]), C=st.sampled_from([2, 4, 8]), m=st.integers(1, 40),
       k=st.integers(1, 40), n=st.integers(1, 40), df=st.sampled_from(["os", "ws", "is"]),
       fm=st.integers(1, 3), fk=st.integers(1, 3), fn=st.integers(1, 3), order=st.integers(0, 1),
       memory=st.booleans(), batch=st.integers(1, 3), shared=st.booleans(),
       dtype=st.sampled_from(["bf16", "int8", "fp32"]), active=st.sampled_from([1, 3, 16]),
       apc=st.sampled_from([1, 2]), x_sb=st.integers(0, 2), w_sb=st.integers(0, 2),
       x_dup=st.integers(1, 3), w_dup=st.integers(1, 3),
       src=st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)) | st.just((0, 0, 0)),
       noc=st.sampled_from([None, 0.5, 4.0, 64.0]),
       install=st.tuples(st.sampled_from([1, 2, 3, 8]), st.sampled_from(["wave", "global"])))
def test_engine_equals_golden(R, C, m, k, n, df, fm, fk, fn, order, memory, batch, shared, dtype,
                              active, apc, x_sb, w_sb, x_dup, w_dup, src, noc, install):
    """Also with resident operands (``src``: X, W, O in DRAM 0, the scratchpad 1, the shared
    buffer 2; a resident operand uses no shared-buffer mode, as the mapper guarantees), with
    a NoC (``noc``: link bytes per cycle, a DRAM cap and latency) and with a faster WS
    weight-install path (``install``: weight rows per cycle, capped at R, and the swap)."""
    x_sb, w_sb = (0 if src[0] else x_sb), (0 if src[1] else w_sb)
    sb = x_sb or w_sb or 2 in src
    chip = small_chip(R, C, base="train-2026" if dtype == "fp32" else "tpu-v4",
                      sb_mib=1.0 if sb else None, sb_bpc=24.0, load_rows=install[0],
                      swap=install[1])
    if noc is not None:   # a NoC: a DRAM cap (below the pins for narrow links) and latency
        from diptych.arch.tables import Noc
        chip = dataclasses.replace(chip, noc=Noc(link_bytes_per_cycle=noc,
                                                 hop_latency_cycles=3.0))
    if dtype not in chip.dtypes:
        dtype = chip.default_dtype
    out, pb, rates, split = one_array_run(chip, m, k, n, df, 1, 1, 1, dtype=dtype, batch=batch,
                                          b_is_weight=shared, active=active,
                                          arrays_per_core=apc)
    blk = MP.Blocks(min(pb.m, R * fm), min(pb.k, rates.stationary_rows * fk if df != "os" else R * fk),
                    min(pb.n, C * fn), order, x_sb, w_sb)
    if sb:   # arrays sharing operand slices (the split's duplication factors)
        pb = dataclasses.replace(pb, x_dup=x_dup, w_dup=w_dup)
    pb = dataclasses.replace(pb, x_src=src[0], w_src=src[1], o_dst=src[2])
    from diptych.sim.gemm import run_engine
    out, _, _ = run_engine(chip, pb, blk, rates, split, memory)
    ref = G.run(golden_problem(chip, pb, blk, rates, split, memory), chip.dram)
    assert out[E.O_CYCLES] == ref.cycles
    assert out[E.O_BUSY] == ref.busy
    assert out[E.O_DRAM_STALL] == ref.dram_stall
    assert out[E.O_WB_STALL] == ref.wb_stall
    assert out[E.O_DRAM_RD] == ref.dram_rd and out[E.O_DRAM_WR] == ref.dram_wr
    assert out[E.O_SRAM_RD] == ref.sram_rd and out[E.O_SRAM_WR] == ref.sram_wr
    assert out[E.O_BLOCKS] == ref.blocks and out[E.O_FOLDS] == ref.folds
    assert out[E.O_TRANSFERS] == ref.transfers
    assert out[E.O_SB_RD] == ref.sb_rd
    # the DRAM and shared-buffer bytes follow the mapper's closed forms (sums of 1/dup parts
    # may round differently from the closed form's single division)
    assert out[E.O_DRAM_RD] + out[E.O_DRAM_WR] == pytest.approx(MP.traffic_bytes(pb, blk),
                                                                rel=1e-12)
    assert out[E.O_SB_RD] == MP.shared_buffer_bytes(pb, blk)
