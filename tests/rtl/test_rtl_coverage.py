"""The bench's corner-class coverage (diptych.rtl.coverage): counts of hand-made plans with known
answers, a claim that fails when its class is absent, and the claims of the bench
configurations (the CLI's and slow tier's set, the amaranth.sim tests' plans) holding."""

import pytest

from diptych.rtl import coverage
from diptych.rtl.bench import earliest_plan, os_plan, os_wrap_plan, ws_plan
from diptych.rtl.plans import make_plan
from diptych.rtl.special_plan import special_plan
from diptych.rtl.verilator import bench_plans
from diptych.sim import timing
from diptych.tools.rtl_cmd import STANDARD_CONFIGS

ONE, NEG_ZERO, INF, NAN, ZERO = 0x3F80, 0x8000, 0x7F80, 0x7FC0, 0x0000


def _fp_plan(late: int = 0):
    """Two BF16 OS 1×2 tiles of one step: 1·[−0, Inf] and 1·[NaN, +0]; the second at the
    earliest legal cycle plus ``late``."""
    cycles = timing.os_schedule(1, 2, [1, 1], start=1)
    cycles[1] = [cycles[1][0] + late]
    tiles = [([[ONE]], [[NEG_ZERO, INF]]), ([[ONE]], [[NAN, ZERO]])]
    return os_plan(1, 2, "bf16", tiles, cycles)


def test_counts_of_hand_made_fp_plans():
    c = coverage.count(_fp_plan())
    # an OS tile starts from +0: +0 + 1·(−0) = +0, so no −0 output
    assert dict(c) == {"bubbles": 0, "back_to_back": 1, "int32_wrap": 0, "zero_out": 2,
                       "neg_zero_out": 0, "inf_out": 1, "nan_out": 1}
    assert coverage.count(_fp_plan(late=1))["back_to_back"] == 0


def test_bubbles_are_idle_cycles_inside_a_tile():
    a, b = [[1, 2, 3]], [[1, 1], [2, 2], [3, 3]]
    plan = os_plan(1, 2, "int8", [(a, b)], [[1, 3, 6]])      # gaps of 1 and 2 cycles
    assert coverage.count(plan)["bubbles"] == 3
    assert coverage.count(earliest_plan(2, 2, "int8", "os", [3, 1, 2]))["bubbles"] == 0


def test_int32_wrap_os_and_ws():
    # 1×2 OS wrap tile: (−128)(−128)·(2¹⁷ + 1024) = 2³¹ + 2²⁴ wraps; (−128)(127)·K does not
    c = coverage.count(os_wrap_plan(1, 2, "int8"))
    assert (c["int32_wrap"], c["bubbles"], c["back_to_back"]) == (1, 0, 0)
    # WS 2×2, one row: partial sums −2³¹ and 5 plus products −2 and +2
    loads, rows = timing.ws_schedule(2, 2, [1])
    tile = ([[1, 1]], [[-1, 1], [-1, 1]], [[2**31, 5]])
    plan = ws_plan(2, 2, "int8", [tile], loads, rows)
    assert coverage.count(plan)["int32_wrap"] == 1


def test_an_inconsistent_plan_is_refused():
    plan = os_wrap_plan(1, 2, "int8")
    cycle = next(iter(plan.expected))
    row, words = plan.expected[cycle]
    plan.expected[cycle] = (row, (words[0] ^ 1,) + words[1:])
    with pytest.raises(ValueError, match="disagrees with the expected bits"):
        coverage.count(plan)


def test_a_claim_fails_when_its_class_is_absent():
    plan = earliest_plan(2, 2, "int8", "os", [3, 1, 2])     # back to back, no bubble
    counts = coverage.total([coverage.count(plan)])
    assert coverage.claim_errors(counts, ("back_to_back",), "int8 os 2x2") == []
    errors = coverage.claim_errors(counts, ("back_to_back", "bubbles"), "int8 os 2x2")
    assert len(errors) == 1
    assert "int8 os 2x2" in errors[0] and "'bubbles'" in errors[0]
    assert "back_to_back 2" in errors[0]


def test_claims_follow_the_plans():
    claims = coverage.claims
    assert claims(8, 8, "int8", "os", random_tiles=10, directed=("special", "os_wrap")) == (
        "bubbles", "back_to_back", "int32_wrap")
    # the INT8 WS special plan of an 8×8 array is one tile: nothing back to back
    assert claims(8, 8, "int8", "ws", directed=("special",)) == ("int32_wrap",)
    assert claims(2, 2, "bf16", "ws", random_tiles=1, directed=("special",)) == (
        "back_to_back", "zero_out", "neg_zero_out", "inf_out", "nan_out")
    assert claims(2, 3, "fused", "os", directed=("special",), modes=["e4m3"]) == (
        "back_to_back", "zero_out", "nan_out")
    assert claims(2, 3, "fused", "os", random_tiles=2, modes=["int8"]) == ("bubbles",)
    assert "inf_out" not in claims(2, 2, "mxdot4", "os", directed=("special",))


@pytest.mark.parametrize("seeds", [(1,), (1, 2, 3)], ids=["cli", "slow-tier"])
def test_the_standard_configurations_keep_their_claims(seeds):
    """`diptych rtl test`'s set (seed 1) and the slow tier's (seeds 1-3), 10 tiles a plan."""
    for r, c, dt, df, directed in STANDARD_CONFIGS:
        counts = coverage.total(coverage.count(p) for _, p in
                                bench_plans(r, c, dt, df, seeds=seeds, tiles=10,
                                            directed=directed))
        claimed = coverage.claims(r, c, dt, df, random_tiles=10, directed=directed)
        assert "bubbles" in claimed
        assert ("back_to_back" in claimed) == ((dt, df) != ("int8", "ws"))   # one special tile
        assert coverage.claim_errors(counts, claimed, f"{dt} {df} {r}x{c}") == []


