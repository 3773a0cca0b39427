"""Mutation test: deliberately broken PEs, adders and arrays (amaranth.sim, no Verilator),
each of which the bench's scoreboard must reject on its standard random plans."""

import pytest

from rtl_mutants import MUTANTS, applied, caught, mutated_module


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_scoreboard_rejects_the_mutant(mutant):
    """One standard plan of the mutant's kind is enough for each: random (seed 1, 8 tiles; the
    audit in rtl_mutants.py checks seeds 1-6 one at a time) or the special-value plan."""
    errors = caught(mutant, seeds=(1,))
    assert errors, f"{mutant.name} ({mutant.fault}) passed the bench"


def test_the_special_values_are_what_catches_the_bf16_signed_zero():
    """Issue 26: the fused PE adding +0 instead of −0 in BF16 mode passes the standard random
    plan (a WS partial sum of −0 meeting only −0 products is too rare to draw); the special-value
    plan rejects it."""
    m = next(m for m in MUTANTS if m.name == "fused-bf16-adds-plus-zero")
    assert caught(m, seeds=(1,), plan="random") == []
    assert caught(m, seeds=(1,), plan="special") != []


def test_random_bubble_data_is_what_catches_accumulate_while_invalid():
    """With zeros on the data ports during bubbles an INT8 PE that accumulates while valid is
    low adds 0·0 and passes; the bench's random bubble data exposes it."""
    m = next(m for m in MUTANTS if m.name == "os-acc-while-invalid")
    assert caught(m, seeds=(1,), bubble_data="zero") == []
    assert caught(m, seeds=(1,)) != []


def test_mutations_are_undone_and_sites_exist():
    from diptych.rtl import pe
    before = pe.Fp32Adder
    with applied(next(m for m in MUTANTS if m.module.endswith(".fp"))):
        assert pe.Fp32Adder is not before
    assert pe.Fp32Adder is before
    for m in MUTANTS:
        mutated_module(m)          # raises if a mutation site no longer exists
