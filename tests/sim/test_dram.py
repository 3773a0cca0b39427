"""The analytic DRAM model against the burst-level reference, and its headline figures."""

import random

import pytest

from diptych.arch import load_chip
from diptych.sim.dram import FastDram, stream_bytes_per_ns
from diptych.sim.dram_ref import ReferenceDram, Transfer

SMALL = [(1, 4096, 4096), (1, 65536, 65536), (16, 512, 8192), (8, 2048, 57344),
         (64, 64, 100000), (32, 256, 4096), (1, 96, 96), (4, 1000, 3000)]


@pytest.mark.parametrize("chip", ["h100", "infer-2026", "tpu-v4"])
@pytest.mark.parametrize("rows,row_bytes,stride", SMALL)
def test_fast_matches_reference_on_small_transfers(chip, rows, row_bytes, stride):
    d = load_chip(chip).dram
    for addr in (0, 1024, 12345 * 32):
        fast = FastDram(d).transfer(0.0, addr, rows, row_bytes, stride)
        ref = ReferenceDram(d).run([Transfer(0.0, addr, rows, row_bytes, stride)])[0]
        assert fast == pytest.approx(ref, rel=0.05)


def test_fast_matches_reference_on_a_sequence_with_turnaround():
    d = load_chip("h100").dram
    trs = [Transfer(0.0, 0, 1, 32768, 32768), Transfer(0.0, 1 << 24, 8, 1024, 8192, True),
           Transfer(0.0, 65536, 1, 32768, 32768)]
    fast = FastDram(d)
    got = [fast.transfer(t.start_ns, t.addr, t.rows, t.row_bytes, t.stride, t.write) for t in trs]
    ref = ReferenceDram(d).run(trs)
    for g, r in zip(got, ref):
        assert g == pytest.approx(r, rel=0.05)


@pytest.mark.parametrize("chip", ["h100", "infer-2026", "tpu-v4", "tpu-v5e"])
def test_long_sequential_read_is_88_to_95_percent_of_peak(chip):
    d = load_chip(chip).dram
    eff = stream_bytes_per_ns(d, 512 << 20) / (d.peak_bytes_per_s / 1e9)
    assert 0.88 <= eff <= 0.95


def test_long_stream_agrees_with_reference_including_refresh():
    d = load_chip("infer-2026").dram
    n = 4 << 20  # 16 KiB per pseudo-channel, several refresh windows at this rate? use one PC
    import dataclasses
    one = dataclasses.replace(d, stacks=1, channels_per_stack=1, pseudo_channels_per_channel=1)
    fast = stream_bytes_per_ns(one, n)
    ref_done = ReferenceDram(one).run([Transfer(0.0, 0, 1, n, n)])[0]
    assert fast == pytest.approx(n / ref_done, rel=0.05)
    assert ref_done > 2 * one.t_refi_ns  # the stream crossed refresh windows


def test_random_64_byte_reads_are_far_below_peak():
    d = load_chip("h100").dram
    rng = random.Random(7)
    trs = [Transfer(0.0, rng.randrange(0, 1 << 32) // 64 * 64, 1, 64, 64) for _ in range(5000)]
    fast = FastDram(d)
    done = max(fast.transfer(0.0, t.addr, 1, 64, 64) for t in trs)
    ref = max(ReferenceDram(d).run(trs))
    peak = d.peak_bytes_per_s / 1e9
    assert 5000 * 64 / done / peak < 0.5
    assert 5000 * 64 / ref / peak < 0.5


def test_refresh_lower_bound_is_the_advance_from_zero():
    # the closed form equals the work-conserving advance of the fast model started at t = 0
    from diptych.sim.dram import DramTiming, _advance, refresh_lower_bound_ns
    t = DramTiming.from_dram(load_chip("trainium2").dram)
    fp = t.fparams()
    for w in (0.0, 10.0, 3000.0, 3521.2, 3600.0, 10000.0, 123456.7):
        assert refresh_lower_bound_ns(w, t.t_refi_ns, fp[4]) == pytest.approx(
            _advance(0.0, w, fp), abs=1e-6)


@pytest.mark.parametrize("chip", ["h100", "infer-2026", "tpu-v1", "train-2026", "trainium2"])
@pytest.mark.parametrize("total,chunk", [(1 << 26, 1 << 19), ((1 << 26) + 777, 1 << 19),
                                         (3 << 24, 132 << 16), (5 << 20, 3 << 16), (100, 1 << 19)])
def test_stream_equals_its_transfers_one_by_one(chip, total, chunk):
    """FastDram.stream (pseudo-channel classes) is the chunk-by-chunk loop, state included:
    a read stream then a write stream, as vector ops issue them."""
    import numpy as np
    d = load_chip(chip).dram
    fast, ref = FastDram(d), FastDram(d)
    for addr, write in ((0, False), (1 << 40, True)):
        got = fast.stream(0.0, addr, total, chunk, write)
        done, a, left = 0.0, addr, total
        while left > 0:
            n = min(chunk, left)
            done = ref.transfer(0.0, a, 1, n, n, write)
            a, left = a + n, left - n
        assert got == done
        for x, y in zip(fast.state, ref.state):
            assert np.array_equal(x, y)
