"""The fast DRAM counts (dram_counts.count_transfer) equal the enumerating reference exactly."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import load_chip, preset_names
from diptych.sim.dram import DramTiming
from diptych.sim.dram_counts import (COUNT_DTYPE, count_drift, count_pattern, count_transfer,
                                     near_period)


class Geometry:
    """The integer parameter vector and state arrays of one address mapping."""

    def __init__(self, p, il, page, burst, banks):
        self.p, self.banks = p, banks
        self.ip = np.array([p, il, page, burst, banks, p * math.lcm(il, page)], dtype=np.int64)

    def counts(self, fn, addr, rows, row_bytes, stride):
        p, b = self.p, self.banks
        state = (np.full((p, b), -1, dtype=np.int64), np.zeros((p, b), dtype=np.int64),
                 np.zeros((p, b), dtype=np.int64))
        out = [np.zeros(p, dtype=COUNT_DTYPE) for _ in range(3)]
        fn(addr, rows, row_bytes, stride, self.ip, *state, 1, *out)
        return [o.tolist() for o in out]

    def drift(self, addr, rows, row_bytes, stride, t_rows):
        """count_drift with an arbitrary near period ``t_rows`` (any is exact)."""
        w = int(self.ip[5])
        eps = t_rows * stride % w
        eps = eps - w if 2 * eps > w else eps
        out = [np.zeros(self.p, dtype=COUNT_DTYPE) for _ in range(3)]
        count_drift(addr, rows, row_bytes, stride, t_rows, eps, self.ip, *out)
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


@settings(max_examples=400, deadline=None)
@given(g=geometries, addr=st.integers(0, 1 << 20), rows=st.integers(2, 300),
       row_bytes=st.integers(1, 3000), gap=st.integers(0, 5000), t_rows=st.integers(1, 40))
def test_the_drift_walk_is_exact_for_any_near_period(g, addr, rows, row_bytes, gap, t_rows):
    """Fact 3 holds for every T, not only the cheapest: ε may be large, negative or zero."""
    if int(g.ip[2]) < int(g.ip[1]) and int(g.ip[2]) % int(g.ip[3]):
        return   # (pages smaller than interleave chunks must be whole bursts)
    stride = row_bytes + gap
    want = g.counts(count_pattern, addr, rows, row_bytes, stride)
    assert g.drift(addr, rows, row_bytes, stride, min(t_rows, rows)) == want


@settings(max_examples=100, deadline=None)
@given(g=geometries, addr=st.integers(0, 1 << 16), rows=st.integers(1, 60),
       row_bytes=st.integers(1, 600), stride=st.integers(-600, 600))
def test_overlapping_and_negative_strides_fall_back_to_the_reference(g, addr, rows, row_bytes,
                                                                     stride):
    if addr + (rows - 1) * stride < 0:
        stride = 0
    g.check(addr, rows, row_bytes, stride)


@pytest.mark.parametrize("chip", [p for p in preset_names() if load_chip(p).has_dram])
@pytest.mark.parametrize("rows,row_bytes,stride", [
    (4096, 512, 16384), (4096, 256, 57344), (1024, 8192, 57344), (4096, 2, 8192),
    (2048, 512, 8194), (1, 1 << 22, 1 << 22), (1, 777, 777), (300, 100, 100), (4096, 256, 256 * 3),
    (8192, 128, 256512)])
def test_preset_geometries_on_operand_like_blocks(chip, rows, row_bytes, stride):
    t = DramTiming.from_dram(load_chip(chip).dram)
    g = Geometry(t.pseudo_channels, t.interleave_bytes, t.page_bytes, t.burst_bytes, t.banks)
    for addr in (0, 4096 + 64, 12345 * 32, (1 << 30) + 96):
        g.check(addr, rows, row_bytes, stride)


def test_near_periods_of_operand_strides():
    """The point of the fast path: on train-2026 (W = 192 KiB) a 16 KiB stride repeats exactly
    after 12 rows, and the odd 32,770-byte stride of a K = 16385 operand drifts by only 12 bytes
    every 6 rows: the drift walk costs under a tenth of the reference walk's 4,096 × 4 pieces."""
    from diptych.sim.dram_counts import PIECE_COST
    ip = DramTiming.from_dram(load_chip("train-2026").dram).iparams()
    assert near_period(4096, 512, 16384, ip)[:2] == (12, 0)
    t, eps, cost = near_period(4096, 512, 32770, ip)
    assert (t, eps) == (6, 12) and cost < 4096 * 4 * PIECE_COST / 10


@settings(max_examples=150, deadline=None)
@given(g=geometries, addr=st.integers(0, 1 << 20), rows=st.integers(1, 300),
       row_bytes=st.integers(1, 3000), stride=st.integers(-4000, 9000))
