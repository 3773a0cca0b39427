"""The bench's reference model, stimulus and scoreboard (pure Python, no simulator), and the
one-contract test: perturbing diptych.sim.timing moves the bench's predictions, and the RTL
then fails the scoreboard."""

from fractions import Fraction

import numpy as np
import pytest

import rtl_fraction_ref as oracle
from diptych.rtl import bench, numerics_ref
from diptych.rtl.bench import (BF16_EDGES, FP8_EDGES, make_plan, os_plan, os_wrap_plan, pack,
                               score, unpack, ws_plan)
from diptych.rtl.pysim import run_plan
from diptych.sim import timing


def _perfect(plan):
    return [(c, row, words) for c, (row, words) in sorted(plan.expected.items())]


def test_pack_roundtrip():
    vals = (0x12, 0xFF, 0x00, 0x80)
    assert unpack(pack(vals, 8), 8, 4) == vals
    assert pack([-1], 8) == 0xFF


@pytest.mark.parametrize("dtype", ["int8", "multi"])
@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_expected_cycles_come_from_sim_timing(dtype, dataflow):
    plan = make_plan(3, 4, dtype, dataflow, seed=3, tiles=6)
    flat = sorted(c for tile in plan.predicted for c in tile)
    assert sorted(plan.expected) == flat
    valid = sorted(c for c, v in plan.inputs.items() if v.get("in_valid"))
    if dataflow == "os":
        steps = [[]]
        for c in valid:
            steps[-1].append(c)
            if plan.inputs[c]["in_last"]:
                steps.append([])
        assert plan.predicted == timing.os_output_cycles(3, 4, steps[:-1])
    else:
        firsts = [i for i, c in enumerate(valid) if plan.inputs[c]["in_first"]]
        rows = [valid[a:b] for a, b in zip(firsts, firsts[1:] + [len(valid)])]
        loads = sorted(c for c, v in plan.inputs.items() if v.get("w_load"))[::3]
        assert plan.predicted == timing.ws_output_cycles(3, 4, loads, rows)


def test_tight_tiles_sit_at_the_schedules_earliest_cycles():
    """Back-to-back tiles of a random plan are exactly where os_schedule / ws_schedule put
    them (the bench asks the contract, it has no issue rule of its own)."""
    plan = make_plan(4, 3, "int8", "os", seed=11, tiles=12)
    lasts = sorted(c for c, v in plan.inputs.items() if v.get("in_last"))
    valid = sorted(c for c, v in plan.inputs.items() if v.get("in_valid"))
    tight = 0
    for prev, last in zip(lasts, lasts[1:]):
        steps = [c for c in valid if prev < c <= last]
        earliest = timing.os_schedule(4, 3, [1, len(steps)], start=prev)[1]
        assert steps[0] >= earliest[0]
        tight += steps == earliest
    assert tight >= 2
    plan = make_plan(3, 2, "bf16", "ws", seed=12, tiles=12)
    firsts = sorted(c for c, v in plan.inputs.items() if v.get("in_first") and v.get("in_valid"))
    loads = sorted(c for c, v in plan.inputs.items() if v.get("w_load"))[::3]
    assert any(w == f + 3 + 2 - 2 for f, w in zip(firsts, loads[1:]))   # at the swap limit


def test_plans_contain_every_mode_edges_bubbles_and_back_to_back_tiles():
    plan = make_plan(4, 4, "bf16", "os", seed=1, tiles=10)
    words = {w for c in plan.inputs.values() for w in unpack(c["a_data"], 16, 4)}
    assert words & set(BF16_EDGES)
    assert plan.bubbles > 0
    lasts = sorted(c for c, v in plan.inputs.items() if v.get("in_last"))
    assert any(b - a == 4 for a, b in zip(lasts, lasts[1:]))      # at the drain limit
    plan = make_plan(3, 3, "multi", "ws", seed=2, tiles=8)
    assert set(plan.modes) == {"int8", "bf16", "e4m3", "e5m2", "e4m3xe5m2", "e5m2xe4m3"}
    plan = make_plan(3, 3, "fp8", "os", seed=2, tiles=20, modes=["e5m2"])
    lanes = {w for c in plan.inputs.values() for w in unpack(c["a_data"], 8, 3)}
    assert lanes & set(FP8_EDGES["e5m2"]) and lanes & {1, 2, 3, 0x81}   # edges, subnormals


