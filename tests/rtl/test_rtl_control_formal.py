"""Formal proof (k-induction, Yosys + Z3 from PyPI) that the array's output timing is the
contract's for every legal input sequence (issue 26 item 5; tests/rtl/rtl_control_formal.py),
and that the proof fails on control mutants that move an output."""

import pytest

from rtl_control_formal import check, tools_missing
from rtl_mutants import CONTROL_MUTANTS, mutated_module

pytestmark = pytest.mark.skipif(tools_missing() is not None,
                                reason=f"{tools_missing()} (the test extra has them)")


@pytest.mark.parametrize("dataflow", ("os", "ws"))
def test_output_timing_is_proven_2x3(dataflow):
    r = check(dataflow, 2, 3, depth=10)
    assert r.status == "PASS", r.log[-3000:]
    assert "successful proof by k-induction" in r.log


@pytest.mark.slow
@pytest.mark.parametrize("dataflow", ("os", "ws"))
@pytest.mark.parametrize("rows, cols", ((3, 3),))
def test_output_timing_is_proven(rows, cols, dataflow):
    """3×3 in the slow tier; 4×4 (≈ 70 s for OS) by ``python tests/rtl/rtl_control_formal.py``,
    which proves 2×2, 3×3 and 4×4 in both dataflows (docs/rtl.md), to keep CI's budget."""
    r = check(dataflow, rows, cols, depth=2 * rows + cols)
    assert r.status == "PASS", r.log[-3000:]
    assert "successful proof by k-induction" in r.log


@pytest.mark.parametrize("name", ("os-drain-starts-a-cycle-late", "ws-out-valid-from-column-0"))
def test_the_proof_fails_on_a_timing_mutant(name):
    m = next(m for m in CONTROL_MUTANTS if m.name == name)
    rows, cols, _, dataflow = m.config
    r = check(dataflow, rows, cols, depth=10, mode="bmc",
              array_cls=mutated_module(m).SystolicArray)
    assert r.status == "FAIL", r.log[-3000:]
    assert "Assert failed" in r.log
