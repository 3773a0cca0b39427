"""Known answers straight from the array-timing contract (design.md §4)."""

import pytest

from diptych.sim import engine as E
from diptych.sim import timing as T

from simtest_helpers import one_array_run, small_chip


@pytest.mark.parametrize("R,C,K", [(4, 4, 4), (8, 8, 3), (8, 4, 20), (16, 8, 16)])
def test_os_isolated_tile(R, C, K):
    chip = small_chip(R, C)
    out, *_ = one_array_run(chip, R, K, C, "os", R, K, C)
    assert out[E.O_CYCLES] == T.os_isolated_cycles(R, C, K) == K + 2 * R + C - 2


@pytest.mark.parametrize("R,C,M", [(4, 4, 1), (8, 8, 3), (8, 4, 20)])
def test_ws_isolated_tile(R, C, M):
    chip = small_chip(R, C)
    out, *_ = one_array_run(chip, M, R, C, "ws", M, R, C)
    assert out[E.O_CYCLES] == T.ws_isolated_cycles(R, C, M) == 2 * R + C + M - 1


@pytest.mark.parametrize("R,C,K,tiles", [(4, 4, 2, 3), (4, 4, 9, 4), (8, 8, 8, 5)])
def test_os_back_to_back(R, C, K, tiles):
    chip = small_chip(R, C)
    out, *_ = one_array_run(chip, R * tiles, K, C, "os", R * tiles, K, C)
    assert out[E.O_CYCLES] == T.os_sequence_cycles(R, C, [K] * tiles)
    sched = T.os_schedule(R, C, [K] * tiles)
    last = T.os_output_cycles(R, C, sched)[-1][0]
    assert out[E.O_CYCLES] == last + 1


@pytest.mark.parametrize("R,C,M,tiles", [(4, 4, 2, 3), (4, 4, 30, 2), (8, 4, 5, 4)])
def test_ws_back_to_back(R, C, M, tiles):
    chip = small_chip(R, C)
    out, *_ = one_array_run(chip, M, R, C * tiles, "ws", M, R, C * tiles)
    assert out[E.O_CYCLES] == T.ws_sequence_cycles(R, C, [M] * tiles)
    loads, rows = T.ws_schedule(R, C, [M] * tiles)
    assert out[E.O_CYCLES] == T.ws_output_cycles(R, C, loads, rows)[-1][-1] + 1


def test_ragged_edges_keep_the_timeline():
    # 10x7 output on a 4x4 OS array: 3x2 folds, ragged ones use fewer PEs but the same timeline
    chip = small_chip(4, 4)
    out, *_ = one_array_run(chip, 10, 5, 7, "os", 10, 5, 7)
    assert out[E.O_FOLDS] == 6
    assert out[E.O_CYCLES] == T.os_sequence_cycles(4, 4, [5] * 6)
    # ragged K across blocks: K = 11 in blocks of 4 -> depths 4, 4, 3
    out, *_ = one_array_run(chip, 4, 11, 4, "os", 4, 4, 4)
    assert out[E.O_CYCLES] == T.os_sequence_cycles(4, 4, [4, 4, 3])


def test_input_stationary_is_transposed_ws():
    chip = small_chip(4, 4)
    a, *_ = one_array_run(chip, 7, 4, 3, "is", 3, 4, 7)
    b, *_ = one_array_run(chip, 3, 4, 7, "ws", 3, 4, 7)
    assert a[E.O_CYCLES] == b[E.O_CYCLES]


def test_multi_rate_dtypes():
    # int4 at 2 MACs/PE/cycle halves the OS depth; bf16 at 1/4 rate (infer-2026) quadruples it
    chip = small_chip(4, 4, base="infer-2026")
    out, *_ = one_array_run(chip, 4, 16, 4, "os", 4, 16, 4, dtype="int4")
    assert out[E.O_CYCLES] == T.os_isolated_cycles(4, 4, 8)
    out, *_ = one_array_run(chip, 4, 16, 4, "os", 4, 16, 4, dtype="bf16")
    assert out[E.O_CYCLES] == T.os_isolated_cycles(4, 4, 64)


def test_mapper_closed_form_equals_memory_free_engine():
    import random
    from diptych.sim import mapper as MP
    rng = random.Random(3)
    for _ in range(100):
        R, C = rng.choice([2, 4, 8]), rng.choice([2, 4, 8])
        # the WS weight-install path: the systolic default, or p rows per cycle with either swap
        chip = small_chip(R, C, load_rows=rng.choice([1, 1, 2, 3, 8]),
                          swap=rng.choice(["wave", "global"]))
        m, k, n = rng.randint(1, 50), rng.randint(1, 50), rng.randint(1, 50)
        df = rng.choice(["os", "ws", "is"])
        out, pb, rates, split = one_array_run(chip, m, k, n, df, 1, 1, 1)
        blk = MP.Blocks(min(pb.m, R * rng.randint(1, 3)), min(pb.k, R * rng.randint(1, 3)),
                        min(pb.n, C * rng.randint(1, 3)), rng.randint(0, 1))
        from diptych.sim.gemm import run_engine
        o, _, _ = run_engine(chip, pb, blk, rates, split, False)
        assert o[E.O_CYCLES] == MP.compute_cycles(chip, pb, blk, rates)


def test_candidate_table_matches_scalar_closed_forms():
    from diptych.sim import mapper as MP
    chip = small_chip(8, 4, cores=2, arrays=2, spad_mib=0.25)
    for (m, k, n), df in [((100, 37, 65), "os"), ((3, 200, 17), "ws"), ((64, 64, 1), "is")]:
        out, pb, rates, split = one_array_run(chip, m, k, n, df, 1, 1, 1)
        cs, est, lb = MP.candidate_table(chip, pb, rates, split, 10.0)
        for i, blk in enumerate(cs):
            comp = MP.compute_cycles(chip, pb, blk, rates)
            tr = MP.traffic_bytes(pb, blk)
            assert cs.periods[i] == MP.period_cycles(chip, pb, blk, rates)
            edge = MP.edge_cycles(chip, pb, blk, 10.0)
            assert edge >= MP.edge_bytes(pb, blk) / 10.0 / 2
            assert lb[i] >= max(comp + edge, tr / 10.0)
            assert lb[i] == pytest.approx(comp + edge, rel=1e-12) or lb[i] >= tr / 10.0