def test_bubbles_carry_random_data_and_controls_stay_low():
    plan = make_plan(2, 3, "multi", "ws", seed=5, tiles=4)
    idle = [c for c in range(plan.n_cycles) if c not in plan.inputs]
    assert len(idle) > 10
    vals = [plan.inputs_at(c) for c in idle]
    assert all(v["in_valid"] == 0 and v["w_load"] == 0 for v in vals)
    for port in ("a_data", "psum_data", "w_data"):
        assert len({v[port] for v in vals}) > len(vals) // 2, port
    assert {v["in_first"] for v in vals} == {0, 1} and len({v["mode"] for v in vals}) > 3
    load_only = [c for c, v in plan.inputs.items() if v.get("w_load") and not v.get("in_valid")]
    assert any(plan.inputs_at(c)["a_data"] != 0 for c in load_only)
    assert plan.inputs_at(idle[0]) == make_plan(2, 3, "multi", "ws", seed=5,
                                                tiles=4).inputs_at(idle[0])
    zero = make_plan(2, 3, "multi", "ws", seed=5, tiles=4, bubble_data="zero")
    assert all(v == 0 for v in zero.inputs_at(idle[0]).values())


def test_underflow_tiles_cancel_into_the_subnormal_range():
    """The bf16 underflow regime: exact partial sums fall below 2^-126 (nonzero), so the
    contract flushes them; the golden model's results there are signed zeros."""
    rng = np.random.default_rng(7)
    a, b = bench._underflow_pair(rng, 4, 6, 3)
    sub = 0
    for i in range(4):
        for j in range(3):
            exact = sum(oracle.fp32_value(int(numerics_ref.bf16_mul_bits(a[i, k], b[k, j])))
                        for k in range(6))
            sub += 0 < abs(exact) < Fraction(2) ** -126
    assert sub >= 4
    out = numerics_ref.bf16_matmul_bits(a, b)
    assert np.sum((out & 0x7FFFFFFF) == 0) >= sub


def test_os_wrap_plan_sums_leave_the_int32_range():
    plan = os_wrap_plan(2, 4, "int8")
    assert len(plan.runs) == 1 and plan.runs[0][1] - plan.runs[0][0] > 2**17 - 10
    words = [w for _, ws in plan.expected.values() for w in ws]
    as_int = np.array(words, np.uint32).view(np.int32)
    assert (as_int < 0).any() and (as_int > 0).any()
    # row 0 is −128·(−128)·K = 2^14·(2^17 + 1024): wrapped mod 2^32
    assert int(as_int[0]) == ((2**14 * (2**17 + 1024) + 2**31) % 2**32) - 2**31
    segs = list(plan.segments())
    assert sum(n for _, n, _ in segs) == plan.n_cycles and len(segs) < 200
    multi = os_wrap_plan(1, 2, "multi")
    assert multi.runs[0][1] - multi.runs[0][0] == (2**17 + 1024) // 2 - 2   # 2 MACs per step


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
    first = numerics_ref.bf16_matmul_bits(a[:, :R], w[:R])
    loads, rows = timing.ws_schedule(R, C, [M, M])
    plan = ws_plan(R, C, "bf16", [(a[:, :R], w[:R], None), (a[:, R:], w[R:], first)],
                   loads, rows)
    last_tile = [plan.expected[c][1] for c in plan.predicted[1]]
    assert np.array_equal(np.array(last_tile, np.uint32), numerics_ref.bf16_matmul_bits(a, w))


