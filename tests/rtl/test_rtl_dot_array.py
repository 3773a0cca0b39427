"""Fast tier: arrays of the dot4 FP8 dot-product PE (the PE the presets' FP8 area coefficient
comes from) in amaranth.sim, every output bit for bit against the dot4 golden rule
(:func:`diptych.rtl.dot_ref.dot_matmul_bits`) and in the cycle :mod:`diptych.sim.timing`
predicts at four MACs per PE per cycle. The slow tier runs a WS array on Verilator
(``STANDARD_CONFIGS``)."""

import numpy as np
import pytest
from amaranth.hdl import Fragment

from diptych.rtl.array import SystolicArray
from diptych.rtl.bench import make_plan, os_plan, score, ws_plan
from diptych.rtl.datapath import get_datapath
from diptych.rtl.dot import Dot4Fp8
from diptych.rtl.dot_ref import dot_matmul_bits
from diptych.rtl.numerics_ref import mode_formats
from diptych.rtl.pe import Mac, make_mac
from diptych.rtl.pysim import run_plan
from diptych.rtl.special_plan import special_plan
from diptych.sim import timing


def _fp8(rng, shape, lo=0x20, hi=0x50):
    """Moderate FP8 codes of random sign (either format reads them as finite numbers)."""
    return (rng.integers(lo, hi, shape) | (rng.integers(0, 2, shape) << 7)).astype(np.uint8)


def test_init_dot4_arrays():
    """32-bit operand lanes (four FP8 elements), the FP8 mode port, 32-bit outputs."""
    os_ = SystolicArray(2, 3, "dot4", "os")
    Fragment.get(os_, None)                 # it elaborates
    assert len(os_.a_data.as_value()) == 2 * 32 and len(os_.b_data.as_value()) == 3 * 32
    assert len(os_.mode) == 3 and len(os_.out_data.as_value()) == 3 * 32
    ws = SystolicArray(1, 2, "dot4", "ws")
    Fragment.get(ws, None)
    assert len(ws.w_data.as_value()) == 2 * 32 and len(ws.psum_data.as_value()) == 2 * 32
    mac = make_mac("dot4")                     # the unit `rtl area` synthesises as the MAC
    Fragment.get(mac, None)
    assert isinstance(mac, Dot4Fp8)
    with pytest.raises(ValueError, match="the dot4 datapath's MAC is diptych.rtl.dot.Dot4Fp8"):
        Mac("dot4")
    dp = get_datapath("dot4")
    assert dp.modes == ("e4m3", "e5m2", "e4m3xe5m2", "e5m2xe4m3") and dp.rule == "dot4"
    assert {dp.macs_per_cycle(m) for m in dp.modes} == {4}


@pytest.mark.parametrize("rows, cols, dataflow", [(2, 3, "os"), (3, 2, "ws")])
def test_random_plans(rows, cols, dataflow, monkeypatch):
    """Every FP8 mode, OS depths around R steps of four K each (K not a multiple of 4 padded
    with +0), WS tiles of 4R-deep weights with partial sums (chains of passes among them), the
    earliest legal cycles and bubbles with random data. The same stimulus scored by the pair
    rule expects other bits: the plans tell the dot4 rule from an exact one."""
    import dataclasses

    from diptych.rtl import datapath

    plan = make_plan(rows, cols, "dot4", dataflow, seed=2, tiles=6)
    observed = run_plan(plan)
    assert score(plan, observed) == [] and len(observed) == len(plan.expected)
    assert set(plan.modes) == set(get_datapath("dot4").modes)
    monkeypatch.setitem(datapath.DATAPATHS, "dot4",
                        dataclasses.replace(datapath.DATAPATHS["dot4"], rule="pair"))
    exact = make_plan(rows, cols, "dot4", dataflow, seed=2, tiles=6)
    assert sorted(exact.expected) == sorted(plan.expected)
    assert score(exact, observed) != []


def test_os_tile_of_k_takes_ceil_k_over_4_steps(mode="e5m2xe4m3"):
    """An isolated OS tile of K = 7 is 2 steps (the second half padded): it takes
    ``os_isolated_cycles(R, C, ceil(K/4))`` cycles, rows leave bottom first, and C is the dot4
    golden reduction of the K-deep tile, computed here straight from the codes."""
    R, C, K = 3, 2, 7
    rng = np.random.default_rng(7)
    a, b = _fp8(rng, (R, K)), _fp8(rng, (K, C))
    steps = timing.os_steps(K, 4)
    assert steps == 2
    plan = os_plan(R, C, "dot4", [(a, b)], [list(range(steps))], [mode])
    observed = run_plan(plan)
    assert score(plan, observed) == []
    assert observed[-1][0] + 1 == timing.os_isolated_cycles(R, C, steps) == steps + 2 * R + C - 2
    assert [row for _, row, _ in observed] == list(range(R - 1, -1, -1))
    got = {row: list(words) for _, row, words in observed}
    assert [got[i] for i in range(R)] == dot_matmul_bits(a, b, *mode_formats(mode)).tolist()


def test_ws_holds_4r_weights_and_chains_bit_exactly():
    """Each WS PE holds four weights (a 4R-deep stationary tile); two passes chained through
    the top-edge partial sums, back to back at the contract's earliest cycles, equal one
    K = 8R reduction by the dot4 rule bit for bit."""
    R, C, M = 2, 3, 3
    D = timing.ws_stationary_depth(R, 4)
    assert D == 8
    rng = np.random.default_rng(8)
    a, w = _fp8(rng, (M, 2 * D)), _fp8(rng, (2 * D, C))
    first = dot_matmul_bits(a[:, :D], w[:D], "e5m2", "e4m3")
    loads, rows = timing.ws_schedule(R, C, [M, M])
    plan = ws_plan(R, C, "dot4", [(a[:, :D], w[:D], None), (a[:, D:], w[D:], first)],
                   loads, rows, ["e5m2xe4m3"] * 2)
    observed = run_plan(plan)
    assert score(plan, observed) == []
    assert observed[-1][0] + 1 == timing.ws_sequence_cycles(R, C, [M, M])
    last = [list(plan.expected[c][1]) for c in plan.predicted[1]]
    assert last == dot_matmul_bits(a, w, "e5m2", "e4m3").tolist()


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_the_special_plan_on_a_dot4_array(dataflow):
    """The directed special-value steps of every FP8 mode at four MACs per step (signed zeros
    in every lane, subnormals, E5M2 Inf, NaNs, format maxima, sums stopped at FLT_MAX), back to
    back: OS through A and B (one step per 1×2 tile), WS through the partial sum too."""
    plan = special_plan(1, 2, "dot4", dataflow, seed=2)
    assert set(plan.modes) == set(get_datapath("dot4").modes)
    assert score(plan, run_plan(plan)) == []


def test_a_short_last_group_is_padded_with_plus_zero_products():
    """K = 3: the PE's fourth lane holds +0 × +0, so −0 products on a −0 accumulator give +0
    (a full group of −0 terms stays −0), and the golden says the same without being padded by
    its caller."""
    neg = np.array([[0x80] * 4], np.uint8)                    # −0 in A, +0 in B: −0 products
    pos = np.zeros((4, 1), np.uint8)
    acc = np.array([[0x80000000]], np.uint32)
    assert dot_matmul_bits(neg, pos, init_bits=acc)[0, 0] == 0x80000000
    assert dot_matmul_bits(neg[:, :3], pos[:3], init_bits=acc)[0, 0] == 0