def test_the_stepped_walk_equals_the_walk_that_divides_per_row(g, addr, rows, row_bytes,
                                                                stride):
    """count_pattern steps each row's first chunk from the previous row's (no division per
    row) and keeps a chunk's page across rows: the same counts as the walk that divides
    (tests/sim/count_pattern_ref.py), for any stride (overlapping; negative ones divide) that
    keeps the addresses non-negative (the engine's are)."""
    import count_pattern_ref as REF

    if addr + (rows - 1) * stride < 0:
        return

    assert (g.counts(count_pattern, addr, rows, row_bytes, stride)
            == g.counts(REF.count_pattern, addr, rows, row_bytes, stride))


@settings(max_examples=150, deadline=None)
@given(g=geometries, data=st.data())
def test_the_fast_walk_equals_the_reference_over_a_shared_state(g, data):
    """count_walk (count_transfer's walk) gives count_pattern's numbers for increasing rows
    (its last-page-per-channel rule) and for overlapping or decreasing ones (the reference's
    rule), on one set of state arrays reused by a sequence of transfers, as the pattern cache
    reuses them (each transfer a new id)."""
    from diptych.sim.dram_counts import count_walk

    p, b = g.p, g.banks
    mine = [np.full((p, b), -1, dtype=np.int64), np.zeros((p, b), dtype=np.int64),
            np.zeros((p, b), dtype=np.int64)]
    for tid in range(1, data.draw(st.integers(1, 6)) + 1):
        addr = data.draw(st.integers(0, 1 << 18))
        rows = data.draw(st.integers(1, 200))
        row_bytes = data.draw(st.integers(1, 2500))
        stride = data.draw(st.integers(-3000, 6000))
        if addr + (rows - 1) * stride < 0:
            stride = row_bytes + abs(stride)
        want = g.counts(count_pattern, addr, rows, row_bytes, stride)
        got = [np.zeros(p, dtype=COUNT_DTYPE) for _ in range(3)]
        count_walk(addr, rows, row_bytes, stride, g.ip, *mine, tid, *got)
        assert [o.tolist() for o in got] == want, (g.ip.tolist(), addr, rows, row_bytes, stride)


@settings(max_examples=150, deadline=None)
@given(p=st.sampled_from([1, 2, 3, 31, 32, 33, 63, 64, 65, 100, 192, 200]),
       il_b=st.sampled_from([1, 2, 8]), burst=st.sampled_from([8, 32]),
       page_mult=st.sampled_from([1, 2, 3, 4]), banks=st.integers(2, 17), data=st.data())
def test_the_row_walk_equals_the_reference_over_a_shared_state(p, il_b, burst, page_mult, banks,
                                                                data):
    """count_rows (rows as pseudo-channel ranges and page masks, for chunks inside pages)
    gives count_pattern's numbers for increasing rows, on one set of state arrays reused by a
    sequence of transfers (the pattern cache's), with one to seven mask words of 32
    pseudo-channels (P = 200 the seventh), rows of one chunk to several rounds of every
    pseudo-channel, rows that cross pages, and pages of 3 interleaves (not a power of two
    where the interleave is)."""
    il = il_b * burst
    transfers = []
    for _ in range(data.draw(st.integers(1, 5))):
        addr = data.draw(st.integers(0, 1 << 22))
        rows = data.draw(st.integers(1, 120))
        row_bytes = data.draw(st.integers(1, data.draw(st.sampled_from([300, 3 * p * il]))))
        stride = row_bytes + data.draw(st.integers(0, data.draw(st.sampled_from(
            [0, 1000, 10 * p * il * page_mult]))))
        transfers.append((addr, rows, row_bytes, stride))
    _rows_match_over_shared_state(Geometry(p, il, il * page_mult, burst, banks), transfers)


def _rows_match_over_shared_state(g, transfers):
    """count_rows on each transfer in turn, over one set of state arrays (as the pattern cache
    shares them), gives count_pattern's numbers on fresh state."""
    from diptych.sim.dram_counts import count_rows

    p, banks = g.p, g.banks
    mine = [np.full((p, banks), -1, dtype=np.int64), np.zeros((p, banks), dtype=np.int64),
            np.zeros((p, banks), dtype=np.int64)]
    for tid, (addr, rows, row_bytes, stride) in enumerate(transfers, 1):
        want = g.counts(count_pattern, addr, rows, row_bytes, stride)
        got = [np.zeros(p, dtype=COUNT_DTYPE) for _ in range(3)]
        count_rows(addr, rows, row_bytes, stride, g.ip, *mine, tid, *got)
        assert [o.tolist() for o in got] == want, (g.ip.tolist(), addr, rows, row_bytes, stride)