def test_plan_rejects_illegal_schedules_shapes_and_modes():
    a = np.ones((2, 1), np.int8)
    b = np.ones((1, 2), np.int8)
    with pytest.raises(ValueError, match="less than R=2"):
        os_plan(2, 2, "int8", [(a, b), (a, b)], [[0], [1]])
    with pytest.raises(ValueError, match="A must be 2×K and B K×2"):
        os_plan(2, 2, "int8", [(a.T, b)], [[0]])
    with pytest.raises(ValueError, match="swap wave"):
        ws_plan(2, 2, "int8", [(a.T, b.T.repeat(2, 1), None)] * 2, [0, 3], [[2], [5]])
    with pytest.raises(ValueError, match="tiles must be a positive integer"):
        make_plan(2, 2, "int8", "os", tiles=0)
    with pytest.raises(ValueError, match="takes 1 steps, but 2 step cycles"):
        os_plan(2, 2, "multi", [(a.repeat(2, 1), b.repeat(2, 0))], [[0, 1]], ["int8"])
    with pytest.raises(ValueError, match="'e4m3' is not a mode of the int8 datapath"):
        make_plan(2, 2, "int8", "os", modes=["e4m3"])
    with pytest.raises(ValueError, match="'mxfp4' is not a block-scaled format of the multi"):
        make_plan(2, 2, "multi", "os", modes=["mxfp4"])
    with pytest.raises(ValueError, match="several modes"):
        os_plan(2, 2, "fp8", [(a.view(np.uint8), b.view(np.uint8))], [[0]])


def test_rate_helpers_of_the_contract():
    """os_steps / ws_stationary_depth: K → ⌈K/n⌉ steps and n·R stationary rows, as the engine
    treats macs_per_pe_per_cycle (n < 1: each step stretched to 1/n cycles)."""
    assert [timing.os_steps(k, 2) for k in (1, 2, 7, 8)] == [1, 1, 4, 4]
    assert timing.os_steps(5, 1) == 5 and timing.os_steps(5, 0.25) == 20
    assert timing.ws_stationary_depth(4, 2) == 8 and timing.ws_stationary_depth(4, 0.5) == 4
    with pytest.raises(ValueError, match="k must be a positive integer, not 0"):
        timing.os_steps(0, 2)
    with pytest.raises(ValueError, match="macs_per_pe_per_cycle must be > 0, not 0"):
        timing.ws_stationary_depth(4, 0)


# ---- one contract: the bench's timeline is diptych.sim.timing's --------------------------

def _late(fn):
    """A perturbed contract: every output one cycle later than the real one."""
    return lambda *args, **kw: [[c + 1 for c in tile] for tile in fn(*args, **kw)]


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_perturbed_output_latency_moves_the_predictions_and_the_rtl_fails(dataflow,
                                                                          monkeypatch):
    real = make_plan(2, 3, "bf16", dataflow, seed=9, tiles=4)
    assert score(real, run_plan(real)) == []
    name = f"{dataflow}_output_cycles"
    monkeypatch.setattr(timing, name, _late(getattr(timing, name)))
    moved = make_plan(2, 3, "bf16", dataflow, seed=9, tiles=4)
    assert sorted(moved.expected) == [c + 1 for c in sorted(real.expected)]
    errors = score(moved, run_plan(moved))
    assert any("out_valid was low" in e for e in errors)


def test_perturbed_issue_rule_moves_the_stimulus(monkeypatch):
    """A stricter drain rule in os_schedule (one more cycle between tiles): the bench's tiles
    move with it, the predicted outputs follow, and the (unchanged) RTL still meets them."""
    real = make_plan(3, 2, "int8", "os", seed=10, tiles=6)
    orig = timing.os_schedule

    def stricter(rows, cols, k_per_tile, start=0):
        return orig(rows + 1, cols, k_per_tile, start)
    monkeypatch.setattr(timing, "os_schedule", stricter)
    moved = make_plan(3, 2, "int8", "os", seed=10, tiles=6)
    assert sorted(moved.inputs) != sorted(real.inputs)
    assert max(moved.expected) > max(real.expected)
    assert score(moved, run_plan(moved)) == []


