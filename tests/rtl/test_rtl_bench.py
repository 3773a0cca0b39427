"""The bench's reference model and scoreboard (pure Python, no simulator)."""

import numpy as np
import pytest

from diptych.rtl import golden
from diptych.rtl.bench import BF16_EDGES, make_plan, os_plan, pack, score, unpack, ws_plan
from diptych.sim import timing


def _perfect(plan):
    return [(c, row, words) for c, (row, words) in sorted(plan.expected.items())]


def test_pack_roundtrip():
    vals = (0x12, 0xFF, 0x00, 0x80)
    assert unpack(pack(vals, 8), 8, 4) == vals
    assert pack([-1], 8) == 0xFF


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_expected_cycles_come_from_sim_timing(dataflow):
    plan = make_plan(3, 4, "int8", dataflow, seed=3, tiles=5)
    flat = sorted(c for tile in plan.predicted for c in tile)
    assert sorted(plan.expected) == flat
    if dataflow == "os":
        steps = [[]]
        for c in sorted(plan.inputs):
            steps[-1].append(c)
            if plan.inputs[c]["in_last"]:
                steps.append([])
        assert plan.predicted == timing.os_output_cycles(3, 4, steps[:-1])


def test_plans_contain_edges_bubbles_and_back_to_back_tiles():
    plan = make_plan(4, 4, "bf16", "os", seed=1, tiles=10)
    words = {w for c in plan.inputs.values() for w in unpack(c["a_data"], 16, 4)}
    assert words & set(BF16_EDGES)
    assert plan.bubbles > 0
    lasts = sorted(c for c, v in plan.inputs.items() if v.get("in_last"))
    assert any(b - a == 4 for a, b in zip(lasts, lasts[1:]))      # at the drain limit


def test_score_accepts_the_plan_itself():
    plan = make_plan(2, 2, "bf16", "ws", seed=2, tiles=4)
    assert score(plan, _perfect(plan)) == []


def test_score_reports_late_wrong_missing_and_extra_outputs():
    plan = make_plan(2, 3, "int8", "os", seed=4, tiles=3)
    obs = _perfect(plan)
    c0, row0, w0 = obs[0]
    late = [(c0 + 1, row0, w0)] + obs[1:]
    assert any("out_valid was low" in e for e in score(plan, late))
    flipped = [(c0, row0, (w0[0] ^ 1,) + w0[1:])] + obs[1:]
    assert any("columns [0]" in e for e in score(plan, flipped))
    wrong_row = [(c0, row0 ^ 1, w0)] + obs[1:]
    assert any("out_row" in e for e in score(plan, wrong_row))
    extra = obs + [(plan.n_cycles - 1, 0, w0)]
    assert any("unexpected output" in e for e in score(plan, extra))


def test_ws_chain_keeps_one_accumulation_order():
    """Two WS passes chained through the top-edge partial sums equal one K = 2R reduction."""
    R, C, M = 2, 2, 3
    rng = np.random.default_rng(5)
    a = rng.integers(0x3E00, 0x4100, (M, 2 * R)).astype(np.uint16)
    w = rng.integers(0x3E00, 0x4100, (2 * R, C)).astype(np.uint16)
    first = golden.bf16_matmul_bits(a[:, :R], w[:R])
    loads, rows = timing.ws_schedule(R, C, [M, M])
    plan = ws_plan(R, C, "bf16", [(a[:, :R], w[:R], None), (a[:, R:], w[R:], first)],
                   loads, rows)
    last_tile = [plan.expected[c][1] for c in plan.predicted[1]]
    assert np.array_equal(np.array(last_tile, np.uint32), golden.bf16_matmul_bits(a, w))


def test_plan_rejects_illegal_schedules_and_shapes():
    a = np.ones((2, 1), np.int8)
    b = np.ones((1, 2), np.int8)
    with pytest.raises(ValueError, match="less than R=2"):
        os_plan(2, 2, "int8", [(a, b), (a, b)], [[0], [1]])
    with pytest.raises(ValueError, match="A must be 2×1"):
        os_plan(2, 2, "int8", [(a.T, b)], [[0]])
    with pytest.raises(ValueError, match="swap wave"):
        ws_plan(2, 2, "int8", [(a.T, b.T.repeat(2, 1), None)] * 2, [0, 3], [[2], [5]])
    with pytest.raises(ValueError, match="tiles must be a positive integer"):
        make_plan(2, 2, "int8", "os", tiles=0)
