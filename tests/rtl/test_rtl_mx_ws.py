"""Weight-stationary arrays with block scales (diptych.rtl.mx_ws): ``WsPe("mxdot4")`` and
``WsPe("mxint8")`` with the E8M0 scales travelling in the stationary weights' lanes and in the
streamed A rows' lanes, bit for bit against the goldens and cycle for cycle against
sim/timing.py's WS formulas (amaranth.sim, small arrays), and bad input (fast tier). The
engine's WS cycles against the bench's: test_rtl_mx.py (one subprocess for OS and WS)."""

import numpy as np
import pytest

from diptych.rtl.array import SystolicArray, check_config
from diptych.rtl.datapath import MXFP8_MODES, get_datapath
from diptych.rtl.mx_ws import make_mx_ws_plan, mx_ws_earliest_plan, mx_ws_plan, mx_ws_special_plan
from diptych.rtl.plan import score
from diptych.rtl.pysim import run_plan
from diptych.sim import timing


def test_mxdot4_ws_random_plan():
    """A random WS plan on a 2×1 mxdot4 array: every mode (MXFP8, MXFP6, MXFP4), the next
    tile's weights and scales loading while tile 1 streams, bubbles with random data, shallow
    tiles padded with +0, scale regimes with NaN scales, chains of partial sums (K > 4R)."""
    plan = make_mx_ws_plan(2, 1, seed=2, tiles=7, dtype="mxdot4")
    assert set(plan.modes) == set(get_datapath("mxdot4").modes)
    assert score(plan, run_plan(plan)) == []


def test_mxdot4_ws_directed_plan_with_accumulators():
    """The directed block cases in WS on a 2×2 array (MXFP8 E5M2 only, to keep the fast
    tier fast; every mode: `diptych rtl test --dtype mxdot4 --dataflow ws`): each case's
    accumulator is its row's partial sum (−0, subnormal, Inf and NaN among them), cases longer
    than 4R = 8 elements run as chains of tiles."""
    plan = mx_ws_special_plan(2, 2, ("mxfp8_e5m2",), dtype="mxdot4")
    assert score(plan, run_plan(plan)) == []


def test_the_scales_travel_with_their_lanes():
    """An isolated WS tile on a 2×1 mxdot4 array (depth 8, blocks of 4: each PE row its own
    block): the outputs appear at ws_output_cycles and equal the exact sums with each PE row's
    own pair of scales, computed here from the element values (no golden model)."""
    R, C, M = 2, 1, 3
    one, two = 0x38, 0x40                                  # E4M3 1.0 and 2.0
    a = np.full((M, 8), one)
    w = np.full((8, C), two)
    sa = np.array([[127, 130]] * M)                         # the row's blocks: 1 and 8
    sw = np.array([[126], [129]])                           # W's blocks: 1/2 and 4
    loads, rows = timing.ws_schedule(R, C, [M], start=1)
    plan = mx_ws_plan(R, C, [(a, sa, w, sw, None)], loads, rows, ["mxfp8_e4m3"], block=4)
    obs = run_plan(plan)
    assert score(plan, obs) == []
    assert [c for c, _, _ in obs] == timing.ws_output_cycles(R, C, loads, rows)[0]
    want = 8 * (2.0 ** (127 + 126 - 254) + 2.0 ** (130 + 129 - 254))   # 4 products of 2 a block
    got = [np.array(words, np.uint32).view(np.float32).tolist() for _, _, words in obs]
    assert got == [[want]] * M


def test_earliest_plan_follows_the_stated_latency(monkeypatch):
    """The WS plans take the block-scale latency from sim/timing.py too."""
    plan = mx_ws_earliest_plan(2, 1, [2, 2], "mxint8", dtype="mxint8")
    monkeypatch.setattr(timing, "BLOCK_SCALE_EXTRA_CYCLES", 1)
    late = mx_ws_earliest_plan(2, 1, [2, 2], "mxint8", dtype="mxint8")
    assert sorted(late.expected) == [c + 1 for c in sorted(plan.expected)]


@pytest.mark.parametrize("call, message", [
    (lambda: check_config(2, 2, "mx", "ws"), "the mx datapath is output-stationary only"),
    (lambda: SystolicArray(2, 2, "mx", "ws"), "output-stationary only"),
    (lambda: mx_ws_plan(2, 2, [(np.zeros((1, 9)), np.zeros((1, 1)), np.zeros((9, 2)),
                                np.zeros((1, 2)), None)], [1], [[3]], ["mxint8"],
                        dtype="mxint8"), "W D×2 (D ≤ 8)"),
    (lambda: mx_ws_plan(2, 2, [(np.zeros((1, 8)), np.zeros((1, 2)), np.zeros((8, 2)),
                                np.zeros((1, 2)), None)], [1], [[3]], ["mxint8"],
                        dtype="mxint8"), "A_s 1×ceil(D/32)"),
    (lambda: mx_ws_plan(2, 2, [], [1], [], [], dtype="mxdot4"), "one mode, load cycle"),
    (lambda: make_mx_ws_plan(2, 2, dtype="mxdot4", block=6), "not 6"),
    (lambda: make_mx_ws_plan(2, 2, dtype="mxdot4", modes=["mxint8"]),
     "'mxint8' is not a block-scaled format of the mxdot4 datapath"),
    (lambda: mx_ws_earliest_plan(2, 2, [], MXFP8_MODES[0]), "sizes must be a non-empty list"),
])
def test_bad_input_names_the_value(call, message):
    with pytest.raises(ValueError) as exc:
        call()
    assert message in str(exc.value)
