"""Weight tiles narrower than the array pad to the array (the TPU v1 lesson, issue 9 item 5):
a 600×600 layer on TPU v1's 256×256 weight-stationary array shifts and holds whole 256-wide
tiles, so it takes 3 × 3 = 9 weight tiles' time, not the 5.5 tiles its weights fill.

What the engine charges, checked here against the hand count: every fold (one stationary
weight tile) takes the full weight shift and period of a 256×256 tile whatever its width, and
``ceil`` folds per block; the DRAM and scratchpad bytes are the layer's own (the weights are
stored unpadded and the zeros of a partial tile are not moved: the array shifts them in as
padding)."""

from diptych.arch import load_chip
from diptych.sim import engine as E
from diptych.sim import mapper as MP

from simtest_helpers import one_array_run


def test_600x600_on_tpu_v1_hand_count():
    chip = load_chip("tpu-v1")
    R = C = 256
    m = 200                                         # MLP0's batch
    out, pb, rates, split = one_array_run(chip, m, 600, 600, "ws", m, 600, 600, dtype="int8")
    assert rates.stationary_rows == R
    folds = -(-600 // R) * -(-600 // C)             # 3 × 3 whole weight tiles
    assert out[E.O_FOLDS] == folds
    assert out[E.O_BUSY] == folds * m               # each fold streams the 200 rows
    # WS timeline (sim/timing.py): the first row enters at R (weights from cycle 0); a fold
    # follows the previous after max(me, 2R + C − 2) = 766 cycles (a full tile's shift, even
    # for the 88-wide and 88-deep edge tiles); the last output leaves R + C − 1 after the last
    # row
    period = max(m, 2 * R + C - 2)
    hand = R + (folds - 1) * period + (m - 1) + (R + C - 1) + 1
    assert out[E.O_CYCLES] == hand == 7095
    assert MP.compute_cycles(chip, pb, MP.Blocks(m, 600, 600, 0), rates) == hand
    # MAC utilisation: the padding costs 1 − 5.49 / 9 of the folds before any other loss
    assert 600 * 600 / (folds * R * C) == 0.6103515625
    # bytes: the layer's own (int8): X 200×600, W 600×600, C 200×600 at int8
    mem, _, _, _ = one_array_run(chip, m, 600, 600, "ws", m, 600, 600, dtype="int8",
                                 memory=True)
    assert mem[E.O_DRAM_RD] == 200 * 600 + 600 * 600
    assert mem[E.O_DRAM_WR] == 200 * 600
