"""The fast paths of issue 27's `run` Python round against their slow references: the block
grid without ``np.unique`` (sim/limits.py), the tensor-parallel degrees tried on the heads'
divisors only (workloads/lower.py) and the NoC report memoised per chip (arch/noc.py)."""

from __future__ import annotations

import numpy as np
import pytest

from diptych.arch import load_chip, preset_names
from diptych.arch.noc import noc_report, noc_report_ref
from diptych.sim.limits import _grid, _grid_ref
from diptych.workloads.lower import valid_tp_degrees, valid_tp_degrees_ref
from diptych.workloads.registry import builtin_names, load_model


@pytest.mark.parametrize("extent", [1, 2, 3, 5, 7, 8, 100, 127, 128, 129, 4095, 16385,
                                    2**20 + 3, 10**9])
def test_grid_equals_unique_reference(extent):
    fast, ref = _grid(extent), _grid_ref(extent)
    assert fast.dtype == ref.dtype and fast.shape == ref.shape
    assert np.array_equal(fast, ref)
    assert _grid(extent) is fast and not fast.flags.writeable    # memoised, read-only


def test_valid_tp_degrees_equal_reference_on_every_model():
    for name in builtin_names():
        m = load_model(name)
        for limit in (1, 7, 64, 1024):
            assert valid_tp_degrees(m, limit) == valid_tp_degrees_ref(m, limit), (name, limit)


def test_noc_report_memo_equals_fresh_on_every_preset():
    seen = 0
    for name in preset_names():
        chip = load_chip(name)
        fresh = noc_report_ref(chip)
        assert noc_report(chip) == fresh and noc_report(chip) == fresh, name
        seen += fresh is not None
    assert seen > 0                       # at least one preset has a [noc] table