@settings(max_examples=200, deadline=None)
@given(p=st.sampled_from([1, 2, 5, 16, 31, 32, 33, 64]), il_b=st.sampled_from([1, 2, 8]),
       page_mult=st.sampled_from([1, 2, 4]), banks=st.sampled_from([2, 3, 16]), data=st.data())
def test_the_row_walk_on_fill_shaped_transfers(p, il_b, page_mult, banks, data):
    """count_rows equals count_pattern on transfers shaped like the engine's cache fills
    (benchmarks/bench_dram_fills.py: hundreds of rows of a few chunks at a stride that is no
    multiple of the interleave), so that rows of one chunk, of two, rows inside one page whose
    channel range wraps past P − 1 or crosses a mask word (count_rows' straight path), and rows
    that cross a page all occur within one transfer; over a shared state."""
    burst = 32
    il = il_b * burst
    transfers = []
    for _ in range(data.draw(st.integers(1, 3))):
        row_bytes = data.draw(st.integers(1, max(1, p * il)))
        transfers.append((data.draw(st.integers(0, 1 << 24)), data.draw(st.integers(2, 600)),
                          row_bytes,
                          row_bytes + data.draw(st.integers(0, 4 * p * il * page_mult))))
    _rows_match_over_shared_state(Geometry(p, il, il * page_mult, burst, banks), transfers)


@settings(max_examples=200, deadline=None)
@given(p=st.sampled_from([65, 100, 128, 192, 256]), il_b=st.sampled_from([1, 2, 8]),
       page_mult=st.sampled_from([1, 2, 4]), banks=st.sampled_from([2, 3, 16, 48]),
       data=st.data())
def test_wide_geometries_count_by_rows_within_a_bank_round(p, il_b, page_mult, banks, data):
    """Above ``ROWS_MAX_CHANNELS`` pseudo-channels, ``count_transfer`` counts by rows
    (``count_rows_one``: its pages are at most one a bank) when a transfer spans fewer pages
    than banks, and walks otherwise: either way count_pattern's numbers (and count_rows',
    and count_rows_one's where it applies), on fill-shaped transfers (sweep-1000's: a few
    hundred rows of a chunk or two at strides of tens of chunks) that fall on both sides of
    that line, over one shared state."""
    from diptych.sim.dram_counts import count_rows, count_rows_one
    burst = 32
    il = il_b * burst
    g = Geometry(p, il, il * page_mult, burst, banks)
    page_bytes = p * il * page_mult          # the address span of one page of every channel
    mine = [np.full((p, banks), -1, dtype=np.int64), np.zeros((p, banks), dtype=np.int64),
            np.zeros((p, banks), dtype=np.int64)]
    for tid in range(1, data.draw(st.integers(1, 4)) + 1):
        row_bytes = data.draw(st.integers(1, 4 * il))
        rows = data.draw(st.integers(2, 400))
        stride = row_bytes + data.draw(st.integers(0, data.draw(st.sampled_from(
            [il, 64 * il, 2 * page_bytes * banks // rows + 1]))))
        addr = data.draw(st.integers(0, 1 << 26))
        want = g.counts(count_pattern, addr, rows, row_bytes, stride)
        span = (addr + (rows - 1) * stride + row_bytes - 1) // page_bytes - addr // page_bytes
        fns = (count_transfer, count_rows) + ((count_rows_one,) if span < banks else ())
        for i, fn in enumerate(fns):
            got = [np.zeros(p, dtype=COUNT_DTYPE) for _ in range(3)]
            fn(addr, rows, row_bytes, stride, g.ip, *mine, 3 * tid + i, *got)
            assert [o.tolist() for o in got] == want, (fn, g.ip.tolist(), addr, rows,
                                                       row_bytes, stride)


@settings(max_examples=300, deadline=None)
@given(g=geometries, rows=st.integers(2, 2000), row_bytes=st.integers(1, 3000),
       gap=st.integers(0, 1 << 20), limit=st.integers(0, 20000))
def test_near_period_with_a_limit_answers_as_without_below_it(g, rows, row_bytes, gap, limit):
    """``near_period``'s search stopped at ``limit`` (count_transfer's cost of the other path)
    gives the unlimited search's (T, ε, cost) whenever that cost is below the limit, and a
    cost of at least the limit otherwise (so count_transfer picks the same path)."""
    stride = row_bytes + gap
    full = near_period(rows, row_bytes, stride, g.ip)
    cut = near_period(rows, row_bytes, stride, g.ip, float(limit))
    if full[2] < limit:
        assert cut == full
    else:
        assert cut[2] >= limit