def test_random_plans_always_have_bubbles():
    """Tile 1 of every random plan has a bubble inside, whatever the seed and datapath."""
    for dt, df, r, c in (("int8", "ws", 1, 1), ("fp8", "os", 1, 1), ("multi", "ws", 2, 3),
                         ("mxdot4", "os", 1, 1)):
        for seed in range(1, 13):
            plan = make_plan(r, c, dt, df, seed=seed, tiles=2)
            assert coverage.count(plan)["bubbles"] >= 1, (dt, df, seed)


def test_special_plans_keep_their_claims():
    for dt, df, r, c in (("int8", "ws", 2, 3), ("bf16", "os", 1, 1), ("fused", "ws", 3, 2),
                         ("dot4", "os", 2, 3), ("mx", "os", 2, 2), ("mxdot4", "ws", 2, 1),
                         ("mxint8", "os", 1, 2), ("mxint8", "ws", 2, 2)):
        plan = special_plan(r, c, dt, df)
        assert coverage.missing(coverage.count(plan),
                                coverage.claims(r, c, dt, df, directed=("special",))) == []


def test_the_run_summary_prints_the_counts_and_claims():
    from diptych.rtl.verilator import BenchResult

    counts = coverage.total([coverage.count(_fp_plan())])
    res = BenchResult(1, 2, "bf16", "os", passed=True, coverage=dict(counts),
                      claims=("back_to_back", "nan_out"))
    assert ("coverage: bubbles 0, back_to_back 1, int32_wrap 0, zero_out 2, neg_zero_out 0, "
            "inf_out 1, nan_out 1 (claimed: back_to_back, nan_out)") in res.summary()


def _mxint8_plan():
    """Four one-step MXINT8 OS 1×1 tiles: (−2)·(−2)·4 at scales 2^127 · 2^127 (exact 2^256:
    saturates to the largest finite), 1·1·4 at 2^-125 · 2^-127 (exact 2^-250: flushed),
    1·1 at 2^0 (exact 1: neither), and a NaN scale (not classed)."""
    from diptych.rtl.mx_bench import mx_os_plan
    tiles = [([[0x80] * 4], [[254]], [[0x80]] * 4, [[254]]),
             ([[64] * 4], [[2]], [[64]] * 4, [[0]]),
             ([[64, 0, 0, 0]], [[127]], [[64]] * 4, [[127]]),
             ([[64] * 4], [[0xFF]], [[64]] * 4, [[127]])]
    cycles = timing.os_schedule(1, 1, [1] * 4, start=1)
    return mx_os_plan(1, 1, tiles, cycles, ["mxint8"] * 4, dtype="mxint8")


def test_rounding_classes_of_a_hand_made_block_scaled_plan():
    c = coverage.count(_mxint8_plan())
    assert {k: c[k] for k in coverage.EXACT_CLASSES} == {
        "inexact_out": 2, "tie_out": 0, "subnormal_exact": 1, "saturated_out": 1}
    assert (c["zero_out"], c["nan_out"]) == (1, 1)
    # the rounding classes are printed for block-scaled plans only
    assert "saturated_out 1" in coverage.describe(c)
    assert "saturated_out" not in coverage.describe(coverage.count(_fp_plan()))


def test_a_tie_of_the_exact_value_is_counted():
    """MXFP8 E5M2 1·1 + 2^-12·2^-12 (scales 1) is exactly half an FP32 ulp above 1: a tie (the
    mx PE rounds it to even, 1.0; the mxdot4 PE truncates it to 1.0); 1 + 2^-23 is not."""
    from diptych.rtl.mx_bench import mx_os_plan
    one, e12, e11 = 0x3C, 0x0C, 0x10                  # E5M2 1, 2^-12, 2^-11
    tie = ([[one, e12, 0, 0]], [[127]], [[one], [e12], [0], [0]], [[127]])
    exact = ([[one, e11, 0, 0]], [[127]], [[one], [e12], [0], [0]], [[127]])
    cycles = timing.os_schedule(1, 1, [1, 1], start=1)
    for dt in ("mx", "mxdot4"):
        plan = mx_os_plan(1, 1, [tie, exact], cycles, ["mxfp8_e5m2"] * 2, dtype=dt)
        c = coverage.count(plan)
        assert (c["tie_out"], c["inexact_out"]) == (1, 1), dt
        assert [plan.expected[cy][1] for cy in sorted(plan.expected)] == [(0x3F800000,),
                                                                        (0x3F800001,)]


def test_block_scaled_claims_include_the_rounding_classes_and_fail_without_them():
    claimed = coverage.claims(1, 1, "mxint8", "os", directed=("special",))
    assert {"inexact_out", "subnormal_exact", "saturated_out"} <= set(claimed)
    assert "tie_out" not in claimed and "neg_zero_out" not in claimed
    assert "tie_out" in coverage.claims(2, 2, "mxint8", "ws", directed=("special",))
    assert "saturated_out" not in coverage.claims(2, 2, "mx", "os", directed=("special",))
    counts = coverage.total([coverage.count(_mxint8_plan())])
    errors = coverage.claim_errors(counts, ("saturated_out", "tie_out"), "mxint8 os 1x1")
    assert len(errors) == 1 and "'tie_out'" in errors[0] and "mxint8 os 1x1" in errors[0]