def test_too_eager_issue_rule_is_refused_by_the_contract(monkeypatch):
    """os_schedule promising one cycle more than the drain allows: os_output_cycles (the same
    contract) rejects the plan (test_rtl_array_sim shows the RTL corrupting such a tile)."""
    orig = timing.os_schedule
    monkeypatch.setattr(timing, "os_schedule",
                        lambda rows, cols, k, start=0: orig(rows - 1, cols, k, start))
    with pytest.raises(ValueError, match="less than R=3"):
        for seed in range(20):
            make_plan(3, 2, "int8", "os", seed=seed, tiles=8)


# ---- the fused datapath: plans follow its accumulation rule --------------------------------

@pytest.mark.parametrize("dtype, dataflow, wrong_rule", [("fused", "os", "sequential"),
                                                         ("multi", "ws", "pair")])
def test_plans_are_scored_by_the_datapaths_rule(dtype, dataflow, wrong_rule, monkeypatch):
    """The golden bits of a plan follow Datapath.rule: each PE passes its own plans and fails
    the same stimulus scored by the other rule (the stimulus tells the rules apart)."""
    import dataclasses

    from diptych.rtl import datapath
    plan = make_plan(2, 3, dtype, dataflow, seed=4, tiles=8)
    assert score(plan, run_plan(plan)) == []
    monkeypatch.setitem(datapath.DATAPATHS, dtype,
                        dataclasses.replace(datapath.DATAPATHS[dtype], rule=wrong_rule))
    other = make_plan(2, 3, dtype, dataflow, seed=4, tiles=8)
    assert sorted(other.expected) == sorted(plan.expected)
    assert score(other, run_plan(other)) != []


def test_cancel_tiles_leave_a_residue_far_below_the_largest_operand():
    """X, t, −X, τ: the accumulator X + t cancels X, and τ lies 2⁴⁰ or more below X for
    E5M2 × E5M2, so the exact sum needs a window wider than 40 bits (the fused adder's 51)."""
    rng = np.random.default_rng(3)
    a, b = bench._cancel_pair(rng, "e5m2", "e5m2", 2, 8, 3)
    p = [numerics_ref.fp8_mul_bits(a[:, k][:, None], b[k][None, :], "e5m2", "e5m2").view(np.float32)
         for k in range(8)]
    assert np.array_equal(p[2], -p[0]) and np.array_equal(p[6], -p[4])
    assert np.all(np.abs(p[0]) / np.abs(p[3]) >= 2.0**40)
    assert np.all((np.abs(p[1]) < np.abs(p[0]) * 2.0**-11) & (p[1] != 0))


def test_sticky_tiles_separate_the_rules():
    """X, 0, h, τ: an output of an E5M2 sticky-tie tile differs between the pair rule and
    one-at-a-time rounding exactly when τ has X's sign (X + h is an exact tie that only τ,
    2⁻⁶³ of X, breaks; against X's sign the exact sum rounds back to X either way)."""
    rng = np.random.default_rng(4)
    a, b = bench._sticky_pair(rng, "e5m2", "e5m2", 8, 4, 2)
    pair = numerics_ref.matmul_bits("e5m2", a, b, rule="pair")
    seq = numerics_ref.matmul_bits("e5m2", a, b)
    ties = numerics_ref.fp32_add_bits(numerics_ref.fp8_mul_bits(a[:, :1], b[:1], "e5m2", "e5m2"),
                                numerics_ref.fp8_mul_bits(a[:, 2:3], b[2:3], "e5m2", "e5m2"))
    assert np.array_equal(seq, ties)                 # τ is lost one at a time
    with_x = ((a[:, 3] ^ a[:, 0]) & 0x80) == 0       # τ's sign (A's part) is X's
    assert 0 < with_x.sum() < len(with_x)
    assert np.array_equal(pair != seq, np.repeat(with_x[:, None], 2, 1))
