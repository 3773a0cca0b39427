"""The fast DRAM counts (dram_counts.count_transfer) equal the enumerating reference exactly."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import load_chip, preset_names
from diptych.sim.dram import DramTiming
from diptych.sim.dram_counts import count_pattern, count_transfer, fold_period


class Geometry:
    """The integer parameter vector and state arrays of one address mapping."""

    def __init__(self, p, il, page, burst, banks):
        self.p, self.banks = p, banks
        self.ip = np.array([p, il, page, burst, banks, p * math.lcm(il, page)], dtype=np.int64)

    def counts(self, fn, addr, rows, row_bytes, stride):
        p, b = self.p, self.banks
        state = (np.full((p, b), -1, dtype=np.int64), np.zeros((p, b), dtype=np.int64),
                 np.zeros((p, b), dtype=np.int64))
        out = [np.zeros(p, dtype=np.int64) for _ in range(3)]
        extra = ()
        if fn is count_transfer:
            extra = (np.zeros((p, b), dtype=np.int64), np.zeros(p + 2 * b + 1, dtype=np.int64))
        fn(addr, rows, row_bytes, stride, self.ip, *state, 1, *out, *extra)
        return [o.tolist() for o in out]

    def check(self, addr, rows, row_bytes, stride):
        want = self.counts(count_pattern, addr, rows, row_bytes, stride)
        got = self.counts(count_transfer, addr, rows, row_bytes, stride)
        assert got == want, (self.ip.tolist(), addr, rows, row_bytes, stride)


geometries = st.builds(
    lambda p, il_b, burst, page_shift, banks: Geometry(
        p, il_b * burst, il_b * burst * 2 ** page_shift if page_shift >= 0
        else max(burst, il_b * burst >> -page_shift), burst, banks),
    st.integers(1, 6), st.sampled_from([1, 2, 4, 8]), st.sampled_from([8, 32, 64]),
    st.integers(-2, 3), st.integers(1, 9))


@settings(max_examples=400, deadline=None)
@given(g=geometries, addr=st.integers(0, 1 << 20), rows=st.integers(1, 400),
       row_bytes=st.integers(1, 3000), gap=st.integers(0, 3000),
       mult=st.sampled_from([None, 1, 2, 3, 4, 8, 16, 64]))
def test_fast_counts_equal_the_reference(g, addr, rows, row_bytes, gap, mult):
    # strides from arbitrary to multiples of large powers of two (the folded case)
    stride = row_bytes + gap
    if mult is not None:
        unit = int(g.ip[1]) * mult
        stride = max(1, -(-stride // unit)) * unit
    g.check(addr, rows, row_bytes, stride)


@settings(max_examples=100, deadline=None)
@given(g=geometries, addr=st.integers(0, 1 << 16), rows=st.integers(1, 60),
       row_bytes=st.integers(1, 600), stride=st.integers(-600, 600))
def test_overlapping_and_negative_strides_fall_back_to_the_reference(g, addr, rows, row_bytes,
                                                                     stride):
    if addr + (rows - 1) * stride < 0:
        stride = 0
    g.check(addr, rows, row_bytes, stride)


@pytest.mark.parametrize("chip", preset_names())
@pytest.mark.parametrize("rows,row_bytes,stride", [
    (4096, 512, 16384), (4096, 256, 57344), (1024, 8192, 57344), (4096, 2, 8192),
    (2048, 512, 8194), (1, 1 << 22, 1 << 22), (1, 777, 777), (300, 100, 100), (4096, 256, 256 * 3),
    (8192, 128, 256512)])
def test_preset_geometries_on_operand_like_blocks(chip, rows, row_bytes, stride):
    t = DramTiming.from_dram(load_chip(chip).dram)
    g = Geometry(t.pseudo_channels, t.interleave_bytes, t.page_bytes, t.burst_bytes, t.banks)
    for addr in (0, 4096 + 64, 12345 * 32, (1 << 30) + 96):
        g.check(addr, rows, row_bytes, stride)


def test_folding_enumerates_few_rows_for_operand_strides():
    """The point of the fast path: a 4,096-row block at a 16 KiB stride on train-2026 is
    folded after 2Π + s = 64 rows."""
    t = DramTiming.from_dram(load_chip("train-2026").dram)
    ip = t.iparams()
    big_pi, q, s = fold_period(4096, 512, 16384, ip)
    assert (big_pi, q, s) == (24, 170, 16) and 2 * big_pi + s == 64
