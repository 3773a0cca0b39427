"""The WS weight-install path (core.array.weight_load_rows_per_cycle, weight_swap).

Known answers worked out by hand from the rule (sim/timing.py docstring): a tile's weights take
``I = ceil(R / p)`` cycles to install; with the swap wave the next install starts ``R + C − 2``
after the tile's first row, with a global swap in that cycle; a row leaves ``R + C − 1`` after
it enters. The defaults (p = 1, wave) are today's systolic rules exactly.
"""


import pytest

from diptych.arch import load_chip
from diptych.sim import engine as E
from diptych.sim import mapper as MP
from diptych.sim import timing as T

from simtest_helpers import one_array_run, small_chip


# R = C = 4, two column folds of one streamed row each (a batch-1 GEMV, K = 4, N = 8):
#   p = 1, wave:   rows at 4 and 4 + (2R + C − 2 = 10) = 14, last out 14 + 7 → 22 cycles
#   p = 4, wave:   install 1: rows at 1 and 1 + (1 + 6 = 7) = 8, last out 8 + 7 → 16 cycles
#   p = 4, global: rows at 1 and 1 + max(1, 1) = 2, last out 2 + 7 → 10 cycles
#   p = 2, global: rows at 2 and 2 + 2 = 4, last out 4 + 7 → 12 cycles
@pytest.mark.parametrize("p,swap,cycles", [(1, "wave", 22), (4, "wave", 16), (4, "global", 10),
                                           (2, "global", 12)])
def test_batch1_ws_tiles_by_hand(p, swap, cycles):
    chip = small_chip(4, 4, load_rows=p, swap=swap)
    out, pb, rates, split = one_array_run(chip, 1, 4, 8, "ws", 1, 4, 8, dtype="int8")
    assert out[E.O_CYCLES] == cycles
    assert MP.compute_cycles(chip, pb, MP.Blocks(1, 4, 8, 0), rates) == cycles
    wave = int(swap == "wave")
    assert T.ws_sequence_cycles(4, 4, [1, 1], p, wave) == cycles
    loads, rows = T.ws_schedule(4, 4, [1, 1], load_rows_per_cycle=p, wave=wave)
    assert T.ws_output_cycles(4, 4, loads, rows, p, wave)[-1][-1] + 1 == cycles


@pytest.mark.parametrize("R,C", [(1, 1), (4, 4), (8, 3), (16, 32), (320, 320)])
def test_period_and_isolated_tile_closed_forms(R, C):
    for p in sorted({1, 2, 3, 8, R}):
        if p > R:
            continue
        inst = -(-R // p)
        assert T.ws_install_cycles(R, p) == inst
        assert T.ws_isolated_cycles(R, C, 5, p) == inst + 5 + R + C - 1
        for m in (1, 2, 7, 40, 700):
            assert T.ws_period(R, C, m, p, 1) == max(m, inst + R + C - 2)
            assert T.ws_period(R, C, m, p, 0) == max(m, inst)
    # the defaults are the systolic rules
    for m in (1, 9, 1000):
        assert T.ws_period(R, C, m) == T.ws_period(R, C, m, 1, 1) == max(m, 2 * R + C - 2)
    assert T.ws_isolated_cycles(R, C, 3) == 2 * R + C + 3 - 1


def test_groq_plane_installs_in_40_cycles():
    """groq-lpu: 8 rows per cycle and a global swap, so a 320×320 plane streaming one token's
    row per tile takes 40 cycles a tile instead of 2R + C − 2 = 958."""
    arr = load_chip("groq-lpu").core.array
    assert (arr.weight_load_rows_per_cycle, arr.weight_swap) == (8, "global")
    assert T.ws_period(320, 320, 1, 8, 0) == 40
    assert T.ws_period(320, 320, 1) == 958


def test_the_contract_checks_the_install_rules():
    # a row before the install is over, and a load before the previous tile's swap
    with pytest.raises(ValueError, match="before its weights are loaded"):
        T.ws_output_cycles(4, 4, [0], [[1]], 2, 0)
    assert T.ws_output_cycles(4, 4, [0], [[2]], 2, 0) == [[9]]
    with pytest.raises(ValueError, match="before the previous tile's swap wave left the array"):
        T.ws_output_cycles(4, 4, [0, 7], [[4], [11]], 1, 1)
    with pytest.raises(ValueError, match="before the previous tile's weights were swapped in"):
        T.ws_output_cycles(4, 4, [0, 3], [[4], [8]], 1, 0)
    # with a global swap the same load may start as the previous tile's first row enters
    assert T.ws_output_cycles(4, 4, [0, 4], [[4], [8]], 1, 0)[-1] == [15]
    with pytest.raises(ValueError, match="load_rows_per_cycle"):
        T.ws_schedule(4, 4, [1], load_rows_per_cycle=0)
    with pytest.raises(ValueError, match="wave"):
        T.ws_schedule(4, 4, [1], wave=2)


def test_chip_fields_are_validated_with_their_names():
    from diptych.arch.chip import SystolicArray
    from diptych.arch.schema import ConfigError, build, to_dict
    arr = load_chip("tpu-v4").core.array
    assert (arr.weight_load_rows_per_cycle, arr.weight_swap) == (1, "wave")  # the default
    d = to_dict(arr)
    assert build(SystolicArray, d) == arr
    for key, value in (("weight_load_rows_per_cycle", arr.rows + 1),
                       ("weight_load_rows_per_cycle", 0), ("weight_swap", "shift")):
        with pytest.raises(ConfigError, match=f"chip.toml: core.array.{key}"):
            build(SystolicArray, {**d, key: value}, source="chip.toml", path="core.array")
