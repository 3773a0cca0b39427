"""sim/jit.py's faster Numba flag comparisons answer as Numba's own (compile time only).

Reference: Numba's ``TargetConfig`` semantics restated here from its option properties
(``values()`` is every option read through its property; ``__hash__`` hashes the sorted
values() keys; ``__eq__`` compares values()) on random flag settings."""

from __future__ import annotations

import random

import pytest

numba = pytest.importorskip("numba")

import diptych.sim.jit  # noqa: E402,F401  (installs the patch)
from numba.core.compiler import Flags  # noqa: E402


def _ref_values(f):
    return {k: getattr(f, k) for k in type(f).options}


def _random_flags(rng):
    f = Flags()
    for name, opt in Flags.options.items():
        if rng.random() < 0.3 and opt.type in (bool, int):
            # set an option, sometimes to its default (set but equal: a and b may differ in
            # which options are set yet have the same values)
            setattr(f, name, opt.default if rng.random() < 0.5 else not opt.default)
    return f


def test_patched_flags_match_numba_semantics():
    assert getattr(Flags, "_diptych_fast_values", False)
    rng = random.Random(7)
    flags = [_random_flags(rng) for _ in range(60)] + [Flags(), Flags()]
    for a in flags:
        assert a.values() == _ref_values(a)
        assert hash(a) == hash(tuple(sorted(_ref_values(a))))
    eq = 0
    for a in flags:
        for b in flags:
            assert (a == b) == (_ref_values(a) == _ref_values(b))
            eq += a == b
    assert eq > len(flags)     # some distinct objects compare equal (the shortcut is exercised)
    assert (Flags() == 3) is False
