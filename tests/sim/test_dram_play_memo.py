"""The per-channel play reuses the previous channel's refresh walk (``dram.play_one``'s memo);
that changes no number: ``dram_transfer`` against the same transfers played channel by channel
with a fresh walk (:func:`diptych.sim.dram.advance`) for every channel, bit for bit."""


import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import load_chip
from diptych.sim import dram as D


def _transfer_ref(m, start, addr, rows, row_bytes, stride, write, share):
    """:func:`diptych.sim.dram.dram_transfer` spelled out in Python, no memo."""
    ip, fp, pat, s = m._ip, m._fp, m.patterns, m.state
    with np.errstate(over="ignore"):   # the hash wraps, as compiled
        h = D.pattern_entry.py_func(addr, rows, row_bytes, stride, ip, pat)
    touched = pat[D.C_META][h, 0]
    agg_end = D._aggregate.py_func(start, pat[D.C_META][h, 1], share, ip, fp, s[D.S_AGG])
    share = max(1.0, share * touched / ip[D.I_P])
    tp = D.play_params.py_func(fp)
    finish = start
    for t in range(touched):
        p, nb, na, bm = pat[D.C_RECS][h, t]
        ring = s[D.S_ACT][p]
        d0, end, a0, a1, a2, a3, _ = D.play_one.py_func(
            start, write, share, tp, s[D.S_BUS][p], s[D.S_DIR][p], ring[0], ring[1], ring[2],
            ring[3], nb, na, bm, D.NO_MEMO)
        ring[:] = (a0, a1, a2, a3)
        s[D.S_BUSY][p] += end - d0
        s[D.S_BUS][p] = end
        s[D.S_DIR][p] = write
        finish = max(finish, end)
    return max(finish, agg_end)


_TRANSFER = st.tuples(st.floats(0.0, 20000.0), st.integers(0, 1 << 22), st.integers(1, 8),
                      st.integers(1, 70000), st.integers(0, 1 << 16), st.booleans(),
                      st.sampled_from([1.0, 3.0, 64.0]))


@settings(max_examples=25, deadline=None)
@given(chip=st.sampled_from(["h100", "infer-2026"]), transfers=st.lists(_TRANSFER, min_size=1,
                                                                        max_size=12))
def test_memoised_play_equals_the_walk_per_channel(chip, transfers):
    d = load_chip(chip).dram
    fast, ref = D.FastDram(d), D.FastDram(d)
    for start, addr, rows, row_bytes, extra, write, share in transfers:
        stride = row_bytes + extra
        got = fast.transfer(start, addr, rows, row_bytes, stride, write, share)
        want = _transfer_ref(ref, start, addr, rows, row_bytes, stride, int(write), share)
        assert got == want
        for a, b in zip(fast.state, ref.state):
            assert np.array_equal(a, b)


@settings(max_examples=60, deadline=None)
@given(chip=st.sampled_from(["h100", "infer-2026", "tpu-v4"]),
       plays=st.lists(st.tuples(st.integers(0, 40), st.floats(-400.0, 400.0),
                                st.integers(0, 3000)), min_size=1, max_size=30))
def test_the_window_memo_equals_the_refresh_walk(chip, plays):
    """``play_one``'s finish, with its memo carried from play to play (the same start with
    other work reuses the start's refresh window), equals a fresh :func:`dram.advance` of the
    same start and work, bit for bit; starts are drawn around refresh windows' edges."""
    fp = D.DramTiming.from_dram(load_chip(chip).dram).fparams()
    tp = D.play_params.py_func(fp)
    tb, lat, trefi, blk = tp[0], tp[1], tp[6], tp[7]
    memo = D.NO_MEMO
    start = 0.0
    for k, off, nb in plays:
        if off != 0.0 or k:             # else: the previous start again
            start = max(0.0, k * trefi + off - lat)
        d0, end, *_, memo = D.play_one.py_func(start, 0, 1.0, tp, -1e18, -1, -1e18, -1e18,
                                               -1e18, -1e18, nb, 0, 0, memo)
        assert d0 == start + lat
        assert end == D.advance.py_func(d0, nb * tb * 1.0, trefi, blk)


#: Offsets into a refresh window (ns from its start ``k·tREFI``), its edges included: the
#: blackout's end and the next window's start, a nanosecond and a rounding step either side.
_EDGES = st.one_of(st.floats(0.0, 4000.0), st.sampled_from(["blk", "next"]).flatmap(
    lambda edge: st.tuples(st.just(edge), st.sampled_from([-60.0, -1.0, -1e-9, 0.0, 1e-9, 1.0,
                                                           60.0]))))


@settings(max_examples=150, deadline=None)
@given(chip=st.sampled_from(["h100", "infer-2026"]),
       plays=st.lists(st.tuples(st.integers(-1, 3), _EDGES, st.integers(0, 4000)),
                      min_size=2, max_size=60))
def test_starts_inside_a_known_window_skip_the_division(chip, plays):
    """Many channels of a transfer start at different times of a few refresh windows (busy
    channels): a start between two starts already seen in one window reuses that window
    (``floor(t / tREFI)`` is non-decreasing in ``t``); the finish equals a fresh
    :func:`dram.advance` bit for bit, for starts anywhere in the windows and around their
    edges (the blackout's end, the next window's start), before the first included."""
    fp = D.DramTiming.from_dram(load_chip(chip).dram).fparams()
    tp = D.play_params.py_func(fp)
    tb, lat, trefi, blk = tp[0], tp[1], tp[6], tp[7]
    memo = D.NO_MEMO
    for k, off, nb in plays:
        if isinstance(off, tuple):
            edge, eps = off
            off = (blk if edge == "blk" else trefi) + eps
        d0 = k * trefi + off
        got_d0, end, *_, memo = D.play_one.py_func(d0 - lat, 0, 1.0, tp, -1e18, -1, -1e18,
                                                   -1e18, -1e18, -1e18, nb, 0, 0, memo)
        assert end == D.advance.py_func(got_d0, nb * tb * 1.0, trefi, blk)
