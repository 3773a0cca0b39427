"""The shared-buffer rule (docs/engine.md): which operands may use it, and what DRAM sees."""

import dataclasses

from diptych.arch import SharedBuffer, load_chip
from diptych.sim import mapper as MP
from diptych.sim import simulate_gemm

from simtest_helpers import small_chip


def _problem(m, k, n, pm, pn, active):
    split = MP.Split(pb=1, pm=pm, pn=pn, batch=1, m=m, n=n, active=active, arrays_per_core=1)

    class V:
        a_dtype = b_dtype = c_dtype = "bf16"
        acc_dtype = "fp32"
        b_is_weight = True
        batch = 1
    v = V()
    v.m, v.k, v.n = m * pm, k, n * pn
    return MP.orient(v, "os", split, m * pm), split


def test_reuse_sets_by_hand():
    # per array 64 x 256 x 128 (bf16), blocks 16 x 32 x 32, M outermost; 2 x 4 arrays
    pb, split = _problem(64, 256, 128, pm=2, pn=4, active=8)
    assert (pb.x_dup, pb.w_dup) == (4, 2)
    blk = MP.Blocks(16, 32, 32, 0)
    x1, x2, w1, w2 = MP.reuse_sets(pb, blk, split)
    assert x1 == 2 * 16 * 32 * 2 * (8 // 4)        # two X blocks per distinct A slice
    assert x2 == 16 * 256 * 2 * (8 // 4)           # the X block row, re-read per N block
    assert w1 == 2 * 32 * 32 * 2 * (8 // 2)
    assert w2 == 256 * 128 * 2 * (8 // 2)          # all of W, re-read per M block
    # DRAM bytes: mode 1 divides every load by dup, mode 2 reads each block once
    x, xt, w, wt, o = 64 * 256 * 2, 64 * 256 * 2 * 4, 256 * 128 * 2, 256 * 128 * 2 * 4, 64 * 128 * 2
    for xs, ws, dram, sb in ((0, 0, xt + wt + o, 0), (1, 1, xt / 4 + wt / 2 + o, 0),
                             (2, 2, x / 4 + w / 2 + o, xt - x + wt - w)):
        b = MP.Blocks(16, 32, 32, 0, xs, ws)
        assert MP.traffic_bytes(pb, b) == dram
        assert MP.shared_buffer_bytes(pb, b) == sb


def test_modes_follow_capacity():
    pb, split = _problem(64, 256, 128, pm=2, pn=4, active=8)
    blk = MP.Blocks(16, 32, 32, 0)
    assert MP.shared_buffer_modes(small_chip(), pb, blk, split) == [blk]   # no buffer
    x1, x2, w1, w2 = MP.reuse_sets(pb, blk, split)
    chip = small_chip(sb_mib=(x2 + w1) / 2**20)
    modes = {(b.x_sb, b.w_sb) for b in MP.shared_buffer_modes(chip, pb, blk, split)}
    # every pair that fits, less mode 0 wherever mode 1 fits instead (it dominates)
    assert modes == {(1, 1), (2, 1)}
    chip = small_chip(sb_mib=(x2 + w1) / 2**20 - 1e-6)
    modes = {(b.x_sb, b.w_sb) for b in MP.shared_buffer_modes(chip, pb, blk, split)}
    assert modes == {(1, 1), (2, 0)}
    chip = small_chip(sb_mib=(x2 + w2) / 2**20)
    modes = {(b.x_sb, b.w_sb) for b in MP.shared_buffer_modes(chip, pb, blk, split)}
    assert modes == {(1, 1), (1, 2), (2, 1), (2, 2)}


def test_h100_large_gemm_reads_far_less_with_l2():
    """8192³ BF16 on h100: 0.4 GB must cross DRAM (A, B, C once). Without the L2 every copy
    and re-read goes to DRAM; with it the reads fall by far more than 4x, and DRAM is no longer
    the limit (the mapper minimises time, not bytes: once the array or the SM's port binds, a
    mapping re-reading some blocks from DRAM is as good as one that does not)."""
    chip = load_chip("h100")
    with_l2 = simulate_gemm(8192, 8192, 8192, chip)
    no_l2 = simulate_gemm(8192, 8192, 8192, dataclasses.replace(chip, shared_buffer=None))
    assert with_l2.dram_read_bytes < no_l2.dram_read_bytes / 4
    assert with_l2.dram_bytes_per_s < 0.8 * chip.dram.peak_bytes_per_s
    assert with_l2.seconds < no_l2.seconds
    assert with_l2.bound == "compute"


def test_shared_buffer_validated():
    from diptych.arch import chip_from_dict, to_dict
    from diptych.arch.schema import ConfigError
    import pytest
    d = to_dict(load_chip("h100"))
    d["shared_buffer"]["capacity_mib"] = 0
    with pytest.raises(ConfigError, match="shared_buffer.capacity_mib"):
        chip_from_dict(d)
    assert SharedBuffer(capacity_mib=1.0, bytes_per_cycle=1.0).capacity_bytes == 2**20


def test_vectorised_table_equals_scalar_rules():
    """candidate_table (vectorised) = candidates() × shared_buffer_modes() (scalar), in order."""
    from diptych.sim.array import array_rates
    for sb in (None, 0.01, 0.5):
        chip = small_chip(8, 4, cores=2, arrays=2, spad_mib=0.25, sb_mib=sb)
        rates = array_rates(chip, "bf16")
        for (m, k, n), df, (pm, pn) in [((100, 37, 65), "os", (2, 2)), ((3, 200, 17), "ws", (1, 4)),
                                        ((64, 64, 1), "is", (4, 1)), ((333, 129, 250), "os", (1, 1))]:
            pb, split = _problem(m, k, n, pm=pm, pn=pn, active=pm * pn)
            pb = MP.orient(_view(m * pm, k, n * pn), df, split, m * pm)
            want = [v for c in MP.candidates(chip, pb, rates, split)
                    for v in MP.shared_buffer_modes(chip, pb, c, split)]
            cs, est, lb = MP.candidate_table(chip, pb, rates, split, 10.0)
            assert list(cs) == want


def _view(m, k, n):
    class V:
        a_dtype = b_dtype = c_dtype = "bf16"
        acc_dtype = "fp32"
        b_is_weight = True
        batch = 1
    v = V()
    v.m, v.k, v.n = m, k, n
    return v
